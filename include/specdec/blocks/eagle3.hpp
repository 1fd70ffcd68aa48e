// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief EAGLE-3's draft block (SafeAILab/EAGLE `eagle/model/cnets.py`, `Model` + `LlamaDecoderLayeremb`;
/// vLLM's and SGLang's `llama_eagle3.py` serve the same tensors):
///
/// 1. **fuse**: `g = fc([low ; mid ; high])`, the target's hidden states entering three of its layers
///    (`tap_layers`), 3E_t -> E, no bias. Only the target's features go through it; the draft's own
///    fed-back state is already E wide.
/// 2. **layer**: with `h` the fused or fed-back state and `e` the embedding of the token,
///    `x = [input_layernorm(e) ; hidden_norm(h)]` (2E, embedding first), `h1 = h + o(attn(x))` (q / k / v
///    project from 2E), `h2 = h1 + mlp(post_attention_layernorm(h1))`. The residual is `h` itself, not
///    normalised. `h2` is what the next draft step feeds back.
/// 3. **logits**: `lm_head(norm(h2))` over the draft vocabulary V_d; draft id `i` is target id
///    `i + d2t[i]` (`eagle2_tree_builder`'s `dynamic_tree_config::d2t` applies it to a tree).
///
/// Alignment (the engine's, not the block's): the draft row at position p pairs the target's feature of
/// position p with the token at p + 1 and predicts p + 2; later steps feed back h2 one position on, and
/// siblings at one tree depth share a position.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include <specdec/blocks/layers.hpp>

namespace specdec::blocks::eagle3 {

/// The target layers whose *inputs* EAGLE-3 fuses, low to high: `{2, L / 2, L - 3}` for a target of
/// `L` layers (EAGLE's `topK_genrate` callers and vLLM's default; Llama-3.1-8B: 2, 16, 29). Index i is
/// the hidden state entering layer i, i.e. Hugging Face's `hidden_states[i]` (entry 0 is the
/// embedding output). SGLang's `eagle_aux_hidden_state_layer_ids` counts layer outputs (its ids are
/// these minus one). Below 7 layers taps coincide, as they do in vLLM.
/// \throws invalid_argument unless L >= 3 (every tap a layer of the target).
inline std::array<index_t, 3> tap_layers(index_t layers) {
  SPECDEC_EXPECTS(layers >= 3, "specdec::blocks::eagle3::tap_layers", "layers = ", layers,
                  "; expected at least 3 (taps 2, L / 2 and L - 3 must be layers of the target)");
  return {2, layers / 2, layers - 3};
}

/// Shapes of an EAGLE-3 draft block.
struct config {
  layer_config layer = {};   ///< attention.hidden = E; attention.input is set to 2E by `attention()`
  index_t target_hidden = 0;  ///< E_t, the width of each tapped target state (fc reads 3 E_t)
  index_t vocab = 0;          ///< V, the embedding table's rows (the target's vocabulary)
  index_t draft_vocab = 0;    ///< V_d, lm_head's rows

  /// The attention shape the layer runs with: q / k / v project from 2E.
  attention_config attention() const {
    attention_config a = layer.attention;
    a.input = 2 * layer.attention.hidden;
    return a;
  }
  void validate() const {
    attention().validate();
    SPECDEC_EXPECTS(target_hidden >= 1 && vocab >= 1 && draft_vocab >= 1 && layer.intermediate >= 1 && layer.input_norm,
                    "specdec::blocks::eagle3::config", "target_hidden = ", target_hidden, ", vocab = ", vocab,
                    ", draft_vocab = ", draft_vocab, ", intermediate = ", layer.intermediate, ", input_norm = ",
                    layer.input_norm, "; expected positive sizes and input_norm (the embedding's input_layernorm)");
  }
};

/// Tensors of an EAGLE-3 checkpoint (names as SafeAILab's; vLLM maps `midlayer.` to `layers.0.`).
template <class Space = host_space>
struct weights {
  matrix_view<const float, Space> embed = {};   ///< `embed_tokens.weight` [V x E] (the target's when absent)
  linear<Space> fc = {};                        ///< `fc.weight` [E x 3 E_t], no bias
  vector_view<const float, Space> hidden_norm = {};  ///< `midlayer.hidden_norm.weight` [E]
  layer_weights<Space> layer = {};              ///< `midlayer.*`: input_layernorm (of the embedding), attention (2E in), post norm, MLP
  vector_view<const float, Space> norm = {};    ///< `norm.weight` [E]
  linear<Space> lm_head = {};                   ///< `lm_head.weight` [V_d x E], no bias

