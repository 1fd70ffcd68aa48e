// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Top-k of logits rows on a backend, brought back to the host: what every tree builder needs
/// from the vocabulary-sized rows (the tree bookkeeping itself is tens of nodes and runs on the host).
#pragma once

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <vector>

#include <specdec/config.hpp>
#include <specdec/backend/concept.hpp>
#include <specdec/backend/detail/checks.hpp>
#include <specdec/backend/detail/row_kernels.hpp>
#include <specdec/core/checked.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>

namespace specdec::detail::inline SPECDEC_ISA {

/// What the builder ranks by: raw logits (Medusa, EAGLE-1 static drafting), log-softmax values (EAGLE-2,
/// Jakiro), or softmax probabilities (SGLang).
enum class topk_scale { logits, log_probabilities, probabilities };

/// Indices of the `keep` best of `scores` in rank order (larger score first, ties to the lower
/// index: the rule of every specdec top-k). Host; candidate lists are k^2 or a few hundred long.
/// `scores` must hold no NaN (the order would not be a strict weak ordering): callers check
/// caller-given scores; backend top-k values are NaN-free by the backend's checks.
template <class Index>
std::vector<Index> best_indices(std::span<const float> scores, index_t keep) {
  std::vector<Index> order(scores.size());
  std::iota(order.begin(), order.end(), Index(0));
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), [&](Index x, Index y) {
    const float sx = scores[static_cast<std::size_t>(x)], sy = scores[static_cast<std::size_t>(y)];
    return sx > sy || (sx == sy && x < y);  // ranks_before, on indices of any width
  });
  order.resize(static_cast<std::size_t>(keep));
  return order;
}

/// Owns the backend buffers for `max_rows x k` results, allocated once, and the host copies.
template <backend B>
class host_topk {
 public:
  using space = typename B::memory_space;

  /// Checks the sizes; the buffers are allocated by the first run(), once k is known to fit the
  /// vocabulary (a k from a caller's struct must not size an allocation before that check).
  host_topk(B& b, index_t max_rows, index_t k) : backend_(&b), k_(k), max_rows_(max_rows) {
    constexpr const char* where = "specdec::detail::host_topk";
    SPECDEC_EXPECTS(k >= 1 && k <= std::numeric_limits<std::int32_t>::max(), where, "top_k = ", k,
                    "; expected 1 <= top_k <= 2^31 - 1");
    (void)checked_count(where, {max_rows, k}, "the top-k results [rows x top_k]");
  }

  /// Runs the top-k of `logits` (`rows <= max_rows`, each of V >= k entries) and downloads the results:
  /// values() and indices() are then row-major `[rows x k]`, values in the requested scale.
  /// \throws invalid_argument from the backend (k > V, NaN or infinite logits, ...).
  void run(matrix_view<const float, space> logits, topk_scale scale) {
    const index_t rows = logits.rows();
    SPECDEC_EXPECTS(rows <= max_rows_, "specdec::detail::host_topk", "logits has ", rows,
                    " rows; this builder was sized for at most ", max_rows_);
    check_row_matrix("specdec::detail::host_topk", "logits", logits);
    check_k("specdec::detail::host_topk", k_, logits.cols());
    if (!allocated_) {
      values_ = backend_->template allocate<float>(max_rows_ * k_);
      indices_ = backend_->template allocate<std::int32_t>(max_rows_ * k_);
      lse_ = backend_->template allocate<float>(max_rows_);
      allocated_ = true;
    }
    auto values = values_.matrix(max_rows_, k_);
    auto indices = indices_.matrix(max_rows_, k_);
    const matrix_view<float, space> v(values.data(), rows, k_);
    const matrix_view<std::int32_t, space> ix(indices.data(), rows, k_);
    if (scale == topk_scale::logits) {
      backend_->row_topk(logits, k_, v, ix);
    } else {
      const vector_view<float, space> lse(lse_.view().data(), rows);
      backend_->row_topk_logsumexp(logits, k_, 1.0f, v, ix, lse);
    }
    host_values_ = backend_->download(vector_view<const float, space>(v.data(), rows * k_));
    host_indices_ = backend_->download(vector_view<const std::int32_t, space>(ix.data(), rows * k_));
    if (scale == topk_scale::probabilities)
      for (float& x : host_values_) x = std::exp(x);
  }

  const std::vector<float>& values() const noexcept { return host_values_; }
  const std::vector<std::int32_t>& indices() const noexcept { return host_indices_; }
  index_t k() const noexcept { return k_; }

 private:
  B* backend_;
  index_t k_;
  index_t max_rows_;
  typename B::template buffer<float> values_;
  typename B::template buffer<std::int32_t> indices_;
  typename B::template buffer<float> lse_;
  bool allocated_ = false;
  std::vector<float> host_values_;
  std::vector<std::int32_t> host_indices_;
};

}  // namespace specdec::detail::inline SPECDEC_ISA
