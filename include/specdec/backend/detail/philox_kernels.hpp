// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Host fills of Philox streams (core/rng.hpp): uniform floats, uniform doubles and Exp(1)
/// floats, several Philox blocks per vector instruction.
///
/// A stream's word i is a pure function of i, so blocks can be computed side by side: lane l of a
/// vector runs the ten rounds of block b + l. The 32 x 32 -> 64-bit products are one vpmuludq per
/// vector (each 64-bit lane holds one 32-bit counter word in its low half; the high halves may hold
/// garbage, which vpmuludq ignores and the outputs mask off). The words, and every value made from
/// them, are bit for bit philox_stream's: only the schedule differs. Lanes: 8 blocks with AVX-512F,
/// 4 with AVX, 2 otherwise (chosen at compile time, as the row kernels' vectors are).
///
/// The exponential of a uniform u (philox_stream::uniform_double) is `float(-log1p(-u))`, the C
/// library's double `log1p` rounded to float: what numpy computes from the same uniforms with
/// `(-np.log1p(-u)).astype(np.float32)` where numpy calls the C library (its AVX-512 builds use their
/// own log1p, which can differ in a double's last bit and so, about once in 10^8 values, in the
/// float). A vector logarithm with relative error below 2^-44 gives the float directly wherever the
/// double is farther than 2048 of its ulps from a point halfway between two floats (every value but
/// about one in 2^17): there it rounds as the exact -log1p(-u), and so as the C library's value, to
/// the same float. The other lanes take the C library's value itself.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include <specdec/backend/detail/row_simd.hpp>
#include <specdec/config.hpp>
#include <specdec/core/rng.hpp>
#include <specdec/core/view.hpp>

