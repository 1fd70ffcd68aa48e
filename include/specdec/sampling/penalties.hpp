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
/// Every row is penalised by one team job (`detail::penalty_job`): the functions here run it on one
/// thread over a penalty_history, batch_penalties.hpp on any backend over a penalty_batch's views.
///
/// Products are rounded to float before they are added or subtracted, as both peers' builds do: a
/// compiler that contracts `x - f * c` into one FMA (GCC in GNU mode with FMA enabled) would otherwise
/// differ from them in the last bit.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include <specdec/backend/detail/checks.hpp>
#include <specdec/backend/detail/math.hpp>
#include <specdec/backend/detail/team.hpp>
#include <specdec/config.hpp>
#include <specdec/core/checked.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view_checks.hpp>
#include <specdec/core/view.hpp>
#include <specdec/sampling/detail/faults.hpp>
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
SPECDEC_HOST_DEVICE inline float llama_cpp_penalised(float v, std::int64_t count, const penalty_params& p) noexcept {
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

/// One request of a penalty job as the row code reads it; every source (a penalty_history on the host,
/// a penalty_batch's views on any backend) describes its requests this way.
struct penalty_request {
  const std::int32_t* parent = nullptr;  ///< the tree's parents; nullptr: plain rows, no draft path
  const std::int32_t* token = nullptr;   ///< the tree's tokens
  index_t nodes = 0;                     ///< rows first_row .. first_row + nodes - 1, node i's at first_row + i
  index_t first_row = 0;
  std::int64_t begin = 0, end = 0;            ///< the committed entries, ascending distinct tokens
  std::int64_t bias_begin = 0, bias_end = 0;  ///< the bias entries, added in order
  penalty_params params = {};
  bool dense_zeros = false;              ///< vLLM with a negative frequency or presence: -0.0 to +0.0 everywhere
  bool active = true;                    ///< false: llama.cpp's disabled sampler (the bias alone)
  index_t window = -1;                   ///< llama.cpp: the window's length n; vLLM: -1
  const std::int32_t* recent = nullptr;  ///< llama.cpp: the committed window's tokens, oldest first
  index_t recent_size = 0;
};

/// How often t occurs in the ascending a[k, n), the cursor k first moved past the tokens below t and
/// then past t's run: a thread's entries ascend, so a row costs it one pass over `a`, not a search per
/// entry.
SPECDEC_HOST_DEVICE inline index_t occurrences(const std::int32_t* a, index_t n, index_t& k, std::int32_t t) noexcept {
  while (k < n && a[k] < t) ++k;
  const index_t first = k;
  while (k < n && a[k] == t) ++k;
  return k - first;
}

/// Whether `t` is among the request's committed entries (binary search: they ascend).
template <class Source>
SPECDEC_HOST_DEVICE bool committed(const Source& src, const penalty_request& q, std::int32_t t) {
  std::int64_t lo = q.begin, hi = q.end;
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    const std::int32_t v = src.entry_token(mid);
    if (v == t) return true;
    if (v < t) lo = mid + 1;
    else hi = mid;
  }
  return false;
}

