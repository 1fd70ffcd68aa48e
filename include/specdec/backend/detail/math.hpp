// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The scalar math the kernels use on host and device alike: std:: functions are host-only
/// under nvcc, where device code calls the CUDA math library's global ones instead.
#pragma once

#include <cmath>
#include <cstdint>

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

/// In-place heapsort of ids[0, n) into `before` order, O(n log n), no allocation, host and device (team
/// jobs sort in their scratch). Ours rather than thrust::sort(thrust::seq): the latter binds a reference
/// to a null policy pointer inside Thrust 3.0 (reported by UBSan).
template <class Before>
SPECDEC_HOST_DEVICE inline void heap_sort(std::int32_t* ids, std::int64_t n, Before before) {
  // Max-heap on "comes later", so popping the root to the back leaves the earliest entries in front.
  const auto sift_down = [&](std::int64_t root, std::int64_t end) {
    while (2 * root + 1 < end) {
      std::int64_t child = 2 * root + 1;
      if (child + 1 < end && before(ids[child], ids[child + 1])) ++child;
      if (!before(ids[root], ids[child])) return;
      const std::int32_t t = ids[root];
      ids[root] = ids[child];
      ids[child] = t;
      root = child;
    }
  };
  for (std::int64_t start = n / 2; start-- > 0;) sift_down(start, n);
  for (std::int64_t end = n - 1; end > 0; --end) {
    const std::int32_t t = ids[0];
    ids[0] = ids[end];
    ids[end] = t;
    sift_down(0, end);
  }
}

}  // namespace specdec::detail::inline SPECDEC_ISA
