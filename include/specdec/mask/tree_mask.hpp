// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Tree-attention masks in every layout engines consume: dense (bool / 0-1 of any type),
/// additive float (0 / -inf), FlashInfer's packed little-endian bits with per-request `indptr`,
/// TensorRT-LLM's packed int32 words, and SGLang's one-item-per-row bit-packing. Node i attends
/// column j of the tree part iff j is i or an ancestor of i; every node attends the whole causal
/// prefix (the committed sequence before the root). Host memory; each layout is written once, as
/// the team job of its batch form (tree_mask_batch.hpp), run here on one thread.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <specdec/core/checked.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>
#include <specdec/core/view_checks.hpp>
#include <specdec/mask/packbits.hpp>
#include <specdec/mask/tree_mask_batch.hpp>
#include <specdec/tree/tree.hpp>

namespace specdec {

namespace detail {
/// A valid tree as a padded batch of one request (its parents `[1 x n]`, no node counts): the host
/// forms below run the batch forms' team jobs (tree_mask_batch.hpp) over it on one thread, so each
/// layout is written once.
inline matrix_view<const std::int32_t> as_batch_of_one(valid_tree tree) noexcept {
  return {tree.view().parent.data(), 1, tree.size()};
}

/// The checks every host layout shares (prefix_length >= 0, out `[n x cols]` with cols = prefix_length + n
/// for dense rows, apart from the tree), then the layout's job on one thread.
template <batch_mask_layout Layout, class T>
void host_tree_mask(const char* where, valid_tree tree, index_t prefix_length, matrix_view<T> out, index_t cols = -1) {
  const index_t n = tree.size();
  SPECDEC_EXPECTS(prefix_length >= 0, where, "prefix_length = ", prefix_length, "; expected >= 0");
  if (cols < 0) {
    cols = checked_add(where, prefix_length, n, "prefix_length + nodes");
    SPECDEC_EXPECTS(out.rows() == n && out.cols() == cols, where, "out is ", out.rows(), " x ", out.cols(), "; expected ", n,
                    " x ", cols, " (nodes x (prefix_length + nodes))");
  }
  check_tree_outputs(where, tree.view(), output("out", out));
  batch_tree_mask_job<host_space, T, Layout> job{as_batch_of_one(tree), {}, out, prefix_length};
  name_job(job, where, {{mask_arg_parents, "tree.parent"}});
  run_serial(job, 1);
}
}  // namespace detail

/// Dense mask `[n x (prefix_length + n)]`: columns [0, prefix_length) are the prefix (all set),
/// column prefix_length + j is tree node j. `out` holds any type constructible from 0 and 1 (bool,
/// uint8_t, float, ...). With prefix_length = 0 this is EAGLE's / Medusa's `tree_mask`.
/// \throws invalid_argument on a malformed tree (valid_tree), when out is not `[n x (prefix_length + n)]`
/// or prefix_length < 0.
template <class M>
void tree_mask_dense(valid_tree tree, index_t prefix_length, matrix_view<M> out) {
  detail::host_tree_mask<detail::batch_mask_layout::dense>("specdec::tree_mask_dense", tree, prefix_length, out);
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
/// attention scores before the softmax). F is float or double. \throws invalid_argument as
/// tree_mask_dense.
template <class F>
void tree_mask_additive(valid_tree tree, index_t prefix_length, matrix_view<F> out) {
  static_assert(std::numeric_limits<F>::has_infinity, "an additive mask needs -inf");
  detail::host_tree_mask<detail::batch_mask_layout::additive>("specdec::tree_mask_additive", tree, prefix_length, out);
}

/// TensorRT-LLM's packed mask of the tree part: `[n x ceil(n / 32)]` int32 words; bit b of word w of
/// row i is set iff node i attends node 32 w + b (bit 0 = root). Bit 31 makes a word negative
/// (two's complement), as TensorRT-LLM stores it.
/// \throws invalid_argument on a malformed tree (valid_tree) or when out is not `[n x ceil(n / 32)]`.
inline void tree_mask_packed_int32(valid_tree tree, matrix_view<std::int32_t> out) {
  constexpr const char* where = "specdec::tree_mask_packed_int32";
  const index_t n = tree.size(), words = (n + 31) / 32;
  SPECDEC_EXPECTS(out.rows() == n && out.cols() == words, where, "out is ", out.rows(), " x ", out.cols(), "; expected ", n, " x ",
                  words, " (nodes x ceil(nodes / 32))");
  detail::host_tree_mask<detail::batch_mask_layout::packed_int32>(where, tree, 0, out, words);
}

/// SGLang's QLEN_ONLY_BITPACKING rows: one little-endian item per node, bit j = tree column j (bit 0 =
/// root). `Item` is an integer type: uint8_t, uint16_t or uint32_t, as SGLang picks for n <= 8, 16, 32.
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
  // Checked as the vector the caller passed (the job sees it as an [n x 1] matrix).
  detail::check_tree_outputs(where, tree.view(), detail::output("out", out));
  detail::host_tree_mask<detail::batch_mask_layout::bitpacked_rows>(where, tree, 0,
                                                                    matrix_view<Item>(out.data(), n, 1, out.stride(0), 1), 1);
}

/// FlashInfer's packed custom mask for a ragged batch. Request r's mask is `[n_r x (prefix_r + n_r)]`
/// (as tree_mask_dense), flattened row-major and packed into bytes, bit b of byte m = element
/// 8 m + b (`bitorder="little"`); each request starts on a byte boundary. `indptr` gets batch + 1
/// byte offsets (FlashInfer's `mask_indptr` after `segment_packbits`). The batch form's two jobs
/// (tree_mask_flashinfer_offsets, then _packed) over the trees as a padded batch, on one thread.
/// \returns the packed bytes; `indptr` is resized to batch + 1.
/// \throws invalid_argument when the spans differ in length, a tree is malformed, a prefix length is
///   outside [0, 2^31 - 1], or the packed masks exceed the 2^31 - 1 bytes an int32 `indptr` addresses.
inline std::vector<std::uint8_t> tree_mask_flashinfer_packed(std::span<const tree_view> trees,
                                                             std::span<const index_t> prefix_lengths,
                                                             std::vector<std::int32_t>& indptr) {
  constexpr const char* where = "specdec::tree_mask_flashinfer_packed";
  SPECDEC_EXPECTS(trees.size() == prefix_lengths.size(), where, "prefix_lengths has ", prefix_lengths.size(),
                  " entries; expected one per tree (", trees.size(), ")");
  // The trees as a padded batch (validated first: a tree viewing indptr's own memory is read before
  // indptr is replaced, and a rejected call leaves indptr as it was).
  index_t width = 1;
  for (const tree_view& t : trees) width = std::max(width, valid_tree(t).size());
  const auto batch = static_cast<index_t>(trees.size());
  std::vector<std::int32_t> parents(detail::checked_count(where, {batch, width}, "the padded parents [trees x nodes]"), -1);
  std::vector<std::int32_t> counts(trees.size());
  for (std::size_t r = 0; r < trees.size(); ++r) {
    std::copy(trees[r].parent.begin(), trees[r].parent.end(), parents.begin() + static_cast<std::ptrdiff_t>(r) * width);
    counts[r] = static_cast<std::int32_t>(trees[r].size());
  }
  const matrix_view<const std::int32_t> padded(parents.data(), batch, width);
  const vector_view<const std::int32_t> node_counts(counts.data(), batch);
  const vector_view<const std::int64_t> prefixes(prefix_lengths.data(), batch);
  std::vector<std::int32_t> offsets(trees.size() + 1, 0);
  detail::flashinfer_offsets_job<host_space> sizes{padded, node_counts, prefixes, vector_view<std::int32_t>(offsets.data(), batch + 1)};
  detail::name_flashinfer_arguments(sizes, where);
  detail::run_serial(sizes, 1);
  std::vector<std::uint8_t> packed(static_cast<std::size_t>(offsets.back()), 0);
  detail::flashinfer_mask_job<host_space> bits{padded, node_counts, prefixes,
                                               vector_view<const std::int32_t>(offsets.data(), batch + 1),
                                               vector_view<std::uint8_t>(packed.data(), offsets.back())};
  detail::name_flashinfer_arguments(bits, where);
  detail::run_serial(bits, batch);
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
