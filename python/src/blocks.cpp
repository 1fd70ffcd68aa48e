// SPDX-License-Identifier: Apache-2.0
// specdec's drafter blocks for Python: the pre-norm Llama decoder layer every drafter is made of
// (EAGLE's and Jakiro's layer, MoA's self-attention, MTP's block), with its KV cache, on the host
// backend. Weights are the caller's float32 arrays, viewed in place and kept alive by the layer.
#include "common.hpp"

#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <specdec/blocks/amphista.hpp>
#include <specdec/blocks/eagle.hpp>
#include <specdec/blocks/eagle3.hpp>
#include <specdec/blocks/layers.hpp>
#include <specdec/blocks/moa.hpp>
#include <specdec/blocks/moe.hpp>
#include <specdec/blocks/mtp.hpp>

using namespace specdec_python;

namespace {

namespace blocks = specdec::blocks;

/// The caller's weight arrays by checkpoint name, viewed in place and kept alive.
class weight_table {
 public:
  explicit weight_table(const nb::dict& weights) : weights_(weights) {}
  specdec::matrix_view<const float> matrix(const std::string& name) { return matrix_of<const float>(fetch(name), name.c_str()); }
  specdec::vector_view<const float> vector(const std::string& name) {
    const auto s = span_of<const float>(fetch(name), name.c_str());
    return {s.data(), static_cast<index_t>(s.size())};
  }
  blocks::linear<> linear(const std::string& name) { return {matrix(name + ".weight"), {}}; }
  /// A decoder layer's tensors under `prefix` (its attention's under `attention`, default
  /// prefix + "self_attn."); without `input_norm`, no input_layernorm (EAGLE's layer 0).
  blocks::layer_weights<> layer(const std::string& prefix, std::string attention = "", bool input_norm = true) {
    if (attention.empty()) attention = prefix + "self_attn.";
    blocks::layer_weights<> w;
    if (input_norm) w.input_norm = vector(prefix + "input_layernorm.weight");
    w.post_norm = vector(prefix + "post_attention_layernorm.weight");
    w.attention = {linear(attention + "q_proj"), linear(attention + "k_proj"), linear(attention + "v_proj"), linear(attention + "o_proj")};
    w.mlp = {linear(prefix + "mlp.gate_proj"), linear(prefix + "mlp.up_proj"), linear(prefix + "mlp.down_proj")};
    return w;
  }

 private:
  const array& fetch(const std::string& name) {
    if (!weights_.contains(name.c_str()))
      throw nb::value_error(("weights: expected a float32 array named \"" + name + "\"").c_str());
    held_.push_back(nb::cast<array>(weights_[name.c_str()]));  // viewed by the block: kept alive with it
    return held_.back();
  }
  nb::dict weights_;
  std::vector<array> held_;
};

/// An attention mask argument: None (causal), "none", a bool / uint8 allowed mask or a float32 additive one.
/// The view reads `mask`'s memory, which the caller holds for the call.
blocks::attention_mask<> mask_of(const nb::object& mask) {
  if (mask.is_none()) return {};
  if (nb::isinstance<nb::str>(mask)) {
    if (nb::cast<std::string>(mask) != "none") throw nb::value_error("mask: expected None (causal), \"none\" or an array");
    return blocks::attention_mask<>::none();
  }
  const array a = nb::cast<array>(mask);
  if (a.dtype() == nb::dtype<float>()) return blocks::attention_mask<>::from(matrix_of<const float>(a, "mask"));
  if (a.dtype() != nb::dtype<bool>() && a.dtype() != nb::dtype<std::uint8_t>())
    throw nb::type_error("mask: expected dtype bool, uint8 or float32; got another dtype");
  if (a.device_type() != nb::device::cpu::value || a.ndim() != 2) throw nb::value_error("mask: expected a 2-dimensional CPU array");
  if (a.shape(1) > 1 && a.stride(1) != 1) throw nb::value_error("mask: expected a C-contiguous array");
  if (a.shape(0) > 1 && a.stride(0) != static_cast<std::int64_t>(a.shape(1))) throw nb::value_error("mask: expected a C-contiguous array");
  // bool is one byte, 0 or 1: read as uint8.
  return blocks::attention_mask<>::from(specdec::matrix_view<const std::uint8_t>(static_cast<const std::uint8_t*>(a.data()),
                                                                                static_cast<index_t>(a.shape(0)),
                                                                                static_cast<index_t>(a.shape(1))));
}

/// What every block binding holds: the caller's weights (viewed in place, kept alive) and a host
/// backend of its own (its scratch persists between calls).
class block_binding {
 protected:
  explicit block_binding(const nb::dict& weights) : table_(weights) {}
  weight_table table_;
  specdec::eigen backend_;
};

/// A block binding with one KV cache (its attention's keys and values, after RoPE).
class cached_block : public block_binding {
 public:
  index_t cache_size() const { return cache_->size(); }
  void crop(index_t n) { cache_->crop(n); }
  void keep(index_t prefix, const array& offsets) { cache_->keep(prefix, span_of<const std::int32_t>(offsets, "offsets")); }

