// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Logit bias and vLLM's penalties on a batch of draft trees whose rows live in the backend's
/// memory (a GPU engine's batch): apply_tree_penalties (penalties.hpp) for every request at once, as one
/// team job (one CUDA launch, nothing synchronised with deferred faults), bit for bit.
///
/// The committed histories travel in a compressed layout, never as `[batch x V]` counts: per request the
/// sorted distinct tokens its penalties can touch (prompt or output), each with its output count and
/// whether the prompt holds it (`penalty_history::touched()`, packed by `penalty_batch_host`); each
/// node adds the draft tokens on its path on top. A node's row is read and written only at those tokens,
/// its path's tokens and its bias tokens (and, with a negative frequency or presence, at its zeros:
/// vLLM's dense subtraction turns -0.0 into +0.0 there).
///
/// llama.cpp's convention (a sliding window over the whole context) is host-only: llama.cpp samples on
/// the host (penalties.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/backend/detail/math.hpp>
#include <specdec/backend/detail/team.hpp>
#include <specdec/config.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>
#include <specdec/core/view_checks.hpp>
#include <specdec/sampling/batch.hpp>
#include <specdec/sampling/detail/faults.hpp>
#include <specdec/sampling/penalties.hpp>

namespace specdec::sampling {

/// A batch's penalty inputs in memory space `Space`, vLLM's convention. Request r's committed entries
/// are `[offsets(r), offsets(r + 1))` of `tokens` (sorted ascending, distinct, in [0, V)),
/// `output_counts` (>= 0) and `in_prompt` (0 / 1); its bias entries `[bias_offsets(r),
/// bias_offsets(r + 1))` of `bias_tokens` / `bias_values` (added in that order; empty views: no bias).
/// Its parameters are `repetition(r)` (finite, > 0; 1: none), `frequency(r)`, `presence(r)` (finite;
/// 0: none). `penalty_batch_host` builds every member from penalty_history objects.
template <class Space = host_space>
struct penalty_batch {
  vector_view<const std::int64_t, Space> offsets = {};  ///< `[batch + 1]`, offsets(0) = 0, non-decreasing
  vector_view<const std::int32_t, Space> tokens = {};
  vector_view<const std::int32_t, Space> output_counts = {};
  vector_view<const std::int32_t, Space> in_prompt = {};
  vector_view<const float, Space> repetition = {};  ///< `[batch]`
  vector_view<const float, Space> frequency = {};   ///< `[batch]`
  vector_view<const float, Space> presence = {};    ///< `[batch]`
  vector_view<const std::int64_t, Space> bias_offsets = {};  ///< `[batch + 1]` or empty
  vector_view<const std::int32_t, Space> bias_tokens = {};
  vector_view<const float, Space> bias_values = {};
  repetition_rule rule = repetition_rule::divide;  ///< the batch's (vLLM's CUDA kernel divides)
};

/// A penalty_batch's contents on the host, built request by request: upload each vector to the backend
/// and point a `penalty_batch<Space>` at it (`view(...)` does that for host memory).
struct penalty_batch_host {
  std::vector<std::int64_t> offsets = {0};
  std::vector<std::int32_t> tokens, output_counts, in_prompt;
  std::vector<float> repetition, frequency, presence;
  std::vector<std::int64_t> bias_offsets = {0};
  std::vector<std::int32_t> bias_tokens;
  std::vector<float> bias_values;

  /// Appends request `size()`: its history's touched tokens, its parameters (their `rule` must be the
  /// batch's, which `view` takes from the first request) and its bias.
  /// \throws invalid_argument on a history or params of llama.cpp's convention.
  void add(const penalty_history& history, const penalty_params& params, std::span<const logit_bias> bias = {}) {
    constexpr const char* where = "specdec::sampling::penalty_batch_host::add";
    SPECDEC_EXPECTS(history.convention() == penalty_convention::vllm && params.convention == penalty_convention::vllm, where,
                    "request ", repetition.size(), " uses llama.cpp's convention; the batched form takes vLLM's "
                    "(llama.cpp's penalties run on the host: apply_tree_penalties)");
    SPECDEC_EXPECTS(rules_.empty() || params.rule == rules_.front(), where, "request ", repetition.size(),
                    " has another repetition_rule than request 0; expected one rule per batch");
    for (const penalty_history::entry& e : history.touched()) {
      tokens.push_back(e.token);
      output_counts.push_back(e.output_count);
      in_prompt.push_back(e.in_prompt ? 1 : 0);
    }
    offsets.push_back(static_cast<std::int64_t>(tokens.size()));
    repetition.push_back(params.repetition);
    frequency.push_back(params.frequency);
    presence.push_back(params.presence);
    rules_.push_back(params.rule);
    for (const logit_bias& b : bias) {
      bias_tokens.push_back(b.token);
      bias_values.push_back(b.bias);
    }
    bias_offsets.push_back(static_cast<std::int64_t>(bias_tokens.size()));
  }
  std::size_t size() const noexcept { return repetition.size(); }
  /// The batch's rule (request 0's; divide when empty).
  repetition_rule rule() const noexcept { return rules_.empty() ? repetition_rule::divide : rules_.front(); }
  /// Views of these vectors (host memory).
  penalty_batch<host_space> view() const {
    return {vec(offsets), vec(tokens), vec(output_counts), vec(in_prompt), vec(repetition), vec(frequency),
            vec(presence), vec(bias_offsets), vec(bias_tokens), vec(bias_values), rule()};
  }

