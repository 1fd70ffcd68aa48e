// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief `suffix_tree`'s drafting: matching a context from the root and growing a path or a tree from the match (Arctic Inference's `speculate`).
/// Part of specdec/tree/suffix_tree.hpp, which includes it; including it alone includes that header.
#pragma once

#include <cstdint>
#include <span>
#include <utility>

#include <specdec/tree/suffix_tree.hpp>

namespace specdec {

template <class Token>
std::pair<std::int32_t, std::int32_t> suffix_tree<Token>::match(std::span<const Token> context) const noexcept {
  std::int32_t n = 0, at_offset = 0;
  const Token* tokens = nullptr;
  for (const Token t : context) {
    if (at_offset >= at(n).length) {
      n = child(n, t);
      if (n < 0) return {none, none};
      tokens = run(at(n));
      at_offset = 0;
    }
    if (tokens[at_offset] != t) return {none, none};
    ++at_offset;
  }
  return {n, at_offset};
}

template <class Token>
index_t suffix_tree<Token>::draft_cap(index_t m, const suffix_options& options) noexcept {
  volatile float product = static_cast<float>(m) * options.max_spec_factor;
  volatile float sum = product + options.max_spec_offset;
  const double cap = static_cast<double>(sum) + 1e-6;
  if (!(cap < static_cast<double>(options.max_spec_tokens))) return options.max_spec_tokens;
  return cap <= 0.0 ? 0 : static_cast<index_t>(cap);
}

template <class Token>
suffix_draft<Token> suffix_tree<Token>::speculate_path(std::int32_t n, std::int32_t offset, index_t cap, float min_prob) const {
  suffix_draft<Token> out;
  float prob = 1.0f;
  const Token* tokens = run(at(n));
  while (out.size() < cap && prob >= min_prob) {
    if (offset < at(n).length) {
      out.parent.push_back(static_cast<std::int32_t>(out.token.size()) - 1);
      out.token.push_back(tokens[offset]);
      out.prob.push_back(prob);
      out.score += prob;
      ++offset;
    } else {
      const std::int32_t c = at(n).head_child;
      if (c == none) break;
      prob *= static_cast<float>(at(c).count) / static_cast<float>(at(n).count);
      n = c;
      tokens = run(at(n));
      offset = 0;
    }
  }
  return out;
}

template <class Token>
suffix_draft<Token> suffix_tree<Token>::speculate_tree(std::int32_t n, std::int32_t offset, index_t cap, float min_prob) const {
  suffix_draft<Token> out;
  detail::libstdcxx_heap<heap_item> heap;
  heap.push({1.0f, n, offset, -1});
  while (out.size() < cap && !heap.empty()) {
    const heap_item it = heap.pop();
    const node& x = at(it.node);
    if (it.offset < x.length) {
      out.token.push_back(run(x)[it.offset]);
      out.parent.push_back(it.parent);
      out.prob.push_back(it.prob);
      out.score += it.prob;
      heap.push({it.prob, it.node, it.offset + 1, static_cast<std::int32_t>(out.token.size()) - 1});
    } else {
      for (std::int32_t c = x.head_child; c != none; c = at(c).next_sibling) {
        const float prob = it.prob * static_cast<float>(at(c).count) / static_cast<float>(x.count);
        if (prob < min_prob) break;
        heap.push({prob, c, 0, it.parent});
      }
    }
  }
  return out;
}

}  // namespace specdec
