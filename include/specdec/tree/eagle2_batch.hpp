// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The EAGLE-2 / EAGLE-3 / Jakiro dynamic tree build with every buffer in the backend's memory:
/// `eagle2_batch_builder`, the device-resident form of `eagle2_tree_builder` (eagle2.hpp). The top-k
/// of each draft forward's rows is a backend primitive (one launch on CUDA); the bookkeeping that
/// follows (cumulative scores, the next frontier, the draft-side mask, the final reranking and the
/// tree) is a team job with one team per request (backend/detail/team.hpp): on CUDA one launch, no
/// download, no synchronisation under deferred faults. The finished trees land in caller buffers in the
/// layout `sampling::tree_batch` reads, so drafting and verification never leave the device.
///
/// Same candidates, frontiers, masks and trees as eagle2_tree_builder with `tree_score::log_probability`
/// (EAGLE-2/3, Jakiro), bit for bit (tested on every backend). SGLang's probability products are not
/// offered here: their `exp` would be the device's, whose last bit can differ from the host's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include <specdec/backend/concept.hpp>
#include <specdec/backend/detail/team.hpp>
#include <specdec/config.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>
#include <specdec/core/view_checks.hpp>
#include <specdec/tree/detail/faults.hpp>
#include <specdec/tree/eagle2.hpp>

