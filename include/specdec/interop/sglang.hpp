// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief SGLang's EAGLE tree buffers, bit for bit: `organize_draft_results`, the
/// `build_tree_kernel_efficient` outputs (positions, retrive_index, retrive_next_token,
/// retrive_next_sibling, and the tree mask in FULL_MASK, QLEN_ONLY and QLEN_ONLY_BITPACKING), and the
/// greedy tree verification `verify_tree_greedy`. Host memory, batches of requests with their own
/// sequence lengths. The dynamic draft loop itself is eagle2_tree_builder with
/// `tree_score::probability` and depth = `speculative_num_steps - 1`.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>
#include <specdec/tree/detail/host_topk.hpp>

namespace specdec::sglang {

/// SGLang's `TreeMaskMode`.
enum class tree_mask_mode {
  full_mask = 0,            ///< per request N rows of (seq_len + N) bools, requests concatenated
  qlen_only = 1,            ///< per request N x N bools
  qlen_only_bitpacking = 2  ///< one 1/2/4-byte little-endian item per (request, row); N <= 32
};

/// Whether `retrive_index` holds rows of the flattened `[bs * N]` draft-token array (SGLang) or
/// indices local to the request (TensorRT-LLM's port, `invokeBuildDynamicTree`).
enum class retrieve_scope { global, local };

/// `organize_draft_results` for one request: `flat_scores` is the concatenation of the step score
/// lists (k, then k * k per further step), `flat_tokens` likewise; `step_parents` the concatenation of
/// the parents lists of every step but the last. Returns the sorted indices of the N - 1 best scores
/// (ties to the lower index) in `selected` and their tokens in `tokens`.
struct organized {
  std::vector<std::int64_t> parent_list = {};
  std::vector<std::int64_t> selected = {};
  std::vector<std::int64_t> tokens = {};
};

/// \throws invalid_argument when the lists differ in length or N - 1 exceeds the candidates.
inline organized organize_draft_results(std::span<const float> flat_scores, std::span<const std::int64_t> flat_tokens,
                                        std::span<const std::int64_t> step_parents, index_t num_draft_tokens) {
  constexpr const char* where = "specdec::sglang::organize_draft_results";
  SPECDEC_EXPECTS(flat_scores.size() == flat_tokens.size(), where, "flat_scores has ", flat_scores.size(),
                  " entries and flat_tokens ", flat_tokens.size(), "; expected one token per score");
  const index_t keep = num_draft_tokens - 1;
  SPECDEC_EXPECTS(keep >= 0 && keep <= static_cast<index_t>(flat_scores.size()), where, "num_draft_tokens = ",
                  num_draft_tokens, "; expected 1 <= num_draft_tokens <= 1 + ", flat_scores.size(), " candidates");
  organized out;
  out.selected = detail::best_indices<std::int64_t>(flat_scores, keep);
  std::sort(out.selected.begin(), out.selected.end());
  for (const std::int64_t f : out.selected) out.tokens.push_back(flat_tokens[static_cast<std::size_t>(f)]);
  out.parent_list.assign(step_parents.begin(), step_parents.end());
  return out;
}

/// Outputs of build_tree for a batch (host, int64 like SGLang's tensors).
struct tree_buffers {
  std::vector<std::int64_t> draft_tokens = {};          ///< `[bs * N]`: verified id then the selected tokens
  std::vector<std::int64_t> positions = {};             ///< `[bs * N]`: seq_len + depth
  std::vector<std::int64_t> retrive_index = {};         ///< `[bs x N]`
  std::vector<std::int64_t> retrive_next_token = {};    ///< `[bs x N]`: first child, -1 none
  std::vector<std::int64_t> retrive_next_sibling = {};  ///< `[bs x N]`: next sibling, -1 none
  std::vector<std::uint8_t> tree_mask = {};             ///< bools for full_mask / qlen_only
  std::vector<std::uint32_t> tree_mask_bits = {};       ///< items for qlen_only_bitpacking
};

/// What `build_tree_kernel_efficient` computes, for `bs` requests of N nodes each.
/// \param parent_list host `[bs x P]`, P = 1 + k (S - 1): row g of the candidate grid hangs under
///   flat candidate parent_list[g] (-1 = root); from eagle2_tree_builder's `parent_list`.
/// \param selected_index host `[bs x (N - 1)]`: sorted flat indices of the selected candidates.
/// \param draft_tokens_wo_root host `[bs x (N - 1)]`, \param verified_id host `[bs]`, \param seq_lens host `[bs]`.
/// \param top_k k, \param num_steps S (speculative_num_steps: bounds the walk to the root).
///
/// Malformed input follows SGLang's newer semantics (test_build_eagle_tree_malformed.py): a node whose
/// parent is not among the selected nodes is left out of the links and its walk stops there (as if
/// its parent were the root); every walk stops after S hops, so a cycle cannot hang; the parent search
/// scans the N - 1 selected entries only. Valid trees are unaffected.
/// \throws invalid_argument on shapes that do not match, N < 1, k < 1, S < 1, a seq_len outside
///   [0, 2^40], or N > 32 with bit-packing.
inline tree_buffers build_tree(matrix_view<const std::int64_t> parent_list, matrix_view<const std::int64_t> selected_index,
                               matrix_view<const std::int64_t> draft_tokens_wo_root,
                               std::span<const std::int64_t> verified_id, std::span<const std::int64_t> seq_lens,
                               index_t top_k, index_t num_steps, index_t num_draft_tokens, tree_mask_mode mode,
                               retrieve_scope scope = retrieve_scope::global) {
  constexpr const char* where = "specdec::sglang::build_tree";
  const index_t bs = static_cast<index_t>(seq_lens.size()), n = num_draft_tokens;
  SPECDEC_EXPECTS(n >= 1 && top_k >= 1 && num_steps >= 1, where, "num_draft_tokens = ", n, ", top_k = ", top_k,
                  ", num_steps = ", num_steps, "; expected each >= 1");
  SPECDEC_EXPECTS(static_cast<index_t>(verified_id.size()) == bs, where, "verified_id has ", verified_id.size(),
                  " entries; expected one per request (", bs, ")");
  SPECDEC_EXPECTS(parent_list.rows() == bs, where, "parent_list has ", parent_list.rows(), " rows; expected ", bs);
  SPECDEC_EXPECTS(selected_index.rows() == bs && selected_index.cols() == n - 1, where, "selected_index is ",
                  selected_index.rows(), " x ", selected_index.cols(), "; expected ", bs, " x ", n - 1);
  SPECDEC_EXPECTS(draft_tokens_wo_root.rows() == bs && draft_tokens_wo_root.cols() == n - 1, where,
                  "draft_tokens_wo_root is ", draft_tokens_wo_root.rows(), " x ", draft_tokens_wo_root.cols(),
                  "; expected ", bs, " x ", n - 1);
  SPECDEC_EXPECTS(mode != tree_mask_mode::qlen_only_bitpacking || n <= 32, where, "num_draft_tokens = ", n,
                  "; QLEN_ONLY_BITPACKING holds at most 32 nodes per row");
  tree_buffers out;
  const auto sz = static_cast<std::size_t>(bs * n);
  out.draft_tokens.resize(sz);
  out.positions.resize(sz);
  out.retrive_index.resize(sz);
  out.retrive_next_token.assign(sz, -1);
  out.retrive_next_sibling.assign(sz, -1);
  std::vector<std::size_t> row_offset(static_cast<std::size_t>(bs) + 1, 0);  // full_mask: start of request b
  for (index_t b = 0; b < bs; ++b) {
    // The bound keeps n (seq_len + n) and the running offsets far from overflow.
    SPECDEC_EXPECTS(seq_lens[static_cast<std::size_t>(b)] >= 0 && seq_lens[static_cast<std::size_t>(b)] <= (index_t{1} << 40),
                    where, "seq_lens[", b, "] = ", seq_lens[static_cast<std::size_t>(b)], "; expected 0 <= seq_len <= 2^40");
    const index_t cols = mode == tree_mask_mode::full_mask ? seq_lens[static_cast<std::size_t>(b)] + n : n;
    row_offset[static_cast<std::size_t>(b) + 1] = row_offset[static_cast<std::size_t>(b)] + static_cast<std::size_t>(n * cols);
  }
  if (mode == tree_mask_mode::qlen_only_bitpacking) out.tree_mask_bits.assign(sz, 0u);
  else out.tree_mask.assign(row_offset.back(), 0);
  for (index_t b = 0; b < bs; ++b) {
    const index_t seq_len = seq_lens[static_cast<std::size_t>(b)];
    const index_t cols = mode == tree_mask_mode::full_mask ? seq_len + n : n;
    const index_t first_tree_col = mode == tree_mask_mode::full_mask ? seq_len : 0;
    const auto set = [&](index_t row, index_t col) {
      if (mode == tree_mask_mode::qlen_only_bitpacking)
        out.tree_mask_bits[static_cast<std::size_t>(b * n + row)] |= std::uint32_t(1) << col;
      else
        out.tree_mask[row_offset[static_cast<std::size_t>(b)] + static_cast<std::size_t>(row * cols + first_tree_col + col)] = 1;
    };
    // Tree parent of node i >= 1: 0 = root, -1 = not among the selected nodes.
    const auto parent_node = [&](index_t i) -> index_t {
      const std::int64_t group = selected_index(b, i - 1) / top_k;
      if (group == 0) return 0;
      if (group < 0 || group >= parent_list.cols()) return -1;
      const std::int64_t parent_flat = parent_list(b, group);
      for (index_t j = 0; j < n - 1; ++j)
        if (selected_index(b, j) == parent_flat) return j + 1;
      return -1;
    };
    out.draft_tokens[static_cast<std::size_t>(b * n)] = verified_id[static_cast<std::size_t>(b)];
    for (index_t i = 1; i < n; ++i) out.draft_tokens[static_cast<std::size_t>(b * n + i)] = draft_tokens_wo_root(b, i - 1);
    for (index_t i = 0; i < n; ++i)
      out.retrive_index[static_cast<std::size_t>(b * n + i)] = scope == retrieve_scope::global ? b * n + i : i;
    // Links: head insertion from the last node keeps each child list in increasing index order.
    for (index_t i = n - 1; i >= 1; --i) {
      const index_t p = parent_node(i);
      if (p < 0) continue;
      out.retrive_next_sibling[static_cast<std::size_t>(b * n + i)] = out.retrive_next_token[static_cast<std::size_t>(b * n + p)];
      out.retrive_next_token[static_cast<std::size_t>(b * n + p)] = i;
    }
    if (mode == tree_mask_mode::full_mask)
      for (index_t i = 0; i < n; ++i)
        for (index_t c = 0; c < seq_len; ++c)
          out.tree_mask[row_offset[static_cast<std::size_t>(b)] + static_cast<std::size_t>(i * cols + c)] = 1;
    set(0, 0);
    out.positions[static_cast<std::size_t>(b * n)] = seq_len;
    for (index_t i = 1; i < n; ++i) {
      set(i, 0);
      set(i, i);
      index_t depth = 0, current = i;
      for (index_t hop = 0; hop < num_steps; ++hop) {
        const index_t p = parent_node(current);
        ++depth;
        if (p <= 0) break;
        set(i, p);
        current = p;
      }
      out.positions[static_cast<std::size_t>(b * n + i)] = seq_len + depth;
    }
  }
  return out;
}

/// Result of verify_tree_greedy (host, int32 / int64 as SGLang's tensors).
struct greedy_verification {
  std::vector<std::int32_t> predicts = {};          ///< `[bs * N]`: accepted token at each accepted node, the bonus at the last, -1 elsewhere
  std::vector<std::int32_t> accept_index = {};      ///< `[bs x num_spec_step]`: retrive_index of accepted nodes (root first), -1 padded
  std::vector<std::int32_t> accept_token_num = {};  ///< `[bs]`: accepted draft tokens (root excluded)
};

/// SGLang's `verify_tree_greedy`: from the root, follow `retrive_next_token` and scan the siblings for
/// the candidate equal to the target's argmax at the last accepted node; accept it and descend; stop
/// when none matches or after num_spec_step - 1 acceptances; the bonus token is the target's argmax
/// at the last accepted node.
/// \param candidates `[bs x N]` token ids; \param retrive_index, next_token, next_sibling `[bs x N]`
/// (build_tree's, global scope); \param target_predict `[bs * N]` target argmax per node, indexed by
/// retrive_index. \throws invalid_argument on shapes that do not match, links out of range or links
/// that cycle.
inline greedy_verification verify_tree_greedy(matrix_view<const std::int64_t> candidates,
                                              matrix_view<const std::int64_t> retrive_index,
                                              matrix_view<const std::int64_t> next_token,
                                              matrix_view<const std::int64_t> next_sibling,
                                              std::span<const std::int64_t> target_predict, index_t num_spec_step) {
  constexpr const char* where = "specdec::sglang::verify_tree_greedy";
  const index_t bs = candidates.rows(), n = candidates.cols();
  for (const auto* m : {&retrive_index, &next_token, &next_sibling})
    SPECDEC_EXPECTS(m->rows() == bs && m->cols() == n, where, "a link matrix is ", m->rows(), " x ", m->cols(),
                    "; expected ", bs, " x ", n, " like candidates");
  SPECDEC_EXPECTS(static_cast<index_t>(target_predict.size()) == bs * n, where, "target_predict has ",
                  target_predict.size(), " entries; expected bs * N = ", bs * n);
  SPECDEC_EXPECTS(num_spec_step >= 1, where, "num_spec_step = ", num_spec_step, "; expected >= 1");
  greedy_verification out{std::vector<std::int32_t>(static_cast<std::size_t>(bs * n), -1),
                          std::vector<std::int32_t>(static_cast<std::size_t>(bs * num_spec_step), -1),
                          std::vector<std::int32_t>(static_cast<std::size_t>(bs), 0)};
  const auto global = [&](index_t b, index_t node) {
    const std::int64_t g = retrive_index(b, node);
    SPECDEC_EXPECTS(g >= 0 && g < bs * n, where, "retrive_index(", b, ", ", node, ") = ", g, "; expected [0, ", bs * n, ")");
    return static_cast<std::size_t>(g);
  };
  for (index_t b = 0; b < bs; ++b) {
    index_t last = 0;
    out.accept_index[static_cast<std::size_t>(b * num_spec_step)] = static_cast<std::int32_t>(global(b, 0));
    index_t accepted = 0;
    for (index_t step = 1; step < num_spec_step; ++step) {
      const std::int64_t want = target_predict[global(b, last)];
      index_t match = -1;
      index_t hops = 0;  // a sibling chain visits each node once; more means the links cycle
      for (std::int64_t c = next_token(b, last); c != -1; c = next_sibling(b, c)) {
        SPECDEC_EXPECTS(c >= 0 && c < n, where, "a link of request ", b, " points at node ", c, "; expected [0, ", n, ")");
        SPECDEC_EXPECTS(++hops <= n, where, "the sibling links of request ", b, " under node ", last,
                        " cycle; expected each child list to end with -1");
        if (candidates(b, c) == want) {
          match = c;
          break;
        }
      }
      if (match < 0) break;
      out.predicts[global(b, last)] = static_cast<std::int32_t>(want);
      out.accept_index[static_cast<std::size_t>(b * num_spec_step + step)] = static_cast<std::int32_t>(global(b, match));
      last = match;
      ++accepted;
    }
    out.accept_token_num[static_cast<std::size_t>(b)] = static_cast<std::int32_t>(accepted);
    out.predicts[global(b, last)] = static_cast<std::int32_t>(target_predict[global(b, last)]);
  }
  return out;
}

}  // namespace specdec::sglang
