// SPDX-License-Identifier: Apache-2.0
// A consumer of the installed / embedded package: calls one primitive on caller-owned memory.
#include <specdec/backend/eigen.hpp>
#include <specdec/specdec.hpp>

#include <cstdio>
#include <vector>

int main() {
  std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 0.0f};
  std::vector<std::int32_t> best(2);
  specdec::eigen backend;
  backend.row_argmax(specdec::as_matrix(logits, 2, 3), specdec::vector_view<std::int32_t>(best));
  std::printf("specdec %d.%d.%d: argmax = %d, %d\n", SPECDEC_VERSION_MAJOR, SPECDEC_VERSION_MINOR,
              SPECDEC_VERSION_PATCH, best[0], best[1]);
  return best[0] == 1 && best[1] == 0 ? 0 : 1;
}
