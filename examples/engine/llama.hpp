// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The example engine's model: a Llama-architecture decoder (RMSNorm, rotate-half RoPE, GQA,
/// SwiGLU, tied embeddings) loaded from GGUF and run on specdec's Eigen backend with specdec's blocks.
/// This is the kind of code an engine already has; what it borrows from specdec is the decoder layer,
/// the KV cache that keeps only an accepted tree path, and the tree masks.
///
/// A `llama_session` holds one sequence's KV caches (one per layer). `forward` runs any set of new
/// tokens at given positions under a mask over (cached rows + new rows): causal for prefill and
/// decoding, a tree mask to verify a whole draft tree in one pass. Layers can be skipped per
/// sub-layer (ADMG's self-draft), and hooks see the residual stream around every attention sub-layer
/// and after every layer.
#pragma once

#include <climits>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/blocks/layers.hpp>
#include <specdec/policy/admg.hpp>

#include "gguf.hpp"

namespace engine {

using specdec::index_t;
using host_matrix = specdec::matrix_view<const float>;

struct llama_config {
  index_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0, vocab = 0;
  double rope_theta = 10000.0;
  float rms_eps = 1e-5f;
  specdec::blocks::layer_config layer() const {
    return {{hidden, heads, kv_heads, head_dim, rope_theta, true}, intermediate, rms_eps, true};
  }
};

/// Weights dequantised to float, owned.
class llama_model {
 public:
  /// Loads `llama.*` metadata and the `token_embd`, `blk.N.*`, `output_norm` (and optional `output`)
  /// tensors. GGUF stores Q and K rows permuted for llama.cpp's interleaved RoPE; they are permuted
  /// back to the Hugging Face (rotate-half) order here. \throws gguf_error on a missing or
  /// mis-shaped tensor, an architecture other than llama, or counts out of range (block_count in
  /// [1, 2^16]; heads, kv heads, widths >= 1 and <= 2^40; heads dividing the width, kv heads the heads).
  static llama_model load(const gguf_file& f);

  const llama_config& config() const noexcept { return config_; }
  host_matrix embedding() const { return {embedding_.data(), config_.vocab, config_.hidden}; }
  /// The LM head: `output.weight` when the file has one, else the tied embedding.
  host_matrix lm_head() const { return {output_.empty() ? embedding_.data() : output_.data(), config_.vocab, config_.hidden}; }
  specdec::vector_view<const float> final_norm() const { return {final_norm_.data(), config_.hidden}; }
  specdec::blocks::layer_weights<specdec::host_space> layer(index_t l) const {
    const auto& w = layers_.at(static_cast<std::size_t>(l));
    const auto& c = config_;
    const auto lin = [](const std::vector<float>& v, index_t out, index_t in) {
      return specdec::blocks::linear<specdec::host_space>{host_matrix(v.data(), out, in), {}};
    };
    const index_t kv = c.kv_heads * c.head_dim;
    return {{w.attn_norm.data(), c.hidden},
            {w.ffn_norm.data(), c.hidden},
            {lin(w.q, c.hidden, c.hidden), lin(w.k, kv, c.hidden), lin(w.v, kv, c.hidden), lin(w.o, c.hidden, c.hidden)},
            {lin(w.gate, c.intermediate, c.hidden), lin(w.up, c.intermediate, c.hidden), lin(w.down, c.hidden, c.intermediate)}};
  }
  /// Bytes of weights one forward reads (all layers and the LM head): the unit of the cost model.
  std::size_t layer_bytes(bool attention) const {
    const auto& c = config_;
    const std::size_t kv = static_cast<std::size_t>(c.kv_heads * c.head_dim), e = static_cast<std::size_t>(c.hidden);
    return 4 * (attention ? 2 * e * e + 2 * e * kv : 3 * e * static_cast<std::size_t>(c.intermediate));
  }
  std::size_t head_bytes() const { return 4 * static_cast<std::size_t>(config_.vocab * config_.hidden); }

