// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief What a view must be besides its shape, checked once for every argument at a public
/// boundary: extents >= 0, not null when not empty, strides that keep its rows apart, a footprint
/// that fits the address space, and no output sharing memory with another argument (exact in-place
/// aliases allowed where documented). Only integers and pointer values are compared, never
/// dereferenced, so the checks hold for device views too. Host code; O(1) per view.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

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

/// What an argument is to its call.
enum class argument_role {
  input,     ///< read only; may share memory with other inputs
  output,    ///< written; shares no element with any other argument
  in_place,  ///< written; may be exactly (same pointer, extents, strides) the argument named `alias`, nothing else
};

/// One view argument of a call, as check_arguments takes it: the view (held by value: a pointer and
/// four integers), its name, its rules and its role. Built by `input`, `output` and `in_place`.
template <class T, int R, class S>
struct argument {
  const char* name;
  view<T, R, S> v;
  unsigned rules;
  argument_role role;
  const char* alias = nullptr;
};

/// An input of a call: null with a shape, negative extents and footprints past the address space are
/// refused; `rules` add what the function's kernels need (e.g. `packed`).
template <class T, int R, class S>
argument<T, R, S> input(const char* name, const view<T, R, S>& v, unsigned rules = 0) {
  return {name, v, rules, argument_role::input};
}
template <class T>
argument<const T, 1, host_space> input(const char* name, std::span<T> s, unsigned rules = 0) {
  return {name, view<const T, 1, host_space>(s.data(), static_cast<index_t>(s.size())), rules, argument_role::input};
}
/// An output of a call: by default written through operator() (`indexed_output`: rows apart, no zero
/// stride), and apart from every other argument.
template <class T, int R, class S>
argument<T, R, S> output(const char* name, const view<T, R, S>& v, unsigned rules = indexed_output) {
  return {name, v, rules, argument_role::output};
}
template <class T>
argument<T, 1, host_space> output(const char* name, std::span<T> s, unsigned rules = indexed_output) {
  return {name, view<T, 1, host_space>(s.data(), static_cast<index_t>(s.size())), rules, argument_role::output};
}
/// An output that may be exactly the argument named `alias` (a documented in-place form), and is
/// apart from every other.
template <class T, int R, class S>
argument<T, R, S> in_place(const char* name, const view<T, R, S>& v, unsigned rules, const char* alias) {
  return {name, v, rules, argument_role::in_place, alias};
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

/// An argument after its view check: its extent, role and alias.
struct checked_argument {
  view_extent e;
  argument_role role = argument_role::input;
  const char* alias = nullptr;
};

template <class T, int R, class S>
checked_argument checked(const char* where, const argument<T, R, S>& a) {
  check_view(where, a.name, a.v, a.rules);
  return {extent_of(where, a.name, a.v), a.role, a.alias};
}

/// Every written argument against every other argument (inputs may share memory with each other).
/// O(written x all).
inline void check_apart(const char* where, std::span<const checked_argument> all) {
  const auto aliases = [](const checked_argument& a, const checked_argument& b) {
    return a.role == argument_role::in_place && a.alias != nullptr && std::strcmp(a.alias, b.e.name) == 0;
  };
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (all[i].role == argument_role::input) continue;
    for (std::size_t j = 0; j < all.size(); ++j) {
      if (j == i || (all[j].role != argument_role::input && j < i)) continue;  // each written pair once
      check_disjoint(where, all[i].e, all[j].e, aliases(all[i], all[j]) || aliases(all[j], all[i]));
    }
  }
}

/// The one checked path every entry point takes its views through: each argument by its rules
/// (check_view), then every output and in-place argument against every other argument of the call
/// (check_disjoint; inputs may share memory with each other). Arguments with an empty view are
/// accepted and never compared. Host code, O(1) per view and per written pair.
///
///   check_arguments(where, input("x", x, packed), output("ranks", ranks), output("token_ids", token_ids),
///                   in_place("out", out, packed, "x"));  // out may be x itself, nothing else
template <class... Args>
void check_arguments(const char* where, const Args&... args) {
  const std::array<checked_argument, sizeof...(Args)> all{checked(where, args)...};
  check_apart(where, all);
}

/// check_arguments for calls whose argument count depends on the input (a batch of requests, each with
/// its own spans): `add` each argument (its view is checked at once), then `check()` the overlaps.
class argument_set {
 public:
  explicit argument_set(const char* where) : where_(where) {}
  template <class T, int R, class S>
  argument_set& add(const argument<T, R, S>& a) {
    all_.push_back(checked(where_, a));
    return *this;
  }
  void check() const { check_apart(where_, all_); }

 private:
  const char* where_;
  std::vector<checked_argument> all_;
};

}  // namespace specdec::detail
