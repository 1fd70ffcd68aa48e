// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief `specdec::eigen`: the CPU backend. One thread, SIMD through Eigen's vectorised
/// transcendental functions and compiler-vectorised reductions, host memory.
///
/// Cost model: every row primitive streams its input once from memory (softmax and log-softmax read
/// it twice and write once; sampling re-reads one 4 KiB chunk). Top-k with k <= 32 skips 64-element
/// blocks that cannot beat the current k-th value after a max-reduction over them; larger k (and the
/// fused top-k + log-sum-exp) record every block's maximum in the one pass and look again, from
/// cache, only at the ~k blocks that reach the k-th largest of them (detail/block_topk.hpp). Either
/// way top-k costs about one streaming pass for k << V. The backend object keeps scratch between
/// calls, so one object serves one thread at a time. Requires Eigen >= 3.4 (link `specdec::eigen`).
#pragma once

// GCC 12's AVX-512 intrinsics build `_mm512_undefined_ps` from a self-initialised variable, and its
// maybe-uninitialized pass reports it wherever Eigen's GEMM packing inlines them (GCC bug 105593,
// fixed in 13), system headers or not. GCC >= 12 honours a diagnostic pragma along the inlining chain,
// so the suppression covers exactly the lines of Eigen and the intrinsics headers it pulls in, and
// none of the code that includes this header.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <Eigen/Core>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <algorithm>
#include <cstring>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/backend/detail/block_topk.hpp>
#include <specdec/backend/detail/checks.hpp>
#include <specdec/backend/detail/dense_checks.hpp>
#include <specdec/backend/detail/dense_kernels.hpp>
#include <specdec/backend/detail/eigen_dense.hpp>
#include <specdec/backend/detail/row_kernels.hpp>
#include <specdec/backend/detail/softmax_row.hpp>
#include <specdec/core/view.hpp>

namespace specdec::inline SPECDEC_ISA {

/// The Eigen (CPU) backend. Models specdec::backend with `memory_space = host_space`.
class eigen : public detail::eigen_dense {
 public:
  using memory_space = host_space;

  /// Owning host buffer (contiguous); see specdec::backend.
  template <class T>
  class buffer {
   public:
    buffer() = default;
    explicit buffer(index_t n)
        : data_(detail::checked_count("specdec::eigen::buffer", {n}, "a buffer of n = ", n, " elements")) {}
    explicit buffer(std::vector<T> data) : data_(std::move(data)) {}
    vector_view<T, host_space> view() { return {data_.data(), static_cast<index_t>(data_.size())}; }
    vector_view<const T, host_space> view() const { return {data_.data(), static_cast<index_t>(data_.size())}; }
    matrix_view<T, host_space> matrix(index_t rows, index_t cols) {
      SPECDEC_EXPECTS(rows >= 0 && cols >= 0 && (cols == 0 ? size() == 0 : rows == size() / cols && size() % cols == 0),
                      "eigen::buffer::matrix", "a buffer of ", size(), " elements cannot be viewed as [", rows, " x ",
                      cols, "]");
      return {data_.data(), rows, cols};
    }
    index_t size() const noexcept { return static_cast<index_t>(data_.size()); }

   private:
    std::vector<T> data_;
  };

