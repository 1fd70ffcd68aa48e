// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The EAGLE-2 dynamic tree build's bookkeeping as team jobs, one team per request: the root's
/// candidates (begin), one expansion's grid, next frontier and draft mask (grow), and the final
/// reranking into a tree (finish). Both builders run them: eagle2_tree_builder on the host over host
/// storage (one thread), eagle2_batch_builder on its backend (one launch each on CUDA). Candidates are
/// in EAGLE's flat layout (eagle2.hpp): index f < k is the root child of rank f; `k + i k^2 + r k + c`
/// is child rank c of frontier slot r at expansion i.
#pragma once

#include <cstddef>
#include <cstdint>

#include <specdec/backend/detail/team.hpp>
#include <specdec/config.hpp>
#include <specdec/core/view.hpp>
#include <specdec/tree/detail/faults.hpp>

namespace specdec::detail::eagle2_jobs {

/// The build's state, one row per request, C = k + depth k^2 candidates.
template <class Space>
struct state {
  matrix_view<float, Space> scores;          // [batch x C] cumulative score per flat candidate
  matrix_view<std::int32_t, Space> tokens;   // [batch x C] target id per candidate
  matrix_view<std::int32_t, Space> parents;  // [batch x C] parent flat index, -1 = root
  matrix_view<std::int32_t, Space> frontier;     // [batch x k]
  matrix_view<std::int32_t, Space> parent_slot;  // [batch x k]
  matrix_view<std::int32_t, Space> input_ids;    // [batch x k]
  vector_view<std::int32_t, Space> roots;        // [batch]
  matrix_view<std::int32_t, Space> parent_list;  // [batch x (1 + depth k)] SGLang's parent list, or empty
  vector_view<const std::int32_t, Space> d2t;    // [V'] or empty
  index_t top_k;
  index_t target_vocab;  // 0: unchecked
  bool multiply;         // scores are probabilities (SGLang): a child's is its parent's times its own
};

/// Where finish writes the trees: `[batch x T]` tokens and parents, optional depths and scores, and
/// `[batch x (T - 1)]` selected flat indices (optional).
template <class Space>
struct tree_outputs {
  matrix_view<std::int32_t, Space> tokens;
  matrix_view<std::int32_t, Space> parents;
  matrix_view<std::int32_t, Space> depths;
  matrix_view<float, Space> scores;
  matrix_view<std::int32_t, Space> selected;
};

enum arg : int { arg_root_tokens, arg_d2t, arg_logits, arg_tree };

/// The target id of draft token t (through d2t), or a fault.
template <class Space>
SPECDEC_HOST_DEVICE inline team_fault map_token(const state<Space>& s, std::int32_t t, index_t r, std::int32_t& out) {
  const index_t mapped = s.d2t.empty() ? index_t{t} : index_t{t} + s.d2t(t);
  if (s.target_vocab > 0 && mapped >= s.target_vocab)
    return make_team_fault(tree_fault::mapped_token, s.d2t.empty() ? arg_logits : arg_d2t, r, t, double(mapped), s.target_vocab);
  out = static_cast<std::int32_t>(mapped);
  return {};
}

/// Whether candidate g ranks before h: larger score first, ties to the lower index.
SPECDEC_HOST_DEVICE inline bool ranks_before(float sg, index_t g, float sh, index_t h) {
  return sg > sh || (sg == sh && g < h);
}

/// The m best of score[0, n) (ranks_before) into best[0, m), best first, on one thread: a bounded heap
/// whose root is the worst kept, O(n log m) (a team's rank count is O(n^2) / threads).
SPECDEC_HOST_DEVICE inline void best_of(const float* score, index_t n, index_t m, std::int32_t* best) {
  if (m <= 0) return;
  const auto worse = [&](std::int32_t a, std::int32_t b) { return ranks_before(score[b], b, score[a], a); };
  const auto sift_down = [&](index_t root, index_t end) {
    while (2 * root + 1 < end) {
      index_t child = 2 * root + 1;
      if (child + 1 < end && worse(best[child + 1], best[child])) ++child;
      if (!worse(best[child], best[root])) return;
      const std::int32_t t = best[root];
      best[root] = best[child];
      best[child] = t;
      root = child;
    }
  };
  for (index_t i = 0; i < m; ++i) best[i] = static_cast<std::int32_t>(i);
  for (index_t start = m / 2; start-- > 0;) sift_down(start, m);
  for (index_t i = m; i < n; ++i)
    if (ranks_before(score[i], i, score[best[0]], best[0])) {
      best[0] = static_cast<std::int32_t>(i);
      sift_down(0, m);
    }
  for (index_t end = m - 1; end > 0; --end) {  // the worst to the back, one at a time
    const std::int32_t t = best[0];
    best[0] = best[end];
    best[end] = t;
    sift_down(0, end);
  }
}

/// The m best of score[0, n) into best[0, m), best first: best_of on one thread; on a team, each
/// thread ranks its entries by counting those before them (every rank distinct: the order is strict).
template <class Team>
SPECDEC_HOST_DEVICE void select_best(Team& team, const float* score, index_t n, index_t m, std::int32_t* best) {
  if (team.size() == 1) {
    best_of(score, n, m, best);
    return;
  }
  for (index_t g = team.rank(); g < n; g += team.size()) {
    index_t rank = 0;
    for (index_t h = 0; h < n && rank < m; ++h) rank += ranks_before(score[h], h, score[g], g) ? 1 : 0;
    if (rank < m) best[rank] = static_cast<std::int32_t>(g);
  }
  team.sync();
}

/// begin(): the root's top-k become candidates 0 .. k - 1 and the first frontier.
template <class Space>
struct begin_job {
  state<Space> s;
  matrix_view<const float, Space> values;          // [batch x k] log-probabilities (probabilities when multiply)
  matrix_view<const std::int32_t, Space> indices;  // [batch x k] draft ids
  vector_view<const std::int32_t, Space> root_tokens;
  matrix_view<std::uint8_t, Space> mask;           // [batch k x k]
  const char* where;
  const char* names[team_job_names];
  static void describe(const char* where, const char* name, const specdec::detail::team_fault& f) {
    specdec::detail::describe_tree_fault(where, name, f);
  }
  std::size_t scratch_bytes() const { return 0; }
  template <class Team>
  SPECDEC_HOST_DEVICE team_fault operator()(Team& team, index_t b, std::byte*) const {
    const index_t k = s.top_k;
    const std::int32_t root = root_tokens(b);
    if (root < 0 || (s.target_vocab > 0 && root >= s.target_vocab))
      return make_team_fault(tree_fault::token_entry, arg_root_tokens, b, 0, root,
                             s.target_vocab > 0 ? s.target_vocab : index_t{INT32_MAX});
    for (index_t c = 0; c < k; ++c) {  // every thread maps (the same verdict everywhere); rank 0 writes
      std::int32_t token = 0;
      if (const team_fault f = map_token(s, indices(b, c), b, token); f.code != 0) return f;
      if (team.rank() != 0) continue;
      s.scores(b, c) = values(b, c);
      s.tokens(b, c) = token;
      s.parents(b, c) = -1;
      s.frontier(b, c) = static_cast<std::int32_t>(c);
      s.parent_slot(b, c) = -1;
      s.input_ids(b, c) = token;
    }
    for (index_t e = team.rank(); e < k * k; e += team.size()) mask(b * k + e / k, e % k) = e / k == e % k ? 1 : 0;
    if (team.rank() == 0) s.roots(b) = root;
    return {};
  }
};

/// One expansion: appends a k x k grid of candidates per request (row r under frontier slot r, its
/// children the top-k of row `b k + r`), then the next frontier is the grid's top k and the mask grows.
/// For Jakiro's right head the rows are the previous frontier's, aligned with the new slots.
template <class Space>
struct grow_job {
  state<Space> s;
  matrix_view<const float, Space> values;          // [batch k x k]
  matrix_view<const std::int32_t, Space> indices;  // [batch k x k]
  matrix_view<const std::uint8_t, Space> old_mask;  // [batch k x old_cols]
  matrix_view<std::uint8_t, Space> new_mask;        // [batch k x (old_cols + k)]
  index_t base;  // flat index of the grid's first candidate (k + steps k^2)
  const char* where;
  const char* names[team_job_names];
  static void describe(const char* where, const char* name, const specdec::detail::team_fault& f) {
    specdec::detail::describe_tree_fault(where, name, f);
  }
  std::size_t scratch_bytes() const {
    return (sizeof(float) + sizeof(std::int32_t)) * static_cast<std::size_t>(s.top_k * s.top_k) +
           sizeof(std::int32_t) * static_cast<std::size_t>(s.top_k);
  }
  template <class Team>
  SPECDEC_HOST_DEVICE team_fault operator()(Team& team, index_t b, std::byte* scratch) const {
    const index_t k = s.top_k;
    float* grid = reinterpret_cast<float*>(scratch);
    std::int32_t* unmapped = reinterpret_cast<std::int32_t*>(grid + k * k);  // per candidate: its mapping failed
    std::int32_t* order = unmapped + k * k;
    // Each thread maps its own candidates and flags failures; then every thread reports the first
    // flagged one (the same fault everywhere). Every thread mapping every candidate would be a chain
    // of k^2 dependent reads.
    team.sync();  // earlier readers of the scratch are done
    for (index_t g = team.rank(); g < k * k; g += team.size()) {
      std::int32_t token = 0;
      const bool mapped = map_token(s, indices(b * k + g / k, g % k), b, token).code == 0;
      unmapped[g] = mapped ? 0 : 1;
      if (!mapped) continue;
      const std::int32_t parent = s.frontier(b, g / k);
      const float value = values(b * k + g / k, g % k), parent_score = s.scores(b, parent);
      const float score = s.multiply ? parent_score * value : value + parent_score;
      grid[g] = score;
      s.scores(b, base + g) = score;
      s.tokens(b, base + g) = token;
      s.parents(b, base + g) = parent;
    }
    team.sync();
    for (index_t g = 0; g < k * k; ++g) {
      if (unmapped[g] == 0) continue;
      std::int32_t token = 0;
      return map_token(s, indices(b * k + g / k, g % k), b, token);
    }
    if (!s.parent_list.empty()) {  // row g of this grid hangs under parent_list[1 + step k + g / k]
      const index_t first = 1 + (base - k) / k;
      if (team.rank() == 0 && base == k) s.parent_list(b, 0) = -1;
      for (index_t r = team.rank(); r < k; r += team.size()) s.parent_list(b, first + r) = s.frontier(b, r);
    }
    select_best(team, grid, k * k, k, order);
    team.sync();  // the old frontier has been read; the new one replaces it
    const index_t old_cols = old_mask.cols();
    for (index_t slot = team.rank(); slot < k; slot += team.size()) {
      const std::int32_t g = order[slot];
      s.frontier(b, slot) = static_cast<std::int32_t>(base + g);
      s.parent_slot(b, slot) = g / static_cast<std::int32_t>(k);
      s.input_ids(b, slot) = s.tokens(b, base + g);
    }
    // Row by row through local row pointers: a byte store may alias anything, so stores through the
    // views' members would reload them at every byte.
    for (index_t slot = 0; slot < k; ++slot) {
      const std::uint8_t* from = old_mask.row(b * k + order[slot] / k);
      std::uint8_t* to = new_mask.row(b * k + slot);
      for (index_t c = team.rank(); c < old_cols + k; c += team.size()) to[c] = c < old_cols ? from[c] : (c - old_cols == slot ? 1 : 0);
    }
    return {};
  }
};

/// finish(): the T - 1 best candidates (ties to the lower flat index) in ascending flat index, as a tree.
template <class Space>
struct finish_job {
  state<Space> s;
  tree_outputs<Space> out;
  index_t candidates;  // k + depth k^2
  index_t keep;        // T - 1
  const char* where;
  const char* names[team_job_names];
  static void describe(const char* where, const char* name, const specdec::detail::team_fault& f) {
    specdec::detail::describe_tree_fault(where, name, f);
  }
  std::size_t scratch_bytes() const {
    return (sizeof(std::int32_t) + sizeof(float)) * static_cast<std::size_t>(candidates) +
           2 * sizeof(std::int32_t) * static_cast<std::size_t>(keep + 1);
  }
  template <class Team>
  SPECDEC_HOST_DEVICE team_fault operator()(Team& team, index_t b, std::byte* scratch) const {
    std::int32_t* node_of = reinterpret_cast<std::int32_t*>(scratch);  // node of each candidate, -1 unselected
    float* score = reinterpret_cast<float*>(node_of + candidates);     // the scores, read by every thread
    std::int32_t* node_parent = reinterpret_cast<std::int32_t*>(score + candidates);  // [keep + 1]
    std::int32_t* depth = node_parent + keep + 1;                                     // [keep + 1]
    team.sync();  // earlier readers of the scratch are done
    for (index_t f = team.rank(); f < candidates; f += team.size()) {
      score[f] = s.scores(b, f);
      node_of[f] = -1;
    }
    team.sync();
    select_best(team, score, candidates, keep, node_parent);  // node_parent holds the selection until it is numbered
    if (team.rank() == 0) {
      for (index_t n = 0; n < keep; ++n) node_of[node_parent[n]] = 1;
      std::int32_t next = 1;
      for (index_t f = 0; f < candidates; ++f) node_of[f] = node_of[f] > 0 ? next++ : -1;
    }
    team.sync();
    // A selected candidate's parent is selected unless scores rise along a path (NaN or positive
    // log-probabilities). Each thread checks its candidates and flags them (in `score`, no longer
    // needed); every thread then reports the first flagged one, so all return the same fault.
    std::int32_t* orphan = reinterpret_cast<std::int32_t*>(score);
    for (index_t f = team.rank(); f < candidates; f += team.size()) {
      const std::int32_t pf = s.parents(b, f);
      orphan[f] = node_of[f] > 0 && pf >= 0 && node_of[pf] < 0 ? 1 : 0;
    }
    team.sync();
    for (index_t f = 0; f < candidates; ++f)
      if (orphan[f] != 0) return make_team_fault(tree_fault::unselected_parent, arg_tree, b, f, s.parents(b, f));
    for (index_t f = team.rank(); f < candidates; f += team.size()) {
      const std::int32_t node = node_of[f];
      if (node < 0) continue;
      const std::int32_t pf = s.parents(b, f);
      node_parent[node] = pf < 0 ? 0 : node_of[pf];
      out.tokens(b, node) = s.tokens(b, f);
      out.parents(b, node) = node_parent[node];
      if (!out.scores.empty()) out.scores(b, node) = s.scores(b, f);
      if (!out.selected.empty()) out.selected(b, node - 1) = static_cast<std::int32_t>(f);
    }
    if (team.rank() == 0) {
      out.tokens(b, 0) = s.roots(b);
      out.parents(b, 0) = -1;
      if (!out.scores.empty()) out.scores(b, 0) = 0.0f;
    }
    if (!out.depths.empty()) {
      // Depths by rank 0 in scratch (parents precede children), then written by every thread: a chain
      // of dependent reads of the outputs would wait on memory at each node.
      team.sync();  // node_parent written
      if (team.rank() == 0) {
        depth[0] = 0;
        for (index_t n = 1; n <= keep; ++n) depth[n] = depth[node_parent[n]] + 1;
      }
      team.sync();
      for (index_t n = team.rank(); n <= keep; n += team.size()) out.depths(b, n) = depth[n];
    }
    return {};
  }
};

}  // namespace specdec::detail::eagle2_jobs
