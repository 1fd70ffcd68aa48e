// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The greedy walk over a draft tree, written once for every greedy verifier: the request-based
/// host forms (greedy.hpp, the greedy requests of a sampled batch, the masked and grammar-constrained
/// forms) and the team jobs of the batched forms (tree_walk.hpp). Each caller supplies where a visited
/// row's argmax comes from and where the emitted path goes.
#pragma once

#include <cstdint>

#include <specdec/backend/detail/team.hpp>
#include <specdec/config.hpp>
#include <specdec/core/view.hpp>

namespace specdec::sampling::detail {

/// A tree's children in visiting order: `first_child[i]` and `next_sibling[c]`, -1 for none.
struct sibling_links {
  const std::int32_t* first_child;
  const std::int32_t* next_sibling;
};

/// The greedy walk of one request: from the root, each visited node's row gives its argmax `best`, and
/// the first child (in the links' order) whose token is `best` is accepted, unless `cap` draft tokens
/// (-1: none) are accepted already. The walk ends at the first node where no child is accepted,
/// emitting the caller's bonus token when it ended at a leaf or the cap and `has_bonus`, else `best`.
/// With a bonus, a row where the walk must end on it is not read (vLLM's layout has no row for the
/// last node) unless `read_final_row` (a grammar's terminated state must be seen there).
///
/// `argmax(node, best)` sets `best` from node's row, or returns a fault; a `best` below 0 ends the walk
/// without a final token (a grammar terminated at that node). The sink takes `accept(team, node,
/// token)`, `finish(team, token, ended)` (token -1: none; `ended`: the walk ended at a leaf or the
/// cap, nothing rejected), `accepted()` (the count so far) and `bonus()` (the bonus token, read only
/// when emitted). Every thread of the team walks; the sink writes from one.
// The host forms pass host callables (a backend's argmax, a throwing range check): the walk is a
// host-device template, so nvcc's check of calls across execution spaces is off for it alone; each
// instantiation runs where its callables do.
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
template <class Team, class Argmax, class Sink>
SPECDEC_HOST_DEVICE specdec::detail::team_fault walk_greedy(Team& team, sibling_links links, const std::int32_t* token,
                                                            std::int32_t cap, bool has_bonus, bool read_final_row,
                                                            Argmax&& argmax, Sink& sink) {
  std::int32_t node = 0;
  for (;;) {
    const bool ended = links.first_child[node] < 0 || (cap >= 0 && sink.accepted() >= cap);
    if (has_bonus && ended && !read_final_row) {
      sink.finish(team, sink.bonus(), true);
      return {};
    }
    std::int32_t best = 0;
    if (const specdec::detail::team_fault f = argmax(node, best); f.code != 0) return f;
    if (best < 0) {
      sink.finish(team, -1, false);
      return {};
    }
    std::int32_t accepted = -1;
    if (!ended)
      for (std::int32_t c = links.first_child[node]; c >= 0; c = links.next_sibling[c])
        if (token[c] == best) {
          accepted = c;
          break;
        }
    if (accepted < 0) {
      sink.finish(team, ended && has_bonus ? sink.bonus() : best, ended);
      return {};
    }
    sink.accept(team, accepted, best);
    node = accepted;
  }
}

}  // namespace specdec::sampling::detail