 private:
  template <class T>
  static vector_view<const T> vec(const std::vector<T>& v) {
    return vector_view<const T>(v.data(), static_cast<index_t>(v.size()));
  }
  std::vector<repetition_rule> rules_;
};

namespace detail {

/// Argument indices of the penalty job's fault names.
enum penalty_arg : int {
  parg_offsets,
  parg_tokens,
  parg_counts,
  parg_in_prompt,
  parg_repetition,
  parg_frequency,
  parg_presence,
  parg_bias_offsets,
  parg_bias_tokens,
  parg_bias_values,
  parg_node_counts,
  parg_parents,
  parg_tree_tokens,
  parg_logits,
};

/// The penalty job's source for a penalty_batch over a batch of trees: checks request r's tree, rows,
/// parameters and entries (the team that finds a fault reports it), then describes it.
template <class Space>
struct batch_penalty_source {
  using space = Space;
  batch_trees<Space> trees;
  penalty_batch<Space> pen;

  SPECDEC_HOST_DEVICE index_t width() const noexcept { return trees.tokens.cols(); }
  SPECDEC_HOST_DEVICE static bool finite(float v) noexcept { return v - v == 0.0f; }
  SPECDEC_HOST_DEVICE static bool negative(float v) noexcept { return v < 0.0f || (v == 0.0f && 1.0f / v < 0.0f); }
  SPECDEC_HOST_DEVICE index_t nodes(index_t r) const { return trees.node_counts.empty() ? width() : trees.node_counts(r); }
  SPECDEC_HOST_DEVICE index_t first_row(index_t r) const { return trees.target_rows.empty() ? r * width() : trees.target_rows(r); }

