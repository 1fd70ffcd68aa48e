// SPDX-License-Identifier: Apache-2.0
// specdec-conformance: runs specdec on golden case files computed by the peers' own algorithms and
// compares every output. Usage: specdec-conformance [--backend eigen|thrust] FILE_OR_DIR...
// Prints `PASS name` or `FAIL name: field, expected ..., got ...` per file and `N passed, M failed`
// last; exits non-zero when anything failed. Integer outputs must match exactly; recorded scores to
// 1e-5 (absolute for log-probabilities, relative for probabilities), as goldens/trees/README.md says.
#include <algorithm>
#include <numeric>
#include <cmath>
#include <cstdint>
#include <deque>
#include <type_traits>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "blocks.hpp"
#include "blocks_eagle3_mtp.hpp"
#include "blocks_dflash.hpp"

#include <specdec/backend/eigen.hpp>
#include <specdec/backend/thrust.hpp>
#include <specdec/interop/eagle.hpp>
#include <specdec/interop/eagle1.hpp>
#include <specdec/interop/medusa.hpp>
#include <specdec/interop/sglang.hpp>
#include <specdec/interop/sglang_sampling.hpp>
#include <specdec/interop/vllm.hpp>
#include <specdec/interop/trtllm.hpp>
#include <specdec/sampling/sampling.hpp>
#include <specdec/tree/eagle2.hpp>

namespace {

using json = nlohmann::json;
using specdec::index_t;

/// A mismatch: which field, what was expected, what was computed.
struct mismatch : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void flatten(const json& j, std::vector<double>& out) {
  if (j.is_array())
    for (const auto& e : j) flatten(e, out);
  else if (j.is_boolean())
    out.push_back(j.get<bool>() ? 1.0 : 0.0);
  else
    out.push_back(j.get<double>());
}
std::vector<double> flat(const json& j) {
  std::vector<double> out;
  flatten(j, out);
  return out;
}
template <class T>
std::vector<T> flat_as(const json& j) {
  std::vector<T> out;
  for (double v : flat(j)) out.push_back(static_cast<T>(v));
  return out;
}

template <class Range>
std::string show(const Range& r) {
  std::ostringstream s;
  s << "[";
  std::size_t i = 0;
  for (const auto& v : r) {
    if (i++) s << ", ";
    if (i > 24) {
      s << "...";
      break;
    }
    s << +v;  // + prints uint8_t as a number
  }
  s << "] (" << r.size() << " values)";
  return s.str();
}

/// Exact comparison of integer-valued outputs.
template <class T>
void expect_equal(const std::string& field, const json& expected, const std::vector<T>& got) {
  const std::vector<double> want = flat(expected);
  bool same = want.size() == got.size();
  for (std::size_t i = 0; same && i < want.size(); ++i) same = want[i] == static_cast<double>(got[i]);
  if (!same) throw mismatch(field + ", expected " + show(want) + ", got " + show(got));
}

void expect_close(const std::string& field, const json& expected, const std::vector<float>& got, double tol,
                  bool relative) {
  const std::vector<double> want = flat(expected);
  bool same = want.size() == got.size();
  for (std::size_t i = 0; same && i < want.size(); ++i) {
    const double bound = relative ? tol * std::max(1e-30, std::abs(want[i])) : tol;
    same = std::abs(want[i] - static_cast<double>(got[i])) <= bound;
  }
  if (!same) throw mismatch(field + ", expected " + show(want) + ", got " + show(got));
}

std::vector<specdec::choice> choices_of(const json& j) {
  std::vector<specdec::choice> out;
  for (const auto& c : j) out.push_back(c.get<specdec::choice>());
  return out;
}

template <class B>
class runner {
 public:
  using space = typename B::memory_space;
  explicit runner(B& b) : b_(b) {}

  void run(const json& c) {
    if (c.contains("block")) {
      try {
        const std::string block = c.at("block");
        if (block == "eagle3.draft_layer") return conformance_blocks::drafter_block_runner<B>(b_).eagle3(c);
        if (block == "mtp.module") return conformance_blocks::drafter_block_runner<B>(b_).mtp(c);
        if (block == "dflash.draft") return conformance_blocks::dflash_runner<B>(b_).run(c);
        return conformance_blocks::block_runner<B>(b_).run(c);
      } catch (const conformance_blocks::block_mismatch& e) {
        throw mismatch(e.what());
      }
    }
    const std::string kind = c.at("kind");
    if (kind == "eagle2_dynamic_tree" || kind == "jakiro_dynamic_tree") return dynamic_tree(c, kind == "jakiro_dynamic_tree");
    if (kind == "medusa_buffers") return medusa(c);
    if (kind == "eagle1_static_tree") return eagle1(c);
    if (kind == "trtllm_medusa_setup") return trtllm(c);
    if (kind == "sglang_build_tree") return sglang_build(c);
    if (kind == "sglang_eagle_pipeline") return sglang_pipeline(c);
    if (kind == "sglang_build_tree_malformed") return sglang_malformed(c);
    if (kind == "sglang_verify_tree_greedy") return sglang_verify(c);
    if (kind == "chain_greedy") return chain_greedy(c);
    if (kind == "chain_rejection" && c.value("convention", "") == "flashinfer_chain_speculative_sampling")
      return flashinfer_chain(c);
    if (kind == "chain_rejection" || kind == "chain_rejection_no_draft_probs") return vllm_chain(c);
    if (kind == "target_distribution_preprocessing") return renorm(c);
    if (kind == "tree_greedy") return tree_greedy(c);
    if (kind == "tree_sampling_target_only") return tree_target_only(c);
    if (kind == "typical_acceptance_tree") return typical_tree(c);
    if (kind == "tree_recursive_rejection_deterministic_drafts") return eagle_posterior(c);
    if (kind == "acceptance_predicate_conventions") return predicate_conventions(c);
    if (kind == "analytic_acceptance") return analytic(c);
    if (kind == "lossy_acceptance") return lenience(c);
    throw mismatch("kind, expected a supported kind, got '" + kind + "'");
  }

 private:
  /// Uploads nested logits as a `[rows x cols]` backend matrix (kept alive in `keep_`).
  specdec::matrix_view<const float, space> upload(const json& logits, index_t cols) {
    const std::vector<float> host = flat_as<float>(logits);
    keep_.push_back(b_.upload(std::span<const float>(host)));
    return {keep_.back().view().data(), static_cast<index_t>(host.size()) / cols, cols};
  }

  void dynamic_tree(const json& c, bool jakiro) {
    const json& p = c.at("params");
    specdec::dynamic_tree_config cfg;
    cfg.top_k = p.at("top_k");
    cfg.depth = p.at("depth");
    cfg.total_tokens = p.at("total_token");
    const json& in = c.at("inputs");
    if (in.contains("d2t")) cfg.d2t = in.at("d2t").get<std::vector<std::int32_t>>();
    const index_t v = static_cast<index_t>(in.at("root_logits").size());
    const std::int32_t root = p.at("sample_token");
    specdec::eagle2_tree_builder<B> builder(b_, cfg);
    std::vector<specdec::draft_step> steps;
    steps.push_back(builder.begin(upload(in.at("root_logits"), v), std::vector<std::int32_t>{root},
                                  p.value("vocab_size", index_t(0))));
    const json& step_logits = in.at("step_logits");
    for (std::size_t i = 0; i < step_logits.size(); ++i) steps.push_back(builder.expand(upload(step_logits[i], v)));
    if (jakiro) builder.expand_dual(upload(in.at("penult_left_logits"), v), upload(in.at("penult_right_logits"), v));
    const auto result = builder.finish().at(0);
    const json& it = c.at("intermediates");
    expect_close("intermediates.flat_scores", it.at("flat_scores"), builder.candidate_scores(0), 1e-5, false);
    expect_equal("intermediates.flat_tokens", it.at("flat_tokens"), builder.candidate_tokens(0));
    expect_equal("intermediates.top_scores_index_sorted", it.at("top_scores_index_sorted"), result.selected);
    expect_equal("intermediates.parent_node_index", it.at("parent_node_index"), result.tree.parent);
    const auto greedy = specdec::eagle::make_buffers(result.tree);
    const json& out = c.at("outputs");
    expect_equal("outputs.draft_tokens", out.at("draft_tokens"), greedy.draft_tokens);
    expect_equal("outputs.tree_mask", out.at("tree_mask"), greedy.tree_mask);
    expect_equal("outputs.tree_position_ids", out.at("tree_position_ids"), greedy.position_ids);
    expect_equal("outputs.retrieve_indices", out.at("retrieve_indices"), greedy.retrieve_indices);
    const auto sampled = specdec::eagle::make_buffers(result.tree, specdec::path_order::lexicographic);
    expect_equal("outputs_sampling.retrieve_indices", c.at("outputs_sampling").at("retrieve_indices"),
                 sampled.retrieve_indices);
    if (it.contains("draft_steps") && !it.at("draft_steps").empty()) {  // depth 0 runs no draft forward
      const json& ds = it.at("draft_steps");
      const index_t base = ds.at(0).at("position_ids").at(0);
      for (std::size_t i = 0; i < ds.size(); ++i) {
        const std::string f = "intermediates.draft_steps[" + std::to_string(i) + "]";
        expect_equal(f + ".frontier_input_ids", ds[i].at("frontier_input_ids"), steps.at(i).input_ids);
        expect_equal(f + ".draft_tree_mask", ds[i].at("draft_tree_mask"), steps.at(i).draft_mask);
        std::vector<index_t> positions(steps.at(i).input_ids.size(), base + static_cast<index_t>(i));
        expect_equal(f + ".position_ids", ds[i].at("position_ids"), positions);
      }
    }
  }

