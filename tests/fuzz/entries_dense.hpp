// SPDX-License-Identifier: Apache-2.0
// Entry points of the fuzz_views / fuzz_sizes list (entry_points.hpp): the backends' row reductions
// and samplers, their dense primitives (GEMM, RMSNorm, RoPE, SwiGLU, row additions, attention), and
// the drafter blocks' sub-layers built on them, whose weights are views a caller lays out too.
#pragma once

#include <limits>

#include <specdec/blocks/eagle.hpp>
#include <specdec/blocks/layers.hpp>

#include "entry_plan.hpp"

namespace fuzz::entry {

struct row_max {
  static constexpr const char* name = "row_max";
  static void plan(call_plan& p) {
    add<float>(p, "x", 2, 3, 16, role::in, logits(p.input(), 48));
    add<float>(p, "max", 1, 3, 1, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    b.row_max(c.m<const float>(0), c.v<float>(1));
    return {};
  }
};

struct row_argmax {
  static constexpr const char* name = "row_argmax (index, value)";
  static void plan(call_plan& p) {
    add<float>(p, "x", 2, 3, 16, role::in, logits(p.input(), 48));
    add<std::int32_t>(p, "index", 1, 3, 1, role::out, {});
    add<float>(p, "value", 1, 3, 1, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    b.row_argmax(c.m<const float>(0), c.v<std::int32_t>(1), c.v<float>(2));
    return {};
  }
};

struct row_topk_logsumexp {
  static constexpr const char* name = "row_topk_logsumexp";
  static void plan(call_plan& p) {
    add<float>(p, "x", 2, 3, 16, role::in, logits(p.input(), 48));
    add<float>(p, "values", 2, 3, 4, role::out, {});
    add<std::int32_t>(p, "indices", 2, 3, 4, role::out, {});
    add<float>(p, "lse", 1, 3, 1, role::out, {});
    p.size(4);
  }
  template <class B>
  static digest call(B& b, const context& c) {
    b.row_topk_logsumexp(c.m<const float>(0), c.sizes[0], 0.75f, c.m<float>(1), c.m<std::int32_t>(2), c.v<float>(3));
    return {};
  }
};

struct row_logsumexp {
  static constexpr const char* name = "row_logsumexp";
  static void plan(call_plan& p) {
    add<float>(p, "x", 2, 3, 16, role::in, logits(p.input(), 48));
    add<float>(p, "lse", 1, 3, 1, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    b.row_logsumexp(c.m<const float>(0), 1.5f, c.v<float>(1));
    return {};
  }
};

struct row_log_softmax {
  static constexpr const char* name = "row_log_softmax";
  static void plan(call_plan& p) {
    add<float>(p, "x", 2, 3, 16, role::in, logits(p.input(), 48));
    add<float>(p, "out", 2, 3, 16, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    b.row_log_softmax(c.m<const float>(0), 1.0f, c.m<float>(1));
    return {};
  }
};

struct row_sample {
  static constexpr const char* name = "row_sample";
  static void plan(call_plan& p) {
    add<float>(p, "probs", 2, 3, 8, role::in, distributions(p.input(), 3, 8));
    add<float>(p, "uniforms", 1, 3, 1, role::in, {0.05, 0.5, 0.95});
    add<std::int32_t>(p, "tokens", 1, 3, 1, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    b.row_sample(c.m<const float>(0), c.v<const float>(1), c.v<std::int32_t>(2));
    return {};
  }
};

struct row_sample_residual {
  static constexpr const char* name = "row_sample_residual";
  static void plan(call_plan& p) {
    add<float>(p, "p", 2, 3, 8, role::in, distributions(p.input(), 3, 8));
    add<float>(p, "q", 2, 3, 8, role::in, distributions(p.input(), 3, 8));
    add<float>(p, "uniforms", 1, 3, 1, role::in, {0.25, 0.5, 0.75});
    add<std::int32_t>(p, "tokens", 1, 3, 1, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    b.row_sample_residual(c.m<const float>(0), c.m<const float>(1), c.v<const float>(2), c.v<std::int32_t>(3));
    return {};
  }
};

struct gather_elements {
  static constexpr const char* name = "gather_elements";
  static void plan(call_plan& p) {
    add<float>(p, "x", 2, 3, 8, role::in, logits(p.input(), 24));
    add<std::int32_t>(p, "column_ids", 2, 3, 2, role::in, ints(p.input(), 6, 0, 7));
    add<float>(p, "out", 2, 3, 2, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    b.gather_elements(c.m<const float>(0), c.m<const std::int32_t>(1), c.m<float>(2));
    return {};
  }
};

struct gemm {
  static constexpr const char* name = "gemm";
  static void plan(call_plan& p) {
    add<float>(p, "a", 2, 3, 4, role::in, logits(p.input(), 12));
    add<float>(p, "b", 2, 5, 4, role::in, logits(p.input(), 20));
    add<float>(p, "c", 2, 3, 5, role::inout, logits(p.input(), 15));
  }
  template <class B>
  static digest call(B& b, const context& c) {
    b.gemm(c.m<const float>(0), specdec::transpose::no, c.m<const float>(1), specdec::transpose::yes, c.m<float>(2), 0.5f, 0.25f);
    return {};
  }
};

struct rms_norm {
  static constexpr const char* name = "rms_norm";
  static void plan(call_plan& p) {
    add<float>(p, "x", 2, 3, 8, role::in, logits(p.input(), 24));
    add<float>(p, "weight", 1, 8, 1, role::in, logits(p.input(), 8));
    add<float>(p, "out", 2, 3, 8, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    b.rms_norm(c.m<const float>(0), c.v<const float>(1), 1e-5f, c.m<float>(2));
    return {};
  }
};

struct rope {
  static constexpr const char* name = "rope";
  static void plan(call_plan& p) {
    add<float>(p, "x", 2, 3, 8, role::inout, logits(p.input(), 24));
    add<std::int64_t>(p, "positions", 1, 3, 1, role::in, {0, 7, 2});
    p.size(4);  // head_dim
  }
  template <class B>
  static digest call(B& b, const context& c) {
    b.rope(c.m<float>(0), c.v<const std::int64_t>(1), c.sizes[0], 10000.0);
    return {};
  }
};

struct silu_mul {
  static constexpr const char* name = "silu_mul";
  static void plan(call_plan& p) {
    add<float>(p, "gate", 2, 3, 8, role::in, logits(p.input(), 24));
    add<float>(p, "up", 2, 3, 8, role::in, logits(p.input(), 24));
    add<float>(p, "out", 2, 3, 8, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    b.silu_mul(c.m<const float>(0), c.m<const float>(1), c.m<float>(2));
    return {};
  }
};

struct add_rows_scaled {
  static constexpr const char* name = "add_rows (residual, per-row scale)";
  static void plan(call_plan& p) {
    add<float>(p, "y", 2, 3, 8, role::inout, logits(p.input(), 24));
    add<float>(p, "x", 2, 3, 8, role::in, logits(p.input(), 24));
    add<float>(p, "scale", 1, 3, 1, role::in, {0.5, -1.0, 2.0});
    add<float>(p, "bias", 2, 1, 8, role::in, logits(p.input(), 8));
  }
  template <class B>
  static digest call(B& b, const context& c) {
    b.add_rows(c.m<float>(0), c.m<const float>(1), c.v<const float>(2));
    b.add_rows(c.m<float>(0), c.m<const float>(3));
    return {};
  }
};

/// q [3 x 2 heads x 4], k / v [4 x 1 kv head x 4]; mask rows keep key 0 so no query is fully masked.
inline std::vector<double> allowed_rows(fuzz::input& in, index_t rows, index_t keys, double yes, double no) {
  std::vector<double> m(static_cast<std::size_t>(rows * keys));
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < keys; ++j) m[static_cast<std::size_t>(i * keys + j)] = j == 0 || in.flag() ? yes : no;
  return m;
}

template <bool Additive>
struct attention {
  static constexpr const char* name = Additive ? "attention (additive mask)" : "attention (boolean mask)";
  static void plan(call_plan& p) {
    add<float>(p, "q", 2, 3, 8, role::in, logits(p.input(), 24));
    add<float>(p, "k", 2, 4, 4, role::in, logits(p.input(), 16));
    add<float>(p, "v", 2, 4, 4, role::in, logits(p.input(), 16));
    if constexpr (Additive)
      add<float>(p, "additive_mask", 2, 3, 4, role::in, allowed_rows(p.input(), 3, 4, 0.0, -std::numeric_limits<double>::infinity()));
    else
      add<std::uint8_t>(p, "allowed", 2, 3, 4, role::in, allowed_rows(p.input(), 3, 4, 1.0, 0.0));
    add<float>(p, "out", 2, 3, 8, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    const specdec::attention_heads heads{2, 1, 4, 0.5f};
    if constexpr (Additive) b.attention(c.m<const float>(0), c.m<const float>(1), c.m<const float>(2), heads, c.m<const float>(3), c.m<float>(4));
    else b.attention(c.m<const float>(0), c.m<const float>(1), c.m<const float>(2), heads, c.m<const std::uint8_t>(3), c.m<float>(4));
    return {};
  }
};

/// Weights scaled down so that scores stay far from overflow (the contents are not what is fuzzed).
inline std::vector<double> weights(fuzz::input& in, index_t n) {
  std::vector<double> w = logits(in, n);
  for (double& x : w) x /= 8.0;
  return w;
}

struct attention_forward {
  static constexpr const char* name = "blocks::attention_forward";
  static void plan(call_plan& p) {
    add<float>(p, "w.q", 2, 8, 8, role::in, weights(p.input(), 64));
    add<float>(p, "w.k", 2, 4, 8, role::in, weights(p.input(), 32));
    add<float>(p, "w.v", 2, 4, 8, role::in, weights(p.input(), 32));
    add<float>(p, "w.o", 2, 8, 8, role::in, weights(p.input(), 64));
    add<float>(p, "query_in", 2, 3, 8, role::in, logits(p.input(), 24));
    add<std::int64_t>(p, "positions", 1, 3, 1, role::in, {4, 5, 6});
    add<std::uint8_t>(p, "mask.allowed", 2, 3, 3, role::in, {1, 0, 0, 1, 1, 0, 1, 0, 1});
    add<float>(p, "out", 2, 3, 8, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::blocks::attention_config config;
    config.hidden = 8;
    config.heads = 2;
    config.kv_heads = 1;
    config.head_dim = 4;
    specdec::blocks::attention_weights<specdec::host_space> w;
    w.q.weight = c.m<const float>(0);
    w.k.weight = c.m<const float>(1);
    w.v.weight = c.m<const float>(2);
    w.o.weight = c.m<const float>(3);
    const auto mask = specdec::blocks::attention_mask<specdec::host_space>::from(c.m<const std::uint8_t>(6));
    specdec::blocks::attention_forward(b, config, w, c.m<const float>(4), c.v<const std::int64_t>(5), c.m<const float>(4),
                                       c.v<const std::int64_t>(5), nullptr, mask, c.m<float>(7));
    return {};
  }
};

struct mlp_forward {
  static constexpr const char* name = "blocks::mlp_forward";
  static void plan(call_plan& p) {
    add<float>(p, "w.gate", 2, 6, 8, role::in, weights(p.input(), 48));
    add<float>(p, "w.up", 2, 6, 8, role::in, weights(p.input(), 48));
    add<float>(p, "w.down", 2, 8, 6, role::in, weights(p.input(), 48));
    add<float>(p, "x", 2, 3, 8, role::in, logits(p.input(), 24));
    add<float>(p, "y", 2, 3, 8, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::blocks::mlp_weights<specdec::host_space> w;
    w.gate.weight = c.m<const float>(0);
    w.up.weight = c.m<const float>(1);
    w.down.weight = c.m<const float>(2);
    specdec::blocks::mlp_forward(b, w, c.m<const float>(3), c.m<float>(4));
    return {};
  }
};

struct eagle_fuse {
  static constexpr const char* name = "blocks::eagle::fuse";
  static void plan(call_plan& p) {
    add<float>(p, "w.embed", 2, 8, 4, role::in, weights(p.input(), 32));
    add<float>(p, "w.fc.weight", 2, 4, 8, role::in, weights(p.input(), 32));
    add<float>(p, "w.fc.bias", 1, 4, 1, role::in, weights(p.input(), 4));
    add<std::int32_t>(p, "tokens", 1, 3, 1, role::in, ints(p.input(), 3, 0, 7));
    add<float>(p, "feature", 2, 3, 4, role::in, logits(p.input(), 12));
    add<float>(p, "out", 2, 3, 4, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::blocks::eagle::weights<specdec::host_space> w;
    w.embed = c.m<const float>(0);
    w.fc.weight = c.m<const float>(1);
    w.fc.bias = c.v<const float>(2);
    specdec::blocks::eagle::fuse(b, w, c.v<const std::int32_t>(3), c.m<const float>(4), c.m<float>(5));
    return {};
  }
};

}  // namespace fuzz::entry
