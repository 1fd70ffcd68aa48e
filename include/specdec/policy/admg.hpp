// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief ADMG, the training-free layer-removal policy of self-speculative decoding ("Draft on the
/// Fly", Metel et al., Findings of EMNLP 2024, Algorithm 1), and Draft & Verify's adaptive
/// draft-exit rule as a draft-length policy.
///
/// While the engine processes the prompt it measures, for every decoder layer l, C_l = the mean over
/// prompt tokens of cos(a, a + Attn(RMSNorm(a))), a being the residual stream entering the attention
/// sub-layer. Attention sub-layers that barely turn the residual stream (C_l >= alpha) are removed
/// from the draft model, the last n layers are always kept, and every m-th layer is removed entirely
/// (attention and MLP). The engine drafts with the resulting `layer_plan` (skip the attention or MLP
/// of a layer: the residual passes unchanged, no KV is written) and verifies with the full model.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/core/checked.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>

namespace specdec::policy::admg {

/// Which sub-layers of each decoder layer the draft model skips; index = 0-based layer id (Hugging
/// Face numbering; the paper's layer l is id l - 1).
struct layer_plan {
  std::vector<bool> skip_attention = {};
  std::vector<bool> skip_mlp = {};

  index_t layers() const noexcept { return static_cast<index_t>(skip_attention.size()); }
  /// Sorted 0-based ids of the layers whose attention (or MLP) is skipped.
  std::vector<index_t> attention_removed() const { return ids(skip_attention); }
  std::vector<index_t> mlp_removed() const { return ids(skip_mlp); }
  /// Sub-layers the draft runs, out of 2 L.
  index_t kept_sublayers() const {
    return static_cast<index_t>(std::count(skip_attention.begin(), skip_attention.end(), false) +
                                std::count(skip_mlp.begin(), skip_mlp.end(), false));
  }

