// SPDX-License-Identifier: Apache-2.0
// The views of specdec::sampling's batch verification (tree_batch, verify_outputs) and of SGLang's
// verifiers over the plain pointers of cuda_ops.hpp's arrays, in either memory space: the host binding
// (specdec_ext.cpp) and the CUDA side (cuda_ops.cu) build them the same way.
#pragma once

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <specdec/core/rng.hpp>
#include <specdec/interop/sglang.hpp>
#include <specdec/interop/sglang_sampling.hpp>
#include <specdec/interop/vllm.hpp>
#include <specdec/mask/packbits.hpp>
#include <specdec/mask/tree_mask_batch.hpp>
#include <specdec/sampling/distribution.hpp>
#include <specdec/sampling/batch.hpp>
#include <specdec/tree/eagle2_batch.hpp>

#include "cuda_ops.hpp"

namespace specdec_python {

// Philox streams arrive as uint64 pairs (seed, subsequence): philox_stream's own layout.
static_assert(sizeof(specdec::philox_stream) == 2 * sizeof(std::uint64_t) && std::is_standard_layout_v<specdec::philox_stream> &&
              offsetof(specdec::philox_stream, seed) == 0 && offsetof(specdec::philox_stream, subsequence) == sizeof(std::uint64_t));

template <class Space>
specdec::sampling::tree_batch<Space> tree_batch_of(const cuda::batch_arrays& a) {
  using specdec::index_t;
  const index_t n = static_cast<index_t>(a.batch);
  const auto vec = [&](const auto* p) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(p)>>;
    return p == nullptr ? specdec::vector_view<const T, Space>{} : specdec::vector_view<const T, Space>(p, n);
  };
  specdec::sampling::tree_batch<Space> b;
  b.tokens = {a.tokens, n, static_cast<index_t>(a.nodes)};
  b.parents = {a.parents, n, static_cast<index_t>(a.nodes)};
  b.node_counts = vec(a.node_counts);
  b.target_rows = vec(a.target_rows);
  if (a.draft_rows != nullptr) b.draft_rows = {a.draft_rows, n, static_cast<index_t>(a.nodes)};
  b.max_accepted = vec(a.max_accepted);
  b.bonus_tokens = vec(a.bonus_tokens);
  if (a.uniforms != nullptr) b.uniforms = {a.uniforms, n, static_cast<index_t>(a.uniform_count)};
  if (a.streams != nullptr)
    b.uniform_streams = specdec::vector_view<const specdec::philox_stream, Space>(reinterpret_cast<const specdec::philox_stream*>(a.streams), n);
  b.uniform_offsets = vec(a.offsets);
  return b;
}

template <class Space>
specdec::sampling::verify_outputs<Space> verify_outputs_of(const cuda::batch_outputs& o, std::int64_t batch) {
  using specdec::index_t;
  const index_t n = static_cast<index_t>(batch);
  specdec::sampling::verify_outputs<Space> v;
  v.tokens = {o.tokens, n, static_cast<index_t>(o.width)};
  v.accepted = specdec::vector_view<std::int32_t, Space>(o.accepted, n);
  if (o.accepted_nodes != nullptr && o.nodes_width > 0) v.accepted_nodes = {o.accepted_nodes, n, static_cast<index_t>(o.nodes_width)};
  if (o.uniforms_consumed != nullptr) v.uniforms_consumed = specdec::vector_view<std::int32_t, Space>(o.uniforms_consumed, n);
  if (o.retest_accepted != nullptr) v.retest_accepted = specdec::vector_view<std::int32_t, Space>(o.retest_accepted, n);
  return v;
}

/// The verifier's options: specdec's defaults, or FlashInfer's chain conventions (chain_speculative_sampling:
/// accept iff u * q < p with u in (0, 1], the chain re-tested after a rejection and the passes counted,
/// V - 1 for an empty residual).
inline specdec::sampling::speculative_options speculative_options_for(bool flashinfer) {
  specdec::sampling::speculative_options options;
  if (flashinfer) {
    options.test = specdec::sampling::acceptance_test::strict_product;
    options.range = specdec::sampling::uniform_range::open_closed;
    options.flashinfer_retest = true;
    options.fallback = specdec::empty_residual::last_token;
  }
  return options;
}

