// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief SGLang's sampled tree verification in SGLang's own layout: `tree_speculative_sampling_target_only`
/// (sgl-kernel), its link-encoded trees and outputs, as a team job (backend/detail/team.hpp) on any
/// backend: one team per request (one CUDA block, one launch), the walk on the device. The walk is
/// specdec's coin walk (sampling/detail/coin_walk.hpp), the one `verify_coin_tree` runs
/// (sampling/tree_coin.hpp, where the rule is documented); this header adds SGLang's layout: the links'
/// checks, the coins and final uniforms as SGLang passes them, the `retrive_index` slots the path is
/// written to. A header of its own because it is built on the stochastic walk's row machinery, which
/// sglang.hpp's bookkeeping and greedy walk do not need.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/backend/detail/team.hpp>
#include <specdec/config.hpp>
#include <specdec/core/checked.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/half.hpp>
#include <specdec/core/memory_space.hpp>
#include <specdec/core/view.hpp>
#include <specdec/core/view_checks.hpp>
#include <specdec/interop/detail/faults.hpp>
#include <specdec/interop/sglang.hpp>
#include <specdec/sampling/detail/coin_walk.hpp>
#include <specdec/sampling/speculative.hpp>

namespace specdec::sglang {
namespace detail {

/// Argument indices of sglang_coin_job's fault names.
enum sglang_coin_arg : int {
  coin_arg_candidates,
  coin_arg_next_token,
  coin_arg_next_sibling,
  coin_arg_retrive_index,
  coin_arg_uniforms,
  coin_arg_final,
  coin_arg_target,
};

/// SGLang's coin walk (sampling::detail::coin_walk, verify_coin_tree's rule) over link-encoded trees,
/// one request per team. Rank 0 first checks the request's links as a whole (tokens, link values, each
/// node linked once and reached from the root, parents numbered first), so a malformed tree is refused
/// whatever path the walk would take; the verdict is broadcast through the scratch. Then every thread
/// walks: the coin of node i is `coins(r, i)`, children are visited in link order, the final uniform is
/// `finals(r)`, and each emitted token goes to its node's `retrive_index` slot. Rank 0 writes. T: the
/// target rows' element type.
template <class Space, class T = float>
struct sglang_coin_job : sampling::detail::coin_walk<Space, sampling::detail::probability_matrix<Space, T>> {
  using base = sampling::detail::coin_walk<Space, sampling::detail::probability_matrix<Space, T>>;
  using typename base::layout;
  using base::carve;
  using base::round16;
  using base::vocab;

  matrix_view<const std::int64_t, Space> candidates;
  matrix_view<const std::int64_t, Space> retrive_index;
  matrix_view<const std::int64_t, Space> next_token;
  matrix_view<const std::int64_t, Space> next_sibling;
  matrix_view<const float, Space> coins;      // [bs x >= N]: the coin at node i is entry i
  vector_view<const float, Space> finals;     // [bs]
  vector_view<std::int32_t, Space> predicts;  // [bs * N]
  matrix_view<std::int32_t, Space> accept_index;
  vector_view<std::int32_t, Space> accept_token_num;
  const char* where;
  const char* names[specdec::detail::team_job_names];
  static void describe(const char* where, const char* name, const specdec::detail::team_fault& f) {
    specdec::detail::describe_interop_fault(where, name, f);
  }

  /// The rows' scratch, then the link check's verdict.
  SPECDEC_HOST_DEVICE std::size_t verdict_offset() const { return round16(base::scratch_bytes()); }
  std::size_t scratch_bytes() const { return verdict_offset() + sizeof(team_fault); }

