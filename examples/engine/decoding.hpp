// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The example engine's generation loop and its drafting methods. One loop serves every method:
/// each step the method's library drafter (specdec::drafter) drafts a tree rooted at the last committed
/// token through the library's protocol, the method's draft model answering its requests (vanilla
/// decoding is the tree of the root alone); the target scores the whole tree in one forward under
/// specdec's tree mask, specdec's verifier (greedy, or lossless speculative sampling) picks the
/// accepted path and the next token, the KV caches keep only that path, and the drafter gets its
/// feedback.
///
/// Methods here: prompt lookup (n-gram matches in the context, as a chain or as a tree of several
/// matches), ADMG self-speculation (the target with the sub-layers ADMG removes, stopping by Draft &
/// Verify's exit rule), and EAGLE-2 dynamic trees drafted by the same ADMG self-draft.
#pragma once

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/policy/admg.hpp>
#include <specdec/policy/draft_length.hpp>
#include <specdec/tree/drafter.hpp>
#include <specdec/tree/drafters.hpp>
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

/// What a draft model reads of the engine while it runs a step's draft requests: the target's session
/// (its caches hold `cached` rows: every committed token but the root) and the committed tokens, the
/// last of which is the root.
struct step_state {
  llama_session& session;
  std::span<const std::int32_t> committed;
  index_t cached;
};

/// Any library drafter (a specdec::drafter reading host logits), by reference: the protocol's four
/// calls behind function pointers, so that generate() is compiled once, not once per drafter type. It
/// is a specdec::model_drafter itself; a model-free drafter never returns a draft request, so its
/// advance() is never reached.
class drafter_ref {
 public:
  using memory_space = specdec::host_space;

  template <specdec::drafter D>
    requires std::same_as<typename D::memory_space, specdec::host_space>
  drafter_ref(D& d) noexcept  // implicit: a method's drafter() returns its library drafter as it is
      : d_(&d),
        begin_([](void* p, const specdec::draft_context& c) { return static_cast<D*>(p)->begin(c); }),
        advance_([](void* p, host_matrix logits) -> const specdec::draft_request* {
          if constexpr (specdec::model_drafter<D>) return static_cast<D*>(p)->advance(logits);
          else specdec::detail::throw_invalid_argument("engine::drafter_ref", "a drafter without advance() returned a draft request");
        }),
        finish_([](void* p) { return static_cast<D*>(p)->finish(); }),
        feedback_([](void* p, const specdec::draft_feedback& f) { static_cast<D*>(p)->feedback(f); }) {}

  const specdec::draft_request* begin(const specdec::draft_context& context) { return begin_(d_, context); }
  const specdec::draft_request* advance(host_matrix logits) { return advance_(d_, logits); }
  specdec::drafted finish() { return finish_(d_); }
  void feedback(const specdec::draft_feedback& f) { feedback_(d_, f); }

 private:
  void* d_;
  const specdec::draft_request* (*begin_)(void*, const specdec::draft_context&);
  const specdec::draft_request* (*advance_)(void*, host_matrix);
  specdec::drafted (*finish_)(void*);
  void (*feedback_)(void*, const specdec::draft_feedback&);
};
static_assert(specdec::model_drafter<drafter_ref>);

/// A drafting method on this engine: a library drafter, which generate() runs through the library's
/// protocol (run_drafter, then feedback() after verification), and what the engine needs beside it:
/// the draft model that answers the drafter's requests, and the hooks through which that model reads
/// the target's forwards (the hidden states EAGLE, Medusa and the others draft from; ADMG's statistic).
class method {
 public:
  method() = default;
  method(const method&) = delete;  // drafter() refers into the method
  method& operator=(const method&) = delete;
  virtual ~method() = default;

