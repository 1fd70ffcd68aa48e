// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The 16-bit element types engines keep logits and probabilities in: `specdec::bfloat16`
/// (bf16: float32's sign and 8-bit exponent, 7 mantissa bits) and `specdec::float16` (IEEE binary16).
///
/// Both are storage types: two bytes with the standard bit layout (a view of a torch bf16 / fp16 tensor
/// is a `matrix_view<const bfloat16>` over its memory), no arithmetic of their own. A kernel reads one
/// through `widen`, which is exact (every bf16 and fp16 value is a float), and computes in float
/// (`compute_t<T>`); so a row of bf16 gives the same decisions, bit for bit, as the float row holding
/// the same values. A result written back in the input's type goes through `narrow`: round to nearest,
/// ties to even, as torch's and CUDA's conversions do (overflow to +-inf, NaN stays NaN).
///
/// Standard library only; every function is usable in device code.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include <specdec/config.hpp>

namespace specdec {

/// bfloat16: bits 15 (sign), 14-7 (exponent, bias 127), 6-0 (mantissa); the top half of a float.
struct bfloat16 {
  std::uint16_t bits;
};
/// IEEE 754 binary16: bits 15 (sign), 14-10 (exponent, bias 15), 9-0 (mantissa).
struct float16 {
  std::uint16_t bits;
};
static_assert(sizeof(bfloat16) == 2 && sizeof(float16) == 2 && std::is_trivially_copyable_v<bfloat16> &&
              std::is_trivially_copyable_v<float16>);

/// Whether T (cv-qualifiers ignored) is one of the 16-bit storage types.
template <class T>
inline constexpr bool is_half_v = std::is_same_v<std::remove_cv_t<T>, bfloat16> || std::is_same_v<std::remove_cv_t<T>, float16>;

/// The type a kernel computes in for elements of type T: float for the 16-bit types, T itself otherwise.
template <class T>
using compute_t = std::conditional_t<is_half_v<T>, float, std::remove_cv_t<T>>;

namespace detail {
SPECDEC_HOST_DEVICE inline float float_of_bits(std::uint32_t b) noexcept {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
SPECDEC_HOST_DEVICE inline std::uint32_t bits_of_float(float f) noexcept {
  std::uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}
}  // namespace detail

/// The float holding bf16 value `h` (exact).
SPECDEC_HOST_DEVICE inline float widen(bfloat16 h) noexcept { return detail::float_of_bits(std::uint32_t{h.bits} << 16); }

/// The float holding fp16 value `h` (exact): subnormals scaled, infinities and NaNs (payload kept) carried.
SPECDEC_HOST_DEVICE inline float widen(float16 h) noexcept {
  const std::uint32_t sign = std::uint32_t{h.bits & 0x8000u} << 16;
  const std::uint32_t exponent = (h.bits >> 10) & 0x1Fu;
  const std::uint32_t mantissa = h.bits & 0x3FFu;
  if (exponent == 0x1Fu) return detail::float_of_bits(sign | 0x7F800000u | (mantissa << 13));
  if (exponent != 0) return detail::float_of_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa * 2^-24, exact in float.
  const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-08f;
  return sign != 0 ? -magnitude : magnitude;
}

/// Identity for the types kernels already compute in, so generic code can widen every element.
SPECDEC_HOST_DEVICE inline float widen(float x) noexcept { return x; }
SPECDEC_HOST_DEVICE inline double widen(double x) noexcept { return x; }

/// `x` rounded to the nearest bf16, ties to even; NaN gives a quiet NaN of the same sign.
SPECDEC_HOST_DEVICE inline bfloat16 to_bfloat16(float x) noexcept {
  const std::uint32_t b = detail::bits_of_float(x);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return {static_cast<std::uint16_t>((b >> 16) | 0x0040u)};
  return {static_cast<std::uint16_t>((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16)};
}

/// `x` rounded to the nearest fp16, ties to even: beyond 65504 (from 65520 on) +-inf, below 2^-25 a
/// signed zero, subnormals rounded on their own grid; NaN gives a quiet NaN of the same sign.
SPECDEC_HOST_DEVICE inline float16 to_float16(float x) noexcept {
  const std::uint32_t b = detail::bits_of_float(x);
  const auto sign = static_cast<std::uint16_t>((b >> 16) & 0x8000u);
  const std::uint32_t magnitude = b & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return {static_cast<std::uint16_t>(sign | 0x7E00u | ((magnitude >> 13) & 0x3FFu))};
  if (magnitude >= 0x477FF000u) return {static_cast<std::uint16_t>(sign | 0x7C00u)};  // >= 65520 (and inf)
  if (magnitude >= 0x38800000u) {                                                      // >= 2^-14: normal
    // Rebias the exponent in place and round the 13 dropped bits to even; a carry out of the mantissa
    // steps the exponent, which is the correctly rounded result (65504 + a half ulp was caught above).
    const std::uint32_t rebased = magnitude - 0x38000000u;
    return {static_cast<std::uint16_t>(sign | ((rebased + 0xFFFu + ((rebased >> 13) & 1u)) >> 13))};
  }
  if (magnitude < 0x33000000u) return {sign};  // below 2^-25: rounds to zero (2^-25 itself ties to 0)
  // Subnormal: the value in units of 2^-24 is (1.m * 2^(e-127)) / 2^-24; shift the 24-bit significand
  // right and round to even on the bits shifted out.
  const std::uint32_t significand = (magnitude & 0x7FFFFFu) | 0x800000u;
  const std::uint32_t shift = 126u - (magnitude >> 23);  // 14..24 for exponents 2^-15 .. 2^-25
  const std::uint32_t kept = significand >> shift;
  const std::uint32_t rest = significand & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1u);
  const std::uint32_t rounded = kept + ((rest > half || (rest == half && (kept & 1u) != 0)) ? 1u : 0u);
  return {static_cast<std::uint16_t>(sign | rounded)};
}

/// `x` in element type T: rounded to nearest even for the 16-bit types, a plain conversion otherwise.
template <class T>
SPECDEC_HOST_DEVICE inline T narrow(compute_t<T> x) noexcept {
  if constexpr (std::is_same_v<T, bfloat16>)
    return to_bfloat16(x);
  else if constexpr (std::is_same_v<T, float16>)
    return to_float16(x);
  else
    return static_cast<T>(x);
}

/// How far rounding to T can move a normal value, relative: 2^-rounding_bits<T> (half an ulp at the
/// bottom of a binade: 2^-8 for bf16's 8 significant bits, 2^-11 for fp16's 11); 0 for the types
/// kernels compute in as they are. (A uniform bf16 row over 255 tokens, each 2^-8 where 1/255 rounds
/// down, sums to 1 - 2^-8.)
template <class T>
inline constexpr int rounding_bits = std::is_same_v<std::remove_cv_t<T>, bfloat16> ? 8 : std::is_same_v<std::remove_cv_t<T>, float16> ? 11 : 0;

/// How far from 1 a distribution of n entries rounded to T can sum: 2^-rounding_bits<T> of the sum, plus
/// half the smallest subnormal per entry (2^-25 for fp16, whose subnormals start at 6.1e-5, where most
/// entries of a large vocabulary's softmax lie: a 262144-entry row rounded to fp16 sums to 1 - 5.9e-4;
/// 2^-134 for bf16); 0 for float and double. The checks of probability rows add it to their tolerance.
template <class T>
SPECDEC_HOST_DEVICE constexpr double rounding_tolerance(std::int64_t n) noexcept {
  if constexpr (std::is_same_v<std::remove_cv_t<T>, float16>)
    return 0x1p-11 + static_cast<double>(n) * 0x1p-25;
  else if constexpr (std::is_same_v<std::remove_cv_t<T>, bfloat16>)
    return 0x1p-8 + static_cast<double>(n) * 0x1p-134;
  else
    return 0.0;
}

/// The element types' names as numpy and torch spell them, for messages.
template <class T>
inline constexpr const char* element_name = std::is_same_v<std::remove_cv_t<T>, bfloat16>  ? "bfloat16"
                                            : std::is_same_v<std::remove_cv_t<T>, float16> ? "float16"
                                            : std::is_same_v<std::remove_cv_t<T>, float>   ? "float32"
                                            : std::is_same_v<std::remove_cv_t<T>, double>  ? "float64"
                                                                                           : "other";

}  // namespace specdec
