// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief `suffix_cache<Token, RequestId>`, SuffixDecoding's two trees (Arctic Inference's
/// `SuffixDecodingCache`): one suffix tree per active request (prompt and response so far) and one
/// global tree of responses, evicted whole, oldest first, under a request and a token bound; and
/// `suffix_draft_tree`, a suffix draft in specdec's tree form for every verifier, mask layout and
/// engine adapter. Host memory, no backend.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include <specdec/core/error.hpp>
#include <specdec/tree/suffix_tree.hpp>
#include <specdec/tree/tree.hpp>

namespace specdec {

/// Bounds of a suffix_cache. Defaults are vLLM's (`suffix_decoding_max_tree_depth` 24,
/// `_max_cached_requests` 10000) plus a token bound, so that a long-running engine's memory stays
/// bounded (Arctic Inference's cache has no token bound; -1 turns it off):
/// - `max_depth`: depth of every tree (the longest match plus draft), 1 .. 65536;
/// - `max_cached_requests`: responses kept in the global tree (-1: unlimited; 0: no global tree);
/// - `max_cached_tokens`: tokens kept in the global tree (-1: unlimited), oldest responses evicted
///   first; the request being extended goes last, when it alone exceeds the bound.
struct suffix_cache_options {
  index_t max_depth = 24;
  index_t max_cached_requests = 10000;
  index_t max_cached_tokens = index_t{1} << 22;
};

/// SuffixDecoding's two trees, as Arctic Inference's `SuffixDecodingCache`: each active request has a
/// tree of its own tokens (prompt, then response), and the global tree holds responses (one sequence
/// per request, cached from start_request on, kept after stop_request until evicted oldest-first by
/// start_request order). speculate drafts from both and keeps the higher score, the request's own on
/// ties. Host memory; not thread-safe (one cache per engine thread, or a lock). Copyable.
///
/// Typical use per request: start_request(id, prompt); per step, add_active_response(id, tokens just
/// accepted) and speculate(id, committed tokens); stop_request(id) when it ends.
template <class Token = std::int32_t, class RequestId = std::uint64_t>
class suffix_cache {
 public:
  /// \throws invalid_argument on a bound out of range.
  explicit suffix_cache(const suffix_cache_options& options = {})
      : options_(checked(options)), global_(options.max_depth) {}

  const suffix_cache_options& options() const noexcept { return options_; }
  const suffix_tree<Token>& global_tree() const noexcept { return global_; }
  bool active(const RequestId& id) const { return local_.count(id) != 0; }
  bool cached(const RequestId& id) const { return cached_.count(id) != 0; }
  index_t active_requests() const noexcept { return static_cast<index_t>(local_.size()); }
  index_t cached_requests() const noexcept { return static_cast<index_t>(cached_.size()); }

  /// Starts request `id` with its prompt (its own tree), and unless max_cached_requests is 0 gives
  /// its response a fresh sequence in the global tree (an earlier response of the same id is evicted
  /// first), evicting the oldest cached responses beyond the bounds.
  /// \throws invalid_argument when `id` is already active.
  void start_request(const RequestId& id, std::span<const Token> prompt) {
    SPECDEC_EXPECTS(!active(id), "specdec::suffix_cache::start_request", "the request is already active; expected a new "
                    "request id (or stop_request first)");
    suffix_tree<Token>& local = local_.emplace(id, suffix_tree<Token>(options_.max_depth)).first->second;
    local.extend(0, prompt);
    if (options_.max_cached_requests == 0) return;
    if (cached(id)) evict_cached_response(id);
    cache_response(id);
  }

  /// Ends request `id`: drops its own tree; its response stays in the global tree until evicted.
  /// \throws invalid_argument when `id` is not active.
  void stop_request(const RequestId& id) {
    SPECDEC_EXPECTS(active(id), "specdec::suffix_cache::stop_request", "the request is not active; expected a started one");
    local_.erase(id);
  }

  /// Appends `tokens` (newly accepted) to request `id`'s own tree and, while it is cached, to its
  /// response in the global tree (evicting the oldest responses beyond max_cached_tokens).
  /// \throws invalid_argument when `id` is not active.
  void add_active_response(const RequestId& id, std::span<const Token> tokens) {
    const auto found = local_.find(id);
    SPECDEC_EXPECTS(found != local_.end(), "specdec::suffix_cache::add_active_response",
                    "the request is not active; expected a started one");
    found->second.extend(0, tokens);
    const auto entry = cached_.find(id);
    if (entry == cached_.end()) return;
    global_.extend(entry->second.sequence, tokens);
    if (options_.max_cached_tokens < 0) return;
    while (global_.tokens() > options_.max_cached_tokens && !fifo_.empty()) {
      auto oldest = fifo_.begin();
      if (oldest->second == id && fifo_.size() > 1) ++oldest;
      evict_cached_response(RequestId(oldest->second));
    }
  }

  /// Removes request `id`'s response from the global tree.
  /// \throws invalid_argument when it is not cached.
  void evict_cached_response(const RequestId& id) {
    const auto entry = cached_.find(id);
    SPECDEC_EXPECTS(entry != cached_.end(), "specdec::suffix_cache::evict_cached_response",
                    "the request's response is not cached; expected a cached one");
    const std::int32_t sequence = entry->second.sequence;
    fifo_.erase(entry->second.order);
    request_of_.erase(sequence);
    cached_.erase(entry);
    global_.remove(sequence);
  }

