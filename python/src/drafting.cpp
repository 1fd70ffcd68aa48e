// SPDX-License-Identifier: Apache-2.0
// specdec's own drafting side for Python: draft trees and the buffers an engine derives from them
// (masks in every layout, positions, retrieve paths, sibling links), prompt-lookup and suffix drafts,
// the EAGLE-2 builder, the draft-length policy and verification of specdec's trees. Trees cross the
// boundary as three int32 arrays (token, parent, depth: specdec::tree_view) and come back as four
// (with float32 scores); specdec/drafting.py wraps them in a DraftTree.
#include "common.hpp"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <specdec/mask/tree_mask.hpp>
#include <specdec/policy/draft_length.hpp>
#include <specdec/sampling/greedy.hpp>
#include <specdec/sampling/speculative.hpp>
#include <specdec/tree/eagle2.hpp>
#include <specdec/tree/ngram.hpp>
#include <specdec/tree/suffix.hpp>
#include <specdec/tree/tree.hpp>

using namespace specdec_python;

namespace {

using int_array = nb::ndarray<nb::numpy, std::int32_t>;
using tree_arrays = std::tuple<int_array, int_array, int_array, nb::ndarray<nb::numpy, float>>;

/// A tree handed over as (token, parent, depth) int32 arrays: a view of them, not yet validated.
specdec::tree_view tree_of(const array& token, const array& parent, const array& depth) {
  return {span_of<const std::int32_t>(token, "tree.token"), span_of<const std::int32_t>(parent, "tree.parent"),
          span_of<const std::int32_t>(depth, "tree.depth")};
}

tree_arrays arrays_of(specdec::draft_tree&& tree) {
  return {to_numpy(std::move(tree.token)), to_numpy(std::move(tree.parent)), to_numpy(std::move(tree.depth)),
          to_numpy(std::move(tree.score))};
}

/// The trees of a batch, each a (token, parent, depth) tuple of arrays.
using tree_list = std::vector<std::tuple<array, array, array>>;

std::vector<specdec::tree_view> views_of(const tree_list& trees) {
  std::vector<specdec::tree_view> views;
  views.reserve(trees.size());
  for (const auto& [t, p, d] : trees) views.push_back(tree_of(t, p, d));
  return views;
}

// ---- trees and their buffers ------------------------------------------------------------------------

tree_arrays make_tree(const array& tokens, const array& parents, index_t vocab_size) {
  const auto t = span_of<const std::int32_t>(tokens, "tokens");
  const auto p = span_of<const std::int32_t>(parents, "parents");
  return arrays_of(specdec::make_tree(std::vector<std::int32_t>(t.begin(), t.end()), std::vector<std::int32_t>(p.begin(), p.end()),
                                      vocab_size));
}

void validate_tree(const array& token, const array& parent, const array& depth, index_t vocab_size) {
  specdec::validate(tree_of(token, parent, depth), vocab_size);
}

/// Dense (or additive) mask `[n x (prefix_length + n)]` into `out`: bool, uint8, float32 or float64.
void tree_mask_dense(const array& token, const array& parent, const array& depth, index_t prefix_length, const array& out,
                     bool additive) {
  const specdec::valid_tree tree = tree_of(token, parent, depth);
  const auto write = [&]<class M>(M*) {
    const auto o = matrix_of<M>(out, "out");
    without_gil([&] {
      if constexpr (std::is_floating_point_v<M>) {
        if (additive) return specdec::tree_mask_additive(tree, prefix_length, o);
      }
      specdec::tree_mask_dense(tree, prefix_length, o);
    });
  };
  if (prefix_length < 0) throw nb::value_error(("prefix_length: expected a length >= 0; got " + std::to_string(prefix_length)).c_str());
  if (additive) check_array(out, "out", {nb::dtype<float>(), nb::dtype<double>()}, 2, access::write);
  else check_array(out, "out", {nb::dtype<bool>(), nb::dtype<std::uint8_t>(), nb::dtype<float>(), nb::dtype<double>()}, 2, access::write);
  if (out.dtype() == nb::dtype<bool>()) write(static_cast<bool*>(nullptr));
  else if (out.dtype() == nb::dtype<std::uint8_t>()) write(static_cast<std::uint8_t*>(nullptr));
  else if (out.dtype() == nb::dtype<float>()) write(static_cast<float*>(nullptr));
  else write(static_cast<double*>(nullptr));
}

/// TensorRT-LLM's packed int32 words `[n x ceil(n / 32)]`.
void tree_mask_packed_int32(const array& token, const array& parent, const array& depth, const array& out) {
  const specdec::valid_tree tree = tree_of(token, parent, depth);
  specdec::tree_mask_packed_int32(tree, matrix_of<std::int32_t>(out, "out"));
}

/// SGLang's one item per row (uint8 / uint16 / uint32 by tree size).
void tree_mask_bitpacked_rows(const array& token, const array& parent, const array& depth, const array& out) {
  const specdec::valid_tree tree = tree_of(token, parent, depth);
  check_array(out, "out", {nb::dtype<std::uint8_t>(), nb::dtype<std::uint16_t>(), nb::dtype<std::uint32_t>()}, 1, access::write);
  const auto n = static_cast<index_t>(out.shape(0));
  if (out.dtype() == nb::dtype<std::uint8_t>())
    specdec::tree_mask_bitpacked_rows(tree, specdec::vector_view<std::uint8_t>(span_of<std::uint8_t>(out, "out").data(), n));
  else if (out.dtype() == nb::dtype<std::uint16_t>())
    specdec::tree_mask_bitpacked_rows(tree, specdec::vector_view<std::uint16_t>(span_of<std::uint16_t>(out, "out").data(), n));
  else
    specdec::tree_mask_bitpacked_rows(tree, specdec::vector_view<std::uint32_t>(span_of<std::uint32_t>(out, "out").data(), n));
}

/// FlashInfer's packed custom mask of a ragged batch: (bytes, indptr).
std::tuple<nb::ndarray<nb::numpy, std::uint8_t>, int_array> tree_mask_flashinfer(const tree_list& trees, const array& prefix_lengths) {
  const std::vector<specdec::tree_view> views = views_of(trees);
  const auto prefixes = span_of<const std::int64_t>(prefix_lengths, "prefix_lengths");
  std::vector<std::int32_t> indptr;
  std::vector<std::uint8_t> bytes = specdec::tree_mask_flashinfer_packed(views, prefixes, indptr);
  return {to_numpy(std::move(bytes)), to_numpy(std::move(indptr))};
}

nb::ndarray<nb::numpy, std::int64_t> tree_positions(const array& token, const array& parent, const array& depth, index_t prefix_length) {
  return to_numpy(specdec::tree_positions(tree_of(token, parent, depth), prefix_length));
}

int_array retrieve_paths(const array& token, const array& parent, const array& depth, int order) {
  if (order < 0 || order > 2)
    throw nb::value_error(("order: expected 0 (node_index), 1 (lexicographic) or 2 (reverse_node_index); got " + std::to_string(order)).c_str());
  auto got = specdec::retrieve_paths(tree_of(token, parent, depth), static_cast<specdec::path_order>(order));
  return to_numpy(std::move(got.paths), static_cast<std::size_t>(got.rows), static_cast<std::size_t>(got.cols));
}

std::tuple<int_array, int_array> child_links(const array& token, const array& parent, const array& depth) {
  const specdec::valid_tree tree = tree_of(token, parent, depth);
  std::vector<std::int32_t> first(static_cast<std::size_t>(tree.size())), next(first.size());
  specdec::child_links(tree, specdec::vector_view<std::int32_t>(first.data(), tree.size()),
                       specdec::vector_view<std::int32_t>(next.data(), tree.size()));
  return {to_numpy(std::move(first)), to_numpy(std::move(next))};
}

// ---- prompt lookup ----------------------------------------------------------------------------------

specdec::ngram_options ngram_options_of(index_t max_ngram, index_t min_ngram, index_t branches, index_t max_history) {
  return {.max_ngram = max_ngram, .min_ngram = min_ngram, .branches = branches, .max_history = max_history};
}

tree_arrays propose_ngram(const array& history, index_t length, index_t max_ngram, index_t min_ngram, index_t branches,
                          index_t max_history) {
  const auto h = span_of<const std::int32_t>(history, "history");
  specdec::draft_tree tree;
  without_gil([&] { tree = specdec::propose_ngram(h, length, ngram_options_of(max_ngram, min_ngram, branches, max_history)); });
  return arrays_of(std::move(tree));
}

index_t ngram_match_length(const array& history, index_t max_ngram, index_t min_ngram, index_t max_history) {
  return specdec::ngram_match_length(span_of<const std::int32_t>(history, "history"),
                                     ngram_options_of(max_ngram, min_ngram, 1, max_history));
}

// ---- SuffixDecoding ---------------------------------------------------------------------------------

using suffix_tree = specdec::suffix_tree<std::int32_t>;
using suffix_cache = specdec::suffix_cache<std::int32_t, std::int64_t>;
/// A draft as Arctic Inference's Draft: (token_ids, parents, probs, score, match_len).
using suffix_result = std::tuple<std::vector<std::int32_t>, std::vector<std::int32_t>, std::vector<float>, float, index_t>;

specdec::suffix_options suffix_options_of(index_t max_spec_tokens, float max_spec_factor, float max_spec_offset, float min_token_prob,
                                          bool use_tree_spec) {
  return {.max_spec_tokens = max_spec_tokens, .max_spec_factor = max_spec_factor, .max_spec_offset = max_spec_offset,
          .min_token_prob = min_token_prob, .tree = use_tree_spec};
}

suffix_result result_of(specdec::suffix_draft<std::int32_t>&& d) {
  return {std::move(d.token), std::move(d.parent), std::move(d.prob), d.score, d.match_length};
}

std::span<const std::int32_t> tokens_of(const array& a, const char* name) { return span_of<const std::int32_t>(a, name); }

tree_arrays suffix_draft_tree(std::int32_t root, const array& token_ids, const array& parents, const array& probs) {
  specdec::suffix_draft<std::int32_t> d;
  const auto t = tokens_of(token_ids, "token_ids");
  const auto p = span_of<const std::int32_t>(parents, "parents");
  const auto q = span_of<const float>(probs, "probs");
  d.token.assign(t.begin(), t.end());
  d.parent.assign(p.begin(), p.end());
  d.prob.assign(q.begin(), q.end());
  return arrays_of(specdec::suffix_draft_tree(root, d));
}

// ---- the EAGLE-2 builder ----------------------------------------------------------------------------

/// The builder with the host backend it runs on (one per builder: a builder keeps a reference), and the
/// lock every method takes (`locked`): threads sharing a builder are serialised.
struct eagle2_builder {
  mutable std::mutex mutex;
  specdec::eigen backend;
  specdec::eagle2_tree_builder<specdec::eigen> builder;
  eagle2_builder(index_t top_k, index_t depth, index_t total_tokens, bool probability, std::vector<std::int32_t> d2t, index_t batch)
      : builder(backend,
                specdec::dynamic_tree_config{top_k, depth, total_tokens,
                                             probability ? specdec::tree_score::probability : specdec::tree_score::log_probability,
                                             std::move(d2t)},
                batch) {}
};

using eagle2_result = std::tuple<int_array, int_array, int_array, nb::ndarray<nb::numpy, float>, int_array, int_array>;

// ---- verification of specdec's trees -----------------------------------------------------------------

/// A verification's result: (accepted_nodes, tokens, bonus).
using verify_result = std::tuple<std::vector<std::int32_t>, std::vector<std::int32_t>, bool>;

std::vector<index_t> target_rows_of(const array& target_rows, const std::vector<specdec::tree_view>& trees) {
  std::vector<index_t> rows(trees.size());
  if (!absent(target_rows)) {  // empty: the default; any other array is checked (a 2-D one was ignored)
    const auto given = span_of<const std::int64_t>(target_rows, "target_rows");
    if (given.size() != trees.size())
      throw nb::value_error(("target_rows: expected one entry per tree (" + std::to_string(trees.size()) + "); got " +
                             std::to_string(given.size())).c_str());
    std::copy(given.begin(), given.end(), rows.begin());
    return rows;
  }
  index_t next = 0;  // default: the trees' rows one after the other
  for (std::size_t i = 0; i < trees.size(); ++i) rows[i] = std::exchange(next, next + trees[i].size());
  return rows;
}

std::vector<verify_result> results_of(std::vector<specdec::sampling::speculative_result>&& got) {
  std::vector<verify_result> out;
  out.reserve(got.size());
  for (auto& r : got) out.emplace_back(std::move(r.accepted_nodes), std::move(r.tokens), r.bonus);
  return out;
}

std::vector<verify_result> verify_greedy(const array& logits, const tree_list& trees, const array& target_rows) {
  std::vector<specdec::sampling::speculative_result> got;
  with_rows(logits, "logits", [&](auto x) {  // float32, float16 or bfloat16, read as they are
    const std::vector<specdec::tree_view> views = views_of(trees);
    const std::vector<index_t> rows = target_rows_of(target_rows, views);
    std::vector<specdec::sampling::speculative_request> requests(views.size());
    for (std::size_t i = 0; i < views.size(); ++i) {
      requests[i].tree = views[i];
      requests[i].target_row = rows[i];
    }
    // The header calls the logits' width "V" ("V = 0; expected a vocabulary ...").
    naming("logits", {"logits", "target_rows", "tree"}, [&] {
      without_gil([&] { got = specdec::sampling::verify_greedy(host_backend(), x, std::span<const specdec::sampling::speculative_request>(requests)); });
    });
  });
  return results_of(std::move(got));
}

/// Lossless verification of specdec's trees: target probabilities (or logits, softened at
/// `temperature`), draft probability rows per node (`draft_rows[i]`: -1 or a row of `draft_probs`; none:
/// deterministic drafts), Philox streams (seed, request) from `offset`.
template <class T, class D>
std::vector<verify_result> verify_speculative_rows(specdec::matrix_view<const T> t, specdec::matrix_view<const D> draft, bool logits,
                                                   float temperature, const tree_list& trees, const array& target_rows,
                                                   const std::vector<array>& draft_rows, std::uint64_t seed, std::uint64_t offset) {
  const std::vector<specdec::tree_view> views = views_of(trees);
  const std::vector<index_t> rows = target_rows_of(target_rows, views);
  if (!draft_rows.empty() && draft_rows.size() != views.size())
    throw nb::value_error(("draft_rows: expected one array per tree (" + std::to_string(views.size()) + ") or none; got " +
                           std::to_string(draft_rows.size())).c_str());
  std::vector<std::vector<index_t>> node_rows(draft_rows.size());
  for (std::size_t i = 0; i < draft_rows.size(); ++i) {
    const auto given = span_of<const std::int64_t>(draft_rows[i], "draft_rows");
    node_rows[i].assign(given.begin(), given.end());
  }
  std::vector<specdec::sampling::speculative_request> requests(views.size());
  for (std::size_t i = 0; i < views.size(); ++i) {
    auto& q = requests[i];
    q.tree = views[i];
    q.target_row = rows[i];
    if (!node_rows.empty()) q.draft_rows = node_rows[i];
    q.uniforms = specdec::sampling::uniform_stream::philox({seed, static_cast<std::uint64_t>(i)}, offset);
    q.temperature = temperature;
  }
  specdec::sampling::speculative_rows<specdec::host_space, T, D> in;
  in.target = t;
  in.draft = draft;  // empty: deterministic drafts
  std::vector<specdec::sampling::speculative_result> got;
  // The header calls the target target_probs.
  renaming({{"target_probs", "target"}}, [&] {
    without_gil([&] {
      got = logits ? specdec::sampling::verify_speculative_logits(host_backend(), in, requests)
                   : specdec::sampling::verify_speculative(host_backend(), in, requests);
    });
  });
  return results_of(std::move(got));
}

/// The target and draft rows may be float32, float16 or bfloat16 each, read as they are (the float rows'
/// results).
std::vector<verify_result> verify_speculative(const array& target, bool logits, float temperature, const tree_list& trees,
                                              const array& target_rows, const array& draft_probs, const std::vector<array>& draft_rows,
                                              std::uint64_t seed, std::uint64_t offset) {
  return with_rows(target, "target", [&](auto t) {
    using T = typename decltype(t)::value_type;
    const auto with_draft = [&](auto d) {
      using D = typename decltype(d)::value_type;
      return verify_speculative_rows<T, D>(t, d, logits, temperature, trees, target_rows, draft_rows, seed, offset);
    };
    if (absent(draft_probs)) return with_draft(specdec::matrix_view<const float>{});  // deterministic drafts
    return with_rows(draft_probs, "draft_probs", with_draft);
  });
}

}  // namespace

