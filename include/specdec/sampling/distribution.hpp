// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The distribution processing applied identically to the target and to the draft before
/// verification: temperature, min-p, top-k, top-p (vLLM's order), per request; and FlashInfer's
/// renormalisation kernels on probabilities (what SGLang applies to its target).
///
/// Lossless verification is lossless with respect to the distributions it is given, so the draft
/// probabilities a verifier receives must be the ones the drafter sampled from: run the drafter's
/// logits through the same function with the same parameters.
///
/// `target_probabilities` runs on the host (`host_space` views). FlashInfer's filters (`top_k_renorm`,
/// `top_p_renorm`, `top_k_top_p_joint_renorm`, `top_k_mask_logits`) also come as team jobs on any
/// backend, one team per row (sampling/detail/filter_rows.hpp); their host forms run the same job.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/backend/detail/checks.hpp>
#include <specdec/backend/detail/softmax_row.hpp>
#include <specdec/backend/detail/team.hpp>
#include <specdec/core/checked.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/half.hpp>
#include <specdec/core/view_checks.hpp>
#include <specdec/core/view.hpp>
#include <specdec/sampling/detail/checks.hpp>
#include <specdec/sampling/detail/filter_rows.hpp>
#include <specdec/sampling/detail/top_k_first.hpp>

