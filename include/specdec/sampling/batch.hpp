// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Batched verification where the batch lives in the backend's memory: greedy and stochastic
/// verification of a whole batch of draft trees (chains included) as one team job, one team per
/// request (backend/detail/team.hpp): on the host a loop over requests, on CUDA one kernel launch with
/// one block per request, reading the trees, rows and uniforms where they are and writing the caller's
/// output buffers there. Nothing is downloaded and, with `defer_faults(true)`, nothing synchronises, so
/// a verification step can be captured in a CUDA graph.
///
/// Decisions are those of the request-based verifiers (greedy.hpp, speculative.hpp), bit for bit:
/// the same sibling order (node-index order), uniforms, acceptance tests and canonical draws. What the
/// batch form does not take: sibling links, per-request greedy flags and temperatures (verify the
/// greedy requests of a mixed batch with verify_greedy, soften logits with `row_softmax` first).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/rng.hpp>
#include <specdec/core/view.hpp>
#include <specdec/core/view_checks.hpp>
#include <specdec/grammar/token_bitmask.hpp>
#include <specdec/sampling/detail/speculative_walk.hpp>
#include <specdec/sampling/detail/tree_walk.hpp>
#include <specdec/sampling/request.hpp>
#include <specdec/sampling/speculative.hpp>

namespace specdec::sampling {

/// A batch of draft trees in memory space `Space`, one row per request, padded to N nodes
/// (SGLang's and TensorRT-LLM's layout: `[batch x N]` draft tokens and parents).
///
/// Request r's node i has token `tokens(r, i)` and parent `parents(r, i)`; node 0 is the root (the
/// committed token, parent -1) and every other node's parent precedes it (0 <= parent < i), as
/// `build_tree` and the tree builders produce. Its target row is `target_rows(r) + i` (default
/// `r * N + i`: the target scored the batch's trees back to back). Children are visited in node-index
/// order. Optional views are empty when unused.
template <class Space = host_space>
struct tree_batch {
  matrix_view<const std::int32_t, Space> tokens = {};   ///< `[batch x N]`, N >= 1
  matrix_view<const std::int32_t, Space> parents = {};  ///< `[batch x N]`, -1 at node 0
  /// `[batch]`: request r uses nodes `[0, node_counts(r))`, 1 <= count <= N (entries past it are not
  /// read). Empty: every request has N nodes.
  vector_view<const std::int32_t, Space> node_counts = {};
  /// `[batch]`: target row of request r's node 0. Empty: `r * N`.
  vector_view<const index_t, Space> target_rows = {};
  /// `[batch x N]`: row of `speculative_rows::draft` node i was drawn from, -1 for a deterministic
  /// node (entry 0 unused). Empty: every node is deterministic (top-k trees, n-gram drafts).
  matrix_view<const index_t, Space> draft_rows = {};
  /// `[batch]`: most draft tokens request r may accept, -1 for no cap (SGLang's num_spec_steps - 1).
  vector_view<const std::int32_t, Space> max_accepted = {};
  /// `[batch]`: a bonus token sampled by the caller, emitted when the walk ends without a rejection;
  /// -1: none (the final token is drawn from the last node's row).
  vector_view<const std::int32_t, Space> bonus_tokens = {};
  /// `[batch]`: row of `speculative_rows::exponential_noise` (final_draw::exponential_race).
  vector_view<const index_t, Space> noise_rows = {};
  /// Randomness of the stochastic verifier, one of:
  /// - `uniforms` `[batch x U]`: request r's uniforms in consumption order (speculative.hpp), each in the
  ///   options' range; a request needing more than U is an error;
  /// - `uniform_streams` `[batch]`: request r reads `uniform_streams(r).uniform_double(offset + i)` for
  ///   its uniform i, offset = `uniform_offsets(r)` (empty: 0), as `uniform_stream::philox`. The next
  ///   step's offset is the old one plus `verify_outputs::uniforms_consumed`.
  matrix_view<const double, Space> uniforms = {};
  vector_view<const philox_stream, Space> uniform_streams = {};
  vector_view<const std::uint64_t, Space> uniform_offsets = {};

