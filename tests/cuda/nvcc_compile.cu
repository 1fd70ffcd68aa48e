// SPDX-License-Identifier: Apache-2.0
// Compile-only check that the Thrust backend builds for CUDA under nvcc: instantiates every
// primitive for thrust_backend<cuda> so that device code of the shared kernels is generated, and every
// algorithm written against the backend concept.
#include <thrust/device_vector.h>

#include <specdec/backend/thrust.hpp>
#ifndef SPECDEC_NVCC_COMPILE_DENSE_ONLY
#include <specdec/interop/sglang_sampling.hpp>
#include <specdec/interop/vllm.hpp>
#include <specdec/specdec.hpp>
#endif

// Engines write this: nvcc's generated code names ::thrust unqualified, which a specdec class called
// `thrust` would make ambiguous (the backend is specdec::thrust_backend for that reason).
using namespace specdec;
[[maybe_unused]] static ::thrust::device_vector<float>* engine_buffer = nullptr;

using cuda_backend = specdec::thrust_backend<specdec::thrust_system::cuda>;
static_assert(specdec::backend<cuda_backend>);
static_assert(specdec::dense_backend<cuda_backend>);

#ifndef SPECDEC_NVCC_COMPILE_DENSE_ONLY
/// The row primitives over rows of element type E: float rows take the dedicated kernels, 16-bit rows
/// (core/half.hpp) the generic work items, whose device code widens each entry.
template <class E>
void instantiate_row_primitives(cuda_backend& b, specdec::matrix_view<const E, specdec::device_space> x,
                                specdec::matrix_view<float, specdec::device_space> y, specdec::vector_view<float, specdec::device_space> v,
                                specdec::vector_view<const float, specdec::device_space> u,
                                specdec::vector_view<std::int32_t, specdec::device_space> t,
                                specdec::matrix_view<std::int32_t, specdec::device_space> tm) {
  b.row_max(x, v);
  b.row_argmax(x, t, v);
  b.row_topk(x, 8, y, tm);
  b.row_topk_logsumexp(x, 8, 1.0f, y, tm, v);
  b.row_logsumexp(x, 1.0f, v);
  b.row_softmax(x, 1.0f, y);
  b.row_log_softmax(x, 1.0f, y);
  b.row_sample(x, u, t);
}

void instantiate_every_primitive(cuda_backend& b, specdec::matrix_view<const float, specdec::device_space> x,
                                 specdec::matrix_view<float, specdec::device_space> y,
                                 specdec::vector_view<float, specdec::device_space> v,
                                 specdec::vector_view<const float, specdec::device_space> u,
                                 specdec::vector_view<std::int32_t, specdec::device_space> t,
                                 specdec::matrix_view<std::int32_t, specdec::device_space> tm,
                                 specdec::vector_view<const std::int32_t, specdec::device_space> ids,
                                 specdec::matrix_view<const std::int32_t, specdec::device_space> cols,
                                 specdec::matrix_view<const specdec::bfloat16, specdec::device_space> xb,
                                 specdec::matrix_view<const specdec::float16, specdec::device_space> xh) {
  instantiate_row_primitives(b, x, y, v, u, t, tm);
  instantiate_row_primitives(b, xb, y, v, u, t, tm);
  instantiate_row_primitives(b, xh, y, v, u, t, tm);
  b.row_sample_residual(x, x, u, t);
  b.gather_rows(x, ids, y);
  b.gather_elements(x, cols, y);
}

/// FlashInfer's filters (backend forms: one block per row) over float and 16-bit rows, each writing the
/// rows' own type.
template <class E>
void instantiate_filters(cuda_backend& b, specdec::matrix_view<const E, specdec::device_space> x,
                         specdec::matrix_view<E, specdec::device_space> out,
                         specdec::vector_view<const std::int64_t, specdec::device_space> k,
                         specdec::vector_view<const float, specdec::device_space> p) {
  specdec::sampling::top_k_renorm<cuda_backend, E>(b, x, k, out);
  specdec::sampling::top_p_renorm<cuda_backend, E>(b, x, p, out);
  specdec::sampling::top_k_top_p_joint_renorm<cuda_backend, E>(b, x, k, p, out);
  specdec::sampling::top_k_mask_logits<cuda_backend, E>(b, x, k, out);
}
template void instantiate_filters<float>(cuda_backend&, specdec::matrix_view<const float, specdec::device_space>,
                                         specdec::matrix_view<float, specdec::device_space>,
                                         specdec::vector_view<const std::int64_t, specdec::device_space>,
                                         specdec::vector_view<const float, specdec::device_space>);
template void instantiate_filters<specdec::bfloat16>(cuda_backend&, specdec::matrix_view<const specdec::bfloat16, specdec::device_space>,
                                                     specdec::matrix_view<specdec::bfloat16, specdec::device_space>,
                                                     specdec::vector_view<const std::int64_t, specdec::device_space>,
                                                     specdec::vector_view<const float, specdec::device_space>);
