// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief A GGUF (v2 / v3) reader for the example engine: metadata, tensor directory, and tensors
/// dequantised to float at load (F32, F16, Q8_0, Q4_0, Q4_1). Every offset and size is checked
/// against the file, so a truncated or malformed file fails with a message naming what was wrong,
/// never reads out of bounds. Also a small writer, used by the tests to build files of their own.
///
/// Layout (little-endian): "GGUF", u32 version, u64 tensor count, u64 metadata count; metadata as
/// (string key, u32 type, value); tensor infos as (string name, u32 n_dims, u64 ne[n_dims], u32 ggml
/// type, u64 offset into the data section); the data section starts at the next multiple of
/// `general.alignment` (default 32). ne[0] is the contiguous extent: a 2-D tensor is row-major
/// [ne[1] x ne[0]], which for a weight is [out_features x in_features].
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include <specdec/io/safetensors.hpp>  // half_to_float

namespace engine {

struct gguf_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// ggml tensor types the reader dequantises (values as in ggml.h).
enum class ggml_type : std::uint32_t { f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q8_0 = 8 };

/// Bytes per block and values per block of a type. \throws gguf_error for types it does not read.
inline std::pair<std::size_t, std::size_t> block_layout(std::uint32_t type, const std::string& tensor) {
  switch (static_cast<ggml_type>(type)) {
    case ggml_type::f32: return {4, 1};
    case ggml_type::f16: return {2, 1};
    case ggml_type::q4_0: return {18, 32};  // f16 scale, 16 bytes of nibbles
    case ggml_type::q4_1: return {20, 32};  // f16 scale, f16 minimum, 16 bytes of nibbles
    case ggml_type::q8_0: return {34, 32};  // f16 scale, 32 int8
  }
  throw gguf_error("GGUF tensor '" + tensor + "' has ggml type " + std::to_string(type) +
                   "; this reader handles F32 (0), F16 (1), Q4_0 (2), Q4_1 (3) and Q8_0 (8)");
}

/// Dequantises `count` values of `type` from `src` (count a multiple of the block size). The nibble
/// order is ggml's: byte j of a Q4 block holds value j in its low nibble and value j + 16 in its high.
inline void dequantize(std::uint32_t type, const unsigned char* src, std::size_t count, float* out) {
  const auto half = [](const unsigned char* p) {
    std::uint16_t h;
    std::memcpy(&h, p, 2);
    return specdec::io::detail::half_to_float(h);
  };
  switch (static_cast<ggml_type>(type)) {
    case ggml_type::f32: std::memcpy(out, src, count * 4); return;
    case ggml_type::f16:
      for (std::size_t i = 0; i < count; ++i) out[i] = half(src + 2 * i);
      return;
    case ggml_type::q8_0:
      for (std::size_t b = 0; b < count / 32; ++b, src += 34) {
        const float d = half(src);
        for (int j = 0; j < 32; ++j) *out++ = d * static_cast<float>(static_cast<std::int8_t>(src[2 + j]));
      }
      return;
    case ggml_type::q4_0:
    case ggml_type::q4_1: {
      const bool has_min = static_cast<ggml_type>(type) == ggml_type::q4_1;
      const std::size_t block = has_min ? 20 : 18;
      for (std::size_t b = 0; b < count / 32; ++b, src += block, out += 32) {
        const float d = half(src), m = has_min ? half(src + 2) : 0.0f;
        const unsigned char* q = src + (has_min ? 4 : 2);
        for (int j = 0; j < 16; ++j) {
          const int lo = q[j] & 0x0f, hi = q[j] >> 4;
          out[j] = has_min ? static_cast<float>(lo) * d + m : static_cast<float>(lo - 8) * d;
          out[j + 16] = has_min ? static_cast<float>(hi) * d + m : static_cast<float>(hi - 8) * d;
        }
      }
      return;
    }
  }
}

/// A metadata value: integers (and bools) widen to int64, floats to double; arrays keep their kind.
using gguf_value = std::variant<std::int64_t, double, std::string, std::vector<std::int64_t>, std::vector<double>,
                                std::vector<std::string>>;

struct gguf_tensor_info {
  std::string name;
  std::vector<std::uint64_t> dims;  ///< ne: dims[0] contiguous
  std::uint32_t type = 0;
  std::uint64_t offset = 0;  ///< from the start of the data section
  std::size_t bytes = 0;
  std::size_t count = 0;  ///< product of dims, checked against the file when read
  std::size_t values() const { return count; }
};

/// A GGUF file read into memory.
class gguf_file {
 public:
  /// Reads and validates `path`. \throws gguf_error naming the file and the problem: not GGUF, an
  /// unsupported version, truncation anywhere, an unknown metadata type, a tensor of an unsupported
  /// type, a tensor whose data lies outside the file or whose extent is not a whole number of blocks.
  /// A directory, device or pipe is refused before reading (a directory's stream throws
  /// std::ios_base::failure, /dev/zero never ends).
  static gguf_file read(const std::string& path) {
    std::vector<unsigned char> bytes;
    try {
      std::error_code error;
      const auto status = std::filesystem::status(path, error);
      if (!std::filesystem::exists(status)) throw gguf_error("cannot open GGUF file '" + path + "': it does not exist");
      if (!std::filesystem::is_regular_file(status))
        throw gguf_error("cannot read GGUF file '" + path + "': not a regular file (a directory, device or pipe)");
      const std::uintmax_t size = std::filesystem::file_size(path, error);
      if (error) throw gguf_error("cannot read GGUF file '" + path + "': " + error.message());
      std::ifstream in(path, std::ios::binary);
      if (!in) throw gguf_error("cannot open GGUF file '" + path + "'");
      bytes.resize(static_cast<std::size_t>(size));
      in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
      if (in.gcount() != static_cast<std::streamsize>(bytes.size()))
        throw gguf_error("cannot read GGUF file '" + path + "': read " + std::to_string(in.gcount()) + " of its " +
                         std::to_string(size) + " bytes");
    } catch (const gguf_error&) {
      throw;
    } catch (const std::exception& e) {  // bad_alloc for a file larger than memory, filesystem_error
      throw gguf_error("cannot read GGUF file '" + path + "': " + e.what());
    }
    return parse(std::move(bytes), path);
  }
  static gguf_file parse(std::vector<unsigned char> bytes, const std::string& name = "<memory>") {
    gguf_file f;
    f.name_ = name;
    f.bytes_ = std::move(bytes);
    f.parse_header();
    return f;
  }

