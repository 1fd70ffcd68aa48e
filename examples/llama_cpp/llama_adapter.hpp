// SPDX-License-Identifier: Apache-2.0
// Every llama.cpp call of the llama.cpp example, in one place: load, tokenise with the model's chat
// template, decode a specdec draft tree in one llama_decode, the logits as a specdec view, and keep
// the accepted path in the KV cache. The template for integrating specdec into an engine that, like
// llama.cpp, expresses a tree through sequence ids instead of an attention mask.
//
// How a tree becomes one batch. llama.cpp has no explicit mask: a query attends to the cached cells of
// its first sequence id at positions not later than its own. So each leaf of the tree gets a sequence
// id of its own (1..L; 0 holds the committed context, copied to each leaf's sequence first, which
// retags cells rather than copying K/V), every node carries the ids of every leaf below it, and its
// position is the committed length plus its depth: then each node sees exactly the committed context
// and its ancestors. A chain needs no extra sequence. The context needs `kv_unified` (sequences share
// cells) and `n_seq_max` >= 1 + leaves.
//
// Holes. llama.cpp's next decode is not the same after a kept path leaves free cells between kept
// ones (its flash-attention kernel differs even for one token; without it, several tokens placed in
// the holes differ; tree_kv_check.cpp shows both). So the cache never keeps a hole: trees are decoded
// in depth-first order (dfs_order; a valid draft_tree too, parents first, siblings in order), so the
// accepted path is a run of consecutive cells as long as it follows first children; from the first
// node that does not, the accepted tokens are dropped from the cache with everything after them and
// decoded again at the start of the next batch (`pending`), where they cost rows, not a forward.
#pragma once

#include <llama.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <specdec/core/view.hpp>
#include <specdec/tree/tree.hpp>

