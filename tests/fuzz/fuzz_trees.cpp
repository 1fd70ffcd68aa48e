// SPDX-License-Identifier: Apache-2.0
// Choice lists, static trees and arbitrary parent arrays through every tree layout: each call either
// throws specdec::invalid_argument or returns buffers that agree with the ancestor relation computed
// here from the parents alone (masks in every layout, positions, paths, links, depth offsets), and
// SGLang's build_tree / verify_tree_greedy on arbitrary (malformed) inputs stay in bounds, and the
// prompt-lookup proposer drafts only paths that occur in its history.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <specdec/interop/eagle.hpp>
#include <specdec/interop/eagle1.hpp>
#include <specdec/interop/medusa.hpp>
#include <specdec/interop/sglang.hpp>
#include <specdec/interop/trtllm.hpp>
#include <specdec/mask/tree_mask.hpp>
#include <specdec/tree/eagle2.hpp>
#include <specdec/tree/ngram.hpp>
#include <specdec/tree/static_tree.hpp>
#include <specdec/tree/tree.hpp>

#include "fuzz_input.hpp"

namespace {

using specdec::index_t;

bool is_ancestor_or_self(const specdec::draft_tree& t, index_t i, index_t j) {
  for (index_t a = i; a >= 0; a = t.parent[static_cast<std::size_t>(a)])
    if (a == j) return true;
  return false;
}

/// Every derived buffer of a valid tree against the ancestor relation.
void check_layouts(const specdec::draft_tree& t, fuzz::input& in) {
  const index_t n = t.size();
  const index_t prefix = in.range(0, 3);
  std::vector<std::uint8_t> dense(static_cast<std::size_t>(n * (prefix + n)));
  specdec::tree_mask_dense(t, prefix, specdec::matrix_view<std::uint8_t>(dense.data(), n, prefix + n));
  std::vector<float> additive(static_cast<std::size_t>(n * (prefix + n)));
  specdec::tree_mask_additive(t, prefix, specdec::matrix_view<float>(additive.data(), n, prefix + n));
  const index_t words = (n + 31) / 32;
  std::vector<std::int32_t> packed(static_cast<std::size_t>(n * words));
  specdec::tree_mask_packed_int32(t, specdec::matrix_view<std::int32_t>(packed.data(), n, words));
  std::vector<std::int32_t> indptr;
  const std::vector<specdec::draft_tree> one = {t};
  const std::vector<index_t> prefixes = {prefix};
  const auto fi = specdec::tree_mask_flashinfer_packed(one, prefixes, indptr);
  fuzz::require(indptr.size() == 2 && indptr[1] == static_cast<std::int32_t>((n * (prefix + n) + 7) / 8) &&
                    fi.size() == static_cast<std::size_t>(indptr[1]),
                "flashinfer indptr", indptr.back(), n);
  std::vector<std::uint32_t> bits(static_cast<std::size_t>(n));
  if (n <= 32) specdec::tree_mask_bitpacked_rows(t, specdec::vector_view<std::uint32_t>(bits.data(), n));
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < prefix + n; ++j) {
      const bool want = j < prefix || is_ancestor_or_self(t, i, j - prefix);
      const auto cell = static_cast<std::size_t>(i * (prefix + n) + j);
      fuzz::require((dense[cell] != 0) == want, "dense mask", i, j);
      fuzz::require((additive[cell] == 0.0f) == want, "additive mask", i, j);
      fuzz::require(((fi[cell / 8] >> (cell % 8)) & 1) == (want ? 1 : 0), "flashinfer packed mask", i, j);
      if (j >= prefix) {
        const index_t c = j - prefix;
        const auto word = static_cast<std::uint32_t>(packed[static_cast<std::size_t>(i * words + c / 32)]);
        fuzz::require(((word >> (c % 32)) & 1u) == (want ? 1u : 0u), "packed int32 mask", i, c);
        if (n <= 32) fuzz::require(((bits[static_cast<std::size_t>(i)] >> c) & 1u) == (want ? 1u : 0u), "bit-packed rows", i, c);
      }
    }
  std::vector<std::int64_t> positions(static_cast<std::size_t>(n));
  specdec::tree_positions(t, prefix, specdec::vector_view<std::int64_t>(positions.data(), n));
  for (index_t i = 0; i < n; ++i) {
    index_t depth = 0;
    for (index_t a = i; a > 0; a = t.parent[static_cast<std::size_t>(a)]) ++depth;
    fuzz::require(positions[static_cast<std::size_t>(i)] == prefix + depth, "positions", i, depth);
  }
  const auto leaf = specdec::leaf_flags(t);
  for (const auto order : {specdec::path_order::node_index, specdec::path_order::lexicographic, specdec::path_order::reverse_node_index}) {
    const auto paths = specdec::retrieve_paths(t, order);
    fuzz::require(paths.rows == static_cast<index_t>(std::count(leaf.begin(), leaf.end(), true)), "one path per leaf", paths.rows);
    for (index_t r = 0; r < paths.rows; ++r) {
      fuzz::require(paths(r, 0) == 0, "paths start at the root", r);
      index_t last = 0, c = 1;
      for (; c < paths.cols && paths(r, c) >= 0; ++c) {
        fuzz::require(t.parent[static_cast<std::size_t>(paths(r, c))] == paths(r, c - 1), "path steps follow parents", r, c);
        last = paths(r, c);
      }
      for (; c < paths.cols; ++c) fuzz::require(paths(r, c) == -1, "paths padded with -1", r, c);
      fuzz::require(leaf[static_cast<std::size_t>(last)], "paths end at a leaf", r, last);
    }
  }
  std::vector<std::int32_t> first(static_cast<std::size_t>(n)), next(static_cast<std::size_t>(n));
  specdec::child_links(t, specdec::vector_view<std::int32_t>(first.data(), n), specdec::vector_view<std::int32_t>(next.data(), n));
  for (index_t p = 0; p < n; ++p) {
    index_t previous = 0, count = 0;
    for (std::int32_t c = first[static_cast<std::size_t>(p)]; c >= 0; c = next[static_cast<std::size_t>(c)], ++count) {
      fuzz::require(count < n && c > previous && t.parent[static_cast<std::size_t>(c)] == p, "child links", p, c);
      previous = c;
    }
    index_t children = 0;
    for (index_t i = 1; i < n; ++i) children += t.parent[static_cast<std::size_t>(i)] == p ? 1 : 0;
    fuzz::require(count == children, "child links reach every child", p, count);
  }
  try {
    const auto offsets = specdec::depth_offsets(t);
    fuzz::require(offsets.front() == 0 && offsets.back() == n, "depth offsets", offsets.back(), n);
  } catch (const specdec::invalid_argument&) {
    // Trees not in level order (valid parents, depths decreasing somewhere) are rejected here.
    bool level_order = true;
    for (index_t i = 1; i < n; ++i) level_order = level_order && t.depth[static_cast<std::size_t>(i)] >= t.depth[static_cast<std::size_t>(i - 1)];
    fuzz::require(!level_order, "depth_offsets rejected a level-order tree");
  }
  const auto eb = specdec::eagle::make_buffers(t);
  fuzz::require(eb.nodes == n && static_cast<index_t>(eb.retrieve_indices.size()) == eb.leaves * eb.path_length, "eagle buffers", eb.nodes);
}

