// SPDX-License-Identifier: Apache-2.0
// The drafter blocks of block_api.hpp on a backend B of their own (its scratch and, on CUDA, its stream
// binding): the same code for specdec::eigen (blocks.cpp) and specdec::thrust_backend<cuda>
// (cuda_ops.cu). Weights are the caller's tensors, viewed in place in B's memory; the block holds its
// KV caches in B's memory.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <specdec/blocks/amphista.hpp>
#include <specdec/blocks/eagle.hpp>
#include <specdec/blocks/eagle3.hpp>
#include <specdec/blocks/layers.hpp>
#include <specdec/blocks/moa.hpp>
#include <specdec/blocks/moe.hpp>
#include <specdec/blocks/mtp.hpp>

#include "block_api.hpp"

namespace specdec_python::block {

/// Binds backend B to the call's device and stream before each call: nothing on the host; cuda_ops.cu
/// specializes it for the CUDA backend.
template <class B>
struct stream_binding {
  static void bind(B&, int, std::uintptr_t) {}
};

/// The caller's weights by name as views in `Space`; a missing or misshapen name is a ValueError.
template <class Space>
class weight_views {
 public:
  explicit weight_views(const weight_map& weights) : weights_(&weights) {}
  specdec::matrix_view<const float, Space> matrix(const std::string& name) const {
    const tensor& t = fetch(name, 2);
    return {t.data, t.rows, t.cols};
  }
  specdec::vector_view<const float, Space> vector(const std::string& name) const {
    const tensor& t = fetch(name, 1);
    return {t.data, t.rows};
  }
  specdec::blocks::linear<Space> linear(const std::string& name) const { return {matrix(name + ".weight"), {}}; }
  specdec::blocks::linear<Space> linear_with_bias(const std::string& name) const {
    return {matrix(name + ".weight"), vector(name + ".bias")};
  }
  /// A decoder layer's tensors under `prefix` (its attention's under `attention`, default prefix +
  /// "self_attn."); without `input_norm`, no input_layernorm (EAGLE's layer 0).
  specdec::blocks::layer_weights<Space> layer(const std::string& prefix, std::string attention = "", bool input_norm = true) const {
    if (attention.empty()) attention = prefix + "self_attn.";
    specdec::blocks::layer_weights<Space> w;
    if (input_norm) w.input_norm = vector(prefix + "input_layernorm.weight");
    w.post_norm = vector(prefix + "post_attention_layernorm.weight");
    w.attention = {linear(attention + "q_proj"), linear(attention + "k_proj"), linear(attention + "v_proj"), linear(attention + "o_proj")};
    w.mlp = {linear(prefix + "mlp.gate_proj"), linear(prefix + "mlp.up_proj"), linear(prefix + "mlp.down_proj")};
    return w;
  }

