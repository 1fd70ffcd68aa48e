// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief What the verifiers share: reading only the rows a decision needs, and the distribution a
/// verification walk carries from sibling to sibling (a target row, minus rejected candidates or
/// draft rows), drawn from in the canonical order of backend/detail/row_kernels.hpp so that a draw
/// here gives the token `row_sample` / `row_sample_residual` give for the same row and uniform.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <type_traits>
#include <vector>

#include <specdec/config.hpp>
#include <specdec/backend/concept.hpp>
#include <specdec/backend/detail/row_kernels.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/memory_space.hpp>
#include <specdec/core/view.hpp>
#include <specdec/sampling/detail/checks.hpp>

namespace specdec::sampling::detail::inline SPECDEC_ISA {

/// Host access to single rows of a backend matrix: host-space rows are read in place; device rows are
/// downloaded once each, on first use, so a verifier transfers exactly the rows it reads. In softening
/// mode the matrix holds logits and a row is read as `row_softmax(logits row, temperature)`, computed
/// on the backend on first use: only the rows a verifier reads are ever softened.
///
/// Host copies live in per-thread scratch rows that outlive the reader: a verifier called once per
/// decoding step would otherwise allocate (and page-fault) V floats per row it reads, which costs
/// more than reading the row.
template <backend B>
class row_reader {
 public:
  using space = typename B::memory_space;
  row_reader(B& b, matrix_view<const float, space> m) : backend_(&b), m_(m) {}
  row_reader(B& b, matrix_view<const float, space> logits, float temperature)
      : backend_(&b), m_(logits), temperature_(temperature), softened_(true) {}
  row_reader(const row_reader&) = delete;
  row_reader& operator=(const row_reader&) = delete;
  ~row_reader() { recycle(); }
  /// Returns every row read so far to the thread's spare buffers (bounded: downloaded rows come back
  /// too, and a thread must not hoard them without limit). A verifier calls it after each request,
  /// whose rows no other request reads: a batch then reuses a few row buffers instead of allocating
  /// one per row, which for rows above the allocator's mmap threshold (V >= 32768) meant page faults
  /// on every row and doubled the cost of a batch of 16 chains.
  void recycle() {
    auto& spare = spare_rows();
    for (auto& [row, values] : cache_)
      if (spare.size() < max_spare_rows) spare.push_back(std::move(values));
    cache_.clear();
    stats_.clear();
  }

  /// Token bitmasks of the rows (softening mode; host `[rows x ceil(V / 32)]`, checked by the caller):
  /// a row is then read as the softmax of its logits with the disallowed ones at -inf.
  void set_bitmask(matrix_view<const std::int32_t> bitmask) {
    recycle();
    bitmask_ = bitmask;
  }

  /// The temperature later rows are softened at (a request's own); rows softened at another one are
  /// dropped.
  void set_temperature(float temperature) {
    if (temperature != temperature_) recycle();
    temperature_ = temperature;
  }

  const float* row(index_t r) {
    if (!softened_) {
      if constexpr (std::is_same_v<space, host_space>) return m_.row(r);
    }
    auto it = cache_.find(r);
    if (it == cache_.end()) it = cache_.emplace(r, fetch(r)).first;
    return it->second.data();
  }
  /// One entry without writing the row: a probability row's entry as is; a softened row's from the
  /// row's softmax normaliser (one read of the row, cached), bit for bit the entry row() would hold,
  /// on host backends that expose `row_softmax_stats`; otherwise from the softened row.
  float at(index_t r, index_t column) {
    if constexpr (std::is_same_v<space, host_space>) {
      if (!softened_) return m_(r, column);
      if constexpr (requires(B& b) { b.row_softmax_stats(matrix_view<const float>(), 1.0f); }) {
        if (bitmask_.rows() == 0 && cache_.find(r) == cache_.end()) {
          auto it = stats_.find(r);
          if (it == stats_.end())
            it = stats_.emplace(r, backend_->row_softmax_stats(matrix_view<const float>(m_.row(r), 1, m_.cols()), temperature_)).first;
          const float inv_t = 1.0f / temperature_;
          return specdec::detail::exp_shifted_at(m_.row(r), m_.cols(), column, it->second.max, inv_t, 1.0f / it->second.sum);
        }
      }
    }
    return row(r)[column];
  }
  index_t rows() const noexcept { return m_.rows(); }
  index_t cols() const noexcept { return m_.cols(); }
  /// Whether rows are computed by row_softmax from logits (and so are distributions by construction).
  bool softened() const noexcept { return softened_; }
  /// Rows softened or downloaded since the last recycle().
  index_t rows_read() const noexcept { return static_cast<index_t>(cache_.size()); }

