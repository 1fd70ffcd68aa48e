// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief SGLang's EAGLE tree buffers, bit for bit: `organize_draft_results` and the
/// `build_tree_kernel_efficient` outputs (positions, retrive_index, retrive_next_token,
/// retrive_next_sibling, and the tree mask in FULL_MASK, QLEN_ONLY and QLEN_ONLY_BITPACKING), for
/// batches of requests with their own sequence lengths: on the host, and with SGLang's kernel signature
/// on any team backend, every buffer in its memory; and `reconstruct_indices_from_tree_mask`, the same
/// buffers from the masks alone (SGLang's n-gram trees). The dynamic draft loop itself is
/// eagle2_tree_builder with `tree_score::probability` and depth = `speculative_num_steps - 1`;
/// verification of these buffers is in sglang.hpp.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/backend/detail/checks.hpp>
#include <specdec/backend/detail/team.hpp>
#include <specdec/config.hpp>
#include <specdec/core/checked.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>
#include <specdec/core/view_checks.hpp>
#include <specdec/interop/detail/faults.hpp>
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

/// \throws invalid_argument when the lists differ in length, N - 1 exceeds the candidates, a score is
///   NaN (the ranking would be undefined) or a token is negative.
inline organized organize_draft_results(std::span<const float> flat_scores, std::span<const std::int64_t> flat_tokens,
                                        std::span<const std::int64_t> step_parents, index_t num_draft_tokens) {
  constexpr const char* where = "specdec::sglang::organize_draft_results";
  SPECDEC_EXPECTS(flat_scores.size() == flat_tokens.size(), where, "flat_scores has ", flat_scores.size(),
                  " entries and flat_tokens ", flat_tokens.size(), "; expected one token per score");
  SPECDEC_EXPECTS(num_draft_tokens >= 1 && num_draft_tokens - 1 <= static_cast<index_t>(flat_scores.size()), where,
                  "num_draft_tokens = ", num_draft_tokens, "; expected 1 <= num_draft_tokens <= 1 + ", flat_scores.size(),
                  " candidates");
  const index_t keep = num_draft_tokens - 1;
  for (std::size_t i = 0; i < flat_scores.size(); ++i) {
    SPECDEC_EXPECTS(!std::isnan(flat_scores[i]), where, "flat_scores[", i, "] is NaN; expected a score (-inf and +inf rank)");
    SPECDEC_EXPECTS(flat_tokens[i] >= 0, where, "flat_tokens[", i, "] = ", flat_tokens[i], "; expected a token id >= 0");
  }
  organized out;
  out.selected = detail::best_indices<std::int64_t>(flat_scores, keep);
  std::sort(out.selected.begin(), out.selected.end());
  for (const std::int64_t f : out.selected) out.tokens.push_back(flat_tokens[static_cast<std::size_t>(f)]);
  out.parent_list.assign(step_parents.begin(), step_parents.end());
  return out;
}

/// The most nodes per request build_tree takes (SGLang's N is at most a few hundred); its masks and
/// walks are quadratic in N.
inline constexpr index_t max_nodes = index_t{1} << 16;

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

/// The longest verified sequence build_tree takes (2^40: every mask size stays far from overflow).
inline constexpr index_t max_sequence_length = index_t{1} << 40;

