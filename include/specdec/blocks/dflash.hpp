// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief DFlash's block drafter (arXiv 2602.06036; z-lab/dflash `dflash/model.py`, `DFlashDraftModel`;
/// SGLang's `srt/models/dflash.py` serves the same tensors): one forward drafts a whole block.
///
/// 1. **context**: the target's hidden states after K of its layers (`target_layer_ids`: the outputs
///    of those layers, before any norm) at each committed position p are concatenated and condensed,
///    `ctx_p = hidden_norm(fc([h_a ; h_b ; ...]))` (fc: K E -> E, no bias). The context never forms
///    queries and never passes through a layer: every drafter layer projects the same ctx rows with its
///    own k_proj / v_proj (k_norm, RoPE at p) into its KV cache. append_context() does this.
/// 2. **block**: `[last committed token, mask, ..., mask]` (block_size ids, the mask an id of the
///    target's vocabulary) at positions `start .. start + block_size - 1`, where start is the last
///    committed token's position (= the context's length when every committed row but that one is in
///    the cache), embedded with the target's own table, runs through the drafter's Qwen3 layers
///    (pre-norm, q_norm / k_norm, SwiGLU) attending every context key and every block key, **without a
///    causal mask**; the block's keys are dropped again after the forward (the reference's
///    `crop(start)`), so the cache holds context rows only. forward() does this and writes
///    `norm(h)`, the drafter's own final norm.
/// 3. **logits**: the target's LM head over the block's rows 1 .. block_size - 1; the reference drafts
///    each slot's argmax (slot j proposes the token at position start + j).
///
/// What the cache keeps between steps (the engine's side): after the target verifies the block and
/// accepts a of its block_size - 1 drafts, the target's features of the block's first a + 1 rows (the
/// last committed token and the accepted drafts, positions start .. start + a) are appended with
/// append_context() before the next forward; nothing of a rejected token is ever in the cache. The
/// first step appends the whole prompt's features.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <specdec/blocks/layers.hpp>

namespace specdec::blocks::dflash {

/// The reference's target layers when a checkpoint names none (`build_target_layer_ids`): one per
/// drafter layer, spread evenly over layers 1 .. L - 3 of a target of L layers,
/// `round(1 + i (L - 4) / (n - 1))` with Python's rounding (half to even); a one-layer drafter takes
/// layer L / 2. Ids count layer *outputs* from 0 (Hugging Face's `hidden_states[id + 1]`); Qwen3-8B
/// (36 layers), 5 drafter layers: 1, 9, 17, 25, 33.
/// \throws invalid_argument unless 1 <= draft_layers and 4 <= target_layers (1 <= L / 2 for one layer).
inline std::vector<index_t> target_layer_ids(index_t target_layers, index_t draft_layers) {
  constexpr const char* where = "specdec::blocks::dflash::target_layer_ids";
  SPECDEC_EXPECTS(draft_layers >= 1 && draft_layers <= 4096 && target_layers >= (draft_layers == 1 ? 2 : 4) &&
                      target_layers <= (index_t{1} << 20),
                  where, "target_layers = ", target_layers, ", draft_layers = ", draft_layers,
                  "; expected 1 <= draft_layers <= 4096 and a target of at least 4 layers (2 for one drafter layer)");
  if (draft_layers == 1) return {target_layers / 2};
  std::vector<index_t> ids;
  const double span = static_cast<double>(target_layers - 4);
  for (index_t i = 0; i < draft_layers; ++i) {
    // Python: int(round(start + (i * span) / (n - 1))), the division and sum in double.
    const double x = 1.0 + static_cast<double>(i) * span / static_cast<double>(draft_layers - 1);
    double r = std::floor(x);
    const double frac = x - r;
    if (frac > 0.5 || (frac == 0.5 && std::fmod(r, 2.0) != 0.0)) r += 1.0;
    ids.push_back(static_cast<index_t>(r));
  }
  return ids;
}

/// Shapes of a DFlash drafter.
struct config {
  /// Each drafter layer's shape: attention.hidden = E (the target's width), Qwen3's qk_norm, rms_eps
  /// for every norm (the reference uses rms_norm_eps for the q / k norms too).
  layer_config layer = {};
  index_t layers = 0;          ///< L_d, the drafter's decoder layers
  index_t feature_layers = 0;  ///< K, the target layers whose outputs are concatenated (fc reads K E)
  index_t vocab = 0;           ///< V, the target's embedding rows (and LM head rows)
  index_t block_size = 16;     ///< tokens drafted per forward, the last committed one included
  std::int32_t mask_token = 0;  ///< the mask id, a row of the target's embedding (Qwen3: 151669)

