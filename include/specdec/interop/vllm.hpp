// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief vLLM v1's rejection sampler in vLLM's own layout (`vllm/v1/sample/rejection_sampler.py`,
/// `rejection_sample`): the drafts of every request back to back with cumulative counts, one target row
/// per draft position (no row for the bonus position: the bonus token is sampled outside), per-request
/// greedy or random verification, the exponential race for the recovered token, `-1` padding. Over
/// specdec's `verify_speculative` with vLLM's conventions (sampling/speculative.hpp), on the host or, with
/// every buffer in a backend's memory, as a team job (one CUDA block per request); and what vLLM does
/// to the target's logits before it (`apply_sampling_constraints`: temperature, then top-k and top-p as
/// `apply_top_k_top_p`), so that the target distribution is vLLM's.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/backend/detail/team.hpp>
#include <specdec/config.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/half.hpp>
#include <specdec/core/view.hpp>
#include <specdec/core/view_checks.hpp>
#include <specdec/interop/detail/faults.hpp>
#include <specdec/core/rng.hpp>
#include <specdec/sampling/detail/philox_race.hpp>
#include <specdec/sampling/detail/residual_rows.hpp>
#include <specdec/sampling/detail/tree_walk.hpp>
#include <specdec/sampling/speculative.hpp>

namespace specdec::vllm {

/// vLLM's temperature of a greedy request in its sampling metadata (`GREEDY_TEMPERATURE`, 0 since vLLM
/// moved its greedy requests to the value its kernels compare against): apply_sampling_constraints leaves
/// such rows at temperature 1.
inline constexpr float greedy_temperature = 0.0f;

/// Older vLLM's `GREEDY_TEMPERATURE` (-1): still read as greedy, so metadata from either release works.
inline constexpr float legacy_greedy_temperature = -1.0f;

/// Whether `t` marks a greedy request (vLLM's current or older GREEDY_TEMPERATURE).
constexpr bool is_greedy_temperature(float t) noexcept { return t == greedy_temperature || t == legacy_greedy_temperature; }

/// rejection_sample's noise drawn in place of an `exponentials` matrix: request r's row is the one
/// `sampling::philox_exponentials(philox_stream{seed, r}, offset, row)` would fill (Python's
/// `rejection_sample(..., seed=s)` uses seed s + 1). The tokens are those of passing that matrix, bit for
/// bit; the row is never written, and only the entries that could win are turned into exponentials.
struct philox_noise {
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
};

namespace detail {

/// apply_top_k_top_p's body over a row of element type E (float, or a 16-bit type widened where read and
/// narrowed where written).
template <class E>
void top_k_top_p_row(std::span<E> row, index_t k, float p) {
  constexpr const char* where = "specdec::vllm::apply_top_k_top_p";
  const auto v = static_cast<index_t>(row.size());
  SPECDEC_EXPECTS(k >= 1, where, "k = ", k, "; expected >= 1 (k >= V: no top-k)");
  SPECDEC_EXPECTS(p > 0.0f && p <= 1.0f, where, "p = ", p, "; expected 0 < p <= 1 (1: no top-p)");
  for (index_t i = 0; i < v; ++i) {
    const float x = widen(row[static_cast<std::size_t>(i)]);
    SPECDEC_EXPECTS(!std::isnan(x) && x != std::numeric_limits<float>::infinity(), where, "logit ", i, " is ", x,
                    "; expected a finite logit or -inf");
  }
  if (v == 0) return;
  constexpr float minus_inf = -std::numeric_limits<float>::infinity();
  if (k < v) {
    std::vector<float> values(row.size());
    std::transform(row.begin(), row.end(), values.begin(), [](E x) { return widen(x); });
    std::nth_element(values.begin(), values.begin() + (k - 1), values.end(), std::greater<float>());
    const float kth = values[static_cast<std::size_t>(k - 1)];
    for (E& x : row)
      if (widen(x) < kth) x = narrow<E>(minus_inf);
  }
  if (p >= 1.0f) return;
  std::vector<std::int32_t> order(static_cast<std::size_t>(v));
  for (index_t i = 0; i < v; ++i) order[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i);
  std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    const float xa = widen(row[static_cast<std::size_t>(a)]), xb = widen(row[static_cast<std::size_t>(b)]);
    return xa < xb || (xa == xb && a < b);
  });
  const float top = widen(row[static_cast<std::size_t>(order.back())]);
  if (top == minus_inf) return;  // an all -inf row: nothing to keep or drop
  double total = 0.0;
  for (const std::int32_t i : order) total += static_cast<double>(std::exp(widen(row[static_cast<std::size_t>(i)]) - top));
  const auto sum = static_cast<float>(total);
  const float bound = 1.0f - p;
  double cumulative = 0.0;
  for (std::size_t j = 0; j + 1 < order.size(); ++j) {  // the largest entry is never masked
    E& x = row[static_cast<std::size_t>(order[j])];
    cumulative += static_cast<double>(std::exp(widen(x) - top) / sum);
    if (static_cast<float>(cumulative) <= bound) x = narrow<E>(minus_inf);
    else break;  // cumulative sums only grow: every later entry stays
  }
}


