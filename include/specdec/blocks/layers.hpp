// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The Llama pieces every drafter block is made of, generic over a `dense_backend`: Linear
/// layers, a KV cache that appends and crops, the attention sub-layer (projections, optional RoPE,
/// masked GQA attention, output projection; self- or cross-attention) and the SwiGLU MLP, composed
/// into the pre-norm decoder layer `h = x + Attn(RMSNorm(x)); y = h + MLP(RMSNorm(h))`.
///
/// Conventions (huggingface/transformers `models/llama/modeling_llama.py`, transformers < 4.46): a
/// Linear weight is `[out x in]` and y = x W^T + b; heads are contiguous column blocks of head_dim;
/// query head h reads key/value head h / (heads / kv_heads); the cache holds keys after RoPE. Every
/// activation is a row-major `[tokens x width]` matrix in the backend's memory space; weights are
/// non-owning views (a checkpoint mapped by specdec/io/safetensors.hpp, or the engine's own tensors).
#pragma once

#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/core/checked.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>
#include <specdec/core/view_checks.hpp>

namespace specdec::blocks {

/// A Linear layer: weight `[out x in]`, optional bias `[out]` (empty view: none).
template <class Space = host_space>
struct linear {
  matrix_view<const float, Space> weight = {};
  vector_view<const float, Space> bias = {};

  index_t in() const noexcept { return weight.cols(); }
  index_t out() const noexcept { return weight.rows(); }
  /// \throws invalid_argument naming `name` when the weight is not `[out x in]` or the bias not `[out]`
  /// (or present where `bias_expected` is false, or absent where it is true).
  void validate(const std::string& name, index_t out_features, index_t in_features, bool bias_expected = false) const {
    SPECDEC_EXPECTS(weight.rows() == out_features && weight.cols() == in_features && weight.data() != nullptr,
                    "specdec::blocks", name, ".weight has shape [", weight.rows(), " x ", weight.cols(), "]; expected [",
                    out_features, " x ", in_features, "]");
    if (bias_expected)
      SPECDEC_EXPECTS(bias.rows() == out_features && bias.data() != nullptr, "specdec::blocks", name, ".bias has length ",
                      bias.rows(), "; expected ", out_features);
    else
      SPECDEC_EXPECTS(bias.rows() == 0, "specdec::blocks", name, ".bias is present (length ", bias.rows(),
                      "); this layer has no bias");
  }
};

/// A weight vector (RMSNorm weights, learned embeddings flattened) checked against its length.
template <class Space>
void validate_vector(const vector_view<const float, Space>& v, const std::string& name, index_t length) {
  SPECDEC_EXPECTS(v.rows() == length && v.data() != nullptr, "specdec::blocks", name, " has length ", v.rows(),
                  "; expected ", length);
}

/// Shape of an attention sub-layer.
struct attention_config {
  index_t hidden = 0;    ///< model width E (input and output of the sub-layer)
  index_t heads = 0;     ///< query heads H
  index_t kv_heads = 0;  ///< key / value heads
  index_t head_dim = 0;  ///< d; q is [T x H d], k and v [T x kv_heads d]
  double rope_theta = 10000.0;
  bool rope = true;  ///< false: no rotary embedding (Amphista's slot attention)
  /// Width of the rows q / k / v project from; 0: hidden. EAGLE-3's layer attends from
  /// `[embedding ; hidden]` (2E) and writes back E.
  index_t input = 0;
  /// Qwen3's per-head RMSNorm of queries and keys (`q_norm` / `k_norm`, weights [head_dim]) after the
  /// projection and before RoPE; values are not normalised. DFlash's drafter layers have it.
  bool qk_norm = false;
  float qk_norm_eps = 1e-6f;  ///< the norms' epsilon (Qwen3: the model's rms_norm_eps)

  index_t input_width() const noexcept { return input > 0 ? input : hidden; }

