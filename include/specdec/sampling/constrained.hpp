// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Greedy verification driven by a grammar matcher and penalties along the walk: the grammar is
/// asked about one token per visited node and a whole mask only where the target's choice is
/// forbidden, and only the visited rows are penalised. This is llama.cpp's own shortcut for grammar
/// sampling (sample first, check the token, apply the grammar only on a rejection: common/sampling.cpp)
/// carried into a tree walk, for grammar engines whose full mask costs a pass over the vocabulary's
/// strings (llama.cpp's, milliseconds per mask) where xgrammar's cached masks cost microseconds
/// (those fill every node up front: grammar/tree_grammar.hpp's fill_tree_bitmasks and sampling/bitmask.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>
#include <specdec/grammar/token_bitmask.hpp>
#include <specdec/sampling/detail/rows.hpp>
#include <specdec/sampling/greedy.hpp>
#include <specdec/sampling/penalties.hpp>
#include <specdec/sampling/request.hpp>
#include <specdec/grammar/tree_grammar.hpp>

namespace specdec::sampling {

namespace detail {

/// The penalised, masked argmax of rows, without writing them: the request's penalised tokens (its
/// history's, the bias's; each row adds its path's) are taken out of the streaming pass through
/// masked_argmax's `exclude` bits and evaluated alone, with the formulas penalise_row applies (larger
/// value, then lower index, decides). Where the penalties can only lower a logit (repetition >= 1,
/// frequency and presence >= 0) only the tokens whose raw logit reaches the streaming pass's maximum
/// (and the biased ones) are evaluated: the others cannot win. Same results as penalise_row then
/// masked_argmax. Built once per request: O(V / 32) words of exclusion bits and a token-to-slot map of
/// V int32.
class penalised_argmax {
 public:
  /// \param history null: no penalties (masked_argmax alone).
  penalised_argmax(index_t vocab, const penalty_history* history, const penalty_params& params, std::span<const logit_bias> bias)
      : vocab_(vocab), history_(history), params_(params), bias_(bias), inv_r_(1.0f / params.repetition) {
    if (history_ == nullptr) return;
    exclude_.assign(static_cast<std::size_t>(bitmask_words(vocab)), 0);
    slot_.assign(static_cast<std::size_t>(vocab), -1);
    for (const auto& e : history_->touched()) add(e.token, e.output_count, e.in_prompt);
    for (const logit_bias& b : bias_) add(b.token, 0, false);
    for (const logit_bias& b : bias_) biased_[static_cast<std::size_t>(slot_[static_cast<std::size_t>(b.token)])] = 1;
    fixed_ = tokens_.size();
    const bool only_lower = penalties_only_lower(params_);
    for (std::size_t i = 0; i < fixed_; ++i) evaluate_[i] = !only_lower || biased_[i] != 0 ? 1 : 0;
    path_evaluate_ = only_lower ? 0 : 1;
  }
  /// The argmax of `row` (V floats) under `mask` (null: all allowed) for a node whose draft path is
  /// `path` (oldest first); codes and `bad` as masked_argmax.
  std::int32_t operator()(const float* row, const std::int32_t* mask, std::span<const std::int32_t> path, index_t& bad) {
    if (history_ == nullptr) return specdec::detail::masked_argmax(row, vocab_, mask, bad);
    for (const std::int32_t t : path) add(t, 0, false);
    std::int32_t best = specdec::detail::masked_argmax(row, vocab_, mask, bad, exclude_.data());
    if (bad < 0) {
      constexpr float inf = std::numeric_limits<float>::infinity();
      float best_value = best >= 0 ? row[best] : -inf;
      const float floor = best_value;  // with penalties that only lower, a raw logit below it cannot win
      // The filter first, as its own loop (one gather and one compare per token, no branch: compilers
      // vectorise it with gather instructions), then the mask and the penalties for the few that pass.
      // NaN and +inf pass, to be reported.
      const std::size_t n = tokens_.size();
      candidate_.resize(n);
      filter(row, floor, n);
      for (std::size_t i = 0; i < n; ++i) {  // any order: ties compare indices
        if (i % 8 == 0 && i + 8 <= n) {  // eight verdicts at a time: most are "cannot win"
          std::uint64_t eight;
          std::memcpy(&eight, candidate_.data() + i, sizeof(eight));
          if (eight == 0) {
            i += 7;
            continue;
          }
        }
        if (candidate_[i] == 0) continue;
        const std::int32_t t = tokens_[i];
        const float raw = row[t];
        if (mask != nullptr && !bitmask_allows(mask, t)) continue;
        const float v = value(i, raw, path);
        if (v != v || v == inf) {
          bad = t;
          best = -1;
          break;
        }
        if (v > best_value || (v == best_value && v > -inf && t < best)) {
          best_value = v;
          best = t;
        }
      }
      if (bad < 0 && best == -2)  // no untouched token allowed: -1 if some penalised one is (all at -inf)
        for (const std::int32_t t : tokens_)
          if (mask == nullptr || bitmask_allows(mask, t)) {
            best = -1;
            break;
          }
    }
    while (tokens_.size() > fixed_) {  // the path's own tokens leave again
      const std::int32_t t = tokens_.back();
      slot_[static_cast<std::size_t>(t)] = -1;
      bitmask_set(exclude_.data(), t, false);
      tokens_.pop_back();
      base_count_.pop_back();
      in_prompt_.pop_back();
      biased_.pop_back();
      evaluate_.pop_back();
    }
    return best;
  }