/// apply_sampling_constraints' body over logits of element type E.
template <class E>
void sampling_constraints(matrix_view<E> logits, std::span<const std::int64_t> cu_num_draft_tokens,
                                       std::span<const float> temperature, std::span<const std::int64_t> top_k,
                                       std::span<const float> top_p) {
  constexpr const char* where = "specdec::vllm::apply_sampling_constraints";
  const std::size_t batch = cu_num_draft_tokens.size();
  SPECDEC_EXPECTS(temperature.size() == batch, where, "temperature has ", temperature.size(), " entries; expected one per request (",
                  batch, ")");
  SPECDEC_EXPECTS(top_k.empty() || top_k.size() == batch, where, "top_k has ", top_k.size(), " entries; expected one per request (",
                  batch, ") or none");
  SPECDEC_EXPECTS(top_p.empty() || top_p.size() == batch, where, "top_p has ", top_p.size(), " entries; expected one per request (",
                  batch, ") or none");
  SPECDEC_EXPECTS(batch == 0 ? logits.rows() == 0 : cu_num_draft_tokens.back() == logits.rows(), where, "logits has ",
                  logits.rows(), " rows; expected one per draft token (cu_num_draft_tokens ends at ",
                  batch == 0 ? 0 : cu_num_draft_tokens.back(), ")");
  // Rows are filtered as spans: unit column stride, rows apart, apart from every other argument.
  specdec::detail::check_arguments(where, specdec::detail::output("logits", logits, specdec::detail::contiguous_rows | specdec::detail::distinct_rows),
                          specdec::detail::input("cu_num_draft_tokens", cu_num_draft_tokens), specdec::detail::input("temperature", temperature),
                          specdec::detail::input("top_k", top_k), specdec::detail::input("top_p", top_p));
  // Every count and temperature before any row is written: a later count below an earlier one would
  // otherwise let the earlier request's rows run past the logits.
  for (std::size_t r = 0; r < batch; ++r) {
    const std::int64_t begin = r == 0 ? 0 : cu_num_draft_tokens[r - 1], end = cu_num_draft_tokens[r];
    SPECDEC_EXPECTS(end >= begin, where, "cu_num_draft_tokens[", r, "] = ", end, " after ", begin,
                    "; expected non-decreasing ends from 0");
    const float t = temperature[r];
    SPECDEC_EXPECTS((t > 0.0f && std::isfinite(t)) || is_greedy_temperature(t), where, "temperature[", r, "] = ", t,
                    "; expected a finite value > 0, or 0 (older vLLM: -1) for a greedy request");
    SPECDEC_EXPECTS(top_k.empty() || top_k[r] >= 1, where, "top_k[", r, "] = ", top_k.empty() ? 0 : top_k[r],
                    "; expected >= 1 (k >= V: no top-k)");
    SPECDEC_EXPECTS(top_p.empty() || (top_p[r] > 0.0f && top_p[r] <= 1.0f), where, "top_p[", r, "] = ",
                    top_p.empty() ? 0.0f : top_p[r], "; expected 0 < p <= 1 (1: no top-p)");
  }
  std::int64_t start = 0;
  for (std::size_t r = 0; r < batch; ++r) {
    const std::int64_t end = cu_num_draft_tokens[r];
    const float t = temperature[r];
    const float divisor = is_greedy_temperature(t) ? 1.0f : t;
    for (std::int64_t i = start; i < end; ++i) {
      const std::span<E> row(logits.row(i), static_cast<std::size_t>(logits.cols()));
      for (E& x : row) x = narrow<E>(widen(x) / divisor);
      top_k_top_p_row(row, top_k.empty() ? logits.cols() : top_k[r], top_p.empty() ? 1.0f : top_p[r]);
    }
    start = end;
  }
}

}  // namespace detail

/// vLLM v1's `apply_top_k_top_p` (vllm/v1/sample/ops/topk_topp_sampler.py, the PyTorch path) on one row
/// of logits, in place:
/// - top-k (`k` < V): every logit below the k-th largest becomes -inf (logits equal to it stay);
///   `k` >= V leaves the row (vLLM's "no top-k" is k = V);
/// - then top-p (`p` < 1): with the row in ascending order (ties by index) and its softmax, every entry
///   whose cumulative probability (float32, accumulated in double as PyTorch's CPU cumsum) is at most
///   `1 - p` becomes -inf, the last in that order never (of equal largest logits, the highest index
///   stays; the others may go, as in vLLM). `p` = 1 leaves the row (vLLM's pass then masks only
///   entries whose probability is already 0, which changes no probability).
/// Top-k alone costs O(V); top-p sorts the row, O(V log V), as vLLM's PyTorch path does. The kept set
/// is vLLM's except where a cumulative sum falls within float rounding of `1 - p` (PyTorch's softmax
/// and sort order of tied logits are not specified to the bit).
/// \param row host `[V]` logits. \throws invalid_argument on k < 1, p outside (0, 1], or a NaN or +inf
///   logit.
inline void apply_top_k_top_p(std::span<float> row, index_t k, float p) { detail::top_k_top_p_row(row, k, p); }

