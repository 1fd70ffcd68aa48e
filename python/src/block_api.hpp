// SPDX-License-Identifier: Apache-2.0
// The drafter blocks as the binding calls them, each described once here: its abstract interface, over
// plain pointers and sizes (no nanobind, CUDA or specdec types), so that the nanobind side (blocks.cpp,
// any compiler) holds a block whether it runs on the host (block_sessions.hpp on specdec::eigen) or on a
// CUDA device (the same sessions on specdec::thrust_backend<cuda>, instantiated by cuda_ops.cu); and, in
// the same class, its Python class (`name`, `init`: the constructor's arguments after the weights,
// `members`: methods and properties with their arguments' names in Python's order, its bases' first),
// from which blocks.cpp makes the nanobind class, so that no method is bound by hand. Every array of a
// call is in the block's memory; `stream` is the CUDA stream a device block's call is enqueued on.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

namespace specdec_python::block {

/// A float32 weight: `[rows]` (ndim 1) or `[rows x cols]` (ndim 2), C-contiguous.
struct tensor {
  const float* data = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  int ndim = 0;
};
/// The checkpoint's tensors by name.
using weight_map = std::map<std::string, tensor>;

/// An array argument `[rows x cols]` as the binding checked it (dtype T, dimensions, memory, and
/// writable where T is not const), named for the shape checks that need the block (the session's).
template <class T>
struct matrix_arg {
  const char* name = "";
  T* data = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
};
/// A 1-D array argument `[size]`.
template <class T>
struct vector_arg {
  const char* name = "";
  T* data = nullptr;
  std::int64_t size = 0;
};
using input = matrix_arg<const float>;
using output = matrix_arg<float>;  ///< written, or updated in place
/// An output the caller may leave out (an empty array): data null.
struct optional_output : output {};
using token_ids = vector_arg<const std::int32_t>;
using position_ids = vector_arg<const std::int64_t>;
/// keep's offsets: the cache's bookkeeping, in host memory whatever the block's.
struct host_offsets : vector_arg<const std::int32_t> {};

/// An attention mask argument: causal, none, allowed (`[rows x cols]` bytes, 0 / nonzero) or additive
/// (`[rows x cols]` float32).
struct mask_arg {
  enum kind_t { causal, none, allowed, additive } kind = causal;
  const void* data = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
};

/// One attention part's shape, with the layer's norm epsilon and the cache capacity (from Python: a
/// tuple in this order).
struct layer_shape {
  std::int64_t heads = 1;
  std::int64_t kv_heads = 1;
  std::int64_t head_dim = 1;
  float rms_eps = 1e-5f;
  double rope_theta = 10000.0;
  std::int64_t capacity = 4096;
};
/// A MoA part: heads, kv_heads, head_dim, rope_theta.
using part_shape = std::tuple<std::int64_t, std::int64_t, std::int64_t, double>;

/// A method of a block's Python class: the interface's member and its arguments' names, one per
/// parameter in order; `about`: the arguments a fault of the headers that names none of them is about.
template <class F, std::size_t N>
struct method {
  const char* name;
  F member;
  std::array<const char*, N> args;
  const char* about = nullptr;
  constexpr method faults_of(const char* arguments) const {
    method m = *this;
    m.about = arguments;
    return m;
  }
};
template <class F, class... Names>
constexpr method<F, sizeof...(Names)> def(const char* name, F member, Names... args) {
  return {name, member, {args...}};
}
/// A read-only property: the block's state, read under its lock, or (`fixed`) a shape set at
/// construction, read without it.
template <class F>
struct property {
  const char* name;
  F member;
  bool fixed;
};
template <class F>
constexpr property<F> state(const char* name, F member) {
  return {name, member, false};
}
template <class F>
constexpr property<F> fixed(const char* name, F member) {
  return {name, member, true};
}
/// The constructor's arguments after the weights: their types (those of the session's constructor after
/// the device and the weights) and names.
template <class... A>
struct constructor {
  using arguments = std::tuple<A...>;
  std::array<const char*, sizeof...(A)> names;
};

template <class Api>
using arguments_of = typename std::remove_cvref_t<decltype(Api::init)>::arguments;

/// What every block with KV caches offers: the rows cached, and keeping the first n of each cache.
class cached {
 public:
  virtual ~cached() = default;
  virtual std::int64_t cache_size() const = 0;
  virtual void crop(std::int64_t n) = 0;

