// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Static trees from a choice list (Medusa, EAGLE-1, Jakiro*, Hydra, Amphista, TensorRT-LLM
/// Medusa): validation, the canonical node order, and the choice lists the papers ship.
///
/// A choice is a path of child ranks: `{0, 2, 1}` = the best child of the root, its third-best child,
/// that node's second-best child. Node 0 is the root; node i + 1 is the i-th choice after sorting by
/// (length, lexicographic), which is level order with each level in lexicographic path order: the
/// order of Medusa, EAGLE-1 and TensorRT-LLM alike.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <span>
#include <vector>

#include <specdec/core/error.hpp>
#include <specdec/tree/tree.hpp>

namespace specdec {

using choice = std::vector<std::int32_t>;

/// The most nodes a static tree may have (Medusa's and EAGLE-1's have tens; their masks and
/// retrieval buffers are quadratic in the nodes). With top_k < 2^31 it also keeps every flat
/// candidate index (rank + top_k x group) below 2^47.
inline constexpr index_t max_static_nodes = index_t{1} << 16;

/// A static tree's shape: `tree` holds parents and depths (tokens -1 until candidates are filled),
/// `paths[i]` the choice of node i (empty for the root), `rank[i]` its last entry (-1 for the root).
struct static_tree {
  draft_tree tree = {};
  std::vector<choice> paths = {};
  std::vector<std::int32_t> rank = {};

  index_t size() const noexcept { return tree.size(); }
};

/// Validates a choice list and builds the tree in canonical order.
/// \param choices any order; each choice a non-empty path of ranks in [0, top_k).
/// \param top_k the per-node candidate count the ranks index (10 in Medusa and EAGLE-1).
/// \throws invalid_argument for an empty list, more than max_static_nodes - 1 choices, top_k outside
/// [1, 2^31 - 1], an empty choice, a rank outside [0, top_k), a duplicate choice, or a choice whose
/// proper prefix is missing, naming the choice.
inline static_tree make_static_tree(std::span<const choice> choices, index_t top_k = 10) {
  constexpr const char* where = "specdec::make_static_tree";
  SPECDEC_EXPECTS(!choices.empty(), where, "the choice list is empty; expected at least one path");
  SPECDEC_EXPECTS(static_cast<index_t>(choices.size()) < max_static_nodes, where, "the choice list has ", choices.size(),
                  " paths; expected at most ", max_static_nodes - 1, " (static trees' buffers are quadratic in the nodes)");
  SPECDEC_EXPECTS(top_k >= 1 && top_k <= std::numeric_limits<std::int32_t>::max(), where, "top_k = ", top_k,
                  "; expected 1 <= top_k <= 2^31 - 1");
  const auto describe = [](const choice& c) {
    std::string s = "[";
    for (std::size_t i = 0; i < c.size(); ++i) s += (i ? ", " : "") + std::to_string(c[i]);
    return s + "]";
  };
  std::vector<choice> sorted(choices.begin(), choices.end());
  for (const choice& c : sorted) {
    SPECDEC_EXPECTS(!c.empty(), where, "a choice is empty; expected a path of at least one rank");
    for (std::int32_t r : c)
      SPECDEC_EXPECTS(r >= 0 && r < top_k, where, "choice ", describe(c), " has rank ", r, "; expected ranks in [0, ",
                      top_k, ")");
  }
  std::sort(sorted.begin(), sorted.end(), [](const choice& a, const choice& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  std::map<choice, std::int32_t> node_of;
  static_tree out;
  out.tree = draft_tree{{-1}, {-1}, {0}, {0.0f}};
  out.paths.push_back({});
  out.rank.push_back(-1);
  for (const choice& c : sorted) {
    SPECDEC_EXPECTS(!node_of.count(c), where, "choice ", describe(c), " appears twice; expected distinct paths");
    std::int32_t parent = 0;
    if (c.size() > 1) {
      const auto it = node_of.find(choice(c.begin(), c.end() - 1));
      SPECDEC_EXPECTS(it != node_of.end(), where, "choice ", describe(c), " has no parent: its prefix ",
                      describe(choice(c.begin(), c.end() - 1)), " is not in the list (expected a prefix-closed list)");
      parent = it->second;
    }
    const auto node = static_cast<std::int32_t>(out.tree.size());
    node_of.emplace(c, node);
    out.tree.token.push_back(-1);
    out.tree.parent.push_back(parent);
    out.tree.depth.push_back(static_cast<std::int32_t>(c.size()));
    out.tree.score.push_back(0.0f);
    out.paths.push_back(c);
    out.rank.push_back(c.back());
  }
  return out;
}

inline static_tree make_static_tree(const std::vector<choice>& choices, index_t top_k = 10) {
  return make_static_tree(std::span<const choice>(choices), top_k);
}

namespace choices {

/// Medusa's `mc_sim_7b_63` (medusa/model/medusa_choices.py): 63 choices, 64 nodes with the root, depth
/// 4, ranks <= 9. Also the tree Hydra and Amphista verify with.
inline std::vector<choice> medusa_mc_sim_7b_63() {
  return {{0},       {0, 0},    {1},       {0, 1},    {2},       {0, 0, 0}, {1, 0},    {0, 2},    {3},
          {0, 3},    {4},       {0, 4},    {2, 0},    {0, 5},    {0, 0, 1}, {5},       {0, 6},    {6},
          {0, 7},    {0, 1, 0}, {1, 1},    {7},       {0, 8},    {0, 0, 2}, {3, 0},    {0, 9},    {8},
          {9},       {1, 0, 0}, {0, 2, 0}, {1, 2},    {0, 0, 3}, {4, 0},    {2, 1},    {0, 0, 4}, {0, 0, 5},
          {0, 0, 0, 0}, {0, 1, 1}, {0, 0, 6}, {0, 3, 0}, {5, 0}, {1, 3}, {0, 0, 7}, {0, 0, 8}, {0, 0, 9},
          {6, 0},    {0, 4, 0}, {1, 4},    {7, 0},    {0, 1, 2}, {2, 0, 0}, {3, 1},    {2, 2},    {8, 0},
          {0, 5, 0}, {1, 5},    {1, 0, 1}, {0, 2, 1}, {9, 0},    {0, 6, 0}, {0, 0, 0, 1}, {1, 6}, {0, 7, 0}};
}

/// EAGLE's `mc_sim_7b_63` (eagle/model/choices.py): a different list under the same name, 25 choices
/// (26 nodes), depth 5, ranks <= 3.
inline std::vector<choice> eagle_mc_sim_7b_63() {
  return {{0},       {1},       {2},       {3},       {0, 0},       {0, 1},       {0, 2},
          {1, 0},    {1, 1},    {2, 0},    {2, 1},    {3, 0},       {0, 0, 0},    {0, 0, 1},
          {0, 0, 2}, {0, 1, 0}, {0, 1, 1}, {0, 2, 0}, {0, 2, 1},    {1, 0, 0},    {0, 0, 0, 0},
          {0, 0, 0, 1}, {0, 0, 0, 2}, {0, 0, 0, 0, 0}, {0, 0, 0, 0, 1}};
}

/// Jakiro's list (jakiro/model/choices.py): EAGLE's 25 choices plus `{0, 0, 0, 0, 0, 0}` (depth 6).
inline std::vector<choice> jakiro_mc_sim_7b_63() {
  std::vector<choice> list = eagle_mc_sim_7b_63();
  list.push_back({0, 0, 0, 0, 0, 0});
  return list;
}

}  // namespace choices
}  // namespace specdec