/// apply_top_k_top_p on a row of bfloat16 / float16 logits (vLLM's in-place filter on a 16-bit tensor),
/// in place: each decision made on the widened values exactly as on the float row holding them, so the
/// tokens masked are that row's, and a masked entry becomes -inf (exact in either type). vLLM's PyTorch
/// path computes the top-p softmax and cumulative sum in the logits' own dtype; specdec keeps float32
/// arithmetic (the float row's cut), which differs only where a cumulative sum lies within 16-bit
/// rounding of 1 - p. \throws invalid_argument as the float form.
template <class E>
  requires is_half_v<E>
void apply_top_k_top_p(std::span<E> row, index_t k, float p) {
  detail::top_k_top_p_row(row, k, p);
}

/// vLLM v1's `apply_sampling_constraints` (vllm/v1/sample/rejection_sampler.py) over its flattened draft
/// rows, in place: request r's rows `[start_r, cu_num_draft_tokens[r])` are divided by `temperature[r]`
/// (greedy_temperature, 0, or older vLLM's -1 give 1), then apply_top_k_top_p with `top_k[r]` and `top_p[r]` (an empty
/// span: that filter is off for every request). vLLM skips the whole call when every request is greedy;
/// so does the caller.
/// \param logits host `[num_tokens x V]` target logits, num_tokens = cu_num_draft_tokens.back().
/// \param temperature, top_k, top_p host `[batch]`.
/// \throws invalid_argument on counts that decrease or do not end at num_tokens, a temperature that is
///   neither > 0 nor 0 / -1 (greedy), a length mismatch, and as apply_top_k_top_p.
inline void apply_sampling_constraints(matrix_view<float> logits, std::span<const std::int64_t> cu_num_draft_tokens,
                                       std::span<const float> temperature, std::span<const std::int64_t> top_k,
                                       std::span<const float> top_p) {
  detail::sampling_constraints(logits, cu_num_draft_tokens, temperature, top_k, top_p);
}

/// apply_sampling_constraints on bfloat16 / float16 logits, in place and in their dtype, as vLLM's on a
/// 16-bit tensor: each row divided by its request's temperature (the float quotient rounded to nearest
/// even, as torch's in-place division of a 16-bit tensor), then apply_top_k_top_p's 16-bit form on the
/// rounded values. \throws invalid_argument as the float form.
template <class E>
  requires is_half_v<E>
void apply_sampling_constraints(matrix_view<E> logits, std::span<const std::int64_t> cu_num_draft_tokens,
                                std::span<const float> temperature, std::span<const std::int64_t> top_k,
                                std::span<const float> top_p) {
  detail::sampling_constraints(logits, cu_num_draft_tokens, temperature, top_k, top_p);
}

namespace detail {

using specdec::detail::make_team_fault;
using specdec::detail::interop_fault;
using specdec::detail::sampling_fault;
using specdec::detail::tree_fault;
using specdec::detail::team_fault;

/// Argument indices of rejection_job's fault names.
enum rejection_arg : int {
  rej_arg_ids,
  rej_arg_cu,
  rej_arg_draft,
  rej_arg_target,
  rej_arg_bonus,
  rej_arg_uniforms,
  rej_arg_noise,
};

/// vLLM's rejection sampler, one request per team (backend/detail/team.hpp): the chain walk of
/// verify_speculative with vLLM's conventions, decision for decision. A greedy request emits each
/// visited row's argmax (team_row_argmax: row_argmax's, lowest index on ties) until one differs from
/// the draft; a random one tests each draft (`q > 0 && p / q >= u`), and at the first rejection checks
/// the target row (and the draft row) whole and races the residual against its noise row
/// (residual_rows::race_token: the residual's entries computed per entry, as the batched walk does
/// without folding). A request that accepts every draft emits its bonus token without reading a row
/// (vLLM has none for that position). Rank 0 writes `output` row r whole. T and D: the element types of
/// the target and draft rows (float, bfloat16 or float16, widened where read).
template <class Space, class T = float, class D = T>
struct rejection_job : sampling::detail::residual_rows<Space, T, D> {
  using base = sampling::detail::residual_rows<Space, T, D>;
  using typename base::layout;
  using typename base::residual_source;
  using base::carve;
  using base::check_row;
  using base::draft;
  using base::race_token;
  using base::round16;
  using base::target;
  using base::vocab;

  vector_view<const std::int32_t, Space> draft_token_ids;     // [num_tokens]
  vector_view<const std::int64_t, Space> cu_num_draft_tokens;  // [batch]
  vector_view<const std::int32_t, Space> bonus_token_ids;     // [batch]
  vector_view<const std::uint8_t, Space> is_greedy;           // [batch], or empty: every request random
  vector_view<const double, Space> uniforms;                  // [num_tokens], or empty
  matrix_view<const float, Space> exponentials;               // [batch x V], or empty
  matrix_view<std::int32_t, Space> output;                    // [batch x (max_spec_len + 1)]
  const char* where;
  const char* names[specdec::detail::team_job_names];
  // Host memory only: with `from_philox`, request r's noise row is Philox stream (seed, r)'s exponentials
  // from `offset` (philox_race), never written; `exponentials` is then empty.
  philox_noise noise = {};
  bool from_philox = false;
  static void describe(const char* where, const char* name, const specdec::detail::team_fault& f) {
    specdec::detail::describe_interop_fault(where, name, f);
  }

