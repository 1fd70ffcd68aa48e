// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Non-owning views of rank 1 and 2 over caller memory: pointer, extents, strides (counted in
/// elements, as DLPack and mdspan count them) and the memory space as part of the type.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include <specdec/config.hpp>
#include <specdec/core/device_array.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/memory_space.hpp>

namespace specdec {

/// Index and extent type of views. Signed, so that strides and differences need no casts; 64-bit so
/// that `[rows x V]` products of large batches cannot overflow.
using index_t = std::int64_t;

namespace detail {

/// What an Eigen dense object (Matrix, Map, Ref, Block) looks like to a view. Spelled out here
/// instead of including Eigen so that the core layer depends on the standard library only.
template <class M>
concept eigen_dense_like = requires(M& m) {
  { m.data() };
  { m.rows() } -> std::convertible_to<index_t>;
  { m.cols() } -> std::convertible_to<index_t>;
  { m.innerStride() } -> std::convertible_to<index_t>;
  { m.outerStride() } -> std::convertible_to<index_t>;
  { M::IsRowMajor } -> std::convertible_to<bool>;
};

}  // namespace detail

/// A non-owning view of `Rank` (1 or 2) dimensions over elements of type `T` living in `Space`.
///
/// Element (i, j) of a rank-2 view is at `data()[i * stride(0) + j * stride(1)]`. The view never
/// allocates or frees; the caller keeps the memory alive while any specdec call that received the
/// view (and, for device memory, the work it queued) is running. `T` may be const-qualified; a view
/// of `T` converts to a view of `const T` in the same space, never to another space.
template <class T, int Rank, class Space = host_space>
class view {
  static_assert(Rank == 1 || Rank == 2, "specdec views have rank 1 or 2");
  static_assert(is_memory_space_v<Space>, "Space must be specdec::host_space or specdec::device_space");

 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;
  using memory_space = Space;
  static constexpr int rank = Rank;

  constexpr view() noexcept = default;

  /// Rank 1, contiguous or strided, over raw memory in `Space`.
  SPECDEC_HOST_DEVICE constexpr view(T* data, index_t size, index_t stride = 1) noexcept
    requires(Rank == 1)
      : data_(data), extents_{size}, strides_{stride} {}

  /// Rank 2 over raw memory in `Space`; row-major and contiguous unless strides are given.
  SPECDEC_HOST_DEVICE constexpr view(T* data, index_t rows, index_t cols) noexcept
    requires(Rank == 2)
      : data_(data), extents_{rows, cols}, strides_{cols, 1} {}
  SPECDEC_HOST_DEVICE constexpr view(T* data, index_t rows, index_t cols, index_t row_stride,
                                     index_t col_stride) noexcept
    requires(Rank == 2)
      : data_(data), extents_{rows, cols}, strides_{row_stride, col_stride} {}

  /// Rank 1 over a std::span (host memory).
  template <class U, std::size_t N>
    requires(Rank == 1 && std::is_same_v<Space, host_space> && std::is_convertible_v<U (*)[], T (*)[]>)
  constexpr view(std::span<U, N> s) noexcept : view(s.data(), static_cast<index_t>(s.size())) {}

  /// Rank 1 over a std::vector (host memory). A const vector gives a view of const elements.
  template <class U, class A>
    requires(Rank == 1 && std::is_same_v<Space, host_space> && std::is_convertible_v<U (*)[], T (*)[]>)
  constexpr view(std::vector<U, A>& v) noexcept : view(v.data(), static_cast<index_t>(v.size())) {}
  template <class U, class A>
    requires(Rank == 1 && std::is_same_v<Space, host_space> &&
             std::is_convertible_v<const U (*)[], T (*)[]>)
  constexpr view(const std::vector<U, A>& v) noexcept : view(v.data(), static_cast<index_t>(v.size())) {}

  /// Rank 2 (or rank 1 for a vector-shaped object) over an Eigen dense object: `Eigen::Map`,
  /// `Eigen::Matrix`, `Eigen::Ref`, blocks. Row- and column-major both work: the strides say which.
  template <detail::eigen_dense_like M>
    requires(std::is_same_v<Space, host_space> &&
             std::is_convertible_v<std::remove_pointer_t<decltype(std::declval<M&>().data())> (*)[],
                                   T (*)[]>)
  view(M& m) {  // NOLINT(google-explicit-constructor): a view is a cheap, lossless adaptor
    const index_t inner = m.innerStride();
    const index_t outer = m.outerStride();
    data_ = m.data();
    if constexpr (Rank == 2) {
      extents_ = {m.rows(), m.cols()};
      strides_ = M::IsRowMajor ? device_array<index_t, 2>{outer, inner} : device_array<index_t, 2>{inner, outer};
    } else {
      SPECDEC_EXPECTS(m.rows() == 1 || m.cols() == 1, "specdec::view",
                      "a rank-1 view needs an Eigen vector, got ", m.rows(), " x ", m.cols());
      extents_ = {m.rows() * m.cols()};
      strides_ = {m.rows() == 1 ? (M::IsRowMajor ? inner : outer) : (M::IsRowMajor ? outer : inner)};
    }
  }

