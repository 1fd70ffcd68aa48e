// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Lossless (and lenient) stochastic verification of draft chains and trees: speculative
/// sampling (Leviathan et al. / Chen et al.) for chains, and recursive rejection over siblings
/// (SpecInfer's multi-step speculative sampling, EAGLE's form for deterministic drafts) for trees, with
/// the vLLM and FlashInfer conventions as options. SGLang's one-coin-per-level tree rule is
/// specdec/sampling/tree_coin.hpp.
///
/// **The walk.** From the root, the children of the current node are tested in node-index order
/// (SGLang's sibling order, EAGLE's path order). Child c with token x is accepted with probability
/// min(1, P(x) / (l Q_c(x))), where P is the current target distribution at the node, Q_c the
/// distribution c was drawn from (a draft row, or a point mass for deterministic drafts: top-k trees,
/// n-gram), and l the lenience (1 = lossless). On acceptance the walk descends to c with P = c's target
/// row; on rejection P becomes norm(max(0, P - l Q_c)) (for a point mass: P with x removed) and the next
/// sibling is tested. When no child is accepted, or the node is a leaf, or the depth cap is reached,
/// one token is drawn from P: the corrected token after a rejection, the bonus token otherwise. With
/// l = 1 the emitted sequence is distributed exactly as sampling from the target (SpecInfer Thm 4.2),
/// provided each child with a draft row was drawn independently from that row.
///
/// **Rows read.** Only the target rows of the nodes the walk visits (one entry per tested child, a
/// full row where a residual is formed or the final token drawn) and the draft rows of rejected
/// children. Device target rows are downloaded one at a time, only those; the draft and noise matrices
/// once per call.
///
/// **One walk.** A sampled request is walked by the batched form's team job
/// (detail/speculative_walk.hpp) as a batch of one on this thread, its rows read through a source that
/// loads a row on first use; greedy requests by the greedy walk (detail/greedy_walk.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/backend/detail/checks.hpp>
#include <specdec/config.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/half.hpp>
#include <specdec/core/view.hpp>
#include <specdec/grammar/token_bitmask.hpp>
#include <specdec/sampling/detail/rows.hpp>
#include <specdec/sampling/greedy.hpp>
#include <specdec/sampling/randomness.hpp>
#include <specdec/sampling/request.hpp>
#include <specdec/sampling/speculative_options.hpp>
#include <specdec/sampling/detail/speculative_walk.hpp>
#include <specdec/tree/tree.hpp>

