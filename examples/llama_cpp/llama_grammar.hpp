// SPDX-License-Identifier: Apache-2.0
// llama.cpp's own grammar engine and sampler chain behind specdec's interfaces, through llama.h only:
// - llama_grammar_matcher: a GBNF grammar (llama_sampler_init_grammar) as a specdec::grammar_matcher,
//   with rollback as a stack of the engine's own clones (llama_sampler_clone) taken before each accept;
// - llama_plain_sampler: llama.cpp's constrained greedy decoding as common_sampler_sample does it (the
//   penalties then the argmax, the sampled token checked against the grammar, the grammar applied to
//   the whole row only when it rejects it): the reference specdec's constrained drafting must match.
// A JSON schema becomes GBNF with llama.cpp's json_schema_to_grammar (common/json-schema-to-grammar.cpp,
// compiled into the example from the pinned tree), as llama-completion's --json-schema does.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <llama.h>

#include <specdec/grammar/token_bitmask.hpp>

namespace llama_example {

/// A GBNF grammar in llama.cpp's grammar engine, as a specdec::grammar_matcher. It starts where the
/// grammar starts (llama.cpp's programs give it no prompt token) and holds every token accepted since.
class llama_grammar_matcher {
 public:
  llama_grammar_matcher(const llama_vocab* vocab, const std::string& gbnf) : vocab_(vocab) {
    state_ = llama_sampler_init_grammar(vocab, gbnf.c_str(), "root");
    if (state_ == nullptr) throw std::invalid_argument("llama.cpp could not parse the grammar");
    all_.resize(static_cast<std::size_t>(llama_vocab_n_tokens(vocab)));
  }
  llama_grammar_matcher(const llama_grammar_matcher&) = delete;
  llama_grammar_matcher& operator=(const llama_grammar_matcher&) = delete;
  ~llama_grammar_matcher() {
    commit();
    llama_sampler_free(state_);
  }

  /// Accepts `token` when the grammar allows it (false, state unchanged, otherwise or once terminated).
  bool accept_token(std::int32_t token) {
    if (is_terminated() || !allows(token)) return false;
    saved_.push_back(llama_sampler_clone(state_));
    llama_sampler_accept(state_, token);
    ended_.push_back(llama_vocab_is_eog(vocab_, token));
    ++accepts_;
    return true;
  }
  /// Rolls back the last n accepted tokens (at most those accepted since the last commit).
  void rollback(std::int32_t n) {
    if (n < 0 || static_cast<std::size_t>(n) > saved_.size()) throw std::logic_error("llama_grammar_matcher: rollback past the last commit");
    for (std::int32_t i = 0; i < n; ++i) {
      llama_sampler_free(state_);
      state_ = saved_.back();
      saved_.pop_back();
      ended_.pop_back();
    }
  }
  /// An end-of-generation token was accepted (llama.cpp's grammar allows one where the grammar can end).
  bool is_terminated() const { return !ended_.empty() && ended_.back(); }
  /// The whole row, llama.cpp's way: every token through llama_sampler_apply (one pass over the
  /// vocabulary's strings; what the lazy verification avoids where it can).
  void fill_next_token_bitmask(std::span<std::int32_t> row) {
    for (std::size_t i = 0; i < all_.size(); ++i) all_[i] = {static_cast<llama_token>(i), 0.0f, 0.0f};
    llama_token_data_array array{all_.data(), all_.size(), -1, false};
    llama_sampler_apply(state_, &array);
    std::fill(row.begin(), row.end(), 0);
    for (std::size_t i = 0; i < all_.size(); ++i)
      if (all_[i].logit != -INFINITY) specdec::bitmask_set(row.data(), static_cast<std::int32_t>(i), true);
    ++fills_;
  }
  /// Forgets the rollback states: the tokens held so far are committed.
  void commit() {
    for (llama_sampler* s : saved_) llama_sampler_free(s);
    saved_.clear();
    ended_.erase(ended_.begin(), ended_.end() - (ended_.empty() ? 0 : 1));
  }
  std::int64_t fills() const { return fills_; }
  std::int64_t accepts() const { return accepts_; }

