// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief How many tokens to draft, decided against the clock: measured acceptance by depth, measured
/// target-forward cost by row count, measured cost of one draft token. A drafter that follows it is
/// never slower than not drafting: where drafting does not pay it drafts nothing and only probes now
/// and then. Host-only bookkeeping, a few hundred bytes; no engine types.
///
/// An engine reports each verification (`verified(accepted, drafted)`), the wall time of each target
/// forward by its number of rows (`target_forward_timed`) and, for drafters that run a model, the time
/// of one draft token (`draft_token_timed`) or, for a block drafter, of one draft whatever its length
/// (`draft_step_timed`); `choose()` gives the length of the next draft.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iterator>
#include <map>
#include <utility>
#include <vector>

#include <specdec/core/checked.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>

namespace specdec::policy {

/// The longest draft the policy plans or accepts evidence for: 2^16 tokens. Engines verify drafts of
/// tens of tokens (EAGLE-2's 60-node trees, llama.cpp's 32-token lookups), so the bound never binds in
/// use; it keeps `choose()` well under a millisecond and every per-depth table a few hundred KiB at
/// most, whatever a caller passes.
inline constexpr index_t max_draft_length = index_t{1} << 16;
/// The most contexts a draft_length_policy distinguishes (acceptance tables are per context).
inline constexpr index_t max_draft_contexts = 4096;

class acceptance_by_depth;
class forward_cost;
inline index_t best_draft_length(const acceptance_by_depth& acceptance, const forward_cost& cost, double draft_seconds,
                                 index_t longest, double prior = 0.5, double caution = 0, double step_seconds = 0);

namespace detail {
inline void check_prior(const char* where, double prior) {
  SPECDEC_EXPECTS(prior >= 0.0 && prior <= 1.0, where, "prior = ", prior, "; expected a rate in [0, 1]");
}
inline void check_caution(const char* where, double caution) {
  SPECDEC_EXPECTS(caution >= 0.0 && std::isfinite(caution), where, "caution = ", caution,
                  "; expected a finite number of standard deviations >= 0");
}
}  // namespace detail

/// Measured wall time of a target forward by its number of rows: the hardware half of the policy. On a
/// CPU the cost is flat for a few rows (the weights stream from memory either way) and then grows with
/// the rows (compute); on an accelerator it stays flat much longer. A row count keeps the median of its
/// last 15 samples (a forward preempted by another process does not move it), and costs are made
/// non-decreasing in the rows. A row count never measured costs the linear interpolation between the
/// nearest measured ones (the cost per row falls as the rows grow, so the step up to the next measured
/// count is spread, not ignored); above the largest measured it costs what that one costs, below the
/// smallest what that one costs: optimistic, so that a policy tries it and learns its price.
class forward_cost {
 public:
  /// The costs as they stand, frozen: O(R) to take (R = row counts measured), O(log R) per query.
  /// best_draft_length prices every length on one of these rather than rescanning the measurements
  /// per length.
  class curve {
   public:
    /// Seconds for a forward of `rows` rows (any value; counts below every measured one cost that
    /// one's), as forward_cost::operator().
    double operator()(index_t rows) const {
      const auto above = std::lower_bound(points_.begin(), points_.end(), rows,
                                          [](const point& p, index_t r) { return p.rows < r; });
      if (above == points_.end()) return points_.empty() ? 0.0 : points_.back().cost;  // above every measured count
      if (above->rows == rows || above == points_.begin()) return above->cost;  // measured, or below every measured count
      const point& below = *std::prev(above);
      // rows lies strictly between two measured counts, so neither difference can overflow.
      const double t = static_cast<double>(rows - below.rows) / static_cast<double>(above->rows - below.rows);
      return below.cost + t * (above->cost - below.cost);
    }

   private:
    friend class forward_cost;
    struct point {
      index_t rows;
      double cost;  ///< the running maximum of the medians up to `rows`: non-decreasing
    };
    std::vector<point> points_;  ///< by increasing rows
  };

