// SPDX-License-Identifier: Apache-2.0
// specdec inside llama.cpp: model-free drafters through specdec's drafting protocol (specdec::ngram_drafter,
// prompt lookup as a chain or a tree of several continuations; specdec::suffix_drafter, SuffixDecoding's
// suffix trees as a path or a tree), each sized by its draft-length policy, each draft verified in one
// llama_decode
// (llama_adapter.hpp), greedily or by lossless speculative sampling. Every method runs on the same
// prompt; the greedy ones are checked token for token against plain decoding, which is llama.cpp
// decoding one token per call and taking the argmax, as its own greedy decoding does.
//
//   specdec_llama_cpp --model M.gguf [--prompt TEXT ... | --prompts FILE] [--tokens 64] [--threads 1] [--decode-threads N]
//                     [--no-repack]
//                     [--repeats 1] [--temperature 0] [--methods plain,chain,tree,suffix,suffix_tree] [--seed 1]
//                     [--quant Q4_1] [--warmup FILE] [--shared-cache] [--chat-template NAME] [--print-chat]
//                     [--suffix-factor 1] [--trace] [--system-info] [--grammar FILE.gbnf | --json-schema FILE.json]
//                     [--repeat-penalty 1] [--frequency-penalty 0] [--presence-penalty 0] [--repeat-last-n 64]
// --threads: llama.cpp's threads (both kinds of decode); --decode-threads: those of one-token decodes only
// (1 makes tree rows bit-identical to one-token rows past 256 cells); --no-repack keeps llama.cpp from
// repacking Q4_0 / Q4_K weights, whose 4-row product differs from the one-row one. A note on stderr says
// when a run is outside these conditions (docs/engine.md, step 9).
// --grammar / --json-schema / the penalties (llama.cpp's names and defaults): every method generates under
// them; plain greedy decoding is then llama.cpp's own sampler chain (llama_grammar.hpp), the reference the
// drafting methods are checked against.
// `tree` drafts three continuations per step, merged into one tree within the rows of the chain the policy
// chose. `suffix` / `suffix_tree`: specdec::suffix_cache's draft (a path / a best-first tree), its first
// nodes, as many as the policy chooses within what the draft offers (so does prompt lookup). --shared-cache:
// one suffix cache per method for the whole prompts file, requests in file order, so later requests draft
// from earlier answers too (without it each request drafts from its own prompt and output only); plain
// decoding is unchanged. --chat-template: a template llama.cpp knows by name, for a GGUF without one
// (Gemma-3-270M's base model: "gemma"). --suffix-factor: the suffix drafts' max_spec_factor (a match of m
// tokens drafts at most m x factor; vLLM's 1). --prompts: one prompt per line, a JSON string. Each method's
// draft-length policy is kept across prompts, as an engine keeps it across requests; --warmup FILE runs those
// prompts first, untimed. Methods run interleaved, --repeats rounds; per (prompt, method) the median: `RESULT
// engine=llama.cpp quant=<q> prompt=<i> method=specdec_<name> tok_s=<x> speedup=<x vs plain> tau=<x>
// identical=<yes|no|n/a>`, then `TEXT prompt=<i> method=specdec_<name> <JSON string>` (the last run's
// output). Exit status 1 when a greedy output differs from plain decoding. --print-chat prints each prompt in
// the chat template (`CHAT prompt=<i> <JSON string>`), the raw prompt llama.cpp's own programs are given by
// scripts/compare_llama_cpp.sh, and exits. --trace prints every verification to stderr (`TRACE method=<name>
// prompt=<index; -1: warm-up> match=<matched suffix> length=<chosen> rows=<decoded> accepted=<n>
// ms=<decode> pruned=<draft nodes the grammar dropped>`): what the draft-length policy chose and what it paid. --system-info loads the model and
// prints what llama.cpp runs it with, then exits: `SYSTEM <llama_print_system_info()>` (the instruction sets
// ggml was built with), `CPU_EXTRA_BUFFER_TYPES <names>` (the weight layouts ggml's CPU backend offers) and
// `MODEL_BUFFER_TYPES <names>` (those the model's weights went into); scripts/check_llama_cpp.sh fails when
// AMX is among them.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/sampling/constrained.hpp>
#include <specdec/sampling/penalties.hpp>
#include <specdec/sampling/sampling.hpp>
#include <specdec/tree/drafters.hpp>
#include <specdec/grammar/tree_grammar.hpp>

