// SPDX-License-Identifier: Apache-2.0
// The batched verifiers (specdec/sampling/batch.hpp) on every backend against the request-based
// verifiers run on the host: tokens, accepted nodes, counts, uniforms consumed, re-tests and final
// distributions bit for bit, over random trees and chains, every option, variable node counts, caps,
// bonus tokens, Philox and supplied uniforms; the same with 4-thread teams (the cooperative row
// passes split differently, the results may not change); and the errors, named.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/backend/thrust.hpp>
#include <specdec/interop/sglang.hpp>
#include <specdec/interop/sglang_sampling.hpp>
#include <specdec/interop/vllm.hpp>
#include <specdec/grammar/token_bitmask.hpp>
#include <specdec/sampling/batch.hpp>
#include <specdec/sampling/batch_penalties.hpp>
#include <specdec/sampling/bitmask.hpp>
#include <specdec/sampling/distribution.hpp>
#include <specdec/sampling/randomness.hpp>
#include <specdec/sampling/greedy.hpp>
#include <specdec/sampling/speculative.hpp>
#include <specdec/sampling/tree_coin.hpp>
#include <specdec/tree/tree.hpp>

#include "backend_conformance.hpp"
#include "team_backends.hpp"

using specdec::index_t;
namespace sampling = specdec::sampling;

namespace {

using conformance::error_of;

/// A batch on the host, with what the request-based verifiers need to check it.
struct batch_case {
  index_t batch = 0, nodes = 0, vocab = 0, u_cols = 0;
  std::vector<std::int32_t> tokens, parents, node_counts, max_accepted, bonus;
  std::vector<index_t> target_rows, draft_rows, noise_rows;
  std::vector<float> target, draft, noise;
  std::vector<double> uniforms;
  std::vector<specdec::philox_stream> streams;
  std::vector<std::uint64_t> offsets;
  index_t target_count = 0, draft_count = 0, noise_count = 0;
  bool philox = false;
};

struct case_shape {
  index_t batch = 5, nodes = 10, vocab = 2500;
  bool chain = false, with_draft_rows = false, variable_counts = false, shuffled_rows = false, caps = false,
       bonus = false, philox = false, noise = false, open_closed = false;
  float accept_bias = 0.6f;  // how often a draft token is its parent's most likely token
};

batch_case make_case(std::uint64_t seed, const case_shape& s) {
  const specdec::philox_stream rng{seed, 11};
  std::uint64_t at = 0;
  const auto uni = [&] { return rng.uniform_double(at++); };
  const auto pick = [&](index_t n) { return static_cast<index_t>(uni() * static_cast<double>(n)); };
  batch_case c;
  c.batch = s.batch;
  c.nodes = s.nodes;
  c.vocab = s.vocab;
  c.target_count = s.batch * s.nodes + (s.shuffled_rows ? 3 : 0);
  // Rows with one favourite token of probability ~0.4 over a flat tail, as a target's rows are:
  // deterministic drafts of the favourite are accepted often, others rarely.
  c.target = conformance::random_logits(seed + 1, c.target_count, s.vocab, 2.0f).data;
  for (index_t row = 0; row < c.target_count; ++row) {
    float* x = c.target.data() + row * s.vocab;
    x[pick(s.vocab)] += 8.0f;
    double total = 0.0;
    for (index_t j = 0; j < s.vocab; ++j) total += std::exp(static_cast<double>(x[j]));
    for (index_t j = 0; j < s.vocab; ++j) x[j] = static_cast<float>(std::exp(static_cast<double>(x[j])) / total);
  }
  c.tokens.assign(static_cast<std::size_t>(s.batch * s.nodes), 0);
  c.parents.assign(c.tokens.size(), -1);
  for (index_t r = 0; r < s.batch; ++r) {
    const index_t count = s.variable_counts ? 1 + pick(s.nodes) : s.nodes;
    c.node_counts.push_back(static_cast<std::int32_t>(count));
    c.target_rows.push_back(s.shuffled_rows ? (s.batch - 1 - r) * s.nodes + 3 : r * s.nodes);
    c.max_accepted.push_back(s.caps ? static_cast<std::int32_t>(pick(4)) - 1 : -1);
    c.bonus.push_back(s.bonus && uni() < 0.5 ? static_cast<std::int32_t>(pick(s.vocab)) : -1);
    for (index_t i = 0; i < s.nodes; ++i) {
      const auto k = static_cast<std::size_t>(r * s.nodes + i);
      if (i == 0) {
        c.tokens[k] = static_cast<std::int32_t>(pick(s.vocab));  // the committed token, never read
        continue;
      }
      const index_t parent = s.chain ? i - 1 : (uni() < 0.5 ? i - 1 : pick(i));
      c.parents[k] = static_cast<std::int32_t>(parent);
      // Often the parent's most likely token (acceptances), sometimes a repeat of a sibling's.
      const float* p = c.target.data() + (c.target_rows.back() + parent) * s.vocab;
      std::int32_t best = 0;
      for (index_t j = 1; j < s.vocab; ++j) best = p[j] > p[best] ? static_cast<std::int32_t>(j) : best;
      c.tokens[k] = uni() < s.accept_bias ? best : static_cast<std::int32_t>(pick(s.vocab));
    }
  }
  if (s.with_draft_rows) {
    c.draft_count = s.batch * s.nodes;
    c.draft = conformance::random_probs(seed + 2, c.draft_count, s.vocab, 5.0f).data;
    c.draft_rows.assign(c.tokens.size(), -1);
    for (index_t k = 0; k < s.batch * s.nodes; ++k)
      if (k % s.nodes != 0 && uni() < 0.8) c.draft_rows[static_cast<std::size_t>(k)] = pick(c.draft_count);
  }
  if (s.noise) {
    c.noise_count = s.batch + 1;
    c.noise = conformance::uniform_floats(seed + 3, static_cast<std::size_t>(c.noise_count * s.vocab), 0.01f, 4.0f);
    for (index_t r = 0; r < s.batch; ++r) c.noise_rows.push_back((r * 7 + 1) % c.noise_count);
  }
  c.u_cols = 2 * s.nodes + 1;
  c.philox = s.philox;
  if (s.philox) {
    for (index_t r = 0; r < s.batch; ++r) {
      c.streams.push_back(specdec::philox_stream{seed * 31 + static_cast<std::uint64_t>(r), 5});
      c.offsets.push_back(static_cast<std::uint64_t>(pick(100)));
    }
  } else {
    for (index_t k = 0; k < s.batch * c.u_cols; ++k) c.uniforms.push_back(s.open_closed ? 1.0 - uni() : uni());
  }
  return c;
}

/// The request-based form of the batch (the oracle), over the case's host vectors.
struct request_form {
  std::vector<specdec::draft_tree> trees;
  std::vector<std::vector<index_t>> draft_rows;
  std::vector<sampling::speculative_request> requests;
};

request_form requests_of(const batch_case& c) {
  request_form f;
  f.trees.reserve(static_cast<std::size_t>(c.batch));
  f.draft_rows.resize(static_cast<std::size_t>(c.batch));
  for (index_t r = 0; r < c.batch; ++r) {
    const auto n = static_cast<std::size_t>(c.node_counts[static_cast<std::size_t>(r)]);
    const auto base = static_cast<std::ptrdiff_t>(r * c.nodes);
    f.trees.push_back(specdec::make_tree(std::vector<std::int32_t>(c.tokens.begin() + base, c.tokens.begin() + base + static_cast<std::ptrdiff_t>(n)),
                                          std::vector<std::int32_t>(c.parents.begin() + base, c.parents.begin() + base + static_cast<std::ptrdiff_t>(n))));
    if (!c.draft_rows.empty())
      f.draft_rows[static_cast<std::size_t>(r)].assign(c.draft_rows.begin() + base, c.draft_rows.begin() + base + static_cast<std::ptrdiff_t>(n));
  }
  for (index_t r = 0; r < c.batch; ++r) {
    const auto rs = static_cast<std::size_t>(r);
    sampling::speculative_request q;
    q.tree = f.trees[rs];
    q.target_row = c.target_rows[rs];
    q.draft_rows = f.draft_rows[rs];
    q.uniforms = c.philox ? sampling::uniform_stream::philox(c.streams[rs], c.offsets[rs])
                          : sampling::uniform_stream::values(std::span<const double>(c.uniforms.data() + r * c.u_cols,
                                                                                     static_cast<std::size_t>(c.u_cols)));
    q.max_accepted = c.max_accepted[rs];
    if (c.bonus[rs] >= 0) q.bonus_token = c.bonus[rs];
    q.noise_row = c.noise_rows.empty() ? -1 : c.noise_rows[rs];
    f.requests.push_back(q);
  }
  return f;
}

/// Outputs downloaded from a backend.
struct got_outputs {
  std::vector<std::int32_t> tokens, accepted, nodes, consumed, retest;
  std::vector<float> finals;
};

template <class B>
struct batch_on {
  using space = typename B::memory_space;
  template <class T>
  using buf = typename B::template buffer<T>;
  buf<std::int32_t> tokens, parents, counts, caps, bonus;
  buf<index_t> target_rows, draft_rows, noise_rows;
  buf<float> target, draft, noise;
  buf<double> uniforms;
  buf<specdec::philox_stream> streams;
  buf<std::uint64_t> offsets;
  buf<std::int32_t> out_tokens, out_accepted, out_nodes, out_consumed, out_retest;
  buf<float> out_finals;
  index_t width = 0;

  template <class T>
  static buf<T> up(B& b, const std::vector<T>& v) {
    return b.upload(std::span<const T>(v));
  }

  batch_on(B& b, const batch_case& c, bool finals) {
    tokens = up(b, c.tokens);
    parents = up(b, c.parents);
    counts = up(b, c.node_counts);
    caps = up(b, c.max_accepted);
    bonus = up(b, c.bonus);
    target_rows = up(b, c.target_rows);
    draft_rows = up(b, c.draft_rows);
    noise_rows = up(b, c.noise_rows);
    target = up(b, c.target);
    draft = up(b, c.draft);
    noise = up(b, c.noise);
    uniforms = up(b, c.uniforms);
    streams = up(b, c.streams);
    offsets = up(b, c.offsets);
    width = c.nodes;
    out_tokens = b.template allocate<std::int32_t>(c.batch * width);
    out_accepted = b.template allocate<std::int32_t>(c.batch);
    out_nodes = b.template allocate<std::int32_t>(c.batch * (width - 1));
    out_consumed = b.template allocate<std::int32_t>(c.batch);
    out_retest = b.template allocate<std::int32_t>(c.batch);
    out_finals = b.template allocate<float>(finals ? c.batch * c.vocab : 0);
  }

