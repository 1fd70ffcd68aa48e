// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Tree-attention masks of a padded batch of trees (`sampling::tree_batch`'s `parents`
/// `[batch x N]` and optional `node_counts`), computed where the trees live: on any team backend, one
/// team per request (on CUDA one block per request, one launch). The layouts are tree_mask.hpp's, one
/// request's rows after another's: dense 0 / 1 and additive 0 / -inf `[batch N x (prefix_length + N)]`
/// (EAGLE's and Medusa's `tree_mask`, SGLang's QLEN_ONLY with prefix_length 0), TensorRT-LLM's packed
/// int32 words `[batch N x ceil(N / 32)]`, SGLang's one-item-per-row bit-packing `[batch N]`, and
/// FlashInfer's ragged packed masks with a prefix length per request (`indptr` offsets). The
/// tree that EAGLE-2's device builder (eagle2_batch.hpp) writes goes straight in.
///
/// Padding: a request with c < N nodes has rows c .. N - 1 that are no node of its tree; each attends
/// the prefix and itself only (no attention row is empty) and no node attends them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include <specdec/backend/concept.hpp>
#include <specdec/backend/detail/checks.hpp>
#include <specdec/backend/detail/math.hpp>
#include <specdec/backend/detail/team.hpp>
#include <specdec/config.hpp>
#include <specdec/core/checked.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>
#include <specdec/core/view_checks.hpp>
#include <specdec/mask/detail/faults.hpp>

namespace specdec {

namespace detail {

enum class batch_mask_layout { dense, additive, packed_int32, bitpacked_rows };

enum batch_mask_arg : int { mask_arg_parents, mask_arg_node_counts };

/// Request b's node count (node_counts(b), or N when empty) and the check of its tree: a count in [1, N],
/// -1 at node 0, every other parent an earlier node (so each walk to the root ends). Every thread of a
/// team checks (the same reads give the same verdict).
template <class Space>
SPECDEC_HOST_DEVICE team_fault check_padded_tree(const matrix_view<const std::int32_t, Space>& parents,
                                                 const vector_view<const std::int32_t, Space>& node_counts, index_t b,
                                                 int parents_arg, int counts_arg, index_t& count) {
  const index_t n = parents.cols();
  count = node_counts.empty() ? n : node_counts(b);
  if (count < 1 || count > n) return make_team_fault(tree_fault::node_count, counts_arg, b, 0, double(count), n);
  if (parents(b, 0) != -1) return make_team_fault(tree_fault::root_parent, parents_arg, b, 0, parents(b, 0));
  for (index_t i = 1; i < count; ++i)
    if (parents(b, i) < 0 || parents(b, i) >= i) return make_team_fault(tree_fault::bad_parent, parents_arg, b, i, parents(b, i));
  return {};
}

/// One request's mask rows per team: every thread checks the request's parents (the same reads give the
/// same verdict; parents before children, so each walk to the root ends), then the threads split the
/// rows, each writing its rows whole.
template <class Space, class T, batch_mask_layout Layout>
struct batch_tree_mask_job {
  matrix_view<const std::int32_t, Space> parents;      // [batch x N]
  vector_view<const std::int32_t, Space> node_counts;  // [batch], or empty: N each
  matrix_view<T, Space> out;                           // the layout's rows, N per request
  index_t prefix_length = 0;                           // dense / additive
  const char* where = "";
  const char* names[team_job_names] = {};
  static void describe(const char* where, const char* name, const specdec::detail::team_fault& f) {
    specdec::detail::describe_mask_fault(where, name, f);
  }

  std::size_t scratch_bytes() const { return 0; }

