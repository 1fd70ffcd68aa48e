// SPDX-License-Identifier: Apache-2.0
// The host-side distribution filters on random rows (NaN, +-inf, -0, denormals, unnormalised mass) and
// parameters in and out of range: FlashInfer's renormalisations (top-k, top-p and their joint order),
// top_k_mask_logits, vLLM's apply_top_k_top_p and apply_sampling_constraints. Each call throws
// specdec::invalid_argument or leaves a row that satisfies its definition: the largest entry is always
// kept, zero entries stay zero, renormalised rows sum to 1, logits are only kept or set to -inf, the
// joint order keeps exactly what top-k and top-p each keep on the row as given, and vLLM's batch form is
// its per-row form after the temperature.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include <specdec/interop/vllm.hpp>
#include <specdec/sampling/distribution.hpp>

#include "fuzz_input.hpp"

namespace {
using specdec::index_t;
constexpr float inf = std::numeric_limits<float>::infinity();

/// Whether the call threw specdec::invalid_argument (anything else escapes: a finding).
template <class F>
bool refused(F&& f) {
  try {
    f();
    return false;
  } catch (const specdec::invalid_argument&) {
    return true;
  }
}

/// A renormalised row: entries zero or the input's entry scaled by one factor, summing to 1, the
/// input's largest entry kept.
void check_renormalised(const std::vector<float>& in, const std::vector<float>& out, const char* what) {
  double sum = 0.0;
  std::size_t largest = 0;
  for (std::size_t j = 0; j < in.size(); ++j) {
    fuzz::require(out[j] >= 0.0f && out[j] <= 1.0f, what, static_cast<long long>(j));
    fuzz::require(in[j] > 0.0f || out[j] == 0.0f, "a zero entry became positive", static_cast<long long>(j));
    sum += out[j];
    if (in[j] > in[largest]) largest = j;
  }
  fuzz::require(std::fabs(sum - 1.0) <= 1e-5, "a renormalised row does not sum to 1");
  fuzz::require(out[largest] > 0.0f || in[largest] == 0.0f, "the largest entry was removed", static_cast<long long>(largest));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::input in(data, size);
  const index_t v = in.byte() < 230 ? in.range(1, 64) : in.range(1, 300);
  const int op = static_cast<int>(in.range(0, 4));
  const index_t k = in.byte() < 240 ? in.range(1, v) : in.range(-2, v + 2);
  const float p = in.byte() < 240 ? static_cast<float>(in.range(1, 1000)) / 1000.0f : in.value();
  std::vector<float> row(static_cast<std::size_t>(v));
  if (op <= 2) {  // probabilities: normalised weights, sometimes left as drawn
    double total = 0.0;
    for (float& x : row) total += x = in.weight();
    if (in.byte() < 230 && total > 0.0 && std::isfinite(total))
      for (float& x : row) x = static_cast<float>(x / total);
  } else {
    for (float& x : row) x = in.value();
  }
  std::vector<float> out = row;
  const auto view = [](std::vector<float>& r) { return specdec::matrix_view<float>(r.data(), 1, static_cast<index_t>(r.size())); };
  switch (op) {
    case 0:
      if (!refused([&] { specdec::sampling::top_k_renorm(view(out), k); })) check_renormalised(row, out, "top_k_renorm entry");
      break;
    case 1:
      if (!refused([&] { specdec::sampling::top_p_renorm(view(out), p); })) check_renormalised(row, out, "top_p_renorm entry");
      break;
    case 2: {
      if (refused([&] { specdec::sampling::top_k_top_p_joint_renorm(view(out), k, p); })) break;
      check_renormalised(row, out, "joint entry");
      std::vector<float> by_k = row, by_p = row;
      specdec::sampling::top_k_renorm(view(by_k), k);
      specdec::sampling::top_p_renorm(view(by_p), p);
      for (std::size_t j = 0; j < row.size(); ++j)
        fuzz::require((out[j] > 0.0f) == (by_k[j] > 0.0f && by_p[j] > 0.0f), "joint keeps other than top-k and top-p both",
                      static_cast<long long>(j));
      break;
    }
    case 3: {
      // vLLM's per-row filter, then its batch form: two requests with this row at temperatures t1, t2.
      if (refused([&] { specdec::vllm::apply_top_k_top_p(out, k, p); })) break;
      // vLLM keeps one of the largest logits (among ties, the last in its ascending order: the highest index).
      const float top = *std::max_element(row.begin(), row.end());
      for (std::size_t j = 0; j < row.size(); ++j)
        fuzz::require(out[j] == row[j] || out[j] == -inf, "an entry changed other than to -inf", static_cast<long long>(j));
      fuzz::require(top == -inf || std::find(out.begin(), out.end(), top) != out.end(), "every largest logit was removed");
      const float t = in.byte() < 200 ? static_cast<float>(in.range(1, 40)) / 10.0f : in.value();
      std::vector<float> batch(row);
      batch.insert(batch.end(), row.begin(), row.end());
      const std::vector<std::int64_t> cu = {1, 2}, ks = {k, k};
      const std::vector<float> temperature = {t, specdec::vllm::greedy_temperature}, ps = {p, p};
      if (refused([&] {
            specdec::vllm::apply_sampling_constraints(specdec::matrix_view<float>(batch.data(), 2, v), cu, temperature, ks, ps);
          }))
        break;
      std::vector<float> scaled = row;
      for (float& x : scaled) x /= specdec::vllm::is_greedy_temperature(t) ? 1.0f : t;
      specdec::vllm::apply_top_k_top_p(scaled, k, p);
      for (std::size_t j = 0; j < row.size(); ++j) {
        fuzz::require(batch[j] == scaled[j] || (std::isnan(batch[j]) && std::isnan(scaled[j])), "the batch form differs at its temperature",
                      static_cast<long long>(j));
        fuzz::require(batch[row.size() + j] == out[j], "a greedy request's row differs from temperature 1", static_cast<long long>(j));
      }
      break;
    }
    default: {
      if (refused([&] { specdec::sampling::top_k_mask_logits(view(out), k); })) break;
      std::vector<float> sorted = row;
      std::sort(sorted.begin(), sorted.end(), std::greater<float>());
      const float kth = sorted[static_cast<std::size_t>(k - 1)];
      for (std::size_t j = 0; j < row.size(); ++j)
        fuzz::require(out[j] == (row[j] < kth ? -inf : row[j]), "top_k_mask_logits kept other than the k largest and ties",
                      static_cast<long long>(j));
    }
  }
  return 0;
}
