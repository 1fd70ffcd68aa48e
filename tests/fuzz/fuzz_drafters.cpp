// SPDX-License-Identifier: Apache-2.0
// The drafting protocol (tree/drafter.hpp) over the library's drafters: prompt lookup, SuffixDecoding,
// chains (greedy and sampled, with a stop rule), EAGLE-2 trees and block drafts (chains and top-k trees
// from one block forward), with random configurations, random
// contexts, random logits (NaN, infinities and denormals included) and random feedback, several steps
// in a row so that the draft-length policies act on what they learned. Every call either throws
// specdec::invalid_argument or: each request is shaped as documented (one token, depth and parent row
// per row; a rows x mask_cols mask in which every row attends itself), each finished draft is a valid
// tree of committed-vocabulary tokens rooted at the context's last token, no deeper than the drafter's
// longest, its sampled rows (if any) sized to the tree, and feedback that is valid is accepted.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <variant>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/tree/block_drafter.hpp>
#include <specdec/tree/drafters.hpp>

#include "fuzz_input.hpp"

namespace {
using specdec::index_t;

void check_request(const specdec::draft_request& r, index_t vocab) {
  const index_t rows = r.rows();
  fuzz::require(rows > 0 && static_cast<index_t>(r.depth.size()) == rows && static_cast<index_t>(r.parent_row.size()) == rows &&
                    static_cast<index_t>(r.mask.size()) == rows * r.mask_cols && r.logits_per_row >= 1,
                "request shape", rows, r.mask_cols);
  for (index_t i = 0; i < rows; ++i) {
    const auto t = r.tokens[static_cast<std::size_t>(i)];
    fuzz::require(t >= 0 && t < vocab, "request token outside the vocabulary", t);
    fuzz::require(r.depth[static_cast<std::size_t>(i)] >= 0, "negative request depth", r.depth[static_cast<std::size_t>(i)]);
  }
  // Row r of the step's last request attends itself: the last `rows` mask columns are this request's.
  for (index_t i = 0; i < rows; ++i)
    fuzz::require(r.mask[static_cast<std::size_t>(i * r.mask_cols + r.mask_cols - rows + i)] == 1, "request mask diagonal", i);
}

using any_drafter = std::variant<specdec::ngram_drafter, specdec::suffix_drafter<std::int32_t, int>, specdec::chain_drafter<specdec::eigen>,
                                 specdec::eagle2_drafter<specdec::eigen>, specdec::block_drafter<specdec::eigen>>;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::input in(data, size);
  specdec::eigen b;
  const index_t vocab = in.range(1, 10);
  const auto kind = in.range(0, 4);
  const bool adaptive = in.flag();
  specdec::suffix_cache<std::int32_t, int> cache;
  std::vector<std::int32_t> committed(static_cast<std::size_t>(in.range(0, 48)));
  for (auto& t : committed) t = static_cast<std::int32_t>(in.range(0, vocab - 1));
  try {
    index_t longest = 0;
    any_drafter d = [&]() -> any_drafter {
      switch (kind) {
        case 0: {
          const specdec::ngram_options o{.max_ngram = in.range(0, 6), .min_ngram = in.range(0, 4), .branches = in.range(0, 5),
                                         .max_history = in.range(-1, 40)};
          longest = in.range(-1, 40);
          return specdec::ngram_drafter({.options = o, .longest = longest, .adaptive = adaptive, .by_match_length = in.flag()});
        }
        case 1: {
          cache.start_request(1, committed);
          const specdec::suffix_options o{.max_spec_tokens = in.range(-1, 40), .max_spec_factor = in.value(),
                                          .min_token_prob = in.value(), .tree = in.flag()};
          longest = in.range(-1, 40);
          return specdec::suffix_drafter<std::int32_t, int>(cache, 1, {.options = o, .longest = longest, .adaptive = adaptive,
                                                                        .by_match = in.flag()});
        }
        case 2: {
          longest = in.range(-1, 8);
          const double threshold = in.weight();
          auto stop = in.flag() ? std::function<bool(double, index_t)>([threshold](double p, index_t) { return p < threshold; })
                                : std::function<bool(double, index_t)>();
          return specdec::chain_drafter<specdec::eigen>(b, {.longest = longest, .adaptive = adaptive, .stop = stop});
        }
        case 4: {
          const specdec::block_drafter<specdec::eigen>::parameters p{
              .block_size = in.range(1, 9), .mask_token = static_cast<std::int32_t>(in.range(-1, vocab - 1)), .top_k = in.range(0, 4),
              .nodes = in.range(-1, 16), .adaptive = adaptive, .shrink_block = in.flag()};
          longest = p.nodes > 0 ? p.nodes : p.block_size - 1;
          return specdec::block_drafter<specdec::eigen>(b, p);
        }
        default: {
          specdec::dynamic_tree_config c;
          c.top_k = in.range(-1, 4);
          c.depth = in.range(-1, 4);
          c.total_tokens = in.range(0, 24);
          longest = c.total_tokens - 1;
          return specdec::eagle2_drafter<specdec::eigen>(b, c, adaptive);
        }
      }
    }();
    const index_t steps = in.range(1, 6);
    for (index_t s = 0; s < steps; ++s) {
      const float temperature = in.flag() ? in.value() : 0.0f;
      const specdec::draft_context ctx{.committed = committed, .temperature = temperature, .rng = specdec::philox_stream{in.u64(), 0}};
      const specdec::drafted out = std::visit(
          [&](auto& drafter) {
            const specdec::draft_request* r = drafter.begin(ctx);
            index_t requests = 0;
            if constexpr (specdec::model_drafter<std::decay_t<decltype(drafter)>>) {
              while (r != nullptr) {
                check_request(*r, vocab);
                ++requests;
                fuzz::require(requests <= 64, "a step that never ends", requests);
                std::vector<float> logits(static_cast<std::size_t>(r->logits_rows() * vocab));
                for (auto& v : logits) v = in.value();
                r = drafter.advance(specdec::matrix_view<const float>(logits.data(), r->logits_rows(), vocab));
              }
            } else {
              fuzz::require(r == nullptr, "a drafter without advance() returned a request");
            }
            return drafter.finish();
          },
          d);
      specdec::validate(out.tree, vocab);
      fuzz::require(out.tree.token[0] == committed.back(), "the root is the context's last token", out.tree.token[0]);
      fuzz::require(out.tree.max_depth() <= longest, "draft deeper than longest", out.tree.max_depth(), longest);
      if (!out.draft_rows.empty())
        fuzz::require(out.draft_rows.size() == static_cast<std::size_t>(out.tree.size()) &&
                          out.probs.size() % static_cast<std::size_t>(vocab) == 0,
                      "sampled rows sized to the tree", static_cast<long long>(out.draft_rows.size()), out.tree.size());
      // Feedback: a path of random length and random times; a valid one must be accepted.
      std::vector<std::int32_t> path(static_cast<std::size_t>(in.range(0, out.tree.max_depth() + 1)));
      const double target = in.flag() ? static_cast<double>(in.value()) : 1e-3, draft = in.flag() ? static_cast<double>(in.value()) : 0.0;
      const bool valid = static_cast<index_t>(path.size()) <= out.tree.max_depth() && std::isfinite(target) && target >= 0 &&
                         std::isfinite(draft) && draft >= 0;
      try {
        std::visit([&](auto& drafter) { drafter.feedback({.accepted_nodes = path, .target_seconds = target, .draft_seconds = draft}); }, d);
      } catch (const specdec::invalid_argument&) {
        fuzz::require(!valid, "valid feedback rejected", static_cast<long long>(path.size()), out.tree.max_depth());
        return 0;
      }
      fuzz::require(valid, "invalid feedback accepted", static_cast<long long>(path.size()), out.tree.max_depth());
      const std::vector<std::int32_t> next = {static_cast<std::int32_t>(in.range(0, vocab - 1))};
      if (kind == 1) cache.add_active_response(1, next);
      committed.push_back(next[0]);
    }
  } catch (const specdec::invalid_argument&) {
  }
  return 0;
}
