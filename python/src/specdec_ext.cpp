// SPDX-License-Identifier: Apache-2.0
// specdec's Python binding: each function here checks the arrays it is handed (dtype, shape, device,
// strides: a TypeError or ValueError naming the argument), views them without copying, releases the GIL
// and calls the C++ headers, which hold every algorithm. Outputs are arrays the caller allocated
// (specdec/__init__.py allocates them where the peers' functions return new tensors).
#include "batch_views.hpp"
#include "common.hpp"
#include "cuda_ops.hpp"

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

void bind_drafting(nb::module_& m);
void bind_blocks(nb::module_& m);

namespace {

// ---- specdec's row primitives (the backend concept's, on specdec::eigen or, for arrays in CUDA memory,
// on specdec::thrust_backend<cuda>) -------------------------------------------------------------------

/// Where a row primitive runs: on the host unless `a` is in CUDA memory, which a CUDA build of the
/// package takes (on that device, enqueued on `stream`) and a CPU build refuses by name.
std::optional<specdec_python::cuda::place> device_of(const array& a, const char* name, std::uintptr_t stream) {
  if (a.device_type() != nb::device::cuda::value) return std::nullopt;
#if SPECDEC_PYTHON_CUDA
  (void)name;
  return specdec_python::cuda::place{a.device_id(), stream};
#else
  (void)stream;
  throw nb::value_error((std::string(name) + ": expected an array in CPU memory; got one in CUDA memory (this build of specdec "
                         "is CPU-only: build the package where nvcc is found)").c_str());
#endif
}

#if SPECDEC_PYTHON_CUDA
/// A CUDA-resident argument of a call running on `at`: check_array on that device (`const T` an input,
/// `T` an output).
template <class T>
T* on_device(const array& a, const char* name, std::size_t ndim, const specdec_python::cuda::place& at) {
  return static_cast<T*>(check_array(a, name, {nb::dtype<std::remove_const_t<T>>()}, static_cast<int>(ndim),
                                     std::is_const_v<T> ? access::read : access::write, at.device));
}
#endif

/// An argument of a call that runs on the host (`at` empty) or on a CUDA device: checked as checked<T>
/// or on_device<T>, then against `shape` (-1: any extent). Optional arguments (`optional`) may be empty
/// arrays of any kind and device: null then.
template <class T>
T* argument(const array& a, const char* name, std::initializer_list<std::int64_t> shape,
            const std::optional<specdec_python::cuda::place>& at, bool optional = false) {
  if (optional && absent(a)) return nullptr;
  T* p = nullptr;
  if (at) {
#if SPECDEC_PYTHON_CUDA
    p = on_device<T>(a, name, shape.size(), *at);
#endif
  } else {
    p = checked<T>(a, name, shape.size());
  }
  expect_shape(a, name, shape);
  return p;
}

void row_argmax(const array& logits, const array& index, const array& value, std::uintptr_t stream) {
  if (const auto at = device_of(logits, "logits", stream)) {
#if SPECDEC_PYTHON_CUDA
    const float* x = on_device<const float>(logits, "logits", 2, *at);
    std::int32_t* i = on_device<std::int32_t>(index, "out", 1, *at);
    expect_shape(index, "out", {static_cast<std::int64_t>(logits.shape(0))});
    float* v = nullptr;
    if (!absent(value)) {
      v = on_device<float>(value, "values", 1, *at);
      expect_shape(value, "values", {static_cast<std::int64_t>(logits.shape(0))});
    }
    without_gil([&] { specdec_python::cuda::row_argmax(*at, x, logits.shape(0), logits.shape(1), i, v); });
#endif
    return;
  }
  const auto x = matrix_of<const float>(logits, "logits");
  const auto i = span_of<std::int32_t>(index, "out");
  expect_shape(index, "out", {x.rows()});
  specdec::vector_view<float> v;
  if (!absent(value)) {  // empty: not asked for; any other array is checked, whatever its shape
    const auto s = span_of<float>(value, "values");
    expect_shape(value, "values", {x.rows()});
    v = specdec::vector_view<float>(s.data(), x.rows());
  }
  without_gil([&] {
    if (v.rows() > 0) host_backend().row_argmax(x, specdec::vector_view<std::int32_t>(i.data(), x.rows()), v);
    else host_backend().row_argmax(x, specdec::vector_view<std::int32_t>(i.data(), x.rows()));
  });
}

void row_topk(const array& logits, index_t k, const array& values, const array& indices, std::uintptr_t stream) {
  if (const auto at = device_of(logits, "logits", stream)) {
#if SPECDEC_PYTHON_CUDA
    const float* x = on_device<const float>(logits, "logits", 2, *at);
    float* v = on_device<float>(values, "values", 2, *at);
    std::int32_t* i = on_device<std::int32_t>(indices, "indices", 2, *at);
    const auto rows = static_cast<std::int64_t>(logits.shape(0));
    expect_shape(values, "values", {rows, k});
    expect_shape(indices, "indices", {rows, k});
    without_gil([&] { specdec_python::cuda::row_topk(*at, x, rows, logits.shape(1), k, v, i); });
#endif
    return;
  }
  const auto x = matrix_of<const float>(logits, "logits");
  const auto v = matrix_of<float>(values, "values");
  const auto i = matrix_of<std::int32_t>(indices, "indices");
  expect_shape(values, "values", {x.rows(), k});
  expect_shape(indices, "indices", {x.rows(), k});
  without_gil([&] { host_backend().row_topk(x, k, v, i); });
}

void row_softmax(const array& logits, float temperature, const array& out, bool log, std::uintptr_t stream) {
  if (const auto at = device_of(logits, "logits", stream)) {
#if SPECDEC_PYTHON_CUDA
    const float* x = on_device<const float>(logits, "logits", 2, *at);
    float* o = on_device<float>(out, "out", 2, *at);
    expect_shape(out, "out", {static_cast<std::int64_t>(logits.shape(0)), static_cast<std::int64_t>(logits.shape(1))});
    without_gil([&] { specdec_python::cuda::row_softmax(*at, x, logits.shape(0), logits.shape(1), temperature, o, log); });
#endif
    return;
  }
  const auto x = matrix_of<const float>(logits, "logits");
  const auto o = matrix_of<float>(out, "out");
  expect_shape(out, "out", {x.rows(), x.cols()});
  without_gil([&] {
    if (log) host_backend().row_log_softmax(x, temperature, o);
    else host_backend().row_softmax(x, temperature, o);
  });
}

void row_logsumexp(const array& logits, float temperature, const array& out, std::uintptr_t stream) {
  if (const auto at = device_of(logits, "logits", stream)) {
#if SPECDEC_PYTHON_CUDA
    const float* x = on_device<const float>(logits, "logits", 2, *at);
    float* o = on_device<float>(out, "out", 1, *at);
    expect_shape(out, "out", {static_cast<std::int64_t>(logits.shape(0))});
    without_gil([&] { specdec_python::cuda::row_logsumexp(*at, x, logits.shape(0), logits.shape(1), temperature, o); });
#endif
    return;
  }
  const auto x = matrix_of<const float>(logits, "logits");
  const auto o = span_of<float>(out, "out");
  expect_shape(out, "out", {x.rows()});
  without_gil([&] { host_backend().row_logsumexp(x, temperature, specdec::vector_view<float>(o.data(), x.rows())); });
}

// ---- FlashInfer's sampling functions --------------------------------------------------------------

/// A parameter given once for every row or once per row (FlashInfer's top_k / top_p): its count is
/// checked (a ValueError naming it), and `at(r)` is the entry row r reads.
struct per_row {
  std::size_t count;
  per_row(std::size_t n, index_t rows, const char* name) : count(n) {
    if (n != 1 && static_cast<index_t>(n) != rows)
      throw nb::value_error((std::string(name) + ": expected one value or one per row (" + std::to_string(rows) + "); got " +
                             std::to_string(n)).c_str());
  }
  std::size_t at(index_t r) const { return count == 1 ? 0 : static_cast<std::size_t>(r); }
};

/// FlashInfer's row filters into `out` (which may be the input): top-k and / or top-p renormalisation of
/// probabilities (`renormalise`; both: the joint order) or top-k masking of logits; one k / p per row or
/// one for all, an empty array for a filter that is off; on the host or, for arrays in CUDA memory, on
/// their device.
void filter_rows(const array& rows, const array& out, const array& top_k, const array& top_p, bool renormalise,
                 std::uintptr_t stream) {
  const char* name = renormalise ? "probs" : "logits";
  const auto at = device_of(rows, name, stream);
  const float* x = argument<const float>(rows, name, {-1, -1}, at);
  const auto n = static_cast<std::int64_t>(rows.shape(0)), v = static_cast<std::int64_t>(rows.shape(1));
  float* y = argument<float>(out, "out", {n, v}, at);
  const std::int64_t* k = argument<const std::int64_t>(top_k, "top_k", {-1}, at, true);
  const float* p = argument<const float>(top_p, "top_p", {-1}, at, true);
  const auto k_count = static_cast<std::int64_t>(top_k.size()), p_count = static_cast<std::int64_t>(top_p.size());
  if (k != nullptr) per_row(static_cast<std::size_t>(k_count), n, "top_k");
  if (p != nullptr) per_row(static_cast<std::size_t>(p_count), n, "top_p");
  if (at) {
#if SPECDEC_PYTHON_CUDA
    without_gil([&] { specdec_python::cuda::filter_rows(*at, x, n, v, k, k_count, p, p_count, y, renormalise); });
#endif
    return;
  }
  without_gil([&] { filter_rows_on(host_backend(), x, n, v, k, k_count, p, p_count, y, renormalise); });
}

/// Bools as bytes (dtype bool or uint8), 1-dimensional and contiguous, on the call's device.
const std::uint8_t* bool_bytes(const array& a, const char* name, const std::optional<specdec_python::cuda::place>& at) {
  return static_cast<const std::uint8_t*>(
      check_array(a, name, {nb::dtype<bool>(), nb::dtype<std::uint8_t>()}, 1, access::read, at ? at->device : host_memory));
}

/// segment_packbits: the output offsets (`new_indptr`, indptr's length), then the bytes into `out`;
/// host arrays, or CUDA arrays on `stream` (the offsets then stay on the device: the caller reads their
/// last entry to size `out`, FlashInfer's one synchronisation).
void segment_packbits_offsets(const array& indptr, const array& new_indptr, std::uintptr_t stream) {
  if (const auto at = device_of(indptr, "indptr", stream)) {
#if SPECDEC_PYTHON_CUDA
    const std::int32_t* in = argument<const std::int32_t>(indptr, "indptr", {-1}, at);
    std::int32_t* o = argument<std::int32_t>(new_indptr, "new_indptr", {static_cast<std::int64_t>(indptr.shape(0))}, at);
    without_gil([&] { specdec_python::cuda::packbits_offsets(*at, in, static_cast<std::int64_t>(indptr.shape(0)), o); });
#endif
    return;
  }
  const auto in = span_of<const std::int32_t>(indptr, "indptr");
  const auto o = span_of<std::int32_t>(new_indptr, "new_indptr");
  expect_shape(new_indptr, "new_indptr", {static_cast<index_t>(in.size())});
  const auto got = specdec::segment_packbits_offsets(in);
  std::copy(got.begin(), got.end(), o.begin());
}

void segment_packbits(const array& x, const array& indptr, const array& new_indptr, bool little, const array& out,
                      std::uintptr_t stream) {
  const auto at = device_of(x, "x", stream);
  const std::uint8_t* bits = bool_bytes(x, "x", at);
  const std::int32_t* in = argument<const std::int32_t>(indptr, "indptr", {-1}, at);
  const auto count = static_cast<std::int64_t>(indptr.shape(0));
  const std::int32_t* offsets = argument<const std::int32_t>(new_indptr, "new_indptr", {count}, at);
  std::uint8_t* bytes = argument<std::uint8_t>(out, "out", {-1}, at);
  const auto x_count = static_cast<std::int64_t>(x.shape(0)), out_count = static_cast<std::int64_t>(out.shape(0));
  if (at) {
#if SPECDEC_PYTHON_CUDA
    without_gil([&] { specdec_python::cuda::packbits(*at, bits, x_count, in, offsets, count, little, bytes, out_count); });
#endif
    return;
  }
  without_gil([&] { packbits_on(host_backend(), bits, x_count, in, offsets, count, little, bytes, out_count); });
}

/// sampling_from_probs: the canonical inverse CDF of every row at its uniform.
/// sample_rows: one token per row of `probs` by the canonical inverse CDF, from `uniforms` (float32
/// `[rows]`), or, on the host with `uniforms` empty, from Philox streams (seed, row) at `offset`.
void sample_rows(const array& probs, const array& uniforms, const array& out, std::uintptr_t stream, std::uint64_t seed,
                 std::uint64_t offset) {
  if (const auto at = device_of(probs, "probs", stream)) {
#if SPECDEC_PYTHON_CUDA
    const float* p = on_device<const float>(probs, "probs", 2, *at);
    const float* u = on_device<const float>(uniforms, "uniforms", 1, *at);
    std::int32_t* t = on_device<std::int32_t>(out, "out", 1, *at);
    const auto rows = static_cast<std::int64_t>(probs.shape(0));
    expect_shape(uniforms, "uniforms", {rows});
    expect_shape(out, "out", {rows});
    without_gil([&] { specdec_python::cuda::row_sample(*at, p, rows, probs.shape(1), u, t); });
#endif
    return;
  }
  const auto p = matrix_of<const float>(probs, "probs");
  const auto t = span_of<std::int32_t>(out, "out");
  expect_shape(out, "out", {p.rows()});
  if (absent(uniforms) && p.rows() > 0) {
    // Row r's uniform is Philox stream (seed, r) at `offset`, drawn here rather than in an array the
    // caller allocates (a one-row call's fixed cost): the value philox_uniforms(seed, offset, rows, 1,
    // "float32") holds.
    without_gil([&] {
      thread_local std::vector<float> drawn;
      drawn.resize(static_cast<std::size_t>(p.rows()));
      for (index_t r = 0; r < p.rows(); ++r)
        drawn[static_cast<std::size_t>(r)] = specdec::philox_stream{seed, static_cast<std::uint64_t>(r)}.uniform(offset);
      host_backend().row_sample(p, specdec::vector_view<const float>(drawn.data(), p.rows()),
                                specdec::vector_view<std::int32_t>(t.data(), p.rows()));
    });
    return;
  }
  const auto u = span_of<const float>(uniforms, "uniforms");
  expect_shape(uniforms, "uniforms", {p.rows()});
  without_gil([&] {
    host_backend().row_sample(p, specdec::vector_view<const float>(u.data(), p.rows()), specdec::vector_view<std::int32_t>(t.data(), p.rows()));
  });
}

/// chain_speculative_sampling: FlashInfer's chain verifier as verify_speculative over chains, its
/// conventions set (strict product test, uniforms in (0, 1], re-tests counted, V - 1 for an
/// empty residual). Uniforms: `uniforms` `[bs x (2k + 1)]` in consumption order, or (empty) Philox
/// streams `(seed, r)` from `offset`.
void chain_speculative_sampling(const array& draft_probs, const array& draft_token_ids, const array& target_probs,
                                const array& uniforms, std::uint64_t seed, std::uint64_t offset, const array& output_token_ids,
                                const array& accepted_token_num, const array& emitted_draft_token_num) {
  checked<const float>(draft_probs, "draft_probs", 3);
  checked<const float>(target_probs, "target_probs", 3);
  const auto ids = matrix_of<const std::int32_t>(draft_token_ids, "draft_token_ids");
  const index_t bs = ids.rows(), k = ids.cols();
  const auto v = static_cast<index_t>(target_probs.shape(2));
  expect_shape(draft_probs, "draft_probs", {bs, k, v});
  expect_shape(target_probs, "target_probs", {bs, k + 1, v});
  const auto out = matrix_of<std::int32_t>(output_token_ids, "output_token_ids");
  expect_shape(output_token_ids, "output_token_ids", {bs, k + 1});
  const auto accepted = span_of<std::int32_t>(accepted_token_num, "accepted_token_num");
  const auto emitted = span_of<std::int32_t>(emitted_draft_token_num, "emitted_draft_token_num");
  expect_shape(accepted_token_num, "accepted_token_num", {bs});
  expect_shape(emitted_draft_token_num, "emitted_draft_token_num", {bs});
  specdec::matrix_view<const double> u;
  if (!absent(uniforms)) {  // empty: Philox; any other array is checked (a 0-d one was ignored)
    u = matrix_of<const double>(uniforms, "uniforms");
    expect_shape(uniforms, "uniforms", {bs, -1});
  }
  // Named here: the chains built from them would word a bad id as "node i has token t".
  for (index_t r = 0; r < bs; ++r)
    for (index_t i = 0; i < k; ++i)
      if (const std::int32_t t = ids.row(r)[i]; t < 0 || t >= v)
        throw nb::value_error(("draft_token_ids[" + std::to_string(r) + ", " + std::to_string(i) + "] = " + std::to_string(t) +
                               "; expected a token id in [0, V = " + std::to_string(v) + ")")
                                  .c_str());
  without_gil([&] {
    // The request-based verifier: on the host its row passes are the SIMD kernels (the batched form's
    // team job is written for GPU blocks); its decisions are the same, bit for bit (tests/test_batch_verify.cpp).
    std::vector<specdec::draft_tree> trees;
    std::vector<std::vector<index_t>> draft_rows(static_cast<std::size_t>(bs));
    std::vector<specdec::sampling::speculative_request> requests(static_cast<std::size_t>(bs));
    trees.reserve(static_cast<std::size_t>(bs));
    for (index_t r = 0; r < bs; ++r) {
      trees.push_back(specdec::sampling::make_chain(0, std::span<const std::int32_t>(ids.row(r), static_cast<std::size_t>(k))));
      auto& rows = draft_rows[static_cast<std::size_t>(r)];
      rows.push_back(-1);
      for (index_t i = 0; i < k; ++i) rows.push_back(r * k + i);
      auto& q = requests[static_cast<std::size_t>(r)];
      q.tree = trees.back();
      q.target_row = r * (k + 1);
      q.draft_rows = rows;
      q.uniforms = u.rows() > 0 ? specdec::sampling::uniform_stream::values(
                                      std::span<const double>(u.row(r), static_cast<std::size_t>(u.cols())))
                                : specdec::sampling::uniform_stream::philox({seed, static_cast<std::uint64_t>(r)}, offset);
    }
    specdec::sampling::speculative_rows<> rows;
    rows.target = specdec::matrix_view<const float>(static_cast<const float*>(target_probs.data()), bs * (k + 1), v);
    rows.draft = specdec::matrix_view<const float>(static_cast<const float*>(draft_probs.data()), bs * k, v);
    const specdec::sampling::speculative_options options = speculative_options_for(true);
    specdec::sampling::verify_outputs<> o;
    o.tokens = out;
    o.accepted = specdec::vector_view<std::int32_t>(emitted.data(), bs);
    o.retest_accepted = specdec::vector_view<std::int32_t>(accepted.data(), bs);
    specdec::sampling::verify_speculative(host_backend(), rows, requests, options, o);
  });
}

// ---- vLLM's rejection sampler -----------------------------------------------------------------------

/// apply_sampling_constraints: vLLM's temperature, top-k and top-p over the flattened draft rows, in place.
void apply_sampling_constraints(const array& logits, const array& cu_num_draft_tokens, const array& temperature, const array& top_k,
                                const array& top_p) {
  const auto x = matrix_of<float>(logits, "logits");
  const auto cu = span_of<const std::int64_t>(cu_num_draft_tokens, "cu_num_draft_tokens");
  const auto t = span_of<const float>(temperature, "temperature");
  const auto k = span_of<const std::int64_t>(top_k, "top_k");
  const auto p = span_of<const float>(top_p, "top_p");
  without_gil([&] { specdec::vllm::apply_sampling_constraints(x, cu, t, k, p); });
}

// ---- SGLang's speculative kernels ------------------------------------------------------------------

// ---- specdec's padded batch verification (sampling/batch.hpp), host or CUDA --------------------------

/// rejection_sample: vLLM v1's layout (flattened drafts, cumulative counts, no bonus row), on the host
/// (specdec::eigen) or, for arrays in CUDA memory, on their device; optional arrays empty when absent.
void rejection_sample(const array& draft_token_ids, const array& cu_num_draft_tokens, index_t max_spec_len, const array& draft_probs,
                      const array& target_probs, const array& bonus_token_ids, const array& is_greedy, const array& uniform_probs,
                      const array& exponentials, const array& output, std::uintptr_t stream) {
  const auto at = device_of(target_probs, "target_probs", stream);
  specdec_python::cuda::rejection_arrays a;
  a.target_probs = argument<const float>(target_probs, "target_probs", {-1, -1}, at);
  a.tokens = static_cast<std::int64_t>(target_probs.shape(0));
  a.vocab = static_cast<std::int64_t>(target_probs.shape(1));
  a.cu_num_draft_tokens = argument<const std::int64_t>(cu_num_draft_tokens, "cu_num_draft_tokens", {-1}, at);
  a.batch = static_cast<std::int64_t>(cu_num_draft_tokens.shape(0));
  a.draft_token_ids = argument<const std::int32_t>(draft_token_ids, "draft_token_ids", {a.tokens}, at);
  a.draft_probs = argument<const float>(draft_probs, "draft_probs", {a.tokens, a.vocab}, at, true);
  a.bonus_token_ids = argument<const std::int32_t>(bonus_token_ids, "bonus_token_ids", {a.batch}, at);
  a.is_greedy = argument<const std::uint8_t>(is_greedy, "is_greedy", {a.batch}, at, true);
  a.uniforms = argument<const double>(uniform_probs, "uniform_probs", {a.tokens}, at, true);
  a.exponentials = argument<const float>(exponentials, "exponentials", {a.batch, a.vocab}, at, true);
  a.width = max_spec_len + 1;
  a.output = argument<std::int32_t>(output, "output", {a.batch, a.width}, at);
  if (at) {
#if SPECDEC_PYTHON_CUDA
    renaming({{"uniforms", "uniform_probs"}}, [&] { without_gil([&] { specdec_python::cuda::vllm_rejection_sample(*at, a); }); });
#endif
    return;
  }
  renaming({{"uniforms", "uniform_probs"}}, [&] { without_gil([&] { vllm_rejection(host_backend(), a); }); });
}

/// verify_batch: specdec::sampling::verify_greedy (`greedy`: `target` holds logits) or
/// verify_speculative (`target` holds probabilities) of a padded batch, every array in the memory of
/// `target` (host, or a CUDA device in a CUDA build: one kernel, on `stream`). Optional arrays are empty
/// when absent. Philox streams arrive as int64 pairs (seed, subsequence) and offsets as int64, read as
/// the uint64 they hold.
void verify_batch(const array& target, bool greedy, const array& tokens, const array& parents, const array& node_counts,
                  const array& target_rows, const array& draft_probs, const array& draft_rows, const array& max_accepted,
                  const array& bonus_tokens, const array& uniforms, const array& streams, const array& offsets,
                  const array& out_tokens, const array& out_accepted, const array& out_nodes, const array& out_consumed,
                  bool flashinfer, const array& out_retest, std::uintptr_t stream) {
  // The caller's name for it: chain_speculative_sampling's target_probs (`flashinfer`), verify_tree_batch's target.
  const char* target_name = flashinfer ? "target_probs" : "target";
  const auto at = device_of(target, target_name, stream);
  const float* t = argument<const float>(target, target_name, {-1, -1}, at);
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
  const float* draft = nullptr;
  std::int64_t draft_count = 0;
  if (!greedy) {
    draft = argument<const float>(draft_probs, "draft_probs", {-1, vocab}, at, true);
    draft_count = draft == nullptr ? 0 : static_cast<std::int64_t>(draft_probs.shape(0));
    in.draft_rows = argument<const std::int64_t>(draft_rows, "draft_rows", {b, n}, at, true);
    if ((draft == nullptr) != (in.draft_rows == nullptr))
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
      if (greedy) specdec_python::cuda::verify_batch_greedy(*at, t, rows, vocab, in, out);
      else specdec_python::cuda::verify_batch_speculative(*at, t, rows, vocab, draft, draft_count, in, out, flashinfer);
    });
#endif
    return;
  }
  without_gil([&] {
    using specdec::host_space;
    const specdec::matrix_view<const float> x(t, static_cast<index_t>(rows), static_cast<index_t>(vocab));
    if (greedy) {
      specdec::sampling::verify_greedy(host_backend(), x, tree_batch_of<host_space>(in), verify_outputs_of<host_space>(out, b));
    } else {
      specdec::sampling::speculative_rows<> r;
      r.target = x;
      if (draft != nullptr) r.draft = specdec::matrix_view<const float>(draft, static_cast<index_t>(draft_count), static_cast<index_t>(vocab));
      specdec::sampling::verify_speculative(host_backend(), r, tree_batch_of<host_space>(in), speculative_options_for(flashinfer),
                                            verify_outputs_of<host_space>(out, b));
    }
  });
}

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
void run_sglang(const specdec_python::cuda::sglang_arrays& a, const std::optional<specdec_python::cuda::place>& at, bool greedy) {
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
  a.target_probs = argument<const float>(target_probs, "target_probs", {a.bs, a.n, -1}, at);
  a.vocab = static_cast<std::int64_t>(target_probs.shape(2));
  a.threshold_single = threshold_single;
  a.threshold_acc = threshold_acc;
  run_sglang(a, at, false);
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

/// `[rows x count]` uniforms: row r is philox_stream{seed, r} from position `offset` (float64:
/// uniform_double, float32: uniform).
void philox_uniforms(std::uint64_t seed, std::uint64_t offset, const array& out) {
  check_array(out, "out", {nb::dtype<double>(), nb::dtype<float>()}, 2, access::write);
  const bool wide = out.dtype() == nb::dtype<double>();
  const auto rows = static_cast<index_t>(out.shape(0)), count = static_cast<index_t>(out.shape(1));
  without_gil([&] {
    for (index_t r = 0; r < rows; ++r) {
      const specdec::philox_stream s{seed, static_cast<std::uint64_t>(r)};
      for (index_t i = 0; i < count; ++i) {
        const auto at = offset + static_cast<std::uint64_t>(i);
        if (wide) static_cast<double*>(out.data())[r * count + i] = s.uniform_double(at);
        else static_cast<float*>(out.data())[r * count + i] = s.uniform(at);
      }
    }
  });
}

/// The median time in microseconds of `op` ("argmax", "topk8", "softmax" or "sample") called from C++
/// on the host backend over `pool` (float32 `[rows x V]` arrays, taken in turn), `reps` calls, each
/// timed alone: the C++ call a Python call is compared with (python/bench/bench_torch.py).
double time_cpp(const std::string& op, const std::vector<array>& pool, index_t reps) {
  if (pool.empty() || reps < 1) throw nb::value_error("pool: expected at least one array, and reps >= 1");
  std::vector<specdec::matrix_view<const float>> rows;
  for (const array& a : pool) rows.push_back(matrix_of<const float>(a, "pool"));
  const index_t r = rows[0].rows(), v = rows[0].cols();
  for (const auto& x : rows)
    if (x.rows() != r || x.cols() != v) throw nb::value_error("pool: expected arrays of one shape");
  std::vector<float> out(static_cast<std::size_t>(r * v)), values(static_cast<std::size_t>(r * 8)),
      uniforms(static_cast<std::size_t>(r), 0.5f);
  std::vector<std::int32_t> index(static_cast<std::size_t>(r * 8));
  std::vector<double> times(static_cast<std::size_t>(reps));
  without_gil([&] {
    auto& b = host_backend();
    for (index_t i = 0; i < reps; ++i) {
      const auto& x = rows[static_cast<std::size_t>(i) % rows.size()];
      const auto start = std::chrono::steady_clock::now();
      if (op == "argmax") b.row_argmax(x, specdec::vector_view<std::int32_t>(index.data(), r));
      else if (op == "topk8") b.row_topk(x, 8, specdec::matrix_view<float>(values.data(), r, 8), specdec::matrix_view<std::int32_t>(index.data(), r, 8));
      else if (op == "softmax") b.row_softmax(x, 1.0f, specdec::matrix_view<float>(out.data(), r, v));
      else if (op == "sample")
        b.row_sample(x, specdec::vector_view<const float>(uniforms.data(), r), specdec::vector_view<std::int32_t>(index.data(), r));
      else throw std::invalid_argument("op: expected argmax, topk8, softmax or sample; got " + op);
      times[static_cast<std::size_t>(i)] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    }
  });
  std::nth_element(times.begin(), times.begin() + reps / 2, times.end());
  return times[static_cast<std::size_t>(reps / 2)];
}

/// The address of an array's first element as the binding sees it (tests check it is the caller's).
std::uintptr_t address(const array& a) { return reinterpret_cast<std::uintptr_t>(a.data()); }

}  // namespace