/// SGLang's sampled verifier (its backend form) on backend `b` over target rows `target` of element type
/// T (float, or float16 / bfloat16 read as they are), in place of `a.target_probs`.
template <class B, class T>
void sglang_verify_sampled(B& b, const cuda::sglang_arrays& a, const T* target) {
  using space = typename B::memory_space;
  using specdec::index_t;
  const auto bs = static_cast<index_t>(a.bs), n = static_cast<index_t>(a.n);
  const auto links = [&](const std::int64_t* p) { return specdec::matrix_view<const std::int64_t, space>(p, bs, n); };
  specdec::sglang::tree_speculative_sampling_target_only(
      b, links(a.candidates), links(a.retrive_index), links(a.next_token), links(a.next_sibling),
      specdec::matrix_view<const float, space>(a.uniform_samples, bs, static_cast<index_t>(a.uniform_cols)),
      specdec::vector_view<const float, space>(a.uniform_final, bs),
      specdec::matrix_view<const T, space>(target, bs * n, static_cast<index_t>(a.vocab)),
      specdec::vector_view<std::int32_t, space>(a.predicts, bs * n),
      specdec::matrix_view<std::int32_t, space>(a.accept_index, bs, static_cast<index_t>(a.steps)),
      specdec::vector_view<std::int32_t, space>(a.accept_token_num, bs), a.threshold_single, a.threshold_acc);
}

/// SGLang's verifiers (their backend forms) on backend `b`, every array of `a` in its memory.
template <class B>
void sglang_verify(B& b, const cuda::sglang_arrays& a, bool greedy) {
  using space = typename B::memory_space;
  using specdec::index_t;
  const auto bs = static_cast<index_t>(a.bs), n = static_cast<index_t>(a.n);
  const auto links = [&](const std::int64_t* p) { return specdec::matrix_view<const std::int64_t, space>(p, bs, n); };
  const specdec::vector_view<std::int32_t, space> predicts(a.predicts, bs * n);
  const specdec::matrix_view<std::int32_t, space> accept_index(a.accept_index, bs, static_cast<index_t>(a.steps));
  const specdec::vector_view<std::int32_t, space> accept_token_num(a.accept_token_num, bs);
  if (greedy) {
    specdec::sglang::verify_tree_greedy(b, links(a.candidates), links(a.retrive_index), links(a.next_token), links(a.next_sibling),
                                        specdec::vector_view<const std::int64_t, space>(a.target_predict, bs * n), predicts,
                                        accept_index, accept_token_num);
    return;
  }
  sglang_verify_sampled(b, a, a.target_probs);
}

/// vLLM's rejection sampler over target rows of element type T and draft rows of D (float, or float16 /
/// bfloat16 read as they are; `draft` null: none), in place of `a.target_probs` and `a.draft_probs`.
template <class B, class T, class D>
void vllm_rejection(B& b, const cuda::rejection_arrays& a, const T* target, const D* draft) {
  using space = typename B::memory_space;
  using specdec::index_t;
  const auto batch = static_cast<index_t>(a.batch), tokens = static_cast<index_t>(a.tokens), vocab = static_cast<index_t>(a.vocab);
  const auto rows = [&]<class E>(const E* p, index_t n) {
    return p == nullptr ? specdec::matrix_view<const E, space>{} : specdec::matrix_view<const E, space>(p, n, vocab);
  };
  const auto vec = [](const auto* p, index_t n) {
    using V = std::remove_cv_t<std::remove_pointer_t<decltype(p)>>;
    return p == nullptr ? specdec::vector_view<const V, space>{} : specdec::vector_view<const V, space>(p, n);
  };
  if constexpr (std::is_same_v<space, specdec::host_space>)
    if (a.philox_noise) {
      specdec::vllm::rejection_sample(b, vec(a.draft_token_ids, tokens), vec(a.cu_num_draft_tokens, batch), rows(draft, tokens),
                                      rows(target, tokens), vec(a.bonus_token_ids, batch), vec(a.is_greedy, batch),
                                      vec(a.uniforms, tokens), specdec::vllm::philox_noise{a.noise_seed, a.noise_offset},
                                      specdec::matrix_view<std::int32_t, space>(a.output, batch, static_cast<index_t>(a.width)));
      return;
    }
  specdec::vllm::rejection_sample(b, vec(a.draft_token_ids, tokens), vec(a.cu_num_draft_tokens, batch), rows(draft, tokens),
                                  rows(target, tokens), vec(a.bonus_token_ids, batch), vec(a.is_greedy, batch),
                                  vec(a.uniforms, tokens), rows(a.exponentials, batch),
                                  specdec::matrix_view<std::int32_t, space>(a.output, batch, static_cast<index_t>(a.width)));
}

