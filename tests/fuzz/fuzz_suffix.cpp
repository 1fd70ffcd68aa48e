// SPDX-License-Identifier: Apache-2.0
// SuffixDecoding (tree/suffix.hpp) driven by arbitrary operation sequences: a suffix_tree<int32_t>
// (max_depth 1..16, small vocabularies, tokens at the int32 edges, several sequence ids, negative ids,
// copies) and a suffix_cache<int32_t, int> under small request and token bounds (start, add, stop,
// evict, speculate, copies, and every call also where it is invalid). Each call throws
// specdec::invalid_argument exactly when the state the harness tracks itself says it must, and nothing
// else; otherwise the contract holds after every operation: check_integrity() is empty, the stored
// sequences and tokens() are what was added (the global tree holds exactly the cached requests'
// responses), the cache's bounds hold, and memory_bytes() of an emptied tree stays within what its
// peak contents need. Every draft keeps max_spec_tokens, parents earlier, probabilities in (0, 1],
// at least min_token_prob and best-first, a path draft never branches and always takes the most
// frequent continuation, and every draft path, after the matched context, occurs in a sequence of the
// tree it came from, its probability the ratio of the occurrence counts; suffix_draft_tree keeps it.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <limits>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include <specdec/tree/suffix.hpp>

#include "fuzz_input.hpp"

