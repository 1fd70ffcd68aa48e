// SPDX-License-Identifier: Apache-2.0
// Padded batches where they live (host or CUDA): verification (sampling/batch.hpp), tree masks
// (mask/tree_mask_batch.hpp) and the device-resident EAGLE-2 build (tree/eagle2_batch.hpp).
#include "batch_views.hpp"
#include "common.hpp"
#include "cuda_ops.hpp"
#include "placement.hpp"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/interop/sglang.hpp>
#include <specdec/interop/sglang_sampling.hpp>
#include <specdec/interop/vllm.hpp>
#include <specdec/mask/tree_mask.hpp>
#include <specdec/sampling/batch.hpp>
#include <specdec/sampling/speculative.hpp>
#include <specdec/sampling/distribution.hpp>
#include <specdec/version.hpp>

using namespace specdec_python;
namespace {

// ---- specdec's padded batch verification (sampling/batch.hpp), host or CUDA --------------------------

/// verify_batch: specdec::sampling::verify_greedy (`greedy`: `target` holds logits) or
/// verify_speculative (`target` holds probabilities) of a padded batch, every array in the memory of
/// `target` (host, or a CUDA device in a CUDA build: one kernel, on `stream`). Optional arrays are empty
/// when absent. Philox streams arrive as int64 pairs (seed, subsequence) and offsets as int64, read as
/// the uint64 they hold. On the host `target` and `draft_probs` may be float32, float16 or bfloat16 each
/// (read as they are: the float32 rows' results); on CUDA float32.
void verify_batch(const array& target, bool greedy, const array& tokens, const array& parents, const array& node_counts,
                  const array& target_rows, const array& draft_probs, const array& draft_rows, const array& max_accepted,
                  const array& bonus_tokens, const array& uniforms, const array& streams, const array& offsets,
                  const array& out_tokens, const array& out_accepted, const array& out_nodes, const array& out_consumed,
                  bool flashinfer, const array& out_retest, std::uintptr_t stream) {
  // The caller's name for it: chain_speculative_sampling's target_probs (`flashinfer`), verify_tree_batch's target.
  const char* target_name = flashinfer ? "target_probs" : "target";
  const auto at = device_of(target, target_name, stream);
  // Any row dtype: on the host checked by with_rows below; on CUDA float32 for greedy logits, and float32,
  // float16 or bfloat16 probabilities (the draft rows of the same dtype).
  [[maybe_unused]] const void* t = nullptr;  // the device call's (a CPU-only build has none)
#if SPECDEC_PYTHON_CUDA
  specdec_python::cuda::element e = specdec_python::cuda::element::f32;
  if (at) {
    if (greedy) t = argument<const float>(target, target_name, {-1, -1}, at);
    else std::tie(t, e) = device_rows(target, target_name, 2, *at);
  }
#endif
  if (!at) with_rows(target, target_name, [](auto) {});
  const std::int64_t rows = static_cast<std::int64_t>(target.shape(0)), vocab = static_cast<std::int64_t>(target.shape(1));
  if (tokens.ndim() != 2) throw nb::value_error(("tokens: expected 2 dimensions [batch x N]; got shape " + shape_of(tokens)).c_str());
  const std::int64_t b = static_cast<std::int64_t>(tokens.shape(0)), n = static_cast<std::int64_t>(tokens.shape(1));
  specdec_python::cuda::batch_arrays in;
  in.batch = b;
  in.nodes = n;
  in.tokens = argument<const std::int32_t>(tokens, "tokens", {b, n}, at);
  in.parents = argument<const std::int32_t>(parents, "parents", {b, n}, at);
  in.node_counts = argument<const std::int32_t>(node_counts, "node_counts", {b}, at, true);
  in.target_rows = argument<const std::int64_t>(target_rows, "target_rows", {b}, at, true);
  in.max_accepted = argument<const std::int32_t>(max_accepted, "max_accepted", {b}, at, true);
  in.bonus_tokens = argument<const std::int32_t>(bonus_tokens, "bonus_tokens", {b}, at, true);
  [[maybe_unused]] const void* draft = nullptr;
  [[maybe_unused]] std::int64_t draft_count = 0;
  bool with_draft = false;
  if (!greedy) {
    if (at) {
      if (!absent(draft_probs)) {
        expect_same_dtype(draft_probs, "draft_probs", target, target_name);
        draft = check_array(draft_probs, "draft_probs", {target.dtype()}, 2, access::read, at->device);
        expect_shape(draft_probs, "draft_probs", {-1, vocab});
      }
      with_draft = draft != nullptr;
    } else if (!absent(draft_probs)) {
      with_rows(draft_probs, "draft_probs", [](auto) {});
      expect_shape(draft_probs, "draft_probs", {-1, vocab});
      with_draft = true;
    }
    draft_count = with_draft ? static_cast<std::int64_t>(draft_probs.shape(0)) : 0;
    in.draft_rows = argument<const std::int64_t>(draft_rows, "draft_rows", {b, n}, at, true);
    if (!with_draft != (in.draft_rows == nullptr))
      throw nb::value_error("draft_probs, draft_rows: expected both (stochastic drafts) or neither (deterministic drafts)");
    in.uniforms = argument<const double>(uniforms, "uniforms", {b, -1}, at, true);
    in.uniform_count = in.uniforms == nullptr ? 0 : static_cast<std::int64_t>(uniforms.shape(1));
    in.streams = reinterpret_cast<const std::uint64_t*>(argument<const std::int64_t>(streams, "streams", {b, 2}, at, true));
    // Named as verify_tree_batch's argument (its per-request offsets arrive here).
    in.offsets = reinterpret_cast<const std::uint64_t*>(argument<const std::int64_t>(offsets, "offset", {b}, at, true));
  }
  specdec_python::cuda::batch_outputs out;
  out.tokens = argument<std::int32_t>(out_tokens, "out_tokens", {b, -1}, at);
  out.width = static_cast<std::int64_t>(out_tokens.shape(1));
  out.accepted = argument<std::int32_t>(out_accepted, "out_accepted", {b}, at);
  out.accepted_nodes = argument<std::int32_t>(out_nodes, "out_accepted_nodes", {b, -1}, at, true);
  out.nodes_width = out.accepted_nodes == nullptr ? 0 : static_cast<std::int64_t>(out_nodes.shape(1));
  out.uniforms_consumed = argument<std::int32_t>(out_consumed, "out_uniforms_consumed", {b}, at, true);
  out.retest_accepted = argument<std::int32_t>(out_retest, "out_retest_accepted", {b}, at, true);
  if (at) {
#if SPECDEC_PYTHON_CUDA
    without_gil([&] {
      if (greedy) specdec_python::cuda::verify_batch_greedy(*at, static_cast<const float*>(t), rows, vocab, in, out);
      else specdec_python::cuda::verify_batch_speculative(*at, t, e, rows, vocab, draft, draft_count, in, out, flashinfer);
    });
#endif
    return;
  }
  with_rows(target, target_name, [&](auto x) {
    using T = typename decltype(x)::value_type;
    using specdec::host_space;
    if (greedy) {
      without_gil([&] {
        if constexpr (std::is_same_v<T, float>) {
          specdec::sampling::verify_greedy(host_backend(), x, tree_batch_of<host_space>(in), verify_outputs_of<host_space>(out, b));
        } else {
          // The batched greedy walk reads float logits: a 16-bit batch takes every row's argmax instead
          // (the backend reads the 16-bit rows as they are), then the argmax form.
          std::vector<std::int32_t> best(static_cast<std::size_t>(rows));
          host_backend().row_argmax(x, specdec::vector_view<std::int32_t>(best.data(), static_cast<index_t>(rows)));
          specdec::sampling::verify_greedy(host_backend(), specdec::vector_view<const std::int32_t>(best.data(), static_cast<index_t>(rows)),
                                           tree_batch_of<host_space>(in), static_cast<index_t>(vocab), verify_outputs_of<host_space>(out, b));
        }
      });
      return;
    }
    const auto run = [&](auto d) {
      using D = typename decltype(d)::value_type;
      specdec::sampling::speculative_rows<host_space, T, D> r;
      r.target = x;
      r.draft = d;
      without_gil([&] {
        specdec::sampling::verify_speculative(host_backend(), r, tree_batch_of<host_space>(in), speculative_options_for(flashinfer),
                                              verify_outputs_of<host_space>(out, b));
      });
    };
    if (with_draft) with_rows(draft_probs, "draft_probs", run);
    else run(specdec::matrix_view<const float>{});
  });
}

/// The tree masks of a padded batch into `out` (its dtype picks the entries: see batch_tree_mask_on), on
/// the host or, for CUDA arrays, on `stream`.
void batch_tree_mask(const array& parents, const array& node_counts, index_t prefix_length, int layout, const array& out,
                     std::uintptr_t stream) {
  const auto at = device_of(parents, "parents", stream);
  const std::int32_t* p = argument<const std::int32_t>(parents, "parents", {-1, -1}, at);
  const auto batch = static_cast<std::int64_t>(parents.shape(0)), n = static_cast<std::int64_t>(parents.shape(1));
  const std::int32_t* counts = argument<const std::int32_t>(node_counts, "node_counts", {batch}, at, true);
  if (layout < 0 || layout > 3) throw nb::value_error(("layout: expected 0 .. 3; got " + std::to_string(layout)).c_str());
  if (prefix_length < 0)
    throw nb::value_error(("prefix_length: expected a length >= 0; got " + std::to_string(prefix_length)).c_str());
  // out's entries: the dtype decides (bool / uint8 0 / 1 bytes, float32, int32 words, 1 / 2 / 4-byte items).
  const int out_device = at ? at->device : host_memory;
  if (layout == 0)
    check_array(out, "out", {nb::dtype<bool>(), nb::dtype<std::uint8_t>(), nb::dtype<std::int8_t>(), nb::dtype<float>()}, -1, access::write,
                out_device);
  else if (layout == 1) check_array(out, "out", {nb::dtype<float>()}, -1, access::write, out_device);
  else if (layout == 2) check_array(out, "out", {nb::dtype<std::int32_t>()}, -1, access::write, out_device);
  else
    check_array(out, "out",
                {nb::dtype<std::uint8_t>(), nb::dtype<std::int8_t>(), nb::dtype<std::uint16_t>(), nb::dtype<std::int16_t>(),
                 nb::dtype<std::uint32_t>(), nb::dtype<std::int32_t>()},
                -1, access::write, out_device);
  const std::size_t item = out.itemsize();
  const std::int64_t cols = layout <= 1 ? prefix_length + n : layout == 2 ? (n + 31) / 32 : 1;
  if (static_cast<std::int64_t>(out.size()) != batch * n * cols)
    throw nb::value_error(("out: expected " + std::to_string(batch * n * cols) + " entries (batch x N x " + std::to_string(cols) +
                           "); got shape " + shape_of(out)).c_str());
  void* o = out.data();
  const int bytes = static_cast<int>(item);
  if (at) {
#if SPECDEC_PYTHON_CUDA
    without_gil([&] { specdec_python::cuda::batch_tree_mask(*at, p, batch, n, counts, prefix_length, layout, bytes, o); });
#endif
    return;
  }
  without_gil([&] { batch_tree_mask_on(host_backend(), p, batch, n, counts, prefix_length, layout, bytes, o); });
}

/// FlashInfer's packed masks of a padded batch: the offsets into `indptr` (`out` empty) or the bytes into
/// `out`, on the host or, for CUDA arrays, on `stream`.
void flashinfer_mask(const array& parents, const array& node_counts, const array& prefix_lengths, const array& indptr,
                     const array& out, std::uintptr_t stream) {
  const auto at = device_of(parents, "parents", stream);
  const std::int32_t* p = argument<const std::int32_t>(parents, "parents", {-1, -1}, at);
  const auto batch = static_cast<std::int64_t>(parents.shape(0)), n = static_cast<std::int64_t>(parents.shape(1));
  const std::int32_t* counts = argument<const std::int32_t>(node_counts, "node_counts", {batch}, at, true);
  const std::int64_t* prefixes = argument<const std::int64_t>(prefix_lengths, "prefix_lengths", {batch}, at);
  std::int32_t* ip = argument<std::int32_t>(indptr, "indptr", {batch + 1}, at);
  std::uint8_t* bytes = absent(out) ? nullptr : argument<std::uint8_t>(out, "out", {-1}, at);
  const auto count = static_cast<std::int64_t>(out.size());
  if (at) {
#if SPECDEC_PYTHON_CUDA
    without_gil([&] {
      if (bytes == nullptr) specdec_python::cuda::flashinfer_mask_offsets(*at, p, batch, n, counts, prefixes, ip);
      else specdec_python::cuda::flashinfer_mask_packed(*at, p, batch, n, counts, prefixes, ip, bytes, count);
    });
#endif
    return;
  }
  without_gil([&] { flashinfer_mask_on(host_backend(), p, batch, n, counts, prefixes, ip, bytes, count); });
}

// ---- the device-resident EAGLE-2 build (specdec::eagle2_batch_builder) -----------------------------------

/// eagle2_batch_builder on the host (specdec::eigen) or on CUDA device `device` (a CUDA build); each call's
/// arrays on the builder's device, outputs allocated by the caller (specdec.Eagle2BatchBuilder). Each
/// step runs under the builder's lock (`locked`): threads sharing a builder are serialised.
class eagle2_batch {
 public:
  eagle2_batch(index_t top_k, index_t depth, index_t total_tokens, index_t batch, std::vector<std::int32_t> d2t, int device)
      : d2t_(std::move(d2t)), device_(device) {
    config_ = {top_k, depth, total_tokens, batch, d2t_.data(), static_cast<std::int64_t>(d2t_.size())};
    if (device < 0) {
      host_ = std::make_unique<eagle2_session<specdec::eigen>>(config_);
      return;
    }
#if SPECDEC_PYTHON_CUDA
    dev_ = specdec_python::cuda::eagle2_create({device, 0}, config_);
#else
    throw nb::value_error("device: this build of specdec is CPU-only (build the package where nvcc is found)");
#endif
  }