  template <class Team>
  SPECDEC_HOST_DEVICE team_fault operator()(Team& team, index_t b, std::byte*) const {
    const index_t n = parents.cols();
    index_t count = 0;
    if (const team_fault f = check_padded_tree(parents, node_counts, b, mask_arg_parents, mask_arg_node_counts, count); f.code != 0)
      return f;
    for (index_t i = team.rank(); i < n; i += team.size()) {
      const index_t row = b * n + i;
      if constexpr (Layout == batch_mask_layout::dense || Layout == batch_mask_layout::additive) {
        T on = T(1), off = T(0);
        if constexpr (Layout == batch_mask_layout::additive) {
          on = T(0);
          off = negative_infinity<T>();
        }
        for (index_t j = 0; j < prefix_length; ++j) out(row, j) = on;
        for (index_t j = 0; j < n; ++j) out(row, prefix_length + j) = off;
        out(row, prefix_length + i) = on;
        if (i < count)
          for (index_t j = parents(b, i); j >= 0; j = parents(b, j)) out(row, prefix_length + j) = on;
      } else if constexpr (Layout == batch_mask_layout::packed_int32) {
        for (index_t w = 0; w < out.cols(); ++w) out(row, w) = 0;
        const auto set = [&](index_t j) {
          out(row, j / 32) = static_cast<std::int32_t>(static_cast<std::uint32_t>(out(row, j / 32)) | (std::uint32_t(1) << (j % 32)));
        };
        set(i);
        if (i < count)
          for (index_t j = parents(b, i); j >= 0; j = parents(b, j)) set(j);
      } else {
        std::uint32_t bits = std::uint32_t(1) << i;
        if (i < count)
          for (index_t j = parents(b, i); j >= 0; j = parents(b, j)) bits |= std::uint32_t(1) << j;
        out(row, 0) = static_cast<T>(bits);
      }
    }
    return {};
  }
};

/// The checks every layout shares, then the launch: `out` has `batch N` rows of `cols` entries.
template <batch_mask_layout Layout, team_backend B, class T>
void batch_tree_mask(B& b, const char* where, matrix_view<const std::int32_t, typename B::memory_space> parents,
                     vector_view<const std::int32_t, typename B::memory_space> node_counts,
                     matrix_view<T, typename B::memory_space> out, index_t prefix_length, index_t cols) {
  const index_t batch = parents.rows(), n = parents.cols();
  check_view(where, "parents", parents, 0);
  check_view(where, "node_counts", node_counts, 0);
  check_view(where, "out", out, indexed_output);
  SPECDEC_EXPECTS(batch == 0 || n >= 1, where, "parents is ", batch, " x ", n, "; expected at least the root per request");
  SPECDEC_EXPECTS(node_counts.empty() || node_counts.rows() == batch, where, "node_counts has ", node_counts.rows(),
                  " entries; expected one per request (", batch, ") or none");
  SPECDEC_EXPECTS(prefix_length >= 0, where, "prefix_length = ", prefix_length, "; expected >= 0");
  const index_t rows = checked_mul(where, batch, n, "batch * N");
  SPECDEC_EXPECTS(out.rows() == rows && out.cols() == cols, where, "out is ", out.rows(), " x ", out.cols(), "; expected ", rows,
                  " x ", cols);
  for (const view_extent& input : {extent_of(where, "parents", parents), extent_of(where, "node_counts", node_counts)})
    check_disjoint(where, extent_of(where, "out", out), input);
  batch_tree_mask_job<typename B::memory_space, T, Layout> job{parents, node_counts, out, prefix_length};
  name_job(job, where, {{mask_arg_parents, "parents"}, {mask_arg_node_counts, "node_counts"}});
  b.run_teams(batch, job);
}

enum flashinfer_mask_arg : int { fmask_arg_parents, fmask_arg_node_counts, fmask_arg_prefix_lengths, fmask_arg_indptr };

/// Request r's packed mask is n_r x (prefix_r + n_r) bits, n_r its node count.
SPECDEC_HOST_DEVICE inline index_t flashinfer_mask_bytes(index_t nodes, index_t prefix) { return (nodes * (prefix + nodes) + 7) / 8; }

/// The byte offsets of FlashInfer's packed masks, one team (rank 0 scans; a batch has a few hundred
/// requests). Prefix lengths are bounded by int32 and the running total checked against it, so
/// nothing overflows.
template <class Space>
struct flashinfer_offsets_job {
  matrix_view<const std::int32_t, Space> parents;         // [batch x N]: N bounds the node counts
  vector_view<const std::int32_t, Space> node_counts;     // [batch] or empty
  vector_view<const std::int64_t, Space> prefix_lengths;  // [batch]
  vector_view<std::int32_t, Space> indptr;                // [batch + 1]
  const char* where = "";
  const char* names[team_job_names] = {};
  static void describe(const char* where, const char* name, const specdec::detail::team_fault& f) {
    specdec::detail::describe_mask_fault(where, name, f);
  }

  std::size_t scratch_bytes() const { return 0; }

