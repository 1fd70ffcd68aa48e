// SPDX-License-Identifier: Apache-2.0
// What every source file of the binding shares: the argument checks (dtype, shape, device, strides: a
// TypeError or ValueError naming the argument), views of arrays without copying, the GIL release and
// the calling thread's host backend.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <specdec/backend/eigen.hpp>

namespace nb = nanobind;
using specdec::index_t;

namespace specdec_python {

using array = nb::ndarray<>;

template <class T>
const char* dtype_name() {
  if constexpr (std::is_same_v<T, float>) return "float32";
  if constexpr (std::is_same_v<T, double>) return "float64";
  if constexpr (std::is_same_v<T, std::int32_t>) return "int32";
  if constexpr (std::is_same_v<T, std::int64_t>) return "int64";
  if constexpr (std::is_same_v<T, std::uint8_t>) return "uint8";
  if constexpr (std::is_same_v<T, std::uint16_t>) return "uint16";
  if constexpr (std::is_same_v<T, std::uint32_t>) return "uint32";
  if constexpr (std::is_same_v<T, bool>) return "bool";
  if constexpr (std::is_const_v<T>) return dtype_name<std::remove_const_t<T>>();
  return "?";
}

inline std::string shape_of(const array& a) {
  std::string s = "(";
  for (std::size_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

/// Checks `a` (argument `name`): dtype T (TypeError), `ndim` dimensions, C-contiguous (ValueError).
template <class T>
T* checked(const array& a, const char* name, std::size_t ndim) {
  if (a.device_type() != nb::device::cpu::value)
    throw nb::value_error((std::string(name) + ": expected an array in CPU memory; got one on another device (this build of "
                           "specdec is CPU-only)").c_str());
  if (a.dtype() != nb::dtype<std::remove_const_t<T>>())
    throw nb::type_error((std::string(name) + ": expected dtype " + dtype_name<T>() + "; got another dtype").c_str());
  if (a.ndim() != ndim)
    throw nb::value_error((std::string(name) + ": expected " + std::to_string(ndim) + " dimensions; got shape " + shape_of(a)).c_str());
  std::int64_t expected = 1;
  for (std::size_t i = ndim; a.size() > 0 && i-- > 0;) {  // an empty array has no layout to check
    if (a.shape(i) > 1 && a.stride(i) != expected)
      throw nb::value_error((std::string(name) + ": expected a C-contiguous array; dimension " + std::to_string(i) + " has stride " +
                             std::to_string(a.stride(i)) + " elements where " + std::to_string(expected) + " was expected")
                                .c_str());
    expected *= static_cast<std::int64_t>(a.shape(i));
  }
  return static_cast<T*>(a.data());
}

inline void expect_shape(const array& a, const char* name, std::initializer_list<std::int64_t> want) {
  std::size_t i = 0;
  bool ok = a.ndim() == want.size();
  for (const std::int64_t w : want) ok = ok && (w < 0 || static_cast<std::int64_t>(a.shape(i++)) == w);
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
