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
  static llama_model load(const gguf_file& f) {
    const auto& arch = f.get<std::string>("general.architecture");
    if (arch != "llama") throw gguf_error("general.architecture is '" + arch + "'; the example engine runs 'llama'");
    llama_model m;
    auto& c = m.config_;
    // A count from the file in [1, most]: checked before it divides, sizes a buffer or bounds a loop.
    const auto count = [&](const std::string& key, std::int64_t value, std::int64_t most) {
      if (value < 1 || value > most)
        throw gguf_error(key + " = " + std::to_string(value) + "; expected 1 to " + std::to_string(most));
      return value;
    };
    constexpr std::int64_t widest = std::int64_t{1} << 40;  // the reader's largest tensor extent
    c.layers = count("llama.block_count", f.get<std::int64_t>("llama.block_count"), std::int64_t{1} << 16);
    c.hidden = count("llama.embedding_length", f.get<std::int64_t>("llama.embedding_length"), widest);
    c.heads = count("llama.attention.head_count", f.get<std::int64_t>("llama.attention.head_count"), c.hidden);
    c.kv_heads = count("llama.attention.head_count_kv", f.get_or<std::int64_t>("llama.attention.head_count_kv", c.heads), c.heads);
    if (c.hidden % c.heads != 0 || c.heads % c.kv_heads != 0)
      throw gguf_error("llama.embedding_length = " + std::to_string(c.hidden) + ", llama.attention.head_count = " +
                       std::to_string(c.heads) + ", head_count_kv = " + std::to_string(c.kv_heads) +
                       "; expected the heads to divide the width and the kv heads the heads");
    c.head_dim = c.hidden / c.heads;
    c.intermediate = count("llama.feed_forward_length", f.get<std::int64_t>("llama.feed_forward_length"), widest);
    c.rope_theta = f.get_or<double>("llama.rope.freq_base", 10000.0);
    c.rms_eps = static_cast<float>(f.get_or<double>("llama.attention.layer_norm_rms_epsilon", 1e-5));
    const auto e = static_cast<std::uint64_t>(c.hidden), kv = static_cast<std::uint64_t>(c.kv_heads * c.head_dim),
               ff = static_cast<std::uint64_t>(c.intermediate);
    const auto embd = f.tensors().find("token_embd.weight");
    if (embd == f.tensors().end()) throw gguf_error("tensor 'token_embd.weight' is missing");
    if (embd->second.dims.size() != 2)
      throw gguf_error("tensor 'token_embd.weight' has rank " + std::to_string(embd->second.dims.size()) +
                       "; expected 2 ([hidden x vocabulary])");
    if (embd->second.dims[1] > static_cast<std::uint64_t>(INT32_MAX))
      throw gguf_error("tensor 'token_embd.weight' has a vocabulary of " + std::to_string(embd->second.dims[1]) +
                       " tokens; expected at most 2^31 - 1 (token ids are int32)");
    c.vocab = static_cast<index_t>(embd->second.dims[1]);
    m.embedding_ = f.load("token_embd.weight", {e, static_cast<std::uint64_t>(c.vocab)});
    if (f.has_tensor("output.weight")) m.output_ = f.load("output.weight", {e, static_cast<std::uint64_t>(c.vocab)});
    m.final_norm_ = f.load("output_norm.weight", {e});
    for (index_t l = 0; l < c.layers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      owned_layer w;
      w.attn_norm = f.load(p + "attn_norm.weight", {e});
      w.ffn_norm = f.load(p + "ffn_norm.weight", {e});
      w.q = unpermute(f.load(p + "attn_q.weight", {e, e}), c.heads, c.head_dim, c.hidden);
      w.k = unpermute(f.load(p + "attn_k.weight", {e, kv}), c.kv_heads, c.head_dim, c.hidden);
      w.v = f.load(p + "attn_v.weight", {e, kv});
      w.o = f.load(p + "attn_output.weight", {e, e});
      w.gate = f.load(p + "ffn_gate.weight", {e, ff});
      w.up = f.load(p + "ffn_up.weight", {e, ff});
      w.down = f.load(p + "ffn_down.weight", {ff, e});
      m.layers_.push_back(std::move(w));
    }
    return m;
  }

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
               std::vector<float>& logits, const specdec::policy::admg::layer_plan* plan = nullptr, const forward_hooks* hooks = nullptr) {
    namespace blocks = specdec::blocks;
    const auto& c = model_->config();
    const auto t = static_cast<index_t>(tokens.size());
    SPECDEC_EXPECTS(t >= 1 && positions.size() == tokens.size(), "engine::llama_session::forward", "got ", tokens.size(),
                    " tokens and ", positions.size(), " positions; expected the same number, at least one");
    SPECDEC_EXPECTS(!plan || (static_cast<index_t>(plan->skip_attention.size()) == c.layers &&
                              static_cast<index_t>(plan->skip_mlp.size()) == c.layers),
                    "engine::llama_session::forward", "the layer plan covers ", plan ? plan->skip_attention.size() : 0,
                    " attention and ", plan ? plan->skip_mlp.size() : 0, " MLP sub-layers; expected one of each per layer (",
                    c.layers, ")");
    hidden_.resize(static_cast<std::size_t>(t * c.hidden));
    const specdec::matrix_view<float> x(hidden_.data(), t, c.hidden);
    backend_.gather_rows(model_->embedding(), specdec::vector_view<const std::int32_t>(tokens.data(), t), x);
    const specdec::vector_view<const std::int64_t> pos(positions.data(), t);
    const auto layer_config = c.layer();
    for (index_t l = 0; l < c.layers; ++l) {
      const bool skip_attention = plan && plan->skip_attention[static_cast<std::size_t>(l)];
      const bool skip_mlp = plan && plan->skip_mlp[static_cast<std::size_t>(l)];
      auto& cache = caches_[static_cast<std::size_t>(l)];
      blocks::attention_mask<specdec::host_space> mask;
      if (!allowed.empty()) {
        SPECDEC_EXPECTS(skip_attention || static_cast<index_t>(allowed.size()) == t * (cache.size() + t),
                        "engine::llama_session::forward", "the mask has ", allowed.size(), " entries; layer ", l, " expects [",
                        t, " x ", cache.size() + t, "]");
        mask = blocks::attention_mask<specdec::host_space>::from(
            specdec::matrix_view<const std::uint8_t>(allowed.data(), t, cache.size() + t));
      }
      const auto& w = weights_[static_cast<std::size_t>(l)];
      if (hooks && hooks->after_attention && !skip_attention) {
        before_.assign(hidden_.begin(), hidden_.end());
        blocks::decoder_layer_forward(backend_, layer_config, w, x, pos, &cache, mask, {false, true});
        hooks->after_attention(l, host_matrix(before_.data(), t, c.hidden), host_matrix(hidden_.data(), t, c.hidden));
        if (!skip_mlp) blocks::decoder_layer_forward(backend_, layer_config, w, x, pos, &cache, mask, {true, false});
      } else {
        blocks::decoder_layer_forward(backend_, layer_config, w, x, pos, &cache, mask, {skip_attention, skip_mlp});
      }
      if (hooks && hooks->after_layer) hooks->after_layer(l, host_matrix(hidden_.data(), t, c.hidden));
    }
    backend_.rms_norm(host_matrix(hidden_.data(), t, c.hidden), model_->final_norm(), c.rms_eps, x);
    logits.resize(static_cast<std::size_t>(t * c.vocab));
    backend_.gemm(host_matrix(hidden_.data(), t, c.hidden), specdec::transpose::no, model_->lm_head(), specdec::transpose::yes,
                  specdec::matrix_view<float>(logits.data(), t, c.vocab));
  }

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
