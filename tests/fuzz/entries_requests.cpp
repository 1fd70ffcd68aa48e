// SPDX-License-Identifier: Apache-2.0
// The requests group of the entry-point list (entries_requests.hpp), compiled once for fuzz_views and fuzz_sizes.
#include "entries_requests.hpp"

namespace fuzz::entry {

std::span<const entry> requests_entries() {
  static constexpr entry list[] = {
      make<request_greedy>(),
      make<request_greedy_argmax>(),
      make<request_speculative>(),
      make<request_speculative_half>(),
      make<request_speculative_half_outputs>(),
      make<request_speculative_logits>(),
      make<request_typical>(),
      make<request_coin_tree>(),
      make<target_probabilities>(),
      make<request_speculative_logits_half>(),
      make<request_typical_half>(),
      make<request_coin_tree_half>(),
      make<target_probabilities_half>(),
      make<host_filters>(),
      make<host_filters_half>(),
      make<sglang_sampling>(),
      make<sglang_sampling_half>(),
      make<sglang_sampling_host_half>(),
      make<sglang_greedy_host>(),
      make<medusa_fill_candidates>(),
  };
  return list;
}

}  // namespace fuzz::entry
