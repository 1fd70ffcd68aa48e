// SPDX-License-Identifier: Apache-2.0
// Reliability of the policies (issue 31, classes 3 and 5): the draft-length policy, Draft & Verify's
// exit rule and ADMG's plan, and the lenience closed forms. Each case here hung, overflowed, leaked a
// standard exception or returned a wrong value from an unchecked argument before its fix, and now
// throws specdec::invalid_argument naming the argument; the scripted sequence at the end pins the
// policy's choices, recorded from the code before the bounded rewrite, so that the rewrite changed
// none of them.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/policy/admg.hpp>
#include <specdec/policy/draft_length.hpp>
#include <specdec/sampling/lenient.hpp>

#include "backend_conformance.hpp"

using specdec::index_t;
using conformance::error_of;
using conformance::contains;
using conformance::int64_max;
namespace policy = specdec::policy;
namespace admg = specdec::policy::admg;

namespace {
constexpr double nan_double = std::numeric_limits<double>::quiet_NaN();
constexpr double inf_double = std::numeric_limits<double>::infinity();
}  // namespace

TEST_CASE("draft-length policy: longest and contexts are bounded before anything is sized by them") {
  CHECK(policy::max_draft_length == 65536);
  CHECK(policy::max_draft_contexts == 4096);
  CHECK(policy::draft_length_policy(policy::max_draft_length, policy::max_draft_contexts).longest() == 65536);
  // A trillion-token longest made choose() price a trillion lengths (a hang); INT64_MAX overflowed ++length.
  for (const index_t longest : {policy::max_draft_length + 1, index_t{1'000'000'000'000}, int64_max})
    CHECK(contains(error_of([&] { policy::draft_length_policy p(longest); }),
                   "longest = " + std::to_string(longest) + "; expected 0 <= longest <= 65536"));
  // contexts sized a vector of 48-byte tables: 2^40 of them escaped as std::length_error / bad_alloc.
  for (const index_t contexts : {policy::max_draft_contexts + 1, index_t{1} << 40, int64_max})
    CHECK(contains(error_of([&] { policy::draft_length_policy p(8, contexts); }),
                   "contexts = " + std::to_string(contexts) + "; expected 1 <= contexts <= 4096"));
  const policy::acceptance_by_depth acceptance;
  const policy::forward_cost cost;
  for (const index_t longest : {index_t{-1}, policy::max_draft_length + 1, int64_max})
    CHECK(contains(error_of([&] { (void)policy::best_draft_length(acceptance, cost, 0.0, longest); }),
                   "longest = " + std::to_string(longest)));
}