 private:
  static std::vector<index_t> ids(const std::vector<bool>& flags) {
    std::vector<index_t> out;
    for (std::size_t i = 0; i < flags.size(); ++i)
      if (flags[i]) out.push_back(static_cast<index_t>(i));
    return out;
  }
};

/// Readings of Algorithm 1. `paper` is the algorithm as printed; the others are the misreadings the
/// goldens list beside it, kept selectable so that a peer implementing one of them can be matched.
enum class rule_variant {
  paper,               ///< attention removed where C_l >= alpha; every m-th layer (l % m == 0) removed entirely
  mlp_only_every_m,    ///< the every-m-th rule removes only the MLP
  zero_based_every_m,  ///< every m-th counted from layer 1: (l - 1) % m == 0 (a 0-based loop's `i % m == 0`)
  strict_threshold,    ///< C_l > alpha
  every_m_of_removed,  ///< attention by threshold only; the MLP of every m-th threshold-removed layer
};

/// ADMG's parameters; defaults are the paper's Table 2 for Llama-2-13B (CodeLlama-13B: m = 4, n = 3).
struct rules {
  double alpha = 0.985;  ///< cosine threshold, in (0, 1)
  index_t m = 3;         ///< every m-th layer is removed entirely, m >= 1
  index_t n = 2;         ///< the last n layers are never touched, n >= 0
  rule_variant variant = rule_variant::paper;
};

/// Algorithm 1 over the per-layer statistic. \param cosine host `[L]`, cosine[i] = C of layer id i.
/// \throws invalid_argument on an empty or non-finite statistic, alpha outside (0, 1), m < 1, n < 0,
/// or a variant that is none of rule_variant's enumerators.
inline layer_plan plan_layers(std::span<const double> cosine, const rules& r = {}) {
  constexpr const char* where = "specdec::policy::admg::plan_layers";
  const auto layers = static_cast<index_t>(cosine.size());
  SPECDEC_EXPECTS(layers >= 1, where, "the statistic is empty; expected one cosine per decoder layer");
  SPECDEC_EXPECTS(r.alpha > 0.0 && r.alpha < 1.0, where, "alpha = ", r.alpha, "; expected a value in (0, 1)");
  SPECDEC_EXPECTS(r.m >= 1, where, "m = ", r.m, "; expected m >= 1");
  SPECDEC_EXPECTS(r.n >= 0, where, "n = ", r.n, "; expected n >= 0");
  // A value cast into the enum would otherwise match no case below and plan no removal at all.
  const auto variant = static_cast<int>(r.variant);
  SPECDEC_EXPECTS(variant >= static_cast<int>(rule_variant::paper) &&
                      variant <= static_cast<int>(rule_variant::every_m_of_removed),
                  where, "variant = ", variant, "; expected a rule_variant (0 to ",
                  static_cast<int>(rule_variant::every_m_of_removed), ")");
  for (index_t i = 0; i < layers; ++i)
    SPECDEC_EXPECTS(std::isfinite(cosine[static_cast<std::size_t>(i)]) && std::abs(cosine[static_cast<std::size_t>(i)]) <= 1.0 + 1e-6,
                    where, "cosine[", i, "] = ", cosine[static_cast<std::size_t>(i)], "; expected a cosine in [-1, 1]");
  layer_plan plan{std::vector<bool>(static_cast<std::size_t>(layers), false),
                  std::vector<bool>(static_cast<std::size_t>(layers), false)};
  index_t removed_by_threshold = 0;
  for (index_t l = 1; l <= layers - r.n; ++l) {  // 1-based, as the paper numbers layers
    const auto i = static_cast<std::size_t>(l - 1);
    const double c = cosine[i];
    const bool above = r.variant == rule_variant::strict_threshold ? c > r.alpha : c >= r.alpha;
    const bool every_m = r.variant == rule_variant::zero_based_every_m ? (l - 1) % r.m == 0 : l % r.m == 0;
    switch (r.variant) {
      case rule_variant::paper:
      case rule_variant::zero_based_every_m:
      case rule_variant::strict_threshold:
        plan.skip_attention[i] = above || every_m;
        plan.skip_mlp[i] = every_m;
        break;
      case rule_variant::mlp_only_every_m:
        plan.skip_attention[i] = above;
        plan.skip_mlp[i] = every_m;
        break;
      case rule_variant::every_m_of_removed:
        plan.skip_attention[i] = above;
        if (above) plan.skip_mlp[i] = ++removed_by_threshold % r.m == 0;
        break;
    }
  }
  return plan;
}

namespace detail {
// Shared by the host and device forms, so that the device form rejects bad extents before it sizes a
// download by them.
inline void check_cosine_shapes(const char* where, index_t in_rows, index_t in_cols, index_t out_rows, index_t out_cols,
                                bool skip_first) {
  SPECDEC_EXPECTS(in_rows == out_rows && in_cols == out_cols, where, "x_in is [", in_rows, " x ", in_cols,
                  "] and x_out is [", out_rows, " x ", out_cols, "]; expected equal shapes");
  SPECDEC_EXPECTS(in_rows >= 0 && in_cols >= 0, where, "x_in and x_out are [", in_rows, " x ", in_cols,
                  "]; expected extents >= 0");
  SPECDEC_EXPECTS(in_rows > (skip_first ? 1 : 0), where, "no token to average over (", in_rows,
                  " rows, skip_first = ", skip_first, ")");
}
}  // namespace detail

/// Mean over tokens of cos(a_t, b_t) = <a, b> / max(|a| |b|, 1e-8), accumulated in double: the
/// statistic C of one layer. \param x_in host `[T x E]` residual stream entering the attention sub-layer
/// (before its RMSNorm). \param x_out host `[T x E]` the stream after it (x_in + attention output).
/// \param skip_first leave out token 0 (e.g. BOS), as a variant; the paper's statistic uses every token.
/// \throws invalid_argument on shapes that differ, a negative extent, or no token left.
inline double attention_cosine(matrix_view<const float> x_in, matrix_view<const float> x_out, bool skip_first = false) {
  constexpr const char* where = "specdec::policy::admg::attention_cosine";
  detail::check_cosine_shapes(where, x_in.rows(), x_in.cols(), x_out.rows(), x_out.cols(), skip_first);
  const index_t first = skip_first ? 1 : 0;
  double sum = 0.0;
  for (index_t t = first; t < x_in.rows(); ++t) {
    double dot = 0.0, na = 0.0, nb = 0.0;
    for (index_t j = 0; j < x_in.cols(); ++j) {
      const double a = x_in(t, j), b = x_out(t, j);
      dot += a * b;
      na += a * a;
      nb += b * b;
    }
    sum += dot / std::max(std::sqrt(na) * std::sqrt(nb), 1e-8);
  }
  return sum / static_cast<double>(x_in.rows() - first);
}

/// The same statistic on a backend's memory: device rows are downloaded first (a prefill-time cost).
template <backend B>
double attention_cosine(B& b, matrix_view<const float, typename B::memory_space> x_in,
                        matrix_view<const float, typename B::memory_space> x_out, bool skip_first = false) {
  if constexpr (std::is_same_v<typename B::memory_space, host_space>) {
    return attention_cosine(x_in, x_out, skip_first);
  } else {
    constexpr const char* where = "specdec::policy::admg::attention_cosine";
    detail::check_cosine_shapes(where, x_in.rows(), x_in.cols(), x_out.rows(), x_out.cols(), skip_first);
    SPECDEC_EXPECTS(x_in.has_contiguous_rows() && x_out.has_contiguous_rows() && x_in.stride(0) == x_in.cols() &&
                        x_out.stride(0) == x_out.cols(),
                    where, "device inputs must be dense row-major");
    const auto elements = static_cast<index_t>(
        specdec::detail::checked_count(where, {x_in.rows(), x_in.cols()}, "x_in [", x_in.rows(), " x ", x_in.cols(), "]"));
    const auto a = b.download(vector_view<const float, typename B::memory_space>(x_in.data(), elements));
    const auto c = b.download(vector_view<const float, typename B::memory_space>(x_out.data(), elements));
    return attention_cosine(matrix_view<const float>(a.data(), x_in.rows(), x_in.cols()),
                            matrix_view<const float>(c.data(), x_out.rows(), x_out.cols()), skip_first);
  }
}

/// Draft & Verify's adaptive draft exit (Zhang et al. 2024, section 3.4; `auto_parameters = [1, 0.5,
/// 0.9, 1e-2, 0.9]`): drafting stops when the draft's top-1 probability falls below a threshold that
/// tracks the measured acceptance. After each verification, matchness = 0.5 matchness + 0.5 (accepted /
/// drafted); the threshold moves towards th + 0.01 when matchness < 0.9, stays when the draft ran to its
/// maximum length, and moves towards th - 0.01 otherwise: th = 0.9 th + 0.1 target.
class draft_exit {
 public:
  struct parameters {
    double initial_threshold = 0.6;  ///< D&V uses 0.6-0.8
    index_t max_draft = 12;          ///< D&V: max_step_draft 8-12
    double matchness_weight = 0.5;
    double matchness_target = 0.9;
    double step = 0.01;
    double smoothing = 0.9;
  };
  draft_exit() : draft_exit(parameters{}) {}
  /// \throws invalid_argument unless initial_threshold, matchness_weight and smoothing are in [0, 1],
  /// max_draft >= 1, and matchness_target and step are finite (the threshold then stays in [0, 1]).
  explicit draft_exit(const parameters& p) : p_(p), threshold_(p.initial_threshold) {
    constexpr const char* where = "specdec::policy::admg::draft_exit";
    SPECDEC_EXPECTS(p.initial_threshold >= 0.0 && p.initial_threshold <= 1.0, where, "initial_threshold = ",
                    p.initial_threshold, "; expected a probability");
    SPECDEC_EXPECTS(p.max_draft >= 1, where, "max_draft = ", p.max_draft, "; expected >= 1");
    SPECDEC_EXPECTS(p.matchness_weight >= 0.0 && p.matchness_weight <= 1.0, where, "matchness_weight = ",
                    p.matchness_weight, "; expected a weight in [0, 1]");
    SPECDEC_EXPECTS(std::isfinite(p.matchness_target), where, "matchness_target = ", p.matchness_target,
                    "; expected a finite value");
    SPECDEC_EXPECTS(std::isfinite(p.step), where, "step = ", p.step, "; expected a finite value");
    SPECDEC_EXPECTS(p.smoothing >= 0.0 && p.smoothing <= 1.0, where, "smoothing = ", p.smoothing,
                    "; expected a weight in [0, 1]");
  }

