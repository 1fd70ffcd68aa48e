// SPDX-License-Identifier: Apache-2.0
// gpu_check: proves specdec::thrust_backend<cuda> on a real GPU, in one run (scripts/gpu_check.sh).
//
//  1. the device, and its streaming-read bandwidth measured here (the limit every figure is a share of);
//  2. every row primitive against thrust_backend<cpp> on rows {1, 8, 64} x V {32000, 128256, 151936, 262144} and on
//     adversarial rows (ties, all -inf, NaN, +inf, maximum first / last, odd V, padded row stride):
//     integers and sampled tokens exact, floats within the tolerance printed beside each check;
//  3. deferred faults (no synchronisation inside a call) and a CUDA graph captured and replayed;
//  4. batched tree verification (sampling/batch.hpp, one block per request): greedy and stochastic, on
//     60-node trees at batch {1, 16, 64}, outputs equal to thrust_backend<cpp>'s, timed as one launch;
//     the device-resident EAGLE-2 build (tree/eagle2_batch.hpp) equal to the host builder's, timed;
//  5. per primitive and shape: median and p90 time (CUDA events, inputs rotated through a pool larger
//     than L2), GB/s, percent of the measured read bandwidth, launches per call (graph nodes of one
//     captured call) and host synchronisations per call.
// Options: --quick (a small subset: for compute-sanitizer), --csv FILE, --no-timing, --only PREFIX (the
// quick checks, then the timing of the operations whose name starts with PREFIX, tree operations
// included: a variant's build compared with the default one's in the same run).
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <specdec/backend/thrust.hpp>
#include <specdec/interop/sglang_sampling.hpp>
#include <specdec/sampling/batch.hpp>
#include <specdec/tree/eagle2_batch.hpp>

using device_backend = specdec::thrust_backend<specdec::thrust_system::cuda>;
using host_backend = specdec::thrust_backend<specdec::thrust_system::cpp>;
using specdec::device_space;
using specdec::host_space;
using specdec::index_t;
template <class T>
using dmat = specdec::matrix_view<T, device_space>;
template <class T>
using dvec = specdec::vector_view<T, device_space>;
template <class T>
using hmat = specdec::matrix_view<T, host_space>;
template <class T>
using hvec = specdec::vector_view<T, host_space>;

namespace {

int failures = 0;
int checks = 0;

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(e));
    std::exit(2);
  }
}

void report(bool ok, const std::string& what) {
  ++checks;
  if (!ok) {
    ++failures;
    std::printf("FAIL %s\n", what.c_str());
  }
}

