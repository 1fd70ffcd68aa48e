// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief EAGLE-1's static trees (EAGLE branch `v1`), bit for bit: the target-side
/// `generate_tree_buffers` (mask, tree indices, positions, sorted retrieve indices, the sampling helpers
/// p_indices / b_indices), the draft-side buffers of `utils_c.generate_tree_buffers`, and the static
/// draft run of `topK_genrate` as an incremental API. Unlike Medusa, EAGLE-1 draws each node's
/// children from its own parent's top-10, so gather indices are per parent ("group").
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/core/view_checks.hpp>
#include <specdec/interop/target_buffers.hpp>
#include <specdec/tree/detail/host_topk.hpp>
#include <specdec/tree/drafter.hpp>
#include <specdec/tree/drafters.hpp>
#include <specdec/tree/static_tree.hpp>

namespace specdec::eagle1 {

inline constexpr index_t default_top_k = 10;

/// Draft-side buffers of one level l (the nodes with children at depth l + 1, "expanded nodes"):
/// `attn_mask` `[m x c]` over the expanded nodes of depth <= l + 1; `tree_indices` `[m]` = rank +
/// top_k * (row of the parent in the previous level's top-k rows); `repeat_nums` run lengths of
/// consecutive nodes sharing a parent; `position_ids` zeros `[m]`.
struct draft_level {
  std::vector<std::int32_t> nodes = {};  ///< tree node indices of the level's expanded nodes
  std::vector<std::uint8_t> attn_mask = {};
  index_t mask_cols = 0;
  std::vector<std::int64_t> tree_indices = {};
  std::vector<std::int64_t> position_ids = {};
  std::vector<std::int64_t> repeat_nums = {};
};

/// Everything `generate_tree_buffers` (both versions) produce, host: the target_buffers part
/// (`tree_mask` = `tree_attn_mask`, `position_ids` = `tree_position_ids`, `retrieve_indices` sorted
/// lexicographically, -1 last), plus:
/// - `tree_indices` `[T]`: root 0, else rank + top_k * group(parent) + 1, where group(root) = 0 and the
///   nodes with children get groups 1, 2, ... in node order; it indexes `[root] ++ flatten(ss_token)`;
/// - `p_indices` shaped as `retrieve_indices`: rank of the node's parent among its level's distinct
///   parents (root and padding as EAGLE: -1 for the root, padding repeats the last node's value);
/// - `b_indices` same shape, lists: node indices of the node's earlier siblings;
/// - `levels`: the draft-side buffers.
struct buffers : target_buffers {
  static_tree shape;
  index_t top_k = default_top_k;
  std::vector<std::int64_t> tree_indices = {};
  std::vector<std::int64_t> p_indices = {};
  std::vector<std::vector<std::int64_t>> b_indices = {};
  std::vector<std::int32_t> group = {};  ///< per node: its top-k row in ss_token when it has children, else -1
  std::vector<draft_level> levels = {};
};

/// \throws invalid_argument as make_static_tree.
inline buffers make_buffers(std::span<const choice> choices, index_t top_k = default_top_k) {
  buffers out;
  out.shape = make_static_tree(choices, top_k);
  out.top_k = top_k;
  const draft_tree& tree = out.shape.tree;
  const valid_tree valid(tree);
  const index_t n = tree.size();
  const auto at = [](auto& v, index_t i) -> auto& { return v[static_cast<std::size_t>(i)]; };
  fill_target_buffers(valid, path_order::lexicographic, out);
  const std::vector<bool> leaf = leaf_flags(valid);
  out.group.assign(static_cast<std::size_t>(n), -1);
  std::int32_t groups = 0;
  for (index_t i = 0; i < n; ++i)
    if (!leaf[static_cast<std::size_t>(i)]) at(out.group, i) = groups++;
  out.tree_indices.resize(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i)
    at(out.tree_indices, i) = i == 0 ? 0 : at(out.shape.rank, i) + top_k * at(out.group, at(tree.parent, i)) + 1;
  // p: rank of the parent among the distinct parents of the node's level (parents appear in node order).
  std::vector<std::int64_t> p(static_cast<std::size_t>(n), -1);
  for (index_t i = 1, rank = -1, last_parent = -1, level = 0; i < n; ++i) {
    if (at(tree.depth, i) != level) {
      level = at(tree.depth, i);
      rank = -1;
      last_parent = -1;
    }
    if (at(tree.parent, i) != last_parent) {
      last_parent = at(tree.parent, i);
      ++rank;
    }
    at(p, i) = rank;
  }
  out.p_indices.resize(out.retrieve_indices.size());
  out.b_indices.resize(out.retrieve_indices.size());
  for (std::size_t j = 0; j < out.retrieve_indices.size(); ++j) {
    const std::int64_t node = out.retrieve_indices[j];
    out.p_indices[j] = node < 0 ? p.back() : p[static_cast<std::size_t>(node)];
    if (node > 0)
      for (index_t s = 1; s < node; ++s)
        if (at(tree.parent, s) == at(tree.parent, node)) out.b_indices[j].push_back(s);
  }
  // Draft side, one level per depth that has expanded nodes.
  std::vector<std::int32_t> expanded_so_far;  // expanded non-root nodes of depth <= current level + 1
  std::vector<std::int32_t> previous_rows = {0};  // nodes whose top-k rows the level reads (root first)
  for (std::int32_t depth = 1; depth < tree.max_depth(); ++depth) {
    draft_level level;
    for (index_t i = 1; i < n; ++i)
      if (at(tree.depth, i) == depth && !leaf[static_cast<std::size_t>(i)]) level.nodes.push_back(static_cast<std::int32_t>(i));
    expanded_so_far.insert(expanded_so_far.end(), level.nodes.begin(), level.nodes.end());
    level.mask_cols = static_cast<index_t>(expanded_so_far.size());
    level.attn_mask.assign(level.nodes.size() * expanded_so_far.size(), 0);
    for (std::size_t r = 0; r < level.nodes.size(); ++r)
      for (std::size_t c = 0; c < expanded_so_far.size(); ++c)
        for (index_t a = level.nodes[r]; a > 0; a = at(tree.parent, a))
          if (a == expanded_so_far[c]) level.attn_mask[r * expanded_so_far.size() + c] = 1;
    std::int32_t last_parent = -1;
    for (const std::int32_t node : level.nodes) {
      const std::int32_t parent = at(tree.parent, node);
      // The parent's row among the previous level's rows (EAGLE assumes parents form a prefix of
      // them and counts distinct parents; indexing by the true row agrees wherever that holds).
      const auto row = std::find(previous_rows.begin(), previous_rows.end(), parent) - previous_rows.begin();
      level.tree_indices.push_back(at(out.shape.rank, node) + top_k * static_cast<index_t>(row));
      level.position_ids.push_back(0);
      if (parent == last_parent) ++level.repeat_nums.back();
      else level.repeat_nums.push_back(1);
      last_parent = parent;
    }
    previous_rows = level.nodes;
    out.levels.push_back(std::move(level));
  }
  return out;
}

inline buffers make_buffers(const std::vector<choice>& choices, index_t top_k = default_top_k) {
  return make_buffers(std::span<const choice>(choices), top_k);
}

/// One draft forward of the static run: the level's expanded nodes, their tokens (`input_ids`), the
/// draft-side mask and positions `draft_position_base + level`.
struct static_step {
  index_t level = 0;
  std::vector<std::int32_t> input_ids = {};
  std::vector<std::int64_t> position_ids = {};
  const draft_level* buffers = nullptr;
};

/// EAGLE-1's static draft (`topK_genrate` in `v1`): top-k of the root's draft logits, then one forward
/// per level over the level's expanded nodes. Usage: `begin(root_logits)`, then while `!done()`:
/// run the draft on `step.input_ids`, `expand(logits)`. Then `ss_token()` `[1 + expanded x top_k]`,
/// `tree_candidates()` `[T]` and `cart_candidates()` (pad -1).
template <backend B>
class static_drafter {
 public:
  using space = typename B::memory_space;

