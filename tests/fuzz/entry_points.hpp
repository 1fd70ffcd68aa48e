// SPDX-License-Identifier: Apache-2.0
// The public entry points that take views or sizes, as one list that fuzz_views and fuzz_sizes both
// run: each entry declares its arguments (name, element type, canonical shape, role, valid contents)
// and its scalar sizes, and calls the library through a context that hands it each argument as the
// harness laid it out. A new entry point is one struct and one line in `entries`.
//
// fuzz_views lays the arguments over one arena as a hostile caller would: packed, null with a shape,
// row strides of 0, negative or shorter than a row, column strides of 0, -1 or 2, offset onto another
// argument, extents off by one. Each call either throws specdec::invalid_argument, or it wrote nothing
// outside its outputs and every output (and every returned value) equals the same call on separate,
// packed copies of what its views held. fuzz_sizes lays them out packed and draws the sizes at the
// int32 / int64 edges: each call throws invalid_argument or returns, writing only its outputs.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/backend/thrust.hpp>
#include <specdec/interop/sglang.hpp>
#include <specdec/interop/sglang_tree.hpp>
#include <specdec/interop/vllm.hpp>
#include <specdec/mask/packbits.hpp>
#include <specdec/mask/token_bitmask.hpp>
#include <specdec/mask/tree_mask.hpp>
#include <specdec/mask/tree_mask_batch.hpp>
#include <specdec/sampling/batch.hpp>
#include <specdec/sampling/batch_penalties.hpp>
#include <specdec/sampling/bitmask.hpp>
#include <specdec/sampling/distribution.hpp>
#include <specdec/sampling/logprobs.hpp>
#include <specdec/sampling/penalties.hpp>
#include <specdec/sampling/sampling.hpp>
#include <specdec/tree/eagle2_batch.hpp>
#include <specdec/tree/grammar.hpp>
#include <specdec/tree/tree.hpp>

#include "fuzz_input.hpp"

namespace fuzz::entry {

using specdec::index_t;
using specdec::matrix_view;
using specdec::vector_view;
using thrust_cpp = specdec::thrust_backend<specdec::thrust_system::cpp>;

enum class role { in, out, inout };

/// One argument: its element size, rank (a span is rank 1 with unit stride always), the layout the
/// harness chose, and the canonical contents it writes through that layout.
struct argument {
  const char* name = "";
  std::size_t elem = 4;
  int rank = 2;
  bool span = false;
  role r = role::in;
  index_t rows = 0, cols = 1;     // extents (rank 1: rows)
  index_t rs = 0, cs = 1;         // strides in elements (rank 1: rs)
  bool null = false;
  std::size_t base = 0;           // byte offset of element (0, 0) in the arena
  std::vector<double> values;     // canonical contents, row-major over the canonical shape
  index_t canon_rows = 0, canon_cols = 1;
};

/// Element offsets, in elements from (0, 0), of every element of a layout (row-major).
inline std::vector<index_t> element_offsets(const argument& a) {
  std::vector<index_t> out;
  for (index_t i = 0; i < std::max<index_t>(a.rows, 0); ++i)
    for (index_t j = 0; j < std::max<index_t>(a.rank == 2 ? a.cols : 1, 0); ++j) out.push_back(i * a.rs + (a.rank == 2 ? j * a.cs : 0));
  return out;
}

inline bool has_shape(const argument& a) { return a.rows > 0 && (a.rank == 1 || a.cols > 0); }

/// The memory the views live in and the arguments of one call.
class call_plan {
 public:
  static constexpr std::size_t arena_bytes = 16384;
  explicit call_plan(fuzz::input& in, bool hostile_views, bool hostile_sizes)
      : in_(in), hostile_views_(hostile_views), hostile_sizes_(hostile_sizes), arena_(arena_bytes / 8, 0) {}

  template <class T>
  int add(const char* name, int rank, index_t rows, index_t cols, role r, std::vector<double> values, bool span = false) {
    argument a;
    a.name = name;
    a.elem = sizeof(T);
    a.rank = rank;
    a.span = span;
    a.r = r;
    a.rows = a.canon_rows = rows;
    a.cols = a.canon_cols = rank == 2 ? cols : 1;
    a.rs = rank == 2 ? cols : 1;
    a.cs = 1;
    a.values = std::move(values);
    a.values.resize(static_cast<std::size_t>(rows * a.cols), 0.0);
    if (hostile_views_) perturb(a);
    place(a);
    args_.push_back(a);
    return static_cast<int>(args_.size()) - 1;
  }

  /// A size argument (the call reads it as `context::sizes[k]`, k in declaration order): `valid` unless
  /// fuzz_sizes draws an edge value for it.
  void size(index_t valid) { sizes_.push_back(hostile_sizes_ && in_.range(0, 2) == 0 ? in_.extreme() : valid); }
  const std::vector<index_t>& sizes() const { return sizes_; }

  bool fits() const { return fits_; }
  std::vector<argument>& args() { return args_; }
  std::uint8_t* bytes() { return reinterpret_cast<std::uint8_t*>(arena_.data()); }
  fuzz::input& input() { return in_; }

  /// Writes every argument's canonical values through its layout (later arguments over earlier ones
  /// where they overlap, as a caller's writes would).
  void fill() {
    for (const argument& a : args_) {
      if (a.null || !has_shape(a)) continue;
      const std::vector<index_t> at = element_offsets(a);
      for (std::size_t k = 0; k < at.size(); ++k) {
        const index_t i = static_cast<index_t>(k) / std::max<index_t>(a.rank == 2 ? a.cols : 1, 1);
        const index_t j = static_cast<index_t>(k) % std::max<index_t>(a.rank == 2 ? a.cols : 1, 1);
        const double v = i < a.canon_rows && j < a.canon_cols ? a.values[static_cast<std::size_t>(i * a.canon_cols + j)] : 0.0;
        store(a, static_cast<std::size_t>(static_cast<index_t>(a.base) + at[k] * static_cast<index_t>(a.elem)), v);
      }
    }
  }

 private:
  void perturb(argument& a) {
    const auto kind = in_.range(0, 19);
    if (kind < 10) return;  // the canonical layout, most of the time
    if (a.span && kind != 13 && kind != 14) return;  // a span has a pointer and a length only
    switch (kind) {
      case 10: a.null = true; break;
      case 11: a.rs = a.rank == 2 ? in_.range(-2, a.cols + 2) : in_.range(-2, 3); break;
      case 12: if (a.rank == 2) a.cs = in_.range(-1, 2); else a.rs = in_.range(-1, 2); break;
      case 13: overlap_ = true; overlap_shift_ = in_.range(-8, 8); break;  // onto another argument
      case 14: a.rows += in_.range(-1, 1); break;
      case 15: if (a.rank == 2) a.cols += in_.range(-1, 1); break;
      case 16: if (a.rank == 2) a.rs = a.cols + in_.range(1, 3); break;  // padded rows: valid
      default: break;
    }
  }

