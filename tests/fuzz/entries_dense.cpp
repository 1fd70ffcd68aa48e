// SPDX-License-Identifier: Apache-2.0
// The dense group of the entry-point list (entries_dense.hpp), compiled once for fuzz_views and fuzz_sizes.
#include "entries_dense.hpp"

namespace fuzz::entry {

std::span<const entry> dense_entries() {
  static constexpr entry list[] = {
      make<row_max>(),
      make<row_argmax>(),
      make<row_topk_logsumexp>(),
      make<row_logsumexp>(),
      make<row_log_softmax>(),
      make<row_sample>(),
      make<row_sample_residual>(),
      make<gather_elements>(),
      make<gemm>(),
      make<rms_norm>(),
      make<rope>(),
      make<silu_mul>(),
      make<add_rows_scaled>(),
      make<attention<false>>(),
      make<attention<true>>(),
      make<attention_forward>(),
      make<mlp_forward>(),
      make<eagle_fuse>(),
  };
  return list;
}

}  // namespace fuzz::entry