  /// \throws invalid_argument on a negative root token, a draft_position_base outside [0, 2^62]
  ///   (positions are draft_position_base + level), or buffers whose indices do not fit together (a
  ///   caller may edit them: see checked_buffers).
  static_drafter(B& b, const buffers& buf, std::int32_t root_token, index_t draft_position_base)
      : buf_(&checked_buffers(buf)), topk_(b, std::max<index_t>(1, max_level_rows(buf)), buf.top_k), root_token_(root_token),
        position_base_(draft_position_base) {
    constexpr const char* where = "specdec::eagle1::static_drafter";
    SPECDEC_EXPECTS(root_token >= 0, where, "root_token = ", root_token, "; expected a token id >= 0");
    SPECDEC_EXPECTS(draft_position_base >= 0 && draft_position_base <= (index_t{1} << 62), where,
                    "draft_position_base = ", draft_position_base, "; expected 0 <= draft_position_base <= 2^62");
  }

  /// \param root_logits backend `[1 x V]`. \throws invalid_argument on bad logits or top_k > V.
  static_step begin(matrix_view<const float, space> root_logits) {
    SPECDEC_EXPECTS(root_logits.rows() == 1, "specdec::eagle1::static_drafter::begin", "root_logits has ",
                    root_logits.rows(), " rows; expected 1");
    topk_.run(root_logits, detail::topk_scale::logits);
    return begin_with(topk_.indices());
  }
  /// Same as begin() with the root's `top_k` children proposed by the caller (a sampled draft, or
  /// Jakiro*'s two experts: see specdec/tree/jakiro.hpp). \param root_row host `[top_k]`.
  static_step begin_with(std::span<const std::int32_t> root_row) {
    SPECDEC_EXPECTS(static_cast<index_t>(root_row.size()) == buf_->top_k, "specdec::eagle1::static_drafter::begin_with",
                    "root_row has ", root_row.size(), " tokens; expected top_k = ", buf_->top_k);
    check_tokens("specdec::eagle1::static_drafter::begin_with", "root_row", root_row);
    ss_token_.assign(root_row.begin(), root_row.end());
    level_ = 0;
    return step();
  }
  bool done() const noexcept { return level_ >= static_cast<index_t>(buf_->levels.size()); }

