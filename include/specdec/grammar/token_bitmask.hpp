// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Token bitmasks in xgrammar's layout (the layout vLLM, SGLang, TensorRT-LLM and MLC share) and
/// their application to logits rows (xgrammar's `apply_token_bitmask_inplace`).
///
/// **Layout.** A bitmask row for a vocabulary of V tokens is `ceil(V / 32)` int32 words; token t is
/// bit `t % 32` (least significant first) of word `t / 32`, read as unsigned; a set bit allows the
/// token. Bits at or past V in the last word are ignored. An all-allowed row is every word -1
/// (xgrammar's `allocate_token_bitmask`). A matrix of them, `[rows x ceil(V / 32)]`, row-major, is one
/// row per target row: the row of node i's target row constrains the token after node i (its children
/// and the final token), as vLLM's row i constrains target position i and SGLang's row per node.
/// Verification under masks: specdec/sampling/bitmask.hpp (greedy) and `speculative_rows::target_bitmask`
/// (stochastic), and for a batch in the backend's memory the masked `verify_greedy` of
/// specdec/sampling/batch.hpp and the backend form of apply_token_bitmask below; filling a tree's masks
/// with a grammar matcher and pruning: specdec/grammar/tree_grammar.hpp.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>
#include <span>

#include <specdec/backend/concept.hpp>
#include <specdec/backend/detail/math.hpp>
#include <specdec/backend/detail/row_simd.hpp>
#include <specdec/backend/detail/team.hpp>
#include <specdec/core/checked.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>
#include <specdec/core/view_checks.hpp>
#include <specdec/grammar/detail/faults.hpp>

