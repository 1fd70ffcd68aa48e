// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief `suffix_tree<Token>`, SuffixDecoding's data structure (Arctic Inference's `SuffixTree`): every
/// suffix of every stored sequence, cut to `max_depth` tokens, with per-node occurrence counts, path
/// compression and siblings kept in count order; append is O(max_depth) node steps per token whatever
/// has been stored, remove is O(length x max_depth); `speculate` drafts from the longest suffix match.
/// Also `suffix_options` (how to draft) and `suffix_draft` (a draft in Arctic Inference's form). The
/// request and global trees of SuffixDecoding are `suffix_cache` (tree/suffix_cache.hpp). Host memory,
/// no backend.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>
#include <specdec/tree/detail/suffix_tables.hpp>

namespace specdec {

/// How a suffix tree drafts (Arctic Inference's `speculate` arguments, its defaults):
/// - `max_spec_tokens`: the most draft tokens (>= 0);
/// - `max_spec_factor`, `max_spec_offset`: a match of m tokens drafts at most
///   `int(m x factor + offset)` tokens (long matches are copied text, worth long drafts);
/// - `min_token_prob`: continuations whose empirical probability (child count / parent count,
///   multiplied along the path) falls below it are not drafted;
/// - `tree`: false drafts one path, always the most frequent child (vLLM's mode); true grows a tree
///   best-first by probability.
struct suffix_options {
  index_t max_spec_tokens = 24;
  float max_spec_factor = 1.0f;
  float max_spec_offset = 0.0f;
  float min_token_prob = 0.1f;
  bool tree = false;
};

/// A suffix draft in Arctic Inference's form. `token[i]`'s parent is `token[parent[i]]`, -1 for a child
/// of the matched context (the last committed token); parents come before children, in the order
/// drafted (best-first in tree mode, not level order). `prob[i]`: the node's empirical probability;
/// `score`: their float32 sum in that order, the expected number of accepted tokens; `match_length`:
/// how many context tokens matched (0: none).
template <class Token = std::int32_t>
struct suffix_draft {
  std::vector<Token> token = {};
  std::vector<std::int32_t> parent = {};
  std::vector<float> prob = {};
  float score = 0.0f;
  index_t match_length = 0;

  index_t size() const noexcept { return static_cast<index_t>(token.size()); }
};

namespace detail {

inline void check_suffix_options(const suffix_options& options, const char* where) {
  SPECDEC_EXPECTS(options.max_spec_tokens >= 0 && options.max_spec_tokens <= (index_t{1} << 24), where,
                  "max_spec_tokens = ", options.max_spec_tokens, "; expected 0 <= max_spec_tokens <= 2^24");
  SPECDEC_EXPECTS(std::isfinite(options.max_spec_factor), where, "max_spec_factor = ", options.max_spec_factor,
                  "; expected a finite number");
  SPECDEC_EXPECTS(std::isfinite(options.max_spec_offset), where, "max_spec_offset = ", options.max_spec_offset,
                  "; expected a finite number");
  SPECDEC_EXPECTS(std::isfinite(options.min_token_prob), where, "min_token_prob = ", options.min_token_prob,
                  "; expected a finite number");
}

}  // namespace detail

/// A suffix tree over sequences of tokens, bounded in depth, as Arctic Inference's `SuffixTree`.
///
/// Every suffix of every stored sequence is indexed, cut to `max_depth` tokens. A node holds a run of
/// tokens (path compression: the run is a slice of one stored sequence) and `count`, the number of
/// occurrences of the string from the root to it (suffixes passing through or ending there; the
/// root's count is the number of stored tokens). A node's children are kept in non-increasing count
/// order; among equal counts the order is the history of the counts (a child reaching a count goes to
/// the front of that count's run if it was first of its old run, else to the back; one falling to a
/// count goes to the front), which is what `speculate` follows. Sequences are named by int32 ids >= 0.
/// Copyable (plain arrays, no pointers), so an engine can snapshot a cache.
///
/// `Token`: an integral type (token ids; any values, negative included).
template <class Token = std::int32_t>
class suffix_tree {
  static_assert(std::is_integral_v<Token>, "suffix_tree: Token must be an integral type");

 public:
  /// Most node indices (int32) and most tokens of one sequence.
  static constexpr index_t max_nodes = (index_t{1} << 31) - 2;
  static constexpr index_t max_sequence_length = (index_t{1} << 31) - 2;