  sampling::tree_batch<space> view(const batch_case& c) {
    sampling::tree_batch<space> t;
    t.tokens = tokens.matrix(c.batch, c.nodes);
    t.parents = parents.matrix(c.batch, c.nodes);
    t.node_counts = counts.view();
    t.target_rows = target_rows.view();
    if (!c.draft_rows.empty()) t.draft_rows = draft_rows.matrix(c.batch, c.nodes);
    t.max_accepted = caps.view();
    t.bonus_tokens = bonus.view();
    if (!c.noise_rows.empty()) t.noise_rows = noise_rows.view();
    if (!c.uniforms.empty()) t.uniforms = uniforms.matrix(c.batch, c.u_cols);
    if (!c.streams.empty()) {
      t.uniform_streams = streams.view();
      t.uniform_offsets = offsets.view();
    }
    return t;
  }
  sampling::speculative_rows<space> rows(const batch_case& c) {
    sampling::speculative_rows<space> r;
    r.target = target.matrix(c.target_count, c.vocab);
    if (c.draft_count > 0) r.draft = draft.matrix(c.draft_count, c.vocab);
    if (c.noise_count > 0) r.exponential_noise = noise.matrix(c.noise_count, c.vocab);
    return r;
  }
  sampling::verify_outputs<space> outputs(const batch_case& c) {
    sampling::verify_outputs<space> o;
    o.tokens = out_tokens.matrix(c.batch, width);
    o.accepted = out_accepted.view();
    o.accepted_nodes = out_nodes.matrix(c.batch, width - 1);
    o.uniforms_consumed = out_consumed.view();
    o.retest_accepted = out_retest.view();
    if (out_finals.size() > 0) o.final_distributions = out_finals.matrix(c.batch, c.vocab);
    return o;
  }
  got_outputs fetch(B& b) {
    got_outputs g;
    g.tokens = b.download(out_tokens.view());
    g.accepted = b.download(out_accepted.view());
    g.nodes = b.download(out_nodes.view());
    g.consumed = b.download(out_consumed.view());
    g.retest = b.download(out_retest.view());
    if (out_finals.size() > 0) g.finals = b.download(out_finals.view());
    return g;
  }
};

/// What the request-based verifier decided, in the batch layout.
got_outputs expected_of(const std::vector<sampling::speculative_result>& results, const batch_case& c, bool finals) {
  got_outputs e;
  const auto w = static_cast<std::size_t>(c.nodes);
  e.tokens.assign(results.size() * w, -1);
  e.nodes.assign(results.size() * (w - 1), -1);
  if (finals) e.finals.assign(results.size() * static_cast<std::size_t>(c.vocab), 0.0f);
  for (std::size_t r = 0; r < results.size(); ++r) {
    const auto& x = results[r];
    std::copy(x.tokens.begin(), x.tokens.end(), e.tokens.begin() + static_cast<std::ptrdiff_t>(r * w));
    std::copy(x.accepted_nodes.begin(), x.accepted_nodes.end(), e.nodes.begin() + static_cast<std::ptrdiff_t>(r * (w - 1)));
    e.accepted.push_back(static_cast<std::int32_t>(x.accepted_nodes.size()));
    e.consumed.push_back(static_cast<std::int32_t>(x.uniforms_consumed));
    e.retest.push_back(static_cast<std::int32_t>(x.retest_accepted));
    if (finals && !x.final_distribution.empty())
      std::copy(x.final_distribution.begin(), x.final_distribution.end(),
                e.finals.begin() + static_cast<std::ptrdiff_t>(r * static_cast<std::size_t>(c.vocab)));
  }
  return e;
}

void check_same(const got_outputs& got, const got_outputs& want) {
  CHECK(got.tokens == want.tokens);
  CHECK(got.accepted == want.accepted);
  CHECK(got.nodes == want.nodes);
  CHECK(got.consumed == want.consumed);
  CHECK(got.retest == want.retest);
  REQUIRE(got.finals.size() == want.finals.size());
  for (std::size_t i = 0; i < got.finals.size(); ++i)
    if (got.finals[i] != want.finals[i]) {
      INFO("final distribution entry ", i, ": got ", got.finals[i], ", want ", want.finals[i]);
      CHECK(got.finals[i] == want.finals[i]);
      break;
    }
}

struct configuration {
  const char* name;
  case_shape shape;
  sampling::speculative_options options;
  bool finals = false;
};

std::vector<configuration> configurations() {
  using sampling::acceptance_test;
  using sampling::final_draw;
  std::vector<configuration> all;
  const auto add = [&](const char* name, case_shape s, sampling::speculative_options o, bool finals = false) {
    all.push_back({name, s, o, finals});
  };
  add("deterministic tree", {}, {});
  add("deterministic tree, strict product, (0, 1]", {.open_closed = true},
      {.test = acceptance_test::strict_product, .range = specdec::sampling::uniform_range::open_closed}, true);
  add("draft rows, variable counts, shuffled rows", {.with_draft_rows = true, .variable_counts = true, .shuffled_rows = true},
      {}, true);
  add("draft rows, lenience 0.6, Philox", {.with_draft_rows = true, .philox = true}, {.lenience = 0.6f}, true);
  add("deterministic, lenience 0.5, caps, bonus", {.caps = true, .bonus = true}, {.lenience = 0.5f}, true);
  add("exponential race, draft rows", {.with_draft_rows = true, .noise = true}, {.draw = final_draw::exponential_race}, true);
  add("chain with FlashInfer re-tests", {.chain = true, .with_draft_rows = true, .accept_bias = 0.8f},
      {.flashinfer_retest = true});
  add("chain, rarely accepted, token-zero fallback", {.chain = true, .accept_bias = 0.1f},
      {.fallback = specdec::empty_residual::token_zero});
  add("large vocabulary, odd size", {.batch = 3, .nodes = 7, .vocab = 5003, .with_draft_rows = true}, {}, true);
  add("one node per request", {.batch = 4, .nodes = 1}, {}, true);
  return all;
}


}  // namespace

TEST_CASE_TEMPLATE("batched stochastic verification equals verify_speculative per request", B, SPECDEC_TEAM_BACKENDS) {
  specdec::eigen host;
  std::uint64_t seed = 100;
  for (const configuration& cfg : configurations()) {
    // The cases must exercise both branches of the walk: acceptances, and rejections followed by a
    // residual (more uniforms read than one per accepted token plus the final draw).
    int accepted_some = 0, rejected_some = 0;
    for (int repeat = 0; repeat < 3; ++repeat, ++seed) {
      const std::string name = cfg.name;
      CAPTURE(name);
      CAPTURE(seed);
      const batch_case c = make_case(seed, cfg.shape);
      request_form f = requests_of(c);
      sampling::speculative_rows<> host_rows{
          specdec::matrix_view<const float>(c.target.data(), c.target_count, c.vocab),
          specdec::matrix_view<const float>(c.draft.data(), c.draft_count, c.vocab),
          specdec::matrix_view<const float>(c.noise.data(), c.noise_count, c.vocab)};
      sampling::speculative_options o = cfg.options;
      o.keep_final_distribution = cfg.finals;
      const auto want = expected_of(sampling::verify_speculative(host, host_rows, f.requests, o), c, cfg.finals);
      B b;
      batch_on<B> on(b, c, cfg.finals);
      sampling::verify_speculative(b, on.rows(c), on.view(c), cfg.options, on.outputs(c));
      const got_outputs got = on.fetch(b);
      check_same(got, want);
      for (index_t r = 0; r < c.batch; ++r) {
        accepted_some += got.accepted[static_cast<std::size_t>(r)] > 0 ? 1 : 0;
        rejected_some += got.consumed[static_cast<std::size_t>(r)] > got.accepted[static_cast<std::size_t>(r)] + 1 ? 1 : 0;
      }
    }
    if (cfg.shape.nodes > 1) {
      CHECK(accepted_some > 0);
      CHECK(rejected_some > 0);
    }
  }
}

namespace half_batch {

/// Rows of `rows` rounded to E, each brought back within 2e-5 of 1 by moving its largest entries onto
/// the rounding's residual (so that the float rows of the same values pass the float checks too);
/// `widened` gets those values as floats.
template <class E>
std::vector<E> rounded_rows(const std::vector<float>& rows, index_t v, std::vector<float>& widened) {
  std::vector<E> out(rows.size());
  for (std::size_t j = 0; j < rows.size(); ++j) out[j] = specdec::narrow<E>(rows[j]);
  for (std::size_t r = 0; v > 0 && r < rows.size() / static_cast<std::size_t>(v); ++r) {
    E* row = out.data() + r * static_cast<std::size_t>(v);
    std::vector<index_t> order(static_cast<std::size_t>(v));
    for (index_t j = 0; j < v; ++j) order[static_cast<std::size_t>(j)] = j;
    std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) { return specdec::widen(row[a]) > specdec::widen(row[b]); });
    for (std::size_t i = 0; i < order.size() && i < 200; ++i) {
      double total = 0.0;
      for (index_t j = 0; j < v; ++j) total += static_cast<double>(specdec::widen(row[j]));
      if (std::abs(total - 1.0) < 2e-5) break;
      E& e = row[order[i]];
      e = specdec::narrow<E>(std::max(0.0f, specdec::widen(e) + static_cast<float>(1.0 - total)));
    }
  }
  widened.resize(out.size());
  for (std::size_t j = 0; j < out.size(); ++j) widened[j] = specdec::widen(out[j]);
  return out;
}

template <class B, class T, class D>
void check(const configuration& cfg, std::uint64_t seed, int& compared) {
  batch_case c = make_case(seed, cfg.shape);
  std::vector<float> target_f, draft_f;
  const std::vector<T> target = rounded_rows<T>(c.target, c.vocab, target_f);
  const std::vector<D> draft = rounded_rows<D>(c.draft, c.vocab, draft_f);
  c.target = target_f;  // the float run reads the widened values
  c.draft = draft_f;
  B b;
  batch_on<B> want_on(b, c, cfg.finals);
  sampling::verify_speculative(b, want_on.rows(c), want_on.view(c), cfg.options, want_on.outputs(c));
  const got_outputs want = want_on.fetch(b);
  batch_on<B> got_on(b, c, cfg.finals);
  auto target_d = b.upload(std::span<const T>(target));
  auto draft_d = b.upload(std::span<const D>(draft));
  const auto float_rows = got_on.rows(c);
  sampling::speculative_rows<typename B::memory_space, T, D> rows;
  rows.target = target_d.matrix(c.target_count, c.vocab);
  if (c.draft_count > 0) rows.draft = draft_d.matrix(c.draft_count, c.vocab);
  rows.exponential_noise = float_rows.exponential_noise;
  sampling::verify_speculative(b, rows, got_on.view(c), cfg.options, got_on.outputs(c));
  check_same(got_on.fetch(b), want);
  ++compared;
}

}  // namespace half_batch

TEST_CASE_TEMPLATE("batched stochastic verification over bf16 / fp16 rows gives the float rows' outputs", B, SPECDEC_TEAM_BACKENDS) {
  std::uint64_t seed = 700;
  int compared = 0;
  for (const configuration& cfg : configurations()) {
    const std::string name = cfg.name;
    CAPTURE(name);
    CAPTURE(seed);
    half_batch::check<B, specdec::bfloat16, specdec::bfloat16>(cfg, seed++, compared);
    half_batch::check<B, specdec::float16, float>(cfg, seed++, compared);
    half_batch::check<B, float, specdec::bfloat16>(cfg, seed++, compared);
  }
  CHECK(compared == 3 * static_cast<int>(configurations().size()));
}

TEST_CASE("the team walk of a staged chunk gives walk_chunk's token, targets on running totals included") {
  // walk_staged decides from segment totals within a slack and falls back to walk_chunk near a tie;
  // its answer must be walk_chunk's for every target: targets equal to a running total (always the
  // fallback: the entry may cross and none surely does) and one ulp either side, targets between
  // totals (decided from the segments), before the first entry and past the last (none crosses).
  using job_t = sampling::detail::speculative_batch_job<specdec::host_space>;
  job_t job{};
  const index_t vocab = 5000, begin = 3 * 1024;
  std::vector<float> rows(static_cast<std::size_t>(vocab), 0.0f);
  job.target = specdec::matrix_view<const float>(rows.data(), 1, vocab);
  std::vector<std::byte> scratch(job.scratch_bytes() + 64);
  const job_t::layout l = job.carve(scratch.data());
  const specdec::philox_stream rng{77, 3};
  std::uint64_t at = 0;
  const specdec::detail::serial_team team;
  int checked = 0;
  for (const index_t end : {begin + 1024, begin + 517, begin + 1}) {
    for (int trial = 0; trial < 6; ++trial) {
      const index_t n = end - begin;
      for (index_t i = 0; i < n; ++i) {
        const double u = rng.uniform_double(at++);
        // zeros, tiny and ordinary entries, and (trial 5) a chunk of zeros
        l.stage[i] = trial == 5 ? 0.0f : u < 0.2 ? 0.0f : u < 0.3 ? 1e-30f : static_cast<float>(rng.uniform_double(at++));
      }
      const double before = trial % 2 == 0 ? 0.0 : 0.3125 * trial;
      double chunk = 0.0;
      std::vector<double> totals;  // walk_chunk's running totals
      double running = before;
      for (index_t i = 0; i < n; ++i)
        if (l.stage[i] > 0.0f) {
          chunk += l.stage[i];
          running += static_cast<double>(l.stage[i]);
          totals.push_back(running);
        }
      std::vector<double> targets = {before, before - 1.0, running, running + 1.0, before + 0.5 * chunk};
      for (std::size_t k = 0; k < totals.size(); k += 1 + totals.size() / 40) {
        targets.push_back(totals[k]);
        targets.push_back(std::nextafter(totals[k], 0.0));
        targets.push_back(std::nextafter(totals[k], 1e300));
      }
      for (const double target : targets) {
        const job_t::staged_source source{l.stage, begin};
        const std::int32_t want = specdec::detail::walk_chunk(source, begin, end, before, target);
        CHECK_MESSAGE(job.walk_staged(team, l, begin, end, before, chunk, target) == want,
                      "end ", end, " trial ", trial, " target ", target);
        ++checked;
      }
    }
  }
  CHECK(checked > 300);
}

TEST_CASE_TEMPLATE("batched greedy verification equals verify_greedy per request", B, SPECDEC_TEAM_BACKENDS) {
  std::uint64_t seed = 900;
  for (const case_shape shape : {case_shape{}, case_shape{.variable_counts = true, .shuffled_rows = true, .caps = true, .bonus = true},
                                 case_shape{.chain = true, .accept_bias = 0.9f}}) {
    for (int repeat = 0; repeat < 3; ++repeat, ++seed) {
      CAPTURE(seed);
      const batch_case c = make_case(seed, shape);
      request_form f = requests_of(c);
      std::vector<std::int32_t> argmax;
      for (index_t r = 0; r < c.target_count; ++r) {
        const float* p = c.target.data() + r * c.vocab;
        std::int32_t best = 0;
        for (index_t j = 1; j < c.vocab; ++j) best = p[j] > p[best] ? static_cast<std::int32_t>(j) : best;
        argmax.push_back(best);
      }
      const auto want = expected_of(sampling::verify_greedy(argmax, c.vocab, f.requests), c, true);
      B b;
      batch_on<B> on(b, c, true);
      auto got_argmax = b.template allocate<std::int32_t>(c.target_count);
      sampling::verify_greedy(b, on.target.matrix(c.target_count, c.vocab), on.view(c), on.outputs(c), got_argmax.view());
      CHECK(b.download(got_argmax.view()) == argmax);
      check_same(on.fetch(b), want);
    }
  }
}