  attention_heads heads_shape() const {
    return {heads, kv_heads, head_dim, static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)))};
  }
  void validate() const {
    SPECDEC_EXPECTS(hidden >= 1 && heads >= 1 && kv_heads >= 1 && head_dim >= 1 && heads % kv_heads == 0,
                    "specdec::blocks::attention_config", "hidden = ", hidden, ", heads = ", heads, ", kv_heads = ", kv_heads,
                    ", head_dim = ", head_dim, "; expected positive sizes with heads a multiple of kv_heads");
    // Products of two sizes (heads x head_dim, rows x width) then stay far from overflow.
    constexpr index_t largest = index_t{1} << 20;
    SPECDEC_EXPECTS(hidden <= largest && heads <= largest && head_dim <= largest && input >= 0 && input <= largest,
                    "specdec::blocks::attention_config", "hidden = ", hidden, ", heads = ", heads, ", head_dim = ", head_dim,
                    ", input = ", input, "; expected each <= 2^20 (input >= 0)");
    SPECDEC_EXPECTS(!rope || (head_dim % 2 == 0 && rope_theta > 1.0), "specdec::blocks::attention_config",
                    "rope needs an even head_dim and rope_theta > 1; got head_dim = ", head_dim, ", rope_theta = ", rope_theta);
    SPECDEC_EXPECTS(!qk_norm || (qk_norm_eps > 0.0f && std::isfinite(qk_norm_eps)), "specdec::blocks::attention_config",
                    "qk_norm_eps = ", qk_norm_eps, "; expected a positive finite epsilon");
  }
};

/// q / k / v / o projections of an attention sub-layer (biases optional: Qwen2 has q/k/v biases), and
/// Qwen3's per-head query / key norms where attention_config::qk_norm says so.
template <class Space = host_space>
struct attention_weights {
  linear<Space> q = {}, k = {}, v = {}, o = {};
  vector_view<const float, Space> q_norm = {}, k_norm = {};  ///< [head_dim] each; empty unless qk_norm
  void validate(const attention_config& c, const std::string& prefix, bool qkv_bias = false) const {
    c.validate();
    q.validate(prefix + "q_proj", c.heads * c.head_dim, c.input_width(), qkv_bias);
    k.validate(prefix + "k_proj", c.kv_heads * c.head_dim, c.input_width(), qkv_bias);
    v.validate(prefix + "v_proj", c.kv_heads * c.head_dim, c.input_width(), qkv_bias);
    o.validate(prefix + "o_proj", c.hidden, c.heads * c.head_dim);
    if (c.qk_norm) {
      validate_vector(q_norm, prefix + "q_norm.weight", c.head_dim);
      validate_vector(k_norm, prefix + "k_norm.weight", c.head_dim);
    } else {
      SPECDEC_EXPECTS(q_norm.rows() == 0 && k_norm.rows() == 0, "specdec::blocks", prefix,
                      "q_norm / k_norm are present (lengths ", q_norm.rows(), ", ", k_norm.rows(),
                      "); the config has no qk_norm");
    }
  }
};

/// SwiGLU MLP: down(silu(gate(x)) * up(x)), no biases.
template <class Space = host_space>
struct mlp_weights {
  linear<Space> gate = {}, up = {}, down = {};
  void validate(index_t hidden, index_t intermediate, const std::string& prefix) const {
    gate.validate(prefix + "gate_proj", intermediate, hidden);
    up.validate(prefix + "up_proj", intermediate, hidden);
    down.validate(prefix + "down_proj", hidden, intermediate);
  }
};

/// A pre-norm Llama decoder layer.
struct layer_config {
  attention_config attention = {};
  index_t intermediate = 0;
  float rms_eps = 1e-5f;
  bool input_norm = true;  ///< false: EAGLE / Jakiro layer 0 feeds the fused input to attention unnormalised
};

template <class Space = host_space>
struct layer_weights {
  vector_view<const float, Space> input_norm = {};  ///< [E]; empty when layer_config::input_norm is false
  vector_view<const float, Space> post_norm = {};   ///< [E] post_attention_layernorm
  attention_weights<Space> attention = {};
  mlp_weights<Space> mlp = {};  ///< may stay empty where the caller replaces the MLP (Jakiro's MoE)

  /// \param prefix checkpoint name prefix, e.g. "layers.0." (attention under prefix + "self_attn.").
  void validate(const layer_config& c, const std::string& prefix, bool with_mlp = true) const {
    if (c.input_norm) validate_vector(input_norm, prefix + "input_layernorm.weight", c.attention.hidden);
    validate_vector(post_norm, prefix + "post_attention_layernorm.weight", c.attention.hidden);
    attention.validate(c.attention, prefix + "self_attn.");
    if (with_mlp) mlp.validate(c.attention.hidden, c.intermediate, prefix + "mlp.");
  }
};