// Array arguments are annotated .none(): nanobind refuses None before any caster runs (an unnamed
// "incompatible function arguments"); so annotated, None reaches check_array, which names the argument.
NB_MODULE(_specdec, m) {
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
  m.doc() = "specdec's C++ primitives (the package's public functions are in specdec/__init__.py)";
  m.attr("__version__") = nb::str((std::to_string(SPECDEC_VERSION_MAJOR) + "." + std::to_string(SPECDEC_VERSION_MINOR) + "." +
                                   std::to_string(SPECDEC_VERSION_PATCH))
                                      .c_str());
  m.def("philox_uniforms", &philox_uniforms, nb::arg("seed"), nb::arg("offset"), nb::arg("out").none());
  m.def("_address", &address, nb::arg("array").none());
  m.def("_time_cpp", &time_cpp, nb::arg("op"), nb::arg("pool"), nb::arg("reps"));
  m.attr("cuda") = nb::bool_(SPECDEC_PYTHON_CUDA != 0);
  m.def("row_argmax", &row_argmax, nb::arg("logits").none(), nb::arg("index").none(), nb::arg("value").none(), nb::arg("stream") = 0);
  m.def("row_topk", &row_topk, nb::arg("logits").none(), nb::arg("k"), nb::arg("values").none(), nb::arg("indices").none(),
        nb::arg("stream") = 0);
  m.def("row_softmax", &row_softmax, nb::arg("logits").none(), nb::arg("temperature"), nb::arg("out").none(), nb::arg("log"),
        nb::arg("stream") = 0);
  m.def("row_logsumexp", &row_logsumexp, nb::arg("logits").none(), nb::arg("temperature"), nb::arg("out").none(),
        nb::arg("stream") = 0);
  m.def("filter_rows", &filter_rows, nb::arg("rows").none(), nb::arg("out").none(), nb::arg("top_k").none(), nb::arg("top_p").none(),
        nb::arg("renormalise"), nb::arg("stream") = 0);
  m.def("segment_packbits_offsets", &segment_packbits_offsets, nb::arg("indptr").none(), nb::arg("new_indptr").none(),
        nb::arg("stream"));
  m.def("segment_packbits", &segment_packbits, nb::arg("x").none(), nb::arg("indptr").none(), nb::arg("new_indptr").none(),
        nb::arg("little"), nb::arg("out").none(), nb::arg("stream"));
  m.def("sample_rows", &sample_rows, nb::arg("probs").none(), nb::arg("uniforms").none(), nb::arg("out").none(), nb::arg("stream") = 0,
        nb::arg("seed") = 0, nb::arg("offset") = 0);
  m.def("chain_speculative_sampling", &chain_speculative_sampling, nb::arg("draft_probs").none(), nb::arg("draft_token_ids").none(),
        nb::arg("target_probs").none(), nb::arg("uniforms").none(), nb::arg("seed"), nb::arg("offset"),
        nb::arg("output_token_ids").none(), nb::arg("accepted_token_num").none(), nb::arg("emitted_draft_token_num").none());
  m.def("tree_speculative_sampling_target_only", &tree_speculative_sampling_target_only, nb::arg("predicts").none(),
        nb::arg("accept_index").none(), nb::arg("accept_token_num").none(), nb::arg("candidates").none(),
        nb::arg("retrive_index").none(), nb::arg("retrive_next_token").none(), nb::arg("retrive_next_sibling").none(),
        nb::arg("uniform_samples").none(), nb::arg("uniform_samples_for_final_sampling").none(), nb::arg("target_probs").none(),
        nb::arg("threshold_single"), nb::arg("threshold_acc"), nb::arg("stream") = 0);
  m.def("build_tree_kernel_efficient", &build_tree_kernel_efficient, nb::arg("parent_list").none(), nb::arg("selected_index").none(),
        nb::arg("verified_seq_len").none(), nb::arg("tree_mask").none(), nb::arg("positions").none(), nb::arg("retrive_index").none(),
        nb::arg("retrive_next_token").none(), nb::arg("retrive_next_sibling").none(), nb::arg("topk"), nb::arg("depth"),
        nb::arg("draft_token_num"), nb::arg("tree_mask_mode"), nb::arg("stream"));
  m.def("rejection_sample", &rejection_sample, nb::arg("draft_token_ids").none(), nb::arg("cu_num_draft_tokens").none(),
        nb::arg("max_spec_len"), nb::arg("draft_probs").none(), nb::arg("target_probs").none(), nb::arg("bonus_token_ids").none(),
        nb::arg("is_greedy").none(), nb::arg("uniform_probs").none(), nb::arg("exponentials").none(), nb::arg("output").none(),
        nb::arg("stream") = 0);
  m.def("verify_batch", &verify_batch, nb::arg("target").none(), nb::arg("greedy"), nb::arg("tokens").none(),
        nb::arg("parents").none(), nb::arg("node_counts").none(), nb::arg("target_rows").none(), nb::arg("draft_probs").none(),
        nb::arg("draft_rows").none(), nb::arg("max_accepted").none(), nb::arg("bonus_tokens").none(), nb::arg("uniforms").none(),
        nb::arg("streams").none(), nb::arg("offsets").none(), nb::arg("out_tokens").none(), nb::arg("out_accepted").none(),
        nb::arg("out_accepted_nodes").none(), nb::arg("out_uniforms_consumed").none(), nb::arg("flashinfer"),
        nb::arg("out_retest_accepted").none(), nb::arg("stream") = 0);
  bind_drafting(m);
  bind_blocks(m);
  m.def("apply_sampling_constraints", &apply_sampling_constraints, nb::arg("logits").none(), nb::arg("cu_num_draft_tokens").none(),
        nb::arg("temperature").none(), nb::arg("top_k").none(), nb::arg("top_p").none());
  m.def("verify_tree_greedy", &verify_tree_greedy, nb::arg("predicts").none(), nb::arg("accept_index").none(),
        nb::arg("accept_token_num").none(), nb::arg("candidates").none(), nb::arg("retrive_index").none(),
        nb::arg("retrive_next_token").none(), nb::arg("retrive_next_sibling").none(), nb::arg("target_predict").none(),
        nb::arg("stream") = 0);
}
