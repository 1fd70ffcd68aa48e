// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Compiler and platform configuration shared by every specdec header.
#pragma once

#include <specdec/version.hpp>

/// Marks functions that run both on the host and, when compiled by nvcc, on the device.
#if defined(__CUDACC__) || defined(__HIPCC__)
#define SPECDEC_HOST_DEVICE __host__ __device__
#else
#define SPECDEC_HOST_DEVICE
#endif

/// Fully unrolls the loop that follows where the compiler supports it. Host-device code needs it where
/// a small array must live in registers on the GPU: a loop nvcc leaves rolled indexes the array, which
/// then goes to local memory, and each load waits for the one before.
#if defined(__CUDA_ARCH__)
#define SPECDEC_UNROLL _Pragma("unroll")
#elif defined(__CUDACC__)  // nvcc's host pass accepts neither form
#define SPECDEC_UNROLL
#elif defined(__clang__)
#define SPECDEC_UNROLL _Pragma("unroll")
#elif defined(__GNUC__)
#define SPECDEC_UNROLL _Pragma("GCC unroll 32")
#else
#define SPECDEC_UNROLL
#endif

/// True inside device code compiled by nvcc, where exceptions and the C++ library are unavailable.
#if defined(__CUDA_ARCH__)
#define SPECDEC_DEVICE_CODE 1
#else
#define SPECDEC_DEVICE_CODE 0
#endif

/// The instruction-set namespace of specdec's host kernels, of the backends built on them and of the
/// verifiers' row helpers (an inline namespace: user code names `specdec::eigen` as always). Those
/// kernels are chosen by the compiler's instruction-set macros (vector width, FMA), so translation
/// units built for different targets compile different bodies for the same inline functions; a
/// program linking both would keep one body for both (an ODR violation: AVX code reached from a
/// translation unit built for machines without it, results depending on link order). Here each
/// target's kernels and backends have names of their own, so a backend is one type per target and
/// an algorithm instantiated on it is distinct too. Data types (views, trees, requests, options) and
/// errors do not depend on the target and stay outside. nvcc translation units use one name for their
/// host and device passes, which see different macros.
#if defined(__CUDACC__) || defined(__HIPCC__)
#define SPECDEC_ISA isa_cuda
#elif !(defined(__GNUC__) || defined(__clang__))
#define SPECDEC_ISA isa_scalar
#elif defined(__AVX__) && defined(__FMA__)
#define SPECDEC_ISA isa_avx_fma
#elif defined(__AVX__)
#define SPECDEC_ISA isa_avx
#elif defined(__FMA__)
#define SPECDEC_ISA isa_fma
#else
#define SPECDEC_ISA isa_base
#endif
