// SPDX-License-Identifier: Apache-2.0
// The peers' kernels under their names: FlashInfer's filters, sampling, chain verification and
// segment_packbits, vLLM's rejection sampler and constraints (the Python side: specdec/flashinfer.py,
// vllm.py; SGLang's are in sglang.cpp). Host, or the CUDA device of the arrays.
#include "batch_views.hpp"
#include "common.hpp"
#include "cuda_ops.hpp"
#include "placement.hpp"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
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
#include <utility>
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
  const auto parameters = [&](std::int64_t n) {
    const std::int64_t* k = argument<const std::int64_t>(top_k, "top_k", {-1}, at, true);
    const float* p = argument<const float>(top_p, "top_p", {-1}, at, true);
    if (k != nullptr) per_row(top_k.size(), n, "top_k");
    if (p != nullptr) per_row(top_p.size(), n, "top_p");
    return std::pair{k, p};
  };
  const auto k_count = static_cast<std::int64_t>(top_k.size()), p_count = static_cast<std::int64_t>(top_p.size());
  if (at) {
#if SPECDEC_PYTHON_CUDA
    // float32, float16 or bfloat16 rows; the output in the rows' dtype (FlashInfer's convention).
    const auto [x, e] = device_rows(rows, name, 2, *at);
    const auto n = static_cast<std::int64_t>(rows.shape(0)), v = static_cast<std::int64_t>(rows.shape(1));
    void* y = check_array(out, "out", {rows.dtype()}, 2, access::write, at->device);
    expect_shape(out, "out", {n, v});
    const auto [k, p] = parameters(n);
    without_gil([&] { specdec_python::cuda::filter_rows(*at, x, e, n, v, k, k_count, p, p_count, y, renormalise); });
#endif
    return;
  }
  // On the host the rows may be float32, float16 or bfloat16, read as they are; the output is the rows'
  // dtype (FlashInfer's convention), so in place works for each.
  with_rows(rows, name, [&](auto x) {
    using E = typename decltype(x)::value_type;
    const auto n = static_cast<std::int64_t>(x.rows()), v = static_cast<std::int64_t>(x.cols());
    void* o = check_array(out, "out", {rows.dtype()}, 2, access::write);
    expect_shape(out, "out", {n, v});
    const auto [k, p] = parameters(n);
    without_gil([&] { filter_rows_on(host_backend(), x.data(), n, v, k, k_count, p, p_count, static_cast<E*>(o), renormalise); });
  });
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

/// row_uniforms: FlashInfer's per-request seed and offset tensors: `out[r]` (float32 `[rows]`) is
/// Philox stream (seeds[r], r) at offsets[r] (int64 `[rows]` each, read as the uint64 they hold), the
/// uniform sample_rows draws for row r given one seed and offset.
void row_uniforms(const array& seeds, const array& offsets, const array& out) {
  const auto u = span_of<float>(out, "out");
  const auto s = span_of<const std::int64_t>(seeds, "seed");
  const auto o = span_of<const std::int64_t>(offsets, "offset");
  expect_shape(seeds, "seed", {static_cast<std::int64_t>(u.size())});
  expect_shape(offsets, "offset", {static_cast<std::int64_t>(u.size())});
  without_gil([&] {
    for (std::size_t r = 0; r < u.size(); ++r)
      u[r] = specdec::philox_stream{static_cast<std::uint64_t>(s[r]), static_cast<std::uint64_t>(r)}.uniform(
          static_cast<std::uint64_t>(o[r]));
  });
}

/// sampling_from_probs: the canonical inverse CDF of every row at its uniform.
/// sample_rows: one token per row of `probs` by the canonical inverse CDF, from `uniforms` (float32
/// `[rows]`), or, on the host with `uniforms` empty, from Philox streams (seed, row) at `offset`.
void sample_rows(const array& probs, const array& uniforms, const array& out, std::uintptr_t stream, std::uint64_t seed,
                 std::uint64_t offset) {
  if (const auto at = device_of(probs, "probs", stream)) {
#if SPECDEC_PYTHON_CUDA
    const auto [p, e] = device_rows(probs, "probs", 2, *at);
    const float* u = on_device<const float>(uniforms, "uniforms", 1, *at);
    std::int32_t* t = on_device<std::int32_t>(out, "out", 1, *at);
    const auto rows = static_cast<std::int64_t>(probs.shape(0));
    expect_shape(uniforms, "uniforms", {rows});
    expect_shape(out, "out", {rows});
    without_gil([&] { specdec_python::cuda::row_sample(*at, p, e, rows, probs.shape(1), u, t); });
#endif
    return;
  }
  with_rows(probs, "probs", [&](auto p) {  // float32, float16 or bfloat16 rows, read as they are
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
      host_backend().row_sample(p, specdec::vector_view<const float>(u.data(), p.rows()),
                                specdec::vector_view<std::int32_t>(t.data(), p.rows()));
    });
  });
}