/// Device memory of n T, freed at scope exit.
template <class T>
struct dbuf {
  T* p = nullptr;
  std::size_t n = 0;
  explicit dbuf(std::size_t count) : n(count) { cuda_ok(cudaMalloc(&p, std::max<std::size_t>(n, 1) * sizeof(T)), "cudaMalloc"); }
  // Kernels run on the backend's non-blocking stream, which the legacy stream of cudaMemcpy / cudaMemset /
  // cudaFree does not wait for: every host-side access synchronises the device first.
  ~dbuf() {
    cudaDeviceSynchronize();
    cudaFree(p);
  }
  dbuf(const dbuf&) = delete;
  dbuf& operator=(const dbuf&) = delete;
  void put(const std::vector<T>& h) {
    cuda_ok(cudaDeviceSynchronize(), "sync");
    cuda_ok(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  std::vector<T> get(std::size_t count) const {
    std::vector<T> h(count);
    cuda_ok(cudaDeviceSynchronize(), "sync");
    cuda_ok(cudaMemcpy(h.data(), p, count * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return h;
  }
  void poison() {
    cuda_ok(cudaDeviceSynchronize(), "sync");
    cuda_ok(cudaMemset(p, 0xff, n * sizeof(T)), "poison");
    cuda_ok(cudaDeviceSynchronize(), "sync");
  }
};

// ---- bandwidth ---------------------------------------------------------------------------------------
__global__ void read_kernel(const float4* x, std::size_t n, float* sink) {
  float acc = 0.0f;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
    const float4 v = __ldcs(x + i);
    acc += v.x + v.y + v.z + v.w;
  }
  if (acc == 1234.5f) sink[0] = acc;  // never true on the data used; keeps the loads
}

double measure_read_bandwidth(cudaStream_t stream, int sms) {
  const std::size_t bytes = std::size_t(2) << 30;
  dbuf<float4> x(bytes / sizeof(float4));
  dbuf<float> sink(1);
  cuda_ok(cudaMemset(x.p, 0, bytes), "memset");
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<double> gbps;
  for (int rep = 0; rep < 12; ++rep) {
    cudaEventRecord(a, stream);
    read_kernel<<<sms * 8, 512, 0, stream>>>(x.p, x.n, sink.p);
    cudaEventRecord(b, stream);
    cuda_ok(cudaEventSynchronize(b), "bandwidth");
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    if (rep >= 2) gbps.push_back(double(bytes) / (ms * 1e-3) / 1e9);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(gbps.begin(), gbps.end());
  return gbps[gbps.size() / 2];
}

// ---- data --------------------------------------------------------------------------------------------
std::vector<float> random_logits(index_t rows, index_t cols, index_t stride, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> x(static_cast<std::size_t>(rows * stride), -7.0f);  // padding holds junk, never read
  for (index_t r = 0; r < rows; ++r)
    for (index_t c = 0; c < cols; ++c) x[static_cast<std::size_t>(r * stride + c)] = normal(rng);
  return x;
}

std::vector<float> uniforms_for(index_t rows, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(rows));
  for (auto& x : v) x = std::min(u(rng), 0.99999994f);
  if (rows > 1) v[0] = 0.0f;
  if (rows > 2) v[1] = 0.99999994f;
  return v;
}

/// Bit-for-bit equality (NaN payloads and signed zeros included): what "exact" means here.
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

bool close(float a, float b, float rel, float abs_tol) {
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::fabs(a - b) <= abs_tol + rel * std::fabs(b);
}

std::string shape_name(const char* what, index_t rows, index_t cols, index_t stride) {
  char s[160];
  std::snprintf(s, sizeof s, "%s rows=%lld V=%lld stride=%lld", what, static_cast<long long>(rows),
                static_cast<long long>(cols), static_cast<long long>(stride));
  return s;
}

/// Runs one primitive on both backends; returns the error messages ("" when it did not throw).
struct both_threw {
  std::string host, device;
};
both_threw run_both(const std::function<void()>& host, const std::function<void()>& device) {
  both_threw t;
  try {
    host();
  } catch (const specdec::invalid_argument& e) {
    t.host = e.what();
  }
  try {
    device();
  } catch (const specdec::invalid_argument& e) {
    t.device = e.what();
  }
  return t;
}

// ---- correctness on one shape ---------------------------------------------------------------------------
void check_shape(device_backend& d, host_backend& h, index_t rows, index_t cols, index_t stride, std::uint32_t seed,
                 const std::vector<float>* given = nullptr) {
  const std::vector<float> hx = given != nullptr ? *given : random_logits(rows, cols, stride, seed);
  dbuf<float> dx(hx.size());
  dx.put(hx);
  const hmat<const float> hxv(hx.data(), rows, cols, stride, 1);
  const dmat<const float> dxv(dx.p, rows, cols, stride, 1);
  const auto name = [&](const char* what) { return shape_name(what, rows, cols, stride); };
  const std::size_t R = static_cast<std::size_t>(rows);

  {  // argmax and max
    std::vector<std::int32_t> hi(R);
    std::vector<float> hv(R), hm(R);
    dbuf<std::int32_t> di(R);
    dbuf<float> dv(R), dm(R);
    di.poison();
    dv.poison();
    dm.poison();
    const auto t = run_both(
        [&] {
          h.row_argmax(hxv, hvec<std::int32_t>(hi.data(), rows), hvec<float>(hv.data(), rows));
          h.row_max(hxv, hvec<float>(hm.data(), rows));
        },
        [&] {
          d.row_argmax(dxv, dvec<std::int32_t>(di.p, rows), dvec<float>(dv.p, rows));
          d.row_max(dxv, dvec<float>(dm.p, rows));
        });
    report(t.host.empty() == t.device.empty(), name("argmax: both raise or neither") + " host='" + t.host + "' device='" + t.device + "'");
    if (t.host.empty() && t.device.empty()) {
      report(di.get(R) == hi, name("argmax indices exact"));
      report(same_bits(dv.get(R), hv), name("argmax values bit-exact"));
      report(same_bits(dm.get(R), hm), name("max bit-exact"));
    }
  }
  {  // log-sum-exp at T = 0.7
    std::vector<float> hl(R);
    dbuf<float> dl(R);
    dl.poison();
    const auto t = run_both([&] { h.row_logsumexp(hxv, 0.7f, hvec<float>(hl.data(), rows)); },
                            [&] { d.row_logsumexp(dxv, 0.7f, dvec<float>(dl.p, rows)); });
    report(t.host.empty() == t.device.empty(), name("logsumexp: both raise or neither") + " host='" + t.host + "' device='" + t.device + "'");
    if (t.host.empty() && t.device.empty()) {
      const auto got = dl.get(R);
      bool ok = true;
      for (std::size_t r = 0; r < R; ++r) ok = ok && close(got[r], hl[r], 2e-6f, 2e-6f);
      report(ok, name("logsumexp within 2e-6 relative"));
    }
  }
  for (const index_t k : {index_t(1), index_t(8), index_t(64), index_t(256)}) {  // top-k, plain and fused
    if (k > cols) continue;
    const std::size_t n = R * static_cast<std::size_t>(k);
    for (const bool fused : {false, true}) {
      std::vector<float> hv(n), hl(R);
      std::vector<std::int32_t> hi(n);
      dbuf<float> dv(n), dl(R);
      dbuf<std::int32_t> di(n);
      dv.poison();
      di.poison();
      dl.poison();
      const auto t = run_both(
          [&] {
            if (fused)
              h.row_topk_logsumexp(hxv, k, 0.7f, hmat<float>(hv.data(), rows, k), hmat<std::int32_t>(hi.data(), rows, k),
                                   hvec<float>(hl.data(), rows));
            else
              h.row_topk(hxv, k, hmat<float>(hv.data(), rows, k), hmat<std::int32_t>(hi.data(), rows, k));
          },
          [&] {
            if (fused)
              d.row_topk_logsumexp(dxv, k, 0.7f, dmat<float>(dv.p, rows, k), dmat<std::int32_t>(di.p, rows, k),
                                   dvec<float>(dl.p, rows));
            else
              d.row_topk(dxv, k, dmat<float>(dv.p, rows, k), dmat<std::int32_t>(di.p, rows, k));
          });
      const std::string what = std::string(fused ? "topk_logsumexp" : "topk") + " k=" + std::to_string(k);
      report(t.host.empty() == t.device.empty(),
             name((what + ": both raise or neither").c_str()) + " host='" + t.host + "' device='" + t.device + "'");
      if (!t.host.empty() || !t.device.empty()) continue;
      report(di.get(n) == hi, name((what + " indices exact").c_str()));
      const auto gv = dv.get(n);
      if (fused) {
        bool ok = true;
        for (std::size_t i = 0; i < n; ++i) ok = ok && close(gv[i], hv[i], 2e-6f, 4e-6f);
        const auto gl = dl.get(R);
        for (std::size_t r = 0; r < R; ++r) ok = ok && close(gl[r], hl[r], 2e-6f, 2e-6f);
        report(ok, name((what + " values and lse within 2e-6 relative").c_str()));
      } else {
        report(same_bits(gv, hv), name((what + " values bit-exact").c_str()));
      }
    }
  }
  for (const bool log : {false, true}) {  // softmax and log-softmax at T = 0.7, into a packed output
    const std::size_t n = R * static_cast<std::size_t>(cols);
    std::vector<float> ho(n);
    dbuf<float> dout(n);
    dout.poison();
    const auto t = run_both(
        [&] {
          if (log)
            h.row_log_softmax(hxv, 0.7f, hmat<float>(ho.data(), rows, cols));
          else
            h.row_softmax(hxv, 0.7f, hmat<float>(ho.data(), rows, cols));
        },
        [&] {
          if (log)
            d.row_log_softmax(dxv, 0.7f, dmat<float>(dout.p, rows, cols));
          else
            d.row_softmax(dxv, 0.7f, dmat<float>(dout.p, rows, cols));
        });
    const char* what = log ? "log_softmax" : "softmax";
    report(t.host.empty() == t.device.empty(),
           name((std::string(what) + ": both raise or neither").c_str()) + " host='" + t.host + "' device='" + t.device + "'");
    if (!t.host.empty() || !t.device.empty()) continue;
    const auto got = dout.get(n);
    // softmax: relative error of each probability (entries under 1e-37, near float's subnormals, are
    // compared absolutely); log-softmax: error over (1 + |value|). Equal values (-inf included) agree.
    double worst = 0;
    std::size_t worst_at = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (got[i] == ho[i]) continue;
      // A probability whose exact value is below FLT_MIN is subnormal: the host's vector exp flushes it to
      // zero where CUDA's expf keeps it (both are within FLT_MIN of the exact value).
      if (!log && std::fabs(ho[i]) < FLT_MIN && std::fabs(got[i]) < FLT_MIN) continue;
      const double diff = std::fabs(double(got[i]) - double(ho[i]));
      const double err = log ? diff / (1.0 + std::fabs(ho[i])) : (std::fabs(ho[i]) < 1e-37 ? diff * 1e37 : diff / std::fabs(ho[i]));
      if (!(err <= 4e-6) && !(err <= worst)) {
        worst = std::isnan(err) ? 1e30 : err;
        worst_at = i;
      }
    }
    report(worst == 0, name((std::string(what) + " within 4e-6 relative").c_str()) + " worst=" + std::to_string(worst) +
                           " at " + std::to_string(worst_at) + " (device " + std::to_string(got[worst_at]) + ", host " +
                           std::to_string(ho[worst_at]) + ")");
  }
  {  // sampling from the host's softmax (the same probabilities, bit for bit, on both backends)
    const std::size_t n = R * static_cast<std::size_t>(cols);
    std::vector<float> probs(n), probs_q(n);
    bool ok_inputs = true;
    try {
      h.row_softmax(hxv, 1.0f, hmat<float>(probs.data(), rows, cols));
      h.row_softmax(hxv, 1.6f, hmat<float>(probs_q.data(), rows, cols));
    } catch (const specdec::invalid_argument&) {
      ok_inputs = false;  // rows without a distribution: sampling is checked on the valid shapes
    }
    if (ok_inputs) {
      dbuf<float> dp(n), dq(n), du(R);
      dp.put(probs);
      dq.put(probs_q);
      const auto u = uniforms_for(rows, seed + 1);
      du.put(u);
      std::vector<std::int32_t> ht(R);
      dbuf<std::int32_t> dt(R);
      dt.poison();
      h.row_sample(hmat<const float>(probs.data(), rows, cols), hvec<const float>(u.data(), rows),
                   hvec<std::int32_t>(ht.data(), rows));
      d.row_sample(dmat<const float>(dp.p, rows, cols), dvec<const float>(du.p, rows), dvec<std::int32_t>(dt.p, rows));
      report(dt.get(R) == ht, name("sample tokens identical to thrust_backend<cpp>"));
      for (const auto fallback : {specdec::empty_residual::sample_target, specdec::empty_residual::token_zero,
                                  specdec::empty_residual::last_token}) {
        for (const bool same : {false, true}) {  // same: p == q, the residual is empty
          dt.poison();
          const float* q_host = same ? probs.data() : probs_q.data();
          const float* q_dev = same ? dp.p : dq.p;
          h.row_sample_residual(hmat<const float>(probs.data(), rows, cols), hmat<const float>(q_host, rows, cols),
                                hvec<const float>(u.data(), rows), hvec<std::int32_t>(ht.data(), rows), fallback);
          d.row_sample_residual(dmat<const float>(dp.p, rows, cols), dmat<const float>(q_dev, rows, cols),
                                dvec<const float>(du.p, rows), dvec<std::int32_t>(dt.p, rows), fallback);
          report(dt.get(R) == ht, name("residual sample tokens identical") + " fallback=" +
                                      std::to_string(static_cast<int>(fallback)) + (same ? " p==q" : ""));
        }
      }
    }
  }
  {  // gathers
    const index_t n = std::min<index_t>(rows, 5);
    std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
    for (index_t i = 0; i < n; ++i) ids[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * 7 + 3) % rows);
    dbuf<std::int32_t> dids(ids.size());
    dids.put(ids);
    std::vector<float> ho(static_cast<std::size_t>(n * cols));
    dbuf<float> dout(ho.size());
    h.gather_rows(hxv, hvec<const std::int32_t>(ids.data(), n), hmat<float>(ho.data(), n, cols));
    d.gather_rows(dxv, dvec<const std::int32_t>(dids.p, n), dmat<float>(dout.p, n, cols));
    report(same_bits(dout.get(ho.size()), ho), name("gather_rows bit-exact"));
    const index_t m = 6;
    std::vector<std::int32_t> cids(static_cast<std::size_t>(rows * m));
    for (std::size_t i = 0; i < cids.size(); ++i) cids[i] = static_cast<std::int32_t>((i * 104729) % static_cast<std::size_t>(cols));
    dbuf<std::int32_t> dcids(cids.size());
    dcids.put(cids);
    std::vector<float> he(static_cast<std::size_t>(rows * m));
    dbuf<float> de(he.size());
    h.gather_elements(hxv, hmat<const std::int32_t>(cids.data(), rows, m), hmat<float>(he.data(), rows, m));
    d.gather_elements(dxv, dmat<const std::int32_t>(dcids.p, rows, m), dmat<float>(de.p, rows, m));
    report(same_bits(de.get(he.size()), he), name("gather_elements bit-exact"));
  }
}

/// Rows built to break kernels: ties, maximum first / last, -inf masks, then faulting rows.
void check_adversarial(device_backend& d, host_backend& h, index_t cols, index_t stride) {
  const index_t rows = 5;
  std::vector<float> x = random_logits(rows, cols, stride, 99);
  const auto at = [&](index_t r, index_t c) -> float& { return x[static_cast<std::size_t>(r * stride + c)]; };
  for (index_t c = 0; c < cols; ++c) at(0, c) = 1.5f;                       // all tied
  at(1, 0) = 50.0f;                                                        // maximum first
  at(2, cols - 1) = 50.0f;                                                 // maximum last
  for (index_t c = 0; c < cols; ++c) at(3, c) = c % 3 == 0 ? 2.0f : -HUGE_VALF;  // mostly masked, ties
  for (index_t c = 0; c < cols; ++c) at(4, c) = (c % 2 == 0 ? -0.0f : 0.0f);      // signed zeros tie
  check_shape(d, h, rows, cols, stride, 7, &x);
  // Faulting rows: NaN, +inf, all -inf (each alone in row 2 of 3).
  for (int kind = 0; kind < 3; ++kind) {
    std::vector<float> y = random_logits(3, cols, stride, 5);
    for (index_t c = 0; c < cols; ++c) {
      float& v = y[static_cast<std::size_t>(2 * stride + c)];
      if (kind == 2) v = -HUGE_VALF;
      if (kind < 2 && c == cols / 2) v = kind == 0 ? std::numeric_limits<float>::quiet_NaN() : HUGE_VALF;
    }
    check_shape(d, h, 3, cols, stride, 8, &y);
  }
}

/// Rows that test top-k's grouped blocks (several slices per block, topk_group) at a shape that takes
/// them: rising values (every entry of a later slice beats the bound: the buffer overflows), falling
/// values, ties within and across slices, a masked row with its few finite entries late, signed zeros;
/// then a NaN in a later slice of a group (the call raises, as on the host).
void check_grouped(device_backend& d, host_backend& h, bool quick) {
  const index_t rows = quick ? 512 : 128, cols = quick ? 8192 : 65536;  // groups of 2 / of 4 and 8
  std::vector<float> x = random_logits(rows, cols, cols, 17);
  for (index_t r = 0; r < rows; ++r) {
    float* row = x.data() + static_cast<std::size_t>(r * cols);
    switch (r % 8) {
      // Slopes that keep the logits below 1 (distinct floats still): softmax's error bound here is stated
      // for logits of moderate size (an argument of 45 alone carries a rounding of ~4e-6 relative).
      case 1: for (index_t c = 0; c < cols; ++c) row[c] = static_cast<float>(c) * 1e-5f; break;
      case 2: for (index_t c = 0; c < cols; ++c) row[c] = -static_cast<float>(c) * 1e-5f; break;
      case 3: for (index_t c = 0; c < cols; ++c) row[c] = 0.25f; break;
      case 4: for (index_t c = 0; c < cols; ++c) row[c] = static_cast<float>(c / 5000); break;
      case 5:
        for (index_t c = 0; c < cols; ++c) row[c] = -HUGE_VALF;
        for (index_t c = cols - 40; c < cols; c += 3) row[c] = static_cast<float>(c % 7);
        break;
      // Signed zeros tie across slices; the maximum 0 keeps softmax's terms exact (exp(0) = 1: tens of
      // thousands of equal inexact terms would measure the two summation orders, not the kernels).
      case 6: for (index_t c = 0; c < cols; ++c) row[c] = c % 4097 == 0 ? -1.0f : (c % 2 == 0 ? -0.0f : 0.0f); break;
      default: break;
    }
  }
  check_shape(d, h, rows, cols, cols, 17, &x);
  std::vector<float> y = random_logits(rows, cols, cols, 18);
  y[static_cast<std::size_t>(5 * cols + cols - 4096 + 100)] = std::numeric_limits<float>::quiet_NaN();  // a group's last slice
  check_shape(d, h, rows, cols, cols, 18, &y);
}

/// Deferred faults: a NaN row does not throw at the call; check_faults() does, once.
void check_deferred(device_backend& d) {
  const index_t rows = 4, cols = 5000;
  std::vector<float> x = random_logits(rows, cols, cols, 3);
  x[static_cast<std::size_t>(2 * cols + 17)] = std::numeric_limits<float>::quiet_NaN();
  dbuf<float> dx(x.size());
  dx.put(x);
  dbuf<std::int32_t> di(rows);
  d.defer_faults(true);
  bool threw_at_call = false, threw_at_check = false, threw_again = false;
  std::string message;
  try {
    d.row_argmax(dmat<const float>(dx.p, rows, cols), dvec<std::int32_t>(di.p, rows));
  } catch (const specdec::invalid_argument&) {
    threw_at_call = true;
  }
  try {
    d.check_faults();
  } catch (const specdec::invalid_argument& e) {
    threw_at_check = true;
    message = e.what();
  }
  try {
    d.check_faults();
  } catch (const specdec::invalid_argument&) {
    threw_again = true;
  }
  d.defer_faults(false);
  report(!threw_at_call && threw_at_check && !threw_again &&
             message.find("row 2") != std::string::npos && message.find("row_argmax") != std::string::npos,
         "deferred faults: raised by check_faults once, naming row 2 (message: '" + message + "')");
}

// ---- timing -------------------------------------------------------------------------------------------
struct timing {
  double median_us, p90_us;
};

struct op {
  const char* name;
  index_t k;
  double bytes_per_entry;  // read (+ written) per logit
  std::function<void(device_backend&, const float*, index_t, index_t, void*)> call;
};

timing time_op(device_backend& d, const op& o, index_t rows, index_t cols, const std::vector<float*>& pool, void* out,
               cudaStream_t stream, int reps) {
  std::vector<cudaEvent_t> ev(static_cast<std::size_t>(2 * reps));
  for (auto& e : ev) cudaEventCreate(&e);
  for (int w = 0; w < 3; ++w) o.call(d, pool[static_cast<std::size_t>(w) % pool.size()], rows, cols, out);
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(ev[static_cast<std::size_t>(2 * i)], stream);
    o.call(d, pool[static_cast<std::size_t>(i + 3) % pool.size()], rows, cols, out);
    cudaEventRecord(ev[static_cast<std::size_t>(2 * i + 1)], stream);
  }
  cuda_ok(cudaStreamSynchronize(stream), "timing");
  std::vector<double> us;
  for (int i = 0; i < reps; ++i) {
    float ms = 0;
    cudaEventElapsedTime(&ms, ev[static_cast<std::size_t>(2 * i)], ev[static_cast<std::size_t>(2 * i + 1)]);
    us.push_back(ms * 1e3);
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[std::min(us.size() - 1, us.size() * 9 / 10)]};
}

