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
/// children. Device rows are downloaded one at a time, only those.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/config.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>
#include <specdec/grammar/token_bitmask.hpp>
#include <specdec/sampling/detail/rows.hpp>
#include <specdec/sampling/greedy.hpp>
#include <specdec/sampling/randomness.hpp>
#include <specdec/sampling/request.hpp>
#include <specdec/tree/tree.hpp>

namespace specdec::sampling {

/// The per-candidate acceptance test, given the current target probability p = P(x), the draft
/// probability q = Q(x) (1 for deterministic drafts) and a uniform u. Peers differ at the boundary.
enum class acceptance_test {
  ratio,           ///< accept iff q > 0 and fp32(p / (l q)) >= u (vLLM v1, Leviathan's r <= p/q). Default.
  strict_product,  ///< accept iff u l q < p in fp32 (FlashInfer, SGLang's classic chain): q = 0 < p accepts.
};

/// How the corrected / bonus token is drawn from the final distribution.
enum class final_draw {
  inverse_cdf,       ///< one uniform, canonical inverse CDF on the unnormalised entries (FlashInfer, SGLang). Default.
  exponential_race,  ///< argmax of entry / E with E the request's Exp(1) noise row (vLLM); consumes no uniform.
};

/// Options shared by every request of a call.
struct speculative_options {
  acceptance_test test = acceptance_test::ratio;
  uniform_range range = uniform_range::closed_open;
  final_draw draw = final_draw::inverse_cdf;
  /// What the final draw does when the distribution left is all zero (reachable only through rounding or
  /// through q(x) = 0 rejections): draw from the node's target row (default), token 0 (vLLM), V - 1 (SGLang).
  empty_residual fallback = empty_residual::sample_target;
  /// Leviathan et al.'s lenience l in (0, 1]: accept with min(1, p / (l q)), residual max(0, p - l q).
  /// 1 is lossless; smaller values trade fidelity for acceptance (no token is emitted with probability
  /// above p(x) / l).
  float lenience = 1.0f;
  /// FlashInfer's `accepted_token_num`: after a rejection at chain position i, positions i..k-1 of the
  /// chain are re-tested with fresh uniforms (i included) and the passes counted (consumes k - i
  /// uniforms before the final draw). Chains only.
  bool flashinfer_retest = false;
  /// Fill `speculative_result::final_distribution` (the returning forms; the output forms fill
  /// `verify_outputs::final_distributions` when that view is given).
  bool keep_final_distribution = false;
};

/// The rows a stochastic verifier reads, in the backend's memory space.
template <class Space = host_space>
struct speculative_rows {
  /// `[rows x V]`: target probabilities (verify_speculative) or raw logits (verify_speculative_logits).
  matrix_view<const float, Space> target = {};
  /// `[rows' x V]` draft probabilities that `speculative_request::draft_rows` index; empty when every
  /// node is deterministic.
  matrix_view<const float, Space> draft = {};
  /// `[rows'' x V]` Exp(1) noise that `speculative_request::noise_row` indexes (final_draw::exponential_race).
  matrix_view<const float, Space> exponential_noise = {};
  /// Optional token bitmasks of the target rows (structured output; verify_speculative_logits only):
  /// host `[rows x ceil(V / 32)]` int32 in xgrammar's layout (specdec/grammar/token_bitmask.hpp), row i
  /// constraining target row i. The walk then reads each target row as the softmax of the row with its
  /// disallowed logits at -inf (computed only for the rows it reads; the logits are not written), and
  /// greedy requests take the largest allowed logit. A walk that reaches a node whose row allows no
  /// token (a terminated grammar) ends there without a final token. Empty: unconstrained.
  matrix_view<const std::int32_t> target_bitmask = {};
};

namespace detail {

/// The walk's conventions, one function each; a new convention is an enumerator and a case here.

/// Whether a child passes its acceptance test (acceptance_test) given the current target probability
/// p = P(x), the draft probability q = Q(x) (1 for a deterministic draft), the lenience and a uniform.
SPECDEC_HOST_DEVICE inline bool passes(acceptance_test test, float p, float q, float lenience, double u) {
  const float lq = lenience * q;
  if (test == acceptance_test::ratio) return lq > 0.0f && static_cast<double>(p / lq) >= u;
  return static_cast<float>(u) * lq < p;
}

/// The target distribution after a rejected child with token x: norm(max(0, P - l Q)) with Q the
/// child's draft row `q_values`, or, for a deterministic child (null `q_values`), P without x (l = 1;
/// `removed` lists such tokens, so repeated siblings are skipped) or P - l delta_x.
inline void reject(working_distribution& dist, const float* q_values, std::int32_t x, float lenience,
                   std::vector<std::int32_t>& removed) {
  if (q_values != nullptr) {
    dist.subtract(q_values, lenience);
  } else if (lenience == 1.0f) {
    dist.remove(x);
    removed.push_back(x);
  } else {
    dist.subtract_point(x, lenience);
  }
}

/// The token drawn from the distribution the walk ends with (final_draw): the exponential race against
/// the request's noise row, or the canonical inverse CDF at the next uniform.
template <class NoiseRow, class NextUniform>
std::int32_t final_token(const speculative_options& options, working_distribution& dist, NoiseRow&& noise_row,
                         NextUniform&& next_uniform) {
  if (options.draw == final_draw::exponential_race) return dist.race(noise_row());
  return dist.draw(next_uniform(), options.fallback);
}

/// Checks the options every stochastic verifier takes (an enumerator outside its values would
/// silently select another convention).
inline void check_options(const char* where, const speculative_options& options) {
  SPECDEC_EXPECTS(options.lenience > 0.0f && options.lenience <= 1.0f, where, "lenience = ", options.lenience,
                  "; expected a value in (0, 1]");
  SPECDEC_EXPECTS(options.test == acceptance_test::ratio || options.test == acceptance_test::strict_product, where,
                  "options.test = ", static_cast<int>(options.test), "; expected an acceptance_test enumerator");
  SPECDEC_EXPECTS(options.draw == final_draw::inverse_cdf || options.draw == final_draw::exponential_race, where,
                  "options.draw = ", static_cast<int>(options.draw), "; expected a final_draw enumerator");
  SPECDEC_EXPECTS(options.fallback == empty_residual::sample_target || options.fallback == empty_residual::token_zero ||
                      options.fallback == empty_residual::last_token,
                  where, "options.fallback = ", static_cast<int>(options.fallback), "; expected an empty_residual enumerator");
  SPECDEC_EXPECTS(options.range == uniform_range::closed_open || options.range == uniform_range::open_closed, where,
                  "options.range = ", static_cast<int>(options.range), "; expected a uniform_range enumerator");
}

/// The walk of the file comment over a batch, reading target rows through `target` (in place,
/// downloaded, or softened from logits on first use).
template <backend B>
std::vector<speculative_result> verify_walk(const char* where, B& b, sampling::detail::row_reader<B>& target,
                                            const speculative_rows<typename B::memory_space>& rows,
                                            std::span<const speculative_request> requests,
                                            const speculative_options& options) {
  check_options(where, options);
  const index_t vocab = target.cols();
  const auto draft_probs = rows.draft;
  const auto exponential_noise = rows.exponential_noise;
  check_input_rows(where, target.softened() ? "target_logits" : "target_probs", rows.target);
  check_input_rows(where, "draft_probs", draft_probs);
  check_input_rows(where, "exponential_noise", exponential_noise);
  SPECDEC_EXPECTS(draft_probs.size() == 0 || draft_probs.cols() == vocab, where, "draft_probs has ",
                  draft_probs.cols(), " columns; target_probs has ", vocab);
  SPECDEC_EXPECTS(options.draw != final_draw::exponential_race || exponential_noise.cols() == vocab, where,
                  "exponential_race needs exponential_noise with V = ", vocab, " columns; got ", exponential_noise.cols());
  sampling::detail::row_reader<B> draft(b, draft_probs), noise(b, exponential_noise);
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
  greedy_rows<B> argmax(b, rows.target, any_greedy && !masked);
  sampling::detail::row_reader<B> raw(b, rows.target);  // greedy requests under masks read raw rows
  // Node 0's row must allow a token (the first token emitted); a later node's empty row means the
  // grammar terminated there.
  const auto allows_any = [&](index_t row) {
    const std::int32_t* m = rows.target_bitmask.row(row);
    for (index_t w = 0; w < bitmask_words(vocab); ++w) {
      const auto bits = static_cast<std::uint32_t>(m[w]);
      const index_t left = vocab - 32 * w;
      if ((left >= 32 ? bits : bits & ((1u << left) - 1u)) != 0) return true;
    }
    return false;
  };
  return for_each_request(where, requests, vocab, target.rows(), [&](const speculative_request& q, std::size_t r,
                                                                       tree_view tree) {
    if (masked)
      SPECDEC_EXPECTS(allows_any(q.target_row), where, "request ", r, " node 0: rows.target_bitmask row ", q.target_row,
                      " allows no token; expected at least one (node 0's row constrains the first token emitted)");
    if (q.greedy && masked) {
      const auto masked_argmax_of = [&](index_t row) {
        index_t bad = -1;
        const std::int32_t best = specdec::detail::masked_argmax(raw.row(row), vocab, rows.target_bitmask.row(row), bad);
        SPECDEC_EXPECTS(bad < 0, where, "target_logits row ", row, " holds ", raw.row(row)[bad < 0 ? 0 : bad],
                        " at allowed column ", bad, "; expected finite values or -inf");
        SPECDEC_EXPECTS(best != -1, where, "request ", r, " node ", row - q.target_row, ": rows.target_bitmask row ", row,
                        " allows tokens but every one has logit -inf; expected at least one finite");
        return best;  // -2: the grammar terminated at this node
      };
      speculative_result res = greedy_walk_one(where, vocab, q, r, tree, masked_argmax_of, -2);
      raw.recycle();
      return res;
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
    for (index_t i = 1; i < static_cast<index_t>(q.draft_rows.size()); ++i) {
      const index_t row = q.draft_rows[static_cast<std::size_t>(i)];
      SPECDEC_EXPECTS(row >= -1 && row < draft_probs.rows(), where, "request ", r, " node ", i, " has draft row ", row,
                      "; draft_probs has ", draft_probs.rows(), " rows (-1: deterministic)");
    }
    const auto children = detail::children_of(where, q, r);
    const bool is_chain = std::all_of(children.begin(), children.end(), [](const auto& c) { return c.size() <= 1; });
    SPECDEC_EXPECTS(!options.flashinfer_retest || is_chain, where, "request ", r,
                    ": flashinfer_retest applies to chains; this tree branches");
    if (options.draw == final_draw::exponential_race)
      SPECDEC_EXPECTS(q.noise_row >= 0 && q.noise_row < exponential_noise.rows(), where, "request ", r,
                      " has noise_row ", q.noise_row, "; exponential_noise has ", exponential_noise.rows(), " rows");

    speculative_result out;
    std::uint64_t position = 0;
    const auto next_uniform = [&] { return q.uniforms.at(position++, options.range); };
    // The probabilities a test reads, checked: target row `row`'s entry x, draft row q_row's (1 when
    // deterministic).
    const auto target_entry = [&](index_t row, std::int32_t x) {
      const float p_x = target.at(row, x);
      sampling::detail::check_probability(where, "target_probs", row, x, p_x);
      return p_x;
    };
    const auto draft_entry = [&](index_t q_row, std::int32_t x) {
      if (q_row < 0) return 1.0f;
      const float q_x = draft.at(q_row, x);
      sampling::detail::check_probability(where, "draft_probs", q_row, x, q_x);
      return q_x;
    };
    const auto draft_row_of = [&](std::int32_t c) { return q.draft_rows.empty() ? index_t{-1} : q.draft_rows[static_cast<std::size_t>(c)]; };
    index_t node = 0;
    bool rejected_here = false;
    for (;;) {
      const index_t row = q.target_row + node;
      if (masked && !allows_any(row)) break;  // a terminated grammar: nothing may follow, no final token
      sampling::detail::working_distribution dist(nullptr, vocab);
      const float* p_row = nullptr;
      // Every full row the walk reads is checked before use: a residual or a final draw from a row
      // with NaN, negative entries or the wrong mass would otherwise be silently clamped or rescaled.
      // Softened rows come from row_softmax, which has checked the logits.
      const auto load = [&] {
        if (!p_row) {
          p_row = target.row(row);
          dist = sampling::detail::working_distribution(p_row, vocab);
          if (!target.softened()) sampling::detail::check_weighed_row(where, "target_probs", row, dist, p_row, vocab);
        }
      };
      const bool capped = q.max_accepted >= 0 && static_cast<index_t>(out.accepted_nodes.size()) >= q.max_accepted;
      std::int32_t accepted = -1;
      rejected_here = false;
      if (!capped) {
        std::vector<std::int32_t> removed;
        for (const std::int32_t c : children[static_cast<std::size_t>(node)]) {
          const std::int32_t x = tree.token[static_cast<std::size_t>(c)];
          const index_t q_row = draft_row_of(c);
          if (q_row < 0 && std::find(removed.begin(), removed.end(), x) != removed.end()) continue;
          // The untouched row is read one entry at a time; a residual needs the whole row.
          float p_x;
          if (!dist.modified() && !p_row) {
            p_x = target_entry(row, x);
          } else {
            load();
            p_x = dist.prob(x);
            sampling::detail::check_probability(where, "target_probs", row, x, p_x);
          }
          const float q_x = draft_entry(q_row, x);
          ++out.acceptance_tests;
          if (detail::passes(options.test, p_x, q_x, options.lenience, next_uniform())) {
            accepted = c;
            break;
          }
          load();
          rejected_here = true;
          const float* q_values = nullptr;
          if (q_row >= 0) {
            q_values = draft.row(q_row);
            sampling::detail::check_probability_row(where, "draft_probs", q_row, q_values, vocab);
          }
          detail::reject(dist, q_values, x, options.lenience, removed);
        }
      }
      if (accepted >= 0) {
        out.accepted_nodes.push_back(accepted);
        out.tokens.push_back(tree.token[static_cast<std::size_t>(accepted)]);
        node = accepted;
        continue;
      }
      // The walk ends at `node`: FlashInfer's re-tests of the chain positions from the rejected one
      // on (fresh uniforms, passes counted), then the final token.
      if (options.flashinfer_retest && rejected_here)
        for (index_t i = node; i + 1 < n; ++i) {
          const std::int32_t x = tree.token[static_cast<std::size_t>(i + 1)];
          const float p_x = target_entry(q.target_row + i, x);
          const float q_x = draft_entry(draft_row_of(static_cast<std::int32_t>(i + 1)), x);
          out.retest_accepted += detail::passes(options.test, p_x, q_x, options.lenience, next_uniform()) ? 1 : 0;
        }
      out.retest_accepted += static_cast<index_t>(out.accepted_nodes.size());
      out.bonus = !rejected_here;
      if (out.bonus && q.bonus_token) {
        out.tokens.push_back(detail::checked_bonus_token(where, q, r, vocab));
        break;
      }
      load();
      if (options.keep_final_distribution) out.final_distribution = dist.entries();
      const auto noise_row = [&] {
        const float* e = noise.row(q.noise_row);
        sampling::detail::check_noise_row(where, q.noise_row, e, vocab);
        return e;
      };
      out.tokens.push_back(detail::final_token(options, dist, noise_row, next_uniform));
      break;
    }
    out.uniforms_consumed = static_cast<index_t>(position);
    target.recycle();  // requests rarely share rows; one that does reads them again
    return out;
  }, /*last_node_has_row=*/true, /*first_request=*/0, /*bonus_leaf_without_row=*/!masked);
}

/// The output forms of verify_speculative and verify_speculative_logits: `reader_args` are the
/// row reader's (none: probabilities; a temperature: logits, each request softened at its own).
template <backend B, class... ReaderArgs>
void speculative_into(const char* where, B& b, const speculative_rows<typename B::memory_space>& rows,
                      std::span<const speculative_request> requests, speculative_options options,
                      const verify_outputs<typename B::memory_space>& outputs, ReaderArgs... reader_args) {
  options.keep_final_distribution = !outputs.final_distributions.empty();
  using specdec::detail::extent_of;
  verify_into(
      b, where, requests, rows.target.cols(), outputs,
      [&] {
        sampling::detail::row_reader<B> target(b, rows.target, reader_args...);
        return verify_walk(where, b, target, rows, requests, options);
      },
      {extent_of(where, "rows.target", rows.target), extent_of(where, "rows.draft", rows.draft),
       extent_of(where, "rows.exponential_noise", rows.exponential_noise)});
}

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

/// verify_speculative from the target's logits (`rows.target`, raw `[rows x V]`): a request's node rows
/// are softened (`row_softmax` at its `temperature`) on the backend only when the walk reads them, so
/// a tree whose walk stops after a few levels costs a few rows, not one softmax per node. Same walk,
/// uniforms and results as verify_speculative over the softened rows. Top-k / top-p / min-p targets are
/// processed by the caller (sampling/distribution.hpp) and verified with verify_speculative.
/// \throws invalid_argument as verify_speculative, and on a request temperature <= 0 or NaN / infinite
///   logits in a row that is read.
template <backend B>
std::vector<speculative_result> verify_speculative_logits(B& b, const speculative_rows<typename B::memory_space>& rows,
                                                          std::span<const speculative_request> requests,
                                                          const speculative_options& options = {}) {
  sampling::detail::row_reader<B> target(b, rows.target, 1.0f);
  return detail::verify_walk("specdec::sampling::verify_speculative_logits", b, target, rows, requests, options);
}

/// verify_speculative of one request (an engine decoding one sequence).
template <backend B>
speculative_result verify_speculative(B& b, const speculative_rows<typename B::memory_space>& rows,
                                      const speculative_request& request, const speculative_options& options = {}) {
  return verify_speculative(b, rows, std::span<const speculative_request>(&request, 1), options).front();
}

/// verify_speculative_logits of one request (an engine decoding one sequence).
template <backend B>
speculative_result verify_speculative_logits(B& b, const speculative_rows<typename B::memory_space>& rows,
                                             const speculative_request& request, const speculative_options& options = {}) {
  return verify_speculative_logits(b, rows, std::span<const speculative_request>(&request, 1), options).front();
}

/// verify_speculative_logits into caller buffers (as verify_speculative's output form).
template <backend B>
void verify_speculative_logits(B& b, const speculative_rows<typename B::memory_space>& rows,
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