/// How queries see keys in an attention call. Keys are the cache (when one is given) followed by the
/// call's own rows.
template <class Space = host_space>
struct attention_mask {
  enum class kind {
    causal,    ///< query i sees every cached key and its own rows 0..i (decoding, prefill)
    none,      ///< every query sees every key (LSA over layers, Amphista's slots, MoA's inference CA)
    allowed,   ///< `allowed` [T x keys] uint8 (a tree: specdec::tree_mask_dense with the prefix)
    additive,  ///< `additive` [T x keys] float, 0 / -inf
  };
  kind type = kind::causal;
  matrix_view<const std::uint8_t, Space> allowed = {};
  matrix_view<const float, Space> additive = {};

  static attention_mask causal() { return {}; }
  static attention_mask none() { return {kind::none}; }
  static attention_mask from(matrix_view<const std::uint8_t, Space> m) { return {kind::allowed, m, {}}; }
  static attention_mask from(matrix_view<const float, Space> m) { return {kind::additive, {}, m}; }
};

/// A KV cache of one attention sub-layer: `capacity` rows of `width` = kv_heads x head_dim keys
/// (after RoPE) and values, in the backend's memory. append() adds a call's rows; crop() keeps the
/// first n (the verified length); keep() compacts a tree's accepted rows behind the prefix.
template <dense_backend B>
class kv_cache {
 public:
  using space = typename B::memory_space;
  /// \throws invalid_argument unless 1 <= capacity <= 2^31 - 1 (rows are gathered by int32 ids),
  ///   width >= 1 and capacity x width <= specdec::max_elements, checked before allocating.
  kv_cache(B& b, index_t capacity, index_t width)
      : b_(&b), capacity_(capacity), width_(width), keys_(b.template allocate<float>(checked_size(capacity, width))),
        values_(b.template allocate<float>(capacity * width)) {}
  index_t size() const noexcept { return size_; }
  index_t capacity() const noexcept { return capacity_; }
  index_t width() const noexcept { return width_; }
  matrix_view<const float, space> keys() { return {keys_.view().data(), size_, width_}; }
  matrix_view<const float, space> values() { return {values_.view().data(), size_, width_}; }
  /// Rows [size, size + n) for the caller to fill, then counted. \throws invalid_argument past capacity.
  std::pair<matrix_view<float, space>, matrix_view<float, space>> extend(index_t n) {
    SPECDEC_EXPECTS(n >= 0 && n <= capacity_ - size_, "specdec::blocks::kv_cache::extend", "appending ", n, " rows to ",
                    size_, " exceeds the capacity of ", capacity_);
    const index_t at = size_;
    size_ += n;
    return {matrix_view<float, space>(keys_.view().data() + at * width_, n, width_),
            matrix_view<float, space>(values_.view().data() + at * width_, n, width_)};
  }
  /// Keeps the first n rows. \throws invalid_argument when n > size.
  void crop(index_t n) {
    SPECDEC_EXPECTS(n >= 0 && n <= size_, "specdec::blocks::kv_cache::crop", "n = ", n, "; the cache holds ", size_,
                    " rows");
    size_ = n;
  }
  /// Keeps rows [0, prefix) and then the rows `prefix + offsets[i]` in order (a tree's accepted path,
  /// offsets ascending), dropping the rest. \throws invalid_argument on offsets out of range or not
  /// ascending.
  void keep(index_t prefix, std::span<const std::int32_t> offsets) {
    constexpr const char* where = "specdec::blocks::kv_cache::keep";
    SPECDEC_EXPECTS(prefix >= 0 && prefix <= size_, where, "prefix = ", prefix, "; the cache holds ", size_, " rows");
    std::vector<std::int32_t> rows;
    for (std::size_t i = 0; i < offsets.size(); ++i) {
      SPECDEC_EXPECTS(offsets[i] >= 0 && offsets[i] < size_ - prefix && (i == 0 || offsets[i] > offsets[i - 1]), where,
                      "offset ", offsets[i], " at ", i, " is out of range or not ascending (", size_ - prefix,
                      " rows after the prefix)");
      rows.push_back(static_cast<std::int32_t>(prefix + offsets[i]));
    }
    if (rows.empty()) {
      size_ = prefix;
      return;
    }
    auto ids = b_->upload(std::span<const std::int32_t>(rows));
    const auto n = static_cast<index_t>(rows.size());
    for (auto* store : {&keys_, &values_}) {
      auto moved = b_->template allocate<float>(n * width_);
      b_->gather_rows(matrix_view<const float, space>(store->view().data(), size_, width_),
                      vector_view<const std::int32_t, space>(ids.view().data(), n), moved.matrix(n, width_));
      b_->gather_rows(matrix_view<const float, space>(moved.view().data(), n, width_),
                      vector_view<const std::int32_t, space>(identity(n).view().data(), n),
                      matrix_view<float, space>(store->view().data() + prefix * width_, n, width_));
    }
    size_ = prefix + n;
  }