 protected:
  explicit cached_block(const nb::dict& weights) : block_binding(weights) {}
  void make_cache(index_t capacity, index_t width) { cache_.emplace(backend_, capacity, width); }
  std::optional<blocks::kv_cache<specdec::eigen>> cache_;
};

/// The cache methods of a binding's class: cache_size, crop and (where the block takes tree drafts) keep.
template <bool Keep, class T>
void bind_cache(nb::class_<T>& c) {
  c.def_prop_ro("cache_size", [](T& t) { return t.cache_size(); });
  c.def("crop", [](T& t, index_t n) { t.crop(n); }, nb::arg("n"));
  if constexpr (Keep)
    c.def("keep", [](T& t, index_t prefix, const array& offsets) { t.keep(prefix, offsets); }, nb::arg("prefix"), nb::arg("offsets"));
}

/// A decoder layer with its own backend (its scratch), weights and KV cache.
class decoder_layer : public cached_block {
 public:
  decoder_layer(const nb::dict& weights, const std::string& prefix, index_t heads, index_t kv_heads, index_t head_dim,
                float rms_eps, double rope_theta, bool input_norm, index_t capacity)
      : cached_block(weights) {
    weights_ = table_.layer(prefix, "", input_norm);
    config_.attention = {weights_.attention.o.out(), heads, kv_heads, head_dim, rope_theta, true, 0};
    config_.intermediate = weights_.mlp.gate.out();
    config_.rms_eps = rms_eps;
    config_.input_norm = input_norm;
    weights_.validate(config_, prefix);
    make_cache(capacity, kv_heads * head_dim);
  }

  /// x += Attn(...), x += MLP(...) in place on `x` `[T x E]` at `positions` `[T]`; `mask`: None (causal),
  /// "none", a bool / uint8 `[T x (cache + T)]` allowed mask, or a float32 additive one.
  void forward(const array& x, const array& positions, const nb::object& mask) {
    const auto rows = matrix_of<float>(x, "x");
    const auto pos = span_of<const std::int64_t>(positions, "positions");
    const blocks::attention_mask<> m = mask_of(mask);
    without_gil([&] {
      blocks::decoder_layer_forward(backend_, config_, weights_, rows,
                                    specdec::vector_view<const std::int64_t>(pos.data(), static_cast<index_t>(pos.size())), &*cache_, m);
    });
  }

  /// The cached keys or values `[size x kv_heads head_dim]` (post-RoPE keys), copied.
  nb::ndarray<nb::numpy, float> cached(bool keys) {
    const auto m = keys ? cache_->keys() : cache_->values();
    std::vector<float> out(static_cast<std::size_t>(m.rows() * m.cols()));
    for (index_t r = 0; r < m.rows(); ++r)
      for (index_t c = 0; c < m.cols(); ++c) out[static_cast<std::size_t>(r * m.cols() + c)] = m(r, c);
    return to_numpy(std::move(out), static_cast<std::size_t>(m.rows()), static_cast<std::size_t>(m.cols()));
  }