/// Kernel launches of one call: the nodes of a graph captured around it (a call that synchronised
/// could not be captured: reported as -1).
int launches_per_call(device_backend& d, const op& o, float* x, index_t rows, index_t cols, void* out, cudaStream_t stream) {
  cudaGraph_t graph = nullptr;
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return -1;
  bool threw = false;
  try {
    o.call(d, x, rows, cols, out);
  } catch (...) {
    threw = true;
  }
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  cudaGetLastError();
  if (threw || end != cudaSuccess || graph == nullptr) return -1;
  std::size_t nodes = 0;
  cudaGraphGetNodes(graph, nullptr, &nodes);
  cudaGraphDestroy(graph);
  return static_cast<int>(nodes);
}

/// Times one whole call (a verification or a build on a batch: no bandwidth figure) and prints and
/// records it like the primitives' rows, with `what` after the row.
void time_call(device_backend& d, cudaStream_t stream, FILE* csv, const char* name, index_t batch, index_t vocab, int reps,
               const std::string& what, const std::function<void()>& call) {
  const op o{name, 1, 0, [&](device_backend&, const float*, index_t, index_t, void*) { call(); }};
  const timing t = time_op(d, o, 1, 1, {nullptr}, nullptr, stream, reps);
  const int launches = launches_per_call(d, o, nullptr, 1, 1, nullptr, stream);
  std::printf("%-18s %5lld %7lld %10.2f %10.2f %8s %7s %8d %5d   (%s)\n", name, static_cast<long long>(batch),
              static_cast<long long>(vocab), t.median_us, t.p90_us, "-", "-", launches, launches >= 0 ? 0 : 1, what.c_str());
  std::fprintf(csv, "specdec,%s,%lld,%lld,%.3f,%.3f,,,%d,%d\n", name, static_cast<long long>(batch),
               static_cast<long long>(vocab), t.median_us, t.p90_us, launches, launches >= 0 ? 0 : 1);
}