 private:
  static index_t checked_size(index_t capacity, index_t width) {
    constexpr const char* where = "specdec::blocks::kv_cache";
    SPECDEC_EXPECTS(capacity >= 1 && capacity <= std::numeric_limits<std::int32_t>::max() && width >= 1, where,
                    "capacity = ", capacity, ", width = ", width, "; expected 1 <= capacity <= 2^31 - 1 and width >= 1");
    return static_cast<index_t>(specdec::detail::checked_count(where, {capacity, width}, "the cache [capacity x width]"));
  }
  typename B::template buffer<std::int32_t> identity(index_t n) {
    std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
    for (index_t i = 0; i < n; ++i) ids[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i);
    return b_->upload(std::span<const std::int32_t>(ids));
  }
  B* b_;
  index_t capacity_, width_, size_ = 0;
  typename B::template buffer<float> keys_, values_;
};

/// Restores a cache's length when the call that holds it throws, so that a refused forward leaves
/// the cache as it was (the rows it appended before the failing check are dropped again): an engine
/// that catches the error can retry the step or fall back to plain decoding.
template <dense_backend B>
class cache_rollback {
 public:
  explicit cache_rollback(kv_cache<B>* cache) noexcept
      : cache_(cache), size_(cache ? cache->size() : 0), pending_(std::uncaught_exceptions()) {}
  cache_rollback(const cache_rollback&) = delete;
  cache_rollback& operator=(const cache_rollback&) = delete;
  ~cache_rollback() {
    if (cache_ && std::uncaught_exceptions() > pending_ && size_ <= cache_->size()) cache_->crop(size_);
  }

 private:
  kv_cache<B>* cache_;
  index_t size_;
  int pending_;
};

namespace detail {

template <class B>
using mview = matrix_view<float, typename B::memory_space>;
template <class B>
using cmview = matrix_view<const float, typename B::memory_space>;

template <dense_backend B>
cmview<B> as_const(const mview<B>& m) {
  return {m.data(), m.rows(), m.cols(), m.stride(0), m.stride(1)};
}

/// Scratch `[rows x cols]` owned by the caller's list (kept alive until the call returns).
template <dense_backend B>
mview<B> scratch(B& b, std::vector<typename B::template buffer<float>>& keep, index_t rows, index_t cols) {
  keep.push_back(b.template allocate<float>(
      static_cast<index_t>(specdec::detail::checked_count("specdec::blocks", {rows, cols}, "a scratch buffer"))));
  return keep.back().matrix(rows, cols);
}

/// A call's arguments for the one checked path (specdec::detail::check_arguments): the weights are
/// inputs like any other, so an output laid over a weight (which a later sub-layer would read after
/// the output was written) is refused at the call's boundary with the rest.
using arguments = specdec::detail::argument_set;

template <class Space>
void add_inputs(arguments& set, const linear<Space>& l, const char* weight, const char* bias) {
  set.add(specdec::detail::input(weight, l.weight));
  set.add(specdec::detail::input(bias, l.bias));
}
template <class Space>
void add_inputs(arguments& set, const attention_weights<Space>& w) {
  add_inputs(set, w.q, "q_proj.weight", "q_proj.bias");
  add_inputs(set, w.k, "k_proj.weight", "k_proj.bias");
  add_inputs(set, w.v, "v_proj.weight", "v_proj.bias");
  add_inputs(set, w.o, "o_proj.weight", "o_proj.bias");
  set.add(specdec::detail::input("q_norm.weight", w.q_norm));
  set.add(specdec::detail::input("k_norm.weight", w.k_norm));
}
template <class Space>
void add_inputs(arguments& set, const mlp_weights<Space>& w) {
  add_inputs(set, w.gate, "gate_proj.weight", "gate_proj.bias");
  add_inputs(set, w.up, "up_proj.weight", "up_proj.bias");
  add_inputs(set, w.down, "down_proj.weight", "down_proj.bias");
}
template <class Space>
void add_inputs(arguments& set, const layer_weights<Space>& w) {
  set.add(specdec::detail::input("input_layernorm.weight", w.input_norm));
  set.add(specdec::detail::input("post_attention_layernorm.weight", w.post_norm));
  add_inputs(set, w.attention);
  add_inputs(set, w.mlp);
}
template <class Space>
void add_inputs(arguments& set, const attention_mask<Space>& mask) {
  set.add(specdec::detail::input("mask.allowed", mask.allowed));
  set.add(specdec::detail::input("mask.additive", mask.additive));
}

/// The boolean mask of a causal call: `queries` rows over `past + queries` keys.
template <dense_backend B>
typename B::template buffer<std::uint8_t> causal_mask(B& b, index_t past, index_t queries) {
  const index_t keys = specdec::detail::checked_add("specdec::blocks", past, queries, "past + queries");
  std::vector<std::uint8_t> m(specdec::detail::checked_count("specdec::blocks", {queries, keys}, "the causal mask"), 0);
  for (index_t i = 0; i < queries; ++i)
    for (index_t j = 0; j <= past + i; ++j) m[static_cast<std::size_t>(i * (past + queries) + j)] = 1;
  return b.upload(std::span<const std::uint8_t>(m));
}

}  // namespace detail

