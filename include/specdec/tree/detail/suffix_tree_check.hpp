// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief `suffix_tree::check_integrity`: every invariant of the tree, for tests and fuzzing.
/// Part of specdec/tree/suffix_tree.hpp, which includes it; including it alone includes that header.
#pragma once

#include <cstdint>
#include <string>

#include <specdec/tree/suffix_tree.hpp>

namespace specdec {

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
