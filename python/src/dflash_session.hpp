// SPDX-License-Identifier: Apache-2.0
// DFlash's block drafter (block_api.hpp's dflash_drafter) on a backend B, beside the other sessions of
// block_sessions.hpp (kept apart for that file's length): the same code for specdec::eigen (blocks.cpp)
// and specdec::thrust_backend<cuda> (cuda_ops.cu). Its context cache is the header's, in B's memory.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include <specdec/blocks/dflash.hpp>

#include "block_api.hpp"
#include "block_sessions.hpp"

namespace specdec_python::block {

template <class B>
class session<dflash_drafter, B> final : public dflash_drafter, session_base<B> {
  using base = session_base<B>;
  using typename base::space;

 public:
  /// z-lab's names (no `model.` prefix) and the target's `embed_tokens.weight` / `lm_head.weight`.
  /// Qwen3's q_norm / k_norm are always there, with the model's rms_eps (as the reference).
  session(int device, const weight_map& weights, const layer_shape& s, std::int64_t layers, std::int64_t block_size,
          std::int64_t mask_token)
      : base(device) {
    const weight_views<space> w(weights);
    weights_.embed = w.matrix("embed_tokens.weight");
    weights_.lm_head = w.linear("lm_head");
    weights_.fc = w.linear("fc");
    weights_.hidden_norm = w.vector("hidden_norm.weight");
    weights_.norm = w.vector("norm.weight");
    for (std::int64_t l = 0; l < layers; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".";
      auto layer = w.layer(p);
      layer.attention.q_norm = w.vector(p + "self_attn.q_norm.weight");
      layer.attention.k_norm = w.vector(p + "self_attn.k_norm.weight");
      weights_.layers.push_back(layer);
    }
    const specdec::index_t e = weights_.embed.cols(), v = weights_.embed.rows();
    if (e < 1 || v < 1)
      throw std::invalid_argument("weights: embed_tokens.weight has shape (" + std::to_string(v) + ", " + std::to_string(e) +
                                  "); expected the target's [V x E] table, V and E at least 1");
    // K is fc's width over E; one that is no multiple would read as a smaller K and blame fc's shape for it.
    if (weights_.fc.in() < e || weights_.fc.in() % e != 0)
      throw std::invalid_argument("weights: fc.weight has " + std::to_string(weights_.fc.in()) +
                                  " columns; expected K E, a multiple of E = " + std::to_string(e) +
                                  " (embed_tokens.weight's columns): the K target layers' outputs concatenated");
    // The config holds the id as int32: a wider one must not wrap into range.
    if (mask_token < 0 || mask_token >= v)
      throw std::invalid_argument("mask_token: expected an id of the target's vocabulary, in [0, " + std::to_string(v) + "); got " +
                                  std::to_string(mask_token));
    // The header checks the q / k norms' epsilon under its own name, qk_norm_eps: here it is rms_eps.
    if (!(s.rms_eps > 0.0f) || !std::isfinite(s.rms_eps))
      throw std::invalid_argument("rms_eps: expected a positive finite epsilon (every norm's, q_norm and k_norm's too); got " +
                                  std::to_string(s.rms_eps));
    config_.layer = {{e, s.heads, s.kv_heads, s.head_dim, s.rope_theta, true, 0, true, s.rms_eps},
                     weights_.layers.empty() ? 0 : weights_.layers.front().mlp.gate.out(),
                     s.rms_eps,
                     true};
    config_.layers = layers;
    config_.feature_layers = weights_.fc.in() / e;
    config_.vocab = v;
    config_.block_size = block_size;
    config_.mask_token = static_cast<std::int32_t>(mask_token);
    weights_.validate(config_);
    cache_.emplace(*this->backend_, config_, s.capacity);
  }
  std::int64_t hidden() const override { return config_.layer.attention.hidden; }
  std::int64_t vocab() const override { return config_.vocab; }
  std::int64_t layers() const override { return config_.layers; }
  std::int64_t feature_layers() const override { return config_.feature_layers; }
  std::int64_t block_size() const override { return config_.block_size; }
  std::int64_t mask_token() const override { return config_.mask_token; }
  std::int64_t cache_size() const override { return cache_->size(); }
  void crop(std::int64_t n) override { cache_->crop(n); }

  void append_context(input features, position_ids positions, std::uintptr_t stream) override {
    expect_cols(features, config_.feature_layers * hidden(), "K E: fc.weight's columns");
    expect_same_rows({{features.name, features.rows}, {positions.name, positions.size}});
    expect_room(features.name, features.rows, cache_->size(), cache_->capacity());
    specdec::blocks::dflash::append_context(this->bind(stream), config_, weights_, view<space>(features), view<space>(positions),
                                            *cache_);
  }
  void forward(token_ids tokens, position_ids positions, output out, std::uintptr_t stream) override {
    expect_same_rows({{tokens.name, tokens.size}, {positions.name, positions.size}});
    if (tokens.size < 1)
      throw std::invalid_argument("tokens: expected at least one token (the block: the last committed token, then mask tokens)");
    // The block's rows sit in every layer's cache for the forward, beside the context.
    expect_room(tokens.name, tokens.size, cache_->size(), cache_->capacity());
    const auto o = view<space>(out, tokens.size, hidden());
    specdec::blocks::dflash::forward(this->bind(stream), config_, weights_, view<space>(tokens), view<space>(positions), *cache_, o);
  }
  void logits(input normed, output out, std::uintptr_t stream) override {
    expect_cols(normed, hidden(), "the drafter's hidden size");
    specdec::blocks::dflash::logits(this->bind(stream), weights_, view<space>(normed), view<space>(out, normed.rows, vocab()));
  }

 private:
  specdec::blocks::dflash::config config_;
  specdec::blocks::dflash::weights<space> weights_;
  std::optional<specdec::blocks::dflash::context_cache<B>> cache_;
};

}  // namespace specdec_python::block