namespace specdec::sampling {

/// One request's sampling parameters. Defaults leave the distribution untouched (temperature 1).
struct sampling_params {
  float temperature = 1.0f;  ///< >= 0; 0 means greedy: a one-hot row at the argmax (ties to the lower index)
  index_t top_k = 0;         ///< 0 = off; else keep the logits >= the k-th largest (ties at the k-th kept, as vLLM)
  float top_p = 1.0f;        ///< in (0, 1]; 1 = off
  float min_p = 0.0f;        ///< in [0, 1]; keep p >= min_p * max p; 0 = off
};

namespace detail {
inline void check_params(const char* where, const sampling_params& s, index_t vocab, std::size_t row) {
  SPECDEC_EXPECTS(s.temperature >= 0.0f && std::isfinite(s.temperature), where, "row ", row, ": temperature = ",
                  s.temperature, "; expected a finite value >= 0");
  SPECDEC_EXPECTS(s.top_k >= 0 && s.top_k <= vocab, where, "row ", row, ": top_k = ", s.top_k,
                  "; expected 0 (off) or 1..V = ", vocab);
  SPECDEC_EXPECTS(s.top_p > 0.0f && s.top_p <= 1.0f, where, "row ", row, ": top_p = ", s.top_p,
                  "; expected a value in (0, 1]");
  SPECDEC_EXPECTS(s.min_p >= 0.0f && s.min_p <= 1.0f, where, "row ", row, ": min_p = ", s.min_p,
                  "; expected a value in [0, 1]");
}

/// target_probabilities over logits of element type E (float, bfloat16, float16): each logit widened
/// (exact) where read, so a 16-bit row gives the float row of the same values' probabilities, bit for
/// bit, from one body.
template <class E>
void target_probabilities_rows(matrix_view<const E> logits, std::span<const sampling_params> params, matrix_view<float> probs) {
  constexpr const char* where = "specdec::sampling::target_probabilities";
  const index_t rows = logits.rows(), vocab = logits.cols();
  SPECDEC_EXPECTS(vocab >= 1, where, "logits has ", vocab, " columns; expected a vocabulary of at least one token");
  specdec::detail::check_vocabulary(where, "V", vocab);
  SPECDEC_EXPECTS(probs.rows() == rows && probs.cols() == vocab, where, "probs is ", probs.rows(), " x ", probs.cols(),
                  "; expected ", rows, " x ", vocab);
  specdec::detail::check_view(where, "logits", logits, specdec::detail::distinct_rows);
  specdec::detail::check_view(where, "probs", probs, specdec::detail::indexed_output);
  specdec::detail::check_disjoint(where, specdec::detail::extent_of(where, "probs", probs),
                                  specdec::detail::extent_of(where, "logits", logits));
  if (rows == 0) return;
  SPECDEC_EXPECTS(params.size() == 1 || static_cast<index_t>(params.size()) == rows, where, "params has ",
                  params.size(), " entries; expected 1 or one per row (", rows, ")");
  std::vector<double> x(static_cast<std::size_t>(vocab));
  std::vector<char> keep(static_cast<std::size_t>(vocab));
  std::vector<std::int32_t> order(static_cast<std::size_t>(vocab));
  for (index_t r = 0; r < rows; ++r) {
    const sampling_params& s = params[params.size() == 1 ? 0 : static_cast<std::size_t>(r)];
    detail::check_params(where, s, vocab, static_cast<std::size_t>(r));
    index_t argmax = 0;
    for (index_t j = 0; j < vocab; ++j) {
      const float v = widen(logits(r, j));
      SPECDEC_EXPECTS(!std::isnan(v) && v != std::numeric_limits<float>::infinity(), where, "logits[", r, ", ", j, "] = ", v,
                      "; expected a finite logit, or -inf for a masked token");
      if (v > widen(logits(r, argmax))) argmax = j;
    }
    SPECDEC_EXPECTS(std::isfinite(widen(logits(r, argmax))), where, "logits row ", r,
                    " has no finite entry (every token masked); expected at least one token to sample");
    if (s.temperature == 0.0f) {
      for (index_t j = 0; j < vocab; ++j) probs(r, j) = j == argmax ? 1.0f : 0.0f;
      continue;
    }
    const double max = static_cast<double>(widen(logits(r, argmax))) / s.temperature;
    for (index_t j = 0; j < vocab; ++j) {
      x[static_cast<std::size_t>(j)] = static_cast<double>(widen(logits(r, j))) / s.temperature;
      keep[static_cast<std::size_t>(j)] = 1;
    }
    if (s.min_p > 0.0f) {
      const double floor = max + std::log(static_cast<double>(s.min_p));  // p_j >= min_p p_max in logit space
      for (index_t j = 0; j < vocab; ++j) keep[static_cast<std::size_t>(j)] = x[static_cast<std::size_t>(j)] >= floor;
    }
    if (s.top_k > 0 && s.top_k < vocab) {
      std::vector<double> kept;
      for (index_t j = 0; j < vocab; ++j)
        if (keep[static_cast<std::size_t>(j)]) kept.push_back(x[static_cast<std::size_t>(j)]);
      if (static_cast<index_t>(kept.size()) > s.top_k) {
        std::nth_element(kept.begin(), kept.begin() + (s.top_k - 1), kept.end(), std::greater<>());
        const double kth = kept[static_cast<std::size_t>(s.top_k - 1)];
        for (index_t j = 0; j < vocab; ++j)
          keep[static_cast<std::size_t>(j)] = keep[static_cast<std::size_t>(j)] && x[static_cast<std::size_t>(j)] >= kth;
      }
    }
    const auto softmax_mass = [&] {
      double total = 0.0;
      for (index_t j = 0; j < vocab; ++j)
        if (keep[static_cast<std::size_t>(j)]) total += std::exp(x[static_cast<std::size_t>(j)] - max);
      return total;
    };
    if (s.top_p < 1.0f) {
      const double total = softmax_mass();
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
        return x[static_cast<std::size_t>(a)] < x[static_cast<std::size_t>(b)];
      });
      double cumulative = 0.0;
      std::int32_t largest = order.back();
      for (const std::int32_t j : order) {
        if (!keep[static_cast<std::size_t>(j)]) continue;
        cumulative += std::exp(x[static_cast<std::size_t>(j)] - max) / total;
        if (cumulative <= 1.0 - static_cast<double>(s.top_p) && j != largest) keep[static_cast<std::size_t>(j)] = 0;
      }
    }
    const double total = softmax_mass();
    for (index_t j = 0; j < vocab; ++j)
      probs(r, j) = keep[static_cast<std::size_t>(j)]
                        ? static_cast<float>(std::exp(x[static_cast<std::size_t>(j)] - max) / total)
                        : 0.0f;
  }
}

}  // namespace detail

