// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The batched verifiers' team jobs (backend/detail/team.hpp): one team per request checks its
/// tree, walks it and writes its outputs, on the host or in one CUDA block, without a host round trip.
/// This header: the batch's views, the tree checks and sibling links every job shares, and the greedy
/// job; the stochastic job is in speculative_walk.hpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include <specdec/backend/concept.hpp>
#include <specdec/backend/detail/math.hpp>
#include <specdec/backend/detail/row_simd.hpp>
#include <specdec/backend/detail/sample_kernels.hpp>
#include <specdec/backend/detail/team.hpp>
#include <specdec/config.hpp>
#include <specdec/core/half.hpp>
#include <specdec/core/memory_space.hpp>
#include <specdec/core/rng.hpp>
#include <specdec/core/view.hpp>
#include <specdec/sampling/detail/faults.hpp>
#include <specdec/sampling/detail/greedy_walk.hpp>
#include <specdec/sampling/randomness.hpp>
#include <specdec/sampling/speculative_options.hpp>

namespace specdec::sampling::detail::inline SPECDEC_ISA {

using specdec::detail::make_team_fault;
using specdec::detail::sampling_fault;
using specdec::detail::tree_fault;
using specdec::detail::team_fault;

/// Uniform `position` of request r in a sampled batch: a supplied value (`values` non-empty when
/// `streams` is empty; checked: enough columns, inside `range`), else the request's Philox stream from
/// its offset mapped into `range`. The one lookup of every sampled batch job (`arg`: its name index).
template <class Space>
SPECDEC_HOST_DEVICE inline team_fault batch_uniform(matrix_view<const double, Space> values,
                                                    vector_view<const philox_stream, Space> streams,
                                                    vector_view<const std::uint64_t, Space> offsets, uniform_range range,
                                                    int arg, index_t r, std::uint64_t position, double& u) {
  if (streams.empty()) {
    if (position >= static_cast<std::uint64_t>(values.cols()))
      return make_team_fault(sampling_fault::too_few_uniforms, arg, r, static_cast<std::int64_t>(position), 0.0, values.cols());
    u = values(r, static_cast<index_t>(position));
    if (!uniform_in_range(u, range))
      return make_team_fault(sampling_fault::uniform_value, arg, r, static_cast<std::int64_t>(position), u,
                             range == uniform_range::closed_open ? 0 : 1);
    return {};
  }
  const std::uint64_t offset = offsets.empty() ? 0 : offsets(r);
  u = philox_in_range(streams(r).uniform_double(offset + position), range);
  return {};
}

/// Argument indices of the batch jobs' fault names (batch.hpp fills the names in this order).
enum batch_arg : int {
  arg_node_counts,
  arg_parents,
  arg_tokens,
  arg_target,
  arg_draft_rows,
  arg_draft,
  arg_noise_rows,
  arg_noise,
  arg_max_accepted,
  arg_out_tokens,
  arg_out_nodes,
  arg_uniforms,
  arg_bonus,
  arg_final,
  arg_bitmask,
};
static_assert(arg_final < specdec::detail::team_job_names);

/// A request's tree as the jobs read it (device or host views; built by batch.hpp).
template <class Space>
struct batch_trees {
  matrix_view<const std::int32_t, Space> tokens;
  matrix_view<const std::int32_t, Space> parents;
  vector_view<const std::int32_t, Space> node_counts;  // empty: every request has tokens.cols() nodes
  vector_view<const index_t, Space> target_rows;       // empty: request r's node 0 is row r * nodes
  vector_view<const std::int32_t, Space> max_accepted;  // empty: no caps
  vector_view<const std::int32_t, Space> bonus_tokens;  // empty: none
  /// Sibling order, `[batch x nodes]` each (request-local, -1 for none), checked against the parents by
  /// the caller (children_of). Empty: children in node-index order.
  matrix_view<const std::int32_t, Space> first_child;
  matrix_view<const std::int32_t, Space> next_sibling;
  /// A request with a bonus token needs no row for its last node, a leaf (vLLM's layout): a walk that
  /// reaches a leaf emits the bonus without reading the leaf's row.
  bool bonus_leaf_without_row;
};

/// Output views (verify_outputs' members, by value for the device).
template <class Space>
struct batch_outputs {
  matrix_view<std::int32_t, Space> tokens;
  vector_view<std::int32_t, Space> accepted;
  matrix_view<std::int32_t, Space> accepted_nodes;
  vector_view<std::int32_t, Space> uniforms_consumed;
  vector_view<std::int32_t, Space> retest_accepted;
  matrix_view<float, Space> final_distributions;
  /// `[batch]` each, optional (the request-based forms' result fields): whether the final token is a
  /// bonus token (1) or a corrected one (0), and the uniforms acceptance tests read.
  vector_view<std::int32_t, Space> bonus;
  vector_view<std::int32_t, Space> acceptance_tests;
};

/// Per-team scratch of the tree part: sibling links, `nodes` entries each.
struct tree_scratch {
  std::int32_t* first_child;
  std::int32_t* next_sibling;
  std::int32_t* depth;  // [0] also holds the deepest node's depth once the tree is checked
  SPECDEC_HOST_DEVICE static constexpr std::size_t bytes(index_t nodes) {
    return 3 * sizeof(std::int32_t) * static_cast<std::size_t>(nodes);
  }
  SPECDEC_HOST_DEVICE static tree_scratch carve(std::byte* base, index_t nodes) {
    auto* p = reinterpret_cast<std::int32_t*>(base);
    return {p, p + nodes, p + 2 * nodes};
  }
};

/// What a request's checked tree gives the walk.
struct checked_request {
  index_t nodes = 0;
  index_t first_row = 0;
  std::int32_t cap = -1;
  std::int32_t bonus = -1;
};

/// Checks request r's tree (node count, parents, tokens, rows, cap, bonus token, output widths) and
/// builds its sibling links (node-index order) in `ts`. Every thread checks (the same reads give the
/// same verdict); rank 0 builds the links.
template <class Team, class Space>
SPECDEC_HOST_DEVICE team_fault check_and_link(Team& team, const batch_trees<Space>& trees, const batch_outputs<Space>& out,
                                              index_t r, index_t vocab, index_t target_rows, tree_scratch ts,
                                              checked_request& q) {
  const index_t width = trees.tokens.cols();
  q.nodes = trees.node_counts.empty() ? width : trees.node_counts(r);
  if (q.nodes < 1 || q.nodes > width) return make_team_fault(tree_fault::node_count, arg_node_counts, r, 0, double(q.nodes), width);
  const std::int32_t* parent = trees.parents.row(r);
  const std::int32_t* token = trees.tokens.row(r);
  if (parent[0] != -1) return make_team_fault(tree_fault::root_parent, arg_parents, r, 0, parent[0]);
  for (index_t i = 1; i < q.nodes; ++i) {
    if (parent[i] < 0 || parent[i] >= i) return make_team_fault(tree_fault::bad_parent, arg_parents, r, i, parent[i]);
    if (token[i] < 0 || token[i] >= vocab) return make_team_fault(tree_fault::token_range, arg_tokens, r, i, token[i], vocab);
  }
  q.cap = trees.max_accepted.empty() ? -1 : trees.max_accepted(r);
  if (q.cap < -1) return make_team_fault(sampling_fault::max_accepted, arg_max_accepted, r, 0, q.cap);
  q.bonus = trees.bonus_tokens.empty() ? -1 : trees.bonus_tokens(r);
  if (q.bonus < -1 || q.bonus >= vocab) return make_team_fault(sampling_fault::bonus_range, arg_bonus, r, 0, q.bonus, vocab);
  q.first_row = trees.target_rows.empty() ? r * width : trees.target_rows(r);
  const index_t rows = q.nodes - (trees.bonus_leaf_without_row && q.bonus >= 0 ? 1 : 0);
  if (q.first_row < 0 || q.first_row > target_rows - rows)
    return make_team_fault(tree_fault::target_rows, arg_target, r, rows, double(q.first_row), target_rows);
  // Depths in one pass by rank 0 (parents precede children), where every thread walking each node's
  // ancestors would make a long serial chain of dependent reads.
  team.sync();  // earlier readers of the scratch are done
  if (team.rank() == 0) {
    std::int32_t deepest = 0;
    ts.depth[0] = 0;
    for (index_t i = 1; i < q.nodes; ++i) {
      const std::int32_t d = ts.depth[parent[i]] + 1;
      ts.depth[i] = d;
      deepest = d > deepest ? d : deepest;
    }
    ts.depth[0] = deepest;  // node 0's own depth (0) is not needed again
  }
  team.sync();
  const std::int32_t deepest = ts.depth[0];
  const std::int32_t emitted = (q.cap >= 0 && q.cap < deepest ? q.cap : deepest) + 1;
  if (emitted > out.tokens.cols())
    return make_team_fault(sampling_fault::output_width, arg_out_tokens, r, 0, emitted, out.tokens.cols());
  if (!out.accepted_nodes.empty() && emitted - 1 > out.accepted_nodes.cols())
    return make_team_fault(sampling_fault::output_width, arg_out_nodes, r, 0, emitted - 1, out.accepted_nodes.cols() + 1);
  if (team.rank() == 0) {
    if (!trees.first_child.empty()) {
      for (index_t i = 0; i < q.nodes; ++i) {
        ts.first_child[i] = trees.first_child(r, i);
        ts.next_sibling[i] = trees.next_sibling(r, i);
      }
    } else {
      for (index_t i = 0; i < q.nodes; ++i) ts.first_child[i] = ts.next_sibling[i] = -1;
      for (index_t i = q.nodes - 1; i >= 1; --i) {  // reverse, so each list ends up in node-index order
        ts.next_sibling[i] = ts.first_child[parent[i]];
        ts.first_child[parent[i]] = static_cast<std::int32_t>(i);
      }
    }
  }
  team.sync();
  return {};
}

/// Rank 0 writes request r's emitted tokens / nodes and pads with -1.
template <class Space>
struct path_writer {
  const batch_outputs<Space>* out;
  index_t r;
  std::int32_t count = 0;
  template <class Team>
  SPECDEC_HOST_DEVICE void accept(const Team& team, std::int32_t node, std::int32_t token) {
    if (team.rank() == 0) {
      out->tokens(r, count) = token;
      if (!out->accepted_nodes.empty()) out->accepted_nodes(r, count) = node;
    }
    ++count;
  }
  template <class Team>
  SPECDEC_HOST_DEVICE void finish(const Team& team, std::int32_t final_token, std::int32_t uniforms, std::int32_t retest) {
    if (team.rank() != 0) return;
    out->tokens(r, count) = final_token;
    for (index_t c = count + 1; c < out->tokens.cols(); ++c) out->tokens(r, c) = -1;
    if (!out->accepted_nodes.empty())
      for (index_t c = count; c < out->accepted_nodes.cols(); ++c) out->accepted_nodes(r, c) = -1;
    if (!out->accepted.empty()) out->accepted(r) = count;
    if (!out->uniforms_consumed.empty()) out->uniforms_consumed(r) = uniforms;
    if (!out->retest_accepted.empty()) out->retest_accepted(r) = retest;
  }
};

/// walk_greedy's sink in a team job: the emitted path through a path_writer, and a zero final
/// distribution (greedy draws from none).
template <class Space>
struct greedy_path {
  path_writer<Space> path;
  const batch_outputs<Space>* out;
  index_t vocab;
  std::int32_t bonus_token;
  SPECDEC_HOST_DEVICE std::int32_t accepted() const { return path.count; }
  SPECDEC_HOST_DEVICE std::int32_t bonus() const { return bonus_token; }
  template <class Team>
  SPECDEC_HOST_DEVICE void accept(const Team& team, std::int32_t node, std::int32_t token) {
    path.accept(team, node, token);
  }
  template <class Team>
  SPECDEC_HOST_DEVICE void finish(const Team& team, std::int32_t token, bool) {
    if (!out->final_distributions.empty()) {
      float* dst = out->final_distributions.row(path.r);
      for (index_t j = team.rank(); j < vocab; j += team.size()) dst[j * out->final_distributions.stride(1)] = 0.0f;
    }
    path.finish(team, token, 0, path.count);
  }
};

/// Greedy verification of one request per team from the target argmax of every row
/// (walk_greedy, the walk of every greedy verifier: the first child, in node-index order, whose token is
/// its parent's argmax).
template <class Space>
struct greedy_batch_job {
  batch_trees<Space> trees;
  batch_outputs<Space> out;
  vector_view<const std::int32_t, Space> argmax;
  index_t vocab;
  const char* where;
  const char* names[specdec::detail::team_job_names];
  static void describe(const char* where, const char* name, const specdec::detail::team_fault& f) {
    specdec::detail::describe_sampling_fault(where, name, f);
  }

