// SPDX-License-Identifier: Apache-2.0
// Logprobs of emitted tokens (sampling/logprobs.hpp) against a plain long-double reference on every
// backend: each token's log-probability from the row it was emitted from, its rank and the row's top n,
// with and without token bitmasks and temperature.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <fstream>
#include <string>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/backend/thrust.hpp>
#include <specdec/grammar/token_bitmask.hpp>
#include <specdec/sampling/logprobs.hpp>

#include <nlohmann/json.hpp>

#include "backend_conformance.hpp"

using specdec::index_t;

TEST_CASE_TEMPLATE("emitted_logprobs: log-probabilities, ranks and top n of the rows the tokens came from", B,
                   SPECDEC_ALL_BACKENDS) {
  conformance::harness<B> h;
  const index_t v = 1000, words = specdec::bitmask_words(v);
  const specdec::draft_tree tree = specdec::make_tree({1, 2, 3, 4, 5}, {-1, 0, 0, 1, 3});
  const index_t n_rows = 2 * tree.size();
  std::mt19937 rng(35);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> x(static_cast<std::size_t>(n_rows * v));
  for (float& e : x) e = std::round(normal(rng) * 16.0f) / 16.0f;  // ties in the top n
  std::vector<std::int32_t> bm(static_cast<std::size_t>(n_rows * words), -1);
  for (index_t r = 0; r < n_rows; ++r)
    for (index_t j = 0; j < v; ++j)
      if ((j * 7 + r) % 3 == 0) specdec::bitmask_set(bm.data() + r * words, static_cast<std::int32_t>(j), false);
  // Two requests: the second's rows follow the first's. Results: request 0 accepted nodes 1, 3 then a
  // final token; request 1 accepted nothing (one token). Emitted tokens are chosen among allowed ones.
  specdec::sampling::speculative_request q0, q1;
  q0.tree = specdec::tree_view(tree);
  q1.tree = specdec::tree_view(tree);
  q1.target_row = tree.size();
  const auto allowed_token = [&](index_t row, std::int32_t from) {
    std::int32_t t = from;
    while (!specdec::bitmask_allows(bm.data() + row * words, t)) ++t;
    return t;
  };
  specdec::sampling::speculative_result r0, r1;
  r0.accepted_nodes = {1, 3};
  r0.tokens = {2, 4, allowed_token(3, 30)};  // the accepted nodes' tokens (allowed by rows 0 and 1), then a final one
  REQUIRE(specdec::bitmask_allows(bm.data(), 2));
  REQUIRE(specdec::bitmask_allows(bm.data() + words, 4));
  r1.tokens = {allowed_token(tree.size(), 40)};
  const std::vector<specdec::sampling::speculative_request> requests = {q0, q1};
  const std::vector<specdec::sampling::speculative_result> results = {r0, r1};
  const std::vector<index_t> rows_of = {0, 1, 3, tree.size()};  // the row each emitted token came from
  auto in = h.up(x);
  for (const bool masked : {false, true})
    for (const float t : {1.0f, 0.7f}) {
      INFO("masked ", masked, " temperature ", t);
      const index_t top_n = 5, total = specdec::sampling::emitted_token_count(results);
      std::vector<std::int32_t> ids(static_cast<std::size_t>(total * (top_n + 1)), -7), ranks(static_cast<std::size_t>(total), -7);
      std::vector<float> lps(static_cast<std::size_t>(total * (top_n + 1)));
      const std::vector<float> temps = {t, t};
      specdec::sampling::emitted_logprobs(
          h.b, in.matrix(n_rows, v), requests, results, temps, top_n,
          {specdec::matrix_view<std::int32_t>(ids.data(), total, top_n + 1), specdec::matrix_view<float>(lps.data(), total, top_n + 1),
           specdec::vector_view<std::int32_t>(ranks.data(), total)},
          masked ? specdec::matrix_view<const std::int32_t>(bm.data(), n_rows, words) : specdec::matrix_view<const std::int32_t>());
      const std::vector<std::int32_t> emitted = {r0.tokens[0], r0.tokens[1], r0.tokens[2], r1.tokens[0]};
      for (index_t k = 0; k < total; ++k) {
        const index_t row = rows_of[static_cast<std::size_t>(k)];
        const float* xr = x.data() + row * v;
        const auto ok = [&](index_t j) { return !masked || specdec::bitmask_allows(bm.data() + row * words, static_cast<std::int32_t>(j)); };
        long double m = -INFINITY, sum = 0;
        for (index_t j = 0; j < v; ++j)
          if (ok(j)) m = std::max<long double>(m, xr[j]);
        for (index_t j = 0; j < v; ++j)
          if (ok(j)) sum += std::exp((static_cast<long double>(xr[j]) - m) / t);
        const auto ref = [&](index_t j) {
          return ok(j) ? static_cast<double>((static_cast<long double>(xr[j]) - m) / t - std::log(sum)) : -INFINITY;
        };
        const std::int32_t tok = emitted[static_cast<std::size_t>(k)];
        CHECK(ids[static_cast<std::size_t>(k * (top_n + 1))] == tok);
        CHECK(std::abs(lps[static_cast<std::size_t>(k * (top_n + 1))] - ref(tok)) <= 2e-6 * (1.0 + std::abs(ref(tok))));
        std::int32_t rank = 0;  // vLLM's: entries >= the token's, itself and its ties included
        for (index_t j = 0; j < v; ++j) rank += ref(j) >= ref(tok) ? 1 : 0;
        CHECK(ranks[static_cast<std::size_t>(k)] == rank);
        std::vector<index_t> order(static_cast<std::size_t>(v));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) { return ref(a) > ref(b); });
        for (index_t i = 0; i < top_n; ++i) {
          const auto want = order[static_cast<std::size_t>(i)];
          CHECK(ids[static_cast<std::size_t>(k * (top_n + 1) + 1 + i)] == want);
          CHECK(std::abs(lps[static_cast<std::size_t>(k * (top_n + 1) + 1 + i)] - ref(want)) <= 2e-6 * (1.0 + std::abs(ref(want))));
        }
      }
    }
  // Bad input names what is wrong.
  std::vector<std::int32_t> ids(4 * 3);
  std::vector<float> lps(4 * 3);
  std::vector<std::int32_t> ranks(4);
  const std::vector<float> temps = {1.0f, 1.0f};
  const specdec::sampling::logprob_outputs o{specdec::matrix_view<std::int32_t>(ids.data(), 4, 3),
                                             specdec::matrix_view<float>(lps.data(), 4, 3),
                                             specdec::vector_view<std::int32_t>(ranks.data(), 4)};
  CHECK_THROWS_WITH_AS(specdec::sampling::emitted_logprobs(h.b, in.matrix(n_rows, v), requests, results, temps, 21, o),
                       "specdec::sampling::emitted_logprobs: top_n = 21; expected 0 <= top_n <= min(20, V)",
                       specdec::invalid_argument);
  CHECK_THROWS_WITH_AS(specdec::sampling::emitted_logprobs(h.b, in.matrix(n_rows, v), requests, results, temps, 3, o),
                       "specdec::sampling::emitted_logprobs: outputs are token_ids [4 x 3], logprobs [4 x 3], ranks [4]; "
                       "expected [4 x 4] twice and [4] (one row per emitted token)",
                       specdec::invalid_argument);
  std::vector<std::int32_t> none(static_cast<std::size_t>(n_rows * words), 0);
  none[0] = 1 << 10;  // row 0 allows token 10 only; request 0's first token is node 1's, 2
  CHECK_THROWS_WITH_AS(specdec::sampling::emitted_logprobs(h.b, in.matrix(n_rows, v), requests, results, temps, 2,
                                                           {specdec::matrix_view<std::int32_t>(ids.data(), 4, 3),
                                                            specdec::matrix_view<float>(lps.data(), 4, 3),
                                                            specdec::vector_view<std::int32_t>(ranks.data(), 4)},
                                                           specdec::matrix_view<const std::int32_t>(none.data(), n_rows, words)),
                       "specdec::sampling::emitted_logprobs: request 0 emitted token 2 from row 0, which gives it no "
                       "probability (masked, -inf or out of range); expected a token of the row's support",
                       specdec::invalid_argument);
}