void fuzz_choices(fuzz::input& in) {
  std::vector<specdec::choice> choices(static_cast<std::size_t>(in.range(0, 24)));
  for (auto& c : choices) {
    c.resize(static_cast<std::size_t>(in.range(0, 5)));
    for (auto& r : c) r = static_cast<std::int32_t>(in.range(-1, 11));
  }
  const index_t top_k = in.range(0, 12);
  const auto checked = [&](auto build) {
    try {
      build();
    } catch (const specdec::invalid_argument&) {
    }
  };
  checked([&] {
    const auto st = specdec::make_static_tree(choices, top_k);
    fuzz::require(st.size() == static_cast<index_t>(choices.size()) + 1, "one node per choice", st.size());
    specdec::validate(st.tree);
    for (index_t i = 1; i < st.size(); ++i)
      fuzz::require(st.rank[static_cast<std::size_t>(i)] >= 0 && st.rank[static_cast<std::size_t>(i)] < top_k, "ranks", i);
    specdec::draft_tree t = st.tree;
    for (auto& x : t.token) x = 0;
    check_layouts(t, in);
  });
  checked([&] {
    const auto b = specdec::medusa::make_buffers(choices, top_k);
    for (const auto x : b.tree_indices) fuzz::require(x >= 0 && x < 1 + top_k * b.path_length, "medusa tree_indices", x);
  });
  checked([&] {
    const auto b = specdec::eagle1::make_buffers(choices, top_k);
    for (const auto x : b.tree_indices) fuzz::require(x >= 0 && x <= top_k * b.nodes, "eagle1 tree_indices", x);
  });
  checked([&] {
    const auto s = specdec::trtllm::make_medusa_setup(choices, top_k);
    fuzz::require(static_cast<index_t>(s.packed_mask.size()) == s.nodes * s.mask_words, "trtllm packed mask", s.nodes);
  });
}