  void place(argument& a) {
    // The element offsets' extremes decide where (0, 0) goes so that the lowest element starts the region.
    index_t low = 0, high = 0;
    if (has_shape(a)) {
      for (const auto& [extent, stride] : {std::pair{a.rows, a.rs}, std::pair{a.rank == 2 ? a.cols : index_t{1}, a.cs}}) {
        if (extent <= 0) continue;
        const index_t reach = (extent - 1) * stride;
        (reach < 0 ? low : high) += reach;
      }
    }
    std::size_t start = next_;
    if (overlap_ && !args_.empty()) {
      const argument& other = args_[static_cast<std::size_t>(in_.range(0, static_cast<index_t>(args_.size()) - 1))];
      const index_t at = static_cast<index_t>(other.base) + overlap_shift_ * static_cast<index_t>(a.elem);
      start = at < 0 ? 0 : static_cast<std::size_t>(at);
    }
    overlap_ = false;
    start = (start + a.elem - 1) / a.elem * a.elem;  // aligned for its type
    const index_t first = static_cast<index_t>(start) - low * static_cast<index_t>(a.elem);
    const index_t end = first + (high + 1) * static_cast<index_t>(a.elem);
    if (first < 0 || end > static_cast<index_t>(arena_bytes)) fits_ = false;
    a.base = first < 0 ? 0 : static_cast<std::size_t>(first);
    const std::size_t used = static_cast<std::size_t>(std::max<index_t>(end, static_cast<index_t>(next_)));
    next_ = std::min<std::size_t>((used + 15) / 16 * 16 + 16, arena_bytes);
  }

  void store(const argument& a, std::size_t at, double v) {
    std::uint8_t* p = bytes() + at;
    switch (a.elem) {
      case 1: { const auto x = static_cast<std::uint8_t>(v); std::memcpy(p, &x, 1); break; }
      case 4: {
        // Integer arguments are declared with integer values; floats keep theirs.
        if (is_float_[&a - args_.data()]) { const auto x = static_cast<float>(v); std::memcpy(p, &x, 4); }
        else { const auto x = static_cast<std::int32_t>(v); std::memcpy(p, &x, 4); }
        break;
      }
      default: {
        if (is_float_[&a - args_.data()]) { const double x = v; std::memcpy(p, &x, 8); }
        else { const auto x = static_cast<std::int64_t>(v); std::memcpy(p, &x, 8); }
        break;
      }
    }
  }

 public:
  /// Whether argument i holds floating-point values (set by `add` through the typed helpers below).
  std::vector<bool> is_float_;

 private:
  fuzz::input& in_;
  bool hostile_views_, hostile_sizes_;
  std::vector<std::uint64_t> arena_;
  std::vector<argument> args_;
  std::vector<index_t> sizes_;
  std::size_t next_ = 0;
  bool fits_ = true, overlap_ = false;
  index_t overlap_shift_ = 0;
};

/// Typed helpers: the argument's kind follows its C++ type.
template <class T>
int add(call_plan& p, const char* name, int rank, index_t rows, index_t cols, role r, std::vector<double> values, bool span = false) {
  p.is_float_.push_back(std::is_floating_point_v<T>);
  return p.add<T>(name, rank, rows, cols, r, std::move(values), span);
}

/// What a call sees: each argument as a view or span over some memory (the arena, or packed copies).
struct context {
  std::vector<argument> args;
  std::vector<std::uint8_t*> data;  // element (0, 0) of each, null for a null view
  std::vector<index_t> sizes;
  template <class T>
  matrix_view<T> m(int i) const {
    const argument& a = args[static_cast<std::size_t>(i)];
    return matrix_view<T>(reinterpret_cast<T*>(data[static_cast<std::size_t>(i)]), a.rows, a.cols, a.rs, a.cs);
  }
  template <class T>
  vector_view<T> v(int i) const {
    const argument& a = args[static_cast<std::size_t>(i)];
    return vector_view<T>(reinterpret_cast<T*>(data[static_cast<std::size_t>(i)]), a.rows, a.rs);
  }
  template <class T>
  std::span<T> s(int i) const {
    const argument& a = args[static_cast<std::size_t>(i)];
    return std::span<T>(reinterpret_cast<T*>(data[static_cast<std::size_t>(i)]), static_cast<std::size_t>(std::max<index_t>(a.rows, 0)));
  }
};

using digest = std::vector<long long>;

// ---- contents ---------------------------------------------------------------------------------------

inline std::vector<double> logits(fuzz::input& in, index_t n) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (double& x : v) x = static_cast<double>(in.range(-8, 8)) / 2.0;
  return v;
}
inline std::vector<double> distributions(fuzz::input& in, index_t rows, index_t cols) {
  std::vector<double> v(static_cast<std::size_t>(rows * cols));
  for (index_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (index_t j = 0; j < cols; ++j) sum += v[static_cast<std::size_t>(r * cols + j)] = static_cast<double>(in.range(1, 4));
    for (index_t j = 0; j < cols; ++j) v[static_cast<std::size_t>(r * cols + j)] = static_cast<float>(v[static_cast<std::size_t>(r * cols + j)] / sum);
  }
  return v;
}
inline std::vector<double> ints(fuzz::input& in, index_t n, index_t lo, index_t hi) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (double& x : v) x = static_cast<double>(in.range(lo, hi));
  return v;
}
/// A parent array of `n` nodes: -1 at 0, each parent earlier.
inline std::vector<double> parents(fuzz::input& in, index_t n) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i == 0 ? -1.0 : static_cast<double>(in.range(0, i - 1));
  return v;
}
inline std::vector<double> depths_of(const std::vector<double>& parent) {
  std::vector<double> d(parent.size(), 0.0);
  for (std::size_t i = 1; i < parent.size(); ++i) d[i] = d[static_cast<std::size_t>(parent[i])] + 1.0;
  return d;
}