  template <class T>
  buffer<T> allocate(index_t n) const {
    SPECDEC_EXPECTS(n >= 0 && n <= max_elements, "eigen::allocate", "n = ", n,
                    "; expected 0 <= n <= 2^40 (specdec's largest buffer)");
    return buffer<T>(n);
  }
  template <class T>
  buffer<std::remove_const_t<T>> upload(std::span<T> host) const {
    return buffer<std::remove_const_t<T>>(std::vector<std::remove_const_t<T>>(host.begin(), host.end()));
  }
  /// Copies `host` into the caller's `dst` (any stride). \throws invalid_argument on a length mismatch.
  template <class T>
  void upload(std::span<const T> host, vector_view<T, host_space> dst) const {
    SPECDEC_EXPECTS(static_cast<index_t>(host.size()) == dst.rows(), "eigen::upload", "host has ", host.size(),
                    " entries; dst has ", dst.rows());
    detail::check_view("eigen::upload", "dst", dst, detail::nonzero_stride);
    detail::check_disjoint("eigen::upload", detail::extent_of("eigen::upload", "dst", dst),
                           detail::extent_of("eigen::upload", "host", vector_view<const T, host_space>(host.data(), dst.rows())));
    for (index_t i = 0; i < dst.rows(); ++i) dst(i) = host[static_cast<std::size_t>(i)];
  }
  template <class T>
  std::vector<std::remove_const_t<T>> download(vector_view<T, host_space> v) const {
    detail::check_view("eigen::download", "v", v, 0);
    std::vector<std::remove_const_t<T>> out(static_cast<std::size_t>(v.rows()));
    for (index_t i = 0; i < v.rows(); ++i) out[static_cast<std::size_t>(i)] = v(i);
    return out;
  }

  /// Row maximum: `max[r] = max_j logits(r, j)`, the entry at the row's argmax (so a zero maximum
  /// has the sign of its first occurrence).
  /// \param logits host `[rows x V]`, V >= 1, finite or -inf.
  /// \param max host `[rows]`.
  /// \throws invalid_argument on a shape mismatch, NaN or +inf.
  template <class T>
  void row_max(matrix_view<T> logits, vector_view<compute_t<T>> max) {
    constexpr const char* where = "specdec::eigen::row_max";
    detail::check_row_reduction(where, logits, max, "max");
    for (index_t r = 0; r < logits.rows(); ++r) {
      const auto s = detail::scan_max(logits.row(r), logits.cols());
      raise_if(where, "logits", logits, r, detail::logits_fault(s));
      // A zero maximum takes the sign of its first occurrence, as row_argmax's value and every backend
      // (the vector scan's choice between +0 and -0 depends on the lane order).
      max(r) = s.max == 0 ? widen(logits(r, detail::find_first(logits.row(r), logits.cols(), s.max))) : s.max;
    }
  }

  /// Row argmax: the lowest index of the row maximum (an all -inf row gives index 0).
  /// \param logits host `[rows x V]`. \param index host `[rows]` int32.
  /// \param value optional host `[rows]`: the maximum itself.
  /// \throws invalid_argument on a shape mismatch, NaN or +inf.
  template <class T>
  void row_argmax(matrix_view<T> logits, vector_view<std::int32_t> index,
                  vector_view<compute_t<T>> value = {}) {
    constexpr const char* where = "specdec::eigen::row_argmax";
    detail::check_row_reduction(where, logits, index, "index");
    const bool with_value = value.data() != nullptr || !value.empty();
    if (with_value) {
      detail::check_length(where, "value", value, logits.rows(), "one per row");
      detail::check_apart(where, "value", value, "logits", logits);
      detail::check_apart(where, "value", value, "index", index);
    }
    for (index_t r = 0; r < logits.rows(); ++r) {
      const auto best = detail::argmax_row(logits.row(r), logits.cols());
      raise_if(where, "logits", logits, r, best.error);
      index(r) = static_cast<std::int32_t>(best.index);
      if (with_value) value(r) = best.value;
    }
  }

  /// Row top-k: the k largest entries of each row, values descending, ties to the lower index.
  /// \param logits host `[rows x V]`; \param k 1 <= k <= V.
  /// \param values host `[rows x k]`; \param indices host `[rows x k]` int32 column ids.
  /// \throws invalid_argument on k out of range, a shape mismatch, NaN or +inf.
  template <class T>
  void row_topk(matrix_view<T> logits, index_t k, matrix_view<compute_t<T>> values,
                matrix_view<std::int32_t> indices) {
    constexpr const char* where = "specdec::eigen::row_topk";
    detail::check_topk(where, logits, k, values, indices);
    for (index_t r = 0; r < logits.rows(); ++r) {
      const auto s = topk_row(logits.row(r), logits.cols(), k, values.row(r), indices.row(r));
      raise_if(where, "logits", logits, r, detail::logits_fault(s));
    }
  }