  SPECDEC_HOST_DEVICE std::size_t lanes_offset() const { return round16(base::scratch_bytes()); }
  std::size_t scratch_bytes() const {
    return lanes_offset() + static_cast<std::size_t>(this->chunks() * sampling::detail::argmax_lanes_per_chunk) *
                                sizeof(sampling::detail::argmax_lane);
  }

  template <class Team>
  SPECDEC_HOST_DEVICE team_fault operator()(Team& team, index_t r, std::byte* scratch) const {
    const layout l = carve(scratch);
    auto* lanes = reinterpret_cast<sampling::detail::argmax_lane*>(scratch + lanes_offset());
    const index_t tokens = draft_token_ids.rows(), width = output.cols();
    const std::int64_t start = r == 0 ? 0 : cu_num_draft_tokens(r - 1), end = cu_num_draft_tokens(r);
    if (!(start >= 0 && start <= end && end <= tokens))
      return make_team_fault(sampling_fault::entry_range, rej_arg_cu, r, start, static_cast<double>(end), tokens);
    const index_t k = end - start;
    if (k > width - 1) return make_team_fault(interop_fault::draft_count, rej_arg_cu, r, k, 0.0, width - 1);
    for (index_t i = start; i < end; ++i)
      if (draft_token_ids(i) < 0 || draft_token_ids(i) >= vocab())
        return make_team_fault(tree_fault::token_entry, rej_arg_ids, i, 0, draft_token_ids(i), vocab());
    const bool greedy = !is_greedy.empty() && is_greedy(r) != 0;
    if (!greedy && k > 0 && uniforms.empty()) return make_team_fault(interop_fault::missing_argument, rej_arg_uniforms, r, 0, 0.0);
    index_t emitted = 0;
    const auto emit = [&](std::int32_t token) {
      if (team.rank() == 0) output(r, emitted) = token;
      ++emitted;
    };
    const auto finish = [&] {
      if (team.rank() == 0)
        for (index_t c = emitted; c < width; ++c) output(r, c) = -1;
    };
    for (index_t i = 0;; ++i) {
      if (i == k) {  // every draft accepted: the bonus token, no row read
        const std::int32_t bonus = bonus_token_ids(r);
        if (bonus < 0 || bonus >= vocab()) return make_team_fault(tree_fault::token_entry, rej_arg_bonus, r, 0, bonus, vocab());
        emit(bonus);
        finish();
        return {};
      }
      const index_t row = start + i;
      const std::int32_t x = draft_token_ids(row);
      if (greedy) {
        const sampling::detail::argmax_lane a = sampling::detail::team_row_argmax(team, lanes, target.row(row), nullptr, vocab());
        if (a.bad >= 0) return sampling::detail::argmax_fault(widen(target(row, a.bad)), rej_arg_target, row, a.bad);
        const std::int32_t best = a.at < 0 ? 0 : a.at;  // an all -inf row: index 0, as row_argmax
        emit(best);
        if (best == x) continue;
        finish();
        return {};
      }
      const T* p = target.row(row);
      const float p_x = widen(p[x]);
      if (!(p_x >= 0.0f && p_x <= 1.0f)) return make_team_fault(sampling_fault::probability_entry, rej_arg_target, row, x, p_x);
      const bool with_draft = !draft.empty();
      float q_x = 1.0f;
      if (with_draft) {
        q_x = widen(draft(row, x));
        if (!(q_x >= 0.0f && q_x <= 1.0f)) return make_team_fault(sampling_fault::probability_entry, rej_arg_draft, row, x, q_x);
      }
      const double u = uniforms(row);
      if (!(u >= 0.0 && u < 1.0)) return make_team_fault(sampling_fault::uniform_value, rej_arg_uniforms, row, -1, u, 0);
      if (q_x > 0.0f && static_cast<double>(p_x / q_x) >= u) {
        emit(x);
        continue;
      }
      // The first rejection: the rows read whole are checked, then the recovered token is raced.
      double total = 0.0;
      if (const team_fault f = check_row(team, l, l.base_masses, p, row, rej_arg_target, total); f.code != 0) return f;
      if (with_draft)
        if (const team_fault f = check_row(team, l, l.masses, draft.row(row), row, rej_arg_draft, total); f.code != 0) return f;
      if (exponentials.empty() && !from_philox) return make_team_fault(interop_fault::missing_argument, rej_arg_noise, r, 0, 0.0);
      team.sync();  // every thread is past the checks' reads of the scratch
      if (team.rank() == 0)
        l.ops[0] = with_draft ? sampling::detail::residual_op{1, x, row, 1.0f, 0.0} : sampling::detail::residual_op{0, x, -1, 1.0f, 0.0};
      team.sync();
      if constexpr (std::is_same_v<Space, host_space>) {
        if (from_philox) {  // one thread races (the others' copies would find the same token)
          const std::int32_t token =
              team.rank() != 0 ? 0
                               : sampling::detail::philox_race(vocab(), philox_stream{noise.seed, static_cast<std::uint64_t>(r)}, noise.offset,
                                                               [&](index_t j0, index_t len, float* out) {
                                                                 this->residual_span(p, 0, 1, l.ops, j0, len, out);
                                                               });
          emit(token);
          finish();
          return {};
        }
      }
      const float* e = exponentials.row(r);
      const auto bad_noise = [](float v) { return !(v >= 0.0f && v <= 3.40282347e38f); };  // finite, >= 0
      const auto w = this->template weigh<base::row_batch>(team, l, l.masses, e, typename base::as_is_t{}, bad_noise);
      if (w.first_bad >= 0)
        return make_team_fault(sampling_fault::noise_entry, rej_arg_noise, r, w.first_bad, static_cast<double>(e[w.first_bad]));
      emit(race_token(team, l, residual_source{p, 0}, 1, e));
      finish();
      return {};
    }
  }
};

}  // namespace detail

