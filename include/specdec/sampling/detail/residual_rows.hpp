// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The row machinery the verifiers' team jobs share (the stochastic walk, speculative_walk.hpp;
/// SGLang's coin walk, coin_walk.hpp; vLLM's rejection sampler, interop/vllm.hpp): a team's scratch
/// layout, residual operations on a node's target row, passes over a row in the canonical order (split
/// over the team by (chunk, lane) item, each item summed in index order, then combined in chunk order:
/// the result does not depend on the team size), the canonical draw (backend/detail/sample_kernels.hpp)
/// and the exponential race.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <specdec/backend/concept.hpp>
#include <specdec/backend/detail/row_simd.hpp>
#include <specdec/backend/detail/sample_kernels.hpp>
#include <specdec/backend/detail/team.hpp>
#include <specdec/config.hpp>
#include <specdec/core/half.hpp>
#include <specdec/core/view.hpp>
#include <specdec/sampling/detail/faults.hpp>
#include <specdec/sampling/detail/staged_walk.hpp>
#include <specdec/sampling/detail/tree_walk.hpp>

namespace specdec::sampling::detail::inline SPECDEC_ISA {

/// One operation applied to a node's target row after a rejection (a node's residual is the list of
/// them, evaluated per entry or folded into a row): zero a token (a rejected deterministic draft,
/// lenience 1), or replace the entries by max(0, current - scale q) with q a draft row or the point
/// mass at `token`.
struct residual_op {
  std::int32_t kind;   // 0 remove, 1 subtract a draft row, 2 subtract a point mass
  std::int32_t token;  // remove / point mass
  index_t q_row;
  float scale;
  double mass_before;  // the mass the entries were divided by before the subtraction (0: untouched row)
};

/// The row machinery of the tree walks (the stochastic walk, speculative_walk.hpp; SGLang's coin walk,
/// coin_walk.hpp): a team's scratch layout, residual operations on a node's target row,
/// row passes in the canonical order (weigh, check_row), the canonical draw (draw, locate) and the
/// exponential race.
///
/// T and D are the element types of the target and draft rows: float, or bfloat16 / float16 read as
/// they are and widened entry by entry (core/half.hpp), so that every decision is the one the float rows
/// holding the same values give, bit for bit. A folded row (wide scratch) holds floats whatever T is:
/// the entries are floats after each operation either way.
template <class Space, class T = float, class D = T>
struct residual_rows {
  using target_type = T;
  using draft_type = D;
  matrix_view<const T, Space> target;
  matrix_view<const D, Space> draft;  // the rows residual operations of kind 1 subtract
  empty_residual fallback;                // the token drawn from an empty residual
  index_t max_nodes;                      // nodes per request: sizes the tree scratch and the operations

  /// Entries of a row a lane reads before it uses them: `row_batch` where they are used as they are,
  /// `op_batch` where the residual operations are applied to them (that code, unrolled wider, spills
  /// on the GPU).
  static constexpr int row_batch = 32, op_batch = 8;

  SPECDEC_HOST_DEVICE index_t vocab() const noexcept { return target.cols(); }
  SPECDEC_HOST_DEVICE index_t chunks() const noexcept {
    return (target.cols() + specdec::detail::sample_chunk - 1) / specdec::detail::sample_chunk;
  }