  /// \throws invalid_argument naming the first tensor whose shape does not match `c` (and when `c`
  /// itself is not valid).
  void validate(const config& c, const std::string& prefix = "midlayer.") const {
    c.validate();
    const index_t e = c.layer.attention.hidden;
    SPECDEC_EXPECTS(embed.rows() == c.vocab && embed.cols() == e && embed.data() != nullptr, "specdec::blocks",
                    "embed_tokens.weight has shape [", embed.rows(), " x ", embed.cols(), "]; expected [", c.vocab, " x ", e, "]");
    fc.validate("fc", e, 3 * c.target_hidden);
    validate_vector(hidden_norm, prefix + "hidden_norm.weight", e);
    validate_vector(layer.input_norm, prefix + "input_layernorm.weight", e);
    validate_vector(layer.post_norm, prefix + "post_attention_layernorm.weight", e);
    layer.attention.validate(c.attention(), prefix + "self_attn.");
    layer.mlp.validate(e, c.layer.intermediate, prefix + "mlp.");
    validate_vector(norm, "norm.weight", e);
    lm_head.validate("lm_head", c.draft_vocab, e);
  }
};

/// g = taps fc^T. \param taps backend `[T x 3 E_t]`, each row `[low ; mid ; high]` (the target's states
/// entering its `tap_layers`). \param out backend `[T x E]`. \throws invalid_argument on shapes.
template <dense_backend B>
void fuse(B& b, const weights<typename B::memory_space>& w, matrix_view<const float, typename B::memory_space> taps,
          matrix_view<float, typename B::memory_space> out) {
  apply(b, w.fc, taps, out);
}

/// The draft layer: `out = h2` for tokens `tokens` at `positions` with incoming state `hidden` (fused
/// target features for the first step, the previous step's `out` for later ones), self-attention over
/// `cache` (the keys of earlier rows, after RoPE; these rows are appended) and these rows under `mask`
/// (causal by default; a tree's `[T x (cached + T)]` allowed mask for tree steps).
/// \param tokens backend `[T]` int32 in [0, V) (target ids: EAGLE-3 embeds with the target's table).
/// \param hidden backend `[T x E]`. \param positions backend `[T]`.
/// \param out backend `[T x E]`; may be `hidden` itself (the step updates the fed-back state in place),
///   otherwise apart from it.
/// \throws invalid_argument on shapes, token ids outside the table, a full cache (validate the weights
///   once with weights::validate).
template <dense_backend B>
void forward(B& b, const config& c, const weights<typename B::memory_space>& w,
             vector_view<const std::int32_t, typename B::memory_space> tokens,
             matrix_view<const float, typename B::memory_space> hidden,
             vector_view<const std::int64_t, typename B::memory_space> positions, std::type_identity_t<kv_cache<B>>* cache,
             const attention_mask<typename B::memory_space>& mask, matrix_view<float, typename B::memory_space> out) {
  using space = typename B::memory_space;
  constexpr const char* where = "specdec::blocks::eagle3::forward";
  const index_t t = tokens.rows(), e = c.layer.attention.hidden;
  SPECDEC_EXPECTS(hidden.rows() == t && hidden.cols() == e && out.rows() == t && out.cols() == e, where, "hidden is [",
                  hidden.rows(), " x ", hidden.cols(), "] and out [", out.rows(), " x ", out.cols(), "]; expected [", t,
                  " x ", e, "] each (one row per token)");
  // out may be hidden itself; apart from every other argument (the weights are read after out is first written).
  detail::arguments args(where);
  args.add(specdec::detail::input("embed_tokens.weight", w.embed)).add(specdec::detail::input("hidden_norm.weight", w.hidden_norm));
  detail::add_inputs(args, w.layer);
  detail::add_inputs(args, mask);
  args.add(specdec::detail::input("tokens", tokens)).add(specdec::detail::input("hidden", hidden));
  args.add(specdec::detail::input("positions", positions));
  args.add(specdec::detail::in_place("out", out, specdec::detail::indexed_output, "hidden")).check();
  const cache_rollback<B> rollback(cache);  // the MLP's checks run after the attention appended
  std::vector<typename B::template buffer<float>> keep;
  auto embedded = detail::scratch(b, keep, t, e);
  b.gather_rows(w.embed, tokens, embedded);
  // x = [input_layernorm(e) ; hidden_norm(h)]: both norms write their half of one [T x 2E] buffer.
  auto x = detail::scratch(b, keep, t, 2 * e);
  b.rms_norm(detail::as_const<B>(embedded), w.layer.input_norm, c.layer.rms_eps, matrix_view<float, space>(x.data(), t, e, 2 * e, 1));
  b.rms_norm(hidden, w.hidden_norm, c.layer.rms_eps, matrix_view<float, space>(x.data() + e, t, e, 2 * e, 1));
  auto delta = detail::scratch(b, keep, t, e);
  const detail::cmview<B> xin = detail::as_const<B>(x);
  attention_forward(b, c.attention(), w.layer.attention, xin, positions, xin, positions, cache, mask, delta);
  if (out.data() != hidden.data()) copy_rows(b, hidden, out);
  b.add_rows(out, detail::as_const<B>(delta));  // h1 = h + attn
  auto normed = detail::scratch(b, keep, t, e);
  b.rms_norm(detail::as_const<B>(out), w.layer.post_norm, c.layer.rms_eps, normed);
  mlp_forward(b, w.layer.mlp, detail::as_const<B>(normed), delta);
  b.add_rows(out, detail::as_const<B>(delta));  // h2 = h1 + mlp
}

/// Draft logits `lm_head(norm(h2))`. \param h2 backend `[T x E]` (forward's out).
/// \param logits backend `[T x V_d]`. \throws invalid_argument on shapes.
template <dense_backend B>
void logits(B& b, const config& c, const weights<typename B::memory_space>& w,
            matrix_view<const float, typename B::memory_space> h2, matrix_view<float, typename B::memory_space> logits) {
  norm_then_apply(b, w.norm, c.layer.rms_eps, w.lm_head, h2, logits);
}

}  // namespace specdec::blocks::eagle3
