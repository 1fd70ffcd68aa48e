// SPDX-License-Identifier: Apache-2.0
// Drafter blocks at the papers' sizes on one CPU core (Eigen backend):
//   - MoA (Table 6 of the paper: target L = 32, E = 4096, target K/V 1024 wide): the key/value stream
//     of newly verified tokens (pack, Layer Self-Attention 2048 wide with MLP 6144, mean, Ekv2E), the
//     self-attention layer (K/V 512, MLP 512) and the cross-attention layer (K/V 1024, MLP 7168),
//   - the EAGLE draft layer and Jakiro's MoE draft layer at Llama-2-7B width (E 4096, 32 heads of 128,
//     MLP 11008; Jakiro: two experts of 4096),
// for T new tokens over a cache of 256 earlier ones. Each case reports GFLOP/s (its GEMMs plus its
// attention) and `vs_gemm`, the ratio of that to the throughput of Eigen's plain GEMM over the same
// GEMM shapes, measured just before in the same process (`gemm` rows). The blocks' extra work (norms,
// RoPE, attention, gathers, scratch) is what pulls vs_gemm below 1.
//
// Weights are views into one pool of small pseudo-random floats, so the cases share memory instead of
// each initialising a gigabyte; every weight matrix is distinct within a case, and a case's weights
// are far larger than the LLC.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <specdec/backend/eigen.hpp>  // Eigen/Core, included under GCC 12's AVX-512 workaround
#include <specdec/blocks/eagle.hpp>
#include <specdec/blocks/moa.hpp>
#include <specdec/blocks/moe.hpp>

namespace {

using specdec::index_t;
namespace blocks = specdec::blocks;
using space = specdec::host_space;

constexpr index_t cached_tokens = 256;

/// Weights carved in order from one shared pool.
class weight_pool {
 public:
  static weight_pool& instance() {
    static weight_pool pool(std::size_t(240) << 20);
    return pool;
  }
  void rewind() { used_ = 0; }
  specdec::matrix_view<const float> matrix(index_t rows, index_t cols) {
    const auto n = static_cast<std::size_t>(rows * cols);
    if (used_ + n > data_.size()) throw std::runtime_error("bench_blocks: weight pool exhausted");
    const float* p = data_.data() + used_;
    used_ += n;
    return {p, rows, cols};
  }
  specdec::vector_view<const float> vector(index_t n) { return {matrix(1, n).data(), n}; }
  blocks::linear<space> linear(index_t out, index_t in, bool bias = false) {
    return {matrix(out, in), bias ? vector(out) : specdec::vector_view<const float>{}};
  }
  blocks::layer_weights<space> layer(const blocks::layer_config& c, bool with_mlp = true) {
    const auto& a = c.attention;
    blocks::layer_weights<space> w;
    if (c.input_norm) w.input_norm = vector(a.hidden);
    w.post_norm = vector(a.hidden);
    w.attention = {linear(a.heads * a.head_dim, a.hidden), linear(a.kv_heads * a.head_dim, a.hidden),
                   linear(a.kv_heads * a.head_dim, a.hidden), linear(a.hidden, a.heads * a.head_dim)};
    if (with_mlp) w.mlp = mlp(a.hidden, c.intermediate);
    return w;
  }
  blocks::mlp_weights<space> mlp(index_t hidden, index_t intermediate) {
    return {linear(intermediate, hidden), linear(intermediate, hidden), linear(hidden, intermediate)};
  }

