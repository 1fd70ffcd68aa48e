// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief `suffix_tree`'s updates: sequence slots, count runs of siblings, endpoints, appending a token to every suffix, removing a sequence.
/// Part of specdec/tree/suffix_tree.hpp, which includes it; including it alone includes that header.
#pragma once

#include <cstdint>
#include <vector>

#include <specdec/tree/suffix_tree.hpp>

namespace specdec {

template <class Token>
std::int32_t suffix_tree<Token>::new_group(std::int32_t head) {
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

template <class Token>
void suffix_tree<Token>::leave_group(std::int32_t n) noexcept {
  const std::int32_t g = at(n).group;
  if (g == none) return;
  at(n).group = none;
  if (--grp(g).members == 0) free_groups_.push_back(g);
}

template <class Token>
void suffix_tree<Token>::join_group(std::int32_t n, std::int32_t g) noexcept {
  if (at(n).group == g) return;
  leave_group(n);
  at(n).group = g;
  ++grp(g).members;
}

template <class Token>
void suffix_tree<Token>::own_new_group(std::int32_t n) {
  const std::int32_t g = new_group(n);
  leave_group(n);
  at(n).group = g;
  grp(g).members = 1;
}

template <class Token>
std::int32_t suffix_tree<Token>::find_endpoint(std::int32_t n, std::int32_t slot) const noexcept {
  if (at(n).endpoint_count > scanned_endpoints) return endpoint_index_.find(n, slot);
  for (std::int32_t e = at(n).endpoints; e != none; e = endpoints_[static_cast<std::size_t>(e)].next)
    if (endpoints_[static_cast<std::size_t>(e)].slot == slot) return e;
  return none;
}

template <class Token>
void suffix_tree<Token>::set_endpoint(std::int32_t n, std::int32_t slot, std::int32_t end) {
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

template <class Token>
void suffix_tree<Token>::erase_endpoint(std::int32_t n, std::int32_t slot) noexcept {
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

template <class Token>
void suffix_tree<Token>::free_subtree(std::int32_t root) {
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

template <class Token>
void suffix_tree<Token>::unlink_sibling(std::int32_t n) noexcept {
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

template <class Token>
void suffix_tree<Token>::own_run_between(std::int32_t n, std::int32_t prev_run, std::int32_t next_run) {
  if (at(n).group == none) own_new_group(n);
  group& g = grp(at(n).group);
  g.prev = prev_run, g.next = next_run;
  if (prev_run != none) grp(prev_run).next = at(n).group;
  if (next_run != none) grp(next_run).prev = at(n).group;
}

template <class Token>
void suffix_tree<Token>::link_before(std::int32_t n, std::int32_t other) {
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

template <class Token>
void suffix_tree<Token>::link_after(std::int32_t n, std::int32_t other) {
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

template <class Token>
void suffix_tree<Token>::replace_sibling(std::int32_t old, std::int32_t fresh) {
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

template <class Token>
void suffix_tree<Token>::increment(std::int32_t n) {
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

template <class Token>
void suffix_tree<Token>::decrement(std::int32_t n) {
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

template <class Token>
void suffix_tree<Token>::append_to_slot(std::int32_t s, Token token) {
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

template <class Token>
std::int32_t suffix_tree<Token>::extend_suffix(std::int32_t n, std::int32_t s, Token token, std::int32_t length) {
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

template <class Token>
void suffix_tree<Token>::remove_slot(std::int32_t s) {
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

template <class Token>
void suffix_tree<Token>::repoint(std::vector<std::int32_t>& path, std::int32_t n, std::int32_t s) {
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

}  // namespace specdec