  void medusa(const json& c) {
    const auto buf = specdec::medusa::make_buffers(choices_of(c.at("inputs").at("medusa_choices")),
                                                   c.at("params").value("TOPK", index_t(10)));
    const json& out = c.at("outputs");
    expect_equal("outputs.medusa_attn_mask", out.at("medusa_attn_mask"), buf.tree_mask);
    expect_equal("outputs.tree_indices", out.at("tree_indices"), buf.tree_indices);
    expect_equal("outputs.medusa_position_ids", out.at("medusa_position_ids"), buf.position_ids);
    expect_equal("outputs.retrieve_indices", out.at("retrieve_indices"), buf.retrieve_indices);
    const json& ci = c.at("inputs").at("candidates_inputs");
    const index_t v = static_cast<index_t>(ci.at("base_last_logits").size());
    const auto cand = specdec::medusa::fill_candidates(b_, buf, upload(ci.at("medusa_last_logits"), v),
                                                       upload(ci.at("base_last_logits"), v));
    const json& co = c.at("candidates_outputs");
    expect_equal("candidates_outputs.head_top10", co.at("head_top10"), cand.head_topk);
    expect_equal("candidates_outputs.root_token", co.at("root_token"), std::vector<std::int32_t>{cand.root_token});
    expect_equal("candidates_outputs.tree_candidates", co.at("tree_candidates"), cand.tree_candidates);
    expect_equal("candidates_outputs.cart_candidates", co.at("cart_candidates"), cand.cart_candidates);
  }

  void eagle1(const json& c) {
    const json& p = c.at("params");
    const auto buf = specdec::eagle1::make_buffers(choices_of(c.at("inputs").at("tree_choices")), p.value("TOPK", index_t(10)));
    const json& out = c.at("outputs");
    expect_equal("outputs.tree_attn_mask", out.at("tree_attn_mask"), buf.tree_mask);
    expect_equal("outputs.tree_indices", out.at("tree_indices"), buf.tree_indices);
    expect_equal("outputs.tree_position_ids", out.at("tree_position_ids"), buf.position_ids);
    expect_equal("outputs.retrieve_indices", out.at("retrieve_indices"), buf.retrieve_indices);
    if (out.contains("p_indices")) expect_equal("outputs.p_indices", out.at("p_indices"), buf.p_indices);
    if (out.contains("b_indices")) {
      std::vector<std::int64_t> got, want;
      for (const auto& row : out.at("b_indices"))
        for (const auto& cell : row) {
          want.push_back(-1);  // a separator, so [[1], []] and [[], [1]] differ
          for (const auto& x : cell) want.push_back(x.get<std::int64_t>());
        }
      for (const auto& cell : buf.b_indices) {
        got.push_back(-1);
        got.insert(got.end(), cell.begin(), cell.end());
      }
      expect_equal("outputs.b_indices", json(want), got);
    }
    const json& ds = c.at("draft_side_buffers");
    for (std::size_t l = 0; l < buf.levels.size(); ++l) {
      const std::string f = "draft_side_buffers[" + std::to_string(l) + "]";
      expect_equal(f + ".attn_mask", ds.at("attn_mask").at(l), buf.levels[l].attn_mask);
      expect_equal(f + ".tree_indices", ds.at("tree_indices").at(l), buf.levels[l].tree_indices);
      expect_equal(f + ".position_ids", ds.at("position_ids").at(l), buf.levels[l].position_ids);
      expect_equal(f + ".repeat_nums", ds.at("repeat_nums").at(l), buf.levels[l].repeat_nums);
    }
    if (ds.at("attn_mask").size() != buf.levels.size())
      throw mismatch("draft_side_buffers, expected " + std::to_string(ds.at("attn_mask").size()) + " levels, got " +
                     std::to_string(buf.levels.size()));
    const json& in = c.at("inputs");
    const index_t v = static_cast<index_t>(in.at("root_logits").size());
    const json& trace = c.at("static_draft_trace");
    const index_t base = trace.empty() ? 0 : trace.at(0).at("position_ids").at(0).get<index_t>();
    specdec::eagle1::static_drafter<B> drafter(b_, buf, p.at("sample_token"), base);
    auto step = drafter.begin(upload(in.at("root_logits"), v));
    for (std::size_t l = 0; !drafter.done(); ++l) {
      const std::string f = "static_draft_trace[" + std::to_string(l) + "]";
      expect_equal(f + ".input_ids", trace.at(l).at("input_ids"), step.input_ids);
      expect_equal(f + ".draft_tree_mask", trace.at(l).at("draft_tree_mask"), step.buffers->attn_mask);
      expect_equal(f + ".position_ids", trace.at(l).at("position_ids"), step.position_ids);
      step = drafter.expand(upload(in.at("level_logits").at(l), v));
    }
    const json& so = c.at("static_draft_outputs");
    expect_equal("static_draft_outputs.ss_token", so.at("ss_token"), drafter.ss_token());
    expect_equal("static_draft_outputs.tree_candidates", so.at("tree_candidates"), drafter.tree_candidates());
    expect_equal("static_draft_outputs.cart_candidates", so.at("cart_candidates"), drafter.cart_candidates());
  }

  void trtllm(const json& c) {
    const auto s = specdec::trtllm::make_medusa_setup(choices_of(c.at("inputs").at("choices")));
    const json& out = c.at("outputs");
    expect_equal("outputs.medusa_mask", out.at("medusa_mask"), s.mask);
    expect_equal("outputs.medusa_packed_mask", out.at("medusa_packed_mask"), s.packed_mask);
    expect_equal("outputs.medusa_topks", out.at("medusa_topks"), s.topks);
    expect_equal("outputs.medusa_paths", out.at("medusa_paths"), s.paths);
    expect_equal("outputs.medusa_tree_ids", out.at("medusa_tree_ids"), s.tree_ids);
    expect_equal("outputs.medusa_position_offsets", out.at("medusa_position_offsets"), s.position_offsets);
  }

  /// Runs build_tree in all three mask modes and compares with `outputs`.
  void compare_build_tree(const json& out, const std::vector<std::int64_t>& parent_list, index_t parent_cols,
                          const std::vector<std::int64_t>& selected, const std::vector<std::int64_t>& tokens,
                          const std::vector<std::int64_t>& verified, const std::vector<std::int64_t>& seq_lens,
                          index_t top_k, index_t steps, index_t n) {
    namespace sg = specdec::sglang;
    const index_t bs = static_cast<index_t>(seq_lens.size());
    const specdec::matrix_view<const std::int64_t> pl(parent_list.data(), bs, parent_cols);
    const specdec::matrix_view<const std::int64_t> sel(selected.data(), bs, n - 1);
    const specdec::matrix_view<const std::int64_t> tok(tokens.data(), bs, n - 1);
    for (const auto mode : {sg::tree_mask_mode::full_mask, sg::tree_mask_mode::qlen_only, sg::tree_mask_mode::qlen_only_bitpacking}) {
      const json& masks = out.at("tree_mask");
      const char* name = mode == sg::tree_mask_mode::full_mask ? "FULL_MASK"
                         : mode == sg::tree_mask_mode::qlen_only ? "QLEN_ONLY"
                                                                 : "QLEN_ONLY_BITPACKING";
      if (!masks.contains(name) || masks.at(name).is_null()) continue;
      const auto r = sg::build_tree(pl, sel, tok, verified, seq_lens, top_k, steps, n, mode);
      if (mode == sg::tree_mask_mode::qlen_only_bitpacking)
        expect_equal(std::string("outputs.tree_mask.") + name, masks.at(name), r.tree_mask_bits);
      else
        expect_equal(std::string("outputs.tree_mask.") + name, masks.at(name), r.tree_mask);
      // The same through SGLang's kernel signature on the backend (one team per request), as the Python
      // binding calls it: every buffer in the backend's memory, the mask as bytes (4-byte items).
      {
        auto pl_on = b_.upload(std::span<const std::int64_t>(parent_list));
        auto sel_on = b_.upload(std::span<const std::int64_t>(selected));
        auto seq_on = b_.upload(std::span<const std::int64_t>(seq_lens));
        const index_t mask_bytes = mode == sg::tree_mask_mode::qlen_only_bitpacking ? 4 * bs * n : static_cast<index_t>(r.tree_mask.size());
        auto mask_on = b_.template allocate<std::uint8_t>(mask_bytes);
        auto pos_on = b_.template allocate<std::int64_t>(bs * n);
        auto ri_on = b_.template allocate<std::int64_t>(bs * n);
        auto nt_on = b_.template allocate<std::int64_t>(bs * n);
        auto ns_on = b_.template allocate<std::int64_t>(bs * n);
        sg::build_tree(b_, specdec::matrix_view<const std::int64_t, space>(pl_on.matrix(bs, parent_cols)),
                       specdec::matrix_view<const std::int64_t, space>(sel_on.matrix(bs, n - 1)),
                       specdec::vector_view<const std::int64_t, space>(seq_on.view()), mask_on.view(), pos_on.view(),
                       ri_on.matrix(bs, n), nt_on.matrix(bs, n), ns_on.matrix(bs, n), top_k, steps, mode);
        const std::vector<std::uint8_t> bytes = b_.download(mask_on.view());
        const std::string f = std::string("outputs.tree_mask.") + name + " (SGLang's signature on the backend)";
        if (mode == sg::tree_mask_mode::qlen_only_bitpacking) {
          std::vector<std::uint32_t> items(static_cast<std::size_t>(bs * n), 0);
          for (std::size_t i = 0; i < items.size(); ++i)
            for (std::size_t k = 0; k < 4; ++k) items[i] |= std::uint32_t{bytes[4 * i + k]} << (8 * k);
          expect_equal(f, masks.at(name), items);
        } else {
          expect_equal(f, masks.at(name), bytes);
        }
        if (mode == sg::tree_mask_mode::full_mask) {
          expect_equal("outputs.positions (backend)", out.at("positions"), b_.download(pos_on.view()));
          expect_equal("outputs.retrive_index (backend)", out.at("retrive_index"), b_.download(ri_on.view()));
          expect_equal("outputs.retrive_next_token (backend)", out.at("retrive_next_token"), b_.download(nt_on.view()));
          expect_equal("outputs.retrive_next_sibling (backend)", out.at("retrive_next_sibling"), b_.download(ns_on.view()));
        }
      }
      if (mode == sg::tree_mask_mode::full_mask) {
        expect_equal("outputs.positions", out.at("positions"), r.positions);
        expect_equal("outputs.retrive_index", out.at("retrive_index"), r.retrive_index);
        expect_equal("outputs.retrive_next_token", out.at("retrive_next_token"), r.retrive_next_token);
        expect_equal("outputs.retrive_next_sibling", out.at("retrive_next_sibling"), r.retrive_next_sibling);
        expect_equal("outputs.draft_tokens", out.at("draft_tokens"), r.draft_tokens);
      }
    }
  }