  /// \throws invalid_argument on rows < 1 or > specdec::max_elements (2^40), or seconds that are
  /// negative or not finite. Storage grows with the distinct row counts recorded, not with `rows`.
  void record(index_t rows, double seconds) {
    constexpr const char* where = "specdec::policy::forward_cost::record";
    SPECDEC_EXPECTS(rows >= 1, where, "rows = ", rows, "; expected a forward of at least one row");
    SPECDEC_EXPECTS(rows <= max_elements, where, "rows = ", rows, "; expected at most ", max_elements,
                    " (2^40, specdec's largest buffer)");
    SPECDEC_EXPECTS(seconds >= 0.0 && std::isfinite(seconds), where, "seconds = ", seconds, "; expected a finite time >= 0");
    measured& m = measured_[rows];
    m.samples.push_back(seconds);
    if (m.samples.size() > window) m.samples.erase(m.samples.begin());
    // The median is kept with the samples so that a query costs O(1) per measured row count.
    auto s = m.samples;
    std::nth_element(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(s.size() / 2), s.end());
    m.median = s[s.size() / 2];
  }
  /// Seconds for a forward of `rows` rows; 0 until anything is measured. O(R).
  double operator()(index_t rows) const { return envelope()(rows); }
  /// The costs as a curve (see `curve`).
  curve envelope() const {
    curve c;
    c.points_.reserve(measured_.size());
    double running = 0;
    for (const auto& [rows, m] : measured_) {
      running = std::max(running, m.median);  // non-decreasing in the rows
      c.points_.push_back({rows, running});
    }
    return c;
  }

 private:
  static constexpr std::size_t window = 15;
  struct measured {
    std::vector<double> samples;  ///< the most recent forward times
    double median = 0;
  };
  std::map<index_t, measured> measured_;  ///< by row count; only counts actually measured
};

/// Acceptance of a chain draft by depth: a_i = P(draft token i accepted | tokens 1..i-1 accepted),
/// counted from verifications (a chain of L tokens with A accepted is a trial at depths 1..min(A+1, L)
/// and a success at depths 1..A). Older verifications fade (weight `fade` = 0.9 per verification, about
/// the last 10 count) so that the estimate follows the text: a request that copies and one that does not
/// differ, and the policy must see the change within a few dozen tokens; depths with few trials lean on the pooled
/// rate (a pseudo-count of 4), which itself leans on a prior rate (a pseudo-count of 2; 0.5 unless the
/// caller knows better, as draft_length_policy does for a context from all its contexts). For a tree,
/// report its accepted length and its depth.
class acceptance_by_depth {
 public:
  static constexpr double fade = 0.9;  ///< the weight a verification keeps at each later one

