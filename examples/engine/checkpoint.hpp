// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief A trained drafter's checkpoint, checked against the layout its example loads: every expected
/// tensor present with its exact shape and dtype, and nothing else. A checkpoint for another model
/// width, another head count or another drafter fails here with the tensor named, not later as a
/// wrong answer.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include <specdec/blocks/layers.hpp>
#include <specdec/core/error.hpp>
#include <specdec/io/safetensors.hpp>

namespace engine {

struct expected_tensor {
  std::string name;
  std::vector<specdec::index_t> shape;
  std::string dtype = "F16";  ///< the shipped weights are fp16; index tables I64
};

/// The tensors of one decoder layer of shape `c` under `prefix` (Hugging Face Llama names, as
/// io::safetensors::layer reads them): the input norm when `c` has one, the post-attention norm, the
/// q/k/v/o projections without biases and, `with_mlp`, the SwiGLU MLP.
inline std::vector<expected_tensor> layer_layout(const std::string& prefix, const specdec::blocks::layer_config& c,
                                                 bool with_mlp = true) {
  const auto& a = c.attention;
  const specdec::index_t e = a.hidden, in = a.input_width(), q = a.heads * a.head_dim, kv = a.kv_heads * a.head_dim,
                        ff = c.intermediate;
  std::vector<expected_tensor> out;
  if (c.input_norm) out.push_back({prefix + "input_layernorm.weight", {e}});
  out.push_back({prefix + "post_attention_layernorm.weight", {e}});
  out.push_back({prefix + "self_attn.q_proj.weight", {q, in}});
  out.push_back({prefix + "self_attn.k_proj.weight", {kv, in}});
  out.push_back({prefix + "self_attn.v_proj.weight", {kv, in}});
  out.push_back({prefix + "self_attn.o_proj.weight", {e, q}});
  if (with_mlp) {
    out.push_back({prefix + "mlp.gate_proj.weight", {ff, e}});
    out.push_back({prefix + "mlp.up_proj.weight", {ff, e}});
    out.push_back({prefix + "mlp.down_proj.weight", {e, ff}});
  }
  return out;
}

/// Where the examples look for their trained weights unless given --weights (examples/weights in
/// the source tree, set by CMake).
inline std::string default_weights(const std::string& file) {
#ifdef SPECDEC_EXAMPLE_WEIGHTS_DIR
  return std::string(SPECDEC_EXAMPLE_WEIGHTS_DIR) + "/" + file;
#else
  return file;
#endif
}

/// Checks that `file` (read from `path`) holds exactly `expected`, names, shapes and dtypes.
/// \throws specdec::invalid_argument naming the file and the first tensor that is missing, extra, or
/// of another shape or dtype.
inline void check_layout(const specdec::io::safetensors& file, const std::string& path, const std::vector<expected_tensor>& expected) {
  constexpr const char* where = "engine::check_layout";
  const auto shape_text = [](const std::vector<specdec::index_t>& s) {
    std::string t = "[";
    for (std::size_t i = 0; i < s.size(); ++i) t += (i ? " x " : "") + std::to_string(s[i]);
    return t + "]";
  };
  for (const auto& e : expected) {
    SPECDEC_EXPECTS(file.contains(e.name), where, path, ": no tensor '", e.name, "'; expected ", shape_text(e.shape), " ", e.dtype);
    const auto& t = file.at(e.name);
    SPECDEC_EXPECTS(t.shape == e.shape && t.dtype == e.dtype, where, path, ": tensor '", e.name, "' is ", shape_text(t.shape), " ",
                    t.dtype, "; expected ", shape_text(e.shape), " ", e.dtype);
  }
  for (const auto& name : file.names())
    SPECDEC_EXPECTS(std::any_of(expected.begin(), expected.end(), [&](const expected_tensor& e) { return e.name == name; }), where,
                    path, ": unexpected tensor '", name, "' (a checkpoint of another layout?)");
}

/// Opens `path` and check_layout()s it. \throws as check_layout, and whatever safetensors::open throws
/// on an unreadable or malformed file.
inline specdec::io::safetensors load_checkpoint(const std::string& path, const std::vector<expected_tensor>& expected) {
  auto file = specdec::io::safetensors::open(path);
  check_layout(file, path, expected);
  return file;
}

}  // namespace engine
