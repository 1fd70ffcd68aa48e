// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The suffix tree's internal tables: an open-addressing (int32, token) -> int32 map for
/// edges and endpoint records, and libstdc++'s heap order written out for tree-mode drafts. Not part
/// of the API (namespace detail).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

namespace specdec::detail {

/// An open-addressing map from (int32, Token) keys to int32 values >= 0: linear probing, power-of-two
/// capacity at most half full, deletion by backward shift (no tombstones), so lookups stay short
/// whatever was erased. One table holds every edge of a tree: a node's children are (node, token).
template <class Token>
class pair_index {
 public:
  std::int32_t find(std::int32_t a, Token b) const noexcept {
    if (slots_.empty()) return -1;
    for (std::size_t i = home(a, b);; i = (i + 1) & mask()) {
      const slot& s = slots_[i];
      if (s.value < 0) return -1;
      if (s.a == a && s.b == b) return s.value;
    }
  }
  /// Sets (a, b) to value (>= 0), inserting it if absent.
  void set(std::int32_t a, Token b, std::int32_t value) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    for (std::size_t i = home(a, b);; i = (i + 1) & mask()) {
      slot& s = slots_[i];
      if (s.value < 0) {
        s = {a, b, value};
        ++size_;
        return;
      }
      if (s.a == a && s.b == b) {
        s.value = value;
        return;
      }
    }
  }
  void erase(std::int32_t a, Token b) noexcept {
    if (slots_.empty()) return;
    std::size_t i = home(a, b);
    for (;; i = (i + 1) & mask()) {
      if (slots_[i].value < 0) return;
      if (slots_[i].a == a && slots_[i].b == b) break;
    }
    // Backward shift: pull later entries of the probe run into the hole when their home allows it.
    for (std::size_t j = (i + 1) & mask();; j = (j + 1) & mask()) {
      if (slots_[j].value < 0) break;
      const std::size_t h = home(slots_[j].a, slots_[j].b);
      if (((j - h) & mask()) >= ((j - i) & mask())) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i].value = -1;
    --size_;
  }
  std::size_t size() const noexcept { return size_; }
  std::size_t memory_bytes() const noexcept { return slots_.capacity() * sizeof(slot); }

 private:
  struct slot {
    std::int32_t a = 0;
    Token b{};
    std::int32_t value = -1;
  };
  std::size_t mask() const noexcept { return slots_.size() - 1; }
  std::size_t home(std::int32_t a, Token b) const noexcept {
    using wide = std::conditional_t<(sizeof(Token) > 4), std::uint64_t, std::uint32_t>;
    std::uint64_t h = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) ^
                      static_cast<std::uint64_t>(static_cast<wide>(b)) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 33;  // murmur3's finaliser: every key bit reaches the low (index) bits
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33;
    return static_cast<std::size_t>(h) & mask();
  }
  void grow() {
    std::vector<slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 16 : 2 * old.size(), slot{});
    size_ = 0;
    for (const slot& s : old)
      if (s.value >= 0) set(s.a, s.b, s.value);
  }
  std::vector<slot> slots_;
  std::size_t size_ = 0;
};

/// libstdc++'s std::priority_queue (push_heap / pop_heap) over a max-heap by `prob`, written out:
/// with equal probabilities the pop order is the heap's, and Arctic Inference's tree drafts follow
/// it (libc++ and MSVC order ties differently).
template <class Item>
class libstdcxx_heap {
 public:
  bool empty() const noexcept { return items_.empty(); }
  void push(const Item& item) {
    items_.push_back(item);
    sift_up(items_.size() - 1, 0, item);
  }
  Item pop() {
    const Item top = items_.front();
    const std::size_t len = items_.size() - 1;
    if (len > 0) {
      const Item value = items_.back();
      // __adjust_heap: the hole descends along the larger child (the right one on ties) to a leaf,
      // then the last element sifts up from there.
      std::size_t hole = 0, child = 0;
      while (child < (len - 1) / 2) {
        child = 2 * (child + 1);
        if (items_[child].prob < items_[child - 1].prob) --child;
        items_[hole] = items_[child];
        hole = child;
      }
      if ((len & 1) == 0 && child == (len - 2) / 2) {
        child = 2 * (child + 1);
        items_[hole] = items_[child - 1];
        hole = child - 1;
      }
      sift_up(hole, 0, value);
    }
    items_.pop_back();
    return top;
  }

 private:
  void sift_up(std::size_t hole, std::size_t top, const Item& value) {
    while (hole > top && items_[(hole - 1) / 2].prob < value.prob) {
      items_[hole] = items_[(hole - 1) / 2];
      hole = (hole - 1) / 2;
    }
    items_[hole] = value;
  }
  std::vector<Item> items_;
};

}  // namespace specdec::detail