namespace specdec {

/// Where eagle2_batch_builder::finish writes the trees, views in the backend's memory space, one row
/// per request, T = total_tokens columns: node 0 is the root (its committed token, parent -1), nodes
/// 1 .. T - 1 the selected candidates in ascending flat index (eagle2_tree_builder's order). `tokens`
/// and `parents` are required (they are `sampling::tree_batch::tokens` / `parents`); the rest optional.
template <class Space>
struct dynamic_tree_outputs {
  matrix_view<std::int32_t, Space> tokens = {};    ///< `[batch x T]` target token ids
  matrix_view<std::int32_t, Space> parents = {};   ///< `[batch x T]`, -1 at node 0
  matrix_view<std::int32_t, Space> depths = {};    ///< `[batch x T]`, 0 at node 0 (EAGLE's position_ids)
  matrix_view<float, Space> scores = {};           ///< `[batch x T]` cumulative log-probabilities, 0 at node 0
  matrix_view<std::int32_t, Space> selected = {};  ///< `[batch x (T - 1)]` flat candidate indices
};

namespace detail::eagle2_jobs {

/// The builder's device state, one row per request (views into buffers the builder owns).
template <class Space>
struct state {
  matrix_view<float, Space> scores;          // [batch x C] cumulative score per flat candidate
  matrix_view<std::int32_t, Space> tokens;   // [batch x C] target id per candidate
  matrix_view<std::int32_t, Space> parents;  // [batch x C] parent flat index, -1 = root
  matrix_view<std::int32_t, Space> frontier;     // [batch x k]
  matrix_view<std::int32_t, Space> parent_slot;  // [batch x k]
  matrix_view<std::int32_t, Space> input_ids;    // [batch x k]
  vector_view<std::int32_t, Space> roots;        // [batch]
  vector_view<const std::int32_t, Space> d2t;    // [V'] or empty
  index_t top_k;
  index_t target_vocab;  // 0: unchecked
};

enum arg : int { arg_root_tokens, arg_d2t, arg_logits, arg_tree };

/// The target id of draft token t (through d2t), or a fault.
template <class Space>
SPECDEC_HOST_DEVICE inline team_fault map_token(const state<Space>& s, std::int32_t t, index_t r, std::int32_t& out) {
  const index_t mapped = s.d2t.empty() ? index_t{t} : index_t{t} + s.d2t(t);
  if (s.target_vocab > 0 && mapped >= s.target_vocab)
    return make_team_fault(tree_fault::mapped_token, s.d2t.empty() ? arg_logits : arg_d2t, r, t, double(mapped), s.target_vocab);
  out = static_cast<std::int32_t>(mapped);
  return {};
}

/// begin(): the root's top-k become candidates 0 .. k - 1 and the first frontier.
template <class Space>
struct begin_job {
  state<Space> s;
  matrix_view<const float, Space> values;          // [batch x k] log-probabilities
  matrix_view<const std::int32_t, Space> indices;  // [batch x k] draft ids
  vector_view<const std::int32_t, Space> root_tokens;
  matrix_view<std::uint8_t, Space> mask;           // [batch k x k]
  const char* where;
  const char* names[team_job_names];
  static void describe(const char* where, const char* name, const specdec::detail::team_fault& f) {
    specdec::detail::describe_tree_fault(where, name, f);
  }
  std::size_t scratch_bytes() const { return 0; }
  template <class Team>
  SPECDEC_HOST_DEVICE team_fault operator()(Team& team, index_t b, std::byte*) const {
    const index_t k = s.top_k;
    const std::int32_t root = root_tokens(b);
    if (root < 0 || (s.target_vocab > 0 && root >= s.target_vocab))
      return make_team_fault(tree_fault::token_entry, arg_root_tokens, b, 0, root,
                             s.target_vocab > 0 ? s.target_vocab : index_t{INT32_MAX});
    for (index_t c = 0; c < k; ++c) {  // every thread maps (the same verdict everywhere); rank 0 writes
      std::int32_t token = 0;
      if (const team_fault f = map_token(s, indices(b, c), b, token); f.code != 0) return f;
      if (team.rank() != 0) continue;
      s.scores(b, c) = values(b, c);
      s.tokens(b, c) = token;
      s.parents(b, c) = -1;
      s.frontier(b, c) = static_cast<std::int32_t>(c);
      s.parent_slot(b, c) = -1;
      s.input_ids(b, c) = token;
    }
    for (index_t e = team.rank(); e < k * k; e += team.size()) mask(b * k + e / k, e % k) = e / k == e % k ? 1 : 0;
    if (team.rank() == 0) s.roots(b) = root;
    return {};
  }
};

/// Whether grid entry g ranks before h: larger score first, ties to the lower index (best_indices).
SPECDEC_HOST_DEVICE inline bool ranks_before(float sg, index_t g, float sh, index_t h) {
  return sg > sh || (sg == sh && g < h);
}

/// One expansion: appends a k x k grid of candidates per request (row r under frontier slot r, its
/// children the top-k of row `b k + r`), then the next frontier is the grid's top k and the mask grows.
template <class Space>
struct grow_job {
  state<Space> s;
  matrix_view<const float, Space> values;          // [batch k x k]
  matrix_view<const std::int32_t, Space> indices;  // [batch k x k]
  matrix_view<const std::uint8_t, Space> old_mask;  // [batch k x old_cols]
  matrix_view<std::uint8_t, Space> new_mask;        // [batch k x (old_cols + k)]
  index_t base;  // flat index of the grid's first candidate (k + steps k^2)
  const char* where;
  const char* names[team_job_names];
  static void describe(const char* where, const char* name, const specdec::detail::team_fault& f) {
    specdec::detail::describe_tree_fault(where, name, f);
  }
  std::size_t scratch_bytes() const {
    return (sizeof(float) + sizeof(std::int32_t)) * static_cast<std::size_t>(s.top_k * s.top_k) +
           sizeof(std::int32_t) * static_cast<std::size_t>(s.top_k);
  }
  template <class Team>
  SPECDEC_HOST_DEVICE team_fault operator()(Team& team, index_t b, std::byte* scratch) const {
    const index_t k = s.top_k;
    float* grid = reinterpret_cast<float*>(scratch);
    std::int32_t* unmapped = reinterpret_cast<std::int32_t*>(grid + k * k);  // per candidate: its mapping failed
    std::int32_t* order = unmapped + k * k;
    // Each thread maps its own candidates and flags failures; then every thread reports the first
    // flagged one (the same fault everywhere). Every thread mapping every candidate would be a chain
    // of k^2 dependent reads.
    team.sync();  // earlier readers of the scratch are done
    for (index_t g = team.rank(); g < k * k; g += team.size()) {
      std::int32_t token = 0;
      const bool mapped = map_token(s, indices(b * k + g / k, g % k), b, token).code == 0;
      unmapped[g] = mapped ? 0 : 1;
      if (!mapped) continue;
      const std::int32_t parent = s.frontier(b, g / k);
      const float score = values(b * k + g / k, g % k) + s.scores(b, parent);
      grid[g] = score;
      s.scores(b, base + g) = score;
      s.tokens(b, base + g) = token;
      s.parents(b, base + g) = parent;
    }
    team.sync();
    for (index_t g = 0; g < k * k; ++g) {
      if (unmapped[g] == 0) continue;
      std::int32_t token = 0;
      return map_token(s, indices(b * k + g / k, g % k), b, token);
    }
    for (index_t g = team.rank(); g < k * k; g += team.size()) {
      index_t rank = 0;
      for (index_t h = 0; h < k * k && rank < k; ++h) rank += ranks_before(grid[h], h, grid[g], g) ? 1 : 0;
      if (rank < k) order[rank] = static_cast<std::int32_t>(g);
    }
    team.sync();  // the old frontier has been read; the new one replaces it
    const index_t old_cols = old_mask.cols();
    for (index_t slot = team.rank(); slot < k; slot += team.size()) {
      const std::int32_t g = order[slot];
      s.frontier(b, slot) = static_cast<std::int32_t>(base + g);
      s.parent_slot(b, slot) = g / static_cast<std::int32_t>(k);
      s.input_ids(b, slot) = s.tokens(b, base + g);
    }
    for (index_t e = team.rank(); e < k * (old_cols + k); e += team.size()) {
      const index_t slot = e / (old_cols + k), c = e % (old_cols + k);
      const index_t from = order[slot] / k;
      new_mask(b * k + slot, c) = c < old_cols ? old_mask(b * k + from, c) : (c - old_cols == slot ? 1 : 0);
    }
    return {};
  }
};

/// finish(): the T - 1 best candidates (ties to the lower flat index) in ascending flat index, as a tree.
template <class Space>
struct finish_job {
  state<Space> s;
  dynamic_tree_outputs<Space> out;
  index_t candidates;  // k + depth k^2
  index_t keep;        // T - 1
  const char* where;
  const char* names[team_job_names];
  static void describe(const char* where, const char* name, const specdec::detail::team_fault& f) {
    specdec::detail::describe_tree_fault(where, name, f);
  }
  std::size_t scratch_bytes() const {
    return (sizeof(std::int32_t) + sizeof(float)) * static_cast<std::size_t>(candidates) +
           2 * sizeof(std::int32_t) * static_cast<std::size_t>(keep + 1);
  }
  template <class Team>
  SPECDEC_HOST_DEVICE team_fault operator()(Team& team, index_t b, std::byte* scratch) const {
    std::int32_t* node_of = reinterpret_cast<std::int32_t*>(scratch);  // node of each candidate, -1 unselected
    float* score = reinterpret_cast<float*>(node_of + candidates);     // the scores, read by every thread
    team.sync();  // earlier readers of the scratch are done
    for (index_t f = team.rank(); f < candidates; f += team.size()) score[f] = s.scores(b, f);
    team.sync();
    for (index_t f = team.rank(); f < candidates; f += team.size()) {
      index_t rank = 0;
      const float sf = score[f];
      for (index_t h = 0; h < candidates; ++h) rank += ranks_before(score[h], h, sf, f) ? 1 : 0;
      node_of[f] = rank < keep ? 1 : -1;
    }
    team.sync();
    if (team.rank() == 0) {
      std::int32_t next = 1;
      for (index_t f = 0; f < candidates; ++f) node_of[f] = node_of[f] > 0 ? next++ : -1;
    }
    team.sync();
    // A selected candidate's parent is selected unless scores rise along a path (NaN or positive
    // log-probabilities). Each thread checks its candidates and flags them (in `score`, no longer
    // needed); every thread then reports the first flagged one, so all return the same fault.
    std::int32_t* orphan = reinterpret_cast<std::int32_t*>(score);
    team.sync();  // the scores have been read
    for (index_t f = team.rank(); f < candidates; f += team.size()) {
      const std::int32_t pf = s.parents(b, f);
      orphan[f] = node_of[f] > 0 && pf >= 0 && node_of[pf] < 0 ? 1 : 0;
    }
    team.sync();
    for (index_t f = 0; f < candidates; ++f)
      if (orphan[f] != 0) return make_team_fault(tree_fault::unselected_parent, arg_tree, b, f, s.parents(b, f));
    std::int32_t* node_parent = reinterpret_cast<std::int32_t*>(score + candidates);  // [keep + 1]
    std::int32_t* depth = node_parent + keep + 1;                                     // [keep + 1]
    for (index_t f = team.rank(); f < candidates; f += team.size()) {
      const std::int32_t node = node_of[f];
      if (node < 0) continue;
      const std::int32_t pf = s.parents(b, f);
      node_parent[node] = pf < 0 ? 0 : node_of[pf];
      out.tokens(b, node) = s.tokens(b, f);
      out.parents(b, node) = node_parent[node];
      if (!out.scores.empty()) out.scores(b, node) = s.scores(b, f);
      if (!out.selected.empty()) out.selected(b, node - 1) = static_cast<std::int32_t>(f);
    }
    if (team.rank() == 0) {
      out.tokens(b, 0) = s.roots(b);
      out.parents(b, 0) = -1;
      if (!out.scores.empty()) out.scores(b, 0) = 0.0f;
    }
    if (!out.depths.empty()) {
      // Depths by rank 0 in scratch (parents precede children), then written by every thread: a chain
      // of dependent reads of the outputs would wait on memory at each node.
      team.sync();  // node_parent written
      if (team.rank() == 0) {
        depth[0] = 0;
        for (index_t n = 1; n <= keep; ++n) depth[n] = depth[node_parent[n]] + 1;
      }
      team.sync();
      for (index_t n = team.rank(); n <= keep; n += team.size()) out.depths(b, n) = depth[n];
    }
    return {};
  }
};

}  // namespace detail::eagle2_jobs

/// EAGLE-2 dynamic trees for a batch with every buffer in the backend's memory (the file comment).
/// The protocol is eagle2_tree_builder's: begin() with the root logits, one expand() (or Jakiro's
/// expand_dual() for the last two) per draft forward, finish() into the caller's buffers. Each call
/// returns the frontier for the next draft forward as views into buffers the builder owns, valid until
/// the next call: the engine embeds `input_ids`, continues from `parent_slot` (the previous forward's
/// hidden-state row of each frontier node) and attends with `draft_mask`.
template <team_backend B>
class eagle2_batch_builder {
 public:
  using space = typename B::memory_space;

