// SPDX-License-Identifier: Apache-2.0
// Blocks beyond the goldens: the decoder layer decoding token by token through its KV cache equals
// one causal pass over the sequence; a tree verified in one pass under its mask equals each root-to-leaf
// path run as a chain; kv_cache::keep compacts an accepted path; the safetensors reader (F32 / F16 /
// BF16, truncated and inconsistent files); Draft & Verify's exit threshold; ADMG's argument errors; the
// MoA drafter's caches across a rejected draft; DFlash's context cache (one append or several, lazy or
// eager, the same keys; a forward leaves it as it was, also when it throws).
#include "backend_conformance.hpp"

#include <cstring>

#include <specdec/backend/eigen.hpp>
#include <specdec/backend/thrust.hpp>
#include <specdec/blocks/amphista.hpp>
#include <specdec/blocks/dflash.hpp>
#include <specdec/blocks/eagle3.hpp>
#include <specdec/blocks/layers.hpp>
#include <specdec/blocks/moa.hpp>
#include <specdec/blocks/mtp.hpp>
#include <specdec/io/safetensors.hpp>
#include <specdec/mask/tree_mask.hpp>
#include <specdec/policy/admg.hpp>
#include <specdec/tree/tree.hpp>

using namespace conformance;
namespace blocks = specdec::blocks;

#if defined(__CUDACC__)  // tests/cuda/: the same suite with the CUDA system added (needs a GPU to run)
#define SPECDEC_BLOCK_BACKENDS \
  specdec::eigen, specdec::thrust_backend<specdec::thrust_system::cpp>, \
  specdec::thrust_backend<specdec::thrust_system::cuda>
#else
#define SPECDEC_BLOCK_BACKENDS specdec::eigen, specdec::thrust_backend<specdec::thrust_system::cpp>
#endif

namespace {

/// A small random Llama layer (E 16, 4 heads, 2 kv heads, d 4, MLP 24) with host-owned weights.
struct random_layer {
  blocks::layer_config config{{16, 4, 2, 4, 10000.0, true}, 24, 1e-5f, true};
  std::vector<std::vector<float>> store;
  template <class B>
  blocks::layer_weights<typename B::memory_space> weights(harness<B>& h, std::vector<typename B::template buffer<float>>& keep) {
    using space = typename B::memory_space;
    std::uint64_t seed = 100;
    const auto make = [&](index_t rows, index_t cols, float lo, float hi) {
      keep.push_back(h.up(uniform_floats(seed++, static_cast<std::size_t>(rows * cols), lo, hi)));
      return specdec::matrix_view<const float, space>(keep.back().view().data(), rows, cols);
    };
    const auto lin = [&](index_t out, index_t in) { return blocks::linear<space>{make(out, in, -0.4f, 0.4f), {}}; };
    const auto norm = [&] {
      const auto m = make(1, 16, 0.8f, 1.2f);
      return specdec::vector_view<const float, space>(m.data(), 16);
    };
    blocks::layer_weights<space> w{norm(), norm(), {lin(16, 16), lin(8, 16), lin(8, 16), lin(16, 16)}, {lin(24, 16), lin(24, 16), lin(16, 24)}};
    w.validate(config, "layers.0.");
    return w;
  }
};

}  // namespace

