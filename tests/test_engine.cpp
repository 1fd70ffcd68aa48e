// SPDX-License-Identifier: Apache-2.0
// The example engine (examples/engine): GGUF dequantisation of every supported type against the
// formats' definitions, malformed and truncated files rejected; the BPE tokenizer (merges by rank,
// control tokens, byte round trip); the Llama forward: a tree verified in one pass gives, bit for bit,
// the logits of decoding each path token by token; every drafter's greedy output equals vanilla greedy
// decoding. A tiny random model written as GGUF by the test is used; when SmolLM2-135M-Instruct is
// present ($SPECDEC_MODEL, or ~/.cache/specdec), it is checked too.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <specdec/mask/tree_mask.hpp>

#include "backend_conformance.hpp"  // error_of

#include "engine/checkpoint.hpp"
#include "engine/decoding.hpp"
#include "engine/eagle3_drafter.hpp"
#include "engine/eagle_drafter.hpp"
#include "engine/mtp_drafter.hpp"
#include "engine/gguf.hpp"
#include "engine/llama.hpp"
#include "engine/tokenizer.hpp"

namespace {

std::vector<unsigned char> half_bytes(float v) {
  // Exact for the values used here (small integers and halves).
  std::uint16_t h = 0;
  if (v != 0.0f) {
    int e;
    const float m = std::frexp(std::abs(v), &e);  // v = m 2^e, m in [0.5, 1)
    const auto mant = static_cast<std::uint16_t>((m * 2.0f - 1.0f) * 1024.0f);
    h = static_cast<std::uint16_t>((v < 0 ? 0x8000 : 0) | ((e - 1 + 15) << 10) | mant);
  }
  return {static_cast<unsigned char>(h & 0xff), static_cast<unsigned char>(h >> 8)};
}

/// A GPT-2 style vocabulary: the 256 byte symbols, a few merges, control tokens.
struct tiny_vocab {
  std::vector<std::string> tokens;
  std::vector<std::string> merges;
  std::vector<std::int32_t> types;
};
std::string symbol_of(int b) {
  static const auto table = [] {
    std::vector<std::string> t(256);
    int next = 256;
    for (int x = 0; x < 256; ++x) {
      const bool printable = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
      const int cp = printable ? x : next++;
      std::string s;
      if (cp < 0x80) s += static_cast<char>(cp);
      else s += static_cast<char>(0xc0 | (cp >> 6)), s += static_cast<char>(0x80 | (cp & 0x3f));
      t[static_cast<std::size_t>(x)] = s;
    }
    return t;
  }();
  return table[static_cast<std::size_t>(b)];
}
tiny_vocab make_vocab() {
  tiny_vocab v;
  v.tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  v.types = {3, 3, 3};
  for (int b = 0; b < 256; ++b) v.tokens.push_back(symbol_of(b)), v.types.push_back(1);
  const std::string sp = symbol_of(' ');  // "Ġ"
  for (const auto& [a, b] : std::vector<std::pair<std::string, std::string>>{
           {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {sp, "w"}, {"o", "r"}, {sp + "w", "or"}, {sp + "wor", "ld"}, {"l", "d"}}) {
    v.merges.push_back(a + " " + b);
    v.tokens.push_back(a + b);
    v.types.push_back(1);
  }
  return v;
}

/// A random Llama (2 layers, hidden 32, 4 heads of 8, 2 kv heads, MLP 48) with the tiny vocabulary,
/// weights as F32 except one Q8_0 tensor (the MLP's down projection of layer 1 is F16).
engine::gguf_writer tiny_model(std::uint32_t layers = 2) {
  const auto v = make_vocab();
  engine::gguf_writer w;
  w.add("general.architecture", std::string("llama"));
  w.add("general.name", std::string("tiny"));
  w.add("llama.block_count", layers);
  w.add("llama.embedding_length", std::uint32_t{32});
  w.add("llama.feed_forward_length", std::uint32_t{48});
  w.add("llama.attention.head_count", std::uint32_t{4});
  w.add("llama.attention.head_count_kv", std::uint32_t{2});
  w.add("llama.rope.freq_base", 10000.0f);
  w.add("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.add("tokenizer.ggml.model", std::string("gpt2"));
  w.add("tokenizer.ggml.tokens", v.tokens);
  w.add("tokenizer.ggml.merges", v.merges);
  w.add("tokenizer.ggml.token_type", v.types);
  w.add("tokenizer.ggml.eos_token_id", std::uint32_t{0});
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  const auto random = [&](std::size_t n, float scale = 1.0f, float offset = 0.0f) {
    std::vector<float> x(n);
    for (auto& e : x) e = offset + scale * u(rng);
    return x;
  };
  const std::uint64_t vocab = v.tokens.size(), e = 32, kv = 16, ff = 48;
  w.add_tensor("token_embd.weight", {e, vocab}, random(vocab * e, 2.0f));
  w.add_tensor("output_norm.weight", {e}, random(e, 0.2f, 1.0f));
  for (int l = 0; l < static_cast<int>(layers); ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    w.add_tensor(p + "attn_norm.weight", {e}, random(e, 0.2f, 1.0f));
    w.add_tensor(p + "ffn_norm.weight", {e}, random(e, 0.2f, 1.0f));
    w.add_tensor(p + "attn_q.weight", {e, e}, random(e * e));
    w.add_tensor(p + "attn_k.weight", {e, kv}, random(e * kv));
    w.add_tensor(p + "attn_v.weight", {e, kv}, random(e * kv));
    w.add_tensor(p + "attn_output.weight", {e, e}, random(e * e));
    w.add_tensor(p + "ffn_gate.weight", {e, ff}, random(e * ff));
    w.add_tensor(p + "ffn_up.weight", {e, ff}, random(e * ff));
    if (l == 0) {
      w.add_tensor(p + "ffn_down.weight", {ff, e}, random(e * ff));
    } else {
      std::vector<unsigned char> bytes;
      for (float x : random(e * ff)) {
        const auto h = half_bytes(std::round(x * 64.0f) / 64.0f);
        bytes.insert(bytes.end(), h.begin(), h.end());
      }
      w.add_tensor(p + "ffn_down.weight", {ff, e}, engine::ggml_type::f16, bytes);
    }
  }
  return w;
}

/// A safetensors file of the named tensors: F16 ones from float values (multiples of 1/64 in [-1, 1],
/// exact in half precision), I64 ones from integers.
struct st_tensor {
  std::string name, dtype;
  std::vector<std::int64_t> shape;
  std::vector<float> values;
  std::vector<std::int64_t> integers = {};
};
std::filesystem::path write_safetensors(const std::string& file, const std::vector<st_tensor>& tensors) {
  std::string header = "{";
  std::vector<unsigned char> data;
  for (const auto& t : tensors) {
    const std::size_t begin = data.size();
    if (t.dtype == "I64") {
      for (auto v : t.integers)
        for (int i = 0; i < 8; ++i) data.push_back(static_cast<unsigned char>(static_cast<std::uint64_t>(v) >> (8 * i)));
    } else if (t.dtype == "F32") {
      for (float v : t.values) {
        std::uint32_t u;
        std::memcpy(&u, &v, 4);
        for (int i = 0; i < 4; ++i) data.push_back(static_cast<unsigned char>(u >> (8 * i)));
      }
    } else {
      for (float v : t.values) {
        const auto h = half_bytes(v);
        data.insert(data.end(), h.begin(), h.end());
      }
    }
    // Appends only: g++ 12 warns (-Wrestrict, falsely) on chains of std::string operator+.
    if (header.size() > 1) header += ',';
    header += '"';
    header += t.name;
    header += R"(":{"dtype":")";
    header += t.dtype;
    header += R"(","shape":[)";
    for (std::size_t i = 0; i < t.shape.size(); ++i) {
      if (i) header += ',';
      header += std::to_string(t.shape[i]);
    }
    header += R"(],"data_offsets":[)";
    header += std::to_string(begin);
    header += ',';
    header += std::to_string(data.size());
    header += "]}";
  }
  header += "}";
  const auto path = std::filesystem::temp_directory_path() / file;
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  out << header;
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  return path;
}

/// An EAGLE checkpoint for the tiny model (hidden 32, 4 heads of 8, 2 kv heads, MLP 48): random
/// weights, a 64-entry draft vocabulary mapping draft id i to target id 4 i (d2t[i] = 3 i).
std::vector<st_tensor> tiny_eagle_checkpoint() {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> u(-16, 16);
  const auto t = [&](const std::string& name, std::vector<std::int64_t> shape) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<float> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = static_cast<float>(u(rng)) / 64.0f;
    return st_tensor{name, "F16", std::move(shape), std::move(v)};
  };
  std::vector<st_tensor> c = {t("fc.weight", {32, 64}), t("fc.bias", {32}), t("layers.0.self_attn.q_proj.weight", {32, 32}),
                              t("layers.0.self_attn.k_proj.weight", {16, 32}), t("layers.0.self_attn.v_proj.weight", {16, 32}),
                              t("layers.0.self_attn.o_proj.weight", {32, 32}), t("layers.0.post_attention_layernorm.weight", {32}),
                              t("layers.0.mlp.gate_proj.weight", {48, 32}), t("layers.0.mlp.up_proj.weight", {48, 32}),
                              t("layers.0.mlp.down_proj.weight", {32, 48}), t("lm_head.weight", {64, 32})};
  st_tensor d2t{"d2t", "I64", {64}, {}};
  for (std::int64_t i = 0; i < 64; ++i) d2t.integers.push_back(3 * i);
  c.push_back(d2t);
  return c;
}

/// Random fp16 tensors (multiples of 1/64 in [-1/4, 1/4]) of the given names and shapes, and `extra`.
std::vector<st_tensor> random_checkpoint(const std::vector<std::pair<std::string, std::vector<std::int64_t>>>& shapes,
                                         std::vector<st_tensor> extra = {}) {
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> u(-16, 16);
  for (const auto& [name, shape] : shapes) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<float> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = static_cast<float>(u(rng)) / 64.0f;
    extra.push_back(st_tensor{name, "F16", shape, std::move(v)});
  }
  return extra;
}

std::string cached_model_path() {
  if (const char* env = std::getenv("SPECDEC_MODEL")) return env;
  const char* cache = std::getenv("SPECDEC_CACHE");
  const char* home = std::getenv("HOME");
  const std::string dir = cache ? cache : (home ? std::string(home) + "/.cache/specdec" : "");
  return dir.empty() ? "" : dir + "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace

TEST_CASE("GGUF: every supported type dequantises as its format defines") {
  engine::gguf_writer w;
  w.add("general.architecture", std::string("llama"));
  // Q8_0: d = 0.5, q = -16..15.
  std::vector<unsigned char> q8 = half_bytes(0.5f);
  for (int j = 0; j < 32; ++j) q8.push_back(static_cast<unsigned char>(static_cast<std::int8_t>(j - 16)));
  // Q4_0: d = 2, byte j = (j & 15) | (15 - j) << 4.
  std::vector<unsigned char> q40 = half_bytes(2.0f);
  for (int j = 0; j < 16; ++j) q40.push_back(static_cast<unsigned char>((j & 15) | ((15 - j) << 4)));
  // Q4_1: d = 0.25, m = -1.5, same nibbles.
  std::vector<unsigned char> q41 = half_bytes(0.25f);
  for (auto b : half_bytes(-1.5f)) q41.push_back(b);
  for (int j = 0; j < 16; ++j) q41.push_back(static_cast<unsigned char>((j & 15) | ((15 - j) << 4)));
  std::vector<unsigned char> f16;
  for (float x : {1.0f, -2.5f, 0.0f, 3.0f, 0.5f, -0.25f, 7.0f, 1024.0f}) {
    const auto h = half_bytes(x);
    f16.insert(f16.end(), h.begin(), h.end());
  }
  w.add_tensor("q8", {32}, engine::ggml_type::q8_0, q8);
  w.add_tensor("q40", {32}, engine::ggml_type::q4_0, q40);
  w.add_tensor("q41", {32}, engine::ggml_type::q4_1, q41);
  w.add_tensor("f16", {4, 2}, engine::ggml_type::f16, f16);
  w.add_tensor("f32", {3}, std::vector<float>{1.5f, -2.0f, 3.25f});
  const auto f = engine::gguf_file::parse(w.bytes());
  const auto a = f.load("q8"), b = f.load("q40"), c = f.load("q41");
  for (int j = 0; j < 32; ++j) CHECK(a[static_cast<std::size_t>(j)] == 0.5f * static_cast<float>(j - 16));
  for (int j = 0; j < 16; ++j) {
    // Value j is the low nibble of byte j, value j + 16 its high nibble.
    CHECK(b[static_cast<std::size_t>(j)] == 2.0f * static_cast<float>((j & 15) - 8));
    CHECK(b[static_cast<std::size_t>(j + 16)] == 2.0f * static_cast<float>((15 - j) - 8));
    CHECK(c[static_cast<std::size_t>(j)] == 0.25f * static_cast<float>(j & 15) - 1.5f);
    CHECK(c[static_cast<std::size_t>(j + 16)] == 0.25f * static_cast<float>(15 - j) - 1.5f);
  }
  CHECK(f.load("f16") == std::vector<float>{1.0f, -2.5f, 0.0f, 3.0f, 0.5f, -0.25f, 7.0f, 1024.0f});
  CHECK(f.load("f32", {3}) == std::vector<float>{1.5f, -2.0f, 3.25f});
  CHECK(f.get<std::string>("general.architecture") == "llama");
  CHECK_THROWS_WITH_AS(f.load("f32", {4}), doctest::Contains("has ne [3]; expected [4]"), engine::gguf_error);
  CHECK_THROWS_WITH_AS(f.load("missing"), doctest::Contains("tensor 'missing' is missing"), engine::gguf_error);
}

TEST_CASE("GGUF: malformed and truncated files are rejected with what was wrong") {
  const auto good = tiny_model().bytes();
  CHECK_NOTHROW(engine::gguf_file::parse(good));
  auto bad_magic = good;
  bad_magic[0] = 'X';
  CHECK_THROWS_WITH_AS(engine::gguf_file::parse(bad_magic), doctest::Contains("not a GGUF file"), engine::gguf_error);
  auto bad_version = good;
  bad_version[4] = 9;
  CHECK_THROWS_WITH_AS(engine::gguf_file::parse(bad_version), doctest::Contains("version 9"), engine::gguf_error);
  // Cut inside the metadata, inside the tensor directory, and inside the data.
  for (std::size_t cut : {std::size_t{40}, good.size() / 4, good.size() - 10}) {
    const std::vector<unsigned char> truncated(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(cut));
    CHECK_THROWS_AS(engine::gguf_file::parse(truncated), engine::gguf_error);
  }
  const std::vector<unsigned char> last_tensor_cut(good.begin(), good.end() - 10);
  CHECK_THROWS_WITH_AS(engine::gguf_file::parse(last_tensor_cut), doctest::Contains("truncated"), engine::gguf_error);
  engine::gguf_writer w;
  w.add_tensor("odd", {31}, engine::ggml_type::q8_0, std::vector<unsigned char>(34));
  CHECK_THROWS_WITH_AS(engine::gguf_file::parse(w.bytes()), doctest::Contains("not a multiple of its block of 32"),
                       engine::gguf_error);
  engine::gguf_writer q5;
  q5.add_tensor("q5", {32}, static_cast<engine::ggml_type>(6), std::vector<unsigned char>(22));
  CHECK_THROWS_WITH_AS(engine::gguf_file::parse(q5.bytes()), doctest::Contains("ggml type 6"), engine::gguf_error);
}

TEST_CASE("BPE tokenizer: merges by rank, control tokens, digits split, byte round trip") {
  const auto f = engine::gguf_file::parse(tiny_model().bytes());
  const engine::bpe_tokenizer tok(f);
  const auto id = [&](const std::string& s) {
    const auto& tokens = f.get<std::vector<std::string>>("tokenizer.ggml.tokens");
    return static_cast<std::int32_t>(std::find(tokens.begin(), tokens.end(), s) - tokens.begin());
  };
  const std::string sp = symbol_of(' ');
  // " world" merges Ġ w (rank 4), o r (5), Ġw or (6), then l d (8) before Ġwor ld (7) can apply.
  CHECK(tok.encode("hello") == std::vector<std::int32_t>{id("hello")});
  CHECK(tok.encode("hello world") == std::vector<std::int32_t>{id("hello"), id(sp + "world")});
  CHECK(tok.encode("<|im_start|>hello<|im_end|>") == std::vector<std::int32_t>{1, id("hello"), 2});
  // Digits are split one by one; the space before them is its own piece.
  CHECK(tok.encode("x 12") == std::vector<std::int32_t>{id("x"), id(sp), id("1"), id("2")});
  // A whitespace run leaves its last space to the next word: "a", " ", " b".
  CHECK(tok.encode("a  b") == std::vector<std::int32_t>{id("a"), id(sp), id(sp), id("b")});
  for (const std::string text : {"hello world", "Hello, World!\n\n  indented\tline 42", "<|im_start|>user\nhi<|im_end|>",
                                  "caf\xc3\xa9 \xe2\x82\xac 3.14", ""}) {
    const auto ids = tok.encode(text);
    CHECK(tok.decode(ids) == text);
  }
  CHECK_THROWS_AS(tok.decode({100000}), std::out_of_range);
}

TEST_CASE("engine: a draft tree verified in one forward gives each path's token-by-token logits, bit for bit") {
  const auto f = engine::gguf_file::parse(tiny_model().bytes());
  const auto model = engine::llama_model::load(f);
  const auto vocab = model.config().vocab;
  const std::vector<std::int32_t> prompt = {5, 77, 104, 9, 200, 31};
  std::vector<std::int64_t> prompt_positions(prompt.size());
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt_positions[i] = static_cast<std::int64_t>(i);
  // Tree after the prompt: root 40 with children 41, 42; 41 has child 43; 42 has child 44.
  const auto tree = specdec::make_tree({40, 41, 42, 43, 44}, {-1, 0, 0, 1, 2});
  engine::llama_session session(model, 64);
  std::vector<float> logits, tree_logits;
  session.forward(prompt, prompt_positions, {}, logits);
  const auto n = static_cast<engine::index_t>(prompt.size());
  std::vector<std::uint8_t> mask(static_cast<std::size_t>(5 * (n + 5)));
  specdec::tree_mask_dense(tree, n, specdec::matrix_view<std::uint8_t>(mask.data(), 5, n + 5));
  std::vector<std::int64_t> positions(5);
  specdec::tree_positions(tree, n, specdec::vector_view<std::int64_t>(positions.data(), 5));
  session.forward(tree.token, positions, mask, tree_logits);
  for (const std::vector<std::int32_t>& path : {std::vector<std::int32_t>{0, 1, 3}, std::vector<std::int32_t>{0, 2, 4}}) {
    engine::llama_session chain(model, 64);
    chain.forward(prompt, prompt_positions, {}, logits);
    for (std::size_t d = 0; d < path.size(); ++d) {
      const std::int32_t token[1] = {tree.token[static_cast<std::size_t>(path[d])]};
      const std::int64_t position[1] = {n + static_cast<std::int64_t>(d)};
      chain.forward(token, position, {}, logits);
      const float* want = logits.data();
      const float* got = tree_logits.data() + path[d] * vocab;
      CHECK(std::equal(want, want + vocab, got));
    }
  }
  // Keeping path 0-2-4 leaves the caches a chain over it would have.
  const std::vector<std::int32_t> kept = {0, 2, 4};
  session.keep(n, kept);
  CHECK(session.cached() == n + 3);
  const std::int32_t next[1] = {7};
  const std::int64_t next_position[1] = {n + 3};
  session.forward(next, next_position, {}, tree_logits);
  engine::llama_session chain(model, 64);
  chain.forward(prompt, prompt_positions, {}, logits);
  const std::vector<std::int32_t> rest = {40, 42, 44, 7};
  const std::vector<std::int64_t> rest_positions = {n, n + 1, n + 2, n + 3};
  chain.forward(rest, rest_positions, {}, logits);
  CHECK(std::equal(tree_logits.begin(), tree_logits.end(), logits.end() - vocab));
  CHECK_THROWS_AS(session.forward(std::vector<std::int32_t>{100000}, std::vector<std::int64_t>{0}, {}, logits),
                  specdec::invalid_argument);
}

TEST_CASE("engine: every drafter's greedy output equals vanilla greedy decoding") {
  const auto f = engine::gguf_file::parse(tiny_model().bytes());
  const auto model = engine::llama_model::load(f);
  // A repetitive prompt, so that prompt lookup finds matches.
  std::vector<std::int32_t> prompt;
  for (int r = 0; r < 4; ++r)
    for (std::int32_t t : {10, 20, 30, 40, 50, 60}) prompt.push_back(t);
  engine::generation_options options;
  options.max_new_tokens = 24;
  const auto vanilla = engine::generate(model, prompt, nullptr, options);
  REQUIRE(vanilla.tokens.size() == 24);
  CHECK(vanilla.stats.target_calls == 24);
  std::vector<std::unique_ptr<engine::method>> drafters;
  drafters.push_back(std::make_unique<engine::prompt_lookup_drafter>(engine::prompt_lookup_drafter::parameters{3, 1, 4, 1, false}));
  drafters.push_back(std::make_unique<engine::prompt_lookup_drafter>(engine::prompt_lookup_drafter::parameters{3, 1, 4, 3, true}));
  specdec::policy::admg::rules rules;
  rules.alpha = 0.9;
  drafters.push_back(std::make_unique<engine::admg_drafter>(model, rules, specdec::policy::admg::draft_exit::parameters{0.0, 3}));
  drafters.push_back(std::make_unique<engine::eagle2_admg_drafter>(model, rules, specdec::dynamic_tree_config{2, 2, 5, specdec::tree_score::log_probability, {}}));
  for (auto& d : drafters) {
    CAPTURE(d->name());
    const auto g = engine::generate(model, prompt, d.get(), options);
    CHECK(g.tokens == vanilla.tokens);
    CHECK(g.stats.drafted > 0);
    CHECK(g.stats.target_calls <= 24);
  }
  // Sampled: reproducible for a seed; a different seed changes the draws.
  options.temperature = 1.0f;
  options.seed = 3;
  engine::prompt_lookup_drafter lookup({3, 1, 4, 1, false});
  const auto s1 = engine::generate(model, prompt, &lookup, options);
  const auto s2 = engine::generate(model, prompt, &lookup, options);
  CHECK(s1.tokens == s2.tokens);
  for (auto t : s1.tokens) CHECK((t >= 0 && t < model.config().vocab));
}

TEST_CASE("engine: a trained EAGLE layer's checkpoint drafts trees whose greedy output equals vanilla greedy decoding") {
  const auto f = engine::gguf_file::parse(tiny_model().bytes());
  const auto model = engine::llama_model::load(f);
  const auto path = write_safetensors("specdec_test_eagle.safetensors", tiny_eagle_checkpoint());
  std::vector<std::int32_t> prompt;
  for (int r = 0; r < 3; ++r)
    for (std::int32_t t : {12, 24, 36, 48}) prompt.push_back(t);
  engine::generation_options options;
  options.max_new_tokens = 20;
  const auto vanilla = engine::generate(model, prompt, nullptr, options);
  for (const bool adaptive : {false, true}) {
    CAPTURE(adaptive);
    engine::eagle_drafter d(model, specdec::dynamic_tree_config{2, 2, 5, specdec::tree_score::log_probability, {}}, path.string(), adaptive);
    const auto g = engine::generate(model, prompt, &d, options);
    CHECK(g.tokens == vanilla.tokens);
    CHECK(g.stats.drafted > 0);
    if (!adaptive) CHECK(g.stats.drafted == 4 * g.stats.target_calls);  // the configured 5-node tree every step
    // The loop's feedback reached the library drafter: its policy priced the verify forwards and
    // measured the acceptance.
    CHECK(d.policy().target_cost()(5) > 0);
    CHECK(!d.policy().acceptance().empty());
  }
  // The same request twice through one drafter (an engine keeps it across requests): the draft
  // layer's cache starts over, so the second run drafts exactly what a fresh drafter drafts.
  engine::eagle_drafter kept(model, specdec::dynamic_tree_config{2, 2, 5, specdec::tree_score::log_probability, {}}, path.string());
  const auto first = engine::generate(model, prompt, &kept, options);
  const auto second = engine::generate(model, prompt, &kept, options);
  CHECK(second.stats.accepted == first.stats.accepted);
  std::filesystem::remove(path);
}

TEST_CASE("engine: EAGLE-3 and MTP checkpoints draft through the protocol with greedy output equal to vanilla greedy decoding") {
  const auto f = engine::gguf_file::parse(tiny_model(/*layers=*/7).bytes());  // taps 2, 3, 4
  const auto model = engine::llama_model::load(f);
  std::vector<std::int32_t> prompt;
  for (int r = 0; r < 3; ++r)
    for (std::int32_t t : {12, 24, 36, 48}) prompt.push_back(t);
  engine::generation_options options;
  options.max_new_tokens = 20;
  const auto vanilla = engine::generate(model, prompt, nullptr, options);
  const std::string m = "midlayer.";
  st_tensor d2t{"d2t", "I64", {64}, {}};
  for (std::int64_t i = 0; i < 64; ++i) d2t.integers.push_back(3 * i);
  const auto eagle3 = write_safetensors(
      "specdec_test_eagle3.safetensors",
      random_checkpoint({{"fc.weight", {32, 96}}, {m + "hidden_norm.weight", {32}}, {m + "input_layernorm.weight", {32}},
                         {m + "self_attn.q_proj.weight", {32, 64}}, {m + "self_attn.k_proj.weight", {16, 64}},
                         {m + "self_attn.v_proj.weight", {16, 64}}, {m + "self_attn.o_proj.weight", {32, 32}},
                         {m + "post_attention_layernorm.weight", {32}}, {m + "mlp.gate_proj.weight", {48, 32}},
                         {m + "mlp.up_proj.weight", {48, 32}}, {m + "mlp.down_proj.weight", {32, 48}}, {"norm.weight", {32}},
                         {"lm_head.weight", {64, 32}}},
                        {d2t}));
  for (const bool adaptive : {false, true}) {
    CAPTURE(adaptive);
    engine::eagle3_drafter d(model, specdec::dynamic_tree_config{2, 2, 5, specdec::tree_score::log_probability, {}}, eagle3.string(), adaptive);
    const auto g = engine::generate(model, prompt, &d, options);
    CHECK(g.tokens == vanilla.tokens);
    CHECK(g.stats.drafted > 0);
    if (!adaptive) CHECK(g.stats.drafted == 4 * g.stats.target_calls);  // the configured 5-node tree every step
  }
  const std::string l = "model.layers.7.";
  const auto mtp = write_safetensors(
      "specdec_test_mtp.safetensors",
      random_checkpoint({{l + "enorm.weight", {32}}, {l + "hnorm.weight", {32}}, {l + "eh_proj.weight", {32, 64}},
                         {l + "input_layernorm.weight", {32}}, {l + "self_attn.q_proj.weight", {32, 32}},
                         {l + "self_attn.k_proj.weight", {16, 32}}, {l + "self_attn.v_proj.weight", {16, 32}},
                         {l + "self_attn.o_proj.weight", {32, 32}}, {l + "post_attention_layernorm.weight", {32}},
                         {l + "mlp.gate_proj.weight", {48, 32}}, {l + "mlp.up_proj.weight", {48, 32}},
                         {l + "mlp.down_proj.weight", {32, 48}}, {l + "shared_head.norm.weight", {32}}}));
  for (const bool adaptive : {false, true}) {
    CAPTURE(adaptive);
    engine::mtp_drafter d(model, /*longest=*/3, mtp.string(), adaptive);
    const auto g = engine::generate(model, prompt, &d, options);
    CHECK(g.tokens == vanilla.tokens);
    CHECK(g.stats.drafted > 0);
    if (!adaptive) CHECK(g.stats.drafted == 3 * g.stats.target_calls);  // a chain of 3 every step
  }
  // Sampled: lossless through the chain's kept distributions; reproducible for a seed.
  options.temperature = 0.8f;
  options.seed = 4;
  engine::mtp_drafter sampled(model, 3, mtp.string());
  const auto s1 = engine::generate(model, prompt, &sampled, options);
  engine::mtp_drafter again(model, 3, mtp.string());
  CHECK(engine::generate(model, prompt, &again, options).tokens == s1.tokens);
  std::filesystem::remove(eagle3);
  std::filesystem::remove(mtp);
}

TEST_CASE("engine: a checkpoint that does not match its layout fails with the file and tensor named") {
  const auto f = engine::gguf_file::parse(tiny_model().bytes());
  const auto model = engine::llama_model::load(f);
  const specdec::dynamic_tree_config tree{2, 2, 5, specdec::tree_score::log_probability, {}};
  const auto failure = [&](std::vector<st_tensor> tensors) {
    const auto path = write_safetensors("specdec_test_bad_eagle.safetensors", tensors);
    const std::string e = conformance::error_of([&] { engine::eagle_drafter(model, tree, path.string()); });
    std::filesystem::remove(path);
    return e;
  };
  auto c = tiny_eagle_checkpoint();
  c.erase(c.begin() + 1);  // fc.bias
  CHECK(failure(c).find("specdec_test_bad_eagle.safetensors: no tensor 'fc.bias'; expected [32] F16") != std::string::npos);
  c = tiny_eagle_checkpoint();
  c[2].shape = {16, 64};  // q_proj of another model width
  CHECK(failure(c).find("tensor 'layers.0.self_attn.q_proj.weight' is [16 x 64] F16; expected [32 x 32] F16") != std::string::npos);
  c = tiny_eagle_checkpoint();
  c[0].dtype = "F32";
  CHECK(failure(c).find("tensor 'fc.weight' is [32 x 64] F32; expected [32 x 64] F16") != std::string::npos);
  c = tiny_eagle_checkpoint();
  c.push_back({"layers.1.mlp.up_proj.weight", "F16", {1}, {0.5f}});
  CHECK(failure(c).find("unexpected tensor 'layers.1.mlp.up_proj.weight'") != std::string::npos);
  c = tiny_eagle_checkpoint();
  c.back().integers[63] = 1000;  // draft id 63 -> 1063, outside the 268-token vocabulary
  CHECK(failure(c).find("d2t[63] = 1000 maps draft id 63 to 1063; expected a target id in [0, 268)") != std::string::npos);
  CHECK(conformance::error_of([&] { engine::eagle_drafter(model, tree, "/nonexistent/eagle.safetensors"); }).find("cannot open") != std::string::npos);
}

TEST_CASE("engine: SmolLM2-135M-Instruct, when present, answers and round-trips its tokenizer") {
  const auto path = cached_model_path();
  if (path.empty() || !std::filesystem::exists(path)) {
    MESSAGE("SmolLM2-135M-Instruct not found (scripts/fetch_model.sh); checked with the tiny model only");
    return;
  }
  const auto f = engine::gguf_file::read(path);
  const engine::bpe_tokenizer tok(f);
  const std::string prompt = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";
  const auto ids = tok.encode(prompt);
  // Whole words and control tokens come out as single vocabulary entries.
  std::vector<std::string> pieces;
  for (auto id : ids) pieces.push_back(tok.token_bytes(id));
  CHECK(pieces == std::vector<std::string>{"<|im_start|>", "user", "\n", "What", " is", " the", " capital", " of", " France",
                                           "?", "<|im_end|>", "\n", "<|im_start|>", "ass", "istant", "\n"});
  CHECK(tok.decode(ids) == prompt);
  const auto model = engine::llama_model::load(f);
  engine::generation_options options;
  options.max_new_tokens = 8;
  const auto g = engine::generate(model, ids, nullptr, options);
  CHECK(tok.decode(g.tokens).find("Paris") != std::string::npos);
}