void fuzz_parents(fuzz::input& in) {
  const auto n = static_cast<std::size_t>(in.range(0, 40));
  std::vector<std::int32_t> tokens(n), parents(n);
  for (std::size_t i = 0; i < n; ++i) {
    tokens[i] = static_cast<std::int32_t>(in.range(-2, 60));
    // Mostly a valid earlier parent, sometimes anything.
    parents[i] = in.byte() < 240 ? static_cast<std::int32_t>(i == 0 ? -1 : in.range(0, static_cast<std::int64_t>(i) - 1))
                                 : static_cast<std::int32_t>(in.range(-3, 50));
  }
  specdec::draft_tree t;
  try {
    t = specdec::make_tree(tokens, parents, in.flag() ? 50 : 0);
  } catch (const specdec::invalid_argument&) {
    return;
  }
  check_layouts(t, in);
}

void fuzz_sglang(fuzz::input& in) {
  const index_t bs = in.range(1, 3), n = in.range(1, 12), k = in.range(1, 4), steps = in.range(1, 4);
  const index_t p = 1 + k * (steps - 1);
  std::vector<std::int64_t> parent_list(static_cast<std::size_t>(bs * p)), selected(static_cast<std::size_t>(bs * (n - 1))),
      tokens(static_cast<std::size_t>(bs * (n - 1))), ids(static_cast<std::size_t>(bs)), lens(static_cast<std::size_t>(bs));
  for (auto& x : parent_list) x = in.range(-2, k + k * k * steps);
  for (auto& x : selected) x = in.range(-1, k + k * k * steps);
  if (in.flag())
    for (index_t b = 0; b < bs; ++b) std::sort(selected.begin() + b * (n - 1), selected.begin() + (b + 1) * (n - 1));
  for (auto& x : tokens) x = in.range(0, 99);
  for (auto& x : ids) x = in.range(0, 99);
  for (auto& x : lens) x = in.range(-1, 6);
  const auto mode = static_cast<specdec::sglang::tree_mask_mode>(in.range(0, 2));
  specdec::sglang::tree_buffers out;
  try {
    out = specdec::sglang::build_tree(specdec::matrix_view<const std::int64_t>(parent_list.data(), bs, p),
                                      specdec::matrix_view<const std::int64_t>(selected.data(), bs, n - 1),
                                      specdec::matrix_view<const std::int64_t>(tokens.data(), bs, n - 1), ids, lens, k, steps, n, mode);
  } catch (const specdec::invalid_argument&) {
    return;
  }
  for (index_t i = 0; i < bs * n; ++i) {
    const auto ft = out.retrive_next_token[static_cast<std::size_t>(i)], ns = out.retrive_next_sibling[static_cast<std::size_t>(i)];
    fuzz::require(ft >= -1 && ft < n && ns >= -1 && ns < n, "links in range", ft, ns);
    fuzz::require(out.positions[static_cast<std::size_t>(i)] >= lens[static_cast<std::size_t>(i / n)] &&
                      out.positions[static_cast<std::size_t>(i)] <= lens[static_cast<std::size_t>(i / n)] + steps,
                  "positions within seq_len + [0, S]", i);
  }
  std::vector<std::int64_t> predict(static_cast<std::size_t>(bs * n));
  for (auto& x : predict) x = in.range(0, 99);
  // Arbitrary links too (cycles, out of range): errors, never a hang or an out-of-bounds read.
  if (in.flag())
    for (auto* links : {&out.retrive_next_token, &out.retrive_next_sibling})
      for (auto& x : *links) x = in.byte() < 200 ? x : in.range(-2, n);
  try {
    const auto v = specdec::sglang::verify_tree_greedy(
        specdec::matrix_view<const std::int64_t>(out.draft_tokens.data(), bs, n),
        specdec::matrix_view<const std::int64_t>(out.retrive_index.data(), bs, n),
        specdec::matrix_view<const std::int64_t>(out.retrive_next_token.data(), bs, n),
        specdec::matrix_view<const std::int64_t>(out.retrive_next_sibling.data(), bs, n), predict, steps);
    for (const auto a : v.accept_token_num) fuzz::require(a >= 0 && a < steps, "accepted count", a);
  } catch (const specdec::invalid_argument&) {
  }
}