TEST_CASE_TEMPLATE("decoding through the KV cache equals one causal pass; a tree pass equals its paths", B, SPECDEC_BLOCK_BACKENDS) {
  using space = typename B::memory_space;
  harness<B> h;
  random_layer layer;
  std::vector<typename B::template buffer<float>> keep;
  const auto w = layer.weights(h, keep);
  const index_t t = 6, e = 16, width = 8;
  const auto x = uniform_floats(7, static_cast<std::size_t>(t * e), -1.0f, 1.0f);
  std::vector<std::int64_t> pos(static_cast<std::size_t>(t));
  for (index_t i = 0; i < t; ++i) pos[static_cast<std::size_t>(i)] = 10 + i;
  auto dpos = h.up(pos);
  // One causal pass.
  auto full = h.up(x);
  blocks::decoder_layer_forward(h.b, layer.config, w, full.matrix(t, e), specdec::vector_view<const std::int64_t, space>(dpos.view().data(), t), nullptr);
  const auto want = h.down(full);
  // Prefill 2 rows, then one row at a time through the cache.
  blocks::kv_cache<B> cache(h.b, 16, width);
  std::vector<float> got;
  for (index_t start = 0; start < t;) {
    const index_t n = start == 0 ? 2 : 1;
    auto rows = h.up(std::vector<float>(x.begin() + start * e, x.begin() + (start + n) * e));
    blocks::decoder_layer_forward(h.b, layer.config, w, rows.matrix(n, e),
                                  specdec::vector_view<const std::int64_t, space>(dpos.view().data() + start, n), &cache);
    const auto part = h.down(rows);
    got.insert(got.end(), part.begin(), part.end());
    start += n;
  }
  CHECK(cache.size() == t);
  check_close(got, std::vector<double>(want.begin(), want.end()), 1e-5, 1e-5, "incremental vs full");

  // A tree after a 2-row prefix: nodes 0..4 with parents -1, 0, 0, 1, 2 (two paths: 0-1-3 and 0-2-4).
  cache.crop(2);
  const auto tree = specdec::make_tree({1, 2, 3, 4, 5}, {-1, 0, 0, 1, 2});
  std::vector<std::uint8_t> allowed(static_cast<std::size_t>(5 * 7));
  specdec::tree_mask_dense(tree, 2, specdec::matrix_view<std::uint8_t>(allowed.data(), 5, 7));
  std::vector<std::int64_t> tree_pos(5);
  specdec::tree_positions(tree, 12, specdec::vector_view<std::int64_t>(tree_pos));
  const auto node_x = uniform_floats(8, 5 * 16, -1.0f, 1.0f);
  auto tx = h.up(node_x);
  auto tp = h.up(tree_pos);
  auto dm = h.up(allowed);
  blocks::decoder_layer_forward(h.b, layer.config, w, tx.matrix(5, e), specdec::vector_view<const std::int64_t, space>(tp.view().data(), 5),
                                &cache, blocks::attention_mask<space>::from(specdec::matrix_view<const std::uint8_t, space>(dm.view().data(), 5, 7)));
  const auto tree_out = h.down(tx);
  for (const std::vector<int>& path : {std::vector<int>{0, 1, 3}, std::vector<int>{0, 2, 4}}) {
    blocks::kv_cache<B> chain_cache(h.b, 16, width);
    auto prefix = h.up(std::vector<float>(x.begin(), x.begin() + 2 * e));
    blocks::decoder_layer_forward(h.b, layer.config, w, prefix.matrix(2, e),
                                  specdec::vector_view<const std::int64_t, space>(dpos.view().data(), 2), &chain_cache);
    std::vector<float> rows;
    std::vector<std::int64_t> p;
    for (int n : path) {
      rows.insert(rows.end(), node_x.begin() + n * e, node_x.begin() + (n + 1) * e);
      p.push_back(tree_pos[static_cast<std::size_t>(n)]);
    }
    auto cr = h.up(rows);
    auto cp = h.up(p);
    blocks::decoder_layer_forward(h.b, layer.config, w, cr.matrix(3, e), specdec::vector_view<const std::int64_t, space>(cp.view().data(), 3),
                                  &chain_cache);
    const auto chain_out = h.down(cr);
    std::vector<float> tree_rows;
    for (int n : path) tree_rows.insert(tree_rows.end(), tree_out.begin() + n * e, tree_out.begin() + (n + 1) * e);
    check_close(tree_rows, std::vector<double>(chain_out.begin(), chain_out.end()), 1e-5, 1e-5, "tree vs chain");
    if (path[1] == 2) {
      // Keep the accepted path 0-2-4 behind the prefix: the cache then equals the chain's.
      const std::vector<std::int32_t> offsets = {0, 2, 4};
      cache.keep(2, offsets);
      REQUIRE(cache.size() == 5);
      const auto a = h.b.download(specdec::vector_view<const float, space>(cache.keys().data(), 5 * width));
      const auto c = h.b.download(specdec::vector_view<const float, space>(chain_cache.keys().data(), 5 * width));
      check_close(a, std::vector<double>(c.begin(), c.end()), 1e-6, 1e-6, "kept keys");
    }
  }
  CHECK(error_of([&] { cache.crop(9); }).find("n = 9; the cache holds 5 rows") != std::string::npos);
}

namespace {
void put_u64(std::vector<std::byte>& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}
std::vector<std::byte> checkpoint(const std::string& header, const std::vector<std::uint8_t>& data) {
  std::vector<std::byte> out;
  put_u64(out, header.size());
  for (char c : header) out.push_back(static_cast<std::byte>(c));
  for (auto b : data) out.push_back(static_cast<std::byte>(b));
  return out;
}
}  // namespace