/// vLLM's rejection sampler (its backend form) on backend `b`, every array of `a` in its memory.
template <class B>
void vllm_rejection(B& b, const cuda::rejection_arrays& a) {
  vllm_rejection(b, a, a.target_probs, a.draft_probs);
}

/// FlashInfer's row filters (their backend forms) on backend `b`, the arrays in its memory: top-k and / or
/// top-p renormalisation (`renormalise`), or top-k masking of logits.
template <class B, class E>
void filter_rows_on(B& b, const E* in, std::int64_t rows, std::int64_t cols, const std::int64_t* top_k, std::int64_t k_count,
                    const float* top_p, std::int64_t p_count, E* out, bool renormalise) {
  using space = typename B::memory_space;
  using specdec::index_t;
  const specdec::matrix_view<const E, space> x(in, static_cast<index_t>(rows), static_cast<index_t>(cols));
  const specdec::vector_view<const std::int64_t, space> k(top_k, top_k == nullptr ? 0 : static_cast<index_t>(k_count));
  const specdec::vector_view<const float, space> p(top_p, top_p == nullptr ? 0 : static_cast<index_t>(p_count));
  const specdec::matrix_view<E, space> y(out, static_cast<index_t>(rows), static_cast<index_t>(cols));
  if (!renormalise) specdec::sampling::top_k_mask_logits(b, x, k, y);
  else if (top_k != nullptr && top_p != nullptr) specdec::sampling::top_k_top_p_joint_renorm(b, x, k, p, y);
  else if (top_p != nullptr) specdec::sampling::top_p_renorm(b, x, p, y);
  else specdec::sampling::top_k_renorm(b, x, k, y);
}

/// segment_packbits' offsets and packing (their backend forms) on backend `b`, the arrays in its memory.
template <class B>
void packbits_offsets_on(B& b, const std::int32_t* indptr, std::int64_t count, std::int32_t* offsets) {
  using space = typename B::memory_space;
  const auto n = static_cast<specdec::index_t>(count);
  specdec::segment_packbits_offsets(b, specdec::vector_view<const std::int32_t, space>(indptr, n),
                                    specdec::vector_view<std::int32_t, space>(offsets, n));
}

template <class B>
void packbits_on(B& b, const std::uint8_t* x, std::int64_t x_count, const std::int32_t* indptr, const std::int32_t* offsets,
                 std::int64_t count, bool little, std::uint8_t* out, std::int64_t out_count) {
  using space = typename B::memory_space;
  using specdec::index_t;
  specdec::segment_packbits(b, specdec::vector_view<const std::uint8_t, space>(x, static_cast<index_t>(x_count)),
                            specdec::vector_view<const std::int32_t, space>(indptr, static_cast<index_t>(count)),
                            specdec::vector_view<const std::int32_t, space>(offsets, static_cast<index_t>(count)),
                            little ? specdec::bit_order::little : specdec::bit_order::big,
                            specdec::vector_view<std::uint8_t, space>(out, static_cast<index_t>(out_count)));
}

/// SGLang's build_tree_kernel_efficient (build_tree's backend form) on backend `b`, every array of `a`
/// in its memory.
template <class B>
void sglang_build_on(B& b, const cuda::build_tree_arrays& a) {
  using space = typename B::memory_space;
  using specdec::index_t;
  const auto bs = static_cast<index_t>(a.bs), n = static_cast<index_t>(a.n);
  const auto links = [&](std::int64_t* p) { return specdec::matrix_view<std::int64_t, space>(p, bs, n); };
  specdec::sglang::build_tree(b, specdec::matrix_view<const std::int64_t, space>(a.parent_list, bs, static_cast<index_t>(a.parent_cols)),
                              specdec::matrix_view<const std::int64_t, space>(a.selected_index, bs, n - 1),
                              specdec::vector_view<const std::int64_t, space>(a.seq_lens, bs),
                              specdec::vector_view<std::uint8_t, space>(a.tree_mask, static_cast<index_t>(a.mask_bytes)),
                              specdec::vector_view<std::int64_t, space>(a.positions, bs * n), links(a.retrive_index),
                              links(a.next_token), links(a.next_sibling), static_cast<index_t>(a.top_k),
                              static_cast<index_t>(a.depth), static_cast<specdec::sglang::tree_mask_mode>(a.mode),
                              static_cast<index_t>(a.item_bytes));
}

