// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Repetition, frequency and presence penalties and logit bias on the target rows of a draft tree,
/// each node penalised by its own history: the committed tokens plus the drafts on its path (what vLLM's
/// rejection sampler gives target row i: the output plus drafts 0..i-1), without materialising counts
/// per row: a request's committed counts are built once, and each node's path adds a few tokens on top.
///
/// Semantics, in vLLM's order (Sampler.forward): logit bias (`x += bias`); repetition for tokens seen in
/// the prompt or the history (`x > 0 ? x / r : x * r`: Hugging Face's RepetitionPenaltyLogitsProcessor
/// and vLLM's CUDA kernel; vLLM's torch path multiplies by the float reciprocal instead, which differs in
/// the last bit: `repetition_rule`); frequency `x -= f * count` and presence `x -= p * [count > 0]` over the
/// history only (OpenAI's definition). Bit for bit with vLLM's `apply_penalties` and transformers'
/// processor (tests/test_penalties.cpp, goldens from their code), -0.0 logits included: vLLM subtracts
/// `f * 0` from every entry, which turns -0.0 into +0.0 where f or p is negative, and so does this.
///
/// llama.cpp's penalties sampler (`llama_sampler_init_penalties`) is the other convention
/// (`penalty_convention::llama_cpp`, with a history from `penalty_history::last_n`): all three penalties
/// count the last `penalty_last_n` tokens of the whole context, prompt and output alike (a window that
/// a node's draft path slides: the path's tokens enter, the oldest leave), the repetition rule is
/// `x <= 0 ? x * r : x / r` (the same as `divide`), frequency and presence are subtracted as one
/// rounded term `x -= c * f + [c > 0] * p`, and untouched entries are never written. Bit for bit with
/// llama.cpp's sampler run on the same rows (examples/llama_cpp/sampler_check.cpp, and its cases in
/// tests/data/penalties/llama_cpp.json).
///
/// Products are rounded to float before they are added or subtracted, as both peers' builds do: a
/// compiler that contracts `x - f * c` into one FMA (GCC in GNU mode with FMA enabled) would otherwise
/// differ from them in the last bit.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include <specdec/config.hpp>
#include <specdec/core/checked.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view_checks.hpp>
#include <specdec/core/view.hpp>
#include <specdec/tree/tree.hpp>

