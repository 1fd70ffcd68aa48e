// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The stochastic batched verifier's team job (see tree_walk.hpp for the batch's views).
///
/// The walk is the one of specdec/sampling/speculative.hpp, decision for decision: the same sibling
/// order, uniforms, acceptance test, residuals (kept as the list of operations applied to the node's
/// target row and evaluated per entry; with draft rows, the operations weighed so far are folded into
/// a row of wide scratch, so each rejection reads one draft row, not all of them) and the same canonical draw
/// (backend/detail/sample_kernels.hpp), so tokens equal the request-based verifiers' bit for bit.
/// Passes over a row are split over the team by (chunk, lane) item, each item summed in index order,
/// then combined in chunk order: the result does not depend on the team size.
#pragma once

#include <cstddef>
#include <cstdint>

#include <specdec/backend/concept.hpp>
#include <specdec/backend/detail/sample_kernels.hpp>
#include <specdec/backend/detail/team.hpp>
#include <specdec/config.hpp>
#include <specdec/core/rng.hpp>
#include <specdec/core/view.hpp>
#include <specdec/sampling/detail/faults.hpp>
#include <specdec/sampling/detail/residual_rows.hpp>
#include <specdec/sampling/detail/staged_walk.hpp>
#include <specdec/sampling/detail/tree_walk.hpp>
#include <specdec/sampling/randomness.hpp>
#include <specdec/sampling/speculative_options.hpp>

namespace specdec::sampling::detail::inline SPECDEC_ISA {

/// Target rows as the batched form reads them: probabilities in the job's memory space, every token
/// allowed. A row source gives a row of its `element_type` (`row`), one entry without the row, widened
/// (`at`), and whether a row allows any token (a grammar's bitmask; none allows nothing here).
template <class Space, class T = float>
struct probability_matrix {
  using element_type = T;
  matrix_view<const T, Space> m;
  SPECDEC_HOST_DEVICE index_t rows() const noexcept { return m.rows(); }
  SPECDEC_HOST_DEVICE const T* row(index_t r) const noexcept { return m.row(r); }
  SPECDEC_HOST_DEVICE float at(index_t r, index_t x) const noexcept { return widen(m(r, x)); }
  SPECDEC_HOST_DEVICE bool allows_any(index_t) const noexcept { return true; }
};

/// The stochastic walk, one request per team, over target rows from `Rows` (probability_matrix in the
/// batched form; the request-based forms read theirs through a row_reader, softened from logits on
/// first use and masked by a grammar's bitmask, speculative.hpp), of Rows' element type, and draft rows
/// of element type D (float, bfloat16 or float16 each, widened where read).
template <class Space, class Rows = probability_matrix<Space>, class D = typename Rows::element_type>
struct speculative_batch_job : residual_rows<Space, typename Rows::element_type, D> {
  using base = residual_rows<Space, typename Rows::element_type, D>;
  using T = typename Rows::element_type;
  using typename base::as_is_t;
  using typename base::layout;
  using typename base::residual_source;
  using typename base::weighed;
  using base::apply_ops;
  using base::carve;
  using base::check_row;
  using base::draft;
  using base::draw;
  using base::entry;
  using base::op_batch;
  using base::race_token;
  using base::row_batch;
  using base::vocab;
  using base::weigh;

  batch_trees<Space> trees;
  batch_outputs<Space> out;
  matrix_view<const index_t, Space> draft_rows;  // empty: deterministic drafts
  matrix_view<const float, Space> noise;
  vector_view<const index_t, Space> noise_rows;
  matrix_view<const double, Space> uniform_values;           // empty: Philox
  vector_view<const philox_stream, Space> uniform_streams;   // one per request
  vector_view<const std::uint64_t, Space> uniform_offsets;   // empty: 0
  acceptance_test test;
  uniform_range range;
  bool race;
  float lenience;
  bool retest;
  const char* where;
  const char* names[specdec::detail::team_job_names];
  Rows source = {};  // the target rows
  static void describe(const char* where, const char* name, const specdec::detail::team_fault& f) {
    specdec::detail::describe_sampling_fault(where, name, f);
  }

  /// Wide scratch (team.wide_scratch()): the folded row, V floats, with draft rows only (deterministic
  /// drafts' operations read no row, so evaluating them per entry costs no memory traffic).
  std::size_t wide_scratch_bytes() const {
    return draft_rows.empty() ? 0 : static_cast<std::size_t>(vocab()) * sizeof(float);
  }

  SPECDEC_HOST_DEVICE team_fault uniform(index_t r, std::uint64_t position, double& u) const {
    return batch_uniform(uniform_values, uniform_streams, uniform_offsets, range, arg_uniforms, r, position, u);
  }

  SPECDEC_HOST_DEVICE bool passes(float p, float q, double u) const { return sampling::detail::passes(test, p, q, lenience, u); }