  /// \throws invalid_argument unless 1 <= max_depth <= 2^16.
  explicit suffix_tree(index_t max_depth) : max_depth_(max_depth) {
    SPECDEC_EXPECTS(max_depth >= 1 && max_depth <= (index_t{1} << 16), "specdec::suffix_tree", "max_depth = ", max_depth,
                    "; expected 1 <= max_depth <= 65536");
    nodes_.push_back(node{});  // the root, node 0: no tokens, its count the stored token count
  }

  index_t max_depth() const noexcept { return max_depth_; }
  /// Number of stored sequences.
  index_t sequences() const noexcept { return static_cast<index_t>(slot_of_.size()); }
  /// Number of stored tokens, over all sequences.
  index_t tokens() const noexcept { return nodes_[0].count; }
  /// Number of tree nodes, the root included.
  index_t nodes() const noexcept { return static_cast<index_t>(nodes_.size() - free_nodes_.size()); }
  /// Whether sequence `id` is stored.
  bool contains(std::int32_t id) const { return slot_of_.count(id) != 0; }
  /// The tokens stored for sequence `id` (empty when there is none).
  std::span<const Token> sequence(std::int32_t id) const {
    const auto it = slot_of_.find(id);
    return it == slot_of_.end() ? std::span<const Token>() : std::span<const Token>(slots_[it->second].tokens);
  }

  /// Appends one token to sequence `id` (created on first use): O(max_depth) node steps.
  /// \throws invalid_argument on a negative id or a sequence or tree past its size limit.
  void append(std::int32_t id, Token token) {
    const std::int32_t s = slot_for(id, "specdec::suffix_tree::append");
    append_to_slot(s, token);
  }

  /// Appends `tokens` to sequence `id`, one by one (an empty span creates nothing).
  /// \throws invalid_argument as append.
  void extend(std::int32_t id, std::span<const Token> tokens) {
    if (tokens.empty()) return;
    const std::int32_t s = slot_for(id, "specdec::suffix_tree::extend");
    for (const Token t : tokens) append_to_slot(s, t);
  }

  /// Removes sequence `id` and every suffix of it; nothing when it is not stored.
  /// O(length x max_depth).
  void remove(std::int32_t id) {
    const auto found = slot_of_.find(id);
    if (found == slot_of_.end()) return;
    const std::int32_t s = found->second;
    remove_slot(s);
    slot_of_.erase(found);
    sequence_slot& q = slots_[static_cast<std::size_t>(s)];
    q = sequence_slot{};
    free_slots_.push_back(s);
  }

  /// The draft for `context` (the committed tokens, the last one the draft's root's token): for every
  /// match length m = 1 .. size - 1, shortest first, the last m context tokens are looked up from the
  /// root (stopping at the first that does not occur); each drafts at most
  /// min(max_spec_tokens, int(m x factor + offset)) tokens (a path or a tree, see suffix_options), and
  /// the draft with the highest score wins, the longer match on ties. Empty (match_length 0) when the
  /// context has fewer than two tokens. O(size^2) for the matches plus O(draft) each.
  /// \throws invalid_argument on options out of range (non-finite numbers, a negative token cap).
  suffix_draft<Token> speculate(std::span<const Token> context, const suffix_options& options = {}) const {
    detail::check_suffix_options(options, "specdec::suffix_tree::speculate");
    suffix_draft<Token> best;
    for (std::size_t m = 1; m < context.size(); ++m) {
      const auto [n, at] = match(context.subspan(context.size() - m));
      if (n < 0) break;
      const index_t cap = draft_cap(static_cast<index_t>(m), options);
      suffix_draft<Token> draft = options.tree ? speculate_tree(n, at, cap, options.min_token_prob)
                                               : speculate_path(n, at, cap, options.min_token_prob);
      if (draft.score >= best.score) {
        best = std::move(draft);
        best.match_length = static_cast<index_t>(m);
      }
    }
    return best;
  }

  /// Checks every invariant (counts = occurrences, sibling order and runs, node slices, endpoints):
  /// an empty string when the tree is consistent, else the first violation. O(stored tokens x
  /// max_depth); for tests and fuzzing.
  std::string check_integrity() const;

