// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Greedy verification driven by a grammar matcher and penalties along the walk: the grammar is
/// asked about one token per visited node and a whole mask only where the target's choice is
/// forbidden, and only the visited rows are penalised. This is llama.cpp's own shortcut for grammar
/// sampling (sample first, check the token, apply the grammar only on a rejection: common/sampling.cpp)
/// carried into a tree walk, for grammar engines whose full mask costs a pass over the vocabulary's
/// strings (llama.cpp's, milliseconds per mask) where xgrammar's cached masks cost microseconds
/// (those fill every node up front: tree/grammar.hpp's fill_tree_bitmasks and sampling/bitmask.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>
#include <specdec/mask/token_bitmask.hpp>
#include <specdec/sampling/detail/rows.hpp>
#include <specdec/sampling/greedy.hpp>
#include <specdec/sampling/penalties.hpp>
#include <specdec/sampling/request.hpp>
#include <specdec/tree/grammar.hpp>

namespace specdec::sampling {

namespace detail {

/// Buffers penalised_masked_argmax reuses across rows.
struct penalised_argmax_scratch {
  std::vector<std::int32_t> words, tokens, allowed;
  std::vector<float> values;
};

/// masked_argmax of a row after logit bias and penalties (penalise_row), without writing the row:
/// masked_argmax over the entries no penalty can change (their bits cleared from a copy of the mask),
/// then each token a penalty can change, if the mask allows it, evaluated alone and compared (larger
/// value, then lower index). Same return codes and `bad` as masked_argmax (a penalised token reported
/// bad is the first such among them, after any untouched one). `mask` null: every token allowed.
inline std::int32_t penalised_masked_argmax(const float* row, index_t vocab, const std::int32_t* mask,
                                            std::span<const penalty_history::entry> touched, const penalty_history& history,
                                            std::span<const std::int32_t> path, const penalty_params& params,
                                            std::span<const logit_bias> bias, penalised_argmax_scratch& scratch, index_t& bad) {
  const index_t words = bitmask_words(vocab);
  scratch.words.resize(static_cast<std::size_t>(words));
  if (mask != nullptr) std::copy(mask, mask + words, scratch.words.begin());
  else std::fill(scratch.words.begin(), scratch.words.end(), -1);
  scratch.tokens = penalised_tokens(touched, path, bias);
  scratch.values.resize(scratch.tokens.size());
  scratch.allowed.clear();
  for (std::size_t i = 0; i < scratch.tokens.size(); ++i) {
    const std::int32_t t = scratch.tokens[i];
    scratch.values[i] = row[t];
    if (bitmask_allows(scratch.words.data(), t)) scratch.allowed.push_back(t);
    bitmask_set(scratch.words.data(), t, false);
  }
  std::int32_t best = specdec::detail::masked_argmax(row, vocab, scratch.words.data(), bad);
  if (bad >= 0) return -1;
  const auto value_of = [&](std::int32_t t) -> float& {
    return scratch.values[static_cast<std::size_t>(std::lower_bound(scratch.tokens.begin(), scratch.tokens.end(), t) - scratch.tokens.begin())];
  };
  penalise_entries(value_of, touched, history, path, params, bias);
  float best_value = best >= 0 ? row[best] : -std::numeric_limits<float>::infinity();
  for (const std::int32_t t : scratch.allowed) {
    const float v = value_of(t);
    if (v != v || v == std::numeric_limits<float>::infinity()) {
      bad = t;
      return -1;
    }
    if (v > best_value || (v == best_value && v > -std::numeric_limits<float>::infinity() && t < best)) {
      best_value = v;
      best = t;
    }
  }
  if (best == -2) return scratch.allowed.empty() ? -2 : -1;  // no untouched token allowed: the touched ones decided
  return best;
}

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
  if (penalties.history != nullptr) detail::check_penalties(where, penalties.params, penalties.bias, vocab, *penalties.history);
  SPECDEC_EXPECTS(penalties.history != nullptr || penalties.bias.empty(), where, "penalties.bias has ", penalties.bias.size(),
                  " entries without a history; expected a history (penalty_history) with them");
  std::vector<std::int32_t> mask(static_cast<std::size_t>(bitmask_words(vocab)));
  const penalty_history no_history;
  const penalty_history& history = penalties.history != nullptr ? *penalties.history : no_history;
  const std::vector<penalty_history::entry> touched = history.touched();
  const penalty_params params = penalties.history != nullptr ? penalties.params : penalty_params{};
  const std::span<const logit_bias> bias = penalties.history != nullptr ? penalties.bias : std::span<const logit_bias>{};
  detail::penalised_argmax_scratch scratch;
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
      std::int32_t best = detail::penalised_masked_argmax(x, vocab, nullptr, touched, history, penalised_path, params, bias, scratch, bad);
      if (bad < 0 && best >= 0 && matcher.accept_token(best)) return chosen = best;
      matcher.fill_next_token_bitmask(std::span<std::int32_t>(mask));
      bad = -1;
      best = detail::penalised_masked_argmax(x, vocab, mask.data(), touched, history, penalised_path, params, bias, scratch, bad);
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