  SPECDEC_HOST_DEVICE specdec::detail::team_fault check(index_t r, const matrix_view<float, Space>& logits) const {
    using specdec::detail::make_team_fault;
    using specdec::detail::sampling_fault;
    using specdec::detail::tree_fault;
    const index_t vocab = logits.cols(), n = nodes(r);
    if (n < 1 || n > width()) return make_team_fault(tree_fault::node_count, parg_node_counts, r, 0, double(n), width());
    const std::int32_t* parent = trees.parents.row(r);
    const std::int32_t* token = trees.tokens.row(r);
    if (parent[0] != -1) return make_team_fault(tree_fault::root_parent, parg_parents, r, 0, parent[0]);
    for (index_t i = 1; i < n; ++i) {
      if (parent[i] < 0 || parent[i] >= i) return make_team_fault(tree_fault::bad_parent, parg_parents, r, i, parent[i]);
      if (token[i] < 0 || token[i] >= vocab) return make_team_fault(tree_fault::token_range, parg_tree_tokens, r, i, token[i], vocab);
    }
    const index_t first = first_row(r);
    if (first < 0 || first > logits.rows() - n) return make_team_fault(tree_fault::target_rows, parg_logits, r, n, double(first), logits.rows());
    // Rows are written in place by one team each: a row in two requests' ranges would be penalised
    // twice, by two teams at once. O(batch) per team, only when the caller places the rows.
    if (!trees.target_rows.empty())
      for (index_t s = 0; s < trees.tokens.rows(); ++s) {
        const index_t other_nodes = nodes(s);
        if (s == r || other_nodes < 1 || other_nodes > width()) continue;  // a bad count is team s's fault
        const index_t other_first = trees.target_rows(s);
        if (other_first < 0 || other_first > logits.rows() - other_nodes) continue;  // team s reports it
        const index_t shared = first > other_first ? first : other_first;
        const index_t end = first + n < other_first + other_nodes ? first + n : other_first + other_nodes;
        if (shared < end) return make_team_fault(sampling_fault::shared_row, parg_logits, r < s ? r : s, r < s ? s : r, double(shared));
      }
    const float rep = pen.repetition(r), freq = pen.frequency(r), pres = pen.presence(r);
    if (!(finite(rep) && rep > 0.0f)) return make_team_fault(sampling_fault::repetition_value, parg_repetition, r, 0, rep);
    if (!finite(freq)) return make_team_fault(sampling_fault::finite_value, parg_frequency, r, 0, freq);
    if (!finite(pres)) return make_team_fault(sampling_fault::finite_value, parg_presence, r, 0, pres);
    const std::int64_t begin = pen.offsets(r), end = pen.offsets(r + 1);
    if (begin < 0 || end < begin || end > pen.tokens.rows())
      return make_team_fault(sampling_fault::entry_range, parg_offsets, r, begin, double(end), pen.tokens.rows());
    for (std::int64_t e = begin; e < end; ++e) {
      const std::int32_t t = pen.tokens(e);
      if (t < 0 || t >= vocab || (e > begin && t <= pen.tokens(e - 1)))
        return make_team_fault(sampling_fault::history_token, parg_tokens, e, r, t, vocab);
      if (pen.output_counts(e) < 0) return make_team_fault(sampling_fault::history_count, parg_counts, e, r, pen.output_counts(e));
    }
    if (!pen.bias_offsets.empty()) {
      const std::int64_t bias_begin = pen.bias_offsets(r), bias_end = pen.bias_offsets(r + 1);
      if (bias_begin < 0 || bias_end < bias_begin || bias_end > pen.bias_tokens.rows())
        return make_team_fault(sampling_fault::entry_range, parg_bias_offsets, r, bias_begin, double(bias_end), pen.bias_tokens.rows());
      for (std::int64_t e = bias_begin; e < bias_end; ++e) {
        if (pen.bias_tokens(e) < 0 || pen.bias_tokens(e) >= vocab)
          return make_team_fault(tree_fault::token_entry, parg_bias_tokens, e, 0, pen.bias_tokens(e), vocab);
        if (!finite(pen.bias_values(e))) return make_team_fault(sampling_fault::finite_value, parg_bias_values, e, 0, pen.bias_values(e));
      }
    }
    return {};
  }

