// SPDX-License-Identifier: Apache-2.0
// Entry points of the fuzz_views / fuzz_sizes list (entry_points.hpp): the request-based verifiers
// (greedy, speculative, typical, coin tree), target_probabilities and the host filters, SGLang's
// stochastic tree kernel and host greedy form, and Medusa's candidate fill.
#pragma once

#include <specdec/interop/medusa.hpp>
#include <specdec/interop/sglang.hpp>
#include <specdec/interop/sglang_sampling.hpp>
#include <specdec/sampling/distribution.hpp>
#include <specdec/sampling/greedy.hpp>
#include <specdec/sampling/speculative.hpp>
#include <specdec/sampling/tree_coin.hpp>
#include <specdec/sampling/typical.hpp>

#include "entry_plan.hpp"

namespace fuzz::entry {

/// Every result's accepted nodes, tokens and bonus flag, in order.
inline digest results_digest(const std::vector<specdec::sampling::speculative_result>& results) {
  digest d;
  for (const auto& r : results) {
    d.push_back(-1);
    d.insert(d.end(), r.accepted_nodes.begin(), r.accepted_nodes.end());
    d.push_back(-2);
    d.insert(d.end(), r.tokens.begin(), r.tokens.end());
    d.push_back(r.bonus ? 1 : 0);
  }
  return d;
}

struct request_greedy {
  static constexpr const char* name = "verify_greedy (requests, logits)";
  static void plan(call_plan& p) {
    add<float>(p, "target_logits", 2, 4, 8, role::in, logits(p.input(), 32));
    add_tree(p, 4, 8);
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sampling::speculative_request q;
    q.tree = tree_of(c, {1, 2, 3});
    return results_digest(specdec::sampling::verify_greedy(b, c.m<const float>(0), std::span(&q, 1)));
  }
};

struct request_greedy_argmax {
  static constexpr const char* name = "verify_greedy (requests, target_argmax)";
  static void plan(call_plan& p) {
    add<std::int32_t>(p, "target_argmax", 1, 4, 1, role::in, ints(p.input(), 4, 0, 7), true);
    add_tree(p, 4, 8);
    p.size(8);  // vocab_size
  }
  template <class B>
  static digest call(B&, const context& c) {
    specdec::sampling::speculative_request q;
    q.tree = tree_of(c, {1, 2, 3});
    return results_digest(specdec::sampling::verify_greedy(c.s<const std::int32_t>(0), c.sizes[0], std::span(&q, 1)));
  }
};

/// A 4-node tree over V = 8 whose nodes 1..3 were drawn from draft rows 0..2, with 8 uniforms.
struct request_args {
  tree_args tree;
  int draft_rows, uniforms;
};
inline request_args add_request(call_plan& p) {
  const tree_args t = add_tree(p, 4, 8);
  const int d = add<index_t>(p, "request.draft_rows", 1, 4, 1, role::in, {-1, 0, 1, 2}, true);
  const int u = add<double>(p, "request.uniforms", 1, 8, 1, role::in, {0.1, 0.9, 0.5, 0.3, 0.7, 0.2, 0.6, 0.4}, true);
  return {t, d, u};
}
inline specdec::sampling::speculative_request request_of(const context& c, request_args a) {
  specdec::sampling::speculative_request q;
  q.tree = tree_of(c, a.tree);
  q.draft_rows = c.s<const index_t>(a.draft_rows);
  q.uniforms = specdec::sampling::uniform_stream::values(c.s<const double>(a.uniforms));
  return q;
}

struct request_speculative {
  static constexpr const char* name = "verify_speculative (requests)";
  static void plan(call_plan& p) {
    add<float>(p, "rows.target", 2, 4, 8, role::in, distributions(p.input(), 4, 8));
    add<float>(p, "rows.draft", 2, 3, 8, role::in, distributions(p.input(), 3, 8));
    add_request(p);
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sampling::speculative_rows<specdec::host_space> rows;
    rows.target = c.m<const float>(0);
    rows.draft = c.m<const float>(1);
    const auto q = request_of(c, {{2, 3, 4}, 5, 6});
    return results_digest(specdec::sampling::verify_speculative(b, rows, std::span(&q, 1)));
  }
};

/// The 16-bit overloads: bf16 target rows, fp16 draft rows (widened where read).
struct request_speculative_half {
  static constexpr const char* name = "verify_speculative (requests, bf16 / fp16 rows)";
  static void plan(call_plan& p) {
    add<specdec::bfloat16>(p, "rows.target", 2, 4, 8, role::in, distributions(p.input(), 4, 8));
    add<specdec::float16>(p, "rows.draft", 2, 3, 8, role::in, distributions(p.input(), 3, 8));
    add_request(p);
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sampling::speculative_rows<specdec::host_space, specdec::bfloat16, specdec::float16> rows;
    rows.target = c.m<const specdec::bfloat16>(0);
    rows.draft = c.m<const specdec::float16>(1);
    const auto q = request_of(c, {{2, 3, 4}, 5, 6});
    return results_digest(specdec::sampling::verify_speculative(b, rows, std::span(&q, 1)));
  }
};

/// The output form's 16-bit overload: fp16 target rows, float draft rows.
struct request_speculative_half_outputs {
  static constexpr const char* name = "verify_speculative (requests, fp16 target, outputs)";
  static void plan(call_plan& p) {
    add<specdec::float16>(p, "rows.target", 2, 4, 8, role::in, distributions(p.input(), 4, 8));
    add<float>(p, "rows.draft", 2, 3, 8, role::in, distributions(p.input(), 3, 8));
    add_request(p);
    add<std::int32_t>(p, "outputs.tokens", 2, 1, 4, role::out, {});
    add<std::int32_t>(p, "outputs.accepted", 1, 1, 1, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sampling::speculative_rows<specdec::host_space, specdec::float16, float> rows;
    rows.target = c.m<const specdec::float16>(0);
    rows.draft = c.m<const float>(1);
    const auto q = request_of(c, {{2, 3, 4}, 5, 6});
    specdec::sampling::verify_outputs<> o;
    o.tokens = c.m<std::int32_t>(7);
    o.accepted = c.v<std::int32_t>(8);
    specdec::sampling::verify_speculative(b, rows, std::span(&q, 1), {}, o);
    return {};
  }
};

struct request_speculative_logits {
  static constexpr const char* name = "verify_speculative_logits (requests, bitmask)";
  static void plan(call_plan& p) {
    add<float>(p, "rows.target", 2, 4, 8, role::in, logits(p.input(), 32));
    add<float>(p, "rows.draft", 2, 3, 8, role::in, distributions(p.input(), 3, 8));
    add<std::int32_t>(p, "rows.target_bitmask", 2, 4, 1, role::in, ints(p.input(), 4, -3, 255));
    add_request(p);
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sampling::speculative_rows<specdec::host_space> rows;
    rows.target = c.m<const float>(0);
    rows.draft = c.m<const float>(1);
    rows.target_bitmask = c.m<const std::int32_t>(2);
    const auto q = request_of(c, {{3, 4, 5}, 6, 7});
    return results_digest(specdec::sampling::verify_speculative_logits(b, rows, std::span(&q, 1)));
  }
};

struct request_typical {
  static constexpr const char* name = "verify_typical";
  static void plan(call_plan& p) {
    add<float>(p, "target_probs", 2, 4, 8, role::in, distributions(p.input(), 4, 8));
    add_tree(p, 4, 8);
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sampling::speculative_request q;
    q.tree = tree_of(c, {1, 2, 3});
    return results_digest(specdec::sampling::verify_typical(b, c.m<const float>(0), std::span(&q, 1)));
  }
};

struct request_coin_tree {
  static constexpr const char* name = "verify_coin_tree";
  static void plan(call_plan& p) {
    add<float>(p, "target_probs", 2, 4, 8, role::in, distributions(p.input(), 4, 8));
    add_request(p);
  }
  template <class B>
  static digest call(B& b, const context& c) {
    const auto q = request_of(c, {{1, 2, 3}, 4, 5});
    return results_digest(specdec::sampling::verify_coin_tree(b, c.m<const float>(0), std::span(&q, 1)));
  }
};

struct target_probabilities {
  static constexpr const char* name = "target_probabilities";
  static void plan(call_plan& p) {
    add<float>(p, "logits", 2, 3, 8, role::in, logits(p.input(), 24));
    add<float>(p, "probs", 2, 3, 8, role::out, {});
  }
  template <class B>
  static digest call(B&, const context& c) {
    const specdec::sampling::sampling_params params[] = {{0.7f, 3, 0.9f, 0.0f}, {1.0f, 0, 0.5f, 0.1f}, {0.0f, 0, 1.0f, 0.0f}};
    specdec::sampling::target_probabilities(c.m<const float>(0), params, c.m<float>(1));
    return {};
  }
};

/// The 16-bit overloads of the logits verifier (bf16 logits softened whole, fp16 drafts, a bitmask),
/// typical acceptance (fp16), the coin tree (bf16) and target_probabilities (bf16 logits).
struct request_speculative_logits_half {
  static constexpr const char* name = "verify_speculative_logits (requests, bf16 logits, fp16 drafts, bitmask)";
  static void plan(call_plan& p) {
    add<specdec::bfloat16>(p, "rows.target", 2, 4, 8, role::in, logits(p.input(), 32));
    add<specdec::float16>(p, "rows.draft", 2, 3, 8, role::in, distributions(p.input(), 3, 8));
    add<std::int32_t>(p, "rows.target_bitmask", 2, 4, 1, role::in, ints(p.input(), 4, -3, 255));
    add_request(p);
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sampling::speculative_rows<specdec::host_space, specdec::bfloat16, specdec::float16> rows;
    rows.target = c.m<const specdec::bfloat16>(0);
    rows.draft = c.m<const specdec::float16>(1);
    rows.target_bitmask = c.m<const std::int32_t>(2);
    const auto q = request_of(c, {{3, 4, 5}, 6, 7});
    return results_digest(specdec::sampling::verify_speculative_logits(b, rows, std::span(&q, 1)));
  }
};

struct request_typical_half {
  static constexpr const char* name = "verify_typical (fp16 rows)";
  static void plan(call_plan& p) {
    add<specdec::float16>(p, "target_probs", 2, 4, 8, role::in, distributions(p.input(), 4, 8));
    add_tree(p, 4, 8);
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sampling::speculative_request q;
    q.tree = tree_of(c, {1, 2, 3});
    return results_digest(specdec::sampling::verify_typical(b, c.m<const specdec::float16>(0), std::span(&q, 1)));
  }
};

struct request_coin_tree_half {
  static constexpr const char* name = "verify_coin_tree (bf16 rows)";
  static void plan(call_plan& p) {
    add<specdec::bfloat16>(p, "target_probs", 2, 4, 8, role::in, distributions(p.input(), 4, 8));
    add_request(p);
  }
  template <class B>
  static digest call(B& b, const context& c) {
    const auto q = request_of(c, {{1, 2, 3}, 4, 5});
    return results_digest(specdec::sampling::verify_coin_tree(b, c.m<const specdec::bfloat16>(0), std::span(&q, 1)));
  }
};

struct target_probabilities_half {
  static constexpr const char* name = "target_probabilities (bf16 logits)";
  static void plan(call_plan& p) {
    add<specdec::bfloat16>(p, "logits", 2, 3, 8, role::in, logits(p.input(), 24));
    add<float>(p, "probs", 2, 3, 8, role::out, {});
  }
  template <class B>
  static digest call(B&, const context& c) {
    const specdec::sampling::sampling_params params[] = {{0.7f, 3, 0.9f, 0.0f}, {1.0f, 0, 0.5f, 0.1f}, {0.0f, 0, 1.0f, 0.0f}};
    specdec::sampling::target_probabilities(c.m<const specdec::bfloat16>(0), params, c.m<float>(1));
    return {};
  }
};

/// The host filters in place (top-k renormalisation, top-p, both, top-k masking), one after another.
struct host_filters {
  static constexpr const char* name = "top_k_renorm / top_p_renorm / joint / top_k_mask_logits (host)";
  static void plan(call_plan& p) {
    add<float>(p, "probs", 2, 3, 8, role::inout, distributions(p.input(), 3, 8));
    add<float>(p, "logits", 2, 3, 8, role::inout, logits(p.input(), 24));
    p.size(3);  // k
  }
  template <class B>
  static digest call(B&, const context& c) {
    specdec::sampling::top_k_renorm(c.m<float>(0), c.sizes[0]);
    specdec::sampling::top_p_renorm(c.m<float>(0), 0.8f);
    specdec::sampling::top_k_top_p_joint_renorm(c.m<float>(0), c.sizes[0], 0.9f);
    specdec::sampling::top_k_mask_logits(c.m<float>(1), c.sizes[0]);
    return {};
  }
};

/// The host filters on bf16 rows (and fp16 logits) in place: the 16-bit overloads.
struct host_filters_half {
  static constexpr const char* name = "top_k_renorm / top_p_renorm / joint / top_k_mask_logits (host, bf16 / fp16)";
  static void plan(call_plan& p) {
    add<specdec::bfloat16>(p, "probs", 2, 3, 8, role::inout, distributions(p.input(), 3, 8));
    add<specdec::float16>(p, "logits", 2, 3, 8, role::inout, logits(p.input(), 24));
    p.size(3);  // k
  }
  template <class B>
  static digest call(B&, const context& c) {
    specdec::sampling::top_k_renorm(c.m<specdec::bfloat16>(0), c.sizes[0]);
    specdec::sampling::top_p_renorm(c.m<specdec::bfloat16>(0), 0.8f);
    specdec::sampling::top_k_top_p_joint_renorm(c.m<specdec::bfloat16>(0), c.sizes[0], 0.9f);
    specdec::sampling::top_k_mask_logits(c.m<specdec::float16>(1), c.sizes[0]);
    return {};
  }
};

/// SGLang's links for one request: a root with two children (node 2 under node 1).
inline void add_sglang_links(call_plan& p, double first_token) {
  add<std::int64_t>(p, "candidates", 2, 1, 3, role::in, {first_token, 4, 6});
  add<std::int64_t>(p, "retrive_index", 2, 1, 3, role::in, {0, 1, 2});
  add<std::int64_t>(p, "next_token", 2, 1, 3, role::in, {1, 2, -1});
  add<std::int64_t>(p, "next_sibling", 2, 1, 3, role::in, {-1, -1, -1});
}

struct sglang_sampling {
  static constexpr const char* name = "sglang::tree_speculative_sampling_target_only (backend)";
  static void plan(call_plan& p) {
    add_sglang_links(p, 7);
    add<float>(p, "uniform_samples", 2, 1, 3, role::in, {0.3, 0.6, 0.9});
    add<float>(p, "uniform_final", 1, 1, 1, role::in, {0.4});
    add<float>(p, "target_probs", 2, 3, 8, role::in, distributions(p.input(), 3, 8));
    add<std::int32_t>(p, "predicts", 1, 3, 1, role::out, {});
    add<std::int32_t>(p, "accept_index", 2, 1, 3, role::out, {});
    add<std::int32_t>(p, "accept_token_num", 1, 1, 1, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sglang::tree_speculative_sampling_target_only(
        b, c.m<const std::int64_t>(0), c.m<const std::int64_t>(1), c.m<const std::int64_t>(2), c.m<const std::int64_t>(3),
        c.m<const float>(4), c.v<const float>(5), c.m<const float>(6), c.v<std::int32_t>(7), c.m<std::int32_t>(8),
        c.v<std::int32_t>(9), 0.5f, 1.0f);
    return {};
  }
};

/// The backend form's 16-bit overload: fp16 target rows.
struct sglang_sampling_half {
  static constexpr const char* name = "sglang::tree_speculative_sampling_target_only (backend, fp16)";
  static void plan(call_plan& p) {
    add_sglang_links(p, 7);
    add<float>(p, "uniform_samples", 2, 1, 3, role::in, {0.3, 0.6, 0.9});
    add<float>(p, "uniform_final", 1, 1, 1, role::in, {0.4});
    add<specdec::float16>(p, "target_probs", 2, 3, 8, role::in, distributions(p.input(), 3, 8));
    add<std::int32_t>(p, "predicts", 1, 3, 1, role::out, {});
    add<std::int32_t>(p, "accept_index", 2, 1, 3, role::out, {});
    add<std::int32_t>(p, "accept_token_num", 1, 1, 1, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sglang::tree_speculative_sampling_target_only(
        b, c.m<const std::int64_t>(0), c.m<const std::int64_t>(1), c.m<const std::int64_t>(2), c.m<const std::int64_t>(3),
        c.m<const float>(4), c.v<const float>(5), c.m<const specdec::float16>(6), c.v<std::int32_t>(7), c.m<std::int32_t>(8),
        c.v<std::int32_t>(9), 0.5f, 1.0f);
    return {};
  }
};

/// The host form's 16-bit overload (bf16 target rows); num_spec_step 3, as sglang_greedy_host's.
struct sglang_sampling_host_half {
  static constexpr const char* name = "sglang::tree_speculative_sampling_target_only (host, bf16)";
  static void plan(call_plan& p) {
    add_sglang_links(p, 7);
    add<float>(p, "uniform_samples", 2, 1, 3, role::in, {0.3, 0.6, 0.9});
    add<float>(p, "uniform_final", 1, 1, 1, role::in, {0.4}, true);
    add<specdec::bfloat16>(p, "target_probs", 2, 3, 8, role::in, distributions(p.input(), 3, 8));
  }
  template <class B>
  static digest call(B& b, const context& c) {
    if constexpr (specdec::team_backend<B> && std::is_same_v<typename B::memory_space, specdec::host_space>) {
      const auto r = specdec::sglang::tree_speculative_sampling_target_only(
          b, c.m<const std::int64_t>(0), c.m<const std::int64_t>(1), c.m<const std::int64_t>(2), c.m<const std::int64_t>(3),
          c.m<const float>(4), c.s<const float>(5), c.m<const specdec::bfloat16>(6), 3, 0.5f, 1.0f);
      digest d(r.predicts.begin(), r.predicts.end());
      d.insert(d.end(), r.accept_index.begin(), r.accept_index.end());
      d.insert(d.end(), r.accept_token_num.begin(), r.accept_token_num.end());
      return d;
    }
    return {};
  }
};

/// num_spec_step stays 3: the host form returns accept_index [bs x num_spec_step], so a valid edge
/// value would allocate terabytes (fuzz_sizes.cpp covers its checks without the allocation).
struct sglang_greedy_host {
  static constexpr const char* name = "sglang::verify_tree_greedy (host)";
  static void plan(call_plan& p) {
    add_sglang_links(p, 9);
    add<std::int64_t>(p, "target_predict", 1, 3, 1, role::in, ints(p.input(), 3, 3, 7), true);
  }
  template <class B>
  static digest call(B&, const context& c) {
    const auto r = specdec::sglang::verify_tree_greedy(c.m<const std::int64_t>(0), c.m<const std::int64_t>(1), c.m<const std::int64_t>(2),
                                                       c.m<const std::int64_t>(3), c.s<const std::int64_t>(4), 3);
    digest d(r.predicts.begin(), r.predicts.end());
    d.insert(d.end(), r.accept_index.begin(), r.accept_index.end());
    d.insert(d.end(), r.accept_token_num.begin(), r.accept_token_num.end());
    return d;
  }
};

struct medusa_fill_candidates {
  static constexpr const char* name = "medusa::fill_candidates";
  static void plan(call_plan& p) {
    add<float>(p, "head_logits", 2, 2, 16, role::in, logits(p.input(), 32));
    add<float>(p, "base_logits", 2, 1, 16, role::in, logits(p.input(), 16));
  }
  template <class B>
  static digest call(B& b, const context& c) {
    const auto buf = specdec::medusa::make_buffers(std::vector<specdec::choice>{{0}, {1}, {0, 0}, {0, 1}}, 4);
    const auto r = specdec::medusa::fill_candidates(b, buf, c.m<const float>(0), c.m<const float>(1));
    digest d(r.head_topk.begin(), r.head_topk.end());
    d.push_back(r.root_token);
    d.insert(d.end(), r.tree_candidates.begin(), r.tree_candidates.end());
    d.insert(d.end(), r.cart_candidates.begin(), r.cart_candidates.end());
    return d;
  }
};

}  // namespace fuzz::entry
