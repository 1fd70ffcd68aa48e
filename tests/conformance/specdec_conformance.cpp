// SPDX-License-Identifier: Apache-2.0
// specdec-conformance: runs specdec on golden case files computed by the peers' own algorithms and
// compares every output. Usage: specdec-conformance [--backend eigen|thrust] FILE_OR_DIR...
// Prints `PASS name` or `FAIL name: field, expected ..., got ...` per file and `N passed, M failed`
// last; exits non-zero when anything failed. Integer outputs must match exactly; recorded scores to
// 1e-5 (absolute for log-probabilities, relative for probabilities), as goldens/trees/README.md says.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <specdec/backend/eigen.hpp>
#include <specdec/backend/thrust.hpp>
#include <specdec/interop/eagle1.hpp>
#include <specdec/interop/medusa.hpp>
#include <specdec/interop/sglang.hpp>
#include <specdec/interop/trtllm.hpp>
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
    const std::string kind = c.at("kind");
    if (kind == "eagle2_dynamic_tree" || kind == "jakiro_dynamic_tree") return dynamic_tree(c, kind == "jakiro_dynamic_tree");
    if (kind == "medusa_buffers") return medusa(c);
    if (kind == "eagle1_static_tree") return eagle1(c);
    if (kind == "trtllm_medusa_setup") return trtllm(c);
    if (kind == "sglang_build_tree") return sglang_build(c);
    if (kind == "sglang_eagle_pipeline") return sglang_pipeline(c);
    if (kind == "sglang_build_tree_malformed") return sglang_malformed(c);
    if (kind == "sglang_verify_tree_greedy") return sglang_verify(c);
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
    const auto greedy = specdec::make_eagle_buffers(result.tree);
    const json& out = c.at("outputs");
    expect_equal("outputs.draft_tokens", out.at("draft_tokens"), greedy.draft_tokens);
    expect_equal("outputs.tree_mask", out.at("tree_mask"), greedy.tree_mask);
    expect_equal("outputs.tree_position_ids", out.at("tree_position_ids"), greedy.position_ids);
    expect_equal("outputs.retrieve_indices", out.at("retrieve_indices"), greedy.retrieve_indices);
    const auto sampled = specdec::make_eagle_buffers(result.tree, specdec::path_order::lexicographic);
    expect_equal("outputs_sampling.retrieve_indices", c.at("outputs_sampling").at("retrieve_indices"),
                 sampled.retrieve_indices);
    if (it.contains("draft_steps")) {
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
    expect_equal("outputs.medusa_attn_mask", out.at("medusa_attn_mask"), buf.attn_mask);
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
    expect_equal("outputs.tree_attn_mask", out.at("tree_attn_mask"), buf.tree_attn_mask);
    expect_equal("outputs.tree_indices", out.at("tree_indices"), buf.tree_indices);
    expect_equal("outputs.tree_position_ids", out.at("tree_position_ids"), buf.tree_position_ids);
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
    compare_build_tree(out, parent_list, 1 + k * (steps - 1), selected, tokens, flat_as<std::int64_t>(in.at("verified_id")),
                       flat_as<std::int64_t>(in.at("seq_lens")), k, steps, n);
    if (out.contains("tree_mask_qlen_matrix"))
      expect_equal("outputs.tree_mask_qlen_matrix", out.at("tree_mask_qlen_matrix"),
                   specdec::sglang::build_tree(
                       specdec::matrix_view<const std::int64_t>(parent_list.data(), bs, 1 + k * (steps - 1)),
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
  specdec::thrust<specdec::thrust_system::cpp> thrust_backend;
  for (const auto& f : files) {
    const bool ok = backend_name == "eigen" ? run_file(eigen_backend, f) : run_file(thrust_backend, f);
    (ok ? passed : failed)++;
  }
  std::cout << passed << " passed, " << failed << " failed\n";
  return failed == 0 ? 0 : 1;
}