 private:
  explicit weight_pool(std::size_t n) : data_(n) {
    // Small values keep every activation finite and away from denormals; norm weights drawn from the
    // same pool are small too, which only scales activations.
    std::uint32_t s = 12345;
    for (auto& x : data_) {
      s = s * 1664525u + 1013904223u;
      x = (static_cast<float>(s >> 8) * (1.0f / 16777216.0f) - 0.5f) * 0.05f;
    }
  }
  std::vector<float> data_;
  std::size_t used_ = 0;
};

/// One GEMM a block performs: [m x k] times [k x n].
struct gemm_shape {
  index_t m, n, k;
};
double flops_of(const std::vector<gemm_shape>& gemms) {
  double f = 0;
  for (const auto& g : gemms) f += 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
  return f;
}
void add_layer_gemms(std::vector<gemm_shape>& out, const blocks::layer_config& c, index_t rows, bool with_mlp = true) {
  const auto& a = c.attention;
  out.push_back({rows, a.heads * a.head_dim, a.hidden});
  out.push_back({rows, a.kv_heads * a.head_dim, a.hidden});
  out.push_back({rows, a.kv_heads * a.head_dim, a.hidden});
  out.push_back({rows, a.hidden, a.heads * a.head_dim});
  if (with_mlp) {
    out.push_back({rows, c.intermediate, a.hidden});
    out.push_back({rows, c.intermediate, a.hidden});
    out.push_back({rows, a.hidden, c.intermediate});
  }
}
double attention_flops(const blocks::layer_config& c, index_t queries, index_t keys) {
  return 4.0 * static_cast<double>(queries) * static_cast<double>(keys) * static_cast<double>(c.attention.heads * c.attention.head_dim);
}

blocks::layer_config llama_layer(index_t hidden, index_t heads, index_t kv_heads, index_t head_dim, index_t intermediate,
                                 bool input_norm = true) {
  return {{hidden, heads, kv_heads, head_dim, 10000.0, true}, intermediate, 1e-5f, input_norm};
}

// MoA Table 6: target L = 32, E = 4096, target K/V 1024 = 8 heads of 128.
const blocks::moa::config moa_config{llama_layer(2048, 32, 16, 64, 6144), llama_layer(4096, 32, 4, 128, 512),
                                     llama_layer(4096, 32, 8, 128, 7168), 32, 128};
// Llama-2-7B width.
const blocks::layer_config llama2_7b = llama_layer(4096, 32, 32, 128, 11008, false);
const blocks::moe::config jakiro_moe{4096, 2, 4096, blocks::moe::routing::jakiro_two_experts};

enum block_kind : int { moa_kv_stream, moa_self_attention, moa_cross_attention, eagle_layer, jakiro_layer };
const char* const block_names[] = {"moa_kv_stream", "moa_self_attention", "moa_cross_attention", "eagle_layer",
                                   "jakiro_layer"};

std::vector<gemm_shape> gemms_of(block_kind kind, index_t t) {
  std::vector<gemm_shape> g;
  switch (kind) {
    case moa_kv_stream:
      add_layer_gemms(g, moa_config.layer_self_attention, t * moa_config.target_layers);
      g.push_back({t, moa_config.hidden(), moa_config.kv_width()});
      break;
    case moa_self_attention: add_layer_gemms(g, moa_config.self_attention, t); break;
    case moa_cross_attention: add_layer_gemms(g, moa_config.cross_attention, t); break;
    case eagle_layer:
    case jakiro_layer:
      g.push_back({t, 4096, 4096});  // fc over [embedding; feature], as two halves
      g.push_back({t, 4096, 4096});
      add_layer_gemms(g, llama2_7b, t, kind == eagle_layer);
      if (kind == jakiro_layer) {
        g.push_back({t, jakiro_moe.router_outputs(), 4096});
        for (int e = 0; e < 2; ++e) {
          g.push_back({t, jakiro_moe.expert_intermediate, 4096});
          g.push_back({t, jakiro_moe.expert_intermediate, 4096});
          g.push_back({t, 4096, jakiro_moe.expert_intermediate});
        }
      }
      break;
  }
  return g;
}

double block_flops(block_kind kind, index_t t) {
  double f = flops_of(gemms_of(kind, t));
  switch (kind) {
    case moa_kv_stream: f += attention_flops(moa_config.layer_self_attention, t * 32, 32); break;
    case moa_self_attention: f += attention_flops(moa_config.self_attention, t, cached_tokens + t); break;
    case moa_cross_attention: f += attention_flops(moa_config.cross_attention, t, cached_tokens); break;
    case eagle_layer:
    case jakiro_layer: f += attention_flops(llama2_7b, t, cached_tokens + t); break;
  }
  return f;
}

std::map<std::pair<int, index_t>, double> gemm_flops_per_second;

using row_major = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// The same GEMMs as the block, each `Y = X W^T` with Eigen on its own weights: the throughput the
/// block's linear algebra could reach.
void BM_gemm(benchmark::State& state) {
  const auto kind = static_cast<block_kind>(state.range(0));
  const index_t t = state.range(1);
  auto& pool = weight_pool::instance();
  pool.rewind();
  const auto shapes = gemms_of(kind, t);
  std::vector<specdec::matrix_view<const float>> weights;
  std::vector<row_major> inputs, outputs;
  for (const auto& g : shapes) {
    weights.push_back(pool.matrix(g.n, g.k));
    inputs.push_back(row_major::Constant(g.m, g.k, 0.01f));
    outputs.emplace_back(g.m, g.n);
  }
  double seconds = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      const Eigen::Map<const row_major> w(weights[i].data(), weights[i].rows(), weights[i].cols());
      outputs[i].noalias() = inputs[i] * w.transpose();
    }
    benchmark::DoNotOptimize(outputs.back().data());
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  const double flops = flops_of(shapes);
  gemm_flops_per_second[{kind, t}] = flops * static_cast<double>(state.iterations()) / seconds;
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_block(benchmark::State& state) {
  const auto kind = static_cast<block_kind>(state.range(0));
  const index_t t = state.range(1);
  auto& pool = weight_pool::instance();
  pool.rewind();
  specdec::eigen b;
  const index_t e = 4096;
  const auto fill = [&](specdec::matrix_view<float> m) {
    const auto src = pool.matrix(m.rows(), m.cols());  // any small values
    std::copy(src.data(), src.data() + m.rows() * m.cols(), m.data());
  };
  std::vector<std::int64_t> positions(static_cast<std::size_t>(t));
  for (index_t i = 0; i < t; ++i) positions[static_cast<std::size_t>(i)] = cached_tokens + i;
  const specdec::vector_view<const std::int64_t> pos(positions.data(), t);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(t), 7);
  const specdec::vector_view<const std::int32_t> token_view(tokens.data(), t);
  auto x = b.allocate<float>(t * e), feature = b.allocate<float>(t * e), out = b.allocate<float>(t * e);
  fill(feature.matrix(t, e));

