// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief What a view must be besides its shape, checked once for every argument at a public
/// boundary: extents >= 0, not null when not empty, strides that keep its rows apart, a footprint
/// that fits the address space, and no output sharing memory with another argument (exact in-place
/// aliases allowed where documented). Only integers and pointer values are compared, never
/// dereferenced, so the checks hold for device views too. Host code; O(1) per view.
#pragma once

#include <cstddef>
#include <cstdint>

#include <specdec/core/checked.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>

namespace specdec::detail {

/// What a view must satisfy besides being well formed; combined with |.
enum view_rule : unsigned {
  /// rank 2: column stride 1 (the kernels stream each row).
  contiguous_rows = 1,
  /// rank 2: row stride >= columns when it has several rows, so no two rows share an element.
  distinct_rows = 2,
  /// rank 1: stride 1 (the kernels take the pointer of a packed vector).
  unit_stride = 4,
  /// a stride other than 0 (rank 1; the column stride of rank 2): writers through operator(), any
  /// direction.
  nonzero_stride = 8,
};
/// What the backends' row primitives and dense kernels need of every matrix and vector.
inline constexpr unsigned packed = contiguous_rows | distinct_rows | unit_stride;
/// What a host helper that indexes through operator() needs of an output (any column stride).
inline constexpr unsigned indexed_output = distinct_rows | nonzero_stride;

/// The bytes [begin, end) a non-empty view can touch (empty: begin == end == 0).
struct footprint {
  std::uintptr_t begin = 0, end = 0;
  bool empty() const noexcept { return begin == end; }
};

template <class T, int R, class S>
bool has_zero_extent(const view<T, R, S>& v) noexcept {
  for (int d = 0; d < R; ++d)
    if (v.extent(d) == 0) return true;
  return false;
}

/// The view's footprint, or throws when its extents and strides reach past the address space.
template <class T, int R, class S>
footprint footprint_of(const char* where, const char* name, const view<T, R, S>& v) {
  if (has_zero_extent(v)) return {};
  index_t low = 0, high = 0;  // element offsets of the extreme elements
  for (int d = 0; d < R; ++d) {
    const index_t reach = checked_mul(where, v.extent(d) - 1, v.stride(d), name, "'s extent - 1 times its stride");
    (reach < 0 ? low : high) = checked_add(where, reach < 0 ? low : high, reach, name, "'s element offsets");
  }
  const auto size = static_cast<index_t>(sizeof(T));
  const index_t first = checked_mul(where, low, size, name, "'s byte offsets");
  const index_t last = checked_add(where, checked_mul(where, high, size, name, "'s byte offsets"), size, name,
                                   "'s byte offsets");
  const auto base = reinterpret_cast<std::uintptr_t>(v.data());
  const auto begin = base + static_cast<std::uintptr_t>(first);  // modular: first <= 0
  const auto end = base + static_cast<std::uintptr_t>(last);
  SPECDEC_EXPECTS((first == 0 || begin < base) && end > base, where, name, " at ", static_cast<const void*>(v.data()),
                  " with its extents and strides reaches past the address space");
  return {begin, end};
}

/// Checks that `v` is well formed and satisfies `rules` (a view_rule combination): extents >= 0; an
/// empty view (some extent 0) is accepted whatever its pointer and strides, and never touched;
/// otherwise not null, the rules, and a footprint inside the address space.
template <class T, int R, class S>
void check_view(const char* where, const char* name, const view<T, R, S>& v, unsigned rules) {
  for (int d = 0; d < R; ++d)
    SPECDEC_EXPECTS(v.extent(d) >= 0, where, name, " has extent ", v.extent(d), " in dimension ", d, "; expected >= 0");
  if (has_zero_extent(v)) return;
  if constexpr (R == 2) {
    SPECDEC_EXPECTS(v.data() != nullptr, where, name, " is a null view of shape [", v.rows(), " x ", v.cols(), "]");
  } else {
    SPECDEC_EXPECTS(v.data() != nullptr, where, name, " is a null view of length ", v.rows());
  }
  // First: with the footprint inside the address space, the products below cannot overflow.
  (void)footprint_of(where, name, v);
  if constexpr (R == 2) {
    SPECDEC_EXPECTS(!(rules & contiguous_rows) || v.has_contiguous_rows(), where, name, " has column stride ",
                    v.stride(1), "; expected contiguous rows (column stride 1)");
    SPECDEC_EXPECTS(!(rules & nonzero_stride) || v.cols() <= 1 || v.stride(1) != 0, where, name,
                    " has column stride 0; its columns would all be one element");
    // The elements a row spans: its rows are apart when the next one starts past them.
    const index_t row_width = (v.cols() - 1) * (v.stride(1) < 0 ? -v.stride(1) : v.stride(1)) + 1;
    SPECDEC_EXPECTS(!(rules & distinct_rows) || v.rows() <= 1 || v.stride(0) >= row_width, where, name,
                    " has row stride ", v.stride(0), " smaller than its ", v.cols(), " columns; rows must not overlap");
  } else {
    SPECDEC_EXPECTS(!(rules & unit_stride) || v.rows() <= 1 || v.stride(0) == 1, where, name, " has stride ",
                    v.stride(0), "; expected a packed vector (stride 1)");
    SPECDEC_EXPECTS(!(rules & nonzero_stride) || v.rows() <= 1 || v.stride(0) != 0, where, name,
                    " has stride 0; its entries would all be one element");
  }
}

/// A view reduced to what the overlap test needs (element type erased).
struct view_extent {
  const char* name = "";
  footprint bytes;
  std::uintptr_t data = 0;
  index_t rows = 0, row_bytes = 0, row_stride_bytes = 0, extents[2] = {0, 0}, strides[2] = {0, 0};
  std::size_t element = 0;
  int rank = 0;
  bool packed_rows = false;  // rank 2, column stride 1: each row one byte interval
};

template <class T, int R, class S>
view_extent extent_of(const char* where, const char* name, const view<T, R, S>& v) {
  view_extent e;
  e.name = name;
  e.bytes = footprint_of(where, name, v);
  e.data = reinterpret_cast<std::uintptr_t>(v.data());
  e.element = sizeof(T);
  e.rank = R;
  for (int d = 0; d < R; ++d) {
    e.extents[d] = v.extent(d);
    e.strides[d] = v.stride(d);
  }
  if constexpr (R == 2) {
    e.packed_rows = v.has_contiguous_rows() && v.stride(0) >= v.cols();
    e.rows = v.rows();
    e.row_bytes = v.cols() * static_cast<index_t>(sizeof(T));  // within the footprint: no overflow
    e.row_stride_bytes = v.rows() > 1 ? v.stride(0) * static_cast<index_t>(sizeof(T)) : 0;
  }
  return e;
}

/// Whether two packed-row matrices with the same row stride interleave without sharing a byte (an
/// engine's side-by-side columns of one buffer), given that their footprints intersect.
inline bool rows_interleave(const view_extent& a, const view_extent& b) {
  const index_t stride = a.row_stride_bytes;
  // Byte offset of b's row 0 from a's row 0; within both footprints, so it fits in index_t.
  const auto delta = static_cast<index_t>(b.data - a.data);
  // b's row j against a's row i sits at delta + k * stride for k = j - i in [-(a.rows - 1), b.rows - 1].
  // Rows are at least their width apart, so only the smallest k whose interval ends past a's row start
  // can meet it.
  const index_t lower = -b.row_bytes - delta;  // need k * stride > lower
  index_t k = lower >= 0 ? lower / stride + 1 : -((-lower) / stride);
  if (k * stride <= lower) ++k;
  k = k < -(a.rows - 1) ? -(a.rows - 1) : k;
  if (k > b.rows - 1) return true;
  return delta + k * stride >= a.row_bytes;
}

/// Throws unless `out` shares no byte with `other`; an exact alias (the same pointer, extents and
/// strides) is allowed when `exact_alias_allowed` (the in-place forms a primitive documents). Two
/// packed-row matrices with the same row stride are compared row by row, so side-by-side columns of
/// one buffer are accepted; other intersecting footprints are rejected.
inline void check_disjoint(const char* where, const view_extent& out, const view_extent& other,
                           bool exact_alias_allowed = false) {
  if (out.bytes.empty() || other.bytes.empty()) return;
  if (out.bytes.end <= other.bytes.begin || other.bytes.end <= out.bytes.begin) return;
  const bool exact = out.data == other.data && out.rank == other.rank && out.element == other.element &&
                     out.extents[0] == other.extents[0] && out.extents[1] == other.extents[1] &&
                     (out.extents[0] <= 1 || out.strides[0] == other.strides[0]) &&
                     (out.rank == 1 || out.extents[1] <= 1 || out.strides[1] == other.strides[1]);
  if (exact && exact_alias_allowed) return;
  if (!exact && out.packed_rows && other.packed_rows && out.rows > 1 && other.rows > 1 &&
      out.row_stride_bytes == other.row_stride_bytes &&
      (out.data <= other.data ? rows_interleave(out, other) : rows_interleave(other, out)))
    return;
  throw_invalid_argument(where, out.name, exact ? " is the same memory as " : " overlaps ", other.name,
                         exact_alias_allowed ? "; expected the same view or separate memory"
                                             : "; expected an output that shares no element with another argument");
}

}  // namespace specdec::detail
