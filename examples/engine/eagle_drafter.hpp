// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief A trained EAGLE draft layer drafting EAGLE-2 dynamic trees (examples/eagle.cpp and the demo's
/// `eagle2` row). The layer (specdec::blocks::eagle) fuses each token's embedding with the target's
/// final hidden state of the token before it and runs one decoder layer over its own KV cache; a draft
/// LM head over a reduced vocabulary (EAGLE-3: `d2t` maps draft ids to target ids) gives the draft
/// logits, and specdec::eagle2_drafter grows the tree from them. With `adaptive`, the tree's size
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
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <specdec/blocks/eagle.hpp>
#include <specdec/policy/draft_length.hpp>
#include <specdec/tree/drafters.hpp>
#include <specdec/tree/eagle2.hpp>

#include "checkpoint.hpp"
#include "feature_drafter.hpp"

namespace engine {

class eagle_drafter : public feature_drafter {
 public:
  /// \throws specdec::invalid_argument when `weights_path` does not hold the layout above for this
  /// model (any name, shape or dtype), or d2t maps outside the target's vocabulary.
  eagle_drafter(const llama_model& model, specdec::dynamic_tree_config tree, const std::string& weights_path, bool adaptive = false)
      : feature_drafter(model), file_(specdec::io::safetensors::open(weights_path)),
        tree_(backend_, checked(model, file_, weights_path, std::move(tree)), adaptive),
        layer_(layer_of(model)) {
    const auto& c = model.config();
    weights_.embed = model.embedding();
    weights_.fc = file_.linear("fc");
    weights_.layer = file_.layer("layers.0.", false);
    weights_.validate(layer_, c.vocab);
    head_ = file_.matrix("lm_head.weight");
    cache_ = std::make_unique<specdec::blocks::kv_cache<specdec::eigen>>(backend_, 8192, c.kv_heads * c.head_dim);
  }
  std::string name() const override { return "eagle"; }
  drafter_ref drafter() override { return tree_; }
  /// A new request: the draft layer's cache starts empty (the policy carries over, as in an engine).
  void after_prefill() override {
    feature_drafter::after_prefill();
    context_rows_ = 0;
  }
  /// The root x_n is draft row n - 1, fed the target's feature f_{n-1}: none before a token is committed.
  bool ready(const step_state& at) const override { return at.cached >= 1; }
  const specdec::policy::draft_length_policy& policy() const { return tree_.policy(); }

  /// Draft row p fuses token x_{p+1} with the target feature f_p, so the root x_n is row n - 1 (at
  /// draft position n - 1) and its frontier rows follow at n, n + 1, ...
  host_matrix run(const step_state& at, const specdec::draft_request& r) override {
    const index_t e = model_->config().hidden, n = at.cached, rows = r.rows();
    if (r.depth[0] == 0) {
      // The root row, after the context rows the cache lacks, in one causal forward (they are not a
      // draft's price, but one forward costs about what one row does); the last draft's rows go.
      cache_->crop(context_rows_);
      const auto [tokens, positions] = shifted_context(at.committed, context_rows_, n);
      const auto context = forward(tokens, host_matrix(features().data() + context_rows_ * e, n - context_rows_, e), positions, {});
      last_out_.assign(context.end() - e, context.end());
      context_rows_ = n;
    } else {  // a frontier: each row reads its parent row's output
      std::vector<float> fed(static_cast<std::size_t>(rows * e));
      for (index_t i = 0; i < rows; ++i) {
        const auto parent = r.parent_row[static_cast<std::size_t>(i)];
        std::copy(last_out_.begin() + parent * e, last_out_.begin() + (parent + 1) * e, fed.begin() + i * e);
      }
      last_out_ = forward(r.tokens, host_matrix(fed.data(), rows, e), r.positions(n - 1), r.attention_mask(n - 1));
    }
    head(last_out_, rows, logits_);
    return host_matrix(logits_.data(), rows, head_.rows());
  }

 private:
  static specdec::blocks::layer_config layer_of(const llama_model& model) {
    const auto& c = model.config();
    return {{c.hidden, c.heads, c.kv_heads, c.head_dim, c.rope_theta, true}, c.intermediate, c.rms_eps, false};
  }
  /// `tree` with the file's d2t, once the file is checked against the layout above.
  static specdec::dynamic_tree_config checked(const llama_model& model, const specdec::io::safetensors& file,
                                              const std::string& weights_path, specdec::dynamic_tree_config tree) {
    const auto& c = model.config();
    const index_t e = c.hidden;
    const index_t draft_vocab = file.contains("d2t") && !file.at("d2t").shape.empty() ? file.at("d2t").shape[0] : 0;
    auto expected = layer_layout("layers.0.", layer_of(model));
    expected.insert(expected.end(), {{"fc.weight", {e, 2 * e}}, {"fc.bias", {e}}, {"lm_head.weight", {draft_vocab, e}}, {"d2t", {draft_vocab}, "I64"}});
    check_layout(file, weights_path, expected);
    SPECDEC_EXPECTS(draft_vocab >= tree.top_k && draft_vocab <= c.vocab, "engine::eagle_drafter", weights_path, ": a draft vocabulary of ",
                    draft_vocab, "; expected top_k (", tree.top_k, ") <= V' <= ", c.vocab);
    const auto d2t = file.integers("d2t");
    tree.d2t.clear();
    for (index_t i = 0; i < draft_vocab; ++i) {
      // -i <= d2t[i] < V - i: compared by subtraction, as a file's offset may be near INT64_MAX.
      const std::int64_t offset = d2t[static_cast<std::size_t>(i)];
      if (offset < -i || offset >= c.vocab - i)
        specdec::detail::throw_invalid_argument(
            "engine::eagle_drafter", weights_path, ": d2t[", i, "] = ", offset, " maps draft id ", i, " to ",
            offset > std::numeric_limits<std::int64_t>::max() - i ? std::string("an id beyond int64") : std::to_string(i + offset),
            "; expected a target id in [0, ", c.vocab, ")");
      tree.d2t.push_back(static_cast<std::int32_t>(offset));  // |offset| < V <= 2^31 - 1 (llama_model::load)
    }
    return tree;
  }
  /// One draft-layer forward over `tokens` at `positions` (causal over the cache, or the tree mask
  /// `allowed` `[T x (cached + T)]`), its output features `[T x E]`.
  std::vector<float> forward(std::span<const std::int32_t> tokens, host_matrix parent, std::span<const std::int64_t> positions,
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

  specdec::io::safetensors file_;  // owns the weights the views below point into
  specdec::eagle2_drafter<specdec::eigen> tree_;
  specdec::blocks::layer_config layer_;
  specdec::blocks::eagle::weights<specdec::host_space> weights_;
  host_matrix head_;
  std::unique_ptr<specdec::blocks::kv_cache<specdec::eigen>> cache_;
  index_t context_rows_ = 0;              // the cache's rows of committed context (a draft's rows follow)
  std::vector<float> last_out_, logits_;  // the last request's draft features and logits
};

}  // namespace engine
