// SPDX-License-Identifier: Apache-2.0
// specdec's drafter blocks for Python: the pre-norm Llama decoder layer every drafter is made of
// (EAGLE's and Jakiro's layer, MoA's self-attention, MTP's block), EAGLE-3's block, the MTP module,
// Jakiro's layer, Amphista's heads and MoA's drafter, each with its KV caches. A block runs where its
// weights are: host arrays on specdec::eigen, CUDA tensors (a CUDA build) on that device with
// specdec::thrust_backend<cuda> (block_sessions.hpp, the same code for both). Weights are the caller's
// float32 arrays, viewed in place and kept alive by the block; every array of a call is on the block's
// device.
#include "block_api.hpp"
#include "block_sessions.hpp"
#include "common.hpp"
#include "cuda_ops.hpp"

#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

using namespace specdec_python;

namespace {

/// The caller's weight arrays by checkpoint name (float32, 1 or 2 dimensions, C-contiguous; others
/// are left out, and asking for one is an error naming it), kept alive, and the device they are on:
/// -1 for host memory, else the CUDA device of all of them.
class weight_set {
 public:
  explicit weight_set(const nb::dict& weights) {
    for (const auto& [key, value] : weights) {
      std::string name;
      array a;
      if (!nb::try_cast(key, name)) throw nb::type_error("weights: expected a dict with str keys (the checkpoint's names)");
      if (!nb::try_cast(value, a)) throw nb::type_error(("weights: \"" + name + "\" is not an array").c_str());
      if (a.dtype() != nb::dtype<float>() || (a.ndim() != 1 && a.ndim() != 2)) continue;
      const int on = a.device_type() == nb::device::cuda::value ? a.device_id() : a.device_type() == nb::device::cpu::value ? -1 : -2;
      if (on == -2) throw nb::value_error(("weights: \"" + name + "\" is neither in CPU nor in CUDA memory").c_str());
      if (held_.empty()) device_ = on;
      if (on != device_)
        throw nb::value_error(("weights: \"" + name + "\" is on another device than the other weights; expected all on one").c_str());
      (void)checked<const float>(a, name.c_str(), a.ndim(), on >= 0);
      held_.push_back(a);
      map_[name] = {static_cast<const float*>(a.data()), static_cast<std::int64_t>(a.shape(0)),
                    a.ndim() == 2 ? static_cast<std::int64_t>(a.shape(1)) : 0, static_cast<int>(a.ndim())};
    }
#if !SPECDEC_PYTHON_CUDA
    if (device_ >= 0)
      throw nb::value_error("weights: expected arrays in CPU memory; got CUDA tensors (this build of specdec is CPU-only: build the "
                            "package where nvcc is found)");
#endif
  }
  int device() const { return device_; }
  const block::weight_map& map() const { return map_; }