template void instantiate_filters<specdec::float16>(cuda_backend&, specdec::matrix_view<const specdec::float16, specdec::device_space>,
                                                    specdec::matrix_view<specdec::float16, specdec::device_space>,
                                                    specdec::vector_view<const std::int64_t, specdec::device_space>,
                                                    specdec::vector_view<const float, specdec::device_space>);

#endif

void instantiate_every_dense_primitive(cuda_backend& b, specdec::matrix_view<const float, specdec::device_space> x,
                                       specdec::matrix_view<float, specdec::device_space> y,
                                       specdec::vector_view<const float, specdec::device_space> w,
                                       specdec::vector_view<const std::int64_t, specdec::device_space> positions,
                                       specdec::matrix_view<const std::uint8_t, specdec::device_space> allowed) {
  b.gemm(x, specdec::transpose::no, x, specdec::transpose::yes, y);
  b.rms_norm(x, w, 1e-5f, y);
  b.rope(y, positions, 64, 10000.0);
  b.silu_mul(x, x, y);
  b.add_rows(y, x);
  b.add_rows(y, x, w);
  b.attention(x, x, x, {4, 2, 64, 0.125f}, allowed, y);
  b.attention(x, x, x, {4, 2, 64, 0.125f}, x, y);
}

#ifndef SPECDEC_NVCC_COMPILE_DENSE_ONLY
// The algorithms: each class template and function template once, for device memory.
template class specdec::eagle2_tree_builder<cuda_backend>;
template class specdec::eagle1::static_drafter<cuda_backend>;
template class specdec::jakiro::static_drafter<cuda_backend>;

specdec::moe_proposal propose_both(cuda_backend& b, specdec::matrix_view<const float, specdec::device_space> left,
                                           specdec::matrix_view<const float, specdec::device_space> right) {
  auto greedy = specdec::propose_moe_greedy(b, left, right, 4);
  auto sampled = specdec::propose_moe_sampled(b, left, right, 4, {});
  greedy.tokens.insert(greedy.tokens.end(), sampled.tokens.begin(), sampled.tokens.end());
  return greedy;
}

std::size_t verify_every_way(cuda_backend& b, specdec::matrix_view<const float, specdec::device_space> p,
                             specdec::matrix_view<const float, specdec::device_space> q,
                             std::span<const specdec::sampling::speculative_request> requests) {
  return specdec::sampling::verify_speculative(b, {p, q}, requests).size() +
         specdec::sampling::verify_coin_tree(b, p, requests).size() +
         specdec::sampling::verify_typical(b, p, requests).size() + specdec::sampling::verify_greedy(b, p, requests).size();
}

// The stochastic verifiers over 16-bit probability rows: the request form (rows downloaded as they are),
// and the one-launch jobs of vLLM's and SGLang's layouts, whose device code widens each entry read.
std::size_t verify_half_rows(cuda_backend& b, specdec::matrix_view<const specdec::bfloat16, specdec::device_space> pb,
                             specdec::matrix_view<const specdec::float16, specdec::device_space> ph,
                             specdec::matrix_view<const float, specdec::device_space> p,
                             std::span<const specdec::sampling::speculative_request> requests,
                             specdec::vector_view<const std::int32_t, specdec::device_space> ids,
                             specdec::vector_view<const std::int64_t, specdec::device_space> cu,
                             specdec::vector_view<const std::uint8_t, specdec::device_space> greedy,
                             specdec::vector_view<const double, specdec::device_space> uniforms,
                             specdec::matrix_view<std::int32_t, specdec::device_space> out,
                             specdec::matrix_view<const std::int64_t, specdec::device_space> links,
                             specdec::matrix_view<const float, specdec::device_space> coins,
                             specdec::vector_view<const float, specdec::device_space> finals,
                             specdec::vector_view<std::int32_t, specdec::device_space> predicts,
                             specdec::vector_view<std::int32_t, specdec::device_space> counts) {
  specdec::vllm::rejection_sample(b, ids, cu, pb, ph, ids, greedy, uniforms, p, out);
  specdec::vllm::rejection_sample(b, ids, cu, pb, p, ids, greedy, uniforms, p, out);
  specdec::sglang::tree_speculative_sampling_target_only(b, links, links, links, links, coins, finals, pb, predicts, out, counts,
                                                         1.0f, 1.0f);
  return specdec::sampling::verify_speculative(b, specdec::sampling::speculative_rows<specdec::device_space, specdec::bfloat16>{pb, pb},
                                               requests).size() +
         specdec::sampling::verify_speculative(b, specdec::sampling::speculative_rows<specdec::device_space, float, specdec::float16>{p, ph},
                                               requests).size() +
         specdec::sampling::verify_coin_tree(b, pb, requests).size() + specdec::sampling::verify_coin_tree(b, ph, requests).size() +
         specdec::sampling::verify_typical(b, pb, requests).size() + specdec::sampling::verify_typical(b, ph, requests).size();
}