namespace specdec {

/// int32 words of one bitmask row for a vocabulary of `vocab` tokens: ceil(vocab / 32).
constexpr index_t bitmask_words(index_t vocab) noexcept { return (vocab + 31) / 32; }

/// Whether a bitmask row allows token t (0 <= t < 32 x words; not checked).
constexpr bool bitmask_allows(const std::int32_t* row, std::int32_t t) noexcept {
  return ((static_cast<std::uint32_t>(row[t >> 5]) >> (t & 31)) & 1u) != 0;
}

/// Sets (allowed) or clears token t's bit of a bitmask row (not checked).
constexpr void bitmask_set(std::int32_t* row, std::int32_t t, bool allowed) noexcept {
  const std::uint32_t bit = 1u << (t & 31);
  auto word = static_cast<std::uint32_t>(row[t >> 5]);
  word = allowed ? (word | bit) : (word & ~bit);
  row[t >> 5] = static_cast<std::int32_t>(word);
}

namespace detail {

/// check_bitmask's `vocab` for a mask whose width the call takes from the mask itself.
inline constexpr index_t any_mask_width = -1;

/// A bitmask argument: `[rows x words]` int32, unit column stride whatever its row count (a row's words
/// are read as one array), a valid view (not null with a shape, inside the address space), and at least
/// ceil(vocab / 32) words per row for a vocabulary of 1 to 2^31 - 1 tokens (`any_mask_width`: any
/// width), in any memory space (only its shape is read).
template <class Word, class Space>
void check_bitmask(const char* where, const char* name, matrix_view<Word, Space> bitmask, index_t vocab) {
  check_view(where, name, bitmask, contiguous_rows);
  if (vocab == any_mask_width) return;
  check_vocabulary(where, "V", vocab);
  SPECDEC_EXPECTS(bitmask.cols() >= bitmask_words(vocab), where, name, " has ", bitmask.cols(),
                  " words per row; expected at least ceil(V / 32) = ", bitmask_words(vocab), " for V = ", vocab);
}

}  // namespace detail

namespace detail::inline SPECDEC_ISA {

/// Largest allowed entry of a logits row under a bitmask row, lowest index on ties; -1 when allowed
/// entries exist but none is above -inf, -2 when the row allows no token at all. `bad` receives the
/// first allowed NaN / +inf column, or -1. `mask` null: every token allowed; `exclude` (optional, the
/// same layout) takes the tokens it sets out of the allowed ones (the penalised tokens a caller
/// evaluates itself). Branch-free over whole 32-entry words: on the host, chunks of
/// 64 words through vector lanes (a lane's entry, or -inf where its bit is clear, into a running
/// maximum: no index tracked), then the first allowed entry equal to the maximum searched in the one
/// chunk that holds it, as the backends' row argmax does; elsewhere 32 scalar lanes that keep each
/// lane's maximum and the word of its first occurrence. (A branch on each mask bit mispredicted on a
/// mixed row and cost 100x a streaming pass.)
inline std::int32_t masked_argmax(const float* row, index_t vocab, const std::int32_t* mask, index_t& bad,
                                  const std::int32_t* exclude = nullptr) {
  constexpr float neg_inf = -std::numeric_limits<float>::infinity();
  bad = -1;
  // Loop-invariant branches: each call takes one path through them.
  const auto word_bits = [mask, exclude](index_t w) {
    const std::uint32_t allowed = mask != nullptr ? static_cast<std::uint32_t>(mask[w]) : ~0u;
    return exclude != nullptr ? allowed & ~static_cast<std::uint32_t>(exclude[w]) : allowed;
  };
  const auto allows = [&](index_t j) { return ((word_bits(j >> 5) >> (j & 31)) & 1u) != 0; };
  const index_t full = vocab / 32;
  float best = neg_inf;
  index_t at = -1;
  bool any = false, faulty = false;
#if SPECDEC_HOST_SIMD
  using vec = simd<float>::vec;
  using lanes = simd<float>::mask;
  constexpr int width = simd_bytes / static_cast<int>(sizeof(float));
  constexpr int groups = 32 / width;  // vectors per mask word
  constexpr index_t chunk_words = 64;
  constexpr index_t prefetch_words = 32;
  lanes lane_bit[groups] = {};
  const vec neg_inf_vec = vec{} + neg_inf;
  for (int g = 0; g < groups; ++g)
    for (int l = 0; l < width; ++l) lane_bit[g][l] = static_cast<std::int32_t>(1u << (g * width + l));
  std::uint32_t seen = 0;
  index_t best_chunk = -1;
  for (index_t c = 0; c < full; c += chunk_words) {
    const index_t end = c + chunk_words < full ? c + chunk_words : full;
    vec acc[groups];
    lanes nan{};
    for (int g = 0; g < groups; ++g) acc[g] = neg_inf_vec;
    for (index_t w = c; w < end; ++w) {
      const std::uint32_t bits = word_bits(w);
      seen |= bits;
      // Four KiB ahead: the lanes' work per cache line is several times a plain scan's, which leaves
      // fewer lines in flight than the hardware prefetcher alone keeps for it (measured: 1.2x a
      // streaming pass without, 0.92-1.0x with, 2-8 KiB ahead alike).
      if (w + prefetch_words < full) {
        __builtin_prefetch(row + (w + prefetch_words) * 32);
        __builtin_prefetch(row + (w + prefetch_words) * 32 + 16);
      }
      const lanes broadcast = lanes{} + static_cast<std::int32_t>(bits);
      const float* x = row + w * 32;
      for (int g = 0; g < groups; ++g) {
        const vec v = simd_load(x + g * width);
        const vec candidate = (broadcast & lane_bit[g]) != 0 ? v : neg_inf_vec;
        acc[g] = acc[g] < candidate ? candidate : acc[g];  // NaN never raises a maximum
        nan |= candidate != candidate;
      }
    }
    for (int g = 1; g < groups; ++g) acc[0] = acc[0] < acc[g] ? acc[g] : acc[0];
    float m = neg_inf;
    for (int l = 0; l < width; ++l) m = m < acc[0][l] ? acc[0][l] : m;
    faulty = faulty || any_lane(nan);
    if (m > best) {  // strict: an equal maximum in a later chunk keeps the lower index
      best = m;
      best_chunk = c;
    }
  }
  any = seen != 0;
  if (best_chunk >= 0) {
    const index_t end = (best_chunk + chunk_words < full ? best_chunk + chunk_words : full) * 32;
    // Both tests evaluated (`&`, not `&&`): the branch is then almost never taken and always predicted;
    // a short-circuit on a half-allowed mask mispredicted every other entry.
    for (index_t j = best_chunk * 32; j < end; ++j)
      if (allows(j) & (row[j] == best)) {
        at = j;
        break;
      }
  }
#else
  float lane_max[32];
  std::uint32_t lane_word[32], lane_nan[32];
  for (int b = 0; b < 32; ++b) {
    lane_max[b] = neg_inf;
    lane_word[b] = 0;
    lane_nan[b] = 0;
  }
  for (index_t w = 0; w < full; ++w) {
    const std::uint32_t bits = word_bits(w);
    any = any || bits != 0;
    const float* x = row + w * 32;
    for (std::uint32_t b = 0; b < 32; ++b) {
      const float candidate = ((bits >> b) & 1u) != 0 ? x[b] : neg_inf;
      const bool better = candidate > lane_max[b];  // strict: a lane keeps its first occurrence
      lane_max[b] = better ? candidate : lane_max[b];
      lane_word[b] = better ? static_cast<std::uint32_t>(w) : lane_word[b];
      lane_nan[b] |= static_cast<std::uint32_t>(candidate != candidate);
    }
  }
  for (index_t b = 0; b < 32; ++b) {
    faulty = faulty || lane_nan[b] != 0;
    if (lane_max[b] == neg_inf) continue;
    const index_t j = static_cast<index_t>(lane_word[b]) * 32 + b;
    if (lane_max[b] > best || (lane_max[b] == best && j < at)) {
      best = lane_max[b];
      at = j;
    }
  }
#endif
  faulty = faulty || best == -neg_inf;  // +inf among the allowed entries
  for (index_t j = full * 32; j < vocab; ++j) {  // the partial last word, in index order
    if (!allows(j)) continue;
    any = true;
    const float v = row[j];
    faulty = faulty || v != v || v == -neg_inf;
    if (v > best) {
      best = v;
      at = j;
    }
  }
  if (!any) return -2;
  if (faulty) {
    for (index_t j = 0; j < vocab; ++j)
      if (allows(j) && (row[j] != row[j] || row[j] == -neg_inf)) {
        bad = j;
        return -1;
      }
  }
  return best == neg_inf ? -1 : static_cast<std::int32_t>(at);
}

}  // namespace detail::inline SPECDEC_ISA

namespace detail {

/// apply_token_bitmask's argument checks (both forms): returns the columns masked, `vocab_size` or, for
/// -1, min(V, 32 x words).
template <class Space>
index_t checked_mask_width(const char* where, matrix_view<float, Space> logits, matrix_view<const std::int32_t, Space> bitmask,
                           index_t vocab_size, vector_view<const index_t, Space> indices) {
  check_bitmask(where, "bitmask", bitmask, any_mask_width);
  // The rows are written while the masks and indices are read: an index under a masked row would
  // change after it was checked.
  check_arguments(where, output("logits", logits, contiguous_rows | distinct_rows), input("bitmask", bitmask),
                  input("indices", indices, nonzero_stride));
  // The mask's width in tokens, decided by division: 32 x words can pass int64 for a huge view.
  const bool mask_wider = bitmask.cols() >= logits.cols() / 32 + 1;
  const index_t limit = mask_wider ? logits.cols() : bitmask.cols() * 32;
  if (vocab_size == -1) vocab_size = limit;
  SPECDEC_EXPECTS(vocab_size >= 0, where, "vocab_size = ", vocab_size, "; expected -1 (the default) or a width >= 0");
  SPECDEC_EXPECTS(vocab_size <= logits.cols(), where, "vocab_size = ", vocab_size, "; expected at most V = ", logits.cols(),
                  " (the logits' width)");
  // Reached only with a mask narrower than the logits, so limit = 32 x words here.
  SPECDEC_EXPECTS(vocab_size <= limit, where, "vocab_size = ", vocab_size, "; expected at most 32 x ", bitmask.cols(), " = ",
                  limit, " (the bitmask's width)");
  return vocab_size;
}

}  // namespace detail

/// xgrammar's `apply_token_bitmask_inplace` on host rows: for every row r (or every r in `indices`, which
/// names the same row of both matrices), each column j < `vocab_size` whose bit is clear becomes -inf;
/// allowed entries and columns at or past `vocab_size` are left as they are, nothing is renormalised.
/// \param logits host `[rows x V]` float, modified in place.
/// \param bitmask host `[rows' x words]` int32 (the layout above); rows' == rows unless `indices` is given.
/// \param vocab_size columns masked; -1 (default): min(V, 32 x words), as xgrammar's default.
/// \param indices rows to mask (each in [0, min(rows, rows'))); empty: every row.
/// \throws invalid_argument naming the argument: vocab_size above V or above 32 x words, row counts that
///   differ without `indices`, an index out of range, a bitmask whose words are not contiguous.
inline void apply_token_bitmask(matrix_view<float> logits, matrix_view<const std::int32_t> bitmask, index_t vocab_size = -1,
                                std::span<const index_t> indices = {}) {
  constexpr const char* where = "specdec::apply_token_bitmask";
  vocab_size = detail::checked_mask_width(where, logits, bitmask, vocab_size,
                                          vector_view<const index_t>(indices.data(), static_cast<index_t>(indices.size())));
  // Whole words branch-free (a branch per bit mispredicts on a mixed row), then the partial word.
  const auto mask_row = [&](index_t r) {
    float* x = logits.row(r);
    const std::int32_t* m = bitmask.row(r);
    const index_t full = vocab_size / 32;
    for (index_t w = 0; w < full; ++w) {
      const auto bits = static_cast<std::uint32_t>(m[w]);
      if (bits == 0xffffffffu) continue;
      float* xw = x + w * 32;
      for (std::uint32_t b = 0; b < 32; ++b) {
        const std::uint32_t keep = 0u - ((bits >> b) & 1u);
        xw[b] = std::bit_cast<float>((std::bit_cast<std::uint32_t>(xw[b]) & keep) | (0xff800000u & ~keep));
      }
    }
    for (index_t j = full * 32; j < vocab_size; ++j)
      if (!bitmask_allows(m, static_cast<std::int32_t>(j))) x[j] = -std::numeric_limits<float>::infinity();
  };
  if (indices.empty()) {
    SPECDEC_EXPECTS(bitmask.rows() == logits.rows(), where, "bitmask has ", bitmask.rows(), " rows and logits ",
                    logits.rows(), "; expected equal counts (or indices)");
    for (index_t r = 0; r < logits.rows(); ++r) mask_row(r);
    return;
  }
  const index_t rows = bitmask.rows() < logits.rows() ? bitmask.rows() : logits.rows();
  for (std::size_t i = 0; i < indices.size(); ++i)
    SPECDEC_EXPECTS(indices[i] >= 0 && indices[i] < rows, where, "indices[", i, "] = ", indices[i], "; expected a row in [0, ",
                    rows, ") (rows of both logits and bitmask)");
  for (const index_t r : indices) mask_row(r);
}

namespace detail {

/// apply_token_bitmask on a backend: one team per masked row, its threads sharing the row's words.
template <class Space>
struct apply_bitmask_job {
  matrix_view<float, Space> logits;
  matrix_view<const std::int32_t, Space> bitmask;
  vector_view<const index_t, Space> indices;  // empty: team t masks row t
  index_t vocab_size;
  const char* where;
  const char* names[team_job_names];
  static void describe(const char* where, const char* name, const specdec::detail::team_fault& f) {
    specdec::detail::describe_grammar_fault(where, name, f);
  }

