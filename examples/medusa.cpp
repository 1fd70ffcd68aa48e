// SPDX-License-Identifier: Apache-2.0
// Medusa heads on the example engine: from the target's last hidden state of the last accepted token,
// head i (a ResBlock, x + SiLU(W x + b), then the target's LM head) proposes the top-k tokens i + 1
// places after the root; a static tree from a Medusa choice list takes node tokens from those top-k
// lists (specdec::make_static_tree), and the loop verifies the tree in one forward.
//
// The heads' weights are random unless trained: there is no public Medusa checkpoint for SmolLM2, so
// this example shows the wiring and measures what random heads give (next to nothing is accepted). Each
// head shares the target's LM head instead of carrying its own 49152 x 576 matrix. The default choice
// list is small (7 nodes): on a CPU, verifying Medusa's 64-node mc_sim_7b_63 tree costs ~20 forwards.
#include <cmath>
#include <random>

#include <specdec/tree/static_tree.hpp>

#include "engine/example_main.hpp"
#include "engine/feature_drafter.hpp"

namespace {

using engine::index_t;

class medusa_drafter : public engine::feature_drafter {
 public:
  medusa_drafter(const engine::llama_model& model, std::vector<specdec::choice> choices, index_t top_k)
      : feature_drafter(model), shape_(specdec::make_static_tree(choices, top_k)), top_k_(top_k) {
    const index_t e = model.config().hidden;
    heads_ = shape_.tree.max_depth();
    std::mt19937 rng(13);
    std::uniform_real_distribution<float> u(-1.0f / std::sqrt(static_cast<float>(e)), 1.0f / std::sqrt(static_cast<float>(e)));
    weight_.resize(static_cast<std::size_t>(heads_ * e * e));
    for (auto& w : weight_) w = u(rng);
    bias_.assign(static_cast<std::size_t>(heads_ * e), 0.0f);
  }
  std::string name() const override { return "medusa"; }

  engine::draft propose(engine::draft_context& ctx) override {
    const auto& c = model_->config();
    const index_t e = c.hidden;
    // The target's final hidden state of the token before the root, then each head's ResBlock and
    // the shared LM head.
    if (committed_features() < ctx.cached) return {specdec::make_tree({ctx.sequence.back()}, {-1}), {}, {}};
    const std::vector<float> h(features().end() - e, features().end());
    std::vector<float> z(static_cast<std::size_t>(heads_ * e)), logits(static_cast<std::size_t>(heads_ * c.vocab));
    for (index_t k = 0; k < heads_; ++k) {
      float* out = z.data() + k * e;
      backend_.gemm(engine::host_matrix(h.data(), 1, e), specdec::transpose::no,
                    engine::host_matrix(weight_.data() + k * e * e, e, e), specdec::transpose::yes, specdec::matrix_view<float>(out, 1, e));
      for (index_t j = 0; j < e; ++j) {
        const float a = out[j] + bias_[static_cast<std::size_t>(k * e + j)];
        out[j] = h[static_cast<std::size_t>(j)] + a / (1.0f + std::exp(-a));
      }
    }
    backend_.gemm(engine::host_matrix(z.data(), heads_, e), specdec::transpose::no, model_->lm_head(), specdec::transpose::yes,
                  specdec::matrix_view<float>(logits.data(), heads_, c.vocab));
    ++ctx.stats.draft_calls;
    return {fill(shape_, ctx.sequence.back(), engine::host_matrix(logits.data(), heads_, c.vocab), top_k_), {}, {}};
  }

 private:
  specdec::static_tree shape_;
  index_t top_k_, heads_ = 0;
  std::vector<float> weight_, bias_;
};

}  // namespace

int main(int argc, char** argv) {
  return engine::example_main(
      argc, argv, "Medusa heads on a static tree (RANDOM head weights: no trained checkpoint; expect ~0 accepted)",
      [](const engine::llama_model& model) {
        return std::make_unique<medusa_drafter>(model, std::vector<specdec::choice>{{0}, {1}, {2}, {0, 0}, {0, 1}, {0, 0, 0}}, 4);
      });
}