 private:
  struct owned_layer {
    std::vector<float> attn_norm, ffn_norm, q, k, v, o, gate, up, down;
  };
  /// GGUF row (h, i, j) holds Hugging Face row (h, j, i) for i < head_dim / 2, j < 2 (llama.cpp's
  /// converter interleaves the two rotary halves).
  static std::vector<float> unpermute(const std::vector<float>& w, index_t heads, index_t head_dim, index_t cols) {
    std::vector<float> out(w.size());
    const index_t half = head_dim / 2;
    for (index_t h = 0; h < heads; ++h)
      for (index_t i = 0; i < half; ++i)
        for (index_t j = 0; j < 2; ++j) {
          const float* src = w.data() + ((h * head_dim) + i * 2 + j) * cols;
          std::copy(src, src + cols, out.data() + ((h * head_dim) + j * half + i) * cols);
        }
    return out;
  }
  llama_config config_;
  std::vector<float> embedding_, output_, final_norm_;
  std::vector<owned_layer> layers_;
};

/// Observers of a forward pass (ADMG's statistic, MoA's per-layer K/V, EAGLE's features).
struct forward_hooks {
  /// Layer l's attention sub-layer: the residual stream entering it and leaving it, host `[T x E]`.
  std::function<void(index_t, host_matrix, host_matrix)> after_attention;
  /// The residual stream leaving layer l, host `[T x E]`.
  std::function<void(index_t, host_matrix)> after_layer;
};

/// One sequence's KV caches and the forward pass over them.
class llama_session {
 public:
  llama_session(const llama_model& model, index_t capacity) : model_(&model) {
    const auto& c = model.config();
    caches_.reserve(static_cast<std::size_t>(c.layers));
    for (index_t l = 0; l < c.layers; ++l) caches_.emplace_back(backend_, capacity, c.kv_heads * c.head_dim);
    for (index_t l = 0; l < c.layers; ++l) weights_.push_back(model.layer(l));
  }

  llama_session(const llama_session&) = delete;  // the caches point at this session's backend
  llama_session& operator=(const llama_session&) = delete;

  const llama_model& model() const noexcept { return *model_; }
  /// Rows cached in layer l (layers whose attention a draft skipped hold fewer).
  index_t cached(index_t l = 0) const { return caches_.at(static_cast<std::size_t>(l)).size(); }
  specdec::blocks::kv_cache<specdec::eigen>& cache(index_t l) { return caches_.at(static_cast<std::size_t>(l)); }

  /// Runs `tokens` `[T]` at `positions` `[T]` and writes the logits of every row to `logits`
  /// (resized to `[T x V]`, row-major). \param allowed empty for causal attention over the cache,
  /// else a `[T x (cached + T)]` row-major mask (a tree mask after the cached prefix); every layer
  /// that runs its attention must then hold `cached` rows. \param plan sub-layers to skip (a skipped
  /// attention writes no KV rows), null for the full model. \throws specdec::invalid_argument on
  /// shapes, token ids outside the vocabulary, a full cache.
  void forward(std::span<const std::int32_t> tokens, std::span<const std::int64_t> positions, std::span<const std::uint8_t> allowed,
               std::vector<float>& logits, const specdec::policy::admg::layer_plan* plan = nullptr, const forward_hooks* hooks = nullptr);

  /// Keeps the first n rows of every layer (drops a draft's rows).
  void crop(index_t n) {
    for (auto& cache : caches_) cache.crop(std::min(n, cache.size()));
  }
  /// Keeps rows [0, prefix) and then `prefix + offsets[i]` in every layer: a verified tree's accepted
  /// path (node indices, root included) behind the committed prefix.
  void keep(index_t prefix, std::span<const std::int32_t> offsets) {
    for (auto& cache : caches_) cache.keep(prefix, offsets);
  }

 private:
  const llama_model* model_;
  specdec::eigen backend_;
  std::vector<specdec::blocks::kv_cache<specdec::eigen>> caches_;
  std::vector<specdec::blocks::layer_weights<specdec::host_space>> weights_;
  std::vector<float> hidden_, before_;
};

}  // namespace engine
