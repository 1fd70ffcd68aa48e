// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The draft tree (struct of arrays, breadth-first, root at 0), its validation, and the
/// buffers derived from it: positions, retrieve paths, first-child / next-sibling links and
/// per-depth offsets. Host memory; a tree has tens of nodes, so these are plain loops.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include <specdec/core/checked.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>
#include <specdec/core/view_checks.hpp>

namespace specdec {

/// A draft tree. Node 0 is the root (the token the target already committed); every other node's
/// parent comes before it, so the arrays are in breadth-first (level) order. Within a level the order
/// is the builder's (see docs/trees.md): lexicographic choice paths for static trees, EAGLE's flat
/// candidate order for dynamic ones.
///
/// - `token[i]`: token id of node i (target vocabulary).
/// - `parent[i]`: parent node index, -1 for the root.
/// - `depth[i]`: 0 for the root, parent's depth + 1 otherwise.
/// - `score[i]`: the builder's cumulative score (log-probability for EAGLE-2, probability product for
///   SGLang's form, 0 for static trees and for the root).
struct draft_tree {
  std::vector<std::int32_t> token = {};
  std::vector<std::int32_t> parent = {};
  std::vector<std::int32_t> depth = {};
  std::vector<float> score = {};

  index_t size() const noexcept { return static_cast<index_t>(token.size()); }
  /// Largest depth in the tree (0 for a root-only tree).
  std::int32_t max_depth() const noexcept {
    return depth.empty() ? 0 : *std::max_element(depth.begin(), depth.end());
  }
};

/// A non-owning view of a draft tree's structure: what verification reads (tokens, parents, depths),
/// for engines that keep their trees in arrays of their own. Host memory. A `draft_tree` converts to
/// it implicitly; a temporary one does not (the view would dangle).
struct tree_view {
  std::span<const std::int32_t> token = {};
  std::span<const std::int32_t> parent = {};
  std::span<const std::int32_t> depth = {};

  tree_view() = default;
  tree_view(std::span<const std::int32_t> tokens, std::span<const std::int32_t> parents,
            std::span<const std::int32_t> depths) noexcept
      : token(tokens), parent(parents), depth(depths) {}
  tree_view(const draft_tree& tree) noexcept  // NOLINT(google-explicit-constructor): a lossless view
      : token(tree.token), parent(tree.parent), depth(tree.depth) {}
  tree_view(const draft_tree&&) = delete;

