// SPDX-License-Identifier: Apache-2.0
// Amphista on the example engine: two staged adaptation layers (fuse [target feature; next token's
// embedding], then a causal decoder layer, each with its own KV cache over the committed context), the
// K heads' inputs (heads 1..floor(K/2) from stage 1, the rest from stage 2), the auto-embedding block
// (bi-directional attention across the K head slots) and per-head LM heads; the heads' top-k lists fill
// a static tree (specdec::make_static_tree), which the loop verifies in one forward.
//
// Weights: examples/weights/amphista_smollm2_135m.safetensors by default (or --weights FILE), trained for
// SmolLM2-135M-Instruct by tools/train/amphista.py (Amphista has no public code; the names are
// specdec's, Hugging Face Llama names inside each layer): `stage{1,2}.fuse.{weight,bias}`,
// `stage{1,2}.layer.*`, `head_mlps.{k}.{weight,bias}`, `position_embedding` [K x E], `auto_embedding.*`,
// K = the tree's depth. Every head shares the target's LM head instead of carrying its own 49152 x 576
// matrix.
#include <specdec/blocks/amphista.hpp>
#include <specdec/tree/drafters.hpp>
#include <specdec/tree/static_tree.hpp>

#include "engine/checkpoint.hpp"
#include "engine/example_main.hpp"
#include "engine/feature_drafter.hpp"

namespace {

using engine::index_t;
namespace blocks = specdec::blocks;
namespace amphista = specdec::blocks::amphista;

class amphista_drafter : public engine::feature_drafter {
 public:
  /// \throws specdec::invalid_argument when `weights_path` does not hold exactly the layout above
  /// (names, shapes, fp16) for this model and K = the tree's depth.
  amphista_drafter(const engine::llama_model& model, std::vector<specdec::choice> choices, index_t top_k, const std::string& weights_path)
      : feature_drafter(model),
        tree_(backend_, specdec::make_static_tree(choices, top_k), top_k, /*adaptive=*/false) {
    const auto& c = model.config();
    const index_t e = c.hidden, kv = c.kv_heads * c.head_dim, ff = 2 * e;
    config_.stage = {{e, c.heads, c.kv_heads, c.head_dim, c.rope_theta, true}, ff, c.rms_eps, true};
    config_.auto_embedding = {{e, c.heads, c.kv_heads, c.head_dim, c.rope_theta, false}, ff, c.rms_eps, true};
    config_.heads = specdec::make_static_tree(choices, top_k).tree.max_depth();
    config_.stage1_heads = amphista::config::paper_split(config_.heads);
    config_.vocab = c.vocab;
    std::vector<engine::expected_tensor> expected;
    const auto layer = [&](const std::string& p, const blocks::layer_config& lc) {
      const auto l = engine::layer_layout(p, lc);
      expected.insert(expected.end(), l.begin(), l.end());
    };
    for (const std::string stage : {"stage1.", "stage2."}) {
      expected.push_back({stage + "fuse.weight", {e, 2 * e}});
      expected.push_back({stage + "fuse.bias", {e}});
      layer(stage + "layer.", config_.stage);
    }
    for (index_t k = 0; k < config_.heads; ++k) {
      expected.push_back({"head_mlps." + std::to_string(k) + ".weight", {e, e}});
      expected.push_back({"head_mlps." + std::to_string(k) + ".bias", {e}});
    }
    expected.push_back({"position_embedding", {config_.heads, e}});
    layer("auto_embedding.", config_.auto_embedding);
    file_ = engine::load_checkpoint(weights_path, expected);
    weights_.stage1 = {file_.linear("stage1.fuse"), file_.layer("stage1.layer.")};
    weights_.stage2 = {file_.linear("stage2.fuse"), file_.layer("stage2.layer.")};
    for (index_t k = 0; k < config_.heads; ++k) {
      weights_.head_mlps.push_back(file_.linear("head_mlps." + std::to_string(k)));
      weights_.heads.push_back(model.lm_head());
    }
    weights_.position_embedding = file_.matrix("position_embedding");
    weights_.auto_embedding = file_.layer("auto_embedding.");
    for (auto* cache : {&stage1_cache_, &stage2_cache_}) *cache = std::make_unique<blocks::kv_cache<specdec::eigen>>(backend_, 8192, kv);
  }
  std::string name() const override { return "amphista"; }
  engine::drafter_ref drafter() override { return tree_; }
  /// The stages need a committed row they have not run (the root's).
  bool ready(const engine::step_state& at) const override { return at.cached - stage1_cache_->size() >= 1; }

