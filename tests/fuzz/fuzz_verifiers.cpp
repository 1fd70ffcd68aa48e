// SPDX-License-Identifier: Apache-2.0
// Every verifier with random small vocabularies, trees, rows (valid distributions and arbitrary
// floats), uniforms and options, on the Eigen and the Thrust (CPP) backends. Each call either throws
// specdec::invalid_argument or returns per request an accepted path that is a root-to-node path of
// its tree within the depth cap, emitted tokens that are the path's tokens followed by at most one
// final token, every token in [0, V), no more uniforms than were supplied, a final token with mass in
// the distribution it was drawn from; and both backends return exactly the same results.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/backend/thrust.hpp>
#include <specdec/sampling/sampling.hpp>

#include "fuzz_input.hpp"

namespace {
using specdec::index_t;
namespace sampling = specdec::sampling;

/// Rows `[rows x V]`: normalised non-negative weights (a valid distribution), or raw fuzz floats.
std::vector<float> make_rows(fuzz::input& in, index_t rows, index_t v, bool valid) {
  std::vector<float> x(static_cast<std::size_t>(rows * v));
  for (index_t r = 0; r < rows; ++r) {
    double total = 0.0;
    for (index_t j = 0; j < v; ++j) {
      float& e = x[static_cast<std::size_t>(r * v + j)];
      e = valid ? static_cast<float>(in.byte() % 8) : in.value();
      total += e;
    }
    if (valid) {
      if (total == 0.0) x[static_cast<std::size_t>(r * v)] = 1.0f, total = 1.0;
      for (index_t j = 0; j < v; ++j) x[static_cast<std::size_t>(r * v + j)] = static_cast<float>(x[static_cast<std::size_t>(r * v + j)] / total);
    }
  }
  return x;
}

void check(const std::vector<sampling::speculative_result>& results, const std::vector<specdec::draft_tree>& trees,
           const std::vector<sampling::speculative_request>& requests, index_t v, bool path_tokens) {
  fuzz::require(results.size() == requests.size(), "one result per request");
  for (std::size_t r = 0; r < results.size(); ++r) {
    const auto& out = results[r];
    const auto& t = trees[r];
    std::int32_t previous = 0;
    for (const auto node : out.accepted_nodes) {
      fuzz::require(node > 0 && node < t.size() && t.parent[static_cast<std::size_t>(node)] == previous, "accepted path", node, previous);
      previous = node;
    }
    if (requests[r].max_accepted >= 0)
      fuzz::require(static_cast<index_t>(out.accepted_nodes.size()) <= requests[r].max_accepted, "depth cap");
    const std::size_t k = out.accepted_nodes.size();
    fuzz::require(out.tokens.size() >= k && out.tokens.size() <= k + 1, "emitted count", static_cast<long long>(out.tokens.size()), static_cast<long long>(k));
    for (std::size_t i = 0; i < out.tokens.size(); ++i) {
      fuzz::require(out.tokens[i] >= 0 && out.tokens[i] < v, "emitted token outside [0, V)", out.tokens[i], v);
      if (path_tokens && i < k)
        fuzz::require(out.tokens[i] == t.token[static_cast<std::size_t>(out.accepted_nodes[i])], "accepted token", out.tokens[i]);
    }
    if (!requests[r].uniforms.is_philox())
      fuzz::require(static_cast<std::size_t>(out.uniforms_consumed) <= requests[r].uniforms.supplied(), "uniforms consumed");
    if (!out.final_distribution.empty() && out.tokens.size() > k) {
      double mass = 0.0;
      for (const float e : out.final_distribution) mass += e;
      if (mass > 0.0) fuzz::require(out.final_distribution[static_cast<std::size_t>(out.tokens.back())] > 0.0f, "final token without mass");
    }
  }
}

bool same(const std::vector<sampling::speculative_result>& a, const std::vector<sampling::speculative_result>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].tokens != b[i].tokens || a[i].accepted_nodes != b[i].accepted_nodes || a[i].bonus != b[i].bonus ||
        a[i].uniforms_consumed != b[i].uniforms_consumed || a[i].final_distribution != b[i].final_distribution)
      return false;
  return true;
}

