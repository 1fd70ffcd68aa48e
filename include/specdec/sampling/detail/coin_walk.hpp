// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief SGLang's one-coin-per-level tree rule (sampling/tree_coin.hpp documents it) as a team job
/// (backend/detail/team.hpp): `coin_walk` decides one request, whatever the layout its links, coins and
/// outputs come in; `coin_request_job` is the walk over specdec's trees, uniform streams and
/// verify_outputs' views, which verify_coin_tree runs on the host one request at a time. SGLang's
/// link-encoded layout (`tree_speculative_sampling_target_only`) runs the same walk from
/// interop/sglang_sampling.hpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include <specdec/backend/detail/team.hpp>
#include <specdec/config.hpp>
#include <specdec/core/rng.hpp>
#include <specdec/core/view.hpp>
#include <specdec/sampling/detail/faults.hpp>
#include <specdec/sampling/detail/residual_rows.hpp>
#include <specdec/sampling/detail/speculative_walk.hpp>
#include <specdec/sampling/detail/tree_walk.hpp>
#include <specdec/sampling/randomness.hpp>

namespace specdec::sampling::detail::inline SPECDEC_ISA {

/// The coin walk over one request, target rows read from `Rows` (probability_matrix on a backend; the
/// request form's row_reader, which downloads device rows on first use). At the current node, with its
/// coin c, the children are visited in the layout's order; each adds its target probability to a
/// running mass m (in float, as SGLang), and is accepted iff `c <= m / threshold_acc` or its own
/// probability is `>= threshold_single`. A rejected candidate becomes a removal operation on the node's
/// row (a token already removed stays out). When no child is accepted, or at a leaf, or at the cap, the
/// row is checked whole and the final token drawn from it minus the removed candidates
/// (residual_rows::draw). The rows are of Rows' element type (float, bfloat16 or float16, widened where
/// read).
template <class Space, class Rows = probability_matrix<Space>>
struct coin_walk : residual_rows<Space, typename Rows::element_type> {
  using base = residual_rows<Space, typename Rows::element_type>;
  using typename base::layout;
  using typename base::residual_source;
  using base::apply_ops;
  using base::check_row;
  using base::draw;
  using base::entry;

  float threshold_single;
  float threshold_acc;  // > 0
  Rows source = {};     // the target rows

  /// Walks one request from its root, whose target row is `first_row` (node i's: first_row + i), with at
  /// most `cap` drafts accepted (-1: no cap); probability faults name argument `target_arg`. The layout
  /// comes through `request`:
  /// - `first_child(node)`, `next_sibling(c)`: the children in visiting order (-1 ends a list), and
  ///   `token(c)`, in [0, V): the links and tokens, checked by the caller;
  /// - `coin(node, u)` and `final_uniform(u)`: the coin of a node with children, the final draw's
  ///   uniform (a team_fault when one is missing or out of range);
  /// - `accept(team, node, token)`: a child accepted (a team_fault stops the walk);
  /// - `finish(team, token, bonus, tests, uniforms, entry)`: the final token, whether nothing was removed
  ///   (a bonus token), the candidates tested, the uniforms read (coins and the final one), and
  ///   `entry(j)`, the entries the final token was drawn from (unnormalised).
  // The request form's rows are host callables: nvcc's check of calls across execution spaces is off
  // for this template alone; each instantiation runs where its row source does.
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
  template <class Team, class Request>
  SPECDEC_HOST_DEVICE team_fault walk(Team& team, const layout& l, index_t first_row, index_t cap, int target_arg,
                                      Request& request) const {
    index_t node = 0;
    index_t accepted_count = 0;
    std::int32_t tests = 0;
    std::int32_t coins = 0;
    for (;;) {
      const index_t row = first_row + node;
      int n_ops = 0;
      std::int64_t accepted = -1;
      const std::int64_t first = request.first_child(node);
      if ((cap < 0 || accepted_count < cap) && first >= 0) {
        double coin = 0.0;
        if (const team_fault f = request.coin(node, coin); f.code != 0) return f;
        ++coins;
        float mass = 0.0f;  // SGLang's running sum, in float
        for (std::int64_t c = first; c >= 0; c = request.next_sibling(c)) {
          const std::int32_t x = request.token(c);
          const float p_x = source.at(row, x);
          if (!(p_x >= 0.0f && p_x <= 1.0f)) return make_team_fault(sampling_fault::probability_entry, target_arg, row, x, p_x);
          mass += p_x;
          ++tests;
          if (coin <= static_cast<double>(mass / threshold_acc) || p_x >= threshold_single) {
            accepted = c;
            break;
          }
          if (apply_ops(p_x, l.ops, 0, n_ops, x) > 0.0f) {  // a repeated token is already out
            team.sync();  // every thread has read the operations before rank 0 appends one
            if (team.rank() == 0) l.ops[n_ops] = residual_op{0, x, -1, 1.0f, 0.0};
            team.sync();
            ++n_ops;
          }
        }
      }
      if (accepted >= 0) {
        if (const team_fault f = request.accept(team, accepted, request.token(accepted)); f.code != 0) return f;
        ++accepted_count;
        node = accepted;
        continue;
      }
      const auto* p = source.row(row);
      double base_total = 0.0;
      if (const team_fault f = check_row(team, l, l.base_masses, p, row, target_arg, base_total); f.code != 0) return f;
      double u = 0.0;
      if (const team_fault f = request.final_uniform(u); f.code != 0) return f;
      const residual_source untouched{p, 0};
      const std::int32_t final_token = draw(team, l, p, untouched, n_ops, base_total, u);
      request.finish(team, final_token, n_ops == 0, tests, coins + 1,
                     [this, untouched, &l, n_ops](index_t j) { return entry(untouched, l.ops, n_ops, j); });
      return {};
    }
  }
};

/// The coin walk over the batched verifiers' views (tree_walk.hpp): request r's tree, checked and
/// linked by check_and_link (its `first_child` / `next_sibling` links when given, else node-index
/// order), capped by its max_accepted; its uniforms are supplied values or a Philox stream, [0, 1),
/// the coin of node i at position i and the final draw's at position n (its node count). Writes the
/// emitted tokens and path, the counts, the bonus flag (nothing removed at the last node) and, when
/// asked, the final distribution.
template <class Space, class Rows = probability_matrix<Space>>
struct coin_request_job : coin_walk<Space, Rows> {
  using base = coin_walk<Space, Rows>;
  using typename base::layout;
  using base::carve;
  using base::source;
  using base::vocab;

