// SPDX-License-Identifier: Apache-2.0
// The two loops docs/engine.md shows an engine writing (EAGLE-2 draft-and-verify, prompt lookup),
// compiled and run here against a toy engine whose forward honours positions and the attention mask
// the way a transformer does. Between the `// [name]` markers is exactly the text of the docs
// (tests/docs/check_snippets.py compares them, in ctest). What is asserted: the greedy output of each
// loop equals plain greedy decoding of the same target token for token (a wrong mask, position or
// KV-cache step changes the context a row sees and so its token), and drafting paid (more than one
// token per target forward).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/mask/tree_mask.hpp>
#include <specdec/policy/draft_length.hpp>
#include <specdec/sampling/sampling.hpp>
#include <specdec/tree/eagle2.hpp>
#include <specdec/tree/ngram.hpp>

namespace {

using specdec::index_t;

/// A model whose next-token logits depend on the last two tokens a row can see (ordered by position)
/// and on whether it sees exactly one row per position before it:
/// a cache of (token, position) rows, a forward that appends rows and attends under a mask, and the
/// KV operations an engine has (crop, keep the accepted path). `skew` makes a drafter that disagrees
/// with the target on about one context in four. Logits are a permutation of 0..V-1: no ties.
class toy_model {
 public:
  static constexpr index_t vocab = 64;
  explicit toy_model(std::uint32_t skew = 0) : skew_(skew) {}

  index_t cached() const noexcept { return static_cast<index_t>(tokens_.size()); }
  index_t forwards() const noexcept { return forwards_; }

  /// Appends the rows and returns their logits `[n x V]`. `allowed` `[n x (cached + n)]` row-major,
  /// empty for causal.
  specdec::matrix_view<const float> forward(std::span<const std::int32_t> tokens, std::span<const std::int64_t> positions,
                                            std::span<const std::uint8_t> allowed = {}) {
    REQUIRE(tokens.size() == positions.size());
    const index_t before = cached(), n = static_cast<index_t>(tokens.size()), cols = before + n;
    REQUIRE((allowed.empty() || static_cast<index_t>(allowed.size()) == n * cols));
    ++forwards_;
    tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
    positions_.insert(positions_.end(), positions.begin(), positions.end());
    logits_.assign(static_cast<std::size_t>(n * vocab), 0.0f);
    for (index_t i = 0; i < n; ++i) {
      std::int64_t best = -1, second = -1;  // positions of the last two visible rows
      std::int32_t a = 0, b = 0;
      std::int64_t seen = 0;
      for (index_t j = 0; j < cols; ++j) {
        const bool visible = allowed.empty() ? j <= before + i : allowed[static_cast<std::size_t>(i * cols + j)] != 0;
        if (!visible) continue;
        ++seen;
        const std::int64_t p = positions_[static_cast<std::size_t>(j)];
        CHECK(p <= positions[static_cast<std::size_t>(i)]);  // a row never sees its future
        if (p > best) {
          second = best, a = b;
          best = p, b = tokens_[static_cast<std::size_t>(j)];
        } else if (p > second) {
          second = p, a = tokens_[static_cast<std::size_t>(j)];
        }
      }
      // A row that sees exactly its context (positions 0..p, one row each) sees p + 1 rows; a row
      // that sees a sibling, misses an ancestor or sits at the wrong position gets other logits.
      const auto misseen = static_cast<std::uint32_t>(seen - positions[static_cast<std::size_t>(i)] - 1);
      std::uint32_t h = static_cast<std::uint32_t>(a) * 2654435761u ^ static_cast<std::uint32_t>(b) * 40503u ^ misseen * 0x9E3779B9u;
      h ^= h >> 13;
      const bool skewed = skew_ != 0 && (h >> 7) % 4 == 0;
      for (index_t v = 0; v < vocab; ++v)
        logits_[static_cast<std::size_t>(i * vocab + v)] =
            static_cast<float>((h + static_cast<std::uint32_t>(v) * 37u + (skewed ? skew_ : 0u)) % vocab);
    }
    return {logits_.data(), n, vocab};
  }
  /// The last row of a forward, as a `[1 x V]` view.
  specdec::matrix_view<const float> last_row(specdec::matrix_view<const float> rows) const {
    return {rows.row(rows.rows() - 1), 1, vocab};
  }
  void crop(index_t rows) {
    tokens_.resize(static_cast<std::size_t>(rows));
    positions_.resize(static_cast<std::size_t>(rows));
  }
  /// Rows [0, prefix) stay, then rows prefix + kept[i] in order (the accepted path of a verified tree).
  void keep(index_t prefix, std::span<const std::int32_t> kept) {
    for (std::size_t i = 0; i < kept.size(); ++i) {
      tokens_[static_cast<std::size_t>(prefix) + i] = tokens_[static_cast<std::size_t>(prefix + kept[i])];
      positions_[static_cast<std::size_t>(prefix) + i] = positions_[static_cast<std::size_t>(prefix + kept[i])];
    }
    crop(prefix + static_cast<index_t>(kept.size()));
  }