/// probs = softmax of the processed logits, row by row: divide by the temperature, drop tokens below
/// min_p times the largest probability, keep the top_k largest logits (ties at the k-th kept), then
/// top-p on the renormalised survivors (vLLM: sort ascending, cumulative probability, drop the entries
/// whose cumulative sum is <= 1 - top_p, never the largest; equal values ordered by index), then a
/// softmax over what is left (in double, rounded to float). Dropped tokens get probability 0.
///
/// A logit of -inf masks its token (probability 0 whatever the parameters): what vLLM's top-k / top-p
/// masking and engines' grammar masks produce.
///
/// \param logits host `[rows x V]` float logits, V >= 1 (the overload below takes bfloat16 / float16).
/// \param params one entry for every row, or a single entry for all.
/// \param probs host `[rows x V]` output (may not alias logits).
/// \throws invalid_argument on shape mismatches, V outside [1, 2^31 - 1], views null with a shape or
///   with overlapping rows, probs sharing memory with logits, a NaN or +inf logit, a row whose every
///   logit is -inf (nothing to sample), parameters out of range.
inline void target_probabilities(matrix_view<const float> logits, std::span<const sampling_params> params,
                                 matrix_view<float> probs) {
  detail::target_probabilities_rows(logits, params, probs);
}

/// target_probabilities over bfloat16 / float16 logits (host `[rows x V]`, const or not; an engine's
/// 16-bit logits): each logit read as it is and widened (exact), so `probs` (float, host `[rows x V]`)
/// holds what the float logits of the same values give, bit for bit. \throws invalid_argument as the
/// float form (a NaN or +inf logit named by its widened value).
template <class E>
  requires is_half_v<E>
void target_probabilities(matrix_view<E> logits, std::span<const sampling_params> params, matrix_view<float> probs) {
  detail::target_probabilities_rows(matrix_view<const std::remove_cv_t<E>>(logits), params, probs);
}

namespace detail {

/// The filter job's argument names.
template <class Job>
void name_filter(Job& job, const char* where, const char* rows, const char* k, const char* p) {
  specdec::detail::name_job(job, where, {{filter_arg_rows, rows}, {filter_arg_k, k}, {filter_arg_p, p}});
}

/// The host forms: one k and / or one p for every row (k = 0 / p = 0: that filter off), the job run on
/// one thread, in place.
template <class E>
void filter_host(const char* where, const char* rows_name, matrix_view<E> rows, index_t k, float p, bool renormalise) {
  const index_t vocab = rows.cols();
  specdec::detail::check_vocabulary(where, "V", vocab);
  specdec::detail::check_view(where, rows_name, rows, specdec::detail::indexed_output | specdec::detail::contiguous_rows);
  const std::int64_t k64 = k;
  filter_rows_job<host_space, E> job{rows,
                                     rows,
                                     k > 0 ? vector_view<const std::int64_t>(&k64, 1) : vector_view<const std::int64_t>{},
                                     p > 0.0f ? vector_view<const float>(&p, 1) : vector_view<const float>{},
                                     renormalise,
                                     where,
                                     {}};
  name_filter(job, where, rows_name, "k", "top_p");
  specdec::detail::run_serial(job, rows.rows());
}

/// The backend forms' checks and launch (an empty top_k / top_p: that filter off).
template <team_backend B, class E>
void filter(B& b, const char* where, const char* rows_name, matrix_view<const E, typename B::memory_space> in,
            vector_view<const std::int64_t, typename B::memory_space> top_k, vector_view<const float, typename B::memory_space> top_p,
            matrix_view<E, typename B::memory_space> out, bool renormalise) {
  const index_t vocab = in.cols();
  specdec::detail::check_vocabulary(where, "V", vocab);
  specdec::detail::check_view(where, rows_name, in, specdec::detail::contiguous_rows);
  specdec::detail::check_view(where, "out", out, specdec::detail::indexed_output | specdec::detail::contiguous_rows);
  specdec::detail::check_view(where, "top_k", top_k, specdec::detail::nonzero_stride);
  specdec::detail::check_view(where, "top_p", top_p, specdec::detail::nonzero_stride);
  SPECDEC_EXPECTS(out.rows() == in.rows() && out.cols() == vocab, where, "out is ", out.rows(), " x ", out.cols(), "; expected ",
                  in.rows(), " x ", vocab, " like ", rows_name);
  const auto per_row = [&](index_t count, const char* name) {  // 0: the filter is off (the public forms check)
    SPECDEC_EXPECTS(count <= 1 || count == in.rows(), where, name, " has ", count, " entries; expected 1 or one per row (",
                    in.rows(), ")");
  };
  per_row(top_k.rows(), "top_k");
  per_row(top_p.rows(), "top_p");
  using specdec::detail::extent_of;
  specdec::detail::check_disjoint(where, extent_of(where, "out", out), extent_of(where, rows_name, in), /*exact_alias_allowed=*/true);
  specdec::detail::check_disjoint(where, extent_of(where, "out", out), extent_of(where, "top_k", top_k));
  specdec::detail::check_disjoint(where, extent_of(where, "out", out), extent_of(where, "top_p", top_p));
  filter_rows_job<typename B::memory_space, E> job{in, out, top_k, top_p, renormalise, where, {}};
  name_filter(job, where, rows_name, "top_k", "top_p");
  b.run_teams(in.rows(), job);
}

}  // namespace detail