/// The tree arguments of a call (token, parent, depth spans), n nodes over V tokens.
struct tree_args {
  int token, parent, depth;
};
inline tree_args add_tree(call_plan& p, index_t n, index_t vocab) {
  std::vector<double> par = parents(p.input(), n);
  std::vector<double> dep = depths_of(par);
  const int t = add<std::int32_t>(p, "tree.token", 1, n, 1, role::in, ints(p.input(), n, 0, vocab - 1), true);
  const int a = add<std::int32_t>(p, "tree.parent", 1, n, 1, role::in, par, true);
  const int d = add<std::int32_t>(p, "tree.depth", 1, n, 1, role::in, dep, true);
  return {t, a, d};
}
inline specdec::tree_view tree_of(const context& c, tree_args t) {
  return specdec::tree_view(c.s<const std::int32_t>(t.token), c.s<const std::int32_t>(t.parent), c.s<const std::int32_t>(t.depth));
}

// ---- the entry points --------------------------------------------------------------------------------

struct row_softmax {
  static constexpr const char* name = "row_softmax";
  static void plan(call_plan& p) {
    add<float>(p, "x", 2, 3, 16, role::in, logits(p.input(), 48));
    add<float>(p, "out", 2, 3, 16, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    b.row_softmax(c.m<const float>(0), 1.0f, c.m<float>(1));
    return {};
  }
};

struct row_topk {
  static constexpr const char* name = "row_topk";
  static void plan(call_plan& p) {
    add<float>(p, "x", 2, 3, 16, role::in, logits(p.input(), 48));
    add<float>(p, "values", 2, 3, 4, role::out, {});
    add<std::int32_t>(p, "indices", 2, 3, 4, role::out, {});
    p.size(4);
  }
  template <class B>
  static digest call(B& b, const context& c) {
    b.row_topk(c.m<const float>(0), c.sizes[0], c.m<float>(1), c.m<std::int32_t>(2));
    return {};
  }
};

struct emitted_logprobs {
  static constexpr const char* name = "emitted_logprobs";
  static void plan(call_plan& p) {
    add<float>(p, "rows", 2, 4, 16, role::in, logits(p.input(), 64));
    // A 4-node chain; the result accepts nodes 1 and 2, then emits a final token.
    add<std::int32_t>(p, "tree.token", 1, 4, 1, role::in, {0, 3, 5, 7}, true);
    add<std::int32_t>(p, "tree.parent", 1, 4, 1, role::in, {-1, 0, 1, 2}, true);
    add<std::int32_t>(p, "tree.depth", 1, 4, 1, role::in, {0, 1, 2, 3}, true);
    add<float>(p, "temperatures", 1, 1, 1, role::in, {1.0}, true);
    add<std::int32_t>(p, "token_ids", 2, 3, 3, role::out, {});
    add<float>(p, "logprobs", 2, 3, 3, role::out, {});
    add<std::int32_t>(p, "ranks", 1, 3, 1, role::out, {});
    add<std::int32_t>(p, "bitmask", 2, 4, 1, role::in, {-1, -1, -1, -1});
    p.size(2);  // top_n
    p.size(0);  // target_row
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sampling::speculative_request q;
    q.tree = tree_of(c, {1, 2, 3});
    q.target_row = c.sizes[1];
    specdec::sampling::speculative_result r;
    r.accepted_nodes = {1, 2};
    r.tokens = {3, 5, 1};
    const std::span<const specdec::sampling::speculative_request> qs(&q, 1);
    const std::span<const specdec::sampling::speculative_result> rs(&r, 1);
    specdec::sampling::emitted_logprobs(b, c.m<const float>(0), qs, rs, c.s<const float>(4), c.sizes[0],
                                        {c.m<std::int32_t>(5), c.m<float>(6), c.v<std::int32_t>(7)}, c.m<const std::int32_t>(8));
    return {};
  }
};

struct apply_sampling_constraints {
  static constexpr const char* name = "vllm::apply_sampling_constraints";
  static void plan(call_plan& p) {
    add<float>(p, "logits", 2, 4, 8, role::inout, logits(p.input(), 32));
    add<std::int64_t>(p, "cu_num_draft_tokens", 1, 2, 1, role::in, {1, 4}, true);
    add<float>(p, "temperature", 1, 2, 1, role::in, {0.5, -1.0}, true);
    add<std::int64_t>(p, "top_k", 1, 2, 1, role::in, {3, 8}, true);
    add<float>(p, "top_p", 1, 2, 1, role::in, {0.75, 1.0}, true);
  }
  template <class B>
  static digest call(B&, const context& c) {
    specdec::vllm::apply_sampling_constraints(c.m<float>(0), c.s<const std::int64_t>(1), c.s<const float>(2), c.s<const std::int64_t>(3),
                                              c.s<const float>(4));
    return {};
  }
};

struct apply_token_bitmask_host {
  static constexpr const char* name = "apply_token_bitmask (host)";
  static void plan(call_plan& p) {
    add<float>(p, "logits", 2, 3, 40, role::inout, logits(p.input(), 120));
    add<std::int32_t>(p, "bitmask", 2, 3, 2, role::in, ints(p.input(), 6, -3, 3));
    add<std::int64_t>(p, "indices", 1, 2, 1, role::in, {2, 0}, true);
    p.size(40);  // vocab_size
  }
  template <class B>
  static digest call(B&, const context& c) {
    specdec::apply_token_bitmask(c.m<float>(0), c.m<const std::int32_t>(1), c.sizes[0], c.s<const index_t>(2));
    return {};
  }
};

struct apply_token_bitmask_backend {
  static constexpr const char* name = "apply_token_bitmask (backend)";
  static void plan(call_plan& p) { apply_token_bitmask_host::plan(p); }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::apply_token_bitmask(b, c.m<float>(0), c.m<const std::int32_t>(1), c.sizes[0], c.v<const index_t>(2));
    return {};
  }
};

struct masked_verify_greedy {
  static constexpr const char* name = "verify_greedy (bitmask)";
  static void plan(call_plan& p) {
    add<float>(p, "target_logits", 2, 4, 40, role::in, logits(p.input(), 160));
    add<std::int32_t>(p, "bitmask", 2, 4, 2, role::in, ints(p.input(), 8, -3, 3));
    add_tree(p, 4, 40);
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sampling::speculative_request q;
    q.tree = tree_of(c, {2, 3, 4});
    const auto res = specdec::sampling::verify_greedy(b, c.m<const float>(0), std::span(&q, 1), c.m<const std::int32_t>(1));
    return digest(res[0].tokens.begin(), res[0].tokens.end());
  }
};