  SPECDEC_HOST_DEVICE penalty_request request(index_t r, const matrix_view<float, Space>&) const {
    penalty_request q;
    q.parent = trees.parents.row(r);
    q.token = trees.tokens.row(r);
    q.nodes = nodes(r);
    q.first_row = first_row(r);
    q.begin = pen.offsets(r);
    q.end = pen.offsets(r + 1);
    if (!pen.bias_offsets.empty()) {
      q.bias_begin = pen.bias_offsets(r);
      q.bias_end = pen.bias_offsets(r + 1);
    }
    q.params = {pen.repetition(r), pen.frequency(r), pen.presence(r), pen.rule, penalty_convention::vllm};
    q.dense_zeros = negative(q.params.frequency) || negative(q.params.presence);
    return q;
  }
  SPECDEC_HOST_DEVICE std::int32_t entry_token(std::int64_t e) const { return pen.tokens(e); }
  SPECDEC_HOST_DEVICE std::int32_t entry_count(std::int64_t e) const { return pen.output_counts(e); }
  SPECDEC_HOST_DEVICE bool entry_in_prompt(std::int64_t e) const { return pen.in_prompt(e) != 0; }
  SPECDEC_HOST_DEVICE std::int32_t bias_token(std::int64_t k) const { return pen.bias_tokens(k); }
  SPECDEC_HOST_DEVICE float bias_value(std::int64_t k) const { return pen.bias_values(k); }
};

}  // namespace detail

/// apply_tree_penalties for a batch of draft trees in the backend's memory, vLLM's convention: request
/// r's node i's row (`batch.target_rows(r) + i`, default `r * N + i`) gets request r's bias, then its
/// penalties over its committed entries plus the draft tokens of nodes 1..i on its path. Bit for bit the
/// request-based apply_tree_penalties on every request (tested on every backend, with 4-thread teams).
/// Reads `batch.tokens`, `parents`, `node_counts`, `target_rows` only.
/// \param logits backend `[rows x V]`, unit column stride, modified in place.
/// \param penalties backend views (penalty_batch), one request per tree.
/// \throws invalid_argument on shapes (before any work) and, from the team that finds it, a malformed
///   tree, rows outside the logits, two requests whose row ranges share a row, offsets out of order, a
///   history token out of range or not sorted and distinct, a negative count, a bias token out of range, a repetition not finite and > 0, a
///   frequency, presence or bias value not finite (on CUDA with deferred faults: from `check_faults()`).
template <team_backend B>
void apply_tree_penalties(B& b, matrix_view<float, typename B::memory_space> logits,
                          const tree_batch<typename B::memory_space>& batch,
                          const penalty_batch<typename B::memory_space>& penalties) {
  constexpr const char* where = "specdec::sampling::apply_tree_penalties";
  using specdec::detail::check_view;
  specdec::detail::check_vocabulary(where, "V", logits.cols());
  detail::check_batch_shapes(where, batch);
  const index_t n = batch.size();
  const auto length = [&](const auto& v, const char* name, index_t want) {
    check_view(where, name, v, specdec::detail::nonzero_stride);
    SPECDEC_EXPECTS(v.rows() == want, where, name, " has ", v.rows(), " entries; expected ", want);
  };
  length(penalties.offsets, "penalties.offsets", n + 1);
  length(penalties.repetition, "penalties.repetition", n);
  length(penalties.frequency, "penalties.frequency", n);
  length(penalties.presence, "penalties.presence", n);
  length(penalties.output_counts, "penalties.output_counts", penalties.tokens.rows());
  length(penalties.in_prompt, "penalties.in_prompt", penalties.tokens.rows());
  check_view(where, "penalties.tokens", penalties.tokens, specdec::detail::nonzero_stride);
  if (!penalties.bias_offsets.empty()) {
    length(penalties.bias_offsets, "penalties.bias_offsets", n + 1);
    length(penalties.bias_values, "penalties.bias_values", penalties.bias_tokens.rows());
    check_view(where, "penalties.bias_tokens", penalties.bias_tokens, specdec::detail::nonzero_stride);
  }
  SPECDEC_EXPECTS(penalties.rule == repetition_rule::divide || penalties.rule == repetition_rule::multiply_reciprocal, where,
                  "penalties.rule = ", static_cast<int>(penalties.rule), "; expected a repetition_rule enumerator");
  {
    // The rows are written in place while every other view is read: rows apart, and apart from all
    // of them (logits over the parents would rewrite the trees the teams walk).
    using specdec::detail::extent_of;
    std::vector<specdec::detail::view_extent> inputs = detail::batch_inputs(
        where, batch,
        {extent_of(where, "penalties.offsets", penalties.offsets), extent_of(where, "penalties.tokens", penalties.tokens),
         extent_of(where, "penalties.output_counts", penalties.output_counts),
         extent_of(where, "penalties.in_prompt", penalties.in_prompt),
         extent_of(where, "penalties.repetition", penalties.repetition),
         extent_of(where, "penalties.frequency", penalties.frequency),
         extent_of(where, "penalties.presence", penalties.presence),
         extent_of(where, "penalties.bias_offsets", penalties.bias_offsets),
         extent_of(where, "penalties.bias_tokens", penalties.bias_tokens),
         extent_of(where, "penalties.bias_values", penalties.bias_values)});
    check_view(where, "logits", logits, specdec::detail::contiguous_rows | specdec::detail::distinct_rows);
    const specdec::detail::view_extent rows = extent_of(where, "logits", logits);
    for (const specdec::detail::view_extent& input : inputs) specdec::detail::check_disjoint(where, rows, input);
  }
  if (n == 0) return;
  detail::penalty_job<detail::batch_penalty_source<typename B::memory_space>> job{{detail::trees_of(batch), penalties}, logits, where, {}};
  job.names[detail::parg_offsets] = "penalties.offsets";
  job.names[detail::parg_tokens] = "penalties.tokens";
  job.names[detail::parg_counts] = "penalties.output_counts";
  job.names[detail::parg_in_prompt] = "penalties.in_prompt";
  job.names[detail::parg_repetition] = "penalties.repetition";
  job.names[detail::parg_frequency] = "penalties.frequency";
  job.names[detail::parg_presence] = "penalties.presence";
  job.names[detail::parg_bias_offsets] = "penalties.bias_offsets";
  job.names[detail::parg_bias_tokens] = "penalties.bias_tokens";
  job.names[detail::parg_bias_values] = "penalties.bias_values";
  job.names[detail::parg_node_counts] = "batch.node_counts";
  job.names[detail::parg_parents] = "batch.parents";
  job.names[detail::parg_tree_tokens] = "batch.tokens";
  job.names[detail::parg_logits] = "logits";
  for (const char*& name : job.names)
    if (name == nullptr) name = "";
  b.run_teams(n, job);
}

}  // namespace specdec::sampling