TEST_CASE_TEMPLATE("EAGLE-3 and MTP blocks: in place equals out of place, the position-0 rule, errors name the tensor", B, SPECDEC_BLOCK_BACKENDS) {
  using space = typename B::memory_space;
  harness<B> h;
  std::vector<typename B::template buffer<float>> keep;
  std::uint64_t seed = 900;
  const auto make = [&](index_t rows, index_t cols, float lo, float hi) {
    keep.push_back(h.up(uniform_floats(seed++, static_cast<std::size_t>(rows * cols), lo, hi)));
    return specdec::matrix_view<const float, space>(keep.back().view().data(), rows, cols);
  };
  const auto lin = [&](index_t out, index_t in) { return blocks::linear<space>{make(out, in, -0.3f, 0.3f), {}}; };
  const auto norm = [&](index_t n) { return specdec::vector_view<const float, space>(make(1, n, 0.8f, 1.2f).data(), n); };
  const index_t e = 16, vocab = 40, t = 3;
  const blocks::layer_config layer{{e, 4, 2, 4, 10000.0, true}, 24, 1e-5f, true};
  auto positions = h.up(std::vector<std::int64_t>{0, 1, 2});
  auto tokens = h.up(std::vector<std::int32_t>{5, 17, 39});
  const specdec::vector_view<const std::int64_t, space> pv(positions.view().data(), t);
  const specdec::vector_view<const std::int32_t, space> tv(tokens.view().data(), t);
  const auto hidden = uniform_floats(77, static_cast<std::size_t>(t * e), -1.0f, 1.0f);

  CHECK(blocks::eagle3::tap_layers(32) == std::array<index_t, 3>{2, 16, 29});
  CHECK(error_of([] { (void)blocks::eagle3::tap_layers(2); }).find("layers = 2") != std::string::npos);

  // EAGLE-3: q / k / v read [embedding ; hidden] (2E).
  const blocks::eagle3::config cfg{layer, 24, vocab, 12};
  blocks::eagle3::weights<space> w{make(vocab, e, -1.0f, 1.0f), lin(e, 3 * 24), norm(e),
                                   {norm(e), norm(e), {lin(16, 2 * e), lin(8, 2 * e), lin(8, 2 * e), lin(e, 16)}, {lin(24, e), lin(24, e), lin(e, 24)}},
                                   norm(e), lin(12, e)};
  w.validate(cfg);
  const auto run = [&](bool in_place) {
    blocks::kv_cache<B> cache(h.b, 8, 8);
    auto in = h.up(hidden);
    auto out = h.b.template allocate<float>(t * e);
    const specdec::matrix_view<float, space> dst = in_place ? in.matrix(t, e) : out.matrix(t, e);
    blocks::eagle3::forward(h.b, cfg, w, tv, specdec::matrix_view<const float, space>(in.view().data(), t, e), pv, &cache,
                            blocks::attention_mask<space>::causal(), dst);
    return in_place ? h.down(in) : h.down(out);
  };
  const auto apart = run(false), same = run(true);
  CHECK(apart == same);
  CHECK(apart != hidden);
  auto narrow = w;
  narrow.layer.attention.q = lin(16, e);  // EAGLE-1's width: the checkpoint is not EAGLE-3's
  CHECK(error_of([&] { narrow.validate(cfg); }).find("midlayer.self_attn.q_proj.weight has shape [16 x 16]; expected [16 x 32]") !=
        std::string::npos);
  auto no_fc = w;
  no_fc.fc = lin(e, 2 * e);
  CHECK(error_of([&] { no_fc.validate(cfg); }).find("fc.weight has shape [16 x 32]; expected [16 x 72]") != std::string::npos);
  auto bad_input = layer.attention;
  bad_input.input = -1;
  CHECK(error_of([&] { bad_input.validate(); }).find("input = -1") != std::string::npos);

  // MTP: at position 0 the embedding is zeroed (vLLM), so the token there does not matter; without
  // the rule (SGLang) it does, and at other positions it always does.
  blocks::mtp::config mc{layer, vocab, true};
  blocks::mtp::weights<space> mw{make(vocab, e, -1.0f, 1.0f), norm(e), norm(e), lin(e, 2 * e),
                                 {norm(e), norm(e), {lin(16, e), lin(8, e), lin(8, e), lin(e, 16)}, {lin(24, e), lin(24, e), lin(e, 24)}},
                                 norm(e), lin(vocab, e)};
  mw.validate(mc);
  const auto project = [&](const blocks::mtp::config& c, std::vector<std::int32_t> ids) {
    auto d = h.up(ids);
    auto in = h.up(hidden);
    auto x = h.b.template allocate<float>(t * e);
    blocks::mtp::project(h.b, c, mw, specdec::vector_view<const std::int32_t, space>(d.view().data(), t),
                         specdec::matrix_view<const float, space>(in.view().data(), t, e), pv, x.matrix(t, e));
    return h.down(x);
  };
  const auto row = [&](const std::vector<float>& m, index_t r) { return std::vector<float>(m.begin() + r * e, m.begin() + (r + 1) * e); };
  const auto a = project(mc, {5, 17, 39}), b = project(mc, {6, 17, 38});
  CHECK(row(a, 0) == row(b, 0));
  CHECK(row(a, 2) != row(b, 2));
  mc.zero_embedding_at_position_0 = false;
  CHECK(row(project(mc, {5, 17, 39}), 0) != row(project(mc, {6, 17, 39}), 0));
  auto wide = h.up(std::vector<float>(static_cast<std::size_t>(t * (e + 1)), 0.0f));
  auto out = h.b.template allocate<float>(t * e);
  CHECK(error_of([&] {
          blocks::mtp::forward(h.b, mc, mw, tv, specdec::matrix_view<const float, space>(wide.view().data(), t, e + 1), pv, nullptr,
                               blocks::attention_mask<space>::causal(), out.matrix(t, e));
        }).find("hidden is [3 x 17]") != std::string::npos);
  auto no_head = mw;
  no_head.head = lin(vocab - 1, e);
  CHECK(error_of([&] { no_head.validate(mc); }).find("shared_head.head.weight has shape [39 x 16]") != std::string::npos);
}

