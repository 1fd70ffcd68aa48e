// SPDX-License-Identifier: Apache-2.0
// cuda_ops.hpp on specdec::thrust_backend<thrust_system::cuda>: one backend per device and host thread
// (its scratch arena persists between calls), bound to the caller's stream for each call.
#include "cuda_ops.hpp"

#include "batch_views.hpp"
#include "block_sessions.hpp"
#include "dflash_session.hpp"

#include <cuda_runtime.h>

#include <array>
#include <memory>

#include <specdec/backend/thrust.hpp>
#include <specdec/core/error.hpp>
#include <specdec/sampling/batch.hpp>

namespace specdec_python::cuda {
namespace {

using backend = specdec::thrust_backend<specdec::thrust_system::cuda>;
using specdec::device_space;
using specdec::index_t;

backend& on(place at) {
  constexpr int max_devices = 64;
  SPECDEC_EXPECTS(at.device >= 0 && at.device < max_devices, "specdec (Python, CUDA)", "device ", at.device, "; expected 0 .. ",
                  max_devices - 1);
  const cudaError_t set = cudaSetDevice(at.device);
  SPECDEC_EXPECTS(set == cudaSuccess, "specdec (Python, CUDA)", "cudaSetDevice(", at.device, ") failed: ", cudaGetErrorString(set));
  thread_local std::array<std::unique_ptr<backend>, max_devices> backends;
  auto& b = backends[static_cast<std::size_t>(at.device)];
  if (!b) b = std::make_unique<backend>();
  b->set_stream(reinterpret_cast<cudaStream_t>(at.stream));
  return *b;
}

specdec::matrix_view<const float, device_space> rows_of(const float* p, std::int64_t rows, std::int64_t cols) {
  return {p, static_cast<index_t>(rows), static_cast<index_t>(cols)};
}

/// Calls `f` with the device rows at `p` as a view of their element type.
template <class F>
decltype(auto) with_rows(const void* p, element e, std::int64_t rows, std::int64_t cols, F&& f) {
  const auto r = static_cast<index_t>(rows), c = static_cast<index_t>(cols);
  if (e == element::f16) return f(specdec::matrix_view<const specdec::float16, device_space>(static_cast<const specdec::float16*>(p), r, c));
  if (e == element::bf16)
    return f(specdec::matrix_view<const specdec::bfloat16, device_space>(static_cast<const specdec::bfloat16*>(p), r, c));
  return f(specdec::matrix_view<const float, device_space>(static_cast<const float*>(p), r, c));
}

}  // namespace

void row_argmax(place at, const void* logits, element e, std::int64_t rows, std::int64_t cols, std::int32_t* index, float* value) {
  backend& b = on(at);
  const specdec::vector_view<std::int32_t, device_space> i(index, static_cast<index_t>(rows));
  with_rows(logits, e, rows, cols, [&](auto x) {
    if (value != nullptr) b.row_argmax(x, i, specdec::vector_view<float, device_space>(value, static_cast<index_t>(rows)));
    else b.row_argmax(x, i);
  });
}

void row_topk(place at, const void* logits, element e, std::int64_t rows, std::int64_t cols, std::int64_t k, float* values,
              std::int32_t* indices) {
  with_rows(logits, e, rows, cols, [&](auto x) {
    on(at).row_topk(x, static_cast<index_t>(k),
                    specdec::matrix_view<float, device_space>(values, static_cast<index_t>(rows), static_cast<index_t>(k)),
                    specdec::matrix_view<std::int32_t, device_space>(indices, static_cast<index_t>(rows), static_cast<index_t>(k)));
  });
}

void row_softmax(place at, const void* logits, element e, std::int64_t rows, std::int64_t cols, float temperature, float* out,
                 bool log) {
  backend& b = on(at);
  const specdec::matrix_view<float, device_space> o(out, static_cast<index_t>(rows), static_cast<index_t>(cols));
  with_rows(logits, e, rows, cols, [&](auto x) {
    if (log) b.row_log_softmax(x, temperature, o);
    else b.row_softmax(x, temperature, o);
  });
}

void row_logsumexp(place at, const void* logits, element e, std::int64_t rows, std::int64_t cols, float temperature, float* out) {
  with_rows(logits, e, rows, cols, [&](auto x) {
    on(at).row_logsumexp(x, temperature, specdec::vector_view<float, device_space>(out, static_cast<index_t>(rows)));
  });
}

void row_sample(place at, const void* probs, element e, std::int64_t rows, std::int64_t cols, const float* uniforms,
                std::int32_t* out) {
  with_rows(probs, e, rows, cols, [&](auto x) {
    on(at).row_sample(x, specdec::vector_view<const float, device_space>(uniforms, static_cast<index_t>(rows)),
                      specdec::vector_view<std::int32_t, device_space>(out, static_cast<index_t>(rows)));
  });
}

void verify_batch_greedy(place at, const float* logits, std::int64_t rows, std::int64_t cols, const batch_arrays& batch,
                         const batch_outputs& out) {
  specdec::sampling::verify_greedy(on(at), rows_of(logits, rows, cols), tree_batch_of<device_space>(batch),
                                   verify_outputs_of<device_space>(out, batch.batch));
}

void verify_batch_speculative(place at, const void* target, element e, std::int64_t rows, std::int64_t cols, const void* draft,
                              std::int64_t draft_count, const batch_arrays& batch, const batch_outputs& out, bool flashinfer) {
  with_rows(target, e, rows, cols, [&](auto t) {
    using T = typename decltype(t)::value_type;
    specdec::sampling::speculative_rows<device_space, T> in;
    in.target = t;
    if (draft != nullptr) in.draft = {static_cast<const T*>(draft), static_cast<index_t>(draft_count), static_cast<index_t>(cols)};
    specdec::sampling::verify_speculative(on(at), in, tree_batch_of<device_space>(batch), speculative_options_for(flashinfer),
                                          verify_outputs_of<device_space>(out, batch.batch));
  });
}

void sglang_verify_greedy(place at, const sglang_arrays& a) { sglang_verify(on(at), a, true); }

void sglang_verify_sampled(place at, const sglang_arrays& a) {
  backend& b = on(at);
  with_rows(a.target_probs, a.target_element, a.bs * a.n, a.vocab,
            [&](auto t) { specdec_python::sglang_verify_sampled(b, a, t.data()); });
}

void vllm_rejection_sample(place at, const rejection_arrays& a) {
  backend& b = on(at);
  with_rows(a.target_probs, a.target_element, a.tokens, a.vocab, [&](auto t) {
    using T = typename decltype(t)::value_type;
    if (a.draft_probs == nullptr || a.draft_element == a.target_element) {
      vllm_rejection(b, a, t.data(), static_cast<const T*>(static_cast<const void*>(a.draft_probs)));
    } else if constexpr (std::is_same_v<T, float>) {  // 16-bit draft rows under float32 targets
      with_rows(a.draft_probs, a.draft_element, a.tokens, a.vocab, [&](auto d) { vllm_rejection(b, a, t.data(), d.data()); });
    } else {
      throw specdec::invalid_argument("draft_probs: expected the dtype of target_probs (16-bit draft rows go under float32 "
                                      "targets or their own dtype)");
    }
  });
}

void filter_rows(place at, const void* in, element e, std::int64_t rows, std::int64_t cols, const std::int64_t* top_k,
                 std::int64_t k_count, const float* top_p, std::int64_t p_count, void* out, bool renormalise) {
  with_rows(in, e, rows, cols, [&](auto x) {
    using T = typename decltype(x)::value_type;
    filter_rows_on(on(at), x.data(), rows, cols, top_k, k_count, top_p, p_count, static_cast<T*>(out), renormalise);
  });
}

void packbits_offsets(place at, const std::int32_t* indptr, std::int64_t count, std::int32_t* offsets) {
  packbits_offsets_on(on(at), indptr, count, offsets);
}

void packbits(place at, const std::uint8_t* x, std::int64_t x_count, const std::int32_t* indptr, const std::int32_t* offsets,
              std::int64_t count, bool little, std::uint8_t* out, std::int64_t out_count) {
  packbits_on(on(at), x, x_count, indptr, offsets, count, little, out, out_count);
}

void sglang_build_tree(place at, const build_tree_arrays& a) { sglang_build_on(on(at), a); }

void sglang_reconstruct(place at, const reconstruct_arrays& a) { sglang_reconstruct_on(on(at), a); }

void batch_tree_mask(place at, const std::int32_t* parents, std::int64_t batch, std::int64_t n, const std::int32_t* node_counts,
                     std::int64_t prefix_length, int layout, int item, void* out) {
  batch_tree_mask_on(on(at), parents, batch, n, node_counts, prefix_length, layout, item, out);
}

void flashinfer_mask_offsets(place at, const std::int32_t* parents, std::int64_t batch, std::int64_t n, const std::int32_t* node_counts,
                             const std::int64_t* prefix_lengths, std::int32_t* indptr) {
  flashinfer_mask_on(on(at), parents, batch, n, node_counts, prefix_lengths, indptr, nullptr, 0);
}

void flashinfer_mask_packed(place at, const std::int32_t* parents, std::int64_t batch, std::int64_t n, const std::int32_t* node_counts,
                            const std::int64_t* prefix_lengths, const std::int32_t* indptr, std::uint8_t* out, std::int64_t out_count) {
  flashinfer_mask_on(on(at), parents, batch, n, node_counts, prefix_lengths, const_cast<std::int32_t*>(indptr), out, out_count);
}

class eagle2_device : public eagle2_session<backend> {
 public:
  using eagle2_session<backend>::eagle2_session;
};

namespace {

/// The builder's backend bound to the call's device and stream; its copies enqueued on that stream.
auto bind(place at, eagle2_device& e) {
  const cudaError_t set = cudaSetDevice(at.device);
  SPECDEC_EXPECTS(set == cudaSuccess, "specdec (Python, CUDA)", "cudaSetDevice(", at.device, ") failed: ", cudaGetErrorString(set));
  const auto stream = reinterpret_cast<cudaStream_t>(at.stream);
  e.own_backend().set_stream(stream);
  return [stream](void* dst, const void* src, std::size_t bytes) {
    const cudaError_t copied = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream);
    SPECDEC_EXPECTS(copied == cudaSuccess, "specdec (Python, CUDA)", "cudaMemcpyAsync failed: ", cudaGetErrorString(copied));
  };
}

}  // namespace

