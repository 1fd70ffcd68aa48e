// SPDX-License-Identifier: Apache-2.0
// Compiled (not run) by the `warnings_avx512_canary` test with GCC at -march=x86-64-v4: an Eigen
// matrix product instantiates the AVX-512 GEMM packing that GCC 12 reports as maybe-uninitialized
// (specdec/backend/eigen.hpp), and `own_code` holds a genuine maybe-uninitialized use. The test passes
// when the compiler reports the second and nothing from Eigen: the workaround must hide only Eigen.
#include <specdec/backend/eigen.hpp>

int opaque(int);

Eigen::MatrixXf product(const Eigen::MatrixXf& a, const Eigen::MatrixXf& b) { return a * b; }

int own_code(int c) {
  int x;
  if (c) x = opaque(3);
  if (opaque(c)) return x + 1;
  return 0;
}