/// Logits and bitmasks for the masked greedy walk over a case's trees: the case's probabilities as
/// logits (some entries -inf), and per row a mask that usually allows the row's favourite token (so
/// drafts are accepted), forbids a random 30 % of the rest, sometimes forbids the favourite (the
/// largest allowed logit is then another token), ties the maximum on some rows, and zeroes a few non-root rows whole (a terminated
/// grammar). Bits past V in the last word are set: they must be ignored.
struct masked_rows {
  std::vector<float> logits;
  std::vector<std::int32_t> masks;
  index_t words = 0;
};

masked_rows masked_rows_of(const batch_case& c, std::uint64_t seed) {
  const specdec::philox_stream rng{seed, 19};
  std::uint64_t at = 0;
  const auto uni = [&] { return rng.uniform_double(at++); };
  masked_rows m;
  m.words = specdec::bitmask_words(c.vocab);
  m.logits.resize(c.target.size());
  for (std::size_t k = 0; k < c.target.size(); ++k)
    m.logits[k] = uni() < 0.02 ? -std::numeric_limits<float>::infinity() : std::log(c.target[k]);
  m.masks.assign(static_cast<std::size_t>(c.target_count * m.words), -1);
  std::vector<bool> root(static_cast<std::size_t>(c.target_count), false);
  for (const index_t r : c.target_rows) root[static_cast<std::size_t>(r)] = true;
  for (index_t row = 0; row < c.target_count; ++row) {
    std::int32_t* mask = m.masks.data() + row * m.words;
    const float* x = m.logits.data() + row * c.vocab;
    std::int32_t best = 0;
    for (index_t j = 1; j < c.vocab; ++j) best = x[j] > x[best] ? static_cast<std::int32_t>(j) : best;
    if (uni() < 0.4) {  // a tie for the maximum, before or after it: the lower index must win
      float* y = m.logits.data() + row * c.vocab;
      const auto twin = static_cast<index_t>(uni() * static_cast<double>(c.vocab));
      y[twin] = y[best];
      best = twin < best ? static_cast<std::int32_t>(twin) : best;
    }
    const double shape = uni();
    if (shape < 0.08 && !root[static_cast<std::size_t>(row)]) {
      std::fill(mask, mask + m.words, 0);
      continue;
    }
    for (index_t j = 0; j < c.vocab; ++j)
      if (uni() < 0.3) specdec::bitmask_set(mask, static_cast<std::int32_t>(j), false);
    specdec::bitmask_set(mask, best, shape > 0.25);
  }
  return m;
}

TEST_CASE_TEMPLATE("batched greedy from logits under bitmasks equals the request-based masked verify_greedy", B,
                   SPECDEC_TEAM_BACKENDS) {
  specdec::eigen host;
  std::uint64_t seed = 1300;
  int terminated = 0, accepted = 0;
  for (const case_shape shape : {case_shape{}, case_shape{.variable_counts = true, .shuffled_rows = true, .caps = true, .bonus = true},
                                 case_shape{.chain = true, .accept_bias = 0.9f},
                                 case_shape{.batch = 3, .nodes = 7, .vocab = 5003, .accept_bias = 0.8f},
                                 case_shape{.batch = 4, .nodes = 1}}) {
    for (int repeat = 0; repeat < 3; ++repeat, ++seed) {
      CAPTURE(seed);
      const batch_case c = make_case(seed, shape);
      const masked_rows m = masked_rows_of(c, seed);
      request_form f = requests_of(c);
      const specdec::matrix_view<const float> host_logits(m.logits.data(), c.target_count, c.vocab);
      const specdec::matrix_view<const std::int32_t> host_masks(m.masks.data(), c.target_count, m.words);
      const auto results = sampling::verify_greedy(host, host_logits, f.requests, host_masks);
      const auto want = expected_of(results, c, true);
      for (std::size_t r = 0; r < results.size(); ++r) {
        terminated += results[r].tokens.size() == results[r].accepted_nodes.size() ? 1 : 0;
        accepted += results[r].accepted_nodes.empty() ? 0 : 1;
      }
      B b;
      batch_on<B> on(b, c, true);
      auto logits = b.upload(std::span<const float>(m.logits));
      auto masks = b.upload(std::span<const std::int32_t>(m.masks));
      sampling::verify_greedy(b, logits.matrix(c.target_count, c.vocab), masks.matrix(c.target_count, m.words), on.view(c),
                              on.outputs(c));
      check_same(on.fetch(b), want);

      // Unconstrained, visited rows only: the argmax form's outputs.
      batch_on<B> plain(b, c, true);
      auto argmax = b.template allocate<std::int32_t>(c.target_count);
      sampling::verify_greedy(b, logits.matrix(c.target_count, c.vocab), on.view(c), on.outputs(c), argmax.view());
      sampling::verify_greedy(b, logits.matrix(c.target_count, c.vocab), plain.view(c), plain.outputs(c));
      check_same(plain.fetch(b), on.fetch(b));
    }
  }
  CHECK(terminated > 0);  // walks that reached a terminated grammar
  CHECK(accepted > 0);
}

TEST_CASE_TEMPLATE("batched greedy under bitmasks names what is wrong", B, SPECDEC_ALL_BACKENDS) {
  // One request, a chain of 3 nodes over V = 40; node 1 (token 7) is row 0's largest allowed logit.
  batch_case c = make_case(5, {.batch = 1, .nodes = 3, .vocab = 40, .chain = true});
  std::vector<float> logits(3 * 40, 0.0f);
  logits[7] = 2.0f;        // row 0: token 7
  logits[40 + 9] = 2.0f;   // row 1: token 9
  logits[80 + 3] = 2.0f;   // row 2: token 3
  c.tokens = {0, 7, 9};
  std::vector<std::int32_t> masks(3 * 2, -1);
  const auto run = [&](const std::vector<float>& x, const std::vector<std::int32_t>& m, index_t words = 2) {
    std::string error = error_of([&] {
      B b;
      batch_on<B> on(b, c, false);
      auto xs = b.upload(std::span<const float>(x));
      auto ms = b.upload(std::span<const std::int32_t>(m));
      sampling::verify_greedy(b, xs.matrix(3, 40), ms.matrix(static_cast<index_t>(m.size()) / words, words), on.view(c),
                              on.outputs(c));
      const auto got = on.fetch(b);
      CHECK(got.tokens == std::vector<std::int32_t>{7, 9, 3});
    });
    return error;
  };
  const std::string at = "specdec::sampling::verify_greedy: ";
  CHECK(run(logits, masks) == "");
  {
    std::vector<float> x = logits;
    x[40 + 20] = std::numeric_limits<float>::quiet_NaN();
    CHECK(run(x, masks) == at + "target_logits row 1 contains NaN; expected finite values (-inf is allowed and masks a token)");
    specdec::bitmask_set(masks.data() + 2, 20, false);  // a NaN the mask forbids is never read
    CHECK(run(x, masks) == "");
    masks[2] = masks[3] = -1;
  }
  {
    std::vector<std::int32_t> m = masks;
    m[0] = m[1] = 0;
    CHECK(run(logits, m) == at + "request 0 node 0: bitmask row 0 allows no token; expected at least one (node 0's row "
                                 "constrains the first token emitted)");
  }
  {
    std::vector<float> x = logits;
    for (index_t j = 0; j < 40; ++j) x[static_cast<std::size_t>(80 + j)] = j % 2 == 0 ? -std::numeric_limits<float>::infinity() : 1.0f;
    std::vector<std::int32_t> m = masks;
    m[4] = m[5] = 0x55555555;  // row 2 allows the even tokens only, all -inf
    CHECK(run(x, m) == at + "request 0 node 2: bitmask row 2 allows tokens but every one has logit -inf; expected at least one finite");
  }
  CHECK(run(logits, std::vector<std::int32_t>(3, -1), 1) ==
        at + "bitmask has 1 words per row; expected at least ceil(V / 32) = 2 for V = 40");
  CHECK(run(logits, std::vector<std::int32_t>(4, -1)) == at + "bitmask has 2 rows; expected one per target row (3)");
}

TEST_CASE_TEMPLATE("apply_token_bitmask on a backend equals the host form", B, SPECDEC_TEAM_BACKENDS) {
  for (const index_t vocab : {index_t{1}, index_t{31}, index_t{64}, index_t{5003}}) {
    CAPTURE(vocab);
    const index_t rows = 6, words = specdec::bitmask_words(vocab) + 1;  // a wider bitmask, as xgrammar allows
    const auto logits = conformance::random_logits(40 + static_cast<std::uint64_t>(vocab), rows, vocab).data;
    std::vector<std::int32_t> masks(static_cast<std::size_t>(rows * words));
    const specdec::philox_stream rng{static_cast<std::uint64_t>(vocab), 3};
    for (std::size_t k = 0; k < masks.size(); ++k) {
      const double u = rng.uniform_double(k);
      masks[k] = u < 0.2 ? -1 : u < 0.3 ? 0 : static_cast<std::int32_t>(rng.word(k + 1000));  // any 32 bits
    }
    const std::vector<index_t> indices = {4, 1, 5};
    for (const index_t vocab_size : {index_t{-1}, vocab / 2}) {
      for (const bool indexed : {false, true}) {
        std::vector<float> want = logits;
        specdec::apply_token_bitmask(specdec::matrix_view<float>(want.data(), rows, vocab),
                                     specdec::matrix_view<const std::int32_t>(masks.data(), rows, words), vocab_size,
                                     indexed ? std::span<const index_t>(indices) : std::span<const index_t>());
        B b;
        auto x = b.upload(std::span<const float>(logits));
        auto m = b.upload(std::span<const std::int32_t>(masks));
        auto ids = b.upload(std::span<const index_t>(indices));
        specdec::apply_token_bitmask(b, x.matrix(rows, vocab), m.matrix(rows, words), vocab_size,
                                     indexed ? ids.view() : decltype(ids.view()){});
        const std::vector<float> got = b.download(x.view());
        CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
      }
    }
  }
  B b;
  std::vector<float> logits(2 * 40, 0.5f);
  std::vector<std::int32_t> masks(2 * 2, 0);
  std::vector<index_t> bad = {1, 2};
  auto x = b.upload(std::span<const float>(logits));
  auto m = b.upload(std::span<const std::int32_t>(masks));
  auto ids = b.upload(std::span<const index_t>(bad));
  const std::string at = "specdec::apply_token_bitmask: ";
  CHECK(error_of([&] { specdec::apply_token_bitmask(b, x.matrix(2, 40), m.matrix(2, 2), -1, ids.view()); }) ==
        at + "indices[1] = 2; expected a row in [0, 2) (rows of both logits and bitmask)");
  CHECK(error_of([&] { specdec::apply_token_bitmask(b, x.matrix(2, 40), m.matrix(2, 2), 65); }) ==
        at + "vocab_size = 65; expected at most V = 40 (the logits' width)");
  auto one = b.upload(std::span<const std::int32_t>(masks.data(), 2));
  CHECK(error_of([&] { specdec::apply_token_bitmask(b, x.matrix(2, 40), one.matrix(1, 2)); }) ==
        at + "bitmask has 1 rows and logits 2; expected equal counts (or indices)");
}

/// Uploads a host vector (empty stays empty) and views it in the backend's memory.
template <class B, class T>
struct uploaded {
  typename B::template buffer<T> buffer;
  specdec::vector_view<const T, typename B::memory_space> view;
  uploaded(B& b, const std::vector<T>& v)
      : buffer(b.upload(std::span<const T>(v))),
        view(buffer.view().data(), static_cast<index_t>(v.size())) {}
};