 private:
  blocks::layer_config config_;
  blocks::layer_weights<> weights_;
};

/// EAGLE-3's draft block (blocks::eagle3) with its own backend, weights and KV cache.
class eagle3_block : public cached_block {
 public:
  eagle3_block(const nb::dict& weights, index_t heads, index_t kv_heads, index_t head_dim, float rms_eps, double rope_theta,
               index_t capacity)
      : cached_block(weights) {
    const std::string p = "midlayer.";
    weights_ = {table_.matrix("embed_tokens.weight"), table_.linear("fc"), table_.vector(p + "hidden_norm.weight"), {},
                table_.vector("norm.weight"), table_.linear("lm_head")};
    weights_.layer = table_.layer(p);
    const index_t e = weights_.embed.cols();
    config_.layer = {{e, heads, kv_heads, head_dim, rope_theta, true, 0}, weights_.layer.mlp.gate.out(), rms_eps, true};
    config_.target_hidden = weights_.fc.in() / 3;
    config_.vocab = weights_.embed.rows();
    config_.draft_vocab = weights_.lm_head.out();
    SPECDEC_EXPECTS(weights_.fc.in() % 3 == 0, "specdec::blocks", "fc.weight has ", weights_.fc.in(),
                    " columns; expected 3 E_t (three tapped target states)");
    weights_.validate(config_);
    make_cache(capacity, kv_heads * head_dim);
  }

  index_t hidden() const { return config_.layer.attention.hidden; }
  index_t draft_vocab() const { return config_.draft_vocab; }

  void fuse(const array& taps, const array& out) {
    const auto t = matrix_of<const float>(taps, "taps");
    const auto o = matrix_of<float>(out, "out");
    without_gil([&] { blocks::eagle3::fuse(backend_, weights_, t, o); });
  }
  void forward(const array& tokens, const array& hidden, const array& positions, const nb::object& mask, const array& out) {
    const auto t = span_of<const std::int32_t>(tokens, "tokens");
    const auto h = matrix_of<const float>(hidden, "hidden");
    const auto pos = span_of<const std::int64_t>(positions, "positions");
    const auto o = matrix_of<float>(out, "out");
    const blocks::attention_mask<> m = mask_of(mask);
    without_gil([&] {
      blocks::eagle3::forward(backend_, config_, weights_, specdec::vector_view<const std::int32_t>(t.data(), static_cast<index_t>(t.size())), h,
                              specdec::vector_view<const std::int64_t>(pos.data(), static_cast<index_t>(pos.size())), &*cache_, m, o);
    });
  }
  void logits(const array& h2, const array& out) {
    const auto h = matrix_of<const float>(h2, "h2");
    const auto o = matrix_of<float>(out, "out");
    without_gil([&] { blocks::eagle3::logits(backend_, config_, weights_, h, o); });
  }

