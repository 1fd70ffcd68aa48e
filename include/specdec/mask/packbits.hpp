// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief FlashInfer's `segment_packbits`: the segments of a bool array packed into bytes, each segment
/// starting on a byte (the form FlashInfer's prefill wrapper takes tree masks in). Host forms, and
/// backend forms with every buffer in the backend's memory (one team per segment).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/backend/detail/checks.hpp>
#include <specdec/backend/detail/team.hpp>
#include <specdec/config.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>
#include <specdec/core/view_checks.hpp>
#include <specdec/mask/detail/faults.hpp>

namespace specdec {

/// Bit order of segment_packbits: `little` puts element 8 m + b in bit b of byte m (FlashInfer's masks
/// as SGLang packs them), `big` in bit 7 - b (numpy.packbits' default, and FlashInfer's default).
enum class bit_order { big, little };

namespace detail {

enum packbits_arg : int { arg_indptr, arg_offsets };

template <class Job>
void name_packbits_arguments(Job& job, const char* where) {
  name_job(job, where, {{arg_indptr, "indptr"}, {arg_offsets, "offsets"}});
}

/// The segments' byte offsets, one team (rank 0 scans; a batch has a few hundred segments). A segment
/// of len >= 1 elements packs into at most len bytes, so the offsets never pass indptr's last entry and
/// stay within int32.
template <class Space>
struct packbits_offsets_job {
  vector_view<const std::int32_t, Space> indptr;  // [segments + 1]
  vector_view<std::int32_t, Space> offsets;       // [segments + 1]
  const char* where = "";
  const char* names[team_job_names] = {};
  static void describe(const char* where, const char* name, const specdec::detail::team_fault& f) {
    specdec::detail::describe_mask_fault(where, name, f);
  }

  std::size_t scratch_bytes() const { return 0; }

  template <class Team>
  SPECDEC_HOST_DEVICE team_fault operator()(Team& team, index_t, std::byte*) const {
    const index_t segments = indptr.rows() - 1;
    std::int32_t at = 0;
    for (index_t s = 0; s < segments; ++s) {
      const std::int32_t begin = indptr(s), end = indptr(s + 1);
      if (begin < 0 || end < begin)
        return make_team_fault(mask_fault::segment_range, arg_indptr, s, begin, end, INT32_MAX);
      if (team.rank() == 0) offsets(s) = at;
      at += static_cast<std::int32_t>((static_cast<index_t>(end) - begin + 7) / 8);
    }
    if (team.rank() == 0) offsets(segments) = at;
    return {};
  }
};

/// The packing, one team per segment: the team's threads split the segment's bytes. Each team checks
/// its segment's range and its link of the offsets' chain (offsets[0] = 0, offsets[s + 1] = offsets[s]
/// + its bytes, the last the output's size), so no team writes outside its bytes.
template <class Space>
struct packbits_job {
  vector_view<const std::uint8_t, Space> x;
  vector_view<const std::int32_t, Space> indptr;   // [segments + 1]
  vector_view<const std::int32_t, Space> offsets;  // [segments + 1]
  vector_view<std::uint8_t, Space> out;
  bool little = false;
  const char* where = "";
  const char* names[team_job_names] = {};
  static void describe(const char* where, const char* name, const specdec::detail::team_fault& f) {
    specdec::detail::describe_mask_fault(where, name, f);
  }

  std::size_t scratch_bytes() const { return 0; }