/// FlashInfer's `top_k_renorm_probs`: keep the k largest probabilities of each row (ties at the k-th
/// kept), zero the rest, renormalise (the kept mass summed in double in the canonical order, each kept
/// entry divided by it and rounded to float). \param probs host `[rows x V]` (columns contiguous), in
/// place. \throws invalid_argument on k outside [1, V], entries outside [0, 1] (NaN included), or a row
///   that does not sum to 1 within 1e-3.
template <class E = float>
  requires(std::is_same_v<E, float> || is_half_v<E>)
void top_k_renorm(matrix_view<E> probs, index_t k) {
  constexpr const char* where = "specdec::sampling::top_k_renorm";
  SPECDEC_EXPECTS(k >= 1 && k <= probs.cols(), where, "k = ", k, "; expected 1 <= k <= V = ", probs.cols());
  detail::filter_host(where, "probs", probs, k, 0.0f, true);
}

/// FlashInfer's `top_p_renorm_probs`: keep a token iff the mass of the strictly larger probabilities
/// (summed in double in the canonical order) is below top_p (the smallest set of largest tokens
/// reaching top_p, ties included), zero the rest, renormalise. \param probs host `[rows x V]` (columns
/// contiguous), in place. \throws invalid_argument on top_p outside (0, 1], entries outside [0, 1] (NaN
/// included), or a row that does not sum to 1 within 1e-3.
template <class E = float>
  requires(std::is_same_v<E, float> || is_half_v<E>)
void top_p_renorm(matrix_view<E> probs, float top_p) {
  constexpr const char* where = "specdec::sampling::top_p_renorm";
  SPECDEC_EXPECTS(top_p > 0.0f && top_p <= 1.0f, where, "top_p = ", top_p, "; expected a value in (0, 1]");
  detail::filter_host(where, "probs", probs, 0, top_p, true);
}

/// FlashInfer's `"joint"` filter order (`top_k_top_p_sampling_from_probs(..., filter_apply_order="joint")`):
/// top-k and top-p judged together on the row as given, not one after the other: a token is kept iff
/// fewer than k probabilities are strictly larger (ties with the k-th kept) and their mass is below
/// top_p; zero the rest, renormalise: the intersection of the two filters on the original row. The
/// `"top_k_first"` order (top_k_renorm, then top_p_renorm) renormalises the top k before the top-p cut,
/// which then sees more mass above each token: it never keeps more tokens than this, and keeps fewer
/// where the top k hold less than 1.
/// \param probs host `[rows x V]` (columns contiguous), in place. \throws invalid_argument on k outside
///   [1, V], top_p outside (0, 1], entries outside [0, 1] (NaN included), or a row that does not sum to 1
///   within 1e-3.
template <class E = float>
  requires(std::is_same_v<E, float> || is_half_v<E>)
void top_k_top_p_joint_renorm(matrix_view<E> probs, index_t k, float top_p) {
  constexpr const char* where = "specdec::sampling::top_k_top_p_joint_renorm";
  SPECDEC_EXPECTS(k >= 1 && k <= probs.cols(), where, "k = ", k, "; expected 1 <= k <= V = ", probs.cols());
  SPECDEC_EXPECTS(top_p > 0.0f && top_p <= 1.0f, where, "top_p = ", top_p, "; expected a value in (0, 1]");
  detail::filter_host(where, "probs", probs, k, top_p, true);
}

/// FlashInfer's `top_k_mask_logits`: in each row, every logit below the row's k-th largest becomes -inf
/// (ties with the k-th kept, as top_k_renorm); nothing is renormalised. \param logits host `[rows x V]`
/// (columns contiguous), in place. \throws invalid_argument on k outside [1, V] or a NaN / +inf logit
///   (naming row and column).
template <class E = float>
  requires(std::is_same_v<E, float> || is_half_v<E>)
