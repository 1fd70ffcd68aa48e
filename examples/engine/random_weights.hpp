// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Random drafter weights for the examples whose drafters have no public checkpoint for the
/// demo model (MoA, Jakiro, Amphista): owned storage and specdec weight views over it.
#pragma once

#include <cmath>
#include <cstdint>
#include <list>
#include <random>
#include <vector>

#include <specdec/blocks/layers.hpp>

namespace engine {

/// Linear weights ~ U(-1/sqrt(in), 1/sqrt(in)), zero biases, unit norms; storage lives as long as this.
class random_weights {
 public:
  explicit random_weights(std::uint32_t seed) : rng_(seed) {}
  random_weights(const random_weights&) = delete;  // views point into the storage
  random_weights& operator=(const random_weights&) = delete;

  specdec::vector_view<const float> constant(index_t n, float value) {
    return {store(std::vector<float>(static_cast<std::size_t>(n), value)), n};
  }
  specdec::matrix_view<const float> matrix(index_t rows, index_t cols, float scale) {
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> w(static_cast<std::size_t>(rows * cols));
    for (auto& x : w) x = u(rng_);
    return {store(std::move(w)), rows, cols};
  }
  specdec::blocks::linear<specdec::host_space> linear(index_t out, index_t in, bool bias = false) {
    specdec::blocks::linear<specdec::host_space> l{matrix(out, in, 1.0f / std::sqrt(static_cast<float>(in))), {}};
    if (bias) l.bias = constant(out, 0.0f);
    return l;
  }
  specdec::blocks::attention_weights<specdec::host_space> attention(const specdec::blocks::attention_config& a) {
    return {linear(a.heads * a.head_dim, a.hidden), linear(a.kv_heads * a.head_dim, a.hidden), linear(a.kv_heads * a.head_dim, a.hidden),
            linear(a.hidden, a.heads * a.head_dim)};
  }
  specdec::blocks::mlp_weights<specdec::host_space> mlp(index_t hidden, index_t intermediate) {
    return {linear(intermediate, hidden), linear(intermediate, hidden), linear(hidden, intermediate)};
  }
  /// A whole decoder layer (input norm only when the config has one; MLP optional).
  specdec::blocks::layer_weights<specdec::host_space> layer(const specdec::blocks::layer_config& c, bool with_mlp = true) {
    const index_t e = c.attention.hidden;
    specdec::blocks::layer_weights<specdec::host_space> w;
    if (c.input_norm) w.input_norm = constant(e, 1.0f);
    w.post_norm = constant(e, 1.0f);
    w.attention = attention(c.attention);
    if (with_mlp) w.mlp = mlp(e, c.intermediate);
    return w;
  }

 private:
  const float* store(std::vector<float> v) {
    store_.push_back(std::move(v));
    return store_.back().data();
  }
  std::mt19937 rng_;
  std::list<std::vector<float>> store_;
};

}  // namespace engine
