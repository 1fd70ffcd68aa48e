// SPDX-License-Identifier: Apache-2.0
// The row primitives of the backend concept on random shapes (zero rows, one column, rows that cross
// the 64-entry blocks and the 4096-entry sampling chunks, padded row strides) and random values (NaN,
// +-inf, denormals, extremes), on the Eigen and the Thrust (CPP) backends. Both backends throw
// specdec::invalid_argument for the same inputs, or return the same integers (argmax, top-k indices,
// sampled tokens) and floats within 1e-4 relative; and every result satisfies its definition: argmax is
// the lowest index of the maximum, top-k is descending with distinct in-range indices, softmax rows sum
// to 1, a sampled token has positive probability.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/backend/thrust.hpp>

#include "fuzz_input.hpp"

namespace {
using specdec::index_t;

struct outputs {
  std::vector<std::int32_t> ints;
  std::vector<float> floats;
};

bool close(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::fabs(a - b) <= 1e-4f * std::max(1.0f, std::max(std::fabs(a), std::fabs(b)));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::input in(data, size);
  const index_t rows = in.range(0, 3);
  const index_t v = in.byte() < 230 ? in.range(1, 300) : in.range(1, 4200);
  const index_t stride = v + (in.flag() ? 0 : in.range(1, 9));
  const bool probabilities = in.byte() < 100;  // rows for the samplers: non-negative weights
  std::vector<float> x(static_cast<std::size_t>(std::max<index_t>(rows, 1) * stride), 0.0f), q(x.size(), 0.0f);
  for (index_t r = 0; r < rows; ++r) {
    double total = 0.0, total_q = 0.0;
    for (index_t j = 0; j < v; ++j) {
      float& e = x[static_cast<std::size_t>(r * stride + j)];
      float& f = q[static_cast<std::size_t>(r * stride + j)];
      // Long rows take one byte per entry at most, then repeat it (the input is a few KiB).
      e = probabilities ? in.weight() : in.value();
      f = in.weight();
      total += e;
      total_q += f;
    }
    if (probabilities && in.byte() < 240)  // normalised, mostly; sometimes left as they are
      for (index_t j = 0; j < v; ++j) {
        x[static_cast<std::size_t>(r * stride + j)] = total > 0 ? static_cast<float>(x[static_cast<std::size_t>(r * stride + j)] / total) : 0.0f;
        q[static_cast<std::size_t>(r * stride + j)] = total_q > 0 ? static_cast<float>(q[static_cast<std::size_t>(r * stride + j)] / total_q) : 0.0f;
      }
  }
  const index_t k = in.range(0, std::min<index_t>(v + 1, 300));
  const float temperature = in.byte() < 240 ? 0.125f + static_cast<float>(in.byte()) / 32.0f : in.value();
  std::vector<float> uniforms(static_cast<std::size_t>(rows));
  for (auto& u : uniforms) u = in.byte() < 250 ? static_cast<float>(in.byte()) / 256.0f : in.value();
  std::vector<std::int32_t> ids(static_cast<std::size_t>(std::max<index_t>(rows, 1) * 2));
  for (auto& id : ids) id = static_cast<std::int32_t>(in.range(-1, v));
  const auto empty = static_cast<specdec::empty_residual>(in.range(0, 2));
  const int op = in.byte() % 10;

  const auto run = [&](auto& b) -> std::optional<outputs> {
    using space = typename std::remove_reference_t<decltype(b)>::memory_space;
    auto xb = b.upload(std::span<const float>(x));
    auto qb = b.upload(std::span<const float>(q));
    auto ub = b.upload(std::span<const float>(uniforms));
    auto ib = b.upload(std::span<const std::int32_t>(ids));
    const index_t kk = std::max<index_t>(k, 1);
    auto values = b.template allocate<float>(std::max<index_t>(rows, 1) * (std::max<index_t>(kk, stride) + 2));
    auto indices = b.template allocate<std::int32_t>(std::max<index_t>(rows, 1) * kk);
    auto scalars = b.template allocate<float>(std::max<index_t>(rows, 1));
    const specdec::matrix_view<const float, space> X(xb.view().data(), rows, v, stride, 1), Q(qb.view().data(), rows, v, stride, 1);
    const specdec::vector_view<float, space> s(scalars.view().data(), rows);
    const specdec::vector_view<std::int32_t, space> t(indices.view().data(), rows);
    const specdec::vector_view<const float, space> u(ub.view().data(), rows);
    outputs out;
    try {
      switch (op) {
        case 0: b.row_max(X, s); break;
        case 1: b.row_argmax(X, t, s); break;
        case 2: b.row_topk(X, k, specdec::matrix_view<float, space>(values.view().data(), rows, k),
                           specdec::matrix_view<std::int32_t, space>(indices.view().data(), rows, k)); break;
        case 3: b.row_topk_logsumexp(X, k, temperature, specdec::matrix_view<float, space>(values.view().data(), rows, k),
                                     specdec::matrix_view<std::int32_t, space>(indices.view().data(), rows, k), s); break;
        case 4: b.row_logsumexp(X, temperature, s); break;
        case 5: b.row_softmax(X, temperature, specdec::matrix_view<float, space>(values.view().data(), rows, v)); break;
        case 6: b.row_log_softmax(X, temperature, specdec::matrix_view<float, space>(values.view().data(), rows, v)); break;
        case 7: b.row_sample(X, u, t); break;
        case 8: b.row_sample_residual(X, Q, u, t, empty); break;
        default: b.gather_elements(X, specdec::matrix_view<const std::int32_t, space>(ib.view().data(), rows, 2),
                                   specdec::matrix_view<float, space>(values.view().data(), rows, 2)); break;
      }
    } catch (const specdec::invalid_argument&) {
      return std::nullopt;
    }
    const auto down_f = [&](index_t n) { return b.download(specdec::vector_view<const float, space>(values.view().data(), n)); };
    const auto down_i = [&](index_t n) { return b.download(specdec::vector_view<const std::int32_t, space>(indices.view().data(), n)); };
    const auto down_s = [&] { return b.download(specdec::vector_view<const float, space>(scalars.view().data(), rows)); };
    switch (op) {
      case 0: case 4: out.floats = down_s(); break;
      case 1: out.ints = down_i(rows); out.floats = down_s(); break;
      case 2: out.ints = down_i(rows * k); out.floats = down_f(rows * k); break;
      case 3: out.ints = down_i(rows * k); out.floats = down_f(rows * k); { auto l = down_s(); out.floats.insert(out.floats.end(), l.begin(), l.end()); } break;
      case 5: case 6: out.floats = down_f(rows * v); break;
      case 7: case 8: out.ints = down_i(rows); break;
      default: out.floats = down_f(rows * 2); break;
    }
    return out;
  };
  specdec::eigen e;
  specdec::thrust_backend<specdec::thrust_system::cpp> th;
  const auto a = run(e), b = run(th);
  fuzz::require(a.has_value() == b.has_value(), "one backend threw, the other did not", op, a.has_value());
  if (!a) return 0;
  fuzz::require(a->ints == b->ints, "integer outputs differ across backends", op);
  fuzz::require(a->floats.size() == b->floats.size(), "float output sizes differ", op);
  for (std::size_t i = 0; i < a->floats.size(); ++i)
    fuzz::require(close(a->floats[i], b->floats[i]), "float outputs differ across backends", op, static_cast<long long>(i));
  const auto at = [&](index_t r, index_t j) { return x[static_cast<std::size_t>(r * stride + j)]; };
  for (index_t r = 0; r < rows; ++r) {
    if (op == 1) {
      const std::int32_t best = a->ints[static_cast<std::size_t>(r)];
      fuzz::require(best >= 0 && best < v, "argmax in range", best);
      for (index_t j = 0; j < v; ++j)
        fuzz::require(at(r, j) < at(r, best) || (at(r, j) == at(r, best) && j >= best), "argmax is the lowest index of the maximum", r, j);
    }
    if (op == 2 || op == 3) {
      std::vector<std::int32_t> seen;
      for (index_t c = 0; c < k; ++c) {
        const std::int32_t id = a->ints[static_cast<std::size_t>(r * k + c)];
        fuzz::require(id >= 0 && id < v, "top-k index in range", id);
        if (c > 0) fuzz::require(!(a->floats[static_cast<std::size_t>(r * k + c)] > a->floats[static_cast<std::size_t>(r * k + c - 1)]), "top-k descending", c);
        seen.push_back(id);
      }
      std::sort(seen.begin(), seen.end());
      fuzz::require(std::adjacent_find(seen.begin(), seen.end()) == seen.end(), "top-k indices distinct", r);
    }
    if (op == 5) {
      double total = 0.0;
      for (index_t j = 0; j < v; ++j) total += a->floats[static_cast<std::size_t>(r * v + j)];
      fuzz::require(std::fabs(total - 1.0) < 1e-3, "softmax row sums to 1", r);
    }
    if (op == 7 || op == 8) {
      const std::int32_t token = a->ints[static_cast<std::size_t>(r)];
      fuzz::require(token >= 0 && token < v, "sampled token in range", token);
      if (op == 7) fuzz::require(at(r, token) > 0.0f, "sampled token has probability 0", r, token);
    }
  }
  return 0;
}
