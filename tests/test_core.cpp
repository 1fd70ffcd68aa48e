// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <Eigen/Core>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <fstream>
#include <limits>
#include <locale>
#include <sstream>
#include <span>
#include <string>
#include <vector>

#include <specdec/core/core.hpp>

using specdec::index_t;

TEST_CASE("views over std::span, std::vector and Eigen::Map") {
  std::vector<float> v = {1, 2, 3, 4, 5, 6};
  specdec::view from_vector(v);
  static_assert(std::is_same_v<decltype(from_vector), specdec::vector_view<float>>);
  CHECK(from_vector.rows() == 6);
  CHECK(from_vector(5) == 6);
  const std::vector<float>& cv = v;
  specdec::view from_const_vector(cv);
  static_assert(std::is_same_v<decltype(from_const_vector), specdec::vector_view<const float>>);
  specdec::view from_span(std::span<float>(v).subspan(2));
  CHECK(from_span.rows() == 4);
  CHECK(from_span(0) == 3);
  specdec::vector_view<const float> widened = from_vector;  // T -> const T
  CHECK(widened(1) == 2);

  const auto m = specdec::as_matrix(v, 2, 3);
  CHECK(m(1, 2) == 6);
  CHECK(m.stride(0) == 3);
  CHECK_THROWS_AS(specdec::as_matrix(v, 4, 2), specdec::invalid_argument);

  Eigen::Map<Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> row_major(v.data(), 2, 3);
  specdec::matrix_view<float> rm(row_major);
  CHECK(rm.rows() == 2);
  CHECK(rm.cols() == 3);
  CHECK(rm(1, 0) == 4);
  CHECK(rm.has_contiguous_rows());
  Eigen::Map<Eigen::MatrixXf> col_major(v.data(), 2, 3);  // column-major: element (i, j) at i + 2j
  specdec::matrix_view<const float> cm(col_major);
  CHECK(cm(1, 0) == 2);
  CHECK(cm(0, 2) == 5);
  CHECK_FALSE(cm.has_contiguous_rows());
  Eigen::Map<Eigen::VectorXf> vec(v.data(), 6);
  specdec::vector_view<float> ev(vec);
  CHECK(ev(4) == 5);
}

TEST_CASE("views carry their memory space in the type") {
  // compile-time properties; the runtime check keeps the case visible in the report
  CHECK(specdec::vector_view<float, specdec::device_space>().empty());
  static_assert(!std::is_convertible_v<specdec::vector_view<float, specdec::device_space>,
                                       specdec::vector_view<float, specdec::host_space>>);
  static_assert(!std::is_convertible_v<specdec::vector_view<const float>, specdec::vector_view<float>>);
  static_assert(!std::is_constructible_v<specdec::vector_view<float, specdec::device_space>, std::vector<float>&>);
  static_assert(std::is_trivially_copyable_v<specdec::matrix_view<float>>);
}

TEST_CASE("invalid_argument is a std::invalid_argument and names the function") {
  try {
    SPECDEC_EXPECTS(1 + 1 == 3, "specdec::example", "x = ", 2, " is out of range; expected 3");
    FAIL("SPECDEC_EXPECTS did not throw");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()) == "specdec::example: x = 2 is out of range; expected 3");
  }
}

namespace {
/// A numpunct that groups digits in threes with ',' and writes ';' as the decimal point: a global
/// locale of this kind changes what an ostream prints for a number.
struct grouping_punct : std::numpunct<char> {
  char do_decimal_point() const override { return ';'; }
  char do_thousands_sep() const override { return ','; }
  std::string do_grouping() const override { return "\3"; }
};
template <class... Parts>
std::string message_of(const Parts&... parts) {
  try {
    specdec::detail::throw_invalid_argument("f", parts...);
  } catch (const specdec::invalid_argument& e) {
    return e.what();
  }
  return {};
}
template <class... Parts>
std::string classic_stream(const Parts&... parts) {
  std::ostringstream s;
  s.imbue(std::locale::classic());
  s << "f: ";
  (s << ... << parts);
  return s.str();
}
}  // namespace

TEST_CASE("error messages print pieces as the classic-locale stream does, whatever the global locale") {
  const std::string text = "text";
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<double> values = {0.0, -0.0, 0.1, 1e-7, 123456.0, 1234567.0, 3.14159265, 1e300, -2.5e-300, 4e-320,
                                      inf, -inf, nan, -nan, 1.0 / 3};
  const auto check_all = [&] {
    CHECK(message_of("k = ", 5, ", V = ", std::int64_t{-128256}, ", bytes ", std::size_t{1} << 40, " ", text, ' ', 'c') ==
          "f: k = 5, V = -128256, bytes 1099511627776 text c");
    CHECK(message_of(true, false, static_cast<signed char>('A'), static_cast<unsigned char>('B'), short{-3}, 7u, 8ull) ==
          classic_stream(true, false, static_cast<signed char>('A'), static_cast<unsigned char>('B'), short{-3}, 7u, 8ull));
    for (const double v : values) {
      CAPTURE(v);
      CHECK(message_of("d = ", v, ", f = ", static_cast<float>(v)) == classic_stream("d = ", v, ", f = ", static_cast<float>(v)));
    }
    CHECK(message_of(0.7f, " ", 16777217.0f, " ", 1e-5) == "f: 0.7 1.67772e+07 1e-05");
  };
  check_all();
  struct restore {
    std::locale before;
    ~restore() { std::locale::global(before); }
  } const guard{std::locale::global(std::locale(std::locale::classic(), new grouping_punct))};
  std::ostringstream grouped;
  grouped << 1234567;
  CHECK(grouped.str() == "1,234,567");  // the global locale does reach a default-constructed stream
  check_all();
  CHECK(message_of("V = ", 128256, ", t = ", 0.5) == "f: V = 128256, t = 0.5");
}