namespace detail {

using specdec::detail::make_team_fault;
using specdec::detail::mask_fault;
using specdec::detail::team_fault;

/// Argument indices of sglang_build_job's fault names.
enum sglang_build_arg : int { arg_verified_seq_len, arg_tree_mask };

/// `build_tree_kernel_efficient`, one request per team (backend/detail/team.hpp). The threads find the
/// nodes' parents (a scan of the selected entries each, SGLang's search), rank 0 links the child lists,
/// then each thread walks its rows to the root for the depth and the mask bits. Every entry of the
/// request's outputs is written, the mask's whole region included. Scratch: the parents (N entries).
template <class Space>
struct sglang_build_job {
  matrix_view<const std::int64_t, Space> parent_list;     // [bs x P]
  matrix_view<const std::int64_t, Space> selected_index;  // [bs x (N - 1)]
  vector_view<const std::int64_t, Space> seq_lens;        // [bs]
  vector_view<std::uint8_t, Space> tree_mask;             // bytes: bools, or little-endian items when bit-packed
  vector_view<std::int64_t, Space> positions;             // [bs * N]
  matrix_view<std::int64_t, Space> retrive_index;         // [bs x N]
  matrix_view<std::int64_t, Space> next_token;            // [bs x N]
  matrix_view<std::int64_t, Space> next_sibling;          // [bs x N]
  index_t top_k = 1;
  index_t num_steps = 1;
  tree_mask_mode mode = tree_mask_mode::full_mask;
  index_t item_bytes = 4;  // bit-packed items: 1, 2 or 4 bytes
  retrieve_scope scope = retrieve_scope::global;
  const char* where = "";
  const char* names[specdec::detail::team_job_names] = {};
  static void describe(const char* where, const char* name, const specdec::detail::team_fault& f) {
    specdec::detail::describe_interop_fault(where, name, f);
  }

  std::size_t scratch_bytes() const { return static_cast<std::size_t>(retrive_index.cols()) * sizeof(index_t); }

