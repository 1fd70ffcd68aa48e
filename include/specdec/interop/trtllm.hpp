// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief TensorRT-LLM's Medusa tree representation (`_medusa_setup` in
/// tensorrt_llm/runtime/medusa_utils.py): compact per-head top-k, gather ids, paths, and the packed
/// int32 mask.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include <specdec/core/checked.hpp>
#include <specdec/mask/tree_mask.hpp>
#include <specdec/tree/static_tree.hpp>

namespace specdec::trtllm {

/// - `topks` `[heads]`: 1 + the largest rank used at each depth (heads = the tree's depth);
/// - `tree_ids` `[T]`: root 0, node of depth d and rank r -> `r + sum(topks[0, d - 1)) + 1`;
/// - `position_offsets` `[T]` = depth;
/// - `paths` `[leaves x (heads + 1)]`: node indices root..leaf, -1 padded, rows lexicographic;
/// - `mask` `[T x T]` 0/1 and `packed_mask` `[T x ceil(T / 32)]` int32 (tree_mask_packed_int32).
struct medusa_setup {
  static_tree shape;
  std::vector<std::int32_t> topks = {};
  std::vector<std::int32_t> tree_ids = {};
  std::vector<std::int32_t> position_offsets = {};
  std::vector<std::int32_t> paths = {};
  std::vector<float> mask = {};
  std::vector<std::int32_t> packed_mask = {};
  index_t nodes = 0, leaves = 0, path_length = 0, mask_words = 0;
};

/// \throws invalid_argument as make_static_tree (ranks below `max_top_k`), and when the depth-1 ranks
/// are not contiguous from 0 (TensorRT-LLM numbers depth-1 nodes by rank without checking).
inline medusa_setup make_medusa_setup(std::span<const choice> choices, index_t max_top_k = 64) {
  medusa_setup out;
  out.shape = make_static_tree(choices, max_top_k);
  const draft_tree& tree = out.shape.tree;
  const index_t n = tree.size();
  const std::int32_t heads = tree.max_depth();
  out.nodes = n;
  out.topks.assign(static_cast<std::size_t>(heads), 0);
  for (index_t i = 1; i < n; ++i) {
    auto& t = out.topks[static_cast<std::size_t>(tree.depth[static_cast<std::size_t>(i)] - 1)];
    // rank < max_top_k <= 2^31 - 1, so rank + 1 fits int32.
    t = std::max(t, out.shape.rank[static_cast<std::size_t>(i)] + 1);
    if (tree.depth[static_cast<std::size_t>(i)] == 1)
      SPECDEC_EXPECTS(out.shape.rank[static_cast<std::size_t>(i)] == static_cast<std::int32_t>(i - 1),
                      "specdec::trtllm::make_medusa_setup", "depth-1 choice [", out.shape.rank[static_cast<std::size_t>(i)],
                      "] is the ", i, "-th depth-1 node; expected depth-1 ranks 0, 1, 2, ... without gaps");
  }
  // TensorRT-LLM's ids are int32: summed in int64 (heads <= nodes < 2^16 terms below 2^31 each),
  // then checked.
  std::vector<index_t> offset(static_cast<std::size_t>(heads) + 1, 0);
  for (std::int32_t h = 0; h < heads; ++h) offset[static_cast<std::size_t>(h) + 1] = offset[static_cast<std::size_t>(h)] + out.topks[static_cast<std::size_t>(h)];
  out.tree_ids.resize(static_cast<std::size_t>(n));
  out.position_offsets.resize(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) {
    const auto d = tree.depth[static_cast<std::size_t>(i)];
    const index_t id = i == 0 ? 0 : out.shape.rank[static_cast<std::size_t>(i)] + offset[static_cast<std::size_t>(d - 1)] + 1;
    out.tree_ids[static_cast<std::size_t>(i)] =
        detail::checked_narrow<std::int32_t>("specdec::trtllm::make_medusa_setup", id, "tree id of node ", i);
    out.position_offsets[static_cast<std::size_t>(i)] = d;
  }
  const valid_tree valid(tree);
  const retrieve_paths_result paths = retrieve_paths(valid, path_order::lexicographic);
  out.leaves = paths.rows;
  out.path_length = paths.cols;
  out.paths = paths.paths;
  out.mask.resize(static_cast<std::size_t>(n * n));
  tree_mask_dense(valid, 0, matrix_view<float>(out.mask.data(), n, n));
  out.mask_words = (n + 31) / 32;
  out.packed_mask.resize(static_cast<std::size_t>(n * out.mask_words));
  tree_mask_packed_int32(valid, matrix_view<std::int32_t>(out.packed_mask.data(), n, out.mask_words));
  return out;
}

inline medusa_setup make_medusa_setup(const std::vector<choice>& choices, index_t max_top_k = 64) {
  return make_medusa_setup(std::span<const choice>(choices), max_top_k);
}

}  // namespace specdec::trtllm
