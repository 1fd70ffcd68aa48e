// SPDX-License-Identifier: Apache-2.0
// specdec's drafter blocks for Python: the pre-norm Llama decoder layer every drafter is made of
// (EAGLE's and Jakiro's layer, MoA's self-attention, MTP's block), with its KV cache, on the host
// backend. Weights are the caller's float32 arrays, viewed in place and kept alive by the layer.
#include "common.hpp"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <specdec/blocks/eagle.hpp>
#include <specdec/blocks/layers.hpp>

using namespace specdec_python;

namespace {

namespace blocks = specdec::blocks;

/// A decoder layer with its own backend (its scratch), weights and KV cache.
class decoder_layer {
 public:
  decoder_layer(const nb::dict& weights, const std::string& prefix, index_t heads, index_t kv_heads, index_t head_dim,
                float rms_eps, double rope_theta, bool input_norm, index_t capacity) {
    const auto vector = [&](const std::string& name) -> specdec::vector_view<const float> {
      const array& a = fetch(weights, prefix + name);
      const auto s = span_of<const float>(a, (prefix + name).c_str());
      return {s.data(), static_cast<index_t>(s.size())};
    };
    const auto matrix = [&](const std::string& name) {
      return blocks::linear<>{matrix_of<const float>(fetch(weights, prefix + name), (prefix + name).c_str()), {}};
    };
    weights_.post_norm = vector("post_attention_layernorm.weight");
    if (input_norm) weights_.input_norm = vector("input_layernorm.weight");
    weights_.attention = {matrix("self_attn.q_proj.weight"), matrix("self_attn.k_proj.weight"), matrix("self_attn.v_proj.weight"),
                          matrix("self_attn.o_proj.weight")};
    weights_.mlp = {matrix("mlp.gate_proj.weight"), matrix("mlp.up_proj.weight"), matrix("mlp.down_proj.weight")};
    config_.attention = {weights_.attention.o.out(), heads, kv_heads, head_dim, rope_theta, true, 0};
    config_.intermediate = weights_.mlp.gate.out();
    config_.rms_eps = rms_eps;
    config_.input_norm = input_norm;
    weights_.validate(config_, prefix);
    cache_.emplace(backend_, capacity, kv_heads * head_dim);
  }

  /// x += Attn(...), x += MLP(...) in place on `x` `[T x E]` at `positions` `[T]`; `mask`: None (causal),
  /// "none", a bool / uint8 `[T x (cache + T)]` allowed mask, or a float32 additive one.
  void forward(const array& x, const array& positions, const nb::object& mask) {
    const auto rows = matrix_of<float>(x, "x");
    const auto pos = span_of<const std::int64_t>(positions, "positions");
    blocks::attention_mask<> m;
    if (nb::isinstance<nb::str>(mask)) {
      if (nb::cast<std::string>(mask) != "none") throw nb::value_error("mask: expected None (causal), \"none\" or an array");
      m = blocks::attention_mask<>::none();
    } else if (!mask.is_none()) {
      const array a = nb::cast<array>(mask);
      if (a.dtype() == nb::dtype<float>()) m = blocks::attention_mask<>::from(matrix_of<const float>(a, "mask"));
      else if (a.dtype() == nb::dtype<bool>() || a.dtype() == nb::dtype<std::uint8_t>()) {
        const std::uint8_t* p = checked<const std::uint8_t>(a.dtype() == nb::dtype<bool>() ? retyped(a) : a, "mask", 2);
        m = blocks::attention_mask<>::from(specdec::matrix_view<const std::uint8_t>(p, static_cast<index_t>(a.shape(0)),
                                                                                    static_cast<index_t>(a.shape(1))));
      } else {
        throw nb::type_error("mask: expected dtype bool, uint8 or float32; got another dtype");
      }
    }
    without_gil([&] {
      blocks::decoder_layer_forward(backend_, config_, weights_, rows,
                                    specdec::vector_view<const std::int64_t>(pos.data(), static_cast<index_t>(pos.size())), &*cache_, m);
    });
  }

  index_t cache_size() const { return cache_->size(); }
  void crop(index_t n) { cache_->crop(n); }
  void keep(index_t prefix, const array& offsets) { cache_->keep(prefix, span_of<const std::int32_t>(offsets, "offsets")); }
  /// The cached keys or values `[size x kv_heads head_dim]` (post-RoPE keys), copied.
  nb::ndarray<nb::numpy, float> cached(bool keys) {
    const auto m = keys ? cache_->keys() : cache_->values();
    std::vector<float> out(static_cast<std::size_t>(m.rows() * m.cols()));
    for (index_t r = 0; r < m.rows(); ++r)
      for (index_t c = 0; c < m.cols(); ++c) out[static_cast<std::size_t>(r * m.cols() + c)] = m(r, c);
    return to_numpy(std::move(out), static_cast<std::size_t>(m.rows()), static_cast<std::size_t>(m.cols()));
  }

 private:
  const array& fetch(const nb::dict& weights, const std::string& name) {
    if (!weights.contains(name.c_str()))
      throw nb::value_error(("weights: expected a float32 array named \"" + name + "\"").c_str());
    held_.push_back(nb::cast<array>(weights[name.c_str()]));  // the layer views it: keep it alive
    return held_.back();
  }
  /// A bool array seen as uint8 (one byte each, 0 / 1).
  static array retyped(const array& a) {
    const std::size_t shape[2] = {a.shape(0), a.shape(1)};
    const std::int64_t strides[2] = {a.stride(0), a.stride(1)};
    return array(nb::ndarray<>(a.data(), 2, shape, nb::handle(), strides, nb::dtype<std::uint8_t>(), a.device_type(), a.device_id()));
  }

  specdec::eigen backend_;
  blocks::layer_config config_;
  blocks::layer_weights<> weights_;
  std::optional<blocks::kv_cache<specdec::eigen>> cache_;
  std::vector<array> held_;
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

}  // namespace

void bind_blocks(nb::module_& m) {
  m.def("eagle_fuse", &eagle_fuse, nb::arg("tokens"), nb::arg("feature"), nb::arg("embed"), nb::arg("fc_weight"), nb::arg("fc_bias"),
        nb::arg("out"));
  nb::class_<decoder_layer>(m, "DecoderLayer")
      .def(nb::init<const nb::dict&, const std::string&, index_t, index_t, index_t, float, double, bool, index_t>(), nb::arg("weights"),
           nb::arg("prefix"), nb::arg("heads"), nb::arg("kv_heads"), nb::arg("head_dim"), nb::arg("rms_eps"), nb::arg("rope_theta"),
           nb::arg("input_norm"), nb::arg("capacity"))
      .def("forward", &decoder_layer::forward, nb::arg("x"), nb::arg("positions"), nb::arg("mask").none())
      .def_prop_ro("cache_size", &decoder_layer::cache_size)
      .def("crop", &decoder_layer::crop, nb::arg("n"))
      .def("keep", &decoder_layer::keep, nb::arg("prefix"), nb::arg("offsets"))
      .def("cached", &decoder_layer::cached, nb::arg("keys"));
}