 private:
  static constexpr std::size_t max_spare_rows = 32;
  static std::vector<std::vector<float>>& spare_rows() {
    thread_local std::vector<std::vector<float>> spare;
    return spare;
  }
  std::vector<float> scratch_row() {
    auto& spare = spare_rows();
    std::vector<float> out;
    if (!spare.empty()) {
      out = std::move(spare.back());
      spare.pop_back();
    }
    out.resize(static_cast<std::size_t>(m_.cols()));
    return out;
  }
  std::vector<float> fetch(index_t r) {
    const matrix_view<const float, space> one(m_.row(r), 1, m_.cols());
    if (!softened_) return backend_->download(vector_view<const float, space>(one.row(0), one.cols()));
    if (bitmask_.rows() > 0) return fetch_masked(r);
    if constexpr (std::is_same_v<space, host_space>) {
      std::vector<float> out = scratch_row();
      if (const auto it = stats_.find(r); it != stats_.end())  // normaliser known: the write pass alone
        specdec::detail::write_exp_shifted(m_.row(r), m_.cols(), it->second.max, 1.0f / temperature_, 1.0f / it->second.sum,
                                           out.data());
      else
        backend_->row_softmax(one, temperature_, matrix_view<float>(out.data(), 1, m_.cols()));
      return out;
    } else {
      auto out = backend_->template allocate<float>(m_.cols());
      backend_->row_softmax(one, temperature_, matrix_view<float, space>(out.view().data(), 1, m_.cols()));
      return backend_->download(vector_view<const float, space>(out.view().data(), m_.cols()));
    }
  }

  /// The row's logits with the disallowed ones at -inf, softened by the backend's row_softmax (on the
  /// backend's memory: the entries are those of row_softmax over the masked logits, bit for bit).
  std::vector<float> fetch_masked(index_t r) {
    std::vector<float> x;
    if constexpr (std::is_same_v<space, host_space>) {
      x = scratch_row();
      std::copy(m_.row(r), m_.row(r) + m_.cols(), x.begin());
    } else {
      x = backend_->download(vector_view<const float, space>(m_.row(r), m_.cols()));
    }
    const std::int32_t* mask = bitmask_.row(r);
    for (index_t j = 0; j < m_.cols(); ++j)
      if (((static_cast<std::uint32_t>(mask[j >> 5]) >> (j & 31)) & 1u) == 0) x[static_cast<std::size_t>(j)] = -std::numeric_limits<float>::infinity();
    if constexpr (std::is_same_v<space, host_space>) {
      backend_->row_softmax(matrix_view<const float>(x.data(), 1, m_.cols()), temperature_, matrix_view<float>(x.data(), 1, m_.cols()));
      return x;
    } else {
      auto in = backend_->upload(std::span<const float>(x));
      auto out = backend_->template allocate<float>(m_.cols());
      backend_->row_softmax(matrix_view<const float, space>(in.view().data(), 1, m_.cols()), temperature_,
                            matrix_view<float, space>(out.view().data(), 1, m_.cols()));
      return backend_->download(vector_view<const float, space>(out.view().data(), m_.cols()));
    }
  }

  B* backend_;
  matrix_view<const float, space> m_;
  matrix_view<const std::int32_t> bitmask_ = {};
  float temperature_ = 1.0f;
  bool softened_ = false;
  std::map<index_t, std::vector<float>> cache_;
  std::map<index_t, specdec::detail::softmax_stats<float>> stats_;  // softened rows read entry by entry
};

/// Canonical chunk masses (8 lanes in double, lanes combined pairwise, see row_kernels.hpp) of the
/// entries `entry(0..n)`; returns the total and fills `masses`.
template <class Entry>
double canonical_masses(const Entry& entry, index_t n, std::vector<double>& masses) {
  const index_t chunks = (n + specdec::detail::sample_chunk - 1) / specdec::detail::sample_chunk;
  masses.assign(static_cast<std::size_t>(chunks), 0.0);
  double total = 0.0;
  for (index_t c = 0; c < chunks; ++c) {
    const index_t begin = c * specdec::detail::sample_chunk;
    const index_t len = std::min(specdec::detail::sample_chunk, n - begin);
    double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (index_t i = 0; i < len; ++i) lane[i % 8] += static_cast<double>(entry(begin + i));
    masses[static_cast<std::size_t>(c)] = specdec::detail::combine_lanes(lane);
    total += masses[static_cast<std::size_t>(c)];
  }
  return total;
}

/// The distribution at a tree node while its children are tested: starts as the target row p and
/// loses each rejected candidate (deterministic drafts: the token is zeroed) or each rejected draft
/// distribution (`p := max(0, p - scale q)`, materialised). `prob(x)` is the normalised current value;
/// `draw` samples the current entries without normalising (inverse CDF on `u * mass`).
class working_distribution {
 public:
  working_distribution(const float* p, index_t n) : p_(p), n_(n) {}