TEST_CASE("safetensors: F32, F16 and BF16 tensors; truncated and inconsistent files are rejected") {
  // a: F32 [2 x 1] = {1.5, -2}; b: F16 [2] = {1, -0.5} (0x3c00, 0xb800) plus a subnormal check in c;
  // c: BF16 [1] = 3.0 (0x4040); d: F16 [1] = smallest subnormal 2^-24 (0x0001).
  std::vector<std::uint8_t> data;
  for (float f : {1.5f, -2.0f}) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    for (int i = 0; i < 4; ++i) data.push_back(static_cast<std::uint8_t>(u >> (8 * i)));
  }
  for (std::uint16_t u : {std::uint16_t{0x3c00}, std::uint16_t{0xb800}, std::uint16_t{0x4040}, std::uint16_t{0x0001}})
    data.push_back(static_cast<std::uint8_t>(u & 0xff)), data.push_back(static_cast<std::uint8_t>(u >> 8));
  const std::string header = R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,1],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F16","shape":[2],"data_offsets":[8,12]},"c":{"dtype":"BF16","shape":[1],"data_offsets":[12,14]},)"
                             R"("d":{"dtype":"F16","shape":[1],"data_offsets":[14,16]}})";
  const auto st = specdec::io::safetensors::parse(checkpoint(header, data));
  CHECK(st.at("a").values == std::vector<float>{1.5f, -2.0f});
  CHECK(st.matrix("a").rows() == 2);
  CHECK(st.at("b").values == std::vector<float>{1.0f, -0.5f});
  CHECK(st.at("c").values == std::vector<float>{3.0f});
  CHECK(st.at("d").values == std::vector<float>{std::ldexp(1.0f, -24)});
  CHECK(st.names().size() == 4);

  const auto error = [](const std::vector<std::byte>& bytes) {
    return error_of([&] { specdec::io::safetensors::parse(bytes); });
  };
  auto truncated = checkpoint(header, data);
  truncated.resize(truncated.size() - 3);
  CHECK(error(truncated).find("tensor 'c' spans bytes [12, 14) but the data holds 13 bytes") != std::string::npos);
  CHECK(error(checkpoint(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data)).find("has 8 bytes; its shape and dtype F32 need 12") !=
        std::string::npos);
  CHECK(error(checkpoint(R"({"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1]}})", data))
            .find("has dtype I8; expected F32, F16, BF16, I32 or I64") != std::string::npos);
  CHECK(error(checkpoint(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})", data))
            .find("tensors overlap") != std::string::npos);
  CHECK(error(checkpoint(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})", data)).find("malformed JSON header") != std::string::npos);
  std::vector<std::byte> short_header;
  put_u64(short_header, 1000);
  CHECK(error(short_header).find("the header claims 1000 bytes") != std::string::npos);
  CHECK(error_of([&] { (void)st.at("missing"); }).find("no tensor named 'missing'") != std::string::npos);
}