 private:
  blocks::eagle3::config config_;
  blocks::eagle3::weights<> weights_;
};

/// EAGLE's fusion: out = [embed(tokens) ; feature] fc^T + bias (blocks::eagle::fuse).
void eagle_fuse(const array& tokens, const array& feature, const array& embed, const array& fc_weight, const array& fc_bias,
                const array& out) {
  const auto t = span_of<const std::int32_t>(tokens, "tokens");
  blocks::eagle::weights<> w;
  w.embed = matrix_of<const float>(embed, "embed");
  const auto b = span_of<const float>(fc_bias, "fc_bias");
  w.fc = {matrix_of<const float>(fc_weight, "fc_weight"), specdec::vector_view<const float>(b.data(), static_cast<index_t>(b.size()))};
  const auto f = matrix_of<const float>(feature, "feature");
  const auto o = matrix_of<float>(out, "out");
  expect_shape(out, "out", {static_cast<std::int64_t>(t.size()), w.embed.cols()});
  without_gil([&] {
    blocks::eagle::fuse(host_backend(), w, specdec::vector_view<const std::int32_t>(t.data(), static_cast<index_t>(t.size())), f, o);
  });
}

/// One MTP module (blocks::mtp, DeepSeek-V3's layout with layers.hpp's decoder layer) with its backend,
/// weights and KV cache.
class mtp_module : public cached_block {
 public:
  mtp_module(const nb::dict& weights, const std::string& prefix, index_t heads, index_t kv_heads, index_t head_dim, float rms_eps,
             double rope_theta, bool zero_embedding_at_position_0, index_t capacity)
      : cached_block(weights) {
    const std::string& p = prefix;
    const std::string l = p + "mtp_block.";
    weights_.embed = table_.matrix("embed_tokens.weight");
    weights_.enorm = table_.vector(p + "enorm.weight");
    weights_.hnorm = table_.vector(p + "hnorm.weight");
    weights_.eh_proj = table_.linear(p + "eh_proj");
    weights_.layer = table_.layer(l);
    weights_.head_norm = table_.vector(p + "shared_head.norm.weight");
    weights_.head = table_.linear(p + "shared_head.head");
    const index_t e = weights_.embed.cols();
    config_.layer = {{e, heads, kv_heads, head_dim, rope_theta, true, 0}, weights_.layer.mlp.gate.out(), rms_eps, true};
    config_.vocab = weights_.embed.rows();
    config_.zero_embedding_at_position_0 = zero_embedding_at_position_0;
    weights_.validate(config_);
    make_cache(capacity, kv_heads * head_dim);
  }

  index_t hidden() const { return config_.layer.attention.hidden; }
  index_t vocab() const { return config_.vocab; }

  void forward(const array& tokens, const array& hidden, const array& positions, const nb::object& mask, const array& out,
               const array& projected) {
    const auto t = span_of<const std::int32_t>(tokens, "tokens");
    const auto h = matrix_of<const float>(hidden, "hidden");
    const auto pos = span_of<const std::int64_t>(positions, "positions");
    const auto o = matrix_of<float>(out, "out");
    const blocks::attention_mask<> m = mask_of(mask);
    const specdec::vector_view<const std::int32_t> tv(t.data(), static_cast<index_t>(t.size()));
    const specdec::vector_view<const std::int64_t> pv(pos.data(), static_cast<index_t>(pos.size()));
    std::optional<specdec::matrix_view<float>> x;
    if (projected.ndim() == 2) x = matrix_of<float>(projected, "projected");
    without_gil([&] {
      if (x) blocks::mtp::project(backend_, config_, weights_, tv, h, pv, *x);
      blocks::mtp::forward(backend_, config_, weights_, tv, h, pv, &*cache_, m, o);
    });
  }
  void logits(const array& o, const array& out) {
    const auto h = matrix_of<const float>(o, "o");
    const auto r = matrix_of<float>(out, "out");
    without_gil([&] { blocks::mtp::logits(backend_, config_, weights_, h, r); });
  }