  // The request-based forms' rows are host callables (a row_reader): the job is a host-device
  // template, so nvcc's check of calls across execution spaces is off for it alone; each instantiation
  // runs where its row source does.
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
  template <class Team>
  SPECDEC_HOST_DEVICE team_fault operator()(Team& team, index_t r, std::byte* scratch) const {
    const layout l = carve(scratch);
    checked_request q;
    if (const team_fault f = check_and_link(team, trees, out, r, vocab(), source.rows(), l.tree, q); f.code != 0) return f;
    const std::int32_t* token = trees.tokens.row(r);
    for (index_t i = 1; i < q.nodes && !draft_rows.empty(); ++i) {
      const index_t row = draft_rows(r, i);
      if (row < -1 || row >= draft.rows()) return make_team_fault(sampling_fault::draft_row, arg_draft_rows, r, i, double(row), draft.rows());
    }
    if (retest)
      for (index_t i = 0; i < q.nodes; ++i)
        if (l.tree.first_child[i] >= 0 && l.tree.next_sibling[l.tree.first_child[i]] >= 0)
          return make_team_fault(sampling_fault::not_chain, arg_parents, r, i, 0.0);
    const index_t noise_row = race ? noise_rows(r) : -1;
    if (race && (noise_row < 0 || noise_row >= noise.rows()))
      return make_team_fault(sampling_fault::noise_row, arg_noise_rows, r, 0, double(noise_row), noise.rows());

    float* const folded = draft_rows.empty() ? nullptr : reinterpret_cast<float*>(team.wide_scratch());
    path_writer<Space> path{&out, r};
    std::uint64_t position = 0;
    index_t node = 0;
    std::int32_t retest_passes = 0;
    std::int32_t tests = 0;
    for (;;) {
      const index_t row = q.first_row + node;
      if (!source.allows_any(row)) {  // a grammar's bitmask allows nothing here
        if (node == 0) return make_team_fault(sampling_fault::mask_allows_none, arg_bitmask, r, 0, double(row));
        finish(team, path, -1, false, position, path.count, tests, false);  // it terminated: nothing follows
        return {};
      }
      const T* p = nullptr;  // the row, read whole once a residual or the final draw needs it
      int n_ops = 0;
      residual_source current{nullptr, 0};
      double mass = 1.0;       // of the current entries once modified
      bool loaded = false;     // the row has been weighed and checked
      double base_total = 0.0;
      const auto load = [&]() -> team_fault {
        if (loaded) return {};
        loaded = true;
        p = source_row(row);
        current = residual_source{p, 0};
        return check_row(team, l, l.base_masses, p, row, arg_target, base_total);
      };
      const bool capped = q.cap >= 0 && path.count >= q.cap;
      std::int32_t accepted = -1;
      bool rejected_here = false;
      if (!capped) {
        for (std::int32_t c = l.tree.first_child[node]; c >= 0; c = l.tree.next_sibling[c]) {
          const std::int32_t x = token[c];
          const index_t q_row = draft_rows.empty() ? -1 : draft_rows(r, c);
          if (q_row < 0) {  // a deterministic sibling repeating a rejected token has probability 0 by now
            bool repeated = false;
            for (int k = 0; k < n_ops; ++k) repeated = repeated || (l.ops[k].kind == 0 && l.ops[k].token == x);
            if (repeated) continue;
          }
          float p_x;
          if (n_ops == 0 && !loaded) {
            p_x = source.at(row, x);
          } else {
            if (const team_fault f = load(); f.code != 0) return f;
            p_x = n_ops == 0 ? widen(p[x]) : (mass > 0.0 ? static_cast<float>(static_cast<double>(entry(current, l.ops, n_ops, x)) / mass) : 0.0f);
          }
          if (!(p_x >= 0.0f && p_x <= 1.0f)) return make_team_fault(sampling_fault::probability_entry, arg_target, row, x, p_x);
          float q_x = 1.0f;
          if (q_row >= 0) {
            q_x = widen(draft(q_row, x));
            if (!(q_x >= 0.0f && q_x <= 1.0f)) return make_team_fault(sampling_fault::probability_entry, arg_draft, q_row, x, q_x);
          }
          double u = 0.0;
          if (const team_fault f = uniform(r, position++, u); f.code != 0) return f;
          ++tests;
          if (passes(p_x, q_x, u)) {
            accepted = c;
            break;
          }
          if (const team_fault f = load(); f.code != 0) return f;
          rejected_here = true;
          if (q_row >= 0) {
            double q_total = 0.0;
            if (const team_fault f = check_row(team, l, l.masses, draft.row(q_row), q_row, arg_draft, q_total); f.code != 0) return f;
          }
          if (q_row < 0 && lenience == 1.0f) {
            if (n_ops == 0) mass = base_total;
            const float removed = entry(current, l.ops, n_ops, x);
            team.sync();  // every thread has read the operations before rank 0 appends one
            if (team.rank() == 0) l.ops[n_ops] = residual_op{0, x, -1, 1.0f, 0.0};
            team.sync();
            ++n_ops;
            mass -= static_cast<double>(removed);
            if (mass < 0.0) mass = 0.0;
          } else {
            const residual_op op{q_row >= 0 ? 1 : 2, x, q_row, lenience, n_ops == 0 ? 0.0 : mass};
            team.sync();
            if (team.rank() == 0) l.ops[n_ops] = op;
            team.sync();
            ++n_ops;
            const int from = current.from, ops_now = n_ops;
            const auto none_bad = [](float) { return false; };
            if (folded != nullptr) {
              // Each entry is read and rewritten by the same thread: folding in place needs no barrier.
              mass = base::with_source(current, [&](const auto* src) {
                return this->template weigh<op_batch>(team, l, l.masses, src,
                                       [&](float v, index_t j) {
                                         const float e = apply_ops(v, l.ops, from, ops_now, j);
                                         folded[j] = e;
                                         return e;
                                       },
                                       none_bad).total;
              });
              current = residual_source{p, ops_now, folded};
            } else {
              mass = base::with_source(current, [&](const auto* src) {
                return this->template weigh<op_batch>(team, l, l.masses, src,
                                       [&](float v, index_t j) { return apply_ops(v, l.ops, from, ops_now, j); }, none_bad).total;
              });
            }
          }
        }
      }
      if (accepted >= 0) {
        path.accept(team, accepted, token[accepted]);
        node = accepted;
        continue;
      }
      // The walk ends at `node`: re-tests (FlashInfer), then the final token.
      if (retest && rejected_here) {
        for (index_t i = node; i + 1 < q.nodes; ++i) {
          const std::int32_t x = token[i + 1];
          const index_t q_row = draft_rows.empty() ? -1 : draft_rows(r, i + 1);
          const float p_x = source.at(q.first_row + i, x);
          if (!(p_x >= 0.0f && p_x <= 1.0f))
            return make_team_fault(sampling_fault::probability_entry, arg_target, q.first_row + i, x, p_x);
          const float q_x = q_row >= 0 ? widen(draft(q_row, x)) : 1.0f;
          if (q_row >= 0 && !(q_x >= 0.0f && q_x <= 1.0f))
            return make_team_fault(sampling_fault::probability_entry, arg_draft, q_row, x, q_x);
          double u = 0.0;
          if (const team_fault f = uniform(r, position++, u); f.code != 0) return f;
          retest_passes += passes(p_x, q_x, u) ? 1 : 0;
        }
      }
      retest_passes += path.count;
      const bool bonus = !rejected_here;
      const bool keep = !out.final_distributions.empty();
      if (bonus && q.bonus >= 0) {
        finish(team, path, q.bonus, true, position, retest_passes, tests, false);
        return {};
      }
      if (const team_fault f = load(); f.code != 0) return f;
      if (keep) write_final(team, r, current, l.ops, n_ops, false);
      std::int32_t final_token = 0;
      if (race) {
        const float* e = noise.row(noise_row);
        const weighed w = this->template weigh<row_batch>(team, l, l.masses, e, as_is_t{},
                                [](float v) { return !(v >= 0.0f && v <= 3.40282347e38f); });  // finite, >= 0
        if (w.first_bad >= 0)
          return make_team_fault(sampling_fault::noise_entry, arg_noise, noise_row, w.first_bad, static_cast<double>(e[w.first_bad]));
        final_token = race_token(team, l, current, n_ops, e);
      } else {
        double u = 0.0;
        if (const team_fault f = uniform(r, position++, u); f.code != 0) return f;
        final_token = draw(team, l, p, current, n_ops, base_total, u);
      }
      finish(team, path, final_token, bonus, position, retest_passes, tests, true);
      return {};
    }
  }