TEST_CASE_TEMPLATE("batched tree penalties equal apply_tree_penalties per request", B, SPECDEC_TEAM_BACKENDS) {
  std::uint64_t seed = 2100;
  for (const case_shape shape : {case_shape{.batch = 4, .nodes = 8, .vocab = 3000, .accept_bias = 0.3f},
                                 case_shape{.batch = 3, .nodes = 6, .vocab = 700, .variable_counts = true, .shuffled_rows = true},
                                 case_shape{.batch = 2, .nodes = 5, .vocab = 40, .chain = true, .accept_bias = 0.0f}}) {
    for (int variant = 0; variant < 4; ++variant, ++seed) {
      CAPTURE(seed);
      CAPTURE(variant);
      batch_case c = make_case(seed, shape);
      const specdec::philox_stream rng{seed, 23};
      std::uint64_t at = 0;
      const auto pick_any = [&](index_t n) { return static_cast<std::int32_t>(rng.uniform_double(at++) * static_cast<double>(n)); };
      // Chains repeat a draft token the history never saw (V - 1): it is penalised once, by its count.
      const auto fresh = static_cast<std::int32_t>(c.vocab - 1);
      if (shape.chain) std::copy_n(std::vector<std::int32_t>{fresh, 5, fresh, fresh}.begin(), 4, c.tokens.begin() + 1);
      const auto pick = [&](index_t n) {
        const std::int32_t t = pick_any(n);
        return shape.chain && t == fresh ? fresh - 1 : t;
      };
      // Logits with zeros of both signs, negatives and -inf: every branch of the rules.
      std::vector<float> logits = conformance::random_logits(seed + 5, c.target_count, c.vocab, 3.0f).data;
      for (auto& x : logits) {
        const double u = rng.uniform_double(at++);
        x = u < 0.05 ? 0.0f : u < 0.1 ? -0.0f : u < 0.12 ? -std::numeric_limits<float>::infinity() : x;
      }
      const specdec::sampling::repetition_rule rule =
          variant % 2 == 0 ? sampling::repetition_rule::divide : sampling::repetition_rule::multiply_reciprocal;
      std::vector<sampling::penalty_history> histories;
      std::vector<sampling::penalty_params> params;
      std::vector<std::vector<sampling::logit_bias>> biases;
      sampling::penalty_batch_host packed;
      for (index_t r = 0; r < c.batch; ++r) {
        // Prompt and output tokens, some of them the trees' own (their counts then grow along paths).
        std::vector<std::int32_t> prompt, output;
        for (int k = pick(12); k > 0; --k) prompt.push_back(pick(c.vocab));
        for (int k = pick(12); k > 0; --k)
          output.push_back(k % 3 == 0 ? c.tokens[static_cast<std::size_t>(r * c.nodes + pick(c.nodes))] : pick(c.vocab));
        histories.emplace_back(prompt, output);
        const float frequency = variant == 2 ? -0.0f : variant == 3 ? -0.3f : 0.5f * static_cast<float>(r);
        params.push_back({r % 2 == 0 ? 1.3f : 0.8f, frequency, variant == 1 ? -0.2f : 0.25f, rule});
        std::vector<sampling::logit_bias> bias;
        for (int k = pick(4); k > 0; --k) bias.push_back({pick(c.vocab), static_cast<float>(pick(100)) / 16.0f - 3.0f});
        if (!bias.empty()) bias.push_back(bias.front());  // a token biased twice
        biases.push_back(bias);
        packed.add(histories.back(), params.back(), biases.back());
      }
      std::vector<float> want = logits;
      const request_form f = requests_of(c);
      for (index_t r = 0; r < c.batch; ++r) {
        const auto rs = static_cast<std::size_t>(r);
        sampling::apply_tree_penalties(specdec::matrix_view<float>(want.data(), c.target_count, c.vocab), f.requests[rs].tree,
                                       c.target_rows[rs], histories[rs], params[rs], biases[rs]);
      }
      B b;
      batch_on<B> on(b, c, false);
      auto x = b.upload(std::span<const float>(logits));
      const uploaded<B, std::int64_t> offsets(b, packed.offsets), bias_offsets(b, packed.bias_offsets);
      const uploaded<B, std::int32_t> tokens(b, packed.tokens), counts(b, packed.output_counts), prompt(b, packed.in_prompt),
          bias_tokens(b, packed.bias_tokens);
      const uploaded<B, float> rep(b, packed.repetition), freq(b, packed.frequency), pres(b, packed.presence),
          bias_values(b, packed.bias_values);
      const sampling::penalty_batch<typename B::memory_space> pen{offsets.view, tokens.view, counts.view, prompt.view,
                                                                  rep.view, freq.view, pres.view, bias_offsets.view,
                                                                  bias_tokens.view, bias_values.view, packed.rule()};
      sampling::apply_tree_penalties(b, x.matrix(c.target_count, c.vocab), on.view(c), pen);
      const std::vector<float> got = b.download(x.view());
      REQUIRE(got.size() == want.size());
      std::size_t differ = 0;
      for (std::size_t k = 0; k < got.size(); ++k)
        if (std::memcmp(&got[k], &want[k], sizeof(float)) != 0) {
          if (differ++ == 0) MESSAGE("row ", k / static_cast<std::size_t>(c.vocab), " column ", k % static_cast<std::size_t>(c.vocab), ": got ", got[k], ", want ", want[k], ", raw ", logits[k]);
        }
      CHECK(differ == 0);
      CHECK(want != logits);  // the case penalised something
    }
  }
}

TEST_CASE_TEMPLATE("batched tree penalties name what is wrong", B, SPECDEC_ALL_BACKENDS) {
  const batch_case c = make_case(31, {.batch = 2, .nodes = 4, .vocab = 50});
  sampling::penalty_batch_host packed;
  const std::vector<std::int32_t> prompt = {3, 9}, output = {9, 9, 12};
  packed.add(sampling::penalty_history(prompt, output), {1.2f, 0.1f, 0.1f});
  packed.add(sampling::penalty_history(prompt, {}), {1.1f, 0.0f, 0.0f}, std::vector<sampling::logit_bias>{{4, 1.0f}});
  const std::string at = "specdec::sampling::apply_tree_penalties: ";
  const auto run = [&](sampling::penalty_batch_host p) {
    return error_of([&] {
      B b;
      batch_on<B> on(b, c, false);
      const uploaded<B, std::int64_t> offsets(b, p.offsets), bias_offsets(b, p.bias_offsets);
      const uploaded<B, std::int32_t> tokens(b, p.tokens), counts(b, p.output_counts), in_prompt(b, p.in_prompt),
          bias_tokens(b, p.bias_tokens);
      const uploaded<B, float> rep(b, p.repetition), freq(b, p.frequency), pres(b, p.presence), bias_values(b, p.bias_values);
      sampling::apply_tree_penalties(b, on.target.matrix(c.target_count, c.vocab), on.view(c),
                                     {offsets.view, tokens.view, counts.view, in_prompt.view, rep.view, freq.view, pres.view,
                                      bias_offsets.view, bias_tokens.view, bias_values.view, p.rule()});
    });
  };
  CHECK(run(packed) == "");
  {
    auto p = packed;
    p.repetition[1] = 0.0f;
    CHECK(run(p) == at + "penalties.repetition[1] = 0; expected a finite value > 0 (1: none)");
  }
  {
    auto p = packed;
    p.frequency[0] = std::numeric_limits<float>::infinity();
    CHECK(run(p) == at + "penalties.frequency[0] = inf; expected a finite value");
  }
  {
    auto p = packed;
    std::swap(p.tokens[0], p.tokens[1]);
    CHECK(run(p) == at + "penalties.tokens[1] = 3 (request 0); expected token ids in [0, V = 50), sorted and distinct per request");
  }
  {
    auto p = packed;
    p.output_counts[2] = -1;
    CHECK(run(p) == at + "penalties.output_counts[2] = -1 (request 0); expected a count >= 0");
  }
  {
    auto p = packed;
    p.offsets[1] = 6;
    CHECK(run(p) == at + "penalties.offsets gives request 0 entries [0, 6); expected a non-decreasing range within [0, 5]");
  }
  {
    auto p = packed;
    p.bias_tokens[0] = 50;
    CHECK(run(p) == at + "penalties.bias_tokens[0] = 50; expected a token id in [0, 50)");
  }
  {
    auto p = packed;
    p.presence.pop_back();
    CHECK(run(p) == at + "penalties.presence has 1 entries; expected 2");
  }
  sampling::penalty_batch_host llama;
  CHECK(error_of([&] { llama.add(sampling::penalty_history::last_n(prompt, 4), {1.1f, 0.0f, 0.0f, {}, sampling::penalty_convention::llama_cpp}); }) ==
        "specdec::sampling::penalty_batch_host::add: request 0 uses llama.cpp's convention; the batched form takes vLLM's "
        "(llama.cpp's penalties run on the host: apply_tree_penalties)");
}

/// One request, two nodes, V = 4: node 1 (token 1, drawn from draft row 0) is rejected with u = 0.5
/// (p / q = 0.125), so both rows are read whole and the final draw takes uniform 1.
batch_case tiny_case() {
  batch_case c;
  c.batch = 1;
  c.nodes = 2;
  c.vocab = 4;
  c.u_cols = 3;
  c.tokens = {0, 1};
  c.parents = {-1, 0};
  c.node_counts = {2};
  c.max_accepted = {-1};
  c.bonus = {-1};
  c.target_rows = {0};
  c.target_count = 2;
  c.target = {0.7f, 0.1f, 0.1f, 0.1f, 0.25f, 0.25f, 0.25f, 0.25f};
  c.draft_count = 1;
  c.draft = {0.1f, 0.8f, 0.05f, 0.05f};
  c.draft_rows = {-1, 0};
  c.uniforms = {0.5, 0.5, 0.5};
  return c;
}

TEST_CASE_TEMPLATE("batched verification names what is wrong", B, SPECDEC_ALL_BACKENDS) {
  const auto run = [](const batch_case& c, sampling::speculative_options o = {}) {
    return error_of([&] {
      B b;
      batch_on<B> on(b, c, false);
      sampling::verify_speculative(b, on.rows(c), on.view(c), o, on.outputs(c));
    });
  };
  const std::string at = "specdec::sampling::verify_speculative: ";
  CHECK(run(tiny_case()) == "");
  {
    batch_case c = tiny_case();
    c.target[2] = std::numeric_limits<float>::quiet_NaN();
    CHECK(run(c) == at + "rows.target[0, 2] = nan; expected a probability in [0, 1]");
  }
  {
    batch_case c = tiny_case();
    c.draft[3] = 0.0f;
    CHECK(run(c).find(at + "rows.draft row 0 sums to 0.9") == 0);
  }
  {
    batch_case c = tiny_case();
    c.uniforms[1] = 1.0;
    CHECK(run(c) == at + "batch.uniforms[0, 1] = 1; expected a value in [0, 1)");
  }
  {
    batch_case c = tiny_case();
    c.u_cols = 1;
    c.uniforms = {0.5};
    CHECK(run(c) == at + "request 0 needs uniform 1 but batch.uniforms has 1 columns");
  }
  {
    batch_case c = tiny_case();
    c.draft_rows[1] = 1;
    CHECK(run(c) == at + "batch.draft_rows[0, 1] = 1; expected -1 (deterministic) or a row in [0, 1)");
  }
  const batch_case good = make_case(7, {.batch = 3, .nodes = 6, .vocab = 1200, .with_draft_rows = true});
  CHECK(run(good) == "");
  {
    batch_case c = good;
    c.parents[static_cast<std::size_t>(1 * c.nodes + 4)] = 4;
    CHECK(run(c) == at + "batch.parents[1, 4] = 4; expected a parent in [0, 4) (parents precede their children)");
  }
  {
    batch_case c = good;
    c.parents[static_cast<std::size_t>(2 * c.nodes)] = 0;
    CHECK(run(c) == at + "batch.parents[2, 0] = 0; expected -1 (node 0 is the root)");
  }
  {
    batch_case c = good;
    c.tokens[static_cast<std::size_t>(2 * c.nodes + 3)] = 1200;
    CHECK(run(c) == at + "batch.tokens[2, 3] = 1200; expected a token id in [0, V = 1200)");
  }
  {
    batch_case c = good;
    c.node_counts[1] = 7;
    CHECK(run(c) == at + "batch.node_counts[1] = 7; expected a node count in [1, 6] (node 0 is the root)");
  }
  {
    batch_case c = good;
    c.target_rows[2] = 14;
    CHECK(run(c) == at + "request 2 needs target rows [14, 20) but rows.target has 18 rows");
  }
  {
    batch_case c = good;
    c.bonus[0] = 1200;
    CHECK(run(c) == at + "batch.bonus_tokens[0] = 1200; expected -1 (none) or a token in [0, V = 1200)");
  }
  {
    batch_case c = good;
    c.max_accepted[1] = -2;
    CHECK(run(c) == at + "batch.max_accepted[1] = -2; expected -1 (no cap) or a cap >= 0");
  }
  {
    batch_case c = make_case(8, {.batch = 2, .nodes = 5, .vocab = 300});
    sampling::speculative_options o;
    o.flashinfer_retest = true;
    c.parents[3] = 1;
    c.parents[4] = 1;  // node 1 has children 2, 3 and 4
    CHECK(run(c, o) == at + "request 0: flashinfer_retest applies to chains; node 1 of this tree has several children");
  }
  // A chain of 6 nodes emits up to 6 tokens: 4 columns are too few.
  {
    B b;
    const batch_case c = make_case(9, {.batch = 2, .nodes = 6, .vocab = 400, .chain = true});
    batch_on<B> on(b, c, false);
    auto o = on.outputs(c);
    o.tokens = specdec::matrix_view<std::int32_t, typename B::memory_space>(on.out_tokens.view().data(), c.batch, 4);
    CHECK(error_of([&] { sampling::verify_speculative(b, on.rows(c), on.view(c), {}, o); }) ==
          at + "outputs.tokens has 4 columns; request 0 may emit 6 tokens (its deepest path, capped by max_accepted, plus the final token)");
  }
  // Shapes and options are checked on the host before any work.
  {
    B b;
    const batch_case c = good;
    batch_on<B> on(b, c, false);
    auto o = on.outputs(c);
    o.tokens = on.out_tokens.matrix(c.batch - 1, c.nodes * c.batch / (c.batch - 1));
    CHECK(error_of([&] { sampling::verify_speculative(b, on.rows(c), on.view(c), {}, o); }).find("outputs.tokens is 2 x 9; expected 3 rows") !=
          std::string::npos);
    auto t = on.view(c);
    t.uniforms = {};
    CHECK(error_of([&] { sampling::verify_speculative(b, on.rows(c), t, {}, on.outputs(c)); }) ==
          at + "batch.uniforms has 0 rows and batch.uniform_streams 0 entries; expected exactly one of them");
    sampling::speculative_options bad;
    bad.lenience = 0.0f;
    CHECK(error_of([&] { sampling::verify_speculative(b, on.rows(c), on.view(c), bad, on.outputs(c)); }) ==
          at + "lenience = 0; expected a value in (0, 1]");
    t = on.view(c);
    t.parents = on.parents.matrix(c.batch * 2, c.nodes / 2);
    CHECK(error_of([&] { sampling::verify_speculative(b, on.rows(c), t, {}, on.outputs(c)); }) ==
          at + "batch.parents is 6 x 3; expected 3 x 6 like batch.tokens");
  }
}

