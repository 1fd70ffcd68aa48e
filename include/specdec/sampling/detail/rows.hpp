// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief What the request-based verifiers share on the host: reading only the rows a decision needs
/// (`row_reader`: in place, downloaded, or softened from logits on first use), and the check of a
/// probability row read in full.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <specdec/config.hpp>
#include <specdec/backend/concept.hpp>
#include <specdec/backend/detail/row_kernels.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/half.hpp>
#include <specdec/core/memory_space.hpp>
#include <specdec/core/view.hpp>
#include <specdec/sampling/detail/checks.hpp>

namespace specdec::sampling::detail::inline SPECDEC_ISA {

/// Host access to single rows of a backend matrix: host-space rows are read in place; device rows are
/// downloaded once each, on first use, so a verifier transfers exactly the rows it reads. In softening
/// mode the matrix holds logits and a row is read as `row_softmax(logits row, temperature)`, computed
/// on the backend on first use: only the rows a verifier reads are ever softened.
///
/// Host copies live in per-thread scratch rows that outlive the reader: a verifier called once per
/// decoding step would otherwise allocate (and page-fault) V floats per row it reads, which costs
/// more than reading the row.
///
/// T is the element type of the rows `row` returns: float, or (probability rows only) bfloat16 /
/// float16, whose rows are read as they are (downloaded as they are) and whose entries `at` widens. L
/// is the matrix's: T for probability rows; for logits (softened to float rows, T = float) float,
/// bfloat16 or float16, read as row_softmax reads them.
template <backend B, class T = float, class L = T>
  requires(std::is_same_v<L, T> || std::is_same_v<T, float>)
class row_reader {
 public:
  using space = typename B::memory_space;
  using element_type = T;
  row_reader(B& b, matrix_view<const T, space> m)
    requires std::is_same_v<L, T>
      : backend_(&b), m_(m) {}
  row_reader(B& b, matrix_view<const L, space> logits, float temperature)
    requires std::is_same_v<T, float>
      : backend_(&b), m_(logits), temperature_(temperature), softened_(true) {}
  row_reader(const row_reader&) = delete;
  row_reader& operator=(const row_reader&) = delete;
  ~row_reader() { recycle(); }
  /// Returns every row read so far to the thread's spare buffers (bounded: downloaded rows come back
  /// too, and a thread must not hoard them without limit). A verifier calls it after each request,
  /// whose rows no other request reads: a batch then reuses a few row buffers instead of allocating
  /// one per row, which for rows above the allocator's mmap threshold (V >= 32768) meant page faults
  /// on every row and doubled the cost of a batch of 16 chains.
  void recycle() {
    auto& spare = spare_rows();
    for (auto& [row, values] : cache_)
      if (spare.size() < max_spare_rows) spare.push_back(std::move(values));
    cache_.clear();
    stats_.clear();
  }

  /// Token bitmasks of the rows (softening mode; host `[rows x ceil(V / 32)]`, checked by the caller):
  /// a row is then read as the softmax of its logits with the disallowed ones at -inf.
  void set_bitmask(matrix_view<const std::int32_t> bitmask) {
    recycle();
    bitmask_ = bitmask;
  }

  /// The temperature later rows are softened at (a request's own); rows softened at another one are
  /// dropped.
  void set_temperature(float temperature) {
    if (temperature != temperature_) recycle();
    temperature_ = temperature;
  }

  const T* row(index_t r) {
    if (!softened_) {
      if constexpr (std::is_same_v<space, host_space> && std::is_same_v<L, T>) return m_.row(r);
    }
    auto it = cache_.find(r);
    if (it == cache_.end()) it = cache_.emplace(r, fetch(r)).first;
    return it->second.data();
  }
  /// One entry without writing the row: a probability row's entry as is; a softened row's from the
  /// row's softmax normaliser (one read of the row, cached), bit for bit the entry row() would hold,
  /// on host backends that expose `row_softmax_stats`; otherwise from the softened row.
  float at(index_t r, index_t column) {
    if constexpr (std::is_same_v<space, host_space>) {
      if (!softened_) return widen(m_(r, column));
      // (16-bit logits take the softened row: the backends' row_softmax_stats read float rows.)
      if constexpr (std::is_same_v<L, float> && requires(B& b) { b.row_softmax_stats(matrix_view<const float>(), 1.0f); }) {
        if (bitmask_.rows() == 0 && cache_.find(r) == cache_.end()) {
          auto it = stats_.find(r);
          if (it == stats_.end())
            it = stats_.emplace(r, backend_->row_softmax_stats(matrix_view<const float>(m_.row(r), 1, m_.cols()), temperature_)).first;
          const float inv_t = 1.0f / temperature_;
          return specdec::detail::exp_shifted_at(m_.row(r), m_.cols(), column, it->second.max, inv_t, 1.0f / it->second.sum);
        }
      }
    }
    return widen(row(r)[column]);
  }
  index_t rows() const noexcept { return m_.rows(); }
  index_t cols() const noexcept { return m_.cols(); }
  /// Whether rows are computed by row_softmax from logits (and so are distributions by construction).
  bool softened() const noexcept { return softened_; }
  /// Rows softened or downloaded since the last recycle().
  index_t rows_read() const noexcept { return static_cast<index_t>(cache_.size()); }

