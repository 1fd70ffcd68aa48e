// SPDX-License-Identifier: Apache-2.0
// Compiled twice, for two instruction sets (ISA_FUNCTION names each copy): the same specdec calls,
// whose host kernels differ by target. See isa_main.cpp.
#include <string>
#include <typeinfo>
#include <vector>

#include <specdec/backend/eigen.hpp>

std::string ISA_FUNCTION(std::vector<float>& softmax) {
  std::vector<float> logits(1001);
  for (std::size_t j = 0; j < logits.size(); ++j) logits[j] = static_cast<float>((j * 37) % 101) / 17.0f;
  softmax.assign(logits.size(), 0.0f);
  specdec::eigen b;
  b.row_softmax(specdec::matrix_view<const float>(logits.data(), 1, 1001), 0.7f, specdec::matrix_view<float>(softmax.data(), 1, 1001));
  return typeid(specdec::eigen).name();
}