  void begin(const array& root_logits, const array& root_tokens, index_t target_vocab, const array& input_ids, const array& frontier,
             const array& parent_slot, const array& draft_mask, std::uintptr_t stream) {
    const auto at = place_of(stream);
    const float* x = argument<const float>(root_logits, "root_logits", {config_.batch, -1}, at);
    const std::int32_t* roots = argument<const std::int32_t>(root_tokens, "root_tokens", {config_.batch}, at);
    const auto out = step_of(input_ids, frontier, parent_slot, draft_mask, 0, at);
    const auto rows = static_cast<std::int64_t>(root_logits.shape(0)), cols = static_cast<std::int64_t>(root_logits.shape(1));
    if (host_) {
      naming("root_logits", {"root_logits", "root_tokens", "target_vocab"},
             [&] { locked(mutex_, [&] { host_->begin(x, rows, cols, roots, target_vocab, out, host_copy); }); });
      return;
    }
#if SPECDEC_PYTHON_CUDA
    naming("root_logits", {"root_logits", "root_tokens", "target_vocab"},
           [&] { locked(mutex_, [&] { specdec_python::cuda::eagle2_begin(*at, *dev_, x, rows, cols, roots, target_vocab, out); }); });
#endif
  }

  void expand(const array& logits, const array& input_ids, const array& frontier, const array& parent_slot, const array& draft_mask,
              index_t step, std::uintptr_t stream) {
    const auto at = place_of(stream);
    const float* x = argument<const float>(logits, "frontier_logits", {config_.batch * config_.top_k, -1}, at);
    const auto out = step_of(input_ids, frontier, parent_slot, draft_mask, step, at);
    const auto rows = static_cast<std::int64_t>(logits.shape(0)), cols = static_cast<std::int64_t>(logits.shape(1));
    if (host_) {
      naming("frontier_logits", {"frontier_logits", "step"},
             [&] { locked(mutex_, [&] { host_->expand(x, rows, cols, out, host_copy); }); });
      return;
    }
#if SPECDEC_PYTHON_CUDA
    naming("frontier_logits", {"frontier_logits", "step"},
           [&] { locked(mutex_, [&] { specdec_python::cuda::eagle2_expand(*at, *dev_, x, rows, cols, out); }); });
#endif
  }