  template <class Team>
  SPECDEC_HOST_DEVICE team_fault operator()(Team& team, index_t s, std::byte*) const {
    const index_t segments = indptr.rows() - 1, size = out.rows();
    const index_t begin = indptr(s), end = indptr(s + 1);
    if (begin < 0 || end < begin || end > x.rows()) return make_team_fault(mask_fault::segment_range, arg_indptr, s, begin, static_cast<double>(end), x.rows());
    const index_t at = offsets(s), next = offsets(s + 1), bytes = (end - begin + 7) / 8;
    if (s == 0 && at != 0) return make_team_fault(mask_fault::packed_offset, arg_offsets, 0, at, 0.0, 0);
    if (next != at + bytes) return make_team_fault(mask_fault::packed_offset, arg_offsets, s + 1, next, 0.0, at + bytes);
    if (s == segments - 1 && next != size) return make_team_fault(mask_fault::packed_offset, arg_offsets, s + 1, next, 0.0, size);
    if (at < 0 || next > size)  // another team reports the broken link; this one stays inside out
      return make_team_fault(mask_fault::packed_offset, arg_offsets, s + 1, next, 0.0, size);
    for (index_t m = team.rank(); m < bytes; m += team.size()) {
      unsigned byte = 0;
      for (index_t k = 0; k < 8 && 8 * m + k < end - begin; ++k)
        if (x(begin + 8 * m + k) != 0) byte |= 1u << (little ? k : 7 - k);
      out(at + m) = static_cast<std::uint8_t>(byte);
    }
    return {};
  }
};

}  // namespace detail

/// The byte offsets of segment_packbits' output: segment s's ceil(len_s / 8) bytes start at `offsets[s]`
/// (`indptr.size()` entries, the first 0; FlashInfer's returned `indptr`).
/// \throws invalid_argument when `indptr` is empty, starts below 0 or decreases.
inline std::vector<std::int32_t> segment_packbits_offsets(std::span<const std::int32_t> indptr) {
  constexpr const char* where = "specdec::segment_packbits";
  SPECDEC_EXPECTS(!indptr.empty() && indptr[0] >= 0, where, "indptr has ", indptr.size(), " entries, the first ",
                  indptr.empty() ? -1 : indptr[0], "; expected at least one, the first >= 0");
  std::vector<std::int32_t> out(indptr.size(), 0);
  for (std::size_t s = 0; s + 1 < indptr.size(); ++s) {
    SPECDEC_EXPECTS(indptr[s + 1] >= indptr[s], where, "indptr[", s + 1, "] = ", indptr[s + 1], " < indptr[", s, "] = ",
                    indptr[s], "; expected non-decreasing offsets");
    // A segment of len >= 1 packs into at most len bytes: the offsets stay below indptr's last entry.
    out[s + 1] = static_cast<std::int32_t>(out[s] + (static_cast<index_t>(indptr[s + 1]) - indptr[s] + 7) / 8);
  }
  return out;
}

/// FlashInfer's `segment_packbits`: segment s of `x` (elements [indptr[s], indptr[s + 1]), nonzero = 1)
/// packed into its own bytes at `out[offsets[s]]`, zero-padded to a byte (offsets from
/// segment_packbits_offsets, which this checks `out` against). Runs the backend form's job on one thread.
/// \param x host bools as bytes. \param out host bytes, `segment_packbits_offsets(indptr).back()` of them.
/// \throws invalid_argument as segment_packbits_offsets, when indptr's last entry exceeds x, or when
///   `out` has another size.
inline void segment_packbits(std::span<const std::uint8_t> x, std::span<const std::int32_t> indptr, bit_order order,
                             std::span<std::uint8_t> out) {
  constexpr const char* where = "specdec::segment_packbits";
  const std::vector<std::int32_t> offsets = segment_packbits_offsets(indptr);
  SPECDEC_EXPECTS(static_cast<std::size_t>(indptr.back()) <= x.size(), where, "indptr ends at ", indptr.back(), " but x has ",
                  x.size(), " elements");
  SPECDEC_EXPECTS(out.size() == static_cast<std::size_t>(offsets.back()), where, "out has ", out.size(), " bytes; expected ",
                  offsets.back());
  detail::check_arguments(where, detail::output("out", out), detail::input("x", x), detail::input("indptr", indptr));
  detail::packbits_job<host_space> job{{x.data(), static_cast<index_t>(x.size())},
                                       {indptr.data(), static_cast<index_t>(indptr.size())},
                                       {offsets.data(), static_cast<index_t>(offsets.size())},
                                       {out.data(), static_cast<index_t>(out.size())},
                                       order == bit_order::little};
  detail::name_packbits_arguments(job, where);
  detail::run_serial(job, static_cast<index_t>(indptr.size()) - 1);
}

/// segment_packbits_offsets on a backend: `indptr` and `offsets` (int32, `[segments + 1]` each) in its
/// memory; one team, one launch. The output's size is `offsets[segments]` (FlashInfer's wrapper reads it
/// back with one synchronisation to allocate the output; so would a caller).
/// \throws invalid_argument when `indptr` is empty or `offsets` has another length or overlaps it; a
///   negative or decreasing `indptr` from the team (on CUDA with deferred faults, from `check_faults()`).
template <team_backend B>
void segment_packbits_offsets(B& b, vector_view<const std::int32_t, typename B::memory_space> indptr,
                              vector_view<std::int32_t, typename B::memory_space> offsets) {
  constexpr const char* where = "specdec::segment_packbits";
  detail::check_view(where, "indptr", indptr, 0);
  detail::check_view(where, "offsets", offsets, detail::indexed_output);
  SPECDEC_EXPECTS(indptr.rows() >= 1, where, "indptr has ", indptr.rows(), " entries; expected at least one");
  SPECDEC_EXPECTS(offsets.rows() == indptr.rows(), where, "offsets has ", offsets.rows(), " entries; expected ", indptr.rows(),
                  " like indptr");
  detail::check_disjoint(where, detail::extent_of(where, "offsets", offsets), detail::extent_of(where, "indptr", indptr));
  detail::packbits_offsets_job<typename B::memory_space> job{indptr, offsets};
  detail::name_packbits_arguments(job, where);
  b.run_teams(1, job);
}

/// segment_packbits on a backend, every buffer in its memory: `x` bools as bytes, `indptr` and `offsets`
/// (int32, `[segments + 1]`, offsets from segment_packbits_offsets), `out` the packed bytes
/// (`offsets[segments]` of them); one team per segment, one launch; the host form's bytes.
/// \throws invalid_argument when `indptr` is empty, `offsets` has another length, or `out` overlaps an
///   input; from the teams (on CUDA with deferred faults, from `check_faults()`): a segment outside `x`
///   or decreasing, offsets that are not segment_packbits_offsets' or do not end at `out`'s size.
template <team_backend B>
void segment_packbits(B& b, vector_view<const std::uint8_t, typename B::memory_space> x,
                      vector_view<const std::int32_t, typename B::memory_space> indptr,
                      vector_view<const std::int32_t, typename B::memory_space> offsets, bit_order order,
                      vector_view<std::uint8_t, typename B::memory_space> out) {
  constexpr const char* where = "specdec::segment_packbits";
  detail::check_view(where, "x", x, 0);
  detail::check_view(where, "indptr", indptr, 0);
  detail::check_view(where, "offsets", offsets, 0);
  detail::check_view(where, "out", out, detail::indexed_output);
  SPECDEC_EXPECTS(indptr.rows() >= 1, where, "indptr has ", indptr.rows(), " entries; expected at least one");
  SPECDEC_EXPECTS(offsets.rows() == indptr.rows(), where, "offsets has ", offsets.rows(), " entries; expected ", indptr.rows(),
                  " like indptr");
  detail::check_arguments(where, detail::output("out", out), detail::input("x", x), detail::input("indptr", indptr),
                          detail::input("offsets", offsets));
  // No segment: no team runs to compare out with the offsets' end (0), so the host does.
  SPECDEC_EXPECTS(indptr.rows() > 1 || out.rows() == 0, where, "out has ", out.rows(),
                  " bytes with no segment (indptr has one entry); expected 0");
  detail::packbits_job<typename B::memory_space> job{x, indptr, offsets, out, order == bit_order::little};
  detail::name_packbits_arguments(job, where);
  b.run_teams(indptr.rows() - 1, job);
}

}  // namespace specdec
