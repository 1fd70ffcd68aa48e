// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief What every verifier takes and gives: the per-request description (`speculative_request`),
/// the per-request decision (`speculative_result`), and the caller-owned output buffers
/// (`verify_outputs`) in the batch-major layout engines keep on their device (FlashInfer's and
/// SGLang's: `[batch x width]` tokens padded with -1, accepted counts, accepted node indices).
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include <specdec/core/checked.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>
#include <specdec/core/view_checks.hpp>
#include <specdec/sampling/randomness.hpp>
#include <specdec/tree/tree.hpp>

namespace specdec::sampling {

/// One request: its draft tree (a chain is a tree where node i + 1 is the only child of node i) and
/// where its rows are.
struct speculative_request {
  /// The draft tree, by view (a `draft_tree` converts; it must outlive the call). Node 0 is the root.
  tree_view tree = {};
  /// Row of the target matrix holding node 0's target row; node i's is `target_row + i` (the
  /// distribution of the token after node i: its children's and, at a leaf, the bonus token's).
  index_t target_row = 0;
  /// Row of `draft_probs` of the distribution each node was drawn from, `[tree.size()]` (entry 0 unused),
  /// -1 for a deterministic node. Empty: every node is deterministic (top-k trees, n-gram drafts).
  std::span<const index_t> draft_rows = {};
  /// The request's uniforms (see each function for the consumption order).
  uniform_stream uniforms = {};
  /// The temperature verify_speculative_logits softens this request's logits rows at (> 0; vLLM's
  /// per-request temperature). Verifiers that take probabilities ignore it.
  float temperature = 1.0f;
  /// Exp(1) noise row of `exponential_noise` for final_draw::exponential_race (vLLM: one row per request,
  /// shared by its positions).
  index_t noise_row = -1;
  /// Most draft tokens that may be accepted (SGLang's num_spec_steps - 1); -1 for no cap.
  index_t max_accepted = -1;
  /// Sibling order, optional: `first_child` / `next_sibling` `[tree.size()]` links (SGLang's
  /// retrive_next_token / retrive_next_sibling, request-local, -1 for none). Empty: children are visited in
  /// node-index order (what build_tree produces). The links must describe the tree's parent relation.
  std::span<const std::int32_t> first_child = {};
  std::span<const std::int32_t> next_sibling = {};
  /// A bonus token sampled by the caller (vLLM samples it outside the rejection sampler): emitted when
  /// the walk ends without a rejection, instead of a draw from the last node's row. verify_speculative
  /// (without grammar masks) then needs no row for the last node, a leaf: vLLM's `[num_draft_tokens x V]`
  /// target has none.
  std::optional<std::int32_t> bonus_token = std::nullopt;
  /// A greedy (temperature 0) request inside a sampled batch, as vLLM's per-request `is_greedy`: verified
  /// exactly as verify_greedy verifies it (a child is accepted iff its token is the argmax of its
  /// parent's target row, ties to the lower index; the final token is the last node's argmax, or
  /// `bonus_token`), from the rows as given (raw logits in verify_speculative_logits, not softened).
  /// Consumes no uniforms; `draft_rows`, `uniforms`, `temperature` and `noise_row` are ignored.
  /// verify_greedy ignores the flag (every request there is greedy).
  bool greedy = false;
};

/// What one request's verification decided.
struct speculative_result {
  std::vector<std::int32_t> accepted_nodes = {};  ///< node indices of the accepted path, root excluded
  std::vector<std::int32_t> tokens = {};          ///< emitted: the accepted tokens, then the final token
  bool bonus = false;                             ///< the final token is a bonus token (nothing was rejected last)
  index_t acceptance_tests = 0;                   ///< uniforms used by acceptance tests
  index_t uniforms_consumed = 0;                  ///< all uniforms read (tests, re-tests, final draw)
  index_t retest_accepted = 0;                    ///< FlashInfer's accepted_token_num (with flashinfer_retest)
  /// The distribution the final token was drawn from, unnormalised `[V]` (filled when asked for).
  std::vector<float> final_distribution = {};

