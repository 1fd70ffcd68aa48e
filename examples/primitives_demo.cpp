// SPDX-License-Identifier: Apache-2.0
// The primitives on a realistic problem: a batch of 8 rows of Llama-3-sized logits (V = 128256),
// run on every backend this build has, printing what each computed, whether the backends agree,
// and how long each call took. `--quick` runs a smaller problem (used by the test script).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/backend/thrust.hpp>
#include <specdec/specdec.hpp>

namespace {

using specdec::index_t;

struct results {
  std::vector<std::int32_t> argmax, topk, sampled, residual;
  std::vector<float> topk_logprobs, lse;
};

template <class F>
double milliseconds(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

template <class Backend>
results run(const char* name, const std::vector<float>& logits, const std::vector<float>& draft_logits, index_t rows,
            index_t vocab, index_t k) {
  Backend b;
  using S = typename Backend::memory_space;
  auto x = b.upload(std::span<const float>(logits));
  auto d = b.upload(std::span<const float>(draft_logits));
  auto p = b.template allocate<float>(rows * vocab);
  auto q = b.template allocate<float>(rows * vocab);
  auto argmax = b.template allocate<std::int32_t>(rows);
  auto top_values = b.template allocate<float>(rows * k);
  auto top_ids = b.template allocate<std::int32_t>(rows * k);
  auto lse = b.template allocate<float>(rows);
  auto tokens = b.template allocate<std::int32_t>(rows);
  auto residual_tokens = b.template allocate<std::int32_t>(rows);
  std::vector<float> host_uniforms(static_cast<std::size_t>(rows));
  specdec::philox_stream{42, 0}.fill_uniforms(0, host_uniforms.size(), host_uniforms.begin());
  auto uniforms = b.upload(std::span<const float>(host_uniforms));
  const specdec::vector_view<const float, S> u(uniforms.view());

  std::printf("%-14s", name);
  std::printf(" argmax %6.2f ms |", milliseconds([&] { b.row_argmax(x.matrix(rows, vocab), argmax.view()); }));
  std::printf(" top-%lld+lse %6.2f ms |", static_cast<long long>(k), milliseconds([&] {
                b.row_topk_logsumexp(x.matrix(rows, vocab), k, 1.0f, top_values.matrix(rows, k), top_ids.matrix(rows, k),
                                     lse.view());
              }));
  std::printf(" softmax %6.2f ms |", milliseconds([&] {
                b.row_softmax(x.matrix(rows, vocab), 0.8f, p.matrix(rows, vocab));
                b.row_softmax(d.matrix(rows, vocab), 0.8f, q.matrix(rows, vocab));
              }) / 2);
  std::printf(" sample %6.2f ms |", milliseconds([&] { b.row_sample(p.matrix(rows, vocab), u, tokens.view()); }));
  std::printf(" residual %6.2f ms\n", milliseconds([&] {
                b.row_sample_residual(p.matrix(rows, vocab), q.matrix(rows, vocab), u, residual_tokens.view());
              }));
  return {b.download(argmax.view()), b.download(top_ids.view()), b.download(tokens.view()),
          b.download(residual_tokens.view()), b.download(top_values.view()), b.download(lse.view())};
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const index_t rows = 8, vocab = quick ? 4096 : 128256, k = 5;
  // Target logits with a few strong tokens per row; the draft sees a perturbed copy.
  std::vector<float> logits(static_cast<std::size_t>(rows * vocab)), draft(logits.size());
  const specdec::philox_stream noise{7, 0};
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const float u = noise.uniform(2 * i), v = noise.uniform(2 * i + 1);
    logits[i] = 6.0f * u * u * u * u - 3.0f;  // a heavy top: most mass on a few hundred tokens
    draft[i] = logits[i] + 0.5f * (v - 0.5f);
  }
  std::printf("specdec %d.%d.%d primitives demo: %lld rows x V = %lld (%.1f MiB of fp32 logits)\n\n",
              SPECDEC_VERSION_MAJOR, SPECDEC_VERSION_MINOR, SPECDEC_VERSION_PATCH, static_cast<long long>(rows),
              static_cast<long long>(vocab), static_cast<double>(logits.size() * 4) / (1 << 20));

  std::vector<std::pair<std::string, results>> all;
  all.emplace_back("eigen", run<specdec::eigen>("eigen", logits, draft, rows, vocab, k));
  all.emplace_back("thrust_backend<cpp>", run<specdec::thrust_backend<specdec::thrust_system::cpp>>("thrust_backend<cpp>", logits, draft, rows, vocab, k));
#if defined(_OPENMP)
  all.emplace_back("thrust_backend<omp>", run<specdec::thrust_backend<specdec::thrust_system::omp>>("thrust_backend<omp>", logits, draft, rows, vocab, k));
#endif

  const results& r = all.front().second;
  std::printf("\nrow  argmax  top-%lld (token: log-prob)                                   lse     sampled  residual\n",
              static_cast<long long>(k));
  for (index_t i = 0; i < rows; ++i) {
    std::printf("%3lld  %6d ", static_cast<long long>(i), r.argmax[static_cast<std::size_t>(i)]);
    for (index_t j = 0; j < k; ++j)
      std::printf(" %6d:%6.3f", r.topk[static_cast<std::size_t>(i * k + j)], r.topk_logprobs[static_cast<std::size_t>(i * k + j)]);
    std::printf("  %7.3f  %7d  %8d\n", r.lse[static_cast<std::size_t>(i)], r.sampled[static_cast<std::size_t>(i)],
                r.residual[static_cast<std::size_t>(i)]);
  }
  bool agree = true;
  for (const auto& [name, other] : all) {
    const bool same = other.argmax == r.argmax && other.topk == r.topk && other.sampled == r.sampled &&
                      other.residual == r.residual;
    std::printf("%s %s the token ids of eigen\n", name.c_str(), same ? "matches" : "DIFFERS FROM");
    agree = agree && same;
  }
  return agree ? 0 : 1;
}