  /// Fused top-k of log-softmax(logits / temperature) and the row's log-sum-exp, in one pass:
  /// `lse[r] = log sum_j exp(logits(r, j) / temperature)` and `values(r, i) = logits(r, idx) /
  /// temperature - lse[r]` for the k best `idx` (same order and ties as row_topk).
  /// \param temperature > 0. \param lse host `[rows]`. Other shapes as row_topk.
  /// \throws invalid_argument as row_topk, and for a row that is entirely -inf.
  template <class T>
  void row_topk_logsumexp(matrix_view<T> logits, index_t k, compute_t<T> temperature,
                          matrix_view<compute_t<T>> values, matrix_view<std::int32_t> indices,
                          vector_view<compute_t<T>> lse) {
    using V = compute_t<T>;
    constexpr const char* where = "specdec::eigen::row_topk_logsumexp";
    detail::check_topk(where, logits, k, values, indices);
    detail::check_length(where, "lse", lse, logits.rows(), "one entry per row of logits");
    detail::check_apart(where, "lse", lse, "logits", logits);
    detail::check_apart(where, "lse", lse, "values", values);
    detail::check_apart(where, "lse", lse, "indices", indices);
    detail::check_temperature(where, temperature, false);
    const V inv_t = V(1) / temperature;
    const index_t n = logits.cols();
    for (index_t r = 0; r < logits.rows(); ++r) {
      const auto* x = logits.row(r);
      V* vals = values.row(r);
      std::int32_t* ids = indices.row(r);
      const auto finish = [&](V max, V sum) {
        const V log_s = detail::log_(sum);
        lse(r) = max * inv_t + log_s;
        for (index_t i = 0; i < k; ++i) vals[i] = (vals[i] - max) * inv_t - log_s;
      };
#if SPECDEC_HOST_SIMD
      if constexpr (std::is_same_v<V, float>) {
        if (k <= small_k && detail::use_block_topk(n, k)) {
          blocks_.reserve(n, k);
          const detail::block_sum_exp s = detail::block_maxima_sum_exp(x, n, inv_t, blocks_.maxima.data());
          if (s.done) {
            detail::fault f = detail::logits_fault(s.scan);
            if (f == detail::fault::none && s.scan.max == detail::negative_infinity<V>()) f = detail::fault::all_masked;
            raise_if(where, "logits", logits, r, f);
            detail::topk_from_block_maxima(x, n, k, s.scan.max, blocks_, vals, ids);
            finish(s.scan.max, s.sum);
            continue;
          }
        }
      }
#endif
      detail::online_logsumexp<V> acc{detail::negative_infinity<V>(), V(0), inv_t};
      if (k <= small_k) {
        detail::topk_accumulator<V> top{vals, ids, k, 0};
        for (index_t c0 = 0; c0 < n; c0 += chunk) {
          const index_t len = std::min(chunk, n - c0);
          const auto s = detail::topk_scan(x + c0, len, c0, top);
          acc.has_nan = acc.has_nan || s.has_nan;
          acc.add(x + c0, len, s.max, x + c0 + len, std::min(chunk, n - c0 - len));
        }
      } else {
        for (index_t c0 = 0; c0 < n; c0 += chunk) {
          const index_t len = std::min(chunk, n - c0);
          const auto s = detail::scan_max(x + c0, len);
          acc.has_nan = acc.has_nan || s.has_nan;
          acc.add(x + c0, len, s.max);
        }
        if (!acc.has_nan) topk_large(x, n, k, vals, ids);
      }
      raise_if(where, "logits", logits, r, acc.fault());
      finish(acc.max, acc.sum);
    }
  }

