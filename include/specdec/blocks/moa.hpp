// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Mixture of Attentions (Zimmer et al.; HEBO `mixture-of-attentions`, ../shared/specs/blocks.md
/// section 2): the target's per-layer K/V packed into `[T, L, E_kv]`, Layer Self-Attention (a decoder
/// layer over the layer axis, RoPE over the layer index, no mask) with the mean over layers and the
/// E_kv -> E projection, the causal self-attention layer over token embeddings (a plain decoder layer:
/// blocks::decoder_layer_forward with its cache), cross-attention with one RMSNorm shared by both
/// streams, its inference (no mask) and training (verified-prefix) masks, and Target Layer Inference
/// through a caller-provided callback.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include <specdec/blocks/layers.hpp>

namespace specdec::blocks::moa {

/// Packs the target's cache of `layers.size()` layers for tokens [first, first + T): row t L + l of
/// `out` `[T L x E_kv]` (E_kv = 2 kv_heads head_dim) holds, for each kv head h in order, K_l[t, h] then
/// V_l[t, h] (head-interleaved, post-RoPE keys as the target caches them).
/// \param keys, values per layer: backend `[tokens x kv_heads head_dim]` (token-major, as kv_cache).
/// \throws invalid_argument on layers of different shapes or rows out of range.
template <dense_backend B>
void pack_kv(B& b, std::span<const matrix_view<const float, typename B::memory_space>> keys,
             std::span<const matrix_view<const float, typename B::memory_space>> values, index_t head_dim, index_t first,
             index_t tokens, matrix_view<float, typename B::memory_space> out) {
  constexpr const char* where = "specdec::blocks::moa::pack_kv";
  using space = typename B::memory_space;
  const auto layers = static_cast<index_t>(keys.size());
  SPECDEC_EXPECTS(layers >= 1 && values.size() == keys.size(), where, "got ", keys.size(), " key and ", values.size(),
                  " value layers; expected the same number, at least one");
  const index_t width = keys[0].cols(), kv_heads = width / head_dim, e_kv = 2 * width;
  SPECDEC_EXPECTS(head_dim >= 1 && width % head_dim == 0, where, "layers have ", width,
                  " columns; expected a multiple of head_dim = ", head_dim);
  SPECDEC_EXPECTS(out.rows() == tokens * layers && out.cols() == e_kv, where, "out has shape [", out.rows(), " x ",
                  out.cols(), "]; expected [", tokens * layers, " x ", e_kv, "]");
  for (index_t l = 0; l < layers; ++l)
    for (const auto* m : {&keys[static_cast<std::size_t>(l)], &values[static_cast<std::size_t>(l)]})
      SPECDEC_EXPECTS(m->cols() == width && first >= 0 && first + tokens <= m->rows(), where, "layer ", l, " is [",
                      m->rows(), " x ", m->cols(), "]; expected ", width, " columns and rows [", first, ", ", first + tokens, ")");
  for (index_t l = 0; l < layers; ++l)
    for (index_t h = 0; h < kv_heads; ++h)
      for (int part = 0; part < 2; ++part) {
        const auto& src = part == 0 ? keys[static_cast<std::size_t>(l)] : values[static_cast<std::size_t>(l)];
        const matrix_view<const float, space> from(src.data() + first * src.stride(0) + h * head_dim, tokens, head_dim,
                                                   src.stride(0), 1);
        const matrix_view<float, space> to(out.data() + l * out.stride(0) + h * 2 * head_dim + part * head_dim, tokens,
                                           head_dim, layers * out.stride(0), 1);
        copy_rows(b, from, to);
      }
}

/// Layer Self-Attention on packed rows `x` `[T L x E_kv]` (in place: each token's L rows form one
/// sequence, RoPE at layer index 0..L-1, no mask), then the mean over the L layers into `mean`
/// `[T x E_kv]`, then `ekv2e` (E_kv -> E with bias) into `out` `[T x E]`: the cross-attention's
/// key/value stream. Layer config: width E_kv, the target's head count.
template <dense_backend B>
void layer_self_attention(B& b, const layer_config& c, const layer_weights<typename B::memory_space>& w,
                          const linear<typename B::memory_space>& ekv2e, index_t layers,
                          matrix_view<float, typename B::memory_space> x, matrix_view<float, typename B::memory_space> mean,
                          matrix_view<float, typename B::memory_space> out) {
  using space = typename B::memory_space;
  SPECDEC_EXPECTS(layers >= 1 && x.rows() % layers == 0, "specdec::blocks::moa::layer_self_attention", x.rows(),
                  " packed rows are not a multiple of L = ", layers);
  const index_t tokens = x.rows() / layers, e_kv = x.cols();
  std::vector<std::int64_t> positions(static_cast<std::size_t>(x.rows()));
  for (std::size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<std::int64_t>(i % static_cast<std::size_t>(layers));
  auto pos = b.upload(std::span<const std::int64_t>(positions));
  decoder_layer_forward(b, c, w, x, vector_view<const std::int64_t, space>(pos.view().data(), x.rows()), nullptr,
                        attention_mask<space>::none(), {}, layers);
  std::vector<float> zero(static_cast<std::size_t>(tokens * e_kv), 0.0f), inv(static_cast<std::size_t>(tokens),
                                                                             1.0f / static_cast<float>(layers));
  auto zeros = b.upload(std::span<const float>(zero));
  auto scale = b.upload(std::span<const float>(inv));
  copy_rows(b, matrix_view<const float, space>(zeros.view().data(), tokens, e_kv), mean);
  for (index_t l = 0; l < layers; ++l)
    b.add_rows(mean, matrix_view<const float, space>(x.data() + l * x.stride(0), tokens, e_kv, layers * x.stride(0), 1),
               vector_view<const float, space>(scale.view().data(), tokens));
  apply(b, ekv2e, matrix_view<const float, space>(mean.data(), tokens, e_kv, mean.stride(0), 1), out);
}

/// Cross-attention layer, in place on the query stream `query` `[Tq x E]` at `query_positions`:
/// n = input_layernorm (shared by both streams); query += o(Attn(q(n(query)), k(n(source)), v(n(source))))
/// with RoPE at query and source positions; then query += MLP(post_attention_layernorm(query)).
/// `source` `[Tk x E]` (the Ekv2E stream of newly verified tokens, possibly none) is appended to
/// `cache` when given; queries see the cache (inference: `attention_mask::none()`) or a training mask.
template <dense_backend B>
void cross_attention(B& b, const layer_config& c, const layer_weights<typename B::memory_space>& w,
                     matrix_view<float, typename B::memory_space> query,
                     vector_view<const std::int64_t, typename B::memory_space> query_positions,
                     matrix_view<const float, typename B::memory_space> source,
                     vector_view<const std::int64_t, typename B::memory_space> source_positions,
                     std::type_identity_t<kv_cache<B>>* cache, const attention_mask<typename B::memory_space>& mask) {
  const index_t tq = query.rows(), tk = source.rows(), e = query.cols();
  std::vector<typename B::template buffer<float>> keep;
  auto nq = detail::scratch(b, keep, tq, e);
  auto ns = detail::scratch(b, keep, tk, e);
  auto delta = detail::scratch(b, keep, tq, e);
  b.rms_norm(detail::as_const<B>(query), w.input_norm, c.rms_eps, nq);
  if (tk > 0) b.rms_norm(source, w.input_norm, c.rms_eps, ns);
  attention_forward(b, c.attention, w.attention, detail::as_const<B>(nq), query_positions, detail::as_const<B>(ns),
                    source_positions, cache, mask, delta);
  b.add_rows(query, detail::as_const<B>(delta));
  b.rms_norm(detail::as_const<B>(query), w.post_norm, c.rms_eps, nq);
  mlp_forward(b, w.mlp, detail::as_const<B>(nq), delta);
  b.add_rows(query, detail::as_const<B>(delta));
}

/// The training-time masks from `response_mask` (0 = verified position, 1 = drafted): start s_i = the
/// last verified position <= i (cummax of i [mask_i == 0], 0 if none). Cross-attention: query i sees
/// key j iff j <= s_i and j <= i. Self-attention "staircase": iff s_i < j <= i or j == i. Host, row-major
/// `[T x T]` uint8 each.
struct training_masks {
  std::vector<std::int64_t> start_positions;
  std::vector<std::uint8_t> cross_attention;
  std::vector<std::uint8_t> staircase;
};
inline training_masks make_training_masks(std::span<const std::int32_t> response_mask) {
  training_masks m;
  const auto t = static_cast<index_t>(response_mask.size());
  std::int64_t s = 0;
  for (index_t i = 0; i < t; ++i) {
    SPECDEC_EXPECTS(response_mask[static_cast<std::size_t>(i)] == 0 || response_mask[static_cast<std::size_t>(i)] == 1,
                    "specdec::blocks::moa::make_training_masks", "response_mask[", i, "] = ",
                    response_mask[static_cast<std::size_t>(i)], "; expected 0 or 1");
    if (response_mask[static_cast<std::size_t>(i)] == 0) s = std::max<std::int64_t>(s, i);
    m.start_positions.push_back(s);
  }
  m.cross_attention.assign(static_cast<std::size_t>(t * t), 0);
  m.staircase.assign(static_cast<std::size_t>(t * t), 0);
  for (index_t i = 0; i < t; ++i)
    for (index_t j = 0; j < t; ++j) {
      const std::int64_t si = m.start_positions[static_cast<std::size_t>(i)];
      m.cross_attention[static_cast<std::size_t>(i * t + j)] = j <= si && j <= i;
      m.staircase[static_cast<std::size_t>(i * t + j)] = (si < j && j <= i) || j == i;
    }
  return m;
}

/// Target Layer Inference: positions with response_mask == 0 take the target's hidden state entering
/// layer L - N (teacher forcing, training), then `run_last_layers` (the engine's last N target layers,
/// final norm and LM head) turns the features `[T x E]` into logits. The callback owns the semantics
/// the released code leaves open (blocks.md 2.5). \param features backend `[T x E]`, modified in place.
template <dense_backend B>
void target_layer_inference(B& b, matrix_view<float, typename B::memory_space> features,
                            matrix_view<const float, typename B::memory_space> target_hidden_in,
                            std::span<const std::int32_t> response_mask,
                            const std::function<void(matrix_view<float, typename B::memory_space>)>& run_last_layers) {
  using space = typename B::memory_space;
  SPECDEC_EXPECTS(static_cast<index_t>(response_mask.size()) == features.rows() && target_hidden_in.rows() == features.rows() &&
                      target_hidden_in.cols() == features.cols(),
                  "specdec::blocks::moa::target_layer_inference", "features, target_hidden_in and response_mask disagree on T");
  for (index_t i = 0; i < features.rows(); ++i)
    if (response_mask[static_cast<std::size_t>(i)] == 0)
      copy_rows(b, matrix_view<const float, space>(target_hidden_in.data() + i * target_hidden_in.stride(0), 1, features.cols()),
                matrix_view<float, space>(features.data() + i * features.stride(0), 1, features.cols()));
  run_last_layers(features);
}

}  // namespace specdec::blocks::moa