 private:
  static constexpr std::size_t max_spare_rows = 32;
  static std::vector<std::vector<T>>& spare_rows() {
    thread_local std::vector<std::vector<T>> spare;
    return spare;
  }
  std::vector<T> scratch_row() {
    auto& spare = spare_rows();
    std::vector<T> out;
    if (!spare.empty()) {
      out = std::move(spare.back());
      spare.pop_back();
    }
    out.resize(static_cast<std::size_t>(m_.cols()));
    return out;
  }
  std::vector<T> fetch(index_t r) {
    const matrix_view<const L, space> one(m_.row(r), 1, m_.cols());
    if constexpr (std::is_same_v<L, T>)
      if (!softened_) return backend_->download(vector_view<const T, space>(one.row(0), one.cols()));
    if constexpr (!std::is_same_v<T, float>) {
      return {};  // softened rows are float (the constructor's constraint)
    } else if (bitmask_.rows() > 0) {
      return fetch_masked(r);
    } else if constexpr (std::is_same_v<space, host_space>) {
      std::vector<float> out = scratch_row();
      if (const auto it = stats_.find(r); it != stats_.end())  // normaliser known (float logits): the write pass alone
        specdec::detail::write_exp_shifted(m_.row(r), m_.cols(), it->second.max, 1.0f / temperature_, 1.0f / it->second.sum,
                                           out.data());
      else
        backend_->row_softmax(one, temperature_, matrix_view<float>(out.data(), 1, m_.cols()));
      return out;
    } else {
      auto out = backend_->template allocate<float>(m_.cols());
      backend_->row_softmax(one, temperature_, matrix_view<float, space>(out.view().data(), 1, m_.cols()));
      return backend_->download(vector_view<const float, space>(out.view().data(), m_.cols()));
    }
  }

  /// The row's logits with the disallowed ones at -inf, softened by the backend's row_softmax (on the
  /// backend's memory: the entries are those of row_softmax over the masked logits, bit for bit).
  std::vector<float> fetch_masked(index_t r) {
    std::vector<float> x;
    if constexpr (std::is_same_v<space, host_space>) {
      x = scratch_row();
      std::transform(m_.row(r), m_.row(r) + m_.cols(), x.begin(), [](L v) { return widen(v); });
    } else {
      const std::vector<L> given = backend_->download(vector_view<const L, space>(m_.row(r), m_.cols()));
      x.resize(given.size());
      std::transform(given.begin(), given.end(), x.begin(), [](L v) { return widen(v); });
    }
    const std::int32_t* mask = bitmask_.row(r);
    for (index_t j = 0; j < m_.cols(); ++j)
      if (((static_cast<std::uint32_t>(mask[j >> 5]) >> (j & 31)) & 1u) == 0) x[static_cast<std::size_t>(j)] = -std::numeric_limits<float>::infinity();
    if constexpr (std::is_same_v<space, host_space>) {
      backend_->row_softmax(matrix_view<const float>(x.data(), 1, m_.cols()), temperature_, matrix_view<float>(x.data(), 1, m_.cols()));
      return x;
    } else {
      auto in = backend_->upload(std::span<const float>(x));
      auto out = backend_->template allocate<float>(m_.cols());
      backend_->row_softmax(matrix_view<const float, space>(in.view().data(), 1, m_.cols()), temperature_,
                            matrix_view<float, space>(out.view().data(), 1, m_.cols()));
      return backend_->download(vector_view<const float, space>(out.view().data(), m_.cols()));
    }
  }

  B* backend_;
  matrix_view<const L, space> m_;
  matrix_view<const std::int32_t> bitmask_ = {};
  float temperature_ = 1.0f;
  bool softened_ = false;
  std::map<index_t, std::vector<T>> cache_;
  std::map<index_t, specdec::detail::softmax_stats<float>> stats_;  // softened rows read entry by entry
};

/// Checks a whole probability row of element type E (float, bfloat16, float16; entries widened):
/// finite, non-negative, summing to 1 within the backends' tolerance, to which a 16-bit row adds what
/// rounding to its type can move a sum by (core/half.hpp's rounding_tolerance): the tolerance of
/// residual_rows' check_row, so the host verifiers and the walks accept the same 16-bit rows.
template <class E>
void check_probability_row(const char* where, const char* what, index_t row, const E* p, index_t n) {
  const auto entry = [p](index_t j) { return widen(p[j]); };
  if constexpr (std::is_same_v<E, bfloat16>)
    check_distribution(where, what, row, entry, n, specdec::detail::probability_sum_tolerance, rounding_tolerance<E>(n),
                       "bfloat16 entries (2^-8 of the sum)");
  else if constexpr (std::is_same_v<E, float16>)
    check_distribution(where, what, row, entry, n, specdec::detail::probability_sum_tolerance, rounding_tolerance<E>(n),
                       "float16 entries (2^-11 of the sum and 2^-25 per entry)");
  else
    check_distribution(where, what, row, entry, n, specdec::detail::probability_sum_tolerance);
}

}  // namespace specdec::sampling::detail::inline SPECDEC_ISA
