// SPDX-License-Identifier: Apache-2.0
// The backend conformance suite: every test runs on every backend in SPECDEC_TEST_BACKENDS and
// compares with the scalar reference (integers exactly, floats within the stated tolerance).
// Inputs live in host vectors and travel through the backend's upload/download, so the same test
// body serves host and device backends.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/rng.hpp>

#include "reference.hpp"

/// Every backend a generic suite runs on (the including file includes the backends' headers); nvcc
/// builds of the suites (tests/cuda/) add the CUDA system.
#if defined(__CUDACC__)
#define SPECDEC_ALL_BACKENDS                                                                              \
  specdec::eigen, specdec::thrust_backend<specdec::thrust_system::cpp>,                                   \
      specdec::thrust_backend<specdec::thrust_system::omp>, specdec::thrust_backend<specdec::thrust_system::cuda>
#else
#define SPECDEC_ALL_BACKENDS \
  specdec::eigen, specdec::thrust_backend<specdec::thrust_system::cpp>, specdec::thrust_backend<specdec::thrust_system::omp>
#endif

namespace conformance {

/// Runs `f` and returns the specdec::invalid_argument message ("" when nothing was thrown), so a test
/// can check that the error names what was wrong.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const specdec::invalid_argument& e) {
    return e.what();
  }
  return "";
}

/// Whether an error message names `part`.
inline bool contains(const std::string& text, const std::string& part) {
  INFO("message: ", text);
  return text.find(part) != std::string::npos;
}

inline constexpr float nan_value = std::numeric_limits<float>::quiet_NaN();
inline constexpr float inf_value = std::numeric_limits<float>::infinity();
inline constexpr specdec::index_t int64_max = std::numeric_limits<specdec::index_t>::max();

using specdec::index_t;
using specdec::reference::matrix;

/// Deterministic test data from Philox (std's distributions are implementation-defined).
inline std::vector<float> uniform_floats(std::uint64_t seed, std::size_t n, float lo, float hi) {
  std::vector<float> v(n);
  const specdec::philox_stream s{seed, 7};
  for (std::size_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * s.uniform(i);
  return v;
}
inline matrix random_logits(std::uint64_t seed, index_t rows, index_t cols, float spread = 8.0f) {
  return matrix{rows, cols, uniform_floats(seed, static_cast<std::size_t>(rows * cols), -spread, spread)};
}
/// Rows of a softmax of random logits: a realistic probability matrix.
inline matrix random_probs(std::uint64_t seed, index_t rows, index_t cols, float spread = 4.0f) {
  matrix m = random_logits(seed, rows, cols, spread);
  for (index_t r = 0; r < rows; ++r) {
    const double lse = specdec::reference::logsumexp(m.row(r), cols, 1.0);
    for (index_t j = 0; j < cols; ++j)
      m.data[static_cast<std::size_t>(r * cols + j)] = static_cast<float>(std::exp(m(r, j) - lse));
  }
  return m;
}

template <class B>
struct harness {
  B b;
  template <class T>
  auto up(const std::vector<T>& v) {
    return b.upload(std::span<const T>(v));
  }
  template <class T>
  std::vector<T> down(typename B::template buffer<T>& buf) {
    return b.download(buf.view());
  }
};

inline void check_close(const std::vector<float>& got, const std::vector<double>& want, double abs_tol,
                        double rel_tol, const char* what) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i])) {
      INFO(what, " entry ", i);
      CHECK(static_cast<double>(got[i]) == want[i]);
      continue;
    }
    const double err = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= abs_tol + rel_tol * std::abs(want[i]))) {
      INFO(what, " entry ", i, ": got ", got[i], ", want ", want[i]);
      CHECK(err <= abs_tol + rel_tol * std::abs(want[i]));
      return;
    }
  }
}

}  // namespace conformance