/// Bias and penalties on row `x` (`vocab` entries) of a node whose draft path is `adds[0, depth)`, newest
/// token first (team scratch that rank 0 wrote; `removes` has room for `depth` tokens). vLLM: the path
/// joins the history. llama.cpp: the window after the path is its newest n tokens, so the path's newest
/// min(depth, n) enter and as many of the committed window's oldest leave. Each committed entry is
/// penalised once with its count plus its change along the path, each path token the history lacks once
/// with its path count; the entries are split between the team's threads, every entry written by one
/// thread. Ends with the team synchronised.
template <class Team, class Source>
SPECDEC_HOST_DEVICE void penalise_node_row(Team& team, const Source& src, const penalty_request& q, float* x, index_t vocab,
                                          std::int32_t* adds, index_t depth, std::int32_t* removes) {
  const bool llama_cpp = q.window >= 0;
  index_t entering = depth, leaving = 0;
  if (llama_cpp) {
    entering = depth < q.window ? depth : q.window;
    const index_t overflow = q.recent_size + entering - q.window;
    leaving = overflow > 0 ? overflow : 0;
  }
  if (team.rank() == 0) {
    const auto before = [](std::int32_t a, std::int32_t b) { return a < b; };
    specdec::detail::heap_sort(adds, entering, before);
    for (index_t k = 0; k < leaving; ++k) removes[k] = q.recent[k];
    specdec::detail::heap_sort(removes, leaving, before);
    for (std::int64_t k = q.bias_begin; k < q.bias_end; ++k) x[src.bias_token(k)] += src.bias_value(k);  // in order
  }
  team.sync();
  if (!q.active) return;
  if (q.dense_zeros) {
    for (index_t j = team.rank(); j < vocab; j += team.size())
      if (x[j] == 0.0f) x[j] = 0.0f;
    team.sync();
  }
  const penalty_params& p = q.params;
  const float inv_r = 1.0f / p.repetition;
  const auto penalise = [&](std::int32_t t, bool in_prompt, std::int64_t count) {
    if (!llama_cpp) x[t] = vllm_penalised(x[t], in_prompt, count, p, inv_r);
    else if (count > 0) x[t] = llama_cpp_penalised(x[t], count, p);  // outside the window: never touched
  };
  index_t a = 0, d = 0;
  for (std::int64_t e = q.begin + team.rank(); e < q.end; e += team.size()) {
    const std::int32_t t = src.entry_token(e);
    penalise(t, src.entry_in_prompt(e), std::int64_t{src.entry_count(e)} + occurrences(adds, entering, a, t) - occurrences(removes, leaving, d, t));
  }
  // The path's tokens the history never counted (what leaves is in the window, so committed): one
  // thread each, at its run's first entry.
  for (index_t k = team.rank(); k < entering; k += team.size()) {
    const std::int32_t t = adds[k];
    if ((k > 0 && adds[k - 1] == t) || committed(src, q, t)) continue;
    index_t from = k;
    penalise(t, false, occurrences(adds, entering, from, t));
  }
  team.sync();
}

/// Bias and penalties on a batch's rows, one team per request: `Source::check` validates request r
/// (a host source trusts its boundary's checks), then the request's rows are penalised one after the
/// other, node i's with the draft tokens of nodes 1..i on its path (the path collected by rank 0).
template <class Source>
struct penalty_job {
  Source src;
  matrix_view<float, typename Source::space> logits;
  const char* where;
  const char* names[specdec::detail::team_job_names];
  static void describe(const char* where, const char* name, const specdec::detail::team_fault& f) {
    specdec::detail::describe_sampling_fault(where, name, f);
  }
  std::size_t scratch_bytes() const { return 2 * sizeof(std::int32_t) * static_cast<std::size_t>(src.width()); }

  template <class Team>
  SPECDEC_HOST_DEVICE specdec::detail::team_fault operator()(Team& team, index_t r, std::byte* scratch) const {
    if (const specdec::detail::team_fault f = src.check(r, logits); f.code != 0) return f;
    const penalty_request q = src.request(r, logits);
    auto* adds = reinterpret_cast<std::int32_t*>(scratch);
    std::int32_t* removes = adds + src.width();
    for (index_t i = 0; i < q.nodes; ++i) {
      index_t depth = 0;
      if (q.parent != nullptr)
        for (index_t c = i; c > 0; c = q.parent[c]) ++depth;
      team.sync();  // the previous row's readers of the scratch are done
      if (team.rank() == 0 && q.parent != nullptr) {
        index_t k = 0;
        for (index_t c = i; c > 0; c = q.parent[c]) adds[k++] = q.token[c];  // newest first
      }
      penalise_node_row(team, src, q, logits.row(q.first_row + i), logits.cols(), adds, depth, removes);
    }
    return {};
  }
};

