// SPDX-License-Identifier: Apache-2.0
// The backends the team-job suites (batched verification, the device-resident EAGLE-2 build) run on:
// every backend, plus, in host builds, specdec::eigen with 4-thread teams, so that the cooperative row
// passes are split four ways on the host too (nvcc builds add the CUDA backend's 256-thread blocks).
#pragma once

#include <doctest/doctest.h>

#include "backend_conformance.hpp"

#if !defined(__CUDACC__)
#include <barrier>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include <specdec/backend/eigen.hpp>

namespace conformance {

/// specdec::eigen whose teams have 4 threads (std::barrier).
struct four_thread_eigen : specdec::eigen {
  struct thread_team {
    specdec::index_t r;
    std::barrier<>* gate;
    std::byte* wide;
    specdec::index_t rank() const noexcept { return r; }
    specdec::index_t size() const noexcept { return 4; }
    void sync() const { gate->arrive_and_wait(); }
    std::byte* wide_scratch() const noexcept { return wide; }
  };
  std::vector<std::byte> scratch;
  template <class Job>
  void run_teams(specdec::index_t count, const Job& job) {
    const std::size_t stride = specdec::detail::team_scratch_stride(job.scratch_bytes());
    const std::size_t wide_stride = specdec::detail::team_wide_stride(job);
    scratch.assign(stride + wide_stride + 16, std::byte{0});
    auto* base = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(scratch.data()) + 15) / 16 * 16);
    std::byte* wide = wide_stride == 0 ? nullptr : base + stride;
    for (specdec::index_t t = 0; t < count; ++t) {
      std::barrier<> gate(4);
      std::vector<specdec::detail::team_fault> faults(4);
      std::vector<std::thread> threads;
      for (specdec::index_t r = 0; r < 4; ++r)
        threads.emplace_back([&, r] {
          thread_team team{r, &gate, wide};
          faults[static_cast<std::size_t>(r)] = job(team, t, base);
        });
      for (auto& th : threads) th.join();
      for (const auto& f : faults) CHECK(f.code == faults[0].code);  // every thread reaches the same verdict
      if (faults[0].code != 0) specdec::detail::throw_job_fault(job, faults[0]);
    }
  }
};

}  // namespace conformance

#define SPECDEC_TEAM_BACKENDS SPECDEC_ALL_BACKENDS, conformance::four_thread_eigen
#else
#define SPECDEC_TEAM_BACKENDS SPECDEC_ALL_BACKENDS
#endif
