// SPDX-License-Identifier: Apache-2.0
// The trees group of the entry-point list (entries_trees.hpp), compiled once for fuzz_views and fuzz_sizes.
#include "entries_trees.hpp"

namespace fuzz::entry {

std::span<const entry> trees_entries() {
  static constexpr entry list[] = {
      make<fill_tree_bitmasks>(),
      make<host_tree_mask_dense>(),
      make<host_tree_mask_packed>(),
      make<host_tree_positions>(),
      make<host_child_links>(),
      make<batch_tree_mask_dense>(),
      make<segment_packbits_host>(),
      make<segment_packbits_backend>(),
      make<flashinfer_batch_masks>(),
      make<sglang_greedy>(),
      make<eagle2_batch_finish>(),
      make<prune_tree_bitmask>(),
      make<batch_tree_mask_packed>(),
      make<sglang_build_tree>(),
      make<sglang_reconstruct>(),
  };
  return list;
}

}  // namespace fuzz::entry