namespace specdec::sampling {

/// How repetition scales a seen token's logit x.
enum class repetition_rule {
  divide,               ///< x > 0 ? x / r : x * r (Hugging Face, vLLM's CUDA kernel)
  multiply_reciprocal,  ///< x * (x > 0 ? 1 / r : r), 1 / r rounded to float first (vLLM's torch path, CPU)
};

/// Whose definition of the penalties: which tokens count, and how the terms are rounded.
enum class penalty_convention {
  vllm,       ///< repetition over prompt + output, frequency / presence over the output (OpenAI); history(prompt, output)
  llama_cpp,  ///< all three over the last n tokens of the context; history from penalty_history::last_n
};

/// A request's penalty parameters (vLLM's SamplingParams names).
struct penalty_params {
  float repetition = 1.0f;  ///< > 0; 1: none
  float frequency = 0.0f;   ///< finite; 0: none
  float presence = 0.0f;    ///< finite; 0: none
  repetition_rule rule = repetition_rule::divide;  ///< vllm convention only (llama.cpp's rule is `divide`)
  penalty_convention convention = penalty_convention::vllm;
};

/// One logit-bias entry: `logits[token] += bias` before the penalties.
struct logit_bias {
  std::int32_t token;
  float bias;
};

/// The committed history of one request: the prompt's distinct tokens and the output's token counts
/// (vLLM's convention), or the counts of the context's last n tokens (llama.cpp's: `last_n`). Build it
/// once per request and `append` each emitted token; every tree step reads it.
class penalty_history {
 public:
  penalty_history() = default;
  /// llama.cpp's history: the last `last_n` tokens of `context` (the prompt and the output as its
  /// sampler accepted them; 0: none, which disables the penalties; a window as long as the context
  /// for all of it), counted for all three penalties; `append` slides the window as
  /// llama_sampler_accept does. (llama.cpp's sampler clamps a negative window to 0 and its programs
  /// reject one: so does this.)
  /// \throws invalid_argument on a negative token or last_n < 0.
  static penalty_history last_n(std::span<const std::int32_t> context, std::int32_t last_n) {
    SPECDEC_EXPECTS(last_n >= 0, "specdec::sampling::penalty_history::last_n", "last_n = ", last_n,
                    "; expected a window length >= 0 (0: no penalties)");
    penalty_history h;
    h.window_ = last_n;
    for (const std::int32_t t : context) h.append(t);
    return h;
  }
  /// \throws invalid_argument on a negative token.
  penalty_history(std::span<const std::int32_t> prompt, std::span<const std::int32_t> output) {
    for (std::size_t i = 0; i < prompt.size(); ++i) {
      SPECDEC_EXPECTS(prompt[i] >= 0, "specdec::sampling::penalty_history", "prompt[", i, "] = ", prompt[i],
                      "; expected a token id >= 0");
      prompt_.push_back(prompt[i]);
    }
    std::sort(prompt_.begin(), prompt_.end());
    prompt_.erase(std::unique(prompt_.begin(), prompt_.end()), prompt_.end());
    for (const std::int32_t t : output) append(t);
  }
  /// An emitted token joins the output. \throws invalid_argument on a negative token.
  void append(std::int32_t token) {
    SPECDEC_EXPECTS(token >= 0, "specdec::sampling::penalty_history::append", "token = ", token, "; expected a token id >= 0");
    if (window_ == 0) return;
    ++output_[token];
    if (window_ < 0) return;  // a vLLM history counts the whole output
    recent_.push_back(token);
    if (static_cast<std::int32_t>(recent_.size() - head_) > window_) {  // the oldest leaves, as in llama.cpp's ring buffer
      const auto it = output_.find(recent_[head_++]);
      if (--it->second == 0) output_.erase(it);
      if (head_ > recent_.size() / 2) {
        recent_.erase(recent_.begin(), recent_.begin() + static_cast<std::ptrdiff_t>(head_));
        head_ = 0;
      }
    }
  }
  /// The convention this history counts for.
  penalty_convention convention() const {
    return window_ == unwindowed ? penalty_convention::vllm : penalty_convention::llama_cpp;
  }
  /// llama.cpp's window length (0: none); -2 for a vLLM history.
  std::int32_t window() const { return window_; }
  /// llama.cpp's window, oldest first (empty for a vLLM history).
  std::span<const std::int32_t> recent() const { return std::span<const std::int32_t>(recent_).subspan(head_); }
  bool in_prompt(std::int32_t t) const { return std::binary_search(prompt_.begin(), prompt_.end(), t); }
  std::int32_t output_count(std::int32_t t) const {
    const auto it = output_.find(t);
    return it == output_.end() ? 0 : it->second;
  }
  /// Largest token id held (-1 when empty), for the vocabulary check.
  std::int32_t max_token() const {
    std::int32_t m = prompt_.empty() ? -1 : prompt_.back();
    for (const auto& [t, c] : output_) m = std::max(m, t);
    return m;
  }
  /// A token a penalty can touch: in the prompt, or counted in the output.
  struct entry {
    std::int32_t token;
    std::int32_t output_count;
    bool in_prompt;
  };
  /// Every token of the prompt or the output, sorted and distinct, with what the penalties read.
  std::vector<entry> touched() const {
    std::vector<entry> out;
    out.reserve(prompt_.size() + output_.size());
    for (const std::int32_t t : prompt_) out.push_back({t, output_count(t), true});
    for (const auto& [t, c] : output_)
      if (!in_prompt(t)) out.push_back({t, c, false});
    std::sort(out.begin(), out.end(), [](const entry& a, const entry& b) { return a.token < b.token; });
    return out;
  }

