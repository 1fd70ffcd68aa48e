// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief A safetensors reader (8-byte little-endian header length, a JSON header mapping tensor names
/// to {dtype, shape, data_offsets}, then the raw little-endian data) that loads F32, F16 and BF16
/// tensors as host float32 and maps checkpoint names onto the blocks' weight structs. Dependency-free:
/// the header is read by the small JSON reader below. Truncated or inconsistent files are rejected
/// with specdec::invalid_argument naming the file and the tensor.
#pragma once

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <specdec/blocks/layers.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>

namespace specdec::io {

/// One tensor of a checkpoint: floating-point ones converted to float32, integer ones to int64.
struct tensor {
  std::string dtype;                   ///< as stored: "F32", "F16", "BF16", "I32" or "I64"
  std::vector<index_t> shape;          ///< row-major extents
  std::vector<float> values;           ///< product(shape) values (F32, F16, BF16; empty otherwise)
  std::vector<std::int64_t> integers;  ///< product(shape) values (I32, I64; empty otherwise)
  bool is_integer() const noexcept { return dtype == "I32" || dtype == "I64"; }
};

namespace detail {

/// IEEE half -> float (subnormals, infinities and NaN included).
inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu, bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}
inline float bfloat16_to_float(std::uint16_t h) { return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16); }

/// JSON as RFC 8259 defines it, parsed strictly (a safetensors header is JSON): numbers by the JSON
/// grammar, exactly `true` / `false` / `null`, strings of valid UTF-8 with no raw control character,
/// `\u` escapes with surrogate pairs combined (a lone surrogate is an error), no object with the same
/// member twice. Nesting is limited to `max_depth` levels (a header needs 3), so neither parsing nor
/// freeing the tree recurses deeper than that.
class json_reader {
 public:
  static constexpr int max_depth = 64;

  json_reader(std::string_view text, const std::string& file) : s_(text), file_(file) {}

  /// Objects keep their members in order as parallel `keys` / `items` (a vector of pairs would need
  /// the pair, and so `value`, complete inside its own definition); arrays use `items` alone.
  struct value {
    enum class kind { object, array, string, number, literal } type = kind::literal;
    std::string text;               // string contents, number or literal spelling
    std::vector<std::string> keys;  // object member names, one per entry of items
    std::vector<value> items;
  };

  value document() {
    value v = parse(1);
    skip();
    expect(i_ == s_.size(), "trailing characters after the header object");
    return v;
  }