  template <class Team>
  SPECDEC_HOST_DEVICE team_fault operator()(Team& team, index_t, std::byte*) const {
    const index_t batch = parents.rows(), n = parents.cols();
    index_t at = 0;
    for (index_t r = 0; r < batch; ++r) {
      const index_t count = node_counts.empty() ? n : node_counts(r), prefix = prefix_lengths(r);
      if (count < 1 || count > n) return make_team_fault(tree_fault::node_count, fmask_arg_node_counts, r, 0, double(count), n);
      if (prefix < 0 || prefix > INT32_MAX)
        return make_team_fault(mask_fault::sequence_length, fmask_arg_prefix_lengths, r, 0, double(prefix), INT32_MAX);
      if (team.rank() == 0) indptr(r) = static_cast<std::int32_t>(at);
      at += flashinfer_mask_bytes(count, prefix);
      if (at > INT32_MAX) return make_team_fault(mask_fault::packed_size, fmask_arg_indptr, r, at, 0.0, INT32_MAX);
    }
    if (team.rank() == 0) indptr(batch) = static_cast<std::int32_t>(at);
    return {};
  }
};

/// FlashInfer's packed masks, one team per request: the threads split the request's bytes (a byte can
/// straddle two rows), each bit the cell (i, j) of the request's n_r x (prefix_r + n_r) mask, row-major,
/// bit b of byte m = cell 8 m + b. Each team checks its tree and its link of the offsets' chain.
template <class Space>
struct flashinfer_mask_job {
  matrix_view<const std::int32_t, Space> parents;
  vector_view<const std::int32_t, Space> node_counts;
  vector_view<const std::int64_t, Space> prefix_lengths;
  vector_view<const std::int32_t, Space> indptr;  // [batch + 1]
  vector_view<std::uint8_t, Space> out;
  const char* where = "";
  const char* names[team_job_names] = {};
  static void describe(const char* where, const char* name, const specdec::detail::team_fault& f) {
    specdec::detail::describe_mask_fault(where, name, f);
  }

  std::size_t scratch_bytes() const { return 0; }

