// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief SuffixDecoding (Oliaro et al., arXiv 2411.04975; Snowflake's Arctic Inference, vLLM's
/// `suffix` method): model-free drafts from suffix trees over the request's own tokens and over a
/// cache of earlier responses shared across requests, continuations ranked by how often they
/// followed the match, the draft growing with the match length.
///
/// - `suffix_tree<Token>`: every suffix of every stored sequence, cut to `max_depth` tokens, with
///   per-node occurrence counts, path compression and siblings kept in count order; append is
///   O(max_depth) node steps per token whatever has been stored, remove is O(length x max_depth).
/// - `suffix_cache<Token, RequestId>`: one tree per active request (prompt and response so far) and
///   one global tree of responses, evicted whole, oldest first, under a request and a token bound.
/// - `suffix_draft_tree`: a draft in specdec's tree form (tokens, parents, depths), for every verifier,
///   mask layout and engine adapter.
///
/// Drafts are Arctic Inference 0.3.0's `SuffixTree::speculate` / `SuffixDecodingCache.speculate` bit
/// for bit (token ids, parents, float32 probabilities, score, match length): the same sibling order
/// (history-dependent ties), the same float rounding and libstdc++'s heap tie order in tree mode;
/// tests/test_suffix.cpp replays cases recorded from it (scripts/suffix_oracle.py). Host memory,
/// no backend.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>
#include <specdec/tree/tree.hpp>

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

/// An open-addressing map from (int32, Token) keys to int32 values >= 0: linear probing, power-of-two
/// capacity at most half full, deletion by backward shift (no tombstones), so lookups stay short
/// whatever was erased. One table holds every edge of a tree: a node's children are (node, token).
template <class Token>
class pair_index {
 public:
  std::int32_t find(std::int32_t a, Token b) const noexcept {
    if (slots_.empty()) return -1;
    for (std::size_t i = home(a, b);; i = (i + 1) & mask()) {
      const slot& s = slots_[i];
      if (s.value < 0) return -1;
      if (s.a == a && s.b == b) return s.value;
    }
  }
  /// Sets (a, b) to value (>= 0), inserting it if absent.
  void set(std::int32_t a, Token b, std::int32_t value) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    for (std::size_t i = home(a, b);; i = (i + 1) & mask()) {
      slot& s = slots_[i];
      if (s.value < 0) {
        s = {a, b, value};
        ++size_;
        return;
      }
      if (s.a == a && s.b == b) {
        s.value = value;
        return;
      }
    }
  }
  void erase(std::int32_t a, Token b) noexcept {
    if (slots_.empty()) return;
    std::size_t i = home(a, b);
    for (;; i = (i + 1) & mask()) {
      if (slots_[i].value < 0) return;
      if (slots_[i].a == a && slots_[i].b == b) break;
    }
    // Backward shift: pull later entries of the probe run into the hole when their home allows it.
    for (std::size_t j = (i + 1) & mask();; j = (j + 1) & mask()) {
      if (slots_[j].value < 0) break;
      const std::size_t h = home(slots_[j].a, slots_[j].b);
      if (((j - h) & mask()) >= ((j - i) & mask())) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i].value = -1;
    --size_;
  }
  std::size_t size() const noexcept { return size_; }
  std::size_t memory_bytes() const noexcept { return slots_.capacity() * sizeof(slot); }

 private:
  struct slot {
    std::int32_t a = 0;
    Token b{};
    std::int32_t value = -1;
  };
  std::size_t mask() const noexcept { return slots_.size() - 1; }
  std::size_t home(std::int32_t a, Token b) const noexcept {
    using wide = std::conditional_t<(sizeof(Token) > 4), std::uint64_t, std::uint32_t>;
    std::uint64_t h = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) ^
                      static_cast<std::uint64_t>(static_cast<wide>(b)) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 33;  // murmur3's finaliser: every key bit reaches the low (index) bits
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33;
    return static_cast<std::size_t>(h) & mask();
  }
  void grow() {
    std::vector<slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 16 : 2 * old.size(), slot{});
    size_ = 0;
    for (const slot& s : old)
      if (s.value >= 0) set(s.a, s.b, s.value);
  }
  std::vector<slot> slots_;
  std::size_t size_ = 0;
};

/// libstdc++'s std::priority_queue (push_heap / pop_heap) over a max-heap by `prob`, written out:
/// with equal probabilities the pop order is the heap's, and Arctic Inference's tree drafts follow
/// it (libc++ and MSVC order ties differently).
template <class Item>
class libstdcxx_heap {
 public:
  bool empty() const noexcept { return items_.empty(); }
  void push(const Item& item) {
    items_.push_back(item);
    sift_up(items_.size() - 1, 0, item);
  }
  Item pop() {
    const Item top = items_.front();
    const std::size_t len = items_.size() - 1;
    if (len > 0) {
      const Item value = items_.back();
      // __adjust_heap: the hole descends along the larger child (the right one on ties) to a leaf,
      // then the last element sifts up from there.
      std::size_t hole = 0, child = 0;
      while (child < (len - 1) / 2) {
        child = 2 * (child + 1);
        if (items_[child].prob < items_[child - 1].prob) --child;
        items_[hole] = items_[child];
        hole = child;
      }
      if ((len & 1) == 0 && child == (len - 2) / 2) {
        child = 2 * (child + 1);
        items_[hole] = items_[child - 1];
        hole = child - 1;
      }
      sift_up(hole, 0, value);
    }
    items_.pop_back();
    return top;
  }

 private:
  void sift_up(std::size_t hole, std::size_t top, const Item& value) {
    while (hole > top && items_[(hole - 1) / 2].prob < value.prob) {
      items_[hole] = items_[(hole - 1) / 2];
      hole = (hole - 1) / 2;
    }
    items_[hole] = value;
  }
  std::vector<Item> items_;
};

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
