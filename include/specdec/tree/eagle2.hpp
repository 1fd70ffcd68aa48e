// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief EAGLE-2 / EAGLE-3 dynamic draft trees as an incremental API, in EAGLE's exact node order,
/// for a batch of requests; the same builder gives SGLang's form (probability products) and Jakiro's
/// dual-head last step.
///
/// The engine calls begin() with the root logits, runs its draft model on the frontier tokens it gets
/// back, calls expand() with the frontier's logits, and repeats `depth` times; finish() reranks every
/// candidate and returns the tree with `total_tokens` nodes. Candidates live in EAGLE's flat layout:
/// index f < k is the root child of rank f; index `k + i k^2 + r k + c` is child rank c of the frontier
/// node in slot r at expansion i. The tree's nodes are the selected flat indices in ascending order
/// (level order; within a level by the parent's frontier slot, then child rank), which is the order of
/// EAGLE's `topK_genrate` and of SGLang's `organize_draft_results`.
///
/// The bookkeeping (cumulative scores, frontiers, masks, the final reranking) is the team jobs of
/// tree/detail/eagle2_jobs.hpp, run here on one thread over host storage and by eagle2_batch_builder
/// (eagle2_batch.hpp) on its backend.
///
/// Ties: every top-k ranks equal scores by the lower index (row_topk), which also guarantees that a
/// selected node's parent is selected (a child never scores above its parent).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/backend/detail/checks.hpp>
#include <specdec/core/checked.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view_checks.hpp>
#include <specdec/tree/detail/eagle2_jobs.hpp>
#include <specdec/tree/detail/host_topk.hpp>
#include <specdec/tree/tree.hpp>

namespace specdec {

/// How candidate scores combine along a path.
enum class tree_score {
  log_probability,  ///< EAGLE-2/3, Jakiro: parent score + log_softmax(child logits)
  probability,      ///< SGLang: parent score * softmax(child logits)
};

/// Configuration of a dynamic tree build.
/// - `top_k` (k): children per frontier node and frontier width, 1 <= k <= V;
/// - `depth` (d): expansion forwards (EAGLE's `depth`; SGLang's `speculative_num_steps - 1`);
/// - `total_tokens` (T): nodes of the final tree including the root, 1 <= T <= 1 + k + d k^2
///   (T = 1 gives the root alone; EAGLE itself needs T >= 2);
/// - `d2t`: EAGLE-3's offset table for a reduced draft vocabulary: target id = t + d2t[t]; empty = identity.
struct dynamic_tree_config {
  index_t top_k = 10;
  index_t depth = 5;
  index_t total_tokens = 60;
  tree_score score = tree_score::log_probability;
  std::vector<std::int32_t> d2t = {};
};

/// What the engine feeds to its next draft forward, per request (host):
/// - `input_ids` `[batch x k]`: the frontier tokens (target ids; EAGLE-3 feeds the mapped ids too);
/// - `frontier` `[batch x k]`: their flat candidate indices;
/// - `parent_slot` `[batch x k]`: the previous frontier slot each came from (-1 at step 0): the row of
///   the previous forward's hidden states each frontier node continues from (EAGLE's `out_ids`);
/// - `draft_mask` `[batch x k x k (step + 1)]`: the draft-side tree mask among all frontier nodes so far
///   (EAGLE's `tree_mask`: step 0 the identity, then the parent's row followed by the identity);
/// - `attention_mask(prefix_length)`: that mask behind the request's cached draft positions, as the
///   draft forward consumes it; `positions(root_position)`: the frontier's positions (every node of
///   a step sits one past the step before: `root_position + 1 + step`, EAGLE's `len_posi + step`).
struct draft_step {
  index_t step = 0;
  index_t top_k = 0;
  std::vector<std::int32_t> input_ids = {};
  std::vector<std::int32_t> frontier = {};
  std::vector<std::int32_t> parent_slot = {};
  std::vector<std::uint8_t> draft_mask = {};
  index_t mask_cols = 0;

  /// Requests in the step.
  index_t batch() const noexcept { return top_k > 0 ? static_cast<index_t>(input_ids.size()) / top_k : 0; }