std::shared_ptr<eagle2_device> eagle2_create(place at, const eagle2_config& c) {
  const cudaError_t set = cudaSetDevice(at.device);
  SPECDEC_EXPECTS(set == cudaSuccess, "specdec (Python, CUDA)", "cudaSetDevice(", at.device, ") failed: ", cudaGetErrorString(set));
  return std::make_shared<eagle2_device>(c);
}

void eagle2_begin(place at, eagle2_device& e, const float* logits, std::int64_t rows, std::int64_t cols, const std::int32_t* roots,
                  std::int64_t target_vocab, const eagle2_step& out) {
  e.begin(logits, rows, cols, roots, target_vocab, out, bind(at, e));
}

void eagle2_expand(place at, eagle2_device& e, const float* logits, std::int64_t rows, std::int64_t cols, const eagle2_step& out) {
  e.expand(logits, rows, cols, out, bind(at, e));
}

void eagle2_expand_dual(place at, eagle2_device& e, const float* left, const float* right, std::int64_t rows, std::int64_t cols,
                        const eagle2_step& out) {
  e.expand_dual(left, right, rows, cols, out, bind(at, e));
}

void eagle2_finish(place at, eagle2_device& e, const eagle2_trees& out) {
  (void)bind(at, e);
  e.finish(out);
}

}  // namespace specdec_python::cuda