  /// Bytes the tree occupies: the object itself and the capacity (not the size) of every array and
  /// table it holds, the sequence-id map's nodes and buckets included; not the allocator's overhead.
  std::size_t memory_bytes() const noexcept {
    std::size_t total = sizeof(*this) + nodes_.capacity() * sizeof(node) + groups_.capacity() * sizeof(group) +
                        endpoints_.capacity() * sizeof(endpoint) + children_.memory_bytes() +
                        endpoint_index_.memory_bytes() + slots_.capacity() * sizeof(sequence_slot) +
                        (free_nodes_.capacity() + free_groups_.capacity() + free_endpoints_.capacity() +
                         free_slots_.capacity()) * sizeof(std::int32_t) +
                        slot_of_.size() * (sizeof(std::pair<std::int32_t, std::int32_t>) + 2 * sizeof(void*)) +
                        slot_of_.bucket_count() * sizeof(void*);
    for (const sequence_slot& q : slots_)
      total += q.tokens.capacity() * sizeof(Token) + q.active.capacity() * sizeof(std::int32_t);
    return total;
  }

 private:
  static constexpr std::int32_t none = -1;

  struct node {
    std::int64_t count = 0;
    Token token{};                   // the first token of the node's run (its key in the parent)
    std::int32_t length = 0;         // tokens in the run
    std::int32_t ref_slot = none;    // the run is slots_[ref_slot].tokens[ref_index, ref_index + length),
    std::int32_t ref_index = none;   // an occurrence of the whole root-to-node string
    std::int32_t parent = none;
    std::int32_t head_child = none, tail_child = none;
    std::int32_t prev_sibling = none, next_sibling = none;
    std::int32_t group = none;       // the run of equal-count siblings the node belongs to
    std::int32_t children = 0;
    std::int32_t endpoints = none;   // head of the node's endpoint list
    std::int32_t endpoint_count = 0;
  };
  /// A run of equal-count siblings: its first node, the neighbouring runs, and how many nodes still
  /// name it (a node keeps its run while it is moved, as Arctic Inference's shared group does).
  struct group {
    std::int32_t head = none, prev = none, next = none, members = 0;
  };
  /// A suffix of sequence `slot` ending at `node`, at `end` (exclusive) in the sequence; a node's
  /// endpoints form a doubly linked list, scanned when short (nearly every node holds one or two) and
  /// indexed by (node, slot) in a table once longer than `scanned_endpoints` (a string many cached
  /// responses end with), so that a lookup costs O(1) either way without a table probe per node.
  struct endpoint {
    std::int32_t node = none, slot = none, end = 0, prev = none, next = none;
  };
  struct sequence_slot {
    std::vector<Token> tokens = {};
    std::vector<std::int32_t> active = {};  // ring of the nodes where the last max_depth suffixes end
    std::size_t active_first = 0;
    std::int32_t id = none;
  };

  node& at(std::int32_t n) noexcept { return nodes_[static_cast<std::size_t>(n)]; }
  const node& at(std::int32_t n) const noexcept { return nodes_[static_cast<std::size_t>(n)]; }
  group& grp(std::int32_t g) noexcept { return groups_[static_cast<std::size_t>(g)]; }
  const Token* run(const node& n) const noexcept {
    return slots_[static_cast<std::size_t>(n.ref_slot)].tokens.data() + n.ref_index;
  }
  std::int32_t child(std::int32_t n, Token t) const noexcept { return children_.find(n, t); }

  std::int32_t slot_for(std::int32_t id, const char* where) {
    SPECDEC_EXPECTS(id >= 0, where, "sequence id ", id, "; expected an id >= 0");
    const auto found = slot_of_.find(id);
    if (found != slot_of_.end()) return found->second;
    std::int32_t s;
    if (!free_slots_.empty()) {
      s = free_slots_.back();
      free_slots_.pop_back();
    } else {
      SPECDEC_EXPECTS(slots_.size() < static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()), where,
                      "more than 2^31 - 1 sequences; expected fewer");
      s = static_cast<std::int32_t>(slots_.size());
      slots_.emplace_back();
    }
    sequence_slot& q = slots_[static_cast<std::size_t>(s)];
    q.id = id;
    q.active.assign(static_cast<std::size_t>(max_depth_), none);
    q.active_first = 0;
    slot_of_.emplace(id, s);
    return s;
  }

