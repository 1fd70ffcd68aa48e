// SPDX-License-Identifier: Apache-2.0
// Jakiro MoE trees on the example engine: an EAGLE-style draft layer whose MLP is Jakiro's two-expert
// MoE (specdec::blocks::moe::draft_layer_forward) drafts an EAGLE-2 dynamic tree; its penultimate
// forward yields the left (weighted experts) and right (contrastive) outputs, whose candidates
// eagle2_tree_builder::expand_dual decouples as Jakiro's topK_genrate does.
//
// Weights: examples/weights/jakiro_smollm2_135m.safetensors by default (or --weights FILE), trained for
// SmolLM2-135M-Instruct by tools/train/jakiro.py, in haiduo/Jakiro's names: `fc.{weight,bias}`,
// `layers.0.self_attn.{q,k,v,o}_proj.weight`, `layers.0.post_attention_layernorm.weight`,
// `layers.0.mlp_moe.gate.weight` [4 x E], `layers.0.mlp_moe.experts.{0,1}.{gate,up,down}_proj.weight`
// (intermediate E). The draft layer reads the target's embedding and LM head and the target's final
// hidden states (after its final norm) of the committed tokens, which it keeps in its own KV cache.
#include <specdec/blocks/eagle.hpp>
#include <specdec/blocks/moe.hpp>
#include <specdec/tree/eagle2.hpp>

#include "engine/checkpoint.hpp"
#include "engine/example_main.hpp"
#include "engine/feature_drafter.hpp"

namespace {

using engine::index_t;
namespace blocks = specdec::blocks;
using space = specdec::host_space;

class jakiro_drafter : public engine::feature_drafter {
 public:
  /// \throws specdec::invalid_argument when `weights_path` does not hold exactly the layout above
  /// (names, shapes, fp16) for this model.
  jakiro_drafter(const engine::llama_model& model, specdec::dynamic_tree_config tree, const std::string& weights_path)
      : feature_drafter(model), tree_(tree) {
    const auto& c = model.config();
    const index_t e = c.hidden;
    layer_ = {{e, c.heads, c.kv_heads, c.head_dim, c.rope_theta, true}, e, c.rms_eps, false};
    auto expected = engine::layer_layout("layers.0.", layer_, false);  // the MLP is the MoE below
    expected.insert(expected.end(), {{"fc.weight", {e, 2 * e}}, {"fc.bias", {e}}, {"layers.0.mlp_moe.gate.weight", {4, e}}});
    for (const char* i : {"0", "1"})
      for (const auto& [proj, shape] : {std::pair<const char*, std::vector<index_t>>{"gate_proj", {e, e}}, {"up_proj", {e, e}}, {"down_proj", {e, e}}})
        expected.push_back({std::string("layers.0.mlp_moe.experts.") + i + "." + proj + ".weight", shape});
    file_ = engine::load_checkpoint(weights_path, expected);
    moe_ = {e, 2, e, blocks::moe::routing::jakiro_two_experts};
    weights_.embed = model.embedding();
    weights_.fc = file_.linear("fc");
    weights_.layer = file_.layer("layers.0.", false, false);
    weights_.validate(layer_, c.vocab, false);
    moe_weights_.gate = file_.linear("layers.0.mlp_moe.gate");
    for (const char* i : {"0", "1"}) {
      const std::string p = std::string("layers.0.mlp_moe.experts.") + i + ".";
      moe_weights_.experts.push_back({file_.linear(p + "gate_proj"), file_.linear(p + "up_proj"), file_.linear(p + "down_proj")});
    }
    moe_weights_.validate(moe_, "layers.0.mlp_moe.");
    cache_ = std::make_unique<blocks::kv_cache<specdec::eigen>>(backend_, 8192, c.kv_heads * c.head_dim);
  }
  std::string name() const override { return "jakiro"; }

