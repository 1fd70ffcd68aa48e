// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Philox4x32-10 counter-based RNG (Salmon et al., SC'11), identical on host and device.
///
/// Randomness in specdec is an input: a function either takes caller-supplied uniforms or a Philox
/// `(seed, subsequence, offset)` triple from which it derives them with the functions below. Because
/// Philox is a pure function of counter and key, the i-th uniform of a stream is the same number on
/// every backend, every thread count and every device, with no state to carry between calls.
///
/// **Streams.** The stream `(seed, subsequence)` is the sequence of 32-bit words obtained by
/// encrypting counters `{block_lo, block_hi, subsequence_lo, subsequence_hi}` (block = 0, 1, 2, ...)
/// under key `{seed_lo, seed_hi}`, each block giving four words in order. Word i of the stream is word
/// `i % 4` of block `i / 4`. Engines give each request its own subsequence (or seed) and advance an
/// offset by the number of draws each call documents.
///
/// **Bits to float.** `u = float(w >> 8) * 2^-24`: the top 24 bits of the word, scaled exactly (every
/// value is representable), so u lies on the grid {0, 2^-24, ..., 1 - 2^-24} inside [0, 1); 1 is never
/// produced, 0 is produced with probability 2^-24. The double variant takes 53 bits from two
/// consecutive words: `((w0 >> 5) * 2^26 + (w1 >> 6)) * 2^-53`, also in [0, 1).
#pragma once

#include <cstdint>

#include <specdec/config.hpp>
#include <specdec/core/device_array.hpp>

namespace specdec {

/// One Philox4x32 block: four 32-bit counter words in, four pseudo-random words out.
using philox_counter = device_array<std::uint32_t, 4>;
/// The two 32-bit key words.
using philox_key = device_array<std::uint32_t, 2>;

namespace detail {
inline constexpr std::uint32_t philox_m0 = 0xD2511F53u;
inline constexpr std::uint32_t philox_m1 = 0xCD9E8D57u;
inline constexpr std::uint32_t philox_w0 = 0x9E3779B9u;  // golden ratio
inline constexpr std::uint32_t philox_w1 = 0xBB67AE85u;  // sqrt(3) - 1

SPECDEC_HOST_DEVICE constexpr void mulhilo32(std::uint32_t a, std::uint32_t b, std::uint32_t& hi,
                                             std::uint32_t& lo) noexcept {
  const std::uint64_t product = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(product >> 32);
  lo = static_cast<std::uint32_t>(product);
}
}  // namespace detail

/// The Philox4x32 block function with 10 rounds: encrypts `counter` under `key`.
/// Matches the Random123 reference (checked against its known-answer vectors in the tests).
SPECDEC_HOST_DEVICE constexpr philox_counter philox4x32_10(philox_counter counter, philox_key key) noexcept {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += detail::philox_w0;
      key[1] += detail::philox_w1;
    }
    std::uint32_t hi0 = 0, lo0 = 0, hi1 = 0, lo1 = 0;
    detail::mulhilo32(detail::philox_m0, counter[0], hi0, lo0);
    detail::mulhilo32(detail::philox_m1, counter[2], hi1, lo1);
    counter = {hi1 ^ counter[1] ^ key[0], lo1, hi0 ^ counter[3] ^ key[1], lo0};
  }
  return counter;
}

/// Maps a 32-bit word to a float in [0, 1): the top 24 bits times 2^-24 (exact, see the file comment).
SPECDEC_HOST_DEVICE constexpr float uint32_to_unit_float(std::uint32_t word) noexcept {
  return static_cast<float>(word >> 8) * (1.0f / 16777216.0f);
}

/// Maps two 32-bit words to a double in [0, 1) with 53 random bits.
SPECDEC_HOST_DEVICE constexpr double uint32_pair_to_unit_double(std::uint32_t w0, std::uint32_t w1) noexcept {
  const std::uint64_t bits = (static_cast<std::uint64_t>(w0 >> 5) << 26) | (w1 >> 6);
  return static_cast<double>(bits) * (1.0 / 9007199254740992.0);
}

/// A Philox stream `(seed, subsequence)`. Cheap to copy, stateless: `word(i)` and `uniform(i)` are
/// pure functions of the position, so any thread can draw any position.
struct philox_stream {
  std::uint64_t seed = 0;
  std::uint64_t subsequence = 0;

  /// Word `i` of the stream (see the file comment for the counter layout).
  SPECDEC_HOST_DEVICE constexpr std::uint32_t word(std::uint64_t i) const noexcept {
    const std::uint64_t block = i >> 2;
    const philox_counter counter{static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(block >> 32),
                                 static_cast<std::uint32_t>(subsequence),
                                 static_cast<std::uint32_t>(subsequence >> 32)};
    const philox_key key{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
    return philox4x32_10(counter, key)[static_cast<int>(i & 3u)];
  }

  /// Uniform float in [0, 1) at position `i` of the stream; consumes one word.
  SPECDEC_HOST_DEVICE constexpr float uniform(std::uint64_t i) const noexcept {
    return uint32_to_unit_float(word(i));
  }

  /// Uniform double in [0, 1) built from words `2i` and `2i + 1`; consumes two words.
  SPECDEC_HOST_DEVICE constexpr double uniform_double(std::uint64_t i) const noexcept {
    return uint32_pair_to_unit_double(word(2 * i), word(2 * i + 1));
  }

  /// Fills `out[0, n)` with uniforms at positions `offset, offset + 1, ...` (host helper; four
  /// uniforms per Philox block, so a fill costs n / 4 block evaluations).
  template <class OutputIt>
  constexpr void fill_uniforms(std::uint64_t offset, std::uint64_t n, OutputIt out) const {
    for (std::uint64_t i = 0; i < n; ++i) *out++ = uniform(offset + i);
  }
};

}  // namespace specdec