  /// \throws invalid_argument unless 0 <= accepted <= drafted <= max_draft_length (2^16).
  void record(index_t accepted, index_t drafted) {
    constexpr const char* where = "specdec::policy::acceptance_by_depth::record";
    SPECDEC_EXPECTS(accepted >= 0 && accepted <= drafted, where, "accepted = ", accepted, ", drafted = ", drafted,
                    "; expected 0 <= accepted <= drafted");
    SPECDEC_EXPECTS(drafted <= max_draft_length, where, "drafted = ", drafted, "; expected at most ", max_draft_length,
                    " (policy::max_draft_length)");
    const index_t tried = accepted < drafted ? accepted + 1 : drafted;
    if (static_cast<index_t>(trials_.size()) < tried) {
      trials_.resize(static_cast<std::size_t>(tried), 0);
      successes_.resize(static_cast<std::size_t>(tried), 0);
    }
    for (std::size_t i = 0; i < trials_.size(); ++i) {
      trials_[i] *= fade;
      successes_[i] *= fade;
    }
    for (index_t i = 0; i < tried; ++i) {
      ++trials_[static_cast<std::size_t>(i)];
      if (i < accepted) ++successes_[static_cast<std::size_t>(i)];
    }
  }
  /// The rate over every depth: `prior` before any trial. \throws invalid_argument unless prior is in [0, 1].
  double pooled(double prior = 0.5) const {
    detail::check_prior("specdec::policy::acceptance_by_depth::pooled", prior);
    return pooled_rate(prior);
  }
  /// Rate at depth `depth` (1-based; any value, depths never tried lean on the pooled rate); `prior`
  /// before any trial. With `caution` > 0, that many standard deviations below the estimate (of a rate
  /// measured on the depth's trials and its pseudo-counts): a rate seen three times is not trusted as
  /// one seen thirty times. \throws invalid_argument unless prior is in [0, 1] and caution finite >= 0.
  double rate(index_t depth, double prior = 0.5, double caution = 0) const {
    constexpr const char* where = "specdec::policy::acceptance_by_depth::rate";
    detail::check_prior(where, prior);
    detail::check_caution(where, caution);
    return rate_at(depth, pooled_rate(prior), caution);
  }
  /// Whether any verification has been recorded (faded or not).
  bool empty() const noexcept { return trials_.empty(); }
  /// Expected tokens a verification commits for a chain of `length` drafts: 1 + sum_i prod_{j<=i} a_j.
  /// O(length + depths recorded). \throws invalid_argument unless 0 <= length <= max_draft_length
  /// (2^16), prior is in [0, 1] and caution finite >= 0.
  double expected_tokens(index_t length, double prior = 0.5, double caution = 0) const {
    constexpr const char* where = "specdec::policy::acceptance_by_depth::expected_tokens";
    SPECDEC_EXPECTS(length >= 0 && length <= max_draft_length, where, "length = ", length, "; expected 0 <= length <= ",
                    max_draft_length, " (policy::max_draft_length)");
    detail::check_prior(where, prior);
    detail::check_caution(where, caution);
    const double pooled = pooled_rate(prior);
    double expected = 1, reach = 1;
    for (index_t i = 1; i <= length; ++i) expected += (reach *= rate_at(i, pooled, caution));
    return expected;
  }

