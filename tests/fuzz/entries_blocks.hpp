// SPDX-License-Identifier: Apache-2.0
// Entry points of the fuzz_views / fuzz_sizes list (entry_points.hpp): the drafter blocks' model-level
// forwards (decoder layer, EAGLE, EAGLE-3, MTP, DFlash, Jakiro's MoE, MoA, Amphista) and the KV cache's
// compaction. Every weight is a view a caller lays out (from a checkpoint, a pool, an engine's
// tensors), so each is an argument of the plan; the shapes are the smallest that keep every path
// (grouped-query heads, RoPE, two experts, two target layers) in play.
#pragma once

#include <specdec/blocks/amphista.hpp>
#include <specdec/blocks/dflash.hpp>
#include <specdec/blocks/eagle.hpp>
#include <specdec/blocks/eagle3.hpp>
#include <specdec/blocks/layers.hpp>
#include <specdec/blocks/moa.hpp>
#include <specdec/blocks/moe.hpp>
#include <specdec/blocks/mtp.hpp>

#include "entries_dense.hpp"
#include "entry_plan.hpp"

namespace fuzz::entry {

namespace blocks = specdec::blocks;

/// A float output's bits, so that a digest compares outputs held in the library's own buffers.
template <class B>
void append_bits(digest& d, B& b, vector_view<const float, typename B::memory_space> v) {
  for (const float x : b.download(v)) {
    std::uint32_t u;
    std::memcpy(&u, &x, 4);
    d.push_back(u);
  }
}

/// A packed `[rows x cols]` matrix of the library's (a cache's keys) as one vector.
template <class T, class Space>
vector_view<const T, Space> whole(matrix_view<const T, Space> m) {
  return {m.data(), m.rows() * m.cols()};
}

/// A decoder layer's weights as arguments: norms, q / k / v / o, the SwiGLU MLP.
struct layer_args {
  int input_norm = -1, post_norm, q, k, v, o, gate, up, down;
};
/// `in` the width q / k / v project from, E the layer's width, heads x head_dim and kv_heads x head_dim
/// the projections' rows, `inter` the MLP's.
inline layer_args add_layer(call_plan& p, index_t in, index_t e, index_t q_rows, index_t kv_rows, index_t inter, bool input_norm) {
  layer_args a;
  if (input_norm) a.input_norm = add<float>(p, "layer.input_norm", 1, e, 1, role::in, weights(p.input(), e));
  a.post_norm = add<float>(p, "layer.post_norm", 1, e, 1, role::in, weights(p.input(), e));
  a.q = add<float>(p, "layer.q", 2, q_rows, in, role::in, weights(p.input(), q_rows * in));
  a.k = add<float>(p, "layer.k", 2, kv_rows, in, role::in, weights(p.input(), kv_rows * in));
  a.v = add<float>(p, "layer.v", 2, kv_rows, in, role::in, weights(p.input(), kv_rows * in));
  a.o = add<float>(p, "layer.o", 2, e, q_rows, role::in, weights(p.input(), e * q_rows));
  a.gate = add<float>(p, "layer.gate", 2, inter, e, role::in, weights(p.input(), inter * e));
  a.up = add<float>(p, "layer.up", 2, inter, e, role::in, weights(p.input(), inter * e));
  a.down = add<float>(p, "layer.down", 2, e, inter, role::in, weights(p.input(), e * inter));
  return a;
}
inline blocks::layer_weights<specdec::host_space> layer_of(const context& c, const layer_args& a) {
  blocks::layer_weights<specdec::host_space> w;
  if (a.input_norm >= 0) w.input_norm = c.v<const float>(a.input_norm);
  w.post_norm = c.v<const float>(a.post_norm);
  w.attention.q.weight = c.m<const float>(a.q);
  w.attention.k.weight = c.m<const float>(a.k);
  w.attention.v.weight = c.m<const float>(a.v);
  w.attention.o.weight = c.m<const float>(a.o);
  w.mlp.gate.weight = c.m<const float>(a.gate);
  w.mlp.up.weight = c.m<const float>(a.up);
  w.mlp.down.weight = c.m<const float>(a.down);
  return w;
}

/// E = 8, two query heads over one kv head of 4, an MLP of 6 (the entries' common layer).
inline blocks::layer_config layer_config_of(index_t input = 0, bool input_norm = true, bool rope = true) {
  blocks::layer_config c;
  c.attention.hidden = 8;
  c.attention.heads = 2;
  c.attention.kv_heads = 1;
  c.attention.head_dim = 4;
  c.attention.input = input;
  c.attention.rope = rope;
  c.intermediate = 6;
  c.input_norm = input_norm;
  return c;
}
inline layer_args add_common_layer(call_plan& p, index_t in = 8, bool input_norm = true) {
  return add_layer(p, in, 8, 8, 4, 6, input_norm);
}

/// The layer with a KV cache: its rows are appended (then digested), and a failed call leaves the
/// cache as it was.
struct decoder_layer {
  static constexpr const char* name = "blocks::decoder_layer_forward";
  static void plan(call_plan& p) {
    add_common_layer(p);
    add<float>(p, "x", 2, 3, 8, role::inout, logits(p.input(), 24));
    add<std::int64_t>(p, "positions", 1, 3, 1, role::in, {0, 1, 2});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    blocks::kv_cache<B> cache(b, 8, 4);
    digest d;
    try {
      blocks::decoder_layer_forward(b, layer_config_of(), layer_of(c, layer_args{0, 1, 2, 3, 4, 5, 6, 7, 8}), c.m<float>(9),
                                    c.v<const std::int64_t>(10), &cache);
    } catch (const specdec::invalid_argument&) {
      fuzz::require(cache.size() == 0, "a refused call left rows in the cache");
      throw;
    }
    append_bits(d, b, whole(cache.keys()));
    return d;
  }
};

/// EAGLE's weights (arguments 0-10): the embedding, fc with its bias, layer 0 without an input norm.
inline void add_eagle_weights(call_plan& p) {
    add<float>(p, "w.embed", 2, 8, 8, role::in, weights(p.input(), 64));
    add<float>(p, "w.fc.weight", 2, 8, 16, role::in, weights(p.input(), 128));
    add<float>(p, "w.fc.bias", 1, 8, 1, role::in, weights(p.input(), 8));
    add_common_layer(p, 8, false);
}
inline blocks::eagle::weights<specdec::host_space> eagle_weights_of(const context& c) {
  blocks::eagle::weights<specdec::host_space> w;
  w.embed = c.m<const float>(0);
  w.fc.weight = c.m<const float>(1);
  w.fc.bias = c.v<const float>(2);
  w.layer = layer_of(c, layer_args{-1, 3, 4, 5, 6, 7, 8, 9, 10});
  return w;
}

struct eagle_forward {
  static constexpr const char* name = "blocks::eagle::forward";
  static void plan(call_plan& p) {
    add_eagle_weights(p);
    add<std::int32_t>(p, "tokens", 1, 3, 1, role::in, ints(p.input(), 3, 0, 7));
    add<float>(p, "feature", 2, 3, 8, role::in, logits(p.input(), 24));
    add<std::int64_t>(p, "positions", 1, 3, 1, role::in, {5, 6, 6});
    add<std::uint8_t>(p, "mask.allowed", 2, 3, 3, role::in, {1, 0, 0, 1, 1, 0, 1, 0, 1});
    add<float>(p, "out", 2, 3, 8, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    const auto w = eagle_weights_of(c);
    blocks::eagle::forward(b, layer_config_of(0, false), w, c.v<const std::int32_t>(11), c.m<const float>(12),
                           c.v<const std::int64_t>(13), nullptr, blocks::attention_mask<specdec::host_space>::from(c.m<const std::uint8_t>(14)),
                           c.m<float>(15));
    return {};
  }
};

inline blocks::eagle3::config eagle3_config() {
  blocks::eagle3::config c;
  c.layer = layer_config_of();
  c.target_hidden = 4;
  c.vocab = 8;
  c.draft_vocab = 6;
  return c;
}

/// EAGLE-3's step, `out` either apart from `hidden` or `hidden` itself (the harness lays it over).
struct eagle3_forward {
  static constexpr const char* name = "blocks::eagle3::forward";
  static void plan(call_plan& p) {
    add<float>(p, "w.embed", 2, 8, 8, role::in, weights(p.input(), 64));
    add<float>(p, "w.hidden_norm", 1, 8, 1, role::in, weights(p.input(), 8));
    add_common_layer(p, 16, true);
    add<std::int32_t>(p, "tokens", 1, 3, 1, role::in, ints(p.input(), 3, 0, 7));
    add<float>(p, "hidden", 2, 3, 8, role::in, logits(p.input(), 24));
    add<std::int64_t>(p, "positions", 1, 3, 1, role::in, {3, 4, 5});
    add<float>(p, "out", 2, 3, 8, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    blocks::eagle3::weights<specdec::host_space> w;
    w.embed = c.m<const float>(0);
    w.hidden_norm = c.v<const float>(1);
    w.layer = layer_of(c, layer_args{2, 3, 4, 5, 6, 7, 8, 9, 10});
    blocks::kv_cache<B> cache(b, 8, 4);
    blocks::eagle3::forward(b, eagle3_config(), w, c.v<const std::int32_t>(11), c.m<const float>(12), c.v<const std::int64_t>(13),
                            &cache, {}, c.m<float>(14));
    return {};
  }
};

/// EAGLE-3's fusion of the three taps (a linear map).
struct eagle3_fuse {
  static constexpr const char* name = "blocks::eagle3::fuse";
  static void plan(call_plan& p) {
    add<float>(p, "w.fc", 2, 8, 12, role::in, weights(p.input(), 96));
    add<float>(p, "taps", 2, 2, 12, role::in, logits(p.input(), 24));
    add<float>(p, "fused", 2, 2, 8, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    blocks::eagle3::weights<specdec::host_space> w;
    w.fc.weight = c.m<const float>(0);
    blocks::eagle3::fuse(b, w, c.m<const float>(1), c.m<float>(2));
    return {};
  }
};

/// EAGLE-3's head (and MTP's): a final norm then a linear map.
struct eagle3_logits {
  static constexpr const char* name = "blocks::eagle3::logits";
  static void plan(call_plan& p) {
    add<float>(p, "w.norm", 1, 8, 1, role::in, weights(p.input(), 8));
    add<float>(p, "w.lm_head", 2, 6, 8, role::in, weights(p.input(), 48));
    add<float>(p, "h2", 2, 2, 8, role::in, logits(p.input(), 16));
    add<float>(p, "logits", 2, 2, 6, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    blocks::eagle3::weights<specdec::host_space> w;
    w.norm = c.v<const float>(0);
    w.lm_head.weight = c.m<const float>(1);
    blocks::eagle3::logits(b, eagle3_config(), w, c.m<const float>(2), c.m<float>(3));
    return {};
  }
};

/// MTP's step with the position-0 rule (the first row embeds as zeros).
struct mtp_forward {
  static constexpr const char* name = "blocks::mtp::forward";
  static void plan(call_plan& p) {
    add<float>(p, "w.embed", 2, 8, 8, role::in, weights(p.input(), 64));
    add<float>(p, "w.enorm", 1, 8, 1, role::in, weights(p.input(), 8));
    add<float>(p, "w.hnorm", 1, 8, 1, role::in, weights(p.input(), 8));
    add<float>(p, "w.eh_proj", 2, 8, 16, role::in, weights(p.input(), 128));
    add_common_layer(p);
    add<std::int32_t>(p, "tokens", 1, 3, 1, role::in, ints(p.input(), 3, 0, 7));
    add<float>(p, "hidden", 2, 3, 8, role::in, logits(p.input(), 24));
    add<std::int64_t>(p, "positions", 1, 3, 1, role::in, {0, 1, 2});
    add<float>(p, "out", 2, 3, 8, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    blocks::mtp::config config;
    config.layer = layer_config_of();
    config.vocab = 8;
    blocks::mtp::weights<specdec::host_space> w;
    w.embed = c.m<const float>(0);
    w.enorm = c.v<const float>(1);
    w.hnorm = c.v<const float>(2);
    w.eh_proj.weight = c.m<const float>(3);
    w.layer = layer_of(c, layer_args{4, 5, 6, 7, 8, 9, 10, 11, 12});
    blocks::kv_cache<B> cache(b, 8, 4);
    blocks::mtp::forward(b, config, w, c.v<const std::int32_t>(13), c.m<const float>(14), c.v<const std::int64_t>(15), &cache, {},
                         c.m<float>(16));
    return {};
  }
};

/// Jakiro's draft layer: EAGLE's fuse and attention, then the two-expert MoE with its contrastive
/// branch (both outputs written). The routing decisions are digested.
struct moe_draft_layer {
  static constexpr const char* name = "blocks::moe::draft_layer_forward";
  static void plan(call_plan& p) {
    add_eagle_weights(p);  // its MLP views are the MoE's first expert
    add<float>(p, "moe.gate", 2, 4, 8, role::in, weights(p.input(), 32));
    add<float>(p, "moe.experts.1.gate", 2, 6, 8, role::in, weights(p.input(), 48));
    add<float>(p, "moe.experts.1.up", 2, 6, 8, role::in, weights(p.input(), 48));
    add<float>(p, "moe.experts.1.down", 2, 8, 6, role::in, weights(p.input(), 48));
    add<std::int32_t>(p, "tokens", 1, 3, 1, role::in, ints(p.input(), 3, 0, 7));
    add<float>(p, "feature", 2, 3, 8, role::in, logits(p.input(), 24));
    add<std::int64_t>(p, "positions", 1, 3, 1, role::in, {2, 3, 4});
    add<float>(p, "left_out", 2, 3, 8, role::out, {});
    add<float>(p, "right_out", 2, 3, 8, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    const auto w = eagle_weights_of(c);
    blocks::moe::config moe;
    moe.hidden = 8;
    moe.expert_intermediate = 6;
    blocks::moe::weights<specdec::host_space> mw;
    mw.gate.weight = c.m<const float>(11);
    mw.experts = {w.layer.mlp, {}};
    mw.experts[1].gate.weight = c.m<const float>(12);
    mw.experts[1].up.weight = c.m<const float>(13);
    mw.experts[1].down.weight = c.m<const float>(14);
    const auto r = blocks::moe::draft_layer_forward(b, layer_config_of(0, false), w, moe, mw, c.v<const std::int32_t>(15),
                                                    c.m<const float>(16), c.v<const std::int64_t>(17), nullptr, {},
                                                    c.m<float>(18), c.m<float>(19));
    digest d(r.top1.begin(), r.top1.end());
    d.insert(d.end(), r.contrastive_top1.begin(), r.contrastive_top1.end());
    return d;
  }
};

/// MoA's layer widths: E = 8 (self- and cross-attention); the target's cache rows are one kv head of
/// 2, so E_kv = 4 for the layer self-attention (two heads of 2 over one kv head).
inline blocks::moa::config moa_config() {
  blocks::moa::config c;
  c.self_attention = layer_config_of();
  c.cross_attention = layer_config_of();
  c.layer_self_attention = layer_config_of();
  c.layer_self_attention.attention.hidden = 4;
  c.layer_self_attention.attention.head_dim = 2;
  c.target_layers = 2;
  c.target_head_dim = 2;
  return c;
}

/// The inference drafter: its constructor takes the weights, add_verified the target's K/V of two
/// layers (rows [first, first + count) of five), forward a chain step of two rows.
struct moa_drafter {
  static constexpr const char* name = "blocks::moa::drafter";
  static void plan(call_plan& p) {
    add_layer(p, 4, 4, 4, 2, 6, true);  // 0-8: layer self-attention
    add<float>(p, "w.ekv2e.weight", 2, 8, 4, role::in, weights(p.input(), 32));
    add<float>(p, "w.ekv2e.bias", 1, 8, 1, role::in, weights(p.input(), 8));
    add_common_layer(p);  // 11-19: self-attention
    add_common_layer(p);  // 20-28: cross-attention
    for (const char* n : {"keys.0", "keys.1", "values.0", "values.1"})
      add<float>(p, n, 2, 5, 2, role::in, logits(p.input(), 10));
    add<float>(p, "x", 2, 2, 8, role::inout, logits(p.input(), 16));
    add<std::int64_t>(p, "positions", 1, 2, 1, role::in, {3, 4});
    add<float>(p, "features", 2, 1, 8, role::out, {});
    p.size(1);  // first
    p.size(3);  // count
  }
  template <class B>
  static digest call(B& b, const context& c) {
    blocks::moa::weights<specdec::host_space> w;
    w.layer_self_attention = layer_of(c, layer_args{0, 1, 2, 3, 4, 5, 6, 7, 8});
    w.ekv2e.weight = c.m<const float>(9);
    w.ekv2e.bias = c.v<const float>(10);
    w.self_attention = layer_of(c, layer_args{11, 12, 13, 14, 15, 16, 17, 18, 19});
    w.cross_attention = layer_of(c, layer_args{20, 21, 22, 23, 24, 25, 26, 27, 28});
    const std::array<matrix_view<const float>, 2> keys{c.m<const float>(29), c.m<const float>(30)};
    const std::array<matrix_view<const float>, 2> values{c.m<const float>(31), c.m<const float>(32)};
    blocks::moa::drafter<B> drafter(b, moa_config(), w, 16);
    drafter.add_verified(keys, values, 0, c.sizes[0]);  // the prompt's first rows
    drafter.add_verified(keys, values, c.sizes[0], c.sizes[1]);
    drafter.forward(c.m<float>(33), c.v<const std::int64_t>(34), c.m<float>(35));
    return {drafter.verified(), drafter.self_attention_cache().size()};
  }
};

/// The training forward: the whole sequence's key/value stream, the staircase self-attention, the
/// verified-prefix cross-attention.
struct moa_train_forward {
  static constexpr const char* name = "blocks::moa::train_forward";
  static void plan(call_plan& p) {
    add_layer(p, 4, 4, 4, 2, 6, true);
    add<float>(p, "w.ekv2e.weight", 2, 8, 4, role::in, weights(p.input(), 32));
    add<float>(p, "w.ekv2e.bias", 1, 8, 1, role::in, weights(p.input(), 8));
    add_common_layer(p);
    add_common_layer(p);
    for (const char* n : {"keys.0", "keys.1", "values.0", "values.1"})
      add<float>(p, n, 2, 3, 2, role::in, logits(p.input(), 6));
    add<float>(p, "embeddings", 2, 3, 8, role::in, logits(p.input(), 24));
    add<std::int32_t>(p, "response_mask", 1, 3, 1, role::in, {0, 1, 1}, true);
    add<float>(p, "kv_stream", 2, 3, 8, role::out, {});
    add<float>(p, "self_attention_out", 2, 3, 8, role::out, {});
    add<float>(p, "out", 2, 3, 8, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    blocks::moa::weights<specdec::host_space> w;
    w.layer_self_attention = layer_of(c, layer_args{0, 1, 2, 3, 4, 5, 6, 7, 8});
    w.ekv2e.weight = c.m<const float>(9);
    w.ekv2e.bias = c.v<const float>(10);
    w.self_attention = layer_of(c, layer_args{11, 12, 13, 14, 15, 16, 17, 18, 19});
    w.cross_attention = layer_of(c, layer_args{20, 21, 22, 23, 24, 25, 26, 27, 28});
    w.validate(moa_config());
    const std::array<matrix_view<const float>, 2> keys{c.m<const float>(29), c.m<const float>(30)};
    const std::array<matrix_view<const float>, 2> values{c.m<const float>(31), c.m<const float>(32)};
    blocks::moa::train_forward(b, moa_config(), w, keys, values, c.m<const float>(33), c.s<const std::int32_t>(34), true,
                               c.m<float>(35), c.m<float>(36), c.m<float>(37));
    return {};
  }
};

/// Amphista's staged adaptation layer.
struct amphista_stage {
  static constexpr const char* name = "blocks::amphista::stage_forward";
  static void plan(call_plan& p) {
    add<float>(p, "w.fuse.weight", 2, 8, 16, role::in, weights(p.input(), 128));
    add<float>(p, "w.fuse.bias", 1, 8, 1, role::in, weights(p.input(), 8));
    add_common_layer(p);
    add<float>(p, "feature", 2, 3, 8, role::in, logits(p.input(), 24));
    add<float>(p, "embedding", 2, 3, 8, role::in, logits(p.input(), 24));
    add<std::int64_t>(p, "positions", 1, 3, 1, role::in, {7, 8, 9});
    add<float>(p, "out", 2, 3, 8, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    blocks::amphista::stage_weights<specdec::host_space> w;
    w.fuse.weight = c.m<const float>(0);
    w.fuse.bias = c.v<const float>(1);
    w.layer = layer_of(c, layer_args{2, 3, 4, 5, 6, 7, 8, 9, 10});
    blocks::kv_cache<B> cache(b, 8, 4);
    blocks::amphista::stage_forward(b, layer_config_of(), w, c.m<const float>(11), c.m<const float>(12), c.v<const std::int64_t>(13),
                                    &cache, c.m<float>(14));
    return {};
  }
};

/// Amphista's head inputs: two ResBlock MLPs over the stages' last rows.
struct amphista_head_inputs {
  static constexpr const char* name = "blocks::amphista::head_inputs";
  static void plan(call_plan& p) {
    add<float>(p, "w.head_mlps.0.weight", 2, 8, 8, role::in, weights(p.input(), 64));
    add<float>(p, "w.head_mlps.0.bias", 1, 8, 1, role::in, weights(p.input(), 8));
    add<float>(p, "w.head_mlps.1.weight", 2, 8, 8, role::in, weights(p.input(), 64));
    add<float>(p, "w.head_mlps.1.bias", 1, 8, 1, role::in, weights(p.input(), 8));
    add<float>(p, "h1", 2, 1, 8, role::in, logits(p.input(), 8));
    add<float>(p, "h2", 2, 1, 8, role::in, logits(p.input(), 8));
    add<float>(p, "z", 2, 2, 8, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    blocks::amphista::config config;
    config.heads = 2;
    config.stage1_heads = 1;
    blocks::amphista::weights<specdec::host_space> w;
    w.head_mlps = {{c.m<const float>(0), c.v<const float>(1)}, {c.m<const float>(2), c.v<const float>(3)}};
    blocks::amphista::head_inputs(b, config, w, c.m<const float>(4), c.m<const float>(5), c.m<float>(6));
    return {};
  }
};

/// Amphista's auto-embedding block over K = 2 slots, with both optional outputs.
struct amphista_auto_embedding {
  static constexpr const char* name = "blocks::amphista::auto_embedding";
  static void plan(call_plan& p) {
    add<float>(p, "w.position_embedding", 2, 2, 8, role::in, weights(p.input(), 16));
    add_common_layer(p);  // 1-9: the slot layer
    add<float>(p, "w.heads.0", 2, 6, 8, role::in, weights(p.input(), 48));
    add<float>(p, "w.heads.1", 2, 6, 8, role::in, weights(p.input(), 48));
    add<float>(p, "z", 2, 2, 8, role::in, logits(p.input(), 16));
    add<float>(p, "logits", 2, 2, 6, role::out, {});
    add<float>(p, "u_out", 2, 2, 8, role::out, {});
    add<float>(p, "o_out", 2, 2, 8, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    blocks::amphista::config config;
    config.auto_embedding = layer_config_of(0, true, false);
    config.heads = 2;
    config.vocab = 6;
    blocks::amphista::weights<specdec::host_space> w;
    w.position_embedding = c.m<const float>(0);
    w.auto_embedding = layer_of(c, layer_args{1, 2, 3, 4, 5, 6, 7, 8, 9});
    w.heads = {c.m<const float>(10), c.m<const float>(11)};
    blocks::amphista::auto_embedding(b, config, w, c.m<const float>(12), c.m<float>(13), c.m<float>(14), c.m<float>(15));
    return {};
  }
};

/// DFlash's drafter: one layer with Qwen3's q / k norms (the common layer's shapes), two target layers'
/// features (fc 16 -> 8), the target's embedding and head of 8 tokens, blocks of 3 (mask id 7).
inline blocks::dflash::config dflash_config() {
  blocks::dflash::config c;
  c.layer = layer_config_of();
  c.layer.attention.qk_norm = true;
  c.layers = 1;
  c.feature_layers = 2;
  c.vocab = 8;
  c.block_size = 3;
  c.mask_token = 7;
  return c;
}
/// Arguments 0-14: fc, hidden_norm, norm, embed, lm_head, q_norm, k_norm, then the layer.
inline void add_dflash_weights(call_plan& p) {
  add<float>(p, "w.fc", 2, 8, 16, role::in, weights(p.input(), 128));
  add<float>(p, "w.hidden_norm", 1, 8, 1, role::in, weights(p.input(), 8));
  add<float>(p, "w.norm", 1, 8, 1, role::in, weights(p.input(), 8));
  add<float>(p, "w.embed", 2, 8, 8, role::in, weights(p.input(), 64));
  add<float>(p, "w.lm_head", 2, 8, 8, role::in, weights(p.input(), 64));
  add<float>(p, "layer.q_norm", 1, 4, 1, role::in, weights(p.input(), 4));
  add<float>(p, "layer.k_norm", 1, 4, 1, role::in, weights(p.input(), 4));
  add_common_layer(p);
}
inline blocks::dflash::weights<specdec::host_space> dflash_weights_of(const context& c) {
  blocks::dflash::weights<specdec::host_space> w;
  w.fc.weight = c.m<const float>(0);
  w.hidden_norm = c.v<const float>(1);
  w.norm = c.v<const float>(2);
  w.embed = c.m<const float>(3);
  w.lm_head.weight = c.m<const float>(4);
  auto layer = layer_of(c, layer_args{7, 8, 9, 10, 11, 12, 13, 14, 15});
  layer.attention.q_norm = c.v<const float>(5);
  layer.attention.k_norm = c.v<const float>(6);
  w.layers.push_back(layer);
  return w;
}

/// Context rows into the drafter's cache: a refused call leaves it as it was; the keys are digested.
struct dflash_append_context {
  static constexpr const char* name = "blocks::dflash::append_context";
  static void plan(call_plan& p) {
    add_dflash_weights(p);
    add<float>(p, "features", 2, 3, 16, role::in, logits(p.input(), 48));
    add<std::int64_t>(p, "positions", 1, 3, 1, role::in, {0, 1, 2});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    blocks::dflash::context_cache<B> cache(b, dflash_config(), 8);
    try {
      blocks::dflash::append_context(b, dflash_config(), dflash_weights_of(c), c.m<const float>(16), c.v<const std::int64_t>(17), cache);
    } catch (const specdec::invalid_argument&) {
      fuzz::require(cache.size() == 0 && cache.layer(0).size() == 0, "a refused append left rows in the cache");
      throw;
    }
    digest d{cache.size()};
    append_bits(d, b, whole(cache.layer(0).keys()));
    return d;
  }
};

/// A block over two context rows; whatever the call does, the cache holds the two rows after it.
struct dflash_forward {
  static constexpr const char* name = "blocks::dflash::forward";
  static void plan(call_plan& p) {
    add_dflash_weights(p);
    add<float>(p, "features", 2, 2, 16, role::in, logits(p.input(), 32));
    add<std::int32_t>(p, "tokens", 1, 3, 1, role::in, {3, 7, 7});
    add<std::int64_t>(p, "positions", 1, 5, 1, role::in, {0, 1, 2, 3, 4});
    add<float>(p, "out", 2, 3, 8, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    const auto config = dflash_config();
    const auto w = dflash_weights_of(c);
    blocks::dflash::context_cache<B> cache(b, config, 8);
    const auto positions = c.v<const std::int64_t>(18);
    const vector_view<const std::int64_t, specdec::host_space> head(positions.data(), std::min<index_t>(positions.rows(), 2));
    const vector_view<const std::int64_t, specdec::host_space> tail(positions.data() + head.rows(), positions.rows() - head.rows());
    blocks::dflash::append_context(b, config, w, c.m<const float>(16), head, cache);
    const index_t kept = cache.size();
    try {
      blocks::dflash::forward(b, config, w, c.v<const std::int32_t>(17), tail, cache, c.m<float>(19));
    } catch (const specdec::invalid_argument&) {
      fuzz::require(cache.size() == kept && cache.layer(0).size() == kept, "a refused forward changed the cache");
      throw;
    }
    fuzz::require(cache.layer(0).size() == kept, "a forward left block rows in the cache");
    return {};
  }
};

/// The cache's compaction after a tree step: three rows appended, then `prefix` and the accepted
/// offsets kept (the sizes harness draws the prefix).
struct kv_cache_keep {
  static constexpr const char* name = "blocks::kv_cache::keep";
  static void plan(call_plan& p) {
    add<float>(p, "rows", 2, 3, 4, role::in, logits(p.input(), 12));
    add<std::int32_t>(p, "offsets", 1, 2, 1, role::in, {0, 2}, true);
    p.size(1);
  }
  template <class B>
  static digest call(B& b, const context& c) {
    blocks::kv_cache<B> cache(b, 8, 4);
    auto [k, v] = cache.extend(3);
    blocks::copy_rows(b, c.m<const float>(0), k);
    blocks::copy_rows(b, c.m<const float>(0), v);
    const index_t size = cache.size();
    try {
      cache.keep(c.sizes[0], c.s<const std::int32_t>(1));
    } catch (const specdec::invalid_argument&) {
      fuzz::require(cache.size() == size, "a refused keep changed the cache");
      throw;
    }
    digest d{cache.size()};
    append_bits(d, b, whole(cache.keys()));
    append_bits(d, b, whole(cache.values()));
    return d;
  }
};

}  // namespace fuzz::entry
