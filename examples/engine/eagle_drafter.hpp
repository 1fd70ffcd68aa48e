// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief A trained EAGLE draft layer drafting EAGLE-2 dynamic trees (examples/eagle.cpp and the demo's
/// `eagle2` row). The layer (specdec::blocks::eagle) fuses each token's embedding with the target's
/// final hidden state of the token before it and runs one decoder layer over its own KV cache; a draft
/// LM head over a reduced vocabulary (EAGLE-3: `d2t` maps draft ids to target ids) gives the draft
/// logits, and specdec::eagle2_tree_builder grows the tree from them. With `adaptive`, the tree's size
/// is chosen per step by specdec::policy::draft_length_policy (a tree of L + 1 nodes, at most as deep
/// as the configured one, priced as a chain of L drafts; L = 0 verifies the root alone and runs no
/// draft forward): on a CPU a 10-node verification costs several single ones, and the policy drafts
/// only as much as the measured acceptance pays for.
///
/// Checkpoint layout (tools/train/eagle.py; fp16, Hugging Face Llama names, rotate-half Q/K):
/// `fc.weight` [E x 2E], `fc.bias` [E], `layers.0.self_attn.{q,k,v,o}_proj.weight`,
/// `layers.0.post_attention_layernorm.weight` [E], `layers.0.mlp.{gate,up,down}_proj.weight` (the
/// target's shapes), `lm_head.weight` [V' x E], `d2t` [V'] int64 with 0 <= i + d2t[i] < V.
#pragma once

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <specdec/blocks/eagle.hpp>
#include <specdec/policy/draft_length.hpp>
#include <specdec/tree/eagle2.hpp>

#include "checkpoint.hpp"
#include "feature_drafter.hpp"

namespace engine {

class eagle_drafter : public feature_drafter {
 public:
  /// \throws specdec::invalid_argument when `weights_path` does not hold the layout above for this
  /// model (any name, shape or dtype), or d2t maps outside the target's vocabulary.
  eagle_drafter(const llama_model& model, specdec::dynamic_tree_config tree, const std::string& weights_path, bool adaptive = false)
      : feature_drafter(model), tree_(std::move(tree)), file_(specdec::io::safetensors::open(weights_path)),
        adaptive_(adaptive), policy_(tree_.total_tokens - 1) {
    const auto& c = model.config();
    const index_t e = c.hidden, kv = c.kv_heads * c.head_dim;
    const index_t draft_vocab = file_.contains("d2t") && !file_.at("d2t").shape.empty() ? file_.at("d2t").shape[0] : 0;
    layer_ = {{e, c.heads, c.kv_heads, c.head_dim, c.rope_theta, true}, c.intermediate, c.rms_eps, false};
    auto expected = layer_layout("layers.0.", layer_);
    expected.insert(expected.end(), {{"fc.weight", {e, 2 * e}}, {"fc.bias", {e}}, {"lm_head.weight", {draft_vocab, e}}, {"d2t", {draft_vocab}, "I64"}});
    check_layout(file_, weights_path, expected);
    SPECDEC_EXPECTS(draft_vocab >= tree_.top_k && draft_vocab <= c.vocab, "engine::eagle_drafter", weights_path, ": a draft vocabulary of ",
                    draft_vocab, "; expected top_k (", tree_.top_k, ") <= V' <= ", c.vocab);
    const auto d2t = file_.integers("d2t");
    for (index_t i = 0; i < draft_vocab; ++i) {
      // -i <= d2t[i] < V - i: compared by subtraction, as a file's offset may be near INT64_MAX.
      const std::int64_t offset = d2t[static_cast<std::size_t>(i)];
      if (offset < -i || offset >= c.vocab - i)
        specdec::detail::throw_invalid_argument(
            "engine::eagle_drafter", weights_path, ": d2t[", i, "] = ", offset, " maps draft id ", i, " to ",
            offset > std::numeric_limits<std::int64_t>::max() - i ? std::string("an id beyond int64") : std::to_string(i + offset),
            "; expected a target id in [0, ", c.vocab, ")");
      tree_.d2t.push_back(static_cast<std::int32_t>(offset));  // |offset| < V <= 2^31 - 1 (llama_model::load)
    }
    weights_.embed = model.embedding();
    weights_.fc = file_.linear("fc");
    weights_.layer = file_.layer("layers.0.", false);
    weights_.validate(layer_, c.vocab);
    head_ = file_.matrix("lm_head.weight");
    cache_ = std::make_unique<specdec::blocks::kv_cache<specdec::eigen>>(backend_, 8192, kv);
  }
  std::string name() const override { return "eagle"; }
  /// A new request: the draft layer's cache starts empty (the policy carries over, as in an engine).
  void after_prefill(llama_session& session) override {
    feature_drafter::after_prefill(session);
    cache_->crop(0);
  }
  void verified(index_t accepted, index_t drafted) override { policy_.verified(accepted, drafted); }
  void target_forward_timed(index_t rows, double seconds) override { policy_.target_forward_timed(rows, seconds); }
  const specdec::policy::draft_length_policy& policy() const { return policy_; }

