// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief specdec's drafters, each a model of `specdec::drafter` (tree/drafter.hpp), each sized per step
/// by its own `policy::draft_length_policy` (measured acceptance by depth against the measured costs
/// the engine reports in feedback(): where drafting does not pay it drafts nothing, so a drafter is
/// not slower than plain decoding):
///
/// | drafter | model the engine runs | draft |
/// | --- | --- | --- |
/// | `ngram_drafter` | none | prompt lookup: the continuations of the context's longest repeated suffix, a chain or a trie |
/// | `chain_drafter<B>` | any autoregressive draft (a small LM, MTP modules, ADMG's self-draft) | a chain, greedy or sampled |
/// | `eagle2_drafter<B>` | EAGLE / EAGLE-3 layers, Jakiro's MoE layer, any model with per-row logits | EAGLE-2's dynamic tree (top-k expansions, reranked) |
/// | `heads_drafter<B>` | Medusa-style heads on the root (one forward, one logits row per head) | a static tree of per-head top-k |
/// | `block_drafter<B>` (tree/block_drafter.hpp) | a block drafter (DFlash): one forward over the root and mask tokens | the chain of per-position argmaxes, or the best tree of per-position top-k |
/// | `suffix_drafter<Token, RequestId>` | none | SuffixDecoding (suffix_cache::speculate), its first nodes, as many as the policy chooses |
/// | `eagle1::tree_drafter<B>` (interop/eagle1.hpp) | EAGLE-1's layer, level by level | EAGLE-1's static tree |
///
/// All are host-driven and single-request; `B` is the backend that reads the logits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/core/checked.hpp>
#include <specdec/core/view_checks.hpp>
#include <specdec/core/rng.hpp>
#include <specdec/policy/draft_length.hpp>
#include <specdec/tree/drafter.hpp>
#include <specdec/tree/eagle2.hpp>
#include <specdec/tree/ngram.hpp>
#include <specdec/tree/static_tree.hpp>
#include <specdec/tree/suffix.hpp>
#include <specdec/tree/tree.hpp>