  template <class Team>
  SPECDEC_HOST_DEVICE team_fault operator()(Team& team, index_t b, std::byte* scratch) const {
    const index_t n = retrive_index.cols(), bs = seq_lens.rows(), mask_size = tree_mask.rows();
    auto* parent_of = reinterpret_cast<index_t*>(scratch);
    const index_t seq_len = seq_lens(b);
    if (seq_len < 0 || seq_len > max_sequence_length)
      return make_team_fault(mask_fault::sequence_length, arg_verified_seq_len, b, 0, static_cast<double>(seq_len), max_sequence_length);
    // The request's region of the mask: FULL_MASK's requests are n x (seq_len + n) each, back to back,
    // so the start sums the earlier requests' (SGLang's kernel does the same); the comparisons are
    // written so that nothing overflows whatever the lengths.
    index_t start = 0, cols = n, first_tree_col = 0, bytes = 0;
    if (mode == tree_mask_mode::full_mask) {
      for (index_t r = 0; r < b; ++r) {
        const index_t s = seq_lens(r);
        if (s < 0 || s > max_sequence_length)
          return make_team_fault(mask_fault::sequence_length, arg_verified_seq_len, r, 0, static_cast<double>(s), max_sequence_length);
        if (n * (s + n) > mask_size - start) {
          const index_t need = n * (s + n) > INT64_MAX - start ? INT64_MAX : start + n * (s + n);
          return make_team_fault(mask_fault::mask_entries, arg_tree_mask, r, need, 0.0, mask_size);
        }
        start += n * (s + n);
      }
      cols = seq_len + n;
      first_tree_col = seq_len;
      bytes = n * cols;
    } else if (mode == tree_mask_mode::qlen_only) {
      start = b * n * n;
      bytes = n * n;
    } else {
      start = b * n * item_bytes;
      bytes = n * item_bytes;
    }
    if (bytes > mask_size - start) {
      const index_t need = bytes > INT64_MAX - start ? INT64_MAX : start + bytes;
      return make_team_fault(mask_fault::mask_entries, arg_tree_mask, b, need, 0.0, mask_size);
    }
    if (mode == tree_mask_mode::full_mask && b == bs - 1 && start + bytes != mask_size)
      return make_team_fault(mask_fault::mask_entries, arg_tree_mask, b, start + bytes, 1.0, mask_size);

    // Tree parent of node i >= 1: 0 = root, -1 = not among the selected nodes (the first selected
    // entry holding the parent's flat index wins).
    for (index_t i = 1 + team.rank(); i < n; i += team.size()) {
      const std::int64_t group = selected_index(b, i - 1) / top_k;
      index_t p = 0;
      if (group != 0) {
        p = -1;
        if (group > 0 && group < parent_list.cols()) {
          const std::int64_t want = parent_list(b, group);
          for (index_t j = 0; j < n - 1; ++j)
            if (selected_index(b, j) == want) {
              p = j + 1;
              break;
            }
        }
      }
      parent_of[i] = p;
    }
    for (index_t i = team.rank(); i < n; i += team.size())
      retrive_index(b, i) = scope == retrieve_scope::global ? b * n + i : i;
    if (mode != tree_mask_mode::qlen_only_bitpacking)  // the prefix's ones, the tree part cleared
      for (index_t row = 0; row < n; ++row)
        for (index_t c = team.rank(); c < cols; c += team.size()) tree_mask(start + row * cols + c) = c < first_tree_col ? 1 : 0;
    team.sync();
    if (team.rank() == 0) {
      // Head insertion from the last node keeps each child list in increasing index order.
      for (index_t i = 0; i < n; ++i) next_token(b, i) = next_sibling(b, i) = -1;
      for (index_t i = n - 1; i >= 1; --i) {
        const index_t p = parent_of[i];
        if (p < 0) continue;
        next_sibling(b, i) = next_token(b, p);
        next_token(b, p) = i;
      }
    }
    for (index_t i = team.rank(); i < n; i += team.size()) {
      std::uint32_t bits = 0;  // bit-packed row
      const auto set = [&](index_t col) {
        if (mode == tree_mask_mode::qlen_only_bitpacking) bits |= std::uint32_t(1) << col;
        else tree_mask(start + i * cols + first_tree_col + col) = 1;
      };
      set(0);
      index_t depth = 0;
      if (i > 0) {
        set(i);
        // A walk that has not reached the root after n hops cycles among nodes it has already marked;
        // SGLang's walk would go on to S hops, adding nothing but depth, so the depth becomes S.
        index_t current = i;
        bool reached = false;
        const index_t hops = num_steps < n ? num_steps : n;
        for (index_t hop = 0; hop < hops; ++hop) {
          const index_t p = parent_of[current];
          ++depth;
          if (p <= 0) {
            reached = true;
            break;
          }
          set(p);
          current = p;
        }
        if (!reached) depth = num_steps;
      }
      positions(b * n + i) = seq_len + depth;
      if (mode == tree_mask_mode::qlen_only_bitpacking)
        for (index_t k = 0; k < item_bytes; ++k) tree_mask(start + i * item_bytes + k) = static_cast<std::uint8_t>(bits >> (8 * k));
    }
    team.sync();  // the scratch is read until here
    return {};
  }
};

/// The checks build_tree's two forms share: N in [1, max_nodes], k >= 1, S in [1, 2^40], N within the
/// bit-packed item, and every matrix `[bs x ...]` as the mode needs.
template <class Space>
void check_build_shapes(const char* where, const matrix_view<const std::int64_t, Space>& parent_list,
                        const matrix_view<const std::int64_t, Space>& selected_index, index_t bs, index_t n, index_t top_k,
                        index_t num_steps, tree_mask_mode mode, index_t item_bytes) {
  SPECDEC_EXPECTS(n >= 1 && top_k >= 1 && num_steps >= 1, where, "num_draft_tokens = ", n, ", top_k = ", top_k,
                  ", num_steps = ", num_steps, "; expected each >= 1");
  SPECDEC_EXPECTS(n <= max_nodes, where, "num_draft_tokens = ", n, "; expected at most ", max_nodes, " nodes per request");
  SPECDEC_EXPECTS(num_steps <= (index_t{1} << 40), where, "num_steps = ", num_steps, "; expected at most 2^40");
  specdec::detail::check_view(where, "parent_list", parent_list, 0);
  specdec::detail::check_view(where, "selected_index", selected_index, 0);
  SPECDEC_EXPECTS(parent_list.rows() == bs, where, "parent_list has ", parent_list.rows(), " rows; expected ", bs);
  SPECDEC_EXPECTS(selected_index.rows() == bs && selected_index.cols() == n - 1, where, "selected_index is ",
                  selected_index.rows(), " x ", selected_index.cols(), "; expected ", bs, " x ", n - 1);
  SPECDEC_EXPECTS(mode == tree_mask_mode::full_mask || mode == tree_mask_mode::qlen_only || mode == tree_mask_mode::qlen_only_bitpacking,
                  where, "tree_mask_mode = ", static_cast<int>(mode), "; expected FULL_MASK, QLEN_ONLY or QLEN_ONLY_BITPACKING");
  SPECDEC_EXPECTS(mode != tree_mask_mode::qlen_only_bitpacking || item_bytes == 1 || item_bytes == 2 || item_bytes == 4, where,
                  "the bit-packed mask's items are ", item_bytes, " bytes; expected 1, 2 or 4");
  SPECDEC_EXPECTS(mode != tree_mask_mode::qlen_only_bitpacking || n <= 8 * item_bytes, where, "num_draft_tokens = ", n,
                  "; QLEN_ONLY_BITPACKING with ", item_bytes, "-byte items holds at most ", 8 * item_bytes, " nodes per row");
}

/// `reconstruct_indices_from_tree_mask`, one request per team: each thread takes nodes i, reads row i
/// of the request's N x N mask for its depth and parent (the last ancestor before it) and column i for
/// its first descendant; after a sync, its next sibling is the first later node with the same parent.
/// Scratch: the parents (N entries).
template <class Space>
struct sglang_reconstruct_job {
  vector_view<const std::uint8_t, Space> tree_mask;  // [bs * N * N]: row i of request b, column j nonzero iff j is an ancestor of i
  vector_view<const std::int64_t, Space> seq_lens;   // [bs]
  vector_view<std::int64_t, Space> positions;        // [bs * N]
  matrix_view<std::int64_t, Space> retrive_index;    // [bs x N]
  matrix_view<std::int64_t, Space> next_token;       // [bs x N]
  matrix_view<std::int64_t, Space> next_sibling;     // [bs x N]
  const char* where = "";
  const char* names[specdec::detail::team_job_names] = {};
  static void describe(const char* where, const char* name, const specdec::detail::team_fault& f) {
    specdec::detail::describe_interop_fault(where, name, f);
  }