namespace specdec::sampling {

namespace detail {

/// The request-based forms' target rows, a row source of speculative_batch_job: through a row_reader
/// (in place, downloaded, or softened from logits on first use), masked by a grammar's bitmask (host
/// `[rows x ceil(V / 32)]`, empty: every token allowed), of element type T (read from a matrix of L:
/// logits of any element type give float rows).
template <backend B, class T = float, class L = T>
struct reader_rows {
  using element_type = T;
  row_reader<B, T, L>* reader = nullptr;
  matrix_view<const std::int32_t> bitmask = {};
  index_t rows() const noexcept { return reader->rows(); }
  const T* row(index_t r) const { return reader->row(r); }
  float at(index_t r, index_t x) const { return reader->at(r, x); }
  bool allows_any(index_t r) const {
    if (bitmask.rows() == 0) return true;
    const index_t vocab = reader->cols();
    const std::int32_t* m = bitmask.row(r);
    for (index_t w = 0; w < bitmask_words(vocab); ++w) {
      const auto bits = static_cast<std::uint32_t>(m[w]);
      const index_t left = vocab - 32 * w;
      if ((left >= 32 ? bits : bits & ((1u << left) - 1u)) != 0) return true;
    }
    return false;
  }
};

/// Runs the stochastic job on one request (team 0 of a batch of one) on the host, its error naming
/// the request by its index in the caller's batch.
template <class Job>
void run_request(const Job& job, std::size_t request) {
  // Reused per thread: a walk with draft rows folds V floats, which a fresh allocation per request
  // would page-fault on (V >= 32768 is above the allocator's mmap threshold).
  thread_local std::vector<std::byte> scratch, wide;
  if (scratch.size() < job.scratch_bytes()) scratch.resize(job.scratch_bytes());
  if (wide.size() < job.wide_scratch_bytes()) wide.resize(job.wide_scratch_bytes());
  specdec::detail::serial_team team;
  team.wide = wide.data();
  specdec::detail::team_fault f = job(team, 0, scratch.data());
  if (f.code == 0) return;
  using specdec::detail::sampling_fault;
  const auto code = static_cast<sampling_fault>(f.code);
  const bool matrix_row = f.code < specdec::detail::first_team_fault_code || code == sampling_fault::probability_entry ||
                          code == sampling_fault::distribution_entry || code == sampling_fault::distribution_sum ||
                          code == sampling_fault::noise_entry;
  if (!matrix_row) f.row = static_cast<std::int64_t>(request);
  specdec::detail::throw_job_fault(job, f);
}

/// The walk of the file comment over a batch: greedy requests by the greedy walk, the others each by
/// the batched form's team job on the host (speculative_batch_job, one source for every form), reading
/// target rows through `target` (in place, downloaded, or softened from logits on first use). T and D:
/// the target and draft matrices' element types; R the rows the reader gives (T, or float for logits).
template <backend B, class R, class T, class D>
std::vector<speculative_result> verify_walk(const char* where, B& b, sampling::detail::row_reader<B, R, T>& target,
                                            const speculative_rows<typename B::memory_space, T, D>& rows,
                                            std::span<const speculative_request> requests,
                                            const speculative_options& options) {
  check_options(where, options);
  const index_t vocab = target.cols();
  const auto draft_probs = rows.draft;
  const auto exponential_noise = rows.exponential_noise;
  const char* target_name = target.softened() ? "target_logits" : "target_probs";
  check_input_rows(where, target_name, rows.target);
  check_input_rows(where, "draft_probs", draft_probs);
  check_input_rows(where, "exponential_noise", exponential_noise);
  SPECDEC_EXPECTS(draft_probs.size() == 0 || draft_probs.cols() == vocab, where, "draft_probs has ",
                  draft_probs.cols(), " columns; target_probs has ", vocab);
  const bool race = options.draw == final_draw::exponential_race;
  SPECDEC_EXPECTS(!race || exponential_noise.cols() == vocab, where,
                  "exponential_race needs exponential_noise with V = ", vocab, " columns; got ", exponential_noise.cols());
  const bool masked = rows.target_bitmask.rows() > 0;
  if (masked) {
    SPECDEC_EXPECTS(target.softened(), where, "rows.target_bitmask is given; expected logits rows "
                    "(verify_speculative_logits): a mask applies to logits before the softmax");
    specdec::detail::check_bitmask(where, "rows.target_bitmask", rows.target_bitmask, vocab);
    SPECDEC_EXPECTS(rows.target_bitmask.rows() == rows.target.rows(), where, "rows.target_bitmask has ",
                    rows.target_bitmask.rows(), " rows; expected one per target row (", rows.target.rows(), ")");
    target.set_bitmask(rows.target_bitmask);
  }
  const bool any_greedy = std::any_of(requests.begin(), requests.end(), [](const auto& q) { return q.greedy; });
  const bool any_sampled = std::any_of(requests.begin(), requests.end(), [](const auto& q) { return !q.greedy; });
  greedy_rows<B, T> argmax(b, rows.target, any_greedy && !masked);
  sampling::detail::row_reader<B, T> raw(b, rows.target);  // greedy requests under masks read raw rows

  // The job runs on the host: a device backend's draft and noise rows come over once per call.
  using space = typename B::memory_space;
  std::vector<D> draft_copy;
  std::vector<float> noise_copy;
  matrix_view<const D> draft_host;
  matrix_view<const float> noise_host;
  if constexpr (std::is_same_v<space, host_space>) {
    draft_host = draft_probs;
    noise_host = exponential_noise;
  } else if (any_sampled) {
    // Rows may be padded (row stride >= V): the copy spans first row to last and keeps the stride.
    const auto whole = [&]<class E>(matrix_view<const E, space> m, std::vector<E>& copy) {
      if (m.empty()) return matrix_view<const E>{};
      const index_t extent = (m.rows() - 1) * m.stride(0) + m.cols();
      copy = b.download(vector_view<const E, space>(m.data(), extent));
      return matrix_view<const E>(copy.data(), m.rows(), m.cols(), m.stride(0), 1);
    };
    draft_host = whole(draft_probs, draft_copy);
    if (race) noise_host = whole(exponential_noise, noise_copy);
  }
  const reader_rows<B, R, T> source{&target, rows.target_bitmask};
  std::vector<float> widened;  // a 16-bit logits row for the masked argmax, which reads floats

  return for_each_request(where, requests, vocab, target.rows(), [&](const speculative_request& q, std::size_t r,
                                                                       tree_view tree) {
    // Masks come with logits rows only (of any element type; a 16-bit row is widened for the argmax).
    if constexpr (std::is_same_v<R, float>) {
      if (q.greedy && masked) {
        SPECDEC_EXPECTS(source.allows_any(q.target_row), where, "request ", r, " node 0: rows.target_bitmask row ",
                        q.target_row, " allows no token; expected at least one (node 0's row constrains the first token emitted)");
        const auto masked_argmax_of = [&](index_t row) {
          index_t bad = -1;
          const float* x = nullptr;
          if constexpr (std::is_same_v<T, float>) {
            x = raw.row(row);
          } else {
            const T* given = raw.row(row);
            widened.resize(static_cast<std::size_t>(vocab));
            std::transform(given, given + vocab, widened.begin(), [](T v) { return widen(v); });
            x = widened.data();
          }
          const std::int32_t best = specdec::detail::masked_argmax(x, vocab, rows.target_bitmask.row(row), bad);
          SPECDEC_EXPECTS(bad < 0, where, "target_logits row ", row, " holds ", x[bad < 0 ? 0 : bad],
                          " at allowed column ", bad, "; expected finite values or -inf");
          SPECDEC_EXPECTS(best != -1, where, "request ", r, " node ", row - q.target_row, ": rows.target_bitmask row ", row,
                          " allows tokens but every one has logit -inf; expected at least one finite");
          return best;  // -2: the grammar terminated at this node
        };
        speculative_result res = greedy_walk_one(where, vocab, q, r, tree, masked_argmax_of, -2);
        raw.recycle();
        return res;
      }
    }
    if (q.greedy) {
      const auto argmax_of = [&](index_t row) { return argmax(row); };
      return greedy_walk_one(where, vocab, q, r, tree, argmax_of);
    }
    if (target.softened()) {
      SPECDEC_EXPECTS(q.temperature > 0.0f && std::isfinite(q.temperature), where, "request ", r, " has temperature ",
                      q.temperature, "; expected a finite temperature > 0 (temperature 0 is greedy: set `greedy`)");
      target.set_temperature(q.temperature);
    }
    const index_t n = tree.size();
    SPECDEC_EXPECTS(q.draft_rows.empty() || static_cast<index_t>(q.draft_rows.size()) == n, where, "request ", r,
                    " has ", q.draft_rows.size(), " draft rows; expected 0 or one per node (", n, ")");
    const bool linked = !q.first_child.empty() || !q.next_sibling.empty();
    if (linked) (void)children_of(where, q, r);  // the links, checked against the parents

    // The request as a batch of one, over host views of its spans and of result buffers.
    const std::int32_t cap = q.max_accepted >= 0 ? static_cast<std::int32_t>(std::min<index_t>(q.max_accepted, INT32_MAX)) : -1;
    const std::int32_t bonus_token = q.bonus_token ? checked_bonus_token(where, q, r, vocab) : -1;
    const philox_stream rng = q.uniforms.philox_rng();
    const std::uint64_t offset = q.uniforms.philox_offset();
    const std::span<const double> supplied = q.uniforms.supplied_values();
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(n)), nodes(static_cast<std::size_t>(n));
    std::int32_t counts[5] = {};  // accepted, uniforms, re-test passes, bonus, acceptance tests
    std::vector<float> final_row(options.keep_final_distribution ? static_cast<std::size_t>(vocab) : 0);
    const auto row_of = [n](const auto* data) { return matrix_view<const std::int32_t>(data, 1, n); };
    // The job reads its target rows from `source`; its matrix gives the shape (and, for logits rows of
    // another element type than the rows read, no data).
    const R* target_data = nullptr;
    if constexpr (std::is_same_v<R, T>) target_data = rows.target.data();
    const matrix_view<const R> target_shape(target_data, rows.target.rows(), vocab);
    speculative_batch_job<host_space, reader_rows<B, R, T>, D> job{
        {target_shape, draft_host, options.fallback, n},
        {row_of(tree.token.data()), row_of(tree.parent.data()), {}, vector_view<const index_t>(&q.target_row, 1),
         vector_view<const std::int32_t>(&cap, 1), vector_view<const std::int32_t>(&bonus_token, 1),
         linked ? row_of(q.first_child.data()) : matrix_view<const std::int32_t>{},
         linked ? row_of(q.next_sibling.data()) : matrix_view<const std::int32_t>{}, !masked},
        {matrix_view<std::int32_t>(tokens.data(), 1, n), vector_view<std::int32_t>(&counts[0], 1),
         matrix_view<std::int32_t>(nodes.data(), 1, n), vector_view<std::int32_t>(&counts[1], 1),
         vector_view<std::int32_t>(&counts[2], 1),
         options.keep_final_distribution ? matrix_view<float>(final_row.data(), 1, vocab) : matrix_view<float>{},
         vector_view<std::int32_t>(&counts[3], 1), vector_view<std::int32_t>(&counts[4], 1)},
        q.draft_rows.empty() ? matrix_view<const index_t>{} : matrix_view<const index_t>(q.draft_rows.data(), 1, n),
        noise_host,
        race ? vector_view<const index_t>(&q.noise_row, 1) : vector_view<const index_t>{},
        q.uniforms.is_philox() ? matrix_view<const double>{}
                               : matrix_view<const double>(supplied.data(), 1, static_cast<index_t>(supplied.size())),
        q.uniforms.is_philox() ? vector_view<const philox_stream>(&rng, 1) : vector_view<const philox_stream>{},
        q.uniforms.is_philox() ? vector_view<const std::uint64_t>(&offset, 1) : vector_view<const std::uint64_t>{},
        options.test,
        options.range,
        race,
        options.lenience,
        options.flashinfer_retest,
        where,
        {},
        source};
    specdec::detail::name_job(job, where,
                              {{arg_parents, "requests[].tree.parent"},
                               {arg_tokens, "requests[].tree.token"},
                               {arg_target, target_name},
                               {arg_draft_rows, "requests[].draft_rows"},
                               {arg_draft, "draft_probs"},
                               {arg_noise_rows, "requests[].noise_row"},
                               {arg_noise, "exponential_noise"},
                               {arg_max_accepted, "requests[].max_accepted"},
                               {arg_uniforms, "requests[].uniforms"},
                               {arg_bonus, "requests[].bonus_token"},
                               {arg_bitmask, "rows.target_bitmask"}});
    run_request(job, r);
    target.recycle();  // requests rarely share rows; one that does reads them again

    speculative_result out;
    const auto accepted = static_cast<std::size_t>(counts[0]);
    out.accepted_nodes.assign(nodes.begin(), nodes.begin() + static_cast<std::ptrdiff_t>(accepted));
    const bool emitted = tokens[accepted] >= 0;  // none where a grammar terminated
    out.tokens.assign(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(accepted + (emitted ? 1 : 0)));
    out.bonus = counts[3] != 0;
    out.acceptance_tests = counts[4];
    out.uniforms_consumed = counts[1];
    out.retest_accepted = counts[2];
    if (emitted && !(out.bonus && q.bonus_token)) out.final_distribution = std::move(final_row);
    return out;
  }, /*last_node_has_row=*/true, /*first_request=*/0, /*bonus_leaf_without_row=*/!masked);
}

/// The output forms of verify_speculative and verify_speculative_logits: `reader_args` are the
/// row reader's (none: probabilities; a temperature: logits, each request softened at its own).
template <backend B, class T, class D, class... ReaderArgs>
void speculative_into(const char* where, B& b, const speculative_rows<typename B::memory_space, T, D>& rows,
                      std::span<const speculative_request> requests, speculative_options options,
                      const verify_outputs<typename B::memory_space>& outputs, ReaderArgs... reader_args) {
  options.keep_final_distribution = !outputs.final_distributions.empty();
  using specdec::detail::extent_of;
  verify_into(
      b, where, requests, rows.target.cols(), outputs,
      [&] {
        // Logits (a temperature given) are read as float rows whatever their element type.
        using R = std::conditional_t<sizeof...(ReaderArgs) == 0, T, float>;
        sampling::detail::row_reader<B, R, T> target(b, rows.target, reader_args...);
        return verify_walk(where, b, target, rows, requests, options);
      },
      {extent_of(where, "rows.target", rows.target), extent_of(where, "rows.draft", rows.draft),
       extent_of(where, "rows.exponential_noise", rows.exponential_noise)});
}

/// Element types verify_speculative reads its probability rows in: float, bfloat16, float16.
template <class E>
concept probability_element = std::is_same_v<E, float> || is_half_v<E>;

/// A target / draft pair of element types other than float / float: the 16-bit overloads'.
template <class T, class D>
concept half_rows = probability_element<T> && probability_element<D> && (is_half_v<T> || is_half_v<D>);

}  // namespace detail