  /// Request `request`'s draft attention mask `[k x (prefix_length + mask_cols)]`: row r (frontier
  /// slot r) attends all `prefix_length` cached draft positions (the committed context and the root,
  /// in the engine's layout), then the frontier nodes its draft_mask row allows. `M` is any type
  /// constructible from 0 and 1 (bool, uint8_t, float 0/1), as tree_mask_dense.
  /// \param out host `[k x (prefix_length + mask_cols)]`.
  /// \throws invalid_argument on prefix_length < 0, a request out of range or a shape mismatch.
  template <class M>
  void attention_mask(index_t prefix_length, matrix_view<M> out, index_t request = 0) const {
    constexpr const char* where = "specdec::draft_step::attention_mask";
    check_request(where, request);
    SPECDEC_EXPECTS(prefix_length >= 0, where, "prefix_length = ", prefix_length, "; expected >= 0");
    const index_t cols = detail::checked_add(where, prefix_length, mask_cols, "prefix_length + mask_cols");
    SPECDEC_EXPECTS(out.rows() == top_k && out.cols() == cols, where, "out is ", out.rows(), " x ", out.cols(),
                    "; expected ", top_k, " x ", cols, " (top_k x (prefix_length + mask_cols))");
    detail::check_view(where, "out", out, detail::indexed_output);
    for (index_t r = 0; r < top_k; ++r) {
      for (index_t j = 0; j < prefix_length; ++j) out(r, j) = M(1);
      const std::uint8_t* row = draft_mask.data() + (request * top_k + r) * mask_cols;
      for (index_t j = 0; j < mask_cols; ++j) out(r, prefix_length + j) = row[j] ? M(1) : M(0);
    }
  }
  /// attention_mask as a new host `[k x (prefix_length + mask_cols)]` row-major uint8 buffer.
  /// \throws invalid_argument as the view form, and when the mask would exceed specdec::max_elements.
  std::vector<std::uint8_t> attention_mask(index_t prefix_length, index_t request = 0) const {
    constexpr const char* where = "specdec::draft_step::attention_mask";
    check_request(where, request);
    SPECDEC_EXPECTS(prefix_length >= 0, where, "prefix_length = ", prefix_length, "; expected >= 0");
    const index_t cols = detail::checked_add(where, prefix_length, mask_cols, "prefix_length + mask_cols");
    std::vector<std::uint8_t> out(detail::checked_count(where, {top_k, cols}, "the mask [top_k x (prefix_length + mask_cols)]"));
    attention_mask(prefix_length, matrix_view<std::uint8_t>(out.data(), top_k, cols), request);
    return out;
  }
  /// The same mask as an additive float mask: 0 where attention is allowed, -inf elsewhere.
  template <class F>
  void additive_attention_mask(index_t prefix_length, matrix_view<F> out, index_t request = 0) const {
    attention_mask(prefix_length, out, request);
    for (index_t r = 0; r < out.rows(); ++r)
      for (index_t j = 0; j < out.cols(); ++j) out(r, j) = out(r, j) == F(1) ? F(0) : -std::numeric_limits<F>::infinity();
  }

  /// Positions of the frontier nodes of request `request`, all `root_position + 1 + step` (the root
  /// sits at `root_position` of the draft's sequence). \param out host `[k]`.
  /// \throws invalid_argument on root_position < 0, a request out of range or a length mismatch.
  template <class Int>
  void positions(index_t root_position, vector_view<Int> out, index_t request = 0) const {
    constexpr const char* where = "specdec::draft_step::positions";
    check_request(where, request);
    SPECDEC_EXPECTS(root_position >= 0, where, "root_position = ", root_position, "; expected >= 0");
    SPECDEC_EXPECTS(out.rows() == top_k, where, "out has ", out.rows(), " entries; expected one per frontier slot (", top_k, ")");
    detail::check_view(where, "out", out, detail::indexed_output);
    const auto position = detail::checked_narrow<Int>(
        where, detail::checked_add(where, root_position, step + 1, "root_position + 1 + step"), "the frontier's position");
    for (index_t r = 0; r < top_k; ++r) out(r) = position;
  }
  /// positions as a new host `[k]` int64 buffer.
  std::vector<std::int64_t> positions(index_t root_position, index_t request = 0) const {
    std::vector<std::int64_t> out(static_cast<std::size_t>(top_k));
    positions(root_position, vector_view<std::int64_t>(out.data(), top_k), request);
    return out;
  }