 private:
  std::uint32_t skew_;
  index_t forwards_ = 0;
  std::vector<std::int32_t> tokens_;
  std::vector<std::int64_t> positions_;
  std::vector<float> logits_;
};

std::vector<std::int64_t> iota_positions(index_t first, index_t n) {
  std::vector<std::int64_t> p(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) p[static_cast<std::size_t>(i)] = first + i;
  return p;
}

/// Plain greedy decoding: one forward per token.
std::vector<std::int32_t> greedy_reference(const std::vector<std::int32_t>& prompt, index_t new_tokens) {
  toy_model target;
  auto logits = target.forward(prompt, iota_positions(0, static_cast<index_t>(prompt.size())));
  std::vector<std::int32_t> out;
  while (static_cast<index_t>(out.size()) < new_tokens) {
    const auto row = target.last_row(logits);
    const auto token = static_cast<std::int32_t>(std::max_element(row.row(0), row.row(0) + row.cols()) - row.row(0));
    out.push_back(token);
    logits = target.forward(std::vector<std::int32_t>{token}, std::vector<std::int64_t>{target.cached()});
  }
  return out;
}

const std::vector<std::int32_t> prompt = {5, 9, 14, 5, 9, 22, 31, 5, 9, 14, 40, 2, 17};

}  // namespace

TEST_CASE("docs/engine.md: the EAGLE-2 draft-and-verify loop decodes exactly as plain greedy decoding") {
  const index_t max_new_tokens = 96;
  toy_model target, drafter(/*skew=*/5);
  specdec::eigen backend;
  // The prompt is prefilled in both models, but for its last token: it is the first root.
  const std::span<const std::int32_t> context(prompt.data(), prompt.size() - 1);
  target.forward(context, iota_positions(0, target.cached() + static_cast<index_t>(context.size())));
  drafter.forward(context, iota_positions(0, drafter.cached() + static_cast<index_t>(context.size())));
  std::vector<std::int32_t> out, pending = {prompt.back()};  // tokens the drafter has not seen yet
  // [eagle2-loop]
  specdec::eagle2_tree_builder<specdec::eigen> builder(backend, {.top_k = 3, .depth = 4, .total_tokens = 12});
  while (static_cast<index_t>(out.size()) < max_new_tokens) {
    const index_t cached = target.cached();
    const auto root_logits = drafter.forward(pending, iota_positions(drafter.cached(), ssize(pending)));
    auto step = builder.begin(drafter.last_row(root_logits), pending.back());
    while (!builder.expansions_complete())
      step = builder.expand(drafter.forward(step.input_ids, step.positions(cached), step.attention_mask(cached + 1)));
    drafter.crop(cached + 1);
    const specdec::draft_tree tree = builder.finish_single().tree;
    const auto logits = target.forward(tree.token, specdec::tree_positions(tree, cached), specdec::tree_mask_dense(tree, cached));
    const auto result = specdec::sampling::verify_greedy(backend, logits, {.tree = tree});
    target.keep(cached, result.kept_nodes());
    pending.assign(result.tokens.begin(), result.tokens.end());
    out.insert(out.end(), result.tokens.begin(), result.tokens.end());
  }
  // [eagle2-loop]
  out.resize(static_cast<std::size_t>(max_new_tokens));
  CHECK(out == greedy_reference(prompt, max_new_tokens));
  const index_t forwards = target.forwards() - 1;  // the prefill aside
  MESSAGE("EAGLE-2 loop: ", max_new_tokens, " tokens in ", forwards, " target forwards");
  CHECK(static_cast<double>(max_new_tokens) / static_cast<double>(forwards) > 1.5);  // the tree paid
}

TEST_CASE("docs/engine.md: the prompt-lookup loop decodes exactly as plain greedy decoding") {
  const index_t max_new_tokens = 96;
  toy_model target;
  specdec::eigen backend;
  std::vector<std::int32_t> history = prompt;
  target.forward(std::span<const std::int32_t>(history).first(history.size() - 1), iota_positions(0, ssize(history) - 1));
  // [lookup-loop]
  specdec::policy::draft_length_policy policy(/*longest=*/8);
  while (ssize(history) < ssize(prompt) + max_new_tokens) {
    const index_t cached = target.cached();
    const specdec::draft_tree tree = specdec::propose_ngram(history, policy.choose(), {.branches = 2});
    const auto logits = target.forward(tree.token, specdec::tree_positions(tree, cached), specdec::tree_mask_dense(tree, cached));
    policy.target_forward_timed(tree.size(), /*seconds=*/1e-3 * static_cast<double>(tree.size()));
    const auto result = specdec::sampling::verify_greedy(backend, logits, {.tree = tree});
    policy.verified(ssize(result.accepted_nodes), tree.max_depth());
    target.keep(cached, result.kept_nodes());
    history.insert(history.end(), result.tokens.begin(), result.tokens.end());
  }
  // [lookup-loop]
  const index_t forwards = target.forwards() - 1;
  MESSAGE("prompt-lookup loop: ", max_new_tokens, " tokens in ", forwards, " target forwards");
  history.resize(prompt.size() + static_cast<std::size_t>(max_new_tokens));
  CHECK(std::vector<std::int32_t>(history.begin() + ssize(prompt), history.end()) == greedy_reference(prompt, max_new_tokens));
  CHECK(forwards < max_new_tokens);  // lookup found repeats (the toy target cycles through contexts)
}
