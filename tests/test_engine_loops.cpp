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
#include <specdec/tree/block_drafter.hpp>
#include <specdec/tree/drafter.hpp>
#include <specdec/tree/drafters.hpp>
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

// [adding-a-drafter]
/// A one-level tree: the root's `width` most likely children under the draft model, or nothing when
/// the policy finds that drafting does not pay.
class top_children_drafter {
 public:
  using memory_space = specdec::host_space;  // where advance() reads logits
  explicit top_children_drafter(index_t width) : width_(width), policy_(/*longest=*/1) {}

  const specdec::draft_request* begin(const specdec::draft_context& context) {
    tree_ = specdec::make_tree({context.root()}, {-1});
    if (policy_.choose() == 0) return nullptr;  // verify the root alone this step
    // One row: the root at depth 0, continuing nothing, attending itself (and the cached prefix).
    request_ = {.tokens = {context.root()}, .depth = {0}, .parent_row = {-1}, .mask = {1}, .mask_cols = 1};
    return &request_;
  }
  const specdec::draft_request* advance(specdec::matrix_view<const float> logits) {
    std::vector<float> values(static_cast<std::size_t>(width_));
    std::vector<std::int32_t> ids(static_cast<std::size_t>(width_));
    backend_.row_topk(logits, width_, specdec::matrix_view<float>(values.data(), 1, width_),
                      specdec::matrix_view<std::int32_t>(ids.data(), 1, width_));
    std::vector<std::int32_t> parents(ids.size() + 1, 0);
    parents[0] = -1;
    ids.insert(ids.begin(), tree_.token[0]);
    tree_ = specdec::make_tree(ids, parents);
    return nullptr;  // no further forward
  }
  specdec::drafted finish() { return {.tree = tree_}; }
  void feedback(const specdec::draft_feedback& f) {
    policy_.verified(ssize(f.accepted_nodes), tree_.max_depth());
    if (f.target_seconds > 0) policy_.target_forward_timed(tree_.size(), f.target_seconds);
    if (f.draft_seconds > 0) policy_.draft_token_timed(f.draft_seconds);
  }

 private:
  index_t width_;
  specdec::policy::draft_length_policy policy_;
  specdec::eigen backend_;
  specdec::draft_request request_;
  specdec::draft_tree tree_;
};
static_assert(specdec::drafter<top_children_drafter>);
// [adding-a-drafter]

/// Draft rows and target forwards a protocol loop ran.
struct loop_counts {
  index_t draft_rows = 0, target_forwards = 0;
};

// [drafter-loop]
template <specdec::drafter D>
std::vector<std::int32_t> speculate(D& drafter, toy_model& target, toy_model& draft_model,
                                    std::vector<std::int32_t> committed, index_t new_tokens, loop_counts& counts) {
  specdec::eigen backend;
  const index_t start = ssize(committed);
  while (ssize(committed) < start + new_tokens) {
    const index_t cached = target.cached();  // every committed token but the root
    // The draft model catches up on committed tokens it has not run; the root is the drafter's.
    if (draft_model.cached() < cached)
      draft_model.forward(std::span(committed).subspan(draft_model.cached(), cached - draft_model.cached()),
                          iota_positions(draft_model.cached(), cached - draft_model.cached()));
    index_t rows = 0;
    const specdec::drafted d = specdec::run_drafter(drafter, {.committed = committed}, [&](const specdec::draft_request& r) {
      rows += r.rows();
      return draft_model.forward(r.tokens, r.positions(cached), r.attention_mask(cached));
    });
    draft_model.crop(cached);  // the draft's rows go; the engine owns the draft model's cache
    const auto logits = target.forward(d.tree.token, specdec::tree_positions(d.tree, cached), specdec::tree_mask_dense(d.tree, cached));
    const auto result = specdec::sampling::verify_greedy(backend, logits, {.tree = d.tree});
    drafter.feedback({.accepted_nodes = result.accepted_nodes,
                      .target_seconds = 1e-3,  // measured by a clock, in an engine
                      .draft_seconds = 1e-4 * static_cast<double>(rows)});
    target.keep(cached, result.kept_nodes());
    committed.insert(committed.end(), result.tokens.begin(), result.tokens.end());
    counts.draft_rows += rows;
    ++counts.target_forwards;
  }
  committed.resize(static_cast<std::size_t>(start + new_tokens));
  return committed;
}
// [drafter-loop]