// ---- batched tree verification --------------------------------------------------------------------------
/// An EAGLE-2-shaped batch: `nodes`-node trees (each node's parent among the last few nodes, so trees are
/// about 6 deep), deterministic drafts or draft rows, probability rows whose favourite token (p ~ 0.4)
/// is often the drafted one. Target rows come from a pool of 64 distinct rows (building 64 x 60 full
/// rows on the host would take longer than the whole check).
struct tree_case {
  index_t batch, nodes, vocab;
  bool drafts;
  std::vector<std::int32_t> tokens, parents;
  std::vector<index_t> draft_rows;
  std::vector<float> target, draft;
  std::vector<double> uniforms;
};

tree_case make_tree_case(index_t batch, index_t nodes, index_t vocab, bool drafts, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  const index_t pool = std::min<index_t>(64, batch * nodes);
  std::vector<float> rows(static_cast<std::size_t>(pool * vocab));
  std::vector<std::int32_t> favourite(static_cast<std::size_t>(pool));
  for (index_t r = 0; r < pool; ++r) {
    favourite[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(vocab));
    double sum = 0;
    float* x = rows.data() + r * vocab;
    for (index_t j = 0; j < vocab; ++j) sum += x[j] = static_cast<float>(std::exp(4.0 * uni(rng)));
    x[favourite[static_cast<std::size_t>(r)]] += static_cast<float>(0.67 * sum);
    sum *= 1.67;
    for (index_t j = 0; j < vocab; ++j) x[j] = static_cast<float>(x[j] / sum);
  }
  tree_case c{batch, nodes, vocab, drafts, {}, {}, {}, {}, {}, {}};
  c.target.resize(static_cast<std::size_t>(batch * nodes * vocab));
  for (index_t k = 0; k < batch * nodes; ++k)
    std::memcpy(c.target.data() + k * vocab, rows.data() + (k % pool) * vocab, static_cast<std::size_t>(vocab) * sizeof(float));
  for (index_t r = 0; r < batch; ++r)
    for (index_t i = 0; i < nodes; ++i) {
      const index_t parent = i == 0 ? -1 : std::max<index_t>(0, i - 1 - static_cast<index_t>(rng() % 10));
      c.parents.push_back(static_cast<std::int32_t>(parent));
      const index_t parent_row = (r * nodes + std::max<index_t>(parent, 0)) % pool;
      c.tokens.push_back(uni(rng) < 0.6 ? favourite[static_cast<std::size_t>(parent_row)]
                                        : static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(vocab)));
      c.draft_rows.push_back(drafts && i > 0 ? (r * nodes + i) % pool : -1);
    }
  if (drafts) c.draft.assign(rows.begin(), rows.end());
  for (index_t k = 0; k < batch * (2 * nodes + 1); ++k) c.uniforms.push_back(uni(rng));
  return c;
}

template <class T>
struct hbuf {
  std::vector<T> v;
  T* p;
  explicit hbuf(std::size_t n) : v(std::max<std::size_t>(n, 1)), p(v.data()) {}
  hbuf(const hbuf&) = delete;
  hbuf& operator=(const hbuf&) = delete;
  void put(const std::vector<T>& h) { std::copy(h.begin(), h.end(), v.begin()); }
  std::vector<T> get(std::size_t n) const { return std::vector<T>(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n)); }
};