  /// \param level_logits backend `[m x V]`, row j = the level's j-th expanded node.
  static_step expand(matrix_view<const float, space> level_logits) {
    constexpr const char* where = "specdec::eagle1::static_drafter::expand";
    SPECDEC_EXPECTS(!done(), where, "every level has been expanded already");
    SPECDEC_EXPECTS(level_logits.rows() == level_rows(), where, "level_logits has ", level_logits.rows(),
                    " rows; level ", level_, " has ", level_rows(), " expanded nodes");
    topk_.run(level_logits, detail::topk_scale::logits);
    return expand_with(topk_.indices());
  }
  /// Same as expand() with the children proposed by the caller. \param level_rows host
  /// `[m x top_k]`, row j = the children of the level's j-th expanded node.
  static_step expand_with(std::span<const std::int32_t> rows) {
    constexpr const char* where = "specdec::eagle1::static_drafter::expand_with";
    SPECDEC_EXPECTS(!done(), where, "every level has been expanded already");
    SPECDEC_EXPECTS(static_cast<index_t>(rows.size()) == level_rows() * buf_->top_k, where, "rows has ",
                    rows.size(), " tokens; level ", level_, " needs ", level_rows(), " x top_k = ",
                    level_rows() * buf_->top_k);
    check_tokens(where, "rows", rows);
    ss_token_.insert(ss_token_.end(), rows.begin(), rows.end());
    ++level_;
    return step();
  }
  /// Number of expanded nodes of the level the next expand() drafts (0 once done()).
  index_t level_rows() const noexcept {
    return done() ? 0 : static_cast<index_t>(buf_->levels[static_cast<std::size_t>(level_)].nodes.size());
  }