  /// Scratch: the tree part, the residual operations, per-item lane sums and flags, two chunk-mass tables.
  struct layout {
    tree_scratch tree;
    residual_op* ops;
    double* lanes;
    std::int64_t* marks;
    double* base_masses;
    double* masses;
    float* stage;  // the chunk a draw walks, `sample_chunk` entries
    double* segment_sums;          // the walk's segments of the staged chunk
    std::int64_t* segment_marks;   // per segment: first maybe-crossing, first sure crossing, last positive
  };
  static constexpr index_t segments = 64;  ///< of the staged chunk, for its team-parallel walk (walk_staged)
  SPECDEC_HOST_DEVICE static constexpr std::size_t round16(std::size_t b) { return (b + 15) / 16 * 16; }
  SPECDEC_HOST_DEVICE layout carve(std::byte* base) const {
    const index_t nodes = max_nodes;
    const auto items = static_cast<std::size_t>(chunks()) * 8;
    layout l;
    l.tree = tree_scratch::carve(base, nodes);
    base += round16(tree_scratch::bytes(nodes));
    l.ops = reinterpret_cast<residual_op*>(base);
    base += round16(sizeof(residual_op) * static_cast<std::size_t>(nodes));
    l.lanes = reinterpret_cast<double*>(base);
    base += items * sizeof(double);
    l.marks = reinterpret_cast<std::int64_t*>(base);
    base += items * sizeof(std::int64_t);
    l.base_masses = reinterpret_cast<double*>(base);
    base += static_cast<std::size_t>(chunks()) * sizeof(double);
    l.masses = reinterpret_cast<double*>(base);
    base += static_cast<std::size_t>(chunks()) * sizeof(double);
    l.stage = reinterpret_cast<float*>(base);
    base += static_cast<std::size_t>(specdec::detail::sample_chunk) * sizeof(float);
    l.segment_sums = reinterpret_cast<double*>(base);
    base += segments * sizeof(double);
    l.segment_marks = reinterpret_cast<std::int64_t*>(base);
    return l;
  }
  SPECDEC_HOST_DEVICE std::size_t scratch_bytes() const {
    const index_t nodes = max_nodes;
    const auto c = static_cast<std::size_t>(chunks());
    return round16(tree_scratch::bytes(nodes)) + round16(sizeof(residual_op) * static_cast<std::size_t>(nodes)) +
           c * 8 * (sizeof(double) + sizeof(std::int64_t)) + 2 * c * sizeof(double) +
           static_cast<std::size_t>(specdec::detail::sample_chunk) * sizeof(float) +
           segments * (sizeof(double) + 3 * sizeof(std::int64_t));
  }

  /// Items of a row pass (weigh): 8 lanes per chunk.
  SPECDEC_HOST_DEVICE index_t row_pass_items() const noexcept { return chunks() * 8; }

  /// A node's current entries: operations [from, n_ops) applied to the target row `base` (from = 0) or
  /// to `folded`, the row holding operations [0, from) applied to it (from > 0). Every entry is a float
  /// after each operation either way, so folding changes no bit.
  struct residual_source {
    const T* base;
    int from;
    const float* folded = nullptr;
  };
  /// `f(row)` over the row `s` reads: the target row as it is (T), or the folded floats.
  template <class F>
  SPECDEC_HOST_DEVICE static decltype(auto) with_source(residual_source s, const F& f) {
    if constexpr (std::is_same_v<T, float>)
      return f(s.from == 0 ? s.base : s.folded);
    else
      return s.from == 0 ? f(s.base) : f(s.folded);
  }
  /// The current entry j of the node's distribution.
  SPECDEC_HOST_DEVICE float entry(residual_source s, const residual_op* ops, int n_ops, index_t j) const {
    const float e = s.from == 0 ? widen(s.base[j]) : s.folded[j];
    return apply_ops(e, ops, s.from, n_ops, j);
  }
  /// Operations [from, n_ops) applied to `e`, entry j after operations [0, from).
  SPECDEC_HOST_DEVICE float apply_ops(float e, const residual_op* ops, int from, int n_ops, index_t j) const {
    for (int k = from; k < n_ops; ++k) {
      const residual_op& op = ops[k];
      if (op.kind == 0) {
        if (j == op.token) e = 0.0f;
        continue;
      }
      // The references subtract from the normalised distribution: the untouched row as is, a
      // modified one divided by the mass it had before this operation.
      const float current =
          k == 0 ? e : (op.mass_before > 0.0 ? static_cast<float>(static_cast<double>(e) / op.mass_before) : 0.0f);
      const float qv = op.kind == 1 ? widen(draft(op.q_row, j)) : (j == op.token ? 1.0f : 0.0f);
      const float diff = specdec::detail::scaled_difference(current, op.scale, qv);
      e = diff > 0.0f ? diff : 0.0f;
    }
    return e;
  }