  /// specdec::heads_drafter asks for the root's K head logits: the stages catch up on the committed
  /// context, then the heads read the root's row.
  engine::host_matrix run(const engine::step_state& at, const specdec::draft_request&) override {
    const auto& c = model_->config();
    const index_t e = c.hidden, n = at.cached, first = stage1_cache_->size(), rows = n - first;
    // Stage rows for the committed context not yet seen: row p = [f_p ; embedding of x_{p+1}].
    std::vector<std::int32_t> next_tokens(at.committed.begin() + first + 1, at.committed.begin() + n + 1);
    std::vector<float> embedded(static_cast<std::size_t>(rows * e)), h1(embedded.size()), h2(embedded.size());
    backend_.gather_rows(model_->embedding(), specdec::vector_view<const std::int32_t>(next_tokens.data(), rows),
                         specdec::matrix_view<float>(embedded.data(), rows, e));
    std::vector<std::int64_t> positions(static_cast<std::size_t>(rows));
    for (index_t p = 0; p < rows; ++p) positions[static_cast<std::size_t>(p)] = first + p;
    const specdec::vector_view<const std::int64_t> pos(positions.data(), rows);
    const engine::host_matrix emb(embedded.data(), rows, e);
    amphista::stage_forward(backend_, config_.stage, weights_.stage1, engine::host_matrix(features().data() + first * e, rows, e), emb, pos,
                            stage1_cache_.get(), specdec::matrix_view<float>(h1.data(), rows, e));
    amphista::stage_forward(backend_, config_.stage, weights_.stage2, engine::host_matrix(h1.data(), rows, e), emb, pos, stage2_cache_.get(),
                            specdec::matrix_view<float>(h2.data(), rows, e));
    // The K heads at the last position (the root's row), then the auto-embedding block.
    const index_t k = config_.heads;
    std::vector<float> z(static_cast<std::size_t>(k * e));
    logits_.resize(static_cast<std::size_t>(k * c.vocab));
    amphista::head_inputs(backend_, config_, weights_, engine::host_matrix(h1.data() + (rows - 1) * e, 1, e),
                          engine::host_matrix(h2.data() + (rows - 1) * e, 1, e), specdec::matrix_view<float>(z.data(), k, e));
    amphista::auto_embedding(backend_, config_, weights_, engine::host_matrix(z.data(), k, e),
                             specdec::matrix_view<float>(logits_.data(), k, c.vocab));
    return engine::host_matrix(logits_.data(), k, c.vocab);
  }

 private:
  specdec::heads_drafter<specdec::eigen> tree_;
  specdec::io::safetensors file_;  // owns the weights the views below point into
  amphista::config config_;
  amphista::weights<specdec::host_space> weights_;
  std::unique_ptr<blocks::kv_cache<specdec::eigen>> stage1_cache_, stage2_cache_;
  std::vector<float> logits_;
};

}  // namespace

int main(int argc, char** argv) {
  return engine::example_main(
      argc, argv, "Amphista staged adaptation + auto-embedding heads on a static tree (tools/train/amphista.py)",
      engine::default_weights("amphista_smollm2_135m.safetensors"), [](const engine::llama_model& model, const std::string& weights) {
        return std::make_unique<amphista_drafter>(model, std::vector<specdec::choice>{{0}, {1}, {0, 0}, {0, 1}, {0, 0, 0}, {0, 0, 0, 0}}, 3,
                                                  weights);
      });
}