  const std::vector<std::int32_t>& ss_token() const noexcept { return ss_token_; }

  /// Token of every node: the root token, else ss_token[group(parent)][rank].
  std::vector<std::int32_t> tree_candidates() const {
    const draft_tree& tree = buf_->shape.tree;
    std::vector<std::int32_t> out(static_cast<std::size_t>(tree.size()));
    for (index_t i = 0; i < tree.size(); ++i) out[static_cast<std::size_t>(i)] = token(i);
    return out;
  }
  /// tree_candidates() for the nodes no deeper than `depth` (the levels that produce them drafted),
  /// 0 for the deeper ones.
  std::vector<std::int32_t> tree_candidates_to(index_t depth) const {
    const draft_tree& tree = buf_->shape.tree;
    std::vector<std::int32_t> out(static_cast<std::size_t>(tree.size()), 0);
    for (index_t i = 0; i < tree.size(); ++i)
      if (tree.depth[static_cast<std::size_t>(i)] <= depth) out[static_cast<std::size_t>(i)] = token(i);
    return out;
  }
  std::vector<std::int32_t> cart_candidates(std::int32_t pad_token = -1) const {
    std::vector<std::int32_t> out;
    for (const std::int64_t node : buf_->retrieve_indices) out.push_back(node < 0 ? pad_token : token(node));
    return out;
  }

 private:
  // Caller-proposed children become draft tokens as they are.
  static void check_tokens(const char* where, const char* name, std::span<const std::int32_t> tokens) {
    for (std::size_t i = 0; i < tokens.size(); ++i)
      SPECDEC_EXPECTS(tokens[i] >= 0, where, name, "[", i, "] = ", tokens[i], "; expected a token id >= 0");
  }
  /// The buffers' indices the drafter follows, checked once: one group and rank per node, every node
  /// with children a group in [0, groups) and every rank in [0, top_k) (so each token's index lies in
  /// ss_token), level nodes and retrieve indices in range. make_buffers' buffers always pass.
  static const buffers& checked_buffers(const buffers& buf) {
    constexpr const char* where = "specdec::eagle1::static_drafter";
    const draft_tree& tree = buf.shape.tree;
    const index_t n = tree.size();
    SPECDEC_EXPECTS(buf.top_k >= 1 && static_cast<index_t>(buf.group.size()) == n &&
                        static_cast<index_t>(buf.shape.rank.size()) == n && static_cast<index_t>(tree.parent.size()) == n,
                    where, "buffers hold ", buf.group.size(), " groups and ", buf.shape.rank.size(), " ranks for ", n,
                    " nodes (top_k = ", buf.top_k, "); expected one of each per node and top_k >= 1 (make_buffers)");
    index_t groups = 0;
    for (const std::int32_t g : buf.group) groups += g >= 0 ? 1 : 0;
    for (index_t i = 1; i < n; ++i) {
      const std::int32_t parent = tree.parent[static_cast<std::size_t>(i)];
      SPECDEC_EXPECTS(parent >= 0 && parent < i, where, "buffers: node ", i, " has parent ", parent, "; expected an earlier node");
      const std::int32_t g = buf.group[static_cast<std::size_t>(parent)], r = buf.shape.rank[static_cast<std::size_t>(i)];
      SPECDEC_EXPECTS(g >= 0 && g < groups && r >= 0 && r < buf.top_k, where, "buffers: node ", i, " is rank ", r,
                      " in its parent's group ", g, "; expected a group in [0, ", groups, ") and a rank in [0, top_k = ",
                      buf.top_k, ")");
    }
    for (const draft_level& level : buf.levels)
      for (const std::int32_t node : level.nodes)
        SPECDEC_EXPECTS(node >= 0 && node < n, where, "buffers: a level expands node ", node, "; expected [0, ", n, ")");
    for (const std::int64_t node : buf.retrieve_indices)
      SPECDEC_EXPECTS(node >= -1 && node < n, where, "buffers: retrieve index ", node, "; expected -1 or a node in [0, ", n, ")");
    return buf;
  }
  static index_t max_level_rows(const buffers& buf) {
    index_t rows = 1;
    for (const draft_level& l : buf.levels) rows = std::max<index_t>(rows, static_cast<index_t>(l.nodes.size()));
    return rows;
  }
  std::int32_t token(index_t node) const {
    if (node == 0) return root_token_;
    const draft_tree& tree = buf_->shape.tree;
    const index_t row = buf_->group[static_cast<std::size_t>(tree.parent[static_cast<std::size_t>(node)])];
    const index_t index = row * buf_->top_k + buf_->shape.rank[static_cast<std::size_t>(node)];
    SPECDEC_EXPECTS(index < static_cast<index_t>(ss_token_.size()), "specdec::eagle1::static_drafter",
                    "node ", node, " needs a top-k row that has not been drafted yet; expand every level first");
    return ss_token_[static_cast<std::size_t>(index)];
  }
  static_step step() const {
    static_step s;
    s.level = level_;
    if (done()) return s;
    const draft_level& level = buf_->levels[static_cast<std::size_t>(level_)];
    s.buffers = &level;
    for (const std::int32_t node : level.nodes) {
      s.input_ids.push_back(token(node));
      s.position_ids.push_back(position_base_ + level_);
    }
    return s;
  }