  const std::map<std::string, gguf_value>& metadata() const noexcept { return metadata_; }
  const std::map<std::string, gguf_tensor_info>& tensors() const noexcept { return tensors_; }
  bool has_tensor(const std::string& name) const { return tensors_.count(name) != 0; }

  /// A metadata value of type T (std::int64_t, double, std::string or a vector of those).
  /// \throws gguf_error when the key is missing or holds another kind.
  template <class T>
  const T& get(const std::string& key) const {
    const auto it = metadata_.find(key);
    if (it == metadata_.end()) throw gguf_error(name_ + ": metadata key '" + key + "' is missing");
    if (const T* v = std::get_if<T>(&it->second)) return *v;
    throw gguf_error(name_ + ": metadata key '" + key + "' has an unexpected type");
  }
  template <class T>
  T get_or(const std::string& key, T fallback) const {
    return metadata_.count(key) ? get<T>(key) : fallback;
  }

  /// The tensor dequantised to float, row-major with dims[0] contiguous.
  /// \throws gguf_error when it is missing or not of `expected_dims` (when given, ne order).
  std::vector<float> load(const std::string& tensor, const std::vector<std::uint64_t>& expected_dims = {}) const {
    const auto it = tensors_.find(tensor);
    if (it == tensors_.end()) throw gguf_error(name_ + ": tensor '" + tensor + "' is missing");
    const auto& t = it->second;
    if (!expected_dims.empty() && t.dims != expected_dims) {
      std::string got, want;
      for (auto d : t.dims) got += (got.empty() ? "" : ", ") + std::to_string(d);
      for (auto d : expected_dims) want += (want.empty() ? "" : ", ") + std::to_string(d);
      throw gguf_error(name_ + ": tensor '" + tensor + "' has ne [" + got + "]; expected [" + want + "]");
    }
    std::vector<float> out(t.values());
    dequantize(t.type, bytes_.data() + data_start_ + t.offset, out.size(), out.data());
    return out;
  }

