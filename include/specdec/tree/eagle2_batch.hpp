// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The EAGLE-2 / EAGLE-3 / Jakiro dynamic tree build with every buffer in the backend's memory:
/// `eagle2_batch_builder`, the device-resident form of `eagle2_tree_builder` (eagle2.hpp). The top-k
/// of each draft forward's rows is a backend primitive (one launch on CUDA); the bookkeeping that
/// follows (cumulative scores, the next frontier, the draft-side mask, the final reranking and the
/// tree) is a team job with one team per request (tree/detail/eagle2_jobs.hpp, the jobs the host
/// builder runs on one thread): on CUDA one launch, no download, no synchronisation under deferred
/// faults. The finished trees land in caller buffers in the
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
#include <specdec/tree/detail/eagle2_jobs.hpp>
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
    detail::eagle2_jobs::finish_job<space> job{
        state(), {out.tokens, out.parents, out.depths, out.scores, out.selected}, candidates_, t - 1, where, {}};
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
            {},
            cfg_.d2t.empty() ? vector_view<const std::int32_t, space>() : vector_view<const std::int32_t, space>(d2t_.view()),
            k,
            target_vocab_,
            false};
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
