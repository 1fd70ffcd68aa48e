// SPDX-License-Identifier: Apache-2.0
// The EAGLE-2 / EAGLE-3 / SGLang-form builder and Jakiro's dual-head step with random configurations
// and random logits (NaN, infinities and denormals included): every call either throws
// specdec::invalid_argument or, at the end, gives per request a valid tree of exactly total_tokens
// nodes whose tokens are target ids, whose nodes are selected candidates with their parents selected,
// whose scores never rise along a path, and whose draft steps are shaped as documented.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/tree/eagle2.hpp>

#include "fuzz_input.hpp"

namespace {
using specdec::index_t;

void check_step(const specdec::draft_step& s, index_t batch, index_t k, index_t step, index_t target_vocab) {
  fuzz::require(s.step == step && static_cast<index_t>(s.input_ids.size()) == batch * k &&
                    static_cast<index_t>(s.frontier.size()) == batch * k && s.mask_cols == k * (step + 1) &&
                    static_cast<index_t>(s.draft_mask.size()) == batch * k * s.mask_cols,
                "draft step shape", step, k);
  for (const auto id : s.input_ids) fuzz::require(id >= 0 && id < target_vocab, "frontier token outside the target vocabulary", id);
  for (index_t r = 0; r < batch * k; ++r)  // each frontier node attends itself
    fuzz::require(s.draft_mask[static_cast<std::size_t>(r * s.mask_cols + step * k + r % k)] == 1, "draft mask diagonal", r);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::input in(data, size);
  specdec::dynamic_tree_config cfg;
  cfg.top_k = in.range(-1, 6);
  cfg.depth = in.range(-1, 4);
  cfg.total_tokens = in.range(0, 40);
  cfg.score = in.flag() ? specdec::tree_score::probability : specdec::tree_score::log_probability;
  const index_t batch = in.range(0, 3), vocab = in.range(1, 12);
  index_t target_vocab = vocab;
  if (in.flag()) {  // EAGLE-3: a reduced draft vocabulary mapped by d2t offsets
    target_vocab = vocab + in.range(0, 20);
    for (index_t t = 0; t < vocab; ++t) cfg.d2t.push_back(static_cast<std::int32_t>(in.range(-2, target_vocab - t)));
  }
  const bool dual = in.flag();
  const auto logits = [&](index_t rows) {
    std::vector<float> x(static_cast<std::size_t>(rows * vocab));
    for (auto& v : x) v = in.value();
    return x;
  };
  specdec::eigen b;
  try {
    specdec::eagle2_tree_builder<specdec::eigen> builder(b, cfg, batch);
    const index_t k = cfg.top_k;
    std::vector<std::int32_t> roots(static_cast<std::size_t>(batch));
    for (auto& r : roots) r = static_cast<std::int32_t>(in.range(0, target_vocab - 1));
    const auto root = logits(batch);
    auto step = builder.begin(specdec::matrix_view<const float>(root.data(), batch, vocab), roots, target_vocab);
    check_step(step, batch, k, 0, target_vocab);
    while (builder.steps_done() < cfg.depth) {
      const auto rows = logits(batch * k);
      if (dual && builder.steps_done() + 2 == cfg.depth) {
        const auto right = logits(batch * k);
        step = builder.expand_dual(specdec::matrix_view<const float>(rows.data(), batch * k, vocab),
                                   specdec::matrix_view<const float>(right.data(), batch * k, vocab));
      } else {
        step = builder.expand(specdec::matrix_view<const float>(rows.data(), batch * k, vocab));
      }
      if (builder.steps_done() < cfg.depth) check_step(step, batch, k, builder.steps_done(), target_vocab);
    }
    const auto results = builder.finish();
    fuzz::require(static_cast<index_t>(results.size()) == batch, "one result per request", static_cast<long long>(results.size()));
    for (const auto& r : results) {
      const auto& t = r.tree;
      specdec::validate(t, target_vocab);
      fuzz::require(t.size() == cfg.total_tokens, "tree size is total_tokens", t.size(), cfg.total_tokens);
      fuzz::require(std::is_sorted(r.selected.begin(), r.selected.end()) &&
                        std::adjacent_find(r.selected.begin(), r.selected.end()) == r.selected.end(),
                    "selected sorted and distinct");
      // SGLang's parent list: (bs, 0) with no expansion, else the root group and every frontier node.
      fuzz::require(static_cast<index_t>(r.parent_list.size()) == (cfg.depth == 0 ? 0 : 1 + cfg.depth * k), "parent_list length",
                    static_cast<long long>(r.parent_list.size()));
      for (index_t i = 1; i < t.size(); ++i) {
        const auto p = static_cast<std::size_t>(t.parent[static_cast<std::size_t>(i)]);
        if (p > 0)
          fuzz::require(!(t.score[static_cast<std::size_t>(i)] > t.score[p]), "a child scores above its parent", i,
                        static_cast<long long>(p));
      }
    }
  } catch (const specdec::invalid_argument&) {
  }
  return 0;
}