  index_t size() const noexcept { return static_cast<index_t>(token.size()); }
};

/// Checks that `tree` is well formed: matching array lengths, at least the root, exactly one root at
/// index 0, every parent earlier than its child (which also rules out cycles), depth = parent depth
/// + 1, and every token in [0, vocab_size) when `vocab_size` > 0.
/// \throws invalid_argument naming the first offending node and what was expected of it.
inline void validate(tree_view tree, index_t vocab_size = 0) {
  constexpr const char* where = "specdec::validate(draft_tree)";
  const index_t n = tree.size();
  SPECDEC_EXPECTS(n >= 1, where, "the tree is empty; expected at least the root (node 0)");
  SPECDEC_EXPECTS(static_cast<index_t>(tree.parent.size()) == n && static_cast<index_t>(tree.depth.size()) == n, where,
                  "array lengths differ: token ", n, ", parent ", tree.parent.size(), ", depth ", tree.depth.size(),
                  "; expected one entry per node in each");
  SPECDEC_EXPECTS(tree.parent[0] == -1 && tree.depth[0] == 0, where, "node 0 has parent ", tree.parent[0],
                  " and depth ", tree.depth[0], "; expected the root: parent -1, depth 0");
  for (std::size_t i = 0; i < tree.token.size(); ++i) {
    if (i > 0) {
      const std::int32_t p = tree.parent[i];
      SPECDEC_EXPECTS(p != -1, where, "node ", i, " has parent -1; expected exactly one root, at index 0");
      SPECDEC_EXPECTS(p >= 0 && static_cast<std::size_t>(p) < i, where, "node ", i, " has parent ", p,
                      "; expected a parent index in [0, ", i, ") (parents come before their children, "
                      "which also excludes cycles)");
      SPECDEC_EXPECTS(tree.depth[i] == tree.depth[static_cast<std::size_t>(p)] + 1, where, "node ", i, " has depth ",
                      tree.depth[i], " but its parent ", p, " has depth ", tree.depth[static_cast<std::size_t>(p)],
                      "; expected parent depth + 1");
    }
    if (vocab_size > 0)
      SPECDEC_EXPECTS(tree.token[i] >= 0 && tree.token[i] < vocab_size, where, "node ", i, " has token ",
                      tree.token[i], "; expected a token id in [0, ", vocab_size, ")");
  }
}

/// validate(tree_view), and one score per node.
inline void validate(const draft_tree& tree, index_t vocab_size = 0) {
  SPECDEC_EXPECTS(tree.score.size() == tree.token.size(), "specdec::validate(draft_tree)", "array lengths differ: token ",
                  tree.token.size(), ", score ", tree.score.size(), "; expected one entry per node in each");
  validate(tree_view(tree), vocab_size);
}

/// Builds a tree from tokens and parents (depths computed, scores zero) and validates it.
/// \throws invalid_argument as validate(); also when a parent is out of range or a token (the root's
///   included) is negative.
inline draft_tree make_tree(std::vector<std::int32_t> tokens, const std::vector<std::int32_t>& parents,
                            index_t vocab_size = 0) {
  constexpr const char* where = "specdec::make_tree";
  const index_t n = static_cast<index_t>(tokens.size());
  SPECDEC_EXPECTS(static_cast<index_t>(parents.size()) == n, where, "parents has ", parents.size(),
                  " entries; expected one per token (", n, ")");
  draft_tree tree{std::move(tokens), parents, std::vector<std::int32_t>(static_cast<std::size_t>(n), 0),
                  std::vector<float>(static_cast<std::size_t>(n), 0.0f)};
  for (index_t i = 0; i < n; ++i)
    SPECDEC_EXPECTS(tree.token[static_cast<std::size_t>(i)] >= 0, where, "node ", i, " has token ",
                    tree.token[static_cast<std::size_t>(i)], "; expected a token id >= 0");
  for (index_t i = 1; i < n; ++i) {
    const std::int32_t p = parents[static_cast<std::size_t>(i)];
    SPECDEC_EXPECTS(p >= 0 && p < i, where, "node ", i, " has parent ", p, "; expected a parent index in [0, ",
                    i, ") (root = -1 at index 0 only)");
    tree.depth[static_cast<std::size_t>(i)] = tree.depth[static_cast<std::size_t>(p)] + 1;
  }
  validate(tree, vocab_size);
  return tree;
}

/// A tree structure that validate() has accepted, with its largest depth. Every function that derives
/// buffers from a tree (positions, leaves, retrieve paths, links, offsets, masks) takes one; a
/// `draft_tree` or a `tree_view` over an engine's own arrays converts implicitly, validating, so a
/// recipe that writes several buffers of one tree constructs one `valid_tree` and validates once.
/// Non-owning, as tree_view (a temporary draft_tree does not convert: the view would dangle).
/// \throws invalid_argument from the constructor, as validate(tree_view).
class valid_tree {
 public:
  valid_tree(tree_view tree) : tree_(tree) {  // NOLINT(google-explicit-constructor): validates
    validate(tree);
    max_depth_ = *std::max_element(tree.depth.begin(), tree.depth.end());
  }
  valid_tree(const draft_tree& tree) : valid_tree(tree_view(tree)) {}  // NOLINT(google-explicit-constructor)
  valid_tree(const draft_tree&&) = delete;

  index_t size() const noexcept { return tree_.size(); }
  std::int32_t max_depth() const noexcept { return max_depth_; }
  std::int32_t token(index_t i) const noexcept { return tree_.token[static_cast<std::size_t>(i)]; }
  std::int32_t parent(index_t i) const noexcept { return tree_.parent[static_cast<std::size_t>(i)]; }
  std::int32_t depth(index_t i) const noexcept { return tree_.depth[static_cast<std::size_t>(i)]; }
  tree_view view() const noexcept { return tree_; }