 private:
  void check_request(const char* where, index_t request) const {
    SPECDEC_EXPECTS(request >= 0 && request < batch(), where, "request = ", request, "; expected one of the ", batch(),
                    " requests of the step");
    // The fields are public: a step edited by hand must still describe its own mask.
    const auto mask_size = static_cast<index_t>(draft_mask.size());
    SPECDEC_EXPECTS(top_k >= 1 && mask_cols >= 0 &&
                        (mask_cols == 0 ? mask_size == 0
                                        : mask_size % mask_cols == 0 && mask_size / mask_cols == batch() * top_k),
                    where, "the step's draft_mask has ", draft_mask.size(), " entries; expected batch x top_k x mask_cols = ",
                    batch(), " x ", top_k, " x ", mask_cols);
  }
};

/// The finished selection for one request.
/// - `tree`: root + the T - 1 best candidates in ascending flat index (scores: cumulative);
/// - `selected` `[T - 1]`: their flat indices (EAGLE's `top_scores_index`, SGLang's `top_scores_index`);
/// - `parent_list` `[1 + d k]`, empty when d = 0: SGLang's parent list (`organize_draft_results`): -1
///   for the root group, then the flat index of every frontier node of every expansion (row g of the
///   candidate grid hangs under parent_list[g]). With no expansion SGLang's is `(bs, 0)`: every node is
///   a root child, and build_tree never reads it.
struct dynamic_tree_result {
  draft_tree tree = {};
  std::vector<std::int32_t> selected = {};
  std::vector<std::int32_t> parent_list = {};
};

namespace detail {

/// begin()'s shape checks, shared by eagle2_tree_builder and eagle2_batch_builder.
inline void check_dynamic_begin(const char* where, const dynamic_tree_config& cfg, index_t batch, index_t logits_rows,
                                index_t draft_vocab, index_t root_tokens, index_t target_vocab) {
  SPECDEC_EXPECTS(logits_rows == batch, where, "root_logits has ", logits_rows, " rows; expected one per request (", batch, ")");
  SPECDEC_EXPECTS(root_tokens == batch, where, "root_tokens has ", root_tokens, " entries; expected one per request (", batch, ")");
  SPECDEC_EXPECTS(cfg.d2t.empty() || static_cast<index_t>(cfg.d2t.size()) == draft_vocab, where, "d2t has ", cfg.d2t.size(),
                  " entries; expected one per draft-vocabulary entry (", draft_vocab, ")");
  SPECDEC_EXPECTS(cfg.top_k <= draft_vocab, where, "top_k = ", cfg.top_k, " exceeds the draft vocabulary V' = ", draft_vocab);
  SPECDEC_EXPECTS(target_vocab >= 0 && target_vocab <= std::numeric_limits<std::int32_t>::max(), where, "target_vocab = ",
                  target_vocab, "; expected 0 (unchecked) or a vocabulary of at most 2^31 - 1 tokens");
}

/// An expansion call's checks, shared by both builders: `step_left` says whether the call fits the
/// expansions still to do.
inline void check_dynamic_expand(const char* where, bool began, index_t steps, index_t depth, bool step_left, index_t batch,
                                 index_t top_k, index_t draft_vocab, index_t rows, index_t cols) {
  SPECDEC_EXPECTS(began, where, "called before begin()");
  SPECDEC_EXPECTS(step_left, where, steps, " of ", depth, " expansions are done; this call does not fit");
  SPECDEC_EXPECTS(rows == batch * top_k && cols == draft_vocab, where, "logits is ", rows, " x ", cols, "; expected ",
                  batch * top_k, " x ", draft_vocab, " (batch * top_k frontier rows of the draft vocabulary)");
}

}  // namespace detail

/// Incremental EAGLE-2 tree builder for `batch` requests sharing one configuration.
template <backend B>
class eagle2_tree_builder {
 public:
  using space = typename B::memory_space;