namespace specdec_python::block {

/// A device block's backend bound to the call's device and stream.
template <>
struct stream_binding<specdec::thrust_backend<specdec::thrust_system::cuda>> {
  static void bind(specdec::thrust_backend<specdec::thrust_system::cuda>& b, int device, std::uintptr_t stream) {
    const cudaError_t set = cudaSetDevice(device);
    SPECDEC_EXPECTS(set == cudaSuccess, "specdec (Python, CUDA)", "cudaSetDevice(", device, ") failed: ", cudaGetErrorString(set));
    b.set_stream(reinterpret_cast<cudaStream_t>(stream));
  }
};

}  // namespace specdec_python::block

namespace specdec_python::cuda {

/// Created with the device current: the session's backend and caches live there.
template <class Api>
std::unique_ptr<Api> device_block<Api>::make(int device, const block::weight_map& weights, const block::arguments_of<Api>& arguments) {
  const cudaError_t set = cudaSetDevice(device);
  SPECDEC_EXPECTS(set == cudaSuccess, "specdec (Python, CUDA)", "cudaSetDevice(", device, ") failed: ", cudaGetErrorString(set));
  return block::make_session<Api, backend>(device, weights, arguments);
}
template struct device_block<block::decoder_layer>;
template struct device_block<block::eagle3_block>;
template struct device_block<block::mtp_module>;
template struct device_block<block::jakiro_layer>;
template struct device_block<block::amphista_heads>;
template struct device_block<block::moa_drafter>;
template struct device_block<block::dflash_drafter>;

void eagle_fuse(place at, block::token_ids tokens, block::input feature, block::input embed, block::input fc_weight,
                block::vector_arg<const float> fc_bias, block::output out) {
  block::eagle_fuse_on(on(at), tokens, feature, embed, fc_weight, fc_bias, out);
}

}  // namespace specdec_python::cuda