namespace {

using specdec::index_t;
using tokens_t = std::vector<std::int32_t>;
using sequences_t = std::vector<std::span<const std::int32_t>>;

constexpr std::size_t max_stored = 256;  // tokens stored at once, at most (keeps an input fast)
constexpr int max_steps = 64;

/// A broken invariant, or none (`what` null): the check of one draft against one tree's sequences.
struct finding {
  const char* what = nullptr;
  long long a = 0, b = 0;
};

/// The tokens of one input: `vocab` consecutive ids from `base` (0, negative, or at the int32 edges).
struct alphabet {
  std::int32_t base = 0;
  std::int32_t vocab = 1;
  std::int32_t token(fuzz::input& in) const { return base + static_cast<std::int32_t>(in.range(0, vocab - 1)); }
};

alphabet read_alphabet(fuzz::input& in) {
  static constexpr std::int32_t vocabs[] = {1, 2, 3, 4, 6, 50};
  static constexpr std::int32_t bases[] = {0, 0, 0, -3, std::numeric_limits<std::int32_t>::min(),
                                           std::numeric_limits<std::int32_t>::max() - 49};
  alphabet a;
  a.vocab = vocabs[in.byte() % 6];
  a.base = bases[in.byte() % 6];
  return a;
}

/// `n` tokens: random, a slice of `source` (so that contexts and new sequences repeat stored text), or
/// a short random block repeated.
tokens_t make_tokens(fuzz::input& in, const alphabet& a, std::size_t n, std::span<const std::int32_t> source) {
  tokens_t out;
  switch (in.byte() % 4) {
    case 0:
    case 1:
      for (std::size_t i = 0; i < n; ++i) out.push_back(a.token(in));
      break;
    case 2: {
      if (source.empty()) break;
      const auto start = static_cast<std::size_t>(in.range(0, static_cast<std::int64_t>(source.size()) - 1));
      for (std::size_t i = start; i < source.size() && out.size() < n; ++i) out.push_back(source[i]);
      if (in.flag() && out.size() < n) out.push_back(a.token(in));
      break;
    }
    default: {
      tokens_t block(static_cast<std::size_t>(in.range(1, 4)));
      for (auto& t : block) t = a.token(in);
      for (std::size_t i = 0; i < n; ++i) out.push_back(block[i % block.size()]);
      break;
    }
  }
  return out;
}

specdec::suffix_options read_options(fuzz::input& in) {
  specdec::suffix_options o;
  o.max_spec_tokens = in.flag() ? in.extreme() : in.range(0, 40);
  o.max_spec_factor = in.byte() < 200 ? static_cast<float>(in.range(0, 32)) / 8.0f : in.value();
  o.max_spec_offset = in.byte() < 200 ? static_cast<float>(in.range(-16, 16)) / 4.0f : in.value();
  switch (in.byte() % 4) {
    case 0: o.min_token_prob = 0.0f; break;
    case 3: o.min_token_prob = in.value(); break;
    default: o.min_token_prob = in.weight(); break;
  }
  o.tree = in.flag();
  return o;
}

bool valid(const specdec::suffix_options& o) {
  return o.max_spec_tokens >= 0 && o.max_spec_tokens <= (index_t{1} << 24) && std::isfinite(o.max_spec_factor) &&
         std::isfinite(o.max_spec_offset) && std::isfinite(o.min_token_prob);
}

/// Whether `f()` threw specdec::invalid_argument (any other exception escapes: a finding).
template <class F>
bool throws(F&& f) {
  try {
    f();
  } catch (const specdec::invalid_argument&) {
    return true;
  }
  return false;
}

/// `draft`, drafted after `context` by a tree of depth `depth` holding `seqs`, against the occurrences
/// of its paths in `seqs`. A string of at most `depth` tokens has a node count equal to its number of
/// occurrences, so a node's probability is occurrences(matched context + path) / occurrences(matched
/// context).
finding check_draft(const sequences_t& seqs, index_t depth, std::span<const std::int32_t> context,
                    const specdec::suffix_options& o, const specdec::suffix_draft<std::int32_t>& d) {
  const std::size_t n = d.token.size();
  if (d.parent.size() != n || d.prob.size() != n) return {"draft arrays of different lengths", static_cast<long long>(n)};
  if (d.size() > o.max_spec_tokens) return {"draft longer than max_spec_tokens", d.size(), o.max_spec_tokens};
  const index_t m = d.match_length;
  const auto context_size = static_cast<index_t>(context.size());
  if (m < 0 || (m > 0 && m >= context_size)) return {"match_length outside [0, context size - 1]", m, context_size};
  if (n > 0 && m == 0) return {"a draft without a matched context", static_cast<long long>(n)};
  if (m > depth) return {"match longer than max_depth", m, depth};
  float score = 0.0f;
  for (const float p : d.prob) score += p;
  if (std::bit_cast<std::uint32_t>(score) != std::bit_cast<std::uint32_t>(d.score))
    return {"score is not the float sum of the probabilities in order", static_cast<long long>(n)};
  if (m == 0) return {};
  // occ[0]: occurrences (sequence, start) of the matched context; occ[i + 1]: those that continue
  // with the path to node i.
  const auto matched = context.subspan(context.size() - static_cast<std::size_t>(m));
  std::vector<std::vector<std::pair<std::size_t, std::size_t>>> occ(n + 1);
  for (std::size_t s = 0; s < seqs.size(); ++s)
    for (std::size_t start = 0; start + matched.size() <= seqs[s].size(); ++start)
      if (std::equal(matched.begin(), matched.end(), seqs[s].begin() + static_cast<std::ptrdiff_t>(start)))
        occ[0].push_back({s, start});
  if (occ[0].empty()) return {"the matched context occurs in no stored sequence", m};
  std::vector<index_t> level(n);
  std::map<std::pair<std::int32_t, std::int32_t>, std::size_t> children;  // (parent, token): siblings differ
  for (std::size_t i = 0; i < n; ++i) {
    const std::int32_t p = d.parent[i];
    const auto ii = static_cast<long long>(i);
    if (p < -1 || p >= static_cast<std::int32_t>(i)) return {"parent neither -1 nor an earlier node", ii, p};
    if (!o.tree && p != static_cast<std::int32_t>(i) - 1) return {"a path draft branches", ii, p};
    if (!children.emplace(std::pair{p, d.token[i]}, i).second) return {"two siblings with one token", ii, d.token[i]};
    level[i] = p < 0 ? 1 : level[static_cast<std::size_t>(p)] + 1;
    if (m + level[i] > depth) return {"matched context + draft path deeper than max_depth", m + level[i], depth};
    const float q = d.prob[i];
    if (!(q > 0.0f && q <= 1.0f)) return {"probability outside (0, 1]", ii};
    if (o.min_token_prob <= 1.0f && q < o.min_token_prob) return {"probability below min_token_prob", ii};
    if (i > 0 && q > d.prob[i - 1]) return {"probabilities not in best-first (non-increasing) order", ii};
    const auto& from = occ[static_cast<std::size_t>(p + 1)];
    auto& to = occ[i + 1];
    const auto offset = static_cast<std::size_t>(m + level[i] - 1);  // the node's token, from an occurrence's start
    std::map<std::int32_t, std::size_t> next;  // every continuation's occurrences (path drafts)
    for (const auto& [s, start] : from) {
      if (start + offset >= seqs[s].size()) continue;
      const std::int32_t t = seqs[s][start + offset];
      if (t == d.token[i]) to.push_back({s, start});
      if (!o.tree) ++next[t];
    }
    if (to.empty()) return {"a draft path, after the matched context, occurs in no stored sequence", ii, m};
    const double want = static_cast<double>(to.size()) / static_cast<double>(occ[0].size());
    if (std::abs(static_cast<double>(q) - want) > 1e-4 * want)
      return {"probability differs from the ratio of occurrences", ii, static_cast<long long>(to.size())};
    for (const auto& [t, count] : next)
      if (count > to.size()) return {"a path draft leaves the most frequent continuation", ii, t};
  }
  return {};
}

/// suffix_draft_tree: level order keeping the draft's order within a level, probabilities as scores;
/// invalid_argument exactly when a token is negative.
void check_draft_tree(fuzz::input& in, const specdec::suffix_draft<std::int32_t>& d) {
  const auto root = static_cast<std::int32_t>(in.range(0, 3));
  const bool negative = std::any_of(d.token.begin(), d.token.end(), [](std::int32_t t) { return t < 0; });
  specdec::draft_tree t;
  const bool threw = throws([&] { t = specdec::suffix_draft_tree(root, d); });
  fuzz::require(threw == negative, "suffix_draft_tree throws exactly on a negative token", threw, negative);
  if (threw) return;
  const std::size_t n = d.token.size();
  fuzz::require(t.size() == static_cast<index_t>(n + 1) && t.token[0] == root && t.score.size() == n + 1,
                "suffix_draft_tree: the root and one node per draft token", t.size(), static_cast<long long>(n));
  std::vector<std::int32_t> level(n), position(n);
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < n; ++i)
    level[i] = d.parent[i] < 0 ? 1 : level[static_cast<std::size_t>(d.parent[i])] + 1;
  for (std::int32_t l = 1; order.size() < n; ++l)
    for (std::size_t i = 0; i < n; ++i)
      if (level[i] == l) order.push_back(i);
  for (std::size_t k = 0; k < n; ++k) position[order[k]] = static_cast<std::int32_t>(k + 1);
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t i = order[k];
    const std::int32_t parent = d.parent[i] < 0 ? 0 : position[static_cast<std::size_t>(d.parent[i])];
    fuzz::require(t.token[k + 1] == d.token[i] && t.parent[k + 1] == parent && t.depth[k + 1] == level[i] &&
                      std::bit_cast<std::uint32_t>(t.score[k + 1]) == std::bit_cast<std::uint32_t>(d.prob[i]),
                  "suffix_draft_tree differs from the draft in level order", static_cast<long long>(k + 1),
                  static_cast<long long>(i));
  }
}