/// Stochastic verification of a batch of draft trees (chains included), the walk of the file comment.
///
/// Uniform consumption order per request (position i of its stream): one per acceptance test, in walk
/// order; with `flashinfer_retest`, then one per re-tested chain position; then one for the final draw
/// (none with exponential_race, none when a caller bonus token is used). So a chain of k drafts reads
/// at most k + 1 (k + 2 with re-tests) and a tree at most (nodes - 1) + 1. Deterministic siblings that
/// repeat an already rejected token are skipped without a test (their probability is 0 by then).
///
/// Mixed batches: a request with `greedy` set is verified by the greedy rule from the argmax of its
/// rows and consumes nothing, so greedy and sampled requests (each with its own seed) share one call.
///
/// \param rows backend views: `target` `[rows x V]` target probabilities (after temperature / top-k /
///   top-p, exactly the distribution to be sampled); `draft` `[rows' x V]` draft probabilities, or empty
///   when every node is deterministic; `exponential_noise` `[rows'' x V]` Exp(1) noise for
///   exponential_race, else empty.
/// \returns one result per request (with `final_distribution` when options.keep_final_distribution).
/// \throws invalid_argument on a malformed tree, rows out of range, tokens >= V, probability entries
///   outside [0, 1], a final row that is not a distribution (NaN, negative, sum != 1 within 1e-4),
///   uniforms outside the convention's range or too few supplied, lenience outside (0, 1], re-tests on a
///   non-chain, exponential_race without noise or with a noise entry that is not a finite value >= 0
///   (an Exp(1) sample), V outside [1, 2^31 - 1], input views that are null with a shape or whose rows
///   are strided or overlap.
template <backend B>
std::vector<speculative_result> verify_speculative(B& b, const speculative_rows<typename B::memory_space>& rows,
                                                   std::span<const speculative_request> requests,
                                                   const speculative_options& options = {}) {
  sampling::detail::row_reader<B> target(b, rows.target);
  return detail::verify_walk("specdec::sampling::verify_speculative", b, target, rows, requests, options);
}