 private:
  /// One token through the grammar, as common_sampler_sample checks a sampled token.
  bool allows(std::int32_t token) const {
    llama_token_data one{token, 1.0f, 0.0f};
    llama_token_data_array array{&one, 1, -1, false};
    llama_sampler_apply(state_, &array);
    return one.logit != -INFINITY;
  }

  const llama_vocab* vocab_;
  llama_sampler* state_ = nullptr;
  std::vector<llama_sampler*> saved_;  // the state before each accepted token since the last commit
  std::vector<bool> ended_;            // whether each held token (since the commit, plus the last one) ended generation
  std::vector<llama_token_data> all_;
  std::int64_t fills_ = 0, accepts_ = 0;
};

/// Penalties as llama.cpp's options name them (llama_sampler_init_penalties; its defaults).
struct llama_penalties {
  float repeat = 1.0f;     ///< --repeat-penalty
  float frequency = 0.0f;  ///< --frequency-penalty
  float presence = 0.0f;   ///< --presence-penalty
  int last_n = 64;         ///< --repeat-last-n (0: none)
  bool any() const { return last_n != 0 && (repeat != 1.0f || frequency != 0.0f || presence != 0.0f); }
};

/// llama.cpp's greedy sampling with its grammar and penalties samplers, called as
/// common_sampler_sample calls them (grammar_first = false): the chain (penalties, then the argmax) on
/// the row; the chosen token checked against the grammar alone; where it is rejected, the row again
/// with the grammar applied first. The prompt's tokens go into the penalties' window, as
/// llama-completion feeds them (common_sampler_accept(..., false): not into the grammar).
class llama_plain_sampler {
 public:
  llama_plain_sampler(const llama_vocab* vocab, const std::string& gbnf, const llama_penalties& p, std::span<const std::int32_t> prompt)
      : chain_(llama_sampler_chain_init(llama_sampler_chain_default_params())) {
    llama_sampler_chain_add(chain_, llama_sampler_init_penalties(llama_vocab_n_tokens(vocab), p.last_n, p.repeat, p.frequency, p.presence));
    llama_sampler_chain_add(chain_, llama_sampler_init_greedy());
    if (!gbnf.empty()) {
      grammar_ = llama_sampler_init_grammar(vocab, gbnf.c_str(), "root");
      if (grammar_ == nullptr) throw std::invalid_argument("llama.cpp could not parse the grammar");
    }
    for (const std::int32_t t : prompt) llama_sampler_accept(chain_, t);
    cur_.resize(static_cast<std::size_t>(llama_vocab_n_tokens(vocab)));
  }
  llama_plain_sampler(const llama_plain_sampler&) = delete;
  llama_plain_sampler& operator=(const llama_plain_sampler&) = delete;
  ~llama_plain_sampler() {
    llama_sampler_free(chain_);
    if (grammar_ != nullptr) llama_sampler_free(grammar_);
  }
  /// The next token from one row of logits (V floats), accepted into the samplers.
  std::int32_t sample(const float* logits) {
    llama_token_data_array array = fill(logits);
    llama_sampler_apply(chain_, &array);
    llama_token id = array.data[array.selected].id;
    if (grammar_ != nullptr) {
      llama_token_data one{id, 1.0f, 0.0f};
      llama_token_data_array single{&one, 1, -1, false};
      llama_sampler_apply(grammar_, &single);
      if (one.logit == -INFINITY) {  // resampling: the grammar first, then the chain
        array = fill(logits);
        llama_sampler_apply(grammar_, &array);
        llama_sampler_apply(chain_, &array);
        id = array.data[array.selected].id;
      }
      llama_sampler_accept(grammar_, id);
    }
    llama_sampler_accept(chain_, id);
    return id;
  }

 private:
  llama_token_data_array fill(const float* logits) {
    for (std::size_t i = 0; i < cur_.size(); ++i) cur_[i] = {static_cast<llama_token>(i), logits[i], 0.0f};
    return {cur_.data(), cur_.size(), -1, false};
  }
  llama_sampler* chain_;
  llama_sampler* grammar_ = nullptr;
  std::vector<llama_token_data> cur_;
};

}  // namespace llama_example
