// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief How many tokens to draft, decided against the clock: measured acceptance by depth, measured
/// target-forward cost by row count, measured cost of one draft token. A drafter that follows it is
/// never slower than not drafting: where drafting does not pay it drafts nothing and only probes now
/// and then. Host-only bookkeeping, a few hundred bytes; no engine types.
///
/// An engine reports each verification (`verified(accepted, drafted)`), the wall time of each target
/// forward by its number of rows (`target_forward_timed`) and, for drafters that run a model, the time
/// of one draft token (`draft_token_timed`); `choose()` gives the length of the next draft.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <utility>
#include <vector>

#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>

namespace specdec::policy {

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
  /// \throws invalid_argument on rows < 1 or seconds that are negative or not finite.
  void record(index_t rows, double seconds) {
    constexpr const char* where = "specdec::policy::forward_cost::record";
    SPECDEC_EXPECTS(rows >= 1, where, "rows = ", rows, "; expected a forward of at least one row");
    SPECDEC_EXPECTS(seconds >= 0.0 && std::isfinite(seconds), where, "seconds = ", seconds, "; expected a finite time >= 0");
    if (static_cast<index_t>(samples_.size()) < rows) samples_.resize(static_cast<std::size_t>(rows));
    auto& s = samples_[static_cast<std::size_t>(rows - 1)];
    s.push_back(seconds);
    if (s.size() > window) s.erase(s.begin());
  }
  /// Seconds for a forward of `rows` rows; 0 until anything is measured.
  double operator()(index_t rows) const {
    index_t below = 0;  // the largest measured row count <= rows, and its cost
    double below_cost = 0, envelope = 0;
    for (index_t r = 1; r <= static_cast<index_t>(samples_.size()); ++r) {
      auto s = samples_[static_cast<std::size_t>(r - 1)];
      if (s.empty()) continue;
      std::nth_element(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(s.size() / 2), s.end());
      envelope = std::max(envelope, s[s.size() / 2]);  // non-decreasing in the rows
      if (r == rows || (r > rows && below == 0)) return envelope;  // measured, or below every measured count
      if (r < rows) {
        below = r;
        below_cost = envelope;
        continue;
      }
      const double t = static_cast<double>(rows - below) / static_cast<double>(r - below);
      return below_cost + t * (envelope - below_cost);
    }
    return below_cost;  // above every measured count (0 when nothing is measured)
  }

 private:
  static constexpr std::size_t window = 15;
  std::vector<std::vector<double>> samples_;  ///< [rows - 1]: the most recent forward times
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