/// verify_speculative into caller buffers (verify_outputs: `[batch x width]` tokens padded with -1,
/// accepted counts, accepted nodes, uniforms consumed, re-test counts, final distributions), in the
/// backend's memory space. Same decisions as the returning form. \throws invalid_argument as that
/// form, and on output shapes that do not fit the batch (checked before any work).
template <backend B>
void verify_speculative(B& b, const speculative_rows<typename B::memory_space>& rows,
                        std::span<const speculative_request> requests, speculative_options options,
                        const verify_outputs<typename B::memory_space>& outputs) {
  detail::speculative_into("specdec::sampling::verify_speculative", b, rows, requests, options, outputs);
}

/// verify_speculative over bfloat16 / float16 rows (an engine's 16-bit softmax; target and draft may
/// differ, e.g. float target rows and bf16 draft rows): each entry read as it is and widened (exact), so
/// the results are those of the float rows holding the same values, bit for bit. A row read whole may
/// sum to 1 within 1e-4 plus what rounding to its type moves a sum by (core/half.hpp's
/// rounding_tolerance; the message names it). \throws invalid_argument as the float form.
template <backend B, class T, class D>
  requires detail::half_rows<T, D>
std::vector<speculative_result> verify_speculative(B& b, const speculative_rows<typename B::memory_space, T, D>& rows,
                                                   std::span<const speculative_request> requests,
                                                   const speculative_options& options = {}) {
  sampling::detail::row_reader<B, T> target(b, rows.target);
  return detail::verify_walk("specdec::sampling::verify_speculative", b, target, rows, requests, options);
}

