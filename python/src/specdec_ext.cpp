// SPDX-License-Identifier: Apache-2.0
// specdec's Python binding: each function here checks the arrays it is handed (dtype, shape, device,
// strides: a TypeError or ValueError naming the argument), views them without copying, releases the GIL
// and calls the C++ headers, which hold every algorithm. Outputs are arrays the caller allocated
// (specdec/__init__.py allocates them where the peers' functions return new tensors).
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
#include <specdec/sampling/randomness.hpp>
#include <specdec/version.hpp>

using namespace specdec_python;

void bind_drafting(nb::module_& m);
void bind_blocks(nb::module_& m);
void bind_peers(nb::module_& m);
void bind_sglang(nb::module_& m);
void bind_batch(nb::module_& m);

namespace {

// ---- specdec's row primitives (the backend concept's, on specdec::eigen or, for arrays in CUDA memory,
// on specdec::thrust_backend<cuda>) -------------------------------------------------------------------

void row_argmax(const array& logits, const array& index, const array& value, std::uintptr_t stream) {
  if (const auto at = device_of(logits, "logits", stream)) {
#if SPECDEC_PYTHON_CUDA
    const auto [x, e] = device_rows(logits, "logits", 2, *at);
    std::int32_t* i = on_device<std::int32_t>(index, "out", 1, *at);
    expect_shape(index, "out", {static_cast<std::int64_t>(logits.shape(0))});
    float* v = nullptr;
    if (!absent(value)) {
      v = on_device<float>(value, "values", 1, *at);
      expect_shape(value, "values", {static_cast<std::int64_t>(logits.shape(0))});
    }
    without_gil([&] { specdec_python::cuda::row_argmax(*at, x, e, logits.shape(0), logits.shape(1), i, v); });
#endif
    return;
  }
  with_rows(logits, "logits", [&](auto x) {
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
  });
}

void row_topk(const array& logits, index_t k, const array& values, const array& indices, std::uintptr_t stream) {
  if (const auto at = device_of(logits, "logits", stream)) {
#if SPECDEC_PYTHON_CUDA
    const auto [x, e] = device_rows(logits, "logits", 2, *at);
    float* v = on_device<float>(values, "values", 2, *at);
    std::int32_t* i = on_device<std::int32_t>(indices, "indices", 2, *at);
    const auto rows = static_cast<std::int64_t>(logits.shape(0));
    expect_shape(values, "values", {rows, k});
    expect_shape(indices, "indices", {rows, k});
    without_gil([&] { specdec_python::cuda::row_topk(*at, x, e, rows, logits.shape(1), k, v, i); });
#endif
    return;
  }
  with_rows(logits, "logits", [&](auto x) {
    const auto v = matrix_of<float>(values, "values");
    const auto i = matrix_of<std::int32_t>(indices, "indices");
    expect_shape(values, "values", {x.rows(), k});
    expect_shape(indices, "indices", {x.rows(), k});
    without_gil([&] { host_backend().row_topk(x, k, v, i); });
  });
}

void row_softmax(const array& logits, float temperature, const array& out, bool log, std::uintptr_t stream) {
  if (const auto at = device_of(logits, "logits", stream)) {
#if SPECDEC_PYTHON_CUDA
    const auto [x, e] = device_rows(logits, "logits", 2, *at);
    float* o = on_device<float>(out, "out", 2, *at);
    expect_shape(out, "out", {static_cast<std::int64_t>(logits.shape(0)), static_cast<std::int64_t>(logits.shape(1))});
    without_gil([&] { specdec_python::cuda::row_softmax(*at, x, e, logits.shape(0), logits.shape(1), temperature, o, log); });
#endif
    return;
  }
  with_rows(logits, "logits", [&](auto x) {
    const auto o = matrix_of<float>(out, "out");
    expect_shape(out, "out", {x.rows(), x.cols()});
    without_gil([&] {
      if (log) host_backend().row_log_softmax(x, temperature, o);
      else host_backend().row_softmax(x, temperature, o);
    });
  });
}

void row_logsumexp(const array& logits, float temperature, const array& out, std::uintptr_t stream) {
  if (const auto at = device_of(logits, "logits", stream)) {
#if SPECDEC_PYTHON_CUDA
    const auto [x, e] = device_rows(logits, "logits", 2, *at);
    float* o = on_device<float>(out, "out", 1, *at);
    expect_shape(out, "out", {static_cast<std::int64_t>(logits.shape(0))});
    without_gil([&] { specdec_python::cuda::row_logsumexp(*at, x, e, logits.shape(0), logits.shape(1), temperature, o); });
#endif
    return;
  }
  with_rows(logits, "logits", [&](auto x) {
    const auto o = span_of<float>(out, "out");
    expect_shape(out, "out", {x.rows()});
    without_gil([&] { host_backend().row_logsumexp(x, temperature, specdec::vector_view<float>(o.data(), x.rows())); });
  });
}

/// `[rows x count]` uniforms: row r is philox_stream{seed, r} from position `offset` (float64:
/// uniform_double, float32: uniform), filled several Philox blocks at a time (sampling::philox_uniforms).
void philox_uniforms(std::uint64_t seed, std::uint64_t offset, const array& out) {
  check_array(out, "out", {nb::dtype<double>(), nb::dtype<float>()}, 2, access::write);
  const bool wide = out.dtype() == nb::dtype<double>();
  const auto rows = static_cast<std::size_t>(out.shape(0)), count = static_cast<std::size_t>(out.shape(1));
  without_gil([&] {
    for (std::size_t r = 0; r < rows; ++r) {
      const specdec::philox_stream s{seed, static_cast<std::uint64_t>(r)};
      if (wide) specdec::sampling::philox_uniforms(s, offset, std::span<double>(static_cast<double*>(out.data()) + r * count, count));
      else specdec::sampling::philox_uniforms(s, offset, std::span<float>(static_cast<float*>(out.data()) + r * count, count));
    }
  });
}

/// `[rows x count]` float32 Exp(1) samples: row r is -log1p(-u) of philox_stream{seed, r}'s uniform_double
/// from position `offset` (sampling::philox_exponentials).
void philox_exponentials(std::uint64_t seed, std::uint64_t offset, const array& out) {
  check_array(out, "out", {nb::dtype<float>()}, 2, access::write);
  const auto rows = static_cast<std::size_t>(out.shape(0)), count = static_cast<std::size_t>(out.shape(1));
  without_gil([&] {
    for (std::size_t r = 0; r < rows; ++r)
      specdec::sampling::philox_exponentials(specdec::philox_stream{seed, static_cast<std::uint64_t>(r)}, offset,
                                             std::span<float>(static_cast<float*>(out.data()) + r * count, count));
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

// Array arguments are annotated .none() (here and in every bind_* function): nanobind refuses None
// before any caster runs (an unnamed "incompatible function arguments"); so annotated, None reaches
// check_array, which names the argument.
NB_MODULE(_specdec, m) {
  m.doc() = "specdec's C++ primitives (the package's public functions are in specdec/__init__.py)";
  m.attr("__version__") = nb::str((std::to_string(SPECDEC_VERSION_MAJOR) + "." + std::to_string(SPECDEC_VERSION_MINOR) + "." +
                                   std::to_string(SPECDEC_VERSION_PATCH))
                                      .c_str());
  m.def("philox_uniforms", &philox_uniforms, nb::arg("seed"), nb::arg("offset"), nb::arg("out").none());
  m.def("philox_exponentials", &philox_exponentials, nb::arg("seed"), nb::arg("offset"), nb::arg("out").none());
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
  bind_peers(m);
  bind_sglang(m);
  bind_batch(m);
  bind_drafting(m);
  bind_blocks(m);
}
