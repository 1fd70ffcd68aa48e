// SPDX-License-Identifier: Apache-2.0
// The blocks group of the entry-point list (entries_blocks.hpp), compiled once for fuzz_views and fuzz_sizes.
#include "entries_blocks.hpp"

namespace fuzz::entry {

std::span<const entry> blocks_entries() {
  static constexpr entry list[] = {
      make<decoder_layer>(),
      make<eagle_forward>(),
      make<eagle3_forward>(),
      make<eagle3_fuse>(),
      make<eagle3_logits>(),
      make<mtp_forward>(),
      make<dflash_append_context>(),
      make<dflash_forward>(),
      make<moe_draft_layer>(),
      make<moa_drafter>(),
      make<moa_train_forward>(),
      make<amphista_stage>(),
      make<amphista_head_inputs>(),
      make<amphista_auto_embedding>(),
      make<kv_cache_keep>(),
  };
  return list;
}

}  // namespace fuzz::entry