 private:
  friend index_t best_draft_length(const acceptance_by_depth&, const forward_cost&, double, index_t, double, double, double);
  // The unchecked halves of pooled() and rate(): a caller pricing many depths pools once, not once per
  // depth (which would make pricing L lengths O(L x depths)).
  double pooled_rate(double prior) const {
    double pooled_trials = 0, pooled_successes = 0;
    for (std::size_t i = 0; i < trials_.size(); ++i) {
      pooled_trials += trials_[i];
      pooled_successes += successes_[i];
    }
    return (pooled_successes + 2 * prior) / (pooled_trials + 2);
  }
  double rate_at(index_t depth, double pooled, double caution) const {
    const bool seen = depth >= 1 && depth <= static_cast<index_t>(trials_.size());
    const double trials = seen ? trials_[static_cast<std::size_t>(depth - 1)] : 0.0;
    const double mean = seen ? (successes_[static_cast<std::size_t>(depth - 1)] + 4 * pooled) / (trials + 4) : pooled;
    return std::max(0.0, mean - caution * std::sqrt(mean * (1 - mean) / (trials + 5)));
  }
  std::vector<double> trials_, successes_;
};

/// The draft length that maximises expected committed tokens per second,
/// `expected_tokens(L) / (L * draft_seconds + [L > 0] step_seconds + cost(L + 1))` over L in [0, longest];
/// 0 means "do not draft". `draft_seconds` is what drafting one token costs (0 for prompt lookup),
/// `step_seconds` what a draft costs whatever its length (a block drafter's one forward). Before any
/// forward is measured every length costs the same and the longest wins (and gets measured). `prior`
/// and `caution` as in acceptance_by_depth::rate. O(longest log R + R + depths recorded), R the row
/// counts measured.
/// \throws invalid_argument on longest outside [0, max_draft_length] (2^16), draft_seconds or
/// step_seconds negative or not finite, prior outside [0, 1], or caution negative or not finite.
inline index_t best_draft_length(const acceptance_by_depth& acceptance, const forward_cost& cost, double draft_seconds,
                                 index_t longest, double prior, double caution, double step_seconds) {
  constexpr const char* where = "specdec::policy::best_draft_length";
  SPECDEC_EXPECTS(longest >= 0 && longest <= max_draft_length, where, "longest = ", longest, "; expected 0 <= longest <= ",
                  max_draft_length, " (policy::max_draft_length)");
  SPECDEC_EXPECTS(draft_seconds >= 0.0 && std::isfinite(draft_seconds) && step_seconds >= 0.0 && std::isfinite(step_seconds),
                  where, "draft_seconds = ", draft_seconds, ", step_seconds = ", step_seconds, "; expected finite times >= 0");
  detail::check_prior(where, prior);
  detail::check_caution(where, caution);
  const double pooled = acceptance.pooled_rate(prior);
  const forward_cost::curve seconds_for = cost.envelope();
  index_t best = 0;
  double best_rate = 0, expected = 1, reach = 1;  // expected_tokens(length), built up one depth at a time
  for (index_t length = 0; length <= longest; ++length) {
    if (length > 0) expected += (reach *= acceptance.rate_at(length, pooled, caution));
    double seconds = static_cast<double>(length) * draft_seconds + (length > 0 ? step_seconds : 0.0) + seconds_for(length + 1);
    if (seconds <= 0) seconds = 1.0;
    const double rate = expected / seconds;
    if (rate > best_rate) {
      best_rate = rate;
      best = length;
    }
  }
  return best;
}

/// A drafter's draft-length policy: the three measurements above combined by best_draft_length. Where
/// drafting does not pay it stops, and re-tries a one-token draft now and then: without drafts there
/// would be no evidence to resume on, and a longer probe would cost more than it could show. Probes
/// are paid from a budget of 1/64 of the time spent not drafting, so a method that never pays costs
/// about 1.5 % (less where a probe is cheap next to a forward; a probe every step where it is free).
/// Lengths are chosen on acceptance rates half a standard deviation below their estimates, so that a
/// few lucky verifications do not buy a long draft; the rates firm up as evidence accumulates.
///
/// Contexts. A drafter that knows how good its draft is likely to be before verifying it (prompt lookup:
/// how long the matched suffix is; a model drafter: its confidence bucket) passes a context index, and
/// acceptance is measured per context while costs are shared: a long n-gram match that is copied
/// verbatim is then not averaged with a two-token match that rarely is. A context's estimate leans on
/// the acceptance of all contexts until it has evidence of its own. Keep a policy across requests, as
/// the costs it has measured: what it learns is about the drafter and the hardware, not one text.
class draft_length_policy {
 public:
  /// \param longest the most tokens a draft may have, in [0, max_draft_length] (2^16); \param contexts
  /// how many contexts the drafter distinguishes, in [1, max_draft_contexts] (4096).
  /// \throws invalid_argument on longest or contexts outside those ranges.
  explicit draft_length_policy(index_t longest, index_t contexts = 1) : longest_(longest) {
    constexpr const char* where = "specdec::policy::draft_length_policy";
    SPECDEC_EXPECTS(longest >= 0 && longest <= max_draft_length, where, "longest = ", longest,
                    "; expected 0 <= longest <= ", max_draft_length, " (policy::max_draft_length)");
    SPECDEC_EXPECTS(contexts >= 1 && contexts <= max_draft_contexts, where, "contexts = ", contexts,
                    "; expected 1 <= contexts <= ", max_draft_contexts, " (policy::max_draft_contexts)");
    contexts_.resize(static_cast<std::size_t>(contexts));
  }
  /// The length for the step that starts now in `context` (0: verify the root alone). The first draft
  /// of all is one token: it prices a draft token and a two-row verification at the least cost; longer
  /// lengths are tried from there while their forwards are still unmeasured (forward_cost's optimism).
  /// O(longest log R + R) for R row counts measured. \throws invalid_argument unless 0 <= context < contexts.
  index_t choose(index_t context = 0) { return choose(context, longest_); }
  /// As choose(context), for a drafter that has at most `available` tokens to offer this step (prompt
  /// lookup near the end of its match, a suffix draft capped by its match length): the best length in
  /// [0, min(available, longest)]. Cutting choose(context)'s length to `available` instead is not the
  /// same: a length worth drafting at 8 tokens can cost more than it gains at 2 (three rows for at most
  /// two tokens), and then the best is 0. O(min(available, longest) log R + R).
  /// \throws invalid_argument unless 0 <= context < contexts and available >= 0.
  index_t choose(index_t context, index_t available) {
    constexpr const char* where = "specdec::policy::draft_length_policy::choose";
    const acceptance_by_depth& acceptance = at(context, where);
    SPECDEC_EXPECTS(available >= 0, where, "available = ", available, "; expected available >= 0");
    const index_t longest = std::min(available, longest_);
    // The first evidence of all: a one-token probe. A context not yet verified otherwise starts from
    // every context's acceptance.
    if (target_cost_(1) == 0 || (acceptance.empty() && all_.empty())) return std::min<index_t>(1, longest);
    const index_t length =
        best_draft_length(acceptance, target_cost_, draft_cost_(1), longest, all_.pooled(), caution, step_cost_(1));
    if (length > 0 || longest == 0) return length;
    probe_credit_ += probe_share * target_cost_(1);
    const double probe = target_cost_(2) - target_cost_(1) + draft_cost_(1) + step_cost_(1);
    if (probe_credit_ < probe) return 0;
    probe_credit_ -= probe;
    return 1;
  }
  /// A verification, in `context`, of a draft of `drafted` tokens (its depth, for a tree) that accepted
  /// `accepted`. Drafts of no tokens carry no evidence and are ignored (but are checked like any other).
  /// \throws invalid_argument unless 0 <= accepted <= drafted <= longest and 0 <= context < contexts.
  void verified(index_t accepted, index_t drafted, index_t context = 0) {
    constexpr const char* where = "specdec::policy::draft_length_policy::verified";
    acceptance_by_depth& acceptance = at(context, where);
    SPECDEC_EXPECTS(accepted >= 0 && accepted <= drafted && drafted <= longest_, where, "accepted = ", accepted,
                    ", drafted = ", drafted, "; expected 0 <= accepted <= drafted <= longest = ", longest_);
    if (drafted == 0) return;
    acceptance.record(accepted, drafted);
    if (contexts_.size() > 1) all_.record(accepted, drafted);
  }
  /// Wall time of one target forward of `rows` rows. \throws as forward_cost::record.
  void target_forward_timed(index_t rows, double seconds) { target_cost_.record(rows, seconds); }
  /// Wall time of drafting one token (drafters that run a model). \throws as forward_cost::record.
  void draft_token_timed(double seconds) { draft_cost_.record(1, seconds); }
  /// Wall time a draft costs whatever its length: a block drafter's one forward, which drafts every
  /// depth at once. \throws as forward_cost::record.
  void draft_step_timed(double seconds) { step_cost_.record(1, seconds); }
  /// Acceptance measured in `context`. \throws invalid_argument unless 0 <= context < contexts.
  const acceptance_by_depth& acceptance(index_t context = 0) const {
    return at(context, "specdec::policy::draft_length_policy::acceptance");
  }
  const forward_cost& target_cost() const noexcept { return target_cost_; }
  index_t longest() const noexcept { return longest_; }
  index_t contexts() const noexcept { return static_cast<index_t>(contexts_.size()); }

 private:
  static constexpr double probe_share = 1.0 / 64;
  static constexpr double caution = 0.5;  // rates half a standard deviation low: few trials draft short
  const acceptance_by_depth& at(index_t context, const char* where) const {
    SPECDEC_EXPECTS(context >= 0 && context < contexts(), where, "context = ", context, "; expected 0 <= context < ",
                    contexts());
    return contexts_[static_cast<std::size_t>(context)];
  }
  acceptance_by_depth& at(index_t context, const char* where) {
    return const_cast<acceptance_by_depth&>(std::as_const(*this).at(context, where));
  }
  index_t longest_;
  std::vector<acceptance_by_depth> contexts_;
  acceptance_by_depth all_;  // every context's verifications (a single context's prior is 0.5)
  forward_cost target_cost_, draft_cost_, step_cost_;
  double probe_credit_ = 0;
};

}  // namespace specdec::policy
