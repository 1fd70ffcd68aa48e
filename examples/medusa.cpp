// SPDX-License-Identifier: Apache-2.0
// Medusa heads on the example engine: from the target's last hidden state of the last accepted token,
// head i (a ResBlock, x + SiLU(W x + b), then the target's LM head) proposes the top-k tokens i + 1
// places after the root; a static tree from a Medusa choice list takes node tokens from those top-k
// lists (specdec::make_static_tree, through specdec::heads_drafter), and the loop verifies the tree in
// one forward.
//
// Weights: examples/weights/medusa_smollm2_135m.safetensors by default (or --weights FILE), trained for
// SmolLM2-135M-Instruct by tools/train (medusa.py: self-distillation, soft labels), fp16, Medusa's names:
// `medusa_head.{i}.0.linear.weight` [576 x 576] and `.bias` [576] per head, at least as many heads as
// the tree is deep. Each head shares the target's LM head instead of carrying its own 49152 x 576
// matrix. The default choice list is small (6 nodes): on a CPU, verifying Medusa's 64-node
// mc_sim_7b_63 tree costs ~20 forwards.
#include <cmath>

#include <specdec/tree/drafters.hpp>
#include <specdec/tree/static_tree.hpp>

#include "engine/checkpoint.hpp"
#include "engine/example_main.hpp"
#include "engine/feature_drafter.hpp"

namespace {

using engine::index_t;

class medusa_drafter : public engine::feature_drafter {
 public:
  /// Loads the first `depth of the tree` heads of `weights_path`. \throws specdec::invalid_argument when
  /// the file does not hold exactly medusa_head.{0..H-1}.0.linear.{weight [E x E], bias [E]} in fp16
  /// with H >= the tree's depth.
  medusa_drafter(const engine::llama_model& model, std::vector<specdec::choice> choices, index_t top_k, const std::string& weights_path)
      : feature_drafter(model),
        tree_(backend_, specdec::make_static_tree(choices, top_k), top_k, /*adaptive=*/false) {
    const index_t e = model.config().hidden;
    heads_ = specdec::make_static_tree(choices, top_k).tree.max_depth();
    const auto name = [](index_t k, const char* what) { return "medusa_head." + std::to_string(k) + ".0.linear." + what; };
    const auto file = specdec::io::safetensors::open(weights_path);
    index_t stored = 0;
    while (file.contains(name(stored, "weight"))) ++stored;
    SPECDEC_EXPECTS(stored >= heads_, "medusa_drafter", weights_path, " holds ", stored, " heads; the tree is ", heads_, " deep");
    std::vector<engine::expected_tensor> expected;
    for (index_t k = 0; k < stored; ++k) {
      expected.push_back({name(k, "weight"), {e, e}});
      expected.push_back({name(k, "bias"), {e}});
    }
    engine::check_layout(file, weights_path, expected);
    for (index_t k = 0; k < heads_; ++k) {
      const auto& w = file.at(name(k, "weight")).values;
      const auto& b = file.at(name(k, "bias")).values;
      weight_.insert(weight_.end(), w.begin(), w.end());
      bias_.insert(bias_.end(), b.begin(), b.end());
    }
  }
  std::string name() const override { return "medusa"; }
  engine::drafter_ref drafter() override { return tree_; }
  /// The heads read the target's final hidden state of the token before the root.
  bool ready(const engine::step_state& at) const override { return at.cached >= 1 && committed_features() >= at.cached; }

  /// specdec::heads_drafter asks for the root's per-head logits: the target's final hidden state of
  /// the token before the root through each head's ResBlock, then the shared LM head.
  engine::host_matrix run(const engine::step_state&, const specdec::draft_request&) override {
    const auto& c = model_->config();
    const index_t e = c.hidden;
    const std::vector<float> h(features().end() - e, features().end());
    std::vector<float> z(static_cast<std::size_t>(heads_ * e));
    logits_.resize(static_cast<std::size_t>(heads_ * c.vocab));
    for (index_t k = 0; k < heads_; ++k) {
      float* out = z.data() + k * e;
      backend_.gemm(engine::host_matrix(h.data(), 1, e), specdec::transpose::no, engine::host_matrix(weight_.data() + k * e * e, e, e),
                    specdec::transpose::yes, specdec::matrix_view<float>(out, 1, e));
      for (index_t j = 0; j < e; ++j) {
        const float a = out[j] + bias_[static_cast<std::size_t>(k * e + j)];
        out[j] = h[static_cast<std::size_t>(j)] + a / (1.0f + std::exp(-a));
      }
    }
    backend_.gemm(engine::host_matrix(z.data(), heads_, e), specdec::transpose::no, model_->lm_head(), specdec::transpose::yes,
                  specdec::matrix_view<float>(logits_.data(), heads_, c.vocab));
    return engine::host_matrix(logits_.data(), heads_, c.vocab);
  }

 private:
  specdec::heads_drafter<specdec::eigen> tree_;
  index_t heads_ = 0;
  std::vector<float> weight_, bias_, logits_;
};

}  // namespace

int main(int argc, char** argv) {
  return engine::example_main(
      argc, argv, "Medusa heads on a static tree (trained by tools/train/medusa.py)",
      engine::default_weights("medusa_smollm2_135m.safetensors"), [](const engine::llama_model& model, const std::string& weights) {
        return std::make_unique<medusa_drafter>(model, std::vector<specdec::choice>{{0}, {1}, {2}, {0, 0}, {0, 1}, {0, 0, 0}}, 4,
                                                weights);
      });
}