  static constexpr auto members = std::tuple{state("cache_size", &cached::cache_size), def("crop", &cached::crop, "n")};
};

/// A block that takes tree drafts: keeps the first `prefix` rows of each cache, then rows prefix +
/// offsets[i] (the accepted path), the rows moved on `stream`.
class tree_cached : public cached {
 public:
  virtual void keep(std::int64_t prefix, host_offsets offsets, std::uintptr_t stream) = 0;

  static constexpr auto members =
      std::tuple_cat(cached::members, std::tuple{def("keep", &tree_cached::keep, "prefix", "offsets", "stream")});
};

/// blocks::decoder_layer_forward with its weights and KV cache.
class decoder_layer : public tree_cached {
 public:
  virtual std::int64_t cache_width() const = 0;
  virtual void forward(output x, position_ids positions, const mask_arg& mask, std::uintptr_t stream) = 0;
  /// The cached keys (or values) `[cache_size x cache_width]` into `out`.
  virtual void cached_rows(bool keys, output out, std::uintptr_t stream) = 0;

  static constexpr const char* name = "DecoderLayer";
  static constexpr constructor<std::string, layer_shape, bool> init{{"prefix", "shape", "input_norm"}};
  static constexpr auto members = std::tuple_cat(
      tree_cached::members, std::tuple{fixed("cache_width", &decoder_layer::cache_width),
                                       def("forward", &decoder_layer::forward, "x", "positions", "mask", "stream"),
                                       def("cached", &decoder_layer::cached_rows, "keys", "out", "stream")});
};

/// blocks::eagle3 (fuse, forward, logits).
class eagle3_block : public tree_cached {
 public:
  virtual std::int64_t hidden() const = 0;
  virtual std::int64_t draft_vocab() const = 0;
  virtual void fuse(input taps, output out, std::uintptr_t stream) = 0;
  virtual void forward(token_ids tokens, input hidden, position_ids positions, const mask_arg& mask, output out, std::uintptr_t stream) = 0;
  virtual void logits(input h2, output out, std::uintptr_t stream) = 0;

  static constexpr const char* name = "Eagle3Block";
  static constexpr constructor<layer_shape> init{{"shape"}};
  static constexpr auto members = std::tuple_cat(
      tree_cached::members, std::tuple{fixed("hidden", &eagle3_block::hidden), fixed("draft_vocab", &eagle3_block::draft_vocab),
                                       def("fuse", &eagle3_block::fuse, "taps", "out", "stream"),
                                       def("forward", &eagle3_block::forward, "tokens", "hidden", "positions", "mask", "out", "stream"),
                                       def("logits", &eagle3_block::logits, "h2", "out", "stream")});
};

/// blocks::mtp (forward with an optional projected input, logits).
class mtp_module : public cached {
 public:
  virtual std::int64_t hidden() const = 0;
  virtual std::int64_t vocab() const = 0;
  virtual void forward(token_ids tokens, input hidden, position_ids positions, const mask_arg& mask, output out,
                       optional_output projected, std::uintptr_t stream) = 0;
  virtual void logits(input o, output out, std::uintptr_t stream) = 0;

  static constexpr const char* name = "MtpModule";
  static constexpr constructor<std::string, layer_shape, bool> init{{"prefix", "shape", "zero_embedding_at_position_0"}};
  static constexpr auto members = std::tuple_cat(
      cached::members,
      std::tuple{fixed("hidden", &mtp_module::hidden), fixed("vocab", &mtp_module::vocab),
                 def("forward", &mtp_module::forward, "tokens", "hidden", "positions", "mask", "out", "projected", "stream"),
                 def("logits", &mtp_module::logits, "o", "out", "stream")});
};

/// blocks::moe::draft_layer_forward (Jakiro's layer; `right` left out unless contrastive).
class jakiro_layer : public tree_cached {
 public:
  virtual std::int64_t hidden() const = 0;
  virtual void forward(token_ids tokens, input feature, position_ids positions, const mask_arg& mask, output left, optional_output right,
                       std::uintptr_t stream) = 0;

