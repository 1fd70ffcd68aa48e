// SPDX-License-Identifier: Apache-2.0
// SGLang's speculative kernels under their names: its verifiers, build_tree_kernel_efficient and
// reconstruct_indices_from_tree_mask (the Python side: specdec/sglang.py). Host, or the CUDA device of
// the arrays.
#include "batch_views.hpp"
#include "common.hpp"
#include "cuda_ops.hpp"
#include "placement.hpp"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/interop/sglang.hpp>
#include <specdec/interop/sglang_sampling.hpp>
#include <specdec/mask/tree_mask.hpp>

using namespace specdec_python;
namespace {

/// SGLang's link-encoded trees and outputs, the arguments both of its verifiers take, host or CUDA as
/// `at` says (argument<T>).
specdec_python::cuda::sglang_arrays sglang_arrays_of(const array& predicts, const array& accept_index,
                                                     const array& accept_token_num, const array& candidates,
                                                     const array& retrive_index, const array& retrive_next_token,
                                                     const array& retrive_next_sibling,
                                                     const std::optional<specdec_python::cuda::place>& at) {
  specdec_python::cuda::sglang_arrays a;
  a.candidates = argument<const std::int64_t>(candidates, "candidates", {-1, -1}, at);
  a.bs = static_cast<std::int64_t>(candidates.shape(0));
  a.n = static_cast<std::int64_t>(candidates.shape(1));
  a.retrive_index = argument<const std::int64_t>(retrive_index, "retrive_index", {a.bs, a.n}, at);
  a.next_token = argument<const std::int64_t>(retrive_next_token, "retrive_next_token", {a.bs, a.n}, at);
  a.next_sibling = argument<const std::int64_t>(retrive_next_sibling, "retrive_next_sibling", {a.bs, a.n}, at);
  a.predicts = argument<std::int32_t>(predicts, "predicts", {a.bs * a.n}, at);
  a.accept_index = argument<std::int32_t>(accept_index, "accept_index", {a.bs, -1}, at);
  a.steps = static_cast<std::int64_t>(accept_index.shape(1));
  a.accept_token_num = argument<std::int32_t>(accept_token_num, "accept_token_num", {a.bs}, at);
  return a;
}

/// SGLang's verifiers on the host (specdec::eigen) or, for CUDA arrays, on the device. The headers word a
/// malformed tree as "the links of request r ...": those are retrive_next_token / retrive_next_sibling.
/// `target`: the sampled verifier's host target rows, of any of with_elements' dtypes (a.target_probs
/// unused then).
void run_sglang(const specdec_python::cuda::sglang_arrays& a, const std::optional<specdec_python::cuda::place>& at, bool greedy,
                const array* target = nullptr) {
  naming("retrive_next_token, retrive_next_sibling",
         {"retrive_next_token", "retrive_next_sibling", "retrive_index", "candidates", "predicts", "accept_index", "accept_token_num",
          "target_predict", "uniform_samples", "target_probs"},
         [&] {
           if (at) {
#if SPECDEC_PYTHON_CUDA
             without_gil([&] {
               if (greedy) specdec_python::cuda::sglang_verify_greedy(*at, a);
               else specdec_python::cuda::sglang_verify_sampled(*at, a);
             });
#endif
             return;
           }
           if (target != nullptr) {
             with_elements(*target, "target_probs", 3, access::read, [&](auto* rows) {
               using T = std::remove_pointer_t<decltype(rows)>;
               without_gil([&] { sglang_verify_sampled(host_backend(), a, static_cast<const T*>(rows)); });
             });
             return;
           }
           without_gil([&] { sglang_verify(host_backend(), a, greedy); });
         });
}

/// verify_tree_greedy: SGLang's outputs written into its caller's int32 arrays (predicts at the
/// accepted path's slots only). target_predict holds one prediction per node, `[bs x N]` or `[bs * N]`.
void verify_tree_greedy(const array& predicts, const array& accept_index, const array& accept_token_num, const array& candidates,
                        const array& retrive_index, const array& retrive_next_token, const array& retrive_next_sibling,
                        const array& target_predict, std::uintptr_t stream) {
  const auto at = device_of(candidates, "candidates", stream);
  auto a = sglang_arrays_of(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
                            retrive_next_sibling, at);
  if (target_predict.ndim() == 2) a.target_predict = argument<const std::int64_t>(target_predict, "target_predict", {a.bs, a.n}, at);
  else a.target_predict = argument<const std::int64_t>(target_predict, "target_predict", {a.bs * a.n}, at);
  run_sglang(a, at, true);
}

/// tree_speculative_sampling_target_only: SGLang's sampled tree verification (coin rule), outputs as
/// verify_tree_greedy's.
void tree_speculative_sampling_target_only(const array& predicts, const array& accept_index, const array& accept_token_num,
                                           const array& candidates, const array& retrive_index, const array& retrive_next_token,
                                           const array& retrive_next_sibling, const array& uniform_samples,
                                           const array& uniform_samples_for_final_sampling, const array& target_probs,
                                           float threshold_single, float threshold_acc, std::uintptr_t stream) {
  const auto at = device_of(candidates, "candidates", stream);
  auto a = sglang_arrays_of(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
                            retrive_next_sibling, at);
  a.uniform_samples = argument<const float>(uniform_samples, "uniform_samples", {a.bs, -1}, at);
  a.uniform_cols = static_cast<std::int64_t>(uniform_samples.shape(1));
  a.uniform_final = argument<const float>(uniform_samples_for_final_sampling, "uniform_samples_for_final_sampling", {a.bs}, at);
  if (at) {  // float32, float16 or bfloat16, read as they are
#if SPECDEC_PYTHON_CUDA
    const auto [p, e] = device_rows(target_probs, "target_probs", 3, *at);
    expect_shape(target_probs, "target_probs", {a.bs, a.n, -1});
    a.target_probs = static_cast<const float*>(p);
    a.target_element = e;
#endif
  } else {  // float32, or float16 / bfloat16 read as they are
    with_elements(target_probs, "target_probs", 3, access::read, [](auto*) {});
    expect_shape(target_probs, "target_probs", {a.bs, a.n, -1});
  }
  a.vocab = static_cast<std::int64_t>(target_probs.shape(2));
  a.threshold_single = threshold_single;
  a.threshold_acc = threshold_acc;
  run_sglang(a, at, false, &target_probs);
}

/// reconstruct_indices_from_tree_mask: SGLang's tree buffers from its masks, written into its caller's
/// arrays (host arrays, or CUDA arrays: one kernel on `stream`).
void reconstruct_indices_from_tree_mask(const array& tree_mask, const array& verified_seq_len, const array& positions,
                                        const array& retrive_index, const array& retrive_next_token,
                                        const array& retrive_next_sibling, index_t batch_size, index_t draft_token_num,
                                        std::uintptr_t stream) {
  const auto at = device_of(verified_seq_len, "verified_seq_len", stream);
  if (draft_token_num < 1)
    throw nb::value_error(("draft_token_num: expected >= 1 (the root); got " + std::to_string(draft_token_num)).c_str());
  specdec_python::cuda::reconstruct_arrays a;
  a.bs = batch_size;
  a.n = draft_token_num;
  a.seq_lens = argument<const std::int64_t>(verified_seq_len, "verified_seq_len", {a.bs}, at);
  a.tree_mask = static_cast<const std::uint8_t*>(check_array(tree_mask, "tree_mask",
                                                             {nb::dtype<bool>(), nb::dtype<std::uint8_t>(), nb::dtype<std::int8_t>()},
                                                             -1, access::read, at ? at->device : host_memory));
  a.mask_bytes = static_cast<std::int64_t>(tree_mask.size());
  a.positions = argument<std::int64_t>(positions, "positions", {a.bs * a.n}, at);
  a.retrive_index = argument<std::int64_t>(retrive_index, "retrive_index", {a.bs, a.n}, at);
  a.next_token = argument<std::int64_t>(retrive_next_token, "retrive_next_token", {a.bs, a.n}, at);
  a.next_sibling = argument<std::int64_t>(retrive_next_sibling, "retrive_next_sibling", {a.bs, a.n}, at);
  if (at) {
#if SPECDEC_PYTHON_CUDA
    without_gil([&] { specdec_python::cuda::sglang_reconstruct(*at, a); });
#endif
    return;
  }
  without_gil([&] { sglang_reconstruct_on(host_backend(), a); });
}

/// build_tree_kernel_efficient: SGLang's tree buffers written into its caller's arrays (host arrays, or
/// CUDA arrays: one kernel on `stream`).
void build_tree_kernel_efficient(const array& parent_list, const array& selected_index, const array& verified_seq_len,
                                 const array& tree_mask, const array& positions, const array& retrive_index,
                                 const array& retrive_next_token, const array& retrive_next_sibling, index_t topk, index_t depth,
                                 index_t draft_token_num, int tree_mask_mode, std::uintptr_t stream) {
  const auto at = device_of(verified_seq_len, "verified_seq_len", stream);
  if (draft_token_num < 1)
    throw nb::value_error(("draft_token_num: expected >= 1 (the root); got " + std::to_string(draft_token_num)).c_str());
  if (tree_mask_mode < 0 || tree_mask_mode > 2)
    throw nb::value_error(("tree_mask_mode: expected 0 (FULL_MASK), 1 (QLEN_ONLY) or 2 (QLEN_ONLY_BITPACKING); got " +
                           std::to_string(tree_mask_mode)).c_str());
  specdec_python::cuda::build_tree_arrays a;
  a.seq_lens = argument<const std::int64_t>(verified_seq_len, "verified_seq_len", {-1}, at);
  a.bs = static_cast<std::int64_t>(verified_seq_len.shape(0));
  a.n = draft_token_num;
  a.parent_list = argument<const std::int64_t>(parent_list, "parent_list", {a.bs, -1}, at);
  a.parent_cols = static_cast<std::int64_t>(parent_list.shape(1));
  a.selected_index = argument<const std::int64_t>(selected_index, "selected_index", {a.bs, a.n - 1}, at);
  a.positions = argument<std::int64_t>(positions, "positions", {a.bs * a.n}, at);
  a.retrive_index = argument<std::int64_t>(retrive_index, "retrive_index", {a.bs, a.n}, at);
  a.next_token = argument<std::int64_t>(retrive_next_token, "retrive_next_token", {a.bs, a.n}, at);
  a.next_sibling = argument<std::int64_t>(retrive_next_sibling, "retrive_next_sibling", {a.bs, a.n}, at);
  a.top_k = topk;
  a.depth = depth;
  a.mode = tree_mask_mode;
  // The mask: bools (one byte each) or, bit-packed, one 1 / 2 / 4-byte little-endian item per row.
  const bool packed = tree_mask_mode == static_cast<int>(specdec::sglang::tree_mask_mode::qlen_only_bitpacking);
  const int mask_device = at ? at->device : host_memory;
  a.tree_mask = static_cast<std::uint8_t*>(
      packed ? check_array(tree_mask, "tree_mask",
                           {nb::dtype<std::uint8_t>(), nb::dtype<std::int8_t>(), nb::dtype<std::uint16_t>(), nb::dtype<std::int16_t>(),
                            nb::dtype<std::uint32_t>(), nb::dtype<std::int32_t>()},
                           -1, access::write, mask_device)
             : check_array(tree_mask, "tree_mask", {nb::dtype<bool>(), nb::dtype<std::uint8_t>(), nb::dtype<std::int8_t>()}, -1,
                           access::write, mask_device));
  const std::size_t item = tree_mask.itemsize();
  a.mask_bytes = static_cast<std::int64_t>(tree_mask.size() * item);
  a.item_bytes = static_cast<std::int64_t>(item);
  if (at) {
#if SPECDEC_PYTHON_CUDA
    renaming({{"top_k", "topk"}, {"num_steps", "depth"}, {"num_draft_tokens", "draft_token_num"}},
             [&] { without_gil([&] { specdec_python::cuda::sglang_build_tree(*at, a); }); });
#endif
    return;
  }
  // The header's names of SGLang's sizes: top_k, num_steps, num_draft_tokens.
  renaming({{"top_k", "topk"}, {"num_steps", "depth"}, {"num_draft_tokens", "draft_token_num"}},
           [&] { without_gil([&] { sglang_build_on(host_backend(), a); }); });
}

}  // namespace

