// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Where a verification step's random numbers come from: caller-supplied uniforms, or Philox.
///
/// Every verifier reads one `uniform_stream` per request, position by position, in the order its
/// documentation gives (the "consumption order"), and reports how many positions it read. Because a
/// Philox stream is a pure function of (seed, subsequence, position), the same stream gives the same
/// decisions on every backend and every thread count.
#pragma once

#include <cstdint>
#include <span>

#include <specdec/backend/detail/philox_kernels.hpp>
#include <specdec/config.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/rng.hpp>
#include <specdec/core/view_checks.hpp>

namespace specdec::sampling {

/// The interval a convention's uniforms live in.
enum class uniform_range {
  closed_open,  ///< [0, 1): vLLM (fp64 torch.rand), Leviathan, EAGLE's random.random(), specdec
  open_closed,  ///< (0, 1]: FlashInfer's curand_uniform
};

namespace detail {
/// A Philox uniform `u` in [0, 1) in `range` (1 - u for (0, 1]): every verifier's mapping.
SPECDEC_HOST_DEVICE inline double philox_in_range(double u, uniform_range range) noexcept {
  return range == uniform_range::closed_open ? u : 1.0 - u;
}
/// Whether a caller-supplied uniform lies in `range`.
SPECDEC_HOST_DEVICE inline bool uniform_in_range(double u, uniform_range range) noexcept {
  return range == uniform_range::closed_open ? (u >= 0.0 && u < 1.0) : (u > 0.0 && u <= 1.0);
}
}  // namespace detail

/// A request's uniforms: either caller-supplied values (in consumption order) or Philox uniforms
/// (53-bit doubles, `philox_stream::uniform_double` at `offset + i`; mapped to `1 - u` for the
/// (0, 1] range).
class uniform_stream {
 public:
  /// Caller-supplied values; reading past the end throws. The span must outlive the stream.
  static uniform_stream values(std::span<const double> u) {
    uniform_stream s;
    s.values_ = u;
    return s;
  }
  /// Philox uniforms starting at position `offset` of `rng`.
  static uniform_stream philox(philox_stream rng, std::uint64_t offset = 0) {
    uniform_stream s;
    s.rng_ = rng;
    s.offset_ = offset;
    s.is_philox_ = true;
    return s;
  }

  /// Position `i` of the stream in `range`. \throws invalid_argument when a supplied value is outside
  /// the range, or when `i` is past the supplied values.
  double at(std::uint64_t i, uniform_range range = uniform_range::closed_open) const {
    constexpr const char* where = "specdec::sampling::uniform_stream";
    if (is_philox_) return detail::philox_in_range(rng_.uniform_double(offset_ + i), range);
    SPECDEC_EXPECTS(i < values_.size(), where, "the verification needs uniform ", i, " but only ", values_.size(),
                    " were supplied");
    const double u = values_[static_cast<std::size_t>(i)];
    SPECDEC_EXPECTS(detail::uniform_in_range(u, range), where, "uniform ", i, " = ", u, "; expected a value in ",
                    range == uniform_range::closed_open ? "[0, 1)" : "(0, 1]");
    return u;
  }

  bool is_philox() const noexcept { return is_philox_; }
  std::size_t supplied() const noexcept { return values_.size(); }
  /// The caller-supplied values (empty for Philox).
  std::span<const double> supplied_values() const noexcept { return values_; }
  /// The Philox stream and the position of its first uniform (Philox streams only).
  philox_stream philox_rng() const noexcept { return rng_; }
  std::uint64_t philox_offset() const noexcept { return offset_; }

 private:
  std::span<const double> values_{};
  philox_stream rng_{};
  std::uint64_t offset_ = 0;
  bool is_philox_ = false;
};

/// Host fills of a Philox stream, several blocks per vector instruction (backend/detail/philox_kernels.hpp),
/// bit for bit the scalar definitions: `out[i] = rng.uniform(offset + i)` (floats, one word each; as
/// Python's `specdec.philox_uniforms(..., dtype="float32")`). ~0.7 ns per value with AVX-512, ~1 ns
/// with AVX2 (a 3.6 GHz Zen 4 core, from L1). Positions are philox_stream's, modulo 2^64: a fill from
/// near 2^64 continues at position 0, so every offset is valid with every length.
/// \throws invalid_argument naming `out` when it is null with a nonzero length or reaches past the
///   address space (an O(1) check before the fill).
inline void philox_uniforms(philox_stream rng, std::uint64_t offset, std::span<float> out) {
  specdec::detail::check_arguments("specdec::sampling::philox_uniforms", specdec::detail::output("out", out));
  specdec::detail::philox_fill_uniforms(rng, offset, out.data(), out.size());
}

/// `out[i] = rng.uniform_double(offset + i)`: 53-bit doubles from word pairs (the uniforms every
/// verifier reads from a Philox stream; Python's `specdec.philox_uniforms`). ~1.2 ns per value with
/// AVX-512, ~1.6 ns with AVX2. Positions and \throws as the float form's.
inline void philox_uniforms(philox_stream rng, std::uint64_t offset, std::span<double> out) {
  specdec::detail::check_arguments("specdec::sampling::philox_uniforms", specdec::detail::output("out", out));
  specdec::detail::philox_fill_uniforms(rng, offset, out.data(), out.size());
}

/// Exp(1) samples: `out[i] = float(-log1p(-rng.uniform_double(offset + i)))`, the double `log1p` of the
/// C library rounded to float (+0 where the uniform is 0): vLLM's `exponentials` as specdec's Python
/// `rejection_sample` draws them from a seed (`specdec.philox_exponentials`), and what numpy gives for
/// `(-np.log1p(-u)).astype(np.float32)` where it calls the C library's log1p. A vector logarithm
/// settles all but about one value in 2^17, which take the C library's own (the file comment of
/// philox_kernels.hpp says why the floats are the same). ~2.5 ns per value with AVX-512, ~3.5 ns with
/// AVX2. Positions and \throws as philox_uniforms'.
inline void philox_exponentials(philox_stream rng, std::uint64_t offset, std::span<float> out) {
  specdec::detail::check_arguments("specdec::sampling::philox_exponentials", specdec::detail::output("out", out));
  specdec::detail::philox_fill_exponentials(rng, offset, out.data(), out.size());
}

}  // namespace specdec::sampling
