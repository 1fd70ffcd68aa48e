// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Medusa's static-tree buffers (`generate_medusa_buffers`) and candidate filling
/// (`generate_candidates`, greedy), bit for bit. Medusa heads are position-wise: head h proposes the
/// token at offset h + 1 regardless of the parent, so a node's gather index depends only on its depth
/// and rank.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/interop/target_buffers.hpp>
#include <specdec/tree/detail/host_topk.hpp>
#include <specdec/tree/static_tree.hpp>

namespace specdec::medusa {

/// The per-head candidate count Medusa's buffers index with.
inline constexpr index_t default_top_k = 10;

/// `generate_medusa_buffers`: all host, int64 as Medusa stores them. The target_buffers part
/// (`tree_mask` = `medusa_attn_mask`, `position_ids` = `medusa_position_ids`, `retrieve_indices` with
/// the leaves in descending node order), plus:
/// - `tree_indices` `[T]`: root 0, node of depth d and rank r -> `r + top_k * (d - 1) + 1`, an index
///   into `[root] ++ top_k(head 0) ++ top_k(head 1) ++ ...`;
/// - `shape`: the static tree (each node's rank among its parent's top-k), `top_k`.
struct buffers : target_buffers {
  static_tree shape;
  std::vector<std::int64_t> tree_indices = {};
  index_t top_k = default_top_k;
};

/// Builds Medusa's buffers from a choice list. \throws invalid_argument as make_static_tree.
inline buffers make_buffers(std::span<const choice> choices, index_t top_k = default_top_k) {
  buffers out;
  out.shape = make_static_tree(choices, top_k);
  out.top_k = top_k;
  const valid_tree tree(out.shape.tree);
  fill_target_buffers(tree, path_order::reverse_node_index, out);
  out.tree_indices.resize(static_cast<std::size_t>(tree.size()));
  for (index_t i = 0; i < tree.size(); ++i)
    out.tree_indices[static_cast<std::size_t>(i)] = i == 0 ? 0 : out.shape.rank[static_cast<std::size_t>(i)] + top_k * (tree.depth(i) - 1) + 1;
  return out;
}

inline buffers make_buffers(const std::vector<choice>& choices, index_t top_k = default_top_k) {
  return make_buffers(std::span<const choice>(choices), top_k);
}

/// Greedy candidates (`generate_candidates` at temperature 0), host results:
/// - `head_topk` `[heads x top_k]`: top-k token ids of each head's logits (ties to the lower id);
/// - `root_token`: argmax of the base model's logits (lowest id among ties);
/// - `tree_candidates` `[T]` = `([root] ++ flatten(head_topk))[tree_indices]`;
/// - `cart_candidates` `[leaves x (max_depth + 1)]` = tree_candidates along each retrieve path, the
///   -1 padding reading `pad_token` (Medusa appends a 0).
struct candidates {
  std::vector<std::int32_t> head_topk = {};
  std::int32_t root_token = 0;
  std::vector<std::int32_t> tree_candidates = {};
  std::vector<std::int32_t> cart_candidates = {};
};

/// Fills the tree from the last position's logits.
/// \param head_logits backend `[heads x V]`, heads >= the tree's depth.
/// \param base_logits backend `[1 x V]`.
/// \throws invalid_argument for too few heads, top_k > V, or bad logits (from the backend).
template <backend B>
candidates fill_candidates(B& b, const buffers& buf, matrix_view<const float, typename B::memory_space> head_logits,
                           matrix_view<const float, typename B::memory_space> base_logits,
                           std::int32_t pad_token = 0) {
  constexpr const char* where = "specdec::medusa::fill_candidates";
  SPECDEC_EXPECTS(head_logits.rows() >= buf.shape.tree.max_depth(), where, "head_logits has ", head_logits.rows(),
                  " rows (heads); the tree is ", buf.shape.tree.max_depth(), " deep and needs one head per level");
  SPECDEC_EXPECTS(base_logits.rows() == 1 && base_logits.cols() == head_logits.cols(), where, "base_logits is ",
                  base_logits.rows(), " x ", base_logits.cols(), "; expected 1 x ", head_logits.cols());
  // The buffers are a public struct (make_buffers fills it; a caller may edit it): every index read
  // below is checked against what it indexes before anything is read.
  const index_t n = buf.nodes;
  SPECDEC_EXPECTS(n >= 1 && static_cast<index_t>(buf.tree_indices.size()) == n, where, "buf.tree_indices has ",
                  buf.tree_indices.size(), " entries and buf.nodes = ", n, "; expected one per node (make_buffers)");
  const index_t flat = detail::checked_mul(where, head_logits.rows(), buf.top_k, "heads x top_k");
  for (std::size_t i = 0; i < buf.tree_indices.size(); ++i)
    SPECDEC_EXPECTS(buf.tree_indices[i] >= 0 && buf.tree_indices[i] <= flat, where, "buf.tree_indices[", i, "] = ",
                    buf.tree_indices[i], "; expected 0 (the root) or 1 + a head's top-k slot, at most ", flat);
  for (std::size_t j = 0; j < buf.retrieve_indices.size(); ++j)
    SPECDEC_EXPECTS(buf.retrieve_indices[j] < n, where, "buf.retrieve_indices[", j, "] = ", buf.retrieve_indices[j],
                    "; expected a node below ", n, " (or negative: padding)");
  candidates out;
  detail::host_topk<B> topk(b, head_logits.rows(), buf.top_k);
  topk.run(head_logits, detail::topk_scale::logits);
  out.head_topk = topk.indices();
  auto root = b.template allocate<std::int32_t>(1);
  b.row_argmax(base_logits, root.view());
  out.root_token = b.download(vector_view<const std::int32_t, typename B::memory_space>(root.view().data(), 1))[0];
  out.tree_candidates.resize(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) {
    const auto g = buf.tree_indices[static_cast<std::size_t>(i)];
    out.tree_candidates[static_cast<std::size_t>(i)] = g == 0 ? out.root_token : out.head_topk[static_cast<std::size_t>(g - 1)];
  }
  out.cart_candidates.resize(buf.retrieve_indices.size());
  for (std::size_t j = 0; j < buf.retrieve_indices.size(); ++j) {
    const auto node = buf.retrieve_indices[j];
    out.cart_candidates[j] = node < 0 ? pad_token : out.tree_candidates[static_cast<std::size_t>(node)];
  }
  return out;
}

}  // namespace specdec::medusa