  /// Row log-sum-exp with temperature: `lse[r] = log sum_j exp(logits(r, j) / temperature)`
  /// (-inf for a row that is entirely -inf). \param temperature > 0. \param lse host `[rows]`.
  /// \throws invalid_argument on a shape mismatch, temperature <= 0, NaN or +inf.
  template <class T>
  void row_logsumexp(matrix_view<T> logits, compute_t<T> temperature,
                     vector_view<compute_t<T>> lse) {
    using V = compute_t<T>;
    constexpr const char* where = "specdec::eigen::row_logsumexp";
    detail::check_row_reduction(where, logits, lse, "lse");
    detail::check_temperature(where, temperature, false);
    for (index_t r = 0; r < logits.rows(); ++r) {
      const auto acc = detail::logsumexp_row(logits.row(r), logits.cols(), V(1) / temperature);
      const auto f = acc.fault();
      if (f != detail::fault::all_masked) raise_if(where, "logits", logits, r, f);
      lse(r) = f == detail::fault::all_masked ? detail::negative_infinity<V>()
                                              : acc.max / temperature + detail::log_(acc.sum);
    }
  }

  /// Row softmax with temperature: `out(r, j) = exp(logits(r, j) / T) / sum_i exp(logits(r, i) / T)`.
  /// Temperature 0 is the greedy limit: a one-hot row at the argmax (lowest index among ties).
  /// `out` may be `logits` itself (in place). \param logits, out host `[rows x V]`.
  /// \throws invalid_argument on a shape mismatch, temperature < 0, NaN, +inf or an all -inf row.
  template <class T>
  void row_softmax(matrix_view<T> logits, compute_t<T> temperature,
                   matrix_view<compute_t<T>> out) {
    normalise<false>("specdec::eigen::row_softmax", logits, temperature, out);
  }

  /// The (max, sum) row_softmax normalises a one-row `logits` `[1 x V]` (host) with at `temperature`
  /// > 0: entry j of its softmax is `detail::exp_shifted_at(logits.row(0), V, j, max, 1 / T, 1 / sum)`,
  /// bit for bit. One read of the row and no write: what a caller that needs a few entries of a softmax
  /// row (stochastic verification tests one per accepted row) pays instead of the whole row.
  /// \throws invalid_argument as row_softmax (same messages), and on temperature 0 or more than one row.
  template <class T>
  detail::softmax_stats<T> row_softmax_stats(matrix_view<const T> logits, T temperature) {
    constexpr const char* where = "specdec::eigen::row_softmax";
    SPECDEC_EXPECTS(logits.rows() == 1, where, "row_softmax_stats takes one row; got ", logits.rows(), " rows");
    detail::check_row_matrix(where, "logits", logits);
    detail::check_temperature(where, temperature, false);
    const auto acc = detail::logsumexp_row(logits.row(0), logits.cols(), T(1) / temperature);
    raise_if(where, "logits", logits, 0, acc.fault());
    return {acc.max, acc.sum};
  }

  /// Row log-softmax with temperature: `out(r, j) = logits(r, j) / T - lse[r]`. Temperature 0 gives
  /// 0 at the argmax and -inf elsewhere. `out` may be `logits` itself. Errors as row_softmax.
  template <class T>
  void row_log_softmax(matrix_view<T> logits, compute_t<T> temperature,
                       matrix_view<compute_t<T>> out) {
    normalise<true>("specdec::eigen::row_log_softmax", logits, temperature, out);
  }

