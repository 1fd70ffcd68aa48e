// SPDX-License-Identifier: Apache-2.0
// The sampling group of the entry-point list (entries_sampling.hpp), compiled once for fuzz_views and fuzz_sizes.
#include "entries_sampling.hpp"

namespace fuzz::entry {

std::span<const entry> sampling_entries() {
  static constexpr entry list[] = {
      make<row_softmax>(),
      make<row_topk>(),
      make<emitted_logprobs>(),
      make<apply_sampling_constraints>(),
      make<apply_sampling_constraints_half>(),
      make<apply_token_bitmask_host>(),
      make<apply_token_bitmask_backend>(),
      make<masked_verify_greedy>(),
      make<tree_penalties_host>(),
      make<batch_penalties>(),
      make<batch_greedy_argmax>(),
      make<batch_greedy_visited>(),
      make<batch_speculative>(),
      make<rejection_sample_host>(),
      make<rejection_sample_host_half>(),
      make<batch_greedy_bitmask>(),
      make<joint_renorm_backend>(),
      make<top_k_mask_logits_backend>(),
      make<rejection_sample_backend>(),
      make<rejection_sample_backend_half>(),
      make<rejection_sample_backend_philox>(),
      make<top_k_top_p_sample_entry>(),
      make<top_k_top_p_sample_from_logits_entry>(),
      make<gather_rows_entry>(),
      make<top_p_renorm_backend>(),
      make<philox_uniforms_float>(),
      make<philox_uniforms_double>(),
      make<philox_exponentials_entry>(),
  };
  return list;
}

}  // namespace fuzz::entry