void bind_drafting(nb::module_& m) {
  m.def("make_tree", &make_tree, nb::arg("tokens").none(), nb::arg("parents").none(), nb::arg("vocab_size"));
  m.def("validate_tree", &validate_tree, nb::arg("token").none(), nb::arg("parent").none(), nb::arg("depth").none(),
        nb::arg("vocab_size"));
  m.def("tree_mask_dense", &tree_mask_dense, nb::arg("token").none(), nb::arg("parent").none(), nb::arg("depth").none(),
        nb::arg("prefix_length"), nb::arg("out").none(), nb::arg("additive"));
  m.def("tree_mask_packed_int32", &tree_mask_packed_int32, nb::arg("token").none(), nb::arg("parent").none(), nb::arg("depth").none(),
        nb::arg("out").none());
  m.def("tree_mask_bitpacked_rows", &tree_mask_bitpacked_rows, nb::arg("token").none(), nb::arg("parent").none(),
        nb::arg("depth").none(), nb::arg("out").none());
  m.def("tree_mask_flashinfer", &tree_mask_flashinfer, nb::arg("trees"), nb::arg("prefix_lengths").none());
  m.def("tree_positions", &tree_positions, nb::arg("token").none(), nb::arg("parent").none(), nb::arg("depth").none(),
        nb::arg("prefix_length"));
  m.def("retrieve_paths", &retrieve_paths, nb::arg("token").none(), nb::arg("parent").none(), nb::arg("depth").none(),
        nb::arg("order"));
  m.def("child_links", &child_links, nb::arg("token").none(), nb::arg("parent").none(), nb::arg("depth").none());

  m.def("propose_ngram", &propose_ngram, nb::arg("history").none(), nb::arg("length"), nb::arg("max_ngram"), nb::arg("min_ngram"),
        nb::arg("branches"), nb::arg("max_history"));
  m.def("ngram_match_length", &ngram_match_length, nb::arg("history").none(), nb::arg("max_ngram"), nb::arg("min_ngram"),
        nb::arg("max_history"));

  nb::class_<suffix_tree>(m, "SuffixTree")
      .def(nb::init<index_t>(), nb::arg("max_depth"))
      .def_prop_ro("max_depth", &suffix_tree::max_depth)
      .def_prop_ro("num_sequences", &suffix_tree::sequences)
      .def_prop_ro("num_tokens", &suffix_tree::tokens)
      .def_prop_ro("num_nodes", &suffix_tree::nodes)
      .def("contains", &suffix_tree::contains, nb::arg("seq_id"))
      .def("extend", [](suffix_tree& t, std::int32_t id, const array& tokens) { t.extend(id, tokens_of(tokens, "tokens")); },
           nb::arg("seq_id"), nb::arg("tokens").none())
      .def("remove", &suffix_tree::remove, nb::arg("seq_id"))
      .def("speculate",
           [](const suffix_tree& t, const array& context, index_t max_spec_tokens, float max_spec_factor, float max_spec_offset,
              float min_token_prob, bool use_tree_spec) {
             return result_of(t.speculate(tokens_of(context, "context"),
                                          suffix_options_of(max_spec_tokens, max_spec_factor, max_spec_offset, min_token_prob, use_tree_spec)));
           },
           nb::arg("context").none(), nb::arg("max_spec_tokens"), nb::arg("max_spec_factor"), nb::arg("max_spec_offset"),
           nb::arg("min_token_prob"), nb::arg("use_tree_spec"))
      .def("check_integrity", &suffix_tree::check_integrity)
      .def("memory_bytes", &suffix_tree::memory_bytes);

  nb::class_<suffix_cache>(m, "SuffixCache")
      .def("__init__",
           [](suffix_cache* self, index_t max_depth, index_t max_cached_requests, index_t max_cached_tokens) {
             new (self) suffix_cache({.max_depth = max_depth, .max_cached_requests = max_cached_requests,
                                      .max_cached_tokens = max_cached_tokens});
           },
           nb::arg("max_depth"), nb::arg("max_cached_requests"), nb::arg("max_cached_tokens"))
      .def("active", &suffix_cache::active, nb::arg("id"))
      .def("cached", &suffix_cache::cached, nb::arg("id"))
      .def_prop_ro("num_active", &suffix_cache::active_requests)
      .def_prop_ro("num_cached", &suffix_cache::cached_requests)
      .def("start_request", [](suffix_cache& c, std::int64_t id, const array& prompt) { c.start_request(id, tokens_of(prompt, "prompt_token_ids")); },
           nb::arg("id"), nb::arg("prompt_token_ids").none())
      .def("stop_request", &suffix_cache::stop_request, nb::arg("id"))
      .def("add_active_response",
           [](suffix_cache& c, std::int64_t id, const array& tokens) { c.add_active_response(id, tokens_of(tokens, "token_ids")); },
           nb::arg("id"), nb::arg("token_ids").none())
      .def("evict_cached_response", &suffix_cache::evict_cached_response, nb::arg("id"))
      .def("speculate",
           [](const suffix_cache& c, std::int64_t id, const array& context, index_t max_spec_tokens, float max_spec_factor,
              float max_spec_offset, float min_token_prob, bool use_tree_spec) {
             return result_of(c.speculate(id, tokens_of(context, "context"),
                                          suffix_options_of(max_spec_tokens, max_spec_factor, max_spec_offset, min_token_prob, use_tree_spec)));
           },
           nb::arg("id"), nb::arg("context").none(), nb::arg("max_spec_tokens"), nb::arg("max_spec_factor"),
           nb::arg("max_spec_offset"),
           nb::arg("min_token_prob"), nb::arg("use_tree_spec"))
      .def("memory_bytes", &suffix_cache::memory_bytes);
  m.def("suffix_draft_tree", &suffix_draft_tree, nb::arg("root"), nb::arg("token_ids").none(), nb::arg("parents").none(),
        nb::arg("probs").none());

  nb::class_<specdec::draft_step>(m, "DraftStep")
      .def_ro("step", &specdec::draft_step::step)
      .def_ro("top_k", &specdec::draft_step::top_k)
      .def_prop_ro("batch", &specdec::draft_step::batch)
      .def_prop_ro("input_ids", [](const specdec::draft_step& s) { return to_numpy(std::vector(s.input_ids), static_cast<std::size_t>(s.batch()), static_cast<std::size_t>(s.top_k)); }, nb::rv_policy::move)
      .def_prop_ro("frontier", [](const specdec::draft_step& s) { return to_numpy(std::vector(s.frontier), static_cast<std::size_t>(s.batch()), static_cast<std::size_t>(s.top_k)); }, nb::rv_policy::move)
      .def_prop_ro("parent_slot", [](const specdec::draft_step& s) { return to_numpy(std::vector(s.parent_slot), static_cast<std::size_t>(s.batch()), static_cast<std::size_t>(s.top_k)); }, nb::rv_policy::move)
      .def_prop_ro("draft_mask",
                   [](const specdec::draft_step& s) {
                     auto* owned = new std::vector<std::uint8_t>(s.draft_mask);
                     nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<std::uint8_t>*>(p); });
                     return nb::ndarray<nb::numpy, std::uint8_t>(owned->data(),
                                                                {static_cast<std::size_t>(s.batch()), static_cast<std::size_t>(s.top_k),
                                                                 static_cast<std::size_t>(s.mask_cols)},
                                                                owner);
                   }, nb::rv_policy::move)
      .def("attention_mask",
           [](const specdec::draft_step& s, index_t prefix_length, index_t request) {
             return to_numpy(s.attention_mask(prefix_length, request), static_cast<std::size_t>(s.top_k),
                             static_cast<std::size_t>(prefix_length + s.mask_cols));
           },
           nb::arg("prefix_length"), nb::arg("request") = 0)
      .def("positions", [](const specdec::draft_step& s, index_t root_position, index_t request) { return to_numpy(s.positions(root_position, request)); },
           nb::arg("root_position"), nb::arg("request") = 0);

  nb::class_<eagle2_builder>(m, "Eagle2Builder")
      .def(nb::init<index_t, index_t, index_t, bool, std::vector<std::int32_t>, index_t>(), nb::arg("top_k"), nb::arg("depth"),
           nb::arg("total_tokens"), nb::arg("probability"), nb::arg("d2t"), nb::arg("batch"))
      .def_prop_ro("steps_done", [](const eagle2_builder& e) { return locked(e.mutex, [&] { return e.builder.steps_done(); }); })
      .def_prop_ro("expansions_complete",
                   [](const eagle2_builder& e) { return locked(e.mutex, [&] { return e.builder.expansions_complete(); }); })
      .def("begin",
           [](eagle2_builder& e, const array& root_logits, const array& root_tokens, index_t target_vocab) {
             const auto x = matrix_of<const float>(root_logits, "root_logits");
             const auto roots = span_of<const std::int32_t>(root_tokens, "root_tokens");
             return naming("root_logits", {"root_logits", "root_tokens", "target_vocab"},
                           [&] { return locked(e.mutex, [&] { return e.builder.begin(x, roots, target_vocab); }); });
           },
           nb::arg("root_logits").none(), nb::arg("root_tokens").none(), nb::arg("target_vocab"))
      .def("expand",
           [](eagle2_builder& e, const array& logits) {
             const auto x = matrix_of<const float>(logits, "frontier_logits");
             return naming("frontier_logits", {"frontier_logits"},
                           [&] { return locked(e.mutex, [&] { return e.builder.expand(x); }); });
           },
           nb::arg("frontier_logits").none())
      .def("expand_dual",
           [](eagle2_builder& e, const array& left, const array& right) {
             const auto l = matrix_of<const float>(left, "left_logits");
             const auto r = matrix_of<const float>(right, "right_logits");
             return naming("left_logits, right_logits", {"left_logits", "right_logits"},
                           [&] { return locked(e.mutex, [&] { return e.builder.expand_dual(l, r); }); });
           },
           nb::arg("left_logits").none(), nb::arg("right_logits").none())
      .def("finish", [](const eagle2_builder& e) {
        // The trees are built under the lock without the GIL; their numpy arrays after, with it.
        auto trees = locked(e.mutex, [&] { return e.builder.finish(); });
        std::vector<eagle2_result> out;
        for (auto& r : trees) {
          auto [token, parent, depth, score] = arrays_of(std::move(r.tree));
          out.emplace_back(token, parent, depth, score, to_numpy(std::move(r.selected)), to_numpy(std::move(r.parent_list)));
        }
        return out;
      });

  using specdec::policy::draft_length_policy;
  nb::class_<draft_length_policy>(m, "DraftLengthPolicy")
      .def(nb::init<index_t, index_t>(), nb::arg("longest"), nb::arg("contexts") = 1)
      .def_prop_ro("longest", &draft_length_policy::longest)
      .def_prop_ro("contexts", &draft_length_policy::contexts)
      .def("choose", [](draft_length_policy& p, index_t context, std::optional<index_t> available) {
             return available ? p.choose(context, *available) : p.choose(context);
           },
           nb::arg("context") = 0, nb::arg("available") = nb::none())
      .def("verified", &draft_length_policy::verified, nb::arg("accepted"), nb::arg("drafted"), nb::arg("context") = 0)
      .def("target_forward_timed", &draft_length_policy::target_forward_timed, nb::arg("rows"), nb::arg("seconds"))
      .def("draft_token_timed", &draft_length_policy::draft_token_timed, nb::arg("seconds"))
      .def("expected_tokens",
           [](const draft_length_policy& p, index_t length, index_t context) { return p.acceptance(context).expected_tokens(length); },
           nb::arg("length"), nb::arg("context") = 0)
      .def("acceptance_rate",
           [](const draft_length_policy& p, index_t depth, index_t context) { return p.acceptance(context).rate(depth); },
           nb::arg("depth"), nb::arg("context") = 0);

  m.def("verify_greedy", &verify_greedy, nb::arg("logits").none(), nb::arg("trees"), nb::arg("target_rows").none());
  m.def("verify_speculative", &verify_speculative, nb::arg("target").none(), nb::arg("logits"), nb::arg("temperature"),
        nb::arg("trees"), nb::arg("target_rows").none(), nb::arg("draft_probs").none(), nb::arg("draft_rows"), nb::arg("seed"),
        nb::arg("offset"));
}