  draft propose(draft_context& ctx) override {
    const index_t length = adaptive_ ? policy_.choose() : tree_.total_tokens - 1;
    if (length == 0) return {specdec::make_tree({ctx.sequence.back()}, {-1}), {}, {}};
    specdec::dynamic_tree_config tree = tree_;
    tree.total_tokens = length + 1;
    tree.depth = std::min(tree_.depth, length);
    return grow(ctx, tree, length);
  }

 private:
  /// The tree for a draft of `length` nodes. Reports the time of its expansions per node to the policy:
  /// the draft rows of newly committed tokens are computed whether or not the step drafts (one per
  /// token, and a whole prompt on a request's first step), so they are not a draft token's price.
  draft grow(draft_context& ctx, const specdec::dynamic_tree_config& tree, index_t length) {
    const index_t e = model_->config().hidden, n = ctx.cached, k = tree.top_k;
    // 1. Draft rows for the committed context: row p fuses token x_{p+1} with the target feature f_p
    //    (rows of earlier steps stay cached; the last one, p = n - 1, carries the root).
    cache_->crop(std::min(cache_->size(), n));
    const index_t first = cache_->size();
    if (n - first < 1) return {specdec::make_tree({ctx.sequence.back()}, {-1}), {}, {}};
    std::vector<std::int32_t> tokens(ctx.sequence.begin() + first + 1, ctx.sequence.begin() + n + 1);
    std::vector<std::int64_t> positions(static_cast<std::size_t>(n - first));
    for (index_t p = first; p < n; ++p) positions[static_cast<std::size_t>(p - first)] = p;
    const auto context = run(tokens, host_matrix(features().data() + first * e, n - first, e), positions, {});
    ++ctx.stats.draft_calls;
    const auto start = std::chrono::steady_clock::now();
    std::vector<float> root_feature(context.end() - e, context.end()), logits;
    head(root_feature, 1, logits);
    specdec::eagle2_tree_builder<specdec::eigen> builder(backend_, tree);
    const std::int32_t root[1] = {ctx.sequence.back()};
    auto step = builder.begin(host_matrix(logits.data(), 1, head_.rows()), std::span(root, 1));
    // 2. Each expansion: the frontier's tokens (target ids) with their parents' draft features.
    std::vector<float> parent_features;
    for (index_t r = 0; r < k; ++r) parent_features.insert(parent_features.end(), root_feature.begin(), root_feature.end());
    for (index_t s = 0; s < tree.depth; ++s) {
      const auto out = run(step.input_ids, host_matrix(parent_features.data(), k, e), step.positions(n - 1), step.attention_mask(n));
      ++ctx.stats.draft_calls;
      head(out, k, logits);
      step = builder.expand(host_matrix(logits.data(), k, head_.rows()));
      parent_features.clear();
      for (index_t r = 0; r < k; ++r) {
        const auto slot = step.parent_slot[static_cast<std::size_t>(r)];
        parent_features.insert(parent_features.end(), out.begin() + slot * e, out.begin() + (slot + 1) * e);
      }
    }
    cache_->crop(n);
    auto out = builder.finish_single().tree;
    policy_.draft_token_timed(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
                              static_cast<double>(length));
    return {std::move(out), {}, {}};
  }

  /// One draft-layer forward over `tokens` at `positions` (causal over the cache, or the tree mask
  /// `allowed` `[T x (cached + T)]`), its output features `[T x E]`.
  std::vector<float> run(std::span<const std::int32_t> tokens, host_matrix parent, std::span<const std::int64_t> positions,
                         std::span<const std::uint8_t> allowed) {
    using space = specdec::host_space;
    const index_t t = static_cast<index_t>(tokens.size()), e = model_->config().hidden;
    std::vector<float> out(static_cast<std::size_t>(t * e));
    const auto mask = allowed.empty() ? specdec::blocks::attention_mask<space>::causal()
                                      : specdec::blocks::attention_mask<space>::from(specdec::matrix_view<const std::uint8_t>(
                                            allowed.data(), t, static_cast<index_t>(allowed.size()) / t));
    specdec::blocks::eagle::forward(backend_, layer_, weights_, specdec::vector_view<const std::int32_t>(tokens.data(), t), parent,
                                    specdec::vector_view<const std::int64_t>(positions.data(), t), cache_.get(), mask,
                                    specdec::matrix_view<float>(out.data(), t, e));
    return out;
  }
  /// Draft logits `[rows x V']` over the reduced vocabulary.
  void head(const std::vector<float>& feature, index_t rows, std::vector<float>& logits) {
    logits.resize(static_cast<std::size_t>(rows * head_.rows()));
    backend_.gemm(host_matrix(feature.data(), rows, model_->config().hidden), specdec::transpose::no, head_, specdec::transpose::yes,
                  specdec::matrix_view<float>(logits.data(), rows, head_.rows()));
  }

  specdec::dynamic_tree_config tree_;  // the largest tree; adaptive steps draw smaller ones
  specdec::io::safetensors file_;      // owns the weights the views below point into
  bool adaptive_;
  specdec::policy::draft_length_policy policy_;
  specdec::blocks::layer_config layer_;
  specdec::blocks::eagle::weights<specdec::host_space> weights_;
  host_matrix head_;
  std::unique_ptr<specdec::blocks::kv_cache<specdec::eigen>> cache_;
};

}  // namespace engine