// verify_speculative_logits over 16-bit device logits: each row read is softened by the backend's
// row_softmax over the bf16 / fp16 row (and, under a bitmask, downloaded and widened first).
std::size_t verify_half_logits(cuda_backend& b, specdec::matrix_view<const specdec::bfloat16, specdec::device_space> lb,
                               specdec::matrix_view<const specdec::float16, specdec::device_space> lh,
                               specdec::matrix_view<const float, specdec::device_space> q,
                               std::span<const specdec::sampling::speculative_request> requests) {
  return specdec::sampling::verify_speculative_logits(b, specdec::sampling::speculative_rows<specdec::device_space, specdec::bfloat16>{lb, {}},
                                                      requests).size() +
         specdec::sampling::verify_speculative_logits(
             b, specdec::sampling::speculative_rows<specdec::device_space, specdec::float16, float>{lh, q}, requests).size();
}

// The batched stochastic form over 16-bit device rows (one launch; the job widens each entry read).
void verify_half_batch(cuda_backend& b, specdec::matrix_view<const specdec::bfloat16, specdec::device_space> pb,
                       specdec::matrix_view<const specdec::float16, specdec::device_space> ph,
                       const specdec::sampling::tree_batch<specdec::device_space>& batch,
                       const specdec::sampling::verify_outputs<specdec::device_space>& out) {
  specdec::sampling::verify_speculative(b, specdec::sampling::speculative_rows<specdec::device_space, specdec::bfloat16, specdec::float16>{pb, ph},
                                        batch, {}, out);
}

// The blocks on device memory: a decoder layer with its cache, the MoE draft layer, MoA's CA and LSA,
// DFlash's context cache and block.
void run_blocks(cuda_backend& b, const specdec::blocks::layer_config& c,
                const specdec::blocks::layer_weights<specdec::device_space>& w,
                const specdec::blocks::eagle::weights<specdec::device_space>& ew,
                const specdec::blocks::moe::config& mc, const specdec::blocks::moe::weights<specdec::device_space>& mw,
                specdec::matrix_view<float, specdec::device_space> x,
                specdec::vector_view<const std::int64_t, specdec::device_space> positions,
                specdec::vector_view<const std::int32_t, specdec::device_space> tokens) {
  specdec::blocks::kv_cache<cuda_backend> cache(b, 64, c.attention.kv_heads * c.attention.head_dim);
  specdec::blocks::decoder_layer_forward(b, c, w, x, positions, &cache);
  specdec::blocks::moe::draft_layer_forward(b, c, ew, mc, mw, tokens, x, positions, &cache, {}, x, x);
  specdec::blocks::moa::cross_attention(b, c, w, x, positions, x, positions, &cache, {});
  specdec::blocks::moa::layer_self_attention(b, c, w, w.attention.q, 4, x, x, x);
  const specdec::blocks::moa::config moa_config{c, c, c, 1, c.attention.head_dim};
  const specdec::blocks::moa::weights<specdec::device_space> moa_weights{w, w.attention.q, w, w};
  const specdec::matrix_view<const float, specdec::device_space> kv(x.data(), x.rows(), x.cols());
  specdec::blocks::moa::drafter<cuda_backend> drafter(b, moa_config, moa_weights, 64);
  drafter.add_verified(std::span(&kv, 1), std::span(&kv, 1), 0, x.rows());
  drafter.forward(x, positions, x);
  specdec::blocks::moa::train_forward<cuda_backend>(b, moa_config, moa_weights, std::span(&kv, 1), std::span(&kv, 1), kv,
                                               std::vector<std::int32_t>(x.rows(), 0), false, x, x, x);
  // DFlash: the context's keys (q / k norms on), a block over them, the target's head.
  specdec::blocks::dflash::config dc;
  dc.layer = c;
  dc.layer.attention.qk_norm = true;
  dc.layers = 1;
  dc.feature_layers = 1;
  dc.vocab = x.cols();
  dc.block_size = 2;
  specdec::blocks::dflash::weights<specdec::device_space> dw;
  dw.fc = w.attention.q;
  dw.hidden_norm = dw.norm = w.post_norm;
  dw.layers = {w};
  dw.embed = kv;
  dw.lm_head = w.attention.o;
  specdec::blocks::dflash::context_cache<cuda_backend> context(b, dc, 64);
  specdec::blocks::dflash::append_context(b, dc, dw, kv, positions, context);
  specdec::blocks::dflash::forward(b, dc, dw, tokens, positions, context, x);
  specdec::blocks::dflash::logits(b, dw, kv, x);
}
#endif
