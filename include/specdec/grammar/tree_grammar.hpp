// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Grammar-constrained draft trees: the order in which one grammar matcher with accept and
/// rollback fills every node's bitmask row (SGLang's `traverse_tree`, xgrammar's `traverse_draft_tree`),
/// and pruning the nodes a mask forbids before the target forward (fewer rows to verify).
///
/// Node i's bitmask row (layout: specdec/grammar/token_bitmask.hpp) constrains the token *after* node i: it
/// is the matcher's mask once node 0's committed state is extended by the tokens of nodes 1..i on the
/// path to i. A node is valid when its parent is valid and its parent's row allows its token (node 0,
/// the committed token, always is); an invalid node's subtree is invalid.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include <specdec/core/checked.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>
#include <specdec/core/view_checks.hpp>
#include <specdec/grammar/token_bitmask.hpp>
#include <specdec/tree/tree.hpp>

namespace specdec {

/// One step of filling a tree's masks with one matcher: roll back `rollback` tokens (to the state of
/// `node`'s parent), accept `node`'s token (nothing for node 0), fill `node`'s row.
struct bitmask_fill_step {
  std::int32_t node;
  std::int32_t rollback;
};

/// The depth-first order (children in node-index order) in which one matcher fills a tree's masks,
/// with the rollback before each step when every node is valid (then the matcher holds `depth` tokens
/// past node 0 after each step). An engine driving its own matcher (from Python, say) follows it;
/// where accept_token rejects a node it skips the node's subtree (the steps after it whose depth
/// exceeds the node's) and, since the matcher then holds fewer tokens than listed, rolls back
/// `held - (depth of the step - 1)` before each later step instead of the listed count.
/// fill_tree_bitmasks does all of this. The walk ends by rolling back the tokens still held (not
/// listed), which returns the matcher to node 0's state.
/// \throws invalid_argument from validate() on a malformed tree.
inline std::vector<bitmask_fill_step> bitmask_fill_order(tree_view tree) {
  validate(tree);
  const auto n = static_cast<std::size_t>(tree.size());
  // An explicit depth-first walk (no recursion: a chain drafter's tree can be thousands deep); each
  // node's last child and each child's previous sibling, so that children are pushed last-first and
  // pop in node-index order.
  std::vector<std::int32_t> last(n, -1), previous(n, -1);
  for (std::size_t i = 1; i < n; ++i) {
    const auto p = static_cast<std::size_t>(tree.parent[i]);
    previous[i] = last[p];
    last[p] = static_cast<std::int32_t>(i);
  }
  std::vector<bitmask_fill_step> steps;
  steps.reserve(n);
  std::int32_t depth_now = 0;  // tokens accepted past node 0
  std::vector<std::int32_t> stack = {0};
  while (!stack.empty()) {
    const std::int32_t node = stack.back();
    stack.pop_back();
    const std::int32_t d = tree.depth[static_cast<std::size_t>(node)];
    steps.push_back({node, node == 0 ? 0 : depth_now - (d - 1)});
    depth_now = d;
    for (std::int32_t c = last[static_cast<std::size_t>(node)]; c >= 0; c = previous[static_cast<std::size_t>(c)]) stack.push_back(c);
  }
  return steps;
}

/// What fill_tree_bitmasks needs of a grammar matcher (xgrammar's GrammarMatcher, llama.cpp's grammar
/// engine behind an adapter): accept a token (false, with the state unchanged, when the grammar
/// rejects it), roll back the last n accepted tokens, whether the state is terminated (a stop token
/// accepted), and fill a bitmask row for the current state.
template <class M>
concept grammar_matcher = requires(M& m, std::int32_t token, std::int32_t n, std::span<std::int32_t> row) {
  { m.accept_token(token) } -> std::convertible_to<bool>;
  m.rollback(n);
  { m.is_terminated() } -> std::convertible_to<bool>;
  m.fill_next_token_bitmask(row);
};

/// The matcher of no grammar: every token allowed, never terminated (verify_greedy_constrained with
/// penalties alone).
struct any_token_matcher {
  index_t vocab;
  bool accept_token(std::int32_t token) const { return token >= 0 && token < vocab; }
  void rollback(std::int32_t) const {}
  bool is_terminated() const { return false; }
  /// Allows tokens [0, min(vocab, 32 x words)): a matcher built for a larger vocabulary than the caller's
  /// rows never writes past them.
  void fill_next_token_bitmask(std::span<std::int32_t> row) const {
    std::fill(row.begin(), row.end(), 0);
    const index_t width = static_cast<index_t>(row.size()) * 32 < vocab ? static_cast<index_t>(row.size()) * 32 : vocab;
    for (index_t t = 0; t < width; ++t) bitmask_set(row.data(), static_cast<std::int32_t>(t), true);
  }
};
static_assert(grammar_matcher<any_token_matcher>);

/// A draft tree with the nodes a grammar forbids removed, and where each kept node was.
struct pruned_tree {
  draft_tree tree;
  std::vector<std::int32_t> kept;  ///< kept[i]: node i's index in the original tree (kept[0] = 0)
};

namespace detail {

/// Drives one matcher over a tree in bitmask_fill_order, from (and back to) node 0's state. A node past
/// the root is valid when its parent is, `admits(node, parent)` holds (with the matcher at the parent's
/// state) and the matcher accepts its token; `on_valid(node)` runs with the matcher at a valid node's
/// state, `on_dropped(node)` for every other node (those under a dropped one included).
/// \return one flag per node: 1 valid, 0 dropped.
template <class M, class Admits, class OnValid, class OnDropped>
std::vector<std::uint8_t> matcher_walk(tree_view tree, M& matcher, Admits&& admits, OnValid&& on_valid, OnDropped&& on_dropped) {
  std::vector<std::uint8_t> valid(static_cast<std::size_t>(tree.size()), 0);
  std::int32_t depth_now = 0;    // tokens the matcher holds past node 0
  std::int32_t skip_below = -1;  // while >= 0: skipping the subtree of a dropped node at this depth
  for (const bitmask_fill_step& s : bitmask_fill_order(tree)) {
    const auto i = static_cast<std::size_t>(s.node);
    const std::int32_t d = tree.depth[i];
    if (skip_below >= 0 && d > skip_below) {  // under a dropped node
      on_dropped(i);
      continue;
    }
    skip_below = -1;
    if (i > 0) {
      const auto p = static_cast<std::size_t>(tree.parent[i]);
      if (depth_now > d - 1) matcher.rollback(depth_now - (d - 1));
      depth_now = d - 1;
      if (valid[p] == 0 || !admits(i, p) || !matcher.accept_token(tree.token[i])) {
        on_dropped(i);
        skip_below = d;
        continue;
      }
      depth_now = d;
    }
    valid[i] = 1;
    on_valid(i);
  }
  if (depth_now > 0) matcher.rollback(depth_now);
  return valid;
}

/// The nodes flagged in `keep` (a parent always with its children), as a tree in their original order.
inline pruned_tree kept_nodes(const draft_tree& tree, const std::vector<std::uint8_t>& keep) {
  const auto n = static_cast<std::size_t>(tree.size());
  std::vector<std::int32_t> new_index(n, -1);
  pruned_tree out;
  for (std::size_t i = 0; i < n; ++i) {
    if (keep[i] == 0) continue;
    new_index[i] = static_cast<std::int32_t>(out.kept.size());
    out.kept.push_back(static_cast<std::int32_t>(i));
    out.tree.token.push_back(tree.token[i]);
    out.tree.parent.push_back(i == 0 ? -1 : new_index[static_cast<std::size_t>(tree.parent[i])]);
    out.tree.depth.push_back(tree.depth[i]);
    out.tree.score.push_back(tree.score[i]);
  }
  return out;
}

}  // namespace detail

/// Fills every node's bitmask row of a draft tree with one matcher, in bitmask_fill_order, starting from
/// (and returning to) node 0's state: the matcher must hold the committed tokens up to node 0's. A
/// valid node that is not terminated gets the matcher's row; a node its parent's row forbids, one
/// under it, and a terminated node get an all-zero row (nothing may follow them: xgrammar's
/// traverse_draft_tree; SGLang leaves such rows all-allowed, which verification never reads for an
/// invalid node). The node's token is tested against the parent's row before the matcher sees it, so
/// the matcher never accepts what its own mask forbids.
/// \param bitmask host `[rows x ceil(V / 32)]` int32; node i's row is `first_row + i`.
/// \return one flag per node: 1 valid, 0 pruned.
/// \throws invalid_argument on vocab outside [1, 2^31 - 1], a malformed tree, a token outside [0, V), a
///   bitmask too small, with rows that overlap or strided words, or sharing memory with the tree; rows
///   outside the bitmask.
template <grammar_matcher M>
std::vector<std::uint8_t> fill_tree_bitmasks(tree_view tree, index_t vocab, M& matcher, matrix_view<std::int32_t> bitmask,
                                             index_t first_row = 0) {
  constexpr const char* where = "specdec::fill_tree_bitmasks";
  detail::check_vocabulary(where, "vocab", vocab);
  validate(tree, vocab);
  detail::check_bitmask(where, "bitmask", matrix_view<const std::int32_t>(bitmask), vocab);
  // Written row by row: rows apart, and apart from the tree they are filled from.
  detail::check_arguments(where, detail::output("bitmask", bitmask, detail::contiguous_rows | detail::distinct_rows),
                          detail::input("tree.token", tree.token), detail::input("tree.parent", tree.parent),
                          detail::input("tree.depth", tree.depth));
  SPECDEC_EXPECTS(detail::range_fits(first_row, tree.size(), bitmask.rows()), where, "first_row = ", first_row, " with ",
                  tree.size(), " nodes; expected rows [first_row, first_row + nodes) within the bitmask's ", bitmask.rows());
  const index_t words = bitmask_words(vocab);
  const auto row_of = [&](std::size_t i) { return std::span<std::int32_t>(bitmask.row(first_row + static_cast<index_t>(i)), static_cast<std::size_t>(words)); };
  const auto zero = [&](std::size_t i) { std::fill(row_of(i).begin(), row_of(i).end(), 0); };
  return detail::matcher_walk(
      tree, matcher, [&](std::size_t i, std::size_t p) { return bitmask_allows(row_of(p).data(), tree.token[i]); },
      [&](std::size_t i) {
        if (matcher.is_terminated()) zero(i);
        else matcher.fill_next_token_bitmask(row_of(i));
      },
      zero);
}

/// Drops every node whose token its parent's bitmask row forbids, with its subtree, before the target
/// forward: the kept nodes keep their relative order (so a breadth-first tree stays breadth-first) and
/// their scores; masks, positions and retrieve paths of the pruned tree come from its builders
/// (mask/tree_mask.hpp) as for any tree, and its bitmask rows are the original rows at `kept`.
/// \param bitmask host `[rows x ceil(V / 32)]`; node i's row is `first_row + i`.
/// \throws invalid_argument on a malformed tree, a token outside [0, V), a bitmask too small.
inline pruned_tree prune_tree(const draft_tree& tree, index_t vocab, matrix_view<const std::int32_t> bitmask, index_t first_row = 0) {
  constexpr const char* where = "specdec::prune_tree";
  detail::check_vocabulary(where, "vocab", vocab);
  validate(tree, vocab);
  detail::check_bitmask(where, "bitmask", bitmask, vocab);
  SPECDEC_EXPECTS(detail::range_fits(first_row, tree.size(), bitmask.rows()), where, "first_row = ", first_row, " with ",
                  tree.size(), " nodes; expected rows [first_row, first_row + nodes) within the bitmask's ", bitmask.rows());
  std::vector<std::uint8_t> keep(static_cast<std::size_t>(tree.size()), 0);
  for (std::size_t i = 0; i < keep.size(); ++i) {
    const auto p = static_cast<std::size_t>(i == 0 ? 0 : tree.parent[i]);
    keep[i] = i == 0 || (keep[p] != 0 && bitmask_allows(bitmask.row(first_row + static_cast<index_t>(p)), tree.token[i])) ? 1 : 0;
  }
  return detail::kept_nodes(tree, keep);
}

/// prune_tree without masks: one accept_token per node, in bitmask_fill_order, with the matcher (holding
/// node 0's committed state, to which it returns). A node is kept when its parent is kept, its parent's
/// state is not terminated, and the matcher accepts its token there: the same nodes prune_tree keeps
/// with the masks fill_tree_bitmasks fills, without filling any (for grammar engines whose mask costs a
/// pass over the vocabulary; verify_greedy_constrained then fills masks only where it must).
/// \throws invalid_argument on a malformed tree or a token outside [0, V).
template <grammar_matcher M>
pruned_tree prune_tree(const draft_tree& tree, index_t vocab, M& matcher) {
  detail::check_vocabulary("specdec::prune_tree", "vocab", vocab);
  validate(tree, vocab);
  // A terminated parent takes no token (matchers may accept one there all the same).
  const auto valid = detail::matcher_walk(
      tree_view(tree), matcher, [&](std::size_t, std::size_t) { return !matcher.is_terminated(); }, [](std::size_t) {},
      [](std::size_t) {});
  return detail::kept_nodes(tree, valid);
}

}  // namespace specdec