 private:
  blocks::mtp::config config_;
  blocks::mtp::weights<> weights_;
};

/// Jakiro's draft layer (blocks::moe::draft_layer_forward: EAGLE's fusion, attention without the input
/// norm, two SwiGLU experts behind Jakiro's router) with its backend, weights and KV cache.
class jakiro_layer : public cached_block {
 public:
  jakiro_layer(const nb::dict& weights, index_t heads, index_t kv_heads, index_t head_dim, float rms_eps, double rope_theta,
               index_t capacity)
      : cached_block(weights) {
    const std::string l = "layers.0.";
    eagle_.embed = table_.matrix("embed_tokens.weight");
    eagle_.fc = {table_.matrix("fc.weight"), table_.vector("fc.bias")};
    eagle_.layer.post_norm = table_.vector(l + "post_attention_layernorm.weight");
    eagle_.layer.attention = {table_.linear(l + "self_attn.q_proj"), table_.linear(l + "self_attn.k_proj"),
                              table_.linear(l + "self_attn.v_proj"), table_.linear(l + "self_attn.o_proj")};
    const index_t e = eagle_.embed.cols();
    config_ = {{e, heads, kv_heads, head_dim, rope_theta, true, 0}, 0, rms_eps, false};
    eagle_.validate(config_, eagle_.embed.rows(), false);
    moe_.gate = table_.linear(l + "mlp_moe.gate");
    for (int i = 0; i < 2; ++i) {
      const std::string x = l + "mlp_moe.experts." + std::to_string(i) + ".";
      moe_.experts.push_back({table_.linear(x + "gate_proj"), table_.linear(x + "up_proj"), table_.linear(x + "down_proj")});
    }
    moe_config_ = {e, 2, moe_.experts[0].gate.out()};
    moe_.validate(moe_config_, l + "mlp_moe.");
    make_cache(capacity, kv_heads * head_dim);
  }

  index_t hidden() const { return config_.attention.hidden; }

  void forward(const array& tokens, const array& feature, const array& positions, const nb::object& mask, const array& left,
               const array& right) {
    const auto t = span_of<const std::int32_t>(tokens, "tokens");
    const auto f = matrix_of<const float>(feature, "feature");
    const auto pos = span_of<const std::int64_t>(positions, "positions");
    const auto l = matrix_of<float>(left, "left");
    specdec::matrix_view<float> r;
    if (right.ndim() == 2) r = matrix_of<float>(right, "right");
    const blocks::attention_mask<> m = mask_of(mask);
    without_gil([&] {
      blocks::moe::draft_layer_forward(backend_, config_, eagle_, moe_config_, moe_,
                                       specdec::vector_view<const std::int32_t>(t.data(), static_cast<index_t>(t.size())), f,
                                       specdec::vector_view<const std::int64_t>(pos.data(), static_cast<index_t>(pos.size())), &*cache_,
                                       m, l, r);
    });
  }

 private:
  blocks::layer_config config_;
  blocks::eagle::weights<> eagle_;
  blocks::moe::config moe_config_;
  blocks::moe::weights<> moe_;
};

/// Amphista's drafting heads (blocks::amphista: two staged adaptation layers with their KV caches, the
/// head inputs, the auto-embedding block), by the names of specdec's recorded cases.
class amphista_heads : public block_binding {
 public:
  amphista_heads(const nb::dict& weights, index_t heads, index_t kv_heads, index_t head_dim, index_t k_heads, index_t stage1_heads,
                 float rms_eps, double rope_theta, index_t capacity)
      : block_binding(weights) {
    for (auto* stage : {&weights_.stage1, &weights_.stage2}) {
      const std::string p = stage == &weights_.stage1 ? "stage1." : "stage2.";
      stage->fuse = {table_.matrix(p + "fuse.weight"), table_.vector(p + "fuse.bias")};
      stage->layer = table_.layer(p + "layer.");
    }
    weights_.position_embedding = table_.matrix("auto.pos_emb");
    weights_.auto_embedding = table_.layer("auto.layer.", "auto.layer.");
    for (index_t h = 0; h < k_heads; ++h) weights_.heads.push_back(table_.matrix("auto.heads." + std::to_string(h) + ".weight"));
    const index_t e = weights_.position_embedding.cols();
    const index_t intermediate = weights_.stage1.layer.mlp.gate.out();
    config_.stage = {{e, heads, kv_heads, head_dim, rope_theta, true, 0}, intermediate, rms_eps, true};
    config_.auto_embedding = {{e, heads, kv_heads, head_dim, rope_theta, false, 0}, weights_.auto_embedding.mlp.gate.out(), rms_eps, true};
    config_.heads = k_heads;
    config_.stage1_heads = stage1_heads;
    config_.vocab = k_heads > 0 ? weights_.heads[0].rows() : 0;
    weights_.stage1.layer.validate(config_.stage, "stage1.layer.");
    weights_.stage2.layer.validate(config_.stage, "stage2.layer.");
    weights_.auto_embedding.validate(config_.auto_embedding, "auto.layer.");
    for (auto* cache : {&stage1_cache_, &stage2_cache_}) cache->emplace(backend_, capacity, kv_heads * head_dim);
  }