 private:
  const tensor& fetch(const std::string& name, int ndim) const {
    const auto it = weights_->find(name);
    if (it == weights_->end()) throw std::invalid_argument("weights: expected a float32 array named \"" + name + "\"");
    if (it->second.ndim != ndim)
      throw std::invalid_argument("weights: expected \"" + name + "\" to have " + std::to_string(ndim) + " dimensions; got " +
                                  std::to_string(it->second.ndim));
    return it->second;
  }
  const weight_map* weights_;
};

template <class Space>
specdec::blocks::attention_mask<Space> mask_in(const mask_arg& m) {
  switch (m.kind) {
    case mask_arg::causal: return {};
    case mask_arg::none: return specdec::blocks::attention_mask<Space>::none();
    case mask_arg::additive:
      return specdec::blocks::attention_mask<Space>::from(
          specdec::matrix_view<const float, Space>(static_cast<const float*>(m.data), m.rows, m.cols));
    case mask_arg::allowed: break;
  }
  return specdec::blocks::attention_mask<Space>::from(
      specdec::matrix_view<const std::uint8_t, Space>(static_cast<const std::uint8_t*>(m.data), m.rows, m.cols));
}

/// Argument `name` has shape `got`, where the block needs `want` (-1: any extent): a ValueError worded as
/// the binding's other shape checks.
inline void check_shape(const char* name, std::initializer_list<std::int64_t> got, std::initializer_list<std::int64_t> want) {
  if (std::ranges::equal(got, want, [](std::int64_t g, std::int64_t w) { return w < 0 || g == w; })) return;
  const auto text = [](std::initializer_list<std::int64_t> shape) {
    std::string s = "(";
    for (const std::int64_t n : shape) s += (s.size() > 1 ? ", " : "") + (n < 0 ? std::string("*") : std::to_string(n));
    return s + (shape.size() == 1 ? ",)" : ")");
  };
  throw std::invalid_argument(std::string(name) + ": expected shape " + text(want) + "; got " + text(got));
}

/// A call's arguments checked against the block before the headers see them, each fault named by the
/// caller's argument: the headers check the same things in their own words, which name what they compare
/// the argument with ("rms_norm: weight has length 8; expected 9" for an `x` of the wrong width,
/// "additive_mask has shape ..." for `mask`, a kv_cache for rows that do not fit it).

/// `a` `[rows x cols]` has `cols` columns (`what`: where that width comes from).
template <class T>
void expect_cols(const matrix_arg<T>& a, std::int64_t cols, const char* what) {
  if (a.cols == cols) return;
  throw std::invalid_argument(std::string(a.name) + ": expected " + std::to_string(cols) + " columns (" + what + "); got shape (" +
                              std::to_string(a.rows) + ", " + std::to_string(a.cols) + ")");
}

/// Arguments that hold one row (or entry) per new token, `{name, rows}` each, agree on the count; where
/// they do not, the one that differs from the others is named (the count most of them hold, the first
/// argument's on a tie: `tokens: expected 2 (one per token, as hidden and positions have); got 3`).
inline void expect_same_rows(std::initializer_list<std::pair<const char*, std::int64_t>> args) {
  std::int64_t want = args.begin()->second;
  std::size_t most = 0;
  for (const auto& [name, rows] : args) {
    const auto n = static_cast<std::size_t>(std::ranges::count_if(args, [&](const auto& a) { return a.second == rows; }));
    if (n > most) {
      most = n;
      want = rows;
    }
  }
  for (const auto& [name, rows] : args) {
    if (rows == want) continue;
    std::string agree;
    for (const auto& [other, n] : args)
      if (n == want) agree += (agree.empty() ? "" : " and ") + std::string(other);
    throw std::invalid_argument(std::string(name) + ": expected " + std::to_string(want) + " (one per token, as " + agree + " " +
                                (agree.find(" and ") != std::string::npos ? "have" : "has") + "); got " + std::to_string(rows));
  }
}

/// A forward's `mask` over `rows` new rows and a cache that holds `cached` rows: `[rows x (cached + rows)]`.
inline void expect_mask(const mask_arg& m, std::int64_t rows, std::int64_t cached) {
  if (m.kind != mask_arg::allowed && m.kind != mask_arg::additive) return;
  if (m.rows == rows && m.cols == cached + rows) return;
  throw std::invalid_argument("mask: expected shape (" + std::to_string(rows) + ", " + std::to_string(cached + rows) + ") (the " +
                              std::to_string(rows) + " new rows by the " + std::to_string(cached) + " cached rows and the new ones); got (" +
                              std::to_string(m.rows) + ", " + std::to_string(m.cols) + ")");
}

/// `rows` new rows (argument `name`'s) fit a KV cache of `capacity` rows that holds `cached`.
inline void expect_room(const char* name, std::int64_t rows, std::int64_t cached, std::int64_t capacity) {
  if (rows <= capacity - cached) return;
  throw std::invalid_argument(std::string(name) + ": " + std::to_string(rows) + " new rows do not fit the KV cache (it holds " +
                              std::to_string(cached) + " of its capacity " + std::to_string(capacity) +
                              "; crop it, or make the block with a larger capacity)");
}

template <class Space, class T>
specdec::matrix_view<T, Space> view(const matrix_arg<T>& a) {
  return {a.data, a.rows, a.cols};
}
/// `a` checked to be `[rows x cols]` (an output sized by the block or by another argument).
template <class Space, class T>
specdec::matrix_view<T, Space> view(const matrix_arg<T>& a, std::int64_t rows, std::int64_t cols) {
  check_shape(a.name, {a.rows, a.cols}, {rows, cols});
  return view<Space>(a);
}
/// An optional output: the empty view where the caller left it out.
template <class Space>
specdec::matrix_view<float, Space> view(const optional_output& a, std::int64_t rows, std::int64_t cols) {
  return a.data == nullptr ? specdec::matrix_view<float, Space>{} : view<Space, float>(a, rows, cols);
}
template <class Space, class T>
specdec::vector_view<T, Space> view(const vector_arg<T>& a) {
  return {a.data, a.size};
}

/// What every session holds: its backend (first: the caches and views below refer to it), the device it
/// runs on and the layer configuration helpers.
template <class B>
class session_base {
 protected:
  using space = typename B::memory_space;
  explicit session_base(int device) : backend_(std::make_unique<B>()), device_(device) {}
  B& bind(std::uintptr_t stream) {
    stream_binding<B>::bind(*backend_, device_, stream);
    return *backend_;
  }
  static specdec::blocks::layer_config layer_config_of(const specdec::blocks::layer_weights<space>& w, const layer_shape& s,
                                                       bool input_norm = true) {
    return {{w.attention.o.out(), s.heads, s.kv_heads, s.head_dim, s.rope_theta, true, 0}, w.mlp.gate.out(), s.rms_eps, input_norm};
  }
  std::unique_ptr<B> backend_;
  int device_;
};

/// A session with one KV cache (kv_heads head_dim wide): the cache methods of such a block.
template <class B, class Api>
class one_cache_session : public Api, protected session_base<B> {
 public:
  std::int64_t cache_size() const override { return cache_->size(); }
  void crop(std::int64_t n) override { cache_->crop(n); }