  void sglang_build(const json& c) {
    const json& p = c.at("params");
    const json& in = c.at("inputs");
    const index_t k = p.at("topk"), steps = p.at("spec_steps"), n = p.at("num_draft_tokens"), bs = p.at("bs");
    std::vector<std::int64_t> parent_list, selected, tokens;
    const json& org = c.at("outputs").at("organize_draft_results");
    for (index_t b = 0; b < bs; ++b) {
      std::vector<float> scores;
      std::vector<std::int64_t> toks, parents;
      for (std::size_t s = 0; s < in.at("score_list").size(); ++s) {
        for (double x : flat(in.at("score_list")[s][static_cast<std::size_t>(b)])) scores.push_back(static_cast<float>(x));
        for (double x : flat(in.at("token_list")[s][static_cast<std::size_t>(b)])) toks.push_back(static_cast<std::int64_t>(x));
        if (s + 1 < in.at("parents_list").size())
          for (double x : flat(in.at("parents_list")[s][static_cast<std::size_t>(b)])) parents.push_back(static_cast<std::int64_t>(x));
      }
      const auto o = specdec::sglang::organize_draft_results(scores, toks, parents, n);
      const std::string f = "outputs.organize_draft_results[" + std::to_string(b) + "]";
      expect_equal(f + ".parent_list", org.at("parent_list").at(static_cast<std::size_t>(b)), o.parent_list);
      expect_equal(f + ".top_scores_index", org.at("top_scores_index").at(static_cast<std::size_t>(b)), o.selected);
      expect_equal(f + ".draft_tokens_wo_root", org.at("draft_tokens_wo_root").at(static_cast<std::size_t>(b)), o.tokens);
      parent_list.insert(parent_list.end(), o.parent_list.begin(), o.parent_list.end());
      selected.insert(selected.end(), o.selected.begin(), o.selected.end());
      tokens.insert(tokens.end(), o.tokens.begin(), o.tokens.end());
    }
    compare_build_tree(c.at("outputs"), parent_list, static_cast<index_t>(parent_list.size()) / bs, selected, tokens,
                       flat_as<std::int64_t>(in.at("verified_id")), flat_as<std::int64_t>(in.at("seq_lens")), k, steps, n);
  }

  void sglang_pipeline(const json& c) {
    const json& p = c.at("params");
    const json& in = c.at("inputs");
    const index_t k = p.at("topk"), steps = p.at("num_steps"), n = p.at("num_draft_tokens"), bs = p.at("bs");
    const index_t v = p.at("vocab_size");
    specdec::dynamic_tree_config cfg;
    cfg.top_k = k;
    cfg.depth = steps - 1;
    cfg.total_tokens = n;
    cfg.score = specdec::tree_score::probability;
    specdec::eagle2_tree_builder<B> builder(b_, cfg, bs);
    const std::vector<std::int32_t> verified32 = flat_as<std::int32_t>(in.at("verified_id"));
    std::vector<specdec::draft_step> frontier;
    frontier.push_back(builder.begin(upload(in.at("root_logits"), v), verified32));
    for (const auto& logits : in.at("step_logits")) frontier.push_back(builder.expand(upload(logits, v)));
    const auto results = builder.finish();
    const json& out = c.at("outputs");
    const json& it = c.at("intermediates");
    std::vector<std::int64_t> parent_list, selected, tokens;
    for (index_t b = 0; b < bs; ++b) {
      const auto& r = results[static_cast<std::size_t>(b)];
      parent_list.insert(parent_list.end(), r.parent_list.begin(), r.parent_list.end());
      selected.insert(selected.end(), r.selected.begin(), r.selected.end());
      tokens.insert(tokens.end(), r.tree.token.begin() + 1, r.tree.token.end());
    }
    // Scores recorded by the peer are probabilities: compare relative.
    std::vector<float> scores;
    for (index_t b = 0; b < bs; ++b) {
      const auto& s = builder.candidate_scores(b);
      scores.insert(scores.end(), s.begin(), s.end());
    }
    std::vector<double> want_scores;
    for (index_t b = 0; b < bs; ++b)
      for (const auto& step : it.at("score_list"))
        for (double x : flat(step.at(static_cast<std::size_t>(b)))) want_scores.push_back(x);
    expect_close("intermediates.score_list", json(want_scores), scores, 1e-5, true);
    if (it.contains("frontier_input_ids")) {
      const json& fi = it.at("frontier_input_ids");
      for (std::size_t s = 0; s < fi.size(); ++s)
        expect_equal("intermediates.frontier_input_ids[" + std::to_string(s) + "]", fi[s], frontier.at(s).input_ids);
    }
    expect_equal("outputs.parent_list", out.at("parent_list"), parent_list);
    expect_equal("outputs.top_scores_index", out.at("top_scores_index"), selected);
    const index_t parent_cols = steps == 1 ? 0 : 1 + k * (steps - 1);  // SGLang: (bs, 0) with one step
    compare_build_tree(out, parent_list, parent_cols, selected, tokens, flat_as<std::int64_t>(in.at("verified_id")),
                       flat_as<std::int64_t>(in.at("seq_lens")), k, steps, n);
    if (out.contains("tree_mask_qlen_matrix"))
      expect_equal("outputs.tree_mask_qlen_matrix", out.at("tree_mask_qlen_matrix"),
                   specdec::sglang::build_tree(
                       specdec::matrix_view<const std::int64_t>(parent_list.data(), bs, parent_cols),
                       specdec::matrix_view<const std::int64_t>(selected.data(), bs, n - 1),
                       specdec::matrix_view<const std::int64_t>(tokens.data(), bs, n - 1),
                       flat_as<std::int64_t>(in.at("verified_id")), flat_as<std::int64_t>(in.at("seq_lens")), k, steps, n,
                       specdec::sglang::tree_mask_mode::qlen_only)
                       .tree_mask);
  }

  void sglang_malformed(const json& c) {
    const json& p = c.at("params");
    const json& in = c.at("inputs");
    const index_t k = p.at("topk"), steps = p.at("num_steps"), n = p.at("num_draft_tokens"), bs = p.at("bs");
    const auto selected = flat_as<std::int64_t>(in.at("selected_index"));
    const auto seq_lens = flat_as<std::int64_t>(in.at("seq_lens"));
    const std::vector<std::int64_t> tokens(static_cast<std::size_t>(bs * (n - 1)), 0), verified(static_cast<std::size_t>(bs), 0);
    for (const auto& [name, tc] : c.at("cases").items()) {
      const auto parent_list = flat_as<std::int64_t>(tc.at("parent_list"));
      const index_t cols = static_cast<index_t>(parent_list.size()) / bs;
      const auto r = specdec::sglang::build_tree(
          specdec::matrix_view<const std::int64_t>(parent_list.data(), bs, cols),
          specdec::matrix_view<const std::int64_t>(selected.data(), bs, n - 1),
          specdec::matrix_view<const std::int64_t>(tokens.data(), bs, n - 1), verified, seq_lens, k, steps, n,
          specdec::sglang::tree_mask_mode::qlen_only);
      const json& e = tc.at("expected");
      expect_equal("cases." + name + ".positions", e.at("positions"), r.positions);
      expect_equal("cases." + name + ".tree_mask_matrix", e.at("tree_mask_matrix"), r.tree_mask);
      expect_equal("cases." + name + ".retrive_index", e.at("retrive_index"), r.retrive_index);
      expect_equal("cases." + name + ".retrive_next_token", e.at("retrive_next_token"), r.retrive_next_token);
      expect_equal("cases." + name + ".retrive_next_sibling", e.at("retrive_next_sibling"), r.retrive_next_sibling);
    }
  }