  void validate() const {
    layer.attention.validate();
    const index_t e = layer.attention.hidden;
    SPECDEC_EXPECTS(layers >= 1 && layers <= 4096 && feature_layers >= 1 && feature_layers <= 4096 && vocab >= 1 &&
                        layer.intermediate >= 1 && layer.input_norm && layer.attention.input_width() == e,
                    "specdec::blocks::dflash::config", "layers = ", layers, ", feature_layers = ", feature_layers,
                    ", vocab = ", vocab, ", intermediate = ", layer.intermediate, ", input_norm = ", layer.input_norm,
                    ", attention input = ", layer.attention.input_width(),
                    "; expected 1..4096 layers and feature layers, positive sizes, input_norm, and attention from E = ", e);
    SPECDEC_EXPECTS(block_size >= 2 && block_size <= 4096 && mask_token >= 0 && mask_token < vocab,
                    "specdec::blocks::dflash::config", "block_size = ", block_size, ", mask_token = ", mask_token,
                    "; expected 2 <= block_size <= 4096 and a mask id in [0, ", vocab, ")");
  }
};

/// Tensors of a DFlash checkpoint (z-lab's names: no `model.` prefix) and the two the target lends.
template <class Space = host_space>
struct weights {
  linear<Space> fc = {};                              ///< `fc.weight` [E x K E], no bias
  vector_view<const float, Space> hidden_norm = {};  ///< `hidden_norm.weight` [E]
  std::vector<layer_weights<Space>> layers = {};     ///< `layers.{i}.*` (q_norm / k_norm under self_attn.)
  vector_view<const float, Space> norm = {};         ///< `norm.weight` [E], the drafter's final norm
  matrix_view<const float, Space> embed = {};        ///< the target's `embed_tokens.weight` [V x E]
  linear<Space> lm_head = {};                        ///< the target's `lm_head.weight` [V x E]

  /// \throws invalid_argument naming the first tensor whose shape does not match `c` (and when `c`
  /// itself is not valid).
  void validate(const config& c) const {
    c.validate();
    const index_t e = c.layer.attention.hidden;
    fc.validate("fc", e, c.feature_layers * e);
    validate_vector(hidden_norm, "hidden_norm.weight", e);
    SPECDEC_EXPECTS(static_cast<index_t>(layers.size()) == c.layers, "specdec::blocks::dflash::weights", "has ",
                    layers.size(), " layers; the config says ", c.layers);
    for (std::size_t i = 0; i < layers.size(); ++i) layers[i].validate(c.layer, "layers." + std::to_string(i) + ".");
    validate_vector(norm, "norm.weight", e);
    SPECDEC_EXPECTS(embed.rows() == c.vocab && embed.cols() == e && embed.data() != nullptr, "specdec::blocks::dflash",
                    "the target's embed_tokens.weight has shape [", embed.rows(), " x ", embed.cols(), "]; expected [",
                    c.vocab, " x ", e, "]");
    lm_head.validate("the target's lm_head", c.vocab, e);
  }
};

/// The drafter's KV caches, one per layer, in the backend's memory: the context's keys and values
/// (after k_norm and RoPE) and nothing else between calls. `capacity` bounds context rows plus one
/// block.
template <dense_backend B>
class context_cache {
 public:
  /// \throws invalid_argument on an invalid config or capacity (as kv_cache), before allocating.
  context_cache(B& b, const config& c, index_t capacity) {
    c.validate();
    caches_.reserve(static_cast<std::size_t>(c.layers));
    for (index_t l = 0; l < c.layers; ++l)
      caches_.emplace_back(b, capacity, c.layer.attention.kv_heads * c.layer.attention.head_dim);
  }
  /// Context rows held (every layer holds as many).
  index_t size() const noexcept { return caches_.front().size(); }
  index_t capacity() const noexcept { return caches_.front().capacity(); }
  index_t layers() const noexcept { return static_cast<index_t>(caches_.size()); }
  /// Keeps the first n context rows (an engine rewinding its sequence). \throws invalid_argument when
  /// n > size().
  void crop(index_t n) {
    SPECDEC_EXPECTS(n >= 0 && n <= size(), "specdec::blocks::dflash::context_cache::crop", "n = ", n,
                    "; the cache holds ", size(), " context rows");
    for (auto& cache : caches_) cache.crop(n);
  }
  kv_cache<B>& layer(index_t l) { return caches_[static_cast<std::size_t>(l)]; }

