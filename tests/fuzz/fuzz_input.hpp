// SPDX-License-Identifier: Apache-2.0
// What every harness shares: a reader that turns the fuzzer's bytes into bounded sizes, ids, floats
// and uniforms (each call consumes bytes; past the end it returns the smallest value), and the
// invariant check that aborts with a message, so a broken invariant is a finding like a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

namespace fuzz {

class input {
 public:
  input(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  bool empty() const noexcept { return pos_ >= size_; }
  std::size_t left() const noexcept { return pos_ < size_ ? size_ - pos_ : 0; }
  std::uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  std::uint32_t u32() {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(byte()) << (8 * i);
    return v;
  }
  /// An integer in [lo, hi], from as few bytes as the range needs.
  std::int64_t range(std::int64_t lo, std::int64_t hi) {
    // In unsigned arithmetic: hi - lo overflows int64 for the extreme ranges the size harnesses use.
    const std::uint64_t span = static_cast<std::uint64_t>(hi) - static_cast<std::uint64_t>(lo);
    std::uint64_t v = span < 256 ? byte() : span < 65536 ? (byte() | (std::uint64_t(byte()) << 8)) : u64();
    if (span != std::numeric_limits<std::uint64_t>::max()) v %= span + 1;
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(lo) + v);
  }
  std::uint64_t u64() { return u32() | (std::uint64_t(u32()) << 32); }
  /// A size, offset or count as a hostile caller passes it: mostly small, often one of the values
  /// where arithmetic breaks (negative, int32 and int64 limits, powers of two near them).
  std::int64_t extreme() {
    static constexpr std::int64_t edges[] = {std::numeric_limits<std::int64_t>::min(), -(std::int64_t{1} << 32), -1, 0, 1, 2,
                                             3, 7, 31, 32, 33, 2147483647, 2147483648, 4294967296,
                                             (std::int64_t{1} << 40) + 1, std::int64_t{1} << 62,
                                             std::numeric_limits<std::int64_t>::max() - 1,
                                             std::numeric_limits<std::int64_t>::max()};
    const std::uint8_t kind = byte();
    if (kind < 128) return kind % 9;
    return edges[kind % (sizeof edges / sizeof edges[0])];
  }
  bool flag() { return (byte() & 1) != 0; }
  /// A float that is usually ordinary (a multiple of 1/16 in [-16, 16)) and sometimes one of the
  /// values that break numerics: 0, -0, +-inf, NaN, denormals, the extremes.
  float value() {
    const std::uint8_t kind = byte();
    if (kind < 224) return static_cast<float>(static_cast<std::int16_t>(range(-256, 255))) / 16.0f;
    switch (kind % 8) {
      case 0: return 0.0f;
      case 1: return -0.0f;
      case 2: return std::numeric_limits<float>::infinity();
      case 3: return -std::numeric_limits<float>::infinity();
      case 4: return std::numeric_limits<float>::quiet_NaN();
      case 5: return std::numeric_limits<float>::denorm_min();
      case 6: return std::numeric_limits<float>::max();
      default: {
        float f;
        const std::uint32_t bits = u32();
        std::memcpy(&f, &bits, 4);
        return f;
      }
    }
  }
  /// A probability-like value in [0, 1] (mostly), for rows a harness normalises itself.
  float weight() {
    const std::uint8_t kind = byte();
    return kind < 248 ? static_cast<float>(kind) / 247.0f : value();
  }
  /// The remaining bytes.
  std::vector<std::uint8_t> rest() {
    std::vector<std::uint8_t> out(data_ + std::min(pos_, size_), data_ + size_);
    pos_ = size_;
    return out;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

/// A broken invariant: print it and abort, which libFuzzer records as a crash with its input.
[[noreturn]] inline void fail(const char* what, long long a = 0, long long b = 0) {
  std::fprintf(stderr, "invariant broken: %s (%lld, %lld)\n", what, a, b);
  std::abort();
}
inline void require(bool ok, const char* what, long long a = 0, long long b = 0) {
  if (!ok) fail(what, a, b);
}

}  // namespace fuzz
