// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Memory-space tags carried in the type of every view, so that host memory is never handed
/// to a device kernel (or the reverse) by accident: such a mix is a compile error, not a crash.
#pragma once

#include <type_traits>

namespace specdec {

/// Ordinary CPU memory: std::vector, Eigen matrices, thrust::cpp / thrust::omp vectors.
struct host_space {};
/// Memory only a CUDA device can dereference (cudaMalloc, thrust::cuda::vector).
struct device_space {};

template <class Space>
inline constexpr bool is_memory_space_v =
    std::is_same_v<Space, host_space> || std::is_same_v<Space, device_space>;

}  // namespace specdec