struct fill_tree_bitmasks {
  static constexpr const char* name = "fill_tree_bitmasks";
  static void plan(call_plan& p) {
    add<std::int32_t>(p, "bitmask", 2, 4, 2, role::out, {});
    add_tree(p, 4, 40);
    p.size(40);  // vocab
    p.size(0);   // first_row
  }
  template <class B>
  static digest call(B&, const context& c) {
    specdec::any_token_matcher matcher{40};
    const auto flags = specdec::fill_tree_bitmasks(tree_of(c, {1, 2, 3}), c.sizes[0], matcher, c.m<std::int32_t>(0), c.sizes[1]);
    return digest(flags.begin(), flags.end());
  }
};

struct tree_penalties_host {
  static constexpr const char* name = "apply_tree_penalties (host)";
  static void plan(call_plan& p) {
    add<float>(p, "logits", 2, 4, 8, role::inout, logits(p.input(), 32));
    add_tree(p, 4, 8);
    p.size(0);  // first_row
  }
  template <class B>
  static digest call(B&, const context& c) {
    const specdec::sampling::penalty_history h(std::vector<std::int32_t>{1, 2}, std::vector<std::int32_t>{2, 5});
    specdec::sampling::apply_tree_penalties(c.m<float>(0), tree_of(c, {1, 2, 3}), c.sizes[0], h, {1.25f, 0.5f, -0.25f});
    return {};
  }
};

/// The tree_batch arguments: 2 requests of 3 nodes, node counts, bonus tokens.
struct batch_args {
  int tokens, parents, counts, bonus;
};
inline batch_args add_batch(call_plan& p, index_t vocab) {
  std::vector<double> par = parents(p.input(), 3), par2 = parents(p.input(), 3);
  par.insert(par.end(), par2.begin(), par2.end());
  const int t = add<std::int32_t>(p, "batch.tokens", 2, 2, 3, role::in, ints(p.input(), 6, 0, vocab - 1));
  const int a = add<std::int32_t>(p, "batch.parents", 2, 2, 3, role::in, par);
  const int n = add<std::int32_t>(p, "batch.node_counts", 1, 2, 1, role::in, {3, 2});
  const int b = add<std::int32_t>(p, "batch.bonus_tokens", 1, 2, 1, role::in, {1, -1});
  return {t, a, n, b};
}
inline specdec::sampling::tree_batch<specdec::host_space> batch_of(const context& c, batch_args a) {
  specdec::sampling::tree_batch<specdec::host_space> t;
  t.tokens = c.m<const std::int32_t>(a.tokens);
  t.parents = c.m<const std::int32_t>(a.parents);
  t.node_counts = c.v<const std::int32_t>(a.counts);
  t.bonus_tokens = c.v<const std::int32_t>(a.bonus);
  return t;
}
/// verify_outputs: tokens [2 x 3], accepted [2], accepted_nodes [2 x 2].
inline int add_outputs(call_plan& p) {
  const int t = add<std::int32_t>(p, "outputs.tokens", 2, 2, 3, role::out, {});
  add<std::int32_t>(p, "outputs.accepted", 1, 2, 1, role::out, {});
  add<std::int32_t>(p, "outputs.accepted_nodes", 2, 2, 2, role::out, {});
  return t;
}
inline specdec::sampling::verify_outputs<specdec::host_space> outputs_of(const context& c, int first) {
  specdec::sampling::verify_outputs<specdec::host_space> o;
  o.tokens = c.m<std::int32_t>(first);
  o.accepted = c.v<std::int32_t>(first + 1);
  o.accepted_nodes = c.m<std::int32_t>(first + 2);
  return o;
}

struct batch_penalties {
  static constexpr const char* name = "apply_tree_penalties (batch)";
  static void plan(call_plan& p) {
    add<float>(p, "logits", 2, 6, 8, role::inout, logits(p.input(), 48));
    add_batch(p, 8);
    add<std::int64_t>(p, "penalties.offsets", 1, 3, 1, role::in, {0, 2, 3});
    add<std::int32_t>(p, "penalties.tokens", 1, 3, 1, role::in, {1, 4, 2});
    add<std::int32_t>(p, "penalties.output_counts", 1, 3, 1, role::in, {0, 2, 1});
    add<std::int32_t>(p, "penalties.in_prompt", 1, 3, 1, role::in, {1, 0, 0});
    add<float>(p, "penalties.repetition", 1, 2, 1, role::in, {1.5, 0.75});
    add<float>(p, "penalties.frequency", 1, 2, 1, role::in, {0.5, -0.25});
    add<float>(p, "penalties.presence", 1, 2, 1, role::in, {0.25, 0.0});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sampling::penalty_batch<specdec::host_space> pen;
    pen.offsets = c.v<const std::int64_t>(5);
    pen.tokens = c.v<const std::int32_t>(6);
    pen.output_counts = c.v<const std::int32_t>(7);
    pen.in_prompt = c.v<const std::int32_t>(8);
    pen.repetition = c.v<const float>(9);
    pen.frequency = c.v<const float>(10);
    pen.presence = c.v<const float>(11);
    specdec::sampling::apply_tree_penalties(b, c.m<float>(0), batch_of(c, {1, 2, 3, 4}), pen);
    return {};
  }
};