  index_t hidden() const { return config_.stage.attention.hidden; }
  index_t heads() const { return config_.heads; }
  index_t vocab() const { return config_.vocab; }

  /// The stages over `feature` / `embedding` `[T x E]` at `positions`, then the K heads' logits from the last
  /// row; every intermediate into the given outputs (`s1`, `s2` `[T x E]`, `z`, `u`, `o` `[K x E]`, `logits`
  /// `[K x V]`).
  void forward(const array& feature, const array& embedding, const array& positions, const array& s1, const array& s2, const array& z,
               const array& u, const array& o, const array& logits) {
    const auto f = matrix_of<const float>(feature, "feature");
    const auto em = matrix_of<const float>(embedding, "embedding");
    const auto pos = span_of<const std::int64_t>(positions, "positions");
    const auto v1 = matrix_of<float>(s1, "s1"), v2 = matrix_of<float>(s2, "s2"), vz = matrix_of<float>(z, "z");
    const auto vu = matrix_of<float>(u, "u"), vo = matrix_of<float>(o, "o"), vl = matrix_of<float>(logits, "logits");
    const index_t t = f.rows(), e = f.cols();
    if (t < 1) throw nb::value_error("feature: expected at least one row");
    const specdec::vector_view<const std::int64_t> pv(pos.data(), static_cast<index_t>(pos.size()));
    without_gil([&] {
      blocks::amphista::stage_forward(backend_, config_.stage, weights_.stage1, f, em, pv, &*stage1_cache_, v1);
      blocks::amphista::stage_forward(backend_, config_.stage, weights_.stage2, specdec::matrix_view<const float>(v1.data(), t, e), em, pv,
                                      &*stage2_cache_, v2);
      blocks::amphista::head_inputs(backend_, config_, weights_, specdec::matrix_view<const float>(v1.row(t - 1), 1, e),
                                    specdec::matrix_view<const float>(v2.row(t - 1), 1, e), vz);
      blocks::amphista::auto_embedding(backend_, config_, weights_, specdec::matrix_view<const float>(vz.data(), vz.rows(), e), vl, vu, vo);
    });
  }
  index_t cache_size() const { return stage1_cache_->size(); }
  void crop(index_t n) {
    stage1_cache_->crop(n);
    stage2_cache_->crop(n);
  }

 private:
  blocks::amphista::config config_;
  blocks::amphista::weights<> weights_;
  std::optional<blocks::kv_cache<specdec::eigen>> stage1_cache_, stage2_cache_;
};

/// A part's shape: heads, kv_heads, head_dim (and its rope_theta, when it has its own).
using part_shape = std::tuple<index_t, index_t, index_t, double>;

/// MoA's inference drafter (blocks::moa::drafter: the key/value stream of the verified target tokens
/// through Layer Self-Attention and Ekv2E, self-attention over the new tokens, cross-attention into the
/// stream), by the HEBO checkpoint's names.
class moa_drafter : public block_binding {
 public:
  moa_drafter(const nb::dict& weights, const part_shape& lsa, const part_shape& sa, const part_shape& ca, index_t target_layers,
              index_t target_head_dim, float rms_eps, index_t capacity)
      : block_binding(weights) {
    weights_.layer_self_attention = table_.layer("layer_self_attention.");
    weights_.ekv2e = {table_.matrix("Ekv2E.weight"), table_.vector("Ekv2E.bias")};
    weights_.self_attention = table_.layer("self_attention.");
    weights_.cross_attention = table_.layer("cross_attention.");
    const auto config_of = [&](const part_shape& shape, const blocks::layer_weights<>& w) {
      const auto [heads, kv_heads, head_dim, theta] = shape;
      return blocks::layer_config{{w.attention.o.out(), heads, kv_heads, head_dim, theta, true, 0}, w.mlp.gate.out(), rms_eps, true};
    };
    config_ = {config_of(lsa, weights_.layer_self_attention), config_of(sa, weights_.self_attention),
               config_of(ca, weights_.cross_attention), target_layers, target_head_dim};
    drafter_.emplace(backend_, config_, weights_, capacity);
  }