 private:
  tree_view tree_;
  std::int32_t max_depth_ = 0;
};

namespace detail {
/// check_arguments for a call that writes `outputs` from a tree: each output by its rules, apart from
/// each other and from the tree's arrays (a mask or position buffer laid over the parents would rewrite
/// the tree as it is read).
template <class... Outputs>
void check_tree_outputs(const char* where, tree_view tree, const Outputs&... outputs) {
  check_arguments(where, outputs..., input("tree.token", tree.token), input("tree.parent", tree.parent),
                  input("tree.depth", tree.depth));
}
}  // namespace detail

/// Per-node positions: `positions[i] = prefix_length + depth[i]`.
/// \param positions host `[tree.size()]`. \throws invalid_argument on a malformed tree (valid_tree), a
/// negative prefix_length or a length mismatch.
/// \throws invalid_argument too when a position does not fit `Int` (an int32 buffer with a prefix
///   near 2^31), or positions is null with a shape or has stride 0.
template <class Int>
void tree_positions(valid_tree tree, index_t prefix_length, vector_view<Int> positions) {
  constexpr const char* where = "specdec::tree_positions";
  SPECDEC_EXPECTS(prefix_length >= 0, where, "prefix_length = ", prefix_length, "; expected >= 0");
  SPECDEC_EXPECTS(positions.rows() == tree.size(), where, "positions has ", positions.rows(),
                  " entries; expected one per node (", tree.size(), ")");
  detail::check_tree_outputs(where, tree.view(), detail::output("positions", positions));
  // The deepest node has the largest position: if it fits Int, every position does.
  (void)detail::checked_narrow<Int>(where, detail::checked_add(where, prefix_length, tree.max_depth(), "prefix_length + depth"),
                                    "the deepest node's position prefix_length + depth");
  for (index_t i = 0; i < tree.size(); ++i) positions(i) = static_cast<Int>(prefix_length + tree.depth(i));
}

/// tree_positions as a new host `[tree.size()]` int64 buffer. \throws invalid_argument as the view form.
inline std::vector<std::int64_t> tree_positions(valid_tree tree, index_t prefix_length) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(tree.size()));
  tree_positions(tree, prefix_length, vector_view<std::int64_t>(out.data(), tree.size()));
  return out;
}

/// Whether each node is a leaf (has no child). \throws invalid_argument on a malformed tree (valid_tree).
inline std::vector<bool> leaf_flags(valid_tree tree) {
  std::vector<bool> leaf(static_cast<std::size_t>(tree.size()), true);
  for (index_t i = 1; i < tree.size(); ++i) leaf[static_cast<std::size_t>(tree.parent(i))] = false;
  return leaf;
}

/// Order of the rows of retrieve_paths. The peers disagree (docs/trees.md):
/// - `node_index`: leaves in ascending node index (EAGLE-2 greedy);
/// - `lexicographic`: rows sorted as sequences of node indices, the -1 padding last (EAGLE-2 with a
///   logits processor, EAGLE-1, TensorRT-LLM);
/// - `reverse_node_index`: leaves in descending node index (Medusa's reverse walk of sorted choices).
enum class path_order { node_index, lexicographic, reverse_node_index };

/// Root-to-leaf paths: one row per leaf, `max_depth + 1` columns, node indices root..leaf padded with
/// -1; column 0 is always 0. A root-only tree has one row `[0]`. \throws invalid_argument on a malformed
/// tree (valid_tree).
/// \returns row-major `[leaves x (max_depth + 1)]` with its row count.
struct retrieve_paths_result {
  std::vector<std::int32_t> paths = {};
  index_t rows = {};
  index_t cols = {};
  std::int32_t operator()(index_t r, index_t c) const {
    SPECDEC_EXPECTS(r >= 0 && r < rows && c >= 0 && c < cols, "specdec::retrieve_paths_result", "(", r, ", ", c,
                    ") is outside [", rows, " x ", cols, "]");
    return paths[static_cast<std::size_t>(r * cols + c)];
  }
};