  // A lambda in operator() is a function of its own, outside that pragma: its one call to the row
  // source goes through here.
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
  SPECDEC_HOST_DEVICE const T* source_row(index_t row) const { return source.row(row); }

  /// Writes a request's result: the final token (-1: none), counts, and without a draw (`drawn`
  /// false) a zero final distribution.
  template <class Team>
  SPECDEC_HOST_DEVICE void finish(Team& team, path_writer<Space>& path, std::int32_t token, bool bonus, std::uint64_t position,
                                  std::int32_t retest_passes, std::int32_t tests, bool drawn) const {
    if (!drawn && !out.final_distributions.empty()) write_final(team, path.r, residual_source{nullptr, 0}, nullptr, 0, true);
    path.finish(team, token, static_cast<std::int32_t>(position), retest_passes);
    if (team.rank() != 0) return;
    if (!out.bonus.empty()) out.bonus(path.r) = bonus ? 1 : 0;
    if (!out.acceptance_tests.empty()) out.acceptance_tests(path.r) = tests;
  }

  /// The distribution the final token is drawn from, unnormalised (zeros when none was drawn).
  template <class Team>
  SPECDEC_HOST_DEVICE void write_final(Team& team, index_t r, residual_source s, const residual_op* ops, int n_ops, bool zeros) const {
    float* dst = out.final_distributions.row(r);
    const index_t stride = out.final_distributions.stride(1);
    for (index_t j = team.rank(); j < vocab(); j += team.size()) dst[j * stride] = zeros ? 0.0f : entry(s, ops, n_ops, j);
  }
};

}  // namespace specdec::sampling::detail::inline SPECDEC_ISA
