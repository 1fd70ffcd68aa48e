// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief A fixed-size array usable in device code. std::array's members are host-only under nvcc,
/// and views and the Philox counters are used inside kernels.
#pragma once

#include <specdec/config.hpp>

namespace specdec {

/// N values of T; an aggregate, so `device_array<int, 2>{a, b}` works as for std::array.
template <class T, int N>
struct device_array {
  T values[N];
  SPECDEC_HOST_DEVICE constexpr T& operator[](int i) noexcept { return values[i]; }
  SPECDEC_HOST_DEVICE constexpr const T& operator[](int i) const noexcept { return values[i]; }
  friend constexpr bool operator==(const device_array&, const device_array&) = default;
};

}  // namespace specdec