  index_t hidden() const { return config_.hidden(); }
  index_t verified() const { return drafter_->verified(); }
  index_t cache_size() { return drafter_->self_attention_cache().size(); }

  void add_verified(const std::vector<array>& keys, const std::vector<array>& values, index_t first, index_t count) {
    std::vector<specdec::matrix_view<const float>> k, v;
    for (const array& a : keys) k.push_back(matrix_of<const float>(a, "keys"));
    for (const array& a : values) v.push_back(matrix_of<const float>(a, "values"));
    without_gil([&] { drafter_->add_verified(k, v, first, count); });
  }
  void forward(const array& x, const array& positions, const array& features, const nb::object& mask) {
    const auto rows = matrix_of<float>(x, "x");
    const auto pos = span_of<const std::int64_t>(positions, "positions");
    const auto f = matrix_of<float>(features, "features");
    const blocks::attention_mask<> m = mask_of(mask);
    without_gil([&] { drafter_->forward(rows, specdec::vector_view<const std::int64_t>(pos.data(), static_cast<index_t>(pos.size())), f, m); });
  }
  void crop(index_t n) { drafter_->crop(n); }

 private:
  blocks::moa::config config_;
  blocks::moa::weights<> weights_;
  std::optional<blocks::moa::drafter<specdec::eigen>> drafter_;
};

}  // namespace