 protected:
  explicit one_cache_session(int device) : session_base<B>(device) {}
  void make_cache(const layer_shape& s) { cache_.emplace(*this->backend_, s.capacity, s.kv_heads * s.head_dim); }
  std::optional<specdec::blocks::kv_cache<B>> cache_;
};

/// One KV cache and tree drafts: keep.
template <class B, class Api>
class tree_cache_session : public one_cache_session<B, Api> {
 public:
  void keep(std::int64_t prefix, host_offsets offsets, std::uintptr_t stream) override {
    (void)this->bind(stream);
    this->cache_->keep(prefix, std::span<const std::int32_t>(offsets.data, static_cast<std::size_t>(offsets.size)));
  }

 protected:
  using one_cache_session<B, Api>::one_cache_session;
};

/// Api's implementation on backend B: its constructor takes the device, the weights and Api::init's
/// arguments.
template <class Api, class B>
class session;

template <class B>
class session<decoder_layer, B> final : public tree_cache_session<B, decoder_layer> {
  using base = tree_cache_session<B, decoder_layer>;
  using typename session_base<B>::space;
  using base::cache_;

 public:
  session(int device, const weight_map& weights, const std::string& prefix, const layer_shape& s, bool input_norm)
      : base(device), weights_(weight_views<space>(weights).layer(prefix, "", input_norm)) {
    config_ = base::layer_config_of(weights_, s, input_norm);
    weights_.validate(config_, prefix);
    this->make_cache(s);
  }
  std::int64_t cache_width() const override { return cache_->width(); }
  void forward(output x, position_ids positions, const mask_arg& mask, std::uintptr_t stream) override {
    expect_cols(x, config_.attention.hidden, "the layer's hidden size");
    expect_same_rows({{x.name, x.rows}, {positions.name, positions.size}});
    expect_mask(mask, x.rows, cache_->size());
    expect_room(x.name, x.rows, cache_->size(), cache_->capacity());
    specdec::blocks::decoder_layer_forward(this->bind(stream), config_, weights_, view<space>(x), view<space>(positions), &*cache_,
                                           mask_in<space>(mask));
  }
  void cached_rows(bool keys, output out, std::uintptr_t stream) override {
    const auto m = keys ? cache_->keys() : cache_->values();
    specdec::blocks::copy_rows(this->bind(stream), m, view<space>(out, m.rows(), m.cols()));
  }

 private:
  specdec::blocks::layer_config config_;
  specdec::blocks::layer_weights<space> weights_;
};

template <class B>
class session<eagle3_block, B> final : public tree_cache_session<B, eagle3_block> {
  using base = tree_cache_session<B, eagle3_block>;
  using typename session_base<B>::space;
  using base::cache_;