  std::size_t scratch_bytes() const { return tree_scratch::bytes(trees.tokens.cols()); }

  template <class Team>
  SPECDEC_HOST_DEVICE team_fault operator()(Team& team, index_t r, std::byte* scratch) const {
    const tree_scratch ts = tree_scratch::carve(scratch, trees.tokens.cols());
    checked_request q;
    if (const team_fault f = check_and_link(team, trees, out, r, vocab, argmax.rows(), ts, q); f.code != 0) return f;
    greedy_path<Space> path{{&out, r}, &out, vocab, q.bonus};
    const auto argmax_of = [&](std::int32_t node, std::int32_t& best) -> team_fault {
      const index_t row = q.first_row + node;
      best = argmax(row);
      if (best < 0 || best >= vocab) return make_team_fault(sampling_fault::argmax_range, arg_target, row, 0, best, vocab);
      return {};
    };
    return walk_greedy(team, {ts.first_child, ts.next_sibling}, trees.tokens.row(r), q.cap, q.bonus >= 0, false, argmax_of, path);
  }
};

/// A lane's share of a row's masked argmax (team_row_argmax): its largest allowed entry above -inf and
/// where (lowest index on ties; -1: none), whether it saw an allowed entry, its first allowed NaN / +inf.
struct argmax_lane {
  float value;
  std::int32_t at;
  std::int32_t allowed;
  std::int32_t bad;
};

/// Lanes per 1024-entry chunk of team_row_argmax's pass: its scratch is `chunks * argmax_lanes_per_chunk`
/// argmax_lane entries.
inline constexpr index_t argmax_lanes_per_chunk = 8;

/// The combination of two lanes' results, either order: the larger value, the lower index on ties.
SPECDEC_HOST_DEVICE inline void merge_argmax(argmax_lane& a, const argmax_lane& b) {
  if (b.at >= 0 && (a.at < 0 || b.value > a.value || (b.value == a.value && b.at < a.at))) {
    a.value = b.value;
    a.at = b.at;
  }
  a.allowed |= b.allowed;
  if (b.bad >= 0 && (a.bad < 0 || b.bad < a.bad)) a.bad = b.bad;
}

/// The argmax of row `x` (`n` entries) under bitmask row `m` (null: every entry allowed), every thread
/// of the team receiving the same result: a pass split between the team's threads by (chunk, lane)
/// item, combined in index order. `lanes`: scratch of chunks * argmax_lanes_per_chunk entries. `x` is
/// float, or bfloat16 / float16 widened entry by entry (the float row's argmax).
template <class Team, class E>
SPECDEC_HOST_DEVICE argmax_lane team_row_argmax(Team& team, argmax_lane* lanes, const E* x, const std::int32_t* m, index_t n) {
  const index_t chunks = (n + specdec::detail::sample_chunk - 1) / specdec::detail::sample_chunk;
  const index_t items = chunks * argmax_lanes_per_chunk;
  team.sync();  // earlier readers of the scratch are done
  for (index_t item = team.rank(); item < items; item += team.size()) {
    const index_t begin = (item / argmax_lanes_per_chunk) * specdec::detail::sample_chunk;
    const index_t end = begin + specdec::detail::sample_chunk < n ? begin + specdec::detail::sample_chunk : n;
    argmax_lane a{0.0f, -1, 0, -1};
    for (index_t j = begin + item % argmax_lanes_per_chunk; j < end; j += argmax_lanes_per_chunk) {
      if (m != nullptr && ((static_cast<std::uint32_t>(m[j >> 5]) >> (j & 31)) & 1u) == 0) continue;
      const float v = widen(x[j]);
      a.allowed = 1;
      if (!(v < -specdec::detail::negative_infinity<float>())) {  // NaN or +inf
        if (a.bad < 0) a.bad = static_cast<std::int32_t>(j);
      } else if (v > specdec::detail::negative_infinity<float>() && (a.at < 0 || v > a.value)) {
        a.value = v;
        a.at = static_cast<std::int32_t>(j);
      }
    }
    lanes[item] = a;
  }
  team.sync();
  for (index_t c = team.rank(); c < chunks; c += team.size()) {
    argmax_lane a = lanes[c * argmax_lanes_per_chunk];
    for (index_t k = 1; k < argmax_lanes_per_chunk; ++k) merge_argmax(a, lanes[c * argmax_lanes_per_chunk + k]);
    lanes[c * argmax_lanes_per_chunk] = a;
  }
  team.sync();
  argmax_lane best = lanes[0];
  for (index_t c = 1; c < chunks; ++c) merge_argmax(best, lanes[c * argmax_lanes_per_chunk]);
  return best;
}

/// The row fault of an argmax lane's NaN / +inf at column `bad` of row `row` (argument `arg`).
SPECDEC_HOST_DEVICE inline team_fault argmax_fault(float v, int arg, index_t row, index_t bad) {
  const auto f = v != v ? specdec::detail::fault::nan : specdec::detail::fault::positive_infinity;
  return team_fault{static_cast<std::int32_t>(f), arg, row, bad, 0, static_cast<double>(v)};
}

/// Greedy verification of one request per team from the target logits, reading only the rows the walk
/// visits: each visited row's largest entry allowed by its bitmask row (every entry when there is no
/// bitmask), lowest index on ties, found by a row pass split between the team's threads and combined
/// in index order. The walk is greedy_batch_job's; a visited node whose bitmask row allows nothing (a
/// terminated grammar) ends it without a final token, as the request-based masked verify_greedy does.
template <class Space>
struct visited_greedy_batch_job {
  batch_trees<Space> trees;
  batch_outputs<Space> out;
  matrix_view<const float, Space> logits;
  matrix_view<const std::int32_t, Space> bitmask;  // empty: every token allowed
  const char* where;
  const char* names[specdec::detail::team_job_names];
  static void describe(const char* where, const char* name, const specdec::detail::team_fault& f) {
    specdec::detail::describe_sampling_fault(where, name, f);
  }