/// A penalty job's host source: one request from a penalty_history (its `touched()` entries), its
/// params and bias, over a tree (or plain rows: `parent` null). Checked by the public functions'
/// boundary, so `check` finds nothing.
struct history_penalty_source {
  using space = host_space;
  const penalty_history::entry* touched = nullptr;
  std::int64_t touched_size = 0;
  const logit_bias* bias = nullptr;
  std::int64_t bias_size = 0;
  penalty_request shape = {};  ///< tree, rows, params and window; the entry ranges are filled here

  history_penalty_source(std::span<const penalty_history::entry> t, std::span<const logit_bias> b, const penalty_history& history,
                         const penalty_params& p) noexcept
      : touched(t.data()), touched_size(static_cast<std::int64_t>(t.size())), bias(b.data()), bias_size(static_cast<std::int64_t>(b.size())) {
    shape.end = touched_size;
    shape.bias_end = bias_size;
    shape.params = p;
    if (p.convention == penalty_convention::vllm) {
      shape.dense_zeros = std::signbit(p.frequency) || std::signbit(p.presence);
    } else {
      shape.active = !llama_cpp_disabled(history, p);
      shape.window = history.window();
      shape.recent = history.recent().data();
      shape.recent_size = static_cast<index_t>(history.recent().size());
    }
  }
  SPECDEC_HOST_DEVICE index_t width() const noexcept { return shape.parent == nullptr ? 0 : shape.nodes; }
  SPECDEC_HOST_DEVICE specdec::detail::team_fault check(index_t, const matrix_view<float>&) const noexcept { return {}; }
  SPECDEC_HOST_DEVICE penalty_request request(index_t, const matrix_view<float>&) const noexcept { return shape; }
  SPECDEC_HOST_DEVICE std::int32_t entry_token(std::int64_t e) const noexcept { return touched[e].token; }
  SPECDEC_HOST_DEVICE std::int32_t entry_count(std::int64_t e) const noexcept { return touched[e].output_count; }
  SPECDEC_HOST_DEVICE bool entry_in_prompt(std::int64_t e) const noexcept { return touched[e].in_prompt; }
  SPECDEC_HOST_DEVICE std::int32_t bias_token(std::int64_t k) const noexcept { return bias[k].token; }
  SPECDEC_HOST_DEVICE float bias_value(std::int64_t k) const noexcept { return bias[k].bias; }
};

/// Runs the penalty job over one host request on one thread.
inline void run_history_penalties(const char* where, matrix_view<float> logits, const history_penalty_source& src) {
  penalty_job<history_penalty_source> job{src, logits, where, {}};
  for (const char*& name : job.names) name = "";
  specdec::detail::run_serial(job, 1);
}

/// Penalises one row in place as node `path` (its draft tokens, oldest first) of a tree would be:
/// apply_tree_penalties' row, for callers that hold the row alone (references, benchmarks).
inline void penalise_row(float* x, index_t vocab, std::span<const penalty_history::entry> touched, const penalty_history& history,
                         std::span<const std::int32_t> path, const penalty_params& p, std::span<const logit_bias> bias) {
  history_penalty_source src(touched, bias, history, p);
  std::vector<std::int32_t> scratch(2 * path.size());
  std::reverse_copy(path.begin(), path.end(), scratch.begin());  // newest first
  const specdec::detail::serial_team team;
  penalise_node_row(team, src, src.shape, x, vocab, scratch.data(), static_cast<index_t>(path.size()), scratch.data() + path.size());
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
  detail::history_penalty_source src(touched, bias, history, params);
  src.shape.parent = tree.parent.data();
  src.shape.token = tree.token.data();
  src.shape.nodes = tree.size();
  src.shape.first_row = first_row;
  detail::run_history_penalties(where, logits, src);
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
  detail::history_penalty_source src(touched, bias, history, params);
  src.shape.nodes = logits.rows();
  detail::run_history_penalties(where, logits, src);
}

}  // namespace specdec::sampling
