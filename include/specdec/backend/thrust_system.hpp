// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The Thrust systems a `specdec::thrust_backend<System>` backend runs on: `cpp` (serial host),
/// `omp` (OpenMP host threads, when the translation unit is compiled with OpenMP), `cuda` (only when
/// compiled by nvcc), and `device`, the one chosen at configure time (`SPECDEC_THRUST_DEVICE_SYSTEM`).
/// Requires Thrust (link `specdec::thrust`).
#pragma once

#include <thrust/system/cpp/execution_policy.h>
#if defined(_OPENMP)
#include <thrust/system/omp/execution_policy.h>
#endif
#if defined(__CUDACC__)
#include <thrust/system/cuda/execution_policy.h>
#endif

#include <specdec/config.hpp>
#include <specdec/core/memory_space.hpp>

namespace specdec {

/// Thrust systems a `specdec::thrust` backend can run on.
namespace thrust_system {
/// Serial host execution (thrust::cpp::par).
struct cpp {
  using memory_space = host_space;
  static auto policy() { return ::thrust::cpp::par; }
};
#if defined(_OPENMP)
/// OpenMP host threads (thrust::omp::par).
struct omp {
  using memory_space = host_space;
  static auto policy() { return ::thrust::omp::par; }
};
#endif
#if defined(__CUDACC__)
/// A CUDA device (thrust::cuda::par); views are in device memory.
struct cuda {
  using memory_space = device_space;
  static auto policy() { return ::thrust::cuda::par; }
};
#endif
/// The configured system when this translation unit cannot run it: configured CUDA outside nvcc, or
/// OpenMP without -fopenmp. `device` is then this incomplete type rather than a silent `cpp`, which
/// would make `thrust_backend<>` a different backend here than in the translation units that can run it.
/// Name `thrust_system::cpp` explicitly in such translation units.
struct configured_system_unavailable_in_this_translation_unit;
#if defined(SPECDEC_THRUST_DEVICE_SYSTEM_CUDA)
#if defined(__CUDACC__)
using device = cuda;
#else
using device = configured_system_unavailable_in_this_translation_unit;
#endif
#elif defined(SPECDEC_THRUST_DEVICE_SYSTEM_OMP)
#if defined(_OPENMP)
using device = omp;
#else
using device = configured_system_unavailable_in_this_translation_unit;
#endif
#else
using device = cpp;
#endif
}  // namespace thrust_system

}  // namespace specdec
