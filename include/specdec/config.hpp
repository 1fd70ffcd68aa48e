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

/// True inside device code compiled by nvcc, where exceptions and the C++ library are unavailable.
#if defined(__CUDA_ARCH__)
#define SPECDEC_DEVICE_CODE 1
#else
#define SPECDEC_DEVICE_CODE 0
#endif
