// SPDX-License-Identifier: Apache-2.0
// The draft-length policy driven as a hostile engine would: any longest and contexts, verifications
// and timings with counts at the int64 edges, NaN / infinite / negative times, priors and cautions.
// Each call throws specdec::invalid_argument or keeps the contract: choose() in [0, longest] (within
// `available` when given), rates in [0, 1], expected tokens in [1, length + 1]; and every call returns
// (libFuzzer's -timeout catches a hang; ASan an allocation sized by a caller's count).
#include <cmath>
#include <cstddef>
#include <cstdint>

#include <specdec/policy/draft_length.hpp>

#include "fuzz_input.hpp"

namespace {

using specdec::index_t;
namespace policy = specdec::policy;

index_t count(fuzz::input& in, index_t small) { return in.flag() ? in.extreme() : in.range(0, small); }

double number(fuzz::input& in) {
  switch (in.byte() % 4) {
    case 0: return static_cast<double>(in.value());
    case 1: return static_cast<double>(in.range(0, 1000)) / 1000.0;
    case 2: return static_cast<double>(in.range(0, 100)) * 1e-3;
    default: return static_cast<double>(in.extreme());
  }
}

template <class F>
void defined(F&& f) {
  try {
    f();
  } catch (const specdec::invalid_argument&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::input in(data, size);
  const index_t longest = in.flag() ? in.extreme() : in.range(0, 40);
  const index_t contexts = in.flag() ? in.extreme() : in.range(1, 4);
  try {
    policy::draft_length_policy p(longest, contexts);
    for (int step = 0; step < 48 && !in.empty(); ++step) {
      switch (in.byte() % 7) {
        case 0: defined([&] {
            const index_t context = count(in, 4);
            if (in.flag()) {
              const index_t available = count(in, 40);
              const index_t length = p.choose(context, available);
              fuzz::require(length >= 0 && length <= p.longest() && length <= available,
                            "choose(context, available) outside [0, min(available, longest)]", length, available);
            } else {
              const index_t length = p.choose(context);
              fuzz::require(length >= 0 && length <= p.longest(), "choose() outside [0, longest]", length, p.longest());
            }
          });
          break;
        case 1: defined([&] { p.verified(count(in, 40), count(in, 40), count(in, 4)); }); break;
        case 2: defined([&] { p.target_forward_timed(count(in, 40), number(in)); }); break;
        case 3: defined([&] { p.draft_token_timed(number(in)); }); break;
        case 4: defined([&] {
            const index_t best = policy::best_draft_length(p.acceptance(count(in, 4)), p.target_cost(), number(in),
                                                           count(in, 40), number(in), number(in));
            fuzz::require(best >= 0 && best <= policy::max_draft_length, "best_draft_length out of range", best);
          });
          break;
        case 5: defined([&] {
            const double rate = p.acceptance(count(in, 4)).rate(count(in, 40), number(in), number(in));
            if (!(rate >= 0.0 && rate <= 1.0)) fuzz::fail("rate outside [0, 1] (or NaN)");
          });
          break;
        default: defined([&] {
            const index_t length = count(in, 40);
            const double expected = p.acceptance(count(in, 4)).expected_tokens(length, number(in), number(in));
            if (!(expected >= 1.0 && expected <= static_cast<double>(length) + 1.0 + 1e-9))
              fuzz::fail("expected tokens outside [1, length + 1] (or NaN)", length);
          });
          break;
      }
    }
  } catch (const specdec::invalid_argument&) {
  }
  return 0;
}