  const buffers* buf_;
  detail::host_topk<B> topk_;
  std::int32_t root_token_;
  index_t position_base_;
  index_t level_ = 0;
  std::vector<std::int32_t> ss_token_;
};

/// Logits rows a static drafter takes per node: 1 (EAGLE-1), 2 for Jakiro*'s two experts
/// (specialised in interop/jakiro.hpp).
template <class Static>
struct static_experts : std::integral_constant<index_t, 1> {};

/// EAGLE-1's static draft as a model of `specdec::drafter` (tree/drafter.hpp): the root row, then one
/// request per level with the level's expanded nodes (each row continuing its parent's row of the
/// previous request, attending the root and its ancestors among the rows run), the tree's tokens from
/// `Static` (static_drafter; `jakiro::tree_drafter` runs Jakiro*'s two-expert one, whose requests ask
/// for two logits rows per node: left, then right). With `adaptive` the draft-length policy picks the
/// depth L per step (levels past it are not run; nothing at L = 0); otherwise the whole tree every step.
template <backend B, class Static = static_drafter<B>>
class tree_drafter {
 public:
  using memory_space = typename B::memory_space;
  static constexpr index_t experts = static_experts<Static>::value;
  /// \param buf the static tree (make_buffers), outliving the drafter.
  tree_drafter(B& b, const buffers& buf, bool adaptive = false)
      : b_(&b), buf_(&buf), adaptive_(adaptive), policy_(buf.shape.tree.max_depth()) {}