namespace detail {

/// The host form's body for target rows of T and draft rows of D.
template <backend B, class T, class D>
void rejection_sample_host(B& b, std::span<const std::int32_t> draft_token_ids, std::span<const std::int64_t> cu_num_draft_tokens,
                      index_t max_spec_len, matrix_view<const D, typename B::memory_space> draft_probs,
                      matrix_view<const T, typename B::memory_space> target_probs,
                      std::span<const std::int32_t> bonus_token_ids, std::span<const std::uint8_t> is_greedy,
                      std::span<const double> uniforms, matrix_view<const float, typename B::memory_space> exponentials,
                      matrix_view<std::int32_t> output) {
  constexpr const char* where = "specdec::vllm::rejection_sample";
  const auto batch = static_cast<index_t>(cu_num_draft_tokens.size());
  const auto tokens = static_cast<index_t>(draft_token_ids.size());
  SPECDEC_EXPECTS(max_spec_len >= 0 && max_spec_len < std::numeric_limits<std::int32_t>::max(), where,
                  "max_spec_len = ", max_spec_len, "; expected 0 <= max_spec_len < 2^31 - 1");
  SPECDEC_EXPECTS(output.rows() == batch && output.cols() == max_spec_len + 1, where, "output is ", output.rows(), " x ",
                  output.cols(), "; expected ", batch, " x ", max_spec_len + 1, " (batch x max_spec_len + 1)");
  specdec::detail::check_arguments(where, specdec::detail::output("output", output), specdec::detail::input("draft_token_ids", draft_token_ids),
                          specdec::detail::input("cu_num_draft_tokens", cu_num_draft_tokens), specdec::detail::input("draft_probs", draft_probs),
                          specdec::detail::input("target_probs", target_probs), specdec::detail::input("bonus_token_ids", bonus_token_ids),
                          specdec::detail::input("is_greedy", is_greedy), specdec::detail::input("uniforms", uniforms),
                          specdec::detail::input("exponentials", exponentials));
  SPECDEC_EXPECTS(static_cast<index_t>(bonus_token_ids.size()) == batch, where, "bonus_token_ids has ", bonus_token_ids.size(),
                  " entries; expected one per request (", batch, ")");
  SPECDEC_EXPECTS(is_greedy.empty() || static_cast<index_t>(is_greedy.size()) == batch, where, "is_greedy has ",
                  is_greedy.size(), " entries; expected one per request (", batch, ") or none");
  SPECDEC_EXPECTS(target_probs.rows() == tokens, where, "target_probs has ", target_probs.rows(),
                  " rows; expected one per draft token (", tokens, ")");
  SPECDEC_EXPECTS(draft_probs.rows() == 0 || (draft_probs.rows() == tokens && draft_probs.cols() == target_probs.cols()), where,
                  "draft_probs is ", draft_probs.rows(), " x ", draft_probs.cols(), "; expected ", tokens, " x ",
                  target_probs.cols(), " like target_probs, or none");
  std::vector<draft_tree> trees;
  trees.reserve(static_cast<std::size_t>(batch));
  std::vector<std::vector<index_t>> draft_rows(static_cast<std::size_t>(batch));
  std::vector<sampling::speculative_request> requests(static_cast<std::size_t>(batch));
  std::int64_t start = 0;
  for (index_t r = 0; r < batch; ++r) {
    const std::int64_t end = cu_num_draft_tokens[static_cast<std::size_t>(r)];
    SPECDEC_EXPECTS(end >= start && end <= tokens && end - start <= max_spec_len, where, "cu_num_draft_tokens[", r, "] = ", end,
                    " after ", start, "; expected non-decreasing ends within the ", tokens, " drafts, at most max_spec_len = ",
                    max_spec_len, " per request");
    const auto k = static_cast<std::size_t>(end - start);
    trees.push_back(sampling::make_chain(0, draft_token_ids.subspan(static_cast<std::size_t>(start), k)));
    auto& q = requests[static_cast<std::size_t>(r)];
    q.tree = trees.back();
    q.target_row = start;
    if (draft_probs.rows() > 0) {
      auto& rows = draft_rows[static_cast<std::size_t>(r)];
      rows.push_back(-1);
      for (std::int64_t i = start; i < end; ++i) rows.push_back(i);
      q.draft_rows = rows;
    }
    const bool greedy = !is_greedy.empty() && is_greedy[static_cast<std::size_t>(r)] != 0;
    q.greedy = greedy;
    if (!greedy) {
      SPECDEC_EXPECTS(static_cast<index_t>(uniforms.size()) == tokens, where, "uniforms has ", uniforms.size(),
                      " entries; expected one per draft token (", tokens, ")");
      q.uniforms = sampling::uniform_stream::values(uniforms.subspan(static_cast<std::size_t>(start), k));
      SPECDEC_EXPECTS(exponentials.rows() == batch, where, "exponentials has ", exponentials.rows(),
                      " rows; expected one per request (", batch, ") where a request is random");
      q.noise_row = r;
    }
    q.bonus_token = bonus_token_ids[static_cast<std::size_t>(r)];
    start = end;
  }
  sampling::speculative_rows<typename B::memory_space, T, D> rows;
  rows.target = target_probs;
  rows.draft = draft_probs;
  rows.exponential_noise = exponentials;
  sampling::speculative_options options;
  options.test = sampling::acceptance_test::ratio;
  // An all-greedy batch may come without exponentials: nothing is raced (a random request without them
  // was refused above).
  options.draw = exponentials.empty() ? sampling::final_draw::inverse_cdf : sampling::final_draw::exponential_race;
  options.fallback = empty_residual::token_zero;
  const auto results = sampling::verify_speculative(b, rows, requests, options);
  const std::vector<std::int32_t> padded = sampling::padded_tokens(results, max_spec_len + 1);
  for (index_t r = 0; r < batch; ++r)
    for (index_t c = 0; c <= max_spec_len; ++c) output(r, c) = padded[static_cast<std::size_t>(r * (max_spec_len + 1) + c)];
}


/// The backend form's body for target rows of T and draft rows of D.
template <team_backend B, class T, class D>
void rejection_sample_team(B& b, vector_view<const std::int32_t, typename B::memory_space> draft_token_ids,
                      vector_view<const std::int64_t, typename B::memory_space> cu_num_draft_tokens,
                      matrix_view<const D, typename B::memory_space> draft_probs,
                      matrix_view<const T, typename B::memory_space> target_probs,
                      vector_view<const std::int32_t, typename B::memory_space> bonus_token_ids,
                      vector_view<const std::uint8_t, typename B::memory_space> is_greedy,
                      vector_view<const double, typename B::memory_space> uniforms,
                      matrix_view<const float, typename B::memory_space> exponentials,
                      matrix_view<std::int32_t, typename B::memory_space> output, const philox_noise* noise = nullptr) {
  constexpr const char* where = "specdec::vllm::rejection_sample";
  using specdec::detail::check_view;
  const index_t batch = cu_num_draft_tokens.rows(), tokens = draft_token_ids.rows(), vocab = target_probs.cols();
  check_view(where, "draft_token_ids", draft_token_ids, specdec::detail::nonzero_stride);
  check_view(where, "cu_num_draft_tokens", cu_num_draft_tokens, specdec::detail::nonzero_stride);
  check_view(where, "bonus_token_ids", bonus_token_ids, specdec::detail::nonzero_stride);
  check_view(where, "is_greedy", is_greedy, specdec::detail::nonzero_stride);
  check_view(where, "uniforms", uniforms, specdec::detail::nonzero_stride);
  check_view(where, "output", output, specdec::detail::indexed_output);
  sampling::detail::check_input_rows(where, "target_probs", target_probs);
  sampling::detail::check_input_rows(where, "draft_probs", draft_probs);
  sampling::detail::check_input_rows(where, "exponentials", exponentials);
  specdec::detail::check_vocabulary(where, "V", vocab);
  SPECDEC_EXPECTS(output.rows() == batch && output.cols() >= 1, where, "output is ", output.rows(), " x ", output.cols(),
                  "; expected ", batch, " x (max_spec_len + 1)");
  SPECDEC_EXPECTS(bonus_token_ids.rows() == batch, where, "bonus_token_ids has ", bonus_token_ids.rows(),
                  " entries; expected one per request (", batch, ")");
  SPECDEC_EXPECTS(is_greedy.empty() || is_greedy.rows() == batch, where, "is_greedy has ", is_greedy.rows(),
                  " entries; expected one per request (", batch, ") or none");
  SPECDEC_EXPECTS(target_probs.rows() == tokens, where, "target_probs has ", target_probs.rows(),
                  " rows; expected one per draft token (", tokens, ")");
  SPECDEC_EXPECTS(draft_probs.empty() || (draft_probs.rows() == tokens && draft_probs.cols() == vocab), where, "draft_probs is ",
                  draft_probs.rows(), " x ", draft_probs.cols(), "; expected ", tokens, " x ", vocab, " like target_probs, or none");
  SPECDEC_EXPECTS(uniforms.empty() || uniforms.rows() == tokens, where, "uniforms has ", uniforms.rows(),
                  " entries; expected one per draft token (", tokens, ") or none");
  SPECDEC_EXPECTS(exponentials.empty() || (exponentials.rows() == batch && exponentials.cols() == vocab), where,
                  "exponentials is ", exponentials.rows(), " x ", exponentials.cols(), "; expected ", batch, " x ", vocab,
                  " (one row per request) or none");
  using specdec::detail::extent_of;
  const specdec::detail::view_extent out = extent_of(where, "output", output);
  for (const specdec::detail::view_extent& input :
       {extent_of(where, "draft_token_ids", draft_token_ids), extent_of(where, "cu_num_draft_tokens", cu_num_draft_tokens),
        extent_of(where, "draft_probs", draft_probs), extent_of(where, "target_probs", target_probs),
        extent_of(where, "bonus_token_ids", bonus_token_ids), extent_of(where, "is_greedy", is_greedy),
        extent_of(where, "uniforms", uniforms), extent_of(where, "exponentials", exponentials)})
    specdec::detail::check_disjoint(where, out, input);
  rejection_job<typename B::memory_space, T, D> job{
      {target_probs, draft_probs, empty_residual::token_zero, 1},
      draft_token_ids, cu_num_draft_tokens, bonus_token_ids, is_greedy, uniforms, exponentials, output, where, {}};
  if (noise != nullptr) {
    job.noise = *noise;
    job.from_philox = true;
  }
  const char* names[] = {"draft_token_ids", "cu_num_draft_tokens", "draft_probs", "target_probs",
                         "bonus_token_ids", "uniforms", "exponentials"};
  for (std::size_t i = 0; i < std::size(names); ++i) job.names[i] = names[i];
  for (std::size_t i = std::size(names); i < std::size(job.names); ++i) job.names[i] = "";
  b.run_teams(batch, job);
}

}  // namespace detail