  /// The frontier after begin() / expand(), views in the backend's memory:
  /// `input_ids`, `frontier`, `parent_slot` `[batch x k]`; `draft_mask` `[batch k x k (step + 1)]` 0/1
  /// (request b's rows are b k .. b k + k - 1: eagle2.hpp's draft_step::draft_mask, packed).
  struct step_views {
    index_t step = 0;
    matrix_view<const std::int32_t, space> input_ids = {};
    matrix_view<const std::int32_t, space> frontier = {};
    matrix_view<const std::int32_t, space> parent_slot = {};
    matrix_view<const std::uint8_t, space> draft_mask = {};
  };

  /// \throws invalid_argument as eagle2_tree_builder's constructor, and for tree_score::probability.
  eagle2_batch_builder(B& b, dynamic_tree_config config, index_t batch = 1)
      : backend_(&b), cfg_(validated(std::move(config), batch)), batch_(batch) {
    const index_t k = cfg_.top_k;
    candidates_ = k + cfg_.depth * k * k;
    scores_ = b.template allocate<float>(batch * candidates_);
    tokens_ = b.template allocate<std::int32_t>(batch * candidates_);
    parents_ = b.template allocate<std::int32_t>(batch * candidates_);
    frontier_ = b.template allocate<std::int32_t>(batch * k);
    parent_slot_ = b.template allocate<std::int32_t>(batch * k);
    input_ids_ = b.template allocate<std::int32_t>(batch * k);
    roots_ = b.template allocate<std::int32_t>(batch);
    for (auto& m : masks_) m = b.template allocate<std::uint8_t>(batch * k * k * (cfg_.depth + 1));
    values_ = b.template allocate<float>(batch * k * k);
    indices_ = b.template allocate<std::int32_t>(batch * k * k);
    right_values_ = b.template allocate<float>(batch * k * k);
    right_indices_ = b.template allocate<std::int32_t>(batch * k * k);
    lse_ = b.template allocate<float>(batch * k);
    if (!cfg_.d2t.empty()) d2t_ = b.upload(std::span<const std::int32_t>(cfg_.d2t));
  }