  /// Current probability of token x (the untouched row reads p(x) exactly, as the references do).
  float prob(index_t x) const {
    if (!modified_) return p_[x];
    const float value = entry(x);
    return mass_ > 0.0 ? static_cast<float>(static_cast<double>(value) / mass_) : 0.0f;
  }
  /// Unnormalised current entry of token x.
  float entry(index_t x) const {
    if (!w_.empty()) return w_[static_cast<std::size_t>(x)];
    if (std::find(excluded_.begin(), excluded_.end(), x) != excluded_.end()) return 0.0f;
    return p_[x];
  }

  /// Zeroes token x (a rejected deterministic candidate) and renormalises.
  void remove(index_t x) {
    if (!modified_) start();
    const float removed = entry(x);
    if (!w_.empty()) w_[static_cast<std::size_t>(x)] = 0.0f;
    else excluded_.push_back(x);
    mass_ -= static_cast<double>(removed);
    if (mass_ < 0.0) mass_ = 0.0;
  }
  /// Replaces the distribution by max(0, current - scale * q) (a rejected sampled draft; scale is the
  /// lenience, 1 for lossless verification). Normalisation is implicit in prob() and draw().
  void subtract(const float* q, float scale = 1.0f) {
    subtract_entries([q](index_t j) { return q[j]; }, scale);
  }
  /// Same with q the point mass at x (a rejected deterministic draft under lenience scale < 1; at
  /// scale 1 remove(x) is the same thing without materialising the row).
  void subtract_point(index_t x, float scale) {
    subtract_entries([x](index_t j) { return j == x ? 1.0f : 0.0f; }, scale);
  }

  /// Weighs the untouched row once, in the canonical order: its chunk masses (kept for a later draw
  /// or removal, which then need no pass of their own), total and NaN / negative flags. One pass
  /// serves both the caller's validity check and the draw.
  const specdec::detail::folded_row& weigh() {
    if (!weighed_) {
      const index_t chunks = (n_ + specdec::detail::sample_chunk - 1) / specdec::detail::sample_chunk;
      std::vector<specdec::detail::chunk_mass> partial(static_cast<std::size_t>(chunks));
#if SPECDEC_HOST_SIMD
      specdec::detail::probability_chunk_masses(p_, n_, partial.data());
#else
      for (index_t c = 0; c < chunks; ++c)
        partial[static_cast<std::size_t>(c)] = specdec::detail::probability_chunk_mass(
            p_ + c * specdec::detail::sample_chunk, std::min(specdec::detail::sample_chunk, n_ - c * specdec::detail::sample_chunk));
#endif
      base_masses_.resize(static_cast<std::size_t>(chunks));
      base_ = specdec::detail::fold_chunks(partial.data(), chunks, base_masses_.data());
      weighed_ = true;
    }
    return base_;
  }

  bool modified() const noexcept { return modified_; }
  /// Mass of the current entries (1 for the untouched row, by definition of a distribution).
  double mass() const noexcept { return modified_ ? mass_ : 1.0; }

  /// Inverse-CDF draw from the current entries with uniform u, in the canonical order; when the mass
  /// is zero, `fallback` decides (sample_target draws from the untouched row).
  std::int32_t draw(double u, empty_residual fallback) {
    // The shared search takes a host-device entry source, so excluded tokens are materialised first.
    if (w_.empty() && !excluded_.empty()) w_ = entries();
    const specdec::detail::probability_source<float> base{p_};
    if (w_.empty()) {  // the untouched row: its weighing is the draw's mass table
      const double total = weigh().total;
      if (total > 0.0) return specdec::detail::locate_sample(base_masses_.data(), n_, base, u * total);
    } else {
      const specdec::detail::probability_source<float> current{w_.data()};
      const double total = canonical_masses(current, n_, masses_);
      if (total > 0.0) return specdec::detail::locate_sample(masses_.data(), n_, current, u * total);
    }
    switch (fallback) {
      case empty_residual::sample_target: {
        const double base_total = weigh().total;
        return specdec::detail::locate_sample(base_masses_.data(), n_, base, u * base_total);
      }
      case empty_residual::token_zero: return 0;
      case empty_residual::last_token: break;
    }
    return static_cast<std::int32_t>(n_ - 1);
  }

