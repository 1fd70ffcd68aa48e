// SPDX-License-Identifier: Apache-2.0
// The public entry points that take views or sizes, as one list that fuzz_views and fuzz_sizes both
// run (the harness is entry_plan.hpp; the entries are grouped by layer in entries_*.hpp). A new entry
// point is one struct and one line here.
#pragma once

#include "entries_blocks.hpp"
#include "entries_dense.hpp"
#include "entries_requests.hpp"
#include "entries_sampling.hpp"
#include "entries_trees.hpp"
#include "entry_plan.hpp"

namespace fuzz::entry {

/// Every entry point the view and size harnesses reach.
inline constexpr entry entries[] = {
    make<row_softmax>(),
    make<row_topk>(),
    make<emitted_logprobs>(),
    make<apply_sampling_constraints>(),
    make<apply_token_bitmask_host>(),
    make<apply_token_bitmask_backend>(),
    make<masked_verify_greedy>(),
    make<fill_tree_bitmasks>(),
    make<tree_penalties_host>(),
    make<batch_penalties>(),
    make<batch_greedy_argmax>(),
    make<batch_greedy_visited>(),
    make<batch_speculative>(),
    make<host_tree_mask_dense>(),
    make<host_tree_mask_packed>(),
    make<host_tree_positions>(),
    make<host_child_links>(),
    make<batch_tree_mask_dense>(),
    make<segment_packbits_host>(),
    make<segment_packbits_backend>(),
    make<rejection_sample_host>(),
    make<batch_greedy_bitmask>(),
    make<flashinfer_batch_masks>(),
    make<sglang_greedy>(),
    make<eagle2_batch_finish>(),
    make<prune_tree_bitmask>(),
    make<joint_renorm_backend>(),
    make<top_k_mask_logits_backend>(),
    make<rejection_sample_backend>(),
    make<batch_tree_mask_packed>(),
    make<gather_rows_entry>(),
    make<sglang_build_tree>(),
    make<top_p_renorm_backend>(),
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
    make<request_greedy>(),
    make<request_greedy_argmax>(),
    make<request_speculative>(),
    make<request_speculative_logits>(),
    make<request_typical>(),
    make<request_coin_tree>(),
    make<target_probabilities>(),
    make<host_filters>(),
    make<sglang_sampling>(),
    make<sglang_greedy_host>(),
    make<medusa_fill_candidates>(),
    make<decoder_layer>(),
    make<eagle_forward>(),
    make<eagle3_forward>(),
    make<eagle3_fuse>(),
    make<eagle3_logits>(),
    make<mtp_forward>(),
    make<moe_draft_layer>(),
    make<moa_drafter>(),
    make<moa_train_forward>(),
    make<amphista_stage>(),
    make<amphista_head_inputs>(),
    make<amphista_auto_embedding>(),
    make<kv_cache_keep>(),
};

/// One input of fuzz_views (`sizes` false) or fuzz_sizes: an entry, a backend, then the layouts.
inline void run_one(fuzz::input& in, bool sizes) {
  const entry& e = entries[in.byte() % (sizeof entries / sizeof entries[0])];
  const bool thrust = in.flag();
  if (sizes) thrust ? sizes_case<thrust_cpp>(in, e) : sizes_case<specdec::eigen>(in, e);
  else thrust ? views_case<thrust_cpp>(in, e) : views_case<specdec::eigen>(in, e);
}

}  // namespace fuzz::entry
