// SPDX-License-Identifier: Apache-2.0
// Output and input views as a hostile caller builds them over one buffer, for row_softmax, row_topk,
// gemm and verify_greedy's outputs here and for every entry point of entry_points.hpp's list: arbitrary offsets, extents
// (negative and zero included), row strides (0, negative, smaller than the row), vector strides,
// null pointers with a shape, outputs overlapping inputs or each other. Each call either throws
// specdec::invalid_argument, or it wrote nothing outside its outputs and gave exactly what the same
// call gives on separate, packed copies of its inputs (on both backends alike).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/backend/thrust.hpp>
#include <specdec/core/view_checks.hpp>
#include <specdec/sampling/sampling.hpp>

#include "entry_points.hpp"
#include "fuzz_input.hpp"

namespace {

using specdec::index_t;
using specdec::matrix_view;
using specdec::vector_view;
constexpr index_t arena_floats = 256;

/// A caller's matrix over the arena: offset, extents and strides drawn so that its footprint stays
/// inside the arena whenever its extents are positive (a view past the caller's memory is the
/// caller's bug, which no library can see); null when `null` is drawn.
struct geometry {
  index_t offset = 0, rows = 0, cols = 0, row_stride = 0, col_stride = 1;
  bool null = false;
};

geometry draw_matrix(fuzz::input& in) {
  geometry g;
  g.rows = in.range(-1, 5);
  g.cols = in.range(-1, 6);
  g.row_stride = in.flag() ? g.cols : in.range(-2, 9);
  g.col_stride = in.range(0, 7) == 0 ? in.range(-1, 2) : 1;
  g.offset = in.range(0, arena_floats - 1);
  g.null = in.range(0, 15) == 0;
  return g;
}

/// Whether every element the geometry can address lies in the arena.
bool inside(const geometry& g) {
  if (g.rows <= 0 || g.cols <= 0) return true;
  index_t low = g.offset, high = g.offset;
  for (const auto& [extent, stride] : {std::pair{g.rows, g.row_stride}, std::pair{g.cols, g.col_stride}})
    (stride < 0 ? low : high) += (extent - 1) * stride;
  return low >= 0 && high < arena_floats;
}

/// A null view with a shape: the call must reject it, and it has no packed copy.
bool null_with_shape(const geometry& g) { return g.null && g.rows > 0 && g.cols > 0; }

template <class T>
matrix_view<T> view_of(std::vector<T>& arena, const geometry& g) {
  return matrix_view<T>(g.null ? nullptr : arena.data() + g.offset, g.rows, g.cols, g.row_stride, g.col_stride);
}

/// The view's elements, row-major (for the comparison with the clean run).
template <class T>
std::vector<std::remove_const_t<T>> elements(matrix_view<T> v) {
  std::vector<std::remove_const_t<T>> out;
  for (index_t i = 0; i < v.rows(); ++i)
    for (index_t j = 0; j < v.cols(); ++j) out.push_back(v(i, j));
  return out;
}

/// Bytes of the arena outside the given outputs are as in `before`.
template <class T>
void untouched_outside(const std::vector<T>& before, const std::vector<T>& after, std::initializer_list<geometry> outputs) {
  std::vector<char> written(before.size(), 0);
  for (const geometry& g : outputs)
    for (index_t i = 0; i < std::max<index_t>(g.rows, 0); ++i)
      for (index_t j = 0; j < std::max<index_t>(g.cols, 0); ++j)
        written[static_cast<std::size_t>(g.offset + i * g.row_stride + j * g.col_stride)] = 1;
  for (std::size_t i = 0; i < before.size(); ++i)
    if (!written[i]) fuzz::require(std::memcmp(&before[i], &after[i], sizeof(T)) == 0, "a write outside the outputs", static_cast<long long>(i));
}

template <class B>
void softmax_case(fuzz::input& in) {
  std::vector<float> arena(arena_floats);
  for (float& x : arena) x = static_cast<float>(in.range(-8, 8));
  const geometry x = draw_matrix(in);
  geometry out = in.flag() ? x : draw_matrix(in);
  if (!inside(x) || !inside(out)) return;
  const float temperature = in.flag() ? 1.0f : 0.0f;
  B b;
  // The clean run: packed copies, separate memory.
  std::vector<float> expected;
  bool clean_ok = !null_with_shape(x);
  if (clean_ok) try {
    std::vector<float> xs = elements(view_of(arena, x)), os(xs.size());
    b.row_softmax(matrix_view<const float>(xs.data(), x.rows, x.cols), temperature, matrix_view<float>(os.data(), x.rows, x.cols));
    expected = os;
  } catch (const specdec::invalid_argument&) {
    clean_ok = false;
  }
  const std::vector<float> before = arena;
  try {
    b.row_softmax(matrix_view<const float>(view_of(arena, x)), temperature, view_of(arena, out));
  } catch (const specdec::invalid_argument&) {
    return;
  }
  fuzz::require(clean_ok, "accepted views whose packed copy is rejected");
  untouched_outside(before, arena, {out});
  const std::vector<float> got = elements(view_of(arena, out));
  fuzz::require(got.size() == expected.size(), "row_softmax output size");
  for (std::size_t i = 0; i < got.size(); ++i)
    fuzz::require(std::memcmp(&got[i], &expected[i], 4) == 0, "row_softmax differs from the packed run", static_cast<long long>(i));
}

template <class B>
void topk_case(fuzz::input& in) {
  std::vector<float> arena(arena_floats);
  for (float& x : arena) x = static_cast<float>(in.range(-8, 8));
  std::vector<std::int32_t> ids(arena_floats, -7);
  const geometry x = draw_matrix(in), values = draw_matrix(in), indices = draw_matrix(in);
  if (!inside(x) || !inside(values) || !inside(indices)) return;
  const index_t k = in.range(-1, 4);
  B b;
  std::vector<float> expected_values;
  std::vector<std::int32_t> expected_ids;
  bool clean_ok = !null_with_shape(x);
  if (clean_ok) try {
    std::vector<float> xs = elements(view_of(arena, x));
    const index_t rows = std::max<index_t>(x.rows, 0);
    std::vector<float> vs(static_cast<std::size_t>(rows * std::max<index_t>(k, 0)));
    std::vector<std::int32_t> is(vs.size());
    b.row_topk(matrix_view<const float>(xs.data(), x.rows, x.cols), k, matrix_view<float>(vs.data(), rows, k),
               matrix_view<std::int32_t>(is.data(), rows, k));
    expected_values = vs;
    expected_ids = is;
  } catch (const specdec::invalid_argument&) {
    clean_ok = false;
  }
  const std::vector<float> before = arena;
  const std::vector<std::int32_t> ids_before = ids;
  try {
    b.row_topk(matrix_view<const float>(view_of(arena, x)), k, view_of(arena, values), view_of(ids, indices));
  } catch (const specdec::invalid_argument&) {
    return;
  }
  fuzz::require(clean_ok, "row_topk accepted views whose packed copy is rejected");
  untouched_outside(before, arena, {values});
  untouched_outside(ids_before, ids, {indices});
  fuzz::require(elements(view_of(arena, values)) == expected_values && elements(view_of(ids, indices)) == expected_ids,
                "row_topk differs from the packed run");
}

template <class B>
void gemm_case(fuzz::input& in) {
  std::vector<float> arena(arena_floats);
  for (float& x : arena) x = static_cast<float>(in.range(-4, 4));
  const geometry a = draw_matrix(in), bm = draw_matrix(in);
  geometry c = draw_matrix(in);
  c.rows = a.rows;
  c.cols = bm.cols;
  if (!inside(a) || !inside(bm) || !inside(c)) return;
  B b;
  std::vector<float> expected;
  bool clean_ok = !null_with_shape(a) && !null_with_shape(bm);
  if (clean_ok) try {
    std::vector<float> as = elements(view_of(arena, a)), bs = elements(view_of(arena, bm));
    std::vector<float> cs(static_cast<std::size_t>(std::max<index_t>(c.rows, 0) * std::max<index_t>(c.cols, 0)));
    b.gemm(matrix_view<const float>(as.data(), a.rows, a.cols), specdec::transpose::no,
           matrix_view<const float>(bs.data(), bm.rows, bm.cols), specdec::transpose::no, matrix_view<float>(cs.data(), c.rows, c.cols));
    expected = cs;
  } catch (const specdec::invalid_argument&) {
    clean_ok = false;
  }
  const std::vector<float> before = arena;
  try {
    b.gemm(matrix_view<const float>(view_of(arena, a)), specdec::transpose::no, matrix_view<const float>(view_of(arena, bm)),
           specdec::transpose::no, view_of(arena, c));
  } catch (const specdec::invalid_argument&) {
    return;
  }
  fuzz::require(clean_ok, "gemm accepted views whose packed copy is rejected");
  untouched_outside(before, arena, {c});
  const std::vector<float> got = elements(view_of(arena, c));
  for (std::size_t i = 0; i < got.size(); ++i)
    fuzz::require(std::memcmp(&got[i], &expected[i], 4) == 0, "gemm differs from the packed run", static_cast<long long>(i));
}

/// verify_greedy's outputs laid over one int32 buffer.
template <class B>
void outputs_case(fuzz::input& in) {
  std::vector<std::int32_t> arena(arena_floats, -9);
  std::vector<float> target(8);
  for (float& x : target) x = static_cast<float>(in.range(0, 3));
  const specdec::draft_tree chain = specdec::sampling::make_chain(
      static_cast<std::int32_t>(in.range(0, 1)), std::vector<std::int32_t>{static_cast<std::int32_t>(in.range(0, 1))});
  specdec::sampling::speculative_request q;
  q.tree = chain;
  geometry tokens = draw_matrix(in), nodes = draw_matrix(in);
  geometry accepted = draw_matrix(in);
  accepted.cols = 1;
  if (!inside(tokens) || !inside(nodes) || !inside(accepted)) return;
  B b;
  const matrix_view<const float> rows(target.data(), 2, 4);
  const auto clean = specdec::sampling::verify_greedy(b, rows, q);
  specdec::sampling::verify_outputs<specdec::host_space> out;
  out.tokens = view_of(arena, tokens);
  out.accepted_nodes = view_of(arena, nodes);
  // A vector over the arena with the drawn row stride as its stride.
  out.accepted = vector_view<std::int32_t>(accepted.null ? nullptr : arena.data() + accepted.offset, accepted.rows, accepted.row_stride);
  const std::vector<std::int32_t> before = arena;
  try {
    specdec::sampling::verify_greedy(b, rows, std::span<const specdec::sampling::speculative_request>(&q, 1), out);
  } catch (const specdec::invalid_argument&) {
    return;
  }
  geometry accepted_as_matrix = accepted;
  accepted_as_matrix.cols = 1;
  untouched_outside(before, arena, {tokens, nodes, accepted_as_matrix});
  fuzz::require(out.tokens(0, 0) == clean.tokens[0], "verify_greedy's first token differs from the returning form", out.tokens(0, 0));
  if (out.accepted.rows() == 1)
    fuzz::require(out.accepted(0) == static_cast<std::int32_t>(clean.accepted_nodes.size()), "accepted count differs", out.accepted(0));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::input in(data, size);
  const bool thrust = in.flag();
  // Half the inputs go to the list of every entry point that takes views (entry_points.hpp).
  if (in.flag()) {
    fuzz::entry::run_one(in, /*sizes=*/false);
    return 0;
  }
  switch (in.byte() % 4) {
    case 0: thrust ? softmax_case<specdec::thrust_backend<specdec::thrust_system::cpp>>(in) : softmax_case<specdec::eigen>(in); break;
    case 1: thrust ? topk_case<specdec::thrust_backend<specdec::thrust_system::cpp>>(in) : topk_case<specdec::eigen>(in); break;
    case 2: thrust ? gemm_case<specdec::thrust_backend<specdec::thrust_system::cpp>>(in) : gemm_case<specdec::eigen>(in); break;
    default: thrust ? outputs_case<specdec::thrust_backend<specdec::thrust_system::cpp>>(in) : outputs_case<specdec::eigen>(in); break;
  }
  return 0;
}