/// SGLang's reconstruct_indices_from_tree_mask (its backend form) on backend `b`, the arrays in its memory.
template <class B>
void sglang_reconstruct_on(B& b, const cuda::reconstruct_arrays& a) {
  using space = typename B::memory_space;
  using specdec::index_t;
  const auto bs = static_cast<index_t>(a.bs), n = static_cast<index_t>(a.n);
  const auto links = [&](std::int64_t* p) { return specdec::matrix_view<std::int64_t, space>(p, bs, n); };
  specdec::sglang::reconstruct_indices_from_tree_mask(
      b, specdec::vector_view<const std::uint8_t, space>(a.tree_mask, static_cast<index_t>(a.mask_bytes)),
      specdec::vector_view<const std::int64_t, space>(a.seq_lens, bs), specdec::vector_view<std::int64_t, space>(a.positions, bs * n),
      links(a.retrive_index), links(a.next_token), links(a.next_sibling));
}

/// The tree masks of a padded batch (their backend forms) on backend `b`, the arrays in its memory
/// (cuda::batch_tree_mask's arguments).
template <class B>
void batch_tree_mask_on(B& b, const std::int32_t* parents, std::int64_t batch, std::int64_t n, const std::int32_t* node_counts,
                        std::int64_t prefix_length, int layout, int item, void* out) {
  using space = typename B::memory_space;
  using specdec::index_t;
  const auto rows = static_cast<index_t>(batch), cols = static_cast<index_t>(n), prefix = static_cast<index_t>(prefix_length);
  const specdec::matrix_view<const std::int32_t, space> p(parents, rows, cols);
  const specdec::vector_view<const std::int32_t, space> c(node_counts, node_counts == nullptr ? 0 : rows);
  const index_t total = rows * cols, width = prefix + cols;
  if (layout == 0 && item == 1)
    specdec::tree_mask_dense(b, p, c, prefix, specdec::matrix_view<std::uint8_t, space>(static_cast<std::uint8_t*>(out), total, width));
  else if (layout == 0)
    specdec::tree_mask_dense(b, p, c, prefix, specdec::matrix_view<float, space>(static_cast<float*>(out), total, width));
  else if (layout == 1)
    specdec::tree_mask_additive(b, p, c, prefix, specdec::matrix_view<float, space>(static_cast<float*>(out), total, width));
  else if (layout == 2)
    specdec::tree_mask_packed_int32(b, p, c, specdec::matrix_view<std::int32_t, space>(static_cast<std::int32_t*>(out), total, (cols + 31) / 32));
  else if (item == 1)
    specdec::tree_mask_bitpacked_rows(b, p, c, specdec::vector_view<std::uint8_t, space>(static_cast<std::uint8_t*>(out), total));
  else if (item == 2)
    specdec::tree_mask_bitpacked_rows(b, p, c, specdec::vector_view<std::uint16_t, space>(static_cast<std::uint16_t*>(out), total));
  else
    specdec::tree_mask_bitpacked_rows(b, p, c, specdec::vector_view<std::uint32_t, space>(static_cast<std::uint32_t*>(out), total));
}

/// FlashInfer's packed masks of a padded batch (their backend forms) on backend `b`: the offsets
/// (`out` null) or the bytes.
template <class B>
void flashinfer_mask_on(B& b, const std::int32_t* parents, std::int64_t batch, std::int64_t n, const std::int32_t* node_counts,
                        const std::int64_t* prefix_lengths, std::int32_t* indptr, std::uint8_t* out, std::int64_t out_count) {
  using space = typename B::memory_space;
  using specdec::index_t;
  const auto rows = static_cast<index_t>(batch);
  const specdec::matrix_view<const std::int32_t, space> p(parents, rows, static_cast<index_t>(n));
  const specdec::vector_view<const std::int32_t, space> c(node_counts, node_counts == nullptr ? 0 : rows);
  const specdec::vector_view<const std::int64_t, space> pre(prefix_lengths, rows);
  if (out == nullptr) {
    specdec::tree_mask_flashinfer_offsets(b, p, c, pre, specdec::vector_view<std::int32_t, space>(indptr, rows + 1));
    return;
  }
  specdec::tree_mask_flashinfer_packed(b, p, c, pre, specdec::vector_view<const std::int32_t, space>(indptr, rows + 1),
                                       specdec::vector_view<std::uint8_t, space>(out, static_cast<index_t>(out_count)));
}