 private:
  template <class... Parts>
  void expect(bool ok, const Parts&... what) const {
    SPECDEC_EXPECTS(ok, "specdec::io::safetensors", file_, ": malformed JSON header at byte ", i_, ": ", what...);
  }
  void skip() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t')) ++i_;
  }
  char peek() {
    skip();
    expect(i_ < s_.size(), "unexpected end");
    return s_[i_];
  }
  static std::string hex(std::uint32_t v) {
    char digits[8];
    return std::string(digits, std::to_chars(digits, digits + sizeof digits, v, 16).ptr);
  }
  static void append_utf8(std::string& out, std::uint32_t code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xc0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3f));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xe0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (code & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (code & 0x3f));
    }
  }
  /// The four hexadecimal digits of a \u escape (i_ just past the 'u').
  std::uint32_t hex4() {
    expect(i_ + 4 <= s_.size(), "short \\u escape");
    std::uint32_t code = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      const char h = s_[i_ + k];
      const int digit = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      expect(digit >= 0, "\\u escape with a non-hexadecimal digit");
      code = code * 16 + static_cast<std::uint32_t>(digit);
    }
    i_ += 4;
    return code;
  }
  /// One raw UTF-8 character starting at i_ (its first byte >= 0x80), copied to `out`: the shortest
  /// form only, no surrogate, nothing above U+10FFFF (RFC 3629).
  void utf8_character(std::string& out) {
    const auto lead = static_cast<unsigned char>(s_[i_]);
    const std::size_t size = lead >= 0xc2 && lead <= 0xdf ? 2 : lead >= 0xe0 && lead <= 0xef ? 3 : lead >= 0xf0 && lead <= 0xf4 ? 4 : 0;
    if (size == 0) expect(false, "invalid UTF-8 (byte 0x", hex(lead), ")");
    expect(i_ + size <= s_.size(), "truncated UTF-8 character");
    std::uint32_t code = lead & (0x7f >> size);
    for (std::size_t k = 1; k < size; ++k) {
      const auto next = static_cast<unsigned char>(s_[i_ + k]);
      if ((next & 0xc0) != 0x80) expect(false, "invalid UTF-8 (byte 0x", hex(next), " continues nothing)");
      code = (code << 6) | (next & 0x3f);
    }
    const std::uint32_t least = size == 3 ? 0x800 : size == 4 ? 0x10000 : 0x80;
    expect(code >= least && code <= 0x10ffff && (code < 0xd800 || code > 0xdfff), "invalid UTF-8 (an overlong form, a surrogate or "
           "a code point above U+10FFFF)");
    out.append(s_.substr(i_, size));
    i_ += size;
  }
  std::string string_literal() {
    expect(peek() == '"', "expected a string");
    ++i_;
    std::string out;
    while (true) {
      expect(i_ < s_.size(), "unterminated string");
      const auto c = static_cast<unsigned char>(s_[i_]);
      if (c >= 0x80) {
        utf8_character(out);
        continue;
      }
      if (c < 0x20) expect(false, "a raw control character (0x", hex(c), ") in a string; expected it escaped");
      ++i_;
      if (c == '"') return out;
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      expect(i_ < s_.size(), "unterminated escape");
      const char e = s_[i_++];
      switch (e) {
        case '"': case '\\': case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          std::uint32_t code = hex4();
          if (code >= 0xdc00 && code <= 0xdfff) expect(false, "a lone low surrogate \\u", hex(code));
          if (code >= 0xd800 && code <= 0xdbff) {  // a high surrogate: the low one must follow
            if (i_ + 2 > s_.size() || s_[i_] != '\\' || s_[i_ + 1] != 'u') expect(false, "a lone high surrogate \\u", hex(code));
            i_ += 2;
            const std::uint32_t low = hex4();
            if (low < 0xdc00 || low > 0xdfff)
              expect(false, "a high surrogate \\u", hex(code), " followed by \\u", hex(low), "; expected a low surrogate");
            code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
          }
          append_utf8(out, code);
          break;
        }
        default: expect(false, "unknown escape");
      }
    }
  }
  bool digit_at(std::size_t i) const { return i < s_.size() && s_[i] >= '0' && s_[i] <= '9'; }
  /// -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, kept as spelled.
  std::string number() {
    const std::size_t start = i_;
    const auto fail = [&](const char* why) {
      std::size_t end = start;
      while (end < s_.size() && std::string_view("+-.0123456789eE").find(s_[end]) != std::string_view::npos) ++end;
      i_ = start;
      expect(false, "'", s_.substr(start, std::max(end, start + 1) - start), "' is not a JSON number (", why, ")");
    };
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    if (!digit_at(i_)) fail("a digit must start it");
    if (s_[i_] == '0') {
      ++i_;
      if (digit_at(i_)) fail("a leading zero");
    } else {
      while (digit_at(i_)) ++i_;
    }
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (!digit_at(i_)) fail("a digit must follow the point");
      while (digit_at(i_)) ++i_;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (!digit_at(i_)) fail("a digit must follow the exponent");
      while (digit_at(i_)) ++i_;
    }
    if (i_ < s_.size() && std::string_view("+-.0123456789eE").find(s_[i_]) != std::string_view::npos) fail("characters after it");
    return std::string(s_.substr(start, i_ - start));
  }
  value parse(int depth) {
    value v;
    const char c = peek();
    if (c == '{' || c == '[') expect(depth <= max_depth, "nesting deeper than ", max_depth, " levels");
    if (c == '{') {
      v.type = value::kind::object;
      ++i_;
      if (peek() == '}') return ++i_, v;
      std::set<std::string, std::less<>> seen;
      while (true) {
        const std::size_t at = (skip(), i_);
        std::string key = string_literal();
        if (!seen.insert(key).second) {
          i_ = at;
          expect(false, "member '", key, "' appears twice in one object");
        }
        expect(peek() == ':', "expected ':'");
        ++i_;
        v.keys.push_back(std::move(key));
        v.items.push_back(parse(depth + 1));
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect(peek() == '}', "expected ',' or '}'");
        ++i_;
        return v;
      }
    }
    if (c == '[') {
      v.type = value::kind::array;
      ++i_;
      if (peek() == ']') return ++i_, v;
      while (true) {
        v.items.push_back(parse(depth + 1));
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect(peek() == ']', "expected ',' or ']'");
        ++i_;
        return v;
      }
    }
    if (c == '"') {
      v.type = value::kind::string;
      v.text = string_literal();
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      v.type = value::kind::number;
      v.text = number();
      return v;
    }
    for (const std::string_view literal : {"true", "false", "null"})
      if (s_.substr(i_, literal.size()) == literal) {
        i_ += literal.size();
        v.text = std::string(literal);
        return v;
      }
    expect(false, "expected a value");
    return v;
  }

  std::string_view s_;
  std::size_t i_ = 0;
  std::string file_;
};

}  // namespace detail