  void expand_dual(const array& left, const array& right, const array& input_ids, const array& frontier, const array& parent_slot,
                   const array& draft_mask, index_t step, std::uintptr_t stream) {
    const auto at = place_of(stream);
    const float* l = argument<const float>(left, "left_logits", {config_.batch * config_.top_k, -1}, at);
    const float* r = argument<const float>(right, "right_logits", {config_.batch * config_.top_k, static_cast<std::int64_t>(left.shape(1))}, at);
    const auto out = step_of(input_ids, frontier, parent_slot, draft_mask, step, at);
    const auto rows = static_cast<std::int64_t>(left.shape(0)), cols = static_cast<std::int64_t>(left.shape(1));
    if (host_) {
      naming("left_logits, right_logits", {"left_logits", "right_logits", "step"},
             [&] { locked(mutex_, [&] { host_->expand_dual(l, r, rows, cols, out, host_copy); }); });
      return;
    }
#if SPECDEC_PYTHON_CUDA
    naming("left_logits, right_logits", {"left_logits", "right_logits", "step"},
           [&] { locked(mutex_, [&] { specdec_python::cuda::eagle2_expand_dual(*at, *dev_, l, r, rows, cols, out); }); });
#endif
  }

  void finish(const array& tokens, const array& parents, const array& depths, const array& scores, const array& selected,
              std::uintptr_t stream) {
    const auto at = place_of(stream);
    const std::int64_t b = config_.batch, t = config_.total_tokens;
    specdec_python::cuda::eagle2_trees out;
    out.tokens = argument<std::int32_t>(tokens, "tokens", {b, t}, at);
    out.parents = argument<std::int32_t>(parents, "parents", {b, t}, at);
    out.depths = argument<std::int32_t>(depths, "depths", {b, t}, at, true);
    out.scores = argument<float>(scores, "scores", {b, t}, at, true);
    out.selected = argument<std::int32_t>(selected, "selected", {b, t - 1}, at, true);
    if (host_) {
      locked(mutex_, [&] { host_->finish(out); });
      return;
    }
#if SPECDEC_PYTHON_CUDA
    locked(mutex_, [&] { specdec_python::cuda::eagle2_finish(*at, *dev_, out); });
#endif
  }

