// SPDX-License-Identifier: Apache-2.0
// Mixture of Attentions drafting on the example engine: specdec's moa::drafter (Layer Self-Attention
// over the target's per-layer K/V, self-attention over token embeddings, cross-attention, the target's
// LM head) drafts EAGLE-2 dynamic trees from the target's own KV cache (default k 3, depth 4, 10
// nodes, as examples/eagle.cpp; `--tree K,DEPTH,NODES` to change, `--tree 1,3,4` a chain of 3), and
// the loop verifies them.
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
#include <specdec/tree/drafters.hpp>
#include <specdec/tree/eagle2.hpp>

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

/// Drafts EAGLE-2 dynamic trees with moa::drafter, as the MoA paper does: each expansion runs the
/// frontier's k tokens through self-attention under the tree mask (behind the committed tokens' rows)
/// and cross-attention over the whole verified stream, and the target's LM head scores them. With
/// k = 1 the tree is a greedy chain (tools/train/parity.py replays both).
class moa_tree_drafter : public engine::method {
 public:
  moa_tree_drafter(const engine::llama_model& model, specdec::dynamic_tree_config tree, const std::string& weights_path)
      : model_(&model), tree_(backend_, std::move(tree), /*adaptive=*/false),
        weights_(model.config(), weights_path), drafter_(backend_, weights_.config(), weights_.weights(), 4096) {}
  std::string name() const override { return "moa"; }
  engine::drafter_ref drafter() override { return tree_; }

  /// specdec::eagle2_drafter asks for the rows: the root at position n, its frontiers at n + 1, ...
  engine::host_matrix run(const engine::step_state& at, const specdec::draft_request& r) override {
    const auto& c = model_->config();
    const index_t n = at.cached, e = c.hidden, rows = r.rows();
    features_.resize(static_cast<std::size_t>(rows * e));
    if (r.depth[0] == 0) {
      // 1. The target's K/V of every newly verified token go into the cross-attention stream.
      std::vector<specdec::matrix_view<const float>> keys, values;
      for (index_t l = 0; l < c.layers; ++l) {
        keys.push_back(at.session.cache(l).keys());
        values.push_back(at.session.cache(l).values());
      }
      drafter_.add_verified(keys, values, drafter_.verified(), n - drafter_.verified());
      // 2. Self-attention rows stay valid for the committed prefix they were computed on (the last
      //    step's root row, and a whole prompt on a request's first step; the last draft's rows go);
      //    the tokens committed since then, the root last, are fed now.
      index_t common = 0;
      while (common < static_cast<index_t>(fed_.size()) && common <= n &&
             fed_[static_cast<std::size_t>(common)] == at.committed[static_cast<std::size_t>(common)])
        ++common;
      drafter_.crop(common);
      fed_.resize(static_cast<std::size_t>(common));
      std::vector<std::int32_t> feed(at.committed.begin() + common, at.committed.begin() + n + 1);
      std::vector<std::int64_t> positions(feed.size());
      for (std::size_t i = 0; i < feed.size(); ++i) positions[i] = common + static_cast<std::int64_t>(i);
      forward(feed, positions, {}, 1, features_);
      fed_.insert(fed_.end(), feed.begin(), feed.end());
    } else {
      // 3. A frontier: its tokens at the root's position + depth, attending to the n committed rows,
      //    the root and their tree ancestors.
      forward(r.tokens, r.positions(n), r.attention_mask(n), rows, features_);
    }
    head(features_, rows, logits_);
    return engine::host_matrix(logits_.data(), rows, c.vocab);
  }

 private:
  /// moa::drafter over `tokens` at `positions` (causal, or the tree mask `allowed` `[T x (cached + T)]`):
  /// the features of its last `q` rows into `features` `[q x E]`.
  void forward(std::span<const std::int32_t> tokens, std::span<const std::int64_t> positions, std::span<const std::uint8_t> allowed, index_t q,
               std::vector<float>& features) {
    using space = specdec::host_space;
    const index_t t = static_cast<index_t>(tokens.size()), e = model_->config().hidden;
    std::vector<float> x(static_cast<std::size_t>(t * e));
    backend_.gather_rows(model_->embedding(), specdec::vector_view<const std::int32_t>(tokens.data(), t), specdec::matrix_view<float>(x.data(), t, e));
    const auto mask = allowed.empty() ? blocks::attention_mask<space>::causal()
                                      : blocks::attention_mask<space>::from(specdec::matrix_view<const std::uint8_t>(
                                            allowed.data(), t, static_cast<index_t>(allowed.size()) / t));
    drafter_.forward(specdec::matrix_view<float>(x.data(), t, e), specdec::vector_view<const std::int64_t>(positions.data(), t),
                     specdec::matrix_view<float>(features.data(), q, e), mask);
  }
  /// The target's LM head (tied embedding) over the drafter's features `[rows x E]`, as MoA with TLI = 0.
  void head(const std::vector<float>& features, index_t rows, std::vector<float>& logits) {
    const auto& c = model_->config();
    logits.resize(static_cast<std::size_t>(rows * c.vocab));
    backend_.gemm(engine::host_matrix(features.data(), rows, c.hidden), specdec::transpose::no, model_->lm_head(), specdec::transpose::yes,
                  specdec::matrix_view<float>(logits.data(), rows, c.vocab));
  }

  const engine::llama_model* model_;
  specdec::eigen backend_;
  specdec::eagle2_drafter<specdec::eigen> tree_;
  trained_moa weights_;
  blocks::moa::drafter<specdec::eigen> drafter_;
  std::vector<std::int32_t> fed_;  // the committed tokens whose self-attention rows the drafter holds
  std::vector<float> features_, logits_;
};

}  // namespace

int main(int argc, char** argv) {
  return engine::example_main(argc, argv, "Mixture of Attentions drafter on EAGLE-2 trees (trained by tools/train/moa.py)",
                              engine::default_weights("moa_smollm2_135m.safetensors"),
                              [&](const engine::llama_model& model, const std::string& weights) {
                                const auto tree = engine::tree_option(argc, argv, {3, 4, 10, specdec::tree_score::log_probability, {}});
                                return std::make_unique<moa_tree_drafter>(model, tree, weights);
                              });
}