  /// The draft after `context` (request `id`'s committed tokens; only the last max_depth are used):
  /// suffix_tree::speculate on the request's tree and on the global tree, the request's draft unless
  /// the global one scores higher.
  /// \throws invalid_argument when `id` is not active, or on options out of range.
  suffix_draft<Token> speculate(const RequestId& id, std::span<const Token> context, const suffix_options& options = {}) const {
    const auto found = local_.find(id);
    SPECDEC_EXPECTS(found != local_.end(), "specdec::suffix_cache::speculate", "the request is not active; expected a "
                    "started one");
    if (static_cast<index_t>(context.size()) > options_.max_depth)
      context = context.subspan(context.size() - static_cast<std::size_t>(options_.max_depth));
    suffix_draft<Token> own = found->second.speculate(context, options);
    suffix_draft<Token> shared = global_.speculate(context, options);
    return own.score >= shared.score ? own : shared;
  }

  /// Bytes held by the trees (suffix_tree::memory_bytes) and the bookkeeping.
  std::size_t memory_bytes() const noexcept {
    std::size_t total = global_.memory_bytes() + cached_.size() * (sizeof(RequestId) + 4 * sizeof(void*) + 16);
    for (const auto& [id, tree] : local_) total += tree.memory_bytes() + sizeof(RequestId) + 2 * sizeof(void*);
    return total;
  }

 private:
  static const suffix_cache_options& checked(const suffix_cache_options& options) {
    constexpr const char* where = "specdec::suffix_cache";
    SPECDEC_EXPECTS(options.max_cached_requests >= -1 && options.max_cached_requests <= (index_t{1} << 31), where,
                    "max_cached_requests = ", options.max_cached_requests, "; expected -1 (unlimited), 0 (no global tree) "
                    "or at most 2^31");
    SPECDEC_EXPECTS(options.max_cached_tokens >= -1, where, "max_cached_tokens = ", options.max_cached_tokens,
                    "; expected -1 (unlimited) or a bound >= 0");
    return options;  // max_depth: checked by the global tree's constructor
  }

  /// Gives `id`'s response a global sequence: the next id of a counter modulo 2^31, skipping ids whose
  /// holder is still active and taking over an inactive holder's (Arctic Inference's allocation).
  void cache_response(const RequestId& id) {
    std::int32_t sequence;
    for (;;) {
      sequence = next_sequence_;
      next_sequence_ = (next_sequence_ + 1) & 0x7FFFFFFF;
      const auto holder = request_of_.find(sequence);
      if (holder == request_of_.end() || !active(holder->second)) break;
    }
    if (const auto holder = request_of_.find(sequence); holder != request_of_.end())
      evict_cached_response(RequestId(holder->second));
    cached_.emplace(id, entry{sequence, next_order_});
    fifo_.emplace(next_order_++, id);
    request_of_.emplace(sequence, id);
    if (options_.max_cached_requests < 0) return;
    while (static_cast<index_t>(cached_.size()) > options_.max_cached_requests) {
      auto oldest = fifo_.begin();
      if (cached_.at(oldest->second).sequence == sequence) ++oldest;
      evict_cached_response(RequestId(oldest->second));
    }
  }

  struct entry {
    std::int32_t sequence;
    std::uint64_t order;
  };
  suffix_cache_options options_;
  suffix_tree<Token> global_;
  std::unordered_map<RequestId, suffix_tree<Token>> local_;
  std::unordered_map<RequestId, entry> cached_;
  std::map<std::uint64_t, RequestId> fifo_;  // cached requests by start_request order
  std::unordered_map<std::int32_t, RequestId> request_of_;
  std::int32_t next_sequence_ = 0;
  std::uint64_t next_order_ = 0;
};

/// A suffix draft as a specdec draft tree rooted at `root` (the last committed token, node 0):
/// breadth-first, each level in the draft's order; score[i] = the node's probability (0 for the
/// root). The root alone for an empty draft.
/// \throws invalid_argument on a negative token or malformed parents.
template <class Token>
draft_tree suffix_draft_tree(std::int32_t root, const suffix_draft<Token>& draft) {
  constexpr const char* where = "specdec::suffix_draft_tree";
  const std::size_t n = draft.token.size();
  SPECDEC_EXPECTS(draft.parent.size() == n && draft.prob.size() == n, where, "the draft has ", n, " tokens, ",
                  draft.parent.size(), " parents and ", draft.prob.size(), " probabilities; expected one of each per node");
  std::vector<std::int32_t> depth(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int32_t p = draft.parent[i];
    SPECDEC_EXPECTS(p >= -1 && p < static_cast<std::int32_t>(i), where, "node ", i, " has parent ", p,
                    "; expected -1 or an earlier node");
    SPECDEC_EXPECTS(draft.token[i] >= 0 && static_cast<std::uint64_t>(draft.token[i]) <= 0x7FFFFFFFu, where, "node ", i,
                    " has token ", draft.token[i], "; expected a token id in [0, 2^31)");
    depth[i] = p < 0 ? 1 : depth[static_cast<std::size_t>(p)] + 1;
  }
  // Stable order by depth: level order that keeps the draft's order within a level.
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return depth[a] < depth[b]; });
  std::vector<std::int32_t> position(n);
  for (std::size_t k = 0; k < n; ++k) position[order[k]] = static_cast<std::int32_t>(k + 1);
  std::vector<std::int32_t> tokens{root}, parents{-1};
  std::vector<float> scores{0.0f};
  for (const std::size_t i : order) {
    tokens.push_back(static_cast<std::int32_t>(draft.token[i]));
    parents.push_back(draft.parent[i] < 0 ? 0 : position[static_cast<std::size_t>(draft.parent[i])]);
    scores.push_back(draft.prob[i]);
  }
  draft_tree tree = make_tree(std::move(tokens), parents);
  tree.score = std::move(scores);
  return tree;
}

}  // namespace specdec
