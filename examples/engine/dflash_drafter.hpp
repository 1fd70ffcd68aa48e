// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief A trained DFlash block drafter (examples/dflash.cpp, the demo's `dflash` row). Hooks keep the
/// target's layer outputs at the checkpoint's `target_layer_ids` for every committed token; before each
/// draft the rows the drafter's context cache lacks are appended (specdec::blocks::dflash::append_context:
/// the prompt's on the first step, then the verified root's and the accepted drafts'), and one forward
/// over `[root, mask, ...]` (dflash::forward) gives a distribution per position ahead.
/// specdec::block_drafter asks for the block and drafts the chain of per-position argmaxes (or a top-k
/// tree), its size chosen per step by the draft-length policy when `adaptive`.
///
/// Checkpoint layout (tools/train/dflash.py; fp16, z-lab/dflash's names): `fc.weight` [E x K E],
/// `hidden_norm.weight`, `norm.weight` [E], `layers.{i}.*` (the target's shapes; `self_attn.q_norm.weight`,
/// `self_attn.k_norm.weight` [head_dim]), I64 `dflash.target_layer_ids` [K], `dflash.mask_token_id` [1],
/// `dflash.block_size` [1], and optionally `d2t` [V'] (the rows of the target's head the draft scores,
/// as EAGLE-3's); the embedding and LM head are the target's.
#pragma once

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <specdec/blocks/dflash.hpp>
#include <specdec/tree/block_drafter.hpp>

#include "checkpoint.hpp"
#include "decoding.hpp"

namespace engine {

class dflash_drafter : public method {
 public:
  /// `top_k` > 1 drafts trees of up to `nodes` nodes from the block's per-position top-k.
  /// \throws specdec::invalid_argument when `weights_path` does not hold the layout above for this
  /// model (any name, shape or dtype), or its indices are out of range.
  dflash_drafter(const llama_model& model, const std::string& weights_path, bool adaptive = true, specdec::index_t top_k = 1,
                 specdec::index_t nodes = 0)
      : model_(&model), file_(specdec::io::safetensors::open(weights_path)), config_(config_of(model, file_, weights_path)),
        ids_([this] {
          const auto ids = file_.integers("dflash.target_layer_ids");
          return std::vector<std::int64_t>(ids.begin(), ids.end());
        }()),
        drafter_(backend_, parameters(model, file_, config_, adaptive, top_k, nodes)) {
    weights_.fc = file_.linear("fc");
    weights_.hidden_norm = file_.vector("hidden_norm.weight");
    for (specdec::index_t l = 0; l < config_.layers; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".";
      auto layer = file_.layer(p);
      layer.attention.q_norm = file_.vector(p + "self_attn.q_norm.weight");
      layer.attention.k_norm = file_.vector(p + "self_attn.k_norm.weight");
      weights_.layers.push_back(layer);
    }
    weights_.norm = file_.vector("norm.weight");
    weights_.embed = model.embedding();
    weights_.lm_head = {model.lm_head(), {}};
    weights_.validate(config_);
    if (file_.contains("d2t")) {  // the draft scores these rows of the target's head: gathered once
      const auto d2t = file_.integers("d2t");
      const specdec::index_t e = config_.layer.attention.hidden, rows = static_cast<specdec::index_t>(d2t.size());
      head_rows_.resize(static_cast<std::size_t>(rows * e));
      for (specdec::index_t i = 0; i < rows; ++i) {
        const auto* src = model.lm_head().row(i + d2t[static_cast<std::size_t>(i)]);
        std::copy(src, src + e, head_rows_.begin() + i * e);
      }
      draft_head_.weight = host_matrix(head_rows_.data(), rows, e);
    }
    context_ = std::make_unique<specdec::blocks::dflash::context_cache<specdec::eigen>>(backend_, config_, 8192 + config_.block_size);
    hooks_.after_layer = [this](specdec::index_t layer, host_matrix x) {
      const specdec::index_t e = x.cols(), k = static_cast<specdec::index_t>(ids_.size());
      for (specdec::index_t j = 0; j < k; ++j) {
        if (layer != ids_[static_cast<std::size_t>(j)]) continue;
        last_.resize(static_cast<std::size_t>(x.rows() * k * e));
        for (specdec::index_t r = 0; r < x.rows(); ++r) std::copy(x.row(r), x.row(r) + e, last_.begin() + (r * k + j) * e);
      }
    };
  }
  std::string name() const override { return "dflash"; }
  drafter_ref drafter() override { return drafter_; }
  const forward_hooks* prefill_hooks() override { return &hooks_; }
  const forward_hooks* target_hooks() override { return &hooks_; }
  /// A new request: its prompt's features, an empty context cache (the policy carries over).
  void after_prefill() override {
    committed_ = last_;
    context_->crop(0);
  }
  /// The root and the accepted nodes are committed: their features from the verify forward are kept.
  void committed(const specdec::draft_tree&, std::span<const std::int32_t> nodes) override {
    const specdec::index_t w = width();
    std::vector<std::int32_t> rows = {0};
    rows.insert(rows.end(), nodes.begin(), nodes.end());
    for (auto r : rows) committed_.insert(committed_.end(), last_.begin() + r * w, last_.begin() + (r + 1) * w);
  }
  /// Every committed token but the root has its features (the root's come from the verify forward).
  bool ready(const step_state& at) const override {
    return at.cached >= 1 && static_cast<specdec::index_t>(committed_.size()) >= at.cached * width();
  }
  const specdec::policy::draft_length_policy& policy() const { return drafter_.policy(); }

