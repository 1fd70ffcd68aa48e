// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The target-side buffers of a tree in the layout the PyTorch references feed their verify
/// pass (EAGLE-1/2/3's `tree_mask` / `tree_position_ids` / `retrieve_indices`, Medusa's
/// `medusa_attn_mask` / `medusa_position_ids` / `retrieve_indices`): one recipe, which
/// `eagle::make_buffers`, `eagle1::make_buffers` and `medusa::make_buffers` share. Host memory.
#pragma once

#include <cstdint>
#include <vector>

#include <specdec/core/checked.hpp>
#include <specdec/core/view.hpp>
#include <specdec/mask/tree_mask.hpp>
#include <specdec/tree/tree.hpp>

namespace specdec {

/// A tree's target-side buffers, host, in the references' dtypes (`T` = nodes including the root):
/// - `draft_tokens` `[T]`: the tree's tokens (for a static shape, its placeholder tokens);
/// - `tree_mask` `[T x T]` 0/1: node i attends node j iff j is i or an ancestor of i;
/// - `position_ids` `[T]` = depth (add the committed length for absolute positions);
/// - `retrieve_indices` `[leaves x (max_depth + 1)]` root-to-leaf node indices, -1 padded, rows in
///   the peer's `path_order`.
struct target_buffers {
  std::vector<std::int64_t> draft_tokens = {};
  std::vector<float> tree_mask = {};
  std::vector<std::int64_t> position_ids = {};
  std::vector<std::int64_t> retrieve_indices = {};
  index_t nodes = 0, leaves = 0, path_length = 0;
};

/// Writes `tree`'s target-side buffers into `out` (overwriting those five fields and the counts).
/// \throws invalid_argument on a malformed tree (valid_tree).
inline void fill_target_buffers(valid_tree tree, path_order order, target_buffers& out) {
  const index_t n = tree.size();
  out.nodes = n;
  out.draft_tokens.resize(static_cast<std::size_t>(n));
  out.position_ids.resize(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) {
    out.draft_tokens[static_cast<std::size_t>(i)] = tree.token(i);
    out.position_ids[static_cast<std::size_t>(i)] = tree.depth(i);
  }
  out.tree_mask.assign(detail::checked_count("specdec::make_target_buffers", {n, n}, "the tree mask [nodes x nodes]"), 0.0f);
  tree_mask_dense(tree, 0, matrix_view<float>(out.tree_mask.data(), n, n));
  const retrieve_paths_result paths = retrieve_paths(tree, order);
  out.leaves = paths.rows;
  out.path_length = paths.cols;
  out.retrieve_indices.assign(paths.paths.begin(), paths.paths.end());
}

/// `tree`'s target-side buffers as a new value. \throws invalid_argument as fill_target_buffers.
inline target_buffers make_target_buffers(valid_tree tree, path_order order) {
  target_buffers out;
  fill_target_buffers(tree, order, out);
  return out;
}

}  // namespace specdec