  std::function<void()> run;
  // State kept alive across iterations.
  std::vector<specdec::matrix_view<const float>> keys, values;
  std::unique_ptr<blocks::kv_cache<specdec::eigen>> cache;
  blocks::moa::weights<space> moa_weights;
  blocks::eagle::weights<space> eagle_weights;
  blocks::moe::weights<space> moe_weights;
  std::vector<std::int64_t> source_positions(cached_tokens);
  for (index_t i = 0; i < cached_tokens; ++i) source_positions[static_cast<std::size_t>(i)] = i;
  const auto make_cache = [&](const blocks::layer_config& c) {
    cache = std::make_unique<blocks::kv_cache<specdec::eigen>>(b, cached_tokens + t, c.attention.kv_heads * c.attention.head_dim);
    auto rows = cache->extend(cached_tokens);
    fill(rows.first);
    fill(rows.second);
  };
  switch (kind) {
    case moa_kv_stream: {
      moa_weights.layer_self_attention = pool.layer(moa_config.layer_self_attention);
      moa_weights.ekv2e = pool.linear(moa_config.hidden(), moa_config.kv_width(), true);
      for (index_t l = 0; l < moa_config.target_layers; ++l) {
        keys.push_back(pool.matrix(t, 1024));
        values.push_back(pool.matrix(t, 1024));
      }
      run = [&] { blocks::moa::key_value_stream(b, moa_config, moa_weights, keys, values, 0, t, out.matrix(t, e)); };
      break;
    }
    case moa_self_attention: {
      moa_weights.self_attention = pool.layer(moa_config.self_attention);
      make_cache(moa_config.self_attention);
      run = [&] {
        cache->crop(cached_tokens);
        fill(x.matrix(t, e));
        blocks::decoder_layer_forward(b, moa_config.self_attention, moa_weights.self_attention, x.matrix(t, e), pos, cache.get());
      };
      break;
    }
    case moa_cross_attention: {
      moa_weights.cross_attention = pool.layer(moa_config.cross_attention);
      make_cache(moa_config.cross_attention);
      run = [&] {
        fill(x.matrix(t, e));
        blocks::moa::cross_attention(b, moa_config.cross_attention, moa_weights.cross_attention, x.matrix(t, e), pos,
                                     specdec::matrix_view<const float>(nullptr, 0, e), specdec::vector_view<const std::int64_t>(),
                                     cache.get(), blocks::attention_mask<space>::none());
      };
      break;
    }
    case eagle_layer:
    case jakiro_layer: {
      eagle_weights.embed = pool.matrix(64, e);
      eagle_weights.fc = pool.linear(e, 2 * e, true);
      eagle_weights.layer = pool.layer(llama2_7b, kind == eagle_layer);
      make_cache(llama2_7b);
      if (kind == eagle_layer) {
        run = [&] {
          cache->crop(cached_tokens);
          blocks::eagle::forward(b, llama2_7b, eagle_weights, token_view, specdec::matrix_view<const float>(feature.view().data(), t, e), pos, cache.get(),
                                 {}, out.matrix(t, e));
        };
      } else {
        moe_weights.gate = pool.linear(jakiro_moe.router_outputs(), e);
        for (int i = 0; i < 2; ++i) moe_weights.experts.push_back(pool.mlp(e, jakiro_moe.expert_intermediate));
        run = [&] {
          cache->crop(cached_tokens);
          blocks::moe::draft_layer_forward(b, llama2_7b, eagle_weights, jakiro_moe, moe_weights, token_view,
                                           specdec::matrix_view<const float>(feature.view().data(), t, e), pos, cache.get(), {}, out.matrix(t, e));
        };
      }
      break;
    }
  }
  run();  // warm-up: first touch of scratch and weights
  for (auto _ : state) {
    run();
    benchmark::ClobberMemory();
  }
  const double flops = block_flops(kind, t);
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  const auto gemm = gemm_flops_per_second.find({kind, t});
  if (gemm != gemm_flops_per_second.end())
    state.counters["vs_gemm"] = benchmark::Counter(flops / gemm->second, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

int main(int argc, char** argv) {
  Eigen::setNbThreads(1);
  for (int kind = moa_kv_stream; kind <= jakiro_layer; ++kind)
    for (index_t t : {index_t{1}, kind == moa_kv_stream ? index_t{4} : index_t{16}}) {
      const std::string name = block_names[kind];
      benchmark::RegisterBenchmark((name + "/gemm").c_str(), BM_gemm)->Args({kind, t})->ArgNames({"", "T"})->UseRealTime();
      benchmark::RegisterBenchmark((name + "/block").c_str(), BM_block)->Args({kind, t})->ArgNames({"", "T"})->UseRealTime();
    }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