  /// The context catches up to the target's cached rows, then the block runs at positions cached ...
  host_matrix run(const step_state& at, const specdec::draft_request& r) override {
    namespace dflash = specdec::blocks::dflash;
    const specdec::index_t e = config_.layer.attention.hidden, n = at.cached, first = context_->size(), rows = r.rows();
    if (first < n) {
      std::vector<std::int64_t> positions(static_cast<std::size_t>(n - first));
      for (specdec::index_t p = first; p < n; ++p) positions[static_cast<std::size_t>(p - first)] = p;
      dflash::append_context(backend_, config_, weights_, host_matrix(committed_.data() + first * width(), n - first, width()),
                             specdec::vector_view<const std::int64_t>(positions.data(), n - first), *context_);
    }
    const auto positions = r.positions(n);
    out_.resize(static_cast<std::size_t>(rows * e));
    dflash::forward(backend_, config_, weights_, specdec::vector_view<const std::int32_t>(r.tokens.data(), rows),
                    specdec::vector_view<const std::int64_t>(positions.data(), rows), *context_,
                    specdec::matrix_view<float>(out_.data(), rows, e));
    const bool reduced = draft_head_.weight.rows() > 0;
    const specdec::index_t v = reduced ? draft_head_.weight.rows() : config_.vocab;
    logits_.resize(static_cast<std::size_t>(rows * v));
    const host_matrix normed(out_.data(), rows, e);
    if (reduced)
      specdec::blocks::apply(backend_, draft_head_, normed, specdec::matrix_view<float>(logits_.data(), rows, v));
    else
      dflash::logits(backend_, weights_, normed, specdec::matrix_view<float>(logits_.data(), rows, v));
    return host_matrix(logits_.data(), rows, v);
  }

