// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Carving typed scratch buffers out of one caller-provided byte buffer.
///
/// Every specdec operation that needs scratch memory lays it out with a `workspace_carver`. The same
/// code runs twice: once in count-only mode (no memory, it only adds up sizes and alignment padding)
/// to answer "how many bytes do you need?", and once over the real buffer. The two answers therefore
/// cannot drift apart, which is the bug class a hand-written size formula invites.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include <specdec/core/error.hpp>

namespace specdec {

/// Alignment of every carved sub-buffer: a cache line on the CPU and the widest vector load on GPUs.
inline constexpr std::size_t workspace_alignment = 256;

/// Lays out sub-buffers inside one workspace, in order, each aligned to `workspace_alignment`.
class workspace_carver {
 public:
  /// Count-only mode: `take` returns null pointers and only `bytes_used()` is meaningful.
  constexpr workspace_carver() noexcept = default;

  /// Carving mode over `capacity` bytes at `base` (host or device memory: the carver never touches
  /// the bytes, it only computes addresses).
  constexpr workspace_carver(void* base, std::size_t capacity) noexcept
      : base_(static_cast<std::byte*>(base)), capacity_(capacity), counting_(false) {}

  /// Reserves `count` elements of T named `name` (the name appears in the error if they do not fit).
  /// Returns the aligned pointer, or nullptr in count-only mode.
  template <class T>
  T* take(std::size_t count, const char* name) {
    // Counts come from callers' shapes: a request past 2^62 bytes is an error, not a wrapped size.
    constexpr std::size_t limit = std::size_t{1} << 62;
    SPECDEC_EXPECTS(used_ <= limit && count <= (limit - used_) / sizeof(T), "specdec::workspace_carver", "buffer '",
                    name, "' of ", count, " elements after ", used_, " bytes exceeds 2^62 bytes");
    const std::size_t start = (used_ + workspace_alignment - 1) / workspace_alignment * workspace_alignment;
    const std::size_t end = start + count * sizeof(T);
    if (!counting_) {
      SPECDEC_EXPECTS(end <= capacity_, "specdec::workspace_carver", "workspace too small for buffer '", name,
                      "': it needs ", end, " bytes in all, the workspace has ", capacity_,
                      " (ask the operation's workspace_bytes() first)");
    }
    used_ = end;
    return counting_ ? nullptr : reinterpret_cast<T*>(base_ + start);
  }

  /// Bytes needed for everything taken so far, alignment padding included.
  constexpr std::size_t bytes_used() const noexcept { return used_; }
  constexpr bool count_only() const noexcept { return counting_; }

 private:
  std::byte* base_ = nullptr;
  std::size_t capacity_ = 0;
  std::size_t used_ = 0;
  bool counting_ = true;
};

}  // namespace specdec
