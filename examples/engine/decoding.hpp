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
#include <specdec/tree/drafter.hpp>
#include <specdec/tree/drafters.hpp>
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

/// Rows p in [first, n) of a draft model whose row p pairs position p's target state with token p + 1
/// (EAGLE, EAGLE-3, Jakiro, MTP): their tokens x_{p+1} and positions p, for catching its cache up on the
/// committed context (the root x_n is row n - 1).
struct shifted_rows {
  std::vector<std::int32_t> tokens;
  std::vector<std::int64_t> positions;
};
inline shifted_rows shifted_context(const std::vector<std::int32_t>& sequence, index_t first, index_t n) {
  shifted_rows out{{sequence.begin() + first + 1, sequence.begin() + n + 1}, std::vector<std::int64_t>(static_cast<std::size_t>(n - first))};
  for (index_t p = first; p < n; ++p) out.positions[static_cast<std::size_t>(p - first)] = p;
  return out;
}

/// The engine's side of specdec's drafting protocol (docs/drafters.md): a library drafter run against
/// this engine's models, its draft-model forwards timed and its feedback (the accepted path, the
/// target forward's and the drafts' wall times) handed back after verification. Each engine drafter
/// below holds one and says only how a draft request runs on its model.
template <specdec::drafter D>
class protocol_drafter {
 public:
  explicit protocol_drafter(D d) : d_(std::move(d)) {}

  /// One step of the library drafter, `run(request)` giving the draft model's logits for a request
  /// (`matrix_view<const float, D::memory_space>`).
  template <class Run>
  draft propose(draft_context& ctx, Run&& run) {
    double seconds = 0;
    specdec::drafted out = specdec::run_drafter(d_, {ctx.sequence, ctx.temperature, ctx.rng}, [&](const specdec::draft_request& r) {
      const auto start = clock_type::now();
      auto logits = run(r);
      seconds += seconds_since(start);
      return logits;
    });
    draft_seconds_ = seconds;
    pending_ = true;
    return {std::move(out.tree), std::move(out.probs), std::move(out.draft_rows)};
  }
  /// A step that does not run the protocol (nothing to draft with yet): nothing is fed back for it.
  static draft root_only(const draft_context& ctx) { return {specdec::make_tree({ctx.sequence.back()}, {-1}), {}, {}}; }

  void target_forward_timed(double seconds) { target_seconds_ = seconds; }
  void accepted_path(std::span<const std::int32_t> nodes) {
    if (pending_) d_.feedback({nodes, target_seconds_, draft_seconds_});
    pending_ = false;
  }
  D& library() noexcept { return d_; }
  const D& library() const noexcept { return d_; }

 private:
  D d_;
  double target_seconds_ = 0, draft_seconds_ = 0;
  bool pending_ = false;
};

/// Generates up to `options.max_new_tokens` tokens after `prompt` (at least one token), with
/// `drafter` (null: vanilla decoding). Greedy outputs are identical to vanilla greedy decoding by
/// construction of the verifier; sampled outputs follow the target's distribution at the temperature.
/// Defined in engine.cpp (compiled once for every example).
generation generate(const llama_model& model, std::span<const std::int32_t> prompt, drafter* d,
                    const generation_options& options);

// ---------------------------------------------------------------------------------------------------
// The draft-length policy (measured acceptance by depth against measured forward costs) is the
// library's: specdec/policy/draft_length.hpp.
using specdec::policy::draft_length_policy;

// ---------------------------------------------------------------------------------------------------
/// Prompt lookup (n-gram) drafting, specdec::ngram_drafter: the longest suffix of the context
/// (max_ngram down to min_ngram tokens) that occurred before proposes the tokens that followed it;
/// with `branches` > 1 the most recent distinct continuations are merged into a tree (a trie),
/// verified in one forward. Free: no model runs. Deterministic drafts (q one-hot in sampled mode).
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
  explicit prompt_lookup_drafter(parameters p)
      : branches_(p.branches),
        lookup_(specdec::ngram_drafter({{p.max_ngram, p.min_ngram, p.branches}, p.draft_length, p.cost_aware})) {}
  std::string name() const override { return branches_ > 1 ? "prompt_lookup_tree" : "prompt_lookup"; }
  draft propose(draft_context& ctx) override {
    return lookup_.propose(ctx, [](const specdec::draft_request&) -> specdec::matrix_view<const float> { return {}; });
  }
  void target_forward_timed(index_t, double seconds) override { lookup_.target_forward_timed(seconds); }
  void accepted_path(std::span<const std::int32_t> nodes) override { lookup_.accepted_path(nodes); }

 private:
  index_t branches_;
  protocol_drafter<specdec::ngram_drafter> lookup_;
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