/// vLLM v1's `rejection_sample`. Request r's drafts are `draft_token_ids[start_r, end_r)` with
/// `end_r = cu_num_draft_tokens[r]` and `start_r` the previous end (0 for r = 0); their target rows are
/// the same rows of `target_probs` (and of `draft_probs`). A greedy request (`is_greedy[r]`) emits the
/// target's argmax at each position until the first that differs from the draft (that argmax included);
/// a random one accepts draft x at position i iff `q(x) > 0 and p(x) / q(x) >= uniforms[start_r + i]`
/// (q = 1 without draft probabilities: vLLM's n-gram case) and, at the first rejection, emits
/// `argmax_v max(p - q, 0)(v) / exponentials[r, v]` (the all-zero case: token 0). A request that
/// accepts every draft emits `bonus_token_ids[r]`. Row r of `output` gets the emitted tokens, then -1.
/// \param draft_probs backend `[num_tokens x V]`, or empty (every draft deterministic).
/// \param target_probs backend `[num_tokens x V]` probabilities (greedy requests read their argmax).
/// \param is_greedy host `[batch]` (nonzero: greedy), or empty: every request random.
/// \param uniforms host `[num_tokens]` in [0, 1) (vLLM's `uniform_probs`; greedy requests read none).
/// \param exponentials backend `[batch x V]` Exp(1) samples (vLLM's `q`), or empty when every request is
///   greedy.
/// \param output host `[batch x (max_spec_len + 1)]` int32.
/// \throws invalid_argument on counts that decrease, exceed the drafts or `max_spec_len`, shapes that
///   do not match, and as verify_speculative (tokens, probabilities, uniforms, noise).
template <backend B>
void rejection_sample(B& b, std::span<const std::int32_t> draft_token_ids, std::span<const std::int64_t> cu_num_draft_tokens,
                      index_t max_spec_len, matrix_view<const float, typename B::memory_space> draft_probs,
                      matrix_view<const float, typename B::memory_space> target_probs,
                      std::span<const std::int32_t> bonus_token_ids, std::span<const std::uint8_t> is_greedy,
                      std::span<const double> uniforms, matrix_view<const float, typename B::memory_space> exponentials,
                      matrix_view<std::int32_t> output) {
  detail::rejection_sample_host(b, draft_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs, target_probs, bonus_token_ids,
                                is_greedy, uniforms, exponentials, output);
}

