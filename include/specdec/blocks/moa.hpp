// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Mixture of Attentions (Zimmer et al.; huawei-noah/HEBO, branch `mixture-of-attentions`,
/// `moa_spec/models/inference/single_device/moa_spec.py` and `cross_attention.py`): the target's
/// per-layer K/V packed into `[T, L, E_kv]`, Layer Self-Attention (a decoder
/// layer over the layer axis, RoPE over the layer index, no mask) with the mean over layers and the
/// E_kv -> E projection, the causal self-attention layer over token embeddings (a plain decoder layer:
/// blocks::decoder_layer_forward with its cache), cross-attention with one RMSNorm shared by both
/// streams, its inference (no mask) and training (verified-prefix) masks, and Target Layer Inference
/// through a caller-provided callback; and the two wirings of the whole drafter (MOASpec.forward):
/// train_forward and the incremental inference `drafter`.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
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
  const index_t width = keys[0].cols();
  SPECDEC_EXPECTS(head_dim >= 1 && width >= 0 && width % head_dim == 0, where, "layers have ", width,
                  " columns; expected a multiple of head_dim = ", head_dim);
  const index_t kv_heads = width / head_dim, e_kv = 2 * width;  // width: a view extent within memory
  SPECDEC_EXPECTS(tokens >= 0 && first >= 0, where, "first = ", first, ", tokens = ", tokens, "; expected both >= 0");
  const index_t rows = specdec::detail::checked_mul(where, tokens, layers, "tokens x layers");
  SPECDEC_EXPECTS(out.rows() == rows && out.cols() == e_kv, where, "out has shape [", out.rows(), " x ",
                  out.cols(), "]; expected [", rows, " x ", e_kv, "]");
  specdec::detail::check_view(where, "out", out, specdec::detail::packed);
  detail::arguments args(where);
  for (index_t l = 0; l < layers; ++l)
    for (const auto* m : {&keys[static_cast<std::size_t>(l)], &values[static_cast<std::size_t>(l)]}) {
      SPECDEC_EXPECTS(m->cols() == width && specdec::detail::range_fits(first, tokens, m->rows()), where, "layer ", l,
                      " is [", m->rows(), " x ", m->cols(), "]; expected ", width, " columns and ", tokens,
                      " rows from row ", first);
      args.add(specdec::detail::input("a key or value layer", *m, specdec::detail::packed));
    }
  args.add(specdec::detail::output("out", out, specdec::detail::packed)).check();
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
  constexpr const char* where = "specdec::blocks::moa::layer_self_attention";
  SPECDEC_EXPECTS(layers >= 1 && x.rows() % layers == 0, where, x.rows(), " packed rows are not a multiple of L = ", layers);
  detail::arguments args(where);
  detail::add_inputs(args, w);
  detail::add_inputs(args, ekv2e, "Ekv2E.weight", "Ekv2E.bias");
  args.add(specdec::detail::output("x", x)).add(specdec::detail::output("mean", mean)).add(specdec::detail::output("out", out)).check();
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
  detail::arguments args("specdec::blocks::moa::cross_attention");
  detail::add_inputs(args, w);
  detail::add_inputs(args, mask);
  args.add(specdec::detail::input("query_positions", query_positions)).add(specdec::detail::input("source", source));
  args.add(specdec::detail::input("source_positions", source_positions)).add(specdec::detail::output("query", query)).check();
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
  std::vector<std::int64_t> start_positions = {};
  std::vector<std::uint8_t> cross_attention = {};
  std::vector<std::uint8_t> staircase = {};
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

/// Shapes of a whole MoA drafter (blocks.md 2.6). The LSA layer is E_kv wide (twice the target's
/// kv_heads x head_dim) with the target's head count and RoPE over the layer index; self- and
/// cross-attention are E wide (the target's hidden size) with RoPE at token positions.
struct config {
  layer_config layer_self_attention = {};
  layer_config self_attention = {};
  layer_config cross_attention = {};
  index_t target_layers = 0;    ///< L, the target layers whose K/V are packed
  index_t target_head_dim = 0;  ///< head_dim of the target's cache rows

