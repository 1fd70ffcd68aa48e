// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The EAGLE draft layer, which Jakiro shares: fuse the embedding of the next token with the
/// target's feature, `fused = fc([embed(x_{t+1}); f_t])` (Linear 2E -> E with bias, embedding first),
/// then one decoder layer whose layer 0 has no input RMSNorm. The target's LM head turns the output
/// into draft logits (the engine applies it; it is the target's).
#pragma once

#include <cstdint>
#include <string>

#include <specdec/blocks/layers.hpp>

namespace specdec::blocks::eagle {

template <class Space = host_space>
struct weights {
  matrix_view<const float, Space> embed = {};  ///< [V x E] token embeddings (the target's)
  linear<Space> fc = {};                       ///< [E x 2E] + bias [E]
  layer_weights<Space> layer = {};             ///< "layers.0.": input_norm empty (layer 0 skips it)

  /// \throws invalid_argument naming the first tensor whose shape does not match `c`.
  void validate(const layer_config& c, index_t vocab, bool with_mlp = true) const {
    const index_t e = c.attention.hidden;
    SPECDEC_EXPECTS(embed.rows() == vocab && embed.cols() == e && embed.data() != nullptr, "specdec::blocks",
                    "embed_tokens.weight has shape [", embed.rows(), " x ", embed.cols(), "]; expected [", vocab, " x ", e, "]");
    fc.validate("fc", e, 2 * e, true);
    layer.validate(c, "layers.0.", with_mlp);
  }
};

namespace detail {
template <class Space>
void add_inputs(blocks::detail::arguments& set, const weights<Space>& w) {
  set.add(specdec::detail::input("embed_tokens.weight", w.embed));
  blocks::detail::add_inputs(set, w.fc, "fc.weight", "fc.bias");
  blocks::detail::add_inputs(set, w.layer);
}
}  // namespace detail

/// fused = [embed(tokens) ; feature] fc^T + bias. \param tokens backend `[T]` int32 in [0, V).
/// \param feature backend `[T x E]` (the target's last hidden state, after its final norm).
/// \param out backend `[T x E]`. \throws invalid_argument on shapes or token ids outside the table.
template <dense_backend B>
void fuse(B& b, const weights<typename B::memory_space>& w, vector_view<const std::int32_t, typename B::memory_space> tokens,
          matrix_view<const float, typename B::memory_space> feature, matrix_view<float, typename B::memory_space> out) {
  using space = typename B::memory_space;
  const index_t t = tokens.rows(), e = w.embed.cols();
  SPECDEC_EXPECTS(feature.rows() == t && feature.cols() == e, "specdec::blocks::eagle::fuse", "feature has shape [",
                  feature.rows(), " x ", feature.cols(), "]; expected [", t, " x ", e, "]");
  blocks::detail::arguments args("specdec::blocks::eagle::fuse");
  args.add(specdec::detail::input("embed_tokens.weight", w.embed));
  blocks::detail::add_inputs(args, w.fc, "fc.weight", "fc.bias");
  args.add(specdec::detail::input("tokens", tokens)).add(specdec::detail::input("feature", feature));
  args.add(specdec::detail::output("out", out)).check();
  // fc's two halves are views into its weight: its shape must be [E x 2E] before they are formed.
  w.fc.validate("fc", e, 2 * e, true);
  specdec::detail::check_view("specdec::blocks::eagle::fuse", "fc.weight", w.fc.weight, specdec::detail::packed);
  // The bias is added as one packed row (a strided one would be read as packed).
  specdec::detail::check_view("specdec::blocks::eagle::fuse", "fc.bias", w.fc.bias, specdec::detail::packed);
  auto embedded = b.template allocate<float>(t * e);
  b.gather_rows(w.embed, tokens, embedded.matrix(t, e));
  const matrix_view<const float, space> w_embed(w.fc.weight.data(), e, e, w.fc.weight.stride(0), 1);
  const matrix_view<const float, space> w_feature(w.fc.weight.data() + e, e, e, w.fc.weight.stride(0), 1);
  b.gemm(matrix_view<const float, space>(embedded.view().data(), t, e), transpose::no, w_embed, transpose::yes, out);
  b.gemm(feature, transpose::no, w_feature, transpose::yes, out, 1.0f, 1.0f);
  b.add_rows(out, matrix_view<const float, space>(w.fc.bias.data(), 1, e));
}

/// fuse, then the decoder layer (self-attention over `cache` + these rows at `positions` under `mask`),
/// leaving the output feature in `out` `[T x E]`.
template <dense_backend B>
void forward(B& b, const layer_config& c, const weights<typename B::memory_space>& w,
             vector_view<const std::int32_t, typename B::memory_space> tokens,
             matrix_view<const float, typename B::memory_space> feature,
             vector_view<const std::int64_t, typename B::memory_space> positions, std::type_identity_t<kv_cache<B>>* cache,
             const attention_mask<typename B::memory_space>& mask, matrix_view<float, typename B::memory_space> out) {
  // The layer's weights too: the fused rows are written before the layer reads them.
  blocks::detail::arguments args("specdec::blocks::eagle::forward");
  detail::add_inputs(args, w);
  blocks::detail::add_inputs(args, mask);
  args.add(specdec::detail::input("tokens", tokens)).add(specdec::detail::input("feature", feature));
  args.add(specdec::detail::input("positions", positions)).add(specdec::detail::output("out", out)).check();
  fuse(b, w, tokens, feature, out);
  decoder_layer_forward(b, c, w.layer, out, positions, cache, mask);
}

}  // namespace specdec::blocks::eagle