/// dst = src (row by row, through gather_rows). Backend `[T x W]` each.
template <dense_backend B>
void copy_rows(B& b, matrix_view<const float, typename B::memory_space> src, matrix_view<float, typename B::memory_space> dst) {
  constexpr const char* where = "specdec::blocks::copy_rows";
  specdec::detail::check_view(where, "src", src, specdec::detail::packed);
  SPECDEC_EXPECTS(src.rows() <= std::numeric_limits<std::int32_t>::max(), where, "src has ", src.rows(),
                  " rows; expected at most 2^31 - 1 (gathered by int32 ids)");
  std::vector<std::int32_t> ids(static_cast<std::size_t>(src.rows()));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>(i);
  auto dev = b.upload(std::span<const std::int32_t>(ids));
  b.gather_rows(src, vector_view<const std::int32_t, typename B::memory_space>(dev.view().data(), src.rows()), dst);
}

/// y = x W^T + b. \param x backend `[T x in]`. \param y backend `[T x out]`.
template <dense_backend B>
void apply(B& b, const linear<typename B::memory_space>& layer, matrix_view<const float, typename B::memory_space> x,
           matrix_view<float, typename B::memory_space> y) {
  detail::arguments args("specdec::blocks::apply");
  detail::add_inputs(args, layer, "weight", "bias");
  args.add(specdec::detail::input("x", x)).add(specdec::detail::output("y", y)).check();
  b.gemm(x, transpose::no, layer.weight, transpose::yes, y);
  if (layer.bias.rows() > 0) {
    // Added as one packed row: a strided bias would be read as packed.
    specdec::detail::check_view("specdec::blocks::apply", "bias", layer.bias, specdec::detail::packed);
    b.add_rows(y, matrix_view<const float, typename B::memory_space>(layer.bias.data(), 1, layer.bias.rows()));
  }
}

/// y = RMSNorm(x; norm) W^T (+ b): a final norm then a head (EAGLE-3's and MTP's logits).
/// \param x backend `[T x E]`. \param y backend `[T x out]`. \throws invalid_argument on shapes.
template <dense_backend B>
void norm_then_apply(B& b, vector_view<const float, typename B::memory_space> norm, float eps,
                     const linear<typename B::memory_space>& layer, matrix_view<const float, typename B::memory_space> x,
                     matrix_view<float, typename B::memory_space> y) {
  detail::arguments args("specdec::blocks::norm_then_apply");
  detail::add_inputs(args, layer, "weight", "bias");
  args.add(specdec::detail::input("norm", norm)).add(specdec::detail::input("x", x)).add(specdec::detail::output("y", y)).check();
  std::vector<typename B::template buffer<float>> keep;
  auto normed = detail::scratch(b, keep, x.rows(), x.cols());
  b.rms_norm(x, norm, eps, normed);
  apply(b, layer, detail::as_const<B>(normed), y);
}

