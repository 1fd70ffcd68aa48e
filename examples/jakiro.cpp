// SPDX-License-Identifier: Apache-2.0
// Jakiro MoE trees on the example engine: an EAGLE-style draft layer whose MLP is Jakiro's two-expert
// MoE (specdec::blocks::moe::draft_layer_forward) drafts an EAGLE-2 dynamic tree through
// specdec::eagle2_drafter; its penultimate forward yields the left (weighted experts) and right
// (contrastive) outputs, whose candidates eagle2_tree_builder::expand_dual decouples as Jakiro's
// topK_genrate does.
//
// Weights: examples/weights/jakiro_smollm2_135m.safetensors by default (or --weights FILE), trained for
// SmolLM2-135M-Instruct by tools/train/jakiro.py, in haiduo/Jakiro's names: `fc.{weight,bias}`,
// `layers.0.self_attn.{q,k,v,o}_proj.weight`, `layers.0.post_attention_layernorm.weight`,
// `layers.0.mlp_moe.gate.weight` [4 x E], `layers.0.mlp_moe.experts.{0,1}.{gate,up,down}_proj.weight`
// (intermediate E). The draft layer reads the target's embedding and LM head and the target's final
// hidden states (after its final norm) of the committed tokens, which it keeps in its own KV cache.
#include <specdec/blocks/eagle.hpp>
#include <specdec/blocks/moe.hpp>
#include <specdec/tree/drafters.hpp>
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
      : feature_drafter(model),
        tree_(backend_, std::move(tree), /*adaptive=*/false, /*dual_last_step=*/true) {
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
  engine::drafter_ref drafter() override { return tree_; }
  /// A new request: the draft layer's cache starts empty.
  void after_prefill() override {
    feature_drafter::after_prefill();
    context_rows_ = 0;
  }
  /// The root x_n is draft row n - 1, fed the target's feature f_{n-1}.
  bool ready(const engine::step_state& at) const override { return at.cached >= 1; }

  /// specdec::eagle2_drafter (with Jakiro's dual last step) asks for the rows. Draft row p fuses token
  /// x_{p+1} with the target feature f_p: the root is row n - 1, its frontiers follow at n, n + 1, ...
  engine::host_matrix run(const engine::step_state& at, const specdec::draft_request& r) override {
    const auto& c = model_->config();
    const index_t e = c.hidden, n = at.cached, rows = r.rows();
    std::vector<float> right;
    if (r.depth[0] == 0) {  // the root row, after the context rows the cache lacks, in one forward
      cache_->crop(context_rows_);  // the last draft's rows go
      const auto [tokens, positions] = engine::shifted_context(at.committed, context_rows_, n);
      const auto left =
          forward(tokens, engine::host_matrix(features().data() + context_rows_ * e, n - context_rows_, e), positions, {}, false, right);
      last_out_.assign(left.end() - e, left.end());
      context_rows_ = n;
    } else {  // a frontier: each row reads its parent's draft feature; the dual forward also the right output
      std::vector<float> parents(static_cast<std::size_t>(rows * e));
      for (index_t i = 0; i < rows; ++i) {
        const auto parent = r.parent_row[static_cast<std::size_t>(i)];
        std::copy(last_out_.begin() + parent * e, last_out_.begin() + (parent + 1) * e, parents.begin() + i * e);
      }
      const bool dual = r.logits_per_row == 2;
      last_out_ = forward(r.tokens, engine::host_matrix(parents.data(), rows, e), r.positions(n - 1), r.attention_mask(n - 1), dual, right);
      if (dual) {  // row i's left and right features, interleaved as the request asks
        std::vector<float> both;
        for (index_t i = 0; i < rows; ++i) {
          both.insert(both.end(), last_out_.begin() + i * e, last_out_.begin() + (i + 1) * e);
          both.insert(both.end(), right.begin() + i * e, right.begin() + (i + 1) * e);
        }
        head(both, 2 * rows, logits_);
        return engine::host_matrix(logits_.data(), 2 * rows, c.vocab);
      }
    }
    head(last_out_, rows, logits_);
    return engine::host_matrix(logits_.data(), rows, c.vocab);
  }

 private:
  /// One draft-layer forward: left output returned, right output into `right` when `dual`.
  std::vector<float> forward(std::span<const std::int32_t> tokens, engine::host_matrix features, std::span<const std::int64_t> positions,
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

  specdec::eagle2_drafter<specdec::eigen> tree_;
  specdec::io::safetensors file_;  // owns the weights the views below point into
  blocks::layer_config layer_;
  blocks::moe::config moe_;
  blocks::eagle::weights<space> weights_;
  blocks::moe::weights<space> moe_weights_;
  std::unique_ptr<blocks::kv_cache<specdec::eigen>> cache_;
  index_t context_rows_ = 0;              // the cache's rows of committed context (a draft's rows follow)
  std::vector<float> last_out_, logits_;  // the last request's draft features and logits
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