 private:
  // ---- bounds-checked cursor ----
  void need(std::size_t n, const char* what) const {
    if (pos_ + n > bytes_.size() || pos_ + n < pos_)
      throw gguf_error(name_ + ": truncated while reading " + what + " at byte " + std::to_string(pos_) + " (file has " +
                       std::to_string(bytes_.size()) + " bytes)");
  }
  template <class T>
  T scalar(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string string(const char* what) {
    const auto n = scalar<std::uint64_t>(what);
    if (n > bytes_.size()) throw gguf_error(name_ + ": " + what + " claims " + std::to_string(n) + " bytes, more than the file");
    need(static_cast<std::size_t>(n), what);
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return s;
  }
  // Metadata value types of the GGUF spec.
  enum : std::uint32_t { u8, i8, u16, i16, u32, i32, f32, boolean, str, array, u64, i64, f64 };
  std::int64_t integer(std::uint32_t type, const char* what) {
    switch (type) {
      case u8: return scalar<std::uint8_t>(what);
      case i8: return scalar<std::int8_t>(what);
      case u16: return scalar<std::uint16_t>(what);
      case i16: return scalar<std::int16_t>(what);
      case u32: return scalar<std::uint32_t>(what);
      case i32: return scalar<std::int32_t>(what);
      case u64: return static_cast<std::int64_t>(scalar<std::uint64_t>(what));
      case i64: return scalar<std::int64_t>(what);
      case boolean: return scalar<std::uint8_t>(what) != 0;
      default: throw gguf_error(name_ + ": unknown metadata type " + std::to_string(type) + " in " + what);
    }
  }
  gguf_value value(std::uint32_t type, const std::string& key) {
    const char* what = "a metadata value";
    if (type == f32) return static_cast<double>(scalar<float>(what));
    if (type == f64) return scalar<double>(what);
    if (type == str) return string(what);
    if (type != array) return integer(type, what);
    const auto elem = scalar<std::uint32_t>(what);
    const auto n = scalar<std::uint64_t>(what);
    // Every element takes at least one byte (a string at least its 8-byte length), so a count beyond
    // what is left of the file is malformed; checked before anything is reserved.
    const std::size_t min_bytes = elem == str ? 8 : 1;
    if (n > (bytes_.size() - pos_) / min_bytes)
      throw gguf_error(name_ + ": array '" + key + "' claims " + std::to_string(n) + " elements, more than the file holds");
    if (elem == str) {
      std::vector<std::string> v;
      v.reserve(static_cast<std::size_t>(n));
      for (std::uint64_t i = 0; i < n; ++i) v.push_back(string(what));
      return v;
    }
    if (elem == f32 || elem == f64) {
      std::vector<double> v;
      for (std::uint64_t i = 0; i < n; ++i) v.push_back(elem == f32 ? scalar<float>(what) : scalar<double>(what));
      return v;
    }
    if (elem == array) throw gguf_error(name_ + ": nested arrays in '" + key + "' are not supported");
    std::vector<std::int64_t> v;
    v.reserve(static_cast<std::size_t>(n));
    for (std::uint64_t i = 0; i < n; ++i) v.push_back(integer(elem, what));
    return v;
  }

  void parse_header() {
    need(4, "the magic");
    if (std::memcmp(bytes_.data(), "GGUF", 4) != 0) throw gguf_error(name_ + ": not a GGUF file (magic is not 'GGUF')");
    pos_ = 4;
    const auto version = scalar<std::uint32_t>("the version");
    if (version != 2 && version != 3)
      throw gguf_error(name_ + ": GGUF version " + std::to_string(version) + "; expected 2 or 3");
    const auto tensor_count = scalar<std::uint64_t>("the tensor count");
    const auto kv_count = scalar<std::uint64_t>("the metadata count");
    if (tensor_count > bytes_.size() || kv_count > bytes_.size())
      throw gguf_error(name_ + ": header claims " + std::to_string(tensor_count) + " tensors and " + std::to_string(kv_count) +
                       " metadata entries, more than the file can hold");
    for (std::uint64_t i = 0; i < kv_count; ++i) {
      auto key = string("a metadata key");
      const auto type = scalar<std::uint32_t>("a metadata type");
      auto v = value(type, key);
      if (!metadata_.emplace(key, std::move(v)).second) throw gguf_error(name_ + ": metadata key '" + key + "' appears twice");
    }
    std::vector<gguf_tensor_info> infos;
    for (std::uint64_t i = 0; i < tensor_count; ++i) {
      gguf_tensor_info t;
      t.name = string("a tensor name");
      const auto n_dims = scalar<std::uint32_t>("a tensor's rank");
      if (n_dims == 0 || n_dims > 4) throw gguf_error(name_ + ": tensor '" + t.name + "' has rank " + std::to_string(n_dims) + "; expected 1 to 4");
      for (std::uint32_t d = 0; d < n_dims; ++d) {
        t.dims.push_back(scalar<std::uint64_t>("a tensor's extent"));
        if (t.dims.back() == 0 || t.dims.back() > (std::uint64_t(1) << 40))
          throw gguf_error(name_ + ": tensor '" + t.name + "' has extent " + std::to_string(t.dims.back()));
      }
      t.type = scalar<std::uint32_t>("a tensor's type");
      t.offset = scalar<std::uint64_t>("a tensor's offset");
      const auto [block_bytes, block_values] = block_layout(t.type, t.name);
      if (t.dims[0] % block_values != 0)
        throw gguf_error(name_ + ": tensor '" + t.name + "' has rows of " + std::to_string(t.dims[0]) +
                         " values, not a multiple of its block of " + std::to_string(block_values));
      // A tensor's bytes must lie in the file, so it has at most file-size / bytes-per-block blocks;
      // bounding the block count by that before each multiply means the product never wraps.
      const std::uint64_t max_blocks = bytes_.size() / block_bytes;
      std::uint64_t blocks = 1;
      for (std::size_t d = 0; d < t.dims.size(); ++d) {
        const std::uint64_t factor = d == 0 ? t.dims[0] / block_values : t.dims[d];
        if (factor > max_blocks / blocks)  // blocks >= 1: every extent is positive
          throw gguf_error(name_ + ": tensor '" + t.name + "' has more values than the file can hold (" +
                           std::to_string(bytes_.size()) + " bytes)");
        blocks *= factor;
      }
      t.count = static_cast<std::size_t>(blocks * block_values);
      t.bytes = static_cast<std::size_t>(blocks * block_bytes);
      infos.push_back(std::move(t));
    }
    const std::int64_t alignment_value = get_or<std::int64_t>("general.alignment", 32);
    if (alignment_value <= 0 || alignment_value > (std::int64_t(1) << 30) || (alignment_value & (alignment_value - 1)) != 0)
      throw gguf_error(name_ + ": general.alignment = " + std::to_string(alignment_value) + "; expected a power of two up to 2^30");
    const auto alignment = static_cast<std::size_t>(alignment_value);
    data_start_ = (pos_ + alignment - 1) / alignment * alignment;
    for (auto& t : infos) {
      if (t.offset % alignment != 0)
        throw gguf_error(name_ + ": tensor '" + t.name + "' starts at offset " + std::to_string(t.offset) +
                         ", not a multiple of the alignment " + std::to_string(alignment));
      // Compared by subtraction from the file size, so no sum can wrap.
      if (data_start_ > bytes_.size() || t.offset > bytes_.size() - data_start_ ||
          t.bytes > bytes_.size() - data_start_ - t.offset)
        throw gguf_error(name_ + ": tensor '" + t.name + "' needs bytes [" + std::to_string(data_start_ + t.offset) + ", " +
                         std::to_string(data_start_ + t.offset + t.bytes) + ") but the file has " +
                         std::to_string(bytes_.size()) + " (truncated?)");
      const std::string key = t.name;
      if (!tensors_.emplace(key, std::move(t)).second) throw gguf_error(name_ + ": tensor '" + key + "' appears twice");
    }
  }

  std::string name_;
  std::vector<unsigned char> bytes_;
  std::size_t pos_ = 0, data_start_ = 0;
  std::map<std::string, gguf_value> metadata_;
  std::map<std::string, gguf_tensor_info> tensors_;
};

/// Builds GGUF v3 files in memory (tests, and tiny models for the examples' tests).
class gguf_writer {
 public:
  void add(const std::string& key, std::uint32_t v) { kv(key, 4, le(v)); }
  void add(const std::string& key, float v) { kv(key, 6, le(v)); }
  void add(const std::string& key, bool v) { kv(key, 7, {static_cast<unsigned char>(v)}); }
  void add(const std::string& key, const std::string& v) { kv(key, 8, str(v)); }
  void add(const std::string& key, const std::vector<std::string>& v) {
    auto b = le(std::uint32_t{8});
    append(b, le(static_cast<std::uint64_t>(v.size())));
    for (const auto& s : v) append(b, str(s));
    kv(key, 9, b);
  }
  void add(const std::string& key, const std::vector<std::int32_t>& v) {
    auto b = le(std::uint32_t{5});
    append(b, le(static_cast<std::uint64_t>(v.size())));
    for (auto x : v) append(b, le(x));
    kv(key, 9, b);
  }
  /// A tensor of ne `dims` whose encoded bytes (in `type`) are `data`.
  void add_tensor(const std::string& name, const std::vector<std::uint64_t>& dims, ggml_type type, std::vector<unsigned char> data) {
    tensors_.push_back({name, dims, type, std::move(data)});
  }
  void add_tensor(const std::string& name, const std::vector<std::uint64_t>& dims, const std::vector<float>& values) {
    std::vector<unsigned char> b(values.size() * 4);
    std::memcpy(b.data(), values.data(), b.size());
    add_tensor(name, dims, ggml_type::f32, std::move(b));
  }
  std::vector<unsigned char> bytes() const {
    std::vector<unsigned char> out = {'G', 'G', 'U', 'F'};
    append(out, le(std::uint32_t{3}));
    append(out, le(static_cast<std::uint64_t>(tensors_.size())));
    append(out, le(static_cast<std::uint64_t>(kv_count_)));
    append(out, kv_);
    std::uint64_t offset = 0;
    std::vector<std::uint64_t> offsets;
    for (const auto& t : tensors_) {
      append(out, str(t.name));
      append(out, le(static_cast<std::uint32_t>(t.dims.size())));
      for (auto d : t.dims) append(out, le(d));
      append(out, le(static_cast<std::uint32_t>(t.type)));
      append(out, le(offset));
      offsets.push_back(offset);
      offset += (t.data.size() + 31) / 32 * 32;
    }
    out.resize((out.size() + 31) / 32 * 32, 0);
    const std::size_t start = out.size();
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      out.resize(start + offsets[i], 0);
      append(out, tensors_[i].data);
    }
    return out;
  }
  void write(const std::string& path) const {
    const auto b = bytes();
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }

