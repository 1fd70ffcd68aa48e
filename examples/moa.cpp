// SPDX-License-Identifier: Apache-2.0
// Mixture of Attentions drafting on the example engine: specdec's moa::drafter (Layer Self-Attention
// over the target's per-layer K/V, self-attention over token embeddings, cross-attention, the target's
// LM head) drafts a chain from the target's own KV cache, and the loop verifies it.
//
// Weights: examples/weights/moa_smollm2_135m.safetensors by default (or --weights FILE), trained for
// SmolLM2-135M-Instruct by tools/train/moa.py, in HEBO's module names with Hugging Face Llama names
// inside each layer: `layer_self_attention.*`, `Ekv2E.{weight,bias}`, `self_attention.*`,
// `cross_attention.*`. Shapes at SmolLM2's width: the LSA layer is E_kv = 2 x 192 = 384 wide with
// intermediate 576 (1.5 x, the paper's ratio); the paper ties its heads to the target's head count (9),
// which does not divide 384, so it uses 6 heads of 64 and 3 kv heads (a documented deviation); the
// self-attention layer has the target's own shape (it starts training as the target's layer 0);
// cross-attention is 576 wide with 9 heads of 64 and intermediate 864 (1.5 E).
#include <specdec/blocks/moa.hpp>

#include "engine/checkpoint.hpp"
#include "engine/example_main.hpp"

namespace {

using engine::index_t;
namespace blocks = specdec::blocks;

/// A trained MoA drafter's checkpoint for the target, checked and viewed as moa::weights.
class trained_moa {
 public:
  /// \throws specdec::invalid_argument when `path` does not hold exactly the layout above (names,
  /// shapes, fp16) for this target.
  trained_moa(const engine::llama_config& target, const std::string& path) {
    const index_t e = target.hidden, kv = target.kv_heads * target.head_dim;
    config_.layer_self_attention = {{2 * kv, 6, 3, 2 * kv / 6, target.rope_theta, true}, 3 * kv, target.rms_eps, true};
    config_.self_attention = {{e, target.heads, target.kv_heads, target.head_dim, target.rope_theta, true}, target.intermediate, target.rms_eps, true};
    config_.cross_attention = {{e, target.heads, target.kv_heads, target.head_dim, target.rope_theta, true}, 3 * e / 2, target.rms_eps, true};
    config_.target_layers = target.layers;
    config_.target_head_dim = target.head_dim;
    auto expected = engine::layer_layout("layer_self_attention.", config_.layer_self_attention);
    for (const auto& [prefix, layer] : {std::pair{"self_attention.", &config_.self_attention}, {"cross_attention.", &config_.cross_attention}}) {
      const auto l = engine::layer_layout(prefix, *layer);
      expected.insert(expected.end(), l.begin(), l.end());
    }
    expected.insert(expected.end(), {{"Ekv2E.weight", {e, 2 * kv}}, {"Ekv2E.bias", {e}}});
    file_ = engine::load_checkpoint(path, expected);
    weights_.layer_self_attention = file_.layer("layer_self_attention.");
    weights_.ekv2e = file_.linear("Ekv2E");
    weights_.self_attention = file_.layer("self_attention.");
    weights_.cross_attention = file_.layer("cross_attention.");
    weights_.validate(config_);
  }
  const blocks::moa::config& config() const { return config_; }
  const blocks::moa::weights<specdec::host_space>& weights() const { return weights_; }

 private:
  specdec::io::safetensors file_;
  blocks::moa::config config_;
  blocks::moa::weights<specdec::host_space> weights_;
};

/// Drafts a chain of `length` tokens with moa::drafter, greedy from its logits (deterministic nodes).
class moa_chain_drafter : public engine::drafter {
 public:
  moa_chain_drafter(const engine::llama_model& model, index_t length, const std::string& weights_path)
      : model_(&model), weights_(model.config(), weights_path), drafter_(backend_, weights_.config(), weights_.weights(), 4096),
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
  trained_moa weights_;
  blocks::moa::drafter<specdec::eigen> drafter_;
  index_t length_;
  std::vector<std::int32_t> fed_;  // tokens whose self-attention rows the drafter holds, in order
};

}  // namespace

int main(int argc, char** argv) {
  return engine::example_main(argc, argv, "Mixture of Attentions drafter on a chain (trained by tools/train/moa.py)",
                              engine::default_weights("moa_smollm2_135m.safetensors"),
                              [](const engine::llama_model& model, const std::string& weights) {
                                return std::make_unique<moa_chain_drafter>(model, 3, weights);
                              });
}