  // ---- node, group and endpoint storage -------------------------------------------------------
  std::int32_t new_node(std::int64_t count, Token token, std::int32_t length, std::int32_t slot, std::int32_t index,
                        std::int32_t parent) {
    node n;
    n.count = count, n.token = token, n.length = length, n.ref_slot = slot, n.ref_index = index, n.parent = parent;
    if (!free_nodes_.empty()) {
      const std::int32_t i = free_nodes_.back();
      free_nodes_.pop_back();
      at(i) = n;
      return i;
    }
    SPECDEC_EXPECTS(static_cast<index_t>(nodes_.size()) < max_nodes, "specdec::suffix_tree::append",
                    "the tree would need more than 2^31 - 2 nodes; expected fewer (remove sequences)");
    nodes_.push_back(n);
    return static_cast<std::int32_t>(nodes_.size() - 1);
  }
  std::int32_t new_group(std::int32_t head);
  /// The node stops naming its run; the run is freed when no node names it.
  void leave_group(std::int32_t n) noexcept;
  void join_group(std::int32_t n, std::int32_t g) noexcept;
  void own_new_group(std::int32_t n);

  static constexpr std::int32_t scanned_endpoints = 8;
  std::int32_t find_endpoint(std::int32_t n, std::int32_t slot) const noexcept;
  void set_endpoint(std::int32_t n, std::int32_t slot, std::int32_t end);
  void erase_endpoint(std::int32_t n, std::int32_t slot) noexcept;
  /// Frees a node, its subtree, their endpoints and child-table entries (its parent's entry and the
  /// sibling list are the caller's).
  void free_subtree(std::int32_t root);

  // ---- sibling list and count runs (Arctic Inference's order, see the class comment) -----------
  void unlink_sibling(std::int32_t n) noexcept;
  /// Gives a node placed between two runs a run of its own (reusing the one it kept when unlinked).
  void own_run_between(std::int32_t n, std::int32_t prev_run, std::int32_t next_run);
  void link_before(std::int32_t n, std::int32_t other);
  void link_after(std::int32_t n, std::int32_t other);
  /// `fresh` takes `old`'s place in the sibling list and its run (equal counts).
  void replace_sibling(std::int32_t old, std::int32_t fresh);
  void increment(std::int32_t n);
  void decrement(std::int32_t n);

  // ---- append ------------------------------------------------------------------------------------
  void append_to_slot(std::int32_t s, Token token);

  /// Extends the suffix of sequence slot `s` that ends at node `n` by `token` (the sequence now has
  /// `length` tokens); returns the node where it ends now.
  std::int32_t extend_suffix(std::int32_t n, std::int32_t s, Token token, std::int32_t length);

  // ---- remove ------------------------------------------------------------------------------------
  void remove_slot(std::int32_t s);
  /// Nodes of `path` whose slice lies in the sequence being removed (slot `s`) take a slice of
  /// another occurrence, read off a leaf below the path's last node `n`; when that leaf is still
  /// reached by a suffix of `s`, a later suffix of `s` revisits the path.
  void repoint(std::vector<std::int32_t>& path, std::int32_t n, std::int32_t s);

  // ---- speculate ---------------------------------------------------------------------------------
  /// The node and offset in it where `context` ends when read from the root; node -1 when it does
  /// not occur.
  std::pair<std::int32_t, std::int32_t> match(std::span<const Token> context) const noexcept;

  /// min(max_spec_tokens, int(m x factor + offset + 1e-6)), at least 0, with Arctic Inference's
  /// rounding: the product and the sum in float (kept apart so no compiler fuses them), the 1e-6 in
  /// double, truncation toward zero.
  static index_t draft_cap(index_t m, const suffix_options& options) noexcept;

  suffix_draft<Token> speculate_path(std::int32_t n, std::int32_t offset, index_t cap, float min_prob) const;

  struct heap_item {
    float prob;
    std::int32_t node, offset, parent;
  };
  suffix_draft<Token> speculate_tree(std::int32_t n, std::int32_t offset, index_t cap, float min_prob) const;

  index_t max_depth_;
  std::vector<node> nodes_;
  std::vector<group> groups_;
  std::vector<endpoint> endpoints_;
  std::vector<std::int32_t> free_nodes_, free_groups_, free_endpoints_, free_slots_;
  detail::pair_index<Token> children_;
  detail::pair_index<std::int32_t> endpoint_index_;  // (node, slot) -> endpoint record
  std::vector<sequence_slot> slots_;
  std::unordered_map<std::int32_t, std::int32_t> slot_of_;  // sequence id -> slot
};

}  // namespace specdec

// The member functions' definitions: how the tree is updated, how it drafts, its invariants.
#include <specdec/tree/detail/suffix_tree_update.hpp>
#include <specdec/tree/detail/suffix_tree_draft.hpp>
#include <specdec/tree/detail/suffix_tree_check.hpp>
