// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief `block_drafter<B>`: drafting from a block drafter (DFlash, `blocks/dflash.hpp`; parallel
/// drafting with mask tokens), a model of `specdec::drafter` (tree/drafter.hpp). One draft-model
/// forward over the root and `block_size - 1` mask tokens, every row attending every other (no causal
/// mask), gives a distribution per position ahead: row j > 0 proposes the token at depth j. The draft
/// is the chain of each row's argmax (what DFlash's references draft), or with `top_k` > 1 a tree:
/// each position's top_k candidates, and of all root paths through them the best, by the product of
/// their tokens' per-position probabilities (a Medusa-style candidate tree over per-position
/// distributions). The draft-length policy sizes it per step: the chain is cut to the depth it picks,
/// the tree to its best that many nodes. Drafts are the same whatever the temperature (the references
/// draft greedily and verify sampled targets against them): `drafted` carries no distributions, and
/// the lossless verifiers treat the tokens as proposals drawn with probability one.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <queue>
#include <span>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/core/error.hpp>
#include <specdec/policy/draft_length.hpp>
#include <specdec/tree/drafter.hpp>
#include <specdec/tree/drafters.hpp>
#include <specdec/tree/tree.hpp>

namespace specdec {

/// The best `nodes` root paths through per-position candidates: depth d offers `ids[(d - 1) k + r]`
/// with log-probability `log_probs[(d - 1) k + r]` (r < k, depths 1..positions), and a node's score is
/// its path's summed log-probability. Best-first from the root, ties to the node found first: as a
/// child never scores above its parent, the `nodes` best are a tree, parents first, and its node i > 0
/// is the i-th best path. Scores (float) in the tree's `score`. Host.
/// \throws invalid_argument unless k >= 1, positions >= 0, the spans hold positions x k entries and
/// nodes >= 0; on a log-probability that is NaN or above 0.
inline draft_tree best_block_tree(std::int32_t root, std::span<const std::int32_t> ids, std::span<const float> log_probs,
                                  index_t k, index_t positions, index_t nodes) {
  constexpr const char* where = "specdec::best_block_tree";
  SPECDEC_EXPECTS(k >= 1 && positions >= 0 && nodes >= 0 && positions <= std::numeric_limits<std::int32_t>::max() / k, where,
                  "k = ", k, ", positions = ", positions, ", nodes = ", nodes,
                  "; expected k >= 1, positions >= 0 and nodes >= 0 (positions x k within int32)");
  SPECDEC_EXPECTS(static_cast<index_t>(ids.size()) == positions * k && static_cast<index_t>(log_probs.size()) == positions * k, where,
                  "ids and log_probs hold ", ids.size(), " and ", log_probs.size(), " entries; expected positions x k = ", positions * k);
  for (std::size_t i = 0; i < log_probs.size(); ++i)
    SPECDEC_EXPECTS(!std::isnan(log_probs[i]) && log_probs[i] <= 0.0f, where, "log_probs[", i, "] = ", log_probs[i],
                    "; expected a log-probability (<= 0, not NaN)");
  draft_tree tree = detail::root_only(root);
  struct candidate {
    double score;
    std::int64_t order;  // discovery order: ties go to the earlier
    std::int32_t parent, depth, rank;
  };
  const auto worse = [](const candidate& a, const candidate& b) {
    return a.score < b.score || (a.score == b.score && a.order > b.order);
  };
  std::priority_queue<candidate, std::vector<candidate>, decltype(worse)> frontier(worse);
  std::int64_t found = 0;
  const auto children = [&](std::int32_t parent, double score, std::int32_t depth) {
    if (depth >= positions) return;
    for (index_t r = 0; r < k; ++r)
      frontier.push({score + static_cast<double>(log_probs[static_cast<std::size_t>(depth * k + r)]), found++, parent, depth + 1,
                     static_cast<std::int32_t>(r)});
  };
  children(0, 0.0, 0);
  while (tree.size() <= nodes && !frontier.empty()) {
    const candidate c = frontier.top();
    frontier.pop();
    const auto node = static_cast<std::int32_t>(tree.size());
    tree.token.push_back(ids[static_cast<std::size_t>((c.depth - 1) * k + c.rank)]);
    tree.parent.push_back(c.parent);
    tree.depth.push_back(c.depth);
    tree.score.push_back(static_cast<float>(c.score));
    children(node, c.score, c.depth);
  }
  return tree;
}

/// Drafting from a block drafter; see the file's comment. The engine answers the one request per step
/// with its block model: the request's rows are `[root, mask, ..., mask]` at depths 0..R-1 (positions
/// root_position + depth: DFlash's block positions), `parent_row` -1, the mask all ones (each row
/// attends the engine's cached context and every row of the block), one logits row per row. DFlash's
/// engine side: append the target's features of the tokens verified since the last step to the
/// drafter's context cache (blocks::dflash::append_context) before running the request.
template <backend B>
class block_drafter {
 public:
  using memory_space = typename B::memory_space;
  struct parameters {
    index_t block_size = 16;       ///< rows of the model's forward: the root and block_size - 1 mask tokens
    std::int32_t mask_token = 0;   ///< the mask id (DFlash: the checkpoint's mask_token_id)
    index_t top_k = 1;             ///< candidates per position: 1 drafts a chain
    /// The largest draft, in nodes besides the root (0: block_size - 1, the whole chain). A tree needs
    /// more than its depth to branch.
    index_t nodes = 0;
    bool adaptive = true;          ///< false: always the largest draft
    /// Run only as many rows as the step's draft is deep (+1), not the whole block: cheaper forwards,
    /// but a model trained on full blocks then sees fewer mask tokens than it was trained with (its
    /// distributions differ from the reference's).
    bool shrink_block = false;
    /// A reduced draft vocabulary (EAGLE-3's `d2t`): logits column i is target id i + d2t[i] (the
    /// engine scores those rows of the target's head only). Empty: column i is id i.
    std::vector<std::int32_t> d2t = {};
  };
  /// \throws invalid_argument unless 2 <= block_size <= 2^16 + 1, mask_token >= 0, 1 <= top_k <= 2^16,
  /// 0 <= nodes <= policy::max_draft_length and every i + d2t[i] in [0, 2^31 - 1].
  block_drafter(B& b, parameters p) : b_(&b), p_(checked(p)), policy_(largest(p_)) {}