  /// The most requests one builder takes (its per-request bookkeeping is allocated up front).
  static constexpr index_t max_batch = index_t{1} << 20;

  /// \throws invalid_argument for k < 1, depth < 0, T outside [1, 1 + k + d k^2], batch outside
  /// [1, max_batch], a d2t entry mapping outside [0, 2^31 - 1], or a configuration whose candidates
  /// (k + d k^2 per request) or top-k results (batch k^2) exceed the int32 range of flat indices. The
  /// top-k buffers (batch k^2 values and indices) are allocated by the first begin(), once k has been
  /// checked against the vocabulary.
  eagle2_tree_builder(B& b, dynamic_tree_config config, index_t batch = 1)
      : backend_(&b), cfg_(checked(std::move(config), batch)), batch_(batch) {}

  /// The constructor's checks of a configuration for `batch` requests (eagle2_batch_builder shares them).
  static void check_config(const dynamic_tree_config& config, index_t batch) { (void)checked(config, batch); }

  const dynamic_tree_config& config() const noexcept { return cfg_; }
  /// Expansions done so far (0 after begin()).
  index_t steps_done() const noexcept { return steps_; }
  /// Whether every expansion forward has been consumed (finish() may be called).
  bool expansions_complete() const noexcept { return began_ && steps_ == cfg_.depth; }

  /// Starts a build. \param root_logits backend `[batch x V']` (draft vocabulary).
  /// \param root_tokens host `[batch]`: the committed token of each request (node 0).
  /// \returns the frontier for the first draft forward.
  /// \throws invalid_argument on a shape mismatch, k > V', bad logits, a root token outside
  /// `[0, target_vocab)`, or a draft token that maps (through d2t when given) outside
  /// `[0, target_vocab)` (both when target_vocab > 0).
  draft_step begin(matrix_view<const float, space> root_logits, std::span<const std::int32_t> root_tokens,
                   index_t target_vocab = 0) {
    constexpr const char* where = "specdec::eagle2_tree_builder::begin";
    detail::check_dynamic_begin(where, cfg_, batch_, root_logits.rows(), root_logits.cols(),
                                static_cast<index_t>(root_tokens.size()), target_vocab);
    vocab_ = root_logits.cols();
    target_vocab_ = target_vocab;
    if (!topk_) allocate(where);
    topk_->run(root_logits, scale());
    const index_t k = cfg_.top_k;
    detail::eagle2_jobs::begin_job<host_space> job{state(),
                                                   matrix_view<const float>(topk_->values().data(), batch_, k),
                                                   matrix_view<const std::int32_t>(topk_->indices().data(), batch_, k),
                                                   vector_view<const std::int32_t>(root_tokens.data(), batch_),
                                                   mask_of(0, 0),
                                                   where,
                                                   {}};
    name(job.names);
    began_ = false;  // a refused begin leaves no build to expand
    detail::run_serial(job, batch_);
    began_ = true;
    steps_ = 0;
    return current_step();
  }

  /// begin() for a builder of one request: `root_logits` `[1 x V']`, `root_token` its committed token.
  draft_step begin(matrix_view<const float, space> root_logits, std::int32_t root_token) {
    return begin(root_logits, std::span<const std::int32_t>(&root_token, 1));
  }

  /// One expansion from the frontier's draft logits. \param frontier_logits backend `[batch k x V']`,
  /// row `b k + r` = frontier slot r of request b. \returns the next frontier (unused after the last
  /// expansion). \throws invalid_argument before begin(), after `depth` expansions, on a shape
  /// mismatch or bad logits.
  draft_step expand(matrix_view<const float, space> frontier_logits) {
    check_expand("specdec::eagle2_tree_builder::expand", frontier_logits, steps_ < cfg_.depth);
    topk_->run(frontier_logits, scale());
    grow("specdec::eagle2_tree_builder::expand", topk_->values(), topk_->indices());
    return current_step();
  }

