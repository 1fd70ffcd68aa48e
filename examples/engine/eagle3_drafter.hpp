// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief A trained EAGLE-3 drafter drafting EAGLE-2 dynamic trees (examples/eagle3.cpp). Hooks keep the
/// target's residual stream entering layers 2, L / 2 and L - 3 of every committed token
/// (specdec::blocks::eagle3::tap_layers); draft row p fuses those taps of position p (`fc`, 3E -> E) and
/// runs EAGLE-3's layer on `[embedding of x_{p+1} ; state]` over its own KV cache; its output h2 is fed
/// back to the frontier rows that continue it, and `norm` + a reduced-vocabulary head (`d2t`) give the
/// draft logits. specdec::eagle2_drafter asks for the rows and builds the tree, its size chosen per step
/// by the draft-length policy when `adaptive`.
///
/// Checkpoint layout (tools/train/eagle3.py; fp16, SafeAILab EAGLE's EAGLE-3 names): `fc.weight`
/// [E x 3E], `midlayer.{hidden_norm,input_layernorm,post_attention_layernorm}.weight` [E],
/// `midlayer.self_attn.{q,k,v}_proj.weight` [* x 2E], `midlayer.self_attn.o_proj.weight`,
/// `midlayer.mlp.{gate,up,down}_proj.weight` (the target's shapes), `norm.weight` [E],
/// `lm_head.weight` [V' x E], `d2t` [V'] int64 with 0 <= i + d2t[i] < V; the embedding is the target's.
#pragma once

#include <algorithm>
#include <array>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <specdec/blocks/eagle3.hpp>
#include <specdec/tree/drafters.hpp>

#include "checkpoint.hpp"
#include "decoding.hpp"

namespace engine {

class eagle3_drafter : public method {
 public:
  /// \throws specdec::invalid_argument when `weights_path` does not hold the layout above for this
  /// model (any name, shape or dtype), or d2t maps outside the target's vocabulary.
  eagle3_drafter(const llama_model& model, specdec::dynamic_tree_config tree, const std::string& weights_path, bool adaptive = false)
      : model_(&model), file_(specdec::io::safetensors::open(weights_path)), config_(config_of(model, file_)),
        taps_(specdec::blocks::eagle3::tap_layers(model.config().layers)),
        tree_(backend_, checked(model, file_, weights_path, config_, std::move(tree)), adaptive) {
    weights_ = {model.embedding(), file_.linear("fc"), file_.vector("midlayer.hidden_norm.weight"), file_.layer("midlayer."),
                file_.vector("norm.weight"), file_.linear("lm_head")};
    weights_.validate(config_);
    const auto& a = config_.layer.attention;
    cache_ = std::make_unique<specdec::blocks::kv_cache<specdec::eigen>>(backend_, 8192, a.kv_heads * a.head_dim);
    hooks_.after_layer = [this](index_t layer, host_matrix x) {
      // The stream leaving layer l enters layer l + 1: tap k is the output of layer taps_[k] - 1.
      for (std::size_t k = 0; k < taps_.size(); ++k) {
        if (layer + 1 != taps_[k]) continue;
        const index_t e = x.cols();
        last_.resize(static_cast<std::size_t>(x.rows() * 3 * e));
        for (index_t r = 0; r < x.rows(); ++r)
          std::copy(x.row(r), x.row(r) + e, last_.begin() + r * 3 * e + static_cast<index_t>(k) * e);
      }
    };
  }
  std::string name() const override { return "eagle3"; }
  drafter_ref drafter() override { return tree_; }
  const forward_hooks* prefill_hooks() override { return &hooks_; }
  const forward_hooks* target_hooks() override { return &hooks_; }
  /// A new request: its prompt's taps, an empty draft cache (the policy carries over, as in an engine).
  void after_prefill() override {
    committed_ = last_;
    context_rows_ = 0;
  }
  /// The root and the accepted nodes are committed: their taps from the verify forward are kept.
  void committed(const specdec::draft_tree&, std::span<const std::int32_t> nodes) override {
    const index_t w = 3 * model_->config().hidden;
    std::vector<std::int32_t> rows = {0};
    rows.insert(rows.end(), nodes.begin(), nodes.end());
    for (auto r : rows) committed_.insert(committed_.end(), last_.begin() + r * w, last_.begin() + (r + 1) * w);
  }
  /// The root x_n is draft row n - 1, fed the taps of position n - 1.
  bool ready(const step_state& at) const override {
    return at.cached >= 1 && static_cast<index_t>(committed_.size()) >= at.cached * 3 * model_->config().hidden;
  }
  const specdec::policy::draft_length_policy& policy() const { return tree_.policy(); }

