// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Jakiro*'s static draft run (`jakiro_star/model/cnets.py`, static `topK_genrate`): EAGLE-1's
/// static tree and buffers (specdec/interop/eagle1.hpp; `jakiro_star/model/utils.py` is EAGLE-1's) with
/// each node's children proposed from two experts by specdec/tree/jakiro.hpp. Use it with
/// `choices::jakiro_mc_sim_7b_63`.
#pragma once

#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/interop/eagle1.hpp>
#include <specdec/tree/jakiro.hpp>

namespace specdec::jakiro {

/// Jakiro*'s static draft run over EAGLE-1's tree buffers: like `eagle1::static_drafter`, but every
/// draft forward yields two logits rows per node (left and right expert) and the children come from
/// propose_moe_greedy (`sampling` absent) or propose_moe_sampled. Usage: `begin(left, right)` with the root's
/// rows, then while `!done()`: run the draft on `step.input_ids`, `expand(left, right)`. Sampled runs
/// consume `top_k` uniforms per drafted row, rows in call order, starting at `sampling->offset`;
/// next_offset() is where the next draft run should start.
template <backend B>
class static_drafter {
 public:
  using space = typename B::memory_space;

  /// \param sampling absent: greedy proposal; present: sample_moe with these parameters.
  static_drafter(B& b, const eagle1::buffers& buf, std::int32_t root_token, index_t draft_position_base,
                 std::optional<moe_sampling> sampling = std::nullopt)
      : backend_(&b), inner_(b, buf, root_token, draft_position_base), top_k_(buf.top_k), sampling_(sampling),
        next_offset_(sampling.value_or(moe_sampling{}).offset) {}

  /// \param left_logits, right_logits backend `[1 x V]`: the root's two experts.
  eagle1::static_step begin(matrix_view<const float, space> left_logits, matrix_view<const float, space> right_logits) {
    SPECDEC_EXPECTS(left_logits.rows() == 1, "specdec::jakiro::static_drafter::begin", "left_logits has ",
                    left_logits.rows(), " rows; expected 1");
    ss_prob_.clear();
    expert_.clear();
    if (sampling_) next_offset_ = sampling_->offset;
    return inner_.begin_with(propose(left_logits, right_logits));
  }
  bool done() const noexcept { return inner_.done(); }

  /// \param left_logits, right_logits backend `[m x V]`, row j = the level's j-th expanded node.
  eagle1::static_step expand(matrix_view<const float, space> left_logits, matrix_view<const float, space> right_logits) {
    constexpr const char* where = "specdec::jakiro::static_drafter::expand";
    SPECDEC_EXPECTS(!done(), where, "every level has been expanded already");
    SPECDEC_EXPECTS(left_logits.rows() == inner_.level_rows(), where, "left_logits has ", left_logits.rows(),
                    " rows; the level has ", inner_.level_rows(), " expanded nodes");
    return inner_.expand_with(propose(left_logits, right_logits));
  }

  /// `[1 + expanded x top_k]` tokens, as eagle1::static_drafter::ss_token().
  const std::vector<std::int32_t>& ss_token() const noexcept { return inner_.ss_token(); }
  /// Same shape: the sequentially renormalised draft probabilities (sampled runs; empty otherwise).
  const std::vector<float>& ss_prob() const noexcept { return ss_prob_; }
  /// Same shape: which expert proposed each token (0 left, 1 right).
  const std::vector<std::int8_t>& ss_expert() const noexcept { return expert_; }
  std::vector<std::int32_t> tree_candidates() const { return inner_.tree_candidates(); }
  /// eagle1::static_drafter::tree_candidates_to.
  std::vector<std::int32_t> tree_candidates_to(index_t depth) const { return inner_.tree_candidates_to(depth); }
  std::vector<std::int32_t> cart_candidates(std::int32_t pad_token = -1) const { return inner_.cart_candidates(pad_token); }
  std::uint64_t next_offset() const noexcept { return next_offset_; }

 private:
  std::vector<std::int32_t> propose(matrix_view<const float, space> left, matrix_view<const float, space> right) {
    moe_proposal p;
    if (sampling_) {
      moe_sampling s = *sampling_;
      s.offset = next_offset_;
      p = propose_moe_sampled(*backend_, left, right, top_k_, s);
      next_offset_ += static_cast<std::uint64_t>(left.rows() * top_k_);
      ss_prob_.insert(ss_prob_.end(), p.probabilities.begin(), p.probabilities.end());
    } else {
      p = propose_moe_greedy(*backend_, left, right, top_k_);
    }
    expert_.insert(expert_.end(), p.expert.begin(), p.expert.end());
    return p.tokens;
  }

  B* backend_;
  eagle1::static_drafter<B> inner_;
  index_t top_k_;
  std::optional<moe_sampling> sampling_;
  std::uint64_t next_offset_ = 0;
  std::vector<float> ss_prob_;
  std::vector<std::int8_t> expert_;
};

/// Jakiro*'s static draft as a model of `specdec::drafter`: eagle1::tree_drafter over static_drafter
/// (greedy proposals), each request asking for two logits rows per node (left expert, then right).
template <backend B>
using tree_drafter = eagle1::tree_drafter<B, static_drafter<B>>;

}  // namespace specdec::jakiro

namespace specdec::eagle1 {
template <backend B>
struct static_experts<jakiro::static_drafter<B>> : std::integral_constant<index_t, 2> {};
}  // namespace specdec::eagle1