/// rejection_sample (host form) over bfloat16 / float16 rows: target and draft each float, bfloat16 or
/// float16 (not both float; vLLM softens its logits into float32 target rows, a drafter may hand bf16
/// draft rows), read as they are and widened entry by entry, so the tokens are those of the float rows
/// holding the same values, bit for bit; a row read whole may sum to 1 within 1e-4 plus its type's
/// rounding (core/half.hpp's rounding_tolerance). \throws invalid_argument as the float form.
template <backend B, class T, class D>
  requires sampling::detail::half_rows<T, D>
void rejection_sample(B& b, std::span<const std::int32_t> draft_token_ids, std::span<const std::int64_t> cu_num_draft_tokens,
                      index_t max_spec_len, matrix_view<const D, typename B::memory_space> draft_probs,
                      matrix_view<const T, typename B::memory_space> target_probs,
                      std::span<const std::int32_t> bonus_token_ids, std::span<const std::uint8_t> is_greedy,
                      std::span<const double> uniforms, matrix_view<const float, typename B::memory_space> exponentials,
                      matrix_view<std::int32_t> output) {
  detail::rejection_sample_host(b, draft_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs, target_probs, bonus_token_ids,
                                is_greedy, uniforms, exponentials, output);
}

/// vLLM v1's `rejection_sample` on a backend, every buffer in its memory (`B::memory_space`): vLLM's
/// kernels' arguments, one team per request (on CUDA one block each, one launch, nothing downloaded).
/// The same tokens as the host form above, bit for bit (the tests compare them on every backend).
/// \param draft_token_ids int32 `[num_tokens]`. \param cu_num_draft_tokens int64 `[batch]` cumulative
///   ends. \param draft_probs `[num_tokens x V]` or empty (deterministic drafts: q = 1).
/// \param target_probs `[num_tokens x V]`. \param bonus_token_ids int32 `[batch]`.
/// \param is_greedy uint8 `[batch]` (nonzero: greedy), or empty: every request random.
/// \param uniforms double `[num_tokens]` in [0, 1), or empty when every request is greedy.
/// \param exponentials `[batch x V]` Exp(1) samples, or empty when every request is greedy.
/// \param output int32 `[batch x (max_spec_len + 1)]`, written whole: emitted tokens, then -1.
/// \throws invalid_argument on shapes (before any work) and, from the team that finds it, counts that
///   decrease or leave [0, num_tokens], more than max_spec_len drafts, a draft or bonus token outside
///   [0, V), a probability it tests outside [0, 1], a row read whole (at a rejection) that is not a
///   distribution, a uniform outside [0, 1), a noise entry that is negative, NaN or infinite, NaN /
///   +inf in a greedy request's row, and a random request given no uniforms or exponentials. On CUDA with
///   deferred faults those come from `check_faults()`; `output` is then unspecified.
template <team_backend B>
void rejection_sample(B& b, vector_view<const std::int32_t, typename B::memory_space> draft_token_ids,
                      vector_view<const std::int64_t, typename B::memory_space> cu_num_draft_tokens,
                      matrix_view<const float, typename B::memory_space> draft_probs,
                      matrix_view<const float, typename B::memory_space> target_probs,
                      vector_view<const std::int32_t, typename B::memory_space> bonus_token_ids,
                      vector_view<const std::uint8_t, typename B::memory_space> is_greedy,
                      vector_view<const double, typename B::memory_space> uniforms,
                      matrix_view<const float, typename B::memory_space> exponentials,
                      matrix_view<std::int32_t, typename B::memory_space> output) {
  detail::rejection_sample_team(b, draft_token_ids, cu_num_draft_tokens, draft_probs, target_probs, bonus_token_ids, is_greedy,
                                uniforms, exponentials, output);
}