/// Runs `speculate` from a fresh target and draft model (skew: how often the draft disagrees).
template <specdec::drafter D>
std::vector<std::int32_t> speculated(D& drafter, std::uint32_t skew, index_t new_tokens, loop_counts& counts) {
  toy_model target, draft_model(skew);
  target.forward(std::span(prompt).first(prompt.size() - 1), iota_positions(0, ssize(prompt) - 1));
  const auto all = speculate(drafter, target, draft_model, prompt, new_tokens, counts);
  return std::vector<std::int32_t>(all.begin() + ssize(prompt), all.end());
}

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

TEST_CASE("docs/drafters.md: every library drafter, and one of the engine's own, decodes as plain greedy through the protocol") {
  const index_t n = 96;
  const auto want = greedy_reference(prompt, n);
  specdec::eigen backend;
  {
    // A draft model identical to the target: a chain of 4 is always accepted when the rows, positions
    // and masks the protocol asks for are right, so every forward commits exactly 5 tokens.
    specdec::chain_drafter<specdec::eigen> chain(backend, {.longest = 4, .adaptive = false});
    loop_counts counts;
    CHECK(speculated(chain, /*skew=*/0, n, counts) == want);
    CHECK(counts.target_forwards == (n + 4) / 5);
    CHECK(counts.draft_rows == 4 * counts.target_forwards);
  }
  {
    // Dynamic trees, fixed size: a disagreeing draft still pays.
    specdec::eagle2_drafter<specdec::eigen> eagle(backend, {.top_k = 3, .depth = 4, .total_tokens = 12}, /*adaptive=*/false);
    loop_counts counts;
    CHECK(speculated(eagle, /*skew=*/5, n, counts) == want);
    MESSAGE("eagle2_drafter: ", n, " tokens in ", counts.target_forwards, " target forwards");
    CHECK(static_cast<double>(n) / static_cast<double>(counts.target_forwards) > 1.5);
    CHECK(counts.draft_rows == counts.target_forwards * (1 + 4 * 3));
  }
  {
    // Sized by the policy: an identical draft pays, so the trees grow past the first probe.
    specdec::eagle2_drafter<specdec::eigen> eagle(backend, {.top_k = 3, .depth = 4, .total_tokens = 12});
    loop_counts counts;
    CHECK(speculated(eagle, /*skew=*/0, n, counts) == want);
    CHECK(static_cast<double>(n) / static_cast<double>(counts.target_forwards) > 2.0);
  }
  {
    specdec::ngram_drafter lookup({.options = {.branches = 2}, .longest = 8});
    loop_counts counts;
    CHECK(speculated(lookup, /*skew=*/0, n, counts) == want);
    CHECK(counts.draft_rows == 0);
    CHECK(counts.target_forwards < n);
  }
  {
    top_children_drafter own(/*width=*/2);
    loop_counts counts;
    CHECK(speculated(own, /*skew=*/0, n, counts) == want);
    CHECK(counts.target_forwards < n);  // the draft's top child is the target's token: one bonus per forward
  }
}

namespace {

/// A block model made of an autoregressive one: for a block request (the root, then mask tokens, each
/// row seeing all), row j > 0 gets the logits the autoregressive toy model gives after its own argmax
/// chain to depth j - 1: what a perfectly trained block drafter of that model predicts. Row 0 gets
/// row 1's. The chain is run on the model's cache and cropped again.
class block_oracle {
 public:
  explicit block_oracle(toy_model& ar) : ar_(ar) {}
  specdec::matrix_view<const float> forward(const specdec::draft_request& r, index_t cached, std::int32_t mask_token) {
    const index_t rows = r.rows(), v = toy_model::vocab, before = ar_.cached();
    REQUIRE(rows >= 2);
    CHECK(r.mask == std::vector<std::uint8_t>(static_cast<std::size_t>(rows * rows), 1));
    CHECK(r.positions(cached) == iota_positions(cached, rows));
    for (index_t j = 1; j < rows; ++j) CHECK(r.tokens[static_cast<std::size_t>(j)] == mask_token);
    logits_.assign(static_cast<std::size_t>(rows * v), 0.0f);
    std::int32_t token = r.tokens[0];
    for (index_t j = 1; j < rows; ++j) {
      const auto out = ar_.forward(std::vector<std::int32_t>{token}, std::vector<std::int64_t>{cached + j - 1});
      std::copy(out.row(0), out.row(0) + v, logits_.begin() + j * v);
      token = static_cast<std::int32_t>(std::max_element(out.row(0), out.row(0) + v) - out.row(0));
    }
    std::copy(logits_.begin() + v, logits_.begin() + 2 * v, logits_.begin());
    ar_.crop(before);
    return {logits_.data(), rows, v};
  }