  index_t hidden() const noexcept { return self_attention.attention.hidden; }
  index_t kv_width() const noexcept { return layer_self_attention.attention.hidden; }
  /// \throws invalid_argument when the parts disagree on widths.
  void validate() const {
    constexpr const char* where = "specdec::blocks::moa::config";
    SPECDEC_EXPECTS(target_layers >= 1 && target_head_dim >= 1 && kv_width() % (2 * target_head_dim) == 0, where,
                    "target_layers = ", target_layers, ", target_head_dim = ", target_head_dim, ", E_kv = ", kv_width(),
                    "; expected L >= 1 and E_kv a multiple of 2 head_dim");
    SPECDEC_EXPECTS(cross_attention.attention.hidden == hidden(), where, "cross-attention is ", cross_attention.attention.hidden,
                    " wide; expected the self-attention's ", hidden());
  }
};

/// Non-owning views of a MoA drafter's trained weights, named as in the HEBO checkpoint.
template <class Space = host_space>
struct weights {
  layer_weights<Space> layer_self_attention = {};
  linear<Space> ekv2e = {};  ///< [E x E_kv] with bias
  layer_weights<Space> self_attention = {};
  layer_weights<Space> cross_attention = {};

  /// \throws invalid_argument naming the first tensor whose shape does not match `c`.
  void validate(const config& c) const {
    c.validate();
    layer_self_attention.validate(c.layer_self_attention, "layer_self_attention.");
    ekv2e.validate("Ekv2E", c.hidden(), c.kv_width(), true);
    self_attention.validate(c.self_attention, "self_attention.");
    cross_attention.validate(c.cross_attention, "cross_attention.");
  }
};

}  // namespace specdec::blocks::moa

namespace specdec::blocks::detail {
/// A MoA call's weights and the target's K/V layers as inputs of its checked arguments (the call adds
/// its outputs, then checks).
template <class Space>
arguments moa_arguments(const char* where, const moa::weights<Space>& w, std::span<const matrix_view<const float, Space>> keys,
                        std::span<const matrix_view<const float, Space>> values) {
  arguments args(where);
  add_inputs(args, w.layer_self_attention);
  add_inputs(args, w.ekv2e, "Ekv2E.weight", "Ekv2E.bias");
  add_inputs(args, w.self_attention);
  add_inputs(args, w.cross_attention);
  for (const auto& m : keys) args.add(specdec::detail::input("a key layer", m));
  for (const auto& m : values) args.add(specdec::detail::input("a value layer", m));
  return args;
}
}  // namespace specdec::blocks::detail