void top_k_mask_logits(matrix_view<E> logits, index_t k) {
  constexpr const char* where = "specdec::sampling::top_k_mask_logits";
  SPECDEC_EXPECTS(k >= 1 && k <= logits.cols(), where, "k = ", k, "; expected 1 <= k <= V = ", logits.cols());
  detail::filter_host(where, "logits", logits, k, 0.0f, false);
}

/// The filters on a backend (`B::memory_space` views), one team per row (one CUDA block each, one
/// launch): the host forms' bits. \param probs / logits `[rows x V]`, columns contiguous.
/// \param top_k int64, \param top_p float: one value for every row or one per row. \param out
/// `[rows x V]`, or the input's own memory (in place). \throws invalid_argument on shapes and views
/// (before any work) and, from the team of the row, as the host forms (naming `top_k[r]` / `top_p[r]`).
/// On CUDA with deferred faults those come from `check_faults()`.
template <team_backend B, class E = float>
void top_k_renorm(B& b, matrix_view<const std::type_identity_t<E>, typename B::memory_space> probs,
                  vector_view<const std::int64_t, typename B::memory_space> top_k, matrix_view<E, typename B::memory_space> out) {
  SPECDEC_EXPECTS(!top_k.empty(), "specdec::sampling::top_k_renorm", "top_k is empty; expected 1 or one per row");
  detail::filter<B, E>(b, "specdec::sampling::top_k_renorm", "probs", probs, top_k, {}, out, true);
}
template <team_backend B, class E = float>
void top_p_renorm(B& b, matrix_view<const std::type_identity_t<E>, typename B::memory_space> probs,
                  vector_view<const float, typename B::memory_space> top_p, matrix_view<E, typename B::memory_space> out) {
  SPECDEC_EXPECTS(!top_p.empty(), "specdec::sampling::top_p_renorm", "top_p is empty; expected 1 or one per row");
  detail::filter<B, E>(b, "specdec::sampling::top_p_renorm", "probs", probs, {}, top_p, out, true);
}
template <team_backend B, class E = float>
void top_k_top_p_joint_renorm(B& b, matrix_view<const std::type_identity_t<E>, typename B::memory_space> probs,
                              vector_view<const std::int64_t, typename B::memory_space> top_k,
                              vector_view<const float, typename B::memory_space> top_p, matrix_view<E, typename B::memory_space> out) {
  constexpr const char* where = "specdec::sampling::top_k_top_p_joint_renorm";
  SPECDEC_EXPECTS(!top_k.empty() && !top_p.empty(), where, "top_k has ", top_k.rows(), " and top_p ", top_p.rows(),
                  " entries; expected 1 or one per row each");
  detail::filter<B, E>(b, where, "probs", probs, top_k, top_p, out, true);
}
template <team_backend B, class E = float>
void top_k_mask_logits(B& b, matrix_view<const std::type_identity_t<E>, typename B::memory_space> logits,
                       vector_view<const std::int64_t, typename B::memory_space> top_k,
                       matrix_view<E, typename B::memory_space> out) {
  SPECDEC_EXPECTS(!top_k.empty(), "specdec::sampling::top_k_mask_logits", "top_k is empty; expected 1 or one per row");
  detail::filter<B, E>(b, "specdec::sampling::top_k_mask_logits", "logits", logits, top_k, {}, out, false);
}

/// The order of FlashInfer's two filters in `top_k_top_p_sampling_from_*`: top-k first, then top-p of
/// the renormalised row (`"top_k_first"`), or both judged on the row as given (`"joint"`).
enum class filter_order { top_k_first, joint };