 private:
  toy_model& ar_;
  std::vector<float> logits_;
};

/// The drafter-loop above with a block model answering the requests.
std::vector<std::int32_t> block_speculated(specdec::block_drafter<specdec::eigen>& drafter, std::int32_t mask_token, std::uint32_t skew,
                                           index_t new_tokens, loop_counts& counts) {
  specdec::eigen backend;
  toy_model target, ar(skew);
  block_oracle model(ar);
  std::vector<std::int32_t> committed = prompt;
  target.forward(std::span(prompt).first(prompt.size() - 1), iota_positions(0, ssize(prompt) - 1));
  const index_t start = ssize(committed);
  while (ssize(committed) < start + new_tokens) {
    const index_t cached = target.cached();
    if (ar.cached() < cached)
      ar.forward(std::span(committed).subspan(ar.cached(), cached - ar.cached()), iota_positions(ar.cached(), cached - ar.cached()));
    index_t rows = 0;
    const specdec::drafted d = specdec::run_drafter(drafter, {.committed = committed}, [&](const specdec::draft_request& r) {
      rows += r.rows();
      return model.forward(r, cached, mask_token);
    });
    const auto logits = target.forward(d.tree.token, specdec::tree_positions(d.tree, cached), specdec::tree_mask_dense(d.tree, cached));
    const auto result = specdec::sampling::verify_greedy(backend, logits, {.tree = d.tree});
    drafter.feedback({.accepted_nodes = result.accepted_nodes, .target_seconds = 1e-3, .draft_seconds = rows > 0 ? 2e-4 : 0.0});
    target.keep(cached, result.kept_nodes());
    committed.insert(committed.end(), result.tokens.begin(), result.tokens.end());
    counts.draft_rows += rows;
    ++counts.target_forwards;
  }
  return std::vector<std::int32_t>(committed.begin() + start, committed.begin() + start + new_tokens);
}

}  // namespace

TEST_CASE("block_drafter: chains and trees from one block forward decode as plain greedy through the protocol") {
  const index_t n = 96;
  const auto want = greedy_reference(prompt, n);
  specdec::eigen backend;
  {
    // A block model agreeing with the target: a chain of 4 is always accepted, 5 tokens per forward.
    specdec::block_drafter<specdec::eigen> chain(backend, {.block_size = 5, .mask_token = 63, .adaptive = false});
    loop_counts counts;
    CHECK(block_speculated(chain, 63, /*skew=*/0, n, counts) == want);
    CHECK(counts.target_forwards == (n + 4) / 5);
    CHECK(counts.draft_rows == 5 * counts.target_forwards);  // one block forward per step
  }
  {
    // A model that disagrees on one context in four, the target's token then its second best (skew
    // 63): per-position top-3 trees hold it where the chain misses, and take fewer forwards.
    specdec::block_drafter<specdec::eigen> tree(backend, {.block_size = 6, .mask_token = 63, .top_k = 3, .nodes = 12, .adaptive = false});
    specdec::block_drafter<specdec::eigen> chain(backend, {.block_size = 6, .mask_token = 63, .adaptive = false});
    loop_counts with_tree, with_chain;
    CHECK(block_speculated(tree, 63, /*skew=*/63, n, with_tree) == want);
    CHECK(block_speculated(chain, 63, /*skew=*/63, n, with_chain) == want);
    MESSAGE("block_drafter: ", n, " tokens in ", with_tree.target_forwards, " target forwards (tree), ", with_chain.target_forwards,
            " (chain)");
    CHECK(static_cast<double>(n) / static_cast<double>(with_tree.target_forwards) > 1.5);
    CHECK(with_tree.target_forwards < with_chain.target_forwards);
  }
  {
    // Sized by the policy: an agreeing model pays, so the drafts grow past the first probe.
    specdec::block_drafter<specdec::eigen> adaptive(backend, {.block_size = 8, .mask_token = 63, .shrink_block = true});
    loop_counts counts;
    CHECK(block_speculated(adaptive, 63, /*skew=*/0, n, counts) == want);
    CHECK(static_cast<double>(n) / static_cast<double>(counts.target_forwards) > 2.0);
  }
}