  const dynamic_tree_config& config() const noexcept { return cfg_; }
  index_t steps_done() const noexcept { return steps_; }
  bool expansions_complete() const noexcept { return began_ && steps_ == cfg_.depth; }

  /// Starts a build. \param root_logits backend `[batch x V']`; \param root_tokens backend `[batch]`,
  /// each request's committed token; \param target_vocab checks root tokens and mapped draft ids when > 0.
  /// \throws invalid_argument on shapes (k > V', d2t not V' long) and, from the backend or the team that
  /// finds it, bad logits, a root token or mapped id outside [0, target_vocab).
  step_views begin(matrix_view<const float, space> root_logits, vector_view<const std::int32_t, space> root_tokens,
                   index_t target_vocab = 0) {
    constexpr const char* where = "specdec::eagle2_batch_builder::begin";
    detail::check_dynamic_begin(where, cfg_, batch_, root_logits.rows(), root_logits.cols(), root_tokens.rows(), target_vocab);
    detail::check_view(where, "root_tokens", root_tokens, detail::nonzero_stride);
    vocab_ = root_logits.cols();
    target_vocab_ = target_vocab;
    const index_t k = cfg_.top_k;
    run_topk(root_logits, values_, indices_);
    detail::eagle2_jobs::begin_job<space> job{state(), matrix_view<const float, space>(values_.view().data(), batch_, k),
                                              matrix_view<const std::int32_t, space>(indices_.view().data(), batch_, k),
                                              root_tokens, mask_of(0, 0), where, {}};
    name(job.names);
    backend_->run_teams(batch_, job);
    began_ = true;
    steps_ = 0;
    return current();
  }