TEST_CASE("safetensors: I32 and I64 tensors load as int64 (EAGLE-3's d2t) and are not floating-point views") {
  // i: I64 [2] = {-3, 2^40}; j: I32 [2] = {-1, 7}.
  std::vector<std::uint8_t> data;
  for (std::int64_t v : {std::int64_t{-3}, std::int64_t{1} << 40})
    for (int i = 0; i < 8; ++i) data.push_back(static_cast<std::uint8_t>(static_cast<std::uint64_t>(v) >> (8 * i)));
  for (std::int32_t v : {-1, 7})
    for (int i = 0; i < 4; ++i) data.push_back(static_cast<std::uint8_t>(static_cast<std::uint32_t>(v) >> (8 * i)));
  const auto st = specdec::io::safetensors::parse(
      checkpoint(R"({"i":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},"j":{"dtype":"I32","shape":[1,2],"data_offsets":[16,24]}})", data));
  const auto i = st.integers("i");
  CHECK(std::vector<std::int64_t>(i.begin(), i.end()) == std::vector<std::int64_t>{-3, std::int64_t{1} << 40});
  const auto j = st.integers("j");
  CHECK(std::vector<std::int64_t>(j.begin(), j.end()) == std::vector<std::int64_t>{-1, 7});
  CHECK(st.at("j").shape == std::vector<specdec::index_t>{1, 2});
  CHECK(error_of([&] { (void)st.vector("i"); }).find("tensor 'i' is I64; expected F32, F16 or BF16") != std::string::npos);
  CHECK(error_of([&] { (void)st.matrix("j"); }).find("tensor 'j' is I32; expected F32, F16 or BF16") != std::string::npos);
  CHECK(error_of([&] { specdec::io::safetensors::parse(checkpoint(R"({"i":{"dtype":"I64","shape":[3],"data_offsets":[0,16]}})", data)); })
            .find("has 16 bytes; its shape and dtype I64 need 24") != std::string::npos);
  const auto floats = specdec::io::safetensors::parse(checkpoint(R"({"f":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", data));
  CHECK(error_of([&] { (void)floats.integers("f"); }).find("tensor 'f' is F32; expected I32 or I64") != std::string::npos);
}

