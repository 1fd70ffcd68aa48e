// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Multi-token prediction (DeepSeek-V3's MTP module, as vLLM's `deepseek_mtp.py` and SGLang's
/// `deepseek_nextn.py` run it; GLM-4.5's has the same layout):
///
/// `x = eh_proj([enorm(embed(t)) ; hnorm(h)])` (2E -> E, no bias, embedding first), `o = layer(x)` (one
/// pre-norm decoder layer, residual = x), `logits = head(shared_head.norm(o))` over the target's
/// vocabulary. `h` is the target's last hidden state *after* its final norm for the first step and the
/// previous step's `o` (pre-norm) for the next ones; step s of a chain uses module `s mod n` of a model
/// that ships n modules, so a model with one MTP layer drafts k tokens by reusing it. vLLM zeroes the
/// embedding of rows at position 0 (`zero_embedding_at_position_0`); SGLang does not.
///
/// The decoder layer is a parameter: `forward` takes the Llama layer of `layers.hpp` (GQA attention,
/// SwiGLU MLP: GLM-4.5-style dense layers, MiMo); an engine whose MTP layer is its own kind (DeepSeek-V3's
/// MLA + MoE) passes that layer as a callable to `forward_with`.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <specdec/blocks/layers.hpp>

namespace specdec::blocks::mtp {

/// Shapes of one MTP module.
struct config {
  layer_config layer = {};  ///< the decoder layer; layer.attention.hidden = E
  index_t vocab = 0;        ///< V: the embedding's and the head's rows (the target's vocabulary)
  /// vLLM's `inputs_embeds[positions == 0] = 0`: rows at position 0 embed as zeros (their token was
  /// never predicted by the target); SGLang keeps them.
  bool zero_embedding_at_position_0 = true;

  void validate() const {
    layer.attention.validate();
    SPECDEC_EXPECTS(vocab >= 1 && layer.intermediate >= 1 && layer.input_norm, "specdec::blocks::mtp::config", "vocab = ",
                    vocab, ", intermediate = ", layer.intermediate, ", input_norm = ", layer.input_norm,
                    "; expected positive sizes and a pre-norm layer (input_norm)");
  }
};

/// Tensors of one module (DeepSeek-V3 names under `model.layers.{L + i}.`, e.g. "model.layers.61.").
template <class Space = host_space>
struct weights {
  matrix_view<const float, Space> embed = {};  ///< `embed_tokens.weight` [V x E] (shared with the target)
  vector_view<const float, Space> enorm = {};  ///< `enorm.weight` [E]
  vector_view<const float, Space> hnorm = {};  ///< `hnorm.weight` [E]
  linear<Space> eh_proj = {};                  ///< `eh_proj.weight` [E x 2E], no bias
  layer_weights<Space> layer = {};             ///< the decoder layer (when it is layers.hpp's)
  vector_view<const float, Space> head_norm = {};  ///< `shared_head.norm.weight` [E]
  linear<Space> head = {};                     ///< `shared_head.head.weight` [V x E] (the target's LM head)