/// top_k_top_p_sample: FlashInfer's top_k_top_p_sampling_from_probs in its "top_k_first" (or, `joint`,
/// "joint") order on the host (sampling::top_k_top_p_sample: the top k alone read past the row's one check pass). Row r's
/// uniform is `uniforms[r]`, or (`uniforms` empty) Philox stream (seed, r) at `offset`, as sample_rows.
/// `from_logits`: the rows are logits (top_k_top_p_sampling_from_logits: each row softened in cache).
void top_k_top_p_sample(const array& probs, const array& top_k, const array& top_p, const array& uniforms, const array& out,
                        std::uint64_t seed, std::uint64_t offset, bool joint, bool from_logits) {
  const char* name = from_logits ? "logits" : "probs";
  with_rows(probs, name, [&](auto p) {  // float32, float16 or bfloat16 rows, read as they are
    const auto t = span_of<std::int32_t>(out, "out");
    expect_shape(out, "out", {p.rows()});
    const auto k = span_of<const std::int64_t>(top_k, "top_k");
    const auto pp = span_of<const float>(top_p, "top_p");
    thread_local std::vector<float> drawn;
    std::span<const float> u;
    if (absent(uniforms)) {
      drawn.resize(static_cast<std::size_t>(p.rows()));
      for (index_t r = 0; r < p.rows(); ++r)
        drawn[static_cast<std::size_t>(r)] = specdec::philox_stream{seed, static_cast<std::uint64_t>(r)}.uniform(offset);
      u = drawn;
    } else {
      u = span_of<const float>(uniforms, "uniforms");
      expect_shape(uniforms, "uniforms", {p.rows()});
    }
    const specdec::vector_view<const std::int64_t> kv(k.data(), static_cast<index_t>(k.size()));
    const specdec::vector_view<const float> pv(pp.data(), static_cast<index_t>(pp.size()));
    const specdec::vector_view<const float> uv(u.data(), static_cast<index_t>(u.size()));
    const specdec::vector_view<std::int32_t> tv(t.data(), static_cast<index_t>(t.size()));
    const auto order = joint ? specdec::sampling::filter_order::joint : specdec::sampling::filter_order::top_k_first;
    without_gil([&] {
      if (from_logits) specdec::sampling::top_k_top_p_sample_from_logits(p, kv, pv, uv, tv, order);
      else specdec::sampling::top_k_top_p_sample(p, kv, pv, uv, tv, order);
    });
  });
}

/// chain_speculative_sampling: FlashInfer's chain verifier as verify_speculative over chains, its
/// conventions set (strict product test, uniforms in (0, 1], re-tests counted, V - 1 for an
/// empty residual). Uniforms: `uniforms` `[bs x (2k + 1)]` in consumption order, or (empty) Philox
/// streams `(seed, r)` from `offset`. The rows are float32, or float16 / bfloat16 read as they are (both
/// of one dtype: the float rows' results).
void chain_speculative_sampling(const array& draft_probs, const array& draft_token_ids, const array& target_probs,
                                const array& uniforms, std::uint64_t seed, std::uint64_t offset, const array& output_token_ids,
                                const array& accepted_token_num, const array& emitted_draft_token_num) {
  with_elements(target_probs, "target_probs", 3, access::read, [](auto*) {});
  expect_same_dtype(draft_probs, "draft_probs", target_probs, "target_probs");
  with_elements(draft_probs, "draft_probs", 3, access::read, [](auto*) {});
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
  with_elements(target_probs, "target_probs", 3, access::read, [&](auto* target_data) {
  using E = std::remove_pointer_t<decltype(target_data)>;
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
    specdec::sampling::speculative_rows<specdec::host_space, E> rows;
    rows.target = specdec::matrix_view<const E>(target_data, bs * (k + 1), v);
    rows.draft = specdec::matrix_view<const E>(static_cast<const E*>(draft_probs.data()), bs * k, v);
    const specdec::sampling::speculative_options options = speculative_options_for(true);
    specdec::sampling::verify_outputs<> o;
    o.tokens = out;
    o.accepted = specdec::vector_view<std::int32_t>(emitted.data(), bs);
    o.retest_accepted = specdec::vector_view<std::int32_t>(accepted.data(), bs);
    specdec::sampling::verify_speculative(host_backend(), rows, requests, options, o);
  });
  });
}

