// SPDX-License-Identifier: Apache-2.0
// The machinery of the entry-point list that fuzz_views and fuzz_sizes both run (entry_points.hpp):
// each entry declares its arguments (name, element type, canonical shape, role, valid contents) and
// its scalar sizes, and calls the library through a context that hands it each argument as the
// harness laid it out. A new entry point is one struct in an entries_*.hpp and one line in `entries`.
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
#include <specdec/interop/sglang_sampling.hpp>
#include <specdec/interop/sglang_tree.hpp>
#include <specdec/interop/vllm.hpp>
#include <specdec/mask/packbits.hpp>
#include <specdec/grammar/token_bitmask.hpp>
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
#include <specdec/grammar/tree_grammar.hpp>
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
      case 2: {  // bf16 / fp16 rows: the value rounded to the type, as a caller's tensor holds it
        const std::uint16_t x = half_kind_[&a - args_.data()] == 1 ? specdec::to_bfloat16(static_cast<float>(v)).bits
                                                                      : specdec::to_float16(static_cast<float>(v)).bits;
        std::memcpy(p, &x, 2);
        break;
      }
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
  /// Argument i's 16-bit type: 1 bfloat16, 2 float16, 0 neither.
  std::vector<int> half_kind_;

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
  p.is_float_.push_back(std::is_floating_point_v<T> || specdec::is_half_v<T>);
  p.half_kind_.push_back(std::is_same_v<T, specdec::bfloat16> ? 1 : std::is_same_v<T, specdec::float16> ? 2 : 0);
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

/// Each group's entries (entries_<group>.cpp: one translation unit per group, so that the list
/// compiles in parallel, once for both harnesses).
std::span<const entry> dense_entries();
std::span<const entry> blocks_entries();
std::span<const entry> requests_entries();
std::span<const entry> sampling_entries();
std::span<const entry> trees_entries();

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

}  // namespace fuzz::entry
