// SPDX-License-Identifier: Apache-2.0
// The drafter blocks as the binding calls them: one abstract interface per block, over plain pointers
// and sizes (no nanobind, CUDA or specdec types), so that the nanobind side (blocks.cpp, any compiler)
// holds a block whether it runs on the host (block_sessions.hpp on specdec::eigen) or on a CUDA device
// (the same sessions on specdec::thrust_backend<cuda>, instantiated by cuda_ops.cu). Every array of a
// call is in the block's memory; `stream` is the CUDA stream a device block's call is enqueued on.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace specdec_python::block {

/// A float32 tensor in the block's memory: `[rows]` (ndim 1) or `[rows x cols]` (ndim 2), C-contiguous.
struct tensor {
  const float* data = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  int ndim = 0;
};
/// The checkpoint's tensors by name.
using weight_map = std::map<std::string, tensor>;

/// An attention mask argument: causal, none, allowed (`[rows x cols]` bytes, 0 / nonzero) or additive
/// (`[rows x cols]` float32).
struct mask_arg {
  enum kind_t { causal, none, allowed, additive } kind = causal;
  const void* data = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
};

/// One attention part's shape, with the layer's norm epsilon and the cache capacity.
struct layer_shape {
  std::int64_t heads = 1;
  std::int64_t kv_heads = 1;
  std::int64_t head_dim = 1;
  float rms_eps = 1e-5f;
  double rope_theta = 10000.0;
  std::int64_t capacity = 4096;
};

/// What every block with KV caches offers (crop: keep the first n rows of each cache; keep: the first
/// `prefix` rows then rows prefix + offsets[i], host offsets, the rows moved on `stream`; where the block
/// takes tree drafts).
class cached {
 public:
  virtual ~cached() = default;
  virtual std::int64_t cache_size() const = 0;
  virtual void crop(std::int64_t n) = 0;
  virtual void keep(std::uintptr_t stream, std::int64_t prefix, const std::int32_t* offsets, std::int64_t count) = 0;
};

/// blocks::decoder_layer_forward with its weights and KV cache.
class decoder_layer : public cached {
 public:
  virtual std::int64_t cache_width() const = 0;
  virtual void forward(std::uintptr_t stream, float* x, std::int64_t rows, std::int64_t cols, const std::int64_t* positions,
                       std::int64_t count, const mask_arg& mask) = 0;
  /// The cached keys (or values) `[cache_size x cache_width]` into `out`.
  virtual void cached_rows(std::uintptr_t stream, bool keys, float* out) = 0;
};

/// blocks::eagle3 (fuse, forward, logits).
class eagle3_block : public cached {
 public:
  virtual std::int64_t hidden() const = 0;
  virtual std::int64_t draft_vocab() const = 0;
  virtual void fuse(std::uintptr_t stream, const tensor& taps, float* out) = 0;
  virtual void forward(std::uintptr_t stream, const std::int32_t* tokens, std::int64_t count, const tensor& hidden,
                       const std::int64_t* positions, const mask_arg& mask, float* out) = 0;
  virtual void logits(std::uintptr_t stream, const tensor& h2, float* out) = 0;
};

/// blocks::mtp (forward with an optional projected input, logits).
class mtp_module : public cached {
 public:
  virtual std::int64_t hidden() const = 0;
  virtual std::int64_t vocab() const = 0;
  virtual void forward(std::uintptr_t stream, const std::int32_t* tokens, std::int64_t count, const tensor& hidden,
                       const std::int64_t* positions, const mask_arg& mask, float* out, float* projected) = 0;
  virtual void logits(std::uintptr_t stream, const tensor& o, float* out) = 0;
};

/// blocks::moe::draft_layer_forward (Jakiro's layer; `right` null unless contrastive).
class jakiro_layer : public cached {
 public:
  virtual std::int64_t hidden() const = 0;
  virtual void forward(std::uintptr_t stream, const std::int32_t* tokens, std::int64_t count, const tensor& feature,
                       const std::int64_t* positions, const mask_arg& mask, float* left, float* right) = 0;
};

/// blocks::amphista's stages, head inputs and auto-embedding; outputs s1, s2 `[T x E]`, z, u, o `[K x E]`,
/// logits `[K x V]`.
class amphista_heads : public cached {
 public:
  virtual std::int64_t hidden() const = 0;
  virtual std::int64_t heads() const = 0;
  virtual std::int64_t vocab() const = 0;
  virtual void forward(std::uintptr_t stream, const tensor& feature, const tensor& embedding, const std::int64_t* positions,
                       float* s1, float* s2, float* z, float* u, float* o, float* logits) = 0;
};

/// blocks::moa::drafter.
class moa_drafter : public cached {
 public:
  virtual std::int64_t hidden() const = 0;
  virtual std::int64_t verified() const = 0;
  virtual void add_verified(std::uintptr_t stream, const std::vector<tensor>& keys, const std::vector<tensor>& values,
                            std::int64_t first, std::int64_t count) = 0;
  virtual void forward(std::uintptr_t stream, float* x, std::int64_t rows, std::int64_t cols, const std::int64_t* positions,
                       std::int64_t count, float* features, std::int64_t last, const mask_arg& mask) = 0;
};

/// A MoA part: heads, kv_heads, head_dim, rope_theta.
using part_shape = std::tuple<std::int64_t, std::int64_t, std::int64_t, double>;

}  // namespace specdec_python::block