  void sglang_verify(const json& c) {
    const json& in = c.at("inputs");
    const index_t bs = static_cast<index_t>(in.at("candidates").size());
    const index_t n = static_cast<index_t>(in.at("candidates").at(0).size());
    const auto cand = flat_as<std::int64_t>(in.at("candidates"));
    const auto ri = flat_as<std::int64_t>(in.at("retrive_index"));
    const auto nt = flat_as<std::int64_t>(in.at("retrive_next_token"));
    const auto ns = flat_as<std::int64_t>(in.at("retrive_next_sibling"));
    const auto tp = flat_as<std::int64_t>(in.at("target_predict"));
    using mv = specdec::matrix_view<const std::int64_t>;
    const auto r = specdec::sglang::verify_tree_greedy(mv(cand.data(), bs, n), mv(ri.data(), bs, n), mv(nt.data(), bs, n),
                                                       mv(ns.data(), bs, n), tp, in.at("num_spec_step").get<index_t>());
    const json& out = c.at("outputs");
    expect_equal("outputs.predicts", out.at("predicts"), r.predicts);
    expect_equal("outputs.accept_index", out.at("accept_index"), r.accept_index);
    expect_equal("outputs.accept_token_num", out.at("accept_token_num"), r.accept_token_num);
  }


  // ---------------------------------------------------------------------------------------------
  // Samplers (goldens/samplers).

  /// Rows appended one by one, then uploaded as one backend matrix.
  struct row_stack {
    std::vector<float> values;
    index_t cols = 0;
    index_t add(const std::vector<float>& row) {
      if (cols == 0) cols = static_cast<index_t>(row.size());
      if (static_cast<index_t>(row.size()) != cols) throw mismatch("rows, expected equal lengths, got a ragged table");
      values.insert(values.end(), row.begin(), row.end());
      return static_cast<index_t>(values.size()) / cols - 1;
    }
  };
  specdec::matrix_view<const float, space> upload(const row_stack& rows) {
    if (rows.values.empty()) return {};
    keep_.push_back(b_.upload(std::span<const float>(rows.values)));
    return {keep_.back().view().data(), static_cast<index_t>(rows.values.size()) / rows.cols, rows.cols};
  }
  static std::vector<float> uniform_row(index_t v) { return std::vector<float>(static_cast<std::size_t>(v), 1.0f / static_cast<float>(v)); }

  static void expect_true(const std::string& field, bool ok, const std::string& detail) {
    if (!ok) throw mismatch(field + ", " + detail);
  }

  void chain_greedy(const json& c) {
    for (const json& k : c.at("cases")) {
      const std::string name = k.value("name", "case");
      const auto& drafts = k.at("draft_token_ids");
      std::vector<specdec::draft_tree> trees;
      std::vector<std::int32_t> argmax;
      std::int32_t vocab = 1;
      for (std::size_t r = 0; r < drafts.size(); ++r) {
        const auto d = flat_as<std::int32_t>(drafts[r]);
        const auto t = flat_as<std::int32_t>(k.at("target_argmax")[r]);
        trees.push_back(specdec::sampling::make_chain(0, d));
        argmax.insert(argmax.end(), t.begin(), t.begin() + static_cast<std::ptrdiff_t>(d.size()));
        argmax.push_back(0);  // the bonus position: the caller's bonus token is used instead
        for (auto x : d) vocab = std::max(vocab, x + 1);
        for (auto x : t) vocab = std::max(vocab, x + 1);
      }
      const auto bonus = flat_as<std::int32_t>(k.at("bonus_token_ids"));
      std::vector<specdec::sampling::speculative_request> requests(trees.size());
      index_t row = 0;
      for (std::size_t r = 0; r < trees.size(); ++r) {
        requests[r].tree = trees[r];
        requests[r].target_row = row;
        requests[r].bonus_token = bonus[r];
        vocab = std::max(vocab, bonus[r] + 1);
        row += trees[r].size();
      }
      const auto results = specdec::sampling::verify_greedy(argmax, vocab, requests);
      expect_equal(name + ".output_token_ids", k.at("expected_output_token_ids"),
                   specdec::sampling::padded_tokens(results, k.at("max_spec_len").get<index_t>() + 1));
      // vLLM's own layout, as its test builds it: one-hot target rows at the argmax of each draft
      // position (none for the bonus), every request greedy; the host form and the backend form.
      std::vector<std::int32_t> ids;
      std::vector<std::int64_t> cu;
      row_stack target;
      for (std::size_t r = 0; r < trees.size(); ++r) {
        const auto d = flat_as<std::int32_t>(drafts[r]);
        const auto t = flat_as<std::int32_t>(k.at("target_argmax")[r]);
        for (std::size_t i = 0; i < d.size(); ++i) {
          ids.push_back(d[i]);
          std::vector<float> row(static_cast<std::size_t>(vocab), 0.0f);
          row[static_cast<std::size_t>(t[i])] = 1.0f;
          target.add(row);
        }
        cu.push_back(static_cast<std::int64_t>(ids.size()));
      }
      const index_t width = k.at("max_spec_len").get<index_t>() + 1;
      const std::vector<std::uint8_t> greedy(trees.size(), 1);
      if (!ids.empty()) {
        std::vector<std::int32_t> out(static_cast<std::size_t>(static_cast<index_t>(cu.size()) * width), -7);
        specdec::vllm::rejection_sample(b_, ids, cu, width - 1, {}, upload(target), bonus, greedy, {}, {},
                                        specdec::matrix_view<std::int32_t>(out.data(), static_cast<index_t>(cu.size()), width));
        std::vector<std::int32_t> want;
        for (const auto& row : k.at("expected_output_token_ids"))
          for (const auto t : flat_as<std::int32_t>(row)) want.push_back(t);
        expect_equal(name + " (vLLM layout).output_token_ids", want, out);
        expect_equal(name + " (vLLM layout, backend).output_token_ids", want,
                     rejection_on_backend(ids, cu, width, {}, upload(target), bonus, greedy, {}, {}));
      }
      if (k.contains("expected_num_emitted")) {
        std::vector<index_t> emitted;
        for (const auto& r : results) emitted.push_back(static_cast<index_t>(r.tokens.size()));
        expect_equal(name + ".num_emitted", k.at("expected_num_emitted"), emitted);
      }
    }
  }

  /// vLLM v1's random path (with or without draft probabilities): ratio test, fp64 uniforms in [0, 1),
  /// exponential-race recovery with the request's noise row, bonus token supplied by the caller.
  void vllm_chain(const json& c) {
    const index_t vocab = c.at("vocab_size").get<index_t>();
    const bool no_draft_probs = c.at("kind") == "chain_rejection_no_draft_probs";
    row_stack target, draft, noise;
    std::vector<specdec::draft_tree> trees;
    std::vector<std::vector<index_t>> draft_rows;
    std::vector<std::vector<double>> uniforms;
    const json& requests_json = c.at("requests");
    for (const json& q : requests_json) {
      const auto d = flat_as<std::int32_t>(q.at("draft_token_ids"));
      trees.push_back(specdec::sampling::make_chain(0, d));
      std::vector<index_t> rows = {-1};
      for (std::size_t i = 0; i < d.size(); ++i) {
        const index_t t = target.add(flat_as<float>(q.at("target_probs")[i]));
        if (i == 0) draft_rows.emplace_back();
        (void)t;
        if (!no_draft_probs) rows.push_back(draft.add(flat_as<float>(q.at("draft_probs")[i])));
      }
      target.add(uniform_row(vocab));  // bonus row, unused: the bonus token is given
      if (d.empty()) draft_rows.emplace_back();
      draft_rows.back() = no_draft_probs ? std::vector<index_t>{} : rows;
      noise.add(flat_as<float>(q.at("exponentials")));
      uniforms.push_back(flat(q.at("uniforms")));
    }
    std::vector<specdec::sampling::speculative_request> requests(trees.size());
    index_t row = 0;
    for (std::size_t r = 0; r < trees.size(); ++r) {
      auto& q = requests[r];
      q.tree = trees[r];
      q.target_row = row;
      row += trees[r].size();
      q.draft_rows = draft_rows[r];
      q.uniforms = specdec::sampling::uniform_stream::values(uniforms[r]);
      q.noise_row = static_cast<index_t>(r);
      q.bonus_token = requests_json[r].at("bonus_token_id").get<std::int32_t>();
    }
    specdec::sampling::speculative_options options;
    options.test = specdec::sampling::acceptance_test::ratio;
    options.draw = specdec::sampling::final_draw::exponential_race;
    options.fallback = specdec::empty_residual::token_zero;
    const auto results = specdec::sampling::verify_speculative(b_, {upload(target), upload(draft), upload(noise)}, requests, options);
    const index_t width = c.at("max_spec_len").get<index_t>() + 1;
    for (std::size_t r = 0; r < results.size(); ++r) {
      const json& q = requests_json[r];
      const std::string name = "requests[" + std::to_string(r) + "]";
      std::vector<specdec::sampling::speculative_result> one = {results[r]};
      expect_equal(name + ".output_token_ids", q.at("expected_output_token_ids"), specdec::sampling::padded_tokens(one, width));
      expect_equal(name + ".num_accepted_draft_tokens", q.at("expected_num_accepted_draft_tokens"),
                   std::vector<index_t>{static_cast<index_t>(results[r].accepted_nodes.size())});
    }
    // The same requests in vLLM's own layout (interop/vllm.hpp): drafts back to back, a target row per
    // draft position and none for the bonus, as the Python binding passes them.
    std::vector<std::int32_t> ids, bonus;
    std::vector<std::int64_t> cu;
    std::vector<double> us;
    row_stack flat_target, flat_draft, flat_noise;
    for (const json& q : requests_json) {
      const auto d = flat_as<std::int32_t>(q.at("draft_token_ids"));
      for (std::size_t i = 0; i < d.size(); ++i) {
        ids.push_back(d[i]);
        flat_target.add(flat_as<float>(q.at("target_probs")[i]));
        if (!no_draft_probs) flat_draft.add(flat_as<float>(q.at("draft_probs")[i]));
      }
      for (double u : flat(q.at("uniforms"))) us.push_back(u);
      cu.push_back(static_cast<std::int64_t>(ids.size()));
      bonus.push_back(q.at("bonus_token_id").get<std::int32_t>());
      flat_noise.add(flat_as<float>(q.at("exponentials")));
    }
    std::vector<std::int32_t> out(static_cast<std::size_t>(static_cast<index_t>(cu.size()) * width), -7);
    specdec::vllm::rejection_sample(b_, ids, cu, width - 1, upload(flat_draft), upload(flat_target), bonus, {}, us,
                                    upload(flat_noise),
                                    specdec::matrix_view<std::int32_t>(out.data(), static_cast<index_t>(cu.size()), width));
    std::vector<std::int32_t> want;
    for (const json& q : requests_json)
      for (const auto t : flat_as<std::int32_t>(q.at("expected_output_token_ids"))) want.push_back(t);
    expect_equal("vLLM layout: output_token_ids", want, out);
    expect_equal("vLLM layout on the backend: output_token_ids", want,
                 rejection_on_backend(ids, cu, width, upload(flat_draft), upload(flat_target), bonus, {}, us, upload(flat_noise)));
  }