 public:
  session(int device, const weight_map& weights, const layer_shape& s) : base(device) {
    const weight_views<space> w(weights);
    const std::string p = "midlayer.";
    weights_ = {w.matrix("embed_tokens.weight"), w.linear("fc"), w.vector(p + "hidden_norm.weight"), {}, w.vector("norm.weight"),
                w.linear("lm_head")};
    weights_.layer = w.layer(p);
    const specdec::index_t e = weights_.embed.cols();
    config_.layer = {{e, s.heads, s.kv_heads, s.head_dim, s.rope_theta, true, 0}, weights_.layer.mlp.gate.out(), s.rms_eps, true};
    config_.target_hidden = weights_.fc.in() / 3;
    config_.vocab = weights_.embed.rows();
    config_.draft_vocab = weights_.lm_head.out();
    SPECDEC_EXPECTS(weights_.fc.in() % 3 == 0, "specdec::blocks", "fc.weight has ", weights_.fc.in(),
                    " columns; expected 3 E_t (three tapped target states)");
    weights_.validate(config_);
    this->make_cache(s);
  }
  std::int64_t hidden() const override { return config_.layer.attention.hidden; }
  std::int64_t draft_vocab() const override { return config_.draft_vocab; }
  void fuse(input taps, output out, std::uintptr_t stream) override {
    expect_cols(taps, weights_.fc.in(), "3 E_t: fc.weight's columns");
    specdec::blocks::eagle3::fuse(this->bind(stream), weights_, view<space>(taps), view<space>(out, taps.rows, hidden()));
  }
  void forward(token_ids tokens, input h, position_ids positions, const mask_arg& mask, output out, std::uintptr_t stream) override {
    expect_cols(h, hidden(), "the block's hidden size");
    expect_same_rows({{tokens.name, tokens.size}, {h.name, h.rows}, {positions.name, positions.size}});
    expect_mask(mask, h.rows, cache_->size());
    expect_room(h.name, h.rows, cache_->size(), cache_->capacity());
    const auto o = view<space>(out, h.rows, hidden());
    specdec::blocks::eagle3::forward(this->bind(stream), config_, weights_, view<space>(tokens), view<space>(h), view<space>(positions),
                                     &*cache_, mask_in<space>(mask), o);
  }
  void logits(input h2, output out, std::uintptr_t stream) override {
    expect_cols(h2, hidden(), "the block's hidden size");
    specdec::blocks::eagle3::logits(this->bind(stream), config_, weights_, view<space>(h2), view<space>(out, h2.rows, draft_vocab()));
  }

 private:
  specdec::blocks::eagle3::config config_;
  specdec::blocks::eagle3::weights<space> weights_;
};

template <class B>
class session<mtp_module, B> final : public one_cache_session<B, mtp_module> {
  using base = one_cache_session<B, mtp_module>;
  using typename session_base<B>::space;
  using base::cache_;

 public:
  session(int device, const weight_map& weights, const std::string& prefix, const layer_shape& s, bool zero_embedding_at_position_0)
      : base(device) {
    const weight_views<space> w(weights);
    const std::string& p = prefix;
    weights_.embed = w.matrix("embed_tokens.weight");
    weights_.enorm = w.vector(p + "enorm.weight");
    weights_.hnorm = w.vector(p + "hnorm.weight");
    weights_.eh_proj = w.linear(p + "eh_proj");
    weights_.layer = w.layer(p + "mtp_block.");
    weights_.head_norm = w.vector(p + "shared_head.norm.weight");
    weights_.head = w.linear(p + "shared_head.head");
    const specdec::index_t e = weights_.embed.cols();
    config_.layer = {{e, s.heads, s.kv_heads, s.head_dim, s.rope_theta, true, 0}, weights_.layer.mlp.gate.out(), s.rms_eps, true};
    config_.vocab = weights_.embed.rows();
    config_.zero_embedding_at_position_0 = zero_embedding_at_position_0;
    weights_.validate(config_);
    this->make_cache(s);
  }
  std::int64_t hidden() const override { return config_.layer.attention.hidden; }
  std::int64_t vocab() const override { return config_.vocab; }
  void forward(token_ids tokens, input h, position_ids positions, const mask_arg& mask, output out, optional_output projected,
               std::uintptr_t stream) override {
    expect_cols(h, hidden(), "the module's hidden size");
    expect_same_rows({{tokens.name, tokens.size}, {h.name, h.rows}, {positions.name, positions.size}});
    expect_mask(mask, h.rows, cache_->size());
    expect_room(h.name, h.rows, cache_->size(), cache_->capacity());
    const auto o = view<space>(out, h.rows, hidden());
    const auto x = view<space>(projected, h.rows, hidden());
    B& b = this->bind(stream);
    if (projected.data != nullptr)
      specdec::blocks::mtp::project(b, config_, weights_, view<space>(tokens), view<space>(h), view<space>(positions), x);
    specdec::blocks::mtp::forward(b, config_, weights_, view<space>(tokens), view<space>(h), view<space>(positions), &*cache_,
                                  mask_in<space>(mask), o);
  }
  void logits(input o, output out, std::uintptr_t stream) override {
    expect_cols(o, hidden(), "the module's hidden size");
    specdec::blocks::mtp::logits(this->bind(stream), config_, weights_, view<space>(o), view<space>(out, o.rows, vocab()));
  }