  /// Inverse-CDF sampling, one uniform per row: `tokens[r]` is the first j with probs(r, j) > 0 whose
  /// running sum exceeds `uniforms[r] * sum_j probs(r, j)`, accumulated in the canonical order of
  /// row_kernels.hpp, so every backend returns the same token. Consumes exactly one uniform per row.
  /// \param probs host `[rows x V]` rows of probabilities (>= 0, summing to 1 within 1e-4), float, double,
  ///   or bfloat16 / float16 (read as they are; the float row's token; the sum tolerance widened by the
  ///   type's rounding, core/half.hpp's rounding_tolerance).
  /// \param uniforms host `[rows]` in [0, 1). \param tokens host `[rows]` int32.
  /// \throws invalid_argument on a shape mismatch, NaN, negative or unnormalised rows, bad uniforms.
  template <class T>
  void row_sample(matrix_view<T> probs, vector_view<const float> uniforms, vector_view<std::int32_t> tokens) {
    using V = std::remove_cv_t<T>;  // the element type: float, double, bfloat16 or float16
    constexpr const char* where = "specdec::eigen::row_sample";
    detail::check_sample(where, probs, uniforms, tokens);
    const index_t n = probs.cols();
    const index_t chunks = chunk_count(n);
    partials_.resize(static_cast<std::size_t>(chunks));
    masses_.resize(static_cast<std::size_t>(chunks));
    for (index_t r = 0; r < probs.rows(); ++r) {
      const V* p = probs.row(r);
#if SPECDEC_HOST_SIMD
      if constexpr (std::is_same_v<V, float> || is_half_v<V>) {
        detail::probability_chunk_masses(p, n, partials_.data());
      } else
#endif
      {
        for (index_t c = 0; c < chunks; ++c) {
          const index_t c0 = c * detail::sample_chunk;
          partials_[static_cast<std::size_t>(c)] =
              detail::probability_chunk_mass(p + c0, std::min(detail::sample_chunk, n - c0));
        }
      }
      const detail::folded_row row = detail::fold_chunks(partials_.data(), chunks, masses_.data());
      raise_if(where, "probs", probs, r, row.error(detail::probability_tolerance<V>(n)));
      check_uniform(where, uniforms, r);
      tokens(r) = detail::locate_sample(masses_.data(), n, detail::probability_source<V>{p},
                                        static_cast<double>(uniforms(r)) * row.total);
    }
  }

  /// Samples from the residual norm(max(0, p - q)) without materialising it (one pass to weigh the
  /// chunks, one chunk re-read to place the token), with the canonical order of row_kernels.hpp.
  /// Consumes one uniform per row. When the residual is zero everywhere, `fallback` decides.
  /// \param p, q host `[rows x V]` probability rows. \param uniforms host `[rows]` in [0, 1).
  /// \param tokens host `[rows]` int32.
  /// \throws invalid_argument on shape mismatches, NaN, negative or unnormalised rows, bad uniforms.
  template <class T>
  void row_sample_residual(matrix_view<T> p, std::type_identity_t<matrix_view<T>> q,
                           vector_view<const float> uniforms, vector_view<std::int32_t> tokens,
                           empty_residual fallback = empty_residual::sample_target) {
    using V = std::remove_const_t<T>;
    constexpr const char* where = "specdec::eigen::row_sample_residual";
    detail::check_sample_residual(where, p, q, uniforms, tokens);
    const index_t n = p.cols();
    const index_t chunks = chunk_count(n);
    residual_partials_.resize(static_cast<std::size_t>(chunks));
    masses_.resize(static_cast<std::size_t>(2 * chunks));  // residual masses, then p's
    for (index_t r = 0; r < p.rows(); ++r) {
      const V* pr = p.row(r);
      const V* qr = q.row(r);
#if SPECDEC_HOST_SIMD
      if constexpr (std::is_same_v<V, float>) {
        detail::residual_chunk_masses(pr, qr, n, residual_partials_.data());
      } else
#endif
      {
        for (index_t c = 0; c < chunks; ++c) {
          const index_t c0 = c * detail::sample_chunk;
          residual_partials_[static_cast<std::size_t>(c)] =
              detail::residual_mass(pr + c0, qr + c0, std::min(detail::sample_chunk, n - c0));
        }
      }
      const detail::folded_residual_row row =
          detail::fold_residual_chunks(residual_partials_.data(), chunks, masses_.data(), masses_.data() + chunks);
      raise_if(where, "p", p, r, row.p.error());
      raise_if(where, "q", q, r, row.q.error());
      check_uniform(where, uniforms, r);
      tokens(r) = detail::pick_residual_token(pr, qr, n, masses_.data(), masses_.data() + chunks, row,
                                              static_cast<double>(uniforms(r)), fallback);
    }
  }

