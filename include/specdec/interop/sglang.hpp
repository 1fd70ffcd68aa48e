// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief SGLang's greedy tree verification `verify_tree_greedy` over the buffers of
/// `build_tree_kernel_efficient` (sglang_tree.hpp, included: this header gives SGLang's whole EAGLE
/// tree interface): on the host, and with SGLang's kernel signature on any team backend, every buffer in
/// its memory. The sampled verifier is in sglang_sampling.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <span>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/backend/detail/checks.hpp>
#include <specdec/backend/detail/team.hpp>
#include <specdec/config.hpp>
#include <specdec/core/checked.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>
#include <specdec/core/view_checks.hpp>
#include <specdec/interop/detail/faults.hpp>
#include <specdec/interop/sglang_tree.hpp>

namespace specdec::sglang {

/// Result of verify_tree_greedy (host, int32 / int64 as SGLang's tensors).
struct greedy_verification {
  std::vector<std::int32_t> predicts = {};          ///< `[bs * N]`: accepted token at each accepted node, the bonus at the last, -1 elsewhere
  std::vector<std::int32_t> accept_index = {};      ///< `[bs x num_spec_step]`: retrive_index of accepted nodes (root first), -1 padded
  std::vector<std::int32_t> accept_token_num = {};  ///< `[bs]`: accepted draft tokens (root excluded)
};

namespace detail {

using specdec::detail::make_team_fault;
using specdec::detail::interop_fault;
using specdec::detail::sampling_fault;
using specdec::detail::team_fault;

/// Argument indices of sglang_greedy_job's fault names.
enum sglang_greedy_arg : int { arg_retrive_index, arg_target_predict };

/// SGLang's greedy walk, one request per team (backend/detail/team.hpp): every thread follows the same
/// links (the same reads give the same decisions), rank 0 writes. The nodes on the accepted path are
/// marked in the team's scratch (N bytes) to report links that cycle. Outputs: `predicts` at the
/// accepted nodes' global slots only (SGLang's), `accept_index` row whole (-1 padded),
/// `accept_token_num`.
template <class Space>
struct sglang_greedy_job {
  matrix_view<const std::int64_t, Space> candidates;
  matrix_view<const std::int64_t, Space> retrive_index;
  matrix_view<const std::int64_t, Space> next_token;
  matrix_view<const std::int64_t, Space> next_sibling;
  vector_view<const std::int64_t, Space> target_predict;  // [bs * N]
  vector_view<std::int32_t, Space> predicts;              // [bs * N]
  matrix_view<std::int32_t, Space> accept_index;          // [bs x num_spec_step]
  vector_view<std::int32_t, Space> accept_token_num;      // [bs]
  const char* where = "";
  const char* names[specdec::detail::team_job_names] = {};
  static void describe(const char* where, const char* name, const specdec::detail::team_fault& f) {
    specdec::detail::describe_interop_fault(where, name, f);
  }

  std::size_t scratch_bytes() const { return static_cast<std::size_t>(candidates.cols()); }