  /// vllm::rejection_sample's backend form (interop/vllm.hpp), every array in the backend's memory; the
  /// padded output downloaded.
  std::vector<std::int32_t> rejection_on_backend(const std::vector<std::int32_t>& ids, const std::vector<std::int64_t>& cu,
                                                 index_t width, specdec::matrix_view<const float, space> draft,
                                                 specdec::matrix_view<const float, space> target,
                                                 const std::vector<std::int32_t>& bonus, const std::vector<std::uint8_t>& greedy,
                                                 const std::vector<double>& uniforms, specdec::matrix_view<const float, space> noise) {
    const auto batch = static_cast<index_t>(cu.size());
    auto ids_on = b_.upload(std::span<const std::int32_t>(ids));
    auto cu_on = b_.upload(std::span<const std::int64_t>(cu));
    auto bonus_on = b_.upload(std::span<const std::int32_t>(bonus));
    auto greedy_on = b_.upload(std::span<const std::uint8_t>(greedy));
    auto uniforms_on = b_.upload(std::span<const double>(uniforms));
    auto out = b_.template allocate<std::int32_t>(batch * width);
    const auto vec = [](auto& buf, std::size_t n) {
      using T = typename std::remove_cvref_t<decltype(buf.view())>::value_type;
      return n == 0 ? specdec::vector_view<const T, space>{} : specdec::vector_view<const T, space>(buf.view());
    };
    specdec::vllm::rejection_sample(b_, vec(ids_on, ids.size()), vec(cu_on, cu.size()), draft, target, vec(bonus_on, bonus.size()),
                                    vec(greedy_on, greedy.size()), vec(uniforms_on, uniforms.size()), noise,
                                    out.matrix(batch, width));
    return b_.download(out.view());
  }

  /// FlashInfer's chain kernel: strict product test, uniforms in (0, 1] in consumption order, re-tests,
  /// inverse-CDF final token.
  void flashinfer_chain(const json& c) {
    for (std::size_t bi = 0; bi < c.at("batches").size(); ++bi) {
      const json& batch = c.at("batches")[bi];
      const std::string name = "batches[" + std::to_string(bi) + "]";
      const index_t k = batch.at("num_speculative_tokens").get<index_t>();
      const std::size_t bs = batch.at("draft_token_ids").size();
      row_stack target, draft;
      std::vector<specdec::draft_tree> trees;
      std::vector<std::vector<index_t>> draft_rows(bs);
      std::vector<std::vector<double>> uniforms(bs);
      for (std::size_t r = 0; r < bs; ++r) {
        trees.push_back(specdec::sampling::make_chain(0, flat_as<std::int32_t>(batch.at("draft_token_ids")[r])));
        draft_rows[r].push_back(-1);
        for (index_t i = 0; i < k; ++i) draft_rows[r].push_back(draft.add(flat_as<float>(batch.at("draft_probs")[r][static_cast<std::size_t>(i)])));
        for (index_t i = 0; i <= k; ++i) target.add(flat_as<float>(batch.at("target_probs")[r][static_cast<std::size_t>(i)]));
        uniforms[r] = flat(batch.at("uniform_streams")[r]);
      }
      std::vector<specdec::sampling::speculative_request> requests(bs);
      for (std::size_t r = 0; r < bs; ++r) {
        requests[r].tree = trees[r];
        requests[r].target_row = static_cast<index_t>(r) * (k + 1);
        requests[r].draft_rows = draft_rows[r];
        requests[r].uniforms = specdec::sampling::uniform_stream::values(uniforms[r]);
      }
      specdec::sampling::speculative_options options;
      options.test = specdec::sampling::acceptance_test::strict_product;
      options.range = specdec::sampling::uniform_range::open_closed;
      options.flashinfer_retest = true;
      options.fallback = specdec::empty_residual::last_token;
      options.keep_final_distribution = true;
      const auto results = specdec::sampling::verify_speculative(b_, {upload(target), upload(draft)}, requests, options);
      std::vector<index_t> accepted, emitted, consumed;
      std::vector<float> final_dist;
      for (const auto& r : results) {
        accepted.push_back(r.retest_accepted);
        emitted.push_back(static_cast<index_t>(r.accepted_nodes.size()));
        consumed.push_back(r.uniforms_consumed);
        final_dist.insert(final_dist.end(), r.final_distribution.begin(), r.final_distribution.end());
      }
      expect_equal(name + ".output_token_ids", batch.at("expected_output_token_ids"), specdec::sampling::padded_tokens(results, k + 1));
      expect_equal(name + ".accepted_token_num", batch.at("expected_accepted_token_num"), accepted);
      expect_equal(name + ".emitted_draft_token_num", batch.at("expected_emitted_draft_token_num"), emitted);
      if (batch.contains("expected_uniforms_consumed"))
        expect_equal(name + ".uniforms_consumed", batch.at("expected_uniforms_consumed"), consumed);
      if (batch.contains("expected_final_distribution_unnormalized"))
        expect_close(name + ".final_distribution", batch.at("expected_final_distribution_unnormalized"), final_dist, 1e-6, false);
    }
  }

  void renorm(const json& c) {
    const std::vector<float> probs = flat_as<float>(c.at("probs"));
    const index_t v = static_cast<index_t>(c.at("probs")[0].size());
    const index_t rows = static_cast<index_t>(probs.size()) / v;
    std::vector<float> top_p = probs, top_k = probs;
    specdec::sampling::top_p_renorm(specdec::as_matrix(top_p, rows, v), c.at("top_p").get<float>());
    specdec::sampling::top_k_renorm(specdec::as_matrix(top_k, rows, v), c.at("top_k").get<index_t>());
    expect_close("recomputed_top_p_renorm", c.at("recomputed_top_p_renorm"), top_p, 1e-6, false);
    expect_close("recomputed_top_k_renorm", c.at("recomputed_top_k_renorm"), top_k, 1e-6, false);
    expect_close("docstring_top_p_renorm", c.at("docstring_top_p_renorm"), top_p, 2e-4, false);
    expect_close("docstring_top_k_renorm", c.at("docstring_top_k_renorm"), top_k, 2e-4, false);
  }

  /// SGLang's per-request tree layout (candidates, retrive_index, next_token / next_sibling links) as
  /// draft trees, nodes in SGLang's order.
  static std::vector<specdec::draft_tree> trees_from_links(const json& in) {
    std::vector<specdec::draft_tree> trees;
    for (std::size_t b = 0; b < in.at("candidates").size(); ++b) {
      const auto cand = flat_as<std::int32_t>(in.at("candidates")[b]);
      const auto next_token = flat_as<std::int32_t>(in.at("retrieve_next_token")[b]);
      const auto next_sibling = flat_as<std::int32_t>(in.at("retrieve_next_sibling")[b]);
      std::vector<std::int32_t> parent(cand.size(), -1);
      for (std::size_t i = 0; i < cand.size(); ++i)
        for (std::int32_t child = next_token[i]; child >= 0; child = next_sibling[static_cast<std::size_t>(child)])
          parent[static_cast<std::size_t>(child)] = static_cast<std::int32_t>(i);
      trees.push_back(specdec::make_tree(cand, parent));
    }
    return trees;
  }

