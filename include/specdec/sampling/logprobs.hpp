// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Logprobs of what a verifier emitted (vLLM's `logprobs` and `top_logprobs`): each emitted token's
/// log-probability, its rank, and the top-n of its row, in vLLM's layout, from the rows the walk read.
///
/// Emitted token k of a request comes from the row of the node it follows: node 0's for the first token,
/// accepted node k-1's after that (so every row read here is one the verifier read). A row's
/// log-probabilities are log_softmax(row / T) over its allowed entries (a bitmask row, when given, puts
/// the others at -inf, as vLLM's logprobs see the grammar mask). vLLM's modes are a matter of which rows
/// are passed: `raw_logprobs` the model's logits (T = 1, masks only), `processed_logprobs` the rows after
/// penalties (apply_tree_penalties) with the request's temperature.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/core/checked.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>
#include <specdec/core/view_checks.hpp>
#include <specdec/grammar/token_bitmask.hpp>
#include <specdec/sampling/detail/rows.hpp>
#include <specdec/sampling/request.hpp>

namespace specdec::sampling {

/// Caller buffers of emitted_logprobs, host, in vLLM's LogprobsTensors layout: one row per emitted token
/// (requests in order, each request's tokens in order), column 0 the emitted token itself, columns 1..n
/// its row's top n (descending, ties to the lower index).
struct logprob_outputs {
  matrix_view<std::int32_t> token_ids = {};  ///< `[tokens x (n + 1)]`
  matrix_view<float> logprobs = {};          ///< `[tokens x (n + 1)]`
  vector_view<std::int32_t> ranks = {};      ///< `[tokens]`: the entries whose log-probability is >= the token's (itself and its ties included: vLLM's batched_count_greater_than)
};

/// Tokens a batch of results emitted (the rows logprob_outputs needs).
inline index_t emitted_token_count(std::span<const speculative_result> results) {
  index_t n = 0;
  for (const speculative_result& r : results) n += static_cast<index_t>(r.tokens.size());
  return n;
}

/// The log-probabilities of every emitted token and the top `top_n` of its row (0 <= top_n <= 20, vLLM's
/// limit), into `out` (see logprob_outputs). Entry j of a row: (x_j - m) / T - log(sum_i exp((x_i - m) / T))
/// over its allowed entries (m their maximum, the sum in double), -inf for masked ones.
/// \param rows backend `[rows x V]`: the rows the verifier read (logits, or penalised logits).
/// \param temperatures one per request (> 0; 1 for vLLM's raw mode and greedy requests).
/// \param bitmask optional host `[rows x ceil(V / 32)]` (the verifier's masks).
/// \throws invalid_argument naming the argument: top_n outside [0, 20], output shapes that do not fit,
///   a temperature that is not finite and > 0, an emitted token the row's mask forbids or whose logit is
///   -inf (no log-probability), NaN / +inf in a row, a malformed tree, a result whose accepted nodes are
///   not a root path of its request's tree (or whose accepted tokens are not those nodes' tokens), a
///   request whose rows lie outside `rows`, and any view by the view rules: null with a shape, a row stride
///   below its row, strided rows or masks, an output sharing memory with any other argument (the rows,
///   masks, temperatures, trees, results or another output).
template <backend B>
void emitted_logprobs(B& b, matrix_view<const float, typename B::memory_space> rows, std::span<const speculative_request> requests,
                      std::span<const speculative_result> results, std::span<const float> temperatures, index_t top_n,
                      const logprob_outputs& out, matrix_view<const std::int32_t> bitmask = {}) {
  constexpr const char* where = "specdec::sampling::emitted_logprobs";
  const index_t vocab = rows.cols();
  SPECDEC_EXPECTS(top_n >= 0 && top_n <= 20 && top_n <= vocab, where, "top_n = ", top_n, "; expected 0 <= top_n <= min(20, V)");
  SPECDEC_EXPECTS(results.size() == requests.size() && temperatures.size() == requests.size(), where, "results has ",
                  results.size(), " entries and temperatures ", temperatures.size(), "; expected one per request (",
                  requests.size(), ")");
  const index_t total = emitted_token_count(results);
  SPECDEC_EXPECTS(out.token_ids.rows() == total && out.token_ids.cols() == top_n + 1 && out.logprobs.rows() == total &&
                      out.logprobs.cols() == top_n + 1 && out.ranks.rows() == total,
                  where, "outputs are token_ids [", out.token_ids.rows(), " x ", out.token_ids.cols(), "], logprobs [",
                  out.logprobs.rows(), " x ", out.logprobs.cols(), "], ranks [", out.ranks.rows(), "]; expected [", total,
                  " x ", top_n + 1, "] twice and [", total, "] (one row per emitted token)");
  const bool masked = bitmask.rows() > 0;
  if (masked) {
    specdec::detail::check_bitmask(where, "bitmask", bitmask, vocab);
    SPECDEC_EXPECTS(bitmask.rows() == rows.rows(), where, "bitmask has ", bitmask.rows(), " rows; expected one per row (",
                    rows.rows(), ")");
  }
  {
    // Every buffer the call reads or writes: the outputs apart from each other, from the rows and
    // masks, and from every tree and result they are computed from.
    using specdec::detail::input;
    using specdec::detail::output;
    constexpr unsigned packed_rows = specdec::detail::contiguous_rows | specdec::detail::distinct_rows;
    specdec::detail::argument_set args(where);
    args.add(input("rows", rows, packed_rows))
        .add(input("bitmask", bitmask, specdec::detail::contiguous_rows))
        .add(input("temperatures", temperatures))
        .add(output("token_ids", out.token_ids))
        .add(output("logprobs", out.logprobs))
        .add(output("ranks", out.ranks));
    for (std::size_t r = 0; r < requests.size(); ++r) {
      args.add(input("requests[].tree.token", requests[r].tree.token))
          .add(input("requests[].tree.parent", requests[r].tree.parent))
          .add(input("results[].tokens", std::span<const std::int32_t>(results[r].tokens)))
          .add(input("results[].accepted_nodes", std::span<const std::int32_t>(results[r].accepted_nodes)));
    }
    args.check();
  }
  // Each result must be a root path of its tree whose accepted tokens are the path's: the rows read
  // below are chosen by it, and an emitted token is reported as the token its row gave.
  for (std::size_t r = 0; r < requests.size(); ++r) {
    const tree_view tree = requests[r].tree;
    validate(tree, vocab);
    const speculative_result& res = results[r];
    SPECDEC_EXPECTS(res.tokens.size() == res.accepted_nodes.size() + 1 || res.tokens.size() == res.accepted_nodes.size(),
                    where, "results[", r, "] has ", res.tokens.size(), " tokens and ", res.accepted_nodes.size(),
                    " accepted nodes; expected the accepted tokens and at most one more");
    std::int32_t parent = 0;
    for (std::size_t k = 0; k < res.accepted_nodes.size(); ++k) {
      const std::int32_t node = res.accepted_nodes[k];
      SPECDEC_EXPECTS(node > 0 && node < tree.size() && tree.parent[static_cast<std::size_t>(node)] == parent, where,
                      "results[", r, "].accepted_nodes[", k, "] = ", node, "; expected a child of node ", parent,
                      " (the accepted nodes are a path from the root of the request's ", tree.size(), "-node tree)");
      SPECDEC_EXPECTS(res.tokens[k] == tree.token[static_cast<std::size_t>(node)], where, "results[", r, "].tokens[", k,
                      "] = ", res.tokens[k], "; expected node ", node, "'s token ", tree.token[static_cast<std::size_t>(node)]);
      parent = node;
    }
    SPECDEC_EXPECTS(specdec::detail::range_fits(requests[r].target_row, tree.size(), rows.rows()), where, "requests[", r,
                    "].target_row = ", requests[r].target_row, " with ", tree.size(), " nodes; expected rows within the ",
                    rows.rows(), " of rows");
  }
  detail::row_reader<B> reader(b, rows);
  std::vector<double> lp(static_cast<std::size_t>(vocab));
  index_t at = 0;
  for (std::size_t r = 0; r < requests.size(); ++r) {
    const speculative_request& q = requests[r];
    const speculative_result& res = results[r];
    const float t = temperatures[r];
    SPECDEC_EXPECTS(t > 0.0f && std::isfinite(t), where, "temperatures[", r, "] = ", t, "; expected a finite value > 0");
    for (std::size_t k = 0; k < res.tokens.size(); ++k) {
      const std::int32_t node = k == 0 ? 0 : res.accepted_nodes[k - 1];
      const index_t row = q.target_row + node;  // within rows: checked above
      const float* x = reader.row(row);
      const std::int32_t* m = masked ? bitmask.row(row) : nullptr;
      const auto allowed = [&](index_t j) { return m == nullptr || bitmask_allows(m, static_cast<std::int32_t>(j)); };
      float mx = -std::numeric_limits<float>::infinity();
      for (index_t j = 0; j < vocab; ++j) {
        if (!allowed(j)) continue;
        SPECDEC_EXPECTS(!std::isnan(x[j]) && x[j] != std::numeric_limits<float>::infinity(), where, "row ", row, " holds ",
                        x[j], " at column ", j, "; expected finite values or -inf");
        mx = x[j] > mx ? x[j] : mx;
      }
      const std::int32_t token = res.tokens[k];
      SPECDEC_EXPECTS(token >= 0 && token < vocab && allowed(token) && x[token] != -std::numeric_limits<float>::infinity(), where,
                      "request ", r, " emitted token ", token, " from row ", row,
                      ", which gives it no probability (masked, -inf or out of range); expected a token of the row's support");
      const double inv_t = 1.0 / static_cast<double>(t);
      double sum = 0.0;
      for (index_t j = 0; j < vocab; ++j)
        if (allowed(j)) sum += std::exp((static_cast<double>(x[j]) - mx) * inv_t);
      const double log_sum = std::log(sum);
      for (index_t j = 0; j < vocab; ++j)
        lp[static_cast<std::size_t>(j)] =
            allowed(j) ? (static_cast<double>(x[j]) - mx) * inv_t - log_sum : -std::numeric_limits<double>::infinity();
      const double own = lp[static_cast<std::size_t>(token)];
      std::int32_t rank = 0;  // vLLM's: (logprobs >= own).sum(), so tied entries share the last place of their tie
      for (index_t j = 0; j < vocab; ++j) rank += lp[static_cast<std::size_t>(j)] >= own ? 1 : 0;
      out.token_ids(at, 0) = token;
      out.logprobs(at, 0) = static_cast<float>(own);
      out.ranks(at) = rank;
      // Top n by (log-probability descending, index ascending): one pass keeping a sorted list of n,
      // which a candidate enters only when it beats the n-th (entries come in index order, so a tie
      // with a kept entry ranks after it).
      std::vector<index_t> best;
      best.reserve(static_cast<std::size_t>(top_n) + 1);
      for (index_t j = 0; j < vocab && top_n > 0; ++j) {
        const double v = lp[static_cast<std::size_t>(j)];
        if (static_cast<index_t>(best.size()) == top_n && !(v > lp[static_cast<std::size_t>(best.back())])) continue;
        auto pos = best.end();
        while (pos != best.begin() && v > lp[static_cast<std::size_t>(*(pos - 1))]) --pos;
        best.insert(pos, j);
        if (static_cast<index_t>(best.size()) > top_n) best.pop_back();
      }
      for (index_t i = 0; i < top_n; ++i) {
        out.token_ids(at, i + 1) = static_cast<std::int32_t>(best[static_cast<std::size_t>(i)]);
        out.logprobs(at, i + 1) = static_cast<float>(lp[static_cast<std::size_t>(best[static_cast<std::size_t>(i)])]);
      }
      ++at;
    }
    reader.recycle();
  }
}

}  // namespace specdec::sampling