  /// A row pass in the canonical order: chunk masses of `apply(widen(row[j]), j)` (j < V) into
  /// `masses`, their total, and the first j where `bad` holds of that value (-1 if none).
  struct weighed {
    double total;
    std::int64_t first_bad;
  };
  struct as_is_t {
    SPECDEC_HOST_DEVICE float operator()(float v, index_t) const noexcept { return v; }
  };
  template <int batch, class Team, class R, class Apply, class Bad>
  SPECDEC_HOST_DEVICE weighed weigh(Team& team, const layout& l, double* masses, const R* row, const Apply& apply,
                                    const Bad& bad) const {
    const index_t n = vocab();
    const index_t c_count = chunks();
    if constexpr (std::is_same_v<std::remove_cv_t<Team>, specdec::detail::serial_team>) {
      // One thread takes a chunk's eight lanes side by side: the same sums in the same order as the
      // (chunk, lane) items below, as eight independent chains of adds instead of one.
      weighed w{0.0, -1};
      for (index_t c = 0; c < c_count; ++c) {
        const index_t begin = c * specdec::detail::sample_chunk;
        const index_t end = begin + specdec::detail::sample_chunk < n ? begin + specdec::detail::sample_chunk : n;
        double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        index_t j = begin;
        for (; j + 8 <= end; j += 8) {
          SPECDEC_UNROLL
          for (int k = 0; k < 8; ++k) {
            const float x = apply(widen(row[j + k]), j + k);
            lane[k] += static_cast<double>(x);
            if (w.first_bad < 0 && bad(x)) w.first_bad = j + k;
          }
        }
        for (; j < end; ++j) {
          const float x = apply(widen(row[j]), j);
          lane[(j - begin) % 8] += static_cast<double>(x);
          if (w.first_bad < 0 && bad(x)) w.first_bad = j;
        }
        masses[c] = specdec::detail::combine_lanes(lane);
        w.total += masses[c];
      }
      return w;
    }
    const index_t items = c_count * 8;
    team.sync();  // earlier readers of the scratch are done
    for (index_t item = team.rank(); item < items; item += team.size()) {
      const index_t begin = (item / 8) * specdec::detail::sample_chunk;
      const index_t end = begin + specdec::detail::sample_chunk < n ? begin + specdec::detail::sample_chunk : n;
      double sum = 0.0;
      std::int64_t first = -1;
      index_t j = begin + item % 8;
      // The row is read `batch` entries at a time before they are used (in index order, as below): on a
      // GPU one load in flight per thread would wait on memory latency for each of a lane's 128 entries.
      for (; j + 8 * (batch - 1) < end; j += 8 * batch) {
        float v[batch];
        SPECDEC_UNROLL
        for (int u = 0; u < batch; ++u) v[u] = widen(row[j + 8 * u]);
        SPECDEC_UNROLL
        for (int u = 0; u < batch; ++u) {
          const float x = apply(v[u], j + 8 * u);
          sum += static_cast<double>(x);
          if (first < 0 && bad(x)) first = j + 8 * u;
        }
      }
      for (; j < end; j += 8) {
        const float x = apply(widen(row[j]), j);
        sum += static_cast<double>(x);
        if (first < 0 && bad(x)) first = j;
      }
      l.lanes[item] = sum;
      l.marks[item] = first;
    }
    team.sync();
    // Each chunk's lanes combine in the canonical order; its first bad entry goes to its first item.
    for (index_t c = team.rank(); c < c_count; c += team.size()) {
      double lane[8];
      std::int64_t first = -1;
      for (int k = 0; k < 8; ++k) {
        lane[k] = l.lanes[c * 8 + k];
        const std::int64_t f = l.marks[c * 8 + k];
        if (f >= 0 && (first < 0 || f < first)) first = f;
      }
      masses[c] = specdec::detail::combine_lanes(lane);
      l.marks[c * 8] = first;
    }
    team.sync();
    weighed w{0.0, -1};
    for (index_t c = 0; c < c_count; ++c) {
      w.total += masses[c];
      const std::int64_t f = l.marks[c * 8];
      if (f >= 0 && w.first_bad < 0) w.first_bad = f;  // chunks are in index order
    }
    return w;
  }

