// SPDX-License-Identifier: Apache-2.0
// specdec's demo: SmolLM2-135M-Instruct on the CPU, decoded by vanilla greedy decoding, ADMG
// self-speculation, prompt lookup, EAGLE-2 trees drafted by the ADMG self-draft, EAGLE-2 trees
// drafted by the trained EAGLE and EAGLE-3 layers, and chains drafted by the trained MTP module
// (examples/weights, tools/train; each draft sized per step by the draft-length policy), on a few
// fixed prompts. Every greedy output is checked token for token against vanilla greedy; then one sampled
// generation at temperature 0.8. Prints a table and one `RESULT` line per method.
//
//   specdec_demo --model PATH.gguf [--quick] [--repeat R] [--max-new N] [--draft N] [--tree-k K]
//                [--tree-depth D] [--tree-tokens T] [--alpha A] [--admg-m M] [--eagle-weights FILE]
//                [--eagle3-weights FILE] [--mtp-weights FILE] [--dflash-weights FILE]
// A trained drafter whose weights are missing is left out, with a note.
//
// Timing: a shared VM's speed drifts by up to a quarter within seconds, so the methods run interleaved
// per prompt, the whole set R times (default 3), and each (prompt, method) counts its median run.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "engine/decoding.hpp"
#include "engine/dflash_drafter.hpp"
#include "engine/eagle3_drafter.hpp"
#include "engine/eagle_drafter.hpp"
#include "engine/gguf.hpp"
#include "engine/llama.hpp"
#include "engine/mtp_drafter.hpp"
#include "engine/tokenizer.hpp"

namespace {

struct method_total {
  std::string name;
  engine::generation_stats sum;
  bool identical = true;
};

std::string chat(const std::string& user) {
  return "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
         "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n";
}

const std::vector<std::string> demo_prompts = {
    // Summarisation: the answer repeats the text's phrases, which prompt lookup finds.
    "Summarize the following text.\n\nThe Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in "
    "Paris, France. It is named after the engineer Gustave Eiffel, whose company designed and built the tower "
    "from 1887 to 1889. Locally nicknamed \"La dame de fer\" (French for \"Iron Lady\"), it was constructed as the "
    "centerpiece of the 1889 World's Fair, and to crown the centennial anniversary of the French Revolution. "
    "Although initially criticised by some of France's leading artists and intellectuals for its design, it has "
    "since become a global cultural icon of France and one of the most recognisable structures in the world.",
    "Add a docstring to this Python function and return the whole function.\n\ndef moving_average(values, window):\n"
    "    result = []\n    for i in range(len(values) - window + 1):\n        chunk = values[i:i + window]\n"
    "        result.append(sum(chunk) / window)\n    return result",
    // Question answering over a given document (retrieval-augmented style): answers quote it.
    "Read the meeting notes and list every action item with its owner.\n\nMeeting notes, 14 March: Alice will "
    "send the budget report to the finance team by Friday. Bob will update the project timeline and share it "
    "with the client. Carol will book the conference room for the quarterly review. David will fix the login "
    "bug reported by the support team before the next release.",
    // Open-ended: little to copy, where drafting has to pay for itself.
    "Give three tips for staying healthy.",
};

}  // namespace

