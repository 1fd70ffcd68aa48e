// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Amphista (Li et al., NAACL 2025, section 3, eq. 1-6): two staged adaptation layers turn the
/// target's last hidden state and the next token's embedding into h1 = S1AL(fc1([h; e])) and
/// h2 = S2AL(fc2([h1; e])) (causal decoder layers, each with its own KV cache); the K drafting heads'
/// inputs are MLP_k(h1) for k <= stage1_heads and MLP_k(h2) for the rest; the auto-embedding block adds a
/// learned position embedding over the K slots and runs one bi-directional attention layer across them
/// (no mask, no RoPE); head k's logits are o_k W_k^T.
///
/// Open points of the paper (arXiv 2406.13170; no public code), kept configurable: the paper's split
/// is floor(K/2) heads on stage 1 (the reconstruction behind the goldens uses ceil(K/2)); MLP_k is
/// "MLP_k in R^{d x d}": specdec applies Medusa's ResBlock x + SiLU(W x + b) when weights are given and
/// the identity otherwise.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <specdec/blocks/layers.hpp>

namespace specdec::blocks::amphista {

template <class Space = host_space>
struct stage_weights {
  linear<Space> fuse = {};          ///< [E x 2E] + bias, on [feature ; embedding]
  layer_weights<Space> layer = {};  ///< a causal Llama decoder layer
};

template <class Space = host_space>
struct weights {
  stage_weights<Space> stage1 = {}, stage2 = {};
  std::vector<linear<Space>> head_mlps = {};                ///< K x [E x E] + bias, or empty (identity)
  matrix_view<const float, Space> position_embedding = {};  ///< [K x E]
  layer_weights<Space> auto_embedding = {};                 ///< the slot-attention layer (attention config rope = false)
  std::vector<matrix_view<const float, Space>> heads = {};  ///< K x [V x E], no bias
};

struct config {
  layer_config stage = {};           ///< both adaptation layers (causal, RoPE at token positions)
  layer_config auto_embedding = {};  ///< the slot layer; its attention_config::rope must be false
  index_t heads = 4;                 ///< K
  index_t stage1_heads = 2;          ///< heads fed by stage 1: floor(K / 2) in the paper
  index_t vocab = 0;