 private:
  specdec::blocks::mtp::config config_;
  specdec::blocks::mtp::weights<space> weights_;
};

template <class B>
class session<jakiro_layer, B> final : public tree_cache_session<B, jakiro_layer> {
  using base = tree_cache_session<B, jakiro_layer>;
  using typename session_base<B>::space;
  using base::cache_;

 public:
  session(int device, const weight_map& weights, const layer_shape& s) : base(device) {
    const weight_views<space> w(weights);
    const std::string l = "layers.0.";
    eagle_.embed = w.matrix("embed_tokens.weight");
    eagle_.fc = w.linear_with_bias("fc");
    eagle_.layer.post_norm = w.vector(l + "post_attention_layernorm.weight");
    eagle_.layer.attention = {w.linear(l + "self_attn.q_proj"), w.linear(l + "self_attn.k_proj"), w.linear(l + "self_attn.v_proj"),
                              w.linear(l + "self_attn.o_proj")};
    const specdec::index_t e = eagle_.embed.cols();
    config_ = {{e, s.heads, s.kv_heads, s.head_dim, s.rope_theta, true, 0}, 0, s.rms_eps, false};
    eagle_.validate(config_, eagle_.embed.rows(), false);
    moe_.gate = w.linear(l + "mlp_moe.gate");
    for (int i = 0; i < 2; ++i) {
      const std::string x = l + "mlp_moe.experts." + std::to_string(i) + ".";
      moe_.experts.push_back({w.linear(x + "gate_proj"), w.linear(x + "up_proj"), w.linear(x + "down_proj")});
    }
    moe_config_ = {e, 2, moe_.experts[0].gate.out()};
    moe_.validate(moe_config_, l + "mlp_moe.");
    this->make_cache(s);
  }
  std::int64_t hidden() const override { return config_.attention.hidden; }
  void forward(token_ids tokens, input feature, position_ids positions, const mask_arg& mask, output left, optional_output right,
               std::uintptr_t stream) override {
    // One row per token: before the outputs sized by the tokens.
    expect_same_rows({{tokens.name, tokens.size}, {feature.name, feature.rows}, {positions.name, positions.size}});
    expect_cols(feature, hidden(), "the layer's hidden size");
    expect_mask(mask, tokens.size, cache_->size());
    expect_room(feature.name, tokens.size, cache_->size(), cache_->capacity());
    const auto l = view<space>(left, feature.rows, hidden());
    const auto r = view<space>(right, feature.rows, hidden());
    specdec::blocks::moe::draft_layer_forward(this->bind(stream), config_, eagle_, moe_config_, moe_, view<space>(tokens),
                                              view<space>(feature), view<space>(positions), &*cache_, mask_in<space>(mask), l, r);
  }

 private:
  specdec::blocks::layer_config config_;
  specdec::blocks::eagle::weights<space> eagle_;
  specdec::blocks::moe::config moe_config_;
  specdec::blocks::moe::weights<space> moe_;
};

template <class B>
class session<amphista_heads, B> final : public amphista_heads, session_base<B> {
  using base = session_base<B>;
  using typename base::space;