  std::size_t scratch_bytes() const { return 0; }
  template <class Team>
  SPECDEC_HOST_DEVICE team_fault operator()(Team& team, index_t t, std::byte*) const {
    index_t r = t;
    if (!indices.empty()) {
      r = indices(t);
      const index_t rows = bitmask.rows() < logits.rows() ? bitmask.rows() : logits.rows();
      if (r < 0 || r >= rows) return make_team_fault(grammar_fault::bitmask_index, 0, t, 0, static_cast<double>(r), rows);
    }
    float* x = logits.row(r);
    const std::int32_t* m = bitmask.row(r);
    const index_t words = (vocab_size + 31) / 32;
    // Whole words, branch-free inside (a branch per bit mispredicts on a mixed row); all-allowed words
    // are skipped unwritten.
    for (index_t w = team.rank(); w < words; w += team.size()) {
      const auto bits = static_cast<std::uint32_t>(m[w]);
      if (bits == 0xffffffffu) continue;
      const index_t left = vocab_size - 32 * w;
      float* xw = x + 32 * w;
      if (left >= 32) {
        for (std::uint32_t b = 0; b < 32; ++b) xw[b] = ((bits >> b) & 1u) != 0 ? xw[b] : negative_infinity<float>();
      } else {
        for (index_t b = 0; b < left; ++b)
          if (((bits >> b) & 1u) == 0) xw[b] = negative_infinity<float>();
      }
    }
    return {};
  }
};

}  // namespace detail

/// apply_token_bitmask on rows in a backend's memory (the logits of a batch on the GPU, say): the host
/// form's result, bit for bit, as one team job (one CUDA launch, nothing synchronised with deferred
/// faults): xgrammar's CUDA `apply_token_bitmask_inplace`, for engines that mask in place before
/// `row_softmax` and the batched stochastic verifier (sampling/batch.hpp).
/// \param logits backend `[rows x V]` float, modified in place. \param bitmask backend `[rows' x words]`
///   int32; rows' == rows unless `indices` is given. \param vocab_size as the host form.
/// \param indices backend `[n]`: rows to mask (each in [0, min(rows, rows'))); empty: every row.
/// \throws invalid_argument as the host form; an index out of range comes from the team that reads it
///   (on CUDA with deferred faults, from `check_faults()`).
template <team_backend B>
void apply_token_bitmask(B& b, matrix_view<float, typename B::memory_space> logits,
                         matrix_view<const std::int32_t, typename B::memory_space> bitmask, index_t vocab_size = -1,
                         vector_view<const index_t, typename B::memory_space> indices = {}) {
  constexpr const char* where = "specdec::apply_token_bitmask";
  vocab_size = detail::checked_mask_width(where, logits, bitmask, vocab_size, indices);
  if (indices.empty())
    SPECDEC_EXPECTS(bitmask.rows() == logits.rows(), where, "bitmask has ", bitmask.rows(), " rows and logits ",
                    logits.rows(), "; expected equal counts (or indices)");
  const index_t teams = indices.empty() ? logits.rows() : indices.rows();
  if (teams == 0 || vocab_size == 0) return;
  detail::apply_bitmask_job<typename B::memory_space> job{logits, bitmask, indices, vocab_size, where, {}};
  detail::name_job(job, where, {{0, "indices"}});
  b.run_teams(teams, job);
}

}  // namespace specdec