inline retrieve_paths_result retrieve_paths(valid_tree tree, path_order order = path_order::node_index) {
  const std::vector<bool> leaf = leaf_flags(tree);
  std::vector<index_t> leaves;
  for (index_t i = 0; i < tree.size(); ++i)
    if (leaf[static_cast<std::size_t>(i)]) leaves.push_back(i);
  if (order == path_order::reverse_node_index) std::reverse(leaves.begin(), leaves.end());
  const index_t cols = tree.max_depth() + 1;
  retrieve_paths_result out{std::vector<std::int32_t>(leaves.size() * static_cast<std::size_t>(cols), -1),
                            static_cast<index_t>(leaves.size()), cols};
  for (std::size_t r = 0; r < leaves.size(); ++r) {
    for (index_t node = leaves[r]; node >= 0; node = tree.parent(node))
      out.paths[r * static_cast<std::size_t>(cols) + static_cast<std::size_t>(tree.depth(node))] = static_cast<std::int32_t>(node);
  }
  if (order == path_order::lexicographic) {
    std::vector<std::vector<std::int32_t>> rows(leaves.size());
    for (std::size_t r = 0; r < rows.size(); ++r)
      rows[r].assign(out.paths.begin() + static_cast<std::ptrdiff_t>(r * cols),
                     out.paths.begin() + static_cast<std::ptrdiff_t>((r + 1) * cols));
    // -1 pads compare as larger than any node index.
    const auto key = [](std::int32_t v) { return v < 0 ? INT32_MAX : v; };
    std::sort(rows.begin(), rows.end(), [&](const auto& a, const auto& b) {
      return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(),
                                          [&](std::int32_t x, std::int32_t y) { return key(x) < key(y); });
    });
    for (std::size_t r = 0; r < rows.size(); ++r)
      std::copy(rows[r].begin(), rows[r].end(), out.paths.begin() + static_cast<std::ptrdiff_t>(r * cols));
  }
  return out;
}

/// First-child / next-sibling links: `first_child[i]` = lowest-index child of i, `next_sibling[i]` =
/// the next child of i's parent in index order, -1 for none (SGLang's `retrive_next_token` /
/// `retrive_next_sibling`, TensorRT-LLM's dynamic-tree links).
/// \param first_child, next_sibling host `[tree.size()]`. \throws invalid_argument on a malformed tree
/// (valid_tree) or a length mismatch.
template <class Int>
void child_links(valid_tree tree, vector_view<Int> first_child, vector_view<Int> next_sibling) {
  constexpr const char* where = "specdec::child_links";
  SPECDEC_EXPECTS(first_child.rows() == tree.size() && next_sibling.rows() == tree.size(), where,
                  "first_child has ", first_child.rows(), " and next_sibling ", next_sibling.rows(),
                  " entries; expected one per node (", tree.size(), ") in each");
  detail::check_tree_outputs(where, tree.view(), detail::output("first_child", first_child),
                             detail::output("next_sibling", next_sibling));
  for (index_t i = 0; i < tree.size(); ++i) first_child(i) = next_sibling(i) = Int(-1);
  // Walking backwards and inserting at the head leaves every list in increasing index order.
  for (index_t i = tree.size() - 1; i >= 1; --i) {
    const index_t p = tree.parent(i);
    next_sibling(i) = first_child(p);
    first_child(p) = static_cast<Int>(i);
  }
}

/// Per-depth offsets: nodes of depth d are [offsets[d], offsets[d + 1]) (level order guarantees they
/// are contiguous). \returns `max_depth + 2` entries.
/// \throws invalid_argument on a malformed tree (valid_tree) or one not in level order (a depth decreases).
inline std::vector<index_t> depth_offsets(valid_tree tree) {
  std::vector<index_t> offsets(static_cast<std::size_t>(tree.max_depth() + 2), 0);
  for (index_t i = 0; i < tree.size(); ++i) {
    if (i > 0)
      SPECDEC_EXPECTS(tree.depth(i) >= tree.depth(i - 1), "specdec::depth_offsets", "node ", i, " has depth ",
                      tree.depth(i), " after a node of depth ", tree.depth(i - 1),
                      "; expected level order (depths never decrease)");
    ++offsets[static_cast<std::size_t>(tree.depth(i) + 1)];
  }
  for (std::size_t d = 1; d < offsets.size(); ++d) offsets[d] += offsets[d - 1];
  return offsets;
}

}  // namespace specdec