void fuzz_ngram(fuzz::input& in) {
  std::vector<std::int32_t> history(static_cast<std::size_t>(in.range(0, 60)));
  const auto alphabet = static_cast<std::int32_t>(in.range(1, 6));
  for (auto& t : history) t = in.byte() < 252 ? static_cast<std::int32_t>(in.range(0, alphabet - 1)) : static_cast<std::int32_t>(in.range(-2, 9));
  specdec::ngram_options o;
  o.max_ngram = in.range(-1, 5);
  o.min_ngram = in.range(-1, 5);
  o.branches = in.range(0, 4);
  o.max_history = in.range(-1, 70);
  const index_t length = in.range(-1, 8);
  specdec::draft_tree t;
  try {
    t = specdec::propose_ngram(history, length, o);
  } catch (const specdec::invalid_argument&) {
    return;
  }
  specdec::validate(t);
  fuzz::require(t.token[0] == history.back(), "the root is the last committed token");
  fuzz::require(t.max_depth() <= length, "no path longer than length", t.max_depth(), length);
  fuzz::require(t.size() <= 1 + o.branches * length, "at most branches x length drafted nodes", t.size());
  // Every root-to-leaf path continues an earlier occurrence of the history's last token.
  const auto leaf = specdec::leaf_flags(t);
  for (index_t i = 1; i < t.size(); ++i) {
    if (!leaf[static_cast<std::size_t>(i)]) continue;
    std::vector<std::int32_t> path;
    for (index_t node = i; node >= 0; node = t.parent[static_cast<std::size_t>(node)]) path.insert(path.begin(), t.token[static_cast<std::size_t>(node)]);
    bool found = false;
    for (std::size_t start = 0; start + path.size() <= history.size() && !found; ++start)
      found = std::equal(path.begin(), path.end(), history.begin() + static_cast<std::ptrdiff_t>(start));
    fuzz::require(found, "a drafted path does not occur in the history", i);
  }
  check_layouts(t, in);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::input in(data, size);
  switch (in.byte() % 4) {
    case 0: fuzz_choices(in); break;
    case 1: fuzz_parents(in); break;
    case 2: fuzz_sglang(in); break;
    default: fuzz_ngram(in); break;
  }
  return 0;
}