namespace {
std::uint32_t hex(const nlohmann::json& j) { return static_cast<std::uint32_t>(std::stoul(j.get<std::string>(), nullptr, 16)); }
}  // namespace

TEST_CASE("Philox4x32-10 matches the Random123 known-answer vectors") {
  std::ifstream file(SPECDEC_TEST_DATA_DIR "/philox4x32_10_kat.json");
  REQUIRE(file.good());
  const auto kat = nlohmann::json::parse(file);
  REQUIRE(kat.at("cases").size() == 3);
  for (const auto& c : kat.at("cases")) {
    const specdec::philox_counter counter{hex(c["counter"][0]), hex(c["counter"][1]), hex(c["counter"][2]),
                                          hex(c["counter"][3])};
    const specdec::philox_key key{hex(c["key"][0]), hex(c["key"][1])};
    const auto out = specdec::philox4x32_10(counter, key);
    for (int i = 0; i < 4; ++i) CHECK(out[static_cast<std::size_t>(i)] == hex(c["expected"][i]));
  }
  static_assert(specdec::philox4x32_10({0, 0, 0, 0}, {0, 0})[0] == 0x6627e8d5u, "usable in constant expressions");
}

TEST_CASE("Philox streams: counter layout and the bits-to-float conversion") {
  const specdec::philox_stream s{0xa4093822299f31d0ull, 0x0370734413198a2eull};
  // Word 4i + w of stream (seed, subsequence) is word w of block i: counter {i_lo, i_hi, sub_lo, sub_hi}.
  const auto block = specdec::philox4x32_10({0x85a308d3u, 0x243f6a88u, 0x13198a2eu, 0x03707344u},
                                            {0x299f31d0u, 0xa4093822u});
  const std::uint64_t i = 0x243f6a8885a308d3ull;
  for (std::uint32_t w = 0; w < 4; ++w) CHECK(s.word(4 * i + w) == block[w]);
  CHECK(specdec::uint32_to_unit_float(0u) == 0.0f);
  CHECK(specdec::uint32_to_unit_float(0xFFFFFFFFu) == 1.0f - 0x1p-24f);
  CHECK(specdec::uint32_to_unit_float(0x80000000u) == 0.5f);
  CHECK(specdec::uint32_to_unit_float(0x000000FFu) == 0.0f);  // the low 8 bits are dropped
  CHECK(specdec::uint32_pair_to_unit_double(0xFFFFFFFFu, 0xFFFFFFFFu) == 1.0 - 0x1p-53);
  std::vector<float> u(1000);
  s.fill_uniforms(17, u.size(), u.begin());
  for (std::size_t k = 0; k < u.size(); ++k) {
    CHECK(u[k] == s.uniform(17 + k));
    CHECK(u[k] >= 0.0f);
    CHECK(u[k] < 1.0f);
  }
}

TEST_CASE("workspace_carver: count-only and carving agree, overflow names the buffer") {
  const auto lay_out = [](specdec::workspace_carver& w) {
    float* a = w.take<float>(10, "a");
    double* b = w.take<double>(3, "b");
    std::int32_t* c = w.take<std::int32_t>(0, "c");
    return std::array<void*, 3>{a, b, c};
  };
  specdec::workspace_carver count;
  const auto none = lay_out(count);
  CHECK(count.count_only());
  CHECK(none[0] == nullptr);
  CHECK(count.bytes_used() == 512);  // a at 0 (40 bytes), b at 256 (24 bytes), c at 512 (empty)
  alignas(256) static std::byte memory[1024];
  specdec::workspace_carver carve(memory, sizeof memory);
  const auto ptrs = lay_out(carve);
  CHECK(ptrs[0] == static_cast<void*>(memory));
  CHECK(ptrs[1] == static_cast<void*>(memory + 256));
  CHECK(carve.bytes_used() == count.bytes_used());
  specdec::workspace_carver small(memory, 300);
  small.take<float>(10, "a");
  CHECK_THROWS_WITH_AS(small.take<double>(10, "partials"),
                       doctest::Contains("workspace too small for buffer 'partials': it needs 336 bytes in all, the workspace has 300"),
                       specdec::invalid_argument);
}

TEST_CASE("version macros") {
  CHECK(SPECDEC_VERSION == SPECDEC_VERSION_MAJOR * 10000 + SPECDEC_VERSION_MINOR * 100 + SPECDEC_VERSION_PATCH);
  CHECK(SPECDEC_VERSION_AT_LEAST(0, 0, 1));
  CHECK_FALSE(SPECDEC_VERSION_AT_LEAST(99, 0, 0));
}