namespace llama_example {

/// The buffer types llama.cpp put the weights of the models loaded so far into, by name, in load
/// order ("CPU_Mapped", "CPU_REPACK", "AMX", ...). llama.cpp has no call that lists them; it logs one
/// "<name> model buffer size = ..." line per buffer, which llama_engine's log handler reads.
inline std::vector<std::string>& model_buffer_types() {
  static std::vector<std::string> names;
  return names;
}

/// The weight layouts ggml's CPU backend offers besides plain host memory (its extra buffer types,
/// by name: "CPU_REPACK", and "AMX" when built with AMX on a CPU that has it); what llama.cpp picks
/// from when it loads a model.
inline std::vector<std::string> cpu_extra_buffer_types() {
  std::vector<std::string> names;
  ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
  if (cpu == nullptr) return names;
  const auto get = reinterpret_cast<ggml_backend_dev_get_extra_bufts_t>(
      ggml_backend_reg_get_proc_address(ggml_backend_dev_backend_reg(cpu), "ggml_backend_dev_get_extra_bufts"));
  if (get == nullptr) return names;
  for (ggml_backend_buffer_type_t* buft = get(cpu); *buft != nullptr; ++buft) names.emplace_back(ggml_backend_buft_name(*buft));
  return names;
}

/// Threads of one-token decodes, when not `threads` (0): `--decode-threads`. llama.cpp's flash attention
/// splits a one-token decode's keys across its threads once the cache holds 512 cells (256 used, padded),
/// and never a multi-token decode's, so a tree decode's rows equal one-token decodes' bit for bit only
/// when those run on one thread (docs/engine.md, step 9).
inline int decode_threads = 0;

/// Whether one-token and multi-token decodes of a run of `cells` cells take the same reduction order:
/// false when one-token decodes run on several threads with flash attention and the cache passes 256
/// cells (ggml's split-KV path: ops.cpp of the pin, taken for one query row, an F16 cache and >= 512
/// cells after padding to 256).
inline bool batch_invariant(int threads, bool flash_attention, long long cells) {
  const int one_token_threads = decode_threads > 0 ? decode_threads : threads;
  return one_token_threads <= 1 || !flash_attention || cells <= 256;
}

/// Whether llama.cpp may repack weights into its CPU layouts (CPU_REPACK: Q4_0, Q4_K, IQ4_NL into 8x8
/// blocks), `--no-repack` false. Off, every row count multiplies through the same dot product.
inline bool repack_weights = true;

class llama_engine {
 public:
  /// Loads the GGUF at `path`: a context of `n_ctx` tokens, `threads` threads, room for trees of up
  /// to `max_leaves` leaves; `flash_attention` false turns llama.cpp's off (tree_kv_check compares).
  llama_engine(const std::string& path, int threads, int n_ctx, int max_leaves, bool flash_attention = true)
      : max_leaves_(max_leaves) {
    // llama.cpp logs every tensor it loads; keep its errors, and the names of its weight buffers.
    llama_log_set([](ggml_log_level level, const char* text, void*) {
      static ggml_log_level last = GGML_LOG_LEVEL_INFO;  // a CONT message continues the previous one's level
      if (level != GGML_LOG_LEVEL_CONT) last = level;
      if (last >= GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
      // "load_tensors:   CPU_REPACK model buffer size =    61.15 MiB"
      const std::string line(text);
      const std::size_t colon = line.find(": "), tail = line.find(" model buffer size");
      if (colon == std::string::npos || tail == std::string::npos || tail < colon) return;
      const std::size_t begin = line.find_first_not_of(' ', colon + 1);
      if (begin < tail) model_buffer_types().push_back(line.substr(begin, tail - begin));
    }, nullptr);
    // ggml's tiled K-quant matrix product runs for 8 rows or more and sums each block in another order
    // than its one-row dot product (ggml-cpu/tiled of the pin): a tree of 8 rows would then differ from
    // one-token decodes in the last bits. Off unless the caller chose; llama.cpp's own programs must run
    // with the same setting to give the same tokens (scripts/compare_llama_cpp.sh exports it).
    setenv("GGML_CPU_TILED_MM", "0", /*overwrite=*/0);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.use_extra_bufts = repack_weights;
    model_ = llama_model_load_from_file(path.c_str(), mp);
    if (model_ == nullptr) throw std::runtime_error("llama.cpp could not load " + path);
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = static_cast<std::uint32_t>(n_ctx);
    cp.n_batch = static_cast<std::uint32_t>(n_ctx);
    cp.n_seq_max = static_cast<std::uint32_t>(1 + max_leaves);
    cp.kv_unified = true;
    cp.n_threads = decode_threads > 0 ? decode_threads : threads;  // one-token decodes
    cp.n_threads_batch = threads;
    cp.no_perf = true;
    cp.flash_attn_type = flash_attention ? LLAMA_FLASH_ATTN_TYPE_AUTO : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    ctx_ = llama_init_from_model(model_, cp);
    if (ctx_ == nullptr) throw std::runtime_error("llama.cpp could not create a context");
    vocab_ = llama_model_get_vocab(model_);
    batch_ = llama_batch_init(n_ctx, 0, 1 + max_leaves);
  }
  ~llama_engine() {
    llama_batch_free(batch_);
    llama_free(ctx_);
    llama_model_free(model_);
  }
  llama_engine(const llama_engine&) = delete;
  llama_engine& operator=(const llama_engine&) = delete;

  specdec::index_t vocab_size() const { return llama_vocab_n_tokens(vocab_); }
  const llama_vocab* vocab() const { return vocab_; }
  bool is_end(std::int32_t token) const { return llama_vocab_is_eog(vocab_, token); }
  /// Tokens in the KV cache (positions 0 .. committed - 1 of sequence 0); the kept tokens still to be
  /// decoded again come after them.
  specdec::index_t committed() const { return committed_; }

  /// A template llama_chat_apply_template knows by name ("gemma", "chatml", ...) used instead of the
  /// model's own: for base models whose GGUF has none (llama.cpp would fall back to ChatML).
  std::string chat_template;
  /// The user prompt in the model's chat template, ready for the assistant's turn, as text (what
  /// llama.cpp's own programs take as a raw prompt).
  std::string chat_text(const std::string& user) const {
    const llama_chat_message message{"user", user.c_str()};
    std::string text(user.size() * 2 + 256, '\0');
    const char* tmpl = chat_template.empty() ? llama_model_chat_template(model_, nullptr) : chat_template.c_str();
    int n = llama_chat_apply_template(tmpl, &message, 1, true, text.data(), static_cast<std::int32_t>(text.size()));
    if (n > static_cast<int>(text.size())) {
      text.resize(static_cast<std::size_t>(n));
      n = llama_chat_apply_template(tmpl, &message, 1, true, text.data(), static_cast<std::int32_t>(text.size()));
    }
    if (n < 0) throw std::runtime_error("llama.cpp could not apply the chat template");
    text.resize(static_cast<std::size_t>(n));
    return text;
  }
  /// chat_text as tokens, special tokens parsed, as llama.cpp's programs tokenise a prompt.
  std::vector<std::int32_t> chat_tokens(const std::string& user) const {
    const std::string text = chat_text(user);
    std::vector<std::int32_t> tokens(text.size() + 16);
    const int count = llama_tokenize(vocab_, text.data(), static_cast<std::int32_t>(text.size()), tokens.data(),
                                     static_cast<std::int32_t>(tokens.size()), true, true);
    if (count < 0) throw std::runtime_error("llama.cpp could not tokenise the prompt");
    tokens.resize(static_cast<std::size_t>(count));
    return tokens;
  }
  std::string piece(std::int32_t token) const {
    char buf[256];
    const int n = llama_token_to_piece(vocab_, token, buf, sizeof buf, 0, false);
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
  }

  /// Decodes `tokens` causally after the committed context (a prefill), committing them; returns the
  /// last row's logits `[1 x V]`.
  specdec::matrix_view<const float> prefill(std::span<const std::int32_t> tokens) {
    batch_.n_tokens = 0;
    for (std::size_t i = 0; i < tokens.size(); ++i)
      add(tokens[i], committed_ + static_cast<specdec::index_t>(i), {0}, i + 1 == tokens.size());
    decode();
    committed_ += static_cast<specdec::index_t>(tokens.size());
    return {llama_get_logits(ctx_), 1, vocab_size()};
  }

  /// Decodes a draft tree in depth-first order (see dfs_order: pass a tree so ordered to read the
  /// logits without a copy) in one llama_decode, after the tokens kept from the last tree but not yet
  /// in the cache, and returns every node's logits `[tree.size() x V]`, row i the distribution of
  /// the token after node i: the view specdec's verifiers read. Node 0, the root, is the next token.
  specdec::matrix_view<const float> decode_tree(const specdec::draft_tree& tree) {
    const auto n = static_cast<std::size_t>(tree.size());
    if (!is_dfs_ordered(tree)) throw std::invalid_argument("decode_tree: the tree is not in depth-first order (dfs_order)");
    // Leaves get sequences 1..L (a chain keeps sequence 0); every node the ids of the leaves below it.
    const std::vector<bool> leaf = specdec::leaf_flags(tree);
    std::vector<std::vector<llama_seq_id>> ids(n);
    leaf_seq_.assign(n, 0);
    const bool chain = std::count(leaf.begin(), leaf.end(), true) == 1;
    llama_seq_id next = 1;
    for (std::size_t i = n; i-- > 0;) {
      if (leaf[i]) leaf_seq_[i] = chain ? 0 : next++;
      if (leaf[i]) ids[i].push_back(leaf_seq_[i]);
      if (i > 0) {
        const auto p = static_cast<std::size_t>(tree.parent[i]);
        ids[p].insert(ids[p].end(), ids[i].begin(), ids[i].end());
        leaf_seq_[p] = leaf_seq_[i];  // some leaf below the parent
      }
    }
    if (next - 1 > max_leaves_) throw std::runtime_error("the tree has more leaves than the context's sequences");
    llama_memory_t mem = llama_get_memory(ctx_);
    for (llama_seq_id s = 1; s < next; ++s) {
      llama_memory_seq_rm(mem, s, -1, -1);
      llama_memory_seq_cp(mem, 0, s, -1, -1);
    }
    batch_.n_tokens = 0;
    for (std::size_t j = 0; j < pending_.size(); ++j)  // committed context for every leaf
      add(pending_[j], committed_ + static_cast<specdec::index_t>(j), ids[0], false);
    // ggml's flash attention takes a tiled path for 64 query rows or more (GGML_FA_TILE_Q of the pin)
    // that sums in another order than its path for fewer: a decode of the kept tokens and a tree that
    // together reach 64 rows is made as two, which write the same cells and keep every row below 64.
    if (!pending_.empty() && pending_.size() + n >= max_rows_per_decode) {
      decode();
      batch_.n_tokens = 0;
    }
    const auto base = committed_ + static_cast<specdec::index_t>(pending_.size());
    for (std::size_t i = 0; i < n; ++i) add(tree.token[i], base + tree.depth[i], ids[i], true);
    decode();
    last_tokens_ = tree.token;
    return {llama_get_logits(ctx_), static_cast<specdec::index_t>(n), vocab_size()};
  }

  /// The tree in depth-first preorder (children in their order): what decode_tree takes. A node's
  /// parent still comes first, and sibling order is kept, so verification decides the same tokens.
  static specdec::draft_tree dfs_order(const specdec::draft_tree& tree) {
    const auto n = static_cast<std::size_t>(tree.size());
    std::vector<std::vector<std::int32_t>> children(n);
    for (std::size_t i = 1; i < n; ++i) children[static_cast<std::size_t>(tree.parent[i])].push_back(static_cast<std::int32_t>(i));
    std::vector<std::int32_t> order, stack = {0}, index(n);
    while (!stack.empty()) {
      const std::int32_t v = stack.back();
      stack.pop_back();
      index[static_cast<std::size_t>(v)] = static_cast<std::int32_t>(order.size());
      order.push_back(v);
      for (auto c = children[static_cast<std::size_t>(v)].rbegin(); c != children[static_cast<std::size_t>(v)].rend(); ++c) stack.push_back(*c);
    }
    std::vector<std::int32_t> tokens(n), parents(n);
    for (std::size_t k = 0; k < n; ++k) {
      const auto v = static_cast<std::size_t>(order[k]);
      tokens[k] = tree.token[v];
      parents[k] = v == 0 ? -1 : index[static_cast<std::size_t>(tree.parent[v])];
    }
    return specdec::make_tree(std::move(tokens), parents);
  }

  /// Seconds one llama_decode of `rows` tokens takes after the committed context: decoded on a scratch
  /// sequence, which is dropped again (its cells are the last ones, so no hole is left). What an
  /// engine measures once at startup, so that its draft-length policy knows verification's cost by
  /// row count before the first request.
  double time_decode(int rows) {
    const llama_seq_id scratch = max_leaves_;
    llama_memory_t mem = llama_get_memory(ctx_);
    llama_memory_seq_rm(mem, scratch, -1, -1);
    llama_memory_seq_cp(mem, 0, scratch, -1, -1);
    batch_.n_tokens = 0;
    for (int i = 0; i < rows; ++i) add(0, committed_ + i, {scratch}, true);
    const auto start = std::chrono::steady_clock::now();
    decode();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    llama_memory_seq_rm(mem, scratch, -1, -1);
    return seconds;
  }

  /// Keeps the accepted path of the last decoded tree (`kept`: the root, then the accepted nodes, in
  /// path order) as committed context and drops every other node. The path's cells stay up to its
  /// first node that is not the next cell (a node that does not follow first children); the tokens
  /// from there on are decoded again in front of the next tree, so no cell is left free between
  /// kept ones.
  void keep(std::span<const std::int32_t> kept) {
    std::size_t run = 0;  // kept nodes in consecutive cells: node j of the path is node j of the tree
    while (run < kept.size() && kept[run] == static_cast<std::int32_t>(run)) ++run;
    llama_memory_t mem = llama_get_memory(ctx_);
    const llama_seq_id s = leaf_seq_[static_cast<std::size_t>(kept[run - 1])];
    const auto end = static_cast<llama_pos>(committed_ + static_cast<specdec::index_t>(pending_.size() + run));
    if (s == 0) {
      llama_memory_seq_rm(mem, 0, end, -1);  // a chain: its tail
    } else {
      // The run's cells (and the pending tokens') get sequence 0 (they all belong to leaf sequence
      // s), then the leaf sequences are dropped, which frees every other node's cell.
      llama_memory_seq_cp(mem, s, 0, static_cast<llama_pos>(committed_), end);
      for (llama_seq_id leaf = 1; leaf <= max_leaves_; ++leaf) llama_memory_seq_rm(mem, leaf, -1, -1);
    }
    committed_ = end;
    std::vector<std::int32_t> rest;
    for (std::size_t j = run; j < kept.size(); ++j) rest.push_back(last_tokens_[static_cast<std::size_t>(kept[j])]);
    pending_ = std::move(rest);
  }

 private:
  void add(std::int32_t token, specdec::index_t pos, const std::vector<llama_seq_id>& seqs, bool logits) {
    const int i = batch_.n_tokens++;
    batch_.token[i] = token;
    batch_.pos[i] = static_cast<llama_pos>(pos);
    batch_.n_seq_id[i] = static_cast<std::int32_t>(seqs.size());
    for (std::size_t k = 0; k < seqs.size(); ++k) batch_.seq_id[i][k] = seqs[k];
    batch_.logits[i] = logits ? 1 : 0;
  }
  /// Query rows of one decode below which ggml's flash attention keeps its one-pass path (see decode_tree).
  static constexpr std::size_t max_rows_per_decode = 64;

  void decode() {
    const int status = llama_decode(ctx_, batch_);
    if (status != 0) throw std::runtime_error("llama_decode failed with status " + std::to_string(status));
  }

  llama_model* model_ = nullptr;
  llama_context* ctx_ = nullptr;
  const llama_vocab* vocab_ = nullptr;
  llama_batch batch_{};
  int max_leaves_;
  specdec::index_t committed_ = 0;
  std::vector<llama_seq_id> leaf_seq_;  // per node of the last tree: a leaf sequence below it
  std::vector<std::int32_t> last_tokens_;  // the last tree's tokens
  std::vector<std::int32_t> pending_;      // kept tokens not in the cache, decoded before the next tree

  static bool is_dfs_ordered(const specdec::draft_tree& tree) {
    // Preorder: each node's parent is the previous node or one of its ancestors.
    for (std::size_t i = 1; i < tree.token.size(); ++i) {
      std::int32_t a = static_cast<std::int32_t>(i) - 1;
      while (a >= 0 && a != tree.parent[i]) a = tree.parent[static_cast<std::size_t>(a)];
      if (a < 0) return false;
    }
    return true;
  }
};

}  // namespace llama_example