/// Runs `call` on both backends: both throw, or both return the same results (then checked).
template <class Call>
void on_both(Call call, const std::vector<specdec::draft_tree>& trees, const std::vector<sampling::speculative_request>& requests,
             index_t v, bool path_tokens) {
  specdec::eigen e;
  specdec::thrust_backend<specdec::thrust_system::cpp> t;
  std::optional<std::vector<sampling::speculative_result>> a, b;
  try {
    a = call(e);
  } catch (const specdec::invalid_argument&) {
  }
  try {
    b = call(t);
  } catch (const specdec::invalid_argument&) {
  }
  fuzz::require(a.has_value() == b.has_value(), "one backend threw, the other did not", a.has_value(), b.has_value());
  if (!a) return;
  fuzz::require(same(*a, *b), "backends disagree");
  check(*a, trees, requests, v, path_tokens);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::input in(data, size);
  const index_t v = in.range(1, 9), n_requests = in.range(1, 3);
  std::vector<specdec::draft_tree> trees;
  std::vector<sampling::speculative_request> requests(static_cast<std::size_t>(n_requests));
  index_t rows = 0;
  for (index_t r = 0; r < n_requests; ++r) {
    const auto n = static_cast<std::size_t>(in.range(1, 7));
    std::vector<std::int32_t> tokens(n), parents(n);
    const bool chain = in.flag();
    for (std::size_t i = 0; i < n; ++i) {
      tokens[i] = static_cast<std::int32_t>(in.range(0, v - (in.byte() < 250 ? 1 : 0)));  // sometimes == V
      parents[i] = i == 0 ? -1 : static_cast<std::int32_t>(chain ? i - 1 : in.range(0, static_cast<std::int64_t>(i) - 1));
    }
    trees.push_back(specdec::make_tree(tokens, parents));
  }
  std::vector<std::vector<double>> uniform_values(static_cast<std::size_t>(n_requests));
  std::vector<std::vector<index_t>> draft_rows(static_cast<std::size_t>(n_requests));
  const index_t draft_count = in.range(0, 4);
  for (index_t r = 0; r < n_requests; ++r) {
    auto& q = requests[static_cast<std::size_t>(r)];
    q.tree = trees[static_cast<std::size_t>(r)];
    q.target_row = rows + (in.byte() < 250 ? 0 : in.range(-1, 2));
    rows += trees[static_cast<std::size_t>(r)].size();
    if (in.flag()) {
      auto& u = uniform_values[static_cast<std::size_t>(r)];
      u.resize(static_cast<std::size_t>(in.range(0, 10)));
      for (auto& x : u) x = in.byte() < 250 ? static_cast<double>(in.byte()) / 256.0 : static_cast<double>(in.value());
      q.uniforms = sampling::uniform_stream::values(u);
    } else {
      q.uniforms = sampling::uniform_stream::philox({in.u32(), in.u32()});
    }
    if (in.flag()) {
      auto& d = draft_rows[static_cast<std::size_t>(r)];
      for (index_t i = 0; i < trees[static_cast<std::size_t>(r)].size(); ++i) d.push_back(in.range(-1, draft_count - 1 + (in.byte() < 250 ? 0 : 1)));
      q.draft_rows = d;
    }
    if (in.flag()) q.bonus_token = static_cast<std::int32_t>(in.range(-1, v));
    if (in.flag()) q.max_accepted = in.range(-1, 4);
    q.noise_row = in.range(-1, n_requests);
    q.greedy = in.byte() < 40;
  }
  const bool valid = in.byte() < 200;
  const auto target = make_rows(in, rows + 1, v, valid);  // one spare row: vLLM's typical needs n - 1
  const auto draft = make_rows(in, draft_count, v, in.byte() < 220);
  const auto noise = make_rows(in, n_requests, v, true);
  sampling::speculative_options options;
  options.test = in.flag() ? sampling::acceptance_test::ratio : sampling::acceptance_test::strict_product;
  options.range = in.flag() ? sampling::uniform_range::closed_open : sampling::uniform_range::open_closed;
  options.draw = in.byte() < 200 ? sampling::final_draw::inverse_cdf : sampling::final_draw::exponential_race;
  options.fallback = static_cast<specdec::empty_residual>(in.range(0, 2));
  options.lenience = in.byte() < 200 ? 1.0f : in.weight();
  options.flashinfer_retest = in.byte() < 40;
  const float temperature = in.byte() < 240 ? 0.25f + static_cast<float>(in.byte()) / 64.0f : in.value();
  const bool keep = in.flag();
  options.keep_final_distribution = keep;
  for (auto& q : requests) q.temperature = temperature;
  const index_t target_rows = rows + (in.byte() < 250 ? 0 : in.range(-2, 1));

  const auto view = [&](auto& backend, auto& buffer, index_t r) {
    using space = typename std::remove_reference_t<decltype(backend)>::memory_space;
    return specdec::matrix_view<const float, space>(buffer.view().data(), r, v);
  };
  switch (in.byte() % 8) {
    case 0:
      on_both([&](auto& be) {
        auto t = be.upload(std::span<const float>(target));
        auto d = be.upload(std::span<const float>(draft));
        auto z = be.upload(std::span<const float>(noise));
        return sampling::verify_speculative(
            be,
            {view(be, t, target_rows), view(be, d, draft_count),
             options.draw == sampling::final_draw::exponential_race ? view(be, z, n_requests) : decltype(view(be, z, 0)){}},
            requests, options);
      }, trees, requests, v, true);
      break;
    case 1:
      on_both([&](auto& be) {
        auto t = be.upload(std::span<const float>(target));
        auto d = be.upload(std::span<const float>(draft));
        return sampling::verify_speculative_logits(be, {view(be, t, target_rows), view(be, d, draft_count)}, requests, options);
      }, trees, requests, v, false);
      break;
    case 2:
      on_both([&](auto& be) {
        auto t = be.upload(std::span<const float>(target));
        return sampling::verify_greedy(be, view(be, t, target_rows), requests);
      }, trees, requests, v, true);
      break;
    case 3: {
      sampling::typical_options typical;
      typical.epsilon = in.weight();
      typical.delta = in.weight();
      typical.convention = in.flag() ? sampling::typical_convention::medusa : sampling::typical_convention::vllm_v0;
      typical.emit_bonus = in.flag();
      on_both([&](auto& be) {
        auto t = be.upload(std::span<const float>(target));
        return sampling::verify_typical(be, view(be, t, target_rows), requests, typical);
      }, trees, requests, v, true);
      break;
    }
    case 4: {
      sampling::coin_options coin{in.weight(), in.weight() + (in.flag() ? 0.0f : 0.5f), options.fallback, keep};
      on_both([&](auto& be) {
        auto t = be.upload(std::span<const float>(target));
        return sampling::verify_coin_tree(be, view(be, t, target_rows), requests, coin);
      }, trees, requests, v, true);
      break;
    }
    case 5: {
      // The output form with fuzzed output shapes: it throws exactly when a shape does not fit (or the
      // returning form throws), and otherwise writes what the returning form returns.
      const index_t width = in.range(0, 8), node_width = in.range(-1, 8), batch = n_requests + (in.byte() < 240 ? 0 : in.range(-1, 1));
      std::vector<std::int32_t> tokens(static_cast<std::size_t>(std::max<index_t>(batch * width, 0)), 7);
      std::vector<std::int32_t> nodes(static_cast<std::size_t>(std::max<index_t>(batch * node_width, 0)), 7);
      std::vector<std::int32_t> accepted(static_cast<std::size_t>(std::max<index_t>(batch, 0)), 7);
      std::vector<float> finals(static_cast<std::size_t>(std::max<index_t>(batch, 0) * v), 7.0f);
      specdec::eigen e;
      sampling::verify_outputs<> out{.tokens = {tokens.data(), batch, width}, .accepted = {accepted.data(), batch}};
      if (node_width >= 0) out.accepted_nodes = {nodes.data(), batch, node_width};
      if (keep) out.final_distributions = {finals.data(), batch, v};
      std::optional<std::vector<sampling::speculative_result>> want;
      bool wrote = false;
      const specdec::matrix_view<const float> target_view(target.data(), target_rows, v);
      try {
        want = sampling::verify_speculative(e, {target_view}, requests, options);
      } catch (const specdec::invalid_argument&) {
      }
      try {
        sampling::verify_speculative(e, {target_view}, requests, options, out);
        wrote = true;
      } catch (const specdec::invalid_argument&) {
      }
      if (!want) {
        fuzz::require(!wrote, "the output form wrote where the returning form threw");
        break;
      }
      bool fits = batch == n_requests;
      for (const auto& q : requests) {
        index_t depth = q.tree.size() > 0 ? *std::max_element(q.tree.depth.begin(), q.tree.depth.end()) : 0;
        if (q.max_accepted >= 0) depth = std::min(depth, q.max_accepted);
        fits = fits && width >= depth + 1 && (node_width <= 0 || node_width >= depth);  // 0 columns: an empty view, none asked
      }
      fuzz::require(wrote == fits, "the output form threw on shapes that fit, or wrote into ones that do not", wrote, fits);
      if (!wrote) break;
      for (std::size_t r = 0; r < want->size(); ++r) {
        const auto& w = (*want)[r];
        fuzz::require(accepted[r] == static_cast<std::int32_t>(w.accepted_nodes.size()), "accepted count");
        for (index_t c = 0; c < width; ++c)
          fuzz::require(tokens[r * static_cast<std::size_t>(width) + static_cast<std::size_t>(c)] ==
                            (static_cast<std::size_t>(c) < w.tokens.size() ? w.tokens[static_cast<std::size_t>(c)] : -1),
                        "padded token");
        for (index_t c = 0; c < node_width; ++c)
          fuzz::require(nodes[r * static_cast<std::size_t>(node_width) + static_cast<std::size_t>(c)] ==
                            (static_cast<std::size_t>(c) < w.accepted_nodes.size() ? w.accepted_nodes[static_cast<std::size_t>(c)] : -1),
                        "padded node");
        if (keep)
          for (index_t j = 0; j < v; ++j)
            fuzz::require(finals[r * static_cast<std::size_t>(v) + static_cast<std::size_t>(j)] ==
                              (w.final_distribution.empty() ? 0.0f : w.final_distribution[static_cast<std::size_t>(j)]),
                          "final distribution");
      }
      break;
    }
    case 6: {
      // The batched form (sampling/batch.hpp) over the same trees: when it returns, the request form
      // returns the same decisions; when the request form returns (and every bonus token is in range,
      // which the batch checks up front), so does the batch.
      const auto batch = static_cast<std::size_t>(n_requests);
      std::size_t nodes = 1;
      for (const auto& t : trees) nodes = std::max(nodes, static_cast<std::size_t>(t.size()));
      std::vector<std::int32_t> tokens(batch * nodes, 0), parents(batch * nodes, 0), counts, caps, bonus, out_tokens(batch * nodes),
          out_nodes(batch * nodes), out_accepted(batch), out_used(batch), out_retest(batch);
      std::vector<index_t> rows_of, drafts(batch * nodes, -1), noise_rows;
      std::vector<float> finals(batch * static_cast<std::size_t>(v));
      const bool philox = in.flag();
      std::size_t u_cols = 0;
      for (const auto& u : uniform_values) u_cols = std::max(u_cols, u.size());
      std::vector<double> uniforms(philox ? 0 : batch * u_cols, std::numeric_limits<double>::quiet_NaN());
      std::vector<specdec::philox_stream> streams;
      std::vector<sampling::speculative_request> same = requests;
      bool bonus_in_range = true;
      for (std::size_t r = 0; r < batch; ++r) {
        auto& q = same[r];
        q.greedy = false;
        const auto& t = trees[r];
        for (index_t i = 0; i < t.size(); ++i) {
          tokens[r * nodes + static_cast<std::size_t>(i)] = t.token[static_cast<std::size_t>(i)];
          parents[r * nodes + static_cast<std::size_t>(i)] = t.parent[static_cast<std::size_t>(i)];
          if (!q.draft_rows.empty()) drafts[r * nodes + static_cast<std::size_t>(i)] = q.draft_rows[static_cast<std::size_t>(i)];
        }
        if (q.draft_rows.size() != static_cast<std::size_t>(t.size())) q.draft_rows = {};
        counts.push_back(static_cast<std::int32_t>(t.size()));
        rows_of.push_back(q.target_row);
        caps.push_back(static_cast<std::int32_t>(q.max_accepted));
        bonus.push_back(q.bonus_token.value_or(-1));
        bonus_in_range = bonus_in_range && (!q.bonus_token || (*q.bonus_token >= 0 && *q.bonus_token < v));
        if (q.bonus_token && *q.bonus_token == -1) q.bonus_token = std::nullopt;  // -1 is "none" in the batch
        noise_rows.push_back(q.noise_row);
        if (philox) {
          streams.push_back({in.u32(), in.u32()});
          q.uniforms = sampling::uniform_stream::philox(streams.back());
        } else {
          const auto& u = uniform_values[r];
          std::copy(u.begin(), u.end(), uniforms.begin() + static_cast<std::ptrdiff_t>(r * u_cols));
          q.uniforms = sampling::uniform_stream::values(u);  // NaN padding in the batch: an error there too
        }
      }
      specdec::eigen e;
      const specdec::matrix_view<const float> target_view(target.data(), target_rows, v);
      const specdec::matrix_view<const float> draft_view(draft.data(), draft_count, v);
      const specdec::matrix_view<const float> noise_view(noise.data(), n_requests, v);
      const bool race = options.draw == sampling::final_draw::exponential_race;
      sampling::speculative_rows<> rows{target_view, draft_view, race ? noise_view : specdec::matrix_view<const float>{}};
      std::optional<std::vector<sampling::speculative_result>> want;
      try {
        want = sampling::verify_speculative(e, rows, same, options);
      } catch (const specdec::invalid_argument&) {
      }
      sampling::tree_batch<> b;
      const auto n = static_cast<index_t>(nodes);
      b.tokens = {tokens.data(), n_requests, n};
      b.parents = {parents.data(), n_requests, n};
      b.node_counts = {counts.data(), n_requests};
      b.target_rows = {rows_of.data(), n_requests};
      b.draft_rows = {drafts.data(), n_requests, n};
      b.max_accepted = {caps.data(), n_requests};
      b.bonus_tokens = {bonus.data(), n_requests};
      if (race) b.noise_rows = {noise_rows.data(), n_requests};
      if (philox) b.uniform_streams = {streams.data(), n_requests};
      else b.uniforms = {uniforms.data(), n_requests, static_cast<index_t>(u_cols)};
      sampling::verify_outputs<> out{.tokens = {out_tokens.data(), n_requests, n},
                                     .accepted = {out_accepted.data(), n_requests},
                                     .accepted_nodes = {out_nodes.data(), n_requests, n - 1},
                                     .uniforms_consumed = {out_used.data(), n_requests},
                                     .retest_accepted = {out_retest.data(), n_requests}};
      if (keep) out.final_distributions = {finals.data(), n_requests, v};
      bool wrote = false;
      std::vector<std::int32_t> first_tokens;
      for (int backend = 0; backend < 2; ++backend) {
        bool ok = true;
        try {
          if (backend == 0) {
            sampling::verify_speculative(e, rows, b, options, out);
          } else {
            specdec::thrust_backend<specdec::thrust_system::cpp> t;
            sampling::verify_speculative(t, rows, b, options, out);
          }
        } catch (const specdec::invalid_argument&) {
          ok = false;
        }
        if (backend == 0) {
          wrote = ok;
          first_tokens = out_tokens;
        } else {
          fuzz::require(ok == wrote && (!ok || out_tokens == first_tokens), "the backends disagree on the batched form");
        }
      }
      if (want && bonus_in_range && u_cols > 0) {
        bool full = true;  // the batch pads short uniform rows with NaN: a request that needs them fails there
        for (const auto& u : uniform_values) full = full && (philox || u.size() == u_cols);
        // The batch wants a row for every node; the request form takes a bonus request without its
        // last node's row (vLLM's layout).
        for (std::size_t r = 0; r < batch; ++r) full = full && same[r].target_row + trees[r].size() <= target_rows;
        if (full) fuzz::require(wrote, "the batched form threw where the request form returned");
      }
      if (!wrote) break;
      fuzz::require(want.has_value(), "the batched form returned where the request form threw");
      for (std::size_t r = 0; r < batch; ++r) {
        const auto& w = (*want)[r];
        fuzz::require(out_accepted[r] == static_cast<std::int32_t>(w.accepted_nodes.size()), "batched accepted count");
        fuzz::require(out_used[r] == static_cast<std::int32_t>(w.uniforms_consumed), "batched uniforms consumed");
        fuzz::require(out_retest[r] == static_cast<std::int32_t>(w.retest_accepted), "batched re-test count");
        for (std::size_t c = 0; c < nodes; ++c)
          fuzz::require(out_tokens[r * nodes + c] == (c < w.tokens.size() ? w.tokens[c] : -1), "batched token");
        for (std::size_t c = 0; c + 1 < nodes; ++c)
          fuzz::require(out_nodes[r * (nodes - 1) + c] == (c < w.accepted_nodes.size() ? w.accepted_nodes[c] : -1), "batched node");
        if (keep)
          for (index_t j = 0; j < v; ++j)
            fuzz::require(finals[r * static_cast<std::size_t>(v) + static_cast<std::size_t>(j)] ==
                              (w.final_distribution.empty() ? 0.0f : w.final_distribution[static_cast<std::size_t>(j)]),
                          "batched final distribution");
      }
      break;
    }
    default: {
      std::vector<std::int32_t> argmax(static_cast<std::size_t>(std::max<index_t>(target_rows, 0)));
      for (auto& a : argmax) a = static_cast<std::int32_t>(in.range(-1, v));
      std::optional<std::vector<sampling::speculative_result>> got;
      try {
        got = sampling::verify_greedy(argmax, v, requests);
      } catch (const specdec::invalid_argument&) {
      }
      if (got) check(*got, trees, requests, v, true);
      break;
    }
  }
  return 0;
}