/// The batch uploaded to one backend (Buffer: dbuf for the GPU, hbuf for the host), with its outputs.
template <class Backend, template <class> class Buffer>
struct tree_run {
  using space = typename Backend::memory_space;
  const tree_case* c;
  Buffer<std::int32_t> tokens, parents, out_tokens, out_nodes, out_accepted, out_consumed, argmax;
  Buffer<index_t> draft_rows;
  Buffer<float> target, draft;
  Buffer<double> uniforms;
  explicit tree_run(const tree_case& tc)
      : c(&tc), tokens(n()), parents(n()), out_tokens(n()), out_nodes(n()), out_accepted(b()), out_consumed(b()),
        argmax(n()), draft_rows(n()), target(tc.target.size()), draft(tc.draft.size()), uniforms(tc.uniforms.size()) {
    tokens.put(tc.tokens);
    parents.put(tc.parents);
    draft_rows.put(tc.draft_rows);
    target.put(tc.target);
    if (tc.drafts) draft.put(tc.draft);
    uniforms.put(tc.uniforms);
  }
  std::size_t n() const { return static_cast<std::size_t>(c->batch * c->nodes); }
  std::size_t b() const { return static_cast<std::size_t>(c->batch); }
  specdec::sampling::tree_batch<space> batch() const {
    specdec::sampling::tree_batch<space> t;
    t.tokens = specdec::matrix_view<const std::int32_t, space>(tokens.p, c->batch, c->nodes);
    t.parents = specdec::matrix_view<const std::int32_t, space>(parents.p, c->batch, c->nodes);
    if (c->drafts) t.draft_rows = specdec::matrix_view<const index_t, space>(draft_rows.p, c->batch, c->nodes);
    t.uniforms = specdec::matrix_view<const double, space>(uniforms.p, c->batch, 2 * c->nodes + 1);
    return t;
  }
  specdec::sampling::speculative_rows<space> rows() const {
    specdec::sampling::speculative_rows<space> r;
    r.target = specdec::matrix_view<const float, space>(target.p, c->batch * c->nodes, c->vocab);
    if (c->drafts) r.draft = specdec::matrix_view<const float, space>(draft.p, static_cast<index_t>(c->draft.size()) / c->vocab, c->vocab);
    return r;
  }
  specdec::sampling::verify_outputs<space> outputs() const {
    specdec::sampling::verify_outputs<space> o;
    o.tokens = specdec::matrix_view<std::int32_t, space>(out_tokens.p, c->batch, c->nodes);
    o.accepted_nodes = specdec::matrix_view<std::int32_t, space>(out_nodes.p, c->batch, c->nodes - 1);
    o.accepted = specdec::vector_view<std::int32_t, space>(out_accepted.p, c->batch);
    o.uniforms_consumed = specdec::vector_view<std::int32_t, space>(out_consumed.p, c->batch);
    return o;
  }
};

/// A deterministic tree_case in SGLang's layout (build_tree's: int64 candidates, global retrive_index,
/// first-child / next-sibling links in node-index order; a float coin per node and a final uniform
/// from the case's uniforms), with its outputs, on one backend.
template <class Backend, template <class> class Buffer>
struct sglang_run {
  using space = typename Backend::memory_space;
  const tree_case* c;
  Buffer<std::int64_t> candidates, retrive_index, next_token, next_sibling;
  Buffer<float> coins, finals;
  Buffer<std::int32_t> predicts, accept_index, accept_token_num;
  index_t steps;
  sglang_run(const tree_case& tc, index_t num_spec_step)
      : c(&tc), candidates(n()), retrive_index(n()), next_token(n()), next_sibling(n()), coins(n()), finals(b()),
        predicts(n()), accept_index(b() * static_cast<std::size_t>(num_spec_step)), accept_token_num(b()), steps(num_spec_step) {
    std::vector<std::int64_t> cand(n()), index(n()), first(n(), -1), sibling(n(), -1);
    std::vector<float> u(n()), f(b());
    for (index_t r = 0; r < tc.batch; ++r) {
      const index_t base = r * tc.nodes;
      for (index_t i = 0; i < tc.nodes; ++i) {
        cand[static_cast<std::size_t>(base + i)] = tc.tokens[static_cast<std::size_t>(base + i)];
        index[static_cast<std::size_t>(base + i)] = base + i;
        u[static_cast<std::size_t>(base + i)] = static_cast<float>(tc.uniforms[static_cast<std::size_t>(r * (2 * tc.nodes + 1) + i)]);
      }
      f[static_cast<std::size_t>(r)] = static_cast<float>(tc.uniforms[static_cast<std::size_t>(r * (2 * tc.nodes + 1) + tc.nodes)]);
      for (index_t i = tc.nodes - 1; i >= 1; --i) {  // head insertion from the last node: node-index order
        const auto p = static_cast<std::size_t>(base + tc.parents[static_cast<std::size_t>(base + i)]);
        sibling[static_cast<std::size_t>(base + i)] = first[p];
        first[p] = i;
      }
    }
    for (auto& x : u) x = std::min(x, 0.99999994f);  // [0, 1) after rounding to float
    for (auto& x : f) x = std::min(x, 0.99999994f);
    candidates.put(cand);
    retrive_index.put(index);
    next_token.put(first);
    next_sibling.put(sibling);
    coins.put(u);
    finals.put(f);
    predicts.put(std::vector<std::int32_t>(n(), -1));
  }
  std::size_t n() const { return static_cast<std::size_t>(c->batch * c->nodes); }
  std::size_t b() const { return static_cast<std::size_t>(c->batch); }
  template <class T>
  specdec::matrix_view<const T, space> links(const Buffer<T>& x) const {
    return specdec::matrix_view<const T, space>(x.p, c->batch, c->nodes);
  }
  void run(Backend& backend, const float* target) const {
    specdec::sglang::tree_speculative_sampling_target_only(
        backend, links(candidates), links(retrive_index), links(next_token), links(next_sibling), links(coins),
        specdec::vector_view<const float, space>(finals.p, c->batch),
        specdec::matrix_view<const float, space>(target, c->batch * c->nodes, c->vocab),
        specdec::vector_view<std::int32_t, space>(predicts.p, c->batch * c->nodes),
        specdec::matrix_view<std::int32_t, space>(accept_index.p, c->batch, steps),
        specdec::vector_view<std::int32_t, space>(accept_token_num.p, c->batch), 1.0f, 1.0f);
  }
};