 private:
  specdec::index_t width() const { return static_cast<specdec::index_t>(ids_.size()) * model_->config().hidden; }
  /// The config from the file's shapes and index tensors, once the whole layout is checked.
  static specdec::blocks::dflash::config config_of(const llama_model& model, const specdec::io::safetensors& file, const std::string& path) {
    const auto& c = model.config();
    constexpr const char* where = "engine::dflash_drafter";
    specdec::blocks::dflash::config d;
    d.layer = {{c.hidden, c.heads, c.kv_heads, c.head_dim, c.rope_theta, true}, c.intermediate, c.rms_eps, true};
    d.layer.attention.qk_norm = true;
    d.layer.attention.qk_norm_eps = c.rms_eps;
    while (file.contains("layers." + std::to_string(d.layers) + ".input_layernorm.weight")) ++d.layers;
    d.vocab = c.vocab;
    const auto length_of = [&](const char* name) -> specdec::index_t {
      return file.contains(name) && file.at(name).shape.size() == 1 ? file.at(name).shape[0] : 0;
    };
    d.feature_layers = length_of("dflash.target_layer_ids");
    const specdec::index_t e = c.hidden;
    std::vector<expected_tensor> expected = {{"dflash.target_layer_ids", {std::max<specdec::index_t>(d.feature_layers, 1)}, "I64"},
                                             {"dflash.mask_token_id", {1}, "I64"},
                                             {"dflash.block_size", {1}, "I64"},
                                             {"fc.weight", {e, d.feature_layers * e}},
                                             {"hidden_norm.weight", {e}},
                                             {"norm.weight", {e}}};
    if (file.contains("d2t")) expected.push_back({"d2t", {std::max<specdec::index_t>(length_of("d2t"), 1)}, "I64"});
    for (specdec::index_t l = 0; l < d.layers; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".";
      for (auto& t : layer_layout(p, d.layer)) expected.push_back(t);
      expected.push_back({p + "self_attn.q_norm.weight", {c.head_dim}});
      expected.push_back({p + "self_attn.k_norm.weight", {c.head_dim}});
    }
    check_layout(file, path, expected);
    const auto ids = file.integers("dflash.target_layer_ids");
    for (std::size_t i = 0; i < ids.size(); ++i)
      SPECDEC_EXPECTS(ids[i] >= 0 && ids[i] < c.layers, where, path, ": dflash.target_layer_ids[", i, "] = ", ids[i],
                      "; expected a layer of the target, in [0, ", c.layers, ")");
    const std::int64_t block = file.integers("dflash.block_size")[0], mask = file.integers("dflash.mask_token_id")[0];
    SPECDEC_EXPECTS(block >= 2 && block <= 4096 && mask >= 0 && mask < c.vocab, where, path, ": dflash.block_size = ", block,
                    ", dflash.mask_token_id = ", mask, "; expected a block of 2..4096 and an id of the target's vocabulary [0, ",
                    c.vocab, ")");
    d.block_size = block;
    d.mask_token = static_cast<std::int32_t>(mask);
    d.validate();
    return d;
  }
  static specdec::block_drafter<specdec::eigen>::parameters parameters(const llama_model& model, const specdec::io::safetensors& file,
                                                                       const specdec::blocks::dflash::config& c, bool adaptive,
                                                                       specdec::index_t top_k, specdec::index_t nodes) {
    specdec::block_drafter<specdec::eigen>::parameters p{.block_size = c.block_size, .mask_token = c.mask_token, .top_k = top_k,
                                                         .nodes = nodes, .adaptive = adaptive};
    if (file.contains("d2t")) {
      const auto d2t = file.integers("d2t");
      for (std::size_t i = 0; i < d2t.size(); ++i) {
        const std::int64_t offset = d2t[i];
        const auto at = static_cast<std::int64_t>(i);
        if (offset < -at || offset >= model.config().vocab - at)  // by subtraction: a file's offset may be near INT64_MAX
          specdec::detail::throw_invalid_argument("engine::dflash_drafter", "d2t[", i, "] = ", offset, " maps draft id ", i,
                                                  " outside the target's vocabulary [0, ", model.config().vocab, ")");
        p.d2t.push_back(static_cast<std::int32_t>(offset));
      }
    }
    return p;
  }

  const llama_model* model_;
  specdec::eigen backend_;
  specdec::io::safetensors file_;  // owns the weights the views below point into
  specdec::blocks::dflash::config config_;
  std::vector<std::int64_t> ids_;
  specdec::block_drafter<specdec::eigen> drafter_;
  specdec::blocks::dflash::weights<specdec::host_space> weights_;
  specdec::blocks::linear<specdec::host_space> draft_head_ = {};
  std::vector<float> head_rows_;
  std::unique_ptr<specdec::blocks::dflash::context_cache<specdec::eigen>> context_;
  forward_hooks hooks_;
  std::vector<float> last_, committed_;  // features of the last target forward's rows; of the committed tokens
  std::vector<float> out_, logits_;
};

}  // namespace engine
