// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The example engine's generation loop and its drafters. One loop serves every method: each
/// step a drafter proposes a draft tree rooted at the last committed token (vanilla decoding is the
/// tree of the root alone), the target scores the whole tree in one forward under specdec's tree mask,
/// specdec's verifier (greedy, or lossless speculative sampling) picks the accepted path and the next
/// token, and the KV caches keep only that path.
///
/// Drafters here: prompt lookup (n-gram matches in the context, as a chain or as a tree of several
/// matches), ADMG self-speculation (the target with the sub-layers ADMG removes, stopping by Draft &
/// Verify's exit rule), and EAGLE-2 dynamic trees drafted by the same ADMG self-draft.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/mask/tree_mask.hpp>
#include <specdec/policy/admg.hpp>
#include <specdec/policy/draft_length.hpp>
#include <specdec/sampling/greedy.hpp>
#include <specdec/sampling/speculative.hpp>
#include <specdec/tree/eagle2.hpp>
#include <specdec/tree/ngram.hpp>
#include <specdec/tree/tree.hpp>

#include "llama.hpp"

namespace engine {

using clock_type = std::chrono::steady_clock;
inline double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

struct generation_options {
  index_t max_new_tokens = 64;
  float temperature = 0.0f;  ///< 0: greedy; > 0: lossless speculative sampling at this temperature
  std::uint64_t seed = 0;
  std::vector<std::int32_t> stop_tokens;
};

/// What a generation measured. Costs for the accelerator projection are in units of one target
/// forward (the weights read once): a draft forward costs the share of the weights it reads.
struct generation_stats {
  index_t new_tokens = 0;
  index_t target_calls = 0;  ///< target forwards after the prefill (one per step)
  index_t draft_calls = 0;
  index_t drafted = 0, accepted = 0;
  double draft_units = 0;  ///< draft forwards in target-forward units
  double seconds = 0, prefill_seconds = 0, draft_seconds = 0, verify_forward_seconds = 0, sampling_seconds = 0,
         bookkeeping_seconds = 0;
  /// Mean tokens committed per target forward (accepted drafts + 1).
  double tau() const { return target_calls ? static_cast<double>(new_tokens) / static_cast<double>(target_calls) : 0.0; }
  generation_stats& operator+=(const generation_stats& o) {
    new_tokens += o.new_tokens;
    target_calls += o.target_calls;
    draft_calls += o.draft_calls;
    drafted += o.drafted;
    accepted += o.accepted;
    draft_units += o.draft_units;
    seconds += o.seconds;
    prefill_seconds += o.prefill_seconds;
    draft_seconds += o.draft_seconds;
    verify_forward_seconds += o.verify_forward_seconds;
    sampling_seconds += o.sampling_seconds;
    bookkeeping_seconds += o.bookkeeping_seconds;
    return *this;
  }
  double tokens_per_second() const { return seconds > 0 ? static_cast<double>(new_tokens) / seconds : 0.0; }
  /// Speed-up over vanilla where a forward over a small tree costs one forward (memory-bound).
  double projected_speedup() const {
    const double cost = static_cast<double>(target_calls) + draft_units;
    return cost > 0 ? static_cast<double>(new_tokens) / cost : 0.0;
  }
};

struct generation {
  std::vector<std::int32_t> tokens;
  generation_stats stats;
};

/// What a drafter sees each step.
struct draft_context {
  llama_session& session;
  const std::vector<std::int32_t>& sequence;  ///< prompt + generated; its last token is the root
  index_t cached;                             ///< rows every layer's cache holds (sequence.size() - 1)
  float temperature;
  specdec::philox_stream rng;  ///< for sampled drafts (subsequence per step)
  generation_stats& stats;
};

/// A draft tree and, for sampled drafts, the distribution each node was drawn from.
struct draft {
  specdec::draft_tree tree;
  std::vector<float> probs;                 ///< `[rows x V]` draft distributions (empty: deterministic nodes)
  std::vector<specdec::index_t> draft_rows;  ///< `[tree size]`: row of `probs` per node, -1 for deterministic
};

class drafter {
 public:
  virtual ~drafter() = default;
  virtual std::string name() const = 0;
  /// Hooks for the prompt's prefill (ADMG measures its statistic there), and the call after it.
  virtual const forward_hooks* prefill_hooks() { return nullptr; }
  virtual void after_prefill(llama_session&) {}
  /// The draft for the root `ctx.sequence.back()`. The caches must hold `ctx.cached` rows on return.
  virtual draft propose(draft_context& ctx) = 0;
  /// Verification feedback: `accepted` of `drafted` draft tokens.
  virtual void verified(index_t /*accepted*/, index_t /*drafted*/) {}
  /// Wall time of the target forward that verified a draft of `rows` tree nodes (root included).
  virtual void target_forward_timed(index_t /*rows*/, double /*seconds*/) {}
  /// Hooks for every target forward (Medusa reads the target's last hidden state), and the accepted
  /// nodes of the tree just verified (root excluded).
  virtual const forward_hooks* target_hooks() { return nullptr; }
  virtual void accepted_path(std::span<const std::int32_t> /*nodes*/) {}
};

/// Generates up to `options.max_new_tokens` tokens after `prompt` (at least one token), with
/// `drafter` (null: vanilla decoding). Greedy outputs are identical to vanilla greedy decoding by
/// construction of the verifier; sampled outputs follow the target's distribution at the temperature.
inline generation generate(const llama_model& model, std::span<const std::int32_t> prompt, drafter* d,
                           const generation_options& options) {
  SPECDEC_EXPECTS(!prompt.empty(), "engine::generate", "the prompt is empty; expected at least one token");
  generation out;
  auto& stats = out.stats;
  const index_t vocab = model.config().vocab;
  llama_session session(model, static_cast<index_t>(prompt.size()) + options.max_new_tokens + 256);
  specdec::eigen backend;
  std::vector<std::int32_t> sequence(prompt.begin(), prompt.end());
  std::vector<float> logits;
  const auto start = clock_type::now();
  if (prompt.size() > 1) {
    std::vector<std::int64_t> positions(prompt.size() - 1);
    for (std::size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<std::int64_t>(i);
    session.forward(prompt.first(prompt.size() - 1), positions, {}, logits, nullptr, d ? d->prefill_hooks() : nullptr);
    if (d) d->after_prefill(session);
  }
  stats.prefill_seconds = seconds_since(start);
  index_t cached = static_cast<index_t>(prompt.size()) - 1;
  std::vector<std::int64_t> positions;
  std::vector<std::uint8_t> mask;
  for (std::uint64_t step = 0; stats.new_tokens < options.max_new_tokens; ++step) {
    // 1. Draft.
    auto t = clock_type::now();
    draft_context ctx{session, sequence, cached, options.temperature, specdec::philox_stream{options.seed, 2 * step + 1}, stats};
    draft dr = d ? d->propose(ctx) : draft{specdec::make_tree({sequence.back()}, {-1}), {}, {}};
    stats.draft_seconds += seconds_since(t);
    const index_t n = dr.tree.size();
    // 2. One target forward over the tree (a chain needs no mask: causal is the same thing).
    t = clock_type::now();
    positions.resize(static_cast<std::size_t>(n));
    specdec::tree_positions(dr.tree, cached, specdec::vector_view<std::int64_t>(positions.data(), n));
    const bool chain = dr.tree.max_depth() + 1 == n;
    if (!chain) {
      mask.assign(static_cast<std::size_t>(n * (cached + n)), 0);
      specdec::tree_mask_dense(dr.tree, cached, specdec::matrix_view<std::uint8_t>(mask.data(), n, cached + n));
    }
    stats.bookkeeping_seconds += seconds_since(t);
    t = clock_type::now();
    session.forward(dr.tree.token, positions, chain ? std::span<const std::uint8_t>() : std::span<const std::uint8_t>(mask), logits,
                    nullptr, d ? d->target_hooks() : nullptr);
    ++stats.target_calls;
    const double forward_seconds = seconds_since(t);
    stats.verify_forward_seconds += forward_seconds;
    if (d) d->target_forward_timed(n, forward_seconds);
    // 3. Verify.
    t = clock_type::now();
    specdec::sampling::speculative_request request;
    request.tree = dr.tree;
    const specdec::matrix_view<const float> target(logits.data(), n, vocab);
    specdec::sampling::speculative_result result;
    if (options.temperature <= 0.0f) {
      result = specdec::sampling::verify_greedy(backend, target, std::span(&request, 1)).at(0);
    } else {
      request.uniforms = specdec::sampling::uniform_stream::philox(specdec::philox_stream{options.seed, 2 * step});
      request.draft_rows = dr.draft_rows;
      request.temperature = options.temperature;
      const auto rows = dr.probs.empty() ? 0 : static_cast<index_t>(dr.probs.size()) / vocab;
      const specdec::matrix_view<const float> draft(dr.probs.data(), rows, vocab);
      result = specdec::sampling::verify_speculative_logits(backend, {target, draft}, std::span(&request, 1)).at(0);
    }
    stats.sampling_seconds += seconds_since(t);
    // 4. Keep the accepted path's KV rows; commit the emitted tokens.
    t = clock_type::now();
    std::vector<std::int32_t> kept = {0};
    kept.insert(kept.end(), result.accepted_nodes.begin(), result.accepted_nodes.end());
    session.keep(cached, kept);
    cached += static_cast<index_t>(kept.size());
    stats.drafted += n - 1;
    stats.accepted += static_cast<index_t>(result.accepted_nodes.size());
    if (d) {
      d->verified(static_cast<index_t>(result.accepted_nodes.size()), dr.tree.max_depth());
      d->accepted_path(result.accepted_nodes);
    }
    bool stop = false;
    for (auto token : result.tokens) {
      if (stats.new_tokens >= options.max_new_tokens) break;
      sequence.push_back(token);
      out.tokens.push_back(token);
      ++stats.new_tokens;
      if (std::find(options.stop_tokens.begin(), options.stop_tokens.end(), token) != options.stop_tokens.end()) {
        stop = true;
        break;
      }
    }
    stats.bookkeeping_seconds += seconds_since(t);
    if (stop) break;
  }
  stats.seconds = seconds_since(start) - stats.prefill_seconds;
  return out;
}

// ---------------------------------------------------------------------------------------------------
// The draft-length policy (measured acceptance by depth against measured forward costs) is the
// library's: specdec/policy/draft_length.hpp.
using specdec::policy::draft_length_policy;

// ---------------------------------------------------------------------------------------------------
/// Prompt lookup (n-gram) drafting: the longest suffix of the context (max_ngram down to min_ngram
/// tokens) that occurred before proposes the tokens that followed it. With `branches` > 1 the most
/// recent distinct continuations are merged into a tree (a trie), verified in one forward. Free: no
/// model runs. Deterministic drafts (q one-hot in sampled mode).
class prompt_lookup_drafter : public drafter {
 public:
  struct parameters {
    index_t max_ngram = 3, min_ngram = 2;
    index_t draft_length = 8;  ///< the most tokens per continuation
    index_t branches = 1;
    /// Choose each draft's length by specdec::policy::draft_length_policy: the acceptance measured by
    /// depth against the measured cost of verifying that many rows. Off: always draft_length tokens
    /// when a match has them.
    bool cost_aware = true;
  };
  explicit prompt_lookup_drafter(parameters p) : p_(p), policy_(p.draft_length) {}
  void verified(index_t accepted, index_t drafted) override { policy_.verified(accepted, drafted); }
  void target_forward_timed(index_t rows, double seconds) override { policy_.target_forward_timed(rows, seconds); }
  std::string name() const override { return p_.branches > 1 ? "prompt_lookup_tree" : "prompt_lookup"; }

  draft propose(draft_context& ctx) override {
    const index_t length = p_.cost_aware ? policy_.choose() : p_.draft_length;
    specdec::ngram_options options;
    options.max_ngram = p_.max_ngram;
    options.min_ngram = p_.min_ngram;
    options.branches = p_.branches;
    return {specdec::propose_ngram(ctx.sequence, length, options), {}, {}};
  }

 private:
  parameters p_;
  draft_length_policy policy_;
};

// ---------------------------------------------------------------------------------------------------
/// ADMG's self-draft: the prompt's prefill measures, per layer, the cosine between the residual
/// stream entering and leaving the attention sub-layer; Algorithm 1 turns it into a layer plan, and
/// the draft is the target run with those sub-layers skipped, sharing the target's KV cache (its rows
/// for draft tokens are dropped before verification).
class admg_self_draft {
 public:
  explicit admg_self_draft(specdec::policy::admg::rules rules) : rules_(rules) {
    hooks_.after_attention = [this](index_t l, host_matrix in, host_matrix out) {
      if (static_cast<std::size_t>(l) >= cosine_.size()) cosine_.resize(static_cast<std::size_t>(l) + 1, 0.0);
      cosine_[static_cast<std::size_t>(l)] = specdec::policy::admg::attention_cosine(in, out);
    };
  }
  const forward_hooks* hooks() { return &hooks_; }
  /// Whether plan() has run: a one-token prompt has no prefill to measure, and until the first target
  /// forward has been measured instead there is no plan to draft with.
  bool planned() const { return !plan_.skip_attention.empty(); }
  /// Hooks for a target forward while nothing is planned yet, else none.
  const forward_hooks* hooks_until_planned() { return planned() ? nullptr : &hooks_; }
  void plan(const llama_model& model) {
    plan_ = specdec::policy::admg::plan_layers(cosine_, rules_);
    const auto& c = model.config();
    double kept = static_cast<double>(model.head_bytes()), full = kept;
    for (index_t l = 0; l < c.layers; ++l) {
      full += static_cast<double>(model.layer_bytes(true) + model.layer_bytes(false));
      if (!plan_.skip_attention[static_cast<std::size_t>(l)]) kept += static_cast<double>(model.layer_bytes(true));
      if (!plan_.skip_mlp[static_cast<std::size_t>(l)]) kept += static_cast<double>(model.layer_bytes(false));
    }
    cost_ = kept / full;
  }
  const specdec::policy::admg::layer_plan& layer_plan() const { return plan_; }
  const std::vector<double>& cosine() const { return cosine_; }
  /// Share of a target forward's weights one draft forward reads.
  double cost() const { return cost_; }
  /// One draft forward of `tokens` at `positions` (mask as llama_session::forward).
  void forward(draft_context& ctx, std::span<const std::int32_t> tokens, std::span<const std::int64_t> positions,
               std::span<const std::uint8_t> allowed, std::vector<float>& logits) const {
    ctx.session.forward(tokens, positions, allowed, logits, &plan_);
    ++ctx.stats.draft_calls;
    ctx.stats.draft_units += cost_;
  }

 private:
  specdec::policy::admg::rules rules_;
  forward_hooks hooks_;
  std::vector<double> cosine_;
  specdec::policy::admg::layer_plan plan_;
  double cost_ = 1.0;
};

/// Softmax of one row at temperature `temperature` (1 when greedy), in double for the exit rule.
inline std::vector<float> softmax_row(const float* row, index_t vocab, float temperature) {
  const float t = temperature > 0.0f ? temperature : 1.0f;
  const float m = *std::max_element(row, row + vocab);
  std::vector<float> p(static_cast<std::size_t>(vocab));
  double sum = 0;
  for (index_t v = 0; v < vocab; ++v) sum += p[static_cast<std::size_t>(v)] = std::exp((row[v] - m) / t);
  for (auto& x : p) x = static_cast<float>(x / sum);
  return p;
}

/// ADMG self-speculative decoding: drafts a chain with the self-draft until Draft & Verify's exit
/// rule stops it (top-1 draft probability below an adaptive threshold) or the length the
/// draft_length_policy chose (at most `max_draft`), which weighs measured acceptance against the
/// measured costs of a self-draft forward and of verifying: where drafting does not pay on this
/// machine it drafts nothing (and probes now and then), so the method is not slower than vanilla.
/// Greedy: the draft's argmax; sampled: a draw from the draft's softmax at the temperature, whose
/// distribution goes to the verifier.
class admg_drafter : public drafter {
 public:
  /// \param cost_aware whether the draft_length_policy chooses the length (else: up to max_draft,
  /// stopped by the exit rule alone).
  admg_drafter(const llama_model& model, specdec::policy::admg::rules rules, specdec::policy::admg::draft_exit::parameters exit,
               bool cost_aware = true)
      : model_(&model), self_(rules), exit_(exit), cost_aware_(cost_aware), policy_(exit_.max_draft()) {}
  std::string name() const override { return "admg"; }
  const forward_hooks* prefill_hooks() override { return self_.hooks(); }
  void after_prefill(llama_session&) override { self_.plan(*model_); }
  const forward_hooks* target_hooks() override { return self_.hooks_until_planned(); }
  const admg_self_draft& self_draft() const { return self_; }
  const specdec::policy::admg::draft_exit& exit_rule() const { return exit_; }

  draft propose(draft_context& ctx) override {
    const index_t vocab = model_->config().vocab;
    std::vector<std::int32_t> tokens = {ctx.sequence.back()}, parents = {-1};
    draft out;
    const index_t length = cost_aware_ ? policy_.choose() : exit_.max_draft();
    if (length == 0 || !self_.planned()) return {specdec::make_tree(std::move(tokens), parents), {}, {}};
    out.draft_rows = {-1};
    std::vector<float> logits;
    for (index_t i = 0; i < length; ++i) {
      const std::int32_t token[1] = {tokens.back()};
      const std::int64_t position[1] = {ctx.cached + i};
      const auto start = clock_type::now();
      self_.forward(ctx, token, position, {}, logits);
      policy_.draft_token_timed(seconds_since(start));
      auto p = softmax_row(logits.data(), vocab, ctx.temperature);
      std::int32_t next = static_cast<std::int32_t>(std::max_element(p.begin(), p.end()) - p.begin());
      const double top1 = p[static_cast<std::size_t>(next)];
      if (ctx.temperature > 0.0f) {
        // Inverse CDF with one Philox uniform per draft token.
        const double u = ctx.rng.uniform_double(static_cast<std::uint64_t>(i));
        double acc = 0;
        next = static_cast<std::int32_t>(vocab - 1);
        for (index_t v = 0; v < vocab; ++v)
          if ((acc += p[static_cast<std::size_t>(v)]) > u) {
            next = static_cast<std::int32_t>(v);
            break;
          }
        out.probs.insert(out.probs.end(), p.begin(), p.end());
        out.draft_rows.push_back(static_cast<index_t>(out.draft_rows.size()) - 1);
      }
      tokens.push_back(next);
      parents.push_back(static_cast<std::int32_t>(tokens.size()) - 2);
      if (exit_.stop(top1, i + 1)) break;
    }
    ctx.session.crop(ctx.cached);
    if (ctx.temperature <= 0.0f) out.draft_rows.clear();
    out.tree = specdec::make_tree(std::move(tokens), parents);
    return out;
  }
  void verified(index_t accepted, index_t drafted) override {
    if (!self_.planned()) self_.plan(*model_);  // measured by the target forward just verified
    if (drafted > 0) exit_.update(accepted, drafted);
    policy_.verified(accepted, drafted);
  }
  void target_forward_timed(index_t rows, double seconds) override { policy_.target_forward_timed(rows, seconds); }
  const draft_length_policy& policy() const { return policy_; }

 private:
  const llama_model* model_;
  admg_self_draft self_;
  specdec::policy::admg::draft_exit exit_;
  bool cost_aware_;
  draft_length_policy policy_;
};

/// EAGLE-2 dynamic trees drafted by the ADMG self-draft: the root's draft logits start the builder,
/// each expansion runs the self-draft on the k frontier tokens under the builder's draft mask, and the
/// reranked tree of `total_tokens` nodes goes to the target. Deterministic top-k nodes (sampled mode
/// verifies them with the target-only rule, q one-hot).
class eagle2_admg_drafter : public drafter {
 public:
  eagle2_admg_drafter(const llama_model& model, specdec::policy::admg::rules rules, specdec::dynamic_tree_config tree)
      : model_(&model), self_(rules), tree_(tree) {}
  std::string name() const override { return "eagle2_admg"; }
  const forward_hooks* prefill_hooks() override { return self_.hooks(); }
  void after_prefill(llama_session&) override { self_.plan(*model_); }
  const forward_hooks* target_hooks() override { return self_.hooks_until_planned(); }
  void verified(index_t, index_t) override {
    if (!self_.planned()) self_.plan(*model_);
  }

  draft propose(draft_context& ctx) override {
    if (!self_.planned()) return {specdec::make_tree({ctx.sequence.back()}, {-1}), {}, {}};
    const index_t vocab = model_->config().vocab, k = tree_.top_k, n = ctx.cached;
    std::vector<float> logits;
    const std::int32_t root[1] = {ctx.sequence.back()};
    const std::int64_t root_position[1] = {n};
    self_.forward(ctx, root, root_position, {}, logits);
    specdec::eagle2_tree_builder<specdec::eigen> builder(backend_, tree_);
    auto step = builder.begin(specdec::matrix_view<const float>(logits.data(), 1, vocab), std::span(root, 1));
    for (index_t s = 0; s < tree_.depth; ++s) {
      // Frontier rows see the prefix and the root (n + 1 cached rows) and their ancestors among earlier frontiers.
      self_.forward(ctx, step.input_ids, step.positions(/*root_position=*/n), step.attention_mask(/*prefix_length=*/n + 1), logits);
      step = builder.expand(specdec::matrix_view<const float>(logits.data(), k, vocab));
    }
    ctx.session.crop(n);
    return {builder.finish_single().tree, {}, {}};
  }

 private:
  const llama_model* model_;
  admg_self_draft self_;
  specdec::dynamic_tree_config tree_;
  specdec::eigen backend_;
};

}  // namespace engine