  std::size_t scratch_bytes() const { return static_cast<std::size_t>(retrive_index.cols()) * sizeof(index_t); }

  template <class Team>
  SPECDEC_HOST_DEVICE team_fault operator()(Team& team, index_t b, std::byte* scratch) const {
    const index_t n = retrive_index.cols();
    auto* parent_of = reinterpret_cast<index_t*>(scratch);
    const index_t seq_len = seq_lens(b);
    if (seq_len < 0 || seq_len > max_sequence_length)
      return make_team_fault(mask_fault::sequence_length, arg_verified_seq_len, b, 0, static_cast<double>(seq_len), max_sequence_length);
    const index_t base = b * n * n;
    const auto ancestor = [&](index_t i, index_t j) { return tree_mask(base + i * n + j) != 0; };
    for (index_t i = team.rank(); i < n; i += team.size()) {
      index_t depth = 0, parent = -1;
      for (index_t j = 0; j < i; ++j)
        if (ancestor(i, j)) ++depth, parent = j;
      parent_of[i] = parent;
      positions(b * n + i) = seq_len + depth;
      retrive_index(b, i) = b * n + i;
      index_t first = -1;
      for (index_t k = i + 1; k < n && first < 0; ++k)
        if (ancestor(k, i)) first = k;
      next_token(b, i) = first;
    }
    team.sync();
    for (index_t i = team.rank(); i < n; i += team.size()) {
      const index_t parent = parent_of[i];
      index_t sibling = -1;
      if (parent >= 0)
        for (index_t k = i + 1; k < n && sibling < 0; ++k)
          if (parent_of[k] == parent) sibling = k;
      next_sibling(b, i) = sibling;
    }
    team.sync();  // the scratch is read until here
    return {};
  }
};

template <class Job>
void name_build_arguments(Job& job, const char* where) {
  specdec::detail::name_job(job, where, {{arg_verified_seq_len, "verified_seq_len"}, {arg_tree_mask, "tree_mask"}});
}

/// The link buffers build_tree's and reconstruct_indices_from_tree_mask's backend forms both write,
/// checked alike: `positions` `[bs * N]` (`nodes` = bs * N) and `retrive_index`, `retrive_next_token`,
/// `retrive_next_sibling` `[bs x N]`, each written through operator(); then every output, `mask`
/// first when the call writes one (build_tree's tree_mask), apart from each other and from `inputs`.
template <class Space, std::size_t Inputs>
void check_tree_outputs(const char* where, index_t bs, index_t n, index_t nodes, const vector_view<std::int64_t, Space>& positions,
                        const matrix_view<std::int64_t, Space>& retrive_index,
                        const matrix_view<std::int64_t, Space>& retrive_next_token,
                        const matrix_view<std::int64_t, Space>& retrive_next_sibling,
                        const std::array<specdec::detail::view_extent, Inputs>& inputs,
                        const vector_view<std::uint8_t, Space>* mask = nullptr) {
  using specdec::detail::extent_of;
  specdec::detail::check_view(where, "positions", positions, specdec::detail::indexed_output);
  SPECDEC_EXPECTS(positions.rows() == nodes, where, "positions has ", positions.rows(), " entries; expected bs * N = ", nodes);
  for (const auto& [m, name] : {std::pair{&retrive_index, "retrive_index"}, std::pair{&retrive_next_token, "retrive_next_token"},
                                std::pair{&retrive_next_sibling, "retrive_next_sibling"}}) {
    specdec::detail::check_view(where, name, *m, specdec::detail::indexed_output);
    SPECDEC_EXPECTS(m->rows() == bs && m->cols() == n, where, name, " is ", m->rows(), " x ", m->cols(), "; expected ", bs, " x ", n);
  }
  // check_apart compares each output with the later outputs, then with every input: the order of the
  // loops these calls had, so a call with several overlaps names the same pair as before.
  using specdec::detail::argument_role;
  std::array<specdec::detail::checked_argument, 5 + Inputs> all{};
  std::size_t count = 0;
  if (mask != nullptr) all[count++] = {extent_of(where, "tree_mask", *mask), argument_role::output};
  all[count++] = {extent_of(where, "positions", positions), argument_role::output};
  all[count++] = {extent_of(where, "retrive_index", retrive_index), argument_role::output};
  all[count++] = {extent_of(where, "retrive_next_token", retrive_next_token), argument_role::output};
  all[count++] = {extent_of(where, "retrive_next_sibling", retrive_next_sibling), argument_role::output};
  for (const specdec::detail::view_extent& input : inputs) all[count++] = {input, argument_role::input};
  specdec::detail::check_apart(where, std::span<const specdec::detail::checked_argument>(all.data(), count));
}

}  // namespace detail

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
/// \throws invalid_argument on shapes that do not match, views null with a shape, N outside
///   [1, max_nodes], k < 1, S outside [1, 2^40], a seq_len outside [0, 2^40], N > 32 with bit-packing,
///   or masks beyond specdec::max_elements in all (checked before allocating).
inline tree_buffers build_tree(matrix_view<const std::int64_t> parent_list, matrix_view<const std::int64_t> selected_index,
                               matrix_view<const std::int64_t> draft_tokens_wo_root,
                               std::span<const std::int64_t> verified_id, std::span<const std::int64_t> seq_lens,
                               index_t top_k, index_t num_steps, index_t num_draft_tokens, tree_mask_mode mode,
                               retrieve_scope scope = retrieve_scope::global) {
  constexpr const char* where = "specdec::sglang::build_tree";
  const index_t bs = static_cast<index_t>(seq_lens.size()), n = num_draft_tokens;
  detail::check_build_shapes(where, parent_list, selected_index, bs, n, top_k, num_steps, mode, 4);
  specdec::detail::check_view(where, "draft_tokens_wo_root", draft_tokens_wo_root, 0);
  SPECDEC_EXPECTS(static_cast<index_t>(verified_id.size()) == bs, where, "verified_id has ", verified_id.size(),
                  " entries; expected one per request (", bs, ")");
  SPECDEC_EXPECTS(draft_tokens_wo_root.rows() == bs && draft_tokens_wo_root.cols() == n - 1, where,
                  "draft_tokens_wo_root is ", draft_tokens_wo_root.rows(), " x ", draft_tokens_wo_root.cols(),
                  "; expected ", bs, " x ", n - 1);
  tree_buffers out;
  const std::size_t sz = specdec::detail::checked_count(where, {bs, n}, "the tree buffers [bs x num_draft_tokens]");
  index_t mask_size = 0;
  for (index_t b = 0; b < bs; ++b) {
    // The bounds keep n (seq_len + n) below 2^57; the running total is bounded by max_elements.
    const index_t seq_len = seq_lens[static_cast<std::size_t>(b)];
    SPECDEC_EXPECTS(seq_len >= 0 && seq_len <= max_sequence_length, where, "seq_lens[", b, "] = ", seq_len,
                    "; expected 0 <= seq_len <= 2^40");
    mask_size += mode == tree_mask_mode::full_mask ? n * (seq_len + n) : mode == tree_mask_mode::qlen_only ? n * n : 4 * n;
    SPECDEC_EXPECTS(mode == tree_mask_mode::qlen_only_bitpacking || mask_size <= max_elements, where, "the masks of requests 0..",
                    b, " need ", mask_size, " entries; expected at most ", max_elements, " (2^40) in all");
  }
  out.draft_tokens.resize(sz);
  out.positions.resize(sz);
  out.retrive_index.resize(sz);
  out.retrive_next_token.resize(sz);
  out.retrive_next_sibling.resize(sz);
  out.tree_mask.resize(static_cast<std::size_t>(mask_size));  // bit-packed: 4-byte little-endian items, assembled below
  for (index_t b = 0; b < bs; ++b) {
    out.draft_tokens[static_cast<std::size_t>(b * n)] = verified_id[static_cast<std::size_t>(b)];
    for (index_t i = 1; i < n; ++i) out.draft_tokens[static_cast<std::size_t>(b * n + i)] = draft_tokens_wo_root(b, i - 1);
  }
  detail::sglang_build_job<host_space> job{parent_list,
                                           selected_index,
                                           vector_view<const std::int64_t>(seq_lens.data(), bs),
                                           vector_view<std::uint8_t>(out.tree_mask.data(), mask_size),
                                           vector_view<std::int64_t>(out.positions.data(), bs * n),
                                           matrix_view<std::int64_t>(out.retrive_index.data(), bs, n),
                                           matrix_view<std::int64_t>(out.retrive_next_token.data(), bs, n),
                                           matrix_view<std::int64_t>(out.retrive_next_sibling.data(), bs, n),
                                           top_k,
                                           num_steps,
                                           mode,
                                           4,
                                           scope};
  detail::name_build_arguments(job, where);
  specdec::detail::run_serial(job, bs);
  if (mode == tree_mask_mode::qlen_only_bitpacking) {
    out.tree_mask_bits.resize(sz);
    for (std::size_t i = 0; i < sz; ++i)
      for (std::size_t k = 0; k < 4; ++k) out.tree_mask_bits[i] |= std::uint32_t{out.tree_mask[4 * i + k]} << (8 * k);
    out.tree_mask.clear();
  }
  return out;
}