// ---- vLLM's rejection sampler -----------------------------------------------------------------------

/// apply_sampling_constraints: vLLM's temperature, top-k and top-p over the flattened draft rows, in place,
/// in the logits' dtype (float32, float16 or bfloat16, as vLLM's in-place filter on its tensor).
void apply_sampling_constraints(const array& logits, const array& cu_num_draft_tokens, const array& temperature, const array& top_k,
                                const array& top_p) {
  with_elements(logits, "logits", 2, access::write, [&](auto* data) {
    using E = std::remove_pointer_t<decltype(data)>;
    const specdec::matrix_view<E> x(data, static_cast<index_t>(logits.shape(0)), static_cast<index_t>(logits.shape(1)));
    const auto cu = span_of<const std::int64_t>(cu_num_draft_tokens, "cu_num_draft_tokens");
    const auto t = span_of<const float>(temperature, "temperature");
    const auto k = span_of<const std::int64_t>(top_k, "top_k");
    const auto p = span_of<const float>(top_p, "top_p");
    without_gil([&] { specdec::vllm::apply_sampling_constraints(x, cu, t, k, p); });
  });
}

/// rejection_sample: vLLM v1's layout (flattened drafts, cumulative counts, no bonus row), on the host
/// (specdec::eigen) or, for arrays in CUDA memory, on their device; optional arrays empty when absent.
/// On the host the rows may be float16 / bfloat16, read as they are: draft_probs of target_probs' dtype,
/// or any of the three under float32 target_probs (vLLM's softmax gives float32 targets; a drafter's
/// rows may stay 16-bit).
void rejection_sample(const array& draft_token_ids, const array& cu_num_draft_tokens, index_t max_spec_len, const array& draft_probs,
                      const array& target_probs, const array& bonus_token_ids, const array& is_greedy, const array& uniform_probs,
                      const array& exponentials, const array& output, std::uintptr_t stream,
                      std::optional<std::pair<std::uint64_t, std::uint64_t>> noise_seed_offset) {
  const auto at = device_of(target_probs, "target_probs", stream);
  if (noise_seed_offset && at) throw nb::value_error("noise_seed_offset: Philox noise is drawn on the host only; pass exponentials");
  // float32, float16 or bfloat16 rows: of one dtype, or 16-bit draft rows under float32 targets.
  if (!absent(draft_probs) && target_probs.dtype() != nb::dtype<float>())
    expect_same_dtype(draft_probs, "draft_probs", target_probs, "target_probs");
  if (!at) {
    with_elements(target_probs, "target_probs", 2, access::read, [](auto*) {});
    if (!absent(draft_probs)) with_elements(draft_probs, "draft_probs", 2, access::read, [](auto*) {});
  }
  // The shapes and the other arguments are checked below with the rows' pointers taken as float (their
  // dtype checked above on the host, by device_rows on a device); the typed call reads them in their own
  // element types.
  specdec_python::cuda::rejection_arrays a;
  const auto as_float = [&](const array& x, const char* name, std::initializer_list<std::int64_t> shape, bool optional) {
    if (optional && absent(x)) return static_cast<const float*>(nullptr);
    if (at) {
#if SPECDEC_PYTHON_CUDA
      const auto [p, e] = device_rows(x, name, static_cast<int>(shape.size()), *at);
      expect_shape(x, name, shape);
      (&x == &target_probs ? a.target_element : a.draft_element) = e;
      return static_cast<const float*>(p);
#endif
    }
    check_array(x, name, {}, static_cast<int>(shape.size()), access::read);
    expect_shape(x, name, shape);
    return static_cast<const float*>(x.data());
  };
  a.target_probs = as_float(target_probs, "target_probs", {-1, -1}, false);
  a.tokens = static_cast<std::int64_t>(target_probs.shape(0));
  a.vocab = static_cast<std::int64_t>(target_probs.shape(1));
  a.cu_num_draft_tokens = argument<const std::int64_t>(cu_num_draft_tokens, "cu_num_draft_tokens", {-1}, at);
  a.batch = static_cast<std::int64_t>(cu_num_draft_tokens.shape(0));
  a.draft_token_ids = argument<const std::int32_t>(draft_token_ids, "draft_token_ids", {a.tokens}, at);
  a.draft_probs = as_float(draft_probs, "draft_probs", {a.tokens, a.vocab}, true);
  a.bonus_token_ids = argument<const std::int32_t>(bonus_token_ids, "bonus_token_ids", {a.batch}, at);
  a.is_greedy = argument<const std::uint8_t>(is_greedy, "is_greedy", {a.batch}, at, true);
  a.uniforms = argument<const double>(uniform_probs, "uniform_probs", {a.tokens}, at, true);
  a.exponentials = argument<const float>(exponentials, "exponentials", {a.batch, a.vocab}, at, true);
  a.width = max_spec_len + 1;
  a.output = argument<std::int32_t>(output, "output", {a.batch, a.width}, at);
  if (noise_seed_offset) {
    a.philox_noise = true;
    a.noise_seed = noise_seed_offset->first;
    a.noise_offset = noise_seed_offset->second;
  }
  if (at) {
#if SPECDEC_PYTHON_CUDA
    renaming({{"uniforms", "uniform_probs"}}, [&] { without_gil([&] { specdec_python::cuda::vllm_rejection_sample(*at, a); }); });
#endif
    return;
  }
  renaming({{"uniforms", "uniform_probs"}}, [&] {
    with_elements(target_probs, "target_probs", 2, access::read, [&](auto* target) {
      using T = std::remove_pointer_t<decltype(target)>;
      if (a.draft_probs == nullptr) {
        without_gil([&] { vllm_rejection(host_backend(), a, static_cast<const T*>(target), static_cast<const T*>(nullptr)); });
      } else if constexpr (std::is_same_v<T, float>) {
        with_elements(draft_probs, "draft_probs", 2, access::read, [&](auto* draft) {
          using D = std::remove_pointer_t<decltype(draft)>;
          without_gil([&] { vllm_rejection(host_backend(), a, static_cast<const float*>(target), static_cast<const D*>(draft)); });
        });
      } else {
        // draft_probs has target_probs' dtype (checked above).
        const T* draft = static_cast<const T*>(static_cast<const void*>(a.draft_probs));
        without_gil([&] { vllm_rejection(host_backend(), a, static_cast<const T*>(target), draft); });
      }
    });
  });
}

}  // namespace

