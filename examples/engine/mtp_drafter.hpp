// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief A trained multi-token-prediction module drafting chains (examples/mtp.cpp): DeepSeek-V3's MTP
/// layout (specdec::blocks::mtp) on the target's final hidden states. Row p (at position p) projects
/// `[enorm(embed(x_{p+1})) ; hnorm(h_p)]`, runs the module's decoder layer over its own KV cache, and
/// its output o, through `shared_head.norm` and the target's LM head, gives token p + 2; each further
/// draft token feeds the previous row's o back. specdec::chain_drafter asks for the rows (greedy or
/// sampled at the request's temperature) and the draft-length policy sizes each chain when `adaptive`.
/// One module serves every step (models that ship one MTP layer run it k times).
///
/// Checkpoint layout (tools/train/mtp.py; fp16, DeepSeek-V3's names for module 0 of an L-layer target):
/// `model.layers.{L}.{enorm,hnorm}.weight` [E], `model.layers.{L}.eh_proj.weight` [E x 2E], the decoder
/// layer `model.layers.{L}.{input_layernorm,post_attention_layernorm}.weight`,
/// `model.layers.{L}.self_attn.{q,k,v,o}_proj.weight`, `model.layers.{L}.mlp.{gate,up,down}_proj.weight`
/// (the target's shapes), `model.layers.{L}.shared_head.norm.weight` [E]; the embedding and
/// `shared_head.head` are the target's.
#pragma once

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <specdec/blocks/mtp.hpp>
#include <specdec/tree/drafters.hpp>

#include "checkpoint.hpp"
#include "feature_drafter.hpp"

namespace engine {

class mtp_drafter : public feature_drafter {
 public:
  /// \param longest the most tokens a chain drafts. \throws specdec::invalid_argument when
  /// `weights_path` does not hold the layout above for this model (any name, shape or dtype).
  mtp_drafter(const llama_model& model, index_t longest, const std::string& weights_path, bool adaptive = false)
      : feature_drafter(model), chain_(backend_, {longest, adaptive, {}}) {
    const auto& c = model.config();
    const index_t e = c.hidden;
    const std::string m = "model.layers." + std::to_string(c.layers) + ".";
    config_ = {{{e, c.heads, c.kv_heads, c.head_dim, c.rope_theta, true}, c.intermediate, c.rms_eps, true}, c.vocab, true};
    auto expected = layer_layout(m, config_.layer);
    expected.insert(expected.end(), {{m + "enorm.weight", {e}}, {m + "hnorm.weight", {e}}, {m + "eh_proj.weight", {e, 2 * e}},
                                     {m + "shared_head.norm.weight", {e}}});
    file_ = load_checkpoint(weights_path, expected);
    weights_ = {model.embedding(), file_.vector(m + "enorm.weight"), file_.vector(m + "hnorm.weight"), file_.linear(m + "eh_proj"),
                file_.layer(m), file_.vector(m + "shared_head.norm.weight"), {model.lm_head(), {}}};
    weights_.validate(config_);
    cache_ = std::make_unique<specdec::blocks::kv_cache<specdec::eigen>>(backend_, 8192, c.kv_heads * c.head_dim);
  }
  std::string name() const override { return "mtp"; }
  drafter_ref drafter() override { return chain_; }
  /// A new request: the module's cache starts empty (the policy carries over, as in an engine).
  void after_prefill() override {
    feature_drafter::after_prefill();
    context_rows_ = 0;
  }
  /// The root x_n is module row n - 1, fed h_{n-1}.
  bool ready(const step_state& at) const override { return at.cached >= 1 && committed_features() >= at.cached; }
  const specdec::policy::draft_length_policy& policy() const { return chain_.policy(); }

  /// The root x_n is row n - 1 (with h_{n-1}); draft token d's row follows at position n - 1 + d.
  host_matrix run(const step_state& at, const specdec::draft_request& r) override {
    const index_t e = model_->config().hidden, v = model_->config().vocab, n = at.cached;
    if (r.depth[0] == 0) {  // the root row, after the context rows the cache lacks, in one causal forward
      cache_->crop(context_rows_);  // the last draft's rows go
      const index_t first = context_rows_, t = n - first;
      const auto [tokens, positions] = shifted_context(at.committed, first, n);
      forward(tokens, host_matrix(features().data() + first * e, t, e), positions, {});
      context_rows_ = n;
    } else {  // the chain's next token continues the previous row's o
      const std::vector<float> h = last_out_;
      forward(r.tokens, host_matrix(h.data(), 1, e), r.positions(n - 1), r.attention_mask(n - 1));
    }
    logits_.resize(static_cast<std::size_t>(v));
    specdec::blocks::mtp::logits(backend_, config_, weights_, host_matrix(last_out_.data(), 1, e), specdec::matrix_view<float>(logits_.data(), 1, v));
    return host_matrix(logits_.data(), 1, v);
  }

 private:
  /// The module over `tokens` at `positions` with incoming states `h` (causal over the cache, or
  /// `allowed` `[T x (cached + T)]`); keeps the last row's o in last_out_.
  void forward(std::span<const std::int32_t> tokens, host_matrix h, std::span<const std::int64_t> positions,
               std::span<const std::uint8_t> allowed) {
    using space = specdec::host_space;
    const index_t t = static_cast<index_t>(tokens.size()), e = model_->config().hidden;
    const auto mask = allowed.empty() ? specdec::blocks::attention_mask<space>::causal()
                                      : specdec::blocks::attention_mask<space>::from(specdec::matrix_view<const std::uint8_t>(
                                            allowed.data(), t, static_cast<index_t>(allowed.size()) / t));
    std::vector<float> o(static_cast<std::size_t>(t * e));
    specdec::blocks::mtp::forward(backend_, config_, weights_, specdec::vector_view<const std::int32_t>(tokens.data(), t), h,
                                  specdec::vector_view<const std::int64_t>(positions.data(), t), cache_.get(), mask,
                                  specdec::matrix_view<float>(o.data(), t, e));
    last_out_.assign(o.end() - e, o.end());
  }

  specdec::chain_drafter<specdec::eigen> chain_;
  specdec::blocks::mtp::config config_;
  specdec::io::safetensors file_;  // owns the weights the views below point into
  specdec::blocks::mtp::weights<specdec::host_space> weights_;
  std::unique_ptr<specdec::blocks::kv_cache<specdec::eigen>> cache_;
  index_t context_rows_ = 0;  // the cache's rows of committed context (a draft's rows follow)
  std::vector<float> last_out_, logits_;
};

}  // namespace engine
