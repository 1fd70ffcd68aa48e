// SPDX-License-Identifier: Apache-2.0
// SuffixDecoding's suffix tree (tree/suffix.hpp) on one CPU core, beside Arctic Inference 0.3.0's own
// C++ SuffixTree (the code specdec reproduces bit for bit) on the same token sequences, in the same
// process, each timed call paired with the reference's (alternating which goes first, so that the
// VM's drift over seconds falls on both): `specdec_ns` and `arctic_ns` per token or per call, and
// `x_arctic` = specdec's time / Arctic's. Arctic's rows need -DSPECDEC_SUFFIX_ORACLE_DIR=<its
// csrc/suffix_decoding> (scripts/fetch_suffix_oracle.sh extracts it); without it, specdec's alone.
//
// Data: (a) random tokens over a 32000-token vocabulary; (b) text: the words and punctuation of the
// repository's docs/*.md, then of include/specdec/**/*.hpp (ids by first use), read at run time.
// Trees of max_depth 24 (vLLM's default) and 64:
//   - append_fresh: extend of one 4096-token sequence into an empty tree (ns per token);
//   - append_loaded: the same extend into a tree already holding 25 sequences of 4096 tokens
//     (102400), the sequence removed again untimed (ns per token);
//   - speculate_path / speculate_tree: speculate on that loaded tree (max_spec_tokens 24, factor 1,
//     min_token_prob 0.1: specdec's defaults, Arctic's) for contexts of max_depth tokens ending at
//     random positions of the data, half inside the stored sequences, half in text after them (ns
//     per call). Both libraries' drafts are compared first, bit for bit.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <specdec/tree/suffix.hpp>

#if defined(SPECDEC_BENCH_ARCTIC)
#include "suffix_tree.h"  // Arctic Inference's SuffixTree (SPECDEC_SUFFIX_ORACLE_DIR), compiled apart
#endif

namespace {

using specdec::index_t;
using tokens_t = std::vector<std::int32_t>;

constexpr std::size_t sequence_length = 4096;
constexpr std::size_t loaded_sequences = 25;  // 102400 tokens
constexpr std::size_t loaded_tokens = loaded_sequences * sequence_length;
constexpr std::size_t contexts_per_iteration = 256;
constexpr std::size_t context_pool = 4096;

enum data_kind { random_kind = 0, text_kind = 1 };
const char* const data_names[] = {"random", "text"};

tokens_t make_random() {
  std::mt19937 rng(20251125);
  std::uniform_int_distribution<std::int32_t> token(0, 31999);
  tokens_t out(2 * loaded_tokens + sequence_length);
  for (auto& t : out) t = token(rng);
  return out;
}

/// Words (letters, digits, '_' and non-ASCII bytes) and single punctuation marks, ids by first use.
void tokenize(const std::string& text, std::unordered_map<std::string, std::int32_t>& ids, tokens_t& out) {
  const auto word = [](unsigned char c) { return std::isalnum(c) != 0 || c == '_' || c >= 0x80; };
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (std::isspace(c) != 0) {
      ++i;
      continue;
    }
    std::size_t j = i + 1;
    if (word(c))
      while (j < text.size() && word(static_cast<unsigned char>(text[j]))) ++j;
    const auto id = ids.emplace(text.substr(i, j - i), static_cast<std::int32_t>(ids.size())).first->second;
    out.push_back(id);
    i = j;
  }
}

tokens_t make_text() {
  namespace fs = std::filesystem;
  const fs::path root = SPECDEC_SOURCE_DIR;
  std::vector<fs::path> docs, headers;
  for (const auto& e : fs::directory_iterator(root / "docs"))
    if (e.path().extension() == ".md") docs.push_back(e.path());
  for (const auto& e : fs::recursive_directory_iterator(root / "include" / "specdec"))
    if (e.path().extension() == ".hpp") headers.push_back(e.path());
  std::sort(docs.begin(), docs.end());
  std::sort(headers.begin(), headers.end());
  docs.insert(docs.end(), headers.begin(), headers.end());
  std::unordered_map<std::string, std::int32_t> ids;
  tokens_t out;
  for (const auto& path : docs) {
    std::ifstream file(path, std::ios::binary);
    std::stringstream text;
    text << file.rdbuf();
    tokenize(text.str(), ids, out);
  }
  return out;
}