  virtual std::string name() const = 0;
  /// The library drafter, owned by the method.
  virtual drafter_ref drafter() = 0;
  /// Whether the draft model can answer requests this step (a one-token prompt's first step has no
  /// target state to draft from; ADMG has no layer plan yet). If not, the step verifies the root alone
  /// and the drafter is not run.
  virtual bool ready(const step_state&) const { return true; }
  /// The draft model's logits `[request.logits_rows() x V']` for one request of the step, valid until
  /// the next call; never called for a model-free drafter. A model with a cache of its own drops the
  /// rows a draft appended when it next extends the committed context (the next step's root request);
  /// rows appended to the target's caches are the loop's to drop.
  virtual host_matrix run(const step_state&, const specdec::draft_request&) { return {}; }
  /// A draft forward's share of a target forward's weights, for the accelerator projection (0: not counted).
  virtual double forward_units() const { return 0.0; }
  /// Hooks on the prompt's prefill, then the call after it (a new request: the method's per-request
  /// state starts from the prefill); hooks on each verify forward, then the call after verification
  /// with the verified tree and its accepted path (root excluded).
  virtual const forward_hooks* prefill_hooks() { return nullptr; }
  virtual void after_prefill() {}
  virtual const forward_hooks* target_hooks() { return nullptr; }
  virtual void committed(const specdec::draft_tree& /*tree*/, std::span<const std::int32_t> /*accepted_nodes*/) {}
};

/// Rows p in [first, n) of a draft model whose row p pairs position p's target state with token p + 1
/// (EAGLE, EAGLE-3, Jakiro, MTP): their tokens x_{p+1} and positions p, for catching its cache up on the
/// committed context (the root x_n is row n - 1).
struct shifted_rows {
  std::vector<std::int32_t> tokens;
  std::vector<std::int64_t> positions;
};
inline shifted_rows shifted_context(std::span<const std::int32_t> committed, index_t first, index_t n) {
  shifted_rows out{{committed.begin() + first + 1, committed.begin() + n + 1}, std::vector<std::int64_t>(static_cast<std::size_t>(n - first))};
  for (index_t p = first; p < n; ++p) out.positions[static_cast<std::size_t>(p - first)] = p;
  return out;
}

/// Generates up to `options.max_new_tokens` tokens after `prompt` (at least one token), drafting with
/// `m` (null: vanilla decoding). Each step runs the method's library drafter (specdec::run_drafter, its
/// draft model answering each request), one target forward over the draft tree, specdec's verifier,
/// and the drafter's feedback. Greedy outputs are identical to vanilla greedy decoding by construction
/// of the verifier; sampled outputs follow the target's distribution at the temperature. Defined in
/// engine.cpp (compiled once for every example).
generation generate(const llama_model& model, std::span<const std::int32_t> prompt, method* m, const generation_options& options);

// ---------------------------------------------------------------------------------------------------
// The draft-length policy (measured acceptance by depth against measured forward costs) is the
// library's: specdec/policy/draft_length.hpp.
using specdec::policy::draft_length_policy;

// ---------------------------------------------------------------------------------------------------
/// Prompt lookup (n-gram) drafting, specdec::ngram_drafter: the longest suffix of the context
/// (max_ngram down to min_ngram tokens) that occurred before proposes the tokens that followed it;
/// with `branches` > 1 the most recent distinct continuations are merged into a tree (a trie),
/// verified in one forward. Free: no model runs. Deterministic drafts (q one-hot in sampled mode).
class prompt_lookup_drafter : public method {
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
      : branches_(p.branches), lookup_(specdec::ngram_drafter::parameters{{p.max_ngram, p.min_ngram, p.branches}, p.draft_length, p.cost_aware}) {}
  std::string name() const override { return branches_ > 1 ? "prompt_lookup_tree" : "prompt_lookup"; }
  drafter_ref drafter() override { return lookup_; }

 private:
  index_t branches_;
  specdec::ngram_drafter lookup_;
};

// ---------------------------------------------------------------------------------------------------
/// ADMG's self-draft: the prompt's prefill measures, per layer, the cosine between the residual
/// stream entering and leaving the attention sub-layer; Algorithm 1 turns it into a layer plan, and
/// the draft is the target run with those sub-layers skipped, sharing the target's KV cache (the loop
/// drops its rows for draft tokens before verification).
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
  /// One draft forward of a request's rows on the target's caches: at `request.positions(n)` under
  /// `request.attention_mask(n)` (the n cached rows, then the step's rows the request's mask allows).
  host_matrix forward(const step_state& at, const specdec::draft_request& r) {
    at.session.forward(r.tokens, r.positions(at.cached), r.attention_mask(at.cached), logits_, &plan_);
    return host_matrix(logits_.data(), r.rows(), at.session.model().config().vocab);
  }

 private:
  specdec::policy::admg::rules rules_;
  forward_hooks hooks_;
  std::vector<double> cosine_;
  specdec::policy::admg::layer_plan plan_;
  double cost_ = 1.0;
  std::vector<float> logits_;
};