namespace specdec {

/// The nodes of `tree` no deeper than `depth`, in their order, parents renumbered (scores kept).
/// \throws invalid_argument on a malformed tree (valid_tree) or depth < 0.
inline draft_tree cut_to_depth(const draft_tree& tree, index_t depth) {
  const valid_tree valid(tree);
  SPECDEC_EXPECTS(depth >= 0, "specdec::cut_to_depth", "depth = ", depth, "; expected >= 0");
  if (depth >= valid.max_depth()) return tree;
  draft_tree out;
  std::vector<std::int32_t> renumbered(static_cast<std::size_t>(valid.size()), -1);
  for (index_t i = 0; i < valid.size(); ++i) {
    if (valid.depth(i) > depth) continue;
    renumbered[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(out.token.size());
    out.token.push_back(valid.token(i));
    out.parent.push_back(i == 0 ? -1 : renumbered[static_cast<std::size_t>(valid.parent(i))]);
    out.depth.push_back(valid.depth(i));
    out.score.push_back(i < static_cast<index_t>(tree.score.size()) ? tree.score[static_cast<std::size_t>(i)] : 0.0f);
  }
  return out;
}

namespace detail {

/// The feedback half every drafter here shares: verification and costs into its policy. `per_step`:
/// the draft-model time is one forward whatever the draft's size (a block drafter), not per token.
inline void record_feedback(policy::draft_length_policy& policy, const draft_tree& tree, const draft_feedback& f,
                            index_t context = 0, bool per_step = false) {
  constexpr const char* where = "specdec::drafter::feedback";
  const index_t depth = tree.max_depth(), accepted = static_cast<index_t>(f.accepted_nodes.size());
  SPECDEC_EXPECTS(accepted <= depth, where, "accepted_nodes has ", accepted, " nodes; the draft is ", depth,
                  " deep (the path excludes the root)");
  SPECDEC_EXPECTS(std::isfinite(f.target_seconds) && f.target_seconds >= 0 && std::isfinite(f.draft_seconds) && f.draft_seconds >= 0,
                  where, "target_seconds = ", f.target_seconds, ", draft_seconds = ", f.draft_seconds,
                  "; expected finite times >= 0 (0: not measured)");
  SPECDEC_EXPECTS(f.target_rows >= 0 && f.target_rows <= tree.size(), where, "target_rows = ", f.target_rows,
                  "; expected 0 (the draft's ", tree.size(), " nodes) or the rows decoded, at most that");
  policy.verified(accepted, depth, context);
  if (f.target_seconds > 0) policy.target_forward_timed(f.target_rows > 0 ? f.target_rows : tree.size(), f.target_seconds);
  if (f.draft_seconds > 0 && depth > 0) {
    if (per_step)
      policy.draft_step_timed(f.draft_seconds);
    else
      policy.draft_token_timed(f.draft_seconds / static_cast<double>(tree.size() - 1));
  }
}

inline draft_tree root_only(std::int32_t root) { return draft_tree{{root}, {-1}, {0}, {0.0f}}; }

}  // namespace detail

/// The draft-length policy's context for a prompt-lookup or suffix match of `match` tokens, in 5
/// buckets: <= 2, 3, 4-7, 8-15, >= 16. A long match is text being copied, accepted far more often than
/// a short one (llama.cpp's prompts at Q4_0, 16-token drafts: two-token matches accepted 3.5 tokens on
/// average and none in 45 % of steps, sixteen-token ones 12.3 and never none), so the policy learns
/// each bucket's acceptance apart.
inline constexpr index_t match_length_contexts = 5;
inline constexpr index_t match_length_context(index_t match) noexcept {
  return match <= 2 ? 0 : match == 3 ? 1 : match < 8 ? 2 : match < 16 ? 3 : 4;
}

/// Prompt lookup: the continuations of the context's longest suffix that occurred before
/// (ngram_continuations), as many draft rows as the policy chooses for what the most recent
/// continuation offers, learned per bucket of match length (match_length_context). With `branches`
/// > 1 the rows hold a tree: the most recent continuation is the main branch and each other one a
/// side branch of length / 8 tokens (none under 8 rows), so a draft of `length` rows costs what the
/// policy priced, not up to `branches` times that. No model runs.
class ngram_drafter {
 public:
  using memory_space = host_space;
  struct parameters {
    ngram_options options = {};
    index_t longest = 8;            ///< the most draft rows
    bool adaptive = true;           ///< false: always all the most recent continuation offers, up to `longest`
    bool by_match_length = true;    ///< false: one acceptance estimate for all matches
  };
  /// \throws invalid_argument on longest outside the policy's range (policy::draft_length_policy).
  explicit ngram_drafter(parameters p) : p_(p), policy_(p.longest, p.by_match_length ? match_length_contexts : 1) {}

  /// \throws invalid_argument on an empty context, and as ngram_continuations.
  const draft_request* begin(const draft_context& context) {
    constexpr const char* where = "specdec::ngram_drafter::begin";
    SPECDEC_EXPECTS(!context.committed.empty(), where, "the context is empty; expected the root at least");
    const std::span<const std::int32_t> window = detail::ngram_window(context.committed, p_.options, where);
    const std::vector<index_t> agree = detail::suffix_agreement(window);
    match_ = detail::match_length(agree, p_.options);
    context_ = p_.by_match_length ? match_length_context(match_) : 0;
    std::vector<detail::continuation_span> spans = detail::continuation_spans(window, agree, p_.longest, p_.options);
    const index_t available = spans.empty() ? 0 : spans.front().size;
    const index_t length = p_.adaptive ? policy_.choose(context_, available) : available;
    // Side branches of length / 8 tokens, the main branch keeping at least one.
    const index_t others = p_.options.branches - 1;
    const index_t side = others == 0 || length == 0 ? 0 : std::min(length / 8, (length - 1) / others);
    for (std::size_t c = 0; c < spans.size(); ++c)
      spans[c].size = std::min(spans[c].size, c == 0 ? length - side * others : side);
    std::erase_if(spans, [](const detail::continuation_span& c) { return c.size == 0; });
    tree_ = detail::continuation_trie(context.root(), spans.size(),
                                      [&](std::size_t c) { return window.subspan(static_cast<std::size_t>(spans[c].first),
                                                                                 static_cast<std::size_t>(spans[c].size)); },
                                      where);
    return nullptr;
  }
  drafted finish() { return {tree_, {}, {}}; }
  /// \throws invalid_argument on a path longer than the draft or times negative / not finite.
  void feedback(const draft_feedback& f) { detail::record_feedback(policy_, tree_, f, context_); }
  /// The policy; an engine may seed its target costs (target_forward_timed) from a calibration and
  /// keep the drafter across requests, as what it learns is about the drafter and the hardware.
  policy::draft_length_policy& policy() noexcept { return policy_; }
  const policy::draft_length_policy& policy() const noexcept { return policy_; }
  /// The last begin()'s match length (0: nothing matched, the root alone).
  index_t match_length() const noexcept { return match_; }

 private:
  parameters p_;
  policy::draft_length_policy policy_;
  draft_tree tree_;
  index_t match_ = 0, context_ = 0;
};

/// A chain from any autoregressive draft model: the root row, then one row per drafted token (each
/// continuing the previous row: MTP's `o`, a draft LM's cache), greedy (argmax, lowest id among ties)
/// or, at the context's `temperature` > 0, sampled from softmax(logits / T) by the inverse CDF of
/// uniform i = `context.rng.uniform_double(i)` for draft token i, the distributions kept for the
/// lossless verifier. Length: the policy's choice, cut short by `stop(top1_probability, drafted)` when
/// given (Draft & Verify / ADMG's exit rule; the probability at T, or T = 1 when greedy).
template <backend B>
class chain_drafter {
 public:
  using memory_space = typename B::memory_space;
  struct parameters {
    index_t longest = 8;
    bool adaptive = true;  ///< false: always `longest` (or until stop)
    std::function<bool(double top1_probability, index_t drafted)> stop = {};
  };
  /// \throws invalid_argument on longest outside the policy's range.
  chain_drafter(B& b, parameters p) : b_(&b), p_(std::move(p)), policy_(p_.longest) {}

  /// \throws invalid_argument on an empty context or a negative / non-finite temperature.
  const draft_request* begin(const draft_context& context) {
    constexpr const char* where = "specdec::chain_drafter::begin";
    SPECDEC_EXPECTS(!context.committed.empty(), where, "the context is empty; expected the root at least");
    SPECDEC_EXPECTS(std::isfinite(context.temperature) && context.temperature >= 0.0f, where, "temperature = ",
                    context.temperature, "; expected finite >= 0 (0: greedy)");
    out_ = {detail::root_only(context.root()), {}, {}};
    temperature_ = context.temperature;
    rng_ = context.rng;
    length_ = p_.adaptive ? policy_.choose() : p_.longest;
    if (length_ == 0) return nullptr;
    request_ = {{context.root()}, {0}, {-1}, {1}, 1, 1};
    return &request_;
  }
  /// \param logits backend `[1 x V]`: the row just run. \throws invalid_argument when no forward is
  /// pending, on shapes, and on bad logits (from the backend).
  const draft_request* advance(matrix_view<const float, memory_space> logits) {
    constexpr const char* where = "specdec::chain_drafter::advance";
    SPECDEC_EXPECTS(request_.rows() == 1 && drafted_count() < length_, where, "no draft forward is pending");
    SPECDEC_EXPECTS(logits.rows() == 1, where, "logits has ", logits.rows(), " rows; expected 1");
    detail::check_vocabulary(where, "V", logits.cols());  // before a row of V floats is allocated
    std::int32_t token = 0;
    double top1 = 0;
    if (temperature_ == 0.0f) {
      // Greedy: the argmax, and for a stop rule its probability at T = 1, as two scalars (the row
      // stays where it is).
      auto scalars = b_->template allocate<float>(2);
      auto index = b_->template allocate<std::int32_t>(1);
      const vector_view<float, memory_space> max(scalars.view().data(), 1), lse(scalars.view().data() + 1, 1);
      b_->row_argmax(logits, index.view(), max);
      if (p_.stop) b_->row_logsumexp(logits, 1.0f, lse);
      token = b_->download(vector_view<const std::int32_t, memory_space>(index.view().data(), 1))[0];
      if (p_.stop) {
        const std::vector<float> m = b_->download(vector_view<const float, memory_space>(scalars.view().data(), 2));
        top1 = std::exp(static_cast<double>(m[0]) - static_cast<double>(m[1]));
      }
    } else {
      // Sampled: q = softmax(logits / T) goes to the verifier, so the row comes to the host anyway.
      auto probs = b_->template allocate<float>(logits.cols());
      b_->row_softmax(logits, temperature_, probs.matrix(1, logits.cols()));
      const std::vector<float> q = b_->download(probs.view());
      top1 = *std::max_element(q.begin(), q.end());
      const double u = rng_.uniform_double(static_cast<std::uint64_t>(drafted_count()));
      double acc = 0;
      token = static_cast<std::int32_t>(q.size() - 1);
      for (std::size_t v = 0; v < q.size(); ++v)
        if ((acc += q[v]) > u) {
          token = static_cast<std::int32_t>(v);
          break;
        }
      if (out_.draft_rows.empty()) out_.draft_rows.push_back(-1);
      out_.draft_rows.push_back(static_cast<index_t>(out_.draft_rows.size()) - 1);
      out_.probs.insert(out_.probs.end(), q.begin(), q.end());
    }
    const auto depth = static_cast<std::int32_t>(drafted_count() + 1);
    out_.tree.token.push_back(token);
    out_.tree.parent.push_back(depth - 1);
    out_.tree.depth.push_back(depth);
    out_.tree.score.push_back(0.0f);
    if (drafted_count() >= length_ || (p_.stop && p_.stop(top1, drafted_count()))) {
      request_ = {};
      return nullptr;
    }
    request_ = {{token}, {depth}, {0}, std::vector<std::uint8_t>(static_cast<std::size_t>(depth) + 1, 1), depth + 1, 1};
    return &request_;
  }
  drafted finish() {
    request_ = {};
    return out_;
  }
  void feedback(const draft_feedback& f) { detail::record_feedback(policy_, out_.tree, f); }
  policy::draft_length_policy& policy() noexcept { return policy_; }
  const policy::draft_length_policy& policy() const noexcept { return policy_; }

 private:
  index_t drafted_count() const noexcept { return out_.tree.size() - 1; }
  B* b_;
  parameters p_;
  policy::draft_length_policy policy_;
  drafted out_;
  draft_request request_;
  index_t length_ = 0;
  float temperature_ = 0.0f;
  philox_stream rng_ = {};
};

/// EAGLE-2's dynamic tree (eagle2_tree_builder, EAGLE's node order): the root row, then `depth`
/// expansions of `top_k` frontier rows each (parent_row: the frontier slot each continues, EAGLE's
/// `out_ids`; the root row for the first), reranked to `total_tokens` nodes. With `adaptive` the
/// policy picks the draft's node budget L per step and the tree is the best L + 1 nodes at depth
/// min(depth, L) (nothing drafted at L = 0); otherwise always the configured tree. EAGLE-3: the
/// config's `d2t` maps the draft vocabulary. Jakiro (`dual_last_step`): the forward two expansions
/// before the end returns two logits rows per frontier row (`logits_per_row` 2: left, then right, per
/// row) and both remaining levels come from it (eagle2_tree_builder::expand_dual): one forward fewer.
template <backend B>
class eagle2_drafter {
 public:
  using memory_space = typename B::memory_space;
  /// \throws invalid_argument on a configuration eagle2_tree_builder rejects.
  eagle2_drafter(B& b, dynamic_tree_config largest, bool adaptive = true, bool dual_last_step = false)
      : b_(&b), largest_(std::move(largest)), adaptive_(adaptive), dual_(dual_last_step),
        policy_(std::max<index_t>(0, largest_.total_tokens - 1)) {
    eagle2_tree_builder<B> check(b, largest_);  // validates the configuration once, up front
  }

  const draft_request* begin(const draft_context& context) {
    SPECDEC_EXPECTS(!context.committed.empty(), "specdec::eagle2_drafter::begin", "the context is empty; expected the root at least");
    root_ = context.root();
    tree_ = detail::root_only(root_);
    builder_.reset();
    const index_t length = adaptive_ ? policy_.choose() : largest_.total_tokens - 1;
    if (length == 0) return nullptr;
    dynamic_tree_config c = largest_;
    c.total_tokens = length + 1;
    c.depth = std::min(largest_.depth, length);
    depth_ = c.depth;
    builder_.emplace(*b_, std::move(c));
    request_ = {{root_}, {0}, {-1}, {1}, 1, 1};
    return &request_;
  }
  /// \param logits backend `[rows x V]` of the pending request (the root's `[1 x V]` first).
  /// \throws invalid_argument when no forward is pending, and as eagle2_tree_builder.
  const draft_request* advance(matrix_view<const float, memory_space> logits) {
    constexpr const char* where = "specdec::eagle2_drafter::advance";
    SPECDEC_EXPECTS(builder_.has_value() && request_.rows() > 0, where, "no draft forward is pending");
    SPECDEC_EXPECTS(logits.rows() == request_.logits_rows(), where, "logits has ", logits.rows(), " rows; the request needs ",
                    request_.logits_rows());
    const std::int32_t root[1] = {root_};
    draft_step step;
    if (request_.depth[0] == 0) {
      step = builder_->begin(logits, std::span(root, 1));
    } else if (request_.logits_per_row == 2) {  // row r's left and right rows are 2r and 2r + 1
      // The halves are views at twice the row stride: valid only for a well-formed, packed-row view.
      detail::check_view(where, "logits", logits, detail::contiguous_rows | detail::distinct_rows);
      const index_t k = request_.rows(), v = logits.cols(), stride = logits.stride(0);
      step = builder_->expand_dual(matrix_view<const float, memory_space>(logits.data(), k, v, 2 * stride, 1),
                                   matrix_view<const float, memory_space>(logits.data() + stride, k, v, 2 * stride, 1));
    } else {
      step = builder_->expand(logits);
    }
    if (builder_->expansions_complete()) {
      tree_ = builder_->finish_single().tree;
      request_ = {};
      return nullptr;
    }
    // The next frontier: k rows at depth step + 1, attending the root row and their ancestors.
    const index_t k = step.top_k, cols = 1 + step.mask_cols;
    const index_t per_row = dual_ && depth_ - step.step == 2 ? 2 : 1;
    request_ = {step.input_ids, std::vector<std::int32_t>(static_cast<std::size_t>(k), static_cast<std::int32_t>(step.step + 1)),
                {}, std::vector<std::uint8_t>(static_cast<std::size_t>(k * cols), 0), cols, per_row};
    for (index_t r = 0; r < k; ++r) {
      const std::int32_t slot = step.parent_slot[static_cast<std::size_t>(r)];
      request_.parent_row.push_back(slot < 0 ? 0 : slot);
      request_.mask[static_cast<std::size_t>(r * cols)] = 1;
      for (index_t j = 0; j < step.mask_cols; ++j)
        request_.mask[static_cast<std::size_t>(r * cols + 1 + j)] = step.draft_mask[static_cast<std::size_t>(r * step.mask_cols + j)];
    }
    return &request_;
  }
  drafted finish() {
    request_ = {};
    builder_.reset();
    return {tree_, {}, {}};
  }
  void feedback(const draft_feedback& f) { detail::record_feedback(policy_, tree_, f); }
  policy::draft_length_policy& policy() noexcept { return policy_; }
  const policy::draft_length_policy& policy() const noexcept { return policy_; }

 private:
  B* b_;
  dynamic_tree_config largest_;
  bool adaptive_, dual_;
  policy::draft_length_policy policy_;
  std::optional<eagle2_tree_builder<B>> builder_;
  index_t depth_ = 0;
  draft_request request_;
  draft_tree tree_;
  std::int32_t root_ = 0;
};

/// Medusa-style heads: one forward over the root row returns one logits row per head (head h
/// proposes the token h + 1 ahead), and the static tree `shape` (make_static_tree of a choice list)
/// takes, at a node of depth d and rank r, head d - 1's r-th most likely token (row_topk: ties to the
/// lower id). The policy picks how deep the tree is cut (nothing drafted at 0).
template <backend B>
class heads_drafter {
 public:
  using memory_space = typename B::memory_space;
  /// \param top_k the candidates per head the shape's ranks index (Medusa's 10).
  /// \throws invalid_argument when a rank of `shape` is not below top_k.
  heads_drafter(B& b, static_tree shape, index_t top_k, bool adaptive = true)
      : b_(&b), shape_(std::move(shape)), top_k_(top_k), adaptive_(adaptive), policy_(shape_.tree.max_depth()) {
    SPECDEC_EXPECTS(top_k >= 1 && top_k <= std::numeric_limits<std::int32_t>::max(), "specdec::heads_drafter", "top_k = ",
                    top_k, "; expected 1 <= top_k <= 2^31 - 1");
    for (const std::int32_t r : shape_.rank)
      SPECDEC_EXPECTS(r < top_k, "specdec::heads_drafter", "the shape has rank ", r, "; expected ranks below top_k = ", top_k);
  }

  const draft_request* begin(const draft_context& context) {
    SPECDEC_EXPECTS(!context.committed.empty(), "specdec::heads_drafter::begin", "the context is empty; expected the root at least");
    tree_ = detail::root_only(context.root());
    depth_ = adaptive_ ? policy_.choose() : shape_.tree.max_depth();
    if (depth_ == 0) return nullptr;
    request_ = {{context.root()}, {0}, {-1}, {1}, 1, shape_.tree.max_depth()};
    return &request_;
  }
  /// \param logits backend `[heads x V]`, heads = the shape's depth. \throws invalid_argument when no
  /// forward is pending, on shapes, top_k > V or bad logits (from the backend).
  const draft_request* advance(matrix_view<const float, memory_space> logits) {
    constexpr const char* where = "specdec::heads_drafter::advance";
    SPECDEC_EXPECTS(request_.rows() == 1, where, "no draft forward is pending");
    SPECDEC_EXPECTS(logits.rows() == request_.logits_rows(), where, "logits has ", logits.rows(), " rows; expected one per head (",
                    request_.logits_rows(), ")");
    const index_t heads = logits.rows();
    // k <= V before the [heads x k] buffers are allocated (row_topk checks it only after).
    SPECDEC_EXPECTS(top_k_ <= logits.cols(), where, "top_k = ", top_k_, "; expected at most V = ", logits.cols());
    auto values = b_->template allocate<float>(heads * top_k_);
    auto ids = b_->template allocate<std::int32_t>(heads * top_k_);
    b_->row_topk(logits, top_k_, values.matrix(heads, top_k_), ids.matrix(heads, top_k_));
    const std::vector<std::int32_t> top = b_->download(vector_view<const std::int32_t, memory_space>(ids.view().data(), heads * top_k_));
    draft_tree tree = shape_.tree;
    tree.token[0] = tree_.token[0];
    for (index_t i = 1; i < tree.size(); ++i)
      tree.token[static_cast<std::size_t>(i)] =
          top[static_cast<std::size_t>((tree.depth[static_cast<std::size_t>(i)] - 1) * top_k_ + shape_.rank[static_cast<std::size_t>(i)])];
    tree_ = cut_to_depth(tree, depth_);
    request_ = {};
    return nullptr;
  }
  drafted finish() { return {tree_, {}, {}}; }
  void feedback(const draft_feedback& f) { detail::record_feedback(policy_, tree_, f); }
  policy::draft_length_policy& policy() noexcept { return policy_; }
  const policy::draft_length_policy& policy() const noexcept { return policy_; }

 private:
  B* b_;
  static_tree shape_;
  index_t top_k_;
  bool adaptive_;
  policy::draft_length_policy policy_;
  draft_request request_;
  draft_tree tree_;
  index_t depth_ = 0;
};

/// SuffixDecoding: the draft suffix_cache::speculate gives for the request (its own tokens and the
/// cache's earlier responses; the engine keeps the cache: start_request, add_active_response of each
/// step's accepted tokens, stop_request), as a tree (suffix_draft_tree): its first nodes (the most
/// probable; parents come first), as many as the policy chooses for what the draft offers. The policy
/// learns per match context (suffix_match_context): the match length's bucket and whether the tree is
/// sure of its continuation. No model runs. Keep one drafter across requests (bind() moves it to the
/// next) so that its policy keeps what it learned; the cache is the engine's.
template <class Token = std::int32_t, class RequestId = std::uint64_t>
class suffix_drafter {
 public:
  using memory_space = host_space;
  struct parameters {
    suffix_options options = {};   ///< speculate's; max_spec_tokens and max_spec_factor bound what a draft offers
    index_t longest = 24;          ///< the most draft rows
    bool adaptive = true;          ///< false: the whole draft, up to `longest` rows
    bool by_match = true;          ///< false: one acceptance estimate for all matches
  };
  /// The policy's context for a draft (suffix_contexts of them): 2 x match_length_context(match length,
  /// a one-token match counted as two) + 1 when the empirical probability of its fourth token (its last
  /// when shorter) is at least 1/2: a short match into text that always went on the same way is accepted
  /// like a long one, and a long match into text that went on several ways is not.
  static constexpr index_t suffix_contexts = 2 * match_length_contexts;
  static index_t suffix_match_context(const suffix_draft<Token>& draft) {
    if (draft.token.empty()) return 0;
    const std::size_t probe = std::min<std::size_t>(draft.prob.size(), 4) - 1;
    return 2 * match_length_context(std::max<index_t>(draft.match_length, 2)) + (draft.prob[probe] >= 0.5f ? 1 : 0);
  }

  /// Drafts request `id` of `cache` (the engine's, outliving the drafter).
  /// \throws invalid_argument on longest outside the policy's range.
  suffix_drafter(const suffix_cache<Token, RequestId>& cache, RequestId id, parameters p = {})
      : cache_(&cache), id_(std::move(id)), p_(p), policy_(p.longest, p.by_match ? suffix_contexts : 1) {}
  /// Drafts request `id` of `cache` from the next begin() on; the policy is kept.
  void bind(const suffix_cache<Token, RequestId>& cache, RequestId id) {
    cache_ = &cache;
    id_ = std::move(id);
  }

  /// \throws invalid_argument on an empty context, a request the cache does not hold, and as speculate.
  const draft_request* begin(const draft_context& context) {
    SPECDEC_EXPECTS(!context.committed.empty(), "specdec::suffix_drafter::begin", "the context is empty; expected the root at least");
    suffix_draft<Token> found = cache_->speculate(id_, committed_as_tokens(context.committed), p_.options);
    match_ = found.token.empty() ? 0 : found.match_length;
    context_ = p_.by_match ? suffix_match_context(found) : 0;
    const index_t available = std::min(found.size(), policy_.longest());
    const auto length = static_cast<std::size_t>(p_.adaptive ? policy_.choose(context_, available) : available);
    found.token.resize(length);
    found.parent.resize(length);
    found.prob.resize(length);
    tree_ = suffix_draft_tree(context.root(), found);
    return nullptr;
  }
  drafted finish() { return {tree_, {}, {}}; }
  /// \throws invalid_argument on a path longer than the draft or times negative / not finite.
  void feedback(const draft_feedback& f) { detail::record_feedback(policy_, tree_, f, context_); }
  /// The policy; an engine may seed its target costs (target_forward_timed) from a calibration.
  policy::draft_length_policy& policy() noexcept { return policy_; }
  const policy::draft_length_policy& policy() const noexcept { return policy_; }
  /// The last begin()'s match length (0: no draft).
  index_t match_length() const noexcept { return match_; }

 private:
  // The context is int32 ids; a cache of another token type gets them converted (a per-step copy
  // only then).
  std::span<const Token> committed_as_tokens(std::span<const std::int32_t> committed) {
    if constexpr (std::is_same_v<Token, std::int32_t>) {
      return committed;
    } else {
      converted_.assign(committed.begin(), committed.end());
      return converted_;
    }
  }

  const suffix_cache<Token, RequestId>* cache_;
  RequestId id_;
  parameters p_;
  policy::draft_length_policy policy_;
  std::vector<Token> converted_;
  draft_tree tree_;
  index_t match_ = 0, context_ = 0;
};

}  // namespace specdec