namespace detail {

/// top_k_top_p_sample's rows: `x` holds probabilities (R = E), or logits (`FromLogits`: each row is
/// first softened as row_softmax does at temperature 1, into a float row kept in cache, R = float).
template <bool FromLogits, class E>
void top_k_top_p_sample_rows(const char* where, const char* name, matrix_view<const E> x, vector_view<const std::int64_t> top_k,
                             vector_view<const float> top_p, vector_view<const float> uniforms, vector_view<std::int32_t> tokens,
                             filter_order order) {
  using R = std::conditional_t<FromLogits, float, E>;  // the probability rows' element type
  const bool joint = order == filter_order::joint;
  const index_t rows = x.rows(), n = x.cols();
  specdec::detail::check_arguments(where, specdec::detail::input(name, x), specdec::detail::input("top_k", top_k),
                                   specdec::detail::input("top_p", top_p), specdec::detail::input("uniforms", uniforms),
                                   specdec::detail::output("tokens", tokens));
  specdec::detail::check_vocabulary(where, "V", n);
  specdec::detail::check_view(where, name, x, specdec::detail::contiguous_rows);
  SPECDEC_EXPECTS(top_k.rows() == 1 || top_k.rows() == rows, where, "top_k has ", top_k.rows(), " entries; expected 1 or one per row (",
                  rows, ")");
  SPECDEC_EXPECTS(top_p.rows() == 1 || top_p.rows() == rows, where, "top_p has ", top_p.rows(), " entries; expected 1 or one per row (",
                  rows, ")");
  SPECDEC_EXPECTS(uniforms.rows() == rows, where, "uniforms has ", uniforms.rows(), " entries; expected one per row (", rows, ")");
  SPECDEC_EXPECTS(tokens.rows() == rows, where, "tokens has ", tokens.rows(), " entries; expected one per row (", rows, ")");
  for (index_t r = 0; r < rows; ++r) {
    const std::int64_t k = top_k(top_k.rows() == 1 ? 0 : r);
    const float p = top_p(top_p.rows() == 1 ? 0 : r);
    const float u = uniforms(r);
    SPECDEC_EXPECTS(k >= 1, where, "top_k[", r, "] = ", k, "; expected k >= 1");
    SPECDEC_EXPECTS(p > 0.0f && p <= 1.0f, where, "top_p[", r, "] = ", p, "; expected a value in (0, 1]");
    SPECDEC_EXPECTS(u >= 0.0f && u < 1.0f, where, "uniforms[", r, "] = ", u, "; expected a value in [0, 1)");
  }
#if SPECDEC_FILTER_HOST_PASSES
  // Kept between calls: a fresh V-float scratch per call cost its page faults (a fifth of the time).
  thread_local std::vector<float> scratch;
  thread_local std::vector<detail::top_k_first::entry> kept;
  thread_local std::vector<double> masses;
  scratch.resize(detail::top_k_first::scratch_floats(n));
#endif
  // From logits: row r's softmax, written where the steps below find it in cache (a softmax of the
  // whole matrix first would write every row to memory and read it back).
  thread_local std::vector<float> softened;
  if constexpr (FromLogits) softened.resize(static_cast<std::size_t>(n));
  std::vector<R> row;
  std::vector<double> chunk_masses;
  for (index_t r = 0; r < rows; ++r) {
    const std::int64_t k = std::min<std::int64_t>(top_k(top_k.rows() == 1 ? 0 : r), n);
    const float p = top_p(top_p.rows() == 1 ? 0 : r);
    const float u = uniforms(r);
    const R* probs = nullptr;
    if constexpr (FromLogits) {
      const specdec::detail::fault f =
          specdec::detail::softmax_row(x.row(r), n, 1.0f, softened.data(), r + 1 < rows ? x.row(r + 1) : nullptr, false);
      if (f != specdec::detail::fault::none) specdec::detail::throw_fault(where, name, r, f, x.row(r), n);
      probs = softened.data();
    } else {
      probs = x.row(r);
    }
#if SPECDEC_FILTER_HOST_PASSES
    if (const std::int32_t t = detail::top_k_first::token(probs, n, k, p, u, scratch.data(), kept, masses, joint); t >= 0) {
      tokens(r) = t;
      continue;
    }
#endif
    // The composed steps on a copy of the row: their decisions, and their errors naming row r.
    row.assign(probs, probs + n);
    const matrix_view<R> one(row.data(), 1, n);
    try {
      if (joint) {
        detail::filter_host(where, "probs", one, static_cast<index_t>(k), p, true);
      } else {
        detail::filter_host(where, "probs", one, static_cast<index_t>(k), 0.0f, true);
        detail::filter_host(where, "probs", one, 0, p, true);
      }
    } catch (const invalid_argument& e) {
      throw invalid_argument(std::string(e.what()) + " (row " + std::to_string(r) + " of " + name + ")");
    }
    const index_t chunks = (n + specdec::detail::sample_chunk - 1) / specdec::detail::sample_chunk;
    chunk_masses.assign(static_cast<std::size_t>(chunks), 0.0);
    double total = 0.0;
    for (index_t c = 0; c < chunks; ++c) {
      const index_t c0 = c * specdec::detail::sample_chunk;
      chunk_masses[static_cast<std::size_t>(c)] =
          specdec::detail::probability_chunk_mass(row.data() + c0, std::min(specdec::detail::sample_chunk, n - c0)).mass;
      total += chunk_masses[static_cast<std::size_t>(c)];
    }
    SPECDEC_EXPECTS(specdec::detail::probability_fault(false, false, total, specdec::detail::probability_tolerance<R>(n)) ==
                        specdec::detail::fault::none,
                    where, "row ", r, " of ", name, " filtered sums to ", total, "; expected 1");
    tokens(r) = specdec::detail::locate_sample(chunk_masses.data(), n, specdec::detail::probability_source<R>{row.data()},
                                               static_cast<double>(u) * total);
  }
}

}  // namespace detail

