// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Prompt-lookup (n-gram) drafting over a caller's token history: the longest suffix of the
/// history (max_ngram down to min_ngram tokens) that occurred earlier proposes the tokens that followed
/// that occurrence, as llama.cpp's `llama-lookup` / ngram-simple and vLLM's n-gram proposer do. With
/// `branches` > 1 the most recent distinct continuations of that suffix are merged into a trie, one
/// draft tree verified in one forward. Free: no model runs; the drafts are deterministic (verify them
/// greedily, or stochastically with no draft rows). Host memory. Cost per call, whatever max_ngram:
/// O(history) for the match; O(history log length) more to tell repeated continuations apart when
/// `branches` > 1 and two full-length ones occur; O(total continuation length) <= branches x length
/// for the tree.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <unordered_map>
#include <unordered_set>
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

/// agree[k] (1 <= k < n): how many tokens ending at position n - 1 - k equal the window's last ones,
/// i.e. the longest common suffix of window[0, n - k) and the window: the Z-function of the reversed
/// window, O(n) whatever the match lengths.
inline std::vector<index_t> suffix_agreement(std::span<const std::int32_t> window) {
  const auto n = static_cast<index_t>(window.size());
  const auto reversed = [&](index_t i) { return window[static_cast<std::size_t>(n - 1 - i)]; };
  std::vector<index_t> agree(static_cast<std::size_t>(n), n);
  index_t box_first = 0, box_end = 0;  // the rightmost [k, k + agree[k]) found so far
  for (index_t k = 1; k < n; ++k) {
    index_t a = k < box_end ? std::min(box_end - k, agree[static_cast<std::size_t>(k - box_first)]) : 0;
    while (k + a < n && reversed(a) == reversed(k + a)) ++a;
    agree[static_cast<std::size_t>(k)] = a;
    if (k + a > box_end) box_first = k, box_end = k + a;
  }
  return agree;
}

/// The longest g in [min_ngram, max_ngram] whose suffix occurred earlier (ending before the last
/// token), from suffix_agreement; 0 when none did.
inline index_t match_length(const std::vector<index_t>& agree, const ngram_options& options) {
  index_t best = 0;
  for (std::size_t k = 1; k < agree.size(); ++k) best = std::max(best, agree[k]);
  best = std::min(best, options.max_ngram);
  return best >= options.min_ngram ? best : 0;
}
inline index_t longest_match(std::span<const std::int32_t> window, const ngram_options& options) {
  return match_length(suffix_agreement(window), options);
}

/// Exact classes of the `length`-token windows: id[p] == id[q] iff window[p, p + length) equals
/// window[q, q + length), for p, q in [0, n - length]. Karp-Miller-Rosenberg doubling with counting
/// sorts, O(n log length); no hashing, so no false match. Requires 1 <= length <= n.
inline std::vector<index_t> window_classes(std::span<const std::int32_t> window, index_t length) {
  const auto n = static_cast<index_t>(window.size());
  std::vector<index_t> name(static_cast<std::size_t>(n));
  index_t names = 0;
  {
    std::unordered_map<std::int32_t, index_t> first_seen;
    first_seen.reserve(static_cast<std::size_t>(n));
    for (index_t p = 0; p < n; ++p) {
      const auto [it, added] = first_seen.try_emplace(window[static_cast<std::size_t>(p)], names);
      if (added) ++names;
      name[static_cast<std::size_t>(p)] = it->second;
    }
  }
  // Names of the windows of width + shift tokens from the pairs (name[p], name[p + shift]) of windows
  // of `width` (shift <= width, so the two cover it); names stay below n for the counting sorts.
  std::vector<index_t> by_second(static_cast<std::size_t>(n)), order(static_cast<std::size_t>(n)),
      count(static_cast<std::size_t>(n) + 1);
  const auto combine = [&](index_t width, index_t shift) {
    const index_t windows = n - width - shift + 1;
    const auto sort_by = [&](const std::vector<index_t>& in, std::vector<index_t>& out, index_t offset) {
      std::fill(count.begin(), count.end(), 0);
      for (index_t i = 0; i < windows; ++i) ++count[static_cast<std::size_t>(name[static_cast<std::size_t>(in[static_cast<std::size_t>(i)] + offset)]) + 1];
      for (index_t v = 0; v < names; ++v) count[static_cast<std::size_t>(v) + 1] += count[static_cast<std::size_t>(v)];
      for (index_t i = 0; i < windows; ++i) {
        const index_t p = in[static_cast<std::size_t>(i)];
        out[static_cast<std::size_t>(count[static_cast<std::size_t>(name[static_cast<std::size_t>(p + offset)])]++)] = p;
      }
    };
    std::iota(order.begin(), order.begin() + windows, index_t{0});
    sort_by(order, by_second, shift);
    sort_by(by_second, order, 0);
    std::vector<index_t> next(static_cast<std::size_t>(windows));
    index_t id = -1;
    for (index_t i = 0; i < windows; ++i) {
      const index_t p = order[static_cast<std::size_t>(i)];
      const bool same = i > 0 && name[static_cast<std::size_t>(p)] == name[static_cast<std::size_t>(order[static_cast<std::size_t>(i - 1)])] &&
                        name[static_cast<std::size_t>(p + shift)] == name[static_cast<std::size_t>(order[static_cast<std::size_t>(i - 1)] + shift)];
      next[static_cast<std::size_t>(p)] = same ? id : ++id;
    }
    name = std::move(next);
    names = id + 1;
  };
  index_t width = 1;
  for (; width <= length / 2; width *= 2) combine(width, width);
  if (width < length) combine(width, length - width);
  name.resize(static_cast<std::size_t>(n - length + 1));
  return name;
}

