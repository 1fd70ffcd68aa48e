// SPDX-License-Identifier: Apache-2.0
// The engine's largest functions, compiled once (every example, the demo and the tests link this file):
// the model's loading and forward pass, the generation loop, and the examples' shared main. Their
// declarations and documentation are in the headers.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <specdec/mask/tree_mask.hpp>
#include <specdec/sampling/greedy.hpp>
#include <specdec/sampling/speculative.hpp>

#include "decoding.hpp"
#include "example_main.hpp"
#include "gguf.hpp"
#include "llama.hpp"
#include "prompts.hpp"
#include "tokenizer.hpp"

namespace engine {

llama_model llama_model::load(const gguf_file& f) {
  const auto& arch = f.get<std::string>("general.architecture");
  if (arch != "llama") throw gguf_error("general.architecture is '" + arch + "'; the example engine runs 'llama'");
  llama_model m;
  auto& c = m.config_;
  // A count from the file in [1, most]: checked before it divides, sizes a buffer or bounds a loop.
  const auto count = [&](const std::string& key, std::int64_t value, std::int64_t most) {
    if (value < 1 || value > most)
      throw gguf_error(key + " = " + std::to_string(value) + "; expected 1 to " + std::to_string(most));
    return value;
  };
  constexpr std::int64_t widest = std::int64_t{1} << 40;  // the reader's largest tensor extent
  c.layers = count("llama.block_count", f.get<std::int64_t>("llama.block_count"), std::int64_t{1} << 16);
  c.hidden = count("llama.embedding_length", f.get<std::int64_t>("llama.embedding_length"), widest);
  c.heads = count("llama.attention.head_count", f.get<std::int64_t>("llama.attention.head_count"), c.hidden);
  c.kv_heads = count("llama.attention.head_count_kv", f.get_or<std::int64_t>("llama.attention.head_count_kv", c.heads), c.heads);
  if (c.hidden % c.heads != 0 || c.heads % c.kv_heads != 0)
    throw gguf_error("llama.embedding_length = " + std::to_string(c.hidden) + ", llama.attention.head_count = " +
                     std::to_string(c.heads) + ", head_count_kv = " + std::to_string(c.kv_heads) +
                     "; expected the heads to divide the width and the kv heads the heads");
  c.head_dim = c.hidden / c.heads;
  c.intermediate = count("llama.feed_forward_length", f.get<std::int64_t>("llama.feed_forward_length"), widest);
  c.rope_theta = f.get_or<double>("llama.rope.freq_base", 10000.0);
  c.rms_eps = static_cast<float>(f.get_or<double>("llama.attention.layer_norm_rms_epsilon", 1e-5));
  const auto e = static_cast<std::uint64_t>(c.hidden), kv = static_cast<std::uint64_t>(c.kv_heads * c.head_dim),
             ff = static_cast<std::uint64_t>(c.intermediate);
  const auto embd = f.tensors().find("token_embd.weight");
  if (embd == f.tensors().end()) throw gguf_error("tensor 'token_embd.weight' is missing");
  if (embd->second.dims.size() != 2)
    throw gguf_error("tensor 'token_embd.weight' has rank " + std::to_string(embd->second.dims.size()) +
                     "; expected 2 ([hidden x vocabulary])");
  if (embd->second.dims[1] > static_cast<std::uint64_t>(INT32_MAX))
    throw gguf_error("tensor 'token_embd.weight' has a vocabulary of " + std::to_string(embd->second.dims[1]) +
                     " tokens; expected at most 2^31 - 1 (token ids are int32)");
  c.vocab = static_cast<index_t>(embd->second.dims[1]);
  m.embedding_ = f.load("token_embd.weight", {e, static_cast<std::uint64_t>(c.vocab)});
  if (f.has_tensor("output.weight")) m.output_ = f.load("output.weight", {e, static_cast<std::uint64_t>(c.vocab)});
  m.final_norm_ = f.load("output_norm.weight", {e});
  for (index_t l = 0; l < c.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    owned_layer w;
    w.attn_norm = f.load(p + "attn_norm.weight", {e});
    w.ffn_norm = f.load(p + "ffn_norm.weight", {e});
    w.q = unpermute(f.load(p + "attn_q.weight", {e, e}), c.heads, c.head_dim, c.hidden);
    w.k = unpermute(f.load(p + "attn_k.weight", {e, kv}), c.kv_heads, c.head_dim, c.hidden);
    w.v = f.load(p + "attn_v.weight", {e, kv});
    w.o = f.load(p + "attn_output.weight", {e, e});
    w.gate = f.load(p + "ffn_gate.weight", {e, ff});
    w.up = f.load(p + "ffn_up.weight", {e, ff});
    w.down = f.load(p + "ffn_down.weight", {ff, e});
    m.layers_.push_back(std::move(w));
  }
  return m;
}

void llama_session::forward(std::span<const std::int32_t> tokens, std::span<const std::int64_t> positions,
                          std::span<const std::uint8_t> allowed, std::vector<float>& logits,
                          const specdec::policy::admg::layer_plan* plan, const forward_hooks* hooks) {
  namespace blocks = specdec::blocks;
  const auto& c = model_->config();
  const auto t = static_cast<index_t>(tokens.size());
  SPECDEC_EXPECTS(t >= 1 && positions.size() == tokens.size(), "engine::llama_session::forward", "got ", tokens.size(),
                  " tokens and ", positions.size(), " positions; expected the same number, at least one");
  SPECDEC_EXPECTS(!plan || (static_cast<index_t>(plan->skip_attention.size()) == c.layers &&
                            static_cast<index_t>(plan->skip_mlp.size()) == c.layers),
                  "engine::llama_session::forward", "the layer plan covers ", plan ? plan->skip_attention.size() : 0,
                  " attention and ", plan ? plan->skip_mlp.size() : 0, " MLP sub-layers; expected one of each per layer (",
                  c.layers, ")");
  hidden_.resize(static_cast<std::size_t>(t * c.hidden));
  const specdec::matrix_view<float> x(hidden_.data(), t, c.hidden);
  backend_.gather_rows(model_->embedding(), specdec::vector_view<const std::int32_t>(tokens.data(), t), x);
  const specdec::vector_view<const std::int64_t> pos(positions.data(), t);
  const auto layer_config = c.layer();
  for (index_t l = 0; l < c.layers; ++l) {
    const bool skip_attention = plan && plan->skip_attention[static_cast<std::size_t>(l)];
    const bool skip_mlp = plan && plan->skip_mlp[static_cast<std::size_t>(l)];
    auto& cache = caches_[static_cast<std::size_t>(l)];
    blocks::attention_mask<specdec::host_space> mask;
    if (!allowed.empty()) {
      SPECDEC_EXPECTS(skip_attention || static_cast<index_t>(allowed.size()) == t * (cache.size() + t),
                      "engine::llama_session::forward", "the mask has ", allowed.size(), " entries; layer ", l, " expects [",
                      t, " x ", cache.size() + t, "]");
      mask = blocks::attention_mask<specdec::host_space>::from(
          specdec::matrix_view<const std::uint8_t>(allowed.data(), t, cache.size() + t));
    }
    const auto& w = weights_[static_cast<std::size_t>(l)];
    if (hooks && hooks->after_attention && !skip_attention) {
      before_.assign(hidden_.begin(), hidden_.end());
      blocks::decoder_layer_forward(backend_, layer_config, w, x, pos, &cache, mask, {false, true});
      hooks->after_attention(l, host_matrix(before_.data(), t, c.hidden), host_matrix(hidden_.data(), t, c.hidden));
      if (!skip_mlp) blocks::decoder_layer_forward(backend_, layer_config, w, x, pos, &cache, mask, {true, false});
    } else {
      blocks::decoder_layer_forward(backend_, layer_config, w, x, pos, &cache, mask, {skip_attention, skip_mlp});
    }
    if (hooks && hooks->after_layer) hooks->after_layer(l, host_matrix(hidden_.data(), t, c.hidden));
  }
  backend_.rms_norm(host_matrix(hidden_.data(), t, c.hidden), model_->final_norm(), c.rms_eps, x);
  logits.resize(static_cast<std::size_t>(t * c.vocab));
  backend_.gemm(host_matrix(hidden_.data(), t, c.hidden), specdec::transpose::no, model_->lm_head(), specdec::transpose::yes,
                specdec::matrix_view<float>(logits.data(), t, c.vocab));
}

generation generate(const llama_model& model, std::span<const std::int32_t> prompt, method* m, const generation_options& options) {
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
    session.forward(prompt.first(prompt.size() - 1), positions, {}, logits, nullptr, m ? m->prefill_hooks() : nullptr);
    if (m) m->after_prefill();
  }
  stats.prefill_seconds = seconds_since(start);
  index_t cached = static_cast<index_t>(prompt.size()) - 1;
  std::vector<std::int64_t> positions;
  std::vector<std::uint8_t> mask;
  for (std::uint64_t step = 0; stats.new_tokens < options.max_new_tokens; ++step) {
    // 1. Draft: the library drafter's protocol, the method's draft model running each request.
    auto t = clock_type::now();
    const step_state at{session, sequence, cached};
    std::optional<drafter_ref> drafter;  // none: vanilla decoding, or a step the method cannot draft
    if (m && m->ready(at)) drafter = m->drafter();
    specdec::drafted dr = {specdec::make_tree({sequence.back()}, {-1}), {}, {}};
    double draft_seconds = 0;
    if (drafter) {
      dr = specdec::run_drafter(*drafter, {sequence, options.temperature, specdec::philox_stream{options.seed, 2 * step + 1}},
                                [&](const specdec::draft_request& r) {
                                  const auto forward_start = clock_type::now();
                                  const host_matrix draft_logits = m->run(at, r);
                                  draft_seconds += seconds_since(forward_start);
                                  ++stats.draft_calls;
                                  stats.draft_units += m->forward_units();
                                  return draft_logits;
                                });
      session.crop(cached);  // a self-draft (ADMG) runs on the target's caches: its rows go
    }
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
                    nullptr, m ? m->target_hooks() : nullptr);
    ++stats.target_calls;
    const double forward_seconds = seconds_since(t);
    stats.verify_forward_seconds += forward_seconds;
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
    // 4. Keep the accepted path's KV rows; the drafter's feedback (the path and the measured costs its
    //    draft-length policy prices drafts with); commit the emitted tokens.
    t = clock_type::now();
    std::vector<std::int32_t> kept = {0};
    kept.insert(kept.end(), result.accepted_nodes.begin(), result.accepted_nodes.end());
    session.keep(cached, kept);
    cached += static_cast<index_t>(kept.size());
    stats.drafted += n - 1;
    stats.accepted += static_cast<index_t>(result.accepted_nodes.size());
    if (drafter) drafter->feedback({result.accepted_nodes, forward_seconds, draft_seconds});
    if (m) m->committed(dr.tree, result.accepted_nodes);
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

int example_main(int argc, char** argv, const std::string& title, const std::string& default_weights,
                 const std::function<std::unique_ptr<method>(const llama_model&, const std::string&)>& make) {
  std::string model_path, prompts_file, weights = default_weights;
  std::vector<std::string> prompts;
  index_t max_new = 48;
  float temperature = 0.8f;
  std::string bad_value;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--model") model_path = v;
    else if (a == "--prompt") prompts.push_back(v);
    else if (a == "--prompts") prompts_file = v;
    else if (a == "--max-new" && !parse_number(v, max_new, index_t{1}, index_t{1} << 20))
      bad_value = "--max-new " + v + ": expected an integer in [1, 2^20]";
    else if (a == "--temperature" && !parse_number(v, temperature, 0.0f, 100.0f))
      bad_value = "--temperature " + v + ": expected a number in [0, 100]";
    else if (a == "--weights") weights = v;
  }
  if (model_path.empty() || !bad_value.empty()) {
    if (!bad_value.empty()) std::cerr << argv[0] << ": " << bad_value << "\n";
    std::cerr << "usage: " << argv[0]
              << " --model PATH.gguf [--prompt TEXT | --prompts FILE] [--max-new N] [--temperature T] [--weights PATH]"
                 " [--tree K,DEPTH,NODES (EAGLE, Jakiro, MoA)]\n"
              << "(scripts/fetch_model.sh prints the path of SmolLM2-135M-Instruct, fetching it once)\n";
    return 2;
  }
  try {
    if (!prompts_file.empty()) prompts = read_prompts(prompts_file);
    if (prompts.empty())
      prompts.push_back("Summarize: The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs into the forest, where "
                        "the fox meets another fox.");
    const auto file = gguf_file::read(model_path);
    const bpe_tokenizer tokenizer(file);
    const auto model = llama_model::load(file);
    const auto chat = [&](const std::string& prompt) {
      return tokenizer.encode("<|im_start|>user\n" + prompt + "<|im_end|>\n<|im_start|>assistant\n");
    };
    generation_options options;
    options.max_new_tokens = max_new;
    options.stop_tokens = {tokenizer.special("<|im_end|>"), tokenizer.eos()};
    std::printf("%s\n", title.c_str());
    if (!weights.empty()) std::printf("drafter weights: %s\n", weights.c_str());
    const std::string name = make(model, weights)->name();  // before the timed runs: a bad checkpoint fails at once
    const auto report = [](const char* mode, const generation_stats& s) {
      std::printf("%-8s tau %.2f (accepted %ld of %ld drafted), %ld target forwards, %ld draft forwards, %.1f tok/s\n", mode, s.tau(),
                  static_cast<long>(s.accepted), static_cast<long>(s.drafted), static_cast<long>(s.target_calls),
                  static_cast<long>(s.draft_calls), s.tokens_per_second());
    };
    generation_stats vanilla_total, greedy_total;
    bool identical = true;
    for (std::size_t p = 0; p < prompts.size(); ++p) {
      const auto ids = chat(prompts[p]);
      const auto vanilla = generate(model, ids, nullptr, options);
      auto d = make(model, weights);
      const auto greedy = generate(model, ids, d.get(), options);
      const bool same = greedy.tokens == vanilla.tokens;
      identical = identical && same;
      vanilla_total += vanilla.stats;
      greedy_total += greedy.stats;
      if (prompts.size() == 1) {
        report("vanilla", vanilla.stats);
        report("greedy", greedy.stats);
        std::printf("greedy output identical to vanilla greedy: %s\n%s\n", same ? "yes" : "NO", tokenizer.decode(greedy.tokens).c_str());
      } else {
        std::printf("prompt %zu: tau %.2f, %.1f tok/s (vanilla %.1f), identical %s\n", p, greedy.stats.tau(),
                    greedy.stats.tokens_per_second(), vanilla.stats.tokens_per_second(), same ? "yes" : "NO");
      }
    }
    if (prompts.size() > 1) {
      report("vanilla", vanilla_total);
      report("greedy", greedy_total);
    }
    const double vanilla_tok_s = vanilla_total.tokens_per_second(), tok_s = greedy_total.tokens_per_second();
    std::printf("RESULT drafter=%s prompts=%zu tau=%.3f target_forwards=%ld tok_s=%.2f vanilla_tok_s=%.2f speedup=%.3f projected=%.3f "
                "identical=%s\n",
                name.c_str(), prompts.size(), greedy_total.tau(), static_cast<long>(greedy_total.target_calls), tok_s, vanilla_tok_s,
                vanilla_tok_s > 0 ? tok_s / vanilla_tok_s : 0.0, greedy_total.projected_speedup(), identical ? "yes" : "no");
    options.temperature = temperature;
    options.seed = 7;
    auto sampled_drafter = make(model, weights);
    const auto sampled = generate(model, chat(prompts.front()), sampled_drafter.get(), options);
    report("sampled", sampled.stats);
    std::printf("(T = %.2f) %s\n", static_cast<double>(temperature), tokenizer.decode(sampled.tokens).c_str());
    return identical ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << argv[0] << ": " << e.what() << "\n";
    return 1;
  }
}

int example_main(int argc, char** argv, const std::string& title,
                 const std::function<std::unique_ptr<method>(const llama_model&)>& make) {
  return example_main(argc, argv, title, "", [&](const llama_model& model, const std::string&) { return make(model); });
}

}  // namespace engine