TEST_CASE("draft-length policy: a huge row count is stored sparsely; rows above 2^40 are rejected") {
  // rows sized a vector of sample windows: 2^40 rows asked for 24 TiB, 10^9 quietly took 24 GB.
  policy::draft_length_policy p(8);
  p.target_forward_timed(index_t{1} << 40, 0.25);
  p.target_forward_timed(1'000'000'000, 0.125);
  p.target_forward_timed(1, 0.0625);
  CHECK(p.target_cost()(1) == 0.0625);
  CHECK(p.target_cost()(1'000'000'000) == 0.125);
  CHECK(p.target_cost()(index_t{1} << 40) == 0.25);
  CHECK(p.target_cost()(int64_max) == 0.25);  // above every measured count: that one's
  CHECK(p.target_cost()(-5) == 0.0625);       // below every measured count: that one's
  CHECK(p.target_cost()(500'000'000) == doctest::Approx(0.0625 + 0.0625 * (499'999'999.0 / 999'999'999.0)));
  p.verified(1, 1);
  const index_t length = p.choose();
  CHECK(length >= 0);
  CHECK(length <= 8);
  for (const index_t rows : {(index_t{1} << 40) + 1, int64_max})
    CHECK(contains(error_of([&] { p.target_forward_timed(rows, 0.1); }), "rows = " + std::to_string(rows) + "; expected at most"));
  CHECK(contains(error_of([&] { p.target_forward_timed(0, 0.1); }), "rows = 0"));
  // The frozen curve and the cost agree everywhere.
  const auto curve = p.target_cost().envelope();
  for (const index_t rows : {index_t{-1}, index_t{0}, index_t{1}, index_t{2}, index_t{999'999'999}, index_t{1'000'000'000},
                             index_t{1'000'000'001}, index_t{1} << 40, int64_max})
    CHECK(curve(rows) == p.target_cost()(rows));
}

TEST_CASE("draft-length policy: verified checks 0 <= accepted <= drafted <= longest, empty drafts included") {
  policy::draft_length_policy p(4);
  // verified(-1, 0) used to return silently (an empty draft was ignored before any check).
  CHECK(contains(error_of([&] { p.verified(-1, 0); }), "accepted = -1, drafted = 0; expected 0 <= accepted <= drafted <= longest = 4"));
  CHECK(contains(error_of([&] { p.verified(1, 0); }), "accepted = 1, drafted = 0"));
  CHECK(contains(error_of([&] { p.verified(5, 5); }), "accepted = 5, drafted = 5; expected 0 <= accepted <= drafted <= longest = 4"));
  // accepted + 1 overflowed at INT64_MAX; 2^40 resized the per-depth tables to tens of TB.
  CHECK(contains(error_of([&] { p.verified(int64_max, int64_max); }), "drafted = 9223372036854775807"));
  CHECK(contains(error_of([&] { p.verified(index_t{1} << 40, index_t{1} << 40); }), "drafted = 1099511627776"));
  CHECK(contains(error_of([&] { p.verified(0, 1, 4); }), "context = 4"));
  p.verified(0, 0);
  CHECK(p.acceptance().empty());
  p.verified(4, 4);
  CHECK_FALSE(p.acceptance().empty());

  policy::acceptance_by_depth acceptance;
  CHECK(contains(error_of([&] { acceptance.record(int64_max, int64_max); }),
                 "drafted = 9223372036854775807; expected at most 65536"));
  CHECK(contains(error_of([&] { acceptance.record(index_t{1} << 40, index_t{1} << 40); }), "drafted = 1099511627776"));
  CHECK(contains(error_of([&] { acceptance.record(-1, 0); }), "accepted = -1"));
  CHECK(acceptance.empty());
  acceptance.record(policy::max_draft_length, policy::max_draft_length);
  CHECK(acceptance.rate(policy::max_draft_length) > 0.5);
  CHECK(acceptance.rate(int64_max) == acceptance.pooled());  // a depth never tried leans on the pooled rate
}

TEST_CASE("draft-length policy: prior and caution are checked wherever they are taken") {
  policy::acceptance_by_depth acceptance;
  for (int i = 0; i < 20; ++i) acceptance.record(i % 3, 3);
  policy::forward_cost cost;
  cost.record(1, 1.0);
  cost.record(4, 1.5);
  // prior = 2 gave a "rate" of 2 before any trial; NaN made every rate 0 (std::max(0, NaN)) and the
  // policy never drafted; a negative caution pushed rates above 1.
  for (const double prior : {-0.1, 1.5, 2.0, nan_double, inf_double, -inf_double}) {
    CAPTURE(prior);
    const std::string named = "prior = ";
    CHECK(contains(error_of([&] { (void)acceptance.pooled(prior); }), named));
    CHECK(contains(error_of([&] { (void)acceptance.rate(1, prior); }), named));
    CHECK(contains(error_of([&] { (void)acceptance.expected_tokens(3, prior); }), named));
    CHECK(contains(error_of([&] { (void)policy::best_draft_length(acceptance, cost, 0.0, 3, prior); }), named));
    CHECK(contains(error_of([&] { (void)policy::acceptance_by_depth{}.pooled(prior); }), named));
  }
  CHECK(contains(error_of([&] { (void)acceptance.pooled(2.0); }), "prior = 2; expected a rate in [0, 1]"));
  CHECK(contains(error_of([&] { (void)acceptance.rate(1, nan_double); }), "prior = nan"));
  for (const double caution : {-10.0, -1e-300, nan_double, inf_double, -inf_double}) {
    CAPTURE(caution);
    const std::string named = "caution = ";
    CHECK(contains(error_of([&] { (void)acceptance.rate(1, 0.5, caution); }), named));
    CHECK(contains(error_of([&] { (void)acceptance.expected_tokens(3, 0.5, caution); }), named));
    CHECK(contains(error_of([&] { (void)policy::best_draft_length(acceptance, cost, 0.0, 3, 0.5, caution); }), named));
  }
  CHECK(contains(error_of([&] { (void)acceptance.rate(1, 0.9, -10); }), "caution = -10; expected a finite number of standard deviations >= 0"));
  // The edges of the ranges are valid, and rates stay in [0, 1].
  CHECK(policy::acceptance_by_depth{}.pooled(0.0) == 0.0);
  CHECK(policy::acceptance_by_depth{}.pooled(1.0) == 1.0);
  CHECK(policy::acceptance_by_depth{}.rate(1, 1.0, 3.0) == 1.0);
  for (const double prior : {0.0, 0.3, 1.0})
    for (const double caution : {0.0, 0.5, 1e300}) {
      for (const index_t depth : {index_t{-3}, index_t{0}, index_t{1}, index_t{3}, index_t{9}}) {
        const double r = acceptance.rate(depth, prior, caution);
        CHECK(r >= 0.0);
        CHECK(r <= 1.0);
      }
      const index_t best = policy::best_draft_length(acceptance, cost, 0.0, 6, prior, caution);
      CHECK(best >= 0);
      CHECK(best <= 6);
    }
}

TEST_CASE("draft-length policy: expected_tokens takes lengths in [0, max_draft_length]") {
  policy::acceptance_by_depth acceptance;
  for (int i = 0; i < 10; ++i) acceptance.record(2, 4);
  // A negative length silently gave 1; 2^60 looped 2^60 times (a hang).
  for (const index_t length : {index_t{-1}, std::numeric_limits<index_t>::min(), policy::max_draft_length + 1,
                               index_t{1} << 60, int64_max})
    CHECK(contains(error_of([&] { (void)acceptance.expected_tokens(length); }),
                   "length = " + std::to_string(length) + "; expected 0 <= length <= 65536"));
  CHECK(acceptance.expected_tokens(0) == 1.0);
  const double longest = acceptance.expected_tokens(policy::max_draft_length);
  CHECK(longest >= acceptance.expected_tokens(4));
  CHECK(longest <= 65537.0);
  CHECK(acceptance.expected_tokens(2) == doctest::Approx(1 + acceptance.rate(1) + acceptance.rate(1) * acceptance.rate(2)));
}

TEST_CASE("draft-length policy: the largest longest chooses in bounded time, even where every draft is accepted") {
  // The audit's hang: a longest of 10^12 with one measured forward and one verification. Now the
  // constructor refuses it, and the largest accepted longest prices its lengths in one pass.
  CHECK(contains(error_of([&] { policy::draft_length_policy p(1'000'000'000'000); }), "longest = 1000000000000"));
  policy::draft_length_policy p(policy::max_draft_length, 2);
  p.target_forward_timed(1, 1e-3);
  p.target_forward_timed(2, 1.1e-3);
  p.target_forward_timed(policy::max_draft_length + 1, 0.5);
  for (int i = 0; i < 3; ++i) {
    p.verified(policy::max_draft_length, policy::max_draft_length, 0);  // a rate of 1 never stops on its own
    p.verified(0, 1, 1);
  }
  for (int i = 0; i < 20; ++i) {
    const index_t a = p.choose(0), b = p.choose(1);
    CHECK(a >= 0);
    CHECK(a <= policy::max_draft_length);
    CHECK(b >= 0);
    CHECK(b <= policy::max_draft_length);
  }
}

namespace {
// A stand-in accelerator backend: host memory behind a device memory space, so that the device form
// of attention_cosine compiles here; it counts downloads.
struct counting_device {
  using memory_space = specdec::device_space;
  template <class T>
  struct buffer {
    specdec::vector_view<T, memory_space> view() { return {}; }
    specdec::matrix_view<T, memory_space> matrix(index_t, index_t) { return {}; }
  };
  int downloads = 0;
  template <class T>
  buffer<T> allocate(index_t) {
    return {};
  }
  buffer<float> upload(std::span<const float>) { return {}; }
  void upload(std::span<const float>, specdec::vector_view<float, memory_space>) {}
  std::vector<float> download(specdec::vector_view<const float, memory_space> v) {
    ++downloads;
    return std::vector<float>(v.data(), v.data() + v.rows());
  }
  template <class... A> void row_max(A&&...) {}
  template <class... A> void row_argmax(A&&...) {}
  template <class... A> void row_topk(A&&...) {}
  template <class... A> void row_topk_logsumexp(A&&...) {}
  template <class... A> void row_logsumexp(A&&...) {}
  template <class... A> void row_softmax(A&&...) {}
  template <class... A> void row_log_softmax(A&&...) {}
  template <class... A> void row_sample(A&&...) {}
  template <class... A> void row_sample_residual(A&&...) {}
  template <class... A> void gather_rows(A&&...) {}
  template <class... A> void gather_elements(A&&...) {}
};
static_assert(specdec::backend<counting_device>);
}  // namespace

TEST_CASE("ADMG attention_cosine: shapes and extents are checked before anything is downloaded") {
  const std::vector<float> a = {1, 0, 0, 1, 2, 2}, b = {1, 1, 0, 2, 2, 2};
  using device_matrix = specdec::matrix_view<const float, specdec::device_space>;
  counting_device dev;
  const double host = admg::attention_cosine(specdec::matrix_view<const float>(a.data(), 2, 3),
                                             specdec::matrix_view<const float>(b.data(), 2, 3));
  CHECK(admg::attention_cosine(dev, device_matrix(a.data(), 2, 3), device_matrix(b.data(), 2, 3)) == host);
  CHECK(dev.downloads == 2);
  dev.downloads = 0;
  // Downloads were sized by x_in.size() and x_out.size() before the shapes were compared: [-1 x -1]
  // has size 1, [2 x 3] against [3 x 2] downloaded both.
  CHECK(contains(error_of([&] { (void)admg::attention_cosine(dev, device_matrix(a.data(), 2, 3), device_matrix(b.data(), 3, 2)); }),
                 "x_in is [2 x 3] and x_out is [3 x 2]; expected equal shapes"));
  CHECK(contains(error_of([&] { (void)admg::attention_cosine(dev, device_matrix(a.data(), -1, -1), device_matrix(b.data(), -1, -1)); }),
                 "[-1 x -1]; expected extents >= 0"));
  CHECK(contains(error_of([&] { (void)admg::attention_cosine(dev, device_matrix(a.data(), 2, -3), device_matrix(b.data(), 2, -3)); }),
                 "expected extents >= 0"));
  CHECK(contains(error_of([&] { (void)admg::attention_cosine(dev, device_matrix(a.data(), 1, 3), device_matrix(b.data(), 1, 3), true); }),
                 "no token to average over"));
  volatile index_t opaque = index_t{1} << 40;  // a constant would let GCC warn about the unreachable host loop
  const index_t huge = opaque;
  CHECK(contains(error_of([&] { (void)admg::attention_cosine(dev, device_matrix(a.data(), huge, huge), device_matrix(b.data(), huge, huge)); }),
                 "would need more than"));
  CHECK(dev.downloads == 0);
  // The host form: negative columns averaged nothing and returned a cosine of 0.
  CHECK(contains(error_of([&] {
                   (void)admg::attention_cosine(specdec::matrix_view<const float>(a.data(), 2, -3),
                                                specdec::matrix_view<const float>(b.data(), 2, -3));
                 }),
                 "expected extents >= 0"));
}

TEST_CASE("ADMG plan_layers: a rule_variant outside the enumeration throws") {
  const std::vector<double> cosines = {0.99, 0.5, 0.995, 0.2, 0.999};
  for (const int variant : {-1, 5, 7, 1 << 20}) {
    admg::rules r;
    r.variant = static_cast<admg::rule_variant>(variant);
    CHECK(contains(error_of([&] { (void)admg::plan_layers(cosines, r); }),
                   "variant = " + std::to_string(variant) + "; expected a rule_variant (0 to 4)"));
  }
  admg::rules last;
  last.variant = admg::rule_variant::every_m_of_removed;
  CHECK(admg::plan_layers(cosines, last).layers() == 5);
}

TEST_CASE("Draft & Verify's exit rule: parameters are checked; a non-finite top-1 probability stops") {
  using parameters = admg::draft_exit::parameters;
  // smoothing = NaN made the threshold NaN after one update, and then stop() never fired on probability.
  CHECK(contains(error_of([&] { admg::draft_exit e(parameters{.smoothing = nan_double}); }), "smoothing = nan; expected a weight in [0, 1]"));
  CHECK(contains(error_of([&] { admg::draft_exit e(parameters{.smoothing = 1.5}); }), "smoothing = 1.5"));
  CHECK(contains(error_of([&] { admg::draft_exit e(parameters{.smoothing = -0.1}); }), "smoothing = -0.1"));
  CHECK(contains(error_of([&] { admg::draft_exit e(parameters{.matchness_weight = nan_double}); }), "matchness_weight = nan"));
  CHECK(contains(error_of([&] { admg::draft_exit e(parameters{.matchness_weight = 2.0}); }), "matchness_weight = 2"));
  CHECK(contains(error_of([&] { admg::draft_exit e(parameters{.matchness_target = nan_double}); }), "matchness_target = nan"));
  CHECK(contains(error_of([&] { admg::draft_exit e(parameters{.matchness_target = inf_double}); }), "matchness_target = inf"));
  CHECK(contains(error_of([&] { admg::draft_exit e(parameters{.step = nan_double}); }), "step = nan; expected a finite value"));
  CHECK(contains(error_of([&] { admg::draft_exit e(parameters{.step = -inf_double}); }), "step = -inf"));
  CHECK(contains(error_of([&] { admg::draft_exit e(parameters{.initial_threshold = nan_double}); }), "initial_threshold = nan"));
  CHECK(contains(error_of([&] { admg::draft_exit e(parameters{.max_draft = 0}); }), "max_draft = 0"));

  admg::draft_exit rule(parameters{.initial_threshold = 0.6, .max_draft = 8});
  CHECK(rule.stop(nan_double, 1));  // a NaN used to keep drafting
  CHECK(rule.stop(inf_double, 1));
  CHECK(rule.stop(-inf_double, 1));
  CHECK_FALSE(rule.stop(0.7, 1));
  CHECK(rule.stop(0.5, 1));
  // Extreme valid parameters keep the threshold a probability.
  admg::draft_exit wild(parameters{.initial_threshold = 1.0, .max_draft = 3, .matchness_weight = 0.0,
                                   .matchness_target = -1e300, .step = 1e308, .smoothing = 0.0});
  for (const auto& [accepted, drafted] : {std::pair<index_t, index_t>{0, 3}, {3, 3}, {1, 2}, {0, 1}, {2, 2}}) {
    wild.update(accepted, drafted);
    CHECK(wild.threshold() >= 0.0);
    CHECK(wild.threshold() <= 1.0);
    CHECK(wild.matchness() >= 0.0);
    CHECK(wild.matchness() <= 1.0);
  }
}

TEST_CASE("lenience closed forms: gamma is bounded, gamma + 1 cannot overflow, results unchanged") {
  namespace sampling = specdec::sampling;
  CHECK(sampling::max_gamma == index_t{1} << 20);
  // 2^62 looped 2^62 times (a hang); (1, INT64_MAX) overflowed gamma + 1; 2^40 pushed 8 TB of entries.
  for (const index_t gamma : {sampling::max_gamma + 1, index_t{1} << 40, index_t{1} << 62, int64_max, index_t{-1}}) {
    for (const double alpha : {0.0, 0.5, 1.0}) {
      CHECK(contains(error_of([&] { (void)sampling::expected_tokens_per_step(alpha, gamma); }),
                     "gamma = " + std::to_string(gamma) + "; expected 0 <= gamma <= 1048576"));
      CHECK(contains(error_of([&] { (void)sampling::tokens_per_step_distribution(alpha, gamma); }),
                     "gamma = " + std::to_string(gamma)));
    }
  }
  CHECK(sampling::expected_tokens_per_step(1.0, sampling::max_gamma) == 1048577.0);
  CHECK(sampling::expected_tokens_per_step(0.5, sampling::max_gamma) == 2.0);
  CHECK(sampling::expected_tokens_per_step(0.0, 7) == 1.0);
  // Bit for bit the repeated products of before (the early stop only skips products of 0).
  for (const double alpha : {0.0, 1e-300, 0.1, 0.5, 0.9, 0.999, 1.0 - 1e-12})
    for (const index_t gamma : {index_t{0}, index_t{1}, index_t{4}, index_t{37}, index_t{5000}}) {
      double power = 1.0;
      for (index_t i = 0; i <= gamma; ++i) power *= alpha;
      CAPTURE(alpha);
      CAPTURE(gamma);
      CHECK(sampling::expected_tokens_per_step(alpha, gamma) == (1.0 - power) / (1.0 - alpha));
    }
  const auto dist = sampling::tokens_per_step_distribution(0.9, 1000);
  CHECK(dist.size() == 1001);
  CHECK(std::accumulate(dist.begin(), dist.end(), 0.0) == doctest::Approx(1.0));
  CHECK(sampling::tokens_per_step_distribution(0.5, 0) == std::vector<double>{1.0});
}

namespace {
// A scripted engine: acceptance per context from a fixed LCG (context 0's text changes halfway),
// forward times flat up to `flat_rows` rows and then linear, with jitter and an occasional preempted
// forward, one sparse larger forward now and then, and draft-token times for a model drafter. One
// character per choose(): '0' + length.
struct scripted {
  std::string choices;
  policy::draft_length_policy policy;
};

scripted run_script(index_t longest, index_t contexts, bool model_drafter, std::uint64_t seed, int steps, index_t flat_rows,
                    unsigned best_permille) {
  scripted r{{}, policy::draft_length_policy(longest, contexts)};
  auto& p = r.policy;
  std::uint64_t s = seed;
  auto next = [&s] {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<unsigned>(s >> 33);
  };
  auto forward_seconds = [&](index_t rows) {
    const double base = 0.008 + (rows > flat_rows ? 0.0015 * static_cast<double>(rows - flat_rows) : 0.0);
    double seconds = base * (1.0 + static_cast<double>(next() % 64) / 1024.0);
    if (next() % 50 == 0) seconds *= 5;  // a preempted forward
    return seconds;
  };
  for (int step = 0; step < steps; ++step) {
    const index_t context = (step / 37) % contexts;
    unsigned permille = context == 0 ? best_permille : context == 1 ? 300 : 600;
    if (context == 0 && step > steps / 2) permille = 400;  // the text changes
    const index_t length = p.choose(context);
    r.choices += static_cast<char>('0' + length);
    index_t accepted = 0;
    while (accepted < length && next() % 1000 < permille) ++accepted;
    p.verified(accepted, length, context);
    p.target_forward_timed(length + 1, forward_seconds(length + 1));
    if (step % 97 == 13) p.target_forward_timed(2 * longest + 3, forward_seconds(2 * longest + 3));  // a sparse, larger forward
    if (model_drafter && length > 0) p.draft_token_timed(0.002 * (1.0 + static_cast<double>(next() % 32) / 1024.0));
  }
  return r;
}

struct recorded {
  index_t longest, contexts;
  bool model_drafter;
  std::uint64_t seed;
  int steps;
  index_t flat_rows;
  unsigned best_permille;
  const char* choices;
  // expected_tokens(3), expected_tokens(L, 0.7, 0.5), expected_tokens(L + 5, 0.2, 1.5), rate(1),
  // rate(2, 0.3, 0.5), rate(L + 9, 0.9, 2), pooled(), pooled(0.25) of context 0
  double acceptance[8];
  // target_cost() at rows -1, 0, 1, 2, 3, 5, L / 2, L, L + 1, L + 2, 2 L + 3, 2 L + 4, 3 L
  double cost[13];
  // best_draft_length(context 0, target_cost(), ds, L, prior, caution) for ds in {0, 1e-3, 4e-3},
  // prior in {0.1, 0.5, 0.9}, caution in {0, 0.5, 3}
  index_t best[27];
};

// Recorded from the policy before its bounded rewrite (per-length cost scans, dense row storage).
const recorded before_rewrite[] = {
    {8, 1, false, 1, 300, 4, 850,
     "181223333333333333333333333333333333333333333333333333333333334443433333333333333333333333344334444444444444333333333444433333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333",
     {0x1.93094748bfc4ap+0, 0x1.77c19c6f7452fp+0, 0x1.3a71086fb7447p+0, 0x1.adc5fba7b94ebp-2, 0x1.7d9e9d36d3b81p-3, 0x0p+0, 0x1.7ec55d560aae5p-2, 0x1.60e5b024832edp-2},
     {0x1.13f7ced916873p-7, 0x1.13f7ced916873p-7, 0x1.13f7ced916873p-7, 0x1.13f7ced916873p-7, 0x1.13f7ced916873p-7, 0x1.4374bc6a7ef9ep-7, 0x1.13f7ced916873p-7, 0x1.d776c8b43958p-7, 0x1.0466666666666p-6, 0x1.1e54fdf3b645ap-6, 0x1.03dc28f5c28f6p-5, 0x1.03dc28f5c28f6p-5, 0x1.03dc28f5c28f6p-5},
     {3, 3, 1, 3, 3, 1, 3, 3, 1, 1, 1, 0, 1, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
    {12, 3, true, 2, 300, 4, 850,
     "125233333333333333333333333333333333331110000000000000001000000000000000101000000000000000111112111100000000000333333333333333333333333333333333333300000110000000000000001000000000000000011111111122212111111211111111111111322222212111111111000000000000000100000000000000010000000000000001000000001111",
     {0x1.725a26fc0dd0bp+0, 0x1.581980798e945p+0, 0x1.1aa20b707495bp+0, 0x1.179ab29205a4bp-2, 0x1.5111d51f325e8p-2, 0x0p+0, 0x1.6c799ef20a771p-2, 0x1.49969f23ae5cap-2},
     {0x1.0cccccccccccdp-7, 0x1.0cccccccccccdp-7, 0x1.0cccccccccccdp-7, 0x1.0d4fdf3b645a2p-7, 0x1.0d916872b020cp-7, 0x1.3cc49ba5e354p-7, 0x1.6926e978d4fdfp-7, 0x1.5049249249249p-6, 0x1.6a3cc1e098eaep-6, 0x1.84305f2ee8b12p-6, 0x1.6ac7ae147ae15p-5, 0x1.6ac7ae147ae15p-5, 0x1.6ac7ae147ae15p-5},
     {3, 3, 0, 3, 3, 0, 3, 3, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
    {40, 2, true, 3, 300, 16, 960,
     "125945675675445667767788999999999999982112111100000000000000000100000000009999977776766666666665566666666665655000000100000000000000001000111111000066676654332322232222111111111111111110000000010000000000000001000000000000111111111111111111111111121111111111100011000000000000000100000000000000011111",
     {0x1.c08f437186ecbp+0, 0x1.a372b94b9dfbfp+0, 0x1.43fa871077541p+0, 0x1.cdb7c905c5f27p-2, 0x1.423ebe36d2c0cp-2, 0x1.3d24f907f77a8p-4, 0x1.d48f59d9f4f78p-2, 0x1.a9f900b23991bp-2},
     {0x1.0e5604189374cp-7, 0x1.0e5604189374cp-7, 0x1.0e5604189374cp-7, 0x1.0e5604189374cp-7, 0x1.0e5604189374cp-7, 0x1.11a9fbe76c8b4p-7, 0x1.6fec4e377e0cep-6, 0x1.9d844013c025cp-5, 0x1.a8fe8e20269a8p-5, 0x1.b478dc2c8d0f4p-5, 0x1.c587ae147ae15p-4, 0x1.c587ae147ae15p-4, 0x1.c587ae147ae15p-4},
     {7, 7, 1, 7, 7, 1, 7, 7, 1, 2, 1, 0, 2, 1, 0, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
    {5, 4, false, 4, 300, 4, 850,
     "155555555555555555555555555555555444442222221122111111111122222222222222222223333333333333333333333333333333333333222323333323333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333",
     {0x1.8e18f00313af8p+0, 0x1.7123a0458982bp+0, 0x1.2d5c1ead9d094p+0, 0x1.5ed37ed458575p-2, 0x1.5f8f6dc7aaf2dp-2, 0x0p+0, 0x1.90901dd7cf36bp-2, 0x1.7271850259939p-2},
     {0x1.0b020c49ba5e3p-7, 0x1.0b020c49ba5e3p-7, 0x1.0b020c49ba5e3p-7, 0x1.0b020c49ba5e3p-7, 0x1.0e147ae147ae1p-7, 0x1.47b645a1cac08p-7, 0x1.0b020c49ba5e3p-7, 0x1.47b645a1cac08p-7, 0x1.74c49ba5e353fp-7, 0x1.a702a215a6791p-7, 0x1.6a3b645a1cacp-6, 0x1.6a3b645a1cacp-6, 0x1.6a3b645a1cacp-6},
     {3, 3, 0, 3, 3, 0, 3, 3, 0, 1, 1, 0, 1, 1, 0, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
    {24, 1, false, 5, 300, 12, 930,
     "1H3444444455555555555555555555555555555555555555555555555555555555555555555555555555555555556666666666666666666666666666666666666666666666666666666666666666666666666666666666666666666666666666666666666666666666636666666666666666666666666666666666666666666666666666666666666666666666666666666666662266",
     {0x1.a02441651f2c3p+0, 0x1.829fd53782459p+0, 0x1.3cfcc0c2c4abep+0, 0x1.a4a449a5e09cdp-2, 0x1.266eac6f529a4p-2, 0x1.8181dec038bp-9, 0x1.9a435811ef567p-2, 0x1.7c25fcfa87998p-2},
     {0x1.0d916872b020cp-7, 0x1.0d916872b020cp-7, 0x1.0d916872b020cp-7, 0x1.0d916872b020cp-7, 0x1.0fdf3b645a1cbp-7, 0x1.147ae147ae148p-7, 0x1.ce369d0369d04p-7, 0x1.c5fc962fc963p-6, 0x1.d88f5c28f5c29p-6, 0x1.f1e2c6d0440e8p-6, 0x1.1ac20c49ba5e4p-4, 0x1.1ac20c49ba5e4p-4, 0x1.1ac20c49ba5e4p-4},
     {6, 6, 1, 6, 6, 1, 6, 6, 1, 1, 1, 0, 1, 1, 0, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
};
}  // namespace

TEST_CASE("draft-length policy: a scripted sequence chooses exactly the lengths it chose before the bounded rewrite") {
  for (const recorded& r : before_rewrite) {
    CAPTURE(r.seed);
    const scripted run = run_script(r.longest, r.contexts, r.model_drafter, r.seed, r.steps, r.flat_rows, r.best_permille);
    CHECK(run.choices == r.choices);
    const auto& a = run.policy.acceptance(0);
    const index_t l = r.longest;
    // Floating values within an ulp or so: a build that fuses multiply-adds (-march with FMA) rounds
    // the interpolation differently from the recording build; the lengths are exact either way.
    const double acceptance[] = {a.expected_tokens(3), a.expected_tokens(l, 0.7, 0.5), a.expected_tokens(l + 5, 0.2, 1.5),
                                 a.rate(1),           a.rate(2, 0.3, 0.5),           a.rate(l + 9, 0.9, 2.0),
                                 a.pooled(),          a.pooled(0.25)};
    for (int i = 0; i < 8; ++i) CHECK(acceptance[i] == doctest::Approx(r.acceptance[i]).epsilon(1e-12));
    const index_t rows[] = {-1, 0, 1, 2, 3, 5, l / 2, l, l + 1, l + 2, 2 * l + 3, 2 * l + 4, 3 * l};
    for (int i = 0; i < 13; ++i) CHECK(run.policy.target_cost()(rows[i]) == doctest::Approx(r.cost[i]).epsilon(1e-12));
    int i = 0;
    for (const double draft_seconds : {0.0, 0.001, 0.004})
      for (const double prior : {0.1, 0.5, 0.9})
        for (const double caution : {0.0, 0.5, 3.0})
          CHECK(policy::best_draft_length(a, run.policy.target_cost(), draft_seconds, l, prior, caution) == r.best[i++]);
  }
}