  /// The tree rows whose KV entries an engine keeps: the root (0), then the accepted nodes in path order.
  std::vector<std::int32_t> kept_nodes() const {
    std::vector<std::int32_t> kept = {0};
    kept.insert(kept.end(), accepted_nodes.begin(), accepted_nodes.end());
    return kept;
  }
};

/// Caller-owned outputs of a verifier, one row or entry per request, in the backend's memory space
/// `Space`. `tokens` is required; every other buffer is optional (an empty view is not written).
///
/// Width: a request can emit at most `min(max depth, max_accepted) + 1` tokens (its accepted tokens,
/// then the final one), so `tokens` needs at least that many columns for the widest request of the
/// batch (`max_depth + 1` of the deepest tree: vLLM's and FlashInfer's `[batch x (k + 1)]`), and
/// `accepted_nodes` one fewer. Columns past what a request emitted are -1.
template <class Space = host_space>
struct verify_outputs {
  /// `[batch x width]`: the emitted tokens (accepted, then the corrected or bonus token), -1 after.
  matrix_view<std::int32_t, Space> tokens = {};
  /// `[batch]`: draft tokens accepted (FlashInfer's `emitted_draft_token_num`, SGLang's
  /// `accept_token_num`); the request emitted this many tokens plus its final one.
  vector_view<std::int32_t, Space> accepted = {};
  /// `[batch x (width - 1)]` or wider: node indices of the accepted path, root excluded, -1 after (an
  /// engine's KV-cache compaction input; SGLang's `accept_index` without the root).
  matrix_view<std::int32_t, Space> accepted_nodes = {};
  /// `[batch]`: uniforms each request read (the next step's stream offset).
  vector_view<std::int32_t, Space> uniforms_consumed = {};
  /// `[batch]`: FlashInfer's `accepted_token_num` (re-tests counted; equals `accepted` without them).
  vector_view<std::int32_t, Space> retest_accepted = {};
  /// `[batch x V]`: the unnormalised distribution each final token was drawn from (zeros where none
  /// was: a greedy request, a caller's bonus token, a deterministic final argmax).
  matrix_view<float, Space> final_distributions = {};
};

namespace detail {

/// Validates a request's tree: well formed, and every draft token (node 1 on) in [0, V). The root's
/// token is the committed one, which verification never reads.
inline void check_tree(const char* where, tree_view tree, index_t vocab, std::size_t request) {
  SPECDEC_EXPECTS(tree.size() > 0, where, "request ", request, " has no tree (an empty tree view)");
  validate(tree);
  specdec::detail::check_vocabulary(where, "V", vocab);
  for (index_t i = 1; i < tree.size(); ++i) {
    const std::int32_t x = tree.token[static_cast<std::size_t>(i)];
    SPECDEC_EXPECTS(x >= 0 && x < vocab, where, "request ", request, " node ", i, " has token ", x,
                    "; expected a token id in [0, V = ", vocab, ")");
  }
}

/// Checks a request's tree (check_tree) and that its target rows exist: one per node, or one per node
/// but the last when `last_node_has_row` is false (vLLM's typical acceptance) or when
/// `bonus_leaf_without_row` is set and the request has a bonus token (the last node is a leaf, and a walk
/// that reaches a leaf emits the bonus without reading its row: vLLM's rejection sampler has no row
/// there). Returns the tree.
inline tree_view checked_tree(const char* where, const speculative_request& q, std::size_t request, index_t vocab,
                              index_t target_rows, bool last_node_has_row = true, bool bonus_leaf_without_row = false) {
  check_tree(where, q.tree, vocab, request);
  SPECDEC_EXPECTS(q.max_accepted >= -1, where, "request ", request, " has max_accepted = ", q.max_accepted,
                  "; expected -1 (no cap) or a cap >= 0");
  const bool last_has_row = last_node_has_row && !(bonus_leaf_without_row && q.bonus_token.has_value());
  const index_t rows = q.tree.size() - (last_has_row ? 0 : 1);
  if (!specdec::detail::range_fits(q.target_row, rows, target_rows)) {
    const char* leaf = last_has_row ? "" : " (one per node but the last, a leaf without a row)";
    if (q.target_row >= 0 && q.target_row <= std::numeric_limits<index_t>::max() - rows)
      specdec::detail::throw_invalid_argument(where, "request ", request, " needs target rows [", q.target_row, ", ",
                                              q.target_row + rows, ") but the target has ", target_rows, " rows", leaf);
    specdec::detail::throw_invalid_argument(where, "request ", request, " needs ", rows, " target rows from target_row = ",
                                            q.target_row, " but the target has ", target_rows, " rows", leaf);
  }
  return q.tree;
}

/// The caller's bonus token of a request, checked against the vocabulary (it is emitted as is).
inline std::int32_t checked_bonus_token(const char* where, const speculative_request& q, std::size_t request,
                                        index_t vocab) {
  SPECDEC_EXPECTS(q.bonus_token.has_value(), where, "request ", request, " has no bonus_token");
  SPECDEC_EXPECTS(*q.bonus_token >= 0 && *q.bonus_token < vocab, where, "request ", request, " bonus_token = ",
                  *q.bonus_token, "; expected a token in [0, ", vocab, ")");
  return *q.bonus_token;
}

/// Children of every node in visiting order: the request's links when given (checked against the
/// parents), else node-index order.
inline std::vector<std::vector<std::int32_t>> children_of(const char* where, const speculative_request& q,
                                                          std::size_t request) {
  const tree_view tree = q.tree;
  const auto n = static_cast<std::size_t>(tree.size());
  std::vector<std::vector<std::int32_t>> children(n);
  if (q.first_child.empty() && q.next_sibling.empty()) {
    for (index_t i = 1; i < tree.size(); ++i)
      children[static_cast<std::size_t>(tree.parent[static_cast<std::size_t>(i)])].push_back(static_cast<std::int32_t>(i));
    return children;
  }
  SPECDEC_EXPECTS(q.first_child.size() == n && q.next_sibling.size() == n, where, "request ", request, " has ",
                  q.first_child.size(), " first_child and ", q.next_sibling.size(), " next_sibling links; expected ", n,
                  " each");
  std::size_t linked = 0;
  for (std::size_t i = 0; i < n; ++i)
    for (std::int32_t c = q.first_child[i]; c >= 0; c = q.next_sibling[static_cast<std::size_t>(c)]) {
      SPECDEC_EXPECTS(static_cast<std::size_t>(c) < n && tree.parent[static_cast<std::size_t>(c)] == static_cast<std::int32_t>(i) &&
                          ++linked < n,
                      where, "request ", request, ": the links list node ", c, " under node ", i,
                      ", which is not its parent in the tree (or the links cycle)");
      children[i].push_back(c);
    }
  SPECDEC_EXPECTS(linked + 1 == n, where, "request ", request, ": the links reach ", linked, " of the ", n - 1,
                  " non-root nodes");
  return children;
}

/// The verifiers' request loop: checks each request's tree and rows (checked_tree), then
/// `walk(request, index, tree)` decides it. `first_request` numbers requests in messages.
template <class Walk>
std::vector<speculative_result> for_each_request(const char* where, std::span<const speculative_request> requests,
                                                 index_t vocab, index_t target_rows, Walk&& walk,
                                                 bool last_node_has_row = true, std::size_t first_request = 0,
                                                 bool bonus_leaf_without_row = false) {
  specdec::detail::check_vocabulary(where, "V", vocab);
  std::vector<speculative_result> results;
  results.reserve(requests.size());
  for (std::size_t r = 0; r < requests.size(); ++r) {
    const std::size_t index = first_request + r;
    const tree_view tree =
        checked_tree(where, requests[r], index, vocab, target_rows, last_node_has_row, bonus_leaf_without_row);
    results.push_back(walk(requests[r], index, tree));
  }
  return results;
}

/// Most tokens a request can emit: its accepted tokens (at most its deepest path, or its cap) and the
/// final one. The tree must have been validated.
inline index_t emitted_width(const speculative_request& q) {
  index_t depth = 0;
  for (const std::int32_t d : q.tree.depth) depth = std::max<index_t>(depth, d);
  if (q.max_accepted >= 0) depth = std::min(depth, q.max_accepted);
  return depth + 1;
}

template <class Space>
void check_output_views(const char* where, const verify_outputs<Space>& out, index_t batch, index_t vocab, index_t width,
                        std::initializer_list<specdec::detail::view_extent> inputs);
template <class Space>
void check_output_views(const char* where, const verify_outputs<Space>& out, index_t batch, index_t vocab, index_t width,
                        std::span<const specdec::detail::view_extent> inputs);

/// Checks the shapes of caller outputs against the batch (before any work, so a call with a short
/// buffer fails whatever the uniforms decide). Trees must have been validated.
template <class Space>
void check_outputs(const char* where, const verify_outputs<Space>& out, std::span<const speculative_request> requests,
                   index_t vocab, std::initializer_list<specdec::detail::view_extent> inputs = {}) {
  index_t width = 1;
  for (const speculative_request& q : requests) width = std::max(width, emitted_width(q));
  // The outputs stay apart from every request's spans too: a tree or uniform under an output would
  // change as the walk writes.
  using specdec::detail::extent_of;
  std::vector<specdec::detail::view_extent> all(inputs);
  for (const speculative_request& q : requests) {
    const auto add = [&](const char* name, auto s) {
      all.push_back(extent_of(where, name, vector_view<const typename decltype(s)::value_type>(s.data(), static_cast<index_t>(s.size()))));
    };
    add("requests[].tree.token", q.tree.token);
    add("requests[].tree.parent", q.tree.parent);
    add("requests[].tree.depth", q.tree.depth);
    add("requests[].draft_rows", q.draft_rows);
    add("requests[].first_child", q.first_child);
    add("requests[].next_sibling", q.next_sibling);
    add("requests[].uniforms", q.uniforms.supplied_values());
  }
  check_output_views(where, out, static_cast<index_t>(requests.size()), vocab, width,
                     std::span<const specdec::detail::view_extent>(all));
}

/// check_outputs for `batch` requests that emit at most `width` tokens each.
template <class Space>
void check_output_views(const char* where, const verify_outputs<Space>& out, index_t batch, index_t vocab, index_t width,
                        std::span<const specdec::detail::view_extent> inputs) {
  // Rows apart, not null unless empty: the writers index them (the backend's upload checks its own
  // stride rule); and no two outputs may share memory, nor an output an input.
  using specdec::detail::check_view;
  using specdec::detail::indexed_output;
  check_view(where, "outputs.tokens", out.tokens, indexed_output);
  check_view(where, "outputs.accepted", out.accepted, indexed_output);
  check_view(where, "outputs.accepted_nodes", out.accepted_nodes, indexed_output);
  check_view(where, "outputs.uniforms_consumed", out.uniforms_consumed, indexed_output);
  check_view(where, "outputs.retest_accepted", out.retest_accepted, indexed_output);
  check_view(where, "outputs.final_distributions", out.final_distributions, indexed_output);
  SPECDEC_EXPECTS(out.tokens.rows() == batch && out.tokens.cols() >= width, where, "outputs.tokens is ",
                  out.tokens.rows(), " x ", out.tokens.cols(), "; expected ", batch, " rows (one per request) and at least ",
                  width, " columns (the deepest accepted path + 1)");
  const auto check_vector = [&](const auto& v, const char* name) {
    SPECDEC_EXPECTS(v.empty() || v.rows() == batch, where, "outputs.", name, " has ", v.rows(), " entries; expected ",
                    batch, " (one per request) or none");
  };
  check_vector(out.accepted, "accepted");
  check_vector(out.uniforms_consumed, "uniforms_consumed");
  check_vector(out.retest_accepted, "retest_accepted");
  SPECDEC_EXPECTS(out.accepted_nodes.empty() || (out.accepted_nodes.rows() == batch && out.accepted_nodes.cols() >= width - 1),
                  where, "outputs.accepted_nodes is ", out.accepted_nodes.rows(), " x ", out.accepted_nodes.cols(),
                  "; expected ", batch, " rows and at least ", width - 1, " columns, or none");
  SPECDEC_EXPECTS(out.final_distributions.empty() ||
                      (out.final_distributions.rows() == batch && out.final_distributions.cols() == vocab),
                  where, "outputs.final_distributions is ", out.final_distributions.rows(), " x ",
                  out.final_distributions.cols(), "; expected ", batch, " x ", vocab, " or none");
  // The padded host copies of tokens and accepted_nodes are their size.
  (void)specdec::detail::checked_count(where, {batch, out.tokens.cols()}, "outputs.tokens");
  (void)specdec::detail::checked_count(where, {batch, out.accepted_nodes.cols()}, "outputs.accepted_nodes");
  using specdec::detail::extent_of;
  const specdec::detail::view_extent all[] = {
      extent_of(where, "outputs.tokens", out.tokens),
      extent_of(where, "outputs.accepted", out.accepted),
      extent_of(where, "outputs.accepted_nodes", out.accepted_nodes),
      extent_of(where, "outputs.uniforms_consumed", out.uniforms_consumed),
      extent_of(where, "outputs.retest_accepted", out.retest_accepted),
      extent_of(where, "outputs.final_distributions", out.final_distributions)};
  for (std::size_t i = 0; i < std::size(all); ++i) {
    for (std::size_t j = i + 1; j < std::size(all); ++j) specdec::detail::check_disjoint(where, all[i], all[j]);
    for (const specdec::detail::view_extent& input : inputs) specdec::detail::check_disjoint(where, all[i], input);
  }
}

template <class Space>
void check_output_views(const char* where, const verify_outputs<Space>& out, index_t batch, index_t vocab, index_t width,
                        std::initializer_list<specdec::detail::view_extent> inputs) {
  check_output_views(where, out, batch, vocab, width, std::span<const specdec::detail::view_extent>(inputs.begin(), inputs.size()));
}

/// Writes host values into a caller matrix in the backend's space, one copy when its rows are packed.
template <class B, class T>
void store_matrix(B& b, const std::vector<T>& host, matrix_view<T, typename B::memory_space> dst) {
  if (dst.rows() <= 0 || dst.cols() <= 0) return;
  if (dst.has_contiguous_rows() && dst.stride(0) == dst.cols()) {
    b.upload(std::span<const T>(host), vector_view<T, typename B::memory_space>(dst.data(), dst.size()));
    return;
  }
  const T* row = host.data();
  for (index_t r = 0; r < dst.rows(); ++r, row += dst.cols())
    b.upload(std::span<const T>(row, static_cast<std::size_t>(dst.cols())),
             vector_view<T, typename B::memory_space>(dst.row(r), dst.cols(), dst.stride(1)));
}

/// Scatters per-request results into the caller's outputs (checked by check_outputs).
template <class B>
void write_outputs(B& b, std::span<const speculative_result> results, const verify_outputs<typename B::memory_space>& out) {
  const std::size_t batch = results.size();
  const auto per_request = [&](auto&& value) {
    std::vector<std::int32_t> v(batch);
    for (std::size_t r = 0; r < batch; ++r) v[r] = static_cast<std::int32_t>(value(results[r]));
    return v;
  };
  const auto padded = [&](index_t cols, auto&& list) {
    std::vector<std::int32_t> m(batch * static_cast<std::size_t>(cols), -1);
    for (std::size_t r = 0; r < batch; ++r) std::copy(list(results[r]).begin(), list(results[r]).end(), m.begin() + static_cast<std::ptrdiff_t>(r) * cols);
    return m;
  };
  store_matrix(b, padded(out.tokens.cols(), [](const speculative_result& x) -> const auto& { return x.tokens; }), out.tokens);
  if (!out.accepted_nodes.empty())
    store_matrix(b, padded(out.accepted_nodes.cols(), [](const speculative_result& x) -> const auto& { return x.accepted_nodes; }),
                 out.accepted_nodes);
  if (!out.accepted.empty())
    b.upload(std::span<const std::int32_t>(per_request([](const speculative_result& x) { return x.accepted_nodes.size(); })),
             out.accepted);
  if (!out.uniforms_consumed.empty())
    b.upload(std::span<const std::int32_t>(per_request([](const speculative_result& x) { return x.uniforms_consumed; })),
             out.uniforms_consumed);
  if (!out.retest_accepted.empty())
    b.upload(std::span<const std::int32_t>(per_request([](const speculative_result& x) { return x.retest_accepted; })),
             out.retest_accepted);
  if (!out.final_distributions.empty()) {
    const auto vocab = static_cast<std::size_t>(out.final_distributions.cols());
    std::vector<float> m(batch * vocab, 0.0f);
    for (std::size_t r = 0; r < batch; ++r)
      std::copy(results[r].final_distribution.begin(), results[r].final_distribution.end(), m.begin() + static_cast<std::ptrdiff_t>(r * vocab));
    store_matrix(b, m, out.final_distributions);
  }
}

/// What every verifier's output form does: checks the requests' trees and the outputs' shapes before
/// any work, then writes what `decide()` (the returning form's decisions) returns.
/// `inputs`: the verifier's input rows, which no output may overlap.
template <class B, class Decide>
void verify_into(B& b, const char* where, std::span<const speculative_request> requests, index_t vocab,
                 const verify_outputs<typename B::memory_space>& outputs, Decide&& decide,
                 std::initializer_list<specdec::detail::view_extent> inputs = {}) {
  specdec::detail::check_vocabulary(where, "V", vocab);
  for (std::size_t r = 0; r < requests.size(); ++r) check_tree(where, requests[r].tree, vocab, r);
  check_outputs(where, outputs, requests, vocab, inputs);
  write_outputs(b, decide(), outputs);
}

/// A verifier's input rows `[rows x V]`: contiguous rows apart (the walks read whole rows), not null
/// unless empty.
template <class T, class Space>
void check_input_rows(const char* where, const char* name, const matrix_view<T, Space>& m) {
  specdec::detail::check_view(where, name, m, specdec::detail::contiguous_rows | specdec::detail::distinct_rows);
}

}  // namespace detail

}  // namespace specdec::sampling