  static index_t paper_split(index_t k) { return k / 2; }
};

/// One staged adaptation layer: x = fuse([feature ; embedding]) then the decoder layer (causal over the
/// stage's cache + these rows). \param feature, embedding backend `[T x E]`. \param out backend `[T x E]`.
template <dense_backend B>
void stage_forward(B& b, const layer_config& c, const stage_weights<typename B::memory_space>& w,
                   matrix_view<const float, typename B::memory_space> feature,
                   matrix_view<const float, typename B::memory_space> embedding,
                   vector_view<const std::int64_t, typename B::memory_space> positions,
                   std::type_identity_t<kv_cache<B>>* cache, matrix_view<float, typename B::memory_space> out) {
  using space = typename B::memory_space;
  const index_t e = feature.cols();
  SPECDEC_EXPECTS(w.fuse.in() == 2 * e && w.fuse.out() == e && embedding.rows() == feature.rows() && embedding.cols() == e,
                  "specdec::blocks::amphista::stage_forward", "fuse is [", w.fuse.out(), " x ", w.fuse.in(),
                  "] for inputs of width ", e, "; expected [E x 2E] and equal input shapes");
  specdec::detail::check_view("specdec::blocks::amphista::stage_forward", "fuse.weight", w.fuse.weight,
                              specdec::detail::packed);
  // The bias, when present, is added as one packed row of E entries.
  SPECDEC_EXPECTS(w.fuse.bias.rows() == 0 || w.fuse.bias.rows() == e, "specdec::blocks::amphista::stage_forward",
                  "fuse.bias has ", w.fuse.bias.rows(), " entries; expected none or E = ", e);
  specdec::detail::check_view("specdec::blocks::amphista::stage_forward", "fuse.bias", w.fuse.bias, specdec::detail::packed);
  detail::arguments args("specdec::blocks::amphista::stage_forward");
  detail::add_inputs(args, w.fuse, "fuse.weight", "fuse.bias");
  detail::add_inputs(args, w.layer);
  args.add(specdec::detail::input("feature", feature)).add(specdec::detail::input("embedding", embedding));
  args.add(specdec::detail::input("positions", positions)).add(specdec::detail::output("out", out)).check();
  const matrix_view<const float, space> w_feature(w.fuse.weight.data(), e, e, w.fuse.weight.stride(0), 1);
  const matrix_view<const float, space> w_embedding(w.fuse.weight.data() + e, e, e, w.fuse.weight.stride(0), 1);
  b.gemm(feature, transpose::no, w_feature, transpose::yes, out);
  b.gemm(embedding, transpose::no, w_embedding, transpose::yes, out, 1.0f, 1.0f);
  if (w.fuse.bias.rows() > 0) b.add_rows(out, matrix_view<const float, space>(w.fuse.bias.data(), 1, e));
  decoder_layer_forward(b, c, w.layer, out, positions, cache);
}

/// The auto-embedding block on the K head inputs `z` `[K x E]`: u = z + P, o = slot layer(u) (every
/// slot sees every slot), logits row k = o_k W_k^T into `logits` `[K x V]`. `u_out` / `o_out`, when
/// non-empty, receive u and o.
template <dense_backend B>
void auto_embedding(B& b, const config& c, const weights<typename B::memory_space>& w,
                    matrix_view<const float, typename B::memory_space> z, matrix_view<float, typename B::memory_space> logits,
                    matrix_view<float, typename B::memory_space> u_out = {}, matrix_view<float, typename B::memory_space> o_out = {}) {
  using space = typename B::memory_space;
  constexpr const char* where = "specdec::blocks::amphista::auto_embedding";
  const index_t k = c.heads, e = z.cols();
  SPECDEC_EXPECTS(z.rows() == k && static_cast<index_t>(w.heads.size()) == k && w.position_embedding.rows() == k &&
                      w.position_embedding.cols() == e && !c.auto_embedding.attention.rope,
                  where, "z has ", z.rows(), " rows, ", w.heads.size(), " heads, position_embedding [", w.position_embedding.rows(),
                  " x ", w.position_embedding.cols(), "]; expected K = ", k, " of each, width ", e, ", and no RoPE in the slot layer");
  // The heads write whole rows of logits: its shape is checked before anything runs.
  specdec::detail::check_view(where, "z", z, specdec::detail::packed);
  SPECDEC_EXPECTS(logits.rows() == k && logits.cols() == c.vocab && c.vocab >= 1, where, "logits is [", logits.rows(), " x ",
                  logits.cols(), "]; expected [K x vocab] = [", k, " x ", c.vocab, "]");
  specdec::detail::check_view(where, "logits", logits, specdec::detail::packed);
  detail::arguments args(where);
  args.add(specdec::detail::input("z", z)).add(specdec::detail::input("position_embedding", w.position_embedding));
  detail::add_inputs(args, w.auto_embedding);
  for (const auto& head : w.heads) args.add(specdec::detail::input("a head's weight", head));
  args.add(specdec::detail::output("logits", logits)).add(specdec::detail::output("u_out", u_out));
  args.add(specdec::detail::output("o_out", o_out)).check();
  auto u = b.template allocate<float>(k * e);
  copy_rows(b, z, u.matrix(k, e));
  b.add_rows(u.matrix(k, e), w.position_embedding);
  if (u_out.size()) copy_rows(b, matrix_view<const float, space>(u.view().data(), k, e), u_out);
  std::vector<std::int64_t> zeros(static_cast<std::size_t>(k), 0);
  auto pos = b.upload(std::span<const std::int64_t>(zeros));  // unused: the slot layer has no RoPE
  decoder_layer_forward(b, c.auto_embedding, w.auto_embedding, u.matrix(k, e),
                        vector_view<const std::int64_t, space>(pos.view().data(), k), nullptr, attention_mask<space>::none());
  if (o_out.size()) copy_rows(b, matrix_view<const float, space>(u.view().data(), k, e), o_out);
  for (index_t h = 0; h < k; ++h) {
    SPECDEC_EXPECTS(w.heads[static_cast<std::size_t>(h)].rows() == c.vocab && w.heads[static_cast<std::size_t>(h)].cols() == e,
                    where, "heads.", h, ".weight is [", w.heads[static_cast<std::size_t>(h)].rows(), " x ",
                    w.heads[static_cast<std::size_t>(h)].cols(), "]; expected [", c.vocab, " x ", e, "]");
    b.gemm(matrix_view<const float, space>(u.view().data() + h * e, 1, e), transpose::no, w.heads[static_cast<std::size_t>(h)],
           transpose::yes, matrix_view<float, space>(logits.data() + h * logits.stride(0), 1, c.vocab));
  }
}

/// The head inputs z `[K x E]` from the stages' outputs at the last position: row k = MLP_k(h1) for
/// k < stage1_heads, MLP_k(h2) otherwise. \param h1, h2 backend `[1 x E]`.
template <dense_backend B>
void head_inputs(B& b, const config& c, const weights<typename B::memory_space>& w,
                 matrix_view<const float, typename B::memory_space> h1, matrix_view<const float, typename B::memory_space> h2,
                 matrix_view<float, typename B::memory_space> z) {
  using space = typename B::memory_space;
  const index_t e = h1.cols();
  specdec::detail::check_view("specdec::blocks::amphista::head_inputs", "z", z, specdec::detail::packed);
  SPECDEC_EXPECTS(h1.rows() == 1 && h2.rows() == 1 && h2.cols() == e && z.cols() == e,
                  "specdec::blocks::amphista::head_inputs", "h1 is [", h1.rows(), " x ", e, "], h2 [", h2.rows(), " x ",
                  h2.cols(), "], z has ", z.cols(), " columns; expected [1 x E] inputs and z [K x E]");
  SPECDEC_EXPECTS(c.stage1_heads >= 0 && c.stage1_heads <= c.heads && z.rows() == c.heads &&
                      (w.head_mlps.empty() || static_cast<index_t>(w.head_mlps.size()) == c.heads),
                  "specdec::blocks::amphista::head_inputs", "stage1_heads = ", c.stage1_heads, " of K = ", c.heads,
                  ", z has ", z.rows(), " rows, ", w.head_mlps.size(), " head MLPs; expected 0 <= stage1_heads <= K, K rows, 0 or K MLPs");
  detail::arguments args("specdec::blocks::amphista::head_inputs");
  for (const auto& mlp : w.head_mlps) detail::add_inputs(args, mlp, "a head MLP's weight", "a head MLP's bias");
  args.add(specdec::detail::input("h1", h1)).add(specdec::detail::input("h2", h2)).add(specdec::detail::output("z", z)).check();
  auto hidden = b.template allocate<float>(e);
  auto ones = b.upload(std::span<const float>(std::vector<float>(static_cast<std::size_t>(w.head_mlps.empty() ? 0 : e), 1.0f)));
  for (index_t k = 0; k < c.heads; ++k) {
    const auto& src = k < c.stage1_heads ? h1 : h2;
    const matrix_view<float, space> row(z.data() + k * z.stride(0), 1, e);
    copy_rows(b, src, row);
    if (w.head_mlps.empty()) continue;
    apply(b, w.head_mlps[static_cast<std::size_t>(k)], src, hidden.matrix(1, e));
    b.silu_mul(matrix_view<const float, space>(hidden.view().data(), 1, e), matrix_view<const float, space>(ones.view().data(), 1, e),
               hidden.matrix(1, e));
    b.add_rows(row, matrix_view<const float, space>(hidden.view().data(), 1, e));  // ResBlock: x + SiLU(W x + b)
  }
}

}  // namespace specdec::blocks::amphista