/// build_tree on a backend, every buffer in its memory (`B::memory_space`): SGLang's
/// `build_tree_kernel_efficient` signature, one team per request (on CUDA one block per request, one
/// launch). N is `retrive_index.cols()`.
/// \param parent_list `[bs x P]`, \param selected_index `[bs x (N - 1)]`, \param verified_seq_len
///   `[bs]`: as the host form's (int64).
/// \param tree_mask bytes, written whole: FULL_MASK `sum_b N (seq_len_b + N)` bools (request b's N rows
///   of seq_len_b ones then its tree part), QLEN_ONLY `bs * N * N` bools, QLEN_ONLY_BITPACKING `bs * N`
///   little-endian items of `mask_item_bytes` (1, 2 or 4; N <= 8 x that) bytes, bit j of row i set iff
///   node j is node i or an ancestor.
/// \param positions `[bs * N]`: seq_len + depth; \param retrive_index, retrive_next_token,
///   retrive_next_sibling `[bs x N]` (int64, -1 for no link), as the host form's.
/// Malformed input is treated as the host form treats it. The outputs are the host form's, bit for bit.
/// \throws invalid_argument on shapes, as the host form, a QLEN mask of another size, or outputs that
///   overlap each other or an input; the data faults (a seq_len outside [0, 2^40], a FULL_MASK
///   `tree_mask` whose size is not the requests' total) from the team that finds them (on CUDA with
///   deferred faults, from `check_faults()`); outputs are then unspecified.
template <team_backend B>
void build_tree(B& b, matrix_view<const std::int64_t, typename B::memory_space> parent_list,
                matrix_view<const std::int64_t, typename B::memory_space> selected_index,
                vector_view<const std::int64_t, typename B::memory_space> verified_seq_len,
                vector_view<std::uint8_t, typename B::memory_space> tree_mask,
                vector_view<std::int64_t, typename B::memory_space> positions,
                matrix_view<std::int64_t, typename B::memory_space> retrive_index,
                matrix_view<std::int64_t, typename B::memory_space> retrive_next_token,
                matrix_view<std::int64_t, typename B::memory_space> retrive_next_sibling, index_t top_k, index_t num_steps,
                tree_mask_mode mode, index_t mask_item_bytes = 4, retrieve_scope scope = retrieve_scope::global) {
  constexpr const char* where = "specdec::sglang::build_tree";
  const index_t bs = verified_seq_len.rows(), n = retrive_index.cols();
  specdec::detail::check_view(where, "verified_seq_len", verified_seq_len, 0);
  detail::check_build_shapes(where, parent_list, selected_index, bs, n, top_k, num_steps, mode, mask_item_bytes);
  using specdec::detail::extent_of;
  const auto nodes = specdec::detail::checked_mul(where, bs, n, "bs * N");
  specdec::detail::check_view(where, "tree_mask", tree_mask, specdec::detail::indexed_output);
  if (mode != tree_mask_mode::full_mask) {
    const index_t entries = specdec::detail::checked_mul(where, nodes, mode == tree_mask_mode::qlen_only ? n : mask_item_bytes,
                                                         "the mask's bytes");
    SPECDEC_EXPECTS(tree_mask.rows() == entries, where, "tree_mask has ", tree_mask.rows(), " bytes; expected ", entries,
                    mode == tree_mask_mode::qlen_only ? " (bs * N * N)" : " (bs * N items)");
  }
  detail::check_tree_outputs(where, bs, n, nodes, positions, retrive_index, retrive_next_token, retrive_next_sibling,
                             std::array{extent_of(where, "parent_list", parent_list), extent_of(where, "selected_index", selected_index),
                                        extent_of(where, "verified_seq_len", verified_seq_len)},
                             &tree_mask);
  detail::sglang_build_job<typename B::memory_space> job{parent_list,  selected_index,       verified_seq_len,
                                                         tree_mask,    positions,            retrive_index,
                                                         retrive_next_token, retrive_next_sibling, top_k,
                                                         num_steps,    mode,                 mask_item_bytes,
                                                         scope};
  detail::name_build_arguments(job, where);
  b.run_teams(bs, job);
}