  /// Jakiro's penultimate dual-head forward (jakiro/model/cnets.py, `topK_genrate`): the left head's
  /// logits drive this expansion as usual; the right head's top-k (computed for the same input
  /// frontier) becomes the children of the frontier just selected, slot for slot (right row j hangs
  /// under new frontier slot j, as Jakiro does), with no further forward. Consumes the last two steps:
  /// call it when exactly two expansions remain. \param left_logits, right_logits backend `[batch k x V']`.
  draft_step expand_dual(matrix_view<const float, space> left_logits, matrix_view<const float, space> right_logits) {
    constexpr const char* where = "specdec::eagle2_tree_builder::expand_dual";
    check_expand(where, left_logits, steps_ + 2 == cfg_.depth);
    check_expand(where, right_logits, true);
    topk_->run(right_logits, scale());
    const std::vector<float> right_values = topk_->values();
    const std::vector<std::int32_t> right_indices = topk_->indices();
    topk_->run(left_logits, scale());
    grow(where, topk_->values(), topk_->indices());
    grow(where, right_values, right_indices);
    return current_step();
  }

  /// Reranks every candidate of every request and returns the trees.
  /// \throws invalid_argument when called before begin() or before all `depth` expansions.
  std::vector<dynamic_tree_result> finish() const {
    constexpr const char* where = "specdec::eagle2_tree_builder::finish";
    SPECDEC_EXPECTS(began_, where, "called before begin()");
    SPECDEC_EXPECTS(steps_ == cfg_.depth, where, steps_, " expansions done; expected depth = ", cfg_.depth);
    const index_t t = cfg_.total_tokens;
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(batch_ * t)), parents(tokens.size()), depths(tokens.size()),
        selected(static_cast<std::size_t>(batch_ * (t - 1)));
    std::vector<float> scores(tokens.size());
    detail::eagle2_jobs::finish_job<host_space> job{state(),
                                                    {matrix_view<std::int32_t>(tokens.data(), batch_, t),
                                                     matrix_view<std::int32_t>(parents.data(), batch_, t),
                                                     matrix_view<std::int32_t>(depths.data(), batch_, t),
                                                     matrix_view<float>(scores.data(), batch_, t),
                                                     matrix_view<std::int32_t>(selected.data(), batch_, t - 1)},
                                                    candidates(),
                                                    t - 1,
                                                    where,
                                                    {}};
    name(job.names);
    detail::run_serial(job, batch_);
    std::vector<dynamic_tree_result> out(static_cast<std::size_t>(batch_));
    const index_t list = cfg_.depth > 0 ? 1 + cfg_.depth * cfg_.top_k : 0;
    for (index_t b = 0; b < batch_; ++b) {
      dynamic_tree_result& r = out[static_cast<std::size_t>(b)];
      const auto row = [&](const auto& v, index_t cols) { return std::vector(v.begin() + b * cols, v.begin() + (b + 1) * cols); };
      r.tree.token = row(tokens, t);
      r.tree.parent = row(parents, t);
      r.tree.depth = row(depths, t);
      r.tree.score = row(scores, t);
      r.selected = row(selected, t - 1);
      r.parent_list = row(parent_list_, list);
    }
    return out;
  }

  /// The single-request form of finish(): the one request's result. \throws invalid_argument when the
  /// builder was made for a batch of more than one request, and as finish().
  dynamic_tree_result finish_single() const {
    SPECDEC_EXPECTS(batch_ == 1, "specdec::eagle2_tree_builder::finish_single", "the builder has ", batch_,
                    " requests; finish() returns one result per request");
    return finish().front();
  }

  /// Flat candidates of request b so far (for debugging and conformance): scores and target token ids,
  /// k + steps_done() k^2 of each after begin(), none before.
  /// \throws invalid_argument when b is not a request of the builder.
  std::vector<float> candidate_scores(index_t b) const { return candidates_of(scores_, b, "candidate_scores"); }
  std::vector<std::int32_t> candidate_tokens(index_t b) const { return candidates_of(tokens_, b, "candidate_tokens"); }

 private:
  index_t candidates() const noexcept { return cfg_.top_k + cfg_.depth * cfg_.top_k * cfg_.top_k; }