TEST_CASE("safetensors: numbers out of range, overflowing shapes and malformed fields give specdec's error") {
  // Each of these leaked std::out_of_range / std::invalid_argument("stoull") from std::sto*, or was
  // accepted: a shape whose element count wraps 64 bits to 0 matched an empty byte range.
  const std::vector<std::uint8_t> data(16, 0);
  const auto error = [&](const std::string& header) {
    return error_of([&] { specdec::io::safetensors::parse(checkpoint(header, data)); });
  };
  CHECK(error(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})")
            .find("element count exceeds the 4 F32 values the data can hold") != std::string::npos);
  CHECK(error(R"({"a":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,4]}})")
            .find("has a shape entry '99999999999999999999'; expected an integer in [0, 9223372036854775807]") != std::string::npos);
  CHECK(error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,99999999999999999999]}})")
            .find("has a data offset '99999999999999999999'") != std::string::npos);
  CHECK(error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[true,4]}})").find("has a data offset 'true'") != std::string::npos);
  CHECK(error(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})").find("has a shape entry '-1'") != std::string::npos);
  CHECK(error(R"({"a":{"dtype":"F32","shape":[1e3],"data_offsets":[0,4]}})").find("has a shape entry '1e3'") != std::string::npos);
  // Not JSON at all: the strict reader rejects the number itself, before any field is read.
  CHECK(error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4-]}})").find("'4-' is not a JSON number") != std::string::npos);
  CHECK(error(R"({"a":{"dtype":"F32","shape":1,"data_offsets":[0,4]}})").find("has a 'shape' of the wrong JSON type") != std::string::npos);
  CHECK(error(R"({"a":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})").find("has a 'dtype' of the wrong JSON type") != std::string::npos);
  CHECK(error(R"({"a":[1,2]})").find("tensor 'a' is not a JSON object") != std::string::npos);
  CHECK(error(R"({"a\uZZ12":{}})").find("non-hexadecimal digit") != std::string::npos);
  // An empty tensor is valid whatever its other extents, and overlaps nothing.
  const auto st = specdec::io::safetensors::parse(
      checkpoint(R"({"e":{"dtype":"F32","shape":[0,4294967296],"data_offsets":[4,4]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data));
  CHECK(st.at("e").values.empty());
  CHECK(st.matrix("e").rows() == 0);
  CHECK(st.matrix("e").cols() == 4294967296);
  CHECK(st.at("a").values.size() == 2);
  CHECK(specdec::io::safetensors::parse(checkpoint(R"({"\u00e9":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}})", data)).contains("\xc3\xa9"));
}

TEST_CASE("Draft & Verify's exit threshold rises on poor matches and falls on good early stops") {
  specdec::policy::admg::draft_exit policy({0.6, 8});
  CHECK(policy.stop(0.5, 1));
  CHECK_FALSE(policy.stop(0.7, 1));
  CHECK(policy.stop(0.99, 8));
  policy.update(0, 4);  // matchness 0 < 0.9: th -> 0.9 * 0.6 + 0.1 * 0.61
  CHECK(policy.threshold() == doctest::Approx(0.601));
  specdec::policy::admg::draft_exit good({0.6, 8});
  for (int i = 0; i < 10; ++i) good.update(4, 4);  // matchness -> 1, early stops: the bar falls
  CHECK(good.threshold() < 0.6);
  const double before = good.threshold();
  good.update(8, 8);  // ran to the maximum: the threshold holds
  CHECK(good.threshold() == doctest::Approx(before));
  const std::vector<double> cosines = {0.99, 0.5};
  CHECK(error_of([&] { specdec::policy::admg::plan_layers(cosines, {1.5, 3, 2}); }).find("alpha = 1.5") != std::string::npos);
  const std::vector<double> bad = {2.0};
  CHECK(error_of([&] { specdec::policy::admg::plan_layers(bad); }).find("cosine[0] = 2") != std::string::npos);
}

TEST_CASE("amphista head inputs: stage split and the per-head ResBlock x + SiLU(W x + b)") {
  specdec::eigen b;
  const index_t e = 3;
  const std::vector<float> h1 = {0.5f, -1.0f, 2.0f}, h2 = {1.0f, 0.25f, -0.5f};
  const std::vector<float> w0 = {0.1f, 0.2f, 0.3f, -0.4f, 0.5f, 0.6f, 0.7f, -0.8f, 0.9f}, bias = {0.1f, -0.2f, 0.3f};
  blocks::amphista::weights<specdec::host_space> w;
  for (int k = 0; k < 3; ++k)
    w.head_mlps.push_back({specdec::matrix_view<const float>(w0.data(), e, e), specdec::vector_view<const float>(bias.data(), e)});
  blocks::amphista::config c;
  c.heads = 3;
  c.stage1_heads = blocks::amphista::config::paper_split(3);  // floor(3 / 2) = 1
  std::vector<float> z(9);
  blocks::amphista::head_inputs(b, c, w, specdec::matrix_view<const float>(h1.data(), 1, e), specdec::matrix_view<const float>(h2.data(), 1, e),
                                specdec::matrix_view<float>(z.data(), 3, e));
  std::vector<double> want;
  for (int k = 0; k < 3; ++k) {
    const auto& x = k < 1 ? h1 : h2;
    for (index_t i = 0; i < e; ++i) {
      double y = bias[static_cast<std::size_t>(i)];
      for (index_t j = 0; j < e; ++j) y += static_cast<double>(w0[static_cast<std::size_t>(i * e + j)]) * x[static_cast<std::size_t>(j)];
      want.push_back(x[static_cast<std::size_t>(i)] + y / (1.0 + std::exp(-y)));
    }
  }
  check_close(z, want, 1e-6, 1e-6, "head inputs");
}

TEST_CASE_TEMPLATE("MoA drafter: incremental drafting with a rejected draft cropped equals a fresh run", B, SPECDEC_BLOCK_BACKENDS) {
  using space = typename B::memory_space;
  harness<B> h;
  random_layer layer;  // self- and cross-attention: E 16
  std::vector<typename B::template buffer<float>> keep;
  std::uint64_t seed = 300;
  const auto make = [&](index_t rows, index_t cols, float lo, float hi) {
    keep.push_back(h.up(uniform_floats(seed++, static_cast<std::size_t>(rows * cols), lo, hi)));
    return specdec::matrix_view<const float, space>(keep.back().view().data(), rows, cols);
  };
  const auto lin = [&](index_t out, index_t in) { return blocks::linear<space>{make(out, in, -0.4f, 0.4f), {}}; };
  const auto norm = [&](index_t n) { return specdec::vector_view<const float, space>(make(1, n, 0.8f, 1.2f).data(), n); };
  // Target: 2 layers, one kv head of 4 -> E_kv = 8; the LSA layer has 4 heads of 2, 2 kv heads.
  const blocks::moa::config config{{{8, 4, 2, 2, 10000.0, true}, 12, 1e-5f, true}, layer.config, layer.config, 2, 4};
  const blocks::moa::weights<space> w{
      {norm(8), norm(8), {lin(8, 8), lin(4, 8), lin(4, 8), lin(8, 8)}, {lin(12, 8), lin(12, 8), lin(8, 12)}},
      {make(16, 8, -0.4f, 0.4f), norm(16)},
      layer.weights(h, keep),
      layer.weights(h, keep)};
  const index_t e = 16, tokens = 6;
  std::vector<specdec::matrix_view<const float, space>> keys, values;
  for (int l = 0; l < 2; ++l) {
    keys.push_back(make(tokens, 4, -1.0f, 1.0f));
    values.push_back(make(tokens, 4, -1.0f, 1.0f));
  }
  // Embeddings of prompt (3), bonus, draft 1 (accepted), draft 2 (rejected), and the token after.
  const auto embedding = uniform_floats(9, static_cast<std::size_t>(7 * e), -1.0f, 1.0f);
  const auto rows_of = [&](std::initializer_list<int> ids) {
    std::vector<float> out;
    for (int i : ids) out.insert(out.end(), embedding.begin() + i * e, embedding.begin() + (i + 1) * e);
    return h.up(out);
  };
  const auto positions = [&](const std::vector<std::int64_t>& p) { return h.up(p); };
  auto feature = h.b.template allocate<float>(e);
  blocks::moa::drafter<B> incremental(h.b, config, w, 16);
  incremental.add_verified(keys, values, 0, 3);
  {
    auto x = rows_of({0, 1, 2, 3});
    auto p = positions({0, 1, 2, 3});
    incremental.forward(x.matrix(4, e), specdec::vector_view<const std::int64_t, space>(p.view().data(), 4), feature.matrix(1, e));
  }
  for (const auto& [id, at] : {std::pair{4, 4}, std::pair{5, 5}}) {
    auto x = rows_of({id});
    auto p = positions({at});
    incremental.forward(x.matrix(1, e), specdec::vector_view<const std::int64_t, space>(p.view().data(), 1), feature.matrix(1, e));
  }
  CHECK(incremental.self_attention_cache().size() == 6);
  // The target accepted draft 1 only: the bonus and draft 1 are verified, draft 2's row goes.
  incremental.crop(5);
  incremental.add_verified(keys, values, 3, 2);
  CHECK(incremental.verified() == 5);
  auto x = rows_of({6});
  auto p = positions({5});
  incremental.forward(x.matrix(1, e), specdec::vector_view<const std::int64_t, space>(p.view().data(), 1), feature.matrix(1, e));
  const auto got = h.down(feature);

  blocks::moa::drafter<B> fresh(h.b, config, w, 16);
  fresh.add_verified(keys, values, 0, 5);
  auto all = rows_of({0, 1, 2, 3, 4, 6});
  auto all_positions = positions({0, 1, 2, 3, 4, 5});
  fresh.forward(all.matrix(6, e), specdec::vector_view<const std::int64_t, space>(all_positions.view().data(), 6), feature.matrix(1, e));
  const auto want = h.down(feature);
  check_close(got, std::vector<double>(want.begin(), want.end()), 1e-5, 1e-5, "incremental vs fresh");
  CHECK(error_of([&] { fresh.add_verified(keys, values, 4, 1); }).find("expected to continue at 5") != std::string::npos);
}

TEST_CASE_TEMPLATE("DFlash: the context appended at once or row by row gives the same block; forwards leave the cache as they found it", B,
                   SPECDEC_BLOCK_BACKENDS) {
  using space = typename B::memory_space;
  namespace dflash = blocks::dflash;
  harness<B> h;
  std::vector<typename B::template buffer<float>> keep;
  std::uint64_t seed = 1300;
  const auto make = [&](index_t rows, index_t cols, float lo, float hi) {
    keep.push_back(h.up(uniform_floats(seed++, static_cast<std::size_t>(rows * cols), lo, hi)));
    return specdec::matrix_view<const float, space>(keep.back().view().data(), rows, cols);
  };
  const auto lin = [&](index_t out, index_t in) { return blocks::linear<space>{make(out, in, -0.3f, 0.3f), {}}; };
  const auto norm = [&](index_t n) { return specdec::vector_view<const float, space>(make(1, n, 0.8f, 1.2f).data(), n); };
  const index_t e = 16, vocab = 40, bs = 4, k = 3, n = 5;
  dflash::config cfg;
  cfg.layer = {{e, 4, 2, 4, 10000.0, true}, 24, 1e-6f, true};
  cfg.layer.attention.qk_norm = true;
  cfg.layers = 2;
  cfg.feature_layers = k;
  cfg.vocab = vocab;
  cfg.block_size = bs;
  cfg.mask_token = vocab - 1;
  dflash::weights<space> w;
  w.fc = lin(e, k * e);
  w.hidden_norm = norm(e);
  for (int l = 0; l < 2; ++l) {
    blocks::layer_weights<space> lw{norm(e), norm(e), {lin(16, e), lin(8, e), lin(8, e), lin(e, 16)}, {lin(24, e), lin(24, e), lin(e, 24)}};
    lw.attention.q_norm = norm(4);
    lw.attention.k_norm = norm(4);
    w.layers.push_back(lw);
  }
  w.norm = norm(e);
  w.embed = make(vocab, e, -1.0f, 1.0f);
  w.lm_head = lin(vocab, e);
  w.validate(cfg);

  CHECK(dflash::target_layer_ids(36, 5) == std::vector<index_t>{1, 9, 17, 25, 33});
  CHECK(dflash::target_layer_ids(7, 3) == std::vector<index_t>{1, 2, 4});  // 2.5 rounds to even
  CHECK(dflash::target_layer_ids(30, 1) == std::vector<index_t>{15});
  CHECK(error_of([] { (void)dflash::target_layer_ids(3, 2); }).find("target_layers = 3") != std::string::npos);

  const auto features = uniform_floats(31, static_cast<std::size_t>(n * k * e), -2.0f, 2.0f);
  auto fv = h.up(features);
  auto positions = h.up(std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8});
  const auto pos = [&](index_t first, index_t count) {
    return specdec::vector_view<const std::int64_t, space>(positions.view().data() + first, count);
  };
  const auto rows = [&](index_t first, index_t count) {
    return specdec::matrix_view<const float, space>(fv.view().data() + first * k * e, count, k * e);
  };
  auto tokens = h.up(std::vector<std::int32_t>{7, vocab - 1, vocab - 1, vocab - 1});
  const specdec::vector_view<const std::int32_t, space> tv(tokens.view().data(), bs);
  const auto draft = [&](dflash::context_cache<B>& cache) {
    auto out = h.b.template allocate<float>(bs * e);
    const index_t before = cache.size();
    dflash::forward(h.b, cfg, w, tv, pos(n, bs), cache, out.matrix(bs, e));
    CHECK(cache.size() == before);
    for (index_t l = 0; l < cache.layers(); ++l) CHECK(cache.layer(l).size() == before);
    return h.down(out);
  };
  // z-lab appends the context lazily with the next block, SGLang eagerly after each verification:
  // the cache's keys are per row, so any split gives the same block.
  dflash::context_cache<B> whole(h.b, cfg, 16), pieces(h.b, cfg, 16);
  dflash::append_context(h.b, cfg, w, rows(0, n), pos(0, n), whole);
  dflash::append_context(h.b, cfg, w, rows(0, 2), pos(0, 2), pieces);
  dflash::append_context(h.b, cfg, w, rows(2, 1), pos(2, 1), pieces);
  dflash::append_context(h.b, cfg, w, rows(3, 2), pos(3, 2), pieces);
  CHECK(whole.size() == n);
  const auto first = draft(whole);
  CHECK(draft(pieces) == first);
  CHECK(draft(whole) == first);  // the first forward's block rows are gone: the same block again
  // The context matters: one row fewer changes the block.
  dflash::context_cache<B> shorter(h.b, cfg, 16);
  dflash::append_context(h.b, cfg, w, rows(0, n - 1), pos(0, n - 1), shorter);
  CHECK(draft(shorter) != first);
  // Rewinding to a shorter context and appending the same rows again restores the block.
  whole.crop(n - 1);
  dflash::append_context(h.b, cfg, w, rows(n - 1, 1), pos(n - 1, 1), whole);
  CHECK(draft(whole) == first);

  // Refused calls name the argument and leave the cache as it was.
  auto bad_tokens = h.up(std::vector<std::int32_t>{7, vocab, vocab - 1, vocab - 1});
  auto out = h.b.template allocate<float>(bs * e);
  CHECK_THROWS_AS(dflash::forward(h.b, cfg, w, specdec::vector_view<const std::int32_t, space>(bad_tokens.view().data(), bs), pos(n, bs),
                                  whole, out.matrix(bs, e)),
                  specdec::invalid_argument);
  CHECK(whole.size() == n);
  for (index_t l = 0; l < whole.layers(); ++l) CHECK(whole.layer(l).size() == n);
  CHECK(error_of([&] { dflash::append_context(h.b, cfg, w, rows(0, 2), pos(0, 3), whole); }).find("features is [2 x 48] with 3 positions") !=
        std::string::npos);
  dflash::context_cache<B> tight(h.b, cfg, n + bs - 1);
  dflash::append_context(h.b, cfg, w, rows(0, n), pos(0, n), tight);
  CHECK(error_of([&] { dflash::forward(h.b, cfg, w, tv, pos(n, bs), tight, out.matrix(bs, e)); }).find("exceeds the cache's capacity") !=
        std::string::npos);
  CHECK(tight.size() == n);
  auto no_norm = w;
  no_norm.layers[1].attention.k_norm = {};
  CHECK(error_of([&] { no_norm.validate(cfg); }).find("layers.1.self_attn.k_norm.weight has length 0; expected 4") != std::string::npos);
  auto bad_mask = cfg;
  bad_mask.mask_token = vocab;
  CHECK(error_of([&] { bad_mask.validate(); }).find("mask_token = 40") != std::string::npos);
}