  /// SGLang's outputs from specdec's results: predicts at each accepted slot, accept_index, counts.
  static void expect_sglang_layout(const std::string& name, const json& in, const std::vector<specdec::sampling::speculative_result>& results,
                                   const json& predicts, const json& accept_index, const json& accept_token_num) {
    const index_t steps = in.at("num_spec_steps").get<index_t>();
    std::vector<std::int32_t> got_predicts(in.at("predicts_len").get<std::size_t>(), in.at("predicts_init").get<std::int32_t>());
    std::vector<std::int32_t> got_index, got_count;
    for (std::size_t b = 0; b < results.size(); ++b) {
      const auto slots = flat_as<std::int32_t>(in.at("retrieve_index")[b]);
      std::vector<std::int32_t> path = {0};
      path.insert(path.end(), results[b].accepted_nodes.begin(), results[b].accepted_nodes.end());
      for (std::size_t i = 0; i < path.size(); ++i)
        got_predicts[static_cast<std::size_t>(slots[static_cast<std::size_t>(path[i])])] = results[b].tokens[i];
      for (index_t i = 0; i < steps; ++i)
        got_index.push_back(i < static_cast<index_t>(path.size()) ? slots[static_cast<std::size_t>(path[static_cast<std::size_t>(i)])] : -1);
      got_count.push_back(static_cast<std::int32_t>(results[b].accepted_nodes.size()));
    }
    expect_equal(name + ".predicts", predicts, got_predicts);
    expect_equal(name + ".accept_index", accept_index, got_index);
    expect_equal(name + ".accept_token_num", accept_token_num, got_count);
  }

  /// SGLang's verify_tree_greedy twice: the interop function on SGLang's own layout, and specdec's
  /// verify_greedy on the same trees.
  void tree_greedy(const json& c) {
    const json& in = c.at("inputs");
    const json& out = c.at("expected");
    const index_t bs = static_cast<index_t>(in.at("candidates").size());
    const index_t n = static_cast<index_t>(in.at("candidates")[0].size());
    const auto cand = flat_as<std::int64_t>(in.at("candidates"));
    const auto ri = flat_as<std::int64_t>(in.at("retrieve_index"));
    const auto nt = flat_as<std::int64_t>(in.at("retrieve_next_token"));
    const auto ns = flat_as<std::int64_t>(in.at("retrieve_next_sibling"));
    const auto tp = flat_as<std::int64_t>(in.at("target_predict"));
    using mv = specdec::matrix_view<const std::int64_t>;
    const index_t steps = in.at("num_spec_steps").get<index_t>();
    const auto r = specdec::sglang::verify_tree_greedy(mv(cand.data(), bs, n), mv(ri.data(), bs, n), mv(nt.data(), bs, n),
                                                       mv(ns.data(), bs, n), tp, steps);
    expect_equal("sglang.predicts", out.at("predicts"), r.predicts);
    expect_equal("sglang.accept_index", out.at("accept_index"), r.accept_index);
    expect_equal("sglang.accept_token_num", out.at("accept_token_num"), r.accept_token_num);
    const auto trees = trees_from_links(in);
    std::vector<specdec::sampling::speculative_request> requests(trees.size());
    std::int32_t vocab = 1;
    for (auto x : tp) vocab = std::max(vocab, static_cast<std::int32_t>(x) + 1);
    for (auto x : cand) vocab = std::max(vocab, static_cast<std::int32_t>(x) + 1);
    std::vector<std::vector<std::int32_t>> first_child, next_sibling;
    for (std::size_t b = 0; b < trees.size(); ++b) {
      first_child.push_back(flat_as<std::int32_t>(in.at("retrieve_next_token")[b]));
      next_sibling.push_back(flat_as<std::int32_t>(in.at("retrieve_next_sibling")[b]));
    }
    for (std::size_t b = 0; b < trees.size(); ++b) {
      requests[b].tree = trees[b];
      requests[b].target_row = static_cast<index_t>(b) * n;
      requests[b].max_accepted = steps - 1;
      requests[b].first_child = first_child[b];
      requests[b].next_sibling = next_sibling[b];
    }
    const std::vector<std::int32_t> argmax(tp.begin(), tp.end());
    expect_sglang_layout("verify_greedy", in, specdec::sampling::verify_greedy(argmax, vocab, requests), out.at("predicts"),
                         out.at("accept_index"), out.at("accept_token_num"));
  }

  void tree_target_only(const json& c) {
    const json& in = c.at("inputs");
    const auto trees = trees_from_links(in);
    const index_t n = static_cast<index_t>(in.at("candidates")[0].size());
    std::vector<std::vector<std::int32_t>> first_child, next_sibling;
    for (std::size_t b = 0; b < trees.size(); ++b) {
      first_child.push_back(flat_as<std::int32_t>(in.at("retrieve_next_token")[b]));
      next_sibling.push_back(flat_as<std::int32_t>(in.at("retrieve_next_sibling")[b]));
    }
    row_stack target;
    std::vector<std::vector<double>> uniforms(trees.size());
    for (std::size_t b = 0; b < trees.size(); ++b) {
      for (index_t i = 0; i < n; ++i) target.add(flat_as<float>(in.at("target_probs")[b][static_cast<std::size_t>(i)]));
      uniforms[b] = flat(in.at("uniform_samples")[b]);
      uniforms[b].push_back(in.at("uniform_samples_for_final_sampling")[b].get<double>());
    }
    const auto probs = upload(target);
    std::vector<specdec::sampling::speculative_request> requests(trees.size());
    for (std::size_t b = 0; b < trees.size(); ++b) {
      requests[b].tree = trees[b];
      requests[b].target_row = static_cast<index_t>(b) * n;
      requests[b].uniforms = specdec::sampling::uniform_stream::values(uniforms[b]);
      requests[b].max_accepted = in.at("num_spec_steps").get<index_t>() - 1;
      requests[b].first_child = first_child[b];
      requests[b].next_sibling = next_sibling[b];
    }
    for (std::size_t k = 0; k < c.at("cases").size(); ++k) {
      const json& e = c.at("cases")[k];
      // SGLang's launcher clamps threshold_acc to >= 1e-9; threshold_single = 0 accepts every first child.
      const specdec::sampling::coin_options th{e.at("threshold_single").get<float>(),
                                                  std::max(e.at("threshold_acc").get<float>(), 1e-9f)};
      const auto results = specdec::sampling::verify_coin_tree(b_, probs, requests, th);
      expect_sglang_layout("cases[" + std::to_string(k) + "]", in, results, e.at("expected_predicts"),
                           e.at("expected_accept_index"), e.at("expected_accept_token_num"));
      // The same through SGLang's own layout on the backend (interop/sglang_sampling.hpp), as the Python
      // binding calls it: every array in the backend's memory, the walk a team job.
      const auto bs = static_cast<index_t>(trees.size());
      const index_t steps = in.at("num_spec_steps").get<index_t>();
      const auto up64 = [&](const char* key) { return b_.upload(std::span<const std::int64_t>(flat_as<std::int64_t>(in.at(key)))); };
      auto cand = up64("candidates"), ri = up64("retrieve_index"), nt = up64("retrieve_next_token"), ns = up64("retrieve_next_sibling");
      std::vector<float> coins, finals;
      for (std::size_t b = 0; b < trees.size(); ++b) {
        for (double u : flat(in.at("uniform_samples")[b])) coins.push_back(static_cast<float>(u));
        finals.push_back(in.at("uniform_samples_for_final_sampling")[b].get<float>());
      }
      auto coins_on = b_.upload(std::span<const float>(coins));
      auto finals_on = b_.upload(std::span<const float>(finals));
      const std::vector<std::int32_t> init(static_cast<std::size_t>(bs * n), in.at("predicts_init").get<std::int32_t>());
      auto predicts_on = b_.upload(std::span<const std::int32_t>(init));
      auto accept_index = b_.template allocate<std::int32_t>(bs * steps);
      auto accept_token_num = b_.template allocate<std::int32_t>(bs);
      const auto links = [&](auto& buf) { return specdec::matrix_view<const std::int64_t, space>(buf.matrix(bs, n)); };
      specdec::sglang::tree_speculative_sampling_target_only(
          b_, links(cand), links(ri), links(nt), links(ns), specdec::matrix_view<const float, space>(coins_on.matrix(bs, n)),
          specdec::vector_view<const float, space>(finals_on.view()), probs, predicts_on.view(), accept_index.matrix(bs, steps),
          accept_token_num.view(), e.at("threshold_single").get<float>(), e.at("threshold_acc").get<float>());
      const std::string f = "cases[" + std::to_string(k) + "] (SGLang layout)";
      const std::vector<std::int32_t> predicts = b_.download(predicts_on.view());
      expect_equal(f + ".predicts", e.at("expected_predicts"), predicts);
      expect_equal(f + ".accept_index", e.at("expected_accept_index"), b_.download(accept_index.view()));
      expect_equal(f + ".accept_token_num", e.at("expected_accept_token_num"), b_.download(accept_token_num.view()));
    }
  }