  /// One expansion from the frontier's draft logits `[batch k x V']` (row b k + r: slot r of request b).
  /// \throws invalid_argument before begin(), after `depth` expansions, on a shape mismatch, bad logits
  /// or a mapped id outside [0, target_vocab).
  step_views expand(matrix_view<const float, space> frontier_logits) {
    constexpr const char* where = "specdec::eagle2_batch_builder::expand";
    check_expand(where, frontier_logits, steps_ < cfg_.depth);
    run_topk(frontier_logits, values_, indices_);
    grow(where, values_, indices_);
    return current();
  }

  /// Jakiro's dual-head forward for the last two expansions (eagle2_tree_builder::expand_dual).
  step_views expand_dual(matrix_view<const float, space> left_logits, matrix_view<const float, space> right_logits) {
    constexpr const char* where = "specdec::eagle2_batch_builder::expand_dual";
    check_expand(where, left_logits, steps_ + 2 == cfg_.depth);
    check_expand(where, right_logits, true);
    run_topk(right_logits, right_values_, right_indices_);
    run_topk(left_logits, values_, indices_);
    grow(where, values_, indices_);
    grow(where, right_values_, right_indices_);
    return current();
  }

  /// Reranks every request's candidates and writes its tree (dynamic_tree_outputs).
  /// \throws invalid_argument before all expansions, on output shapes, and when a candidate would be
  /// selected without its parent (scores rising along a path).
  void finish(const dynamic_tree_outputs<space>& out) {
    constexpr const char* where = "specdec::eagle2_batch_builder::finish";
    SPECDEC_EXPECTS(began_, where, "called before begin()");
    SPECDEC_EXPECTS(steps_ == cfg_.depth, where, steps_, " expansions done; expected depth = ", cfg_.depth);
    const index_t t = cfg_.total_tokens;
    const auto check = [&](const auto& m, const char* name, index_t cols, bool required) {
      detail::check_view(where, name, m, detail::indexed_output);
      SPECDEC_EXPECTS((!required && m.empty()) || (m.rows() == batch_ && m.cols() == cols), where, name, " is ", m.rows(),
                      " x ", m.cols(), "; expected ", batch_, " x ", cols, required ? "" : " or none");
    };
    check(out.tokens, "out.tokens", t, true);
    check(out.parents, "out.parents", t, true);
    check(out.depths, "out.depths", t, false);
    check(out.scores, "out.scores", t, false);
    check(out.selected, "out.selected", t - 1, false);
    // Outputs apart from each other: the job writes each as it reads the state, so a parent written
    // over a token would be read back as one.
    detail::check_arguments(where, detail::output("out.tokens", out.tokens), detail::output("out.parents", out.parents),
                            detail::output("out.depths", out.depths), detail::output("out.scores", out.scores),
                            detail::output("out.selected", out.selected));
    detail::eagle2_jobs::finish_job<space> job{state(), out, candidates_, t - 1, where, {}};
    name(job.names);
    backend_->run_teams(batch_, job);
  }