 private:
  std::optional<specdec_python::cuda::place> place_of(std::uintptr_t stream) const {
    if (device_ < 0) return std::nullopt;
    return specdec_python::cuda::place{device_, stream};
  }
  static void host_copy(void* dst, const void* src, std::size_t bytes) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  specdec_python::cuda::eagle2_step step_of(const array& input_ids, const array& frontier, const array& parent_slot,
                                            const array& draft_mask, index_t step,
                                            const std::optional<specdec_python::cuda::place>& at) const {
    const std::int64_t b = config_.batch, k = config_.top_k;
    specdec_python::cuda::eagle2_step out;
    out.input_ids = argument<std::int32_t>(input_ids, "input_ids", {b, k}, at);
    out.frontier = argument<std::int32_t>(frontier, "frontier", {b, k}, at);
    out.parent_slot = argument<std::int32_t>(parent_slot, "parent_slot", {b, k}, at);
    out.draft_mask = argument<std::uint8_t>(draft_mask, "draft_mask", {b * k, k * (step + 1)}, at);
    out.step = step;
    return out;
  }

  std::mutex mutex_;  // the session's state (its buffers, the step reached)
  std::vector<std::int32_t> d2t_;
  int device_;
  specdec_python::cuda::eagle2_config config_;
  std::unique_ptr<eagle2_session<specdec::eigen>> host_;
#if SPECDEC_PYTHON_CUDA
  std::shared_ptr<specdec_python::cuda::eagle2_device> dev_;
#endif
};

}  // namespace