/// verify_speculative over bfloat16 / float16 rows into caller buffers (as the float output form).
template <backend B, class T, class D>
  requires detail::half_rows<T, D>
void verify_speculative(B& b, const speculative_rows<typename B::memory_space, T, D>& rows,
                        std::span<const speculative_request> requests, speculative_options options,
                        const verify_outputs<typename B::memory_space>& outputs) {
  detail::speculative_into("specdec::sampling::verify_speculative", b, rows, requests, options, outputs);
}

/// verify_speculative from the target's logits (`rows.target`, raw `[rows x V]`): a request's node rows
/// are softened (`row_softmax` at its `temperature`) on the backend only when the walk reads them, so
/// a tree whose walk stops after a few levels costs a few rows, not one softmax per node. Same walk,
/// uniforms and results as verify_speculative over the softened rows. Top-k / top-p / min-p targets are
/// processed by the caller (sampling/distribution.hpp) and verified with verify_speculative.
/// \throws invalid_argument as verify_speculative, and on a request temperature <= 0 or NaN / infinite
///   logits in a row that is read.
///
/// The logits may be bfloat16 / float16 (`speculative_rows<space, T>` with T one of them; draft rows
/// float or 16-bit as verify_speculative's): each row is softened as row_softmax softens it (the entries
/// widened, exact), so the results are those of float logits holding the same values, bit for bit.
template <backend B, class T = float, class D = T>
  requires(detail::probability_element<T> && detail::probability_element<D>)