  /// Request r's links as the host form of SGLang's API reads them (rank 0; the tree scratch holds the
  /// parents and the visiting queue).
  SPECDEC_HOST_DEVICE team_fault check_links(index_t r, const sampling::detail::tree_scratch& ts) const {
    const index_t n = candidates.cols();
    for (index_t i = 0; i < n; ++i) {
      const std::int64_t t = candidates(r, i);
      if (t < 0 || t >= vocab()) return make_team_fault(interop_fault::candidate_token, coin_arg_candidates, r, i, double(vocab()), t);
      const std::int64_t first = next_token(r, i), sibling = next_sibling(r, i);
      if (first < -1 || first >= n) return make_team_fault(interop_fault::link_value, coin_arg_next_token, r, i, double(n), first);
      if (sibling < -1 || sibling >= n)
        return make_team_fault(interop_fault::link_value, coin_arg_next_sibling, r, i, double(n), sibling);
    }
    std::int32_t* parent = ts.depth;
    std::int32_t* queue = ts.first_child;
    for (index_t i = 0; i < n; ++i) parent[i] = -2;
    parent[0] = -1;
    queue[0] = 0;
    index_t reached = 1;
    // Each node enters the queue once (a second link to it is refused), so the visit ends.
    for (index_t k = 0; k < reached; ++k)
      for (std::int64_t c = next_token(r, queue[k]); c >= 0; c = next_sibling(r, c)) {
        if (parent[c] != -2) return make_team_fault(interop_fault::link_twice, 0, r, c, 0.0);
        parent[c] = queue[k];
        queue[reached++] = static_cast<std::int32_t>(c);
      }
    if (reached != n) return make_team_fault(interop_fault::link_unreached, 0, r, reached, 0.0, n);
    for (index_t i = 1; i < n; ++i)
      if (parent[i] >= i) return make_team_fault(interop_fault::link_order, 0, r, i, 0.0, parent[i]);
    return {};
  }

  /// coin_walk's view of request r: the links, coins and final uniform in SGLang's layout, and the
  /// path written to the `retrive_index` slots (`slot`: the current node's).
  struct request_view {
    const sglang_coin_job* job;
    index_t r;
    std::int64_t slot;
    std::int32_t accepted = 0;
    SPECDEC_HOST_DEVICE std::int64_t first_child(std::int64_t node) const { return job->next_token(r, node); }
    SPECDEC_HOST_DEVICE std::int64_t next_sibling(std::int64_t c) const { return job->next_sibling(r, c); }
    SPECDEC_HOST_DEVICE std::int32_t token(std::int64_t c) const { return static_cast<std::int32_t>(job->candidates(r, c)); }
    SPECDEC_HOST_DEVICE team_fault coin(std::int64_t node, double& u) const {
      u = job->coins(r, node);
      if (!(u >= 0.0 && u < 1.0)) return make_team_fault(sampling_fault::uniform_value, coin_arg_uniforms, r, node, u, 0);
      return {};
    }
    SPECDEC_HOST_DEVICE team_fault final_uniform(double& u) const {
      u = job->finals(r);
      if (!(u >= 0.0 && u < 1.0)) return make_team_fault(sampling_fault::uniform_value, coin_arg_final, r, -1, u, 0);
      return {};
    }
    template <class Team>
    SPECDEC_HOST_DEVICE team_fault accept(const Team& team, std::int64_t node, std::int32_t token) {
      // The request's own slots only (see sglang_greedy_job): another request's would be written twice.
      const index_t n = job->candidates.cols();
      const std::int64_t next_slot = job->retrive_index(r, node);
      if (next_slot < r * n || next_slot >= r * n + n)
        return make_team_fault(interop_fault::link_index, coin_arg_retrive_index, r, next_slot, double(node), n);
      if (team.rank() == 0) {
        job->predicts(slot) = token;
        job->accept_index(r, accepted + 1) = static_cast<std::int32_t>(next_slot);
      }
      ++accepted;
      slot = next_slot;
      return {};
    }
    template <class Team, class Entry>
    SPECDEC_HOST_DEVICE void finish(const Team& team, std::int32_t token, bool, std::int32_t, std::int32_t, const Entry&) const {
      if (team.rank() == 0) {
        job->predicts(slot) = token;
        job->accept_token_num(r) = accepted;
      }
    }
  };