  /// A view of T converts to a view of const T in the same memory space.
  template <class U>
    requires(!std::is_same_v<U, T> && std::is_convertible_v<U (*)[], T (*)[]>)
  SPECDEC_HOST_DEVICE constexpr view(const view<U, Rank, Space>& other) noexcept
      : data_(other.data()), extents_{}, strides_{} {
    for (int d = 0; d < Rank; ++d) {
      extents_[d] = other.extent(d);
      strides_[d] = other.stride(d);
    }
  }

  SPECDEC_HOST_DEVICE constexpr T* data() const noexcept { return data_; }
  SPECDEC_HOST_DEVICE constexpr index_t extent(int d) const noexcept { return extents_[d]; }
  SPECDEC_HOST_DEVICE constexpr index_t stride(int d) const noexcept { return strides_[d]; }
  /// Number of rows of a rank-2 view (the length of a rank-1 view).
  SPECDEC_HOST_DEVICE constexpr index_t rows() const noexcept { return extents_[0]; }
  /// Number of columns of a rank-2 view.
  SPECDEC_HOST_DEVICE constexpr index_t cols() const noexcept
    requires(Rank == 2)
  {
    return extents_[1];
  }
  SPECDEC_HOST_DEVICE constexpr index_t size() const noexcept {
    index_t n = 1;
    for (int d = 0; d < Rank; ++d) n *= extents_[d];
    return n;
  }
  SPECDEC_HOST_DEVICE constexpr bool empty() const noexcept { return size() == 0; }

  SPECDEC_HOST_DEVICE constexpr T& operator()(index_t i) const noexcept
    requires(Rank == 1)
  {
    return data_[i * strides_[0]];
  }
  SPECDEC_HOST_DEVICE constexpr T& operator()(index_t i, index_t j) const noexcept
    requires(Rank == 2)
  {
    return data_[i * strides_[0] + j * strides_[1]];
  }
  /// Pointer to the first element of row i of a rank-2 view.
  SPECDEC_HOST_DEVICE constexpr T* row(index_t i) const noexcept
    requires(Rank == 2)
  {
    return data_ + i * strides_[0];
  }

  /// True when elements are adjacent in memory along the last dimension (rows are contiguous).
  SPECDEC_HOST_DEVICE constexpr bool has_contiguous_rows() const noexcept {
    return strides_[Rank - 1] == 1 || extents_[Rank - 1] <= 1;
  }

  /// The elements as a std::span (host memory, contiguous rank-1 views only).
  std::span<T> span() const
    requires(Rank == 1 && std::is_same_v<Space, host_space>)
  {
    SPECDEC_EXPECTS(has_contiguous_rows(), "specdec::view::span", "the view has stride ", strides_[0],
                    "; expected a contiguous view (stride 1)");
    return std::span<T>(data_, static_cast<std::size_t>(extents_[0]));
  }

 private:
  T* data_ = nullptr;
  device_array<index_t, Rank> extents_{};
  device_array<index_t, Rank> strides_{};
};

template <class T, class Space = host_space>
using vector_view = view<T, 1, Space>;
template <class T, class Space = host_space>
using matrix_view = view<T, 2, Space>;

template <class U, std::size_t N>
view(std::span<U, N>) -> view<U, 1, host_space>;
template <class U, class A>
view(std::vector<U, A>&) -> view<U, 1, host_space>;
template <class U, class A>
view(const std::vector<U, A>&) -> view<const U, 1, host_space>;

/// A rank-2 host view over a contiguous row-major buffer, e.g. `as_matrix(logits, rows, vocab)`.
template <class U, class A>
matrix_view<U> as_matrix(std::vector<U, A>& v, index_t rows, index_t cols) {
  // Decided by division: rows * cols of caller values may overflow.
  SPECDEC_EXPECTS(rows >= 0 && cols >= 0 &&
                      (cols == 0 ? v.empty()
                                 : v.size() % static_cast<std::size_t>(cols) == 0 &&
                                       v.size() / static_cast<std::size_t>(cols) == static_cast<std::size_t>(rows)),
                  "specdec::as_matrix", "a vector of ", v.size(), " elements cannot be viewed as ", rows,
                  " x ", cols);
  return matrix_view<U>(v.data(), rows, cols);
}
template <class U, class A>
matrix_view<const U> as_matrix(const std::vector<U, A>& v, index_t rows, index_t cols) {
  // Decided by division: rows * cols of caller values may overflow.
  SPECDEC_EXPECTS(rows >= 0 && cols >= 0 &&
                      (cols == 0 ? v.empty()
                                 : v.size() % static_cast<std::size_t>(cols) == 0 &&
                                       v.size() / static_cast<std::size_t>(cols) == static_cast<std::size_t>(rows)),
                  "specdec::as_matrix", "a vector of ", v.size(), " elements cannot be viewed as ", rows,
                  " x ", cols);
  return matrix_view<const U>(v.data(), rows, cols);
}

}  // namespace specdec