  /// Whether to stop drafting after a draft token whose top-1 probability is `top1_probability`, given
  /// `drafted` tokens so far (this one included). A NaN or infinite probability stops: a draft row
  /// that is not a distribution says nothing about the next token, and drafting on would spend a
  /// forward on a guess.
  bool stop(double top1_probability, index_t drafted) const noexcept {
    return drafted >= p_.max_draft || !std::isfinite(top1_probability) || top1_probability < threshold_;
  }
  /// Feeds one verification back: `accepted` of `drafted` draft tokens were accepted.
  void update(index_t accepted, index_t drafted) {
    SPECDEC_EXPECTS(drafted >= 0 && accepted >= 0 && accepted <= drafted, "specdec::policy::admg::draft_exit::update",
                    "accepted = ", accepted, ", drafted = ", drafted, "; expected 0 <= accepted <= drafted");
    if (drafted == 0) return;
    matchness_ = p_.matchness_weight * matchness_ +
                 (1.0 - p_.matchness_weight) * static_cast<double>(accepted) / static_cast<double>(drafted);
    // Poor matches raise the bar; good matches that stopped early lower it (draft longer); a draft that
    // already ran to its maximum length keeps it.
    double target = threshold_ - p_.step;
    if (matchness_ < p_.matchness_target) target = threshold_ + p_.step;
    else if (drafted >= p_.max_draft) target = threshold_;
    threshold_ = std::clamp(p_.smoothing * threshold_ + (1.0 - p_.smoothing) * target, 0.0, 1.0);
  }
  double threshold() const noexcept { return threshold_; }
  double matchness() const noexcept { return matchness_; }
  index_t max_draft() const noexcept { return p_.max_draft; }

 private:
  parameters p_;
  double threshold_;
  double matchness_ = 0.0;
};

}  // namespace specdec::policy::admg