namespace detail {

/// y = x W^T, then Qwen3's per-head RMSNorm when the config has qk_norm (`norm` [head_dim]; y's rows
/// are heads of head_dim contiguous columns, normalised as `[rows x heads]` rows of head_dim).
template <dense_backend B>
void project(B& b, const linear<typename B::memory_space>& layer, vector_view<const float, typename B::memory_space> norm,
             const attention_config& c, cmview<B> x, mview<B> y) {
  if (!c.qk_norm) return apply(b, layer, x, y);
  std::vector<typename B::template buffer<float>> keep;
  auto raw = scratch(b, keep, x.rows(), layer.out());
  apply(b, layer, x, raw);
  const index_t heads = layer.out() / c.head_dim;
  b.rms_norm(cmview<B>(raw.data(), x.rows() * heads, c.head_dim), norm, c.qk_norm_eps,
             mview<B>(y.data(), x.rows() * heads, c.head_dim));
}

/// Keys (projected, normalised where the config says, RoPE at `positions`) and values of `source`
/// `[Tk x I]` into `k` / `v` `[Tk x kv_heads d]` (packed: a cache's fresh rows or scratch).
template <dense_backend B>
void keys_values(B& b, const attention_config& c, const attention_weights<typename B::memory_space>& w, cmview<B> source,
                 vector_view<const std::int64_t, typename B::memory_space> positions, mview<B> k, mview<B> v) {
  project(b, w.k, w.k_norm, c, source, k);
  apply(b, w.v, source, v);
  if (c.rope) b.rope(k, positions, c.head_dim, c.rope_theta);
}

}  // namespace detail

/// Appends the keys and values of `source_in` `[Tk x I]` at `source_positions` `[Tk]` to `cache`,
/// exactly as attention_forward would for its source rows, without queries or attention: a
/// context that is only ever attended to (DFlash's injected target features). On a throw the cache
/// keeps its length. \throws invalid_argument on shapes or a full cache.
template <dense_backend B>
void append_keys_values(B& b, const attention_config& c, const attention_weights<typename B::memory_space>& w,
                        matrix_view<const float, typename B::memory_space> source_in,
                        vector_view<const std::int64_t, typename B::memory_space> source_positions, kv_cache<B>& cache) {
  constexpr const char* where = "specdec::blocks::append_keys_values";
  SPECDEC_EXPECTS(source_in.cols() == c.input_width() && source_positions.rows() == source_in.rows(), where, "source_in is [",
                  source_in.rows(), " x ", source_in.cols(), "] with ", source_positions.rows(), " positions; expected ",
                  c.input_width(), " columns and a position per row");
  SPECDEC_EXPECTS(cache.width() == c.kv_heads * c.head_dim, where, "the cache holds rows of ", cache.width(),
                  "; expected kv_heads x head_dim = ", c.kv_heads * c.head_dim);
  detail::arguments args(where);
  detail::add_inputs(args, w);
  args.add(specdec::detail::input("source_in", source_in)).add(specdec::detail::input("source_positions", source_positions)).check();
  if (source_in.rows() == 0) return;
  const cache_rollback<B> rollback(&cache);
  auto rows = cache.extend(source_in.rows());
  detail::keys_values(b, c, w, source_in, source_positions, rows.first, rows.second);
}