  /// Checks the module's own tensors (not the layer's: `validate_layer`). \throws invalid_argument
  /// naming the first tensor whose shape does not match `c`.
  void validate_module(const config& c) const {
    const index_t e = c.layer.attention.hidden;
    SPECDEC_EXPECTS(embed.rows() == c.vocab && embed.cols() == e && embed.data() != nullptr, "specdec::blocks",
                    "embed_tokens.weight has shape [", embed.rows(), " x ", embed.cols(), "]; expected [", c.vocab, " x ", e, "]");
    validate_vector(enorm, "enorm.weight", e);
    validate_vector(hnorm, "hnorm.weight", e);
    eh_proj.validate("eh_proj", e, 2 * e);
    validate_vector(head_norm, "shared_head.norm.weight", e);
    head.validate("shared_head.head", c.vocab, e);
  }
  /// validate_module and the Llama layer's tensors. \throws invalid_argument as validate_module.
  void validate(const config& c) const {
    c.validate();
    validate_module(c);
    layer.validate(c.layer, "");
  }
};

/// The module's own tensors as inputs of a call's checked arguments.
template <class Space>
void add_module_inputs(detail::arguments& set, const weights<Space>& w) {
  set.add(specdec::detail::input("embed_tokens.weight", w.embed)).add(specdec::detail::input("enorm.weight", w.enorm));
  set.add(specdec::detail::input("hnorm.weight", w.hnorm));
  detail::add_inputs(set, w.eh_proj, "eh_proj.weight", "eh_proj.bias");
}

/// The module's input `x = eh_proj([enorm(embed(tokens)) ; hnorm(hidden)])` into `out` `[T x E]`.
/// \param tokens backend `[T]` int32 in [0, V). \param hidden backend `[T x E]`.
/// \param positions backend `[T]` (read only for the position-0 rule; copied to the host when the rule
///   is on). \throws invalid_argument on shapes or token ids outside the table.
template <dense_backend B>
void project(B& b, const config& c, const weights<typename B::memory_space>& w,
             vector_view<const std::int32_t, typename B::memory_space> tokens,
             matrix_view<const float, typename B::memory_space> hidden,
             vector_view<const std::int64_t, typename B::memory_space> positions, matrix_view<float, typename B::memory_space> out) {
  using space = typename B::memory_space;
  constexpr const char* where = "specdec::blocks::mtp::project";
  const index_t t = tokens.rows(), e = c.layer.attention.hidden;
  SPECDEC_EXPECTS(hidden.rows() == t && hidden.cols() == e && positions.rows() == t, where, "hidden is [", hidden.rows(),
                  " x ", hidden.cols(), "] and positions has ", positions.rows(), " entries; expected [", t, " x ", e,
                  "] and ", t, " (one per token)");
  detail::arguments args(where);
  add_module_inputs(args, w);
  args.add(specdec::detail::input("tokens", tokens)).add(specdec::detail::input("hidden", hidden));
  args.add(specdec::detail::input("positions", positions)).add(specdec::detail::output("out", out)).check();
  std::vector<typename B::template buffer<float>> keep;
  auto embedded = detail::scratch(b, keep, t, e);
  b.gather_rows(w.embed, tokens, embedded);
  if (c.zero_embedding_at_position_0) {
    // Rows at position 0 gather the (all-zero) row of a one-row zero table instead.
    const auto pos = b.download(positions);
    std::vector<std::int32_t> zero_rows;
    for (index_t i = 0; i < t; ++i)
      if (pos[static_cast<std::size_t>(i)] == 0) zero_rows.push_back(static_cast<std::int32_t>(i));
    if (!zero_rows.empty()) {
      auto zeros = b.upload(std::span<const float>(std::vector<float>(static_cast<std::size_t>(e), 0.0f)));
      const std::vector<std::int32_t> first(zero_rows.size(), 0);
      auto ids = b.upload(std::span<const std::int32_t>(first));
      for (const std::int32_t r : zero_rows)
        b.gather_rows(matrix_view<const float, space>(zeros.view().data(), 1, e),
                      vector_view<const std::int32_t, space>(ids.view().data(), 1),
                      matrix_view<float, space>(embedded.data() + r * e, 1, e));
    }
  }
  auto x = detail::scratch(b, keep, t, 2 * e);
  b.rms_norm(detail::as_const<B>(embedded), w.enorm, c.layer.rms_eps, matrix_view<float, space>(x.data(), t, e, 2 * e, 1));
  b.rms_norm(hidden, w.hnorm, c.layer.rms_eps, matrix_view<float, space>(x.data() + e, t, e, 2 * e, 1));
  apply(b, w.eh_proj, detail::as_const<B>(x), out);
}

/// One MTP step with the engine's own decoder layer: project into `out`, then `layer(out)` must apply
/// the module's decoder layer in place on `out` `[T x E]` (its residual stream). `out` is the step's
/// `o`: the next step's `hidden`, and logits()'s input. \throws as project, and what `layer` throws.
template <dense_backend B, class Layer>
void forward_with(B& b, const config& c, const weights<typename B::memory_space>& w,
                  vector_view<const std::int32_t, typename B::memory_space> tokens,
                  matrix_view<const float, typename B::memory_space> hidden,
                  vector_view<const std::int64_t, typename B::memory_space> positions, Layer&& layer,
                  matrix_view<float, typename B::memory_space> out) {
  project(b, c, w, tokens, hidden, positions, out);
  layer(out);
}

/// One MTP step with layers.hpp's decoder layer (`w.layer`): self-attention over `cache` (the module's
/// own: keys of earlier rows after RoPE; these rows are appended) and these rows under `mask`.
/// \param out backend `[T x E]`, apart from `hidden` (a chain alternates two buffers).
/// \throws invalid_argument as project and decoder_layer_forward.
template <dense_backend B>
void forward(B& b, const config& c, const weights<typename B::memory_space>& w,
             vector_view<const std::int32_t, typename B::memory_space> tokens,
             matrix_view<const float, typename B::memory_space> hidden,
             vector_view<const std::int64_t, typename B::memory_space> positions, std::type_identity_t<kv_cache<B>>* cache,
             const attention_mask<typename B::memory_space>& mask, matrix_view<float, typename B::memory_space> out) {
  // The layer's weights too: project writes out before the layer reads them.
  detail::arguments args("specdec::blocks::mtp::forward");
  add_module_inputs(args, w);
  detail::add_inputs(args, w.layer);
  detail::add_inputs(args, mask);
  args.add(specdec::detail::input("tokens", tokens)).add(specdec::detail::input("hidden", hidden));
  args.add(specdec::detail::input("positions", positions)).add(specdec::detail::output("out", out)).check();
  forward_with(b, c, w, tokens, hidden, positions,
               [&](matrix_view<float, typename B::memory_space> x) { decoder_layer_forward(b, c.layer, w.layer, x, positions, cache, mask); },
               out);
}

/// Logits `head(head_norm(o))`. \param o backend `[T x E]`. \param logits backend `[T x V]`.
/// \throws invalid_argument on shapes.
template <dense_backend B>
void logits(B& b, const config& c, const weights<typename B::memory_space>& w,
            matrix_view<const float, typename B::memory_space> o, matrix_view<float, typename B::memory_space> logits) {
  norm_then_apply(b, w.head_norm, c.layer.rms_eps, w.head, o, logits);
}

}  // namespace specdec::blocks::mtp