/// specdec::eagle2_batch_builder on a backend of its own (type B), the arrays of each call in B's memory.
/// Each step's frontier is copied into the caller's arrays by `copy(dst, src, bytes)` (B's memory to B's
/// memory), so that what the caller holds outlives the builder's next step.
template <class B>
class eagle2_session {
 public:
  using space = typename B::memory_space;
  using index_t = specdec::index_t;

  explicit eagle2_session(const cuda::eagle2_config& c)
      : backend_(std::make_unique<B>()),
        builder_(*backend_,
                 specdec::dynamic_tree_config{static_cast<index_t>(c.top_k), static_cast<index_t>(c.depth),
                                              static_cast<index_t>(c.total_tokens), specdec::tree_score::log_probability,
                                              std::vector<std::int32_t>(c.d2t, c.d2t + c.d2t_count)},
                 static_cast<index_t>(c.batch)),
        batch_(static_cast<index_t>(c.batch)) {}

  B& own_backend() { return *backend_; }

  template <class Copy>
  void begin(const float* logits, std::int64_t rows, std::int64_t cols, const std::int32_t* roots, std::int64_t target_vocab,
             const cuda::eagle2_step& out, Copy copy) {
    expect_step(out, 0);
    emit(builder_.begin(rows_of(logits, rows, cols), specdec::vector_view<const std::int32_t, space>(roots, batch_),
                        static_cast<index_t>(target_vocab)),
         out, copy);
  }
  template <class Copy>
  void expand(const float* logits, std::int64_t rows, std::int64_t cols, const cuda::eagle2_step& out, Copy copy) {
    expect_step(out, builder_.steps_done() + 1);
    emit(builder_.expand(rows_of(logits, rows, cols)), out, copy);
  }
  template <class Copy>
  void expand_dual(const float* left, const float* right, std::int64_t rows, std::int64_t cols, const cuda::eagle2_step& out,
                   Copy copy) {
    expect_step(out, builder_.steps_done() + 2);
    emit(builder_.expand_dual(rows_of(left, rows, cols), rows_of(right, rows, cols)), out, copy);
  }
  void finish(const cuda::eagle2_trees& t) {
    const auto total = builder_.config().total_tokens;
    specdec::dynamic_tree_outputs<space> o;
    o.tokens = {t.tokens, batch_, total};
    o.parents = {t.parents, batch_, total};
    if (t.depths != nullptr) o.depths = {t.depths, batch_, total};
    if (t.scores != nullptr) o.scores = {t.scores, batch_, total};
    if (t.selected != nullptr) o.selected = {t.selected, batch_, total - 1};
    builder_.finish(o);
  }

 private:
  /// The caller sized draft_mask for `out.step`; the step's mask has `step + 1` blocks of columns: a
  /// caller whose count drifted from the builder's would have it written past its end.
  static void expect_step(const cuda::eagle2_step& out, index_t step) {
    if (out.step != step)
      throw std::invalid_argument("step: draft_mask was sized for step " + std::to_string(out.step) + "; the builder's next step is " +
                                  std::to_string(step));
  }
  static specdec::matrix_view<const float, space> rows_of(const float* p, std::int64_t rows, std::int64_t cols) {
    return {p, static_cast<index_t>(rows), static_cast<index_t>(cols)};
  }
  template <class Step, class Copy>
  static void emit(const Step& v, const cuda::eagle2_step& out, Copy copy) {
    const auto bytes = [](const auto& m) { return static_cast<std::size_t>(m.rows() * m.cols()) * sizeof(*m.data()); };
    copy(out.input_ids, v.input_ids.data(), bytes(v.input_ids));
    copy(out.frontier, v.frontier.data(), bytes(v.frontier));
    copy(out.parent_slot, v.parent_slot.data(), bytes(v.parent_slot));
    copy(out.draft_mask, v.draft_mask.data(), bytes(v.draft_mask));
  }

  std::unique_ptr<B> backend_;
  specdec::eagle2_batch_builder<B> builder_;
  index_t batch_;
};

}  // namespace specdec_python
