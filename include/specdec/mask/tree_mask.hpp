// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Tree-attention masks in every layout engines consume: dense (bool / 0-1 of any type),
/// additive float (0 / -inf), FlashInfer's packed little-endian bits with per-request `indptr`,
/// TensorRT-LLM's packed int32 words, and SGLang's one-item-per-row bit-packing. Node i attends
/// column j of the tree part iff j is i or an ancestor of i; every node attends the whole causal
/// prefix (the committed sequence before the root). Host memory.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include <specdec/core/checked.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>
#include <specdec/core/view_checks.hpp>
#include <specdec/mask/packbits.hpp>
#include <specdec/tree/tree.hpp>

namespace specdec {

namespace detail {
/// Calls visit(i, j) for every tree cell (i, j) that is set: j = i and each ancestor of i.
template <class Visit>
void for_each_ancestor_or_self(valid_tree tree, Visit&& visit) {
  for (index_t i = 0; i < tree.size(); ++i)
    for (index_t j = i; j >= 0; j = tree.parent(j)) visit(i, j);
}
}  // namespace detail

/// Dense mask `[n x (prefix_length + n)]`: columns [0, prefix_length) are the prefix (all set),
/// column prefix_length + j is tree node j. `out` holds any type constructible from 0 and 1 (bool,
/// uint8_t, float, ...). With prefix_length = 0 this is EAGLE's / Medusa's `tree_mask`.
/// \throws invalid_argument on a malformed tree (valid_tree), when out is not `[n x (prefix_length + n)]`
/// or prefix_length < 0.
template <class M>
void tree_mask_dense(valid_tree tree, index_t prefix_length, matrix_view<M> out) {
  constexpr const char* where = "specdec::tree_mask_dense";
  const index_t n = tree.size();
  SPECDEC_EXPECTS(prefix_length >= 0, where, "prefix_length = ", prefix_length, "; expected >= 0");
  const index_t cols = detail::checked_add(where, prefix_length, n, "prefix_length + nodes");
  SPECDEC_EXPECTS(out.rows() == n && out.cols() == cols, where, "out is ", out.rows(), " x ", out.cols(),
                  "; expected ", n, " x ", cols, " (nodes x (prefix_length + nodes))");
  detail::check_tree_outputs(where, tree.view(), detail::output("out", out));
  for (index_t i = 0; i < n; ++i) {
    for (index_t j = 0; j < prefix_length; ++j) out(i, j) = M(1);
    for (index_t j = 0; j < n; ++j) out(i, prefix_length + j) = M(0);
  }
  detail::for_each_ancestor_or_self(tree, [&](index_t i, index_t j) { out(i, prefix_length + j) = M(1); });
}

/// tree_mask_dense as a new host `[n x (prefix_length + n)]` row-major uint8 buffer (1: attend), the
/// form an engine's forward over a tree takes. \throws invalid_argument as the view form.
/// \throws invalid_argument too when the mask would exceed specdec::max_elements (checked before
///   allocating).
inline std::vector<std::uint8_t> tree_mask_dense(valid_tree tree, index_t prefix_length) {
  constexpr const char* where = "specdec::tree_mask_dense";
  SPECDEC_EXPECTS(prefix_length >= 0, where, "prefix_length = ", prefix_length, "; expected >= 0");
  const index_t cols = detail::checked_add(where, prefix_length, tree.size(), "prefix_length + nodes");
  std::vector<std::uint8_t> out(detail::checked_count(where, {tree.size(), cols}, "the mask [nodes x (prefix_length + nodes)]"));
  tree_mask_dense(tree, prefix_length, matrix_view<std::uint8_t>(out.data(), tree.size(), cols));
  return out;
}

/// Additive mask `[n x (prefix_length + n)]`: 0 where attention is allowed, -inf elsewhere (added to
/// attention scores before the softmax). \throws invalid_argument as tree_mask_dense.
template <class F>
void tree_mask_additive(valid_tree tree, index_t prefix_length, matrix_view<F> out) {
  tree_mask_dense(tree, prefix_length, out);
  for (index_t i = 0; i < out.rows(); ++i)
    for (index_t j = 0; j < out.cols(); ++j) out(i, j) = out(i, j) == F(1) ? F(0) : -std::numeric_limits<F>::infinity();
}

/// TensorRT-LLM's packed mask of the tree part: `[n x ceil(n / 32)]` int32 words; bit b of word w of
/// row i is set iff node i attends node 32 w + b (bit 0 = root). Bit 31 makes a word negative
/// (two's complement), as TensorRT-LLM stores it.
/// \throws invalid_argument on a malformed tree (valid_tree) or when out is not `[n x ceil(n / 32)]`.
inline void tree_mask_packed_int32(valid_tree tree, matrix_view<std::int32_t> out) {
  const index_t n = tree.size(), words = (n + 31) / 32;
  SPECDEC_EXPECTS(out.rows() == n && out.cols() == words, "specdec::tree_mask_packed_int32", "out is ", out.rows(),
                  " x ", out.cols(), "; expected ", n, " x ", words, " (nodes x ceil(nodes / 32))");
  detail::check_tree_outputs("specdec::tree_mask_packed_int32", tree.view(), detail::output("out", out));
  std::vector<std::uint32_t> bits(static_cast<std::size_t>(n * words), 0u);
  detail::for_each_ancestor_or_self(tree, [&](index_t i, index_t j) {
    bits[static_cast<std::size_t>(i * words + j / 32)] |= std::uint32_t(1) << (j % 32);
  });
  for (index_t i = 0; i < n; ++i)
    for (index_t w = 0; w < words; ++w) out(i, w) = static_cast<std::int32_t>(bits[static_cast<std::size_t>(i * words + w)]);
}

/// SGLang's QLEN_ONLY_BITPACKING rows: one little-endian item per node, bit j = tree column j (bit 0 =
/// root). `Item` is uint8_t, uint16_t or uint32_t, as SGLang picks for n <= 8, 16, 32.
/// \param out host `[n]`. \throws invalid_argument on a malformed tree (valid_tree), when n exceeds the
/// item's bits or on a length mismatch.
template <class Item>
void tree_mask_bitpacked_rows(valid_tree tree, vector_view<Item> out) {
  constexpr const char* where = "specdec::tree_mask_bitpacked_rows";
  const index_t n = tree.size();
  SPECDEC_EXPECTS(n <= static_cast<index_t>(8 * sizeof(Item)), where, "the tree has ", n,
                  " nodes; a ", 8 * sizeof(Item), "-bit item holds at most ", 8 * sizeof(Item),
                  " (use a wider item, or the packed int32 / FlashInfer layouts)");
  SPECDEC_EXPECTS(out.rows() == n, where, "out has ", out.rows(), " entries; expected one per node (", n, ")");
  detail::check_tree_outputs(where, tree.view(), detail::output("out", out));
  for (index_t i = 0; i < n; ++i) out(i) = Item(0);
  detail::for_each_ancestor_or_self(tree, [&](index_t i, index_t j) { out(i) = static_cast<Item>(out(i) | (Item(1) << j)); });
}

/// FlashInfer's packed custom mask for a ragged batch. Request r's mask is `[n_r x (prefix_r + n_r)]`
/// (as tree_mask_dense), flattened row-major and packed into bytes, bit b of byte m = element
/// 8 m + b (`bitorder="little"`); each request starts on a byte boundary. `indptr` gets batch + 1
/// byte offsets (FlashInfer's `mask_indptr` after `segment_packbits`).
/// \returns the packed bytes; `indptr` is resized to batch + 1.
/// \throws invalid_argument when the spans differ in length, a tree is malformed, a prefix length is
///   negative, or the packed masks exceed the 2^31 - 1 bytes an int32 `indptr` addresses.
inline std::vector<std::uint8_t> tree_mask_flashinfer_packed(std::span<const tree_view> trees,
                                                             std::span<const index_t> prefix_lengths,
                                                             std::vector<std::int32_t>& indptr) {
  constexpr const char* where = "specdec::tree_mask_flashinfer_packed";
  SPECDEC_EXPECTS(trees.size() == prefix_lengths.size(), where, "prefix_lengths has ", prefix_lengths.size(),
                  " entries; expected one per tree (", trees.size(), ")");
  // Built apart and moved into `indptr` at the end: a tree viewing indptr's own memory stays valid
  // while it is read, and a rejected call leaves indptr as it was.
  std::vector<std::int32_t> offsets(trees.size() + 1, 0);
  // Byte offsets are int32 (FlashInfer's mask_indptr), so the total is bounded before anything is
  // multiplied: the bounds keep every product below 2^63.
  constexpr index_t max_bytes = std::numeric_limits<std::int32_t>::max();
  std::vector<valid_tree> valid;
  valid.reserve(trees.size());
  for (std::size_t r = 0; r < trees.size(); ++r) {
    valid.emplace_back(trees[r]);
    SPECDEC_EXPECTS(prefix_lengths[r] >= 0, where, "prefix_lengths[", r, "] = ", prefix_lengths[r], "; expected >= 0");
    const index_t n = trees[r].size(), room = max_bytes - offsets[r];
    SPECDEC_EXPECTS(prefix_lengths[r] <= 8 * room / n - n && n * (prefix_lengths[r] + n) <= 8 * room, where,
                    "prefix_lengths[", r, "] = ", prefix_lengths[r], " with ", n, " nodes after ", offsets[r],
                    " bytes of earlier requests needs more than the int32 mask_indptr can address (", max_bytes, " bytes)");
    const index_t cells = n * (prefix_lengths[r] + n);
    offsets[r + 1] = static_cast<std::int32_t>(offsets[r] + (cells + 7) / 8);
  }
  std::vector<std::uint8_t> packed(static_cast<std::size_t>(offsets.back()), 0);
  for (std::size_t r = 0; r < trees.size(); ++r) {
    const index_t n = trees[r].size(), cols = prefix_lengths[r] + n;
    std::uint8_t* bytes = packed.data() + offsets[r];
    const auto set = [&](index_t i, index_t j) {
      const index_t bit = i * cols + j;
      bytes[bit / 8] = static_cast<std::uint8_t>(bytes[bit / 8] | (1u << (bit % 8)));
    };
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < prefix_lengths[r]; ++j) set(i, j);
    detail::for_each_ancestor_or_self(valid[r], [&](index_t i, index_t j) { set(i, prefix_lengths[r] + j); });
  }
  indptr = std::move(offsets);
  return packed;
}

/// tree_mask_flashinfer_packed over the library's own trees. \throws invalid_argument as the view form.
inline std::vector<std::uint8_t> tree_mask_flashinfer_packed(std::span<const draft_tree> trees,
                                                             std::span<const index_t> prefix_lengths,
                                                             std::vector<std::int32_t>& indptr) {
  const std::vector<tree_view> views(trees.begin(), trees.end());
  return tree_mask_flashinfer_packed(std::span<const tree_view>(views), prefix_lengths, indptr);
}

}  // namespace specdec
