// SPDX-License-Identifier: Apache-2.0
// Two translation units built for different instruction sets (x86-64 and x86-64-v3) use
// specdec::eigen in one program. Their host kernels differ, so the backends must be different
// types (specdec's instruction-set inline namespace), or the linker would keep one body of every
// shared inline function for both. Checks that the types differ and both compute the softmax.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

std::string softmax_base(std::vector<float>& softmax);
std::string softmax_v3(std::vector<float>& softmax);

int main() {
  std::vector<float> a, b;
  const std::string ta = softmax_base(a), tb = softmax_v3(b);
  int failures = 0;
  if (ta == tb) {
    std::printf("FAIL: both translation units see the same backend type %s\n", ta.c_str());
    ++failures;
  }
  double total = 0.0;
  std::vector<double> want(a.size());
  for (std::size_t j = 0; j < want.size(); ++j) total += want[j] = std::exp(static_cast<double>((j * 37) % 101) / 17.0 / 0.7);
  for (std::size_t j = 0; j < want.size(); ++j) {
    want[j] /= total;
    if (std::fabs(a[j] - want[j]) > 1e-6 * want[j] + 1e-9 || std::fabs(b[j] - want[j]) > 1e-6 * want[j] + 1e-9) {
      std::printf("FAIL: entry %zu: %.9g / %.9g, expected %.9g\n", j, a[j], b[j], want[j]);
      ++failures;
      break;
    }
  }
  std::printf("backend types: %s | %s\n", ta.c_str(), tb.c_str());
  return failures == 0 ? 0 : 1;
}