/// An emptied tree holds no more than its peak contents need. Where the peak's memory was seen
/// (`peak_bytes`; 0 where the peak was inside a call), removal grows it by free lists and runs only
/// (an int32 per freed node, run or endpoint record: "at most the peak" itself does not hold), at most
/// by half. And its arrays, tables and free lists scale with the most tokens and sequences it held at
/// once (inside calls too), not with everything ever appended: at most 768 bytes a token and 256 a
/// sequence over 2 KiB (fuzzing measures under 300 bytes a token).
void check_memory(std::size_t bytes, std::size_t peak_bytes, std::size_t peak_tokens, std::size_t peak_sequences) {
  if (peak_bytes > 0)
    fuzz::require(bytes <= peak_bytes + peak_bytes / 2, "an emptied tree holds over 1.5 times its peak memory",
                  static_cast<long long>(bytes), static_cast<long long>(peak_bytes));
  const std::size_t bound = 2048 + 768 * peak_tokens + 256 * peak_sequences;
  fuzz::require(bytes <= bound, "an emptied tree holds more memory than its peak contents need",
                static_cast<long long>(bytes), static_cast<long long>(bound));
}

std::int32_t read_sequence_id(fuzz::input& in) {
  const std::uint8_t kind = in.byte();
  if (kind < 232) return static_cast<std::int32_t>(kind % 6);
  static constexpr std::int32_t edges[] = {-1, -2, std::numeric_limits<std::int32_t>::min(),
                                           std::numeric_limits<std::int32_t>::max()};
  return edges[kind % 4];
}