 private:
  static constexpr std::int32_t unwindowed = -2;
  std::vector<std::int32_t> prompt_;
  std::unordered_map<std::int32_t, std::int32_t> output_;  // vllm: output counts; llama_cpp: the window's counts
  std::int32_t window_ = unwindowed;
  std::vector<std::int32_t> recent_;  // llama_cpp with a bounded window: its tokens from head_, oldest first
  std::size_t head_ = 0;
};

namespace detail {

/// `a * b` rounded to float, never fused into a following add (see the file comment; nvcc contracts
/// too, hence `__fmul_rn` in device code).
SPECDEC_HOST_DEVICE inline float rounded_product(float a, float b) noexcept {
#if SPECDEC_DEVICE_CODE
  return __fmul_rn(a, b);
#else
  float product = a * b;
#if defined(__GNUC__) || defined(__clang__)
  __asm__("" : "+m"(product));
#endif
  return product;
#endif
}

/// vLLM's repetition, frequency and presence on one logit `v` of a token seen `count` times in the
/// history (plus path) and, for repetition, `in_prompt`. `inv_r` = 1 / p.repetition rounded to float.
/// Branch-free: both sides computed, then selected (a branch on the sign of a logit, or on whether a
/// token was seen, mispredicts about every other token).
SPECDEC_HOST_DEVICE inline float vllm_penalised(float v, bool in_prompt, std::int64_t count, const penalty_params& p,
                                               float inv_r) noexcept {
  const float quotient = v / p.repetition, product = v * p.repetition, reciprocal = v * inv_r;
  const float repeated = v > 0.0f ? (p.rule == repetition_rule::divide ? quotient : reciprocal) : product;
  v = in_prompt || count > 0 ? repeated : v;
  v -= rounded_product(p.frequency, static_cast<float>(count));
  v -= rounded_product(p.presence, count > 0 ? 1.0f : 0.0f);
  return v;
}

/// llama.cpp's penalties on one logit of a token counted `count` > 0 times in the window.
inline float llama_cpp_penalised(float v, std::int64_t count, const penalty_params& p) noexcept {
  const float quotient = v / p.repetition, product = v * p.repetition;  // both, then selected: no branch
  v = v <= 0.0f ? product : quotient;
  return v - (rounded_product(static_cast<float>(count), p.frequency) + p.presence);  // float(count > 0) * p is p
}

/// Whether the penalties can only lower a logit (repetition >= 1, frequency and presence >= 0): then a
/// token whose raw logit is below a value stays below it.
inline bool penalties_only_lower(const penalty_params& p) noexcept {
  return p.repetition >= 1.0f && p.frequency >= 0.0f && p.presence >= 0.0f;
}

/// llama.cpp's `is_disabled`: no window, or neutral parameters; then its sampler changes nothing.
inline bool llama_cpp_disabled(const penalty_history& history, const penalty_params& p) noexcept {
  return history.window() == 0 || (p.repetition == 1.0f && p.frequency == 0.0f && p.presence == 0.0f);
}

/// How a path moves llama.cpp's window (n = history.window() > 0 tokens): the path's last n tokens enter
/// and as many of the window's oldest leave.
struct window_moves {
  std::span<const std::int32_t> entering, leaving;
};
inline window_moves llama_cpp_window_moves(const penalty_history& history, std::span<const std::int32_t> path) {
  const auto n = static_cast<std::size_t>(history.window());
  const std::span<const std::int32_t> entering = path.size() > n ? path.last(n) : path;
  const std::span<const std::int32_t> recent = history.recent();
  const std::size_t overflow = recent.size() + entering.size();
  return {entering, recent.first(overflow > n ? overflow - n : 0)};
}

/// The change of a token's count in llama.cpp's window along a path (llama_cpp_window_moves).
inline std::int32_t llama_cpp_window_change(const penalty_history& history, std::span<const std::int32_t> path, std::int32_t t) {
  const window_moves m = llama_cpp_window_moves(history, path);
  return static_cast<std::int32_t>(std::count(m.entering.begin(), m.entering.end(), t) -
                                   std::count(m.leaving.begin(), m.leaving.end(), t));
}

/// A path's tokens as (token, count) runs, ascending: one sort of the path (O(d log d)), so each
/// touched token's path count is found by a merge, never by scanning the path per token.
inline void count_path_tokens(std::span<const std::int32_t> path, std::vector<std::pair<std::int32_t, std::int32_t>>& runs) {
  runs.clear();
  std::vector<std::int32_t> sorted(path.begin(), path.end());
  std::sort(sorted.begin(), sorted.end());
  for (const std::int32_t t : sorted) {
    if (!runs.empty() && runs.back().first == t) ++runs.back().second;
    else runs.emplace_back(t, 1);
  }
}

/// Calls `both(entry, extra)` for every touched entry (extra: its run's count, 0 without one) and
/// `runs_only(token, count)` for every run whose token no entry holds, merging two ascending lists:
/// O(touched + runs).
template <class Both, class RunsOnly>
void merge_touched(std::span<const penalty_history::entry> touched, std::span<const std::pair<std::int32_t, std::int32_t>> runs,
                   Both&& both, RunsOnly&& runs_only) {
  std::size_t k = 0;
  for (const penalty_history::entry& e : touched) {
    for (; k < runs.size() && runs[k].first < e.token; ++k) runs_only(runs[k].first, runs[k].second);
    const bool matched = k < runs.size() && runs[k].first == e.token;
    both(e, matched ? runs[k++].second : 0);
  }
  for (; k < runs.size(); ++k) runs_only(runs[k].first, runs[k].second);
}

/// vLLM's convention on the entries `x(t)` (a float& per token) of the history's `touched` tokens plus
/// `path` (the node's draft tokens). The dense half (-0.0 to +0.0 where f or p is negative) is
/// penalise_row's. Each entry is penalised once, with its committed count plus its path count:
/// O(touched + d log d) for a path of d tokens.
template <class Entry>
void penalise_entries_vllm(Entry&& x, std::span<const penalty_history::entry> touched, std::span<const std::int32_t> path,
                           const penalty_params& p) {
  const float inv_r = 1.0f / p.repetition;
  const auto penalise = [&](std::int32_t t, bool in_prompt, std::int64_t count) {
    float& e = x(t);
    e = vllm_penalised(e, in_prompt, count, p, inv_r);
  };
  std::vector<std::pair<std::int32_t, std::int32_t>> runs;
  count_path_tokens(path, runs);
  merge_touched(
      touched, runs,
      [&](const penalty_history::entry& e, std::int32_t extra) {
        penalise(e.token, e.in_prompt, std::int64_t{e.output_count} + extra);
      },
      [&](std::int32_t t, std::int32_t count) { penalise(t, false, count); });
}

/// llama.cpp's convention on the entries `x(t)`: the window after `path` is the last n tokens of the
/// committed window followed by the path, so the path's last n tokens enter and as many of the oldest
/// leave. O(touched + d log d).
template <class Entry>
void penalise_entries_llama_cpp(Entry&& x, std::span<const penalty_history::entry> touched, const penalty_history& history,
                                std::span<const std::int32_t> path, const penalty_params& p) {
  if (llama_cpp_disabled(history, p)) return;
  // The net change of each count along the path (entering +1, leaving -1), as ascending runs.
  std::vector<std::pair<std::int32_t, std::int32_t>> delta;
  const window_moves moves = llama_cpp_window_moves(history, path);
  for (const std::int32_t t : moves.entering) delta.emplace_back(t, 1);
  for (const std::int32_t t : moves.leaving) delta.emplace_back(t, -1);
  std::sort(delta.begin(), delta.end());
  std::vector<std::pair<std::int32_t, std::int32_t>> runs;
  for (const auto& [t, d] : delta) {
    if (!runs.empty() && runs.back().first == t) runs.back().second += d;
    else runs.emplace_back(t, d);
  }
  const auto penalise = [&](std::int32_t t, std::int64_t count) {
    if (count <= 0) return;  // outside the window: llama.cpp never touches it
    float& e = x(t);
    e = llama_cpp_penalised(e, count, p);
  };
  merge_touched(
      touched, runs, [&](const penalty_history::entry& e, std::int32_t change) { penalise(e.token, std::int64_t{e.output_count} + change); },
      [&](std::int32_t t, std::int32_t change) { penalise(t, change); });
}

/// Logit bias then the params' penalties on the entries `x(t)` (committed history `touched` =
/// history.touched(), plus `path`: the node's draft tokens, oldest first).
template <class Entry>
void penalise_entries(Entry&& x, std::span<const penalty_history::entry> touched, const penalty_history& history,
                      std::span<const std::int32_t> path, const penalty_params& p, std::span<const logit_bias> bias) {
  for (const logit_bias& b : bias) x(b.token) += b.bias;
  if (p.convention == penalty_convention::vllm) penalise_entries_vllm(x, touched, path, p);
  else penalise_entries_llama_cpp(x, touched, history, path, p);
}

/// Penalises one row in place (see penalise_entries), vLLM's dense -0.0 rule included.
inline void penalise_row(float* x, index_t vocab, std::span<const penalty_history::entry> touched, const penalty_history& history,
                         std::span<const std::int32_t> path, const penalty_params& p, std::span<const logit_bias> bias) {
  // vLLM subtracts f * count and p * [count > 0] from every entry: where f or p is negative an untouched
  // -0.0 becomes +0.0 (x - (-0.0)); nothing else changes for untouched entries.
  for (const logit_bias& b : bias) x[b.token] += b.bias;
  if (p.convention == penalty_convention::vllm && (std::signbit(p.frequency) || std::signbit(p.presence)))
    for (index_t j = 0; j < vocab; ++j)
      if (x[j] == 0.0f) x[j] = 0.0f;
  penalise_entries([x](std::int32_t t) -> float& { return x[t]; }, touched, history, path, p, {});
}


inline void check_penalties(const char* where, const penalty_params& p, std::span<const logit_bias> bias, index_t vocab,
                            const penalty_history& history) {
  SPECDEC_EXPECTS(p.repetition > 0.0f && std::isfinite(p.repetition), where, "repetition = ", p.repetition,
                  "; expected a finite value > 0 (1: none)");
  SPECDEC_EXPECTS(std::isfinite(p.frequency), where, "frequency = ", p.frequency, "; expected a finite value (0: none)");
  SPECDEC_EXPECTS(std::isfinite(p.presence), where, "presence = ", p.presence, "; expected a finite value (0: none)");
  SPECDEC_EXPECTS(p.rule == repetition_rule::divide || p.rule == repetition_rule::multiply_reciprocal, where, "rule = ",
                  static_cast<int>(p.rule), "; expected a repetition_rule enumerator");
  for (std::size_t i = 0; i < bias.size(); ++i) {
    SPECDEC_EXPECTS(bias[i].token >= 0 && bias[i].token < vocab, where, "bias[", i, "].token = ", bias[i].token,
                    "; expected a token in [0, ", vocab, ")");
    SPECDEC_EXPECTS(std::isfinite(bias[i].bias), where, "bias[", i, "].bias = ", bias[i].bias, "; expected a finite value");
  }
  SPECDEC_EXPECTS(history.max_token() < vocab, where, "the history holds token ", history.max_token(),
                  "; expected tokens in [0, ", vocab, ")");
  SPECDEC_EXPECTS(p.convention == history.convention(), where, "params.convention = ",
                  p.convention == penalty_convention::vllm ? "vllm" : "llama_cpp", " with a history built for ",
                  history.convention() == penalty_convention::vllm ? "vllm (prompt, output)" : "llama_cpp (penalty_history::last_n)",
                  "; expected the same convention");
}

/// The views of a penalty call: the rows (written in place: packed rows, apart from everything else)
/// and what they are computed from.
inline void check_penalty_arguments(const char* where, matrix_view<float> logits, std::span<const logit_bias> bias,
                                    tree_view tree) {
  using specdec::detail::input;
  specdec::detail::check_arguments(
      where, specdec::detail::output("logits", logits, specdec::detail::contiguous_rows | specdec::detail::distinct_rows),
      input("bias", bias), input("tree.token", tree.token), input("tree.parent", tree.parent), input("tree.depth", tree.depth));
}

}  // namespace detail

/// Applies logit bias and penalties in place to a draft tree's target rows: node i's row (`first_row +
/// i`) is penalised by the committed history plus the tokens of nodes 1..i on its path (node 0, the
/// committed token, is already in the history), in the params' convention (which must be the
/// history's). Touches only the entries of tokens in the prompt, the output, the path and the bias
/// (and, vLLM's convention with a negative frequency or presence, the zeros of the row).
/// \param logits host `[rows x V]`, unit column stride. \param tree the draft tree (tokens in [0, V)).
/// \throws invalid_argument naming the argument: repetition not finite and > 0, frequency or presence
///   not finite, a bias or history token outside [0, V), rows outside the logits, a malformed tree, a
///   history of the other convention.
inline void apply_tree_penalties(matrix_view<float> logits, tree_view tree, index_t first_row, const penalty_history& history,
                                 const penalty_params& params, std::span<const logit_bias> bias = {}) {
  constexpr const char* where = "specdec::sampling::apply_tree_penalties";
  const index_t vocab = logits.cols();
  specdec::detail::check_vocabulary(where, "V", vocab);  // first: validate's token check is off for V = 0
  validate(tree, vocab);
  detail::check_penalties(where, params, bias, vocab, history);
  detail::check_penalty_arguments(where, logits, bias, tree);
  SPECDEC_EXPECTS(specdec::detail::range_fits(first_row, tree.size(), logits.rows()), where, "first_row = ", first_row, " with ",
                  tree.size(), " nodes; expected rows [first_row, first_row + nodes) within the logits' ", logits.rows());
  const std::vector<penalty_history::entry> touched = history.touched();
  std::vector<std::int32_t> path;
  for (index_t i = 0; i < tree.size(); ++i) {
    path.clear();
    for (index_t c = i; c > 0; c = tree.parent[static_cast<std::size_t>(c)]) path.push_back(tree.token[static_cast<std::size_t>(c)]);
    std::reverse(path.begin(), path.end());  // oldest first: llama.cpp's window slides in this order
    detail::penalise_row(logits.row(first_row + i), vocab, touched, history, path, params, bias);
  }
}

/// apply_tree_penalties for plain rows: each row penalised by the committed history alone (a chain's
/// bonus row, or sampling without drafts).
inline void apply_penalties(matrix_view<float> logits, const penalty_history& history, const penalty_params& params,
                            std::span<const logit_bias> bias = {}) {
  constexpr const char* where = "specdec::sampling::apply_penalties";
  const index_t vocab = logits.cols();
  specdec::detail::check_vocabulary(where, "V", vocab);
  detail::check_penalties(where, params, bias, vocab, history);
  detail::check_penalty_arguments(where, logits, bias, tree_view{});
  const std::vector<penalty_history::entry> touched = history.touched();
  for (index_t r = 0; r < logits.rows(); ++r) detail::penalise_row(logits.row(r), vocab, touched, history, {}, params, bias);
}

}  // namespace specdec::sampling