namespace specdec::blocks::moa {

/// The cross-attention's key/value stream for target tokens [first, first + count): their K/V in every
/// target layer packed (pack_kv), Layer Self-Attention, mean over layers, Ekv2E, into `out`
/// `[count x E]`. \param keys, values per target layer, backend `[tokens x kv_heads head_dim]`.
template <dense_backend B>
void key_value_stream(B& b, const config& c, const weights<typename B::memory_space>& w,
                      std::span<const matrix_view<const float, typename B::memory_space>> keys,
                      std::span<const matrix_view<const float, typename B::memory_space>> values, index_t first, index_t count,
                      matrix_view<float, typename B::memory_space> out) {
  SPECDEC_EXPECTS(static_cast<index_t>(keys.size()) == c.target_layers, "specdec::blocks::moa::key_value_stream", "got ",
                  keys.size(), " target layers; the config says L = ", c.target_layers);
  SPECDEC_EXPECTS(count >= 0, "specdec::blocks::moa::key_value_stream", "count = ", count, "; expected >= 0");
  if (count == 0) return;
  detail::moa_arguments("specdec::blocks::moa::key_value_stream", w, keys, values).add(specdec::detail::output("out", out)).check();
  std::vector<typename B::template buffer<float>> keep;
  auto packed = detail::scratch(b, keep, count * c.target_layers, c.kv_width());
  auto mean = detail::scratch(b, keep, count, c.kv_width());
  pack_kv(b, keys, values, c.target_head_dim, first, count, packed);
  layer_self_attention(b, c.layer_self_attention, w.layer_self_attention, w.ekv2e, c.target_layers, packed, mean, out);
}

/// The training-time forward of the drafter over a whole sequence of T tokens at positions 0..T-1
/// (MOASpec.forward with TLI = 0): `kv_stream` = key_value_stream of all T tokens; `self_attention_out`
/// = the SA layer over `embeddings` (the target's token embeddings) under a causal mask, or the
/// staircase mask when `staircase`; `out` = cross-attention of that over the stream under the
/// verified-prefix mask of `response_mask`. The caller applies the target's LM head to `out` (TLI = 0)
/// or target_layer_inference. All matrices backend `[T x E]`. \throws invalid_argument on shapes.
template <dense_backend B>
void train_forward(B& b, const config& c, const weights<typename B::memory_space>& w,
                   std::span<const matrix_view<const float, typename B::memory_space>> keys,
                   std::span<const matrix_view<const float, typename B::memory_space>> values,
                   matrix_view<const float, typename B::memory_space> embeddings, std::span<const std::int32_t> response_mask,
                   bool staircase, matrix_view<float, typename B::memory_space> kv_stream,
                   matrix_view<float, typename B::memory_space> self_attention_out,
                   matrix_view<float, typename B::memory_space> out) {
  using space = typename B::memory_space;
  const index_t t = embeddings.rows();
  SPECDEC_EXPECTS(static_cast<index_t>(response_mask.size()) == t && embeddings.cols() == c.hidden(),
                  "specdec::blocks::moa::train_forward", "embeddings are [", t, " x ", embeddings.cols(), "] with ",
                  response_mask.size(), " response_mask entries; expected [T x ", c.hidden(), "] and T entries");
  detail::moa_arguments("specdec::blocks::moa::train_forward", w, keys, values)
      .add(specdec::detail::input("embeddings", embeddings))
      .add(specdec::detail::input("response_mask", response_mask))
      .add(specdec::detail::output("kv_stream", kv_stream))
      .add(specdec::detail::output("self_attention_out", self_attention_out))
      .add(specdec::detail::output("out", out))
      .check();
  key_value_stream(b, c, w, keys, values, 0, t, kv_stream);
  const auto masks = make_training_masks(response_mask);
  std::vector<std::int64_t> pos(static_cast<std::size_t>(t));
  for (index_t i = 0; i < t; ++i) pos[static_cast<std::size_t>(i)] = i;
  auto positions = b.upload(std::span<const std::int64_t>(pos));
  const vector_view<const std::int64_t, space> p(positions.view().data(), t);
  auto stair = b.upload(std::span<const std::uint8_t>(masks.staircase));
  auto cross = b.upload(std::span<const std::uint8_t>(masks.cross_attention));
  copy_rows(b, embeddings, self_attention_out);
  decoder_layer_forward(b, c.self_attention, w.self_attention, self_attention_out, p, nullptr,
                        staircase ? attention_mask<space>::from(matrix_view<const std::uint8_t, space>(stair.view().data(), t, t))
                                  : attention_mask<space>::causal());
  copy_rows(b, detail::as_const<B>(self_attention_out), out);
  cross_attention(b, c.cross_attention, w.cross_attention, out, p, detail::as_const<B>(kv_stream), p, nullptr,
                  attention_mask<space>::from(matrix_view<const std::uint8_t, space>(cross.view().data(), t, t)));
}

/// The drafter at inference, one request (the reference reshapes with batch 1), holding its two
/// caches. An engine drives it per speculation step:
///   1. add_verified(target K/V, first, count) for the tokens the target has just verified (the
///      prompt at first): their key/value stream is computed once and queued for the cross-attention;
///   2. forward(embeddings of the new tokens, positions, features) runs the self-attention over
///      them with its cache (the prompt plus the bonus token on the first call, then one drafted
///      token per call for a chain, or a tree under its ancestor mask) and the cross-attention for the
///      last `features.rows()` rows over every verified token; the caller applies the target's LM head
///      to `features` and picks the next draft token;
///   3. after verification, crop(length) drops self-attention rows of rejected drafts (the rows of
///      accepted drafts stay valid: same tokens at the same positions).
template <dense_backend B>
class drafter {
 public:
  using space = typename B::memory_space;
  /// \param capacity the longest sequence (prompt + generated + drafts) the caches must hold.
  /// \throws invalid_argument on weights that do not match the config (checked before anything is
  ///   allocated), or a capacity the caches cannot hold (see blocks::kv_cache).
  drafter(B& b, const config& c, const weights<space>& w, index_t capacity)
      : b_(&b), config_(validated(c, w)), weights_(w),
        self_attention_cache_(b, capacity, c.self_attention.attention.kv_heads * c.self_attention.attention.head_dim),
        cross_attention_cache_(b, capacity, c.cross_attention.attention.kv_heads * c.cross_attention.attention.head_dim),
        queued_(b.template allocate<float>(capacity * c.hidden())), capacity_(capacity) {}

