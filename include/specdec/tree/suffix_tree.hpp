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

  /// Bytes held by the tree's arrays and tables (capacity, not size).
  std::size_t memory_bytes() const noexcept {
    std::size_t total = nodes_.capacity() * sizeof(node) + groups_.capacity() * sizeof(group) +
                        endpoints_.capacity() * sizeof(endpoint) + children_.memory_bytes() +
                        endpoint_index_.memory_bytes() + slots_.capacity() * sizeof(sequence_slot) +
                        (free_nodes_.capacity() + free_groups_.capacity() + free_endpoints_.capacity() +
                         free_slots_.capacity()) * sizeof(std::int32_t) +
                        slot_of_.size() * (sizeof(std::pair<std::int32_t, std::int32_t>) + 2 * sizeof(void*));
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
  std::int32_t new_group(std::int32_t head) {
    std::int32_t g;
    if (!free_groups_.empty()) {
      g = free_groups_.back();
      free_groups_.pop_back();
    } else {
      g = static_cast<std::int32_t>(groups_.size());
      groups_.emplace_back();
    }
    grp(g) = group{head, none, none, 0};
    return g;
  }
  /// The node stops naming its run; the run is freed when no node names it.
  void leave_group(std::int32_t n) noexcept {
    const std::int32_t g = at(n).group;
    if (g == none) return;
    at(n).group = none;
    if (--grp(g).members == 0) free_groups_.push_back(g);
  }
  void join_group(std::int32_t n, std::int32_t g) noexcept {
    if (at(n).group == g) return;
    leave_group(n);
    at(n).group = g;
    ++grp(g).members;
  }
  void own_new_group(std::int32_t n) {
    const std::int32_t g = new_group(n);
    leave_group(n);
    at(n).group = g;
    grp(g).members = 1;
  }

  static constexpr std::int32_t scanned_endpoints = 8;
  std::int32_t find_endpoint(std::int32_t n, std::int32_t slot) const noexcept {
    if (at(n).endpoint_count > scanned_endpoints) return endpoint_index_.find(n, slot);
    for (std::int32_t e = at(n).endpoints; e != none; e = endpoints_[static_cast<std::size_t>(e)].next)
      if (endpoints_[static_cast<std::size_t>(e)].slot == slot) return e;
    return none;
  }
  void set_endpoint(std::int32_t n, std::int32_t slot, std::int32_t end) {
    const std::int32_t e = find_endpoint(n, slot);
    if (e != none) {
      endpoints_[static_cast<std::size_t>(e)].end = end;
      return;
    }
    std::int32_t i;
    if (!free_endpoints_.empty()) {
      i = free_endpoints_.back();
      free_endpoints_.pop_back();
    } else {
      i = static_cast<std::int32_t>(endpoints_.size());
      endpoints_.emplace_back();
    }
    endpoints_[static_cast<std::size_t>(i)] = endpoint{n, slot, end, none, at(n).endpoints};
    if (at(n).endpoints != none) endpoints_[static_cast<std::size_t>(at(n).endpoints)].prev = i;
    at(n).endpoints = i;
    const std::int32_t count = ++at(n).endpoint_count;
    if (count == scanned_endpoints + 1) {  // the list becomes indexed
      for (std::int32_t r = at(n).endpoints; r != none; r = endpoints_[static_cast<std::size_t>(r)].next)
        endpoint_index_.set(n, endpoints_[static_cast<std::size_t>(r)].slot, r);
    } else if (count > scanned_endpoints + 1) {
      endpoint_index_.set(n, slot, i);
    }
  }
  void erase_endpoint(std::int32_t n, std::int32_t slot) noexcept {
    const std::int32_t e = find_endpoint(n, slot);
    if (e == none) return;
    endpoint& r = endpoints_[static_cast<std::size_t>(e)];
    if (r.prev != none) endpoints_[static_cast<std::size_t>(r.prev)].next = r.next;
    else at(n).endpoints = r.next;
    if (r.next != none) endpoints_[static_cast<std::size_t>(r.next)].prev = r.prev;
    const std::int32_t count = at(n).endpoint_count--;
    if (count > scanned_endpoints) endpoint_index_.erase(n, slot);
    if (count == scanned_endpoints + 1)  // back to a scanned list
      for (std::int32_t q = at(n).endpoints; q != none; q = endpoints_[static_cast<std::size_t>(q)].next)
        endpoint_index_.erase(n, endpoints_[static_cast<std::size_t>(q)].slot);
    r = endpoint{};
    free_endpoints_.push_back(e);
  }
  /// Frees a node, its subtree, their endpoints and child-table entries (its parent's entry and the
  /// sibling list are the caller's).
  void free_subtree(std::int32_t root) {
    std::vector<std::int32_t> stack{root};
    while (!stack.empty()) {
      const std::int32_t n = stack.back();
      stack.pop_back();
      for (std::int32_t c = at(n).head_child; c != none; c = at(c).next_sibling) {
        stack.push_back(c);
        children_.erase(n, at(c).token);
      }
      while (at(n).endpoints != none) erase_endpoint(n, endpoints_[static_cast<std::size_t>(at(n).endpoints)].slot);
      leave_group(n);
      at(n) = node{};
      free_nodes_.push_back(n);
    }
  }

  // ---- sibling list and count runs (Arctic Inference's order, see the class comment) -----------
  void unlink_sibling(std::int32_t n) noexcept {
    node& x = at(n);
    group& g = grp(x.group);
    if (g.head == n) {
      if (x.next_sibling != none && at(x.next_sibling).count == x.count) {
        g.head = x.next_sibling;
        leave_group(n);
      } else {  // the run's only node: the run leaves the run list, the node keeps it
        if (g.prev != none) grp(g.prev).next = g.next;
        if (g.next != none) grp(g.next).prev = g.prev;
        g.prev = g.next = none;
      }
    } else {
      leave_group(n);
    }
    if (x.next_sibling != none) at(x.next_sibling).prev_sibling = x.prev_sibling;
    else at(x.parent).tail_child = x.prev_sibling;
    if (x.prev_sibling != none) at(x.prev_sibling).next_sibling = x.next_sibling;
    else at(x.parent).head_child = x.next_sibling;
    x.prev_sibling = x.next_sibling = none;
  }
  /// Gives a node placed between two runs a run of its own (reusing the one it kept when unlinked).
  void own_run_between(std::int32_t n, std::int32_t prev_run, std::int32_t next_run) {
    if (at(n).group == none) own_new_group(n);
    group& g = grp(at(n).group);
    g.prev = prev_run, g.next = next_run;
    if (prev_run != none) grp(prev_run).next = at(n).group;
    if (next_run != none) grp(next_run).prev = at(n).group;
  }
  void link_before(std::int32_t n, std::int32_t other) {
    node& x = at(n);
    node& o = at(other);
    if (o.prev_sibling != none) at(o.prev_sibling).next_sibling = n;
    else at(x.parent).head_child = n;
    x.next_sibling = other;
    x.prev_sibling = o.prev_sibling;
    o.prev_sibling = n;
    const std::int32_t p = x.prev_sibling;
    if (p != none && x.count == at(p).count) {
      join_group(n, at(p).group);
    } else if (x.count == o.count) {
      join_group(n, o.group);
      grp(o.group).head = n;
    } else {
      own_run_between(n, p == none ? none : at(p).group, o.group);
    }
  }
  void link_after(std::int32_t n, std::int32_t other) {
    node& x = at(n);
    node& o = at(other);
    if (o.next_sibling != none) at(o.next_sibling).prev_sibling = n;
    else at(x.parent).tail_child = n;
    x.prev_sibling = other;
    x.next_sibling = o.next_sibling;
    o.next_sibling = n;
    const std::int32_t q = x.next_sibling;
    if (q != none && x.count == at(q).count) {
      const std::int32_t g = at(q).group;
      join_group(n, g);
      if (grp(g).head == q) grp(g).head = n;
    } else if (x.count == o.count) {
      join_group(n, o.group);
    } else {
      own_run_between(n, o.group, q == none ? none : at(q).group);
    }
  }
  /// `fresh` takes `old`'s place in the sibling list and its run (equal counts).
  void replace_sibling(std::int32_t old, std::int32_t fresh) {
    node& o = at(old);
    node& f = at(fresh);
    if (o.next_sibling != none) at(o.next_sibling).prev_sibling = fresh;
    else at(o.parent).tail_child = fresh;
    if (o.prev_sibling != none) at(o.prev_sibling).next_sibling = fresh;
    else at(o.parent).head_child = fresh;
    f.prev_sibling = o.prev_sibling;
    f.next_sibling = o.next_sibling;
    o.prev_sibling = o.next_sibling = none;
    const std::int32_t g = o.group;
    if (grp(g).head == old) grp(g).head = fresh;
    join_group(fresh, g);
    leave_group(old);
  }
  void increment(std::int32_t n) {
    node& x = at(n);
    if (x.parent == none) {
      ++x.count;
      return;
    }
    if (x.prev_sibling == none || at(x.prev_sibling).count > x.count + 1) {
      // Stays in place; leaves its run when a sibling after it shares the old count.
      if (x.next_sibling != none && at(x.next_sibling).count == x.count) {
        const std::int32_t old = x.group;
        grp(old).head = x.next_sibling;
        const std::int32_t g = new_group(n);
        grp(g).next = old;
        grp(g).prev = grp(old).prev;
        if (grp(g).prev != none) grp(grp(g).prev).next = g;
        grp(old).prev = g;
        leave_group(n);
        at(n).group = g;
        grp(g).members = 1;
      }
      ++at(n).count;
    } else {
      // Front of the run it reaches when it led its old run (the sibling before it has count + 1),
      // else the back of it: in front of the old run's first node.
      const std::int32_t before = grp(at(x.prev_sibling).group).head;
      unlink_sibling(n);
      ++at(n).count;
      link_before(n, before);
    }
  }
  void decrement(std::int32_t n) {
    node& x = at(n);
    if (x.parent == none) {
      --x.count;
      return;
    }
    if (x.next_sibling == none || at(x.next_sibling).count < x.count - 1) {
      if (x.prev_sibling != none && at(x.prev_sibling).count == x.count) {  // leaves its run, stays in place
        const std::int32_t old = x.group;
        const std::int32_t g = new_group(n);
        grp(g).prev = old;
        grp(g).next = grp(old).next;
        if (grp(g).next != none) grp(grp(g).next).prev = g;
        grp(old).next = g;
        leave_group(n);
        at(n).group = g;
        grp(g).members = 1;
      }
      --at(n).count;
    } else if (at(x.next_sibling).count == x.count - 1) {  // joins the next run at its front
      const std::int32_t next_run = at(x.next_sibling).group;
      grp(next_run).head = n;
      const std::int32_t g = x.group;
      if (grp(g).head == n) {
        if (grp(g).prev != none) grp(grp(g).prev).next = grp(g).next;
        grp(grp(g).next).prev = grp(g).prev;
      }
      join_group(n, next_run);
      --at(n).count;
    } else {  // moves behind its run, to the front of the run after it
      const std::int32_t after_run = grp(x.group).next;
      unlink_sibling(n);
      --at(n).count;
      if (after_run == none) link_after(n, at(at(n).parent).tail_child);
      else link_before(n, grp(after_run).head);
    }
  }

  // ---- append ------------------------------------------------------------------------------------
  void append_to_slot(std::int32_t s, Token token) {
    constexpr const char* where = "specdec::suffix_tree::append";
    {
      const sequence_slot& q = slots_[static_cast<std::size_t>(s)];
      SPECDEC_EXPECTS(static_cast<index_t>(q.tokens.size()) < max_sequence_length, where, "sequence ", q.id,
                      " would exceed 2^31 - 2 tokens; expected shorter sequences");
    }
    // The empty suffix at the sequence's end becomes active at the root; the oldest active suffix
    // leaves when max_depth are active (it has max_depth tokens, the depth bound).
    {
      sequence_slot& q = slots_[static_cast<std::size_t>(s)];
      const auto end = static_cast<std::int32_t>(q.tokens.size());
      const std::size_t depth = static_cast<std::size_t>(max_depth_);
      const std::size_t live = std::min(q.tokens.size(), depth);
      if (live == depth) q.active_first = (q.active_first + 1) % depth;
      q.active[(q.active_first + std::min(live, depth - 1)) % depth] = 0;
      set_endpoint(0, s, end);
      ++at(0).count;
      q.tokens.push_back(token);
    }
    const auto length = static_cast<std::int32_t>(slots_[static_cast<std::size_t>(s)].tokens.size());
    const std::size_t live = std::min(static_cast<std::size_t>(length), static_cast<std::size_t>(max_depth_));
    for (std::size_t k = 0; k < live; ++k) {
      sequence_slot& q = slots_[static_cast<std::size_t>(s)];
      std::int32_t& active = q.active[(q.active_first + k) % static_cast<std::size_t>(max_depth_)];
      active = extend_suffix(active, s, token, length);
    }
  }

  /// Extends the suffix of sequence slot `s` that ends at node `n` by `token` (the sequence now has
  /// `length` tokens); returns the node where it ends now.
  std::int32_t extend_suffix(std::int32_t n, std::int32_t s, Token token, std::int32_t length) {
    // A leaf has no child to find: no probe of the edge table (most active suffixes end at leaves).
    const std::int32_t c = at(n).children == 0 ? none : child(n, token);
    if (c == none) {
      if (at(n).count == 1 && n != 0) {  // a leaf only this suffix reaches: it grows
        ++at(n).length;
        set_endpoint(n, s, length);
        return n;
      }
      const std::int32_t leaf = new_node(1, token, 1, s, length - 1, n);
      set_endpoint(leaf, s, length);
      children_.set(n, token, leaf);
      ++at(n).children;
      erase_endpoint(n, s);
      if (at(n).children == 1) {
        at(n).head_child = at(n).tail_child = leaf;
        own_new_group(leaf);
      } else {
        link_after(leaf, at(n).tail_child);
      }
      return leaf;
    }
    if (n != 0 && at(n).count == at(c).count + 1) {
      // Every other occurrence through n continues into c: n and c would hold equal counts.
      if (at(c).length == 1) {  // c absorbs n
        node& y = at(c);
        y.count += 1;
        y.token = at(n).token;
        y.length = at(n).length + 1;
        y.ref_slot = s;
        y.ref_index = length - y.length;
        y.parent = at(n).parent;
        erase_endpoint(n, s);
        set_endpoint(c, s, length);
        replace_sibling(n, c);
        children_.erase(n, token);
        children_.set(y.parent, y.token, c);
        at(n).head_child = at(n).tail_child = none;
        at(n).children = 0;
        free_subtree(n);
        return c;
      }
      // n takes c's first token.
      ++at(n).length;
      set_endpoint(n, s, length);
      at(n).ref_slot = s;
      at(n).ref_index = length - at(n).length;
      --at(c).length;
      ++at(c).ref_index;
      const Token second = run(at(c))[0];
      if (second != token) {
        children_.erase(n, token);
        children_.set(n, second, c);
      }
      at(c).token = second;
      return n;
    }
    if (at(c).length == 1) {  // the suffix enters c
      erase_endpoint(n, s);
      set_endpoint(c, s, length);
      increment(c);
      return c;
    }
    // c splits: a one-token node in its place, c (one token shorter) its only child.
    const std::int32_t mid = new_node(at(c).count, token, 1, s, length - 1, n);
    replace_sibling(c, mid);
    children_.set(n, token, mid);
    --at(c).length;
    ++at(c).ref_index;
    at(c).token = run(at(c))[0];
    at(c).parent = mid;
    children_.set(mid, at(c).token, c);
    at(mid).children = 1;
    at(mid).head_child = at(mid).tail_child = c;
    own_new_group(c);
    erase_endpoint(n, s);
    set_endpoint(mid, s, length);
    increment(mid);
    return mid;
  }

  // ---- remove ------------------------------------------------------------------------------------
  void remove_slot(std::int32_t s) {
    const std::vector<Token>& seq = slots_[static_cast<std::size_t>(s)].tokens;
    const auto size = static_cast<std::int32_t>(seq.size());
    std::vector<std::int32_t> path;
    for (std::int32_t start = 0; start < size; ++start) {
      std::int32_t n = 0;
      --at(0).count;
      path.clear();
      for (std::int32_t i = start; i < size;) {
        const std::int32_t c = child(n, seq[static_cast<std::size_t>(i)]);
        if (c == none) break;
        if (at(c).count > 1) {
          decrement(c);
        } else {  // only this suffix reaches c: c goes with its subtree
          unlink_sibling(c);
          children_.erase(n, at(c).token);
          --at(n).children;
          free_subtree(c);
          break;
        }
        erase_endpoint(c, s);
        i += at(c).length;
        n = c;
        path.push_back(n);
      }
      // The last node may now have one child of equal count: they merge.
      if (n != 0 && at(n).children == 1 && at(n).count == at(at(n).head_child).count) {
        const std::int32_t c = at(n).head_child;
        const Token key = at(c).token;
        const std::int32_t parent = at(n).parent;
        node& y = at(c);
        y.token = at(n).token;
        y.length += at(n).length;
        y.ref_index -= at(n).length;
        y.parent = parent;
        replace_sibling(n, c);
        children_.erase(n, key);
        children_.set(parent, at(c).token, c);
        at(n).head_child = at(n).tail_child = none;
        at(n).children = 0;
        free_subtree(n);  // with n's endpoint records: none is live, n's count equals c's
        path.back() = n = c;
      }
      repoint(path, n, s);
    }
  }
  /// Nodes of `path` whose slice lies in the sequence being removed (slot `s`) take a slice of
  /// another occurrence, read off a leaf below the path's last node `n`; when that leaf is still
  /// reached by a suffix of `s`, a later suffix of `s` revisits the path.
  void repoint(std::vector<std::int32_t>& path, std::int32_t n, std::int32_t s) {
    std::int32_t leaf = n;
    std::int32_t distance = 0;
    while (at(leaf).head_child != none) {
      leaf = at(leaf).head_child;
      distance += at(leaf).length;
    }
    if (at(leaf).endpoints == none || find_endpoint(leaf, s) != none) return;
    const endpoint& e = endpoints_[static_cast<std::size_t>(at(leaf).endpoints)];
    std::int32_t index = e.end - distance;
    while (!path.empty()) {
      node& x = at(path.back());
      path.pop_back();
      index -= x.length;
      if (x.ref_slot == s) {
        x.ref_slot = e.slot;
        x.ref_index = index;
      }
    }
  }

  // ---- speculate ---------------------------------------------------------------------------------
  /// The node and offset in it where `context` ends when read from the root; node -1 when it does
  /// not occur.
  std::pair<std::int32_t, std::int32_t> match(std::span<const Token> context) const noexcept {
    std::int32_t n = 0, at_offset = 0;
    const Token* tokens = nullptr;
    for (const Token t : context) {
      if (at_offset >= at(n).length) {
        n = child(n, t);
        if (n < 0) return {none, none};
        tokens = run(at(n));
        at_offset = 0;
      }
      if (tokens[at_offset] != t) return {none, none};
      ++at_offset;
    }
    return {n, at_offset};
  }

  /// min(max_spec_tokens, int(m x factor + offset + 1e-6)), at least 0, with Arctic Inference's
  /// rounding: the product and the sum in float (kept apart so no compiler fuses them), the 1e-6 in
  /// double, truncation toward zero.
  static index_t draft_cap(index_t m, const suffix_options& options) noexcept {
    volatile float product = static_cast<float>(m) * options.max_spec_factor;
    volatile float sum = product + options.max_spec_offset;
    const double cap = static_cast<double>(sum) + 1e-6;
    if (!(cap < static_cast<double>(options.max_spec_tokens))) return options.max_spec_tokens;
    return cap <= 0.0 ? 0 : static_cast<index_t>(cap);
  }

  suffix_draft<Token> speculate_path(std::int32_t n, std::int32_t offset, index_t cap, float min_prob) const {
    suffix_draft<Token> out;
    float prob = 1.0f;
    const Token* tokens = run(at(n));
    while (out.size() < cap && prob >= min_prob) {
      if (offset < at(n).length) {
        out.parent.push_back(static_cast<std::int32_t>(out.token.size()) - 1);
        out.token.push_back(tokens[offset]);
        out.prob.push_back(prob);
        out.score += prob;
        ++offset;
      } else {
        const std::int32_t c = at(n).head_child;
        if (c == none) break;
        prob *= static_cast<float>(at(c).count) / static_cast<float>(at(n).count);
        n = c;
        tokens = run(at(n));
        offset = 0;
      }
    }
    return out;
  }

  struct heap_item {
    float prob;
    std::int32_t node, offset, parent;
  };
  suffix_draft<Token> speculate_tree(std::int32_t n, std::int32_t offset, index_t cap, float min_prob) const {
    suffix_draft<Token> out;
    detail::libstdcxx_heap<heap_item> heap;
    heap.push({1.0f, n, offset, -1});
    while (out.size() < cap && !heap.empty()) {
      const heap_item it = heap.pop();
      const node& x = at(it.node);
      if (it.offset < x.length) {
        out.token.push_back(run(x)[it.offset]);
        out.parent.push_back(it.parent);
        out.prob.push_back(it.prob);
        out.score += it.prob;
        heap.push({it.prob, it.node, it.offset + 1, static_cast<std::int32_t>(out.token.size()) - 1});
      } else {
        for (std::int32_t c = x.head_child; c != none; c = at(c).next_sibling) {
          const float prob = it.prob * static_cast<float>(at(c).count) / static_cast<float>(x.count);
          if (prob < min_prob) break;
          heap.push({prob, c, 0, it.parent});
        }
      }
    }
    return out;
  }

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

template <class Token>
std::string suffix_tree<Token>::check_integrity() const {
  const auto fail = [](const char* what, std::int32_t n) { return std::string(what) + " (node " + std::to_string(n) + ")"; };
  const auto live_slot = [&](std::int32_t slot) {
    return slot >= 0 && static_cast<std::size_t>(slot) < slots_.size() && slots_[static_cast<std::size_t>(slot)].id != none;
  };
  std::vector<std::int64_t> visits(nodes_.size(), 0);
  std::vector<std::int32_t> depth_before(nodes_.size(), 0), group_members(groups_.size(), 0);
  std::vector<std::int32_t> queue{0};
  std::size_t reached = 0;
  for (std::size_t q = 0; q < queue.size(); ++q) {
    const std::int32_t n = queue[q];
    const node& x = at(n);
    ++reached;
    if (n == 0) {
      if (x.parent != none || x.length != 0 || x.count < 0 || x.endpoints != none) return fail("root fields", n);
    } else {
      if (x.length <= 0 || x.count <= 0) return fail("length and count must be positive", n);
      if (!live_slot(x.ref_slot) || x.ref_index < 0) return fail("slice of a removed sequence", n);
      const std::vector<Token>& ref = slots_[static_cast<std::size_t>(x.ref_slot)].tokens;
      const std::int32_t before = depth_before[static_cast<std::size_t>(n)];
      if (x.ref_index < before || static_cast<std::size_t>(x.ref_index) + static_cast<std::size_t>(x.length) > ref.size())
        return fail("slice out of its sequence", n);
      if (ref[static_cast<std::size_t>(x.ref_index)] != x.token) return fail("token differs from its slice", n);
      // The slice is an occurrence of the whole root-to-node string.
      std::int32_t i = x.ref_index;
      for (std::int32_t a = x.parent; a != 0; a = at(a).parent) {
        i -= at(a).length;
        for (std::int32_t k = 0; k < at(a).length; ++k)
          if (ref[static_cast<std::size_t>(i + k)] != run(at(a))[k]) return fail("slice is not an occurrence of the path", n);
      }
      if (child(x.parent, x.token) != n) return fail("missing from its parent's child table", n);
      if (x.group == none) return fail("no run", n);
      ++group_members[static_cast<std::size_t>(x.group)];
    }
    std::int32_t listed = 0, prev = none;
    for (std::int32_t c = x.head_child; c != none; prev = c, c = at(c).next_sibling) {
      ++listed;
      const node& y = at(c);
      if (y.parent != n || y.prev_sibling != prev) return fail("sibling links", c);
      if (n != 0 && y.count >= x.count) return fail("a child's count must be below its parent's", c);
      if (prev == none) {
        if (y.group == none || groups_[static_cast<std::size_t>(y.group)].head != c || groups_[static_cast<std::size_t>(y.group)].prev != none)
          return fail("first child must lead the first run", c);
      } else if (y.count > at(prev).count) {
        return fail("siblings out of count order", c);
      } else if (y.count == at(prev).count) {
        if (y.group != at(prev).group) return fail("equal counts in different runs", c);
      } else {
        const group& g = groups_[static_cast<std::size_t>(y.group)];
        if (y.group == at(prev).group || g.head != c || g.prev != at(prev).group ||
            groups_[static_cast<std::size_t>(at(prev).group)].next != y.group)
          return fail("run links", c);
      }
      depth_before[static_cast<std::size_t>(c)] = depth_before[static_cast<std::size_t>(n)] + x.length;
      queue.push_back(c);
    }
    if (prev != x.tail_child) return fail("tail child", n);
    if (prev != none && groups_[static_cast<std::size_t>(at(prev).group)].next != none) return fail("last run links on", n);
    if (listed != x.children) return fail("child count differs from the sibling list", n);
    if (n != 0 && depth_before[static_cast<std::size_t>(n)] + x.length > max_depth_) return fail("deeper than max_depth", n);
  }
  if (reached != static_cast<std::size_t>(nodes())) return "nodes unreachable from the root";
  if (reached - 1 != children_.size()) return "child table size differs from the node count";
  for (std::size_t g = 0; g < groups_.size(); ++g)
    if (groups_[g].members != group_members[g] &&
        std::find(free_groups_.begin(), free_groups_.end(), static_cast<std::int32_t>(g)) == free_groups_.end())
      return "run membership count of run " + std::to_string(g);
  // Every suffix of every sequence, cut to max_depth, is a path ending at a node holding its endpoint;
  // counts are the numbers of such paths through or ending at each node.
  std::size_t indexed_endpoints = 0;
  for (const auto& [id, slot] : slot_of_) {
    const std::vector<Token>& seq = slots_[static_cast<std::size_t>(slot)].tokens;
    for (std::size_t start = 0; start < seq.size(); ++start) {
      std::int32_t n = 0;
      std::size_t i = start;
      ++visits[0];
      while (i < seq.size() && i - start < static_cast<std::size_t>(max_depth_)) {
        n = child(n, seq[i]);
        if (n == none) return "sequence " + std::to_string(id) + " suffix " + std::to_string(start) + " leaves the tree";
        ++visits[static_cast<std::size_t>(n)];
        if (i + static_cast<std::size_t>(at(n).length) > seq.size()) return fail("a sequence ends inside a node", n);
        for (std::int32_t k = 0; k < at(n).length; ++k)
          if (seq[i + static_cast<std::size_t>(k)] != run(at(n))[k]) return fail("a suffix differs from the node's tokens", n);
        i += static_cast<std::size_t>(at(n).length);
      }
      // One record per (node, sequence): a string the sequence holds twice keeps its later end.
      if (find_endpoint(n, slot) == none) return fail("a suffix's end has no endpoint", n);
    }
  }
  for (std::size_t n = 0; n < nodes_.size(); ++n) {
    if (n != 0 && nodes_[n].parent == none) continue;  // free
    if (nodes_[n].count != visits[n]) return fail("count differs from the occurrences", static_cast<std::int32_t>(n));
    std::int32_t listed = 0;
    for (std::int32_t e = nodes_[n].endpoints; e != none; e = endpoints_[static_cast<std::size_t>(e)].next) {
      const endpoint& r = endpoints_[static_cast<std::size_t>(e)];
      ++listed;
      if (r.node != static_cast<std::int32_t>(n) || !live_slot(r.slot) || find_endpoint(r.node, r.slot) != e)
        return fail("endpoint record", static_cast<std::int32_t>(n));
      if (r.end <= 0 || static_cast<std::size_t>(r.end) > slots_[static_cast<std::size_t>(r.slot)].tokens.size())
        return fail("endpoint outside its sequence", static_cast<std::int32_t>(n));
      if (nodes_[n].endpoint_count > scanned_endpoints && endpoint_index_.find(r.node, r.slot) != e)
        return fail("endpoint not indexed", static_cast<std::int32_t>(n));
    }
    if (listed != nodes_[n].endpoint_count) return fail("endpoint count differs from the list", static_cast<std::int32_t>(n));
    if (listed > scanned_endpoints) indexed_endpoints += static_cast<std::size_t>(listed);
  }
  if (indexed_endpoints != endpoint_index_.size()) return "endpoint table size differs from the indexed records";
  return {};
}

}  // namespace specdec