void bind_batch(nb::module_& m) {
  m.def("flashinfer_mask", &flashinfer_mask, nb::arg("parents").none(), nb::arg("node_counts").none(),
        nb::arg("prefix_lengths").none(), nb::arg("indptr").none(), nb::arg("out").none(), nb::arg("stream"));
  m.def("batch_tree_mask", &batch_tree_mask, nb::arg("parents").none(), nb::arg("node_counts").none(), nb::arg("prefix_length"),
        nb::arg("layout"), nb::arg("out").none(), nb::arg("stream"));
  nb::class_<eagle2_batch>(m, "Eagle2Batch")
      .def(nb::init<index_t, index_t, index_t, index_t, std::vector<std::int32_t>, int>(), nb::arg("top_k"), nb::arg("depth"),
           nb::arg("total_tokens"), nb::arg("batch"), nb::arg("d2t"), nb::arg("device"))
      .def("begin", &eagle2_batch::begin, nb::arg("root_logits").none(), nb::arg("root_tokens").none(), nb::arg("target_vocab"),
           nb::arg("input_ids").none(), nb::arg("frontier").none(), nb::arg("parent_slot").none(), nb::arg("draft_mask").none(),
           nb::arg("stream"))
      .def("expand", &eagle2_batch::expand, nb::arg("frontier_logits").none(), nb::arg("input_ids").none(), nb::arg("frontier").none(),
           nb::arg("parent_slot").none(), nb::arg("draft_mask").none(), nb::arg("step"), nb::arg("stream"))
      .def("expand_dual", &eagle2_batch::expand_dual, nb::arg("left_logits").none(), nb::arg("right_logits").none(),
           nb::arg("input_ids").none(), nb::arg("frontier").none(), nb::arg("parent_slot").none(), nb::arg("draft_mask").none(),
           nb::arg("step"), nb::arg("stream"))
      .def("finish", &eagle2_batch::finish, nb::arg("tokens").none(), nb::arg("parents").none(), nb::arg("depths").none(),
           nb::arg("scores").none(), nb::arg("selected").none(), nb::arg("stream"));
  m.def("verify_batch", &verify_batch, nb::arg("target").none(), nb::arg("greedy"), nb::arg("tokens").none(),
        nb::arg("parents").none(), nb::arg("node_counts").none(), nb::arg("target_rows").none(), nb::arg("draft_probs").none(),
        nb::arg("draft_rows").none(), nb::arg("max_accepted").none(), nb::arg("bonus_tokens").none(), nb::arg("uniforms").none(),
        nb::arg("streams").none(), nb::arg("offsets").none(), nb::arg("out_tokens").none(), nb::arg("out_accepted").none(),
        nb::arg("out_accepted_nodes").none(), nb::arg("out_uniforms_consumed").none(), nb::arg("flashinfer"),
        nb::arg("out_retest_accepted").none(), nb::arg("stream") = 0);
}