struct batch_greedy_argmax {
  static constexpr const char* name = "verify_greedy (batch, logits + target_argmax)";
  static void plan(call_plan& p) {
    add<float>(p, "target_logits", 2, 6, 8, role::in, logits(p.input(), 48));
    add_batch(p, 8);
    add_outputs(p);
    add<std::int32_t>(p, "target_argmax", 1, 6, 1, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sampling::verify_greedy(b, c.m<const float>(0), batch_of(c, {1, 2, 3, 4}), outputs_of(c, 5), c.v<std::int32_t>(8));
    return {};
  }
};

struct batch_greedy_visited {
  static constexpr const char* name = "verify_greedy (batch, visited rows)";
  static void plan(call_plan& p) {
    add<float>(p, "target_logits", 2, 6, 8, role::in, logits(p.input(), 48));
    add_batch(p, 8);
    add_outputs(p);
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sampling::verify_greedy(b, c.m<const float>(0), batch_of(c, {1, 2, 3, 4}), outputs_of(c, 5));
    return {};
  }
};

struct batch_speculative {
  static constexpr const char* name = "verify_speculative (batch)";
  static void plan(call_plan& p) {
    add<float>(p, "rows.target", 2, 6, 8, role::in, distributions(p.input(), 6, 8));
    add_batch(p, 8);
    add<double>(p, "batch.uniforms", 2, 2, 4, role::in, {0.1, 0.9, 0.5, 0.3, 0.7, 0.2, 0.6, 0.4});
    add_outputs(p);
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sampling::speculative_rows<specdec::host_space> rows;
    rows.target = c.m<const float>(0);
    specdec::sampling::tree_batch<specdec::host_space> t = batch_of(c, {1, 2, 3, 4});
    t.uniforms = c.m<const double>(5);
    specdec::sampling::verify_speculative(b, rows, t, specdec::sampling::speculative_options{}, outputs_of(c, 6));
    return {};
  }
};

struct host_tree_mask_dense {
  static constexpr const char* name = "tree_mask_dense (host)";
  static void plan(call_plan& p) {
    add<std::uint8_t>(p, "out", 2, 4, 6, role::out, {});
    add_tree(p, 4, 10);
    p.size(2);  // prefix_length
  }
  template <class B>
  static digest call(B&, const context& c) {
    specdec::tree_mask_dense(tree_of(c, {1, 2, 3}), c.sizes[0], c.m<std::uint8_t>(0));
    return {};
  }
};

struct host_tree_mask_packed {
  static constexpr const char* name = "tree_mask_packed_int32 / _bitpacked_rows (host)";
  static void plan(call_plan& p) {
    add<std::int32_t>(p, "out", 2, 4, 1, role::out, {});
    add_tree(p, 4, 10);
  }
  template <class B>
  static digest call(B&, const context& c) {
    specdec::tree_mask_packed_int32(tree_of(c, {1, 2, 3}), c.m<std::int32_t>(0));
    return {};
  }
};

struct host_tree_positions {
  static constexpr const char* name = "tree_positions";
  static void plan(call_plan& p) {
    add<std::int32_t>(p, "positions", 1, 4, 1, role::out, {});
    add_tree(p, 4, 10);
    p.size(3);  // prefix_length
  }
  template <class B>
  static digest call(B&, const context& c) {
    specdec::tree_positions(tree_of(c, {1, 2, 3}), c.sizes[0], c.v<std::int32_t>(0));
    return {};
  }
};

struct host_child_links {
  static constexpr const char* name = "child_links";
  static void plan(call_plan& p) {
    add<std::int32_t>(p, "first_child", 1, 4, 1, role::out, {});
    add<std::int32_t>(p, "next_sibling", 1, 4, 1, role::out, {});
    add_tree(p, 4, 10);
  }
  template <class B>
  static digest call(B&, const context& c) {
    specdec::child_links(tree_of(c, {2, 3, 4}), c.v<std::int32_t>(0), c.v<std::int32_t>(1));
    return {};
  }
};

struct batch_tree_mask_dense {
  static constexpr const char* name = "tree_mask_dense (batch)";
  static void plan(call_plan& p) {
    std::vector<double> par = parents(p.input(), 3), par2 = parents(p.input(), 3);
    par.insert(par.end(), par2.begin(), par2.end());
    add<std::int32_t>(p, "parents", 2, 2, 3, role::in, par);
    add<std::int32_t>(p, "node_counts", 1, 2, 1, role::in, {3, 2});
    add<std::uint8_t>(p, "out", 2, 6, 5, role::out, {});
    p.size(2);  // prefix_length
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::tree_mask_dense(b, c.m<const std::int32_t>(0), c.v<const std::int32_t>(1), c.sizes[0], c.m<std::uint8_t>(2));
    return {};
  }
};

struct segment_packbits_host {
  static constexpr const char* name = "segment_packbits (host)";
  static void plan(call_plan& p) {
    add<std::uint8_t>(p, "x", 1, 11, 1, role::in, ints(p.input(), 11, 0, 1), true);
    add<std::int32_t>(p, "indptr", 1, 3, 1, role::in, {0, 9, 11}, true);
    add<std::uint8_t>(p, "out", 1, 3, 1, role::out, {}, true);
  }
  template <class B>
  static digest call(B&, const context& c) {
    specdec::segment_packbits(c.s<const std::uint8_t>(0), c.s<const std::int32_t>(1), specdec::bit_order::little, c.s<std::uint8_t>(2));
    return {};
  }
};

struct segment_packbits_backend {
  static constexpr const char* name = "segment_packbits (backend)";
  static void plan(call_plan& p) {
    add<std::uint8_t>(p, "x", 1, 11, 1, role::in, ints(p.input(), 11, 0, 1));
    add<std::int32_t>(p, "indptr", 1, 3, 1, role::in, {0, 9, 11});
    add<std::int32_t>(p, "offsets", 1, 3, 1, role::in, {0, 2, 3});
    add<std::uint8_t>(p, "out", 1, 3, 1, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::segment_packbits(b, c.v<const std::uint8_t>(0), c.v<const std::int32_t>(1), c.v<const std::int32_t>(2),
                              specdec::bit_order::little, c.v<std::uint8_t>(3));
    return {};
  }
};

struct rejection_sample_host {
  static constexpr const char* name = "vllm::rejection_sample (host)";
  static void plan(call_plan& p) {
    add<std::int32_t>(p, "draft_token_ids", 1, 3, 1, role::in, ints(p.input(), 3, 0, 7), true);
    add<std::int64_t>(p, "cu_num_draft_tokens", 1, 2, 1, role::in, {2, 3}, true);
    add<float>(p, "draft_probs", 2, 3, 8, role::in, distributions(p.input(), 3, 8));
    add<float>(p, "target_probs", 2, 3, 8, role::in, distributions(p.input(), 3, 8));
    add<std::int32_t>(p, "bonus_token_ids", 1, 2, 1, role::in, {4, 6}, true);
    add<std::uint8_t>(p, "is_greedy", 1, 2, 1, role::in, {0, 1}, true);
    add<double>(p, "uniforms", 1, 3, 1, role::in, {0.25, 0.5, 0.75}, true);
    add<float>(p, "exponentials", 2, 2, 8, role::in, {1, 2, 0.5, 1, 3, 1, 0.25, 1, 1, 1, 1, 1, 1, 1, 1, 1});
    add<std::int32_t>(p, "output", 2, 2, 3, role::out, {});
    p.size(2);
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::vllm::rejection_sample(b, c.s<const std::int32_t>(0), c.s<const std::int64_t>(1), c.sizes[0], c.m<const float>(2),
                                    c.m<const float>(3), c.s<const std::int32_t>(4), c.s<const std::uint8_t>(5), c.s<const double>(6),
                                    c.m<const float>(7), c.m<std::int32_t>(8));
    return {};
  }
};

struct batch_greedy_bitmask {
  static constexpr const char* name = "verify_greedy (batch, bitmask)";
  static void plan(call_plan& p) {
    add<float>(p, "target_logits", 2, 6, 40, role::in, logits(p.input(), 240));
    add_batch(p, 40);
    add_outputs(p);
    add<std::int32_t>(p, "bitmask", 2, 6, 2, role::in, ints(p.input(), 12, -3, 3));
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sampling::verify_greedy(b, c.m<const float>(0), c.m<const std::int32_t>(8), batch_of(c, {1, 2, 3, 4}), outputs_of(c, 5));
    return {};
  }
};

struct flashinfer_batch_masks {
  static constexpr const char* name = "tree_mask_flashinfer_offsets / _packed (batch)";
  static void plan(call_plan& p) {
    std::vector<double> par = parents(p.input(), 3), par2 = parents(p.input(), 3);
    par.insert(par.end(), par2.begin(), par2.end());
    add<std::int32_t>(p, "parents", 2, 2, 3, role::in, par);
    add<std::int32_t>(p, "node_counts", 1, 2, 1, role::in, {3, 2});
    add<std::int64_t>(p, "prefix_lengths", 1, 2, 1, role::in, {2, 5});
    add<std::int32_t>(p, "indptr", 1, 3, 1, role::out, {});
    add<std::uint8_t>(p, "out", 1, 4, 1, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::tree_mask_flashinfer_offsets(b, c.m<const std::int32_t>(0), c.v<const std::int32_t>(1), c.v<const std::int64_t>(2),
                                          c.v<std::int32_t>(3));
    specdec::tree_mask_flashinfer_packed(b, c.m<const std::int32_t>(0), c.v<const std::int32_t>(1), c.v<const std::int64_t>(2),
                                         vector_view<const std::int32_t>(c.v<std::int32_t>(3)), c.v<std::uint8_t>(4));
    return {};
  }
};

struct sglang_greedy {
  static constexpr const char* name = "sglang::verify_tree_greedy (backend)";
  static void plan(call_plan& p) {
    // One request, a root with two children (node 2 under node 1): SGLang's link layout.
    add<std::int64_t>(p, "candidates", 2, 1, 3, role::in, {9, 4, 6});
    add<std::int64_t>(p, "retrive_index", 2, 1, 3, role::in, {0, 1, 2});
    add<std::int64_t>(p, "next_token", 2, 1, 3, role::in, {1, 2, -1});
    add<std::int64_t>(p, "next_sibling", 2, 1, 3, role::in, {-1, -1, -1});
    add<std::int64_t>(p, "target_predict", 1, 3, 1, role::in, ints(p.input(), 3, 3, 7));
    add<std::int32_t>(p, "predicts", 1, 3, 1, role::out, {});
    add<std::int32_t>(p, "accept_index", 2, 1, 3, role::out, {});
    add<std::int32_t>(p, "accept_token_num", 1, 1, 1, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sglang::verify_tree_greedy(b, c.m<const std::int64_t>(0), c.m<const std::int64_t>(1), c.m<const std::int64_t>(2),
                                        c.m<const std::int64_t>(3), c.v<const std::int64_t>(4), c.v<std::int32_t>(5),
                                        c.m<std::int32_t>(6), c.v<std::int32_t>(7));
    return {};
  }
};

struct eagle2_batch_finish {
  static constexpr const char* name = "eagle2_batch_builder::finish";
  static void plan(call_plan& p) {
    add<std::int32_t>(p, "out.tokens", 2, 2, 4, role::out, {});
    add<std::int32_t>(p, "out.parents", 2, 2, 4, role::out, {});
    add<std::int32_t>(p, "out.depths", 2, 2, 4, role::out, {});
    add<float>(p, "out.scores", 2, 2, 4, role::out, {});
    add<std::int32_t>(p, "out.selected", 2, 2, 3, role::out, {});
    add<float>(p, "root_logits", 2, 2, 8, role::in, logits(p.input(), 16));
    add<float>(p, "frontier_logits", 2, 4, 8, role::in, logits(p.input(), 32));
    add<std::int32_t>(p, "root_tokens", 1, 2, 1, role::in, {3, 5});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::eagle2_batch_builder<B> builder(b, specdec::dynamic_tree_config{2, 1, 4}, 2);
    (void)builder.begin(c.m<const float>(5), c.v<const std::int32_t>(7));
    (void)builder.expand(c.m<const float>(6));
    builder.finish({c.m<std::int32_t>(0), c.m<std::int32_t>(1), c.m<std::int32_t>(2), c.m<float>(3), c.m<std::int32_t>(4)});
    return {};
  }
};

struct prune_tree_bitmask {
  static constexpr const char* name = "prune_tree (bitmask)";
  static void plan(call_plan& p) {
    add<std::int32_t>(p, "bitmask", 2, 4, 2, role::in, ints(p.input(), 8, -3, 3));
    p.size(40);  // vocab
    p.size(0);   // first_row
  }
  template <class B>
  static digest call(B&, const context& c) {
    const specdec::draft_tree tree = specdec::make_tree({0, 3, 33, 7}, {-1, 0, 0, 1});
    const specdec::pruned_tree kept = specdec::prune_tree(tree, c.sizes[0], c.m<const std::int32_t>(0), c.sizes[1]);
    return digest(kept.tree.token.begin(), kept.tree.token.end());
  }
};

struct joint_renorm_backend {
  static constexpr const char* name = "top_k_top_p_joint_renorm (backend)";
  static void plan(call_plan& p) {
    add<float>(p, "probs", 2, 3, 16, role::in, distributions(p.input(), 3, 16));
    add<std::int64_t>(p, "top_k", 1, 3, 1, role::in, {3, 16, 1});
    add<float>(p, "top_p", 1, 3, 1, role::in, {0.5, 1.0, 0.9});
    add<float>(p, "out", 2, 3, 16, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sampling::top_k_top_p_joint_renorm(b, c.m<const float>(0), c.v<const std::int64_t>(1), c.v<const float>(2), c.m<float>(3));
    return {};
  }
};

struct top_k_mask_logits_backend {
  static constexpr const char* name = "top_k_mask_logits (backend)";
  static void plan(call_plan& p) {
    add<float>(p, "logits", 2, 3, 16, role::in, logits(p.input(), 48));
    add<std::int64_t>(p, "top_k", 1, 3, 1, role::in, {3, 16, 1});
    add<float>(p, "out", 2, 3, 16, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sampling::top_k_mask_logits(b, c.m<const float>(0), c.v<const std::int64_t>(1), c.m<float>(2));
    return {};
  }
};

struct rejection_sample_backend {
  static constexpr const char* name = "vllm::rejection_sample (backend)";
  static void plan(call_plan& p) {
    add<std::int32_t>(p, "draft_token_ids", 1, 3, 1, role::in, ints(p.input(), 3, 0, 7));
    add<std::int64_t>(p, "cu_num_draft_tokens", 1, 2, 1, role::in, {2, 3});
    add<float>(p, "draft_probs", 2, 3, 8, role::in, distributions(p.input(), 3, 8));
    add<float>(p, "target_probs", 2, 3, 8, role::in, distributions(p.input(), 3, 8));
    add<std::int32_t>(p, "bonus_token_ids", 1, 2, 1, role::in, {4, 6});
    add<std::uint8_t>(p, "is_greedy", 1, 2, 1, role::in, {0, 1});
    add<double>(p, "uniforms", 1, 3, 1, role::in, {0.25, 0.5, 0.75});
    add<float>(p, "exponentials", 2, 2, 8, role::in, {1, 2, 0.5, 1, 3, 1, 0.25, 1, 1, 1, 1, 1, 1, 1, 1, 1});
    add<std::int32_t>(p, "output", 2, 2, 3, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::vllm::rejection_sample(b, c.v<const std::int32_t>(0), c.v<const std::int64_t>(1), c.m<const float>(2), c.m<const float>(3),
                                    c.v<const std::int32_t>(4), c.v<const std::uint8_t>(5), c.v<const double>(6), c.m<const float>(7),
                                    c.m<std::int32_t>(8));
    return {};
  }
};

struct batch_tree_mask_packed {
  static constexpr const char* name = "tree_mask_packed_int32 (batch)";
  static void plan(call_plan& p) {
    std::vector<double> par = parents(p.input(), 3), par2 = parents(p.input(), 3);
    par.insert(par.end(), par2.begin(), par2.end());
    add<std::int32_t>(p, "parents", 2, 2, 3, role::in, par);
    add<std::int32_t>(p, "node_counts", 1, 2, 1, role::in, {3, 2});
    add<std::int32_t>(p, "out", 2, 6, 1, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::tree_mask_packed_int32(b, c.m<const std::int32_t>(0), c.v<const std::int32_t>(1), c.m<std::int32_t>(2));
    return {};
  }
};

struct gather_rows_entry {
  static constexpr const char* name = "gather_rows";
  static void plan(call_plan& p) {
    add<float>(p, "x", 2, 4, 8, role::in, logits(p.input(), 32));
    add<std::int32_t>(p, "row_ids", 1, 3, 1, role::in, ints(p.input(), 3, 0, 3));
    add<float>(p, "out", 2, 3, 8, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    b.gather_rows(c.m<const float>(0), c.v<const std::int32_t>(1), c.m<float>(2));
    return {};
  }
};

struct sglang_build_tree {
  static constexpr const char* name = "sglang::build_tree (backend)";
  static void plan(call_plan& p) {
    // One request, top_k 2, 2 steps, 3 nodes (QLEN_ONLY masks: 3 x 3 bools).
    add<std::int64_t>(p, "parent_list", 2, 1, 3, role::in, {-1, 0, 1});
    add<std::int64_t>(p, "selected_index", 2, 1, 2, role::in, ints(p.input(), 2, 0, 5));
    add<std::int64_t>(p, "verified_seq_len", 1, 1, 1, role::in, {5});
    add<std::uint8_t>(p, "tree_mask", 1, 9, 1, role::out, {});
    add<std::int64_t>(p, "positions", 1, 3, 1, role::out, {});
    add<std::int64_t>(p, "retrive_index", 2, 1, 3, role::out, {});
    add<std::int64_t>(p, "retrive_next_token", 2, 1, 3, role::out, {});
    add<std::int64_t>(p, "retrive_next_sibling", 2, 1, 3, role::out, {});
    p.size(2);  // top_k
    p.size(2);  // num_steps
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sglang::build_tree(b, c.m<const std::int64_t>(0), c.m<const std::int64_t>(1), c.v<const std::int64_t>(2),
                                c.v<std::uint8_t>(3), c.v<std::int64_t>(4), c.m<std::int64_t>(5), c.m<std::int64_t>(6),
                                c.m<std::int64_t>(7), c.sizes[0], c.sizes[1], specdec::sglang::tree_mask_mode::qlen_only);
    return {};
  }
};

struct top_p_renorm_backend {
  static constexpr const char* name = "top_p_renorm (backend)";
  static void plan(call_plan& p) {
    add<float>(p, "probs", 2, 3, 16, role::in, distributions(p.input(), 3, 16));
    add<float>(p, "top_p", 1, 3, 1, role::in, {0.5, 1.0, 0.25});
    add<float>(p, "out", 2, 3, 16, role::out, {});
  }
  template <class B>
  static digest call(B& b, const context& c) {
    specdec::sampling::top_p_renorm(b, c.m<const float>(0), c.v<const float>(1), c.m<float>(2));
    return {};
  }
};

/// Calls an entry on both backends (the harness picks one per input).
struct entry {
  const char* name;
  void (*plan)(call_plan&);
  digest (*eigen)(specdec::eigen&, const context&);
  digest (*thrust)(thrust_cpp&, const context&);
};
template <class E>
constexpr entry make() {
  return {E::name, &E::plan, &E::template call<specdec::eigen>, &E::template call<thrust_cpp>};
}

/// Every entry point the view and size harnesses reach.
inline constexpr entry entries[] = {
    make<row_softmax>(),
    make<row_topk>(),
    make<emitted_logprobs>(),
    make<apply_sampling_constraints>(),
    make<apply_token_bitmask_host>(),
    make<apply_token_bitmask_backend>(),
    make<masked_verify_greedy>(),
    make<fill_tree_bitmasks>(),
    make<tree_penalties_host>(),
    make<batch_penalties>(),
    make<batch_greedy_argmax>(),
    make<batch_greedy_visited>(),
    make<batch_speculative>(),
    make<host_tree_mask_dense>(),
    make<host_tree_mask_packed>(),
    make<host_tree_positions>(),
    make<host_child_links>(),
    make<batch_tree_mask_dense>(),
    make<segment_packbits_host>(),
    make<segment_packbits_backend>(),
    make<rejection_sample_host>(),
    make<batch_greedy_bitmask>(),
    make<flashinfer_batch_masks>(),
    make<sglang_greedy>(),
    make<eagle2_batch_finish>(),
    make<prune_tree_bitmask>(),
    make<joint_renorm_backend>(),
    make<top_k_mask_logits_backend>(),
    make<rejection_sample_backend>(),
    make<batch_tree_mask_packed>(),
    make<gather_rows_entry>(),
    make<sglang_build_tree>(),
    make<top_p_renorm_backend>(),
};

/// Runs `e` on backend B over `c`: its digest, or `threw` when it threw invalid_argument. Any other
/// exception escapes to libFuzzer, a finding.
template <class B>
digest run(const entry& e, const context& c, bool& threw) {
  B b;
  threw = false;
  try {
    if constexpr (std::is_same_v<B, specdec::eigen>) return e.eigen(b, c);
    else return e.thrust(b, c);
  } catch (const specdec::invalid_argument&) {
    threw = true;
  }
  return {};
}

/// The packed, separate copies of what each of a plan's views holds, as a context.
struct packed_copies {
  context c;
  std::vector<std::vector<std::uint64_t>> buffers;
  bool null_with_shape = false;
};
inline packed_copies copies_of(call_plan& p) {
  packed_copies out;
  out.c.sizes = p.sizes();
  for (const argument& a : p.args()) {
    argument packed = a;
    packed.null = false;
    packed.rs = a.rank == 2 ? std::max<index_t>(a.cols, 0) : 1;
    packed.cs = 1;
    const std::vector<index_t> at = element_offsets(a);
    out.buffers.emplace_back((at.size() * a.elem + 7) / 8 + 1, 0);
    auto* dst = reinterpret_cast<std::uint8_t*>(out.buffers.back().data());
    if (a.null && has_shape(a)) out.null_with_shape = true;
    if (!a.null)
      for (std::size_t k = 0; k < at.size(); ++k)
        std::memcpy(dst + k * a.elem, p.bytes() + static_cast<index_t>(a.base) + at[k] * static_cast<index_t>(a.elem), a.elem);
    out.c.args.push_back(packed);
    out.c.data.push_back(dst);
  }
  return out;
}

inline context views_of(call_plan& p) {
  context c;
  c.args = p.args();
  c.sizes = p.sizes();
  for (const argument& a : p.args()) c.data.push_back(a.null ? nullptr : p.bytes() + a.base);
  return c;
}

/// Prints a plan's layouts (what a finding's log shows).
inline void dump(call_plan& p, const char* name) {
  std::fprintf(stderr, "%s:\n", name);
  for (const argument& a : p.args())
    std::fprintf(stderr, "  %-28s rank %d elem %zu at byte %zu: [%lld x %lld] strides (%lld, %lld)%s%s\n", a.name, a.rank, a.elem, a.base,
                 static_cast<long long>(a.rows), static_cast<long long>(a.cols), static_cast<long long>(a.rs),
                 static_cast<long long>(a.cs), a.null ? " null" : "", a.r == role::in ? "" : " (written)");
  for (std::size_t k = 0; k < p.sizes().size(); ++k) std::fprintf(stderr, "  size %zu = %lld\n", k, static_cast<long long>(p.sizes()[k]));
}

/// Every arena byte outside the plan's written arguments is as in `before`.
inline void untouched_outside_outputs(call_plan& p, const std::vector<std::uint8_t>& before, const char* name) {
  std::vector<char> written(call_plan::arena_bytes, 0);
  for (const argument& a : p.args()) {
    if (a.r == role::in || a.null) continue;
    for (const index_t at : element_offsets(a))
      for (std::size_t k = 0; k < a.elem; ++k) written[static_cast<std::size_t>(static_cast<index_t>(a.base) + at * static_cast<index_t>(a.elem)) + k] = 1;
  }
  for (std::size_t i = 0; i < call_plan::arena_bytes; ++i)
    if (!written[i] && before[i] != p.bytes()[i]) {
      dump(p, name);
      fuzz::fail("a write outside the outputs", static_cast<long long>(i));
    }
}

template <class B>
void views_case(fuzz::input& in, const entry& e) {
  call_plan p(in, /*hostile_views=*/true, /*hostile_sizes=*/false);
  e.plan(p);
  if (!p.fits()) return;  // a view past the caller's memory is the caller's bug, which no library can see
  p.fill();
  packed_copies clean = copies_of(p);
  bool clean_threw = true;
  digest expected;
  if (!clean.null_with_shape) expected = run<B>(e, clean.c, clean_threw);
  const std::vector<std::uint8_t> before(p.bytes(), p.bytes() + call_plan::arena_bytes);
  bool threw = false;
  const digest got = run<B>(e, views_of(p), threw);
  if (threw) return;
  if (clean.null_with_shape) dump(p, e.name);
  fuzz::require(!clean.null_with_shape, "accepted a null view with a shape");
  if (clean_threw) dump(p, e.name);
  fuzz::require(!clean_threw, "accepted views whose packed copies are rejected");
  untouched_outside_outputs(p, before, e.name);
  for (std::size_t i = 0; i < p.args().size(); ++i) {
    const argument& a = p.args()[i];
    if (a.r == role::in) continue;
    const std::vector<index_t> at = element_offsets(a);
    const auto* want = reinterpret_cast<const std::uint8_t*>(clean.buffers[i].data());
    for (std::size_t k = 0; k < at.size(); ++k)
      if (std::memcmp(p.bytes() + static_cast<index_t>(a.base) + at[k] * static_cast<index_t>(a.elem), want + k * a.elem, a.elem) != 0) {
        dump(p, e.name);
        std::fprintf(stderr, "%s element %zu\n", a.name, k);
        fuzz::fail("an output differs from the call on packed copies");
      }
  }
  if (got != expected) dump(p, e.name);
  fuzz::require(got == expected, "a returned value differs from the call on packed copies");
}

template <class B>
void sizes_case(fuzz::input& in, const entry& e) {
  call_plan p(in, /*hostile_views=*/false, /*hostile_sizes=*/true);
  e.plan(p);
  if (!p.fits()) return;
  p.fill();
  const std::vector<std::uint8_t> before(p.bytes(), p.bytes() + call_plan::arena_bytes);
  bool threw = false;
  (void)run<B>(e, views_of(p), threw);
  if (!threw) untouched_outside_outputs(p, before, e.name);
}

/// One input of fuzz_views (`sizes` false) or fuzz_sizes: an entry, a backend, then the layouts.
inline void run_one(fuzz::input& in, bool sizes) {
  const entry& e = entries[in.byte() % (sizeof entries / sizeof entries[0])];
  const bool thrust = in.flag();
  if (sizes) thrust ? sizes_case<thrust_cpp>(in, e) : sizes_case<specdec::eigen>(in, e);
  else thrust ? views_case<thrust_cpp>(in, e) : views_case<specdec::eigen>(in, e);
}

}  // namespace fuzz::entry