TEST_CASE_TEMPLATE("emitted_logprobs equals vLLM's compute_logprobs + gather_logprobs: raw and processed modes, masks, ties", B,
                   SPECDEC_ALL_BACKENDS) {
  // tests/data/logprobs/vllm.json, from tools/goldens/logprobs.py running vLLM's own functions.
  conformance::harness<B> h;
  std::ifstream f(SPECDEC_TEST_DATA_DIR "/logprobs/vllm.json");
  REQUIRE(f.good());
  const nlohmann::json g = nlohmann::json::parse(f);
  const index_t v = g["vocab"].get<index_t>(), words = g["words"].get<index_t>();
  int tied_ranks = 0;
  for (const auto& c : g["cases"]) {
    const index_t n = c["n"].get<index_t>();
    const std::int32_t token = c["token"].get<std::int32_t>();
    std::vector<float> x;
    for (const auto& b : c["logits"]) x.push_back(std::bit_cast<float>(b.get<std::uint32_t>()));
    const auto mask = c["mask"].get<std::vector<std::int32_t>>();
    const specdec::draft_tree tree = specdec::make_tree({0}, {-1}, v);
    specdec::sampling::speculative_request q;
    q.tree = specdec::tree_view(tree);
    specdec::sampling::speculative_result res;
    res.tokens = {token};
    const std::vector<specdec::sampling::speculative_request> requests = {q};
    const std::vector<specdec::sampling::speculative_result> results = {res};
    auto rows = h.up(x);
    for (const char* mode : {"raw", "processed"}) {
      INFO("n ", n, " temperature ", c["temperature"].get<float>(), " mode ", mode);
      const bool processed = std::string(mode) == "processed";
      const std::vector<float> t = {processed ? c["temperature"].get<float>() : 1.0f};
      std::vector<std::int32_t> ids(static_cast<std::size_t>(n + 1)), rank(1);
      std::vector<float> lps(static_cast<std::size_t>(n + 1));
      specdec::sampling::emitted_logprobs(h.b, rows.matrix(1, v), requests, results, t, n,
                                          {specdec::matrix_view<std::int32_t>(ids.data(), 1, n + 1),
                                           specdec::matrix_view<float>(lps.data(), 1, n + 1),
                                           specdec::vector_view<std::int32_t>(rank.data(), 1)},
                                          specdec::matrix_view<const std::int32_t>(mask.data(), 1, words));
      const auto& want = c[mode];
      CHECK(ids == want["token_ids"].get<std::vector<std::int32_t>>());
      CHECK(rank[0] == want["rank"].get<std::int32_t>());
      tied_ranks += want["rank"].get<std::int32_t>() > 1 && ids[0] != ids[std::min<std::size_t>(1, ids.size() - 1)];
      // vLLM's are float32 log_softmax (torch's CPU kernel); specdec's sums in double: within a few
      // float32 ulps of the larger magnitude.
      for (index_t i = 0; i <= n; ++i) {
        const float w = std::bit_cast<float>(want["logprobs"][static_cast<std::size_t>(i)].get<std::uint32_t>());
        CHECK_MESSAGE(std::abs(lps[static_cast<std::size_t>(i)] - w) <= 4e-7f * (1.0f + std::abs(w)), "entry ", i, ": ",
                      lps[static_cast<std::size_t>(i)], " vs vLLM's ", w);
      }
    }
  }
  CHECK(tied_ranks > 10);
}