/// A context: the tail of a stored sequence (often), or tokens made as for a sequence.
tokens_t make_context(fuzz::input& in, const alphabet& a, std::span<const std::int32_t> source) {
  const auto n = static_cast<std::size_t>(in.range(0, 20));
  if (!source.empty() && in.byte() < 128) {
    const auto end = static_cast<std::size_t>(in.range(1, static_cast<std::int64_t>(source.size())));
    tokens_t out(source.begin() + static_cast<std::ptrdiff_t>(end - std::min(end, n)),
                 source.begin() + static_cast<std::ptrdiff_t>(end));
    if (in.flag()) out.push_back(a.token(in));
    return out;
  }
  return make_tokens(in, a, n, source);
}

void run_tree(fuzz::input& in) {
  if (in.flag()) {  // construction at the edges
    const index_t depth = in.extreme();
    const bool threw = throws([&] { specdec::suffix_tree<std::int32_t> t(depth); });
    fuzz::require(threw == !(depth >= 1 && depth <= 65536), "suffix_tree(max_depth) throws exactly out of [1, 65536]", depth);
  }
  const index_t depth = in.range(1, 16);
  const alphabet a = read_alphabet(in);
  specdec::suffix_tree<std::int32_t> tree(depth);
  std::map<std::int32_t, tokens_t> stored;  // what the tree must hold
  std::size_t peak_bytes = 0, peak_tokens = 0, peak_sequences = 0;
  const auto source = [&](fuzz::input& from) -> std::span<const std::int32_t> {
    if (stored.empty()) return {};
    auto it = stored.begin();
    std::advance(it, static_cast<std::ptrdiff_t>(from.range(0, static_cast<std::int64_t>(stored.size()) - 1)));
    return it->second;
  };
  const auto total = [&] {
    std::size_t sum = 0;
    for (const auto& [id, s] : stored) sum += s.size();
    return sum;
  };
  for (int step = 0; step < max_steps && !in.empty(); ++step) {
    const std::uint8_t op = in.byte() % 8;
    if (op <= 1) {  // extend
      const std::int32_t id = read_sequence_id(in);
      auto n = static_cast<std::size_t>(in.range(0, 24));
      if (total() + n > max_stored) n = 0;
      const tokens_t tokens = make_tokens(in, a, n, source(in));
      const bool threw = throws([&] { tree.extend(id, tokens); });
      fuzz::require(threw == (id < 0 && !tokens.empty()), "extend throws exactly on a negative id with tokens", id, threw);
      if (!threw && !tokens.empty()) stored[id].insert(stored[id].end(), tokens.begin(), tokens.end());
    } else if (op == 2) {  // append
      const std::int32_t id = read_sequence_id(in);
      const std::int32_t t = a.token(in);
      if (total() >= max_stored) continue;
      const bool threw = throws([&] { tree.append(id, t); });
      fuzz::require(threw == (id < 0), "append throws exactly on a negative id", id, threw);
      if (!threw) stored[id].push_back(t);
    } else if (op == 3) {  // remove one (stored or not, negative ids included), or all
      if (in.flag()) {
        for (const auto& [id, s] : stored) tree.remove(id);
        stored.clear();
      } else {
        const std::int32_t id = read_sequence_id(in);
        tree.remove(id);
        stored.erase(id);
      }
    } else if (op == 4) {  // copy: the copy goes on alone
      if (in.flag()) {
        specdec::suffix_tree<std::int32_t> copy(tree);
        tree = specdec::suffix_tree<std::int32_t>(depth);
        tree = copy;
      } else {
        tree = specdec::suffix_tree<std::int32_t>(tree);
      }
    } else {  // speculate
      const tokens_t context = make_context(in, a, source(in));
      const specdec::suffix_options o = read_options(in);
      specdec::suffix_draft<std::int32_t> d;
      const bool threw = throws([&] { d = tree.speculate(context, o); });
      fuzz::require(threw == !valid(o), "speculate throws exactly on options out of range", threw, o.max_spec_tokens);
      if (threw) continue;
      sequences_t seqs;
      for (const auto& [id, s] : stored) seqs.push_back(tree.sequence(id));
      const finding f = check_draft(seqs, depth, context, o, d);
      if (f.what != nullptr) fuzz::fail(f.what, f.a, f.b);
      check_draft_tree(in, d);
    }
    const std::string broken = tree.check_integrity();
    if (!broken.empty()) {
      std::fprintf(stderr, "suffix_tree::check_integrity: %s\n", broken.c_str());
      fuzz::fail("check_integrity() is not empty", op);
    }
    fuzz::require(tree.sequences() == static_cast<index_t>(stored.size()), "sequences() differs from the ids stored",
                  tree.sequences(), static_cast<long long>(stored.size()));
    fuzz::require(tree.tokens() == static_cast<index_t>(total()), "tokens() differs from the sum of sequence lengths",
                  tree.tokens(), static_cast<long long>(total()));
    for (const auto& [id, s] : stored) {
      const auto got = tree.sequence(id);
      fuzz::require(tree.contains(id) && std::equal(got.begin(), got.end(), s.begin(), s.end()),
                    "sequence(id) differs from the tokens appended", id);
    }
    for (std::int32_t id = 0; id < 6; ++id)
      fuzz::require(tree.contains(id) == (stored.count(id) != 0), "contains(id) differs from the ids stored", id);
    if (stored.empty()) {
      check_memory(tree.memory_bytes(), peak_bytes, peak_tokens, peak_sequences);
    } else {
      peak_bytes = std::max(peak_bytes, tree.memory_bytes());
      peak_tokens = std::max(peak_tokens, total());
      peak_sequences = std::max(peak_sequences, stored.size());
    }
  }
}

