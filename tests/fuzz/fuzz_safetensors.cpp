// SPDX-License-Identifier: Apache-2.0
// The safetensors reader on arbitrary bytes: it either throws specdec::invalid_argument or returns
// tensors whose values (floating-point or integer) match their shape and whose views lie inside them.
#include <cstddef>
#include <cstdint>
#include <span>

#include <specdec/io/safetensors.hpp>

#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  specdec::io::safetensors st;
  try {
    st = specdec::io::safetensors::parse(std::as_bytes(std::span<const std::uint8_t>(data, size)));
  } catch (const specdec::invalid_argument&) {
    return 0;
  }
  for (const auto& name : st.names()) {
    const auto& t = st.at(name);
    std::uint64_t count = 1;
    for (const auto d : t.shape) {
      fuzz::require(d >= 0, "negative extent", d);
      count *= static_cast<std::uint64_t>(d);
    }
    // Integer tensors (I32, I64) hold their values in `integers`, floating-point ones in `values`.
    const std::size_t held = t.is_integer() ? t.integers.size() : t.values.size();
    fuzz::require((t.is_integer() ? t.values.empty() : t.integers.empty()), "values in both forms", static_cast<long long>(held));
    fuzz::require(t.shape.empty() ? held == 1 : held == count, "values do not match the shape", static_cast<long long>(held),
                  static_cast<long long>(count));
    fuzz::require(held <= size, "more values than input bytes", static_cast<long long>(held));
    if (t.is_integer()) {
      fuzz::require(st.integers(name).size() == held, "integers view extent", static_cast<long long>(st.integers(name).size()));
      continue;
    }
    if (t.shape.size() == 1 || t.shape.size() == 2) {
      const auto m = st.matrix(name);
      fuzz::require(static_cast<std::uint64_t>(m.rows() * m.cols()) == t.values.size(), "matrix view extents",
                    m.rows(), m.cols());
    }
  }
  return 0;
}
