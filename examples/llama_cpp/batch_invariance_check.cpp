// SPDX-License-Identifier: Apache-2.0
// Whether llama.cpp's rows depend on how many rows a decode holds, for a model, a prompt and thread
// counts: N tokens decoded greedily one per llama_decode (the reference), then the same tokens decoded
// again from the same prompt as chains of c tokens per decode, c from 2 to 33, every row compared bit for
// bit with the reference's. Prints one line per c (`ROWS c=<c> first_mismatch=<token index or -1>
// max_abs_diff=<x>`) and exits 1 when any row differs: the conditions of docs/engine.md, step 9, checked
// on the machine at hand.
//   specdec_llama_cpp_batch_invariance_check --model M.gguf [--prompt TEXT] [--tokens 48] [--threads 2]
//                                            [--decode-threads 1] [--chat-template NAME] [--no-repack]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "llama_adapter.hpp"

namespace {

std::int32_t argmax(const float* row, specdec::index_t v) {
  return static_cast<std::int32_t>(std::max_element(row, row + v) - row);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, prompt = "Write a short story about a lighthouse keeper who finds a message in a bottle.", chat_template;
  int tokens = 48, threads = 2;
  for (int i = 1; i < argc; i += 2) {
    const std::string key = argv[i];
    if (key == "--no-repack") {
      llama_example::repack_weights = false;
      --i;
      continue;
    }
    if (i + 1 == argc) {
      std::fprintf(stderr, "%s needs a value\n", key.c_str());
      return 2;
    }
    const std::string value = argv[i + 1];
    if (key == "--model") model = value;
    else if (key == "--prompt") prompt = value;
    else if (key == "--tokens") tokens = std::atoi(value.c_str());
    else if (key == "--threads") threads = std::atoi(value.c_str());
    else if (key == "--decode-threads") llama_example::decode_threads = std::atoi(value.c_str());
    else if (key == "--chat-template") chat_template = value;
    else {
      std::fprintf(stderr, "unknown option %s\n", key.c_str());
      return 2;
    }
  }
  if (model.empty()) {
    std::fprintf(stderr, "usage: %s --model M.gguf [--prompt TEXT] [--tokens N] [--threads N] [--decode-threads N]\n", argv[0]);
    return 2;
  }
  const int n_ctx = 4096;
  std::vector<std::int32_t> chat;
  {
    llama_example::llama_engine engine(model, threads, n_ctx, 1);
    engine.chat_template = chat_template;
    chat = engine.chat_tokens(prompt);
  }
  // The reference: one token per decode.
  std::vector<std::int32_t> ids;
  std::vector<float> rows;
  specdec::index_t vocab = 0;
  {
    llama_example::llama_engine engine(model, threads, n_ctx, 1);
    vocab = engine.vocab_size();
    const specdec::matrix_view<const float> first = engine.prefill(chat);
    ids.push_back(argmax(first.data(), vocab));
    for (int k = 0; k < tokens; ++k) {
      const specdec::matrix_view<const float> row = engine.decode_tree(specdec::make_tree({ids.back()}, {-1}));
      rows.insert(rows.end(), row.data(), row.data() + vocab);
      engine.keep(std::vector<std::int32_t>{0});
      ids.push_back(argmax(row.data(), vocab));
    }
  }
  bool same = true;
  // Chain lengths around each threshold of ggml's CPU kernels (4-row repacked products, 8-row tiled
  // products, SIMD widths) and the example's longest draft (32 + the root).
  for (const int c : {2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33}) {
    llama_example::llama_engine engine(model, threads, n_ctx, 1);
    (void)engine.prefill(chat);
    int first_mismatch = -1;
    double diff = 0.0;
    for (int at = 0; at < tokens; at += c) {
      const int len = std::min(c, tokens - at);
      std::vector<std::int32_t> chain_tokens(ids.begin() + at, ids.begin() + at + len), parents(static_cast<std::size_t>(len));
      std::vector<std::int32_t> path(static_cast<std::size_t>(len));
      for (int i = 0; i < len; ++i) {
        parents[static_cast<std::size_t>(i)] = i - 1;
        path[static_cast<std::size_t>(i)] = i;
      }
      const specdec::matrix_view<const float> got = engine.decode_tree(specdec::make_tree(chain_tokens, parents));
      for (int i = 0; i < len; ++i)
        for (specdec::index_t j = 0; j < vocab; ++j) {
          const float want = rows[static_cast<std::size_t>((at + i) * vocab + j)], have = got.row(i)[j];
          if (want != have && first_mismatch < 0) first_mismatch = at + i;
          diff = std::max(diff, static_cast<double>(std::fabs(want - have)));
        }
      engine.keep(path);
    }
    std::printf("ROWS c=%d first_mismatch=%d max_abs_diff=%.3g\n", c, first_mismatch, diff);
    same = same && first_mismatch < 0;
  }
  std::printf("%s\n", same ? "every chain's rows equal one-token decodes' bit for bit" : "rows differ from one-token decodes");
  return same ? 0 : 1;
}