/// A continuation as the window's tokens [first, first + size).
struct continuation_span {
  index_t first = 0;
  index_t size = 0;
};

/// ngram_continuations as spans of `window`, without copying a token. Only full-length continuations
/// can repeat one another: a shorter one ends at the window's end, and those grow by one token per
/// earlier occurrence. So a candidate is compared by its window class (window_classes), built only
/// when a second full-length one must be told apart from the first.
/// `agree` is suffix_agreement(window), which a caller that also wants the match length computes once.
inline std::vector<continuation_span> continuation_spans(std::span<const std::int32_t> window, const std::vector<index_t>& agree,
                                                         index_t length, const ngram_options& options) {
  std::vector<continuation_span> out;
  if (length == 0) return out;
  const auto n = static_cast<index_t>(window.size());
  const index_t g = match_length(agree, options);
  if (g == 0) return out;
  std::vector<index_t> classes;
  std::unordered_set<index_t> kept;
  index_t first_full = -1;
  // Occurrences of the suffix that end before the last token, most recent first; each is followed by
  // at least one token, so none is empty. The occurrence at `start` ends at n - 1 - k, k = n - g - start.
  for (index_t start = n - g - 1; start >= 0 && static_cast<index_t>(out.size()) < options.branches; --start) {
    if (agree[static_cast<std::size_t>(n - g - start)] < g) continue;
    const index_t first = start + g, size = std::min(length, n - first);
    if (size == length) {
      if (first_full < 0) {
        first_full = first;
      } else {
        if (classes.empty()) {
          classes = window_classes(window, length);
          kept.insert(classes[static_cast<std::size_t>(first_full)]);
        }
        if (!kept.insert(classes[static_cast<std::size_t>(first)]).second) continue;
      }
    }
    out.push_back({first, size});
  }
  return out;
}
inline std::vector<continuation_span> continuation_spans(std::span<const std::int32_t> window, index_t length,
                                                         const ngram_options& options) {
  return length == 0 ? std::vector<continuation_span>{} : continuation_spans(window, suffix_agreement(window), length, options);
}

/// The trie of `count` continuations (`at(c)` a span of tokens) under `root`, in level order: nodes
/// numbered as inserted, children found by (parent, token) in a hash map (at most one node carries a
/// pair, so it is the first one a scan would find), and once a continuation leaves the trie its later
/// tokens only append. Then a stable counting sort by depth.
template <class At>
draft_tree continuation_trie(std::int32_t root, std::size_t count, At at, const char* where) {
  std::vector<std::int32_t> tokens = {root}, parents = {-1}, depth = {0};
  std::unordered_map<std::uint64_t, std::int32_t> children;
  const auto key = [](std::int32_t parent, std::int32_t token) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(parent)) << 32) | static_cast<std::uint32_t>(token);
  };
  for (std::size_t c = 0; c < count; ++c) {
    const std::span<const std::int32_t> continuation = at(c);
    std::int32_t node = 0;
    bool fresh = false;
    for (const std::int32_t token : continuation) {
      if (!fresh) {
        const auto it = children.find(key(node, token));
        if (it != children.end()) {
          node = it->second;
          continue;
        }
        fresh = true;
      }
      SPECDEC_EXPECTS(tokens.size() < static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()), where,
                      "the continuations make more than 2^31 - 1 tree nodes; expected int32 node ids");
      const auto child = static_cast<std::int32_t>(tokens.size());
      tokens.push_back(token);
      parents.push_back(node);
      depth.push_back(depth[static_cast<std::size_t>(node)] + 1);
      children.emplace(key(node, token), child);
      node = child;
    }
  }
  // Insertion order puts parents first but interleaves depths; bucketing by depth in insertion order
  // is the stable sort by depth, so level order keeps the continuations' order within a level.
  const std::int32_t deepest = *std::max_element(depth.begin(), depth.end());
  std::vector<std::size_t> next(static_cast<std::size_t>(deepest) + 2, 0);
  for (const std::int32_t d : depth) ++next[static_cast<std::size_t>(d) + 1];
  for (std::size_t d = 1; d < next.size(); ++d) next[d] += next[d - 1];
  std::vector<std::int32_t> order(tokens.size()), position(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::size_t at_level = next[static_cast<std::size_t>(depth[i])]++;
    order[at_level] = static_cast<std::int32_t>(i);
    position[i] = static_cast<std::int32_t>(at_level);
  }
  std::vector<std::int32_t> level_tokens(tokens.size()), level_parents(tokens.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    const auto o = static_cast<std::size_t>(order[i]);
    level_tokens[i] = tokens[o];
    level_parents[i] = o == 0 ? -1 : position[static_cast<std::size_t>(parents[o])];
  }
  return make_tree(std::move(level_tokens), level_parents);
}
}  // namespace detail