const tokens_t& data(int kind) {
  static const tokens_t random = make_random();
  static const tokens_t text = make_text();
  return kind == random_kind ? random : text;
}

std::span<const std::int32_t> stored_sequence(const tokens_t& d, std::size_t k) {
  return std::span<const std::int32_t>(d).subspan(k * sequence_length, sequence_length);
}
/// The sequence the append benchmarks extend: the one after the stored ones.
std::span<const std::int32_t> new_sequence(const tokens_t& d) { return stored_sequence(d, loaded_sequences); }

const specdec::suffix_options path_options{24, 1.0f, 0.0f, 0.1f, false};
const specdec::suffix_options tree_options{24, 1.0f, 0.0f, 0.1f, true};

/// The loaded trees of one (data, depth), built once and shared by the benchmarks.
struct loaded {
  specdec::suffix_tree<std::int32_t> ours;
#if defined(SPECDEC_BENCH_ARCTIC)
  SuffixTree theirs;
#endif
  std::vector<tokens_t> contexts;

  loaded(int kind, index_t depth)
      : ours(depth)
#if defined(SPECDEC_BENCH_ARCTIC)
        , theirs(static_cast<int>(depth))
#endif
  {
    const tokens_t& d = data(kind);
    for (std::size_t k = 0; k < loaded_sequences; ++k) {
      ours.extend(static_cast<std::int32_t>(k), stored_sequence(d, k));
#if defined(SPECDEC_BENCH_ARCTIC)
      theirs.extend(static_cast<int>(k), stored_sequence(d, k));
#endif
    }
    // Contexts of max_depth tokens, half ending inside the stored sequences, half in the text after
    // the appended sequence (drafts then come from earlier "requests").
    std::mt19937 rng(7);
    const auto n = static_cast<std::size_t>(depth);
    const std::size_t held_out = loaded_tokens + sequence_length;
    std::uniform_int_distribution<std::size_t> inside(n, loaded_tokens), after(held_out + n, d.size());
    for (std::size_t i = 0; i < context_pool; ++i) {
      const std::size_t end = i % 2 == 0 ? inside(rng) : after(rng);
      contexts.emplace_back(d.begin() + static_cast<std::ptrdiff_t>(end - n), d.begin() + static_cast<std::ptrdiff_t>(end));
    }
  }
};

loaded& fixture(int kind, index_t depth) {
  static std::map<std::pair<int, index_t>, std::unique_ptr<loaded>> made;
  auto& slot = made[{kind, depth}];
  if (!slot) slot = std::make_unique<loaded>(kind, depth);
  return *slot;
}