  /// \throws invalid_argument unless 0 <= accepted <= drafted.
  void record(index_t accepted, index_t drafted) {
    SPECDEC_EXPECTS(accepted >= 0 && accepted <= drafted, "specdec::policy::acceptance_by_depth::record", "accepted = ",
                    accepted, ", drafted = ", drafted, "; expected 0 <= accepted <= drafted");
    const index_t tried = std::min(accepted + 1, drafted);
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
  /// The rate over every depth: `prior` before any trial.
  double pooled(double prior = 0.5) const {
    double pooled_trials = 0, pooled_successes = 0;
    for (std::size_t i = 0; i < trials_.size(); ++i) {
      pooled_trials += trials_[i];
      pooled_successes += successes_[i];
    }
    return (pooled_successes + 2 * prior) / (pooled_trials + 2);
  }
  /// Rate at depth `depth` (1-based); `prior` before any trial. With `caution` > 0, that many standard
  /// deviations below the estimate (of a rate measured on the depth's trials and its pseudo-counts):
  /// a rate seen three times is not trusted as one seen thirty times.
  double rate(index_t depth, double prior = 0.5, double caution = 0) const {
    const double pooled = this->pooled(prior);
    const bool seen = depth >= 1 && depth <= static_cast<index_t>(trials_.size());
    const double trials = seen ? trials_[static_cast<std::size_t>(depth - 1)] : 0.0;
    const double mean = seen ? (successes_[static_cast<std::size_t>(depth - 1)] + 4 * pooled) / (trials + 4) : pooled;
    return std::max(0.0, mean - caution * std::sqrt(mean * (1 - mean) / (trials + 5)));
  }
  /// Whether any verification has been recorded (faded or not).
  bool empty() const noexcept { return trials_.empty(); }
  /// Expected tokens a verification commits for a chain of `length` drafts: 1 + sum_i prod_{j<=i} a_j.
  double expected_tokens(index_t length, double prior = 0.5, double caution = 0) const {
    double expected = 1, reach = 1;
    for (index_t i = 1; i <= length; ++i) expected += (reach *= rate(i, prior, caution));
    return expected;
  }

 private:
  std::vector<double> trials_, successes_;
};

/// The draft length that maximises expected committed tokens per second,
/// `expected_tokens(L) / (L * draft_seconds + cost(L + 1))` over L in [0, longest]; 0 means "do not
/// draft". `draft_seconds` is what drafting one token costs (0 for prompt lookup). Before any forward
/// is measured every length costs the same and the longest wins (and gets measured). `prior` and
/// `caution` as in acceptance_by_depth::rate.
/// \throws invalid_argument on longest < 0 or draft_seconds negative or not finite.
inline index_t best_draft_length(const acceptance_by_depth& acceptance, const forward_cost& cost, double draft_seconds,
                                 index_t longest, double prior = 0.5, double caution = 0) {
  constexpr const char* where = "specdec::policy::best_draft_length";
  SPECDEC_EXPECTS(longest >= 0, where, "longest = ", longest, "; expected >= 0");
  SPECDEC_EXPECTS(draft_seconds >= 0.0 && std::isfinite(draft_seconds), where, "draft_seconds = ", draft_seconds,
                  "; expected a finite time >= 0");
  index_t best = 0;
  double best_rate = 0, expected = 1, reach = 1;  // expected_tokens(length), built up one depth at a time
  for (index_t length = 0; length <= longest; ++length) {
    if (length > 0) expected += (reach *= acceptance.rate(length, prior, caution));
    double seconds = static_cast<double>(length) * draft_seconds + cost(length + 1);
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
  /// \param longest the most tokens a draft may have (>= 0); \param contexts how many contexts the
  /// drafter distinguishes (>= 1). \throws invalid_argument on longest < 0 or contexts < 1.
  explicit draft_length_policy(index_t longest, index_t contexts = 1) : longest_(longest) {
    constexpr const char* where = "specdec::policy::draft_length_policy";
    SPECDEC_EXPECTS(longest >= 0, where, "longest = ", longest, "; expected >= 0");
    SPECDEC_EXPECTS(contexts >= 1, where, "contexts = ", contexts, "; expected >= 1");
    contexts_.resize(static_cast<std::size_t>(contexts));
  }
  /// The length for the step that starts now in `context` (0: verify the root alone). The first draft
  /// of all is one token: it prices a draft token and a two-row verification at the least cost; longer
  /// lengths are tried from there while their forwards are still unmeasured (forward_cost's optimism).
  /// \throws invalid_argument unless 0 <= context < contexts.
  index_t choose(index_t context = 0) {
    const acceptance_by_depth& acceptance = at(context, "specdec::policy::draft_length_policy::choose");
    // The first evidence of all: a one-token probe. A context not yet verified otherwise starts from
    // every context's acceptance.
    if (target_cost_(1) == 0 || (acceptance.empty() && all_.empty())) return std::min<index_t>(1, longest_);
    const index_t length = best_draft_length(acceptance, target_cost_, draft_cost_(1), longest_, all_.pooled(), caution);
    if (length > 0 || longest_ == 0) return length;
    probe_credit_ += probe_share * target_cost_(1);
    const double probe = target_cost_(2) - target_cost_(1) + draft_cost_(1);
    if (probe_credit_ < probe) return 0;
    probe_credit_ -= probe;
    return 1;
  }
  /// A verification, in `context`, of a draft of `drafted` tokens (its depth, for a tree) that accepted
  /// `accepted`. Drafts of no tokens carry no evidence and are ignored.
  /// \throws as acceptance_by_depth::record, and invalid_argument unless 0 <= context < contexts.
  void verified(index_t accepted, index_t drafted, index_t context = 0) {
    acceptance_by_depth& acceptance = at(context, "specdec::policy::draft_length_policy::verified");
    if (drafted == 0) return;
    acceptance.record(accepted, drafted);
    if (contexts_.size() > 1) all_.record(accepted, drafted);
  }
  /// Wall time of one target forward of `rows` rows. \throws as forward_cost::record.
  void target_forward_timed(index_t rows, double seconds) { target_cost_.record(rows, seconds); }
  /// Wall time of drafting one token (drafters that run a model). \throws as forward_cost::record.
  void draft_token_timed(double seconds) { draft_cost_.record(1, seconds); }
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
  forward_cost target_cost_, draft_cost_;
  double probe_credit_ = 0;
};

}  // namespace specdec::policy