 private:
  struct tensor {
    std::string name;
    std::vector<std::uint64_t> dims;
    ggml_type type;
    std::vector<unsigned char> data;
  };
  template <class T>
  static std::vector<unsigned char> le(T v) {
    std::vector<unsigned char> b(sizeof(T));
    std::memcpy(b.data(), &v, sizeof(T));
    return b;
  }
  static std::vector<unsigned char> str(const std::string& s) {
    // Sized once and copied: g++ 12 reports a false -Warray-bounds on inserting into the 8-byte vector.
    std::vector<unsigned char> b(8 + s.size());
    const auto n = static_cast<std::uint64_t>(s.size());
    std::memcpy(b.data(), &n, 8);
    if (!s.empty()) std::memcpy(b.data() + 8, s.data(), s.size());
    return b;
  }
  static void append(std::vector<unsigned char>& to, const std::vector<unsigned char>& from) { to.insert(to.end(), from.begin(), from.end()); }
  void kv(const std::string& key, std::uint32_t type, const std::vector<unsigned char>& value) {
    append(kv_, str(key));
    append(kv_, le(type));
    append(kv_, value);
    ++kv_count_;
  }
  std::vector<unsigned char> kv_;
  std::size_t kv_count_ = 0;
  std::vector<tensor> tensors_;
};

}  // namespace engine