  SPECDEC_HOST_DEVICE index_t vocab() const noexcept { return logits.cols(); }
  SPECDEC_HOST_DEVICE index_t chunks() const noexcept {
    return (logits.cols() + specdec::detail::sample_chunk - 1) / specdec::detail::sample_chunk;
  }
  SPECDEC_HOST_DEVICE index_t row_pass_items() const noexcept { return chunks() * argmax_lanes_per_chunk; }
  SPECDEC_HOST_DEVICE static constexpr std::size_t round16(std::size_t b) { return (b + 15) / 16 * 16; }
  std::size_t scratch_bytes() const {
    return round16(tree_scratch::bytes(trees.tokens.cols())) + static_cast<std::size_t>(row_pass_items()) * sizeof(argmax_lane);
  }

  template <class Team>
  SPECDEC_HOST_DEVICE team_fault operator()(Team& team, index_t r, std::byte* scratch) const {
    const tree_scratch ts = tree_scratch::carve(scratch, trees.tokens.cols());
    auto* lanes = reinterpret_cast<argmax_lane*>(scratch + round16(tree_scratch::bytes(trees.tokens.cols())));
    checked_request q;
    if (const team_fault f = check_and_link(team, trees, out, r, vocab(), logits.rows(), ts, q); f.code != 0) return f;
    greedy_path<Space> path{{&out, r}, &out, vocab(), q.bonus};
    const auto argmax_of = [&](std::int32_t node, std::int32_t& best) -> team_fault {
      const index_t row = q.first_row + node;
      const argmax_lane a = team_row_argmax(team, lanes, logits.row(row), bitmask.empty() ? nullptr : bitmask.row(row), vocab());
      if (a.bad >= 0) return argmax_fault(logits(row, a.bad), arg_target, row, a.bad);
      if (a.allowed == 0) {  // only a bitmask allows nothing
        if (node == 0) return make_team_fault(sampling_fault::mask_allows_none, arg_bitmask, r, 0, double(row));
        best = -1;  // the grammar terminated here: nothing may follow
        return {};
      }
      if (a.at < 0 && !bitmask.empty())
        return make_team_fault(sampling_fault::mask_all_neg_inf, arg_bitmask, r, node, double(row));
      best = a.at < 0 ? 0 : a.at;  // an unmasked all -inf row: index 0, as row_argmax
      return {};
    };
    // Under a bitmask every row the walk ends at is read: a terminated grammar there emits nothing.
    return walk_greedy(team, {ts.first_child, ts.next_sibling}, trees.tokens.row(r), q.cap, q.bonus >= 0, !bitmask.empty(),
                       argmax_of, path);
  }
};

}  // namespace specdec::sampling::detail::inline SPECDEC_ISA