  /// Checks a whole probability row (check_probability_row's rule: entries in [0, 1], sum 1 within the
  /// tolerance, which for a 16-bit row adds what rounding its entries can move the sum by), weighing it
  /// into `masses`. A sum fault's column is the row's rounding_bits (0: float), for its message.
  template <class Team, class R>
  SPECDEC_HOST_DEVICE team_fault check_row(Team& team, const layout& l, double* masses, const R* p, index_t row, int arg,
                                           double& total) const {
    const double tolerance = specdec::detail::probability_tolerance<R>(vocab());
#if SPECDEC_HOST_SIMD
    if constexpr (std::is_same_v<std::remove_cv_t<Team>, specdec::detail::serial_team>) {
      // On the host the vectorised canonical masses (bit-identical to weigh's) decide a valid row in
      // one pass at memory speed. Every entry is then >= 0, so one above 1 would make its chunk's mass
      // exceed 1: only such rows, and rows found wrong, take the pass below that names the entry.
      auto* partial = reinterpret_cast<specdec::detail::chunk_mass*>(l.lanes);  // 8 doubles of room per chunk
      specdec::detail::probability_chunk_masses(p, vocab(), partial);
      const specdec::detail::folded_row f = specdec::detail::fold_chunks(partial, chunks(), masses);
      const double error = f.total - 1.0;
      bool valid = !f.has_nan && !f.has_negative && error <= tolerance && error >= -tolerance;
      for (index_t c = 0; valid && c < chunks(); ++c) valid = masses[c] <= 1.0;
      if (valid) {
        total = f.total;
        return {};
      }
    }
#endif
    const weighed w = weigh<row_batch>(team, l, masses, p, as_is_t{}, [](float v) { return !(v >= 0.0f && v <= 1.0f); });
    total = w.total;
    if (w.first_bad >= 0)
      return make_team_fault(sampling_fault::distribution_entry, arg, row, w.first_bad, static_cast<double>(widen(p[w.first_bad])));
    const double error = w.total - 1.0;
    if (!(error <= tolerance && error >= -tolerance))
      return make_team_fault(sampling_fault::distribution_sum, arg, row, rounding_bits<R>, w.total);
    return {};
  }

  /// The canonical search (locate_sample: choose_chunk, then walk_chunk) with the chosen chunk's
  /// entries first staged in scratch by the whole team, then walked by the team (walk_staged).
  using staged_source = sampling::detail::staged_source;
  template <class Team, class Value>
  SPECDEC_HOST_DEVICE std::int32_t locate(Team& team, const layout& l, const double* masses, double target,
                                          const Value& value) const {
    const index_t n = vocab();
    const specdec::detail::chunk_choice c = specdec::detail::choose_chunk(masses, n, target);
    const index_t begin = c.chunk * specdec::detail::sample_chunk;
    const index_t end = begin + specdec::detail::sample_chunk < n ? begin + specdec::detail::sample_chunk : n;
    // One thread: the staged walk's answer is walk_chunk's by definition, and walking the entries
    // in place skips the copy and the segment passes (a tenth of a host request's draw).
    if constexpr (std::is_same_v<std::remove_cv_t<Team>, specdec::detail::serial_team>)
      return specdec::detail::walk_chunk(value, begin, end, c.before, target);
    team.sync();  // earlier readers of the stage are done
    for (index_t j = begin + team.rank(); j < end; j += team.size()) l.stage[j - begin] = value(j);
    team.sync();
    return walk_staged(team, l, begin, end, c.before, masses[c.chunk], target);
  }

  /// walk_chunk's answer over the staged chunk [begin, end), found by the team (staged_walk.hpp).
  template <class Team>
  SPECDEC_HOST_DEVICE std::int32_t walk_staged(Team& team, const layout& l, index_t begin, index_t end, double before,
                                               double chunk_mass, double target) const {
    return walk_staged_chunk<segments>(team, l.stage, l.segment_sums, l.segment_marks, begin, end, before, chunk_mass, target);
  }