int main(int argc, char** argv) {
  std::string model_path;
  bool quick = false;
  engine::index_t max_new = 64, draft_length = 8, tree_k = 2, tree_depth = 3, tree_tokens = 6;
  double alpha = 0.995;  // SmolLM2-135M: the paper's 0.985 (tuned on 13B models) removes too much
  engine::index_t admg_m = 4, repeat = 3;
  std::string eagle_weights = engine::default_weights("eagle_smollm2_135m.safetensors");
  std::string eagle3_weights = engine::default_weights("eagle3_smollm2_135m.safetensors");
  std::string mtp_weights = engine::default_weights("mtp_smollm2_135m.safetensors");
  std::string dflash_weights = engine::default_weights("dflash_smollm2_135m.safetensors");
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&] {
      if (i + 1 >= argc) {
        std::cerr << "specdec_demo: " << a << " needs a value\n";
        std::exit(2);
      }
      return std::string(argv[++i]);
    };
    if (a == "--model") model_path = value();
    else if (a == "--quick") quick = true;
    else if (a == "--repeat") repeat = std::max(1L, std::stol(value()));
    else if (a == "--max-new") max_new = std::stol(value());
    else if (a == "--draft") draft_length = std::stol(value());
    else if (a == "--tree-k") tree_k = std::stol(value());
    else if (a == "--tree-depth") tree_depth = std::stol(value());
    else if (a == "--tree-tokens") tree_tokens = std::stol(value());
    else if (a == "--alpha") alpha = std::stod(value());
    else if (a == "--admg-m") admg_m = std::stol(value());
    else if (a == "--eagle-weights") eagle_weights = value();
    else if (a == "--eagle3-weights") eagle3_weights = value();
    else if (a == "--mtp-weights") mtp_weights = value();
    else if (a == "--dflash-weights") dflash_weights = value();
    else {
      std::cerr << "usage: specdec_demo --model PATH.gguf [--quick] [--repeat R] [--max-new N] [--draft N] [--tree-k K] "
                   "[--tree-depth D] [--tree-tokens T] [--alpha A] [--admg-m M] [--eagle-weights FILE] "
                   "[--eagle3-weights FILE] [--mtp-weights FILE] [--dflash-weights FILE]\n";
      return 2;
    }
  }
  if (model_path.empty()) {
    std::cerr << "specdec_demo: --model PATH.gguf is required (scripts/demo.sh fetches SmolLM2-135M-Instruct)\n";
    return 2;
  }
  if (quick) {
    max_new = std::min<engine::index_t>(max_new, 32);
    repeat = 1;
  }

  try {
    const auto file = engine::gguf_file::read(model_path);
    const engine::bpe_tokenizer tokenizer(file);
    const auto model = engine::llama_model::load(file);
    const auto& c = model.config();
    std::printf("specdec demo: %s, %ld layers, hidden %ld, vocab %ld (weights dequantised to f32), Eigen backend\n",
                file.get_or<std::string>("general.name", "model").c_str(), static_cast<long>(c.layers),
                static_cast<long>(c.hidden), static_cast<long>(c.vocab));
    const std::size_t prompt_count = quick ? 2 : demo_prompts.size();
    std::vector<std::vector<std::int32_t>> prompts;
    for (std::size_t p = 0; p < prompt_count; ++p) prompts.push_back(tokenizer.encode(chat(demo_prompts[p])));
    engine::generation_options options;
    options.max_new_tokens = max_new;
    options.stop_tokens = {tokenizer.special("<|im_end|>"), tokenizer.eos()};
    specdec::policy::admg::rules rules;
    rules.alpha = alpha;
    rules.m = admg_m;
    specdec::policy::admg::draft_exit::parameters exit;
    exit.max_draft = draft_length;

    std::vector<std::string> names = {"vanilla", "admg", "prompt_lookup", "eagle2_admg", "eagle2"};
    for (const auto& [name, weights] :
         {std::pair{"eagle3", eagle3_weights}, std::pair{"mtp", mtp_weights}, std::pair{"dflash", dflash_weights}}) {
      if (std::filesystem::exists(weights)) names.push_back(name);
      else std::fprintf(stderr, "specdec_demo: no %s weights at %s (tools/train/run.sh --only %s); left out\n", name, weights.c_str(), name);
    }
    std::vector<method_total> totals;
    // One drafter per method for all prompts, as an engine keeps its policies across requests: what
    // the draft-length policies learn (measured acceptance and costs, ADMG's exit threshold) carries
    // over; ADMG's layer plan is re-measured on each prompt's prefill.
    std::vector<std::unique_ptr<engine::method>> drafters;
    for (const auto& name : names) {
      totals.push_back({name, {}, true});
      if (name == "vanilla") drafters.push_back(nullptr);
      if (name == "admg") drafters.push_back(std::make_unique<engine::admg_drafter>(model, rules, exit));
      if (name == "prompt_lookup")
        drafters.push_back(
            std::make_unique<engine::prompt_lookup_drafter>(engine::prompt_lookup_drafter::parameters{3, 2, draft_length, 1, true}));
      if (name == "eagle2_admg")
        drafters.push_back(std::make_unique<engine::eagle2_admg_drafter>(
            model, rules, specdec::dynamic_tree_config{tree_k, tree_depth, tree_tokens, specdec::tree_score::log_probability, {}}));
      if (name == "eagle2")  // the trained layer: a larger tree, sized per step by the policy
        drafters.push_back(std::make_unique<engine::eagle_drafter>(
            model, specdec::dynamic_tree_config{3, 4, 10, specdec::tree_score::log_probability, {}}, eagle_weights, true));
      if (name == "eagle3")  // the same tree as EAGLE's
        drafters.push_back(std::make_unique<engine::eagle3_drafter>(
            model, specdec::dynamic_tree_config{3, 4, 10, specdec::tree_score::log_probability, {}}, eagle3_weights, true));
      if (name == "mtp") drafters.push_back(std::make_unique<engine::mtp_drafter>(model, 3, mtp_weights, true));
      if (name == "dflash") drafters.push_back(std::make_unique<engine::dflash_drafter>(model, dflash_weights, true));
    }
    // Methods interleave per prompt, so that drift in the machine's speed hits them alike; each
    // (prompt, method) keeps its median run of `repeat`.
    std::vector<std::vector<std::vector<engine::generation_stats>>> runs(
        prompt_count, std::vector<std::vector<engine::generation_stats>>(names.size()));
    for (engine::index_t r = 0; r < repeat; ++r)
      for (std::size_t p = 0; p < prompt_count; ++p) {
        std::vector<std::int32_t> reference;
        for (std::size_t m = 0; m < names.size(); ++m) {
          std::fprintf(stderr, "\r[run %ld/%ld, prompt %zu/%zu] %-14s", static_cast<long>(r + 1), static_cast<long>(repeat), p + 1,
                       prompt_count, names[m].c_str());
          const auto g = engine::generate(model, prompts[p], drafters[m].get(), options);
          if (m == 0) reference = g.tokens;
          else if (g.tokens != reference) totals[m].identical = false;
          runs[p][m].push_back(g.stats);
          if (m == 0 && r == 0)
            std::fprintf(stderr, "\r[prompt %zu/%zu] vanilla answer: %s\n", p + 1, prompt_count, tokenizer.decode(g.tokens).c_str());
        }
      }
    std::fprintf(stderr, "\r%60s\r", "");
    for (std::size_t p = 0; p < prompt_count; ++p)
      for (std::size_t m = 0; m < names.size(); ++m) {
        auto& r = runs[p][m];
        std::sort(r.begin(), r.end(), [](const auto& x, const auto& y) { return x.seconds < y.seconds; });
        totals[m].sum += r[r.size() / 2];
      }

    const double vanilla_rate = totals[0].sum.tokens_per_second();
    std::printf("\n%-14s %8s %8s %8s %9s %8s %10s  %s\n", "method", "tau", "calls", "tok/s", "speedup", "proj.acc",
                "identical", "time split: draft / verify fwd / sampling / bookkeeping (s)");
    for (const auto& t : totals) {
      const auto& s = t.sum;
      std::printf("%-14s %8.2f %8ld %8.2f %8.2fx %7.2fx %10s  %.2f / %.2f / %.3f / %.3f\n", t.name.c_str(), s.tau(),
                  static_cast<long>(s.target_calls), s.tokens_per_second(), s.tokens_per_second() / vanilla_rate,
                  s.projected_speedup(), t.name == "vanilla" ? "-" : (t.identical ? "yes" : "NO"), s.draft_seconds,
                  s.verify_forward_seconds, s.sampling_seconds, s.bookkeeping_seconds);
    }
    std::printf("\ntau = tokens per target forward; proj.acc = speed-up on a memory-bound accelerator where a forward over a\n"
                "small tree costs one forward and a self-draft forward the share of the weights it reads.\n\n");
    bool all_identical = true;
    for (const auto& t : totals) {
      const auto& s = t.sum;
      std::printf("RESULT method=%s tau=%.3f calls=%ld tok_s=%.2f speedup=%.3f identical=%s\n", t.name.c_str(), s.tau(),
                  static_cast<long>(s.target_calls), s.tokens_per_second(), s.tokens_per_second() / vanilla_rate,
                  t.identical ? "yes" : "no");
      all_identical = all_identical && t.identical;
    }
    std::printf("\ngreedy outputs identical to vanilla greedy, token for token: %s\n", all_identical ? "yes" : "NO");

    // One sampled generation: lossless speculative sampling with prompt lookup drafts.
    engine::generation_options sampled = options;
    sampled.temperature = 0.8f;
    sampled.seed = 2026;
    engine::prompt_lookup_drafter lookup({3, 2, draft_length, 1, true});
    const auto g = engine::generate(model, prompts[0], &lookup, sampled);
    std::printf("\nsampled (T = 0.8, prompt lookup + lossless speculative sampling, tau %.2f):\n%s\n", g.stats.tau(),
                tokenizer.decode(g.tokens).c_str());
    return all_identical ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "specdec_demo: " << e.what() << "\n";
    return 1;
  }
}