  /// Candidate paths (`[paths x (depth + 1)]`, column 0 the root, -1 padding) merged into a tree; with
  /// each node's row (the first path through it at its depth) and each node's first path.
  struct path_tree {
    specdec::draft_tree tree;
    std::vector<std::pair<std::size_t, std::size_t>> row_of;  // (path, depth) of each node's distribution
    std::vector<std::size_t> first_path;
  };
  static path_tree tree_from_paths(const json& candidates) {
    std::vector<std::int32_t> tokens, parents;
    path_tree out;
    std::vector<std::vector<std::int32_t>> prefixes;
    for (std::size_t p = 0; p < candidates.size(); ++p) {
      const auto path = flat_as<std::int32_t>(candidates[p]);
      std::vector<std::int32_t> prefix;
      std::int32_t parent = -1;
      for (std::size_t d = 0; d < path.size() && path[d] >= 0; ++d) {
        prefix.push_back(path[d]);
        const auto it = std::find(prefixes.begin(), prefixes.end(), prefix);
        if (it != prefixes.end()) {
          parent = static_cast<std::int32_t>(it - prefixes.begin());
          continue;
        }
        prefixes.push_back(prefix);
        tokens.push_back(path[d]);
        parents.push_back(parent);
        out.row_of.emplace_back(p, d);
        out.first_path.push_back(p);
        parent = static_cast<std::int32_t>(tokens.size() - 1);
      }
    }
    // Paths add nodes depth-first; renumber breadth-first (stable by depth) as draft_tree requires.
    std::vector<std::int32_t> depth(tokens.size(), 0), order(tokens.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) depth[i] = parents[i] < 0 ? 0 : depth[static_cast<std::size_t>(parents[i])] + 1;
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) { return depth[static_cast<std::size_t>(a)] < depth[static_cast<std::size_t>(b)]; });
    std::vector<std::int32_t> new_index(tokens.size());
    for (std::size_t i = 0; i < order.size(); ++i) new_index[static_cast<std::size_t>(order[i])] = static_cast<std::int32_t>(i);
    std::vector<std::int32_t> t2, p2;
    path_tree sorted;
    for (const std::int32_t o : order) {
      t2.push_back(tokens[static_cast<std::size_t>(o)]);
      p2.push_back(parents[static_cast<std::size_t>(o)] < 0 ? -1 : new_index[static_cast<std::size_t>(parents[static_cast<std::size_t>(o)])]);
      sorted.row_of.push_back(out.row_of[static_cast<std::size_t>(o)]);
      sorted.first_path.push_back(out.first_path[static_cast<std::size_t>(o)]);
    }
    sorted.tree = specdec::make_tree(t2, p2);
    return sorted;
  }

  void typical_tree(const json& c) {
    const json& in = c.at("inputs");
    const path_tree pt = tree_from_paths(in.at("candidates"));
    const json& post = in.at("posterior_prob");
    const index_t depth_rows = static_cast<index_t>(post[0].size());
    row_stack target;
    for (std::size_t i = 0; i < pt.row_of.size(); ++i) {
      const auto [path, depth] = pt.row_of[i];
      // Leaves past the last posterior row get a placeholder row (never read: nothing hangs below them).
      target.add(static_cast<index_t>(depth) < depth_rows ? flat_as<float>(post[path][depth])
                                                          : uniform_row(static_cast<index_t>(post[0][0].size())));
    }
    const auto probs = upload(target);
    specdec::sampling::speculative_request request;
    request.tree = pt.tree;
    for (std::size_t k = 0; k < c.at("cases").size(); ++k) {
      const json& e = c.at("cases")[k];
      const std::string name = "cases[" + std::to_string(k) + "]";
      specdec::sampling::typical_options options;
      options.epsilon = e.at("posterior_threshold").get<float>();
      options.delta = e.at("posterior_alpha").get<float>();
      const auto r = specdec::sampling::verify_typical(b_, probs, std::span(&request, 1), options).at(0);
      const json& x = e.at("expected");
      const std::size_t best = r.accepted_nodes.empty() ? 0 : pt.first_path[static_cast<std::size_t>(r.accepted_nodes.back())];
      expect_equal(name + ".accept_length", x.at("accept_length"), std::vector<std::size_t>{r.accepted_nodes.size()});
      expect_equal(name + ".best_candidate", x.at("best_candidate"), std::vector<std::size_t>{best});
      std::vector<float> threshold, entropy;
      for (std::size_t p = 0; p < post.size(); ++p)
        for (index_t d = 0; d < depth_rows; ++d) {
          const auto row = flat_as<float>(post[p][static_cast<std::size_t>(d)]);
          const auto t = specdec::sampling::typical_row_threshold(row.data(), static_cast<index_t>(row.size()), options);
          threshold.push_back(static_cast<float>(t.threshold));
          entropy.push_back(static_cast<float>(t.entropy));
        }
      expect_close(name + ".threshold", x.at("threshold"), threshold, 1e-5, true);
      expect_close(name + ".entropy", x.at("entropy"), entropy, 1e-5, true);
    }
  }

  /// EAGLE's evaluate_posterior (sampling): the stream covers the acceptance tests only (the final
  /// token comes from torch.multinomial there), so one more uniform is appended for specdec's draw.
  void eagle_posterior(const json& c) {
    const json& in = c.at("inputs");
    const path_tree pt = tree_from_paths(in.at("candidates"));
    row_stack target;
    for (const auto& [path, depth] : pt.row_of) target.add(flat_as<float>(in.at("probs")[path][depth]));
    const auto probs = upload(target);
    for (std::size_t k = 0; k < c.at("cases").size(); ++k) {
      const json& e = c.at("cases")[k];
      const std::string name = "cases[" + std::to_string(k) + "]";
      std::vector<double> stream = flat(e.at("uniform_stream"));
      stream.push_back(0.5);
      specdec::sampling::speculative_request request;
      request.tree = pt.tree;
      request.uniforms = specdec::sampling::uniform_stream::values(stream);
      const auto r = specdec::sampling::verify_speculative(b_, {probs}, std::span(&request, 1), {.keep_final_distribution = true}).at(0);
      const json& x = e.at("expected");
      const std::size_t best = r.accepted_nodes.empty() ? 0 : pt.first_path[static_cast<std::size_t>(r.accepted_nodes.back())];
      expect_equal(name + ".best_candidate", x.at("best_candidate"), std::vector<std::size_t>{best});
      expect_equal(name + ".accept_length", x.at("accept_length"), std::vector<std::size_t>{r.accepted_nodes.size()});
      expect_equal(name + ".accepted_tokens", x.at("accepted_tokens"), std::vector<std::int32_t>(r.tokens.begin(), r.tokens.end() - 1));
      expect_equal(name + ".uniforms_consumed", x.at("uniforms_consumed"), std::vector<index_t>{r.acceptance_tests});
      double mass = 0.0;
      for (const float v : r.final_distribution) mass += v;
      std::vector<float> normalised;
      for (const float v : r.final_distribution) normalised.push_back(static_cast<float>(v / mass));
      expect_close(name + ".sample_p", x.at("sample_p"), normalised, 1e-6, false);
    }
  }

  /// One single-draft chain decided by the given convention: accepted or not.
  bool single_decision(float p_x, float q_x, double u, specdec::sampling::acceptance_test test, specdec::sampling::uniform_range range) {
    const std::vector<float> p = {p_x, 1.0f - p_x, 0.0f, 0.0f}, q = {q_x, 1.0f - q_x, 0.0f, 0.0f};
    row_stack target, draft;
    target.add(p);
    target.add(uniform_row(4));
    draft.add(q);
    const specdec::draft_tree chain = specdec::sampling::make_chain(1, std::vector<std::int32_t>{0});
    const std::vector<index_t> rows = {-1, 0};
    const std::vector<double> stream = {u, 0.5};
    specdec::sampling::speculative_request request{chain, 0, rows, specdec::sampling::uniform_stream::values(stream)};
    specdec::sampling::speculative_options options;
    options.test = test;
    options.range = range;
    return !specdec::sampling::verify_speculative(b_, {upload(target), upload(draft)}, std::span(&request, 1), options)
                .at(0).accepted_nodes.empty();
  }

  void predicate_conventions(const json& c) {
    using specdec::sampling::acceptance_test;
    using specdec::sampling::uniform_range;
    for (const json& k : c.at("cases")) {
      const std::string name = k.at("case");
      if (k.contains("target_prob") && k.contains("draft_prob")) {
        const float p = k.at("target_prob"), q = k.at("draft_prob");
        const double u = k.at("uniform");
        const auto check = [&](const char* key, acceptance_test test, uniform_range range) {
          if (!k.contains(key)) return;
          expect_equal(name + "." + key, k.at(key), std::vector<int>{single_decision(p, q, u, test, range) ? 1 : 0});
        };
        if (u < 1.0) {  // [0, 1) conventions cannot see u = 1
          check("vllm_v1_accept", acceptance_test::ratio, uniform_range::closed_open);
          check("leviathan_alg1_accept", acceptance_test::ratio, uniform_range::closed_open);
          check("specinfer_accept", acceptance_test::ratio, uniform_range::closed_open);
        }
        check("flashinfer_accept", acceptance_test::strict_product, uniform_range::open_closed);
        check("sglang_chain_classic_accept", acceptance_test::strict_product, uniform_range::open_closed);
      } else if (k.contains("distribution")) {
        const auto dist = flat_as<float>(k.at("distribution"));
        for (const auto& [key, u] : std::vector<std::pair<std::string, double>>{{"uniform_1_0", 1.0}, {"uniform_0_5", 0.5}, {"uniform_0_25", 0.25}, {"uniform_0_2", 0.2}}) {
          // A bonus draw from `dist` with FlashInfer's (0, 1] uniforms.
          row_stack target;
          target.add(dist);
          const specdec::draft_tree root = specdec::make_tree({0}, {-1});
          const std::vector<double> stream = {u};
          specdec::sampling::speculative_request request{root, 0, {}, specdec::sampling::uniform_stream::values(stream)};
          specdec::sampling::speculative_options options;
          options.range = uniform_range::open_closed;
          const auto r = specdec::sampling::verify_speculative(b_, {upload(target)}, std::span(&request, 1), options).at(0);
          expect_equal(name + "." + key, k.at(key), r.tokens);
        }
      } else if (k.contains("coin")) {
        // SGLang's tree rule at the boundary: one child whose target mass equals the coin.
        const float mass = k.at("prob_acc");
        row_stack target;
        target.add({mass, 1.0f - mass});
        target.add({0.5f, 0.5f});
        const specdec::draft_tree chain = specdec::sampling::make_chain(1, std::vector<std::int32_t>{0});
        const std::vector<double> stream = {k.at("coin").get<double>(), 0.5, 0.5};
        specdec::sampling::speculative_request request{chain, 0, {}, specdec::sampling::uniform_stream::values(stream)};
        const auto r = specdec::sampling::verify_coin_tree(b_, upload(target), std::span(&request, 1), {1.0f, k.at("threshold_acc").get<float>()}).at(0);
        expect_equal(name + ".sglang_tree_accept", k.at("sglang_tree_accept"), std::vector<int>{r.accepted_nodes.empty() ? 0 : 1});
      } else if (k.contains("vllm_v1")) {
        // All-zero residual: q(x) = 0 rejects in vLLM, and p == q elsewhere leaves nothing.
        row_stack target, draft, noise;
        target.add({0.0f, 0.5f, 0.5f, 0.0f});
        target.add(uniform_row(4));
        draft.add({0.0f, 0.5f, 0.5f, 0.0f});
        noise.add({1.0f, 1.0f, 1.0f, 1.0f});
        const specdec::draft_tree chain = specdec::sampling::make_chain(1, std::vector<std::int32_t>{3});
        const std::vector<index_t> rows = {-1, 0};
        const std::vector<double> stream = {0.5, 0.5};
        specdec::sampling::speculative_request request{chain, 0, rows, specdec::sampling::uniform_stream::values(stream)};
        request.noise_row = 0;
        specdec::sampling::speculative_options options;
        options.draw = specdec::sampling::final_draw::exponential_race;
        const auto r = specdec::sampling::verify_speculative(b_, {upload(target), upload(draft), upload(noise)}, std::span(&request, 1), options).at(0);
        expect_equal(name + ".vllm_v1", k.at("vllm_v1"), std::vector<std::int32_t>{r.tokens.back()});
        // SGLang's tree kernel: V - 1 when the residual is empty (both candidates rejected, nothing left).
        row_stack t2;
        t2.add({0.5f, 0.5f});
        t2.add({0.5f, 0.5f});
        t2.add({0.5f, 0.5f});
        const specdec::draft_tree both = specdec::make_tree({0, 0, 1}, {-1, 0, 0});
        const std::vector<double> coins = {0.99, 0.5, 0.5, 0.5};
        specdec::sampling::speculative_request r2{both, 0, {}, specdec::sampling::uniform_stream::values(coins)};
        const auto s = specdec::sampling::verify_coin_tree(b_, upload(t2), std::span(&r2, 1), {1.0f, 1.1f}).at(0);
        expect_true(name + ".sglang_tree_target_only", s.tokens.back() == 1, "expected V - 1 = 1, got " + std::to_string(s.tokens.back()));
      }
    }
  }

  void analytic(const json& c) {
    for (std::size_t i = 0; i < c.at("cases").size(); ++i) {
      const json& k = c.at("cases")[i];
      const std::string name = "cases[" + std::to_string(i) + "]";
      const std::vector<double> p = flat(k.at("target_p")), q = flat(k.at("draft_q"));
      const double alpha = specdec::sampling::lenient_acceptance_rate(p, q);
      if (std::abs(alpha - k.at("alpha").get<double>()) > 1e-12)
        throw mismatch(name + ".alpha, expected " + std::to_string(k.at("alpha").get<double>()) + ", got " + std::to_string(alpha));
      for (const json& g : k.at("per_gamma")) {
        const index_t gamma = g.at("gamma");
        const double tokens = specdec::sampling::expected_tokens_per_step(alpha, gamma);
        if (std::abs(tokens - g.at("expected_generated_tokens").get<double>()) > 1e-9)
          throw mismatch(name + ".expected_generated_tokens, expected " + std::to_string(g.at("expected_generated_tokens").get<double>()) + ", got " + std::to_string(tokens));
        const auto dist = specdec::sampling::tokens_per_step_distribution(alpha, gamma);
        for (const auto& item : g.at("prob_num_generated").items()) {
          const double want = item.value().template get<double>();
          if (std::abs(dist[static_cast<std::size_t>(std::stoi(item.key()) - 1)] - want) > 1e-9)
            throw mismatch(name + ".prob_num_generated[" + item.key() + "], expected " + std::to_string(want));
        }
      }
    }
  }

  void lenience(const json& c) {
    const json& single = c.at("single_position");
    const std::vector<double> p = flat(single.at("target_p")), q = flat(single.at("draft_q"));
    for (const json& k : single.at("cases")) {
      const double l = k.at("lenience");
      const std::string name = "single_position[l=" + std::to_string(l) + "]";
      if (std::abs(specdec::sampling::lenient_acceptance_rate(p, q, l) - k.at("alpha").get<double>()) > 1e-12)
        throw mismatch(name + ".alpha");
      const auto out = specdec::sampling::lenient_output_distribution(p, q, l);
      expect_close(name + ".output_distribution", k.at("single_position_output_distribution"),
                   std::vector<float>(out.begin(), out.end()), 1e-7, false);
    }
    const json& chain = c.at("chain");
    row_stack target, draft;
    for (const json& r : chain.at("target_rows")) target.add(flat_as<float>(r));
    for (const json& r : chain.at("draft_rows")) draft.add(flat_as<float>(r));
    const auto tp = upload(target), dp = upload(draft);
    const specdec::draft_tree tree = specdec::sampling::make_chain(0, flat_as<std::int32_t>(chain.at("draft_token_ids")));
    std::vector<index_t> rows = {-1};
    for (index_t i = 0; i < dp.rows(); ++i) rows.push_back(i);
    for (std::size_t i = 0; i < chain.at("cases").size(); ++i) {
      const json& k = chain.at("cases")[i];
      const std::string name = "chain.cases[" + std::to_string(i) + "]";
      // The golden draws the final token with its own uniform: the stream is the acceptance uniforms
      // actually used, then the final one.
      specdec::sampling::speculative_options options;
      options.lenience = k.at("lenience");
      options.keep_final_distribution = true;
      const std::vector<double> tests = flat(k.at("uniforms"));
      const index_t accepted = k.at("expected").at("num_accepted");
      std::vector<double> stream(tests.begin(), tests.begin() + std::min<std::ptrdiff_t>(accepted + 1, static_cast<std::ptrdiff_t>(tests.size())));
      stream.push_back(k.at("final_uniform"));
      specdec::sampling::speculative_request request{tree, 0, rows, specdec::sampling::uniform_stream::values(stream)};
      const auto r = specdec::sampling::verify_speculative(b_, {tp, dp}, std::span(&request, 1), options).at(0);
      expect_equal(name + ".num_accepted", k.at("expected").at("num_accepted"), std::vector<std::size_t>{r.accepted_nodes.size()});
      expect_equal(name + ".output", k.at("expected").at("output"), r.tokens);
      double mass = 0.0;
      for (const float v : r.final_distribution) mass += v;
      std::vector<float> normalised;
      for (const float v : r.final_distribution) normalised.push_back(static_cast<float>(v / mass));
      expect_close(name + ".final_dist", k.at("expected").at("final_dist"), normalised, 1e-6, false);
    }
    for (std::size_t i = 0; i < c.at("greedy").size(); ++i) {
      const json& k = c.at("greedy")[i];
      const auto probs = flat_as<float>(k.at("target_p"));
      expect_equal("greedy[" + std::to_string(i) + "].accept", k.at("accept"),
                   std::vector<int>{specdec::sampling::lenient_greedy_accepts(probs, k.at("draft_token"), k.at("lenience")) ? 1 : 0});
    }
  }

  B& b_;
  std::vector<typename B::template buffer<float>> keep_;
};

