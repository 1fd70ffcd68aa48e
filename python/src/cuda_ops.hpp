// SPDX-License-Identifier: Apache-2.0
// The binding's CUDA side: the row primitives on specdec::thrust_backend<thrust_system::cuda>, for
// arrays in CUDA memory. Plain pointers and sizes, no CUDA or nanobind types, so that the binding's
// C++ translation units include it whatever compiler builds them; cuda_ops.cu (nvcc) implements it
// when the package is built with CUDA (SPECDEC_PYTHON_CUDA).
#pragma once

#include <cstdint>

namespace specdec_python::cuda {

/// Where a call runs: the CUDA device of its arrays and the stream to enqueue on (the caller's current
/// stream; 0: the legacy default stream). Every call synchronises once, on that stream, to raise what
/// the device found in the data (NaN, +inf, a bad row) as an exception.
struct place {
  int device = 0;
  std::uintptr_t stream = 0;
};

/// Each is the eigen backend's function of the same name, on device pointers (rows x cols, row-major,
/// C-contiguous); `value` may be null. Throws specdec::invalid_argument as the host forms.
void row_argmax(place at, const float* logits, std::int64_t rows, std::int64_t cols, std::int32_t* index, float* value);
void row_topk(place at, const float* logits, std::int64_t rows, std::int64_t cols, std::int64_t k, float* values,
              std::int32_t* indices);
void row_softmax(place at, const float* logits, std::int64_t rows, std::int64_t cols, float temperature, float* out, bool log);
void row_logsumexp(place at, const float* logits, std::int64_t rows, std::int64_t cols, float temperature, float* out);
void row_sample(place at, const float* probs, std::int64_t rows, std::int64_t cols, const float* uniforms, std::int32_t* out);

}  // namespace specdec_python::cuda