std::vector<speculative_result> verify_speculative_logits(B& b, const speculative_rows<typename B::memory_space, T, D>& rows,
                                                          std::span<const speculative_request> requests,
                                                          const speculative_options& options = {}) {
  sampling::detail::row_reader<B, float, T> target(b, rows.target, 1.0f);
  return detail::verify_walk("specdec::sampling::verify_speculative_logits", b, target, rows, requests, options);
}

/// verify_speculative of one request (an engine decoding one sequence).
template <backend B>
speculative_result verify_speculative(B& b, const speculative_rows<typename B::memory_space>& rows,
                                      const speculative_request& request, const speculative_options& options = {}) {
  return verify_speculative(b, rows, std::span<const speculative_request>(&request, 1), options).front();
}

/// verify_speculative_logits of one request (an engine decoding one sequence).
template <backend B, class T = float, class D = T>
  requires(detail::probability_element<T> && detail::probability_element<D>)
speculative_result verify_speculative_logits(B& b, const speculative_rows<typename B::memory_space, T, D>& rows,
                                             const speculative_request& request, const speculative_options& options = {}) {
  return verify_speculative_logits(b, rows, std::span<const speculative_request>(&request, 1), options).front();
}

/// verify_speculative_logits into caller buffers (as verify_speculative's output form).
template <backend B, class T = float, class D = T>
  requires(detail::probability_element<T> && detail::probability_element<D>)
void verify_speculative_logits(B& b, const speculative_rows<typename B::memory_space, T, D>& rows,
                               std::span<const speculative_request> requests, speculative_options options,
                               const verify_outputs<typename B::memory_space>& outputs) {
  detail::speculative_into("specdec::sampling::verify_speculative_logits", b, rows, requests, options, outputs, 1.0f);
}

/// A chain as a draft tree: node 0 = the committed token, node i = draft token i - 1, each the only
/// child of the one before. \throws invalid_argument on negative tokens.
inline draft_tree make_chain(std::int32_t root_token, std::span<const std::int32_t> draft_tokens) {
  std::vector<std::int32_t> tokens = {root_token};
  std::vector<std::int32_t> parents = {-1};
  for (std::size_t i = 0; i < draft_tokens.size(); ++i) {
    tokens.push_back(draft_tokens[i]);
    parents.push_back(static_cast<std::int32_t>(i));
  }
  return make_tree(std::move(tokens), parents);
}

/// Emitted tokens of a batch padded to `[batch x width]` with -1 (vLLM's and FlashInfer's layout,
/// width = max drafts + 1). \throws invalid_argument when a request emitted more than `width` tokens.
/// \throws invalid_argument too when `[batch x width]` exceeds specdec::max_elements (checked before
///   allocating).
inline std::vector<std::int32_t> padded_tokens(std::span<const speculative_result> results, index_t width) {
  constexpr const char* where = "specdec::sampling::padded_tokens";
  SPECDEC_EXPECTS(width >= 0, where, "width = ", width, "; expected >= 0");
  for (std::size_t r = 0; r < results.size(); ++r)
    SPECDEC_EXPECTS(static_cast<index_t>(results[r].tokens.size()) <= width, where, "request ", r, " emitted ",
                    results[r].tokens.size(), " tokens; width is ", width);
  std::vector<std::int32_t> out(
      specdec::detail::checked_count(where, {static_cast<index_t>(results.size()), width}, "[batch x width]"), -1);
  for (std::size_t r = 0; r < results.size(); ++r)
    std::copy(results[r].tokens.begin(), results[r].tokens.end(), out.begin() + static_cast<std::ptrdiff_t>(r) * width);
  return out;
}

}  // namespace specdec::sampling