void bind_peers(nb::module_& m) {
  m.def("filter_rows", &filter_rows, nb::arg("rows").none(), nb::arg("out").none(), nb::arg("top_k").none(), nb::arg("top_p").none(),
        nb::arg("renormalise"), nb::arg("stream") = 0);
  m.def("segment_packbits_offsets", &segment_packbits_offsets, nb::arg("indptr").none(), nb::arg("new_indptr").none(),
        nb::arg("stream"));
  m.def("segment_packbits", &segment_packbits, nb::arg("x").none(), nb::arg("indptr").none(), nb::arg("new_indptr").none(),
        nb::arg("little"), nb::arg("out").none(), nb::arg("stream"));
  m.def("row_uniforms", &row_uniforms, nb::arg("seeds").none(), nb::arg("offsets").none(), nb::arg("out").none());
  m.def("sample_rows", &sample_rows, nb::arg("probs").none(), nb::arg("uniforms").none(), nb::arg("out").none(), nb::arg("stream") = 0,
        nb::arg("seed") = 0, nb::arg("offset") = 0);
  m.def("chain_speculative_sampling", &chain_speculative_sampling, nb::arg("draft_probs").none(), nb::arg("draft_token_ids").none(),
        nb::arg("target_probs").none(), nb::arg("uniforms").none(), nb::arg("seed"), nb::arg("offset"),
        nb::arg("output_token_ids").none(), nb::arg("accepted_token_num").none(), nb::arg("emitted_draft_token_num").none());
  m.def("top_k_top_p_sample", &top_k_top_p_sample, nb::arg("probs").none(), nb::arg("top_k").none(), nb::arg("top_p").none(),
        nb::arg("uniforms").none(), nb::arg("out").none(), nb::arg("seed") = 0, nb::arg("offset") = 0, nb::arg("joint") = false,
        nb::arg("from_logits") = false);
  m.def("rejection_sample", &rejection_sample, nb::arg("draft_token_ids").none(), nb::arg("cu_num_draft_tokens").none(),
        nb::arg("max_spec_len"), nb::arg("draft_probs").none(), nb::arg("target_probs").none(), nb::arg("bonus_token_ids").none(),
        nb::arg("is_greedy").none(), nb::arg("uniform_probs").none(), nb::arg("exponentials").none(), nb::arg("output").none(),
        nb::arg("stream") = 0, nb::arg("noise_seed_offset").none() = nb::none());
  m.def("apply_sampling_constraints", &apply_sampling_constraints, nb::arg("logits").none(), nb::arg("cu_num_draft_tokens").none(),
        nb::arg("temperature").none(), nb::arg("top_k").none(), nb::arg("top_p").none());
}