/// A loaded checkpoint: every tensor as host float32, by name.
class safetensors {
 public:
  /// Reads and validates a whole file. \throws invalid_argument naming the path when it is missing, not
  /// a regular file (a directory, a device, a pipe) or cannot be read, and as parse() on its contents.
  static safetensors open(const std::filesystem::path& path) {
    constexpr const char* where = "specdec::io::safetensors";
    std::string raw;
    try {
      std::error_code error;
      const auto status = std::filesystem::status(path, error);
      SPECDEC_EXPECTS(std::filesystem::exists(status), where, path.string(), ": cannot open the file (",
                      error ? error.message() : std::string("it does not exist"), ")");
      SPECDEC_EXPECTS(std::filesystem::is_regular_file(status), where, path.string(),
                      ": not a regular file (a directory, device or pipe); expected a safetensors file");
      const std::uintmax_t size = std::filesystem::file_size(path, error);
      SPECDEC_EXPECTS(!error, where, path.string(), ": cannot read the file's size (", error.message(), ")");
      std::ifstream in(path, std::ios::binary);
      SPECDEC_EXPECTS(static_cast<bool>(in), where, path.string(), ": cannot open the file");
      raw.resize(static_cast<std::size_t>(size));
      in.read(raw.data(), static_cast<std::streamsize>(raw.size()));
      SPECDEC_EXPECTS(in.gcount() == static_cast<std::streamsize>(raw.size()), where, path.string(), ": read ", in.gcount(),
                      " of its ", size, " bytes; expected the whole file");
    } catch (const specdec::invalid_argument&) {
      throw;
    } catch (const std::exception& e) {  // bad_alloc for a file larger than memory, filesystem_error
      specdec::detail::throw_invalid_argument(where, path.string(), ": cannot read the file (", e.what(), ")");
    }
    return parse(std::as_bytes(std::span<const char>(raw.data(), raw.size())), path.string());
  }

  /// The longest JSON header accepted, as the reference implementation (Hugging Face's safetensors,
  /// MAX_HEADER_SIZE): a header of that size describes millions of tensors, and a parsed header takes
  /// a multiple of its length in memory.
  static constexpr std::uint64_t max_header_bytes = 100'000'000;