  index_t size() const noexcept { return tokens.rows(); }
  index_t nodes() const noexcept { return tokens.cols(); }
};

namespace detail {

/// Host-side checks of a batch's shapes (its contents are checked by the team that reads them).
template <class Space>
void check_batch_shapes(const char* where, const tree_batch<Space>& batch) {
  using specdec::detail::check_view;
  const index_t n = batch.size();
  check_view(where, "batch.tokens", batch.tokens, specdec::detail::contiguous_rows | specdec::detail::distinct_rows);
  check_view(where, "batch.parents", batch.parents, specdec::detail::contiguous_rows | specdec::detail::distinct_rows);
  SPECDEC_EXPECTS(batch.nodes() >= 1 && batch.nodes() <= INT32_MAX, where, "batch.tokens has ", batch.nodes(),
                  " columns; expected 1 <= N <= 2^31 - 1 nodes per request");
  SPECDEC_EXPECTS(batch.parents.rows() == n && batch.parents.cols() == batch.nodes(), where, "batch.parents is ",
                  batch.parents.rows(), " x ", batch.parents.cols(), "; expected ", n, " x ", batch.nodes(),
                  " like batch.tokens");
  const auto per_request = [&](const auto& v, const char* name) {
    check_view(where, name, v, specdec::detail::nonzero_stride);
    SPECDEC_EXPECTS(v.empty() || v.rows() == n, where, name, " has ", v.rows(), " entries; expected ", n,
                    " (one per request) or none");
  };
  per_request(batch.node_counts, "batch.node_counts");
  per_request(batch.target_rows, "batch.target_rows");
  per_request(batch.max_accepted, "batch.max_accepted");
  per_request(batch.bonus_tokens, "batch.bonus_tokens");
  per_request(batch.noise_rows, "batch.noise_rows");
  per_request(batch.uniform_streams, "batch.uniform_streams");
  per_request(batch.uniform_offsets, "batch.uniform_offsets");
  check_view(where, "batch.draft_rows", batch.draft_rows, specdec::detail::contiguous_rows | specdec::detail::distinct_rows);
  SPECDEC_EXPECTS(batch.draft_rows.empty() || (batch.draft_rows.rows() == n && batch.draft_rows.cols() == batch.nodes()),
                  where, "batch.draft_rows is ", batch.draft_rows.rows(), " x ", batch.draft_rows.cols(), "; expected ",
                  n, " x ", batch.nodes(), " or none");
  check_view(where, "batch.uniforms", batch.uniforms, specdec::detail::contiguous_rows | specdec::detail::distinct_rows);
  SPECDEC_EXPECTS(batch.uniforms.empty() || batch.uniforms.rows() == n, where, "batch.uniforms has ", batch.uniforms.rows(),
                  " rows; expected ", n, " (one per request) or none");
}

/// Every view of a batch with `extra` (the call's other inputs) first: what a call's outputs must
/// stay apart from (a node count or bonus token under an output would change as it is written).
template <class Space>
std::vector<specdec::detail::view_extent> batch_inputs(const char* where, const tree_batch<Space>& b,
                                                       std::initializer_list<specdec::detail::view_extent> extra) {
  using specdec::detail::extent_of;
  std::vector<specdec::detail::view_extent> all(extra);
  all.push_back(extent_of(where, "batch.tokens", b.tokens));
  all.push_back(extent_of(where, "batch.parents", b.parents));
  all.push_back(extent_of(where, "batch.node_counts", b.node_counts));
  all.push_back(extent_of(where, "batch.target_rows", b.target_rows));
  all.push_back(extent_of(where, "batch.draft_rows", b.draft_rows));
  all.push_back(extent_of(where, "batch.max_accepted", b.max_accepted));
  all.push_back(extent_of(where, "batch.bonus_tokens", b.bonus_tokens));
  all.push_back(extent_of(where, "batch.noise_rows", b.noise_rows));
  all.push_back(extent_of(where, "batch.uniforms", b.uniforms));
  all.push_back(extent_of(where, "batch.uniform_streams", b.uniform_streams));
  all.push_back(extent_of(where, "batch.uniform_offsets", b.uniform_offsets));
  return all;
}

template <class Space>
sampling::detail::batch_trees<Space> trees_of(const tree_batch<Space>& b) {
  return {b.tokens, b.parents, b.node_counts, b.target_rows, b.max_accepted, b.bonus_tokens, {}, {}, false};
}
template <class Space>
sampling::detail::batch_outputs<Space> outputs_of(const verify_outputs<Space>& o) {
  return {o.tokens, o.accepted, o.accepted_nodes, o.uniforms_consumed, o.retest_accepted, o.final_distributions, {}, {}};
}
template <class Job>
void name_arguments(Job& job, const char* where, const char* target) {
  specdec::detail::name_job(job, where,
                            {{arg_node_counts, "batch.node_counts"},
                             {arg_parents, "batch.parents"},
                             {arg_tokens, "batch.tokens"},
                             {arg_target, target},
                             {arg_draft_rows, "batch.draft_rows"},
                             {arg_draft, "rows.draft"},
                             {arg_noise_rows, "batch.noise_rows"},
                             {arg_noise, "rows.exponential_noise"},
                             {arg_max_accepted, "batch.max_accepted"},
                             {arg_out_tokens, "outputs.tokens"},
                             {arg_out_nodes, "outputs.accepted_nodes"},
                             {arg_uniforms, "batch.uniforms"},
                             {arg_bonus, "batch.bonus_tokens"},
                             {arg_final, "outputs.final_distributions"}});
}

}  // namespace detail

/// Greedy verification of a batch from the target argmax of every row (SGLang's `verify_tree_greedy`
/// from `target_predict`): per request, the first child in node-index order whose token is its
/// parent's argmax is accepted, repeatedly; the final token is the last node's argmax, or the bonus
/// token when the walk ended at a leaf or the cap. One team per request; consumes no randomness
/// (`batch.uniforms`, `draft_rows`, `noise_rows` are ignored).
/// \param target_argmax backend `[rows]` argmax of every target row (`row_argmax`).
/// \param vocab_size V, the range of tokens and argmaxes.
/// \param outputs backend buffers (verify_outputs): `tokens` `[batch x width]` with width at least each
///   request's deepest path (capped by max_accepted) plus 1; `uniforms_consumed` is 0 and
///   `final_distributions` (`[batch x V]`) zeros.
/// \throws invalid_argument on shapes (before any work) and, from the team that finds it, a malformed
///   tree, a node count, token, row, cap or bonus token out of range, an argmax outside [0, V), an
///   output too narrow. On CUDA with deferred faults the latter come from `check_faults()`.
template <team_backend B>
void verify_greedy(B& b, vector_view<const std::int32_t, typename B::memory_space> target_argmax,
                   const tree_batch<typename B::memory_space>& batch, index_t vocab_size,
                   const verify_outputs<typename B::memory_space>& outputs) {
  constexpr const char* where = "specdec::sampling::verify_greedy";
  specdec::detail::check_vocabulary(where, "vocab_size", vocab_size);
  specdec::detail::check_view(where, "target_argmax", target_argmax, specdec::detail::nonzero_stride);
  detail::check_batch_shapes(where, batch);
  using specdec::detail::extent_of;
  detail::check_output_views(where, outputs, batch.size(), vocab_size, 1,
                             detail::batch_inputs(where, batch, {extent_of(where, "target_argmax", target_argmax)}));
  detail::greedy_batch_job<typename B::memory_space> job{detail::trees_of(batch), detail::outputs_of(outputs), target_argmax,
                                                         vocab_size, where, {}};
  detail::name_arguments(job, where, "target_argmax");
  b.run_teams(batch.size(), job);
}

/// verify_greedy of a batch from the target logits: `row_argmax` of every row into the caller's
/// `target_argmax` (`[rows]`, kept: an engine often needs it), then the walk. Two launches on CUDA.
/// \throws invalid_argument as the argmax form, and as row_argmax (NaN / +inf in a row).
template <team_backend B>
void verify_greedy(B& b, matrix_view<const float, typename B::memory_space> target_logits,
                   const tree_batch<typename B::memory_space>& batch, const verify_outputs<typename B::memory_space>& outputs,
                   vector_view<std::int32_t, typename B::memory_space> target_argmax) {
  constexpr const char* where = "specdec::sampling::verify_greedy";
  // Before the argmax writes anything: the batch and outputs as the argmax form checks them, and
  // target_argmax (written here, read there) apart from every one of them.
  detail::check_batch_shapes(where, batch);
  using specdec::detail::extent_of;
  specdec::detail::check_view(where, "target_argmax", target_argmax, specdec::detail::nonzero_stride);
  const std::vector<specdec::detail::view_extent> inputs =
      detail::batch_inputs(where, batch, {extent_of(where, "target_logits", target_logits)});
  detail::check_output_views(where, outputs, batch.size(), target_logits.cols(), 1,
                             std::span<const specdec::detail::view_extent>(inputs));
  const specdec::detail::view_extent argmax = extent_of(where, "target_argmax", target_argmax);
  for (const specdec::detail::view_extent& input : inputs) specdec::detail::check_disjoint(where, argmax, input);
  for (const specdec::detail::view_extent& out :
       {extent_of(where, "outputs.tokens", outputs.tokens), extent_of(where, "outputs.accepted", outputs.accepted),
        extent_of(where, "outputs.accepted_nodes", outputs.accepted_nodes),
        extent_of(where, "outputs.uniforms_consumed", outputs.uniforms_consumed),
        extent_of(where, "outputs.retest_accepted", outputs.retest_accepted),
        extent_of(where, "outputs.final_distributions", outputs.final_distributions)})
    specdec::detail::check_disjoint(where, argmax, out);
  b.row_argmax(target_logits, target_argmax);
  verify_greedy(b, vector_view<const std::int32_t, typename B::memory_space>(target_argmax), batch, target_logits.cols(),
                outputs);
}

/// verify_greedy of a batch from the target logits under token bitmasks (structured output), reading
/// only the rows the walks visit and writing nothing but the outputs: per request, the first child in
/// node-index order whose token is its parent row's largest *allowed* logit (lowest index on ties) is
/// accepted, repeatedly; the final token is the last visited row's largest allowed logit, or the bonus
/// token after a leaf or the cap (not checked against the mask: the caller sampled it). A visited node
/// whose bitmask row allows nothing (a terminated grammar: fill_tree_bitmasks zeroes the rows of nodes
/// that accepted a stop token) ends the walk there without a final token: `outputs.tokens` holds the
/// accepted tokens, then -1. Exactly the request-based masked verify_greedy (bitmask.hpp) over the
/// same trees, bit for bit, on every backend; one launch on CUDA, nothing synchronised with deferred
/// faults. Consumes no randomness.
///
/// Each visited row is read once, by a pass split between the team's threads: a step reads its few
/// visited rows, not the batch's `[rows x V]` (row_argmax over every row and the argmax form read all of
/// them, which for a 64-node tree and five visited rows is 13x the traffic).
/// \param target_logits backend `[rows x V]`, finite or -inf where read (-inf: a masked entry).
/// \param bitmask backend `[rows x words]` int32, words >= ceil(V / 32), xgrammar's layout
///   (grammar/token_bitmask.hpp), row i constraining target row i; empty: every token allowed (the
///   unconstrained walk, with row_argmax's conventions: an all -inf row gives token 0).
/// \param outputs as the argmax form.
/// \throws invalid_argument on shapes (before any work) and, from the team that finds it, as the argmax
///   form, on NaN / +inf among a visited row's allowed entries, where node 0's bitmask row allows no
///   token, and where a visited row allows tokens but none above -inf (each naming the request and
///   node). On CUDA with deferred faults the latter come from `check_faults()`.
template <team_backend B>
void verify_greedy(B& b, matrix_view<const float, typename B::memory_space> target_logits,
                   matrix_view<const std::int32_t, typename B::memory_space> bitmask,
                   const tree_batch<typename B::memory_space>& batch, const verify_outputs<typename B::memory_space>& outputs) {
  constexpr const char* where = "specdec::sampling::verify_greedy";
  detail::check_input_rows(where, "target_logits", target_logits);
  const index_t vocab = target_logits.cols();
  specdec::detail::check_vocabulary(where, "V", vocab);
  if (!bitmask.empty()) {
    specdec::detail::check_bitmask(where, "bitmask", bitmask, vocab);
    SPECDEC_EXPECTS(bitmask.rows() == target_logits.rows(), where, "bitmask has ", bitmask.rows(),
                    " rows; expected one per target row (", target_logits.rows(), ")");
  }
  detail::check_batch_shapes(where, batch);
  using specdec::detail::extent_of;
  detail::check_output_views(where, outputs, batch.size(), vocab, 1,
                             detail::batch_inputs(where, batch,
                                                  {extent_of(where, "target_logits", target_logits), extent_of(where, "bitmask", bitmask)}));
  detail::visited_greedy_batch_job<typename B::memory_space> job{detail::trees_of(batch), detail::outputs_of(outputs),
                                                                 target_logits, bitmask, where, {}};
  detail::name_arguments(job, where, "target_logits");
  job.names[detail::arg_bitmask] = "bitmask";
  b.run_teams(batch.size(), job);
}

/// verify_greedy of a batch from the target logits, unconstrained, reading only the rows the walks
/// visit: the bitmask form above with every token allowed. The same tokens as the argmax forms.
template <team_backend B>
void verify_greedy(B& b, matrix_view<const float, typename B::memory_space> target_logits,
                   const tree_batch<typename B::memory_space>& batch, const verify_outputs<typename B::memory_space>& outputs) {
  verify_greedy(b, target_logits, matrix_view<const std::int32_t, typename B::memory_space>{}, batch, outputs);
}

/// Stochastic verification of a batch of trees (chains included): the walk of speculative.hpp per
/// request, one team per request, over target probabilities (`rows.target` `[rows x V]`, after
/// temperature / top-k / top-p), deterministic drafts or draft rows (`rows.draft`, indexed by
/// `batch.draft_rows`), every option of `speculative_options` (final_draw::exponential_race reads
/// `rows.exponential_noise` at `batch.noise_rows`; `keep_final_distribution` is replaced by
/// `outputs.final_distributions` being given). Tokens, accepted nodes, uniforms consumed and re-test
/// counts are bit-identical to verify_speculative's over the same requests.
///
/// Each request's team reads one target entry per tested child and makes a pass over a row only where
/// the request-based walk reads a whole row (a residual after a rejection, the final draw).
/// \throws invalid_argument on shapes and options (before any work) and, from the team that finds it,
///   as verify_speculative: a malformed tree, a node count, row, token, cap or bonus token out of
///   range, a probability entry outside [0, 1], a target or draft row that is not a distribution where
///   it is read whole, a uniform outside the range or too few supplied, re-tests on a tree that
///   branches, bad noise entries, an output too narrow. On CUDA with deferred faults those come from
///   `check_faults()`.
///
/// The rows may be bfloat16 / float16 (`speculative_rows<Space, T, D>`: target T, draft D, each float,
/// bf16 or fp16), read where they lie and widened where read: the float rows' results, bit for bit; a
/// row read whole may miss 1 by its rounding too (core/half.hpp's rounding_tolerance).
template <team_backend B, class T = float, class D = T>
  requires(detail::probability_element<T> && detail::probability_element<D>)
void verify_speculative(B& b, const speculative_rows<typename B::memory_space, T, D>& rows,
                        const tree_batch<typename B::memory_space>& batch, const speculative_options& options,
                        const verify_outputs<typename B::memory_space>& outputs) {
  using space = typename B::memory_space;
  constexpr const char* where = "specdec::sampling::verify_speculative";
  detail::check_options(where, options);
  detail::check_input_rows(where, "rows.target", rows.target);
  detail::check_input_rows(where, "rows.draft", rows.draft);
  // The batched walk reads probabilities, so a grammar's mask belongs in them: apply_token_bitmask on
  // the logits, then row_softmax. A mask given here is refused rather than silently unused.
  SPECDEC_EXPECTS(rows.target_bitmask.empty(), where, "rows.target_bitmask is [", rows.target_bitmask.rows(), " x ",
                  rows.target_bitmask.cols(), "]; the batched form takes no bitmask (mask the logits with "
                  "apply_token_bitmask before row_softmax)");
  detail::check_input_rows(where, "rows.exponential_noise", rows.exponential_noise);
  const index_t vocab = rows.target.cols();
  specdec::detail::check_vocabulary(where, "V", vocab);
  SPECDEC_EXPECTS(rows.draft.size() == 0 || rows.draft.cols() == vocab, where, "rows.draft has ", rows.draft.cols(),
                  " columns; rows.target has ", vocab);
  detail::check_batch_shapes(where, batch);
  const bool race = options.draw == final_draw::exponential_race;
  if (race) {
    SPECDEC_EXPECTS(rows.exponential_noise.cols() == vocab, where, "exponential_race needs rows.exponential_noise with V = ",
                    vocab, " columns; got ", rows.exponential_noise.cols());
    SPECDEC_EXPECTS(batch.noise_rows.rows() == batch.size(), where, "exponential_race needs batch.noise_rows, one per request");
  }
  SPECDEC_EXPECTS(batch.uniforms.empty() != batch.uniform_streams.empty() || batch.size() == 0, where,
                  "batch.uniforms has ", batch.uniforms.rows(), " rows and batch.uniform_streams ", batch.uniform_streams.rows(),
                  " entries; expected exactly one of them");
  using specdec::detail::extent_of;
  detail::check_output_views(where, outputs, batch.size(), vocab, 1,
                             detail::batch_inputs(where, batch,
                                                  {extent_of(where, "rows.target", rows.target), extent_of(where, "rows.draft", rows.draft),
                                                   extent_of(where, "rows.exponential_noise", rows.exponential_noise)}));
  detail::speculative_batch_job<space, detail::probability_matrix<space, T>, D> job{{rows.target, rows.draft, options.fallback, batch.nodes()},
                                           detail::trees_of(batch),
                                           detail::outputs_of(outputs),
                                           batch.draft_rows,
                                           rows.exponential_noise,
                                           batch.noise_rows,
                                           batch.uniforms,
                                           batch.uniform_streams,
                                           batch.uniform_offsets,
                                           options.test,
                                           options.range,
                                           race,
                                           options.lenience,
                                           options.flashinfer_retest,
                                           where,
                                           {},
                                           {rows.target}};
  detail::name_arguments(job, where, "rows.target");
  b.run_teams(batch.size(), job);
}

}  // namespace specdec::sampling