/// rejection_sample (backend form) over bfloat16 / float16 rows, as the host form's 16-bit overload.
/// \throws invalid_argument as the float form.
template <team_backend B, class T, class D>
  requires sampling::detail::half_rows<T, D>
void rejection_sample(B& b, vector_view<const std::int32_t, typename B::memory_space> draft_token_ids,
                      vector_view<const std::int64_t, typename B::memory_space> cu_num_draft_tokens,
                      matrix_view<const D, typename B::memory_space> draft_probs,
                      matrix_view<const T, typename B::memory_space> target_probs,
                      vector_view<const std::int32_t, typename B::memory_space> bonus_token_ids,
                      vector_view<const std::uint8_t, typename B::memory_space> is_greedy,
                      vector_view<const double, typename B::memory_space> uniforms,
                      matrix_view<const float, typename B::memory_space> exponentials,
                      matrix_view<std::int32_t, typename B::memory_space> output) {
  detail::rejection_sample_team(b, draft_token_ids, cu_num_draft_tokens, draft_probs, target_probs, bonus_token_ids, is_greedy,
                                uniforms, exponentials, output);
}

/// rejection_sample (backend form, host memory) with the noise rows drawn from Philox (`noise`) in
/// place of an `exponentials` matrix: the tokens of passing `philox_exponentials`' rows, without
/// writing them (~1.2 ns per entry of a rejecting request's row for the uniforms, where drawing the
/// matrix cost ~2.6 ns per entry of every request's row). Rows of float, bfloat16 or float16 (T target,
/// D draft) as the other forms. \throws invalid_argument as the float form (no noise entry to refuse).
template <team_backend B, class T, class D>
  requires std::is_same_v<typename B::memory_space, host_space> &&
           ((std::is_same_v<T, float> && std::is_same_v<D, float>) || sampling::detail::half_rows<T, D>)
void rejection_sample(B& b, vector_view<const std::int32_t> draft_token_ids, vector_view<const std::int64_t> cu_num_draft_tokens,
                      matrix_view<const D> draft_probs, matrix_view<const T> target_probs,
                      vector_view<const std::int32_t> bonus_token_ids, vector_view<const std::uint8_t> is_greedy,
                      vector_view<const double> uniforms, philox_noise noise, matrix_view<std::int32_t> output) {
  detail::rejection_sample_team(b, draft_token_ids, cu_num_draft_tokens, draft_probs, target_probs, bonus_token_ids, is_greedy,
                                uniforms, matrix_view<const float>{}, output, &noise);
}

}  // namespace specdec::vllm