namespace specdec::detail::inline SPECDEC_ISA {

/// Exp(1) from a uniform in [0, 1): -log1p(-u) in double, rounded to float (+0 at u = 0).
inline float exponential_of_uniform(double u) noexcept { return static_cast<float>(-std::log1p(-u)); }

// nvcc's host pass keeps the scalar loops: its front end need not know __builtin_shufflevector.
#if SPECDEC_HOST_SIMD && !defined(__CUDACC__)
#define SPECDEC_PHILOX_SIMD 1
namespace philox_simd {

#if defined(__AVX512F__)
inline constexpr int lanes = 8;
#elif defined(__AVX__)
inline constexpr int lanes = 4;
#else
inline constexpr int lanes = 2;
#endif
typedef std::uint64_t u64v __attribute__((vector_size(lanes * 8)));
typedef std::int64_t i64v __attribute__((vector_size(lanes * 8)));
typedef double dv __attribute__((vector_size(lanes * 8)));

/// a * b of the low 32 bits of each lane, as 64-bit products. GCC spells out a 64-bit multiply for
/// the generic form (three products); its builtins are the one instruction. Clang finds it itself.
inline u64v mul32(const u64v& a, const u64v& b) noexcept {
#if !defined(__clang__) && defined(__AVX512F__)
  typedef int v16si __attribute__((vector_size(64)));
  typedef long long v8di __attribute__((vector_size(64)));
  return reinterpret_cast<u64v>(__builtin_ia32_pmuludq512_mask(reinterpret_cast<v16si>(a), reinterpret_cast<v16si>(b),
                                                                v8di{}, static_cast<unsigned char>(0xFF)));
#elif !defined(__clang__) && defined(__AVX2__) && !defined(__AVX512F__)
  typedef int v8si __attribute__((vector_size(32)));
  return reinterpret_cast<u64v>(__builtin_ia32_pmuludq256(reinterpret_cast<v8si>(a), reinterpret_cast<v8si>(b)));
#elif !defined(__clang__) && defined(__SSE2__) && !defined(__AVX__)
  typedef int v4si __attribute__((vector_size(16)));
  return reinterpret_cast<u64v>(__builtin_ia32_pmuludq128(reinterpret_cast<v4si>(a), reinterpret_cast<v4si>(b)));
#else
  return (a & std::uint64_t{0xFFFFFFFF}) * (b & std::uint64_t{0xFFFFFFFF});
#endif
}

/// Vectors of blocks computed side by side: one vector's ten rounds are a chain of dependent
/// multiplies, so independent vectors keep the multiplier busy (measured: 2 sets 1.4x faster than 1).
inline constexpr int sets = 2;
/// Blocks per group: what one call of the group functions below computes.
inline constexpr int group_blocks = sets * lanes;

/// The four words of blocks `first + v * lanes + l` (vector v < sets, lane l < lanes; block numbers
/// modulo 2^62, the range a 64-bit position reaches) of stream s: word w of that block in the low half
/// of lane l of w[v][w].
struct blocks {
  u64v w[sets][4];
};
inline blocks philox_blocks(const philox_stream& s, std::uint64_t first) noexcept {
#if defined(__AVX512F__)
  const u64v iota = {0, 1, 2, 3, 4, 5, 6, 7};
#elif defined(__AVX__)
  const u64v iota = {0, 1, 2, 3};
#else
  const u64v iota = {0, 1};
#endif
  blocks b;
  SPECDEC_UNROLL
  for (int v = 0; v < sets; ++v) {
    const u64v block = (first + static_cast<std::uint64_t>(v * lanes) + iota) & ((std::uint64_t{1} << 62) - 1);
    b.w[v][0] = block;
    b.w[v][1] = block >> 32;
    b.w[v][2] = u64v{} + (s.subsequence & std::uint64_t{0xFFFFFFFF});
    b.w[v][3] = u64v{} + (s.subsequence >> 32);
  }
  const u64v m0 = u64v{} + std::uint64_t{philox_m0}, m1 = u64v{} + std::uint64_t{philox_m1};
  SPECDEC_UNROLL
  for (int round = 0; round < 10; ++round) {
    // The round keys as 64-bit scalars: AVX-512 folds each into its XOR as a broadcast operand.
    const std::uint64_t k0 = static_cast<std::uint32_t>(static_cast<std::uint32_t>(s.seed) + static_cast<std::uint32_t>(round) * philox_w0);
    const std::uint64_t k1 =
        static_cast<std::uint32_t>(static_cast<std::uint32_t>(s.seed >> 32) + static_cast<std::uint32_t>(round) * philox_w1);
    SPECDEC_UNROLL
    for (int v = 0; v < sets; ++v) {
      u64v* c = b.w[v];
      const u64v p0 = mul32(m0, c[0]), p1 = mul32(m1, c[2]);
      const u64v next0 = (p1 >> 32) ^ c[1] ^ k0;
      const u64v next2 = (p0 >> 32) ^ c[3] ^ k1;
      c[1] = p1;  // lo1 (the high half is ignored from here on)
      c[3] = p0;  // lo0
      c[0] = next0;
      c[2] = next2;
    }
  }
  SPECDEC_UNROLL
  for (int v = 0; v < sets; ++v)
    for (u64v& w : b.w[v]) w &= std::uint64_t{0xFFFFFFFF};
  return b;
}

/// Integers below 2^52 as doubles, exactly (their bits under the exponent of 2^52).
inline dv small_to_double(const u64v& x) noexcept {
  constexpr std::uint64_t two52_bits = std::uint64_t{0x4330000000000000};
  return reinterpret_cast<dv>(x | two52_bits) - 4503599627370496.0;
}

/// uint32_pair_to_unit_double of word pairs (a, b), lane by lane: the same two exact steps.
inline dv unit_doubles(const u64v& a, const u64v& b) noexcept {
  return (small_to_double(a >> 5) * 67108864.0 + small_to_double(b >> 6)) * (1.0 / 9007199254740992.0);
}

/// -log(m) for m in [2^-53, 1] (every 1 - u), relative error below 2^-44: m = 2^e f with f in
/// [sqrt(1/2), sqrt(2)), log f = 2 atanh(s) = 2 s (1 + z / 3 + z^2 / 5 + ...), s = (f - 1) / (f + 1),
/// z = s^2 <= 0.0295, through the series' first eight terms (the rest is below 2^-44.7 of the sum;
/// f - 1 is exact, and the roundings add a few 2^-53). Lanes with m = 1 give +0.
inline dv minus_log_unit(const dv& m) noexcept {
  const u64v bits = reinterpret_cast<u64v>(m);
  i64v e = reinterpret_cast<i64v>(bits >> 52) - 1023;
  dv f = reinterpret_cast<dv>((bits & std::uint64_t{0x000FFFFFFFFFFFFF}) | std::uint64_t{0x3FF0000000000000});
  const i64v big = f > 1.4142135623730951;
  f = big ? f * 0.5 : f;
  e -= big;  // true lanes are -1
  const dv t = f - 1.0;
  const dv s = t / (t + 2.0);
  const dv z = s * s;
  dv p = dv{} + 1.0 / 15.0;
  p = p * z + 1.0 / 13.0;
  p = p * z + 1.0 / 11.0;
  p = p * z + 1.0 / 9.0;
  p = p * z + 1.0 / 7.0;
  p = p * z + 1.0 / 5.0;
  p = p * z + 1.0 / 3.0;
  p = p * z + 1.0;
  const dv log_f = (s + s) * p;
  // e ln 2 with ln 2 split so that e * hi is exact (|e| <= 53); e as a double through 2^52 + 2^51.
  const dv ed = reinterpret_cast<dv>(reinterpret_cast<u64v>(e) + std::uint64_t{0x4338000000000000}) - 6755399441055744.0;
  constexpr double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
  return 0.0 - (ed * ln2_hi + (ed * ln2_lo + log_f));
}

/// How far (in ulps of the double) from a float midpoint minus_log_unit's value must be for its float
/// to be the exact value's: its error is below 2^-44 relative, i.e. 2^9 ulps; the C library's is one
/// ulp. Four times that: one lane in 2^17 takes the C library's path.
inline constexpr std::uint64_t midpoint_band = 2048;

/// Lanes of y (>= 0) within `band` of their ulps from a point halfway between two floats: there the
/// float nearest y may differ from the float nearest the exact value. (The low 29 bits, the ones a
/// float drops, are then within band of 2^28: one unsigned comparison.)
inline i64v near_float_midpoint(const dv& y, std::uint64_t band) noexcept {
  const u64v low = reinterpret_cast<u64v>(y) & std::uint64_t{0x1FFFFFFF};
  return reinterpret_cast<i64v>(low - ((std::uint64_t{1} << 28) - band) <= 2 * band);
}

/// The lanes of y that near_float_midpoint flags, replaced by the C library's value (its float,
/// widened: converting back gives that float). Out of line: about one lane in 2^19 comes here.
[[gnu::noinline, gnu::cold]] inline void settle_near_midpoints(const dv& u, const i64v& slow, dv& y) noexcept {
  for (int l = 0; l < lanes; ++l)
    if (slow[l] != 0) y[l] = static_cast<double>(exponential_of_uniform(u[l]));
}

typedef float fv __attribute__((vector_size(lanes * 4)));
typedef float fv2 __attribute__((vector_size(lanes * 8)));

/// Shuffle indices over two vectors of L lanes: their interleaving a0 b0 a1 b1 ... (all 2L lanes, or
/// its lower / upper L lanes).
constexpr int interleaved(int j, int l) { return j % 2 == 0 ? j / 2 : l + j / 2; }

template <class V, class W, std::size_t... J>
inline void interleave(const V& a, const V& b, W& out, std::index_sequence<J...>) noexcept {
  out = __builtin_shufflevector(a, b, interleaved(static_cast<int>(J), lanes)...);
}
template <class V, std::size_t... J>
inline void interleave_halves(const V& a, const V& b, V& lo, V& hi, std::index_sequence<J...>) noexcept {
  lo = __builtin_shufflevector(a, b, interleaved(static_cast<int>(J), lanes)...);
  hi = __builtin_shufflevector(a, b, interleaved(static_cast<int>(J) + lanes, lanes)...);
}

/// The values a group of `lanes` blocks gives, in stream order, into out: 4 floats per block
/// (uint32_to_unit_float of each word: 24-bit integers, exact as doubles and as floats).
inline void group_floats(const philox_stream& s, std::uint64_t first, float* out) noexcept {
  const blocks b = philox_blocks(s, first);
  SPECDEC_UNROLL
  for (int v = 0; v < sets; ++v) {
    fv f[4];
    for (int w = 0; w < 4; ++w) f[w] = __builtin_convertvector(small_to_double(b.w[v][w] >> 8), fv) * (1.0f / 16777216.0f);
    // Words 0 1 of each block side by side, and words 2 3: each pair as one double-sized lane, so that
    // interleaving those pairs puts the blocks in order, w0 w1 w2 w3 each.
    fv2 p01, p23;
    interleave(f[0], f[1], p01, std::make_index_sequence<2 * lanes>{});
    interleave(f[2], f[3], p23, std::make_index_sequence<2 * lanes>{});
    dv lo, hi;
    interleave_halves(reinterpret_cast<dv>(p01), reinterpret_cast<dv>(p23), lo, hi, std::make_index_sequence<lanes>{});
    std::memcpy(out + 4 * lanes * v, &lo, sizeof lo);
    std::memcpy(out + 4 * lanes * v + 2 * lanes, &hi, sizeof hi);
  }
}

/// 2 doubles per block (uniform_double of the word pairs 0 1 and 2 3).
inline void group_doubles(const philox_stream& s, std::uint64_t first, double* out) noexcept {
  const blocks b = philox_blocks(s, first);
  SPECDEC_UNROLL
  for (int v = 0; v < sets; ++v) {
    dv lo, hi;
    interleave_halves(unit_doubles(b.w[v][0], b.w[v][1]), unit_doubles(b.w[v][2], b.w[v][3]), lo, hi, std::make_index_sequence<lanes>{});
    std::memcpy(out + 2 * lanes * v, &lo, sizeof lo);
    std::memcpy(out + 2 * lanes * v + lanes, &hi, sizeof hi);
  }
}

/// 2 exponentials per block (of the doubles group_doubles gives).
inline void group_exponentials(const philox_stream& s, std::uint64_t first, float* out) noexcept {
  const blocks b = philox_blocks(s, first);
  // Every vector's logarithm first, side by side (each is a chain of dependent steps), then the checks.
  dv u[sets][2], y[sets][2];
  SPECDEC_UNROLL
  for (int v = 0; v < sets; ++v)
    SPECDEC_UNROLL
    for (int h = 0; h < 2; ++h) {
      u[v][h] = unit_doubles(b.w[v][2 * h], b.w[v][2 * h + 1]);
      y[v][h] = minus_log_unit(1.0 - u[v][h]);  // 1 - u is exact: u is a multiple of 2^-53 below 1
    }
  // One test for the whole group: a lane near a midpoint is rare enough (about 2^-17) to look again.
  i64v slow[sets][2], any{};
  SPECDEC_UNROLL
  for (int v = 0; v < sets; ++v)
    SPECDEC_UNROLL
    for (int h = 0; h < 2; ++h) any |= slow[v][h] = near_float_midpoint(y[v][h], midpoint_band);
  if (any_lane(any)) [[unlikely]]
    for (int v = 0; v < sets; ++v)
      for (int h = 0; h < 2; ++h) settle_near_midpoints(u[v][h], slow[v][h], y[v][h]);
  SPECDEC_UNROLL
  for (int v = 0; v < sets; ++v) {
    const fv a = __builtin_convertvector(y[v][0], fv), c = __builtin_convertvector(y[v][1], fv);
    fv2 all;
    interleave(a, c, all, std::make_index_sequence<2 * lanes>{});
    std::memcpy(out + 2 * lanes * v, &all, sizeof all);
  }
}

/// out[i] = value(offset + i) for i < n: a stream of `per_block` values per Philox block, value q in
/// block `block_of(q)` at slot q % per_block. Whole groups of blocks are written in place; a partial
/// first or last group goes through a buffer.
template <int PerBlock, class T, class Group, class Scalar>
inline void fill(std::uint64_t offset, std::uint64_t n, T* out, const Group& group, const Scalar& scalar) noexcept {
  constexpr std::uint64_t per_group = static_cast<std::uint64_t>(PerBlock) * group_blocks;
  std::uint64_t i = 0;
  // Up to the first block boundary, one value at a time (at most PerBlock - 1 of them).
  for (; i < n && (offset + i) % PerBlock != 0; ++i) out[i] = scalar(offset + i);
  for (; n - i >= per_group; i += per_group) group((offset + i) / PerBlock, out + i);
  if (i < n) {
    T buffer[per_group];
    group((offset + i) / PerBlock, buffer);
    for (std::uint64_t j = 0; i + j < n; ++j) out[i + j] = buffer[j];
  }
}

}  // namespace philox_simd
#else
#define SPECDEC_PHILOX_SIMD 0
#endif

/// out[i] = s.uniform(offset + i), i < n.
inline void philox_fill_uniforms(const philox_stream& s, std::uint64_t offset, float* out, std::uint64_t n) noexcept {
#if SPECDEC_PHILOX_SIMD
  philox_simd::fill<4>(
      offset, n, out, [&](std::uint64_t block, float* o) { philox_simd::group_floats(s, block, o); },
      [&](std::uint64_t q) { return s.uniform(q); });
#else
  for (std::uint64_t i = 0; i < n; ++i) out[i] = s.uniform(offset + i);
#endif
}

/// out[i] = s.uniform_double(offset + i), i < n (words 2 (offset + i) and the next, positions modulo 2^64).
inline void philox_fill_uniforms(const philox_stream& s, std::uint64_t offset, double* out, std::uint64_t n) noexcept {
#if SPECDEC_PHILOX_SIMD
  // uniform_double(q) reads words 2q, 2q + 1 (mod 2^64): block (q >> 1) mod 2^62, which philox_blocks
  // takes care of; the fill's block number q / 2 may exceed 2^62 only by that modulus.
  philox_simd::fill<2>(
      offset, n, out, [&](std::uint64_t block, double* o) { philox_simd::group_doubles(s, block, o); },
      [&](std::uint64_t q) { return s.uniform_double(q); });
#else
  for (std::uint64_t i = 0; i < n; ++i) out[i] = s.uniform_double(offset + i);
#endif
}

/// out[i] = exponential_of_uniform(s.uniform_double(offset + i)), i < n.
inline void philox_fill_exponentials(const philox_stream& s, std::uint64_t offset, float* out, std::uint64_t n) noexcept {
#if SPECDEC_PHILOX_SIMD
  philox_simd::fill<2>(
      offset, n, out, [&](std::uint64_t block, float* o) { philox_simd::group_exponentials(s, block, o); },
      [&](std::uint64_t q) { return exponential_of_uniform(s.uniform_double(q)); });
#else
  for (std::uint64_t i = 0; i < n; ++i) out[i] = exponential_of_uniform(s.uniform_double(offset + i));
#endif
}

}  // namespace specdec::detail::inline SPECDEC_ISA
