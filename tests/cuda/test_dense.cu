// SPDX-License-Identifier: Apache-2.0
// The dense primitives' conformance tests with thrust_backend<cuda> added (the GEMM on cuBLAS when
// SPECDEC_USE_CUBLAS is defined, as SPECDEC_ENABLE_CUDA builds it).
#include "../test_dense.cpp"
