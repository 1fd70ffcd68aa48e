// SPDX-License-Identifier: Apache-2.0
// Where a call of the binding runs (the host, or the CUDA device of its arrays) and its arguments
// checked for that place: shared by every binding file.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "common.hpp"
#include "cuda_ops.hpp"

namespace specdec_python {

/// Where a row primitive runs: on the host unless `a` is in CUDA memory, which a CUDA build of the
/// package takes (on that device, enqueued on `stream`) and a CPU build refuses by name.
inline std::optional<specdec_python::cuda::place> device_of(const array& a, const char* name, std::uintptr_t stream) {
  if (a.device_type() != nb::device::cuda::value) return std::nullopt;
#if SPECDEC_PYTHON_CUDA
  (void)name;
  return specdec_python::cuda::place{a.device_id(), stream};
#else
  (void)stream;
  throw nb::value_error((std::string(name) + ": expected an array in CPU memory; got one in CUDA memory (this build of specdec "
                         "is CPU-only: build the package where nvcc is found)").c_str());
#endif
}

#if SPECDEC_PYTHON_CUDA
/// A CUDA-resident argument of a call running on `at`: check_array on that device (`const T` an input,
/// `T` an output).
template <class T>
T* on_device(const array& a, const char* name, std::size_t ndim, const specdec_python::cuda::place& at) {
  return static_cast<T*>(check_array(a, name, {nb::dtype<std::remove_const_t<T>>()}, static_cast<int>(ndim),
                                     std::is_const_v<T> ? access::read : access::write, at.device));
}

/// A CUDA row matrix (`ndim` dimensions) of float32, float16 or bfloat16 on `at`'s device: its data and
/// element type (a 16-bit row read as it is). Other dtypes: a TypeError naming `name` and the dtype.
inline std::pair<const void*, specdec_python::cuda::element> device_rows(const array& a, const char* name, int ndim,
                                                                        const specdec_python::cuda::place& at) {
  const void* p = check_array(a, name, {nb::dtype<float>(), float16_dtype, bfloat16_dtype}, ndim, access::read, at.device);
  using specdec_python::cuda::element;
  return {p, a.dtype() == float16_dtype ? element::f16 : a.dtype() == bfloat16_dtype ? element::bf16 : element::f32};
}
#endif

/// An argument of a call that runs on the host (`at` empty) or on a CUDA device: checked as checked<T>
/// or on_device<T>, then against `shape` (-1: any extent). Optional arguments (`optional`) may be empty
/// arrays of any kind and device: null then.
template <class T>
T* argument(const array& a, const char* name, std::initializer_list<std::int64_t> shape,
            const std::optional<specdec_python::cuda::place>& at, bool optional = false) {
  if (optional && absent(a)) return nullptr;
  T* p = nullptr;
  if (at) {
#if SPECDEC_PYTHON_CUDA
    p = on_device<T>(a, name, shape.size(), *at);
#endif
  } else {
    p = checked<T>(a, name, shape.size());
  }
  expect_shape(a, name, shape);
  return p;
}

}  // namespace specdec_python