  /// The final draw with uniform u from a node's current entries (`s` and operations [0, n_ops) on the
  /// target row `p`): the untouched row from the chunk masses its check left (l.base_masses, total
  /// `base_total`), a modified one from the chunk masses of its current entries; the empty-distribution
  /// fallback as configured.
  template <class Team>
  SPECDEC_HOST_DEVICE std::int32_t draw(Team& team, const layout& l, const T* p, residual_source s, int n_ops,
                                        double base_total, double u) const {
    const index_t n = vocab();
    const auto base = [p](index_t j) { return widen(p[j]); };
    if (n_ops == 0) {
      if (base_total > 0.0) return locate(team, l, l.base_masses, u * base_total, base);
    } else {
      const residual_op* ops = l.ops;
      const auto current = [this, s, ops, n_ops](index_t j) { return entry(s, ops, n_ops, j); };
      const int from = s.from;
      bool removals_only = from == 0;  // deterministic drafts rejected at lenience 1: tokens zeroed in p
      for (int k = 0; k < n_ops; ++k) removals_only = removals_only && ops[k].kind == 0;
      const double total =
          removals_only
              ? weigh_removed(team, l, p, n_ops)
              : with_source(s, [&](const auto* src) {
                  return weigh<op_batch>(team, l, l.masses, src,
                                         [this, ops, from, n_ops](float v, index_t j) { return apply_ops(v, ops, from, n_ops, j); },
                                         [](float) { return false; }).total;
                });
      if (total > 0.0) return locate(team, l, l.masses, u * total, current);
    }
    switch (fallback) {
      case empty_residual::sample_target: return locate(team, l, l.base_masses, u * base_total, base);
      case empty_residual::token_zero: return 0;
      case empty_residual::last_token: break;
    }
    return static_cast<std::int32_t>(n - 1);
  }