 private:
  void add(std::int32_t t, std::int32_t count, bool in_prompt) {
    if (slot_[static_cast<std::size_t>(t)] >= 0) return;
    slot_[static_cast<std::size_t>(t)] = static_cast<std::int32_t>(tokens_.size());
    tokens_.push_back(t);
    base_count_.push_back(count);
    in_prompt_.push_back(in_prompt ? 1 : 0);
    biased_.push_back(0);
    evaluate_.push_back(path_evaluate_);
    bitmask_set(exclude_.data(), t, true);
  }
  /// candidate_[i] = evaluate_[i] or slot i's raw logit not below `floor` (NaN included). Restrict
  /// pointers: a byte store may alias anything, which would keep the compiler from gathering.
  void filter(const float* __restrict row, float floor, std::size_t n) {
    const std::int32_t* __restrict tk = tokens_.data();
    const std::uint8_t* __restrict ev = evaluate_.data();
    std::uint8_t* __restrict pass = candidate_.data();
    for (std::size_t i = 0; i < n; ++i) pass[i] = static_cast<std::uint8_t>(ev[i] | (row[tk[i]] < floor ? 0 : 1));
  }
  /// Slot i's token after the bias and the penalties of a node with draft path `path`, as penalise_row
  /// computes it.
  float value(std::size_t i, float v, std::span<const std::int32_t> path) const {
    const std::int32_t t = tokens_[i];
    if (biased_[i] != 0)
      for (const logit_bias& b : bias_)
        if (b.token == t) v += b.bias;
    if (params_.convention == penalty_convention::vllm) {
      const auto count = base_count_[i] + static_cast<std::int32_t>(std::count(path.begin(), path.end(), t));
      return vllm_penalised(v, in_prompt_[i] != 0, count, params_, inv_r_);
    }
    if (llama_cpp_disabled(*history_, params_)) return v;
    const std::int32_t count = base_count_[i] + (path.empty() ? 0 : llama_cpp_window_change(*history_, path, t));
    return count > 0 ? llama_cpp_penalised(v, count, params_) : v;
  }
  index_t vocab_;
  const penalty_history* history_;
  penalty_params params_;
  std::span<const logit_bias> bias_;
  float inv_r_;
  std::vector<std::int32_t> exclude_, slot_, tokens_, base_count_;
  std::vector<std::uint8_t> in_prompt_, biased_;
  std::vector<std::uint8_t> candidate_;  // per call: the filter's verdict per slot
  std::vector<std::uint8_t> evaluate_;  // 1: evaluated whatever its raw logit (penalties that may raise it, or a bias)
  std::uint8_t path_evaluate_ = 1;      // evaluate_ of the tokens added later (a path's)
  std::size_t fixed_ = 0;
};

}  // namespace detail

/// The penalties a walk applies to each row it reads (sampling/penalties.hpp); no history: none.
struct walk_penalties {
  const penalty_history* history = nullptr;  ///< the request's committed history (node 0's included)
  penalty_params params{};
  std::span<const logit_bias> bias{};
};

/// Greedy verification of one request under a grammar matcher (and penalties): the same result as
/// filling every node's mask (fill_tree_bitmasks), penalising every row (apply_tree_penalties) and
/// running the masked verify_greedy, while reading and penalising only the rows the walk visits and
/// filling a mask only where a visited row's largest entry is a token the grammar forbids. (Where it is
/// allowed, it is the largest allowed entry too, ties to the lowest index included.)
///
/// The matcher must hold the committed tokens up to node 0's (as for fill_tree_bitmasks). It is left
/// holding every emitted token: the accepted nodes' and the final one (the engine's matcher is then at
/// the next step's node 0). A walk that reaches a terminated state (a stop token accepted) ends there
/// without a final token, as the masked verify_greedy does.
/// \param target_logits backend `[rows x V]` (device rows are downloaded as the walk visits them).
/// \param request one request (its tree, target_row, max_accepted, bonus_token); a `bonus_token` the
///   grammar forbids is an error.
/// \throws invalid_argument as verify_greedy and the masked verify_greedy (NaN / +inf among a visited
///   row's allowed entries, a visited row whose allowed entries are all -inf, node 0 terminated or
///   allowing nothing), as apply_tree_penalties on bad penalties, and when the matcher contradicts
///   itself (rejects a token its own mask allowed), each naming the node.
template <backend B, grammar_matcher M>
speculative_result verify_greedy_constrained(B& b, matrix_view<const float, typename B::memory_space> target_logits,
                                             const speculative_request& request, M& matcher, const walk_penalties& penalties = {}) {
  constexpr const char* where = "specdec::sampling::verify_greedy_constrained";
  detail::check_input_rows(where, "target_logits", target_logits);
  const index_t vocab = target_logits.cols();
  specdec::detail::check_vocabulary(where, "V", vocab);  // before the mask and slot buffers are sized by it
  if (penalties.history != nullptr) detail::check_penalties(where, penalties.params, penalties.bias, vocab, *penalties.history);
  SPECDEC_EXPECTS(penalties.history != nullptr || penalties.bias.empty(), where, "penalties.bias has ", penalties.bias.size(),
                  " entries without a history; expected a history (penalty_history) with them");
  std::vector<std::int32_t> mask(static_cast<std::size_t>(bitmask_words(vocab)));
  detail::penalised_argmax argmax(vocab, penalties.history, penalties.params, penalties.bias);
  detail::row_reader<B> rows(b, target_logits);
  const std::span<const speculative_request> one(&request, 1);
  std::vector<std::int32_t> path;  // the accepted nodes' tokens, oldest first: all the matcher holds past node 0
  std::int32_t chosen = -1;        // the token the last visited row chose, held by the matcher
  speculative_result out = detail::for_each_request(where, one, vocab, target_logits.rows(), [&](const speculative_request& q,
                                                                                                 std::size_t, tree_view tree) {
    auto argmax_of = [&](index_t row) -> std::int32_t {
      const index_t node = row - q.target_row;
      if (node != 0) path.push_back(chosen);  // the walk moved to the child holding the token just chosen
      if (matcher.is_terminated()) {
        SPECDEC_EXPECTS(node != 0, where, "node 0: the matcher is terminated; expected a state that can emit a token");
        return -2;
      }
      // The unconstrained choice first (penalties read on the fly, the row never written): one
      // accept_token when the grammar allows it.
      const float* x = rows.row(row);
      const std::span<const std::int32_t> penalised_path = penalties.history != nullptr ? std::span<const std::int32_t>(path)
                                                                                        : std::span<const std::int32_t>{};
      index_t bad = -1;
      std::int32_t best = argmax(x, nullptr, penalised_path, bad);
      if (bad < 0 && best >= 0 && matcher.accept_token(best)) return chosen = best;
      matcher.fill_next_token_bitmask(std::span<std::int32_t>(mask));
      bad = -1;
      best = argmax(x, mask.data(), penalised_path, bad);
      SPECDEC_EXPECTS(bad < 0, where, "node ", node, ": target_logits row ", row, " holds a NaN or +inf at allowed column ", bad,
                      " (after penalties); expected finite values or -inf");
      SPECDEC_EXPECTS(best != -2, where, "node ", node, ": the matcher's mask allows no token and it is not terminated",
                      "; expected a mask allowing at least one token");
      SPECDEC_EXPECTS(best != -1, where, "node ", node, ": row ", row,
                      " has logit -inf at every token the grammar allows; expected at least one finite");
      SPECDEC_EXPECTS(matcher.accept_token(best), where, "node ", node, ": the matcher rejected token ", best,
                      " that its own mask allows; expected accept_token to agree with fill_next_token_bitmask");
      return chosen = best;
    };
    speculative_result res = detail::greedy_walk_one(where, vocab, q, 0, tree, argmax_of, /*end_without_token=*/-2);
    // A caller's bonus token replaces the chosen one: the matcher must hold it instead.
    if (res.bonus && q.bonus_token && !res.tokens.empty() && res.tokens.back() != chosen) {
      matcher.rollback(1);
      SPECDEC_EXPECTS(matcher.accept_token(res.tokens.back()), where, "bonus_token = ", res.tokens.back(),
                      "; expected a token the grammar allows after the accepted path");
    }
    rows.recycle();
    return res;
  })[0];
  return out;
}

}  // namespace specdec::sampling