  template <class Team>
  SPECDEC_HOST_DEVICE team_fault operator()(Team& team, index_t r, std::byte*) const {
    const index_t batch = parents.rows(), prefix = prefix_lengths(r);
    index_t count = 0;
    if (const team_fault f = check_padded_tree(parents, node_counts, r, fmask_arg_parents, fmask_arg_node_counts, count); f.code != 0)
      return f;
    if (prefix < 0 || prefix > INT32_MAX)
      return make_team_fault(mask_fault::sequence_length, fmask_arg_prefix_lengths, r, 0, double(prefix), INT32_MAX);
    const index_t at = indptr(r), next = indptr(r + 1), bytes = flashinfer_mask_bytes(count, prefix), size = out.rows();
    if (r == 0 && at != 0) return make_team_fault(mask_fault::packed_offset, fmask_arg_indptr, 0, at, 0.0, 0);
    if (next != at + bytes) return make_team_fault(mask_fault::packed_offset, fmask_arg_indptr, r + 1, next, 0.0, at + bytes);
    if (r == batch - 1 && next != size) return make_team_fault(mask_fault::packed_offset, fmask_arg_indptr, r + 1, next, 0.0, size);
    if (at < 0 || next > size) return make_team_fault(mask_fault::packed_offset, fmask_arg_indptr, r + 1, next, 0.0, size);
    const index_t cols = prefix + count, cells = count * cols;
    for (index_t m = team.rank(); m < bytes; m += team.size()) {
      unsigned byte = 0;
      for (index_t b = 0; b < 8 && 8 * m + b < cells; ++b) {
        const index_t i = (8 * m + b) / cols, j = (8 * m + b) % cols;
        bool set = j < prefix;
        for (index_t a = i; !set && a >= 0; a = parents(r, a)) set = a == j - prefix;
        if (set) byte |= 1u << b;
      }
      out(at + m) = static_cast<std::uint8_t>(byte);
    }
    return {};
  }
};

template <class Job>
void name_flashinfer_arguments(Job& job, const char* where) {
  name_job(job, where,
           {{fmask_arg_parents, "parents"}, {fmask_arg_node_counts, "node_counts"}, {fmask_arg_prefix_lengths, "prefix_lengths"},
            {fmask_arg_indptr, "indptr"}});
}

template <class Space>
void check_flashinfer_inputs(const char* where, const matrix_view<const std::int32_t, Space>& parents,
                             const vector_view<const std::int32_t, Space>& node_counts,
                             const vector_view<const std::int64_t, Space>& prefix_lengths) {
  const index_t batch = parents.rows();
  check_view(where, "parents", parents, 0);
  check_view(where, "node_counts", node_counts, 0);
  check_view(where, "prefix_lengths", prefix_lengths, 0);
  // N <= 2^31 - 1 with prefixes <= 2^31 - 1 keeps a request's n (prefix + n) bits below 2^63.
  SPECDEC_EXPECTS(batch == 0 || (parents.cols() >= 1 && parents.cols() <= std::numeric_limits<std::int32_t>::max()), where,
                  "parents is ", batch, " x ", parents.cols(), "; expected 1 <= N <= 2^31 - 1 nodes per request");
  SPECDEC_EXPECTS(node_counts.empty() || node_counts.rows() == batch, where, "node_counts has ", node_counts.rows(),
                  " entries; expected one per request (", batch, ") or none");
  SPECDEC_EXPECTS(prefix_lengths.rows() == batch, where, "prefix_lengths has ", prefix_lengths.rows(), " entries; expected one per request (",
                  batch, ")");
}

}  // namespace detail

/// The byte offsets of tree_mask_flashinfer_packed for a padded batch on a backend (FlashInfer's
/// `mask_indptr`): `indptr` `[batch + 1]` int32 in its memory, request r's n_r (prefix_r + n_r) bits
/// rounded up to bytes (n_r its node count); one team, one launch. The packed size is `indptr[batch]`,
/// which a caller reads back once to allocate the output (FlashInfer's wrapper does the same).
/// \param parents `[batch x N]` (its width bounds the node counts), \param node_counts `[batch]` or empty
///   (N each), \param prefix_lengths int64 `[batch]`, each in [0, 2^31 - 1].
/// \throws invalid_argument on shapes or an `indptr` overlapping an input; from the team: a node count
///   or prefix length out of range, or masks beyond the 2^31 - 1 bytes an int32 offset addresses.
template <team_backend B>
void tree_mask_flashinfer_offsets(B& b, matrix_view<const std::int32_t, typename B::memory_space> parents,
                                  vector_view<const std::int32_t, typename B::memory_space> node_counts,
                                  vector_view<const std::int64_t, typename B::memory_space> prefix_lengths,
                                  vector_view<std::int32_t, typename B::memory_space> indptr) {
  constexpr const char* where = "specdec::tree_mask_flashinfer_offsets";
  detail::check_flashinfer_inputs(where, parents, node_counts, prefix_lengths);
  detail::check_view(where, "indptr", indptr, detail::indexed_output);
  SPECDEC_EXPECTS(indptr.rows() == parents.rows() + 1, where, "indptr has ", indptr.rows(), " entries; expected batch + 1 = ",
                  parents.rows() + 1);
  for (const detail::view_extent& input : {detail::extent_of(where, "parents", parents), detail::extent_of(where, "node_counts", node_counts),
                                           detail::extent_of(where, "prefix_lengths", prefix_lengths)})
    detail::check_disjoint(where, detail::extent_of(where, "indptr", indptr), input);
  detail::flashinfer_offsets_job<typename B::memory_space> job{parents, node_counts, prefix_lengths, indptr};
  detail::name_flashinfer_arguments(job, where);
  b.run_teams(1, job);
}

/// tree_mask_flashinfer_packed for a padded batch on a backend: request r's n_r x (prefix_r + n_r) mask
/// (every node attends the prefix, itself and its ancestors), flattened row-major and packed
/// little-endian from byte `indptr[r]` of `out`; one team per request, one launch. The bytes equal the
/// host form's over the same trees. \param indptr from tree_mask_flashinfer_offsets (each team checks
///   its link of the chain); \param out `indptr[batch]` bytes.
/// \throws invalid_argument on shapes or an `out` overlapping an input; from the team: a node count,
///   prefix length or parent out of range, or offsets that are not tree_mask_flashinfer_offsets'.
template <team_backend B>
void tree_mask_flashinfer_packed(B& b, matrix_view<const std::int32_t, typename B::memory_space> parents,
                                 vector_view<const std::int32_t, typename B::memory_space> node_counts,
                                 vector_view<const std::int64_t, typename B::memory_space> prefix_lengths,
                                 vector_view<const std::int32_t, typename B::memory_space> indptr,
                                 vector_view<std::uint8_t, typename B::memory_space> out) {
  constexpr const char* where = "specdec::tree_mask_flashinfer_packed";
  detail::check_flashinfer_inputs(where, parents, node_counts, prefix_lengths);
  detail::check_view(where, "indptr", indptr, 0);
  detail::check_view(where, "out", out, detail::indexed_output);
  SPECDEC_EXPECTS(indptr.rows() == parents.rows() + 1, where, "indptr has ", indptr.rows(), " entries; expected batch + 1 = ",
                  parents.rows() + 1);
  for (const detail::view_extent& input :
       {detail::extent_of(where, "parents", parents), detail::extent_of(where, "node_counts", node_counts),
        detail::extent_of(where, "prefix_lengths", prefix_lengths), detail::extent_of(where, "indptr", indptr)})
    detail::check_disjoint(where, detail::extent_of(where, "out", out), input);
  detail::flashinfer_mask_job<typename B::memory_space> job{parents, node_counts, prefix_lengths, indptr, out};
  detail::name_flashinfer_arguments(job, where);
  b.run_teams(parents.rows(), job);
}

/// tree_mask_dense for every tree of a padded batch, on a backend: `out` `[batch N x (prefix_length +
/// N)]` in its memory, request b's rows b N .. b N + N - 1 (1: attend; M any type constructible from 0
/// and 1). \param parents `[batch x N]` int32, -1 at node 0, parents before children;
/// \param node_counts `[batch]` (each in [1, N]) or empty (N each).
/// \throws invalid_argument on shapes, an `out` overlapping an input; from the team (on CUDA with
///   deferred faults, from `check_faults()`): a node count out of range or a malformed parent.
template <team_backend B, class M>
void tree_mask_dense(B& b, matrix_view<const std::int32_t, typename B::memory_space> parents,
                     vector_view<const std::int32_t, typename B::memory_space> node_counts, index_t prefix_length,
                     matrix_view<M, typename B::memory_space> out) {
  constexpr const char* where = "specdec::tree_mask_dense";
  const index_t cols = detail::checked_add(where, prefix_length, parents.cols(), "prefix_length + N");
  detail::batch_tree_mask<detail::batch_mask_layout::dense>(b, where, parents, node_counts, out, prefix_length, cols);
}

/// tree_mask_additive for every tree of a padded batch (0 where attention is allowed, -inf elsewhere),
/// as the dense form. F is float or double.
template <team_backend B, class F>
void tree_mask_additive(B& b, matrix_view<const std::int32_t, typename B::memory_space> parents,
                        vector_view<const std::int32_t, typename B::memory_space> node_counts, index_t prefix_length,
                        matrix_view<F, typename B::memory_space> out) {
  static_assert(std::numeric_limits<F>::has_infinity, "an additive mask needs -inf");
  constexpr const char* where = "specdec::tree_mask_additive";
  const index_t cols = detail::checked_add(where, prefix_length, parents.cols(), "prefix_length + N");
  detail::batch_tree_mask<detail::batch_mask_layout::additive>(b, where, parents, node_counts, out, prefix_length, cols);
}

/// TensorRT-LLM's packed mask (tree_mask_packed_int32) for every tree of a padded batch: `out`
/// `[batch N x ceil(N / 32)]` int32 words, as the dense form otherwise.
template <team_backend B>
void tree_mask_packed_int32(B& b, matrix_view<const std::int32_t, typename B::memory_space> parents,
                            vector_view<const std::int32_t, typename B::memory_space> node_counts,
                            matrix_view<std::int32_t, typename B::memory_space> out) {
  detail::batch_tree_mask<detail::batch_mask_layout::packed_int32>(b, "specdec::tree_mask_packed_int32", parents, node_counts, out,
                                                                   0, parents.cols() / 32 + (parents.cols() % 32 != 0 ? 1 : 0));
}

/// SGLang's QLEN_ONLY_BITPACKING rows (tree_mask_bitpacked_rows) for every tree of a padded batch: `out`
/// `[batch N]` items (uint8_t, uint16_t or uint32_t; N at most their bits), as the dense form otherwise.
template <team_backend B, class Item>
void tree_mask_bitpacked_rows(B& b, matrix_view<const std::int32_t, typename B::memory_space> parents,
                              vector_view<const std::int32_t, typename B::memory_space> node_counts,
                              vector_view<Item, typename B::memory_space> out) {
  static_assert(std::is_same_v<Item, std::uint8_t> || std::is_same_v<Item, std::uint16_t> || std::is_same_v<Item, std::uint32_t>,
                "bit-packed rows are uint8_t, uint16_t or uint32_t items");
  constexpr const char* where = "specdec::tree_mask_bitpacked_rows";
  SPECDEC_EXPECTS(parents.cols() <= static_cast<index_t>(8 * sizeof(Item)), where, "parents has ", parents.cols(),
                  " columns; a ", 8 * sizeof(Item), "-bit item holds at most ", 8 * sizeof(Item), " nodes");
  detail::check_view(where, "out", out, detail::indexed_output);
  const matrix_view<Item, typename B::memory_space> rows(out.data(), out.rows(), 1, out.stride(0), 1);
  detail::batch_tree_mask<detail::batch_mask_layout::bitpacked_rows>(b, where, parents, node_counts, rows, 0, 1);
}

}  // namespace specdec