void bind_blocks(nb::module_& m) {
  nb::class_<moa_drafter> moa_drafter_class(m, "MoaDrafter");
  moa_drafter_class
      .def(nb::init<const nb::dict&, const part_shape&, const part_shape&, const part_shape&, index_t, index_t, float, index_t>(),
           nb::arg("weights"), nb::arg("lsa"), nb::arg("sa"), nb::arg("ca"), nb::arg("target_layers"), nb::arg("target_head_dim"),
           nb::arg("rms_eps"), nb::arg("capacity"))
      .def_prop_ro("hidden", &moa_drafter::hidden)
      .def_prop_ro("verified", &moa_drafter::verified)
      .def("add_verified", &moa_drafter::add_verified, nb::arg("keys"), nb::arg("values"), nb::arg("first"), nb::arg("count"))
      .def("forward", &moa_drafter::forward, nb::arg("x"), nb::arg("positions"), nb::arg("features"), nb::arg("mask").none());
  bind_cache<false>(moa_drafter_class);
  nb::class_<amphista_heads> amphista_heads_class(m, "AmphistaHeads");
  amphista_heads_class
      .def(nb::init<const nb::dict&, index_t, index_t, index_t, index_t, index_t, float, double, index_t>(), nb::arg("weights"),
           nb::arg("heads"), nb::arg("kv_heads"), nb::arg("head_dim"), nb::arg("k_heads"), nb::arg("stage1_heads"), nb::arg("rms_eps"),
           nb::arg("rope_theta"), nb::arg("capacity"))
      .def_prop_ro("hidden", &amphista_heads::hidden)
      .def_prop_ro("heads", &amphista_heads::heads)
      .def_prop_ro("vocab", &amphista_heads::vocab)
      .def("forward", &amphista_heads::forward, nb::arg("feature"), nb::arg("embedding"), nb::arg("positions"), nb::arg("s1"),
           nb::arg("s2"), nb::arg("z"), nb::arg("u"), nb::arg("o"), nb::arg("logits"));
  bind_cache<false>(amphista_heads_class);
  nb::class_<jakiro_layer> jakiro_layer_class(m, "JakiroLayer");
  jakiro_layer_class
      .def(nb::init<const nb::dict&, index_t, index_t, index_t, float, double, index_t>(), nb::arg("weights"), nb::arg("heads"),
           nb::arg("kv_heads"), nb::arg("head_dim"), nb::arg("rms_eps"), nb::arg("rope_theta"), nb::arg("capacity"))
      .def_prop_ro("hidden", &jakiro_layer::hidden)
      .def("forward", &jakiro_layer::forward, nb::arg("tokens"), nb::arg("feature"), nb::arg("positions"), nb::arg("mask").none(),
           nb::arg("left"), nb::arg("right"));
  bind_cache<true>(jakiro_layer_class);
  nb::class_<mtp_module> mtp_module_class(m, "MtpModule");
  mtp_module_class
      .def(nb::init<const nb::dict&, const std::string&, index_t, index_t, index_t, float, double, bool, index_t>(), nb::arg("weights"),
           nb::arg("prefix"), nb::arg("heads"), nb::arg("kv_heads"), nb::arg("head_dim"), nb::arg("rms_eps"), nb::arg("rope_theta"),
           nb::arg("zero_embedding_at_position_0"), nb::arg("capacity"))
      .def_prop_ro("hidden", &mtp_module::hidden)
      .def_prop_ro("vocab", &mtp_module::vocab)
      .def("forward", &mtp_module::forward, nb::arg("tokens"), nb::arg("hidden"), nb::arg("positions"), nb::arg("mask").none(),
           nb::arg("out"), nb::arg("projected"))
      .def("logits", &mtp_module::logits, nb::arg("o"), nb::arg("out"));
  bind_cache<false>(mtp_module_class);
  m.def("eagle_fuse", &eagle_fuse, nb::arg("tokens"), nb::arg("feature"), nb::arg("embed"), nb::arg("fc_weight"), nb::arg("fc_bias"),
        nb::arg("out"));
  nb::class_<decoder_layer> decoder_layer_class(m, "DecoderLayer");
  decoder_layer_class
      .def(nb::init<const nb::dict&, const std::string&, index_t, index_t, index_t, float, double, bool, index_t>(), nb::arg("weights"),
           nb::arg("prefix"), nb::arg("heads"), nb::arg("kv_heads"), nb::arg("head_dim"), nb::arg("rms_eps"), nb::arg("rope_theta"),
           nb::arg("input_norm"), nb::arg("capacity"))
      .def("forward", &decoder_layer::forward, nb::arg("x"), nb::arg("positions"), nb::arg("mask").none())
      .def("cached", &decoder_layer::cached, nb::arg("keys"));
  bind_cache<true>(decoder_layer_class);
  nb::class_<eagle3_block> eagle3_block_class(m, "Eagle3Block");
  eagle3_block_class
      .def(nb::init<const nb::dict&, index_t, index_t, index_t, float, double, index_t>(), nb::arg("weights"), nb::arg("heads"),
           nb::arg("kv_heads"), nb::arg("head_dim"), nb::arg("rms_eps"), nb::arg("rope_theta"), nb::arg("capacity"))
      .def_prop_ro("hidden", &eagle3_block::hidden)
      .def_prop_ro("draft_vocab", &eagle3_block::draft_vocab)
      .def("fuse", &eagle3_block::fuse, nb::arg("taps"), nb::arg("out"))
      .def("forward", &eagle3_block::forward, nb::arg("tokens"), nb::arg("hidden"), nb::arg("positions"), nb::arg("mask").none(),
           nb::arg("out"))
      .def("logits", &eagle3_block::logits, nb::arg("h2"), nb::arg("out"));
  bind_cache<true>(eagle3_block_class);
}