  /// The chunk masses of the row p with the tokens of `n_ops` removal operations zeroed, into l.masses,
  /// and their total: the base row's masses (l.base_masses, from check_row) for every chunk but those
  /// holding a removed token, which are summed again in the canonical order. The same masses, bit for
  /// bit, as weighing the whole row through the operations (an untouched chunk's entries are the base
  /// row's), at the cost of a few chunks instead of a pass over V entries with every operation tested
  /// per entry (a third of a one-request walk's stall samples on an H200 profile).
  template <class Team>
  SPECDEC_HOST_DEVICE double weigh_removed(Team& team, const layout& l, const T* p, int n_ops) const {
    const index_t n = vocab();
    const index_t c_count = chunks();
    const auto chunk_of = [&](int k) { return static_cast<index_t>(l.ops[k].token) / specdec::detail::sample_chunk; };
    // The distinct chunks holding a removed token, in operation order: operation k's chunk is new when
    // no earlier operation's is the same. Items are (distinct chunk, lane).
    const auto first_with_chunk = [&](int k) {
      for (int e = 0; e < k; ++e)
        if (chunk_of(e) == chunk_of(k)) return false;
      return true;
    };
    if constexpr (std::is_same_v<std::remove_cv_t<Team>, specdec::detail::serial_team>) {
      // One thread: a chunk holding removed tokens is copied to the stage with them zeroed and its
      // eight lanes summed side by side, the same sums in the same order as the (chunk, lane) items
      // below, without testing every operation at every entry.
      for (index_t c = 0; c < c_count; ++c) l.masses[c] = l.base_masses[c];
      for (int k = 0; k < n_ops; ++k) {
        if (!first_with_chunk(k)) continue;
        const index_t chunk = chunk_of(k);
        const index_t begin = chunk * specdec::detail::sample_chunk;
        const index_t len = (begin + specdec::detail::sample_chunk < n ? begin + specdec::detail::sample_chunk : n) - begin;
        float* x = l.stage;
        for (index_t i = 0; i < len; ++i) x[i] = widen(p[begin + i]);
        for (int e = k; e < n_ops; ++e)  // no operation before k removes a token of this chunk
          if (chunk_of(e) == chunk) x[l.ops[e].token - begin] = 0.0f;
        double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        index_t i = 0;
        for (; i + 8 <= len; i += 8) {
          SPECDEC_UNROLL
          for (int u = 0; u < 8; ++u) lane[u] += static_cast<double>(x[i + u]);
        }
        for (; i < len; ++i) lane[i % 8] += static_cast<double>(x[i]);
        l.masses[chunk] = specdec::detail::combine_lanes(lane);
      }
      double total = 0.0;
      for (index_t c = 0; c < c_count; ++c) total += l.masses[c];
      return total;
    }
    team.sync();  // earlier readers of the masses and lanes are done
    for (index_t c = team.rank(); c < c_count; c += team.size()) l.masses[c] = l.base_masses[c];
    index_t distinct = 0;
    for (int k = 0; k < n_ops; ++k) distinct += first_with_chunk(k) ? 1 : 0;
    for (index_t item = team.rank(); item < distinct * 8; item += team.size()) {
      index_t nth = item / 8;
      int k = 0;
      for (;; ++k)
        if (first_with_chunk(k) && nth-- == 0) break;
      const index_t begin = chunk_of(k) * specdec::detail::sample_chunk;
      const index_t end = begin + specdec::detail::sample_chunk < n ? begin + specdec::detail::sample_chunk : n;
      double sum = 0.0;
      for (index_t j = begin + item % 8; j < end; j += 8) sum += static_cast<double>(apply_ops(widen(p[j]), l.ops, 0, n_ops, j));
      l.lanes[item] = sum;
    }
    team.sync();
    for (index_t d = team.rank(); d < distinct; d += team.size()) {
      index_t nth = d;
      int k = 0;
      for (;; ++k)
        if (first_with_chunk(k) && nth-- == 0) break;
      double lane[8];
      for (int e = 0; e < 8; ++e) lane[e] = l.lanes[d * 8 + e];
      l.masses[chunk_of(k)] = specdec::detail::combine_lanes(lane);
    }
    team.sync();
    double total = 0.0;
    for (index_t c = 0; c < c_count; ++c) total += l.masses[c];
    return total;
  }

#if SPECDEC_HOST_SIMD
  /// out[i] = the current entry j0 + i of the node's distribution, i < len (entry()'s values; host code).
  /// The common case, one subtraction of a draft row from the target row (vLLM's residual), runs as
  /// vectors: apply_ops per entry, with its loop over the operations, took ~5 ns an entry (measured 4x
  /// the whole rejection_sample call).
  template <class R>
  void residual_span(const R* src, int from, int n_ops, const residual_op* ops, index_t j0, index_t len, float* out) const {
    index_t i = 0;
    if (from == 0 && n_ops == 1 && ops[0].kind == 1) {
      using vec = specdec::detail::simd<float>::vec;
      constexpr index_t w = specdec::detail::simd_bytes / 4;
      const D* q = draft.row(ops[0].q_row);
      const vec scale = vec{} + ops[0].scale, zero{};
      for (; i + w <= len; i += w) {
        const vec x = specdec::detail::simd_load(src + j0 + i), qv = specdec::detail::simd_load(q + j0 + i);
        vec product = scale * qv;
#if defined(__x86_64__) || defined(__i386__)
        __asm__("" : "+x"(product));  // rounded to float before the subtraction (scaled_difference: no FMA)
#else
        __asm__("" : "+w"(product));
#endif
        const vec diff = x - product;
        const vec kept = diff > zero ? diff : zero;
        std::memcpy(out + i, &kept, sizeof kept);
      }
    }
    for (; i < len; ++i) out[i] = apply_ops(widen(src[j0 + i]), ops, from, n_ops, j0 + i);
  }
#endif