/// The attention of a sub-layer on already-normalised inputs: q from `query_in` `[Tq x I]` at
/// `query_positions` `[Tq]`, k / v from `source_in` `[Tk x I]` at `source_positions` `[Tk]` (I =
/// `c.input_width()`, E unless the config says otherwise; pass the
/// same views for self-attention), RoPE on q and k when the config says so, appended to `cache` when
/// one is given (keys then span the cache), attention under `mask`, then o_proj into `out` `[Tq x E]`.
/// `segment` > 0 splits the rows into independent sequences of that many rows (MoA's LSA: one
/// sequence of L layers per token); with segments the mask must be `none` or `causal` and no cache.
/// \throws invalid_argument on shapes, a mask of the wrong extent, a cache of the wrong width.
template <dense_backend B>
void attention_forward(B& b, const attention_config& c, const attention_weights<typename B::memory_space>& w,
                       matrix_view<const float, typename B::memory_space> query_in,
                       vector_view<const std::int64_t, typename B::memory_space> query_positions,
                       matrix_view<const float, typename B::memory_space> source_in,
                       vector_view<const std::int64_t, typename B::memory_space> source_positions,
                       std::type_identity_t<kv_cache<B>>* cache, const attention_mask<typename B::memory_space>& mask,
                       matrix_view<float, typename B::memory_space> out, index_t segment = 0) {
  constexpr const char* where = "specdec::blocks::attention_forward";
  using space = typename B::memory_space;
  const index_t tq = query_in.rows(), tk = source_in.rows(), kv_width = c.kv_heads * c.head_dim;
  SPECDEC_EXPECTS(query_in.cols() == c.input_width() && source_in.cols() == c.input_width(), where, "inputs have ",
                  query_in.cols(), " and ", source_in.cols(), " columns; expected ", c.input_width(),
                  c.input > 0 ? " (the config's input width)" : " (hidden)");
  SPECDEC_EXPECTS(!cache || cache->width() == kv_width, where, "the cache holds rows of ", cache ? cache->width() : 0,
                  "; expected kv_heads x head_dim = ", kv_width);
  SPECDEC_EXPECTS(segment == 0 || (!cache && tq == tk && tq % segment == 0 &&
                                   (mask.type == attention_mask<space>::kind::none ||
                                    mask.type == attention_mask<space>::kind::causal)),
                  where, "segments of ", segment, " rows need equal query / source rows divisible by it, no cache, and a "
                  "none or causal mask");
  detail::arguments args(where);
  detail::add_inputs(args, w);
  detail::add_inputs(args, mask);
  args.add(specdec::detail::input("query_in", query_in)).add(specdec::detail::input("source_in", source_in));
  args.add(specdec::detail::input("query_positions", query_positions)).add(specdec::detail::input("source_positions", source_positions));
  args.add(specdec::detail::output("out", out)).check();
  const cache_rollback<B> rollback(cache);
  std::vector<typename B::template buffer<float>> keep;
  auto q = detail::scratch(b, keep, tq, c.heads * c.head_dim);
  detail::project(b, w.q, w.q_norm, c, query_in, q);
  if (c.rope) b.rope(q, query_positions, c.head_dim, c.rope_theta);
  detail::mview<B> k, v;
  if (cache) {
    auto rows = cache->extend(tk);
    k = rows.first;
    v = rows.second;
  } else {
    k = detail::scratch(b, keep, tk, kv_width);
    v = detail::scratch(b, keep, tk, kv_width);
  }
  // A call may bring no new keys (MoA's cross-attention while no token was verified since the last
  // call): the queries then read the cache alone.
  if (tk > 0) detail::keys_values(b, c, w, source_in, source_positions, k, v);
  const detail::cmview<B> keys = cache ? cache->keys() : detail::as_const<B>(k);
  const detail::cmview<B> values = cache ? cache->values() : detail::as_const<B>(v);
  SPECDEC_EXPECTS(keys.rows() >= 1, where, "no keys to attend to: the cache is empty and the call brings no source rows");
  auto context = detail::scratch(b, keep, tq, c.heads * c.head_dim);
  const attention_heads heads = c.heads_shape();
  const index_t seg = segment > 0 ? segment : tq;
  const index_t past = keys.rows() - (segment > 0 ? keys.rows() : tk);
  for (index_t s0 = 0; s0 < (segment > 0 ? tq : 1) ; s0 += seg) {
    const index_t rows = segment > 0 ? seg : tq;
    const detail::cmview<B> qs(q.data() + s0 * q.cols(), rows, q.cols());
    const detail::cmview<B> ks = segment > 0 ? detail::cmview<B>(keys.data() + s0 * kv_width, rows, kv_width) : keys;
    const detail::cmview<B> vs = segment > 0 ? detail::cmview<B>(values.data() + s0 * kv_width, rows, kv_width) : values;
    const detail::mview<B> os(context.data() + s0 * context.cols(), rows, context.cols());
    switch (mask.type) {
      case attention_mask<space>::kind::causal: {
        auto m = detail::causal_mask(b, segment > 0 ? 0 : past, rows);
        b.attention(qs, ks, vs, heads, matrix_view<const std::uint8_t, space>(m.view().data(), rows, ks.rows()), os);
        break;
      }
      case attention_mask<space>::kind::none:
        b.attention(qs, ks, vs, heads, matrix_view<const std::uint8_t, space>(), os);
        break;
      case attention_mask<space>::kind::allowed:
        b.attention(qs, ks, vs, heads, mask.allowed, os);
        break;
      case attention_mask<space>::kind::additive:
        b.attention(qs, ks, vs, heads, mask.additive, os);
        break;
    }
  }
  apply(b, w.o, detail::as_const<B>(context), out);
}