template <class B>
bool run_file(B& backend, const std::filesystem::path& file) {
  const std::string name = file.stem().string();
  try {
    std::ifstream in(file);
    if (!in) throw mismatch("file, expected a readable file, got none");
    const json c = json::parse(in);
    runner<B>(backend).run(c);
    std::cout << "PASS " << name << "\n";
    return true;
  } catch (const std::exception& e) {
    std::cout << "FAIL " << name << ": " << e.what() << "\n";
    return false;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string backend_name = "eigen";
  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--backend" && i + 1 < argc) {
      backend_name = argv[++i];
    } else if (arg == "--help" || arg == "-h") {
      std::cout << "usage: specdec-conformance [--backend eigen|thrust] FILE_OR_DIR...\n";
      return 0;
    } else if (std::filesystem::is_directory(arg)) {
      for (const auto& e : std::filesystem::directory_iterator(arg))
        if (e.path().extension() == ".json") files.push_back(e.path());
    } else {
      files.emplace_back(arg);
    }
  }
  if (backend_name != "eigen" && backend_name != "thrust") {
    std::cerr << "specdec-conformance: unknown backend '" << backend_name << "'; expected eigen or thrust\n";
    return 2;
  }
  if (files.empty()) {
    std::cerr << "specdec-conformance: no case files given\n";
    return 2;
  }
  std::sort(files.begin(), files.end());
  int passed = 0, failed = 0;
  specdec::eigen eigen_backend;
  specdec::thrust_backend<specdec::thrust_system::cpp> thrust_backend;
  for (const auto& f : files) {
    const bool ok = backend_name == "eigen" ? run_file(eigen_backend, f) : run_file(thrust_backend, f);
    (ok ? passed : failed)++;
  }
  std::cout << passed << " passed, " << failed << " failed\n";
  return failed == 0 ? 0 : 1;
}