template <class F>
double seconds(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Sums of paired times; the iteration's (manual) time is specdec's.
struct paired {
  double ours = 0.0, theirs = 0.0;
  void report(benchmark::State& state, double units_per_iteration, const char* unit) const {
    const double units = units_per_iteration * static_cast<double>(state.iterations());
    state.counters[std::string("specdec_ns/") + unit] = ours / units * 1e9;
#if defined(SPECDEC_BENCH_ARCTIC)
    state.counters[std::string("arctic_ns/") + unit] = theirs / units * 1e9;
    state.counters["x_arctic"] = ours / theirs;
#endif
  }
};

void BM_append_fresh(benchmark::State& state, int kind, index_t depth) {
  const auto seq = new_sequence(data(kind));
  paired p;
  bool ours_first = true;
  for (auto _ : state) {
    auto ours = std::make_unique<specdec::suffix_tree<std::int32_t>>(depth);
    double t = 0.0;
#if defined(SPECDEC_BENCH_ARCTIC)
    auto theirs = std::make_unique<SuffixTree>(static_cast<int>(depth));
    const auto run_theirs = [&] { p.theirs += seconds([&] { theirs->extend(0, seq); }); };
    if (!ours_first) run_theirs();
#endif
    t = seconds([&] { ours->extend(0, seq); });
#if defined(SPECDEC_BENCH_ARCTIC)
    if (ours_first) run_theirs();
#endif
    p.ours += t;
    ours_first = !ours_first;
    state.SetIterationTime(t);
  }
  p.report(state, static_cast<double>(seq.size()), "token");
}

void BM_append_loaded(benchmark::State& state, int kind, index_t depth) {
  loaded& f = fixture(kind, depth);
  const auto seq = new_sequence(data(kind));
  const auto id = static_cast<std::int32_t>(loaded_sequences);
  paired p;
  bool ours_first = true;
  for (auto _ : state) {
#if defined(SPECDEC_BENCH_ARCTIC)
    const auto run_theirs = [&] {
      p.theirs += seconds([&] { f.theirs.extend(id, seq); });
      f.theirs.remove(id);
    };
    if (!ours_first) run_theirs();
#endif
    const double t = seconds([&] { f.ours.extend(id, seq); });
    f.ours.remove(id);
#if defined(SPECDEC_BENCH_ARCTIC)
    if (ours_first) run_theirs();
#endif
    p.ours += t;
    ours_first = !ours_first;
    state.SetIterationTime(t);
  }
  p.report(state, static_cast<double>(seq.size()), "token");
}

#if defined(SPECDEC_BENCH_ARCTIC)
bool same(const specdec::suffix_draft<std::int32_t>& a, const Draft& b) {
  if (a.token != b.token_ids || a.parent != b.parents || a.match_length != b.match_len || a.prob.size() != b.probs.size() ||
      std::bit_cast<std::uint32_t>(a.score) != std::bit_cast<std::uint32_t>(b.score))
    return false;
  for (std::size_t i = 0; i < a.prob.size(); ++i)
    if (std::bit_cast<std::uint32_t>(a.prob[i]) != std::bit_cast<std::uint32_t>(b.probs[i])) return false;
  return true;
}

Draft arctic_speculate(SuffixTree& t, std::span<const std::int32_t> context, const specdec::suffix_options& o) {
  return t.speculate(context, static_cast<int>(o.max_spec_tokens), o.max_spec_factor, o.max_spec_offset, o.min_token_prob,
                     o.tree);
}
#endif

void BM_speculate(benchmark::State& state, int kind, index_t depth, bool tree) {
  loaded& f = fixture(kind, depth);
  const specdec::suffix_options& o = tree ? tree_options : path_options;
  double drafted = 0.0;
  for (const auto& c : f.contexts) drafted += static_cast<double>(f.ours.speculate(c, o).size());
#if defined(SPECDEC_BENCH_ARCTIC)
  for (const auto& c : f.contexts)
    if (!same(f.ours.speculate(c, o), arctic_speculate(f.theirs, c, o))) {
      state.SkipWithError("specdec's draft differs from Arctic Inference's");
      return;
    }
#endif
  paired p;
  bool ours_first = true;
  std::size_t next = 0;
  for (auto _ : state) {
    const std::size_t from = next;
    next = (next + contexts_per_iteration) % context_pool;
#if defined(SPECDEC_BENCH_ARCTIC)
    const auto run_theirs = [&] {
      p.theirs += seconds([&] {
        for (std::size_t i = 0; i < contexts_per_iteration; ++i)
          benchmark::DoNotOptimize(arctic_speculate(f.theirs, f.contexts[from + i], o));
      });
    };
    if (!ours_first) run_theirs();
#endif
    const double t = seconds([&] {
      for (std::size_t i = 0; i < contexts_per_iteration; ++i) benchmark::DoNotOptimize(f.ours.speculate(f.contexts[from + i], o));
    });
#if defined(SPECDEC_BENCH_ARCTIC)
    if (ours_first) run_theirs();
#endif
    p.ours += t;
    ours_first = !ours_first;
    state.SetIterationTime(t);
  }
  p.report(state, static_cast<double>(contexts_per_iteration), "call");
  state.counters["draft_tokens"] = drafted / static_cast<double>(context_pool);
}

}  // namespace

int main(int argc, char** argv) {
  for (const int kind : {random_kind, text_kind})
    for (const index_t depth : {index_t{24}, index_t{64}}) {
      const std::string tail = std::string("/") + data_names[kind] + "/depth:" + std::to_string(depth);
      benchmark::RegisterBenchmark(("suffix_append_fresh" + tail).c_str(), BM_append_fresh, kind, depth)->UseManualTime();
      benchmark::RegisterBenchmark(("suffix_append_loaded" + tail).c_str(), BM_append_loaded, kind, depth)->UseManualTime();
      benchmark::RegisterBenchmark(("suffix_speculate_path" + tail).c_str(), BM_speculate, kind, depth, false)->UseManualTime();
      benchmark::RegisterBenchmark(("suffix_speculate_tree" + tail).c_str(), BM_speculate, kind, depth, true)->UseManualTime();
    }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
