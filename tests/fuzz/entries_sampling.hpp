// SPDX-License-Identifier: Apache-2.0
// Entry points of the fuzz_views / fuzz_sizes list (entry_points.hpp): row primitives, verifiers,
// penalties, bitmasks, logprobs, the peers' sampling forms and the host Philox fills.
#pragma once

#include "entry_plan.hpp"

namespace fuzz::entry {

struct row_softmax {
  static constexpr const char* name = "row_softmax";
  static void plan(call_plan& p) {
    add<float>(p, "x", 2, 3, 16, role::in, logits(p.input(), 48));
    add<float>(p, "out", 2, 3, 16, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    b.row_softmax(c.m<const float>(0), 1.0f, c.m<float>(1));
    return {};
  }
};

struct row_topk {
  static constexpr const char* name = "row_topk";
  static void plan(call_plan& p) {
    add<float>(p, "x", 2, 3, 16, role::in, logits(p.input(), 48));
    add<float>(p, "values", 2, 3, 4, role::out, {});
    add<std::int32_t>(p, "indices", 2, 3, 4, role::out, {});
    p.size(4);
  }
  template <class B>
  static digest call(B& b, const context& c) {
    b.row_topk(c.m<const float>(0), c.sizes[0], c.m<float>(1), c.m<std::int32_t>(2));
    return {};
  }
};

struct emitted_logprobs {
  static constexpr const char* name = "emitted_logprobs";
  static void plan(call_plan& p) {
    add<float>(p, "rows", 2, 4, 16, role::in, logits(p.input(), 64));
    // A 4-node chain; the result accepts nodes 1 and 2, then emits a final token.
    add<std::int32_t>(p, "tree.token", 1, 4, 1, role::in, {0, 3, 5, 7}, true);
    add<std::int32_t>(p, "tree.parent", 1, 4, 1, role::in, {-1, 0, 1, 2}, true);
    add<std::int32_t>(p, "tree.depth", 1, 4, 1, role::in, {0, 1, 2, 3}, true);
    add<float>(p, "temperatures", 1, 1, 1, role::in, {1.0}, true);
    add<std::int32_t>(p, "token_ids", 2, 3, 3, role::out, {});
    add<float>(p, "logprobs", 2, 3, 3, role::out, {});
    add<std::int32_t>(p, "ranks", 1, 3, 1, role::out, {});
    add<std::int32_t>(p, "bitmask", 2, 4, 1, role::in, {-1, -1, -1, -1});
    p.size(2);  // top_n
    p.size(0);  // target_row
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sampling::speculative_request q;
    q.tree = tree_of(c, {1, 2, 3});
    q.target_row = c.sizes[1];
    specdec::sampling::speculative_result r;
    r.accepted_nodes = {1, 2};
    r.tokens = {3, 5, 1};
    const std::span<const specdec::sampling::speculative_request> qs(&q, 1);
    const std::span<const specdec::sampling::speculative_result> rs(&r, 1);
    specdec::sampling::emitted_logprobs(b, c.m<const float>(0), qs, rs, c.s<const float>(4), c.sizes[0],
                                        {c.m<std::int32_t>(5), c.m<float>(6), c.v<std::int32_t>(7)}, c.m<const std::int32_t>(8));
    return {};
  }
};

struct apply_sampling_constraints {
  static constexpr const char* name = "vllm::apply_sampling_constraints";
  static void plan(call_plan& p) {
    add<float>(p, "logits", 2, 4, 8, role::inout, logits(p.input(), 32));
    add<std::int64_t>(p, "cu_num_draft_tokens", 1, 2, 1, role::in, {1, 4}, true);
    add<float>(p, "temperature", 1, 2, 1, role::in, {0.5, -1.0}, true);
    add<std::int64_t>(p, "top_k", 1, 2, 1, role::in, {3, 8}, true);
    add<float>(p, "top_p", 1, 2, 1, role::in, {0.75, 1.0}, true);
  }
  template <class B>
  static digest call(B&, const context& c) {
    specdec::vllm::apply_sampling_constraints(c.m<float>(0), c.s<const std::int64_t>(1), c.s<const float>(2), c.s<const std::int64_t>(3),
                                              c.s<const float>(4));
    return {};
  }
};

/// The 16-bit overload: bf16 logits filtered in place, in their type.
struct apply_sampling_constraints_half {
  static constexpr const char* name = "vllm::apply_sampling_constraints (bf16)";
  static void plan(call_plan& p) {
    add<specdec::bfloat16>(p, "logits", 2, 4, 8, role::inout, logits(p.input(), 32));
    add<std::int64_t>(p, "cu_num_draft_tokens", 1, 2, 1, role::in, {1, 4}, true);
    add<float>(p, "temperature", 1, 2, 1, role::in, {0.5, -1.0}, true);
    add<std::int64_t>(p, "top_k", 1, 2, 1, role::in, {3, 8}, true);
    add<float>(p, "top_p", 1, 2, 1, role::in, {0.75, 1.0}, true);
  }
  template <class B>
  static digest call(B&, const context& c) {
    specdec::vllm::apply_sampling_constraints(c.m<specdec::bfloat16>(0), c.s<const std::int64_t>(1), c.s<const float>(2),
                                              c.s<const std::int64_t>(3), c.s<const float>(4));
    return {};
  }
};

struct apply_token_bitmask_host {
  static constexpr const char* name = "apply_token_bitmask (host)";
  static void plan(call_plan& p) {
    add<float>(p, "logits", 2, 3, 40, role::inout, logits(p.input(), 120));
    add<std::int32_t>(p, "bitmask", 2, 3, 2, role::in, ints(p.input(), 6, -3, 3));
    add<std::int64_t>(p, "indices", 1, 2, 1, role::in, {2, 0}, true);
    p.size(40);  // vocab_size
  }
  template <class B>
  static digest call(B&, const context& c) {
    specdec::apply_token_bitmask(c.m<float>(0), c.m<const std::int32_t>(1), c.sizes[0], c.s<const index_t>(2));
    return {};
  }
};

struct apply_token_bitmask_backend {
  static constexpr const char* name = "apply_token_bitmask (backend)";
  static void plan(call_plan& p) { apply_token_bitmask_host::plan(p); }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::apply_token_bitmask(b, c.m<float>(0), c.m<const std::int32_t>(1), c.sizes[0], c.v<const index_t>(2));
    return {};
  }
};

struct masked_verify_greedy {
  static constexpr const char* name = "verify_greedy (bitmask)";
  static void plan(call_plan& p) {
    add<float>(p, "target_logits", 2, 4, 40, role::in, logits(p.input(), 160));
    add<std::int32_t>(p, "bitmask", 2, 4, 2, role::in, ints(p.input(), 8, -3, 3));
    add_tree(p, 4, 40);
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sampling::speculative_request q;
    q.tree = tree_of(c, {2, 3, 4});
    const auto res = specdec::sampling::verify_greedy(b, c.m<const float>(0), std::span(&q, 1), c.m<const std::int32_t>(1));
    return digest(res[0].tokens.begin(), res[0].tokens.end());
  }
};

struct tree_penalties_host {
  static constexpr const char* name = "apply_tree_penalties (host)";
  static void plan(call_plan& p) {
    add<float>(p, "logits", 2, 4, 8, role::inout, logits(p.input(), 32));
    add_tree(p, 4, 8);
    p.size(0);  // first_row
  }
  template <class B>
  static digest call(B&, const context& c) {
    const specdec::sampling::penalty_history h(std::vector<std::int32_t>{1, 2}, std::vector<std::int32_t>{2, 5});
    specdec::sampling::apply_tree_penalties(c.m<float>(0), tree_of(c, {1, 2, 3}), c.sizes[0], h, {1.25f, 0.5f, -0.25f});
    return {};
  }
};

struct batch_penalties {
  static constexpr const char* name = "apply_tree_penalties (batch)";
  static void plan(call_plan& p) {
    add<float>(p, "logits", 2, 6, 8, role::inout, logits(p.input(), 48));
    add_batch(p, 8);
    add<std::int64_t>(p, "penalties.offsets", 1, 3, 1, role::in, {0, 2, 3});
    add<std::int32_t>(p, "penalties.tokens", 1, 3, 1, role::in, {1, 4, 2});
    add<std::int32_t>(p, "penalties.output_counts", 1, 3, 1, role::in, {0, 2, 1});
    add<std::int32_t>(p, "penalties.in_prompt", 1, 3, 1, role::in, {1, 0, 0});
    add<float>(p, "penalties.repetition", 1, 2, 1, role::in, {1.5, 0.75});
    add<float>(p, "penalties.frequency", 1, 2, 1, role::in, {0.5, -0.25});
    add<float>(p, "penalties.presence", 1, 2, 1, role::in, {0.25, 0.0});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sampling::penalty_batch<specdec::host_space> pen;
    pen.offsets = c.v<const std::int64_t>(5);
    pen.tokens = c.v<const std::int32_t>(6);
    pen.output_counts = c.v<const std::int32_t>(7);
    pen.in_prompt = c.v<const std::int32_t>(8);
    pen.repetition = c.v<const float>(9);
    pen.frequency = c.v<const float>(10);
    pen.presence = c.v<const float>(11);
    specdec::sampling::apply_tree_penalties(b, c.m<float>(0), batch_of(c, {1, 2, 3, 4}), pen);
    return {};
  }
};

struct batch_greedy_argmax {
  static constexpr const char* name = "verify_greedy (batch, logits + target_argmax)";
  static void plan(call_plan& p) {
    add<float>(p, "target_logits", 2, 6, 8, role::in, logits(p.input(), 48));
    add_batch(p, 8);
    add_outputs(p);
    add<std::int32_t>(p, "target_argmax", 1, 6, 1, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sampling::verify_greedy(b, c.m<const float>(0), batch_of(c, {1, 2, 3, 4}), outputs_of(c, 5), c.v<std::int32_t>(8));
    return {};
  }
};

struct batch_greedy_visited {
  static constexpr const char* name = "verify_greedy (batch, visited rows)";
  static void plan(call_plan& p) {
    add<float>(p, "target_logits", 2, 6, 8, role::in, logits(p.input(), 48));
    add_batch(p, 8);
    add_outputs(p);
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sampling::verify_greedy(b, c.m<const float>(0), batch_of(c, {1, 2, 3, 4}), outputs_of(c, 5));
    return {};
  }
};

struct batch_speculative {
  static constexpr const char* name = "verify_speculative (batch)";
  static void plan(call_plan& p) {
    add<float>(p, "rows.target", 2, 6, 8, role::in, distributions(p.input(), 6, 8));
    add_batch(p, 8);
    add<double>(p, "batch.uniforms", 2, 2, 4, role::in, {0.1, 0.9, 0.5, 0.3, 0.7, 0.2, 0.6, 0.4});
    add_outputs(p);
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sampling::speculative_rows<specdec::host_space> rows;
    rows.target = c.m<const float>(0);
    specdec::sampling::tree_batch<specdec::host_space> t = batch_of(c, {1, 2, 3, 4});
    t.uniforms = c.m<const double>(5);
    specdec::sampling::verify_speculative(b, rows, t, specdec::sampling::speculative_options{}, outputs_of(c, 6));
    return {};
  }
};

struct rejection_sample_host {
  static constexpr const char* name = "vllm::rejection_sample (host)";
  static void plan(call_plan& p) {
    add<std::int32_t>(p, "draft_token_ids", 1, 3, 1, role::in, ints(p.input(), 3, 0, 7), true);
    add<std::int64_t>(p, "cu_num_draft_tokens", 1, 2, 1, role::in, {2, 3}, true);
    add<float>(p, "draft_probs", 2, 3, 8, role::in, distributions(p.input(), 3, 8));
    add<float>(p, "target_probs", 2, 3, 8, role::in, distributions(p.input(), 3, 8));
    add<std::int32_t>(p, "bonus_token_ids", 1, 2, 1, role::in, {4, 6}, true);
    add<std::uint8_t>(p, "is_greedy", 1, 2, 1, role::in, {0, 1}, true);
    add<double>(p, "uniforms", 1, 3, 1, role::in, {0.25, 0.5, 0.75}, true);
    add<float>(p, "exponentials", 2, 2, 8, role::in, {1, 2, 0.5, 1, 3, 1, 0.25, 1, 1, 1, 1, 1, 1, 1, 1, 1});
    add<std::int32_t>(p, "output", 2, 2, 3, role::out, {});
    p.size(2);
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::vllm::rejection_sample(b, c.s<const std::int32_t>(0), c.s<const std::int64_t>(1), c.sizes[0], c.m<const float>(2),
                                    c.m<const float>(3), c.s<const std::int32_t>(4), c.s<const std::uint8_t>(5), c.s<const double>(6),
                                    c.m<const float>(7), c.m<std::int32_t>(8));
    return {};
  }
};

/// The host form's 16-bit overload: bf16 target and draft rows.
struct rejection_sample_host_half {
  static constexpr const char* name = "vllm::rejection_sample (host, bf16)";
  static void plan(call_plan& p) {
    add<std::int32_t>(p, "draft_token_ids", 1, 3, 1, role::in, ints(p.input(), 3, 0, 7), true);
    add<std::int64_t>(p, "cu_num_draft_tokens", 1, 2, 1, role::in, {2, 3}, true);
    add<specdec::bfloat16>(p, "draft_probs", 2, 3, 8, role::in, distributions(p.input(), 3, 8));
    add<specdec::bfloat16>(p, "target_probs", 2, 3, 8, role::in, distributions(p.input(), 3, 8));
    add<std::int32_t>(p, "bonus_token_ids", 1, 2, 1, role::in, {4, 6}, true);
    add<std::uint8_t>(p, "is_greedy", 1, 2, 1, role::in, {0, 1}, true);
    add<double>(p, "uniforms", 1, 3, 1, role::in, {0.25, 0.5, 0.75}, true);
    add<float>(p, "exponentials", 2, 2, 8, role::in, {1, 2, 0.5, 1, 3, 1, 0.25, 1, 1, 1, 1, 1, 1, 1, 1, 1});
    add<std::int32_t>(p, "output", 2, 2, 3, role::out, {});
    p.size(2);
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::vllm::rejection_sample(b, c.s<const std::int32_t>(0), c.s<const std::int64_t>(1), c.sizes[0],
                                    c.m<const specdec::bfloat16>(2), c.m<const specdec::bfloat16>(3), c.s<const std::int32_t>(4),
                                    c.s<const std::uint8_t>(5), c.s<const double>(6), c.m<const float>(7), c.m<std::int32_t>(8));
    return {};
  }
};

struct batch_greedy_bitmask {
  static constexpr const char* name = "verify_greedy (batch, bitmask)";
  static void plan(call_plan& p) {
    add<float>(p, "target_logits", 2, 6, 40, role::in, logits(p.input(), 240));
    add_batch(p, 40);
    add_outputs(p);
    add<std::int32_t>(p, "bitmask", 2, 6, 2, role::in, ints(p.input(), 12, -3, 3));
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sampling::verify_greedy(b, c.m<const float>(0), c.m<const std::int32_t>(8), batch_of(c, {1, 2, 3, 4}), outputs_of(c, 5));
    return {};
  }
};

struct joint_renorm_backend {
  static constexpr const char* name = "top_k_top_p_joint_renorm (backend)";
  static void plan(call_plan& p) {
    add<float>(p, "probs", 2, 3, 16, role::in, distributions(p.input(), 3, 16));
    add<std::int64_t>(p, "top_k", 1, 3, 1, role::in, {3, 16, 1});
    add<float>(p, "top_p", 1, 3, 1, role::in, {0.5, 1.0, 0.9});
    add<float>(p, "out", 2, 3, 16, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sampling::top_k_top_p_joint_renorm(b, c.m<const float>(0), c.v<const std::int64_t>(1), c.v<const float>(2), c.m<float>(3));
    return {};
  }
};

struct top_k_mask_logits_backend {
  static constexpr const char* name = "top_k_mask_logits (backend)";
  static void plan(call_plan& p) {
    add<float>(p, "logits", 2, 3, 16, role::in, logits(p.input(), 48));
    add<std::int64_t>(p, "top_k", 1, 3, 1, role::in, {3, 16, 1});
    add<float>(p, "out", 2, 3, 16, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sampling::top_k_mask_logits(b, c.m<const float>(0), c.v<const std::int64_t>(1), c.m<float>(2));
    return {};
  }
};

struct rejection_sample_backend {
  static constexpr const char* name = "vllm::rejection_sample (backend)";
  static void plan(call_plan& p) {
    add<std::int32_t>(p, "draft_token_ids", 1, 3, 1, role::in, ints(p.input(), 3, 0, 7));
    add<std::int64_t>(p, "cu_num_draft_tokens", 1, 2, 1, role::in, {2, 3});
    add<float>(p, "draft_probs", 2, 3, 8, role::in, distributions(p.input(), 3, 8));
    add<float>(p, "target_probs", 2, 3, 8, role::in, distributions(p.input(), 3, 8));
    add<std::int32_t>(p, "bonus_token_ids", 1, 2, 1, role::in, {4, 6});
    add<std::uint8_t>(p, "is_greedy", 1, 2, 1, role::in, {0, 1});
    add<double>(p, "uniforms", 1, 3, 1, role::in, {0.25, 0.5, 0.75});
    add<float>(p, "exponentials", 2, 2, 8, role::in, {1, 2, 0.5, 1, 3, 1, 0.25, 1, 1, 1, 1, 1, 1, 1, 1, 1});
    add<std::int32_t>(p, "output", 2, 2, 3, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::vllm::rejection_sample(b, c.v<const std::int32_t>(0), c.v<const std::int64_t>(1), c.m<const float>(2), c.m<const float>(3),
                                    c.v<const std::int32_t>(4), c.v<const std::uint8_t>(5), c.v<const double>(6), c.m<const float>(7),
                                    c.m<std::int32_t>(8));
    return {};
  }
};

/// The backend form's 16-bit overload: float target rows, fp16 draft rows.
struct rejection_sample_backend_half {
  static constexpr const char* name = "vllm::rejection_sample (backend, fp16 draft)";
  static void plan(call_plan& p) {
    add<std::int32_t>(p, "draft_token_ids", 1, 3, 1, role::in, ints(p.input(), 3, 0, 7));
    add<std::int64_t>(p, "cu_num_draft_tokens", 1, 2, 1, role::in, {2, 3});
    add<specdec::float16>(p, "draft_probs", 2, 3, 8, role::in, distributions(p.input(), 3, 8));
    add<float>(p, "target_probs", 2, 3, 8, role::in, distributions(p.input(), 3, 8));
    add<std::int32_t>(p, "bonus_token_ids", 1, 2, 1, role::in, {4, 6});
    add<std::uint8_t>(p, "is_greedy", 1, 2, 1, role::in, {0, 1});
    add<double>(p, "uniforms", 1, 3, 1, role::in, {0.25, 0.5, 0.75});
    add<float>(p, "exponentials", 2, 2, 8, role::in, {1, 2, 0.5, 1, 3, 1, 0.25, 1, 1, 1, 1, 1, 1, 1, 1, 1});
    add<std::int32_t>(p, "output", 2, 2, 3, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::vllm::rejection_sample(b, c.v<const std::int32_t>(0), c.v<const std::int64_t>(1), c.m<const specdec::float16>(2),
                                    c.m<const float>(3), c.v<const std::int32_t>(4), c.v<const std::uint8_t>(5), c.v<const double>(6),
                                    c.m<const float>(7), c.m<std::int32_t>(8));
    return {};
  }
};

/// The backend form with Philox noise (host memory only: the Thrust CPP system's device memory has no
/// such overload, and its call does nothing).
struct rejection_sample_backend_philox {
  static constexpr const char* name = "vllm::rejection_sample (backend, Philox noise)";
  static void plan(call_plan& p) {
    add<std::int32_t>(p, "draft_token_ids", 1, 3, 1, role::in, ints(p.input(), 3, 0, 7));
    add<std::int64_t>(p, "cu_num_draft_tokens", 1, 2, 1, role::in, {2, 3});
    add<float>(p, "draft_probs", 2, 3, 8, role::in, distributions(p.input(), 3, 8));
    add<float>(p, "target_probs", 2, 3, 8, role::in, distributions(p.input(), 3, 8));
    add<std::int32_t>(p, "bonus_token_ids", 1, 2, 1, role::in, {4, 6});
    add<std::uint8_t>(p, "is_greedy", 1, 2, 1, role::in, {0, 1});
    add<double>(p, "uniforms", 1, 3, 1, role::in, {0.25, 0.5, 0.75});
    add<std::int32_t>(p, "output", 2, 2, 3, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    if constexpr (std::is_same_v<typename B::memory_space, specdec::host_space>)
      specdec::vllm::rejection_sample(b, c.v<const std::int32_t>(0), c.v<const std::int64_t>(1), c.m<const float>(2),
                                      c.m<const float>(3), c.v<const std::int32_t>(4), c.v<const std::uint8_t>(5),
                                      c.v<const double>(6), specdec::vllm::philox_noise{11, 3}, c.m<std::int32_t>(7));
    return {};
  }
};

/// The arguments both fused samplers take after their rows: per-row k, one p, uniforms, tokens.
inline void add_top_k_top_p_arguments(call_plan& p) {
  add<std::int64_t>(p, "top_k", 1, 3, 1, role::in, {2, 9, 1});
  add<float>(p, "top_p", 1, 1, 1, role::in, {0.7});
  add<float>(p, "uniforms", 1, 3, 1, role::in, {0.25, 0.5, 0.999});
  add<std::int32_t>(p, "tokens", 1, 3, 1, role::out, {});
}

/// FlashInfer's top-k / top-p sampling without the filtered rows (host), both orders.
struct top_k_top_p_sample_entry {
  static constexpr const char* name = "sampling::top_k_top_p_sample (host)";
  static void plan(call_plan& p) {
    add<float>(p, "probs", 2, 3, 8, role::in, distributions(p.input(), 3, 8));
    add_top_k_top_p_arguments(p);
  }
  template <class B>
  static digest call(B&, const context& c) {
    specdec::sampling::top_k_top_p_sample(c.m<const float>(0), c.v<const std::int64_t>(1), c.v<const float>(2), c.v<const float>(3),
                                          c.v<std::int32_t>(4));
    specdec::sampling::top_k_top_p_sample(c.m<const float>(0), c.v<const std::int64_t>(1), c.v<const float>(2), c.v<const float>(3),
                                          c.v<std::int32_t>(4), specdec::sampling::filter_order::joint);
    return {};
  }
};

/// The same from logits, both orders: each row softened in cache first by the host's row softmax
/// (backend/detail/softmax_row.hpp, which row_softmax shares).
struct top_k_top_p_sample_from_logits_entry {
  static constexpr const char* name = "sampling::top_k_top_p_sample_from_logits (host)";
  static void plan(call_plan& p) {
    add<float>(p, "logits", 2, 3, 8, role::in, logits(p.input(), 24));
    add_top_k_top_p_arguments(p);
  }
  template <class B>
  static digest call(B&, const context& c) {
    for (const auto order : {specdec::sampling::filter_order::top_k_first, specdec::sampling::filter_order::joint})
      specdec::sampling::top_k_top_p_sample_from_logits(c.m<const float>(0), c.v<const std::int64_t>(1), c.v<const float>(2),
                                                        c.v<const float>(3), c.v<std::int32_t>(4), order);
    return {};
  }
};

struct gather_rows_entry {
  static constexpr const char* name = "gather_rows";
  static void plan(call_plan& p) {
    add<float>(p, "x", 2, 4, 8, role::in, logits(p.input(), 32));
    add<std::int32_t>(p, "row_ids", 1, 3, 1, role::in, ints(p.input(), 3, 0, 3));
    add<float>(p, "out", 2, 3, 8, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    b.gather_rows(c.m<const float>(0), c.v<const std::int32_t>(1), c.m<float>(2));
    return {};
  }
};

struct top_p_renorm_backend {
  static constexpr const char* name = "top_p_renorm (backend)";
  static void plan(call_plan& p) {
    add<float>(p, "probs", 2, 3, 16, role::in, distributions(p.input(), 3, 16));
    add<float>(p, "top_p", 1, 3, 1, role::in, {0.5, 1.0, 0.25});
    add<float>(p, "out", 2, 3, 16, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sampling::top_p_renorm(b, c.m<const float>(0), c.v<const float>(1), c.m<float>(2));
    return {};
  }
};

/// The host Philox fills. Their offset is a size so that fuzz_sizes draws it at the int64 edges: read as
/// a position, a negative one lands just below 2^64 and the fill wraps to 0. 37 values leave a partial
/// vector group at the end, an offset of 5 a partial block at the start.
template <class T, bool Exponentials>
struct philox_fill {
  static void plan(call_plan& p) {
    add<T>(p, "out", 1, 37, 1, role::out, {}, true);
    p.size(5);  // offset
  }
  template <class B>
  static digest call(B&, const context& c) {
    const specdec::philox_stream s{0x243f6a8885a308d3ull, 7};
    const auto offset = static_cast<std::uint64_t>(c.sizes[0]);
    if constexpr (Exponentials) specdec::sampling::philox_exponentials(s, offset, c.s<T>(0));
    else specdec::sampling::philox_uniforms(s, offset, c.s<T>(0));
    return {};
  }
};
struct philox_uniforms_float : philox_fill<float, false> {
  static constexpr const char* name = "sampling::philox_uniforms (float)";
};
struct philox_uniforms_double : philox_fill<double, false> {
  static constexpr const char* name = "sampling::philox_uniforms (double)";
};
struct philox_exponentials_entry : philox_fill<float, true> {
  static constexpr const char* name = "sampling::philox_exponentials";
};

}  // namespace fuzz::entry