/// Batched greedy and stochastic verification on the GPU equal thrust_backend<cpp>'s; timed (median of
/// 50, deferred faults) with its launches per call, into the CSV as ops verify_greedy_tree (row_argmax +
/// walk) / verify_greedy_visited (the walk reading its visited rows) / verify_tree / verify_tree_drafts
/// with rows = batch and V.
void check_batch_verify(device_backend& d, host_backend& h, cudaStream_t stream, bool quick, FILE* csv) {
  const std::vector<index_t> batches = quick ? std::vector<index_t>{2} : std::vector<index_t>{1, 16, 64};
  const std::vector<index_t> vocabs = quick ? std::vector<index_t>{4097} : std::vector<index_t>{32000, 128256};
  for (const index_t vocab : vocabs)
    for (const index_t batch : batches)
      for (const bool drafts : {false, true}) {
        const index_t nodes = quick ? 12 : 60;
        const tree_case c = make_tree_case(batch, nodes, vocab, drafts, static_cast<std::uint32_t>(batch * 3 + vocab + drafts));
        const tree_run<device_backend, dbuf> dev(c);
        const tree_run<host_backend, hbuf> host(c);
        const auto n = static_cast<std::size_t>(batch * nodes);
        const std::string shape = " (batch " + std::to_string(batch) + ", " + std::to_string(nodes) + " nodes, V " +
                                  std::to_string(vocab) + (drafts ? ", draft rows)" : ", deterministic)");
        const auto run_stochastic = [&] { specdec::sampling::verify_speculative(d, dev.rows(), dev.batch(), {}, dev.outputs()); };
        const auto run_greedy = [&] {
          specdec::sampling::verify_greedy(d, dev.rows().target, dev.batch(), dev.outputs(),
                                           dvec<std::int32_t>(dev.argmax.p, batch * nodes));
        };
        const auto run_visited = [&] { specdec::sampling::verify_greedy(d, dev.rows().target, dev.batch(), dev.outputs()); };
        bool ok = true;
        try {
          specdec::sampling::verify_speculative(h, host.rows(), host.batch(), {}, host.outputs());
          run_stochastic();
        } catch (const std::exception& e) {
          std::printf("batched verification threw: %s\n", e.what());
          ok = false;
        }
        const auto accepted = host.out_accepted.get(static_cast<std::size_t>(batch));
        double mean_accepted = 0;
        for (const auto a : accepted) mean_accepted += a;
        report(ok && dev.out_tokens.get(n) == host.out_tokens.get(n) && dev.out_nodes.get(n - static_cast<std::size_t>(batch)) ==
                                                                         host.out_nodes.get(n - static_cast<std::size_t>(batch)) &&
                   dev.out_accepted.get(static_cast<std::size_t>(batch)) == accepted &&
                   dev.out_consumed.get(static_cast<std::size_t>(batch)) == host.out_consumed.get(static_cast<std::size_t>(batch)),
               "verify_speculative (batch) equals thrust_backend<cpp>" + shape + ", mean accepted " +
                   std::to_string(mean_accepted / double(batch)));
        if (!drafts) {
          ok = true;
          try {
            specdec::sampling::verify_greedy(h, host.rows().target, host.batch(), host.outputs(),
                                             hvec<std::int32_t>(host.argmax.p, batch * nodes));
            run_greedy();
          } catch (const std::exception& e) {
            std::printf("batched greedy verification threw: %s\n", e.what());
            ok = false;
          }
          report(ok && dev.out_tokens.get(n) == host.out_tokens.get(n) &&
                     dev.out_accepted.get(static_cast<std::size_t>(batch)) == host.out_accepted.get(static_cast<std::size_t>(batch)),
                 "verify_greedy (batch, from logits) equals thrust_backend<cpp>" + shape);
          // The form that reads only the visited rows (no argmax of every row) decides the same.
          ok = true;
          try {
            run_visited();
          } catch (const std::exception& e) {
            std::printf("batched greedy verification (visited rows) threw: %s\n", e.what());
            ok = false;
          }
          report(ok && dev.out_tokens.get(n) == host.out_tokens.get(n) &&
                     dev.out_accepted.get(static_cast<std::size_t>(batch)) == host.out_accepted.get(static_cast<std::size_t>(batch)),
                 "verify_greedy (batch, visited rows only) equals thrust_backend<cpp>" + shape);
        }
        // SGLang's sampled verifier (its coin rule, tree_speculative_sampling_target_only) on the same
        // deterministic trees in SGLang's layout: the kernel SGLang reports 17-138 us for.
        const index_t steps = quick ? 6 : 8;
        std::unique_ptr<sglang_run<device_backend, dbuf>> coin_dev;
        if (!drafts) {
          coin_dev = std::make_unique<sglang_run<device_backend, dbuf>>(c, steps);
          const sglang_run<host_backend, hbuf> coin_host(c, steps);
          ok = true;
          try {
            coin_host.run(h, host.target.p);
            coin_dev->run(d, dev.target.p);
          } catch (const std::exception& e) {
            std::printf("SGLang's sampled verification threw: %s\n", e.what());
            ok = false;
          }
          const auto num = coin_host.accept_token_num.get(static_cast<std::size_t>(batch));
          double mean = 0;
          for (const auto a : num) mean += a;
          report(ok && coin_dev->predicts.get(n) == coin_host.predicts.get(n) &&
                     coin_dev->accept_index.get(static_cast<std::size_t>(batch * steps)) ==
                         coin_host.accept_index.get(static_cast<std::size_t>(batch * steps)) &&
                     coin_dev->accept_token_num.get(static_cast<std::size_t>(batch)) == num,
                 "sglang::tree_speculative_sampling_target_only equals thrust_backend<cpp>" + shape + ", mean accepted " +
                     std::to_string(mean / double(batch)));
        }
        if (quick || csv == nullptr) continue;
        d.defer_faults(true);
        const std::string what = std::to_string(nodes) + " nodes per request";
        if (!drafts)
          time_call(d, stream, csv, "sglang_tree_sampling", batch, vocab, 50, what + ", " + std::to_string(steps) + " steps",
                    [&] { coin_dev->run(d, dev.target.p); });
        time_call(d, stream, csv, drafts ? "verify_tree_drafts" : "verify_tree", batch, vocab, 50, what, run_stochastic);
        if (!drafts) time_call(d, stream, csv, "verify_greedy_tree", batch, vocab, 50, what, run_greedy);
        if (!drafts) time_call(d, stream, csv, "verify_greedy_visited", batch, vocab, 50, what, run_visited);
        cuda_ok(cudaStreamSynchronize(stream), "batch timing");
        try {
          d.check_faults();
        } catch (const specdec::invalid_argument& e) {
          report(false, std::string("batched verification timing faulted: ") + e.what());
        }
        d.defer_faults(false);
      }
}

/// --profile verify_tree / verify_tree_drafts BATCH V: the timed case of check_batch_verify, three calls.
void profile_batch_verify(device_backend& d, const std::string& op, index_t batch, index_t vocab) {
  const bool drafts = op == "verify_tree_drafts";
  const tree_case c = make_tree_case(batch, 60, vocab, drafts, static_cast<std::uint32_t>(batch * 3 + vocab + drafts));
  const tree_run<device_backend, dbuf> dev(c);
  d.defer_faults(true);
  for (int i = 0; i < 3; ++i) specdec::sampling::verify_speculative(d, dev.rows(), dev.batch(), {}, dev.outputs());
}

// ---- the EAGLE-2 build on the device -------------------------------------------------------------------
/// eagle2_batch_builder on the GPU against eagle2_tree_builder on thrust_backend<cpp> (the same top-k
/// values: the CUDA top-k's are checked equal above), k 10, depth 5, 60 nodes, draft vocabulary V';
/// the whole build (begin, depth expansions, finish: a top-k and a team job per step) timed as one.
index_t profile_builder_batch = 0;  ///< --profile eagle2_build BATCH V: build three times at this batch, check nothing