  /// Row gather: `out(i, :) = x(row_ids[i], :)`.
  /// \param x host `[rows x V]`; \param row_ids host `[n]` int32 in [0, rows); \param out host `[n x V]`.
  /// \throws invalid_argument on a shape mismatch or an id out of range.
  template <class T>
  void gather_rows(matrix_view<T> x, vector_view<const std::int32_t> row_ids,
                   matrix_view<std::remove_const_t<T>> out) {
    constexpr const char* where = "specdec::eigen::gather_rows";
    detail::check_gather_rows(where, x, row_ids, out);
    for (index_t i = 0; i < row_ids.rows(); ++i) check_index(where, "row_ids", i, row_ids(i), x.rows());
    for (index_t i = 0; i < row_ids.rows(); ++i) std::copy_n(x.row(row_ids(i)), x.cols(), out.row(i));
  }

  /// Element gather along rows (torch.gather on dim 1): `out(r, j) = x(r, column_ids(r, j))`.
  /// \param x host `[rows x V]`; \param column_ids host `[rows x m]` int32 in [0, V);
  /// \param out host `[rows x m]`. \throws invalid_argument on a shape mismatch or an id out of range.
  template <class T>
  void gather_elements(matrix_view<T> x, matrix_view<const std::int32_t> column_ids,
                       matrix_view<std::remove_const_t<T>> out) {
    constexpr const char* where = "specdec::eigen::gather_elements";
    detail::check_gather_elements(where, x, column_ids, out);
    for (index_t r = 0; r < x.rows(); ++r)
      for (index_t j = 0; j < column_ids.cols(); ++j) check_index(where, "column_ids", r, column_ids(r, j), x.cols());
    for (index_t r = 0; r < x.rows(); ++r)
      for (index_t j = 0; j < column_ids.cols(); ++j) out(r, j) = x(r, column_ids(r, j));
  }

  /// Runs a team job (backend/detail/team.hpp: the batched verifiers' per-request walks) for teams
  /// 0 .. count - 1 in order, each a one-thread team, with the job's scratch (and wide scratch) from
  /// the backend.
  /// \throws invalid_argument with the first fault a team reports (teams after it do not run).
  template <class Job>
  void run_teams(index_t count, const Job& job) {
    SPECDEC_EXPECTS(count >= 0, "specdec::eigen::run_teams", "count = ", count, "; expected >= 0");
    const std::size_t blocks = detail::team_scratch_stride(job.scratch_bytes()) / 16;
    const std::size_t wide_blocks = detail::team_wide_stride(job) / 16;
    if (team_scratch_.size() < blocks + wide_blocks) team_scratch_.resize(blocks + wide_blocks);
    detail::serial_team team;
    if (wide_blocks > 0) team.wide = reinterpret_cast<std::byte*>(team_scratch_.data() + blocks);
    for (index_t t = 0; t < count; ++t) {
      const detail::team_fault f = job(team, t, reinterpret_cast<std::byte*>(team_scratch_.data()));
      if (f.code != 0) detail::throw_job_fault(job, f);
    }
  }

 private:
  static constexpr index_t chunk = detail::host_row_chunk;
  /// Above this k, a sorted insertion buffer costs more than a partial sort of all indices.
  static constexpr index_t small_k = 256;
  /// Up to this k the seeded streaming top-k (detail::topk_scan) needs few insertions and beats the
  /// block-maxima top-k's selection step; above it the block-maxima top-k (detail/block_topk.hpp).
  static constexpr index_t streaming_topk_max_k = 32;

  template <class E, class V = compute_t<E>>
  detail::max_scan<V> topk_row(const E* x, index_t n, index_t k, V* values, std::int32_t* indices) {
#if SPECDEC_HOST_SIMD
    if constexpr (std::is_same_v<V, float>) {
      if (k > streaming_topk_max_k && k <= small_k && detail::use_block_topk(n, k)) {
        blocks_.reserve(n, k);
        const auto s = detail::block_maxima(x, n, blocks_.maxima.data());
        if (detail::logits_fault(s) == detail::fault::none) detail::topk_from_block_maxima(x, n, k, s.max, blocks_, values, indices);
        return s;
      }
    }
#endif
    if (k <= small_k) {
      detail::topk_accumulator<V> top{values, indices, k, 0};
      return detail::topk_scan(x, n, 0, top);
    }
    const auto s = detail::scan_max(x, n);
    if (detail::logits_fault(s) == detail::fault::none) topk_large(x, n, k, values, indices);
    return s;
  }