 public:
  session(int device, const weight_map& weights, const layer_shape& s, std::int64_t k_heads, std::int64_t stage1_heads)
      : base(device) {
    const weight_views<space> w(weights);
    for (auto* stage : {&weights_.stage1, &weights_.stage2}) {
      const std::string p = stage == &weights_.stage1 ? "stage1." : "stage2.";
      stage->fuse = w.linear_with_bias(p + "fuse");
      stage->layer = w.layer(p + "layer.");
    }
    weights_.position_embedding = w.matrix("auto.pos_emb");
    weights_.auto_embedding = w.layer("auto.layer.", "auto.layer.");
    for (std::int64_t h = 0; h < k_heads; ++h) weights_.heads.push_back(w.matrix("auto.heads." + std::to_string(h) + ".weight"));
    const specdec::index_t e = weights_.position_embedding.cols();
    config_.stage = {{e, s.heads, s.kv_heads, s.head_dim, s.rope_theta, true, 0}, weights_.stage1.layer.mlp.gate.out(), s.rms_eps, true};
    config_.auto_embedding = {{e, s.heads, s.kv_heads, s.head_dim, s.rope_theta, false, 0}, weights_.auto_embedding.mlp.gate.out(),
                              s.rms_eps, true};
    config_.heads = k_heads;
    config_.stage1_heads = stage1_heads;
    config_.vocab = k_heads > 0 ? weights_.heads[0].rows() : 0;
    weights_.stage1.layer.validate(config_.stage, "stage1.layer.");
    weights_.stage2.layer.validate(config_.stage, "stage2.layer.");
    weights_.auto_embedding.validate(config_.auto_embedding, "auto.layer.");
    for (auto* cache : {&stage1_cache_, &stage2_cache_}) cache->emplace(*this->backend_, s.capacity, s.kv_heads * s.head_dim);
  }
  std::int64_t hidden() const override { return config_.stage.attention.hidden; }
  std::int64_t heads() const override { return config_.heads; }
  std::int64_t vocab() const override { return config_.vocab; }
  std::int64_t cache_size() const override { return stage1_cache_->size(); }
  void crop(std::int64_t n) override {
    stage1_cache_->crop(n);
    stage2_cache_->crop(n);
  }
  void forward(input feature, input embedding, position_ids positions, output s1, output s2, output z, output u, output o, output logits,
               std::uintptr_t stream) override {
    using cmv = specdec::matrix_view<const float, space>;
    const specdec::index_t t = feature.rows, e = hidden(), k = heads();
    expect_cols(feature, e, "the heads' hidden size");
    expect_same_rows({{feature.name, feature.rows}, {embedding.name, embedding.rows}, {positions.name, positions.size}});
    expect_room(feature.name, t, stage1_cache_->size(), stage1_cache_->capacity());
    const auto em = view<space>(embedding, t, e);
    check_shape(positions.name, {positions.size}, {t});
    const auto v1 = view<space>(s1, t, e), v2 = view<space>(s2, t, e), vz = view<space>(z, k, e), vu = view<space>(u, k, e),
               vo = view<space>(o, k, e), vl = view<space>(logits, k, vocab());
    if (t < 1) throw std::invalid_argument("feature: expected at least one row");
    B& b = this->bind(stream);
    specdec::blocks::amphista::stage_forward(b, config_.stage, weights_.stage1, view<space>(feature), em, view<space>(positions),
                                             &*stage1_cache_, v1);
    specdec::blocks::amphista::stage_forward(b, config_.stage, weights_.stage2, v1, em, view<space>(positions), &*stage2_cache_, v2);
    specdec::blocks::amphista::head_inputs(b, config_, weights_, cmv(s1.data + (t - 1) * e, 1, e), cmv(s2.data + (t - 1) * e, 1, e), vz);
    specdec::blocks::amphista::auto_embedding(b, config_, weights_, vz, vl, vu, vo);
  }

 private:
  specdec::blocks::amphista::config config_;
  specdec::blocks::amphista::weights<space> weights_;
  std::optional<specdec::blocks::kv_cache<B>> stage1_cache_, stage2_cache_;
};

template <class B>
class session<moa_drafter, B> final : public moa_drafter, session_base<B> {
  using base = session_base<B>;
  using typename base::space;

