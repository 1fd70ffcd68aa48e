// SPDX-License-Identifier: Apache-2.0
// What every source file of the binding shares: the one check of an array argument (device, dtype,
// dimensions, strides, writability: a TypeError or ValueError naming the argument), views of arrays
// without copying, the GIL release, the per-object lock of the stateful classes and the calling
// thread's host backend.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cctype>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <mutex>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <specdec/backend/eigen.hpp>

#if !defined(SPECDEC_PYTHON_CUDA)
#define SPECDEC_PYTHON_CUDA 0
#endif

namespace nb = nanobind;
using specdec::index_t;

namespace specdec_python {

/// The DLPack C exchange API (DLPack 1.2+, `__dlpack_c_exchange_api__` on the tensor type: PyTorch
/// >= 2.9), as far as the binding reads it; the layouts are DLPack's ABI (dlpack.h).
struct dl_tensor {
  void* data;
  std::int32_t device_type, device_id;
  std::int32_t ndim;
  nb::dlpack::dtype dtype;
  std::int64_t* shape;
  std::int64_t* strides;
  std::uint64_t byte_offset;
};
struct dl_exchange_api {
  std::uint32_t major, minor;
  const dl_exchange_api* prev_api;
  void* managed_tensor_allocator;
  void* managed_tensor_from_py_object_no_sync;
  void* managed_tensor_to_py_object_no_sync;
  int (*dltensor_from_py_object_no_sync)(void* py_object, dl_tensor* out);
  void* current_work_stream;
};

/// The exchange API of `object`'s type, or null (numpy arrays, older frameworks: nanobind's importer,
/// which calls `__dlpack__`, serves them). One lookup per type, cached for the last few types seen (the
/// GIL is held): a call that mixes torch tensors and numpy arrays (an empty numpy array for an absent
/// output, say) then finds both, where a one-type cache looked numpy's type up again on every call,
/// an AttributeError each time (measured +1.5 us per call). A cached type is kept alive by the cache,
/// so its address cannot be reused by another type while it is there.
inline const dl_exchange_api* exchange_api_of(PyObject* object) noexcept {
  struct entry {
    PyTypeObject* type = nullptr;
    const dl_exchange_api* api = nullptr;
  };
  static entry cache[4];
  static unsigned next = 0;
  PyTypeObject* type = Py_TYPE(object);
  for (const entry& e : cache)
    if (e.type == type) return e.api;
  const dl_exchange_api* api = nullptr;
  if (PyObject* capsule = PyObject_GetAttrString(reinterpret_cast<PyObject*>(type), "__dlpack_c_exchange_api__")) {
    if (PyCapsule_CheckExact(capsule)) api = static_cast<const dl_exchange_api*>(PyCapsule_GetPointer(capsule, "dlpack_exchange_api"));
    Py_DECREF(capsule);
  }
  PyErr_Clear();
  if (api != nullptr && (api->major != 1 || api->dltensor_from_py_object_no_sync == nullptr)) api = nullptr;
  entry& slot = cache[next++ % 4];
  Py_XDECREF(reinterpret_cast<PyObject*>(slot.type));
  Py_INCREF(reinterpret_cast<PyObject*>(type));
  slot = {type, api};
  return api;
}

/// An array argument: a view of a numpy array, torch tensor or any DLPack producer. Torch tensors are
/// viewed through the DLPack C exchange API (one C call, ~0.3 us), where `__dlpack__` costs ~3 us per
/// argument; everything else through nanobind's importer. Read-only arrays (np.frombuffer, a memmap,
/// `setflags(write=False)`) are accepted and marked: they may be inputs, and check_array refuses them as
/// outputs by name (nanobind's writable importer refuses them with an unnamed TypeError). Anything else
/// (a list, None, a string) is accepted too, as no array (`other` names its type), so that check_array
/// refuses it with the argument's name instead of nanobind's "incompatible function arguments".
struct array : nb::ndarray<> {
  array() = default;
  explicit array(nb::ndarray<>&& a, bool can_write = true) noexcept : nb::ndarray<>(std::move(a)), writable(can_write) {}
  bool writable = true;
  const char* other = nullptr;  // not an array: its Python type's name (the object outlives the call)
};

inline std::string shape_of(const array& a) {
  std::string s = "(";
  for (std::size_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

/// A dtype as numpy names it ("float32", "int64", "bool"), for messages.
inline std::string dtype_text(const nb::dlpack::dtype& d) {
  using code = nb::dlpack::dtype_code;
  if (d.code == static_cast<std::uint8_t>(code::Bool)) return "bool";
  const char* kind = d.code == static_cast<std::uint8_t>(code::Int)       ? "int"
                     : d.code == static_cast<std::uint8_t>(code::UInt)    ? "uint"
                     : d.code == static_cast<std::uint8_t>(code::Float)   ? "float"
                     : d.code == static_cast<std::uint8_t>(code::Bfloat)  ? "bfloat"
                     : d.code == static_cast<std::uint8_t>(code::Complex) ? "complex"
                                                                          : "unknown";
  std::string s = kind + std::to_string(d.bits);
  if (d.lanes != 1) s += "x" + std::to_string(d.lanes);
  return s;
}

/// How a call uses an argument: reads it (a read-only array is fine) or writes it (an output).
enum class access { read, write };

/// Where an argument's memory must be: `host_memory` (CPU), a CUDA device index (>= 0), or
/// `any_memory` (the caller checked the device).
inline constexpr int host_memory = -1;
inline constexpr int any_memory = -2;

/// The one check of an array argument `name`, every rule with an error naming it, before anything is
/// read, written or allocated: an array at all, its memory (`device`), its dtype (one of `dtypes`; empty: any; a
/// TypeError naming the dtype it has), `ndim` dimensions (-1: any; 0-d arrays are refused like any
/// other count), C-contiguous (a strided view is refused, never copied: the call would read or write
/// other memory than the caller's), and for an output (`access::write`) writable. Returns its data.
inline void* check_array(const array& a, const char* name, std::initializer_list<nb::dlpack::dtype> dtypes, int ndim, access mode,
                         int device = host_memory) {
  if (!a.is_valid())
    throw nb::type_error((std::string(name) + ": expected an array (numpy, torch or another DLPack or buffer-protocol producer); got " +
                          (a.other != nullptr ? a.other : "something else"))
                             .c_str());
  const bool on_cuda = a.device_type() == nb::device::cuda::value;
  if (device == host_memory && a.device_type() != nb::device::cpu::value)
    throw nb::value_error((std::string(name) + ": expected an array in CPU memory; got one in " + (on_cuda ? "CUDA" : "another device's") +
                           " memory" + (SPECDEC_PYTHON_CUDA ? " (the call runs where its first array is)" : " (this build of specdec is CPU-only)"))
                              .c_str());
  if (device >= 0 && (!on_cuda || a.device_id() != device))
    throw nb::value_error((std::string(name) + ": expected an array on CUDA device " + std::to_string(device) + " (the call's device); got one " +
                           (on_cuda ? "on CUDA device " + std::to_string(a.device_id()) : std::string("in another memory")))
                              .c_str());
  if (dtypes.size() > 0) {
    bool ok = false;
    std::string want;
    for (const nb::dlpack::dtype& d : dtypes) {
      ok = ok || a.dtype() == d;
      want += (want.empty() ? "" : " or ") + dtype_text(d);
    }
    if (!ok) throw nb::type_error((std::string(name) + ": expected dtype " + want + "; got " + dtype_text(a.dtype())).c_str());
  }
  if (ndim >= 0 && a.ndim() != static_cast<std::size_t>(ndim))
    throw nb::value_error((std::string(name) + ": expected " + std::to_string(ndim) + " dimensions; got shape " + shape_of(a)).c_str());
  std::int64_t expected = 1;
  for (std::size_t i = a.ndim(); a.size() > 0 && i-- > 0;) {  // an empty array has no layout to check
    if (a.shape(i) > 1 && a.stride(i) != expected)
      throw nb::value_error((std::string(name) + ": expected a C-contiguous array; dimension " + std::to_string(i) + " has stride " +
                             std::to_string(a.stride(i)) + " elements where " + std::to_string(expected) + " was expected")
                                .c_str());
    expected *= static_cast<std::int64_t>(a.shape(i));
  }
  if (mode == access::write && !a.writable)
    throw nb::value_error((std::string(name) + ": expected a writable array (the call writes its result there); got a read-only one").c_str());
  return a.data();
}

/// Whether optional argument `a` is absent: an empty array (a list, None or anything else that is not
/// an array is present, and check_array refuses it by name; nanobind gives it size 0).
inline bool absent(const array& a) { return a.is_valid() && a.size() == 0; }

/// check_array for one element type T: `const T` is an input, `T` an output; in CPU memory unless
/// `device_memory` (the caller checked its device).
template <class T>
T* checked(const array& a, const char* name, std::size_t ndim, bool device_memory = false) {
  return static_cast<T*>(check_array(a, name, {nb::dtype<std::remove_const_t<T>>()}, static_cast<int>(ndim),
                                     std::is_const_v<T> ? access::read : access::write, device_memory ? any_memory : host_memory));
}

inline void expect_shape(const array& a, const char* name, std::initializer_list<std::int64_t> want) {
  std::size_t i = 0;
  bool ok = a.ndim() == want.size();
  for (const std::int64_t w : want) {
    ok = ok && (w < 0 || static_cast<std::int64_t>(a.shape(i)) == w);
    ++i;  // past a wildcard too
  }
  if (ok) return;
  std::string s = "(";
  i = 0;
  for (const std::int64_t w : want) s += (i++ ? ", " : "") + (w < 0 ? std::string("*") : std::to_string(w));
  throw nb::value_error((std::string(name) + ": expected shape " + s + (want.size() == 1 ? ",)" : ")") + "; got " + shape_of(a)).c_str());
}

template <class T>
specdec::matrix_view<T> matrix_of(const array& a, const char* name) {
  T* p = checked<T>(a, name, 2);
  return {p, static_cast<index_t>(a.shape(0)), static_cast<index_t>(a.shape(1))};
}

/// The dtypes of rows the row primitives read: float32, float16 and bfloat16 (torch's bf16 tensors through
/// DLPack; numpy arrays of ml_dtypes.bfloat16 through the caster below).
inline constexpr nb::dlpack::dtype float16_dtype{static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
inline constexpr nb::dlpack::dtype bfloat16_dtype{static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1};

/// Calls `f` with the `[rows x V]` host view of input `a` in its own element type (`const float`, `const
/// specdec::float16` or `const specdec::bfloat16`): a 16-bit row is read as it is, never copied to float32.
/// Refuses any other dtype with a TypeError naming `name` and the dtype received.
template <class F>
decltype(auto) with_rows(const array& a, const char* name, F&& f) {
  void* p = check_array(a, name, {nb::dtype<float>(), float16_dtype, bfloat16_dtype}, 2, access::read);
  const auto rows = static_cast<index_t>(a.shape(0)), cols = static_cast<index_t>(a.shape(1));
  if (a.dtype() == float16_dtype) return f(specdec::matrix_view<const specdec::float16>(static_cast<const specdec::float16*>(p), rows, cols));
  if (a.dtype() == bfloat16_dtype) return f(specdec::matrix_view<const specdec::bfloat16>(static_cast<const specdec::bfloat16*>(p), rows, cols));
  return f(specdec::matrix_view<const float>(static_cast<const float*>(p), rows, cols));
}

/// Calls `f` with the data of `ndim`-dimensional host array `a` as a pointer to its own element type
/// (`float`, `specdec::float16` or `specdec::bfloat16`; const when `mode` reads): a 16-bit array is read
/// or written as it is. Refuses any other dtype with a TypeError naming `name` and the dtype received.
template <class F>
decltype(auto) with_elements(const array& a, const char* name, int ndim, access mode, F&& f) {
  void* p = check_array(a, name, {nb::dtype<float>(), float16_dtype, bfloat16_dtype}, ndim, mode);
  if (a.dtype() == float16_dtype) return f(static_cast<specdec::float16*>(p));
  if (a.dtype() == bfloat16_dtype) return f(static_cast<specdec::bfloat16*>(p));
  return f(static_cast<float*>(p));
}

/// Refuses `b` (argument `b_name`) unless it has `a`'s dtype: a TypeError naming `b`, the dtype expected
/// (`a_name`'s) and the one received, before anything is read.
inline void expect_same_dtype(const array& b, const char* b_name, const array& a, const char* a_name) {
  if (b.is_valid() && a.is_valid() && b.dtype() != a.dtype())
    throw nb::type_error((std::string(b_name) + ": expected dtype " + dtype_text(a.dtype()) + " (the dtype of " + a_name + "); got " +
                          dtype_text(b.dtype()))
                             .c_str());
}

template <class T>
std::span<T> span_of(const array& a, const char* name) {
  T* p = checked<T>(a, name, 1);
  return {p, static_cast<std::size_t>(a.shape(0))};
}

/// The C++ work of a call, with the GIL released (the arrays stay alive: the caller holds them).
template <class F>
void without_gil(F&& f) {
  nb::gil_scoped_release released;
  f();
}

/// The lock of a stateful object (a builder, a block with its KV cache): every method that reads or
/// writes the object's state runs `f` through this, so that threads sharing the object are serialised.
/// The GIL is released first and the mutex taken after: a thread waiting for the mutex never holds the
/// GIL, which the holder may need to finish (taking them in the other order deadlocks). `f` must not
/// touch Python objects; checks that depend on the object's state (a cache's size) belong inside `f`,
/// where no other thread can change it between the check and the use.
template <class F>
decltype(auto) locked(std::mutex& mutex, F&& f) {
  nb::gil_scoped_release released;
  const std::lock_guard<std::mutex> hold(mutex);
  return f();
}

/// Runs `f`; a specdec error (the headers' invalid_argument) that names none of the call's arguments
/// (`names`) leaves prefixed with `prefix`, the arguments it is about: for calls whose headers word a
/// fault by their own name for the caller's argument ("logits row 1 contains NaN" of expand's
/// frontier_logits, "a link of request 0" of SGLang's retrive_next_token / retrive_next_sibling).
template <class F>
decltype(auto) naming(const char* prefix, std::initializer_list<const char*> names, F&& f) {
  try {
    return f();
  } catch (const specdec::invalid_argument& e) {
    const std::string message = e.what();
    for (const char* name : names)
      if (message.find(name) != std::string::npos) throw;
    throw nb::value_error((std::string(prefix) + ": " + message).c_str());
  }
}

/// Runs `f`; a specdec error leaves with the headers' names of arguments replaced by the caller's, where
/// they differ (`renames`: {header's, caller's} pairs, whole words: vLLM's uniform_probs is the header's
/// uniforms, eagle_fuse's fc_weight its fc.weight).
template <class F>
decltype(auto) renaming(std::initializer_list<std::pair<const char*, const char*>> renames, F&& f) {
  try {
    return f();
  } catch (const specdec::invalid_argument& e) {
    std::string message = e.what();
    const auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; };
    for (const auto& [from, to] : renames) {
      const std::size_t n = std::strlen(from);
      for (std::size_t at = message.find(from); at != std::string::npos; at = message.find(from, at + 1)) {
        if ((at > 0 && word(message[at - 1])) || (at + n < message.size() && word(message[at + n]))) continue;
        message.replace(at, n, to);
      }
    }
    throw nb::value_error(message.c_str());
  }
}

/// The calling thread's backend: its scratch arena persists between calls (a backend object is not
/// shared between threads; each Python thread gets its own).
inline specdec::eigen& host_backend() {
  thread_local specdec::eigen b;
  return b;
}

/// A new 1-D numpy array that takes over `values` (no copy).
template <class T>
nb::ndarray<nb::numpy, T> to_numpy(std::vector<T>&& values) {
  auto* owned = new std::vector<T>(std::move(values));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(owned->data(), {owned->size()}, owner);
}

/// A new 2-D numpy array `[rows x cols]` that takes over `values` (row-major, rows x cols of them).
template <class T>
nb::ndarray<nb::numpy, T> to_numpy(std::vector<T>&& values, std::size_t rows, std::size_t cols) {
  auto* owned = new std::vector<T>(std::move(values));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(owned->data(), {rows, cols}, owner);
}

}  // namespace specdec_python

namespace nanobind::detail {
template <>
struct type_caster<specdec_python::array> {
  NB_TYPE_CASTER(specdec_python::array, const_name("ndarray"))

  bool from_python(handle src, uint32_t flags, cleanup_list* cleanup) noexcept {
    if (src.is_none()) {  // no array (nanobind's importer would give an empty view of it): check_array names it
      value = specdec_python::array();
      value.other = "NoneType";
      return true;
    }
    if (const specdec_python::dl_exchange_api* api = specdec_python::exchange_api_of(src.ptr())) {
      specdec_python::dl_tensor t;
      if (api->dltensor_from_py_object_no_sync(src.ptr(), &t) == 0) {
        try {
          size_t shape[8];
          if (t.ndim < 0 || t.ndim > 8) return false;
          for (int32_t i = 0; i < t.ndim; ++i) shape[i] = static_cast<size_t>(t.shape[i]);
          value = specdec_python::array(nanobind::ndarray<>(t.data, static_cast<size_t>(t.ndim), shape, src, t.strides, t.dtype,
                                                            t.device_type, t.device_id, 0, t.byte_offset));
          return true;
        } catch (...) {
          PyErr_Clear();
          return false;
        }
      }
      PyErr_Clear();
    }
    make_caster<nanobind::ndarray<>> inner;
    if (inner.from_python(src, flags, cleanup)) {
      value = specdec_python::array(std::move(inner.value));
      return true;
    }
    // Not writable: a read-only array (its import as writable failed; nothing else constrains it).
    make_caster<nanobind::ndarray<nanobind::ro>> read_only;
    if (read_only.from_python(src, flags, cleanup)) {
      value = specdec_python::array(nanobind::ndarray<>(read_only.value), false);
      return true;
    }
    PyErr_Clear();
    if (from_ml_dtypes_bfloat16(src, flags, cleanup)) return true;
    value = specdec_python::array();
    value.other = Py_TYPE(src.ptr())->tp_name;
    return true;
  }

  /// A numpy array of ml_dtypes.bfloat16 (what numpy code holds bf16 rows in): numpy exports it through
  /// neither DLPack nor the buffer protocol, so its memory is imported as uint16 (a view, no copy) and
  /// marked bfloat16. Tried only after the other importers failed, so other arrays pay nothing for it.
  bool from_ml_dtypes_bfloat16(handle src, uint32_t flags, cleanup_list* cleanup) noexcept {
    try {
      if (!nanobind::hasattr(src, "dtype") || !nanobind::hasattr(src, "view")) return false;
      const nanobind::object dtype = src.attr("dtype");
      if (!nanobind::hasattr(dtype, "name") || nanobind::cast<std::string>(dtype.attr("name")) != "bfloat16" ||
          nanobind::cast<int>(dtype.attr("itemsize")) != 2)
        return false;
      const nanobind::object bits = src.attr("view")("uint16");
      make_caster<nanobind::ndarray<>> inner;
      bool writable = true;
      if (!inner.from_python(bits, flags, cleanup)) {
        PyErr_Clear();
        make_caster<nanobind::ndarray<nanobind::ro>> read_only;
        if (!read_only.from_python(bits, flags, cleanup)) return false;
        inner.value = nanobind::ndarray<>(read_only.value);
        writable = false;
      }
      const nanobind::ndarray<>& u = inner.value;
      size_t shape[8];
      int64_t strides[8];
      if (u.ndim() > 8) return false;
      for (size_t i = 0; i < u.ndim(); ++i) {
        shape[i] = u.shape(i);
        strides[i] = u.stride(i);
      }
      value = specdec_python::array(nanobind::ndarray<>(u.data(), u.ndim(), shape, src, strides, specdec_python::bfloat16_dtype,
                                                        u.device_type(), u.device_id()),
                                    writable);
      return true;
    } catch (...) {
      PyErr_Clear();
      return false;
    }
  }

  static handle from_cpp(const specdec_python::array& a, rv_policy policy, cleanup_list* cleanup) noexcept {
    return make_caster<nanobind::ndarray<>>::from_cpp(a, policy, cleanup);
  }
};
}  // namespace nanobind::detail