 private:
  std::vector<kv_cache<B>> caches_;
};

namespace detail {

/// Crops every layer back to the length it had when constructed, on every exit unless kept: a
/// forward's block rows never outlive it, and a refused append leaves no layer longer than the rest.
template <dense_backend B>
class restore_length {
 public:
  explicit restore_length(context_cache<B>& cache) noexcept : cache_(cache), size_(cache.size()) {}
  restore_length(const restore_length&) = delete;
  restore_length& operator=(const restore_length&) = delete;
  void keep() noexcept { kept_ = true; }
  ~restore_length() {
    if (kept_) return;
    for (index_t l = 0; l < cache_.layers(); ++l)
      if (cache_.layer(l).size() > size_) cache_.layer(l).crop(size_);
  }

 private:
  context_cache<B>& cache_;
  index_t size_;
  bool kept_ = false;
};

template <class Space>
void add_inputs(blocks::detail::arguments& args, const weights<Space>& w) {
  blocks::detail::add_inputs(args, w.fc, "fc.weight", "fc.bias");
  args.add(specdec::detail::input("hidden_norm.weight", w.hidden_norm)).add(specdec::detail::input("norm.weight", w.norm));
  args.add(specdec::detail::input("embed_tokens.weight", w.embed));
  blocks::detail::add_inputs(args, w.lm_head, "lm_head.weight", "lm_head.bias");
  for (const auto& layer : w.layers) blocks::detail::add_inputs(args, layer);
}

}  // namespace detail

/// Appends context rows: `ctx = hidden_norm(fc(features))`, then each layer's keys and values of ctx at
/// `positions` to its cache. \param features backend `[N x K E]`, row p the concatenated outputs of
/// the target's `target_layer_ids` at that position, in the ids' order. \param positions backend `[N]`
/// int64 (the rows' absolute positions; the reference's are consecutive after the cache's last).
/// On a throw the cache keeps its length. \throws invalid_argument on shapes or a full cache
/// (validate the weights once with weights::validate).
template <dense_backend B>
void append_context(B& b, const config& c, const weights<typename B::memory_space>& w,
                    matrix_view<const float, typename B::memory_space> features,
                    vector_view<const std::int64_t, typename B::memory_space> positions,
                    std::type_identity_t<context_cache<B>>& cache) {
  constexpr const char* where = "specdec::blocks::dflash::append_context";
  const index_t n = features.rows(), e = c.layer.attention.hidden;
  SPECDEC_EXPECTS(features.cols() == c.feature_layers * e && positions.rows() == n, where, "features is [", n, " x ",
                  features.cols(), "] with ", positions.rows(), " positions; expected ", c.feature_layers * e,
                  " columns (K E) and a position per row");
  SPECDEC_EXPECTS(cache.layers() == c.layers && static_cast<index_t>(w.layers.size()) == c.layers, where, "the cache has ",
                  cache.layers(), " layers and the weights ", w.layers.size(), "; the config says ", c.layers);
  SPECDEC_EXPECTS(n <= cache.capacity() - cache.size(), where, "appending ", n, " context rows to ", cache.size(),
                  " exceeds the capacity of ", cache.capacity());
  blocks::detail::arguments args(where);
  detail::add_inputs(args, w);
  args.add(specdec::detail::input("features", features)).add(specdec::detail::input("positions", positions)).check();
  if (n == 0) return;
  detail::restore_length<B> restore(cache);
  std::vector<typename B::template buffer<float>> keep;
  auto fused = blocks::detail::scratch(b, keep, n, e);
  apply(b, w.fc, features, fused);
  auto ctx = blocks::detail::scratch(b, keep, n, e);
  b.rms_norm(blocks::detail::as_const<B>(fused), w.hidden_norm, c.layer.rms_eps, ctx);
  for (index_t l = 0; l < c.layers; ++l)
    append_keys_values(b, c.layer.attention, w.layers[static_cast<std::size_t>(l)].attention,
                       blocks::detail::as_const<B>(ctx), positions, cache.layer(l));
  restore.keep();
}

/// One drafting forward over a block: `out = norm(h)` for the block `tokens` at `positions`, every
/// layer attending the cached context and the whole block without a mask. The block's keys are
/// appended for the forward and dropped after it: the cache holds the same context rows on return
/// (and on a throw). \param tokens backend `[T]` int32 in [0, V): `[last committed, mask, ...]` in
/// the reference (T = block_size; any T >= 1 is computed). \param positions backend `[T]` int64.
/// \param out backend `[T x E]`, apart from every input. \throws invalid_argument on shapes, token ids
/// outside the table, a cache without room for T more rows.
template <dense_backend B>
void forward(B& b, const config& c, const weights<typename B::memory_space>& w,
             vector_view<const std::int32_t, typename B::memory_space> tokens,
             vector_view<const std::int64_t, typename B::memory_space> positions,
             std::type_identity_t<context_cache<B>>& cache, matrix_view<float, typename B::memory_space> out) {
  using space = typename B::memory_space;
  constexpr const char* where = "specdec::blocks::dflash::forward";
  const index_t t = tokens.rows(), e = c.layer.attention.hidden;
  SPECDEC_EXPECTS(t >= 1 && positions.rows() == t && out.rows() == t && out.cols() == e, where, tokens.rows(),
                  " tokens, ", positions.rows(), " positions, out [", out.rows(), " x ", out.cols(),
                  "]; expected at least one token, a position per token and out [", t, " x ", e, "]");
  SPECDEC_EXPECTS(cache.layers() == c.layers && static_cast<index_t>(w.layers.size()) == c.layers, where, "the cache has ",
                  cache.layers(), " layers and the weights ", w.layers.size(), "; the config says ", c.layers);
  SPECDEC_EXPECTS(t <= cache.capacity() - cache.size(), where, "a block of ", t, " rows after ", cache.size(),
                  " context rows exceeds the cache's capacity of ", cache.capacity());
  blocks::detail::arguments args(where);
  detail::add_inputs(args, w);
  args.add(specdec::detail::input("tokens", tokens)).add(specdec::detail::input("positions", positions));
  args.add(specdec::detail::output("out", out)).check();
  const detail::restore_length<B> restore(cache);
  std::vector<typename B::template buffer<float>> keep;
  auto x = blocks::detail::scratch(b, keep, t, e);
  b.gather_rows(w.embed, tokens, x);
  for (index_t l = 0; l < c.layers; ++l)
    decoder_layer_forward(b, c.layer, w.layers[static_cast<std::size_t>(l)], x, positions, &cache.layer(l),
                          attention_mask<space>::none());
  b.rms_norm(blocks::detail::as_const<B>(x), w.norm, c.layer.rms_eps, out);
}

/// Draft logits: the target's LM head over forward()'s rows. \param normed backend `[T x E]` (forward's
/// out; the reference reads rows 1 .. block_size - 1). \param logits backend `[T x V]`.
/// \throws invalid_argument on shapes.
template <dense_backend B>
void logits(B& b, const weights<typename B::memory_space>& w, matrix_view<const float, typename B::memory_space> normed,
            matrix_view<float, typename B::memory_space> logits) {
  apply(b, w.lm_head, normed, logits);
}

}  // namespace specdec::blocks::dflash