void bind_sglang(nb::module_& m) {
  m.def("tree_speculative_sampling_target_only", &tree_speculative_sampling_target_only, nb::arg("predicts").none(),
        nb::arg("accept_index").none(), nb::arg("accept_token_num").none(), nb::arg("candidates").none(),
        nb::arg("retrive_index").none(), nb::arg("retrive_next_token").none(), nb::arg("retrive_next_sibling").none(),
        nb::arg("uniform_samples").none(), nb::arg("uniform_samples_for_final_sampling").none(), nb::arg("target_probs").none(),
        nb::arg("threshold_single"), nb::arg("threshold_acc"), nb::arg("stream") = 0);
  m.def("reconstruct_indices_from_tree_mask", &reconstruct_indices_from_tree_mask, nb::arg("tree_mask").none(),
        nb::arg("verified_seq_len").none(), nb::arg("positions").none(), nb::arg("retrive_index").none(),
        nb::arg("retrive_next_token").none(), nb::arg("retrive_next_sibling").none(), nb::arg("batch_size"),
        nb::arg("draft_token_num"), nb::arg("stream") = 0);
  m.def("build_tree_kernel_efficient", &build_tree_kernel_efficient, nb::arg("parent_list").none(), nb::arg("selected_index").none(),
        nb::arg("verified_seq_len").none(), nb::arg("tree_mask").none(), nb::arg("positions").none(), nb::arg("retrive_index").none(),
        nb::arg("retrive_next_token").none(), nb::arg("retrive_next_sibling").none(), nb::arg("topk"), nb::arg("depth"),
        nb::arg("draft_token_num"), nb::arg("tree_mask_mode"), nb::arg("stream"));
  m.def("verify_tree_greedy", &verify_tree_greedy, nb::arg("predicts").none(), nb::arg("accept_index").none(),
        nb::arg("accept_token_num").none(), nb::arg("candidates").none(), nb::arg("retrive_index").none(),
        nb::arg("retrive_next_token").none(), nb::arg("retrive_next_sibling").none(), nb::arg("target_predict").none(),
        nb::arg("stream") = 0);
}