/// y = down(silu(gate(x)) * up(x)). \param x backend `[T x E]`, \param y backend `[T x E]`.
template <dense_backend B>
void mlp_forward(B& b, const mlp_weights<typename B::memory_space>& w, matrix_view<const float, typename B::memory_space> x,
                 matrix_view<float, typename B::memory_space> y) {
  detail::arguments args("specdec::blocks::mlp_forward");
  detail::add_inputs(args, w);
  args.add(specdec::detail::input("x", x)).add(specdec::detail::output("y", y)).check();
  std::vector<typename B::template buffer<float>> keep;
  auto gate = detail::scratch(b, keep, x.rows(), w.gate.out());
  auto up = detail::scratch(b, keep, x.rows(), w.up.out());
  apply(b, w.gate, x, gate);
  apply(b, w.up, x, up);
  b.silu_mul(detail::as_const<B>(gate), detail::as_const<B>(up), gate);
  apply(b, w.down, detail::as_const<B>(gate), y);
}

/// What decoder_layer_forward skips (ADMG / Draft & Verify drafting): a skipped sub-layer leaves the
/// residual stream unchanged and writes no KV.
struct layer_skip {
  bool attention = false;
  bool mlp = false;
};

/// The pre-norm decoder layer, in place on the residual stream `x` `[T x E]`:
/// x += Attn(RMSNorm_in(x)) (self-attention at `positions`, keys = cache + rows), then
/// x += MLP(RMSNorm_post(x)). To observe x between the two (ADMG's statistic), call it twice with
/// `skip = {false, true}` then `{true, false}`: the same computation. `mask` as attention_mask
/// (causal by default; a tree's `[T x (cached + T)]` mask to verify a draft tree). A skipped attention
/// writes no cache rows. \throws invalid_argument on shapes (validate the weights once with
/// layer_weights::validate).
template <dense_backend B>
void decoder_layer_forward(B& b, const layer_config& c, const layer_weights<typename B::memory_space>& w,
                           matrix_view<float, typename B::memory_space> x,
                           vector_view<const std::int64_t, typename B::memory_space> positions, std::type_identity_t<kv_cache<B>>* cache,
                           const attention_mask<typename B::memory_space>& mask = {}, layer_skip skip = {},
                           index_t segment = 0) {
  detail::arguments args("specdec::blocks::decoder_layer_forward");
  detail::add_inputs(args, w);
  detail::add_inputs(args, mask);
  args.add(specdec::detail::input("positions", positions)).add(specdec::detail::output("x", x)).check();
  const cache_rollback<B> rollback(cache);  // the MLP's checks run after the attention appended
  const index_t t = x.rows(), e = x.cols();
  std::vector<typename B::template buffer<float>> keep;
  auto normed = detail::scratch(b, keep, t, e);
  auto delta = detail::scratch(b, keep, t, e);
  if (!skip.attention) {
    if (c.input_norm) b.rms_norm(detail::as_const<B>(x), w.input_norm, c.rms_eps, normed);
    const detail::cmview<B> in = c.input_norm ? detail::as_const<B>(normed) : detail::as_const<B>(x);
    attention_forward(b, c.attention, w.attention, in, positions, in, positions, cache, mask, delta, segment);
    b.add_rows(x, detail::as_const<B>(delta));
  }
  if (!skip.mlp) {
    b.rms_norm(detail::as_const<B>(x), w.post_norm, c.rms_eps, normed);
    mlp_forward(b, w.mlp, detail::as_const<B>(normed), delta);
    b.add_rows(x, detail::as_const<B>(delta));
  }
}

}  // namespace specdec::blocks