  batch_trees<Space> trees;
  batch_outputs<Space> out;
  matrix_view<const double, Space> uniform_values;          // empty: Philox
  vector_view<const philox_stream, Space> uniform_streams;  // one per request
  vector_view<const std::uint64_t, Space> uniform_offsets;  // empty: 0
  const char* where;
  const char* names[specdec::detail::team_job_names];
  static void describe(const char* where, const char* name, const specdec::detail::team_fault& f) {
    specdec::detail::describe_sampling_fault(where, name, f);
  }

  /// No row is folded: removal operations are evaluated per entry.
  std::size_t wide_scratch_bytes() const { return 0; }

  /// Position `position` of request r's uniforms, in [0, 1).
  SPECDEC_HOST_DEVICE team_fault uniform(index_t r, std::uint64_t position, double& u) const {
    return batch_uniform(uniform_values, uniform_streams, uniform_offsets, uniform_range::closed_open, arg_uniforms, r,
                         position, u);
  }

  /// coin_walk's view of request r.
  struct request_view {
    const coin_request_job* job;
    const layout* l;
    index_t r;
    index_t nodes;
    path_writer<Space> path;
    SPECDEC_HOST_DEVICE std::int64_t first_child(std::int64_t node) const { return l->tree.first_child[node]; }
    SPECDEC_HOST_DEVICE std::int64_t next_sibling(std::int64_t c) const { return l->tree.next_sibling[c]; }
    SPECDEC_HOST_DEVICE std::int32_t token(std::int64_t c) const { return job->trees.tokens(r, static_cast<index_t>(c)); }
    SPECDEC_HOST_DEVICE team_fault coin(std::int64_t node, double& u) const {
      return job->uniform(r, static_cast<std::uint64_t>(node), u);
    }
    SPECDEC_HOST_DEVICE team_fault final_uniform(double& u) const { return job->uniform(r, static_cast<std::uint64_t>(nodes), u); }
    template <class Team>
    SPECDEC_HOST_DEVICE team_fault accept(const Team& team, std::int64_t node, std::int32_t token) {
      path.accept(team, static_cast<std::int32_t>(node), token);
      return {};
    }
    template <class Team, class Entry>
    SPECDEC_HOST_DEVICE void finish(const Team& team, std::int32_t token, bool bonus, std::int32_t tests, std::int32_t uniforms,
                                    const Entry& entry) {
      const batch_outputs<Space>& out = job->out;
      if (!out.final_distributions.empty()) {
        float* dst = out.final_distributions.row(r);
        const index_t stride = out.final_distributions.stride(1);
        for (index_t j = team.rank(); j < job->vocab(); j += team.size()) dst[j * stride] = entry(j);
      }
      path.finish(team, token, uniforms, path.count);
      if (team.rank() != 0) return;
      if (!out.bonus.empty()) out.bonus(r) = bonus ? 1 : 0;
      if (!out.acceptance_tests.empty()) out.acceptance_tests(r) = tests;
    }
  };

#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
  template <class Team>
  SPECDEC_HOST_DEVICE team_fault operator()(Team& team, index_t r, std::byte* scratch) const {
    const layout l = carve(scratch);
    checked_request q;
    if (const team_fault f = check_and_link(team, trees, out, r, vocab(), source.rows(), l.tree, q); f.code != 0) return f;
    request_view view{this, &l, r, q.nodes, {&out, r}};
    return this->walk(team, l, q.first_row, q.cap, arg_target, view);
  }
};

}  // namespace specdec::sampling::detail::inline SPECDEC_ISA