namespace {

/// SGLang's link-encoded trees (build_tree_kernel_efficient's layout, global retrive_index) from random
/// parents: children listed through retrive_next_token / retrive_next_sibling in a shuffled order,
/// siblings sometimes sharing a token, target predictions that usually name one of the node's children
/// (long accepted walks) and sometimes a token no child has.
struct sglang_case {
  index_t bs = 0, n = 0;
  std::vector<std::int64_t> candidates, retrive_index, next_token, next_sibling, target_predict;
};

sglang_case make_sglang_case(std::uint64_t seed, index_t bs, index_t n) {
  const specdec::philox_stream rng{seed, 23};
  std::uint64_t at = 0;
  const auto pick = [&](index_t m) { return static_cast<index_t>(rng.uniform_double(at++) * static_cast<double>(m)); };
  sglang_case c;
  c.bs = bs;
  c.n = n;
  const auto size = static_cast<std::size_t>(bs * n);
  c.candidates.resize(size);
  c.retrive_index.resize(size);
  c.next_token.assign(size, -1);
  c.next_sibling.assign(size, -1);
  c.target_predict.resize(size);
  for (index_t b = 0; b < bs; ++b) {
    std::vector<std::vector<index_t>> kids(static_cast<std::size_t>(n));
    for (index_t i = 1; i < n; ++i) kids[static_cast<std::size_t>(pick(i))].push_back(i);
    for (index_t i = 0; i < n; ++i) {
      const auto g = static_cast<std::size_t>(b * n + i);
      c.retrive_index[g] = b * n + i;
      c.candidates[g] = pick(50);
      auto& k = kids[static_cast<std::size_t>(i)];
      for (std::size_t j = k.size(); j > 1; --j) std::swap(k[j - 1], k[static_cast<std::size_t>(pick(static_cast<index_t>(j)))]);
      if (!k.empty()) c.next_token[g] = k[0];
      for (std::size_t j = 0; j + 1 < k.size(); ++j) c.next_sibling[static_cast<std::size_t>(b * n + k[j])] = k[j + 1];
    }
    for (index_t i = 0; i < n; ++i) {
      const auto& k = kids[static_cast<std::size_t>(i)];
      const auto g = static_cast<std::size_t>(b * n + i);
      if (!k.empty() && pick(10) < 8) {
        const index_t child = k[static_cast<std::size_t>(pick(static_cast<index_t>(k.size())))];
        c.target_predict[g] = c.candidates[static_cast<std::size_t>(b * n + child)];
        if (pick(4) == 0 && k.size() > 1)  // a sibling with the same token: the first in link order wins
          c.candidates[static_cast<std::size_t>(b * n + k[0])] = c.target_predict[g];
      } else {
        c.target_predict[g] = 50 + pick(50);
      }
    }
  }
  return c;
}

template <class B>
struct sglang_on {
  using space = typename B::memory_space;
  typename B::template buffer<std::int64_t> candidates, retrive_index, next_token, next_sibling, target_predict;
  typename B::template buffer<std::int32_t> predicts, accept_index, accept_token_num;
  index_t bs, n, steps;
  sglang_on(B& b, const sglang_case& c, index_t num_spec_step)
      : candidates(b.upload(std::span<const std::int64_t>(c.candidates))),
        retrive_index(b.upload(std::span<const std::int64_t>(c.retrive_index))),
        next_token(b.upload(std::span<const std::int64_t>(c.next_token))),
        next_sibling(b.upload(std::span<const std::int64_t>(c.next_sibling))),
        target_predict(b.upload(std::span<const std::int64_t>(c.target_predict))),
        predicts(b.upload(std::span<const std::int32_t>(std::vector<std::int32_t>(c.candidates.size(), -7)))),
        accept_index(b.template allocate<std::int32_t>(c.bs * num_spec_step)),
        accept_token_num(b.template allocate<std::int32_t>(c.bs)),
        bs(c.bs),
        n(c.n),
        steps(num_spec_step) {}
  void run(B& b) {
    const auto m = [&](auto& buf) { return specdec::matrix_view<const std::int64_t, space>(buf.matrix(bs, n)); };
    specdec::sglang::verify_tree_greedy(b, m(candidates), m(retrive_index), m(next_token), m(next_sibling),
                                        specdec::vector_view<const std::int64_t, space>(target_predict.view()),
                                        predicts.view(), accept_index.matrix(bs, steps), accept_token_num.view());
  }
};

}  // namespace

TEST_CASE_TEMPLATE("SGLang's verify_tree_greedy on a backend equals the host form", B, SPECDEC_TEAM_BACKENDS) {
  std::uint64_t seed = 4100;
  for (const auto& shape : {std::tuple<index_t, index_t, index_t>{1, 1, 1}, {1, 8, 4}, {6, 12, 12}, {16, 60, 6}, {3, 33, 40}}) {
    // Named copies: lambdas capture them (clang before 16 cannot capture structured bindings).
    const index_t bs = std::get<0>(shape), n = std::get<1>(shape), steps = std::get<2>(shape);
    for (int repeat = 0; repeat < 3; ++repeat, ++seed) {
      CAPTURE(seed);
      CAPTURE(n);
      const sglang_case c = make_sglang_case(seed, bs, n);
      const auto mh = [&](const std::vector<std::int64_t>& v) { return specdec::matrix_view<const std::int64_t>(v.data(), bs, n); };
      const auto want = specdec::sglang::verify_tree_greedy(mh(c.candidates), mh(c.retrive_index), mh(c.next_token),
                                                            mh(c.next_sibling), c.target_predict, steps);
      B b;
      sglang_on<B> on(b, c, steps);
      on.run(b);
      // predicts: written at the accepted nodes only; the rest keep the caller's -7.
      std::vector<std::int32_t> predicts = want.predicts;
      for (auto& p : predicts) p = p == -1 ? -7 : p;
      CHECK(b.download(on.predicts.view()) == predicts);
      CHECK(b.download(on.accept_index.view()) == want.accept_index);
      CHECK(b.download(on.accept_token_num.view()) == want.accept_token_num);
    }
  }
}

TEST_CASE_TEMPLATE("SGLang's verify_tree_greedy on a backend names what is wrong", B, SPECDEC_ALL_BACKENDS) {
  const std::string at = "specdec::sglang::verify_tree_greedy: ";
  // 0 -> 1 -> 2 -> 1: the walk comes back to node 1.
  sglang_case c{1, 3, {5, 5, 5}, {0, 1, 2}, {1, 2, 1}, {-1, -1, -1}, {5, 5, 5}};
  const auto run = [](const sglang_case& k, index_t steps) {
    return error_of([&] {
      B b;
      sglang_on<B> on(b, k, steps);
      on.run(b);
    });
  };
  CHECK(run(c, 8) == at + "the links of request 0 lead from node 2 back to node 1 on the accepted path; expected a tree (the links cycle)");
  c.next_token = {1, 2, -1};
  CHECK(run(c, 8) == "");
  c.target_predict = {4294967301, 5, 5};
  c.candidates = {5, 4294967301, 5};
  CHECK(run(c, 8) == at + "target_predict[0] = 4294967301; expected a token id in [0, 2^31 - 1]");
  c.candidates = {5, 5, 5};
  c.target_predict = {5, 5, -7};  // the bonus at the last node
  CHECK(run(c, 8) == at + "target_predict[2] = -7; expected a token id in [0, 2^31 - 1]");
  c.target_predict = {5, 5, 5};
  c.retrive_index = {0, 9, 2};
  CHECK(run(c, 8) == at + "retrive_index(0, 1) = 9; expected [0, 3), request 0's own slots");
  c.retrive_index = {0, 1, 2};
  {
    // Request 1 accepting into request 0's slot 1: both teams would write predicts[1].
    sglang_case two{2, 3, {5, 5, 5, 5, 5, 5}, {0, 1, 2, 3, 1, 5}, {1, 2, -1, 1, 2, -1}, {-1, -1, -1, -1, -1, -1}, {5, 5, 5, 5, 5, 5}};
    CHECK(run(two, 8) == at + "retrive_index(1, 1) = 1; expected [3, 6), request 1's own slots");
    two.retrive_index = {0, 1, 2, 3, 4, 5};
    CHECK(run(two, 8) == "");
  }
  c.next_token = {1, 3, -1};
  CHECK(run(c, 8) == at + "a link of request 0 points at node 3; expected [0, 3)");
  c.next_token = {1, -1, -1};
  c.next_sibling = {-1, 1, -1};
  c.candidates = {5, 4, 5};
  CHECK(run(c, 8) == at + "the sibling links of request 0 under node 0 cycle; expected each child list to end with -1");
  c.next_sibling = {-1, -1, -1};
  CHECK(run(c, 0) == at + "num_spec_step = 0; expected >= 1");
}