  const draft_request* begin(const draft_context& context) {
    SPECDEC_EXPECTS(!context.committed.empty(), "specdec::eagle1::tree_drafter::begin", "the context is empty; expected the root at least");
    root_ = context.root();
    depth_ = adaptive_ ? policy_.choose() : buf_->shape.tree.max_depth();
    tree_ = make_tree({root_}, {-1});
    drafter_.emplace(*b_, *buf_, root_, context.root_position() + 1);
    run_.assign(1, 0);  // the tree node each row of this step ran
    if (depth_ == 0) return nullptr;
    request_ = {{root_}, {0}, {-1}, {1}, 1, experts};
    return &request_;
  }
  /// \param logits backend `[rows x experts x V]` of the pending request (Jakiro*: row r's left expert
  /// at 2r, its right at 2r + 1). \throws invalid_argument when no forward is pending, and as `Static`.
  const draft_request* advance(matrix_view<const float, memory_space> logits) {
    constexpr const char* where = "specdec::eagle1::tree_drafter::advance";
    SPECDEC_EXPECTS(drafter_.has_value() && request_.rows() > 0, where, "no draft forward is pending");
    SPECDEC_EXPECTS(logits.rows() == request_.logits_rows(), where, "logits has ", logits.rows(), " rows; the request needs ",
                    request_.logits_rows());
    const static_step step = run_static(logits, request_.depth[0] == 0);
    // Level l's expansion gives the nodes of depth l + 2: a draft L deep needs levels 0 .. L - 2.
    if (drafter_->done() || step.level + 1 >= depth_) return done();
    const draft_tree& shape = buf_->shape.tree;
    const std::vector<std::int32_t> previous(run_.end() - request_.rows(), run_.end());
    const auto first_row = static_cast<std::int32_t>(run_.size());
    draft_request next;
    for (std::size_t i = 0; i < step.input_ids.size(); ++i) {
      const std::int32_t node = step.buffers->nodes[i];
      next.tokens.push_back(step.input_ids[i]);
      next.depth.push_back(shape.depth[static_cast<std::size_t>(node)]);
      next.parent_row.push_back(static_cast<std::int32_t>(
          std::find(previous.begin(), previous.end(), shape.parent[static_cast<std::size_t>(node)]) - previous.begin()));
      run_.push_back(node);
    }
    next.mask_cols = static_cast<index_t>(run_.size());
    next.logits_per_row = experts;
    next.mask.assign(step.input_ids.size() * run_.size(), 0);
    for (std::size_t i = 0; i < step.input_ids.size(); ++i)
      for (std::size_t c = 0; c < run_.size(); ++c)
        for (std::int32_t a = run_[static_cast<std::size_t>(first_row) + i]; a >= 0; a = shape.parent[static_cast<std::size_t>(a)])
          if (a == run_[c]) next.mask[i * run_.size() + c] = 1;
    request_ = std::move(next);
    return &request_;
  }
  drafted finish() {
    request_ = {};
    drafter_.reset();
    return {tree_, {}, {}};
  }
  void feedback(const draft_feedback& f) { detail::record_feedback(policy_, tree_, f); }
  policy::draft_length_policy& policy() noexcept { return policy_; }
  const policy::draft_length_policy& policy() const noexcept { return policy_; }

 private:
  static_step run_static(matrix_view<const float, memory_space> logits, bool root) {
    if constexpr (experts == 1) {
      return root ? drafter_->begin(logits) : drafter_->expand(logits);
    } else {
      // The two experts' rows interleave: the halves below are views of `logits` at twice its row
      // stride, valid only for a well-formed, packed-row view (checked first).
      specdec::detail::check_view("specdec::eagle1::tree_drafter::advance", "logits", logits,
                                  specdec::detail::contiguous_rows | specdec::detail::distinct_rows);
      const index_t rows = logits.rows() / 2, v = logits.cols(), stride = logits.stride(0);
      const matrix_view<const float, memory_space> left(logits.data(), rows, v, 2 * stride, 1),
          right(logits.data() + stride, rows, v, 2 * stride, 1);
      return root ? drafter_->begin(left, right) : drafter_->expand(left, right);
    }
  }
  const draft_request* done() {
    draft_tree tree = buf_->shape.tree;
    tree.token = drafter_->tree_candidates_to(depth_);
    tree_ = cut_to_depth(tree, depth_);
    request_ = {};
    return nullptr;
  }
  B* b_;
  const buffers* buf_;
  bool adaptive_;
  policy::draft_length_policy policy_;
  std::optional<Static> drafter_;
  draft_request request_;
  draft_tree tree_;
  std::vector<std::int32_t> run_;
  std::int32_t root_ = 0;
  index_t depth_ = 0;
};

}  // namespace specdec::eagle1