  /// Draft row p pairs the taps of position p with token x_{p+1}: the root x_n is row n - 1 (at draft
  /// position n - 1), its frontier rows follow at n, n + 1, ...
  host_matrix run(const step_state& at, const specdec::draft_request& r) override {
    const index_t e = model_->config().hidden, n = at.cached, rows = r.rows();
    if (r.depth[0] == 0) {  // the root row, after the context rows the cache lacks, in one causal forward
      cache_->crop(context_rows_);  // the last draft's rows go
      const index_t first = context_rows_, t = n - first;
      const auto [tokens, positions] = shifted_context(at.committed, first, n);
      std::vector<float> h(static_cast<std::size_t>(t * e));
      specdec::blocks::eagle3::fuse(backend_, weights_, host_matrix(committed_.data() + first * 3 * e, t, 3 * e),
                                    specdec::matrix_view<float>(h.data(), t, e));
      forward(tokens, h, positions, {});
      last_out_.assign(h.end() - e, h.end());
      context_rows_ = n;
    } else {  // a frontier: each row continues its parent row's h2
      std::vector<float> h(static_cast<std::size_t>(rows * e));
      for (index_t i = 0; i < rows; ++i) {
        const auto parent = r.parent_row[static_cast<std::size_t>(i)];
        std::copy(last_out_.begin() + parent * e, last_out_.begin() + (parent + 1) * e, h.begin() + i * e);
      }
      forward(r.tokens, h, r.positions(n - 1), r.attention_mask(n - 1));
      last_out_ = std::move(h);
    }
    const index_t vd = config_.draft_vocab;
    logits_.resize(static_cast<std::size_t>(rows * vd));
    specdec::blocks::eagle3::logits(backend_, config_, weights_, host_matrix(last_out_.data(), rows, e),
                                    specdec::matrix_view<float>(logits_.data(), rows, vd));
    return host_matrix(logits_.data(), rows, vd);
  }

 private:
  static specdec::blocks::eagle3::config config_of(const llama_model& model, const specdec::io::safetensors& file) {
    const auto& c = model.config();
    const index_t draft_vocab = file.contains("d2t") && !file.at("d2t").shape.empty() ? file.at("d2t").shape[0] : 0;
    return {{{c.hidden, c.heads, c.kv_heads, c.head_dim, c.rope_theta, true}, c.intermediate, c.rms_eps, true},
            c.hidden, c.vocab, draft_vocab};
  }
  /// `tree` with the file's d2t, once the file is checked against the layout above.
  static specdec::dynamic_tree_config checked(const llama_model& model, const specdec::io::safetensors& file, const std::string& weights_path,
                                              const specdec::blocks::eagle3::config& cfg, specdec::dynamic_tree_config tree) {
    const auto& c = model.config();
    const index_t e = c.hidden, draft_vocab = cfg.draft_vocab;
    specdec::blocks::layer_config layer = cfg.layer;
    layer.attention = cfg.attention();  // q / k / v read 2E
    auto expected = layer_layout("midlayer.", layer);
    expected.insert(expected.end(), {{"fc.weight", {e, 3 * e}}, {"midlayer.hidden_norm.weight", {e}}, {"norm.weight", {e}},
                                     {"lm_head.weight", {draft_vocab, e}}, {"d2t", {draft_vocab}, "I64"}});
    check_layout(file, weights_path, expected);
    SPECDEC_EXPECTS(draft_vocab >= tree.top_k && draft_vocab <= c.vocab, "engine::eagle3_drafter", weights_path,
                    ": a draft vocabulary of ", draft_vocab, "; expected top_k (", tree.top_k, ") <= V' <= ", c.vocab);
    const auto d2t = file.integers("d2t");
    tree.d2t.clear();
    for (index_t i = 0; i < draft_vocab; ++i) {
      const std::int64_t offset = d2t[static_cast<std::size_t>(i)];
      if (offset < -i || offset >= c.vocab - i)  // by subtraction: a file's offset may be near INT64_MAX
        specdec::detail::throw_invalid_argument("engine::eagle3_drafter", weights_path, ": d2t[", i, "] = ", offset,
                                                " maps draft id ", i, " outside the target's vocabulary [0, ", c.vocab, ")");
      tree.d2t.push_back(static_cast<std::int32_t>(offset));
    }
    return tree;
  }
  /// EAGLE-3's layer over `tokens` at `positions` (causal over the cache, or `allowed`
  /// `[T x (cached + T)]`), in place on the states `h` `[T x E]`.
  void forward(std::span<const std::int32_t> tokens, std::vector<float>& h, std::span<const std::int64_t> positions,
               std::span<const std::uint8_t> allowed) {
    using space = specdec::host_space;
    const index_t t = static_cast<index_t>(tokens.size()), e = model_->config().hidden;
    const auto mask = allowed.empty() ? specdec::blocks::attention_mask<space>::causal()
                                      : specdec::blocks::attention_mask<space>::from(specdec::matrix_view<const std::uint8_t>(
                                            allowed.data(), t, static_cast<index_t>(allowed.size()) / t));
    specdec::blocks::eagle3::forward(backend_, config_, weights_, specdec::vector_view<const std::int32_t>(tokens.data(), t),
                                     host_matrix(h.data(), t, e), specdec::vector_view<const std::int64_t>(positions.data(), t),
                                     cache_.get(), mask, specdec::matrix_view<float>(h.data(), t, e));
  }

  const llama_model* model_;
  specdec::eigen backend_;
  specdec::io::safetensors file_;  // owns the weights the views below point into
  specdec::blocks::eagle3::config config_;
  std::array<index_t, 3> taps_;
  specdec::eagle2_drafter<specdec::eigen> tree_;
  specdec::blocks::eagle3::weights<specdec::host_space> weights_;
  std::unique_ptr<specdec::blocks::kv_cache<specdec::eigen>> cache_;
  forward_hooks hooks_;
  std::vector<float> last_, committed_;   // taps of the last target forward's rows; of the committed tokens
  index_t context_rows_ = 0;              // the cache's rows of committed context (a draft's rows follow)
  std::vector<float> last_out_, logits_;  // the last request's h2 and logits
};

}  // namespace engine