/// FlashInfer's `top_k_top_p_sampling_from_probs` with `filter_apply_order="top_k_first"` (host): row r's
/// token is what the sampler (`row_sample`) draws with `uniforms[r]` from the row that top_k_renorm
/// (k = top_k[r]) and then top_p_renorm (p = top_p[r]) make of `probs` row r, bit for bit; computed from
/// the row's top k alone where k < V (sampling/detail/top_k_first.hpp: no filtered row is written; ~the
/// cost of one top-k filter), else, and for rows with more than 512 entries tied into the top k, by the
/// composed steps on a copy of the row.
/// \param probs host `[rows x V]` (columns contiguous), float, bfloat16 or float16 probabilities.
/// \param top_k int64, one for every row or one per row: k >= 1 (k >= V: no top-k cut).
/// \param top_p float, one or one per row, in (0, 1]. \param uniforms float `[rows]` in [0, 1).
/// \param tokens int32 `[rows]`, written.
/// \throws invalid_argument on shapes, k < 1, p outside (0, 1], a uniform outside [0, 1), and a row the
///   filters refuse (entries outside [0, 1], a sum not 1 within 1e-3 plus a 16-bit row's rounding),
///   naming the row.
/// `order`: filter_order::joint for FlashInfer's `"joint"` order (top_k_top_p_joint_renorm, then the
/// draw), the same way.
template <class E = float>
  requires(std::is_same_v<E, float> || is_half_v<E>)
void top_k_top_p_sample(matrix_view<const E> probs, vector_view<const std::int64_t> top_k, vector_view<const float> top_p,
                        vector_view<const float> uniforms, vector_view<std::int32_t> tokens,
                        filter_order order = filter_order::top_k_first) {
  detail::top_k_top_p_sample_rows<false>("specdec::sampling::top_k_top_p_sample", "probs", probs, top_k, top_p, uniforms, tokens,
                                         order);
}

/// FlashInfer's `top_k_top_p_sampling_from_logits` (host): top_k_top_p_sample of the rows' softmax, the
/// token `row_softmax(logits, 1)` (float32 rows) and then top_k_top_p_sample give, bit for bit, without
/// writing the softmax to memory: each row is softened into a float row of V entries kept in cache and
/// the sampler runs on it (about one softmax's time in all).
/// \param logits host `[rows x V]` (columns contiguous), float, bfloat16 or float16; -inf masks a token.
/// The other arguments and `order` as top_k_top_p_sample.
/// \throws invalid_argument as top_k_top_p_sample, and as row_softmax on a row holding NaN or +inf, or
///   all -inf (naming the row and its first such column).
template <class E = float>
  requires(std::is_same_v<E, float> || is_half_v<E>)
void top_k_top_p_sample_from_logits(matrix_view<const E> logits, vector_view<const std::int64_t> top_k,
                                    vector_view<const float> top_p, vector_view<const float> uniforms,
                                    vector_view<std::int32_t> tokens, filter_order order = filter_order::top_k_first) {
  detail::top_k_top_p_sample_rows<true>("specdec::sampling::top_k_top_p_sample_from_logits", "logits", logits, top_k, top_p,
                                        uniforms, tokens, order);
}

}  // namespace specdec::sampling