  /// \throws invalid_argument on an empty context or a negative / non-finite temperature.
  const draft_request* begin(const draft_context& context) {
    constexpr const char* where = "specdec::block_drafter::begin";
    SPECDEC_EXPECTS(!context.committed.empty(), where, "the context is empty; expected the root at least");
    SPECDEC_EXPECTS(std::isfinite(context.temperature) && context.temperature >= 0.0f, where, "temperature = ",
                    context.temperature, "; expected finite >= 0 (0: greedy)");
    tree_ = detail::root_only(context.root());
    request_ = {};
    nodes_ = p_.adaptive ? policy_.choose() : largest(p_);
    if (nodes_ == 0) return nullptr;
    const index_t rows = p_.shrink_block ? std::min(p_.block_size, nodes_ + 1) : p_.block_size;
    request_.tokens.assign(static_cast<std::size_t>(rows), p_.mask_token);
    request_.tokens[0] = context.root();
    for (index_t r = 0; r < rows; ++r) request_.depth.push_back(static_cast<std::int32_t>(r));
    request_.parent_row.assign(static_cast<std::size_t>(rows), -1);
    request_.mask.assign(static_cast<std::size_t>(rows * rows), 1);
    request_.mask_cols = rows;
    return &request_;
  }
  /// \param logits backend `[R x V]`, row j the distribution at depth j (row 0's is not read).
  /// \throws invalid_argument when no forward is pending, on shapes, top_k > V or bad logits (from the
  /// backend).
  const draft_request* advance(matrix_view<const float, memory_space> logits) {
    constexpr const char* where = "specdec::block_drafter::advance";
    SPECDEC_EXPECTS(request_.rows() > 0, where, "no draft forward is pending");
    SPECDEC_EXPECTS(logits.rows() == request_.rows(), where, "logits has ", logits.rows(), " rows; expected one per row (",
                    request_.rows(), ")");
    detail::check_vocabulary(where, "V", logits.cols());
    SPECDEC_EXPECTS(p_.top_k <= logits.cols() && (!p_.d2t.empty() || p_.mask_token < logits.cols()), where, "top_k = ", p_.top_k,
                    ", mask_token = ", p_.mask_token, "; expected top_k <= V = ", logits.cols(), " and the mask an id below it");
    SPECDEC_EXPECTS(p_.d2t.empty() || static_cast<index_t>(p_.d2t.size()) == logits.cols(), where, "d2t has ", p_.d2t.size(),
                    " entries; expected one per logits column (", logits.cols(), ")");
    const index_t positions = std::min(logits.rows() - 1, nodes_), k = p_.top_k;
    request_ = {};
    const matrix_view<const float, memory_space> ahead(logits.data() + logits.stride(0), positions, logits.cols(), logits.stride(0),
                                                       logits.stride(1));
    if (k == 1) {
      // A chain: each position's argmax (the lowest id among ties, as row_topk's), no scores needed.
      auto ids = b_->template allocate<std::int32_t>(positions);
      b_->row_argmax(ahead, ids.view());
      const std::vector<std::int32_t> tokens = b_->download(vector_view<const std::int32_t, memory_space>(ids.view().data(), positions));
      for (index_t d = 1; d <= positions; ++d) {
        tree_.token.push_back(target_id(tokens[static_cast<std::size_t>(d - 1)]));
        tree_.parent.push_back(static_cast<std::int32_t>(d - 1));
        tree_.depth.push_back(static_cast<std::int32_t>(d));
        tree_.score.push_back(0.0f);
      }
      return nullptr;
    }
    auto values = b_->template allocate<float>(positions * k);
    auto ids = b_->template allocate<std::int32_t>(positions * k);
    auto lse = b_->template allocate<float>(positions);  // not read: the values are log-probabilities already
    b_->row_topk_logsumexp(ahead, k, 1.0f, values.matrix(positions, k), ids.matrix(positions, k), lse.view());
    const std::vector<float> top = b_->download(vector_view<const float, memory_space>(values.view().data(), positions * k));
    std::vector<std::int32_t> tokens = b_->download(vector_view<const std::int32_t, memory_space>(ids.view().data(), positions * k));
    for (auto& t : tokens) t = target_id(t);
    std::vector<float> log_probs(top.size());
    for (std::size_t i = 0; i < top.size(); ++i) log_probs[i] = std::min(0.0f, top[i]);  // a rounding above 0 is 0
    tree_ = best_block_tree(tree_.token[0], tokens, log_probs, k, positions, nodes_);
    return nullptr;
  }
  drafted finish() {
    request_ = {};
    return {tree_, {}, {}};
  }
  /// The step's draft-model time is one forward, whatever the draft's size (draft_step_timed).
  void feedback(const draft_feedback& f) { detail::record_feedback(policy_, tree_, f, 0, true); }
  policy::draft_length_policy& policy() noexcept { return policy_; }
  const policy::draft_length_policy& policy() const noexcept { return policy_; }