void check_batch_builder(device_backend& d, host_backend& h, cudaStream_t stream, bool quick, FILE* csv) {
  const std::vector<index_t> batches = profile_builder_batch > 0 ? std::vector<index_t>{profile_builder_batch}
                                       : quick                   ? std::vector<index_t>{2}
                                                                 : std::vector<index_t>{1, 16, 64};
  const index_t vocab = quick ? 3000 : 32000, k = 10, depth = quick ? 2 : 5, total = quick ? 20 : 60;
  for (const index_t batch : batches) {
    const specdec::dynamic_tree_config cfg{.top_k = k, .depth = depth, .total_tokens = total};
    std::vector<std::vector<float>> forwards;
    forwards.push_back(random_logits(batch, vocab, vocab, static_cast<std::uint32_t>(batch)));
    for (index_t s = 0; s < depth; ++s) forwards.push_back(random_logits(batch * k, vocab, vocab, static_cast<std::uint32_t>(batch * 31 + s)));
    std::vector<std::unique_ptr<dbuf<float>>> dev_rows;
    for (const auto& f : forwards) {
      dev_rows.push_back(std::make_unique<dbuf<float>>(f.size()));
      dev_rows.back()->put(f);
    }
    std::vector<std::int32_t> roots(static_cast<std::size_t>(batch));
    for (index_t r = 0; r < batch; ++r) roots[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(r * 13 + 1);
    dbuf<std::int32_t> dev_roots(roots.size());
    dev_roots.put(roots);
    const auto n = static_cast<std::size_t>(batch * total);
    dbuf<std::int32_t> tokens(n), parents(n);
    specdec::eagle2_batch_builder<device_backend> builder(d, cfg, batch);
    const auto build = [&] {
      builder.begin(dmat<const float>(dev_rows[0]->p, batch, vocab), dvec<const std::int32_t>(dev_roots.p, batch), vocab);
      for (index_t s = 0; s < depth; ++s)
        builder.expand(dmat<const float>(dev_rows[static_cast<std::size_t>(s + 1)]->p, batch * k, vocab));
      builder.finish({dmat<std::int32_t>(tokens.p, batch, total), dmat<std::int32_t>(parents.p, batch, total)});
    };
    if (profile_builder_batch > 0) {
      d.defer_faults(true);
      for (int i = 0; i < 3; ++i) build();
      return;
    }
    bool ok = true;
    std::vector<std::int32_t> want_tokens, want_parents;
    try {
      specdec::eagle2_tree_builder<host_backend> host(h, cfg, batch);
      host.begin(hmat<const float>(forwards[0].data(), batch, vocab), roots, vocab);
      for (index_t s = 0; s < depth; ++s)
        host.expand(hmat<const float>(forwards[static_cast<std::size_t>(s + 1)].data(), batch * k, vocab));
      for (const auto& r : host.finish()) {
        want_tokens.insert(want_tokens.end(), r.tree.token.begin(), r.tree.token.end());
        want_parents.insert(want_parents.end(), r.tree.parent.begin(), r.tree.parent.end());
      }
      build();
    } catch (const std::exception& e) {
      std::printf("EAGLE-2 build threw: %s\n", e.what());
      ok = false;
    }
    report(ok && tokens.get(n) == want_tokens && parents.get(n) == want_parents,
           "eagle2_batch_builder equals eagle2_tree_builder on thrust_backend<cpp> (batch " + std::to_string(batch) + ", k " +
               std::to_string(k) + ", depth " + std::to_string(depth) + ", V' " + std::to_string(vocab) + ")");
    if (quick || csv == nullptr) continue;
    d.defer_faults(true);
    time_call(d, stream, csv, "eagle2_build", batch, vocab, 30,
              "k " + std::to_string(k) + ", depth " + std::to_string(depth) + ", " + std::to_string(total) + " nodes", build);
    cuda_ok(cudaStreamSynchronize(stream), "builder timing");
    try {
      d.check_faults();
    } catch (const specdec::invalid_argument& e) {
      report(false, std::string("EAGLE-2 build timing faulted: ") + e.what());
    }
    d.defer_faults(false);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, timing_on = true;
  std::string csv_path = "gpu_check.csv";
  std::string profile_op;  // --profile OP ROWS V: run one timed operation a few times (for ncu) and exit
  std::string only;
  index_t profile_rows = 0, profile_cols = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    if (std::strcmp(argv[i], "--no-timing") == 0) timing_on = false;
    if (std::strcmp(argv[i], "--csv") == 0 && i + 1 < argc) csv_path = argv[++i];
    if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
    if (std::strcmp(argv[i], "--profile") == 0 && i + 3 < argc) {
      profile_op = argv[i + 1];
      profile_rows = std::atoll(argv[i + 2]);
      profile_cols = std::atoll(argv[i + 3]);
      i += 3;
    }
  }
  cudaDeviceProp prop{};
  cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::printf("device: %s, sm_%d%d, %d SMs, L2 %d MiB, %.1f GiB; driver API %d, runtime %d\n", prop.name, prop.major,
              prop.minor, prop.multiProcessorCount, prop.l2CacheSize >> 20, double(prop.totalGlobalMem) / (1 << 30),
              driver, runtime);
  cudaStream_t stream;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  device_backend d;
  d.set_stream(stream);
  host_backend h;

  const double read_gbps = quick || !profile_op.empty() ? 0.0 : measure_read_bandwidth(stream, prop.multiProcessorCount);
  const bool timing_only_some = !only.empty();
  if (timing_only_some) quick = true;  // the quick checks; the timing below still runs
  if (read_gbps > 0) std::printf("measured streaming read bandwidth: %.0f GB/s\n", read_gbps);

  // ---- correctness (skipped by --profile)
  if (profile_op.empty()) {
  const std::vector<index_t> all_rows = quick ? std::vector<index_t>{1, 8} : std::vector<index_t>{1, 8, 64};
  const std::vector<index_t> all_cols =
      quick ? std::vector<index_t>{32000, 151936} : std::vector<index_t>{32000, 128256, 151936, 262144};
  for (const index_t rows : all_rows)
    for (const index_t cols : all_cols) check_shape(d, h, rows, cols, cols, static_cast<std::uint32_t>(rows * 7 + cols));
  for (const index_t cols : {index_t(7), index_t(4097), index_t(32001)}) check_adversarial(d, h, cols, cols + 5);
  if (!quick) check_shape(d, h, 3, 128256, 128256 + 3, 11);  // a row stride that breaks 16-byte alignment
  check_grouped(d, h, quick);
  check_deferred(d);
  check_batch_verify(d, h, stream, true, nullptr);
  check_batch_builder(d, h, stream, true, nullptr);
  std::printf("correctness: %d checks, %d failed\n", checks, failures);
  }

  // ---- ops timed and counted
  struct outputs {
    dbuf<std::int32_t> idx{64 * 256};
    dbuf<float> val{64 * 256};
    dbuf<float> lse{64};
    dbuf<float> uni{64};
  };
  const std::vector<op> ops = {
      {"argmax", 1, 4, [](device_backend& b, const float* x, index_t r, index_t c, void* o) {
         auto* out = static_cast<outputs*>(o);
         b.row_argmax(dmat<const float>(x, r, c), dvec<std::int32_t>(out->idx.p, r));
       }},
      {"max", 1, 4, [](device_backend& b, const float* x, index_t r, index_t c, void* o) {
         b.row_max(dmat<const float>(x, r, c), dvec<float>(static_cast<outputs*>(o)->val.p, r));
       }},
      {"logsumexp", 1, 4, [](device_backend& b, const float* x, index_t r, index_t c, void* o) {
         b.row_logsumexp(dmat<const float>(x, r, c), 1.0f, dvec<float>(static_cast<outputs*>(o)->lse.p, r));
       }},
      {"topk8", 8, 4, [](device_backend& b, const float* x, index_t r, index_t c, void* o) {
         auto* out = static_cast<outputs*>(o);
         b.row_topk(dmat<const float>(x, r, c), 8, dmat<float>(out->val.p, r, 8), dmat<std::int32_t>(out->idx.p, r, 8));
       }},
      {"topk64", 64, 4, [](device_backend& b, const float* x, index_t r, index_t c, void* o) {
         auto* out = static_cast<outputs*>(o);
         b.row_topk(dmat<const float>(x, r, c), 64, dmat<float>(out->val.p, r, 64), dmat<std::int32_t>(out->idx.p, r, 64));
       }},
      {"topk256", 256, 4, [](device_backend& b, const float* x, index_t r, index_t c, void* o) {
         auto* out = static_cast<outputs*>(o);
         b.row_topk(dmat<const float>(x, r, c), 256, dmat<float>(out->val.p, r, 256), dmat<std::int32_t>(out->idx.p, r, 256));
       }},
      {"topk64_logsumexp", 64, 4, [](device_backend& b, const float* x, index_t r, index_t c, void* o) {
         auto* out = static_cast<outputs*>(o);
         b.row_topk_logsumexp(dmat<const float>(x, r, c), 64, 1.0f, dmat<float>(out->val.p, r, 64),
                              dmat<std::int32_t>(out->idx.p, r, 64), dvec<float>(out->lse.p, r));
       }},
      {"softmax", 1, 8, [](device_backend& b, const float* x, index_t r, index_t c, void*) {
         // in place: read and write the same rows (8 bytes per entry)
         b.row_softmax(dmat<const float>(x, r, c), 1.0f, dmat<float>(const_cast<float*>(x), r, c));
       }},
      {"log_softmax", 1, 8, [](device_backend& b, const float* x, index_t r, index_t c, void*) {
         b.row_log_softmax(dmat<const float>(x, r, c), 1.0f, dmat<float>(const_cast<float*>(x), r, c));
       }},
      {"sample", 1, 4, [](device_backend& b, const float* x, index_t r, index_t c, void* o) {
         auto* out = static_cast<outputs*>(o);
         b.row_sample(dmat<const float>(x, r, c), dvec<const float>(out->uni.p, r), dvec<std::int32_t>(out->idx.p, r));
       }},
      {"sample_residual", 1, 8, [](device_backend& b, const float* x, index_t r, index_t c, void* o) {
         auto* out = static_cast<outputs*>(o);
         b.row_sample_residual(dmat<const float>(x, r, c), dmat<const float>(x, r, c), dvec<const float>(out->uni.p, r),
                               dvec<std::int32_t>(out->idx.p, r));
       }},
  };

  if (profile_op == "eagle2_build") {
    profile_builder_batch = profile_rows;  // V' is the check's 32000
    check_batch_builder(d, h, stream, false, nullptr);
    cuda_ok(cudaStreamSynchronize(stream), "profile");
    return 0;
  }
  if (profile_op.rfind("verify_tree", 0) == 0) {
    profile_batch_verify(d, profile_op, profile_rows, profile_cols);
    cuda_ok(cudaStreamSynchronize(stream), "profile");
    return 0;
  }
  if (!profile_op.empty()) {
    outputs out;
    out.uni.put(std::vector<float>(64, 0.37f));
    const std::size_t n = static_cast<std::size_t>(profile_rows * profile_cols);
    dbuf<float> x(n);
    // Sampling reads probabilities (a uniform row); every other operation random logits, so that a
    // top-k profile sees the candidate counts real rows give.
    if (profile_op.rfind("sample", 0) == 0)
      x.put(std::vector<float>(n, 1.0f / static_cast<float>(profile_cols)));
    else
      x.put(random_logits(profile_rows, profile_cols, profile_cols, 5));
    d.defer_faults(true);
    for (const op& o : ops)
      if (profile_op == o.name)
        for (int i = 0; i < 3; ++i) o.call(d, x.p, profile_rows, profile_cols, &out);
    cuda_ok(cudaStreamSynchronize(stream), "profile");
    return 0;
  }

  // ---- CUDA graph: a sequence of primitives captured once, replayed, outputs equal to eager calls
  {
    const index_t rows = 8, cols = 128256;
    const std::vector<float> hx = random_logits(rows, cols, cols, 21);
    std::vector<float> probs(hx.size());
    h.row_softmax(hmat<const float>(hx.data(), rows, cols), 1.0f, hmat<float>(probs.data(), rows, cols));
    dbuf<float> dx(hx.size()), dp(probs.size()), du(rows);
    dx.put(hx);
    dp.put(probs);
    du.put(uniforms_for(rows, 4));
    dbuf<std::int32_t> a(rows), t(rows * 64), s(rows);
    dbuf<float> v(rows * 64);
    const auto sequence = [&] {
      d.row_argmax(dmat<const float>(dx.p, rows, cols), dvec<std::int32_t>(a.p, rows));
      d.row_topk(dmat<const float>(dx.p, rows, cols), 64, dmat<float>(v.p, rows, 64), dmat<std::int32_t>(t.p, rows, 64));
      d.row_sample(dmat<const float>(dp.p, rows, cols), dvec<const float>(du.p, rows), dvec<std::int32_t>(s.p, rows));
    };
    sequence();  // eager, and warms the scratch
    cuda_ok(cudaStreamSynchronize(stream), "eager");
    const auto ea = a.get(rows), et = t.get(rows * 64), es = s.get(rows);
    a.poison();
    t.poison();
    s.poison();
    cuda_ok(cudaStreamSynchronize(stream), "poison");
    d.defer_faults(true);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    bool ok = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
    try {
      sequence();
    } catch (const std::exception& e) {
      std::printf("capture threw: %s\n", e.what());
      ok = false;
    }
    ok = cudaStreamEndCapture(stream, &graph) == cudaSuccess && ok;
    ok = ok && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
    for (int i = 0; ok && i < 10; ++i) ok = cudaGraphLaunch(exec, stream) == cudaSuccess;
    ok = ok && cudaStreamSynchronize(stream) == cudaSuccess;
    d.check_faults();
    d.defer_faults(false);
    report(ok && a.get(rows) == ea && t.get(rows * 64) == et && s.get(rows) == es,
           "CUDA graph: argmax + top-64 + sample captured, replayed 10 times, outputs equal to eager calls");
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
  }

  if (timing_on && (!quick || timing_only_some)) {
    FILE* csv = std::fopen(csv_path.c_str(), "w");
    std::fprintf(csv, "impl,op,rows,V,median_us,p90_us,GBps,pct_read_bw,launches,syncs\n");
    std::printf("\n%-18s %5s %7s %10s %10s %8s %7s %8s %5s\n", "op", "rows", "V", "median_us", "p90_us", "GB/s", "%bw",
                "launches", "syncs");
    outputs out;
    std::vector<float> u(64, 0.37f);
    out.uni.put(u);
    d.defer_faults(true);  // the engine's mode: no synchronisation inside a call
    for (const index_t cols : {index_t(32000), index_t(128256), index_t(151936), index_t(262144)}) {
      for (const index_t rows : {index_t(1), index_t(8), index_t(64)}) {
        const std::size_t n = static_cast<std::size_t>(rows * cols);
        // Probability rows (valid for the samplers and harmless for the rest), rotated through > 4 x L2.
        std::vector<float> hx(n, 1.0f / static_cast<float>(cols));
        {
          std::mt19937 rng(static_cast<std::uint32_t>(cols + rows));
          std::uniform_real_distribution<float> jitter(0.5f, 1.5f);
          for (index_t r = 0; r < rows; ++r) {
            double sum = 0;
            for (index_t c = 0; c < cols; ++c) sum += hx[static_cast<std::size_t>(r * cols + c)] *= jitter(rng);
            for (index_t c = 0; c < cols; ++c) hx[static_cast<std::size_t>(r * cols + c)] = float(hx[static_cast<std::size_t>(r * cols + c)] / sum);
          }
        }
        const std::size_t pool_count =
            std::max<std::size_t>(3, (std::size_t(4) * static_cast<std::size_t>(prop.l2CacheSize)) / (n * sizeof(float)) + 1);
        std::vector<std::unique_ptr<dbuf<float>>> pool_bufs;
        std::vector<float*> pool;
        for (std::size_t i = 0; i < std::min<std::size_t>(pool_count, 4096); ++i) {
          pool_bufs.push_back(std::make_unique<dbuf<float>>(n));
          pool_bufs.back()->put(hx);
          pool.push_back(pool_bufs.back()->p);
        }
        for (const op& o : ops) {
          if (o.k > cols || std::string(o.name).rfind(only, 0) != 0) continue;
          // softmax writes its input: restore the pool afterwards for the samplers
          const timing t = time_op(d, o, rows, cols, pool, &out, stream, 60);
          const int launches = launches_per_call(d, o, pool[0], rows, cols, &out, stream);
          const double gbps = double(n) * o.bytes_per_entry / (t.median_us * 1e-6) / 1e9;
          std::printf("%-18s %5lld %7lld %10.2f %10.2f %8.0f %6.1f%% %8d %5d\n", o.name, static_cast<long long>(rows),
                      static_cast<long long>(cols), t.median_us, t.p90_us, gbps, 100.0 * gbps / read_gbps, launches,
                      launches >= 0 ? 0 : 1);
          std::fprintf(csv, "specdec,%s,%lld,%lld,%.3f,%.3f,%.1f,%.2f,%d,%d\n", o.name, static_cast<long long>(rows),
                       static_cast<long long>(cols), t.median_us, t.p90_us, gbps, 100.0 * gbps / read_gbps, launches,
                       launches >= 0 ? 0 : 1);
          if (std::strstr(o.name, "softmax") != nullptr)
            for (auto& b : pool_bufs) b->put(hx);
        }
        cuda_ok(cudaStreamSynchronize(stream), "timing");
        try {
          d.check_faults();
        } catch (const specdec::invalid_argument& e) {
          std::printf("timing inputs faulted: %s\n", e.what());
        }
      }
    }
    d.defer_faults(false);
    if (std::string("verify_tree").rfind(only, 0) == 0) check_batch_verify(d, h, stream, false, csv);
    if (std::string("eagle2_build").rfind(only, 0) == 0) check_batch_builder(d, h, stream, false, csv);
    std::fclose(csv);
    std::printf("read bandwidth: %.0f GB/s\n", read_gbps);
  }
  std::printf("gpu_check: %d checks, %d failed\n", checks, failures);
  cudaStreamDestroy(stream);
  return failures == 0 ? 0 : 1;
}