 private:
  int device_ = -1;
  block::weight_map map_;
  std::vector<array> held_;  // viewed by the block: kept alive with it
};

/// A call's array on the block's device (`device`: -1 host): check_array there (`const T` an input, `T`
/// an output).
template <class T>
T* on(const array& a, const char* name, std::size_t ndim, int device) {
  return static_cast<T*>(check_array(a, name, {nb::dtype<std::remove_const_t<T>>()}, static_cast<int>(ndim),
                                     std::is_const_v<T> ? access::read : access::write, device));
}

/// A float32 `[rows x cols]` input on the block's device.
block::tensor tensor_of(const array& a, const char* name, int device) {
  const float* p = on<const float>(a, name, 2, device);
  return {p, static_cast<std::int64_t>(a.shape(0)), static_cast<std::int64_t>(a.shape(1)), 2};
}

/// A float32 output of the given shape on the block's device.
float* output(const array& a, const char* name, std::int64_t rows, std::int64_t cols, int device) {
  float* p = on<float>(a, name, 2, device);
  expect_shape(a, name, {rows, cols});
  return p;
}

/// An attention mask argument: None (causal), "none", a bool / uint8 allowed mask or a float32 additive
/// one `[rows x cols]`, on the block's device.
block::mask_arg mask_of(const nb::object& mask, int device) {
  if (mask.is_none()) return {};
  if (nb::isinstance<nb::str>(mask)) {
    if (nb::cast<std::string>(mask) != "none") throw nb::value_error("mask: expected None (causal), \"none\" or an array");
    return {block::mask_arg::none, nullptr, 0, 0};
  }
  array a;
  if (!nb::try_cast(mask, a)) throw nb::type_error("mask: expected None (causal), \"none\" or an array");
  // bool is one byte, 0 or 1: read as uint8
  const void* p = check_array(a, "mask", {nb::dtype<bool>(), nb::dtype<std::uint8_t>(), nb::dtype<float>()}, 2, access::read, device);
  const bool additive = a.dtype() == nb::dtype<float>();
  return {additive ? block::mask_arg::additive : block::mask_arg::allowed, p, static_cast<std::int64_t>(a.shape(0)),
          static_cast<std::int64_t>(a.shape(1))};
}

/// A block as Python holds it: its weights (kept alive), its implementation on their device, and the
/// lock every method that reads or writes its state (its KV caches, its backend's scratch) takes
/// (`locked`): threads sharing a block are serialised. Its shape (hidden, vocab, heads, cache_width) is
/// fixed at construction and read without it.
template <class Api>
struct bound {
  weight_set weights;
  std::unique_ptr<Api> impl;
  mutable std::mutex mutex;
  int device() const { return weights.device(); }
};

/// Makes the block of `Session` on the host, or through `make_cuda` on the weights' CUDA device.
template <template <class> class Session, class Api, class MakeCuda, class... Args>
std::unique_ptr<Api> make(const weight_set& w, [[maybe_unused]] MakeCuda make_cuda, const Args&... args) {
  if (w.device() < 0) return std::make_unique<Session<specdec::eigen>>(-1, w.map(), args...);
#if SPECDEC_PYTHON_CUDA
  return make_cuda(w.device(), w.map(), args...);
#else
  throw nb::value_error("weights: CUDA tensors need a CUDA build of specdec");
#endif
}

#if SPECDEC_PYTHON_CUDA
#define SPECDEC_CUDA_FACTORY(f) [](auto&&... a) { return specdec_python::cuda::f(a...); }
#else
#define SPECDEC_CUDA_FACTORY(f) [](auto&&...) -> std::nullptr_t { return nullptr; }
#endif

block::layer_shape shape_of(index_t heads, index_t kv_heads, index_t head_dim, float rms_eps, double rope_theta, index_t capacity) {
  return {heads, kv_heads, head_dim, rms_eps, rope_theta, capacity};
}

/// The constructor of a block made of its weights and one layer shape (EAGLE-3's block, Jakiro's layer).
template <template <class> class Session, class Api, class MakeCuda>
void bind_shape_init(nb::class_<bound<Api>>& c, MakeCuda make_cuda) {
  c.def("__init__",
        [make_cuda](bound<Api>* self, const nb::dict& weights, index_t heads, index_t kv_heads, index_t head_dim, float rms_eps,
                    double rope_theta, index_t capacity) {
          new (self) bound<Api>{weight_set(weights), {}, {}};
          self->impl = make<Session, Api>(self->weights, make_cuda, shape_of(heads, kv_heads, head_dim, rms_eps, rope_theta, capacity));
        },
        nb::arg("weights"), nb::arg("heads"), nb::arg("kv_heads"), nb::arg("head_dim"), nb::arg("rms_eps"), nb::arg("rope_theta"),
        nb::arg("capacity"));
}

/// The cache methods of a block's class: cache_size, crop and (where the block takes tree drafts) keep.
template <bool Keep, class Api>
void bind_cache(nb::class_<bound<Api>>& c) {
  c.def_prop_ro("cache_size", [](const bound<Api>& t) { return locked(t.mutex, [&] { return t.impl->cache_size(); }); });
  c.def("crop", [](bound<Api>& t, index_t n) { locked(t.mutex, [&] { t.impl->crop(n); }); }, nb::arg("n"));
  if constexpr (Keep)
    c.def("keep",
          [](bound<Api>& t, index_t prefix, const array& offsets, std::uintptr_t stream) {
            const auto o = span_of<const std::int32_t>(offsets, "offsets");  // host offsets: the cache's bookkeeping
            locked(t.mutex, [&] { t.impl->keep(stream, prefix, o.data(), static_cast<std::int64_t>(o.size())); });
          },
          nb::arg("prefix"), nb::arg("offsets").none(), nb::arg("stream"));
}

/// EAGLE's fusion: out = [embed(tokens) ; feature] fc^T + bias (blocks::eagle::fuse), where the arrays are.
void eagle_fuse(const array& tokens, const array& feature, const array& embed, const array& fc_weight, const array& fc_bias,
                const array& out, std::uintptr_t stream) {
  const int device = embed.device_type() == nb::device::cuda::value ? embed.device_id() : -1;
  const std::int32_t* t = on<const std::int32_t>(tokens, "tokens", 1, device);
  const auto count = static_cast<std::int64_t>(tokens.shape(0));
  const block::tensor f = tensor_of(feature, "feature", device), e = tensor_of(embed, "embed", device),
                      w = tensor_of(fc_weight, "fc_weight", device);
  const float* bias = on<const float>(fc_bias, "fc_bias", 1, device);
  const block::tensor b{bias, static_cast<std::int64_t>(fc_bias.shape(0)), 0, 1};
  float* o = output(out, "out", count, e.cols, device);
  // The headers name the fusion's weights by their checkpoint names, and the tokens as the embedding's row_ids.
  renaming({{"fc.weight", "fc_weight"}, {"fc.bias", "fc_bias"}, {"row_ids", "tokens"}}, [&] {
    if (device < 0) {
      without_gil([&] { block::eagle_fuse_on(host_backend(), t, count, f, e, w, b, o); });
      return;
    }
#if SPECDEC_PYTHON_CUDA
    without_gil([&] { specdec_python::cuda::eagle_fuse(specdec_python::cuda::place{device, stream}, t, count, f, e, w, b, o); });
#else
    (void)stream;
#endif
  });
}

}  // namespace