  /// vLLM's exponential race: argmax over j of the current entry j / noise e[j], first index on ties,
  /// over (chunk, lane) items.
  template <class Team>
  SPECDEC_HOST_DEVICE std::int32_t race_token(Team& team, const layout& l, residual_source s, int n_ops, const float* e) const {
#if SPECDEC_HOST_SIMD
    if constexpr (std::is_same_v<std::remove_cv_t<Team>, specdec::detail::serial_team>) {
      // One thread: the entries in index order (strictly larger wins: the lowest index on ties, as the
      // items' reduction), a span of residual entries at a time.
      return with_source(s, [&](const auto* src) {
        float r[specdec::detail::sample_chunk];
        float best_score = -1.0f;
        index_t best = 0;
        for (index_t j0 = 0; j0 < vocab(); j0 += specdec::detail::sample_chunk) {
          const index_t len = vocab() - j0 < specdec::detail::sample_chunk ? vocab() - j0 : specdec::detail::sample_chunk;
          residual_span(src, s.from, n_ops, l.ops, j0, len, r);
          for (index_t i = 0; i < len; ++i) {
            const float score = r[i] / e[j0 + i];
            if (score > best_score) {
              best_score = score;
              best = j0 + i;
            }
          }
        }
        return static_cast<std::int32_t>(best);
      });
    }
#endif
    return with_source(s, [&](const auto* src) { return race_over(team, l, src, s.from, n_ops, e); });
  }
  /// race_token over `src`, the target row (from = 0) or the folded row (from > 0).
  template <class Team, class R>
  SPECDEC_HOST_DEVICE std::int32_t race_over(Team& team, const layout& l, const R* src, int from, int n_ops, const float* e) const {
    const index_t n = vocab();
    const index_t items = chunks() * 8;
    team.sync();
    for (index_t item = team.rank(); item < items; item += team.size()) {
      const index_t begin = (item / 8) * specdec::detail::sample_chunk;
      const index_t end = begin + specdec::detail::sample_chunk < n ? begin + specdec::detail::sample_chunk : n;
      float best_score = -1.0f;
      std::int64_t best = -1;
      const auto consider = [&](float score, index_t j) {
        if (score > best_score) {
          best_score = score;
          best = j;
        }
      };
      index_t j = begin + item % 8;
      constexpr int batch = op_batch;
      for (; j + 8 * (batch - 1) < end; j += 8 * batch) {  // batched as in weigh
        float v[batch], noise[batch];
        SPECDEC_UNROLL
        for (int u = 0; u < batch; ++u) {
          v[u] = widen(src[j + 8 * u]);
          noise[u] = e[j + 8 * u];
        }
        SPECDEC_UNROLL
        for (int u = 0; u < batch; ++u) consider(apply_ops(v[u], l.ops, from, n_ops, j + 8 * u) / noise[u], j + 8 * u);
      }
      for (; j < end; j += 8) consider(apply_ops(widen(src[j]), l.ops, from, n_ops, j) / e[j], j);
      l.lanes[item] = best_score;
      l.marks[item] = best;
    }
    // The winner is the largest score, the smallest index among equal scores: a total order, so it
    // may be taken per chunk first (into the chunk's first item) and then over the chunks.
    const auto better = [](float score, std::int64_t at, float best_score, std::int64_t best) {
      return at >= 0 && (score > best_score || (score == best_score && at < best));
    };
    team.sync();
    for (index_t c = team.rank(); c < chunks(); c += team.size()) {
      float chunk_score = -1.0f;
      std::int64_t chunk_best = -1;
      for (int k = 0; k < 8; ++k) {
        const float score = static_cast<float>(l.lanes[c * 8 + k]);
        const std::int64_t at = l.marks[c * 8 + k];
        if (better(score, at, chunk_score, chunk_best < 0 ? INT64_MAX : chunk_best)) {
          chunk_score = score;
          chunk_best = at;
        }
      }
      l.lanes[c * 8] = chunk_score;
      l.marks[c * 8] = chunk_best;
    }
    team.sync();
    float best_score = -1.0f;
    std::int64_t best = 0;
    for (index_t c = 0; c < chunks(); ++c) {
      const float score = static_cast<float>(l.lanes[c * 8]);
      const std::int64_t at = l.marks[c * 8];
      if (better(score, at, best_score, best)) {
        best_score = score;
        best = at;
      }
    }
    return static_cast<std::int32_t>(best);
  }
};

}  // namespace specdec::sampling::detail::inline SPECDEC_ISA