/// How long a suffix of the history prompt lookup would match: the longest g in [min_ngram,
/// max_ngram] such that the last g tokens occurred earlier; 0 when nothing matches (no draft). What a
/// drafter knows of a draft's quality before verifying it (long matches are copied text): pass it, in
/// buckets, as draft_length_policy's context. Host memory; O(history), whatever max_ngram.
/// \param history host: the committed tokens, the last one the next draft's root.
/// \throws invalid_argument on options out of range or a negative token in the searched history.
inline index_t ngram_match_length(std::span<const std::int32_t> history, const ngram_options& options = {}) {
  return detail::longest_match(detail::ngram_window(history, options, "specdec::ngram_match_length"), options);
}

/// Continuations of the history's suffix: for the longest suffix length g in [min_ngram, max_ngram] that
/// occurred earlier (ngram_match_length), the up to `length` tokens after each earlier occurrence, the
/// most recent occurrence first, distinct ones only, at most `branches` of them. Empty when nothing
/// matches. The result holds up to branches x length tokens; propose_ngram builds its tree without it.
/// \param history host: the committed tokens (prompt and generated), the last one the draft's root.
/// \throws invalid_argument on length < 0, options out of range, or a negative token in the searched
///   part of the history.
inline std::vector<std::vector<std::int32_t>> ngram_continuations(std::span<const std::int32_t> history, index_t length,
                                                                   const ngram_options& options = {}) {
  constexpr const char* where = "specdec::ngram_continuations";
  SPECDEC_EXPECTS(length >= 0, where, "length = ", length, "; expected >= 0");
  history = detail::ngram_window(history, options, where);
  std::vector<std::vector<std::int32_t>> out;
  for (const auto& c : detail::continuation_spans(history, length, options))
    out.emplace_back(history.begin() + c.first, history.begin() + c.first + c.size);
  return out;
}

/// Merges continuations into a draft tree rooted at `root` (a trie: shared prefixes become shared
/// nodes), in specdec's breadth-first order; within a level, nodes keep the order in which the
/// continuations introduced them (most recent match first). No continuations: the root alone.
/// O(total continuation length).
/// \throws invalid_argument on a negative token.
inline draft_tree continuation_tree(std::int32_t root, const std::vector<std::vector<std::int32_t>>& continuations) {
  return detail::continuation_trie(root, continuations.size(),
                                   [&](std::size_t c) { return std::span<const std::int32_t>(continuations[c]); },
                                   "specdec::continuation_tree");
}

/// The prompt-lookup draft for the next step: continuation_tree(history.back(), ngram_continuations(...)),
/// built without copying the continuations. A chain when `branches` is 1; the root alone when nothing
/// matches or `length` is 0. At most `branches` x `length` draft nodes (shared prefixes share nodes),
/// depth at most `length`.
/// \throws invalid_argument on an empty history, and as ngram_continuations.
inline draft_tree propose_ngram(std::span<const std::int32_t> history, index_t length, const ngram_options& options = {}) {
  constexpr const char* where = "specdec::propose_ngram";
  SPECDEC_EXPECTS(!history.empty(), where, "history is empty; expected at least the committed token to draft from");
  SPECDEC_EXPECTS(length >= 0, where, "length = ", length, "; expected >= 0");
  const std::span<const std::int32_t> window = detail::ngram_window(history, options, where);
  const auto spans = detail::continuation_spans(window, length, options);
  return detail::continuation_trie(history.back(), spans.size(),
                                   [&](std::size_t c) { return window.subspan(static_cast<std::size_t>(spans[c].first),
                                                                              static_cast<std::size_t>(spans[c].size)); },
                                   where);
}

}  // namespace specdec