  /// Queues target tokens [first, first + count) as verified. \param keys, values the target's cache,
  /// per layer, backend `[tokens x kv_heads head_dim]` (post-RoPE). \throws invalid_argument when
  /// `first` is not the next unverified token or the caches would overflow.
  void add_verified(std::span<const matrix_view<const float, space>> keys,
                    std::span<const matrix_view<const float, space>> values, index_t first, index_t count) {
    SPECDEC_EXPECTS(first == verified() && count >= 0 && count <= capacity_ - first, "specdec::blocks::moa::drafter::add_verified",
                    count, " tokens from ", first, " given; expected to continue at ", verified(),
                    " within the capacity of ", capacity_);
    key_value_stream(*b_, config_, weights_, keys, values, first, count,
                     matrix_view<float, space>(queued_.view().data() + queued_rows_ * config_.hidden(), count, config_.hidden()));
    queued_rows_ += count;
  }
  /// Tokens whose key/value stream exists (cached or queued).
  index_t verified() const noexcept { return cross_attention_cache_.size() + queued_rows_; }

  /// Self-attention over `x` `[n x E]` (the token embeddings of the new tokens, modified in place) at
  /// `positions` `[n]` under `mask` (keys = cache + rows; causal by default, a tree's ancestor mask
  /// for tree drafting), then cross-attention for its last `features.rows()` rows into `features`
  /// `[q x E]`, the queued verified stream moving into the cross-attention cache first.
  void forward(matrix_view<float, space> x, vector_view<const std::int64_t, space> positions,
               matrix_view<float, space> features, const attention_mask<space>& mask = {}) {
    const index_t n = x.rows(), q = features.rows(), e = config_.hidden();
    SPECDEC_EXPECTS(q >= 1 && q <= n && positions.size() == n, "specdec::blocks::moa::drafter::forward", "x has ", n,
                    " rows, positions ", positions.size(), ", features ", q, "; expected 1 <= features <= x = positions");
    detail::moa_arguments<space>("specdec::blocks::moa::drafter::forward", weights_, {}, {})
        .add(specdec::detail::input("positions", positions))
        .add(specdec::detail::input("mask.allowed", mask.allowed))
        .add(specdec::detail::input("mask.additive", mask.additive))
        .add(specdec::detail::output("x", x))
        .add(specdec::detail::output("features", features))
        .check();
    // A refused step leaves both caches as they were (the queued stream stays queued).
    const cache_rollback<B> self_rollback(&self_attention_cache_), cross_rollback(&cross_attention_cache_);
    decoder_layer_forward(*b_, config_.self_attention, weights_.self_attention, x, positions, &self_attention_cache_, mask);
    copy_rows(*b_, matrix_view<const float, space>(x.data() + (n - q) * x.stride(0), q, e, x.stride(0), 1), features);
    std::vector<std::int64_t> source(static_cast<std::size_t>(queued_rows_));
    for (index_t i = 0; i < queued_rows_; ++i) source[static_cast<std::size_t>(i)] = cross_attention_cache_.size() + i;
    auto source_positions = b_->upload(std::span<const std::int64_t>(source));
    cross_attention(*b_, config_.cross_attention, weights_.cross_attention, features,
                    vector_view<const std::int64_t, space>(positions.data() + (n - q), q),
                    matrix_view<const float, space>(queued_.view().data(), queued_rows_, e),
                    vector_view<const std::int64_t, space>(source_positions.view().data(), queued_rows_),
                    &cross_attention_cache_, attention_mask<space>::none());
    queued_rows_ = 0;
  }

  /// Keeps the first `length` self-attention rows (the tokens verified so far).
  void crop(index_t length) { self_attention_cache_.crop(length); }
  kv_cache<B>& self_attention_cache() noexcept { return self_attention_cache_; }
  kv_cache<B>& cross_attention_cache() noexcept { return cross_attention_cache_; }

 private:
  B* b_;
  static config validated(const config& c, const weights<space>& w) {
    w.validate(c);
    return c;
  }
  config config_;
  weights<space> weights_;
  kv_cache<B> self_attention_cache_, cross_attention_cache_;
  typename B::template buffer<float> queued_;
  index_t capacity_, queued_rows_ = 0;
};

}  // namespace specdec::blocks::moa
