// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Jakiro's static MoE-split trees (Jakiro*, `jakiro_star/`): EAGLE-1's static tree drafted from
/// two experts. The draft layer's MoE returns both experts' outputs (router order: the expert with the
/// larger router logit is "left"), the head turns them into two logits rows per node, and each node's
/// `top_k` children are drawn from the softmax over the **concatenation** of the two rows (2V entries),
/// so a token can be drafted twice, once per expert. The tree buffers are EAGLE-1's
/// (specdec/interop/eagle1.hpp, with the two-expert draft run in specdec/interop/jakiro.hpp); the dynamic
/// Jakiro tree is `eagle2_tree_builder::expand_dual`.
///
/// Two proposals: `propose_moe_sampled` is Jakiro*'s `sample_moe` (its only path; the reference crashes at
/// temperature 0), `propose_moe_greedy` is the deterministic top-k of the concatenation that specdec adds for
/// greedy drafting. The greedy form runs its vocabulary-sized work on the backend; the sampled form
/// downloads the two rows and draws on the host (static trees have tens of rows).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/rng.hpp>
#include <specdec/core/view.hpp>
#include <specdec/tree/detail/host_topk.hpp>

namespace specdec {

/// Which probability a sampled proposal reports for a drafted token.
enum class moe_probability_source {
  drafting_expert,     ///< the entry of the concatenated softmax that was drawn (default: the true q)
  second_expert_half,  ///< entry `token + V` whichever expert drew it (Jakiro*'s `sample_moe` as shipped)
};

/// Parameters of the sampled proposal.
struct moe_sampling {
  float temperature = 1.0f;  ///< > 0 and finite; both experts' logits are divided by it
  philox_stream rng{};       ///< the stream the draws come from
  std::uint64_t offset = 0;  ///< position of the first uniform used
  moe_probability_source source = moe_probability_source::drafting_expert;
};

/// The `k` children proposed for each of `m` nodes, host, row-major `[m x k]` in draw (or rank) order.
struct moe_proposal {
  index_t k = 0;
  std::vector<std::int32_t> tokens = {};  ///< in [0, V); a token may appear twice in a row, once per expert
  std::vector<std::int8_t> expert = {};   ///< 0 = left (router's first) expert, 1 = right
  /// EAGLE-1's draft probabilities: `g_i / (1 - sum_{j<i} g_j)` in fp32 with g the gathered softmax
  /// entries, non-finite values set to 0 and the rest clamped to [0, 1] (what EAGLE-1 / Jakiro* hand to
  /// their tree verification). Empty for the greedy proposal.
  std::vector<float> probabilities = {};
};

namespace detail {

/// Both experts' logits are `[m x V]` rows the backends can read (V in [1, 2^31 - 1], so 2V fits), and
/// 1 <= k <= 2V.
template <class L, class R>
void check_experts(const char* where, const L& left, const R& right, index_t k) {
  specdec::detail::check_row_matrix(where, "left_logits", left);
  specdec::detail::check_row_matrix(where, "right_logits", right);
  SPECDEC_EXPECTS(left.rows() == right.rows() && left.cols() == right.cols(), where, "left_logits is ", left.rows(), " x ",
                  left.cols(), " but right_logits is ", right.rows(), " x ", right.cols(), "; expected equal shapes");
  SPECDEC_EXPECTS(k >= 1 && k <= 2 * left.cols(), where, "k = ", k, "; expected 1 <= k <= 2 V = ", 2 * left.cols());
}

}  // namespace detail

/// Deterministic proposal: per row, the `k` largest of the concatenation `[left; right]` of the two
/// experts' logits (ties to the lower concatenated index, so to the left expert first).
/// \param left_logits, right_logits backend `[m x V]`. Reads each row once (two backend top-k calls).
/// \throws invalid_argument on mismatched shapes, k = 0 or k > 2V (k > V is allowed: one expert alone
///   cannot supply k tokens then, the pair can), NaN or infinite logits.
template <backend B>
moe_proposal propose_moe_greedy(B& b, matrix_view<const float, typename B::memory_space> left_logits,
                            matrix_view<const float, typename B::memory_space> right_logits, index_t k) {
  constexpr const char* where = "specdec::propose_moe_greedy";
  detail::check_experts(where, left_logits, right_logits, k);
  const index_t rows = left_logits.rows();
  const index_t vocab = left_logits.cols();
  const index_t per_expert = std::min(k, vocab);
  specdec::detail::host_topk<B> topk(b, std::max<index_t>(rows, 1), per_expert);
  topk.run(left_logits, specdec::detail::topk_scale::logits);
  const std::vector<float> left_values = topk.values();
  const std::vector<std::int32_t> left_tokens = topk.indices();
  topk.run(right_logits, specdec::detail::topk_scale::logits);
  moe_proposal out;
  out.k = k;
  for (index_t r = 0; r < rows; ++r) {
    // Merge two descending lists; on equal values the left one (lower concatenated index) goes first,
    // and within one expert the backend top-k already orders ties by index.
    std::size_t i = static_cast<std::size_t>(r * per_expert), j = i;
    const std::size_t i_end = i + static_cast<std::size_t>(per_expert), j_end = i_end;
    for (index_t n = 0; n < k; ++n) {
      const bool take_left = j == j_end || (i != i_end && !(left_values[i] < topk.values()[j]));
      out.tokens.push_back(take_left ? left_tokens[i++] : topk.indices()[j++]);
      out.expert.push_back(take_left ? std::int8_t{0} : std::int8_t{1});
    }
  }
  return out;
}

/// The most tokens propose_moe_sampled draws per row.
inline constexpr index_t max_sampled_k = 4096;

/// Jakiro*'s `sample_moe`: per row, `k` draws without replacement from `softmax([left; right] / T)` over
/// the 2V concatenated entries (an entry >= V is the right expert's token `entry - V`), then EAGLE-1's
/// sequentially renormalised probabilities (see moe_proposal). The draws are sequential inverse-CDF
/// draws over the entries not yet drawn, in index order, accumulated in double: draw i of row r uses
/// uniform `s.offset + r k + i` of `s.rng`, so a call consumes exactly `m k` uniforms. The draws have
/// torch.multinomial's distribution (without replacement), not its random stream.
/// \param left_logits, right_logits backend `[m x V]`, downloaded to the host.
/// \throws invalid_argument on mismatched shapes, views that are null with a shape or strided, V
///   above 2^31 - 1, k = 0, k > 2V or k > max_sampled_k, NaN or infinite logits, a temperature that is
///   not positive and finite, or a row with fewer than k entries of positive probability.
template <backend B>
moe_proposal propose_moe_sampled(B& b, matrix_view<const float, typename B::memory_space> left_logits,
                             matrix_view<const float, typename B::memory_space> right_logits, index_t k,
                             const moe_sampling& s) {
  constexpr const char* where = "specdec::propose_moe_sampled";
  detail::check_experts(where, left_logits, right_logits, k);
  // Each draw scans the 2V entries: k is bounded so that a row costs at most max_sampled_k passes.
  SPECDEC_EXPECTS(k <= max_sampled_k, where, "k = ", k, "; expected at most ", max_sampled_k,
                  " draws per row (Jakiro draws 10)");
  SPECDEC_EXPECTS(s.temperature > 0.0f && std::isfinite(s.temperature), where, "temperature = ", s.temperature,
                  "; expected a finite value > 0 (sample_moe has no greedy form: use propose_moe_greedy)");
  using space = typename B::memory_space;
  const index_t rows = left_logits.rows();
  const index_t vocab = left_logits.cols();
  const auto width = static_cast<std::size_t>(2 * vocab);
  moe_proposal out;
  out.k = k;
  std::vector<double> p(width);
  std::vector<char> drawn(width);
  for (index_t r = 0; r < rows; ++r) {
    const std::vector<float> left = b.download(vector_view<const float, space>(left_logits.row(r), vocab));
    const std::vector<float> right = b.download(vector_view<const float, space>(right_logits.row(r), vocab));
    double max = -std::numeric_limits<double>::infinity();
    for (index_t j = 0; j < 2 * vocab; ++j) {
      const float x = j < vocab ? left[static_cast<std::size_t>(j)] : right[static_cast<std::size_t>(j - vocab)];
      SPECDEC_EXPECTS(std::isfinite(x), where, j < vocab ? "left_logits" : "right_logits", "[", r, ", ",
                      j % vocab, "] = ", x, "; expected finite logits");
      p[static_cast<std::size_t>(j)] = static_cast<double>(x) / s.temperature;
      max = std::max(max, p[static_cast<std::size_t>(j)]);
    }
    double total = 0.0;
    index_t positive = 0;
    for (double& v : p) {
      v = std::exp(v - max);
      total += v;
      positive += v > 0.0 ? 1 : 0;
    }
    SPECDEC_EXPECTS(positive >= k, where, "row ", r, " has only ", positive,
                    " entries of positive probability; cannot draw k = ", k, " without replacement");
    for (double& v : p) v /= total;
    std::fill(drawn.begin(), drawn.end(), char{0});
    double remaining = 1.0;
    float cumulative = 0.0f;
    for (index_t i = 0; i < k; ++i) {
      const double target = static_cast<double>(s.rng.uniform(s.offset + static_cast<std::uint64_t>(r * k + i))) * remaining;
      double running = 0.0;
      std::size_t pick = width;
      for (std::size_t j = 0; j < width; ++j) {
        if (drawn[j] || !(p[j] > 0.0)) continue;
        running += p[j];
        pick = j;  // the last candidate is the fallback when rounding leaves the walk short of the target
        if (running > target) break;
      }
      drawn[pick] = 1;
      remaining -= p[pick];
      const auto token = static_cast<std::int32_t>(pick % static_cast<std::size_t>(vocab));
      out.tokens.push_back(token);
      out.expert.push_back(pick < static_cast<std::size_t>(vocab) ? std::int8_t{0} : std::int8_t{1});
      const std::size_t gathered =
          s.source == moe_probability_source::second_expert_half ? static_cast<std::size_t>(token + vocab) : pick;
      const auto g = static_cast<float>(p[gathered]);
      const float q = g / (1.0f - cumulative);
      out.probabilities.push_back(std::isfinite(q) ? std::clamp(q, 0.0f, 1.0f) : 0.0f);
      cumulative += g;
    }
  }
  return out;
}

}  // namespace specdec