/// SGLang's `reconstruct_indices_from_tree_mask` (sgl-kernel; SGLang's n-gram worker) on a backend,
/// every buffer in its memory: the tree buffers of a batch of trees given only as their masks. For
/// request b and node i (N = `retrive_index.cols()` nodes per request, ancestors before descendants):
/// `depth` = the number of j < i with `tree_mask[(b N + i) N + j]` nonzero and `parent` the last such j
/// (-1: none); `positions[b N + i]` = `verified_seq_len[b]` + depth; `retrive_index(b, i)` = b N + i;
/// `retrive_next_token(b, i)` = the first k > i whose row marks i (a descendant: its first child where
/// ancestors precede descendants), else -1;
/// `retrive_next_sibling(b, i)` = the first k > i with the same parent (-1 for the root or none). Only
/// entries below the diagonal are read, as SGLang's kernel. The outputs are SGLang's, bit for bit.
/// \param tree_mask `[bs * N * N]` bytes (nonzero: an ancestor), \param verified_seq_len `[bs]` int64.
/// \param positions `[bs * N]`, \param retrive_index, retrive_next_token, retrive_next_sibling `[bs x N]`
///   int64, every entry written.
/// \throws invalid_argument on shapes that do not match, N outside [1, max_nodes], views null with a
///   shape, outputs that overlap each other or an input; a seq_len outside [0, 2^40] from the team that
///   finds it (on CUDA with deferred faults, from `check_faults()`); outputs are then unspecified.
template <team_backend B>
void reconstruct_indices_from_tree_mask(B& b, vector_view<const std::uint8_t, typename B::memory_space> tree_mask,
                                        vector_view<const std::int64_t, typename B::memory_space> verified_seq_len,
                                        vector_view<std::int64_t, typename B::memory_space> positions,
                                        matrix_view<std::int64_t, typename B::memory_space> retrive_index,
                                        matrix_view<std::int64_t, typename B::memory_space> retrive_next_token,
                                        matrix_view<std::int64_t, typename B::memory_space> retrive_next_sibling) {
  constexpr const char* where = "specdec::sglang::reconstruct_indices_from_tree_mask";
  const index_t bs = verified_seq_len.rows(), n = retrive_index.cols();
  specdec::detail::check_view(where, "verified_seq_len", verified_seq_len, 0);
  specdec::detail::check_view(where, "tree_mask", tree_mask, 0);
  SPECDEC_EXPECTS(n >= 1 && n <= max_nodes, where, "draft_token_num = ", n, "; expected 1 to ", max_nodes, " nodes per request");
  using specdec::detail::extent_of;
  const auto nodes = specdec::detail::checked_mul(where, bs, n, "bs * N");
  const auto entries = specdec::detail::checked_mul(where, nodes, n, "bs * N * N");
  SPECDEC_EXPECTS(tree_mask.rows() == entries, where, "tree_mask has ", tree_mask.rows(), " entries; expected bs * N * N = ", entries);
  detail::check_tree_outputs(where, bs, n, nodes, positions, retrive_index, retrive_next_token, retrive_next_sibling,
                             std::array{extent_of(where, "tree_mask", tree_mask), extent_of(where, "verified_seq_len", verified_seq_len)});
  detail::sglang_reconstruct_job<typename B::memory_space> job{tree_mask, verified_seq_len, positions, retrive_index,
                                                               retrive_next_token, retrive_next_sibling};
  specdec::detail::name_job(job, where, {{detail::arg_verified_seq_len, "verified_seq_len"}, {detail::arg_tree_mask, "tree_mask"}});
  b.run_teams(bs, job);
}

}  // namespace specdec::sglang