namespace {

/// SGLang's sampled verification of a link-encoded batch through specdec's request-based
/// verify_coin_tree on the host (the request layout, which SGLang's layout must agree with): parents
/// recovered from the links, the links given as the sibling order, one coin per node then the final uniform.
specdec::sglang::greedy_verification coin_reference(const sglang_case& c, index_t vocab, const std::vector<float>& probs,
                                                    const std::vector<float>& coins, const std::vector<float>& finals,
                                                    index_t steps, float threshold_single, float threshold_acc) {
  const index_t bs = c.bs, n = c.n;
  std::vector<specdec::draft_tree> trees;
  std::vector<std::vector<std::int32_t>> first_child(static_cast<std::size_t>(bs)), sibling(static_cast<std::size_t>(bs));
  std::vector<std::vector<double>> uniforms(static_cast<std::size_t>(bs));
  for (index_t r = 0; r < bs; ++r) {
    const auto at = [&](index_t i) { return static_cast<std::size_t>(r * n + i); };
    std::vector<std::int32_t> tokens, parent(static_cast<std::size_t>(n), -1);
    for (index_t i = 0; i < n; ++i) {
      tokens.push_back(static_cast<std::int32_t>(c.candidates[at(i)]));
      first_child[static_cast<std::size_t>(r)].push_back(static_cast<std::int32_t>(c.next_token[at(i)]));
      sibling[static_cast<std::size_t>(r)].push_back(static_cast<std::int32_t>(c.next_sibling[at(i)]));
      uniforms[static_cast<std::size_t>(r)].push_back(coins[at(i)]);
    }
    uniforms[static_cast<std::size_t>(r)].push_back(finals[static_cast<std::size_t>(r)]);
    for (index_t i = 0; i < n; ++i)
      for (std::int64_t k = c.next_token[at(i)]; k >= 0; k = c.next_sibling[at(k)]) parent[static_cast<std::size_t>(k)] = static_cast<std::int32_t>(i);
    trees.push_back(specdec::make_tree(tokens, parent, vocab));
  }
  std::vector<sampling::speculative_request> requests(static_cast<std::size_t>(bs));
  for (index_t r = 0; r < bs; ++r) {
    auto& q = requests[static_cast<std::size_t>(r)];
    q.tree = trees[static_cast<std::size_t>(r)];
    q.target_row = r * n;
    q.uniforms = sampling::uniform_stream::values(uniforms[static_cast<std::size_t>(r)]);
    q.max_accepted = steps - 1;
    q.first_child = first_child[static_cast<std::size_t>(r)];
    q.next_sibling = sibling[static_cast<std::size_t>(r)];
  }
  specdec::eigen b;
  const auto results = sampling::verify_coin_tree(b, specdec::matrix_view<const float>(probs.data(), bs * n, vocab), requests,
                                                  {threshold_single, std::max(threshold_acc, 1e-9f)});
  specdec::sglang::greedy_verification out{std::vector<std::int32_t>(static_cast<std::size_t>(bs * n), -1),
                                           std::vector<std::int32_t>(static_cast<std::size_t>(bs * steps), -1),
                                           std::vector<std::int32_t>(static_cast<std::size_t>(bs), 0)};
  for (index_t r = 0; r < bs; ++r) {
    const auto& res = results[static_cast<std::size_t>(r)];
    std::vector<std::int32_t> path = {0};
    path.insert(path.end(), res.accepted_nodes.begin(), res.accepted_nodes.end());
    for (std::size_t i = 0; i < path.size(); ++i) {
      const auto slot = static_cast<std::size_t>(c.retrive_index[static_cast<std::size_t>(r * n + path[i])]);
      out.predicts[slot] = res.tokens[i];
      out.accept_index[static_cast<std::size_t>(r * steps) + i] = static_cast<std::int32_t>(slot);
    }
    out.accept_token_num[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(res.accepted_nodes.size());
  }
  return out;
}

/// Target rows for a link-encoded batch: random entries (a third zero), where often one of the node's
/// candidates carries much of the mass; some rows hold mass only on the node's candidates (rejecting
/// them all leaves an empty residual: SGLang's last-token fallback).
std::vector<float> coin_rows(const sglang_case& c, index_t vocab, std::uint64_t seed) {
  const specdec::philox_stream rng{seed, 29};
  std::uint64_t at = 0;
  std::vector<float> probs(static_cast<std::size_t>(c.bs * c.n * vocab));
  for (index_t r = 0; r < c.bs; ++r)
    for (index_t i = 0; i < c.n; ++i) {
      std::vector<double> w(static_cast<std::size_t>(vocab));
      const double kind = rng.uniform_double(at++);
      std::vector<std::int64_t> kids;
      for (std::int64_t k = c.next_token[static_cast<std::size_t>(r * c.n + i)]; k >= 0; k = c.next_sibling[static_cast<std::size_t>(r * c.n + k)])
        kids.push_back(c.candidates[static_cast<std::size_t>(r * c.n + k)]);
      if (kind < 0.15 && !kids.empty()) {
        for (const std::int64_t t : kids) w[static_cast<std::size_t>(t)] += rng.uniform_double(at++) + 0.01;
      } else {
        for (auto& x : w) x = rng.uniform_double(at++) < 0.33 ? 0.0 : rng.uniform_double(at++);
        if (!kids.empty() && kind < 0.7)
          w[static_cast<std::size_t>(kids[static_cast<std::size_t>(rng.uniform_double(at++) * double(kids.size()))])] +=
              0.5 * static_cast<double>(vocab);
      }
      double total = 0.0;
      for (const double x : w) total += x;
      for (index_t j = 0; j < vocab; ++j)
        probs[static_cast<std::size_t>((r * c.n + i) * vocab + j)] = static_cast<float>(w[static_cast<std::size_t>(j)] / total);
    }
  return probs;
}

template <class B>
struct coin_on {
  using space = typename B::memory_space;
  sglang_on<B> links;
  typename B::template buffer<float> coins, finals, probs;
  index_t coin_cols, vocab;
  coin_on(B& b, const sglang_case& c, index_t steps, const std::vector<float>& u, const std::vector<float>& f,
          const std::vector<float>& p, index_t v)
      : links(b, c, steps),
        coins(b.upload(std::span<const float>(u))),
        finals(b.upload(std::span<const float>(f))),
        probs(b.upload(std::span<const float>(p))),
        coin_cols(static_cast<index_t>(u.size()) / c.bs),
        vocab(v) {}
  void run(B& b, float threshold_single, float threshold_acc) {
    const index_t bs = links.bs, n = links.n;
    const auto m = [&](auto& buf) { return specdec::matrix_view<const std::int64_t, space>(buf.matrix(bs, n)); };
    specdec::sglang::tree_speculative_sampling_target_only(
        b, m(links.candidates), m(links.retrive_index), m(links.next_token), m(links.next_sibling),
        specdec::matrix_view<const float, space>(coins.matrix(bs, coin_cols)), specdec::vector_view<const float, space>(finals.view()),
        specdec::matrix_view<const float, space>(probs.matrix(bs * n, vocab)), links.predicts.view(),
        links.accept_index.matrix(bs, links.steps), links.accept_token_num.view(), threshold_single, threshold_acc);
  }
};

}  // namespace

TEST_CASE_TEMPLATE("SGLang's tree_speculative_sampling_target_only on a backend equals verify_coin_tree", B, SPECDEC_TEAM_BACKENDS) {
  // Thresholds: lossless; lossy both ways; every first child; rarely any (residuals, empty ones);
  // threshold_acc below SGLang's clamp.
  const std::pair<float, float> thresholds[] = {{1.0f, 1.0f}, {0.4f, 0.7f}, {0.0f, 1.0f}, {1.0f, 2.5f}, {0.9f, 1e-12f}};
  std::uint64_t seed = 5100;
  int accepted = 0, fallbacks = 0;
  for (const auto& shape : {std::tuple<index_t, index_t, index_t, index_t>{1, 1, 1, 60}, {1, 8, 4, 300}, {6, 12, 12, 3000},
                            {4, 60, 6, 2100}, {3, 33, 40, 1030}}) {
    const index_t bs = std::get<0>(shape), n = std::get<1>(shape), steps = std::get<2>(shape), vocab = std::get<3>(shape);
    for (int repeat = 0; repeat < 2; ++repeat, ++seed) {
      CAPTURE(seed);
      const sglang_case c = make_sglang_case(seed, bs, n);
      const std::vector<float> probs = coin_rows(c, vocab, seed);
      const specdec::philox_stream rng{seed, 31};
      std::vector<float> coins(static_cast<std::size_t>(bs * n)), finals(static_cast<std::size_t>(bs));
      std::uint64_t at = 0;
      for (auto& u : coins) u = static_cast<float>(rng.uniform_double(at++)) * 0.999f;
      for (auto& u : finals) u = static_cast<float>(rng.uniform_double(at++)) * 0.999f;
      for (const auto& pair : thresholds) {
        const float single = pair.first, acc = pair.second;  // named: CAPTURE's lambda captures them
        CAPTURE(single);
        CAPTURE(acc);
        const auto want = coin_reference(c, vocab, probs, coins, finals, steps, single, acc);
        B b;
        coin_on<B> on(b, c, steps, coins, finals, probs, vocab);
        on.run(b, single, acc);
        std::vector<std::int32_t> predicts = want.predicts;
        for (auto& p : predicts) p = p == -1 ? -7 : p;
        CHECK(b.download(on.links.predicts.view()) == predicts);
        CHECK(b.download(on.links.accept_index.view()) == want.accept_index);
        CHECK(b.download(on.links.accept_token_num.view()) == want.accept_token_num);
        for (const std::int32_t k : want.accept_token_num) accepted += k;
        for (const std::int32_t p : want.predicts) fallbacks += p == vocab - 1 ? 1 : 0;
      }
    }
  }
  CHECK(accepted > 100);  // long accepted walks were compared, not only first-level rejections
  CHECK(fallbacks > 0);   // and empty residuals (the last-token fallback)
}

TEST_CASE_TEMPLATE("SGLang's tree_speculative_sampling_target_only on a backend names what is wrong", B, SPECDEC_ALL_BACKENDS) {
  const std::string at = "specdec::sglang::tree_speculative_sampling_target_only: ";
  // 0 -> {1, 2}, 1 -> 3; V = 8, every row uniform.
  const sglang_case good{1, 4, {5, 1, 2, 3}, {0, 1, 2, 3}, {1, 3, -1, -1}, {-1, 2, -1, -1}, {0, 0, 0, 0}};
  const std::vector<float> rows(4 * 8, 0.125f);
  const auto run = [&](const sglang_case& k, std::vector<float> coins, std::vector<float> finals, std::vector<float> probs,
                       index_t steps = 4, float single = 1.0f, float acc = 1.0f) {
    return error_of([&] {
      B b;
      coin_on<B> on(b, k, steps, coins, finals, probs, 8);
      on.run(b, single, acc);
    });
  };
  const std::vector<float> coins = {0.5f, 0.5f, 0.5f, 0.5f}, finals = {0.5f};
  CHECK(run(good, coins, finals, rows) == "");
  sglang_case c = good;
  c.candidates[2] = 8;
  CHECK(run(c, coins, finals, rows) == at + "candidates(0, 2) = 8; expected a token in [0, V = 8)");
  c = good;
  c.next_token[1] = 4;
  CHECK(run(c, coins, finals, rows) == at + "retrive_next_token(0, 1) = 4; expected -1 or a node in [0, 4)");
  c = good;
  c.next_sibling[3] = -2;
  CHECK(run(c, coins, finals, rows) == at + "retrive_next_sibling(0, 3) = -2; expected -1 or a node in [0, 4)");
  c = good;
  c.next_sibling[2] = 1;  // 1 -> 2 -> 1: a sibling list that cycles reaches node 1 twice
  CHECK(run(c, coins, finals, rows) == at + "the links of request 0 reach node 1 twice; expected a tree (each node linked once)");
  c = good;
  c.next_token[1] = -1;  // node 3 hangs under nothing
  CHECK(run(c, coins, finals, rows) == at + "the links of request 0 reach 3 of its 4 nodes; expected every node under the root");
  c = good;
  c.next_token = {1, -1, 3, -1};  // 0 -> {1, 2}, 2 -> 3 is fine; 3 -> ... under a later node is not
  CHECK(run(c, coins, finals, rows) == "");
  c.next_token = {3, -1, -1, 1};
  c.next_sibling = {-1, 2, -1, -1};  // 0 -> 3, 3 -> {1, 2}: node 1 under node 3
  CHECK(run(c, coins, finals, rows) == at + "the links of request 0 put node 1 under node 3; expected parents numbered before "
                                           "their children (as build_tree_kernel_efficient does)");
  c = good;
  c.retrive_index[1] = 4;
  CHECK(run(c, {0.1f, 0.1f, 0.1f, 0.1f}, finals, rows) == at + "retrive_index(0, 1) = 4; expected [0, 4), request 0's own slots");
  CHECK(run(good, {0.5f, 1.0f, 0.5f, 0.5f}, finals, rows, 4, 0.1f) == at + "uniform_samples[0, 1] = 1; expected a value in [0, 1)");
  CHECK(run(good, coins, {-0.5f}, rows) == at + "uniform_samples_for_final_sampling[0] = -0.5; expected a value in [0, 1)");
  std::vector<float> bad = rows;
  bad[1] = 1.5f;  // row 0, token 1: node 1's candidate
  CHECK(run(good, coins, finals, bad) == at + "target_probs[0, 1] = 1.5; expected a probability in [0, 1]");
  bad = rows;
  bad[8 * 2 + 7] = 0.5f;  // node 2's row, read whole only for a final draw there
  CHECK(run(good, coins, finals, bad) == "");
  bad = rows;
  bad[7] = 0.5f;  // node 0's row sums to 1.375: the final draw there reads it whole
  CHECK(run(good, {0.99f, 0.5f, 0.5f, 0.5f}, finals, bad) == at + "target_probs row 0 sums to 1.375; expected 1 within 0.0001");
  CHECK(run(good, coins, finals, rows, 4, -1.0f) == at + "threshold_single = -1; expected a finite value >= 0");
  CHECK(run(good, coins, finals, rows, 4, 1.0f, std::numeric_limits<float>::infinity()) ==
        at + "threshold_acc = inf; expected a finite value");
  CHECK(run(good, coins, finals, rows, 0) == at + "num_spec_step = 0; expected >= 1");
  CHECK(run(good, {0.5f, 0.5f, 0.5f}, finals, rows) == at + "uniform_samples is 1 x 3; expected 1 x 4 (a coin per node)");
}

namespace {

/// A batch in vLLM's rejection-sampler layout: drafts back to back (0 to max_spec_len per request),
/// target (and draft) rows that often favour the draft token, some requests greedy.
struct vllm_case {
  index_t batch = 0, width = 0, vocab = 0;
  std::vector<std::int32_t> ids, bonus;
  std::vector<std::int64_t> cu;
  std::vector<std::uint8_t> greedy;
  std::vector<float> target, draft, noise;
  std::vector<double> uniforms;
};

vllm_case make_vllm_case(std::uint64_t seed, index_t batch, index_t max_spec_len, index_t vocab, bool with_draft, bool mixed) {
  const specdec::philox_stream rng{seed, 37};
  std::uint64_t at = 0;
  const auto u = [&] { return rng.uniform_double(at++); };
  vllm_case c;
  c.batch = batch;
  c.width = max_spec_len + 1;
  c.vocab = vocab;
  const auto row = [&](std::int32_t favour, double weight) {
    std::vector<double> w(static_cast<std::size_t>(vocab));
    double total = 0.0;
    for (auto& x : w) total += x = u() < 0.3 ? 0.0 : u();
    w[static_cast<std::size_t>(favour)] += weight * total;
    total += weight * total;
    std::vector<float> out;
    for (const double x : w) out.push_back(static_cast<float>(x / total));
    return out;
  };
  for (index_t r = 0; r < batch; ++r) {
    const auto k = static_cast<index_t>(u() * double(max_spec_len + 1));
    for (index_t i = 0; i < k; ++i) {
      const auto x = static_cast<std::int32_t>(u() * double(vocab));
      c.ids.push_back(x);
      const auto t = row(u() < 0.7 ? x : static_cast<std::int32_t>(u() * double(vocab)), 3.0);
      c.target.insert(c.target.end(), t.begin(), t.end());
      if (with_draft) {
        const auto q = row(x, u() < 0.5 ? 4.0 : 0.5);
        c.draft.insert(c.draft.end(), q.begin(), q.end());
      }
      c.uniforms.push_back(u());
    }
    c.cu.push_back(static_cast<std::int64_t>(c.ids.size()));
    c.bonus.push_back(static_cast<std::int32_t>(u() * double(vocab)));
    c.greedy.push_back(mixed && u() < 0.4 ? 1 : 0);
    for (index_t j = 0; j < vocab; ++j) c.noise.push_back(static_cast<float>(-std::log1p(-u())));
  }
  return c;
}

/// The host form's output (the request-based verify_speculative underneath).
std::vector<std::int32_t> vllm_reference(const vllm_case& c) {
  specdec::eigen b;
  const auto tokens = static_cast<index_t>(c.ids.size());
  std::vector<std::int32_t> out(static_cast<std::size_t>(c.batch * c.width), -7);
  specdec::vllm::rejection_sample(b, c.ids, c.cu, c.width - 1,
                                  c.draft.empty() ? specdec::matrix_view<const float>{}
                                                  : specdec::matrix_view<const float>(c.draft.data(), tokens, c.vocab),
                                  specdec::matrix_view<const float>(c.target.data(), tokens, c.vocab), c.bonus, c.greedy,
                                  c.uniforms, specdec::matrix_view<const float>(c.noise.data(), c.batch, c.vocab),
                                  specdec::matrix_view<std::int32_t>(out.data(), c.batch, c.width));
  return out;
}

template <class B>
std::vector<std::int32_t> vllm_on(B& b, const vllm_case& c) {
  using space = typename B::memory_space;
  const auto tokens = static_cast<index_t>(c.ids.size());
  auto ids = b.upload(std::span<const std::int32_t>(c.ids));
  auto cu = b.upload(std::span<const std::int64_t>(c.cu));
  auto bonus = b.upload(std::span<const std::int32_t>(c.bonus));
  auto greedy = b.upload(std::span<const std::uint8_t>(c.greedy));
  auto uniforms = b.upload(std::span<const double>(c.uniforms));
  auto target = b.upload(std::span<const float>(c.target));
  auto draft = b.upload(std::span<const float>(c.draft));
  auto noise = b.upload(std::span<const float>(c.noise));
  auto out = b.upload(std::span<const std::int32_t>(std::vector<std::int32_t>(static_cast<std::size_t>(c.batch * c.width), -7)));
  const auto vec = [](auto& buf, std::size_t n) {
    using T = typename std::remove_cvref_t<decltype(buf.view())>::value_type;
    return n == 0 ? specdec::vector_view<const T, space>{} : specdec::vector_view<const T, space>(buf.view());
  };
  const auto rows = [&](auto& buf, std::size_t n, index_t r) {
    return n == 0 ? specdec::matrix_view<const float, space>{} : specdec::matrix_view<const float, space>(buf.matrix(r, c.vocab));
  };
  specdec::vllm::rejection_sample(b, vec(ids, c.ids.size()), vec(cu, c.cu.size()), rows(draft, c.draft.size(), tokens),
                                  rows(target, c.target.size(), tokens), vec(bonus, c.bonus.size()), vec(greedy, c.greedy.size()),
                                  vec(uniforms, c.uniforms.size()),
                                  rows(noise, c.noise.size(), static_cast<index_t>(c.noise.size()) / c.vocab),
                                  out.matrix(c.batch, c.width));
  return b.download(out.view());
}

}  // namespace

TEST_CASE_TEMPLATE("vLLM's rejection_sample on a backend equals the host form", B, SPECDEC_TEAM_BACKENDS) {
  std::uint64_t seed = 6100;
  int accepted = 0, rejected = 0;
  for (const auto& shape : {std::tuple<index_t, index_t, index_t>{1, 3, 40}, {5, 4, 3000}, {16, 7, 1030}, {3, 2, 5000}}) {
    const index_t batch = std::get<0>(shape), spec = std::get<1>(shape), vocab = std::get<2>(shape);
    for (const bool with_draft : {false, true})
      for (const bool mixed : {false, true}) {
        CAPTURE(seed);
        const vllm_case c = make_vllm_case(seed++, batch, spec, vocab, with_draft, mixed);
        const auto want = vllm_reference(c);
        B b;
        CHECK(vllm_on(b, c) == want);
        for (index_t r = 0; r < c.batch; ++r) {
          const std::int64_t k = c.cu[static_cast<std::size_t>(r)] - (r == 0 ? 0 : c.cu[static_cast<std::size_t>(r - 1)]);
          index_t emitted = 0;
          while (emitted < c.width && want[static_cast<std::size_t>(r * c.width + emitted)] >= 0) ++emitted;
          (emitted == k + 1 ? accepted : rejected) += 1;
        }
      }
  }
  CHECK(accepted > 10);  // requests that took their bonus token
  CHECK(rejected > 10);  // and requests stopped by a rejection (random) or a mismatch (greedy)
}

TEST_CASE_TEMPLATE("vLLM's rejection_sample with Philox noise equals the call given philox_exponentials' rows", B,
                   SPECDEC_TEAM_BACKENDS) {
  using space = typename B::memory_space;
  if constexpr (std::is_same_v<space, specdec::host_space>) {
    std::uint64_t seed = 6300;
    int raced = 0;
    for (const auto& shape : {std::tuple<index_t, index_t, index_t>{1, 3, 40}, {5, 4, 3000}, {16, 7, 1030}, {6, 2, 70000}}) {
      const index_t batch = std::get<0>(shape), spec = std::get<1>(shape), vocab = std::get<2>(shape);
      for (const bool with_draft : {false, true})
        for (const bool mixed : {false, true})
          for (const std::uint64_t offset : {std::uint64_t{0}, std::uint64_t{777}}) {
            CAPTURE(seed);
            vllm_case c = make_vllm_case(seed++, batch, spec, vocab, with_draft, mixed);
            const specdec::vllm::philox_noise noise{seed * 31, offset};
            for (index_t r = 0; r < batch; ++r)
              specdec::sampling::philox_exponentials(specdec::philox_stream{noise.seed, static_cast<std::uint64_t>(r)}, offset,
                                                     std::span<float>(c.noise.data() + r * vocab, static_cast<std::size_t>(vocab)));
            const auto want = vllm_reference(c);
            const auto tokens = static_cast<index_t>(c.ids.size());
            std::vector<std::int32_t> got(static_cast<std::size_t>(c.batch * c.width), -7);
            B b;
            const auto draft = c.draft.empty() ? specdec::matrix_view<const float>{}
                                               : specdec::matrix_view<const float>(c.draft.data(), tokens, vocab);
            specdec::vllm::rejection_sample(
                b, specdec::vector_view<const std::int32_t>(c.ids.data(), tokens),
                specdec::vector_view<const std::int64_t>(c.cu.data(), batch), draft,
                specdec::matrix_view<const float>(c.target.data(), tokens, vocab),
                specdec::vector_view<const std::int32_t>(c.bonus.data(), batch),
                specdec::vector_view<const std::uint8_t>(c.greedy.data(), batch),
                specdec::vector_view<const double>(c.uniforms.data(), tokens), noise,
                specdec::matrix_view<std::int32_t>(got.data(), batch, c.width));
            CHECK(got == want);
            // bf16 target rows: the same as the matrix form over the same bf16 rows.
            std::vector<specdec::bfloat16> target16(c.target.size());
            for (std::size_t i = 0; i < c.target.size(); ++i) target16[i] = specdec::to_bfloat16(c.target[i]);
            std::vector<std::int32_t> want16(got.size(), -7), got16(got.size(), -7);
            const specdec::matrix_view<const specdec::bfloat16> t16(target16.data(), tokens, vocab);
            const specdec::matrix_view<const specdec::bfloat16> draft16{};  // deterministic drafts (draft rows of bf16: test_half.cpp)
            if (!with_draft) {
              specdec::vllm::rejection_sample(b, specdec::vector_view<const std::int32_t>(c.ids.data(), tokens),
                                              specdec::vector_view<const std::int64_t>(c.cu.data(), batch), draft16, t16,
                                              specdec::vector_view<const std::int32_t>(c.bonus.data(), batch),
                                              specdec::vector_view<const std::uint8_t>(c.greedy.data(), batch),
                                              specdec::vector_view<const double>(c.uniforms.data(), tokens),
                                              specdec::matrix_view<const float>(c.noise.data(), batch, vocab),
                                              specdec::matrix_view<std::int32_t>(want16.data(), batch, c.width));
              specdec::vllm::rejection_sample(b, specdec::vector_view<const std::int32_t>(c.ids.data(), tokens),
                                              specdec::vector_view<const std::int64_t>(c.cu.data(), batch), draft16, t16,
                                              specdec::vector_view<const std::int32_t>(c.bonus.data(), batch),
                                              specdec::vector_view<const std::uint8_t>(c.greedy.data(), batch),
                                              specdec::vector_view<const double>(c.uniforms.data(), tokens), noise,
                                              specdec::matrix_view<std::int32_t>(got16.data(), batch, c.width));
              CHECK(got16 == want16);
            }
            for (index_t r = 0; r < batch; ++r) {
              const std::int64_t k = c.cu[static_cast<std::size_t>(r)] - (r == 0 ? 0 : c.cu[static_cast<std::size_t>(r - 1)]);
              index_t emitted = 0;
              while (emitted < c.width && want[static_cast<std::size_t>(r * c.width + emitted)] >= 0) ++emitted;
              raced += emitted <= k && c.greedy[static_cast<std::size_t>(r)] == 0;
            }
          }
    }
    CHECK(raced > 40);  // requests whose last token is the race's
  }
}

TEST_CASE_TEMPLATE("vLLM's rejection_sample on a backend names what is wrong", B, SPECDEC_ALL_BACKENDS) {
  const std::string at = "specdec::vllm::rejection_sample: ";
  const vllm_case good = make_vllm_case(6200, 3, 3, 8, true, false);
  const auto run = [](const vllm_case& k) {
    return error_of([&] {
      B b;
      (void)vllm_on(b, k);
    });
  };
  REQUIRE(good.ids.size() >= 2);
  CHECK(run(good) == "");
  vllm_case c = good;
  c.cu = {2, 1, static_cast<std::int64_t>(good.ids.size())};
  CHECK(run(c) == at + "cu_num_draft_tokens gives request 1 entries [2, 1); expected a non-decreasing range within [0, " +
                      std::to_string(good.ids.size()) + "]");
  c = good;
  c.width = 1;  // max_spec_len 0
  c.cu.assign(c.cu.size(), 0);
  c.cu.back() = static_cast<std::int64_t>(c.ids.size());
  CHECK(run(c) == at + "cu_num_draft_tokens gives request 2 " + std::to_string(c.ids.size()) +
                      " drafts; expected at most 0 (max_spec_len)");
  c = good;
  c.ids[1] = 8;
  CHECK(run(c) == at + "draft_token_ids[1] = 8; expected a token id in [0, 8)");
  c = good;
  c.uniforms[0] = 1.0;
  CHECK(run(c) == at + "uniforms[0] = 1; expected a value in [0, 1)");
  c = good;
  c.uniforms.clear();
  CHECK(run(c).find("is random (not greedy) and reads uniforms; got an empty one") != std::string::npos);
  c = good;
  for (auto& g : c.greedy) g = 1;
  c.uniforms.clear();
  c.noise.clear();
  c.target[3] = std::numeric_limits<float>::quiet_NaN();  // row 0, read by the greedy argmax
  CHECK(run(c) == at + "target_probs row 0 contains NaN; expected finite values (-inf is allowed and masks a token)");
  c.target[3] = 0.0f;
  CHECK(run(c) == "");  // an all-greedy batch needs neither uniforms nor exponentials
  c = good;
  c.bonus.back() = 9;
  for (auto& u : c.uniforms) u = 0.0;  // every draft accepted: the bonus tokens are emitted
  CHECK(run(c) == at + "bonus_token_ids[2] = 9; expected a token id in [0, 8)");
  // Drafts 1, 2 over V = 4: draft 1 is accepted (0.6 >= 0.5), draft 2 rejected (0.25 < 0.9), and the
  // residual (row 1 without token 2) raced against unit noise gives token 0.
  vllm_case tiny;
  tiny.batch = 1;
  tiny.width = 3;
  tiny.vocab = 4;
  tiny.ids = {1, 2};
  tiny.cu = {2};
  tiny.bonus = {3};
  tiny.greedy = {0};
  tiny.target = {0.1f, 0.6f, 0.2f, 0.1f, 0.25f, 0.25f, 0.25f, 0.25f};
  tiny.uniforms = {0.5, 0.9};
  tiny.noise = {1.0f, 1.0f, 1.0f, 1.0f};
  {
    B b;
    CHECK(vllm_on(b, tiny) == std::vector<std::int32_t>{1, 0, -1});
  }
  c = tiny;
  c.target[1] = 1.5f;
  CHECK(run(c) == at + "target_probs[0, 1] = 1.5; expected a probability in [0, 1]");
  c = tiny;
  c.target[7] = 0.5f;  // row 1 is read whole at the rejection
  CHECK(run(c) == at + "target_probs row 1 sums to 1.25; expected 1 within 0.0001");
  c = tiny;
  c.noise[2] = -1.0f;
  CHECK(run(c) == at + "exponentials[0, 2] = -1; expected a finite value >= 0 (an Exp(1) sample)");
  c = tiny;
  c.noise.clear();
  CHECK(run(c) == at + "request 0 is random (not greedy) and reads exponentials; got an empty one");
  c = good;
  c.noise.resize(c.noise.size() - 8);  // 2 rows for 3 requests
  CHECK(run(c) == at + "exponentials is 2 x 8; expected 3 x 8 (one row per request) or none");
}

namespace {

/// Rows for the top-k filters: ties (entries drawn from a few levels), zeros, -0 and, for logits, -inf.
std::vector<float> filter_rows(std::uint64_t seed, index_t rows, index_t vocab, bool probabilities) {
  const specdec::philox_stream rng{seed, 41};
  std::uint64_t at = 0;
  std::vector<float> x(static_cast<std::size_t>(rows * vocab));
  for (index_t r = 0; r < rows; ++r) {
    const bool levels = rng.uniform_double(at++) < 0.5;  // few distinct values: many ties
    double total = 0.0;
    for (index_t j = 0; j < vocab; ++j) {
      const double u = rng.uniform_double(at++);
      double v = levels ? std::floor(u * 6.0) : u * u;
      if (rng.uniform_double(at++) < 0.1) v = 0.0;
      float& e = x[static_cast<std::size_t>(r * vocab + j)];
      e = probabilities ? static_cast<float>(v) : static_cast<float>(8.0 * v - 20.0);
      if (!probabilities && rng.uniform_double(at++) < 0.05) e = -std::numeric_limits<float>::infinity();
      if (e == 0.0f && rng.uniform_double(at++) < 0.5) e = -0.0f;
      total += probabilities ? static_cast<double>(e) : 0.0;
    }
    if (probabilities && total == 0.0) x[static_cast<std::size_t>(r * vocab)] = 1.0f, total = 1.0;
    if (probabilities)
      for (index_t j = 0; j < vocab; ++j) {
        float& e = x[static_cast<std::size_t>(r * vocab + j)];
        e = static_cast<float>(static_cast<double>(e) / total);
      }
  }
  return x;
}

}  // namespace

TEST_CASE_TEMPLATE("FlashInfer's top-k filters on a backend equal the host forms, k per row", B, SPECDEC_TEAM_BACKENDS) {
  std::uint64_t seed = 7100;
  int checked = 0;
  for (const auto& shape : {std::pair<index_t, index_t>{1, 1}, {3, 7}, {6, 1030}, {4, 5000}, {2, 3000}})
    for (const bool probabilities : {true, false}) {
      const index_t rows = shape.first, vocab = shape.second;
      CAPTURE(seed);
      const std::vector<float> x = filter_rows(seed++, rows, vocab, probabilities);
      const specdec::philox_stream rng{seed, 43};
      std::vector<std::int64_t> ks;
      for (index_t r = 0; r < rows; ++r) {
        const double u = rng.uniform_double(static_cast<std::uint64_t>(r));
        ks.push_back(r == 0 ? 1 : r == 1 ? vocab : 1 + static_cast<std::int64_t>(u * double(vocab)));
      }
      // The host forms, row by row with its k; and an independent check of what they keep.
      std::vector<float> want = x;
      for (index_t r = 0; r < rows; ++r) {
        const specdec::matrix_view<float> row(want.data() + r * vocab, 1, vocab);
        if (probabilities) sampling::top_k_renorm(row, static_cast<index_t>(ks[static_cast<std::size_t>(r)]));
        else sampling::top_k_mask_logits(row, static_cast<index_t>(ks[static_cast<std::size_t>(r)]));
        std::vector<float> sorted(x.begin() + r * vocab, x.begin() + (r + 1) * vocab);
        std::sort(sorted.begin(), sorted.end(), std::greater<>());
        const float kth = sorted[static_cast<std::size_t>(ks[static_cast<std::size_t>(r)] - 1)];
        double kept = 0.0;
        for (index_t j = 0; j < vocab; ++j) kept += x[static_cast<std::size_t>(r * vocab + j)] >= kth ? x[static_cast<std::size_t>(r * vocab + j)] : 0.0f;
        for (index_t j = 0; j < vocab; ++j) {
          const float v = x[static_cast<std::size_t>(r * vocab + j)], got = want[static_cast<std::size_t>(r * vocab + j)];
          if (!probabilities) {
            CHECK(got == (v < kth ? -std::numeric_limits<float>::infinity() : v));
          } else if (v < kth || kept == 0.0) {
            CHECK((v < kth ? got == 0.0f : true));
          } else {
            CHECK(std::fabs(static_cast<double>(got) - static_cast<double>(v) / kept) <= 2e-7 * static_cast<double>(got));
          }
        }
      }
      // The backend form: one launch for every row, out of place and in place.
      B b;
      auto in = b.upload(std::span<const float>(x));
      auto k = b.upload(std::span<const std::int64_t>(ks));
      auto out = b.template allocate<float>(rows * vocab);
      using space = typename B::memory_space;
      const specdec::matrix_view<const float, space> in_view(in.matrix(rows, vocab));
      const specdec::vector_view<const std::int64_t, space> k_view(k.view());
      if (probabilities) sampling::top_k_renorm(b, in_view, k_view, out.matrix(rows, vocab));
      else sampling::top_k_mask_logits(b, in_view, k_view, out.matrix(rows, vocab));
      CHECK(b.download(out.view()) == want);
      if (probabilities) sampling::top_k_renorm(b, in_view, k_view, in.matrix(rows, vocab));
      else sampling::top_k_mask_logits(b, in_view, k_view, in.matrix(rows, vocab));
      CHECK(b.download(in.view()) == want);
      ++checked;
    }
  CHECK(checked == 10);
}

TEST_CASE_TEMPLATE("FlashInfer's top-p and joint renormalisations on a backend equal the host forms, p per row", B,
                   SPECDEC_TEAM_BACKENDS) {
  std::uint64_t seed = 7300;
  int kept_some = 0, cut_some = 0;
  for (const auto& shape : {std::pair<index_t, index_t>{1, 1}, {3, 7}, {6, 1030}, {4, 5000}, {2, 3000}})
    for (const bool joint : {false, true}) {
      const index_t rows = shape.first, vocab = shape.second;
      CAPTURE(seed);
      const std::vector<float> x = filter_rows(seed++, rows, vocab, true);
      const specdec::philox_stream rng{seed, 47};
      std::vector<std::int64_t> ks;
      std::vector<float> ps;
      for (index_t r = 0; r < rows; ++r) {
        ks.push_back(1 + static_cast<std::int64_t>(rng.uniform_double(2 * static_cast<std::uint64_t>(r)) * double(vocab)));
        const double u = rng.uniform_double(2 * static_cast<std::uint64_t>(r) + 1);
        ps.push_back(r == 0 ? 1.0f : static_cast<float>(0.05 + 0.95 * u));
      }
      // The host forms row by row, and an independent check of what they keep: a token iff the mass
      // strictly above it is below p (and, jointly, fewer than k entries are above it).
      std::vector<float> want = x;
      for (index_t r = 0; r < rows; ++r) {
        const specdec::matrix_view<float> row(want.data() + r * vocab, 1, vocab);
        const auto k = static_cast<index_t>(ks[static_cast<std::size_t>(r)]);
        const float p = ps[static_cast<std::size_t>(r)];
        if (joint) sampling::top_k_top_p_joint_renorm(row, k, p);
        else sampling::top_p_renorm(row, p);
        for (index_t j = 0; j < vocab; ++j) {
          const float v = x[static_cast<std::size_t>(r * vocab + j)];
          double above = 0.0;
          index_t larger = 0;
          for (index_t i = 0; i < vocab; ++i) {
            const float y = x[static_cast<std::size_t>(r * vocab + i)];
            if (y > v) above += static_cast<double>(y), ++larger;
          }
          const bool keep = above < static_cast<double>(p) && (!joint || larger < k);
          CHECK((want[static_cast<std::size_t>(r * vocab + j)] != 0.0f || v == 0.0f) == (keep || v == 0.0f));
          (keep ? kept_some : cut_some) += 1;
        }
      }
      B b;
      using space = typename B::memory_space;
      auto in = b.upload(std::span<const float>(x));
      auto k = b.upload(std::span<const std::int64_t>(ks));
      auto p = b.upload(std::span<const float>(ps));
      auto out = b.template allocate<float>(rows * vocab);
      const specdec::matrix_view<const float, space> in_view(in.matrix(rows, vocab));
      const specdec::vector_view<const std::int64_t, space> k_view(k.view());
      const specdec::vector_view<const float, space> p_view(p.view());
      if (joint) sampling::top_k_top_p_joint_renorm(b, in_view, k_view, p_view, out.matrix(rows, vocab));
      else sampling::top_p_renorm(b, in_view, p_view, out.matrix(rows, vocab));
      CHECK(b.download(out.view()) == want);
    }
  CHECK(kept_some > 100);
  CHECK(cut_some > 100);
}

TEST_CASE_TEMPLATE("FlashInfer's top-k filters on a backend name what is wrong", B, SPECDEC_ALL_BACKENDS) {
  using space = typename B::memory_space;
  const auto run = [](std::vector<float> x, index_t rows, std::vector<std::int64_t> ks, bool probabilities, index_t out_rows = -1) {
    return error_of([&] {
      B b;
      const index_t vocab = static_cast<index_t>(x.size()) / rows;
      auto in = b.upload(std::span<const float>(x));
      auto k = b.upload(std::span<const std::int64_t>(ks));
      auto out = b.template allocate<float>((out_rows < 0 ? rows : out_rows) * vocab);
      const specdec::matrix_view<const float, space> v(in.matrix(rows, vocab));
      const specdec::vector_view<const std::int64_t, space> kv(k.view());
      if (probabilities) sampling::top_k_renorm(b, v, kv, out.matrix(out_rows < 0 ? rows : out_rows, vocab));
      else sampling::top_k_mask_logits(b, v, kv, out.matrix(out_rows < 0 ? rows : out_rows, vocab));
    });
  };
  const std::string renorm = "specdec::sampling::top_k_renorm: ", mask = "specdec::sampling::top_k_mask_logits: ";
  const std::vector<float> probs = {0.5f, 0.25f, 0.25f, 0.0f, 0.1f, 0.2f, 0.3f, 0.4f};
  CHECK(run(probs, 2, {2, 4}, true) == "");
  CHECK(run(probs, 2, {2, 5}, true) == renorm + "top_k[1] = 5; expected 1 <= k <= V = 4");
  CHECK(run(probs, 2, {0}, true) == renorm + "top_k[0] = 0; expected 1 <= k <= V = 4");
  CHECK(run(probs, 2, {1, 2, 3}, true) == renorm + "top_k has 3 entries; expected 1 or one per row (2)");
  CHECK(run(probs, 2, {1}, true, 1) == renorm + "out is 1 x 4; expected 2 x 4 like probs");
  std::vector<float> bad = probs;
  bad[5] = -0.2f;
  CHECK(run(bad, 2, {1}, true) == renorm + "probs[1, 1] = -0.2; expected a probability in [0, 1]");
  bad = probs;
  bad[7] = 0.6f;
  CHECK(run(bad, 2, {1}, true) == renorm + "probs row 1 sums to 1.2; expected 1 within 0.001");
  bad = probs;
  bad[2] = std::numeric_limits<float>::quiet_NaN();
  CHECK(run(bad, 2, {1}, false) == mask + "logits[0, 2] = nan; expected finite values or -inf");
  bad[2] = std::numeric_limits<float>::infinity();
  CHECK(run(bad, 2, {1}, false) == mask + "logits[0, 2] = inf; expected finite values or -inf");
  bad[2] = -std::numeric_limits<float>::infinity();
  CHECK(run(bad, 2, {3}, false) == "");
  const auto run_p = [](std::vector<float> x, index_t rows, std::vector<float> ps) {
    return error_of([&] {
      B b;
      const index_t vocab = static_cast<index_t>(x.size()) / rows;
      auto in = b.upload(std::span<const float>(x));
      auto p = b.upload(std::span<const float>(ps));
      auto out = b.template allocate<float>(rows * vocab);
      sampling::top_p_renorm(b, specdec::matrix_view<const float, space>(in.matrix(rows, vocab)),
                             specdec::vector_view<const float, space>(p.view()), out.matrix(rows, vocab));
    });
  };
  const std::string top_p = "specdec::sampling::top_p_renorm: ";
  CHECK(run_p(probs, 2, {0.5f, 1.0f}) == "");
  CHECK(run_p(probs, 2, {0.5f, 0.0f}) == top_p + "top_p[1] = 0; expected a value in (0, 1]");
  CHECK(run_p(probs, 2, {1.5f}) == top_p + "top_p[0] = 1.5; expected a value in (0, 1]");
  CHECK(run_p(probs, 2, {}) == top_p + "top_p is empty; expected 1 or one per row");
}