  /// Large k: partial sort of all column ids under the (value desc, index asc) order.
  template <class E, class V = compute_t<E>>
  void topk_large(const E* x, index_t n, index_t k, V* values, std::int32_t* indices) {
    order_.resize(static_cast<std::size_t>(n));
    for (index_t j = 0; j < n; ++j) order_[static_cast<std::size_t>(j)] = static_cast<std::int32_t>(j);
    std::partial_sort(order_.begin(), order_.begin() + k, order_.end(),
                      [x](std::int32_t a, std::int32_t b) { return detail::ranks_before(widen(x[a]), a, widen(x[b]), b); });
    for (index_t i = 0; i < k; ++i) {
      indices[i] = order_[static_cast<std::size_t>(i)];
      values[i] = widen(x[indices[i]]);
    }
  }

  template <bool Log, class T>
  void normalise(const char* where, matrix_view<T> logits, compute_t<T> temperature,
                 matrix_view<compute_t<T>> out) {
    using V = compute_t<T>;
    detail::check_elementwise(where, logits, out);
    detail::check_temperature(where, temperature, true);
    const index_t n = logits.cols();
    for (index_t r = 0; r < logits.rows(); ++r) {
      const auto* x = logits.row(r);
      V* y = out.row(r);
      if (temperature == V(0)) {
        const auto best = detail::argmax_row(x, n);
        raise_if(where, "logits", logits, r, best.error);
        const V off = Log ? detail::negative_infinity<V>() : V(0);
        std::fill_n(y, n, off);
        y[best.index] = Log ? V(0) : V(1);
        continue;
      }
      const V inv_t = V(1) / temperature;
      if constexpr (Log) {
        const auto acc = detail::logsumexp_row(x, n, inv_t);
        raise_if(where, "logits", logits, r, acc.fault());
        detail::write_log_shifted(x, n, acc.max, inv_t, detail::log_(acc.sum), y,
                                  logits.rows() * n * index_t{sizeof(V)} >= detail::streaming_output_bytes);
      } else {
        // The next row is prefetched under this row's exponentials (its read then costs no pass of
        // its own), and outputs beyond L2 are streamed past the caches.
        raise_if(where, "logits", logits, r,
                 detail::softmax_row(x, n, inv_t, y, r + 1 < logits.rows() ? logits.row(r + 1) : nullptr,
                                     logits.rows() * n * index_t{sizeof(V)} >= detail::streaming_softmax_bytes));
      }
    }
  }

  template <class T>
  static void raise_if(const char* where, const char* name, const matrix_view<T>& m, index_t r, detail::fault f) {
    if (f != detail::fault::none) detail::throw_fault(where, name, r, f, m.row(r), m.cols());
  }
  static void check_uniform(const char* where, vector_view<const float> uniforms, index_t r) {
    if (!detail::is_unit_uniform(uniforms(r)))
      detail::throw_invalid_argument(where, "uniforms[", r, "] = ", uniforms(r), " is outside [0, 1)");
  }
  static void check_index(const char* where, const char* name, index_t i, std::int32_t id, index_t extent) {
    if (id < 0 || id >= extent)
      detail::throw_invalid_argument(where, name, " entry ", i, " = ", id, " is out of range; expected [0, ",
                                     extent, ")");
  }
  static index_t chunk_count(index_t n) { return (n + detail::sample_chunk - 1) / detail::sample_chunk; }

  // Per-row scratch of the samplers: chunk partials and the mass tables (a few KiB; reused).
  std::vector<detail::chunk_mass> partials_;
  std::vector<detail::residual_chunk_mass> residual_partials_;
  std::vector<double> masses_;
  std::vector<std::int32_t> order_;
  struct alignas(16) scratch_block {
    std::byte bytes[16];
  };
  std::vector<scratch_block> team_scratch_;  // run_teams
#if SPECDEC_HOST_SIMD
  detail::block_topk_workspace blocks_;
#endif
};

static_assert(backend<eigen>);
static_assert(team_backend<eigen>);

}  // namespace specdec::inline SPECDEC_ISA
