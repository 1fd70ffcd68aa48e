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

namespace {

using engine::index_t;

class medusa_drafter : public engine::drafter {
 public:
  medusa_drafter(const engine::llama_model& model, std::vector<specdec::choice> choices, index_t top_k)
      : model_(&model), shape_(specdec::make_static_tree(choices, top_k)), top_k_(top_k) {
    const index_t e = model.config().hidden;
    heads_ = shape_.tree.max_depth();
    std::mt19937 rng(13);
    std::uniform_real_distribution<float> u(-1.0f / std::sqrt(static_cast<float>(e)), 1.0f / std::sqrt(static_cast<float>(e)));
    weight_.resize(static_cast<std::size_t>(heads_ * e * e));
    for (auto& w : weight_) w = u(rng);
    bias_.assign(static_cast<std::size_t>(heads_ * e), 0.0f);
    hooks_.after_layer = [this](index_t layer, engine::host_matrix x) {
      if (layer + 1 == model_->config().layers) last_hidden_.assign(x.data(), x.data() + x.rows() * x.cols());
    };
  }
  std::string name() const override { return "medusa"; }
  const engine::forward_hooks* prefill_hooks() override { return &hooks_; }
  const engine::forward_hooks* target_hooks() override { return &hooks_; }
  void after_prefill(engine::llama_session&) override { keep_row(last_rows() - 1); }
  void accepted_path(std::span<const std::int32_t> nodes) override { keep_row(nodes.empty() ? 0 : nodes.back()); }

  engine::draft propose(engine::draft_context& ctx) override {
    const auto& c = model_->config();
    const index_t e = c.hidden;
    if (root_hidden_.empty()) return {specdec::make_tree({ctx.sequence.back()}, {-1}), {}, {}};
    // The target's final norm, then each head's ResBlock and the shared LM head.
    std::vector<float> h(static_cast<std::size_t>(e)), z(static_cast<std::size_t>(heads_ * e)), logits(static_cast<std::size_t>(heads_ * c.vocab));
    backend_.rms_norm(engine::host_matrix(root_hidden_.data(), 1, e), model_->final_norm(), c.rms_eps,
                      specdec::matrix_view<float>(h.data(), 1, e));
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
    std::vector<float> values(static_cast<std::size_t>(heads_ * top_k_));
    std::vector<std::int32_t> ids(static_cast<std::size_t>(heads_ * top_k_));
    backend_.row_topk(engine::host_matrix(logits.data(), heads_, c.vocab), top_k_, specdec::matrix_view<float>(values.data(), heads_, top_k_),
                      specdec::matrix_view<std::int32_t>(ids.data(), heads_, top_k_));
    // Node i at depth d with last rank r takes the r-th candidate of head d - 1.
    specdec::draft_tree tree = shape_.tree;
    tree.token[0] = ctx.sequence.back();
    for (index_t i = 1; i < tree.size(); ++i)
      tree.token[static_cast<std::size_t>(i)] =
          ids[static_cast<std::size_t>((tree.depth[static_cast<std::size_t>(i)] - 1) * top_k_ + shape_.rank[static_cast<std::size_t>(i)])];
    return {std::move(tree), {}, {}};
  }

 private:
  index_t last_rows() const { return static_cast<index_t>(last_hidden_.size()) / model_->config().hidden; }
  void keep_row(index_t row) {
    const index_t e = model_->config().hidden;
    root_hidden_.assign(last_hidden_.begin() + row * e, last_hidden_.begin() + (row + 1) * e);
  }
  const engine::llama_model* model_;
  specdec::static_tree shape_;
  index_t top_k_, heads_ = 0;
  std::vector<float> weight_, bias_, last_hidden_, root_hidden_;
  engine::forward_hooks hooks_;
  specdec::eigen backend_;
};

}  // namespace

int main(int argc, char** argv) {
  return engine::example_main(
      argc, argv, "Medusa heads on a static tree (RANDOM head weights: no trained checkpoint; expect ~0 accepted)",
      [](const engine::llama_model& model) {
        return std::make_unique<medusa_drafter>(model, std::vector<specdec::choice>{{0}, {1}, {2}, {0, 0}, {0, 1}, {0, 0, 0}}, 4);
      });
}
