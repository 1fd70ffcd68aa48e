// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The scalar math the kernels use on host and device alike: std:: functions are host-only
/// under nvcc, where device code calls the CUDA math library's global ones instead.
#pragma once

#include <cmath>

#include <specdec/config.hpp>

namespace specdec::detail::inline SPECDEC_ISA {

template <class T>
SPECDEC_HOST_DEVICE inline T negative_infinity() noexcept {
  return -static_cast<T>(HUGE_VAL);  // HUGE_VAL works in device code without relaxed constexpr
}

#if SPECDEC_DEVICE_CODE
#define SPECDEC_DETAIL_MATH(name, type, device_function, std_function) \
  SPECDEC_HOST_DEVICE inline type name(type x) noexcept { return ::device_function(x); }
#else
#define SPECDEC_DETAIL_MATH(name, type, device_function, std_function) \
  SPECDEC_HOST_DEVICE inline type name(type x) noexcept { return std::std_function(x); }
#endif
SPECDEC_DETAIL_MATH(exp_, float, expf, exp)
SPECDEC_DETAIL_MATH(exp_, double, exp, exp)
SPECDEC_DETAIL_MATH(log_, float, logf, log)
SPECDEC_DETAIL_MATH(log_, double, log, log)
SPECDEC_DETAIL_MATH(sqrt_, double, sqrt, sqrt)
SPECDEC_DETAIL_MATH(cos_, double, cos, cos)
SPECDEC_DETAIL_MATH(sin_, double, sin, sin)
#undef SPECDEC_DETAIL_MATH

SPECDEC_HOST_DEVICE inline double pow_(double x, double y) noexcept {
#if SPECDEC_DEVICE_CODE
  return ::pow(x, y);
#else
  return std::pow(x, y);
#endif
}

}  // namespace specdec::detail::inline SPECDEC_ISA
