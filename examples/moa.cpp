// SPDX-License-Identifier: Apache-2.0
// Mixture of Attentions drafting on the example engine: specdec's moa::drafter (Layer Self-Attention
// over the target's per-layer K/V, self-attention over token embeddings, cross-attention, the target's
// LM head) drafts a chain from the target's own KV cache, and the loop verifies it.
//
// The drafter's weights are random unless they were trained: there is no public MoA checkpoint for
// SmolLM2, so this example shows the wiring and measures what random weights give (next to nothing is
// accepted). Shapes follow the paper's layout at SmolLM2's width: the LSA layer is E_kv = 2 x 192 = 384
// wide; the paper ties its heads to the target's head count (9), which does not divide 384, so it uses
// 6 heads of 64 (a documented deviation); self- and cross-attention are 576 wide with 9 heads of 64.
#include <specdec/blocks/moa.hpp>

#include "engine/example_main.hpp"
#include "engine/random_weights.hpp"

namespace {

using engine::index_t;
namespace blocks = specdec::blocks;

/// Random weights for a MoA drafter in the paper's layout at the target's width.
class random_moa {
 public:
  random_moa(const engine::llama_config& target, std::uint32_t seed) : random_(seed) {
    const index_t e = target.hidden, kv = target.kv_heads * target.head_dim;
    config_.layer_self_attention = {{2 * kv, 6, 3, 2 * kv / 6, target.rope_theta, true}, 2 * e, target.rms_eps, true};
    config_.self_attention = {{e, target.heads, target.kv_heads, target.head_dim, target.rope_theta, true}, 2 * e, target.rms_eps, true};
    config_.cross_attention = config_.self_attention;
    config_.target_layers = target.layers;
    config_.target_head_dim = target.head_dim;
    weights_.layer_self_attention = random_.layer(config_.layer_self_attention);
    weights_.ekv2e = random_.linear(e, 2 * kv, true);
    weights_.self_attention = random_.layer(config_.self_attention);
    weights_.cross_attention = random_.layer(config_.cross_attention);
    weights_.validate(config_);
  }
  const blocks::moa::config& config() const { return config_; }
  const blocks::moa::weights<specdec::host_space>& weights() const { return weights_; }

 private:
  engine::random_weights random_;
  blocks::moa::config config_;
  blocks::moa::weights<specdec::host_space> weights_;
};

/// Drafts a chain of `length` tokens with moa::drafter, greedy from its logits (deterministic nodes).
class moa_chain_drafter : public engine::drafter {
 public:
  moa_chain_drafter(const engine::llama_model& model, index_t length)
      : model_(&model), weights_(model.config(), 11), drafter_(backend_, weights_.config(), weights_.weights(), 4096),
        length_(length) {}
  std::string name() const override { return "moa"; }

  engine::draft propose(engine::draft_context& ctx) override {
    const auto& c = model_->config();
    const index_t n = ctx.cached, e = c.hidden;
    // 1. The target's K/V of every newly verified token go into the cross-attention stream.
    std::vector<specdec::matrix_view<const float>> keys, values;
    for (index_t l = 0; l < c.layers; ++l) {
      keys.push_back(ctx.session.cache(l).keys());
      values.push_back(ctx.session.cache(l).values());
    }
    drafter_.add_verified(keys, values, drafter_.verified(), n - drafter_.verified());
    // 2. Self-attention rows stay valid for the committed prefix they were computed on.
    index_t common = 0;
    while (common < static_cast<index_t>(fed_.size()) && common <= n && fed_[static_cast<std::size_t>(common)] == ctx.sequence[static_cast<std::size_t>(common)])
      ++common;
    drafter_.crop(common);
    fed_.resize(static_cast<std::size_t>(common));
    std::vector<std::int32_t> feed(ctx.sequence.begin() + common, ctx.sequence.begin() + n + 1);
    std::vector<std::int32_t> tokens = {ctx.sequence.back()}, parents = {-1};
    std::vector<float> feature(static_cast<std::size_t>(e)), logits(static_cast<std::size_t>(c.vocab));
    for (index_t i = 0; i < length_; ++i) {
      const auto rows = static_cast<index_t>(feed.size());
      std::vector<float> x(static_cast<std::size_t>(rows * e));
      backend_.gather_rows(model_->embedding(), specdec::vector_view<const std::int32_t>(feed.data(), rows),
                           specdec::matrix_view<float>(x.data(), rows, e));
      std::vector<std::int64_t> positions(static_cast<std::size_t>(rows));
      for (index_t r = 0; r < rows; ++r) positions[static_cast<std::size_t>(r)] = static_cast<std::int64_t>(fed_.size()) + r;
      drafter_.forward(specdec::matrix_view<float>(x.data(), rows, e), specdec::vector_view<const std::int64_t>(positions.data(), rows),
                       specdec::matrix_view<float>(feature.data(), 1, e));
      fed_.insert(fed_.end(), feed.begin(), feed.end());
      // The target's LM head (tied embedding) over the drafter's feature, as MoA with TLI = 0.
      backend_.gemm(specdec::matrix_view<const float>(feature.data(), 1, e), specdec::transpose::no, model_->lm_head(),
                    specdec::transpose::yes, specdec::matrix_view<float>(logits.data(), 1, c.vocab));
      ++ctx.stats.draft_calls;
      const auto next = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      tokens.push_back(next);
      parents.push_back(static_cast<std::int32_t>(tokens.size()) - 2);
      feed = {next};
    }
    return {specdec::make_tree(std::move(tokens), parents), {}, {}};
  }

 private:
  const engine::llama_model* model_;
  specdec::eigen backend_;
  random_moa weights_;
  blocks::moa::drafter<specdec::eigen> drafter_;
  index_t length_;
  std::vector<std::int32_t> fed_;  // tokens whose self-attention rows the drafter holds, in order
};

}  // namespace

int main(int argc, char** argv) {
  return engine::example_main(argc, argv, "Mixture of Attentions drafter (RANDOM weights: no trained checkpoint; expect ~0 accepted)",
                              [](const engine::llama_model& model) { return std::make_unique<moa_chain_drafter>(model, 3); });
}