/// ADMG self-speculative decoding, specdec::chain_drafter over the self-draft: a chain until Draft &
/// Verify's exit rule stops it (top-1 draft probability below an adaptive threshold) or the length the
/// draft_length_policy chose (at most `max_draft`), which weighs measured acceptance against the
/// measured costs of a self-draft forward and of verifying: where drafting does not pay on this
/// machine it drafts nothing (and probes now and then), so the method is not slower than vanilla.
/// Greedy: the draft's argmax; sampled: a draw from the draft's softmax at the temperature, whose
/// distribution goes to the verifier.
class admg_drafter : public method {
 public:
  /// \param cost_aware whether the draft_length_policy chooses the length (else: up to max_draft,
  /// stopped by the exit rule alone).
  admg_drafter(const llama_model& model, specdec::policy::admg::rules rules, specdec::policy::admg::draft_exit::parameters exit,
               bool cost_aware = true)
      : model_(&model), self_(rules), exit_(exit),
        chain_(backend_, {exit_.max_draft(), cost_aware, [this](double top1, index_t drafted) { return exit_.stop(top1, drafted); }}) {}
  std::string name() const override { return "admg"; }
  drafter_ref drafter() override { return chain_; }
  bool ready(const step_state&) const override { return self_.planned(); }
  host_matrix run(const step_state& at, const specdec::draft_request& r) override { return self_.forward(at, r); }
  double forward_units() const override { return self_.cost(); }
  const forward_hooks* prefill_hooks() override { return self_.hooks(); }
  void after_prefill() override { self_.plan(*model_); }
  const forward_hooks* target_hooks() override { return self_.hooks_until_planned(); }
  void committed(const specdec::draft_tree& tree, std::span<const std::int32_t> accepted_nodes) override {
    if (!self_.planned()) self_.plan(*model_);  // measured by the target forward just verified
    if (tree.max_depth() > 0) exit_.update(static_cast<index_t>(accepted_nodes.size()), tree.max_depth());
  }
  const admg_self_draft& self_draft() const { return self_; }
  const specdec::policy::admg::draft_exit& exit_rule() const { return exit_; }
  const draft_length_policy& policy() const { return chain_.policy(); }

 private:
  const llama_model* model_;
  admg_self_draft self_;
  specdec::policy::admg::draft_exit exit_;
  specdec::eigen backend_;
  specdec::chain_drafter<specdec::eigen> chain_;  // its stop rule reads exit_
};

/// EAGLE-2 dynamic trees drafted by the ADMG self-draft, specdec::eagle2_drafter: the root's draft
/// logits start the tree, each expansion runs the self-draft on the k frontier tokens under the
/// request's mask, and the reranked tree goes to the target. With `cost_aware` the draft-length policy
/// sizes each tree (L + 1 nodes at depth min(depth, L); nothing where drafting does not pay), else
/// always the configured tree. Deterministic top-k nodes (sampled mode verifies them with the
/// target-only rule, q one-hot).
class eagle2_admg_drafter : public method {
 public:
  eagle2_admg_drafter(const llama_model& model, specdec::policy::admg::rules rules, specdec::dynamic_tree_config tree,
                      bool cost_aware = true)
      : model_(&model), self_(rules), tree_(backend_, std::move(tree), cost_aware) {}
  std::string name() const override { return "eagle2_admg"; }
  drafter_ref drafter() override { return tree_; }
  bool ready(const step_state&) const override { return self_.planned(); }
  host_matrix run(const step_state& at, const specdec::draft_request& r) override { return self_.forward(at, r); }
  double forward_units() const override { return self_.cost(); }
  const forward_hooks* prefill_hooks() override { return self_.hooks(); }
  void after_prefill() override { self_.plan(*model_); }
  const forward_hooks* target_hooks() override { return self_.hooks_until_planned(); }
  void committed(const specdec::draft_tree&, std::span<const std::int32_t>) override {
    if (!self_.planned()) self_.plan(*model_);
  }
  const draft_length_policy& policy() const { return tree_.policy(); }

 private:
  const llama_model* model_;
  admg_self_draft self_;
  specdec::eigen backend_;
  specdec::eagle2_drafter<specdec::eigen> tree_;
};

}  // namespace engine
