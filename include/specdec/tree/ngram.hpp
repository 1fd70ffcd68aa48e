// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Prompt-lookup (n-gram) drafting over a caller's token history: the longest suffix of the
/// history (max_ngram down to min_ngram tokens) that occurred earlier proposes the tokens that followed
/// that occurrence, as llama.cpp's `llama-lookup` / ngram-simple and vLLM's n-gram proposer do. With
/// `branches` > 1 the most recent distinct continuations of that suffix are merged into a trie, one
/// draft tree verified in one forward. Free: no model runs; the drafts are deterministic (verify them
/// greedily, or stochastically with no draft rows). Host memory; O(history x max_ngram) per call.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>
#include <specdec/tree/tree.hpp>

namespace specdec {

/// - `max_ngram`, `min_ngram`: the suffix lengths tried, longest first (1 <= min <= max);
/// - `branches`: the most continuations merged into the tree (1: a chain);
/// - `max_history`: only the last this many tokens are searched (0: all), bounding the cost on long
///   contexts.
struct ngram_options {
  index_t max_ngram = 3;
  index_t min_ngram = 2;
  index_t branches = 1;
  index_t max_history = 0;
};

namespace detail {
/// The searched part of the history (the last max_history tokens), the options and tokens checked.
inline std::span<const std::int32_t> ngram_window(std::span<const std::int32_t> history, const ngram_options& options,
                                                  const char* where) {
  SPECDEC_EXPECTS(options.min_ngram >= 1 && options.min_ngram <= options.max_ngram, where, "min_ngram = ", options.min_ngram,
                  ", max_ngram = ", options.max_ngram, "; expected 1 <= min_ngram <= max_ngram");
  SPECDEC_EXPECTS(options.branches >= 1, where, "branches = ", options.branches, "; expected >= 1");
  SPECDEC_EXPECTS(options.max_history >= 0, where, "max_history = ", options.max_history, "; expected >= 0 (0: all)");
  if (options.max_history > 0 && static_cast<index_t>(history.size()) > options.max_history)
    history = history.subspan(history.size() - static_cast<std::size_t>(options.max_history));
  for (const std::int32_t t : history)
    SPECDEC_EXPECTS(t >= 0, where, "history holds token ", t, "; expected token ids >= 0");
  return history;
}
/// Whether the `g` tokens at `start` equal the history's last `g`.
inline bool suffix_at(std::span<const std::int32_t> history, index_t start, index_t g) {
  const auto n = static_cast<index_t>(history.size());
  for (index_t i = 0; i < g; ++i)
    if (history[static_cast<std::size_t>(start + i)] != history[static_cast<std::size_t>(n - g + i)]) return false;
  return true;
}
/// The longest g in [min_ngram, max_ngram] whose suffix occurred earlier (ending before the last
/// token); 0 when none did. One backward pass: at each earlier end position, how many tokens before it
/// agree with the suffix (mostly none), so O(history) on ordinary text rather than O(history x g).
inline index_t longest_match(std::span<const std::int32_t> window, const ngram_options& options) {
  const auto n = static_cast<index_t>(window.size());
  const auto at = [&](index_t i) { return window[static_cast<std::size_t>(i)]; };
  index_t best = 0;
  for (index_t end = n - 2; end >= 0 && best < options.max_ngram; --end) {
    index_t g = 0;
    while (g < options.max_ngram && end - g >= 0 && at(end - g) == at(n - 1 - g)) ++g;
    best = std::max(best, g);
  }
  return best >= options.min_ngram ? best : 0;
}
}  // namespace detail

/// How long a suffix of the history prompt lookup would match: the longest g in [min_ngram,
/// max_ngram] such that the last g tokens occurred earlier; 0 when nothing matches (no draft). What a
/// drafter knows of a draft's quality before verifying it (long matches are copied text): pass it, in
/// buckets, as draft_length_policy's context. Host memory; O(history x max_ngram).
/// \param history host: the committed tokens, the last one the next draft's root.
/// \throws invalid_argument on options out of range or a negative token in the searched history.
inline index_t ngram_match_length(std::span<const std::int32_t> history, const ngram_options& options = {}) {
  return detail::longest_match(detail::ngram_window(history, options, "specdec::ngram_match_length"), options);
}

/// Continuations of the history's suffix: for the longest suffix length g in [min_ngram, max_ngram] that
/// occurred earlier (ngram_match_length), the up to `length` tokens after each earlier occurrence, the
/// most recent occurrence first, distinct ones only, at most `branches` of them. Empty when nothing
/// matches.
/// \param history host: the committed tokens (prompt and generated), the last one the draft's root.
/// \throws invalid_argument on length < 0, options out of range, or a negative token in the searched
///   part of the history.
inline std::vector<std::vector<std::int32_t>> ngram_continuations(std::span<const std::int32_t> history, index_t length,
                                                                   const ngram_options& options = {}) {
  constexpr const char* where = "specdec::ngram_continuations";
  SPECDEC_EXPECTS(length >= 0, where, "length = ", length, "; expected >= 0");
  history = detail::ngram_window(history, options, where);
  std::vector<std::vector<std::int32_t>> out;
  const index_t g = length == 0 ? 0 : detail::longest_match(history, options);
  if (g == 0) return out;
  const auto n = static_cast<index_t>(history.size());
  // Occurrences of the suffix that end before the last token, most recent first; each is followed by
  // at least one token, so none is empty.
  for (index_t start = n - g - 1; start >= 0 && static_cast<index_t>(out.size()) < options.branches; --start) {
    if (!detail::suffix_at(history, start, g)) continue;
    const index_t end = std::min(n, start + g + length);
    std::vector<std::int32_t> c(history.begin() + start + g, history.begin() + end);
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(std::move(c));
  }
  return out;
}

/// Merges continuations into a draft tree rooted at `root` (a trie: shared prefixes become shared
/// nodes), in specdec's breadth-first order; within a level, nodes keep the order in which the
/// continuations introduced them (most recent match first). No continuations: the root alone.
/// \throws invalid_argument on a negative token.
inline draft_tree continuation_tree(std::int32_t root, const std::vector<std::vector<std::int32_t>>& continuations) {
  std::vector<std::int32_t> tokens = {root}, parents = {-1}, depth = {0};
  for (const auto& c : continuations) {
    std::int32_t node = 0;
    for (const std::int32_t token : c) {
      std::int32_t child = -1;
      for (std::size_t i = 1; i < tokens.size() && child < 0; ++i)
        if (parents[i] == node && tokens[i] == token) child = static_cast<std::int32_t>(i);
      if (child < 0) {
        tokens.push_back(token);
        parents.push_back(node);
        depth.push_back(depth[static_cast<std::size_t>(node)] + 1);
        child = static_cast<std::int32_t>(tokens.size() - 1);
      }
      node = child;
    }
  }
  // Insertion order puts parents first but interleaves depths; a stable sort by depth gives level order.
  std::vector<std::int32_t> order(tokens.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int32_t>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int32_t a, std::int32_t b) { return depth[static_cast<std::size_t>(a)] < depth[static_cast<std::size_t>(b)]; });
  std::vector<std::int32_t> position(tokens.size()), level_tokens, level_parents;
  for (std::size_t i = 0; i < order.size(); ++i) position[static_cast<std::size_t>(order[i])] = static_cast<std::int32_t>(i);
  for (const std::int32_t o : order) {
    level_tokens.push_back(tokens[static_cast<std::size_t>(o)]);
    level_parents.push_back(o == 0 ? -1 : position[static_cast<std::size_t>(parents[static_cast<std::size_t>(o)])]);
  }
  return make_tree(std::move(level_tokens), level_parents);
}

/// The prompt-lookup draft for the next step: continuation_tree(history.back(), ngram_continuations(...)).
/// A chain when `branches` is 1; the root alone when nothing matches or `length` is 0.
/// \throws invalid_argument on an empty history, and as ngram_continuations.
inline draft_tree propose_ngram(std::span<const std::int32_t> history, index_t length, const ngram_options& options = {}) {
  SPECDEC_EXPECTS(!history.empty(), "specdec::propose_ngram", "history is empty; expected at least the committed token to draft from");
  return continuation_tree(history.back(), ngram_continuations(history, length, options));
}

}  // namespace specdec