void bind_blocks(nb::module_& m) {
  using moa = bound<block::moa_drafter>;
  nb::class_<moa> moa_class(m, "MoaDrafter");
  moa_class
      .def("__init__",
           [](moa* self, const nb::dict& weights, const block::part_shape& lsa, const block::part_shape& sa, const block::part_shape& ca,
              index_t target_layers, index_t target_head_dim, float rms_eps, index_t capacity) {
             new (self) moa{weight_set(weights), {}, {}};
             self->impl = make<block::moa_session, block::moa_drafter>(self->weights, SPECDEC_CUDA_FACTORY(make_moa_drafter), lsa, sa, ca,
                                                                       target_layers, target_head_dim, rms_eps, capacity);
           },
           nb::arg("weights"), nb::arg("lsa"), nb::arg("sa"), nb::arg("ca"), nb::arg("target_layers"), nb::arg("target_head_dim"),
           nb::arg("rms_eps"), nb::arg("capacity"))
      .def_prop_ro("hidden", [](const moa& b) { return b.impl->hidden(); })
      .def_prop_ro("verified", [](const moa& b) { return locked(b.mutex, [&] { return b.impl->verified(); }); })
      .def("add_verified",
           [](moa& b, const std::vector<array>& keys, const std::vector<array>& values, index_t first, index_t count, std::uintptr_t stream) {
             std::vector<block::tensor> k, v;
             for (const array& a : keys) k.push_back(tensor_of(a, "keys", b.device()));
             for (const array& a : values) v.push_back(tensor_of(a, "values", b.device()));
             // The headers word its faults by rows ("2 tokens from 3 given", "layer 0 is [2 x 4]"): first and count's.
             naming("first, count", {"keys", "values", "first", "count"},
                    [&] { locked(b.mutex, [&] { b.impl->add_verified(stream, k, v, first, count); }); });
           },
           nb::arg("keys"), nb::arg("values"), nb::arg("first"), nb::arg("count"), nb::arg("stream"))
      .def("forward",
           [](moa& b, const array& x, const array& positions, const array& features, const nb::object& mask, std::uintptr_t stream) {
             float* rows = on<float>(x, "x", 2, b.device());
             const std::int64_t* pos = on<const std::int64_t>(positions, "positions", 1, b.device());
             float* f = on<float>(features, "features", 2, b.device());
             const block::mask_arg mk = mask_of(mask, b.device());
             locked(b.mutex, [&] {
               b.impl->forward(stream, rows, static_cast<std::int64_t>(x.shape(0)), static_cast<std::int64_t>(x.shape(1)), pos,
                               static_cast<std::int64_t>(positions.shape(0)), f, static_cast<std::int64_t>(features.shape(0)), mk);
             });
           },
           nb::arg("x").none(), nb::arg("positions").none(), nb::arg("features").none(), nb::arg("mask").none(), nb::arg("stream"));
  bind_cache<false>(moa_class);

  using amphista = bound<block::amphista_heads>;
  nb::class_<amphista> amphista_class(m, "AmphistaHeads");
  amphista_class
      .def("__init__",
           [](amphista* self, const nb::dict& weights, index_t heads, index_t kv_heads, index_t head_dim, index_t k_heads,
              index_t stage1_heads, float rms_eps, double rope_theta, index_t capacity) {
             new (self) amphista{weight_set(weights), {}, {}};
             self->impl = make<block::amphista_session, block::amphista_heads>(
                 self->weights, SPECDEC_CUDA_FACTORY(make_amphista_heads), shape_of(heads, kv_heads, head_dim, rms_eps, rope_theta, capacity),
                 static_cast<std::int64_t>(k_heads), static_cast<std::int64_t>(stage1_heads));
           },
           nb::arg("weights"), nb::arg("heads"), nb::arg("kv_heads"), nb::arg("head_dim"), nb::arg("k_heads"), nb::arg("stage1_heads"),
           nb::arg("rms_eps"), nb::arg("rope_theta"), nb::arg("capacity"))
      .def_prop_ro("hidden", [](const amphista& b) { return b.impl->hidden(); })
      .def_prop_ro("heads", [](const amphista& b) { return b.impl->heads(); })
      .def_prop_ro("vocab", [](const amphista& b) { return b.impl->vocab(); })
      .def("forward",
           [](amphista& b, const array& feature, const array& embedding, const array& positions, const array& s1, const array& s2,
              const array& z, const array& u, const array& o, const array& logits, std::uintptr_t stream) {
             const int d = b.device();
             const block::tensor f = tensor_of(feature, "feature", d), em = tensor_of(embedding, "embedding", d);
             const std::int64_t t = f.rows, e = b.impl->hidden(), k = b.impl->heads();
             expect_shape(embedding, "embedding", {t, e});
             const std::int64_t* pos = on<const std::int64_t>(positions, "positions", 1, d);
             expect_shape(positions, "positions", {t});
             float* p1 = output(s1, "s1", t, e, d);
             float* p2 = output(s2, "s2", t, e, d);
             float* pz = output(z, "z", k, e, d);
             float* pu = output(u, "u", k, e, d);
             float* po = output(o, "o", k, e, d);
             float* pl = output(logits, "logits", k, b.impl->vocab(), d);
             locked(b.mutex, [&] { b.impl->forward(stream, f, em, pos, p1, p2, pz, pu, po, pl); });
           },
           nb::arg("feature").none(), nb::arg("embedding").none(), nb::arg("positions").none(), nb::arg("s1").none(),
           nb::arg("s2").none(), nb::arg("z").none(), nb::arg("u").none(), nb::arg("o").none(), nb::arg("logits").none(),
           nb::arg("stream"));
  bind_cache<false>(amphista_class);

  using jakiro = bound<block::jakiro_layer>;
  nb::class_<jakiro> jakiro_class(m, "JakiroLayer");
  bind_shape_init<block::jakiro_session>(jakiro_class, SPECDEC_CUDA_FACTORY(make_jakiro_layer));
  jakiro_class.def_prop_ro("hidden", [](const jakiro& b) { return b.impl->hidden(); })
      .def("forward",
           [](jakiro& b, const array& tokens, const array& feature, const array& positions, const nb::object& mask, const array& left,
              const array& right, std::uintptr_t stream) {
             const int d = b.device();
             const std::int32_t* t = on<const std::int32_t>(tokens, "tokens", 1, d);
             const auto count = static_cast<std::int64_t>(tokens.shape(0));
             const block::tensor f = tensor_of(feature, "feature", d);
             expect_shape(feature, "feature", {count, -1});  // one row per token: before the outputs sized by it
             const std::int64_t* pos = on<const std::int64_t>(positions, "positions", 1, d);
             float* l = output(left, "left", f.rows, b.impl->hidden(), d);
             float* r = absent(right) ? nullptr : output(right, "right", f.rows, b.impl->hidden(), d);  // empty: not contrastive
             const block::mask_arg mk = mask_of(mask, d);
             renaming({{"row_ids", "tokens"}}, [&] { locked(b.mutex, [&] { b.impl->forward(stream, t, count, f, pos, mk, l, r); }); });
           },
           nb::arg("tokens").none(), nb::arg("feature").none(), nb::arg("positions").none(), nb::arg("mask").none(),
           nb::arg("left").none(), nb::arg("right").none(), nb::arg("stream"));
  bind_cache<true>(jakiro_class);

  using mtp = bound<block::mtp_module>;
  nb::class_<mtp> mtp_class(m, "MtpModule");
  mtp_class
      .def("__init__",
           [](mtp* self, const nb::dict& weights, const std::string& prefix, index_t heads, index_t kv_heads, index_t head_dim,
              float rms_eps, double rope_theta, bool zero_embedding_at_position_0, index_t capacity) {
             new (self) mtp{weight_set(weights), {}, {}};
             self->impl = make<block::mtp_session, block::mtp_module>(self->weights, SPECDEC_CUDA_FACTORY(make_mtp_module), prefix,
                                                                      shape_of(heads, kv_heads, head_dim, rms_eps, rope_theta, capacity),
                                                                      zero_embedding_at_position_0);
           },
           nb::arg("weights"), nb::arg("prefix"), nb::arg("heads"), nb::arg("kv_heads"), nb::arg("head_dim"), nb::arg("rms_eps"),
           nb::arg("rope_theta"), nb::arg("zero_embedding_at_position_0"), nb::arg("capacity"))
      .def_prop_ro("hidden", [](const mtp& b) { return b.impl->hidden(); })
      .def_prop_ro("vocab", [](const mtp& b) { return b.impl->vocab(); })
      .def("forward",
           [](mtp& b, const array& tokens, const array& hidden, const array& positions, const nb::object& mask, const array& out,
              const array& projected, std::uintptr_t stream) {
             const int d = b.device();
             const std::int32_t* t = on<const std::int32_t>(tokens, "tokens", 1, d);
             const auto count = static_cast<std::int64_t>(tokens.shape(0));
             const block::tensor h = tensor_of(hidden, "hidden", d);
             const std::int64_t* pos = on<const std::int64_t>(positions, "positions", 1, d);
             float* o = output(out, "out", h.rows, b.impl->hidden(), d);
             float* x = absent(projected) ? nullptr : output(projected, "projected", h.rows, b.impl->hidden(), d);  // empty: none
             const block::mask_arg mk = mask_of(mask, d);
             renaming({{"row_ids", "tokens"}}, [&] { locked(b.mutex, [&] { b.impl->forward(stream, t, count, h, pos, mk, o, x); }); });
           },
           nb::arg("tokens").none(), nb::arg("hidden").none(), nb::arg("positions").none(), nb::arg("mask").none(),
           nb::arg("out").none(), nb::arg("projected").none(), nb::arg("stream"))
      .def("logits",
           [](mtp& b, const array& o, const array& out, std::uintptr_t stream) {
             const block::tensor h = tensor_of(o, "o", b.device());
             float* r = output(out, "out", h.rows, b.impl->vocab(), b.device());
             locked(b.mutex, [&] { b.impl->logits(stream, h, r); });
           },
           nb::arg("o").none(), nb::arg("out").none(), nb::arg("stream"));
  bind_cache<false>(mtp_class);

  m.def("eagle_fuse", &eagle_fuse, nb::arg("tokens").none(), nb::arg("feature").none(), nb::arg("embed").none(),
        nb::arg("fc_weight").none(), nb::arg("fc_bias").none(), nb::arg("out").none(), nb::arg("stream"));

  using layer = bound<block::decoder_layer>;
  nb::class_<layer> layer_class(m, "DecoderLayer");
  layer_class
      .def("__init__",
           [](layer* self, const nb::dict& weights, const std::string& prefix, index_t heads, index_t kv_heads, index_t head_dim,
              float rms_eps, double rope_theta, bool input_norm, index_t capacity) {
             new (self) layer{weight_set(weights), {}, {}};
             self->impl = make<block::decoder_layer_session, block::decoder_layer>(
                 self->weights, SPECDEC_CUDA_FACTORY(make_decoder_layer), prefix,
                 shape_of(heads, kv_heads, head_dim, rms_eps, rope_theta, capacity), input_norm);
           },
           nb::arg("weights"), nb::arg("prefix"), nb::arg("heads"), nb::arg("kv_heads"), nb::arg("head_dim"), nb::arg("rms_eps"),
           nb::arg("rope_theta"), nb::arg("input_norm"), nb::arg("capacity"))
      .def_prop_ro("cache_width", [](const layer& b) { return b.impl->cache_width(); })
      .def_prop_ro("device", [](const layer& b) { return b.device(); })
      .def("forward",
           [](layer& b, const array& x, const array& positions, const nb::object& mask, std::uintptr_t stream) {
             float* rows = on<float>(x, "x", 2, b.device());
             const std::int64_t* pos = on<const std::int64_t>(positions, "positions", 1, b.device());
             const block::mask_arg mk = mask_of(mask, b.device());
             locked(b.mutex, [&] {
               b.impl->forward(stream, rows, static_cast<std::int64_t>(x.shape(0)), static_cast<std::int64_t>(x.shape(1)), pos,
                               static_cast<std::int64_t>(positions.shape(0)), mk);
             });
           },
           nb::arg("x").none(), nb::arg("positions").none(), nb::arg("mask").none(), nb::arg("stream"))
      .def("cached",
           [](layer& b, bool keys, const array& out, std::uintptr_t stream) {
             // out's shape is checked against the cache under the lock that the copy holds: checked before
             // it, another thread's forward could grow the cache in between and the copy overrun out.
             locked(b.mutex, [&] {
               float* o = output(out, "out", b.impl->cache_size(), b.impl->cache_width(), b.device());
               b.impl->cached_rows(stream, keys, o);
             });
           },
           nb::arg("keys"), nb::arg("out").none(), nb::arg("stream"));
  bind_cache<true>(layer_class);

  using eagle3 = bound<block::eagle3_block>;
  nb::class_<eagle3> eagle3_class(m, "Eagle3Block");
  bind_shape_init<block::eagle3_session>(eagle3_class, SPECDEC_CUDA_FACTORY(make_eagle3_block));
  eagle3_class.def_prop_ro("hidden", [](const eagle3& b) { return b.impl->hidden(); })
      .def_prop_ro("draft_vocab", [](const eagle3& b) { return b.impl->draft_vocab(); })
      .def("fuse",
           [](eagle3& b, const array& taps, const array& out, std::uintptr_t stream) {
             const block::tensor t = tensor_of(taps, "taps", b.device());
             float* o = output(out, "out", t.rows, b.impl->hidden(), b.device());
             locked(b.mutex, [&] { b.impl->fuse(stream, t, o); });
           },
           nb::arg("taps").none(), nb::arg("out").none(), nb::arg("stream"))
      .def("forward",
           [](eagle3& b, const array& tokens, const array& hidden, const array& positions, const nb::object& mask, const array& out,
              std::uintptr_t stream) {
             const int d = b.device();
             const std::int32_t* t = on<const std::int32_t>(tokens, "tokens", 1, d);
             const auto count = static_cast<std::int64_t>(tokens.shape(0));
             const block::tensor h = tensor_of(hidden, "hidden", d);
             const std::int64_t* pos = on<const std::int64_t>(positions, "positions", 1, d);
             float* o = output(out, "out", h.rows, b.impl->hidden(), d);
             const block::mask_arg mk = mask_of(mask, d);
             renaming({{"row_ids", "tokens"}}, [&] { locked(b.mutex, [&] { b.impl->forward(stream, t, count, h, pos, mk, o); }); });
           },
           nb::arg("tokens").none(), nb::arg("hidden").none(), nb::arg("positions").none(), nb::arg("mask").none(),
           nb::arg("out").none(), nb::arg("stream"))
      .def("logits",
           [](eagle3& b, const array& h2, const array& out, std::uintptr_t stream) {
             const block::tensor h = tensor_of(h2, "h2", b.device());
             float* o = output(out, "out", h.rows, b.impl->draft_vocab(), b.device());
             locked(b.mutex, [&] { b.impl->logits(stream, h, o); });
           },
           nb::arg("h2").none(), nb::arg("out").none(), nb::arg("stream"));
  bind_cache<true>(eagle3_class);
}