void run_cache(fuzz::input& in) {
  using cache_t = specdec::suffix_cache<std::int32_t, int>;
  if (in.flag()) {  // bounds at the edges
    specdec::suffix_cache_options o;
    o.max_depth = in.flag() ? in.extreme() : in.range(1, 16);
    o.max_cached_requests = in.flag() ? in.extreme() : in.range(-2, 4);
    o.max_cached_tokens = in.flag() ? in.extreme() : in.range(-2, 4);
    const bool ok = o.max_depth >= 1 && o.max_depth <= 65536 && o.max_cached_requests >= -1 &&
                    o.max_cached_requests <= (index_t{1} << 31) && o.max_cached_tokens >= -1;
    const bool threw = throws([&] { cache_t c(o); });
    fuzz::require(threw == !ok, "suffix_cache(options) throws exactly on bounds out of range", o.max_cached_requests,
                  o.max_cached_tokens);
  }
  specdec::suffix_cache_options options;
  options.max_depth = in.range(1, 16);
  options.max_cached_requests = in.range(-1, 4);
  options.max_cached_tokens = in.flag() ? -1 : in.range(0, 64);
  const alphabet a = read_alphabet(in);
  cache_t cache(options);
  std::map<int, tokens_t> own;       // active requests: prompt, then responses
  std::map<int, tokens_t> response;  // every started request's latest response
  std::size_t peak_tokens = 0, peak_sequences = 0;  // of the global tree, within calls too
  const auto source = [&](fuzz::input& from) -> std::span<const std::int32_t> {
    const auto& pool = from.flag() ? own : response;
    if (pool.empty()) return {};
    auto it = pool.begin();
    std::advance(it, static_cast<std::ptrdiff_t>(from.range(0, static_cast<std::int64_t>(pool.size()) - 1)));
    return it->second;
  };
  const auto global_sequences = [&] {
    sequences_t seqs;
    const specdec::suffix_tree<std::int32_t>& g = cache.global_tree();
    for (std::int32_t id = 0; static_cast<index_t>(seqs.size()) < g.sequences(); ++id) {
      fuzz::require(id < (1 << 16), "global tree sequence ids not found", g.sequences());
      if (g.contains(id)) seqs.push_back(g.sequence(id));
    }
    return seqs;
  };
  const auto stored = [&] {
    std::size_t sum = static_cast<std::size_t>(cache.global_tree().tokens());
    for (const auto& [id, s] : own) sum += s.size();
    return sum;
  };
  for (int step = 0; step < max_steps && !in.empty(); ++step) {
    const std::uint8_t op = in.byte() % 8;
    const int id = static_cast<int>(in.range(0, 5));
    const bool active = own.count(id) != 0;
    const index_t cached_before = cache.cached_requests(), tokens_before = cache.global_tree().tokens();
    bool threw = false, invalid = false;
    if (op == 0) {  // start_request
      auto n = static_cast<std::size_t>(in.range(0, 16));
      if (stored() + n > max_stored) n = 0;
      const tokens_t prompt = make_tokens(in, a, n, source(in));
      invalid = active;
      threw = throws([&] { cache.start_request(id, prompt); });
      if (!threw) own[id] = prompt, response[id].clear();
    } else if (op <= 2) {  // add_active_response
      auto n = static_cast<std::size_t>(in.range(0, 12));
      if (2 * n + stored() > max_stored) n = 0;
      const tokens_t tokens = make_tokens(in, a, n, source(in));
      invalid = !active;
      if (cache.cached(id) && !tokens.empty()) {  // the response grows before the oldest are evicted
        peak_tokens = std::max(peak_tokens, static_cast<std::size_t>(tokens_before) + tokens.size());
        peak_sequences = std::max(peak_sequences, static_cast<std::size_t>(cache.global_tree().sequences()) + 1);
      }
      threw = throws([&] { cache.add_active_response(id, tokens); });
      if (!threw) {
        own[id].insert(own[id].end(), tokens.begin(), tokens.end());
        response[id].insert(response[id].end(), tokens.begin(), tokens.end());
      }
    } else if (op == 3) {  // stop_request
      invalid = !active;
      threw = throws([&] { cache.stop_request(id); });
      if (!threw) own.erase(id);
    } else if (op == 4) {  // evict_cached_response: one, or every cached one
      if (in.flag()) {
        for (int r = 0; r < 6; ++r)
          if (cache.cached(r)) cache.evict_cached_response(r);
        fuzz::require(cache.cached_requests() == 0 && cache.global_tree().sequences() == 0,
                      "evicting every cached response leaves some", cache.cached_requests());
      } else {
        invalid = !cache.cached(id);
        threw = throws([&] { cache.evict_cached_response(id); });
      }
    } else if (op == 5) {  // copy: the copy goes on alone
      cache = cache_t(cache);
    } else {  // speculate
      tokens_t context;
      if (active && in.byte() < 160) {
        const tokens_t& mine = own[id];
        const auto n = std::min(mine.size(), static_cast<std::size_t>(in.range(0, 20)));
        context.assign(mine.end() - static_cast<std::ptrdiff_t>(n), mine.end());
      } else {
        context = make_context(in, a, source(in));
      }
      const specdec::suffix_options o = read_options(in);
      invalid = !active || !valid(o);
      specdec::suffix_draft<std::int32_t> d;
      threw = throws([&] { d = cache.speculate(id, context, o); });
      if (!threw) {
        // Only the last max_depth context tokens are used; the draft is the request's or the global one.
        const std::span<const std::int32_t> used =
            std::span<const std::int32_t>(context).last(std::min(context.size(), static_cast<std::size_t>(options.max_depth)));
        // The global tree's own draft: the cache's scores at least as high, and is it when not the request's.
        const specdec::suffix_draft<std::int32_t> global = cache.global_tree().speculate(used, o);
        fuzz::require(d.score >= global.score, "the cache's draft scores below the global tree's", d.size(), global.size());
        const finding mine = check_draft({std::span<const std::int32_t>(own[id])}, options.max_depth, used, o, d);
        if (mine.what != nullptr) {
          const finding shared = check_draft(global_sequences(), options.max_depth, used, o, d);
          if (shared.what != nullptr) {
            std::fprintf(stderr, "against the request's own tokens: %s (%lld, %lld)\n", mine.what, mine.a, mine.b);
            fuzz::fail(shared.what, shared.a, shared.b);
          }
          fuzz::require(d.token == global.token && d.parent == global.parent && d.match_length == global.match_length,
                        "a cache draft not from the request's tree differs from the global tree's", d.size(), global.size());
        }
        check_draft_tree(in, d);
      }
    }
    fuzz::require(threw == invalid, "a cache call throws exactly when invalid", op, threw);
    if (threw)
      fuzz::require(cache.cached_requests() == cached_before && cache.global_tree().tokens() == tokens_before,
                    "a call that threw changed the cache", op);
    const specdec::suffix_tree<std::int32_t>& g = cache.global_tree();
    const std::string broken = g.check_integrity();
    if (!broken.empty()) {
      std::fprintf(stderr, "global suffix_tree::check_integrity: %s\n", broken.c_str());
      fuzz::fail("global tree: check_integrity() is not empty", op);
    }
    if (options.max_cached_tokens >= 0)
      fuzz::require(g.tokens() <= options.max_cached_tokens, "global tree over max_cached_tokens", g.tokens(),
                    options.max_cached_tokens);
    if (options.max_cached_requests >= 0)
      fuzz::require(cache.cached_requests() <= options.max_cached_requests, "cached requests over max_cached_requests",
                    cache.cached_requests(), options.max_cached_requests);
    fuzz::require(cache.active_requests() == static_cast<index_t>(own.size()), "active_requests() differs",
                  cache.active_requests(), static_cast<long long>(own.size()));
    // The global tree holds exactly the non-empty responses of the cached requests.
    std::vector<tokens_t> want, got;
    for (int r = 0; r < 6; ++r) {
      fuzz::require(cache.active(r) == (own.count(r) != 0), "active(id) differs from the requests started", r);
      if (!cache.cached(r)) continue;
      fuzz::require(response.count(r) != 0, "a request cached that was never started", r);
      if (!response[r].empty()) want.push_back(response[r]);
    }
    std::size_t sum = 0;
    for (const auto s : global_sequences()) got.emplace_back(s.begin(), s.end()), sum += s.size();
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    fuzz::require(want == got, "the global tree's sequences differ from the cached responses",
                  static_cast<long long>(got.size()), static_cast<long long>(want.size()));
    fuzz::require(g.tokens() == static_cast<index_t>(sum), "global tokens() differs from the sum of sequence lengths",
                  g.tokens(), static_cast<long long>(sum));
    if (options.max_cached_requests == 0) fuzz::require(cache.cached_requests() == 0, "max_cached_requests 0 caches");
    peak_tokens = std::max(peak_tokens, static_cast<std::size_t>(g.tokens()));
    peak_sequences = std::max(peak_sequences, static_cast<std::size_t>(g.sequences()));
    if (g.sequences() == 0) check_memory(g.memory_bytes(), 0, peak_tokens, peak_sequences);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::input in(data, size);
  if (in.byte() % 2 == 0) run_tree(in);
  else run_cache(in);
  return 0;
}