  engine::draft propose(engine::draft_context& ctx) override {
    const auto& c = model_->config();
    const index_t e = c.hidden, n = ctx.cached, k = tree_.top_k;
    // 1. Draft rows for the committed context: row p fuses token x_{p+1} with the target feature f_p
    //    (rows computed in earlier steps stay; the last one, p = n - 1, carries the root).
    cache_->crop(std::min(cache_->size(), n));
    std::vector<float> out;
    const index_t first = cache_->size();
    if (n - first < 1) return {specdec::make_tree({ctx.sequence.back()}, {-1}), {}, {}};
    std::vector<std::int32_t> tokens(ctx.sequence.begin() + first + 1, ctx.sequence.begin() + n + 1);
    std::vector<std::int64_t> positions(static_cast<std::size_t>(n - first));
    for (index_t p = first; p < n; ++p) positions[static_cast<std::size_t>(p - first)] = p;
    const auto left = run(tokens, engine::host_matrix(features().data() + first * e, n - first, e), positions, {}, false, out);
    ++ctx.stats.draft_calls;
    std::vector<float> root_feature(left.end() - e, left.end()), logits;
    head(root_feature, 1, logits);
    specdec::eagle2_tree_builder<specdec::eigen> builder(backend_, tree_);
    const std::int32_t root[1] = {ctx.sequence.back()};
    auto step = builder.begin(engine::host_matrix(logits.data(), 1, c.vocab), std::span(root, 1));
    // Each frontier row reads its parent's draft feature.
    std::vector<float> parent_features;
    for (index_t r = 0; r < k; ++r) parent_features.insert(parent_features.end(), root_feature.begin(), root_feature.end());
    for (index_t s = 0; s < tree_.depth; ++s) {
      const bool dual = s + 2 == tree_.depth;
      // The draft's cache holds n rows (features shifted by one: the root's draft position is n - 1).
      std::vector<float> right;
      const auto features = run(step.input_ids, engine::host_matrix(parent_features.data(), k, e), step.positions(n - 1),
                                step.attention_mask(n), dual, right);
      ++ctx.stats.draft_calls;
      std::vector<float> left_logits, right_logits;
      head(features, k, left_logits);
      if (dual) {
        head(right, k, right_logits);
        step = builder.expand_dual(engine::host_matrix(left_logits.data(), k, c.vocab), engine::host_matrix(right_logits.data(), k, c.vocab));
        break;
      }
      step = builder.expand(engine::host_matrix(left_logits.data(), k, c.vocab));
      parent_features.clear();
      for (index_t r = 0; r < k; ++r) {
        const auto slot = step.parent_slot[static_cast<std::size_t>(r)];
        parent_features.insert(parent_features.end(), features.begin() + slot * e, features.begin() + (slot + 1) * e);
      }
    }
    cache_->crop(n);
    return {builder.finish_single().tree, {}, {}};
  }

 private:
  /// One draft-layer forward: left output returned, right output into `right` when `dual`.
  std::vector<float> run(std::span<const std::int32_t> tokens, engine::host_matrix features, std::span<const std::int64_t> positions,
                         std::span<const std::uint8_t> allowed, bool dual, std::vector<float>& right) {
    const index_t t = static_cast<index_t>(tokens.size()), e = model_->config().hidden;
    std::vector<float> left(static_cast<std::size_t>(t * e));
    if (dual) right.assign(static_cast<std::size_t>(t * e), 0.0f);
    const auto mask = allowed.empty() ? blocks::attention_mask<space>::causal()
                                      : blocks::attention_mask<space>::from(specdec::matrix_view<const std::uint8_t>(
                                            allowed.data(), t, static_cast<index_t>(allowed.size()) / t));
    blocks::moe::draft_layer_forward(backend_, layer_, weights_, moe_, moe_weights_, specdec::vector_view<const std::int32_t>(tokens.data(), t),
                                     features, specdec::vector_view<const std::int64_t>(positions.data(), t), cache_.get(), mask,
                                     specdec::matrix_view<float>(left.data(), t, e),
                                     dual ? specdec::matrix_view<float>(right.data(), t, e) : specdec::matrix_view<float>());
    return left;
  }
  void head(const std::vector<float>& features, index_t rows, std::vector<float>& logits) {
    const auto& c = model_->config();
    logits.resize(static_cast<std::size_t>(rows * c.vocab));
    backend_.gemm(engine::host_matrix(features.data(), rows, c.hidden), specdec::transpose::no, model_->lm_head(), specdec::transpose::yes,
                  specdec::matrix_view<float>(logits.data(), rows, c.vocab));
  }

  specdec::dynamic_tree_config tree_;
  specdec::io::safetensors file_;  // owns the weights the views below point into
  blocks::layer_config layer_;
  blocks::moe::config moe_;
  blocks::eagle::weights<space> weights_;
  blocks::moe::weights<space> moe_weights_;
  std::unique_ptr<blocks::kv_cache<specdec::eigen>> cache_;
};

}  // namespace

int main(int argc, char** argv) {
  return engine::example_main(argc, argv, "Jakiro MoE draft layer on EAGLE-2 trees with decoupled experts (tools/train/jakiro.py)",
                              engine::default_weights("jakiro_smollm2_135m.safetensors"),
                              [&](const engine::llama_model& model, const std::string& weights) {
                                return std::make_unique<jakiro_drafter>(
                                    model, engine::tree_option(argc, argv, specdec::dynamic_tree_config{2, 2, 6, specdec::tree_score::log_probability, {}}), weights);
                              });
}
