// SPDX-License-Identifier: Apache-2.0
// The batched verifiers suite built by nvcc: adds specdec::thrust_backend<thrust_system::cuda> (one CUDA
// block per request) to its backends.
#include "../test_batch_verify.cpp"
