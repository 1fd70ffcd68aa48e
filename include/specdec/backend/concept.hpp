// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The `specdec::backend` concept: the short list of primitives every algorithm is written
/// with, and that every backend (`specdec::eigen`, `specdec::thrust_backend<System>`) provides.
///
/// Every primitive works on caller memory through views in the backend's `memory_space`, validates
/// its arguments (shapes and ranges before any work, data faults such as NaN during the one pass it
/// makes anyway) and throws specdec::invalid_argument naming the argument. On error the outputs are
/// unspecified. A backend object owns a scratch arena that grows on demand; it is not safe to share
/// one backend object between threads that call it concurrently (use one per thread or stream).
///
/// The dense primitives of the drafter blocks (GEMM, RMSNorm, RoPE, attention, SwiGLU) form the
/// refinement `dense_backend`; algorithms that need only the row primitives constrain on `backend`.
#pragma once

#include <concepts>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include <specdec/backend/detail/team.hpp>
#include <specdec/core/view.hpp>

namespace specdec {

/// What `row_sample_residual` does when the residual max(0, p - q) is zero everywhere (p <= q
/// entrywise, i.e. p == q for distributions). Exact arithmetic never samples a residual then (every
/// draft token would have been accepted); rounding can. Peers differ, hence the choice.
enum class empty_residual {
  sample_target,  ///< draw from p with the same uniform (default: keeps the output distributed as p)
  token_zero,     ///< emit token 0 (vLLM)
  last_token,     ///< emit token V - 1 (SGLang's tree kernel)
};

/// Whether a GEMM operand is used as stored or transposed (row-major storage). A Linear layer's
/// weight `[out x in]` is used transposed: y = x W^T.
enum class transpose : int { no = 0, yes = 1 };

/// Heads of a (grouped-query) attention call. Query head h reads key/value head h / (heads / kv_heads)
/// (repeat-interleave, as Hugging Face's repeat_kv). `scale` multiplies q.k (1 / sqrt(head_dim) in Llama).
struct attention_heads {
  index_t heads = 1;
  index_t kv_heads = 1;
  index_t head_dim = 1;
  float scale = 1.0f;
};

// clang-format off
/// A specdec backend. `B::memory_space` says where the views it accepts live. `B::buffer<T>` is an
/// owning buffer in that space for tests, examples and benchmarks (algorithms never require one):
/// `view()` gives its rank-1 view and `matrix(rows, cols)` a row-major rank-2 view of it. A buffer's
/// move may not throw, so moving it (into a growing std::vector, say) moves its memory and every view
/// of it stays valid.
template <class B>
concept backend = std::is_nothrow_move_constructible_v<typename B::template buffer<float>> &&
                  std::is_nothrow_move_assignable_v<typename B::template buffer<float>> && requires(B& b, typename B::template buffer<float>& owned,
                           matrix_view<const float, typename B::memory_space> x,
                           matrix_view<float, typename B::memory_space> y,
                           vector_view<float, typename B::memory_space> v,
                           vector_view<const float, typename B::memory_space> u,
                           vector_view<std::int32_t, typename B::memory_space> token,
                           matrix_view<std::int32_t, typename B::memory_space> token_matrix,
                           vector_view<const std::int32_t, typename B::memory_space> row_ids,
                           matrix_view<const std::int32_t, typename B::memory_space> column_ids,
                           std::span<const float> host_values, index_t k, float temperature) {
  typename B::memory_space;
  // storage
  { b.template allocate<float>(k) } -> std::same_as<typename B::template buffer<float>>;
  { b.upload(host_values) } -> std::same_as<typename B::template buffer<float>>;
  { b.download(u) } -> std::same_as<std::vector<float>>;
  b.upload(host_values, v);
  { owned.view() } -> std::same_as<vector_view<float, typename B::memory_space>>;
  { owned.matrix(k, k) } -> std::same_as<matrix_view<float, typename B::memory_space>>;
  // row reductions over [rows x V]
  b.row_max(x, v);
  b.row_argmax(x, token);
  b.row_argmax(x, token, v);
  b.row_topk(x, k, y, token_matrix);
  b.row_topk_logsumexp(x, k, temperature, y, token_matrix, v);
  b.row_logsumexp(x, temperature, v);
  b.row_softmax(x, temperature, y);
  b.row_log_softmax(x, temperature, y);
  // sampling, one uniform per row
  b.row_sample(x, u, token);
  b.row_sample_residual(x, x, u, token);
  b.row_sample_residual(x, x, u, token, empty_residual::token_zero);
  // gathers
  b.gather_rows(x, row_ids, y);
  b.gather_elements(x, column_ids, y);
};

/// A backend that runs team jobs (backend/detail/team.hpp): `run_teams(count, job)` runs the job once
/// per team index in [0, count), each team a group of cooperating threads (one on the host, a CUDA
/// block on the GPU), and raises the first fault a team reports. The batched verifiers
/// (sampling/batch.hpp) and the device-resident EAGLE-2 builder (tree/eagle2_batch.hpp) need it; both
/// of specdec's backends model it. A backend of one's own that lacks it still models `backend`.
template <class B>
concept team_backend = backend<B> && requires(B& b, index_t count) { b.run_teams(count, detail::team_job_archetype{}); };

/// A backend with the dense primitives the drafter blocks are written with (specdec/blocks/): GEMM,
/// RMSNorm, RoPE, SwiGLU's activation, row additions (bias, residual) and masked GQA attention, all
/// float, row-major, in the backend's memory space. Algorithms that need only row primitives
/// constrain on `backend`.
template <class B>
concept dense_backend = backend<B> && requires(B& b, matrix_view<const float, typename B::memory_space> x,
                                               matrix_view<float, typename B::memory_space> y,
                                               vector_view<const float, typename B::memory_space> w,
                                               vector_view<const std::int64_t, typename B::memory_space> positions,
                                               matrix_view<const std::uint8_t, typename B::memory_space> allowed,
                                               const attention_heads& heads, index_t n, float f, double theta) {
  b.gemm(x, transpose::no, x, transpose::yes, y, f, f);
  b.rms_norm(x, w, f, y);
  b.rope(y, positions, n, theta);
  b.silu_mul(x, x, y);
  b.add_rows(y, x);
  b.add_rows(y, x, w);
  b.attention(x, x, x, heads, allowed, y);
  b.attention(x, x, x, heads, x, y);
};
// clang-format on

}  // namespace specdec
