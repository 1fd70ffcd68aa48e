// SPDX-License-Identifier: Apache-2.0
// The binding's CUDA side: the row primitives on specdec::thrust_backend<thrust_system::cuda>, for
// arrays in CUDA memory. Plain pointers and sizes, no CUDA or nanobind types, so that the binding's
// C++ translation units include it whatever compiler builds them; cuda_ops.cu (nvcc) implements it
// when the package is built with CUDA (SPECDEC_PYTHON_CUDA).
#pragma once

#include <cstdint>
#include <memory>

#include "block_api.hpp"

namespace specdec_python::cuda {

/// Where a call runs: the CUDA device of its arrays and the stream to enqueue on (the caller's current
/// stream; 0: the legacy default stream). Every call synchronises once, on that stream, to raise what
/// the device found in the data (NaN, +inf, a bad row) as an exception.
struct place {
  int device = 0;
  std::uintptr_t stream = 0;
};

/// The element type of a device row matrix: float32, float16 or bfloat16 (read as it is; float outputs).
enum class element : int { f32, f16, bf16 };

/// Each is the eigen backend's function of the same name, on device pointers (rows x cols, row-major,
/// C-contiguous) to rows of element type `e`; `value` may be null. Throws specdec::invalid_argument as
/// the host forms.
void row_argmax(place at, const void* logits, element e, std::int64_t rows, std::int64_t cols, std::int32_t* index, float* value);
void row_topk(place at, const void* logits, element e, std::int64_t rows, std::int64_t cols, std::int64_t k, float* values,
              std::int32_t* indices);
void row_softmax(place at, const void* logits, element e, std::int64_t rows, std::int64_t cols, float temperature, float* out,
                 bool log);
void row_logsumexp(place at, const void* logits, element e, std::int64_t rows, std::int64_t cols, float temperature, float* out);
void row_sample(place at, const void* probs, element e, std::int64_t rows, std::int64_t cols, const float* uniforms,
                std::int32_t* out);

/// A padded batch of draft trees (specdec::sampling::tree_batch) as plain pointers, all in the memory
/// of the call (host or device); null for an optional array the caller did not give.
struct batch_arrays {
  std::int64_t batch = 0;                       ///< requests
  std::int64_t nodes = 0;                       ///< N, nodes per request (padded)
  const std::int32_t* tokens = nullptr;         ///< `[batch x N]`
  const std::int32_t* parents = nullptr;        ///< `[batch x N]`, -1 at node 0
  const std::int32_t* node_counts = nullptr;    ///< `[batch]`
  const std::int64_t* target_rows = nullptr;    ///< `[batch]`: target row of each request's node 0
  const std::int64_t* draft_rows = nullptr;     ///< `[batch x N]`: draft row of each node, -1 deterministic
  const std::int32_t* max_accepted = nullptr;   ///< `[batch]`, -1 for no cap
  const std::int32_t* bonus_tokens = nullptr;   ///< `[batch]`, -1 for none
  const double* uniforms = nullptr;             ///< `[batch x uniform_count]`, or null for Philox streams
  std::int64_t uniform_count = 0;
  const std::uint64_t* streams = nullptr;       ///< `[batch x 2]`: (seed, subsequence) of each request's Philox stream
  const std::uint64_t* offsets = nullptr;       ///< `[batch]`: each stream's first position
};

/// Where batch verification writes (specdec::sampling::verify_outputs), in the memory of the call.
struct batch_outputs {
  std::int32_t* tokens = nullptr;             ///< `[batch x width]`
  std::int64_t width = 0;
  std::int32_t* accepted = nullptr;           ///< `[batch]`
  std::int32_t* accepted_nodes = nullptr;     ///< `[batch x nodes_width]`, or null
  std::int64_t nodes_width = 0;
  std::int32_t* uniforms_consumed = nullptr;  ///< `[batch]`, or null
  std::int32_t* retest_accepted = nullptr;    ///< `[batch]`, or null: FlashInfer's accepted_token_num
};

/// specdec::sampling::verify_greedy (from logits `[rows x cols]`) and verify_speculative (from target
/// probabilities, optional draft rows `[draft_count x cols]`; `flashinfer`: FlashInfer's chain
/// conventions, speculative_options_for_flashinfer) of a padded batch on the device: one kernel per
/// call, one block per request. Throws specdec::invalid_argument as the host forms (data faults after
/// the call's one synchronisation).
void verify_batch_greedy(place at, const float* logits, std::int64_t rows, std::int64_t cols, const batch_arrays& batch,
                         const batch_outputs& out);
/// `target` and `draft` (null: deterministic drafts) both of element type `e`.
void verify_batch_speculative(place at, const void* target, element e, std::int64_t rows, std::int64_t cols, const void* draft,
                              std::int64_t draft_count, const batch_arrays& batch, const batch_outputs& out, bool flashinfer);

/// SGLang's link-encoded trees and its verifiers' outputs as plain pointers, all in the memory of the
/// call: int64 `[bs x n]` candidates and links; int32 outputs `predicts` `[bs * n]` (written at the
/// accepted path's slots only), `accept_index` `[bs x steps]`, `accept_token_num` `[bs]`; then what
/// each verifier reads (null where the other one's).
struct sglang_arrays {
  std::int64_t bs = 0;
  std::int64_t n = 0;
  std::int64_t steps = 0;
  const std::int64_t* candidates = nullptr;
  const std::int64_t* retrive_index = nullptr;
  const std::int64_t* next_token = nullptr;
  const std::int64_t* next_sibling = nullptr;
  std::int32_t* predicts = nullptr;
  std::int32_t* accept_index = nullptr;
  std::int32_t* accept_token_num = nullptr;
  const std::int64_t* target_predict = nullptr;  ///< greedy: `[bs * n]`
  const float* uniform_samples = nullptr;        ///< sampled: `[bs x uniform_cols]`
  std::int64_t uniform_cols = 0;
  const float* uniform_final = nullptr;          ///< sampled: `[bs]`
  const float* target_probs = nullptr;           ///< sampled: `[bs * n x vocab]`, of `target_element`
  element target_element = element::f32;
  std::int64_t vocab = 0;
  float threshold_single = 1.0f;
  float threshold_acc = 1.0f;
};

/// specdec::sglang::verify_tree_greedy and tree_speculative_sampling_target_only (their backend forms)
/// on the device: one kernel, one block per request.
void sglang_verify_greedy(place at, const sglang_arrays& a);
void sglang_verify_sampled(place at, const sglang_arrays& a);

/// vLLM v1's rejection sampler layout (specdec::vllm::rejection_sample's backend form) as plain pointers,
/// all in the memory of the call; null for an optional array not given.
struct rejection_arrays {
  std::int64_t batch = 0;                       ///< requests
  std::int64_t tokens = 0;                      ///< drafts of all requests
  std::int64_t vocab = 0;
  std::int64_t width = 0;                       ///< max_spec_len + 1
  const std::int32_t* draft_token_ids = nullptr;  ///< `[tokens]`
  const std::int64_t* cu_num_draft_tokens = nullptr;  ///< `[batch]`
  const float* draft_probs = nullptr;           ///< `[tokens x vocab]` of `draft_element`, or null
  const float* target_probs = nullptr;          ///< `[tokens x vocab]` of `target_element`
  element draft_element = element::f32;         ///< device calls: `target_element`, or 16-bit under float32 targets
  element target_element = element::f32;
  const std::int32_t* bonus_token_ids = nullptr;  ///< `[batch]`
  const std::uint8_t* is_greedy = nullptr;      ///< `[batch]`, or null
  const double* uniforms = nullptr;             ///< `[tokens]`, or null
  const float* exponentials = nullptr;          ///< `[batch x vocab]`, or null
  std::int32_t* output = nullptr;               ///< `[batch x width]`
  bool philox_noise = false;                    ///< host only: noise rows from Philox (seed, r) at offset
  std::uint64_t noise_seed = 0;
  std::uint64_t noise_offset = 0;
};
void vllm_rejection_sample(place at, const rejection_arrays& a);

/// FlashInfer's row filters (specdec::sampling::top_k_renorm, top_p_renorm, top_k_top_p_joint_renorm with
/// `renormalise`, top_k_mask_logits without; their backend forms) on the device: `in` and `out`
/// `[rows x cols]` (out may be in), `top_k` int64 and `top_p` float with 1 or `rows` entries each, or
/// null (that filter off); `in` and `out` of element type `e` (FlashInfer returns the rows' dtype).
void filter_rows(place at, const void* in, element e, std::int64_t rows, std::int64_t cols, const std::int64_t* top_k,
                 std::int64_t k_count, const float* top_p, std::int64_t p_count, void* out, bool renormalise);

/// FlashInfer's segment_packbits (specdec::segment_packbits_offsets and segment_packbits, their backend
/// forms) on the device: `indptr` and `offsets` int32 `[segments + 1]`, `x` bools as bytes, `out` the
/// packed bytes (`offsets[segments]` of them).
void packbits_offsets(place at, const std::int32_t* indptr, std::int64_t count, std::int32_t* offsets);
void packbits(place at, const std::uint8_t* x, std::int64_t x_count, const std::int32_t* indptr, const std::int32_t* offsets,
              std::int64_t count, bool little, std::uint8_t* out, std::int64_t out_count);

/// SGLang's reconstruct_indices_from_tree_mask (its backend form) as plain pointers, all in the memory
/// of the call: `tree_mask` bytes (`mask_bytes` = bs n n), int64 seq_lens and outputs.
struct reconstruct_arrays {
  std::int64_t bs = 0;
  std::int64_t n = 0;                     ///< draft_token_num
  const std::uint8_t* tree_mask = nullptr;
  std::int64_t mask_bytes = 0;
  const std::int64_t* seq_lens = nullptr;  ///< `[bs]`
  std::int64_t* positions = nullptr;       ///< `[bs * n]`
  std::int64_t* retrive_index = nullptr;   ///< `[bs x n]`
  std::int64_t* next_token = nullptr;      ///< `[bs x n]`
  std::int64_t* next_sibling = nullptr;    ///< `[bs x n]`
};
void sglang_reconstruct(place at, const reconstruct_arrays& a);

/// SGLang's build_tree_kernel_efficient (specdec::sglang::build_tree, its backend form) as plain
/// pointers, all in the memory of the call: int64 inputs, `tree_mask` bytes (`mask_bytes` of them:
/// bools, or `item_bytes`-byte little-endian items when bit-packed), int64 outputs.
struct build_tree_arrays {
  std::int64_t bs = 0;
  std::int64_t n = 0;                            ///< draft_token_num
  std::int64_t parent_cols = 0;
  const std::int64_t* parent_list = nullptr;     ///< `[bs x parent_cols]`
  const std::int64_t* selected_index = nullptr;  ///< `[bs x (n - 1)]`
  const std::int64_t* seq_lens = nullptr;        ///< `[bs]`
  std::uint8_t* tree_mask = nullptr;
  std::int64_t mask_bytes = 0;
  std::int64_t item_bytes = 1;
  std::int64_t* positions = nullptr;             ///< `[bs * n]`
  std::int64_t* retrive_index = nullptr;         ///< `[bs x n]`
  std::int64_t* next_token = nullptr;            ///< `[bs x n]`
  std::int64_t* next_sibling = nullptr;          ///< `[bs x n]`
  std::int64_t top_k = 1;
  std::int64_t depth = 1;
  int mode = 0;
};
void sglang_build_tree(place at, const build_tree_arrays& a);

/// The tree masks of a padded batch (specdec/mask/tree_mask_batch.hpp) on the device: `parents` int32
/// `[batch x n]`, `node_counts` `[batch]` or null; `layout` 0 dense, 1 additive, 2 packed int32, 3
/// bit-packed rows; `item` the bytes of out's entries (dense: 1 (0 / 1 bytes) or 4 (float 0 / 1); additive:
/// 4; packed: 4; bit-packed: 1, 2 or 4).
void batch_tree_mask(place at, const std::int32_t* parents, std::int64_t batch, std::int64_t n, const std::int32_t* node_counts,
                     std::int64_t prefix_length, int layout, int item, void* out);

/// FlashInfer's packed masks of a padded batch (tree_mask_flashinfer_offsets / _packed) on the device:
/// `parents` `[batch x n]`, `node_counts` `[batch]` or null, `prefix_lengths` int64 `[batch]`, `indptr`
/// `[batch + 1]`, `out` `out_count` bytes.
void flashinfer_mask_offsets(place at, const std::int32_t* parents, std::int64_t batch, std::int64_t n, const std::int32_t* node_counts,
                             const std::int64_t* prefix_lengths, std::int32_t* indptr);
void flashinfer_mask_packed(place at, const std::int32_t* parents, std::int64_t batch, std::int64_t n, const std::int32_t* node_counts,
                            const std::int64_t* prefix_lengths, const std::int32_t* indptr, std::uint8_t* out, std::int64_t out_count);

/// The device-resident EAGLE-2 / EAGLE-3 / Jakiro tree build (specdec::eagle2_batch_builder): its
/// configuration (d2t in host memory, copied at creation), where each step's frontier is copied (the
/// builder's own buffers are overwritten by the next step) and where finish() writes the trees; every
/// output array in the memory of the call, null for an optional one not given.
struct eagle2_config {
  std::int64_t top_k = 1;
  std::int64_t depth = 0;
  std::int64_t total_tokens = 1;
  std::int64_t batch = 1;
  const std::int32_t* d2t = nullptr;
  std::int64_t d2t_count = 0;
};
struct eagle2_step {
  std::int32_t* input_ids = nullptr;    ///< `[batch x k]`
  std::int32_t* frontier = nullptr;     ///< `[batch x k]`
  std::int32_t* parent_slot = nullptr;  ///< `[batch x k]`
  std::uint8_t* draft_mask = nullptr;   ///< `[batch k x k (step + 1)]`
  std::int64_t step = 0;                ///< the step draft_mask was sized for: the session refuses another
};
struct eagle2_trees {
  std::int32_t* tokens = nullptr;    ///< `[batch x T]`
  std::int32_t* parents = nullptr;   ///< `[batch x T]`
  std::int32_t* depths = nullptr;    ///< `[batch x T]`, or null
  float* scores = nullptr;           ///< `[batch x T]`, or null
  std::int32_t* selected = nullptr;  ///< `[batch x (T - 1)]`, or null
};
/// A builder on a CUDA device with a backend of its own (its scratch arena and stream binding).
class eagle2_device;
std::shared_ptr<eagle2_device> eagle2_create(place at, const eagle2_config& c);
void eagle2_begin(place at, eagle2_device& e, const float* logits, std::int64_t rows, std::int64_t cols, const std::int32_t* roots,
                  std::int64_t target_vocab, const eagle2_step& out);
void eagle2_expand(place at, eagle2_device& e, const float* logits, std::int64_t rows, std::int64_t cols, const eagle2_step& out);
void eagle2_expand_dual(place at, eagle2_device& e, const float* left, const float* right, std::int64_t rows, std::int64_t cols,
                        const eagle2_step& out);
void eagle2_finish(place at, eagle2_device& e, const eagle2_trees& out);

/// A drafter block (block_api.hpp: Api's session) on CUDA device `device`, its weights there; cuda_ops.cu
/// instantiates it for every block.
template <class Api>
struct device_block {
  static std::unique_ptr<Api> make(int device, const block::weight_map& weights, const block::arguments_of<Api>& arguments);
};
/// EAGLE's fusion (blocks::eagle::fuse) on the device: out `[tokens x E]`.
void eagle_fuse(place at, block::token_ids tokens, block::input feature, block::input embed, block::input fc_weight,
                block::vector_arg<const float> fc_bias, block::output out);

}  // namespace specdec_python::cuda