  template <class Team>
  SPECDEC_HOST_DEVICE team_fault operator()(Team& team, index_t r, std::byte* scratch) const {
    const layout l = carve(scratch);
    auto* verdict = reinterpret_cast<team_fault*>(scratch + verdict_offset());
    team.sync();  // earlier readers of the scratch are done
    if (team.rank() == 0) *verdict = check_links(r, l.tree);
    team.sync();
    if (const team_fault f = *verdict; f.code != 0) return f;

    const index_t n = candidates.cols(), steps = accept_index.cols();
    // The request's own slots only (see sglang_greedy_job): another request's would be written twice.
    const std::int64_t own = r * n;
    const std::int64_t slot = retrive_index(r, 0);
    if (slot < own || slot >= own + n) return make_team_fault(interop_fault::link_index, coin_arg_retrive_index, r, slot, 0.0, n);
    if (team.rank() == 0) {
      accept_index(r, 0) = static_cast<std::int32_t>(slot);
      for (index_t s = 1; s < steps; ++s) accept_index(r, s) = -1;
    }
    request_view view{this, r, slot};
    return this->walk(team, l, r * n, steps - 1, coin_arg_target, view);
  }
};

/// The backend form's body for target rows of element type T.
template <team_backend B, class T>
void tree_speculative_sampling_target_only_rows(B& b, matrix_view<const std::int64_t, typename B::memory_space> candidates,
                                           matrix_view<const std::int64_t, typename B::memory_space> retrive_index,
                                           matrix_view<const std::int64_t, typename B::memory_space> next_token,
                                           matrix_view<const std::int64_t, typename B::memory_space> next_sibling,
                                           matrix_view<const float, typename B::memory_space> uniform_samples,
                                           vector_view<const float, typename B::memory_space> uniform_final,
                                           matrix_view<const T, typename B::memory_space> target_probs,
                                           vector_view<std::int32_t, typename B::memory_space> predicts,
                                           matrix_view<std::int32_t, typename B::memory_space> accept_index,
                                           vector_view<std::int32_t, typename B::memory_space> accept_token_num,
                                           float threshold_single, float threshold_acc) {
  constexpr const char* where = "specdec::sglang::tree_speculative_sampling_target_only";
  const index_t bs = candidates.rows(), n = candidates.cols();
  const index_t nodes = check_link_shapes(where, candidates, retrive_index, next_token, next_sibling, accept_index.cols());
  specdec::detail::check_view(where, "uniform_samples", uniform_samples, 0);
  specdec::detail::check_view(where, "uniform_samples_for_final_sampling", uniform_final, 0);
  SPECDEC_EXPECTS(uniform_samples.rows() == bs && uniform_samples.cols() >= n, where, "uniform_samples is ",
                  uniform_samples.rows(), " x ", uniform_samples.cols(), "; expected ", bs, " x ", n, " (a coin per node)");
  SPECDEC_EXPECTS(uniform_final.rows() == bs, where, "uniform_samples_for_final_sampling has ", uniform_final.rows(),
                  " entries; expected ", bs);
  sampling::detail::check_input_rows(where, "target_probs", target_probs);
  SPECDEC_EXPECTS(target_probs.rows() == nodes, where, "target_probs has ", target_probs.rows(), " rows; expected bs * N = ", nodes);
  specdec::detail::check_vocabulary(where, "V", target_probs.cols());
  using specdec::detail::extent_of;
  check_sglang_outputs(where, bs, nodes, predicts, accept_index, accept_token_num,
                               {extent_of(where, "candidates", candidates), extent_of(where, "retrive_index", retrive_index),
                                extent_of(where, "next_token", next_token), extent_of(where, "next_sibling", next_sibling),
                                extent_of(where, "uniform_samples", uniform_samples),
                                extent_of(where, "uniform_samples_for_final_sampling", uniform_final),
                                extent_of(where, "target_probs", target_probs)});
  const float acc = std::max(threshold_acc, 1e-9f);
  SPECDEC_EXPECTS(threshold_single >= 0.0f && std::isfinite(threshold_single), where, "threshold_single = ", threshold_single,
                  "; expected a finite value >= 0");
  SPECDEC_EXPECTS(acc > 0.0f && std::isfinite(acc), where, "threshold_acc = ", threshold_acc, "; expected a finite value");
  sglang_coin_job<typename B::memory_space, T> job{
      {{target_probs, {}, empty_residual::last_token, n}, threshold_single, acc, {target_probs}},
      candidates, retrive_index, next_token, next_sibling, uniform_samples, uniform_final, predicts, accept_index,
      accept_token_num, where, {}};
  const char* names[] = {"candidates", "retrive_next_token", "retrive_next_sibling", "retrive_index", "uniform_samples",
                         "uniform_samples_for_final_sampling", "target_probs"};
  for (std::size_t k = 0; k < std::size(names); ++k) job.names[k] = names[k];
  for (std::size_t k = std::size(names); k < std::size(job.names); ++k) job.names[k] = "";
  b.run_teams(bs, job);
}

}  // namespace detail

/// SGLang's `tree_speculative_sampling_target_only` on a backend, every buffer in its memory
/// (`B::memory_space`): sgl-kernel's signature, one team per request (on CUDA one block each, one
/// launch, nothing downloaded). Per request, the tree given by first-child / next-sibling links is
/// verified against the target alone with SGLang's coin rule (verify_coin_tree: one coin per level,
/// `threshold_single` / `threshold_acc`; 1 / 1 is lossless sampling), at most `num_spec_step - 1`
/// drafts accepted, num_spec_step = `accept_index.cols()`.
/// \param candidates, retrive_index, next_token, next_sibling int64 `[bs x N]` (build_tree's, global
///   retrive_index). \param uniform_samples float `[bs x >= N]`: the coin at node i is entry i, in
///   [0, 1). \param uniform_final float `[bs]`: the final draw's uniform, in [0, 1).
/// \param target_probs float `[bs * N x V]`: request b's node i reads row `b * N + i`.
/// \param predicts int32 `[bs * N]`: the emitted token written at the `retrive_index` slot of each node
///   on the accepted path (the final token at the last); the other entries keep what the caller put
///   there (-1 in SGLang). \param accept_index int32 `[bs x num_spec_step]`: the path's slots, root
///   first, then -1. \param accept_token_num int32 `[bs]`: drafts accepted.
/// \param threshold_acc clamped to >= 1e-9, as SGLang's launcher does.
/// \throws invalid_argument on shapes and thresholds (before any work) and, from the team that finds
///   it, on a candidate outside [0, V), a link outside [-1, N), a node linked twice or unreachable from
///   the root, a parent numbered after its child (SGLang numbers parents first), a retrive_index slot
///   outside request r's own slots [r N, (r + 1) N) (build_tree's numbering; another request's slot
///   would be written by two teams at once), a uniform outside [0, 1), a probability read outside
///   [0, 1] and a final row that is not a distribution (verify_coin_tree's checks). On CUDA with deferred faults those come
///   from `check_faults()`; outputs are then unspecified.
template <team_backend B>
void tree_speculative_sampling_target_only(B& b, matrix_view<const std::int64_t, typename B::memory_space> candidates,
                                           matrix_view<const std::int64_t, typename B::memory_space> retrive_index,
                                           matrix_view<const std::int64_t, typename B::memory_space> next_token,
                                           matrix_view<const std::int64_t, typename B::memory_space> next_sibling,
                                           matrix_view<const float, typename B::memory_space> uniform_samples,
                                           vector_view<const float, typename B::memory_space> uniform_final,
                                           matrix_view<const float, typename B::memory_space> target_probs,
                                           vector_view<std::int32_t, typename B::memory_space> predicts,
                                           matrix_view<std::int32_t, typename B::memory_space> accept_index,
                                           vector_view<std::int32_t, typename B::memory_space> accept_token_num,
                                           float threshold_single, float threshold_acc) {
  detail::tree_speculative_sampling_target_only_rows(b, candidates, retrive_index, next_token, next_sibling, uniform_samples,
                                                     uniform_final, target_probs, predicts, accept_index, accept_token_num,
                                                     threshold_single, threshold_acc);
}

/// tree_speculative_sampling_target_only over bfloat16 / float16 target rows (an engine's bf16 / fp16
/// softmax), read as they are: each entry widened where the walk reads it, so the tokens are those of
/// the float rows holding the same values, bit for bit. A final row's sum may differ from 1 by 1e-4
/// plus what rounding to T moves it by (core/half.hpp's rounding_tolerance). \throws invalid_argument as
/// the float form.
template <team_backend B, class T>
  requires is_half_v<T>
void tree_speculative_sampling_target_only(B& b, matrix_view<const std::int64_t, typename B::memory_space> candidates,
                                           matrix_view<const std::int64_t, typename B::memory_space> retrive_index,
                                           matrix_view<const std::int64_t, typename B::memory_space> next_token,
                                           matrix_view<const std::int64_t, typename B::memory_space> next_sibling,
                                           matrix_view<const float, typename B::memory_space> uniform_samples,
                                           vector_view<const float, typename B::memory_space> uniform_final,
                                           matrix_view<const T, typename B::memory_space> target_probs,
                                           vector_view<std::int32_t, typename B::memory_space> predicts,
                                           matrix_view<std::int32_t, typename B::memory_space> accept_index,
                                           vector_view<std::int32_t, typename B::memory_space> accept_token_num,
                                           float threshold_single, float threshold_acc) {
  detail::tree_speculative_sampling_target_only_rows(b, candidates, retrive_index, next_token, next_sibling, uniform_samples,
                                                     uniform_final, target_probs, predicts, accept_index, accept_token_num,
                                                     threshold_single, threshold_acc);
}

namespace detail {
/// The host form's body for target rows of element type T.
template <team_backend B, class T>
greedy_verification tree_speculative_sampling_target_only_host(B& b, matrix_view<const std::int64_t> candidates,
                                                          matrix_view<const std::int64_t> retrive_index,
                                                          matrix_view<const std::int64_t> next_token,
                                                          matrix_view<const std::int64_t> next_sibling,
                                                          matrix_view<const float> uniform_samples,
                                                          std::span<const float> uniform_final,
                                                          matrix_view<const T> target_probs, index_t num_spec_step,
                                                          float threshold_single, float threshold_acc) {
  constexpr const char* where = "specdec::sglang::tree_speculative_sampling_target_only";
  const index_t bs = candidates.rows();
  const index_t nodes = check_link_shapes(where, candidates, retrive_index, next_token, next_sibling, num_spec_step);
  greedy_verification out{std::vector<std::int32_t>(static_cast<std::size_t>(nodes), -1),
                          std::vector<std::int32_t>(specdec::detail::checked_count(where, {bs, num_spec_step},
                                                                                   "accept_index [bs x num_spec_step]"),
                                                    -1),
                          std::vector<std::int32_t>(static_cast<std::size_t>(bs), 0)};
  tree_speculative_sampling_target_only_rows(
      b, candidates, retrive_index, next_token, next_sibling, uniform_samples,
      vector_view<const float>(uniform_final.data(), static_cast<index_t>(uniform_final.size())), target_probs,
      vector_view<std::int32_t>(out.predicts.data(), nodes), matrix_view<std::int32_t>(out.accept_index.data(), bs, num_spec_step),
      vector_view<std::int32_t>(out.accept_token_num.data(), bs), threshold_single, threshold_acc);
  return out;
}

}  // namespace detail

/// tree_speculative_sampling_target_only with every array on the host, on a backend whose memory is the
/// host (specdec::eigen, specdec::thrust<cpp / omp>): the outputs returned in SGLang's layout
/// (greedy_verification: predicts -1 where nothing was emitted). The same job as the backend form.
/// \param num_spec_step the width of accept_index (most drafts accepted + 1).
/// \throws invalid_argument as the backend form.
template <team_backend B>
  requires std::same_as<typename B::memory_space, host_space>
greedy_verification tree_speculative_sampling_target_only(B& b, matrix_view<const std::int64_t> candidates,
                                                          matrix_view<const std::int64_t> retrive_index,
                                                          matrix_view<const std::int64_t> next_token,
                                                          matrix_view<const std::int64_t> next_sibling,
                                                          matrix_view<const float> uniform_samples,
                                                          std::span<const float> uniform_final,
                                                          matrix_view<const float> target_probs, index_t num_spec_step,
                                                          float threshold_single, float threshold_acc) {
  return detail::tree_speculative_sampling_target_only_host(b, candidates, retrive_index, next_token, next_sibling, uniform_samples,
                                                            uniform_final, target_probs, num_spec_step, threshold_single,
                                                            threshold_acc);
}

/// The host form over bfloat16 / float16 target rows, read as they are (the float rows' tokens; the
/// final row's sum tolerance widened as the backend form's). \throws invalid_argument as the backend form.
template <team_backend B, class T>
  requires std::same_as<typename B::memory_space, host_space> && is_half_v<T>
greedy_verification tree_speculative_sampling_target_only(B& b, matrix_view<const std::int64_t> candidates,
                                                          matrix_view<const std::int64_t> retrive_index,
                                                          matrix_view<const std::int64_t> next_token,
                                                          matrix_view<const std::int64_t> next_sibling,
                                                          matrix_view<const float> uniform_samples,
                                                          std::span<const float> uniform_final,
                                                          matrix_view<const T> target_probs, index_t num_spec_step,
                                                          float threshold_single, float threshold_acc) {
  return detail::tree_speculative_sampling_target_only_host(b, candidates, retrive_index, next_token, next_sibling, uniform_samples,
                                                            uniform_final, target_probs, num_spec_step, threshold_single,
                                                            threshold_acc);
}

}  // namespace specdec::sglang