 public:
  session(int device, const weight_map& weights, const part_shape& lsa, const part_shape& sa, const part_shape& ca,
              std::int64_t target_layers, std::int64_t target_head_dim, float rms_eps, std::int64_t capacity)
      : base(device) {
    const weight_views<space> w(weights);
    weights_.layer_self_attention = w.layer("layer_self_attention.");
    weights_.ekv2e = w.linear_with_bias("Ekv2E");
    weights_.self_attention = w.layer("self_attention.");
    weights_.cross_attention = w.layer("cross_attention.");
    const auto config_of = [&](const part_shape& shape, const specdec::blocks::layer_weights<space>& lw) {
      const auto [heads, kv_heads, head_dim, theta] = shape;
      return base::layer_config_of(lw, layer_shape{heads, kv_heads, head_dim, rms_eps, theta, capacity});
    };
    config_ = {config_of(lsa, weights_.layer_self_attention), config_of(sa, weights_.self_attention),
               config_of(ca, weights_.cross_attention), target_layers, target_head_dim};
    drafter_.emplace(*this->backend_, config_, weights_, capacity);
  }
  std::int64_t hidden() const override { return config_.hidden(); }
  std::int64_t verified() const override { return drafter_->verified(); }
  std::int64_t cache_size() const override { return drafter_->self_attention_cache().size(); }
  void crop(std::int64_t n) override { drafter_->crop(n); }
  void add_verified(const std::vector<input>& keys, const std::vector<input>& values, std::int64_t first, std::int64_t count,
                    std::uintptr_t stream) override {
    // The headers word these by "layers" and prefix them with first and count (their other faults).
    if (static_cast<std::int64_t>(keys.size()) != config_.target_layers)
      throw std::invalid_argument("keys: expected one array per target layer (" + std::to_string(config_.target_layers) + "); got " +
                                  std::to_string(keys.size()));
    if (values.size() != keys.size())
      throw std::invalid_argument("values: expected one array per target layer (" + std::to_string(config_.target_layers) + "); got " +
                                  std::to_string(values.size()));
    for (const auto* layers : {&keys, &values})
      for (const input& t : *layers) expect_cols(t, config_.kv_width() / 2, "the target's kv_heads x target_head_dim");
    std::vector<specdec::matrix_view<const float, space>> k, v;
    for (const input& t : keys) k.push_back(view<space>(t));
    for (const input& t : values) v.push_back(view<space>(t));
    (void)this->bind(stream);
    drafter_->add_verified(k, v, first, count);
  }
  void forward(output x, position_ids positions, output features, const mask_arg& mask, std::uintptr_t stream) override {
    const auto& cache = drafter_->self_attention_cache();
    expect_cols(x, hidden(), "the drafter's hidden size");
    expect_same_rows({{x.name, x.rows}, {positions.name, positions.size}});
    expect_mask(mask, x.rows, cache.size());
    expect_room(x.name, x.rows, cache.size(), cache.capacity());
    const auto f = view<space>(features, features.rows, hidden());
    (void)this->bind(stream);
    drafter_->forward(view<space>(x), view<space>(positions), f, mask_in<space>(mask));
  }

 private:
  specdec::blocks::moa::config config_;
  specdec::blocks::moa::weights<space> weights_;
  mutable std::optional<specdec::blocks::moa::drafter<B>> drafter_;  // its cache accessor is not const
};

/// Api's session on backend B over `weights`, made with its constructor's arguments.
template <class Api, class B>
std::unique_ptr<Api> make_session(int device, const weight_map& weights, const arguments_of<Api>& arguments) {
  return std::apply([&](const auto&... a) -> std::unique_ptr<Api> {
    return std::make_unique<session<Api, B>>(device, weights, a...);
  }, arguments);
}

/// EAGLE's fusion (blocks::eagle::fuse) on backend `b`: out `[tokens x E]` = [embed(tokens) ; feature] fc^T + bias.
template <class B>
void eagle_fuse_on(B& b, token_ids tokens, input feature, input embed, input fc_weight, vector_arg<const float> fc_bias, output out) {
  using space = typename B::memory_space;
  // E is the fusion's own width, fc_weight's rows ([E x 2E]); each other argument is checked against it,
  // so that the one that differs is named (the headers measure E by embed's columns).
  const std::int64_t e = fc_weight.rows;
  if (fc_weight.cols != 2 * e)
    throw std::invalid_argument("fc_weight: expected shape [E x 2E]; got (" + std::to_string(fc_weight.rows) + ", " +
                                std::to_string(fc_weight.cols) + ")");
  expect_cols(embed, e, "E: fc_weight's rows");
  check_shape(feature.name, {feature.rows, feature.cols}, {tokens.size, e});
  check_shape(fc_bias.name, {fc_bias.size}, {e});
  specdec::blocks::eagle::weights<space> w;
  w.embed = view<space>(embed);
  w.fc = {view<space>(fc_weight), view<space>(fc_bias)};
  specdec::blocks::eagle::fuse(b, w, view<space>(tokens), view<space>(feature), view<space>(out, tokens.size, embed.cols));
}

}  // namespace specdec_python::block