  static constexpr const char* name = "JakiroLayer";
  static constexpr constructor<layer_shape> init{{"shape"}};
  static constexpr auto members = std::tuple_cat(
      tree_cached::members,
      std::tuple{fixed("hidden", &jakiro_layer::hidden),
                 def("forward", &jakiro_layer::forward, "tokens", "feature", "positions", "mask", "left", "right", "stream")});
};

/// blocks::amphista's stages, head inputs and auto-embedding; outputs s1, s2 `[T x E]`, z, u, o `[K x E]`,
/// logits `[K x V]`.
class amphista_heads : public cached {
 public:
  virtual std::int64_t hidden() const = 0;
  virtual std::int64_t heads() const = 0;
  virtual std::int64_t vocab() const = 0;
  virtual void forward(input feature, input embedding, position_ids positions, output s1, output s2, output z, output u, output o,
                       output logits, std::uintptr_t stream) = 0;

  static constexpr const char* name = "AmphistaHeads";
  static constexpr constructor<layer_shape, std::int64_t, std::int64_t> init{{"shape", "k_heads", "stage1_heads"}};
  static constexpr auto members = std::tuple_cat(
      cached::members,
      std::tuple{fixed("hidden", &amphista_heads::hidden), fixed("heads", &amphista_heads::heads), fixed("vocab", &amphista_heads::vocab),
                 def("forward", &amphista_heads::forward, "feature", "embedding", "positions", "s1", "s2", "z", "u", "o", "logits",
                     "stream")});
};

/// blocks::dflash: the context's features into every layer's cache, a non-causal block over them whose
/// rows leave the cache again, the target's LM head. The layer count comes from the weights' names
/// (Python counts them).
class dflash_drafter : public cached {
 public:
  virtual std::int64_t hidden() const = 0;
  virtual std::int64_t vocab() const = 0;
  virtual std::int64_t layers() const = 0;
  virtual std::int64_t feature_layers() const = 0;
  virtual std::int64_t block_size() const = 0;
  virtual std::int64_t mask_token() const = 0;
  virtual void append_context(input features, position_ids positions, std::uintptr_t stream) = 0;
  virtual void forward(token_ids tokens, position_ids positions, output out, std::uintptr_t stream) = 0;
  virtual void logits(input normed, output out, std::uintptr_t stream) = 0;

  static constexpr const char* name = "DFlashDrafter";
  static constexpr constructor<layer_shape, std::int64_t, std::int64_t, std::int64_t> init{
      {"shape", "layers", "block_size", "mask_token"}};
  static constexpr auto members = std::tuple_cat(
      cached::members,
      std::tuple{fixed("hidden", &dflash_drafter::hidden), fixed("vocab", &dflash_drafter::vocab),
                 fixed("layers", &dflash_drafter::layers), fixed("feature_layers", &dflash_drafter::feature_layers),
                 fixed("block_size", &dflash_drafter::block_size), fixed("mask_token", &dflash_drafter::mask_token),
                 def("append_context", &dflash_drafter::append_context, "features", "positions", "stream"),
                 def("forward", &dflash_drafter::forward, "tokens", "positions", "out", "stream"),
                 def("logits", &dflash_drafter::logits, "normed", "out", "stream")});
};

/// blocks::moa::drafter: the target's verified cache rows (one array per target layer), then forward.
class moa_drafter : public cached {
 public:
  virtual std::int64_t hidden() const = 0;
  virtual std::int64_t verified() const = 0;
  virtual void add_verified(const std::vector<input>& keys, const std::vector<input>& values, std::int64_t first, std::int64_t count,
                            std::uintptr_t stream) = 0;
  virtual void forward(output x, position_ids positions, output features, const mask_arg& mask, std::uintptr_t stream) = 0;

  static constexpr const char* name = "MoaDrafter";
  static constexpr constructor<part_shape, part_shape, part_shape, std::int64_t, std::int64_t, float, std::int64_t> init{
      {"lsa", "sa", "ca", "target_layers", "target_head_dim", "rms_eps", "capacity"}};
  // The headers word add_verified's faults by rows ("2 tokens from 3 given", "layer 0 is [2 x 4]"):
  // first and count's.
  static constexpr auto members = std::tuple_cat(
      cached::members,
      std::tuple{fixed("hidden", &moa_drafter::hidden), state("verified", &moa_drafter::verified),
                 def("add_verified", &moa_drafter::add_verified, "keys", "values", "first", "count", "stream").faults_of("first, count"),
                 def("forward", &moa_drafter::forward, "x", "positions", "features", "mask", "stream")});
};

}  // namespace specdec_python::block