  template <class T>
  std::vector<T> candidates_of(const std::vector<T>& all, index_t b, const char* what) const {
    SPECDEC_EXPECTS(b >= 0 && b < batch_, "specdec::eagle2_tree_builder", what, "(b = ", b, "): expected one of the ",
                    batch_, " requests");
    if (!began_) return {};
    const auto first = all.begin() + b * candidates();
    return std::vector<T>(first, first + cfg_.top_k + steps_ * cfg_.top_k * cfg_.top_k);
  }

  /// The state's host storage, sized by the first begin() (a configuration's sizes are checked first).
  void allocate(const char* where) {
    const index_t k = cfg_.top_k;
    const auto count = [&](std::initializer_list<index_t> dims, const char* what) {
      return detail::checked_count(where, dims, what);
    };
    const std::size_t c = count({batch_, candidates()}, "the candidates [batch x (top_k + depth top_k^2)]");
    scores_.resize(c);
    tokens_.resize(c);
    parents_.resize(c);
    frontier_.resize(static_cast<std::size_t>(batch_ * k));
    parent_slot_.resize(frontier_.size());
    input_ids_.resize(frontier_.size());
    roots_.resize(static_cast<std::size_t>(batch_));
    if (cfg_.depth > 0) parent_list_.resize(count({batch_, 1 + cfg_.depth * k}, "the parent lists"));
    for (auto& m : masks_) m.resize(count({batch_ * k, k * (cfg_.depth + 1)}, "the draft masks"));
    topk_.emplace(*backend_, batch_ * k, k);
  }

  detail::eagle2_jobs::state<host_space> state() const {
    const index_t k = cfg_.top_k;
    auto& self = const_cast<eagle2_tree_builder&>(*this);  // the jobs take one state type for reads and writes
    return {matrix_view<float>(self.scores_.data(), batch_, candidates()),
            matrix_view<std::int32_t>(self.tokens_.data(), batch_, candidates()),
            matrix_view<std::int32_t>(self.parents_.data(), batch_, candidates()),
            matrix_view<std::int32_t>(self.frontier_.data(), batch_, k),
            matrix_view<std::int32_t>(self.parent_slot_.data(), batch_, k),
            matrix_view<std::int32_t>(self.input_ids_.data(), batch_, k),
            vector_view<std::int32_t>(self.roots_.data(), batch_),
            cfg_.depth > 0 ? matrix_view<std::int32_t>(self.parent_list_.data(), batch_, 1 + cfg_.depth * k) : matrix_view<std::int32_t>(),
            cfg_.d2t.empty() ? vector_view<const std::int32_t>() : vector_view<const std::int32_t>(cfg_.d2t.data(), static_cast<index_t>(cfg_.d2t.size())),
            k,
            target_vocab_,
            cfg_.score == tree_score::probability};
  }
  static void name(const char* (&names)[detail::team_job_names]) {
    for (const char*& n : names) n = "";
    names[detail::eagle2_jobs::arg_root_tokens] = "root_tokens";
    names[detail::eagle2_jobs::arg_d2t] = "d2t";
    names[detail::eagle2_jobs::arg_tree] = "candidate parents";
  }
  /// The draft mask of `step` (k (step + 1) columns) in ping-pong buffer `which`.
  matrix_view<std::uint8_t> mask_of(int which, index_t step) {
    return {masks_[which].data(), batch_ * cfg_.top_k, cfg_.top_k * (step + 1)};
  }