  template <class Team>
  SPECDEC_HOST_DEVICE team_fault operator()(Team& team, index_t b, std::byte* scratch) const {
    const index_t n = candidates.cols(), steps = accept_index.cols();
    auto* on_path = reinterpret_cast<unsigned char*>(scratch);
    team.sync();  // earlier readers of the scratch are done
    if (team.rank() == 0) {
      for (index_t i = 0; i < n; ++i) on_path[i] = 0;
      on_path[0] = 1;
    }
    team.sync();
    // A request writes `predicts` at its own slots only ([b N, (b + 1) N), as build_tree numbers them):
    // a slot of another request would be written by two teams at once.
    const std::int64_t own = b * n;
    std::int64_t last_global = retrive_index(b, 0);
    if (last_global < own || last_global >= own + n)
      return make_team_fault(interop_fault::link_index, arg_retrive_index, b, last_global, 0.0, n);
    if (team.rank() == 0) {
      accept_index(b, 0) = static_cast<std::int32_t>(last_global);
      for (index_t s = 1; s < steps; ++s) accept_index(b, s) = -1;
    }
    index_t last = 0;
    std::int32_t accepted = 0;
    for (index_t step = 1; step < steps; ++step) {
      const std::int64_t want = target_predict(last_global);
      index_t match = -1;
      index_t hops = 0;  // a sibling list visits each node once; more means the links cycle
      for (std::int64_t c = next_token(b, last); c != -1; c = next_sibling(b, c)) {
        if (c < 0 || c >= n) return make_team_fault(interop_fault::link_node, 0, b, c, 0.0, n);
        if (++hops > n) return make_team_fault(interop_fault::sibling_cycle, 0, b, last, 0.0);
        if (candidates(b, c) == want) {
          match = c;
          break;
        }
      }
      if (match < 0) break;
      // A path through first-child links visits each node once; back at one, the links cycle.
      if (on_path[match]) return make_team_fault(interop_fault::path_cycle, 0, b, last, static_cast<double>(match));
      if (want < 0 || want > INT32_MAX) return make_team_fault(interop_fault::predicted_token, arg_target_predict, last_global, want, 0.0);
      const std::int64_t match_global = retrive_index(b, match);
      if (match_global < own || match_global >= own + n)
        return make_team_fault(interop_fault::link_index, arg_retrive_index, b, match_global, static_cast<double>(match), n);
      team.sync();  // every thread has read on_path[match]
      if (team.rank() == 0) {
        on_path[match] = 1;
        predicts(last_global) = static_cast<std::int32_t>(want);
        accept_index(b, step) = static_cast<std::int32_t>(match_global);
      }
      team.sync();
      last = match;
      last_global = match_global;
      ++accepted;
    }
    const std::int64_t bonus = target_predict(last_global);
    if (bonus < 0 || bonus > INT32_MAX) return make_team_fault(interop_fault::predicted_token, arg_target_predict, last_global, bonus, 0.0);
    if (team.rank() == 0) {
      accept_token_num(b) = accepted;
      predicts(last_global) = static_cast<std::int32_t>(bonus);
    }
    return {};
  }
};

/// The shape checks of SGLang's link-encoded trees (both verifiers, both forms): candidates and the
/// three link matrices `[bs x N]`, N >= 1 with a request, `bs * N` within int32 (accept_index holds
/// slots), num_spec_step >= 1. Returns bs * N.
template <class Space>
index_t check_link_shapes(const char* where, const matrix_view<const std::int64_t, Space>& candidates,
                          const matrix_view<const std::int64_t, Space>& retrive_index,
                          const matrix_view<const std::int64_t, Space>& next_token,
                          const matrix_view<const std::int64_t, Space>& next_sibling, index_t num_spec_step) {
  const index_t bs = candidates.rows(), n = candidates.cols();
  specdec::detail::check_view(where, "candidates", candidates, 0);
  specdec::detail::check_view(where, "retrive_index", retrive_index, 0);
  specdec::detail::check_view(where, "next_token", next_token, 0);
  specdec::detail::check_view(where, "next_sibling", next_sibling, 0);
  SPECDEC_EXPECTS(bs == 0 || n >= 1, where, "candidates is ", bs, " x ", n, "; expected at least the root per request");
  for (const auto* m : {&retrive_index, &next_token, &next_sibling})
    SPECDEC_EXPECTS(m->rows() == bs && m->cols() == n, where, "a link matrix is ", m->rows(), " x ", m->cols(),
                    "; expected ", bs, " x ", n, " like candidates");
  const index_t nodes = specdec::detail::checked_mul(where, bs, n, "bs * N");
  SPECDEC_EXPECTS(nodes <= std::numeric_limits<std::int32_t>::max(), where, "bs * N = ", nodes,
                  "; expected at most 2^31 - 1 (accept_index is int32)");
  SPECDEC_EXPECTS(num_spec_step >= 1, where, "num_spec_step = ", num_spec_step, "; expected >= 1");
  return nodes;
}

/// The checks of the outputs of a verifier's backend form: predicts `[bs * N]`, accept_index
/// `[bs x num_spec_step]`, accept_token_num `[bs]`, each writable once per entry, apart from each
/// other and from the inputs.
template <class Space>
void check_sglang_outputs(const char* where, index_t bs, index_t nodes, const vector_view<std::int32_t, Space>& predicts,
                          const matrix_view<std::int32_t, Space>& accept_index,
                          const vector_view<std::int32_t, Space>& accept_token_num,
                          std::initializer_list<specdec::detail::view_extent> inputs) {
  specdec::detail::check_view(where, "predicts", predicts, specdec::detail::indexed_output);
  specdec::detail::check_view(where, "accept_index", accept_index, specdec::detail::indexed_output);
  specdec::detail::check_view(where, "accept_token_num", accept_token_num, specdec::detail::indexed_output);
  SPECDEC_EXPECTS(predicts.rows() == nodes, where, "predicts has ", predicts.rows(), " entries; expected bs * N = ", nodes);
  SPECDEC_EXPECTS(accept_index.rows() == bs, where, "accept_index has ", accept_index.rows(), " rows; expected bs = ", bs);
  SPECDEC_EXPECTS(accept_token_num.rows() == bs, where, "accept_token_num has ", accept_token_num.rows(),
                  " entries; expected bs = ", bs);
  using specdec::detail::extent_of;
  const specdec::detail::view_extent outputs[] = {extent_of(where, "predicts", predicts), extent_of(where, "accept_index", accept_index),
                                                  extent_of(where, "accept_token_num", accept_token_num)};
  for (std::size_t i = 0; i < std::size(outputs); ++i) {
    for (std::size_t j = i + 1; j < std::size(outputs); ++j) specdec::detail::check_disjoint(where, outputs[i], outputs[j]);
    for (const specdec::detail::view_extent& input : inputs) specdec::detail::check_disjoint(where, outputs[i], input);
  }
}

/// verify_tree_greedy's shape checks (both forms); returns bs * N.
template <class Space>
index_t check_greedy_shapes(const char* where, const matrix_view<const std::int64_t, Space>& candidates,
                            const matrix_view<const std::int64_t, Space>& retrive_index,
                            const matrix_view<const std::int64_t, Space>& next_token,
                            const matrix_view<const std::int64_t, Space>& next_sibling, index_t predictions,
                            index_t num_spec_step) {
  const index_t nodes = check_link_shapes(where, candidates, retrive_index, next_token, next_sibling, num_spec_step);
  SPECDEC_EXPECTS(predictions == nodes, where, "target_predict has ", predictions, " entries; expected bs * N = ", nodes);
  return nodes;
}

template <class Job>
void name_greedy_arguments(Job& job, const char* where) {
  specdec::detail::name_job(job, where, {{arg_retrive_index, "retrive_index"}, {arg_target_predict, "target_predict"}});
}

}  // namespace detail

/// SGLang's `verify_tree_greedy`: from the root, follow `retrive_next_token` and scan the siblings for
/// the candidate equal to the target's argmax at the last accepted node; accept it and descend; stop
/// when none matches or after num_spec_step - 1 acceptances; the bonus token is the target's argmax
/// at the last accepted node.
/// \param candidates `[bs x N]` token ids; \param retrive_index, next_token, next_sibling `[bs x N]`
/// (build_tree's, global scope); \param target_predict `[bs * N]` target argmax per node, indexed by
/// retrive_index; request r's slots must lie in its own block [r N, (r + 1) N) (build_tree's numbering:
/// another request's slot would be written by two teams at once).
/// \throws invalid_argument on shapes that do not match, views null with a shape, links
/// out of range or links that cycle (a sibling list, or a path that comes back to a node it passed),
/// an emitted target_predict outside [0, 2^31 - 1] (the outputs are int32), `bs * N` beyond int32,
/// or `[bs x num_spec_step]` beyond specdec::max_elements.
inline greedy_verification verify_tree_greedy(matrix_view<const std::int64_t> candidates,
                                              matrix_view<const std::int64_t> retrive_index,
                                              matrix_view<const std::int64_t> next_token,
                                              matrix_view<const std::int64_t> next_sibling,
                                              std::span<const std::int64_t> target_predict, index_t num_spec_step) {
  constexpr const char* where = "specdec::sglang::verify_tree_greedy";
  const index_t bs = candidates.rows();
  const index_t nodes = detail::check_greedy_shapes(where, candidates, retrive_index, next_token, next_sibling,
                                                    static_cast<index_t>(target_predict.size()), num_spec_step);
  greedy_verification out{std::vector<std::int32_t>(static_cast<std::size_t>(nodes), -1),
                          std::vector<std::int32_t>(specdec::detail::checked_count(where, {bs, num_spec_step},
                                                                                   "accept_index [bs x num_spec_step]"),
                                                    -1),
                          std::vector<std::int32_t>(static_cast<std::size_t>(bs), 0)};
  detail::sglang_greedy_job<host_space> job{candidates,
                                            retrive_index,
                                            next_token,
                                            next_sibling,
                                            vector_view<const std::int64_t>(target_predict.data(), nodes),
                                            vector_view<std::int32_t>(out.predicts.data(), nodes),
                                            matrix_view<std::int32_t>(out.accept_index.data(), bs, num_spec_step),
                                            vector_view<std::int32_t>(out.accept_token_num.data(), bs)};
  detail::name_greedy_arguments(job, where);
  specdec::detail::run_serial(job, bs);
  return out;
}

/// verify_tree_greedy on a backend, every buffer in its memory (`B::memory_space`): SGLang's kernel
/// signature, one team per request (on CUDA one block per request, one launch, no host round trip but
/// the fault check). Writes `predicts` (`[bs * N]`, int32) at the accepted nodes' slots only (the others
/// keep what the caller put there, -1 in SGLang), `accept_index` (`[bs x num_spec_step]`, int32, the
/// accepted nodes' retrive_index then -1) and `accept_token_num` (`[bs]`, int32) whole; num_spec_step is
/// `accept_index.cols()`. Inputs as the host form (int64); the decisions and outputs are the host form's.
/// \throws invalid_argument on shapes, as the host form; the data faults (links out of range or
///   cycling, an emitted prediction outside int32) from the team that finds them (on CUDA with deferred
///   faults, from `check_faults()`); outputs are then unspecified.
template <team_backend B>
void verify_tree_greedy(B& b, matrix_view<const std::int64_t, typename B::memory_space> candidates,
                        matrix_view<const std::int64_t, typename B::memory_space> retrive_index,
                        matrix_view<const std::int64_t, typename B::memory_space> next_token,
                        matrix_view<const std::int64_t, typename B::memory_space> next_sibling,
                        vector_view<const std::int64_t, typename B::memory_space> target_predict,
                        vector_view<std::int32_t, typename B::memory_space> predicts,
                        matrix_view<std::int32_t, typename B::memory_space> accept_index,
                        vector_view<std::int32_t, typename B::memory_space> accept_token_num) {
  constexpr const char* where = "specdec::sglang::verify_tree_greedy";
  const index_t bs = candidates.rows();
  const index_t nodes = detail::check_greedy_shapes(where, candidates, retrive_index, next_token, next_sibling,
                                                    target_predict.rows(), accept_index.cols());
  specdec::detail::check_view(where, "target_predict", target_predict, 0);
  using specdec::detail::extent_of;
  detail::check_sglang_outputs(where, bs, nodes, predicts, accept_index, accept_token_num,
                               {extent_of(where, "candidates", candidates), extent_of(where, "retrive_index", retrive_index),
                                extent_of(where, "next_token", next_token), extent_of(where, "next_sibling", next_sibling),
                                extent_of(where, "target_predict", target_predict)});
  detail::sglang_greedy_job<typename B::memory_space> job{candidates, retrive_index, next_token, next_sibling,
                                                          target_predict, predicts, accept_index, accept_token_num};
  detail::name_greedy_arguments(job, where);
  b.run_teams(bs, job);
}

}  // namespace specdec::sglang