 private:
  static dynamic_tree_config validated(dynamic_tree_config cfg, index_t batch) {
    SPECDEC_EXPECTS(cfg.score == tree_score::log_probability, "specdec::eagle2_batch_builder",
                    "tree_score::probability is not offered on the device-resident builder (its exp would differ from "
                    "the host's in the last bit); use eagle2_tree_builder");
    eagle2_tree_builder<B>::check_config(cfg, batch);
    return cfg;
  }

  detail::eagle2_jobs::state<space> state() {
    const index_t k = cfg_.top_k;
    return {scores_.matrix(batch_, candidates_),
            tokens_.matrix(batch_, candidates_),
            parents_.matrix(batch_, candidates_),
            frontier_.matrix(batch_, k),
            parent_slot_.matrix(batch_, k),
            input_ids_.matrix(batch_, k),
            roots_.view(),
            cfg_.d2t.empty() ? vector_view<const std::int32_t, space>() : vector_view<const std::int32_t, space>(d2t_.view()),
            k,
            target_vocab_};
  }
  void name(const char* (&names)[detail::team_job_names]) const {
    for (const char*& n : names) n = "";
    names[detail::eagle2_jobs::arg_root_tokens] = "root_tokens";
    names[detail::eagle2_jobs::arg_d2t] = "d2t";
    names[detail::eagle2_jobs::arg_logits] = "";
    names[detail::eagle2_jobs::arg_tree] = "candidate parents";
  }
  /// The mask of `step` (k (step + 1) columns) in ping-pong buffer `which`.
  matrix_view<std::uint8_t, space> mask_of(int which, index_t step) {
    const index_t k = cfg_.top_k;
    return {masks_[which].view().data(), batch_ * k, k * (step + 1)};
  }
  void run_topk(matrix_view<const float, space> logits, typename B::template buffer<float>& values,
                typename B::template buffer<std::int32_t>& indices) {
    const index_t k = cfg_.top_k, rows = logits.rows();
    detail::check_k("specdec::eagle2_batch_builder", k, logits.cols());
    backend_->row_topk_logsumexp(logits, k, 1.0f, matrix_view<float, space>(values.view().data(), rows, k),
                                 matrix_view<std::int32_t, space>(indices.view().data(), rows, k),
                                 vector_view<float, space>(lse_.view().data(), rows));
  }
  void grow(const char* where, typename B::template buffer<float>& values, typename B::template buffer<std::int32_t>& indices) {
    const index_t k = cfg_.top_k;
    const int from = static_cast<int>(steps_ % 2);
    detail::eagle2_jobs::grow_job<space> job{state(),
                                             matrix_view<const float, space>(values.view().data(), batch_ * k, k),
                                             matrix_view<const std::int32_t, space>(indices.view().data(), batch_ * k, k),
                                             mask_of(from, steps_),
                                             mask_of(1 - from, steps_ + 1),
                                             k + steps_ * k * k,
                                             where,
                                             {}};
    name(job.names);
    backend_->run_teams(batch_, job);
    ++steps_;
  }
  void check_expand(const char* where, matrix_view<const float, space> logits, bool step_left) const {
    detail::check_dynamic_expand(where, began_, steps_, cfg_.depth, step_left, batch_, cfg_.top_k, vocab_, logits.rows(),
                                 logits.cols());
  }
  step_views current() {
    const index_t k = cfg_.top_k;
    return {steps_, input_ids_.matrix(batch_, k), frontier_.matrix(batch_, k), parent_slot_.matrix(batch_, k),
            mask_of(static_cast<int>(steps_ % 2), steps_)};
  }

  B* backend_;
  dynamic_tree_config cfg_;
  index_t batch_;
  index_t candidates_ = 0;
  index_t vocab_ = 0;
  index_t target_vocab_ = 0;
  index_t steps_ = 0;
  bool began_ = false;
  typename B::template buffer<float> scores_, values_, right_values_, lse_;
  typename B::template buffer<std::int32_t> tokens_, parents_, frontier_, parent_slot_, input_ids_, roots_, indices_,
      right_indices_, d2t_;
  typename B::template buffer<std::uint8_t> masks_[2];
};

}  // namespace specdec