  static dynamic_tree_config checked(dynamic_tree_config cfg, index_t batch) {
    constexpr const char* where = "specdec::eagle2_tree_builder";
    constexpr index_t int32_max = std::numeric_limits<std::int32_t>::max();
    const index_t k = cfg.top_k;
    // k^2 < 2^31, so every product below is bounded before it is formed.
    SPECDEC_EXPECTS(k >= 1 && k <= 46340, where, "top_k = ", k, "; expected 1 <= top_k <= 46340 (k^2 flat indices must fit int32)");
    SPECDEC_EXPECTS(cfg.depth >= 0 && cfg.depth <= (int32_max - k) / (k * k), where, "depth = ", cfg.depth,
                    "; expected 0 <= depth <= ", (int32_max - k) / (k * k), " (top_k + depth top_k^2 candidates must fit int32)");
    SPECDEC_EXPECTS(batch >= 1 && batch <= int32_max / (k * k), where, "batch = ", batch, "; expected 1 <= batch <= ",
                    int32_max / (k * k), " (batch top_k^2 top-k results must fit int32)");
    // A batch that large is no engine's; it bounds the per-request bookkeeping allocated here.
    SPECDEC_EXPECTS(batch <= max_batch, where, "batch = ", batch, "; expected at most ", max_batch, " requests");
    // d2t comes from a checkpoint: every mapped id must be a token id before any is used.
    for (std::size_t t = 0; t < cfg.d2t.size(); ++t) {
      const index_t mapped = static_cast<index_t>(t) + cfg.d2t[t];
      SPECDEC_EXPECTS(mapped >= 0 && mapped <= int32_max, where, "d2t[", t, "] = ", cfg.d2t[t], " maps draft token ", t,
                      " to ", mapped, "; expected a target token id in [0, 2^31 - 1]");
    }
    const index_t candidates = k + cfg.depth * k * k;
    SPECDEC_EXPECTS(cfg.total_tokens >= 1 && cfg.total_tokens <= 1 + candidates, where, "total_tokens = ", cfg.total_tokens,
                    "; expected 1 <= total_tokens <= 1 + top_k + depth * top_k^2 = ", 1 + candidates,
                    " (the root plus every candidate)");
    return cfg;
  }

  detail::topk_scale scale() const noexcept {
    return cfg_.score == tree_score::probability ? detail::topk_scale::probabilities : detail::topk_scale::log_probabilities;
  }

  void check_expand(const char* where, matrix_view<const float, space> logits, bool step_left) const {
    detail::check_dynamic_expand(where, began_, steps_, cfg_.depth, step_left, batch_, cfg_.top_k, vocab_, logits.rows(),
                                 logits.cols());
  }

  /// One expansion's bookkeeping from the top-k `[batch k x k]` of the frontier's rows (grow_job).
  void grow(const char* where, const std::vector<float>& values, const std::vector<std::int32_t>& indices) {
    const index_t k = cfg_.top_k;
    const int from = static_cast<int>(steps_ % 2);
    detail::eagle2_jobs::grow_job<host_space> job{state(),
                                                  matrix_view<const float>(values.data(), batch_ * k, k),
                                                  matrix_view<const std::int32_t>(indices.data(), batch_ * k, k),
                                                  mask_of(from, steps_),
                                                  mask_of(1 - from, steps_ + 1),
                                                  k + steps_ * k * k,
                                                  where,
                                                  {}};
    name(job.names);
    began_ = false;  // a refused expansion leaves a build half grown: begin again
    detail::run_serial(job, batch_);
    began_ = true;
    ++steps_;
  }

  draft_step current_step() const {
    const index_t k = cfg_.top_k;
    draft_step s;
    s.step = steps_;
    s.top_k = k;
    s.mask_cols = k * (steps_ + 1);
    s.input_ids = input_ids_;
    s.frontier = frontier_;
    s.parent_slot = parent_slot_;
    const std::vector<std::uint8_t>& mask = masks_[steps_ % 2];
    s.draft_mask.assign(mask.begin(), mask.begin() + batch_ * k * s.mask_cols);
    return s;
  }

  B* backend_;
  dynamic_tree_config cfg_;
  index_t batch_;
  std::optional<detail::host_topk<B>> topk_;  // allocated by the first begin(), with the state below
  std::vector<float> scores_;                         // [batch x C] cumulative score per flat candidate
  std::vector<std::int32_t> tokens_, parents_;        // [batch x C] target id, parent flat index (-1: root)
  std::vector<std::int32_t> frontier_, parent_slot_, input_ids_;  // [batch x k]
  std::vector<std::int32_t> roots_;                   // [batch]
  std::vector<std::int32_t> parent_list_;             // [batch x (1 + depth k)], empty when depth = 0
  std::vector<std::uint8_t> masks_[2];                // [batch k x k (depth + 1)], this step's and the next
  index_t vocab_ = 0;
  index_t target_vocab_ = 0;
  index_t steps_ = 0;
  bool began_ = false;
};

}  // namespace specdec