 private:
  static parameters checked(const parameters& p) {
    constexpr const char* where = "specdec::block_drafter";
    SPECDEC_EXPECTS(p.block_size >= 2 && p.block_size <= policy::max_draft_length + 1 && p.mask_token >= 0 && p.top_k >= 1 &&
                        p.top_k <= policy::max_draft_length && p.nodes >= 0 && p.nodes <= policy::max_draft_length,
                    where, "block_size = ", p.block_size, ", mask_token = ", p.mask_token, ", top_k = ", p.top_k, ", nodes = ",
                    p.nodes, "; expected 2 <= block_size <= 2^16 + 1, mask_token >= 0, 1 <= top_k <= 2^16, 0 <= nodes <= 2^16");
    for (std::size_t i = 0; i < p.d2t.size(); ++i) {
      const std::int64_t id = static_cast<std::int64_t>(i) + p.d2t[i];
      SPECDEC_EXPECTS(id >= 0 && id <= std::numeric_limits<std::int32_t>::max(), where, "d2t[", i, "] = ", p.d2t[i],
                      " maps column ", i, " to ", id, "; expected a target id in [0, 2^31 - 1]");
    }
    return p;
  }
  static index_t largest(const parameters& p) { return p.nodes > 0 ? p.nodes : p.block_size - 1; }
  std::int32_t target_id(std::int32_t column) const {
    return p_.d2t.empty() ? column : column + p_.d2t[static_cast<std::size_t>(column)];
  }
  B* b_;
  parameters p_;
  policy::draft_length_policy policy_;
  draft_request request_;
  draft_tree tree_;
  index_t nodes_ = 0;
};

}  // namespace specdec
