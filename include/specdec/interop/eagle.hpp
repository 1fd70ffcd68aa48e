// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief EAGLE-2 / EAGLE-3 dynamic trees in the layout EAGLE's `topK_genrate` returns them to its
/// verify pass (`draft_tokens`, `tree_mask`, `tree_position_ids`, `retrieve_indices`), from a tree
/// `eagle2_tree_builder` (or the engine) built. Host memory.
#pragma once

#include <specdec/interop/target_buffers.hpp>
#include <specdec/tree/tree.hpp>

namespace specdec::eagle {

/// `topK_genrate`'s outputs for a finished tree: target_buffers with the leaves by node index
/// (`path_order::node_index`, EAGLE's greedy order) or, with `path_order::lexicographic`, sorted as EAGLE
/// sorts them when a logits processor is set (i.e. when sampling).
/// \throws invalid_argument on a malformed tree (valid_tree).
inline target_buffers make_buffers(valid_tree tree, path_order order = path_order::node_index) {
  return make_target_buffers(tree, order);
}

}  // namespace specdec::eagle