#include "../engine/prompts.hpp"
#include "json_schema.hpp"
#include "llama_adapter.hpp"
#include "llama_grammar.hpp"

namespace {

struct run_result {
  std::vector<std::int32_t> tokens;
  std::string text;  // the tokens' pieces, the end-of-turn token left out
  double seconds = 0.0;
  specdec::index_t forwards = 0;
};

/// The longest draft. Copied text (code edits, repetitions) accepts long drafts, and on a CPU a decode of
/// 33 rows costs 8-18 single ones while one of 9 costs 3-5: the policy reaches that far when it pays.
constexpr specdec::index_t longest_draft = 32;

/// Verification cost by row count, (rows, seconds) samples, measured once per model.
using cost_samples = std::vector<std::pair<specdec::index_t, double>>;

cost_samples measure_costs(const std::string& model, const std::vector<std::int32_t>& prompt, int threads) {
  llama_example::llama_engine engine(model, threads, static_cast<int>(prompt.size()) + longest_draft + 8, 8);
  engine.prefill(prompt);
  cost_samples samples;
  for (int round = 0; round < 3; ++round)
    for (const int rows : {1, 2, 3, 5, 9, 17, 33}) samples.emplace_back(rows, engine.time_decode(rows));
  return samples;
}

/// What a request constrains its output with: a GBNF grammar (--grammar, or --json-schema converted by
/// llama.cpp's json_schema_to_grammar) and llama.cpp's penalties.
struct constraints {
  std::string gbnf;  ///< empty: no grammar
  llama_example::llama_penalties penalties;
  bool any() const { return !gbnf.empty() || penalties.any(); }
};

/// A request's constraint state across its steps: llama.cpp's grammar engine behind specdec's matcher
/// interface (holding the tokens emitted so far) and the penalties' window (prompt and output, as
/// llama.cpp's sampler counts them).
struct constraint_state {
  std::unique_ptr<llama_example::llama_grammar_matcher> grammar;
  specdec::sampling::penalty_history history;
  specdec::sampling::penalty_params params;
  bool penalised = false;
  constraint_state(const llama_vocab* vocab, const constraints& c, std::span<const std::int32_t> prompt)
      : history(specdec::sampling::penalty_history::last_n(prompt, c.penalties.any() ? c.penalties.last_n : 0)),
        params{c.penalties.repeat, c.penalties.frequency, c.penalties.presence, specdec::sampling::repetition_rule::divide,
               specdec::sampling::penalty_convention::llama_cpp},
        penalised(c.penalties.any()) {
    if (!c.gbnf.empty()) grammar = std::make_unique<llama_example::llama_grammar_matcher>(vocab, c.gbnf);
  }
  /// The step's emitted tokens join the committed state.
  void commit(std::span<const std::int32_t> emitted) {
    for (const std::int32_t t : emitted) history.append(t);
    if (grammar) grammar->commit();
  }
};

/// Verifies one drafted tree against its rows' logits: greedily, or by lossless speculative sampling
/// with the step's own Philox stream. Under constraints, greedy verification asks the grammar about
/// one token per visited row and fills a mask only where the target's choice is forbidden
/// (verify_greedy_constrained); sampled verification fills every node's mask (fill_tree_bitmasks)
/// and penalises a copy of the rows. Either way the grammar then holds the emitted tokens.
specdec::sampling::speculative_result verify(const specdec::draft_tree& tree, specdec::matrix_view<const float> logits,
                                             float temperature, std::uint64_t seed, std::uint64_t step,
                                             constraint_state* constrained = nullptr) {
  specdec::eigen backend;
  specdec::sampling::speculative_request request{.tree = tree};
  const bool greedy = temperature == 0.0f;
  if (constrained == nullptr || (!constrained->grammar && !constrained->penalised)) {
    if (greedy) return specdec::sampling::verify_greedy(backend, logits, request);
    request.uniforms = specdec::sampling::uniform_stream::philox(specdec::philox_stream{seed, step});
    request.temperature = temperature;
    return specdec::sampling::verify_speculative_logits(backend, {logits}, request);
  }
  const specdec::sampling::walk_penalties penalties{constrained->penalised ? &constrained->history : nullptr, constrained->params};
  if (greedy) {
    if (constrained->grammar)
      return specdec::sampling::verify_greedy_constrained(backend, logits, request, *constrained->grammar, penalties);
    specdec::any_token_matcher none{logits.cols()};
    return specdec::sampling::verify_greedy_constrained(backend, logits, request, none, penalties);
  }
  const specdec::index_t n = tree.size(), v = logits.cols();
  std::vector<float> rows(logits.data(), logits.data() + n * v);
  if (constrained->penalised)
    specdec::sampling::apply_tree_penalties(specdec::matrix_view<float>(rows.data(), n, v), tree, 0, constrained->history,
                                            constrained->params);
  std::vector<std::int32_t> masks;
  specdec::sampling::speculative_rows<specdec::host_space> input{.target = specdec::matrix_view<const float>(rows.data(), n, v)};
  if (constrained->grammar) {
    const specdec::index_t words = specdec::bitmask_words(v);
    masks.resize(static_cast<std::size_t>(n * words));
    (void)specdec::fill_tree_bitmasks(tree, v, *constrained->grammar, specdec::matrix_view<std::int32_t>(masks.data(), n, words));
    input.target_bitmask = specdec::matrix_view<const std::int32_t>(masks.data(), n, words);
  }
  request.uniforms = specdec::sampling::uniform_stream::philox(specdec::philox_stream{seed, step});
  request.temperature = temperature;
  specdec::sampling::speculative_result result = specdec::sampling::verify_speculative_logits(backend, input, request);
  if (constrained->grammar)
    for (const std::int32_t t : result.tokens)
      if (!constrained->grammar->accept_token(t)) throw std::logic_error("the grammar rejected a token its masks allowed");
  return result;
}

/// The suffix trees' depth: the longest match plus draft. Arctic Inference's default (vLLM's is 24): a
/// copied stretch keeps matching for up to 63 tokens, so the draft can reach longest_draft.
constexpr specdec::index_t suffix_depth = 64;
using suffix_cache = specdec::suffix_cache<std::int32_t, int>;
using suffix_drafter = specdec::suffix_drafter<std::int32_t, int>;

/// The suffix drafter's bounds: without --shared-cache no response outlives its request (each request
/// drafts from its own prompt and output only); with it, up to vLLM's 10000 earlier responses.
specdec::suffix_cache_options suffix_cache_bounds(bool shared) {
  return {.max_depth = suffix_depth, .max_cached_requests = shared ? 10000 : 0, .max_cached_tokens = specdec::index_t{1} << 22};
}

/// A method's drafter, kept across requests as an engine keeps it: what its draft-length policy learns
/// is per context of match length, not per text. Plain decoding has none (root-only trees). `tree`
/// drafts three continuations within the rows the policy chose; the suffix drafters bind to each
/// request's cache in turn.
using method_drafter = std::variant<std::monostate, specdec::ngram_drafter, suffix_drafter>;

method_drafter make_drafter(const std::string& method, const cost_samples& costs, const suffix_cache& cache, float suffix_factor) {
  method_drafter d;
  if (method == "chain" || method == "tree")
    d = specdec::ngram_drafter({.options = {.max_ngram = 16, .min_ngram = 2, .branches = method == "tree" ? 3 : 1},
                                .longest = longest_draft});
  else if (method == "suffix" || method == "suffix_tree")
    d = suffix_drafter(cache, -1, {.options = {.max_spec_tokens = longest_draft, .max_spec_factor = suffix_factor,
                                               .min_token_prob = 0.1f, .tree = method == "suffix_tree"},
                                   .longest = longest_draft});
  else if (method != "plain")
    throw std::invalid_argument("unknown method '" + method + "'; expected plain, chain, tree, suffix or suffix_tree");
  // The target's costs as measured at startup, so that the first drafts are priced.
  std::visit([&]<class D>(D& drafter) {
    if constexpr (!std::is_same_v<D, std::monostate>)
      for (const auto& [rows, seconds] : costs) drafter.policy().target_forward_timed(rows, seconds);
  }, d);
  return d;
}

/// Generates up to `new_tokens` tokens after the prompt with `drafter` (none: plain decoding). The
/// prompt is decoded in one batch and the first token chosen from its last row, as llama.cpp's own
/// programs do (llama-completion, llama-simple): a row's logits depend on how the tokens before it were
/// batched, so only this gives their tokens bit for bit. Timed from then on, as they time generation.
/// A suffix drafter drafts through `cache` as request `request` (started here, stopped at the end: with
/// --shared-cache its response stays for later requests).
/// Under constraints (a grammar, penalties), plain greedy decoding is llama.cpp's own sampler chain
/// (llama_plain_sampler: the reference the drafting methods must equal token for token), and every
/// draft is pruned by the grammar before it is decoded (prune_tree: fewer rows).
run_result generate(const std::string& model, const std::vector<std::int32_t>& prompt, int threads, int new_tokens,
                    method_drafter& drafter, float temperature, std::uint64_t seed, suffix_cache& cache, int request,
                    const constraints& limits, const char* trace = nullptr) {
  suffix_drafter* suffix = std::get_if<suffix_drafter>(&drafter);
  if (suffix != nullptr) {
    cache.start_request(request, prompt);
    suffix->bind(cache, request);
  }
  // Room for the longest draft and the kept tokens decoded again in front of it, with margin.
  llama_example::llama_engine engine(model, threads, static_cast<int>(prompt.size()) + new_tokens + 4 * longest_draft + 8, 8);
  // Said once, at run time: where llama.cpp's kernels make tree rows differ from one-token rows, a
  // greedy output may differ from plain decoding where two tokens are within that rounding.
  static bool warned = false;
  const long long cells = static_cast<long long>(prompt.size()) + new_tokens;
  if (!warned && !llama_example::batch_invariant(threads, true, cells)) {
    warned = true;
    std::fprintf(stderr,
                 "NOTE identity: a run reaches %lld cells with one-token decodes on %d threads: llama.cpp's flash attention "
                 "then splits a one-token decode's keys across threads and not a tree's, so greedy outputs may differ from "
                 "plain decoding in near-ties (--decode-threads 1 makes them bit-identical)\n",
                 cells, llama_example::decode_threads > 0 ? llama_example::decode_threads : threads);
  }
  static bool warned_repack = false;
  const std::vector<std::string>& buffers = llama_example::model_buffer_types();
  if (!warned_repack && std::find(buffers.begin(), buffers.end(), "CPU_REPACK") != buffers.end()) {
    warned_repack = true;
    std::fprintf(stderr,
                 "NOTE identity: llama.cpp repacked weights (CPU_REPACK): its product of 4 rows and more sums in another order "
                 "than its one-row product, so greedy outputs may differ from plain decoding in near-ties (--no-repack makes "
                 "tree rows bit-identical to one-token rows)\n");
  }
  std::vector<std::int32_t> history = prompt;
  run_result out;
  const specdec::matrix_view<const float> prompt_logits = engine.prefill(prompt);
  const bool plain = std::holds_alternative<std::monostate>(drafter);
  std::unique_ptr<llama_example::llama_plain_sampler> llama_sampling;
  std::unique_ptr<constraint_state> state;
  if (limits.any() && plain && temperature == 0.0f)
    llama_sampling = std::make_unique<llama_example::llama_plain_sampler>(engine.vocab(), limits.gbnf, limits.penalties, prompt);
  else if (limits.any())
    state = std::make_unique<constraint_state>(engine.vocab(), limits, prompt);
  const auto start = std::chrono::steady_clock::now();
  // Step 0 verifies a root-only tree (the prompt's last token, already in the cache) on the prompt's
  // last row; every later step decodes its tree, rooted at the last token chosen, in one llama_decode.
  for (std::uint64_t step = 0; static_cast<int>(out.tokens.size()) < new_tokens; ++step) {
    specdec::sampling::speculative_result result;
    if (llama_sampling) {  // llama.cpp's own constrained greedy decoding, one token per llama_decode
      const float* row = step == 0 ? prompt_logits.data() : engine.decode_tree(specdec::make_tree({history.back()}, {-1})).data();
      if (step > 0) {
        ++out.forwards;
        engine.keep(std::vector<std::int32_t>{0});
      }
      result.tokens = {llama_sampling->sample(row)};
    } else if (step == 0) {
      result = verify(specdec::make_tree({history.back()}, {-1}), prompt_logits, temperature, seed, step, state.get());
    } else {
      specdec::index_t match = 0;
      const specdec::draft_tree proposal = std::visit([&]<class D>(D& d) -> specdec::draft_tree {
        if constexpr (std::is_same_v<D, std::monostate>) {
          return specdec::make_tree({history.back()}, {-1});
        } else {  // model-free: no draft forward is ever requested
          const specdec::drafted draft = specdec::run_drafter(d, {history}, [](const specdec::draft_request&) {
            return specdec::matrix_view<const float>{};
          });
          match = d.match_length();
          return draft.tree;
        }
      }, drafter);
      // The grammar drops the draft nodes it forbids before they cost a row (one accept per node).
      const specdec::draft_tree tree = llama_example::llama_engine::dfs_order(
          state && state->grammar ? specdec::prune_tree(proposal, engine.vocab_size(), *state->grammar).tree : proposal);
      const auto t0 = std::chrono::steady_clock::now();
      const specdec::matrix_view<const float> logits = engine.decode_tree(tree);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ++out.forwards;
      result = verify(tree, logits, temperature, seed, step, state.get());
      std::visit([&]<class D>(D& d) {
        if constexpr (!std::is_same_v<D, std::monostate>)  // the rows decoded: the pruned tree's
          d.feedback({.accepted_nodes = result.accepted_nodes, .target_seconds = seconds, .target_rows = tree.size()});
      }, drafter);
      if (trace != nullptr)
        std::fprintf(stderr, "TRACE method=%s prompt=%d match=%lld length=%lld rows=%lld accepted=%zu ms=%.2f pruned=%lld\n", trace,
                     request, static_cast<long long>(match), static_cast<long long>(proposal.size() - 1),
                     static_cast<long long>(tree.size()), result.accepted_nodes.size(), 1e3 * seconds,
                     static_cast<long long>(proposal.size() - tree.size()));
      engine.keep(result.kept_nodes());
    }
    if (state) state->commit(result.tokens);
    bool end = false;
    const std::size_t before = history.size();
    for (const std::int32_t token : result.tokens) {
      if (static_cast<int>(out.tokens.size()) == new_tokens || end) break;
      out.tokens.push_back(token);
      history.push_back(token);
      end = engine.is_end(token);  // nothing after the end of the turn
      if (!end) out.text += engine.piece(token);
    }
    if (suffix != nullptr) cache.add_active_response(request, std::span(history).subspan(before));
    if (end) break;
  }
  if (suffix != nullptr) cache.stop_request(request);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

/// Tokens per target forward (tau): the first token comes from the prompt's decode.
double tokens_per_forward(const run_result& run) {
  return run.forwards == 0 ? 1.0 : static_cast<double>(run.tokens.size() - 1) / static_cast<double>(run.forwards);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, quant = "Q4_1", methods = "plain,chain,tree,suffix,suffix_tree", prompts_file, warmup_file,
      chat_template;
  std::vector<std::string> prompts;
  int tokens = 64, threads = 1, repeats = 1;
  float temperature = 0.0f, suffix_factor = 1.0f;
  std::uint64_t seed = 1;
  bool print_chat = false, trace = false, system_info = false, shared_cache = false;
  constraints limits;
  std::string grammar_file, schema_file;
  for (int i = 1; i < argc; i += 2) {
    const std::string key = argv[i];
    if (key == "--no-repack") {
      llama_example::repack_weights = false;
      --i;
      continue;
    }
    if (key == "--print-chat" || key == "--trace" || key == "--system-info" || key == "--shared-cache") {
      (key == "--trace" ? trace : key == "--print-chat" ? print_chat : key == "--shared-cache" ? shared_cache : system_info) = true;
      --i;
      continue;
    }
    if (i + 1 == argc) {
      std::fprintf(stderr, "%s needs a value\n", key.c_str());
      return 2;
    }
    const std::string value = argv[i + 1];
    if (key == "--model") model = value;
    else if (key == "--prompt") prompts.push_back(value);
    else if (key == "--prompts") prompts_file = value;
    else if (key == "--warmup") warmup_file = value;
    else if (key == "--tokens") tokens = std::atoi(value.c_str());
    else if (key == "--threads") threads = std::atoi(value.c_str());
    else if (key == "--decode-threads") llama_example::decode_threads = std::atoi(value.c_str());
    else if (key == "--repeats") repeats = std::max(1, std::atoi(value.c_str()));
    else if (key == "--temperature") temperature = std::strtof(value.c_str(), nullptr);
    else if (key == "--methods") methods = value;
    else if (key == "--seed") seed = std::strtoull(value.c_str(), nullptr, 10);
    else if (key == "--quant") quant = value;
    else if (key == "--chat-template") chat_template = value;
    else if (key == "--suffix-factor") suffix_factor = std::strtof(value.c_str(), nullptr);
    else if (key == "--grammar") grammar_file = value;
    else if (key == "--json-schema") schema_file = value;
    else if (key == "--repeat-penalty") limits.penalties.repeat = std::strtof(value.c_str(), nullptr);
    else if (key == "--frequency-penalty") limits.penalties.frequency = std::strtof(value.c_str(), nullptr);
    else if (key == "--presence-penalty") limits.penalties.presence = std::strtof(value.c_str(), nullptr);
    else if (key == "--repeat-last-n") limits.penalties.last_n = std::atoi(value.c_str());
    else {
      std::fprintf(stderr, "unknown option %s\n", key.c_str());
      return 2;
    }
  }
  if (model.empty()) {
    std::fprintf(stderr,
                 "usage: %s --model M.gguf [--prompt TEXT ... | --prompts FILE] [--tokens N] [--threads N] [--decode-threads N]\n"
                 "          [--no-repack] [--repeats N] [--temperature T] [--methods plain,chain,tree,suffix,suffix_tree] [--quant NAME]\n"
                 "          [--warmup FILE] [--shared-cache] [--chat-template NAME] [--suffix-factor F] [--print-chat] [--trace]\n"
                 "          [--system-info] [--grammar FILE.gbnf | --json-schema FILE.json] [--repeat-penalty R]\n"
                 "          [--frequency-penalty F] [--presence-penalty P] [--repeat-last-n N]\n",
                 argv[0]);
    return 2;
  }
  if (system_info) {
    const llama_example::llama_engine engine(model, threads, 512, 1);
    const auto joined = [](const std::vector<std::string>& names) {
      std::string text;
      for (const std::string& name : names) text += (text.empty() ? "" : ",") + name;
      return text.empty() ? std::string("none") : text;
    };
    std::printf("SYSTEM %s\n", llama_print_system_info());
    std::printf("CPU_EXTRA_BUFFER_TYPES %s\n", joined(llama_example::cpu_extra_buffer_types()).c_str());
    std::printf("MODEL_BUFFER_TYPES %s\n", joined(llama_example::model_buffer_types()).c_str());
    return 0;
  }
  if (!grammar_file.empty() && !schema_file.empty()) {
    std::fprintf(stderr, "--grammar and --json-schema exclude each other\n");
    return 2;
  }
  const auto read_file = [](const std::string& path) {
    std::ifstream f(path);
    if (!f) throw std::runtime_error("cannot read " + path);
    std::stringstream text;
    text << f.rdbuf();
    return text.str();
  };
  if (!grammar_file.empty()) limits.gbnf = read_file(grammar_file);
  if (!schema_file.empty()) limits.gbnf = llama_example::json_schema_to_gbnf(read_file(schema_file));
  if (!prompts_file.empty()) prompts = engine::read_prompts(prompts_file);
  if (prompts.empty()) prompts.push_back("Repeat this list exactly, twice: apples, pears, plums, cherries, apricots, figs, dates.");
  if (print_chat) {  // the prompts as llama.cpp's own programs take them (raw text, template applied)
    llama_example::llama_engine engine(model, threads, 4096, 1);
    engine.chat_template = chat_template;
    for (std::size_t p = 0; p < prompts.size(); ++p)
      std::printf("CHAT prompt=%zu %s\n", p, engine::json_string(engine.chat_text(prompts[p])).c_str());
    return 0;
  }
  std::vector<std::string> method_list;
  {
    std::stringstream list(methods);
    for (std::string m; std::getline(list, m, ',');) method_list.push_back(m);
  }
  const bool greedy = temperature == 0.0f;
  bool all_identical = true;
  cost_samples costs;  // measured once, as an engine would at startup (not counted in tokens/s)
  {
    llama_example::llama_engine engine(model, threads, 4096, 1);
    engine.chat_template = chat_template;
    costs = measure_costs(model, engine.chat_tokens(prompts.front()), threads);
  }
  std::printf("COST quant=%s decode ms by rows:", quant.c_str());  // the last round of the calibration
  for (std::size_t i = costs.size() - 7; i < costs.size(); ++i)
    std::printf(" %lld=%.2f", static_cast<long long>(costs[i].first), 1e3 * costs[i].second);
  std::printf("\n");
  // Each method's suffix cache as the next request finds it: empty without --shared-cache; with it,
  // the responses of the prompts before (one per prompt, in file order). Every round of a prompt
  // starts from that state, so no round drafts from its own earlier answer.
  std::vector<suffix_cache> caches(method_list.size(), suffix_cache(suffix_cache_bounds(shared_cache)));
  // One drafter per method, kept across requests; --warmup runs its prompts first, untimed, so that
  // the measured requests find it as a running engine would.
  std::vector<method_drafter> drafters;
  for (std::size_t m = 0; m < method_list.size(); ++m) drafters.push_back(make_drafter(method_list[m], costs, caches[m], suffix_factor));
  const auto chat_of = [&](const std::string& prompt) {
    llama_example::llama_engine engine(model, threads, 4096, 1);
    engine.chat_template = chat_template;
    return engine.chat_tokens(prompt);
  };
  if (!warmup_file.empty())  // trains the policies only: the warm-up answers are not cached
    for (const std::string& prompt : engine::read_prompts(warmup_file))
      for (std::size_t m = 0; m < method_list.size(); ++m) {
        suffix_cache scratch(suffix_cache_bounds(false));
        (void)generate(model, chat_of(prompt), threads, tokens, drafters[m], temperature, seed, scratch, -1, limits);
      }
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    const std::vector<std::int32_t> chat = chat_of(prompts[p]);
    // Methods interleaved, `repeats` rounds; each method's median tokens/s.
    std::vector<std::vector<double>> speed(method_list.size());
    std::vector<run_result> last(method_list.size());
    for (int round = 0; round < repeats; ++round)
      for (std::size_t m = 0; m < method_list.size(); ++m) {
        suffix_cache cache = caches[m];
        last[m] = generate(model, chat, threads, tokens, drafters[m], temperature, seed, cache, static_cast<int>(p), limits,
                           trace ? method_list[m].c_str() : nullptr);
        if (round + 1 == repeats) caches[m] = std::move(cache);
        speed[m].push_back(static_cast<double>(last[m].tokens.size()) / last[m].seconds);
      }
    const auto plain_at = std::find(method_list.begin(), method_list.end(), "plain");
    const std::size_t plain = static_cast<std::size_t>(plain_at - method_list.begin());
    const double plain_tok_s = plain_at == method_list.end() ? 0.0 : median(speed[plain]);
    for (std::size_t m = 0; m < method_list.size(); ++m) {
      const bool compared = greedy && plain_at != method_list.end() && m != plain;
      const bool identical = compared && last[m].tokens == last[plain].tokens;
      if (compared) all_identical = all_identical && identical;
      const double tok_s = median(speed[m]);
      std::printf("RESULT engine=llama.cpp quant=%s prompt=%zu method=specdec_%s tok_s=%.1f speedup=%.2f tau=%.2f identical=%s\n",
                  quant.c_str(), p, method_list[m].c_str(), tok_s, plain_tok_s > 0 ? tok_s / plain_tok_s : 0.0,
                  tokens_per_forward(last[m]),
                  m == plain && greedy ? "yes" : compared ? (identical ? "yes" : "no") : "n/a");
    }
    for (std::size_t m = 0; m < method_list.size(); ++m)
      std::printf("TEXT prompt=%zu method=specdec_%s %s\n", p, method_list[m].c_str(), engine::json_string(last[m].text).c_str());
  }
  return all_identical ? 0 : 1;
}