  /// Parses a checkpoint held in memory (`name` is used in error messages).
  static safetensors parse(std::span<const std::byte> bytes, const std::string& name = "<memory>") {
    constexpr const char* where = "specdec::io::safetensors";
    SPECDEC_EXPECTS(bytes.size() >= 8, where, name, ": ", bytes.size(), " bytes; expected at least the 8-byte header length");
    std::uint64_t header = 0;
    for (int i = 7; i >= 0; --i) header = (header << 8) | static_cast<std::uint8_t>(bytes[static_cast<std::size_t>(i)]);
    SPECDEC_EXPECTS(header <= max_header_bytes, where, name, ": the header length is ", header, " bytes; expected at most ",
                    max_header_bytes);
    SPECDEC_EXPECTS(header <= bytes.size() - 8, where, name, ": the header claims ", header, " bytes but only ",
                    bytes.size() - 8, " follow the length");
    const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), static_cast<std::size_t>(header));
    const auto doc = detail::json_reader(text, name).document();
    SPECDEC_EXPECTS(doc.type == detail::json_reader::value::kind::object, where, name, ": the header is not a JSON object");
    const std::span<const std::byte> data = bytes.subspan(8 + static_cast<std::size_t>(header));
    safetensors out;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
    for (std::size_t m = 0; m < doc.keys.size(); ++m) {
      const std::string& tensor_name = doc.keys[m];
      const detail::json_reader::value& entry = doc.items[m];
      if (tensor_name == "__metadata__") {
        // What the reference implementation reads it as: a map of strings to strings.
        SPECDEC_EXPECTS(entry.type == detail::json_reader::value::kind::object, where, name,
                        ": __metadata__ is not a JSON object; expected string keys mapping to strings");
        for (std::size_t f = 0; f < entry.keys.size(); ++f)
          SPECDEC_EXPECTS(entry.items[f].type == detail::json_reader::value::kind::string, where, name, ": __metadata__ member '",
                          entry.keys[f], "' is not a string; expected string keys mapping to strings");
        continue;
      }
      SPECDEC_EXPECTS(entry.type == detail::json_reader::value::kind::object, where, name, ": tensor '", tensor_name,
                      "' is not a JSON object");
      const auto field = [&](const char* key, detail::json_reader::value::kind type) -> const detail::json_reader::value& {
        for (std::size_t f = 0; f < entry.keys.size(); ++f)
          if (entry.keys[f] == key) {
            SPECDEC_EXPECTS(entry.items[f].type == type, where, name, ": tensor '", tensor_name, "' has a '", key,
                            "' of the wrong JSON type");
            return entry.items[f];
          }
        specdec::detail::throw_invalid_argument(where, name, ": tensor '", tensor_name, "' has no '", key, "'");
      };
      // A non-negative JSON integer no larger than `limit`, else an error naming the tensor and field.
      const auto integer = [&](const detail::json_reader::value& v, const char* what, std::uint64_t limit) {
        std::uint64_t x = 0;
        const char* first = v.text.data();
        const char* last = first + v.text.size();
        const auto [end_of_number, error] = std::from_chars(first, last, x);
        SPECDEC_EXPECTS(v.type == detail::json_reader::value::kind::number && !v.text.empty() && v.text[0] != '-' &&
                            error == std::errc() && end_of_number == last && x <= limit,
                        where, name, ": tensor '", tensor_name, "' has ", what, " '", v.text,
                        "'; expected an integer in [0, ", limit, "]");
        return x;
      };
      using kind = detail::json_reader::value::kind;
      const std::string dtype = field("dtype", kind::string).text;
      const std::size_t width = dtype == "I64" ? 8 : (dtype == "F32" || dtype == "I32") ? 4 : (dtype == "F16" || dtype == "BF16") ? 2 : 0;
      SPECDEC_EXPECTS(width != 0, where, name, ": tensor '", tensor_name, "' has dtype ", dtype,
                      "; expected F32, F16, BF16, I32 or I64");
      tensor t{dtype, {}, {}, {}};
      // The element count is bounded by the data it must fit in, so the product is checked against
      // that bound before every multiply and can never wrap.
      const std::uint64_t max_count = data.size() / width;
      for (const auto& d : field("shape", kind::array).items)
        t.shape.push_back(static_cast<index_t>(
            integer(d, "a shape entry", static_cast<std::uint64_t>(std::numeric_limits<index_t>::max()))));
      std::uint64_t count = std::find(t.shape.begin(), t.shape.end(), index_t{0}) != t.shape.end() ? 0 : 1;
      for (const index_t extent : t.shape) {
        if (count == 0) break;
        SPECDEC_EXPECTS(count <= max_count / static_cast<std::uint64_t>(extent), where, name, ": tensor '", tensor_name,
                        "' has a shape whose element count exceeds the ", max_count, " ", dtype, " values the data can hold");
        count *= static_cast<std::uint64_t>(extent);
      }
      const auto& offsets = field("data_offsets", kind::array).items;
      SPECDEC_EXPECTS(offsets.size() == 2, where, name, ": tensor '", tensor_name, "' needs data_offsets [begin, end]");
      const std::uint64_t limit = std::numeric_limits<std::uint64_t>::max();
      const std::uint64_t begin = integer(offsets[0], "a data offset", limit), end = integer(offsets[1], "a data offset", limit);
      SPECDEC_EXPECTS(begin <= end && end <= data.size(), where, name, ": tensor '", tensor_name, "' spans bytes [", begin, ", ",
                      end, ") but the data holds ", data.size(), " bytes (truncated file?)");
      SPECDEC_EXPECTS(end - begin == count * width, where, name, ": tensor '", tensor_name, "' has ", end - begin,
                      " bytes; its shape and dtype ", dtype, " need ", count * width);
      if (begin < end) ranges.emplace_back(begin, end);  // an empty tensor overlaps nothing
      const std::byte* p = data.data() + begin;
      // Little-endian unsigned value of `bytes` bytes at p.
      const auto little = [](const std::byte* at, std::size_t bytes) {
        std::uint64_t u = 0;
        for (std::size_t k = bytes; k-- > 0;) u = (u << 8) | static_cast<std::uint8_t>(at[k]);
        return u;
      };
      if (t.is_integer()) {
        t.integers.resize(static_cast<std::size_t>(count));
        for (std::size_t i = 0; i < t.integers.size(); ++i) {
          const std::uint64_t u = little(p + width * i, width);
          t.integers[i] = width == 8 ? static_cast<std::int64_t>(u) : static_cast<std::int64_t>(static_cast<std::int32_t>(static_cast<std::uint32_t>(u)));
        }
      } else {
        t.values.resize(static_cast<std::size_t>(count));
      }
      for (std::size_t i = 0; i < t.values.size(); ++i) {
        const std::uint64_t u = little(p + width * i, width);
        t.values[i] = width == 4 ? std::bit_cast<float>(static_cast<std::uint32_t>(u))
                      : dtype == "F16" ? detail::half_to_float(static_cast<std::uint16_t>(u))
                                       : detail::bfloat16_to_float(static_cast<std::uint16_t>(u));
      }
      SPECDEC_EXPECTS(out.tensors_.emplace(tensor_name, std::move(t)).second, where, name, ": tensor '", tensor_name,
                      "' appears twice");
    }
    std::sort(ranges.begin(), ranges.end());
    for (std::size_t i = 1; i < ranges.size(); ++i)
      SPECDEC_EXPECTS(ranges[i].first >= ranges[i - 1].second, where, name, ": tensors overlap at byte ", ranges[i].first);
    return out;
  }

  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [n, t] : tensors_) out.push_back(n);
    return out;
  }
  /// \throws invalid_argument naming the tensor when it is missing.
  const tensor& at(const std::string& name) const {
    const auto it = tensors_.find(name);
    SPECDEC_EXPECTS(it != tensors_.end(), "specdec::io::safetensors", "no tensor named '", name, "' in the checkpoint");
    return it->second;
  }
  /// A 2-D floating-point tensor as a host matrix view (a 1-D tensor as one row). \throws on rank > 2
  /// or an integer tensor.
  matrix_view<const float> matrix(const std::string& name) const {
    const tensor& t = floating(name);
    SPECDEC_EXPECTS(t.shape.size() == 1 || t.shape.size() == 2, "specdec::io::safetensors", "tensor '", name, "' has rank ",
                    t.shape.size(), "; expected 1 or 2");
    const index_t rows = t.shape.size() == 2 ? t.shape[0] : 1;
    return {t.values.data(), rows, t.shape.back()};
  }
  /// A floating-point tensor's values as a host vector view. \throws on an integer tensor.
  vector_view<const float> vector(const std::string& name) const {
    const tensor& t = floating(name);
    return {t.values.data(), static_cast<index_t>(t.values.size())};
  }
  /// An integer tensor's values (I32 or I64, as int64). \throws invalid_argument naming the tensor when
  /// it is missing or floating-point.
  std::span<const std::int64_t> integers(const std::string& name) const {
    const tensor& t = at(name);
    SPECDEC_EXPECTS(t.is_integer(), "specdec::io::safetensors", "tensor '", name, "' is ", t.dtype, "; expected I32 or I64");
    return t.integers;
  }
  /// `name.weight` and, when present, `name.bias`.
  blocks::linear<host_space> linear(const std::string& name) const {
    blocks::linear<host_space> l{matrix(name + ".weight"), {}};
    if (contains(name + ".bias")) l.bias = vector(name + ".bias");
    return l;
  }
  /// Hugging Face Llama names under `prefix` (e.g. "model.layers.3."): input_layernorm,
  /// post_attention_layernorm, self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj. Validate the result
  /// against the layer's configuration with layer_weights::validate.
  blocks::layer_weights<host_space> layer(const std::string& prefix, bool input_norm = true, bool with_mlp = true) const {
    blocks::layer_weights<host_space> w;
    if (input_norm) w.input_norm = vector(prefix + "input_layernorm.weight");
    w.post_norm = vector(prefix + "post_attention_layernorm.weight");
    w.attention = {linear(prefix + "self_attn.q_proj"), linear(prefix + "self_attn.k_proj"), linear(prefix + "self_attn.v_proj"),
                   linear(prefix + "self_attn.o_proj")};
    if (with_mlp) w.mlp = {linear(prefix + "mlp.gate_proj"), linear(prefix + "mlp.up_proj"), linear(prefix + "mlp.down_proj")};
    return w;
  }

 private:
  const tensor& floating(const std::string& name) const {
    const tensor& t = at(name);
    SPECDEC_EXPECTS(!t.is_integer(), "specdec::io::safetensors", "tensor '", name, "' is ", t.dtype,
                    "; expected F32, F16 or BF16");
    return t;
  }
  std::map<std::string, tensor> tensors_;
};

}  // namespace specdec::io