  /// vLLM's exponential race: argmax over j of entry(j) / noise[j] (first index on ties). An all-zero
  /// current distribution gives token 0, as vLLM. `noise` must have passed check_noise_row: with every
  /// entry finite and >= 0, a token of positive mass scores above every token of mass 0.
  std::int32_t race(const float* noise) const {
    std::int32_t best = 0;
    float best_score = -1.0f;
    for (index_t j = 0; j < n_; ++j) {
      const float score = entry(j) / noise[j];
      if (score > best_score) {
        best_score = score;
        best = static_cast<std::int32_t>(j);
      }
    }
    return best;
  }

  /// The current entries, unnormalised (what the next token is drawn from).
  std::vector<float> entries() const {
    std::vector<float> out(static_cast<std::size_t>(n_));
    for (index_t j = 0; j < n_; ++j) out[static_cast<std::size_t>(j)] = entry(j);
    return out;
  }

 private:
  template <class Draft>
  void subtract_entries(const Draft& q, float scale) {
    std::vector<float> next(static_cast<std::size_t>(n_));
    const bool normalised = !modified_;
    for (index_t j = 0; j < n_; ++j) {
      // The references subtract from the normalised distribution, in fp32.
      const float current = normalised ? p_[j] : prob(j);
      const float r = specdec::detail::scaled_difference(current, scale, q(j));
      next[static_cast<std::size_t>(j)] = r > 0.0f ? r : 0.0f;
    }
    w_ = std::move(next);
    excluded_.clear();
    modified_ = true;
    mass_ = canonical_masses([&](index_t j) { return w_[static_cast<std::size_t>(j)]; }, n_, masses_);
  }

  void start() {
    mass_ = weigh().total;
    modified_ = true;
  }

  const float* p_;
  index_t n_;
  bool modified_ = false;
  double mass_ = 1.0;
  std::vector<float> w_;
  std::vector<index_t> excluded_;
  std::vector<double> masses_;       // chunk masses of the modified entries (w_)
  bool weighed_ = false;
  specdec::detail::folded_row base_{0.0, false, false};
  std::vector<double> base_masses_;  // chunk masses of the untouched row p_
};

/// Checks a probability value read from a row: finite and in [0, 1].
inline void check_probability(const char* where, const char* what, index_t row, index_t column, float value) {
  SPECDEC_EXPECTS(value >= 0.0f && value <= 1.0f, where, what, "[", row, ", ", column, "] = ", value,
                  "; expected a probability in [0, 1]");
}

/// Checks the row `dist` was made from through its weighing (the pass a draw or removal needs
/// anyway); only a row found wrong is read again, to name its first bad entry.
inline void check_weighed_row(const char* where, const char* what, index_t row, working_distribution& dist, const float* p,
                              index_t n);

/// Checks a whole probability row: finite, non-negative, summing to 1 within the backends' tolerance.
inline void check_probability_row(const char* where, const char* what, index_t row, const float* p, index_t n) {
  check_distribution(where, what, row, [p](index_t j) { return p[j]; }, n, specdec::detail::probability_sum_tolerance);
}

inline void check_weighed_row(const char* where, const char* what, index_t row, working_distribution& dist, const float* p,
                              index_t n) {
  if (dist.weigh().error() == specdec::detail::fault::none) return;
  check_probability_row(where, what, row, p, n);
  // The weighing and the entry check agree on what is wrong; this is reached only if they did not.
  specdec::detail::throw_invalid_argument(where, what, " row ", row, " is not a probability distribution");
}

/// Checks row `row` of exponential_race noise: every entry finite and >= 0 (an Exp(1) sample; 0 can
/// come out of a sampler's rounding). A negative, NaN or infinite entry would let a token of
/// probability 0 win the race.
inline void check_noise_row(const char* where, index_t row, const float* noise, index_t n) {
  for (index_t j = 0; j < n; ++j)
    if (!(noise[j] >= 0.0f && noise[j] < std::numeric_limits<float>::infinity()))
      specdec::detail::throw_invalid_argument(where, "exponential_noise[", row, ", ", j, "] = ", noise[j],
                                              "; expected a finite value >= 0 (an Exp(1) sample)");
}

}  // namespace specdec::sampling::detail::inline SPECDEC_ISA
