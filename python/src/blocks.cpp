// SPDX-License-Identifier: Apache-2.0
// specdec's drafter blocks for Python: the pre-norm Llama decoder layer every drafter is made of
// (EAGLE's and Jakiro's layer, MoA's self-attention, MTP's block), EAGLE-3's block, the MTP module,
// Jakiro's layer, Amphista's heads, MoA's drafter and DFlash's block drafter, each with its KV caches.
// A block runs where its weights are: host arrays on specdec::eigen, CUDA tensors (a CUDA build) on
// that device with specdec::thrust_backend<cuda> (block_sessions.hpp and dflash_session.hpp, the same
// code for both). Weights are the caller's float32 arrays, viewed in place and kept alive by the block;
// every array of a call is on the block's device. Each class is made from its description in
// block_api.hpp: the argument conversions below are chosen by the interface's parameter types.
#include "block_api.hpp"
#include "block_sessions.hpp"
#include "common.hpp"
#include "cuda_ops.hpp"
#include "dflash_session.hpp"
#include "placement.hpp"

#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
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

/// A parameter of a block's interface as Python passes it (`type`), checked and converted by `get` for
/// the block's device. Scalars, strings and tuples are nanobind's.
template <class T>
struct from_python {
  using type = T;
  static const T& get(const T& value, const char*, int) { return value; }
};
template <class T>
struct from_python<block::matrix_arg<T>> {
  using type = array;
  static block::matrix_arg<T> get(const array& a, const char* name, int device) {
    T* p = on<T>(a, name, 2, device);
    return {name, p, static_cast<std::int64_t>(a.shape(0)), static_cast<std::int64_t>(a.shape(1))};
  }
};
template <class T>
struct from_python<block::vector_arg<T>> {
  using type = array;
  static block::vector_arg<T> get(const array& a, const char* name, int device) {
    T* p = on<T>(a, name, 1, device);
    return {name, p, static_cast<std::int64_t>(a.shape(0))};
  }
};
template <>
struct from_python<block::optional_output> : from_python<block::output> {
  static block::optional_output get(const array& a, const char* name, int device) {
    if (absent(a)) return {{name}};  // empty: left out
    return {from_python<block::output>::get(a, name, device)};
  }
};
template <>
struct from_python<block::host_offsets> : from_python<block::vector_arg<const std::int32_t>> {
  static block::host_offsets get(const array& a, const char* name, int) {
    return {from_python<block::vector_arg<const std::int32_t>>::get(a, name, host_memory)};
  }
};
/// None (causal), "none", a bool / uint8 allowed mask or a float32 additive one `[rows x cols]`.
template <>
struct from_python<block::mask_arg> {
  using type = nb::object;
  static block::mask_arg get(const nb::object& mask, const char*, int device) {
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
};
template <class T>
struct from_python<std::vector<T>> {
  using type = std::vector<typename from_python<T>::type>;
  static std::vector<T> get(const type& values, const char* name, int device) {
    std::vector<T> out;
    for (const auto& v : values) out.push_back(from_python<T>::get(v, name, device));
    return out;
  }
};
template <>
struct from_python<block::layer_shape> {
  using type = std::tuple<std::int64_t, std::int64_t, std::int64_t, float, double, std::int64_t>;
  static block::layer_shape get(const type& shape, const char*, int) {
    return std::apply([](auto... field) { return block::layer_shape{field...}; }, shape);
  }
};
template <class T>
using conversion = from_python<std::remove_cvref_t<T>>;

/// The nanobind argument `name` of parameter type T: an array or mask takes None too, for get to refuse
/// it by name.
template <class T>
auto arg_of(const char* name) {
  using type = typename conversion<T>::type;
  if constexpr (std::is_same_v<type, array> || std::is_same_v<type, nb::object>) return nb::arg(name).none();
  else return nb::arg(name);
}

/// A block as Python holds it: its weights (kept alive), its implementation on their device, and the
/// lock every method that reads or writes its state (its KV caches, its backend's scratch) takes
/// (`locked`): threads sharing a block are serialised. Its shape (the `fixed` properties) is set at
/// construction and read without it.
template <class Api>
struct bound {
  weight_set weights;
  std::unique_ptr<Api> impl;
  mutable std::mutex mutex;
};

/// Api's session on the weights' device: on the host here, on a CUDA device through cuda_ops.cu.
template <class Api>
std::unique_ptr<Api> make(const weight_set& w, const block::arguments_of<Api>& arguments) {
  if (w.device() < 0) return block::make_session<Api, specdec::eigen>(host_memory, w.map(), arguments);
#if SPECDEC_PYTHON_CUDA
  return specdec_python::cuda::device_block<Api>::make(w.device(), w.map(), arguments);
#else
  throw nb::value_error("weights: CUDA tensors need a CUDA build of specdec");
#endif
}

template <class Api, class... A, std::size_t... I>
void def_init(nb::class_<bound<Api>>& c, const block::constructor<A...>& init, std::index_sequence<I...>) {
  c.def("__init__",
        [init](bound<Api>* self, const nb::dict& weights, const typename conversion<A>::type&... a) {
          weight_set w(weights);
          std::unique_ptr<Api> impl = make<Api>(w, {conversion<A>::get(a, init.names[I], w.device())...});
          new (self) bound<Api>{std::move(w), std::move(impl), {}};
        },
        nb::arg("weights"), arg_of<A>(init.names[I])...);
}

/// A method: its arguments converted in order, then the call under the block's lock. The headers name
/// the token ids an embedding gathers its rows by row_ids: the caller's are tokens.
template <class Api, class R, class C, class... A, std::size_t N, std::size_t... I>
void def_method(nb::class_<bound<Api>>& c, const block::method<R (C::*)(A...), N>& m, std::index_sequence<I...>) {
  static_assert(N == sizeof...(A), "one name per argument");
  c.def(m.name,
        [m](bound<Api>& b, const typename conversion<A>::type&... a) -> R {
          std::tuple<std::remove_cvref_t<A>...> arguments{conversion<A>::get(a, m.args[I], b.weights.device())...};
          const auto call = [&] { return std::apply([&](const auto&... x) { return (b.impl.get()->*m.member)(x...); }, arguments); };
          return locked(b.mutex, [&] {
            return renaming({{"row_ids", "tokens"}}, [&] { return m.about ? naming(m.about, {m.args[I]...}, call) : call(); });
          });
        },
        arg_of<A>(m.args[I])...);
}

template <class Api, class F, std::size_t N>
void def_member(nb::class_<bound<Api>>& c, const block::method<F, N>& m) {
  def_method(c, m, std::make_index_sequence<N>());
}

template <class Api, class F>
void def_member(nb::class_<bound<Api>>& c, const block::property<F>& p) {
  if (p.fixed)
    c.def_prop_ro(p.name, [p](const bound<Api>& b) { return (b.impl.get()->*p.member)(); });
  else
    c.def_prop_ro(p.name, [p](const bound<Api>& b) { return locked(b.mutex, [&] { return (b.impl.get()->*p.member)(); }); });
}

template <class Api>
void def_block(nb::module_& m) {
  nb::class_<bound<Api>> c(m, Api::name);
  def_init(c, Api::init, std::make_index_sequence<std::tuple_size_v<block::arguments_of<Api>>>());
  std::apply([&](const auto&... member) { (def_member(c, member), ...); }, Api::members);
}

/// EAGLE's fusion: out = [embed(tokens) ; feature] fc^T + bias (blocks::eagle::fuse), where embed is.
void eagle_fuse(const array& tokens, const array& feature, const array& embed, const array& fc_weight, const array& fc_bias,
                const array& out, std::uintptr_t stream) {
  const auto at = device_of(embed, "embed", stream);
  const int d = at ? at->device : host_memory;
  const auto t = conversion<block::token_ids>::get(tokens, "tokens", d);
  const auto f = conversion<block::input>::get(feature, "feature", d), e = conversion<block::input>::get(embed, "embed", d),
             w = conversion<block::input>::get(fc_weight, "fc_weight", d);
  const auto bias = conversion<block::vector_arg<const float>>::get(fc_bias, "fc_bias", d);
  const auto o = conversion<block::output>::get(out, "out", d);
  // The headers name the fusion's weights by their checkpoint names, and the tokens as the embedding's row_ids.
  renaming({{"fc.weight", "fc_weight"}, {"fc.bias", "fc_bias"}, {"row_ids", "tokens"}}, [&] {
    if (d < 0) {
      without_gil([&] { block::eagle_fuse_on(host_backend(), t, f, e, w, bias, o); });
      return;
    }
#if SPECDEC_PYTHON_CUDA
    without_gil([&] { specdec_python::cuda::eagle_fuse(*at, t, f, e, w, bias, o); });
#endif
  });
}

}  // namespace

void bind_blocks(nb::module_& m) {
  def_block<block::moa_drafter>(m);
  def_block<block::amphista_heads>(m);
  def_block<block::jakiro_layer>(m);
  def_block<block::mtp_module>(m);
  m.def("eagle_fuse", &eagle_fuse, nb::arg("tokens").none(), nb::arg("feature").none(), nb::arg("embed").none(),
        nb::arg("fc_weight").none(), nb::arg("fc_bias").none(), nb::arg("out").none(), nb::arg("stream"));
  def_block<block::decoder_layer>(m);
  def_block<block::eagle3_block>(m);
  def_block<block::dflash_drafter>(m);
  m.def("dflash_target_layer_ids", [](std::int64_t target_layers, std::int64_t draft_layers) {
    const auto ids = specdec::blocks::dflash::target_layer_ids(target_layers, draft_layers);
    return std::vector<std::int64_t>(ids.begin(), ids.end());
  }, nb::arg("target_layers"), nb::arg("draft_layers"));
}