/// ADMG self-speculative decoding, specdec::chain_drafter over the self-draft: a chain until Draft &
/// Verify's exit rule stops it (top-1 draft probability below an adaptive threshold) or the length the
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
      : model_(&model), self_(rules), exit_(exit),
        chain_(specdec::chain_drafter<specdec::eigen>(
            backend_, {exit_.max_draft(), cost_aware, [this](double top1, index_t drafted) { return exit_.stop(top1, drafted); }})) {}
  admg_drafter(const admg_drafter&) = delete;  // the stop rule refers to this drafter's exit rule
  admg_drafter& operator=(const admg_drafter&) = delete;
  std::string name() const override { return "admg"; }
  const forward_hooks* prefill_hooks() override { return self_.hooks(); }
  void after_prefill(llama_session&) override { self_.plan(*model_); }
  const forward_hooks* target_hooks() override { return self_.hooks_until_planned(); }
  const admg_self_draft& self_draft() const { return self_; }
  const specdec::policy::admg::draft_exit& exit_rule() const { return exit_; }

  draft propose(draft_context& ctx) override {
    if (!self_.planned()) return protocol_drafter<specdec::chain_drafter<specdec::eigen>>::root_only(ctx);
    const index_t n = ctx.cached;
    draft out = chain_.propose(ctx, [&](const specdec::draft_request& r) {
      self_.forward(ctx, r.tokens, r.positions(n), r.attention_mask(n), logits_);
      return specdec::matrix_view<const float>(logits_.data(), r.rows(), model_->config().vocab);
    });
    ctx.session.crop(n);
    return out;
  }
  void verified(index_t accepted, index_t drafted) override {
    if (!self_.planned()) self_.plan(*model_);  // measured by the target forward just verified
    if (drafted > 0) exit_.update(accepted, drafted);
  }
  void target_forward_timed(index_t, double seconds) override { chain_.target_forward_timed(seconds); }
  void accepted_path(std::span<const std::int32_t> nodes) override { chain_.accepted_path(nodes); }
  const draft_length_policy& policy() const { return chain_.library().policy(); }

 private:
  const llama_model* model_;
  admg_self_draft self_;
  specdec::policy::admg::draft_exit exit_;
  specdec::eigen backend_;
  protocol_drafter<specdec::chain_drafter<specdec::eigen>> chain_;
  std::vector<float> logits_;
};

/// EAGLE-2 dynamic trees drafted by the ADMG self-draft, specdec::eagle2_drafter: the root's draft
/// logits start the tree, each expansion runs the self-draft on the k frontier tokens under the
/// request's mask, and the reranked tree goes to the target. With `cost_aware` the draft-length policy
/// sizes each tree (L + 1 nodes at depth min(depth, L); nothing where drafting does not pay), else
/// always the configured tree. Deterministic top-k nodes (sampled mode verifies them with the
/// target-only rule, q one-hot).
class eagle2_admg_drafter : public drafter {
 public:
  eagle2_admg_drafter(const llama_model& model, specdec::policy::admg::rules rules, specdec::dynamic_tree_config tree,
                      bool cost_aware = true)
      : model_(&model), self_(rules), tree_(specdec::eagle2_drafter<specdec::eigen>(backend_, std::move(tree), cost_aware)) {}
  std::string name() const override { return "eagle2_admg"; }
  const forward_hooks* prefill_hooks() override { return self_.hooks(); }
  void after_prefill(llama_session&) override { self_.plan(*model_); }
  const forward_hooks* target_hooks() override { return self_.hooks_until_planned(); }
  void verified(index_t, index_t) override {
    if (!self_.planned()) self_.plan(*model_);
  }
  void target_forward_timed(index_t, double seconds) override { tree_.target_forward_timed(seconds); }
  void accepted_path(std::span<const std::int32_t> nodes) override { tree_.accepted_path(nodes); }

  draft propose(draft_context& ctx) override {
    if (!self_.planned()) return protocol_drafter<specdec::eagle2_drafter<specdec::eigen>>::root_only(ctx);
    const index_t n = ctx.cached;
    // The root row and each frontier see the n cached rows and the step's rows their mask allows.
    draft out = tree_.propose(ctx, [&](const specdec::draft_request& r) {
      self_.forward(ctx, r.tokens, r.positions(n), r.attention_mask(n), logits_);
      return specdec::matrix_view<const float>(logits_.data(), r.rows(), model_->config().vocab);
    });
    ctx.session.crop(n);
    return out;
  }
  const draft_length_policy& policy() const { return tree_.library().policy(); }

 private:
  const llama_model* model_;
  admg_self_draft self_;
  specdec::eigen backend_;
  protocol_drafter<specdec::eagle2_drafter<specdec::eigen>> tree_;
  std::vector<float> logits_;
};

}  // namespace engine
