// SPDX-License-Identifier: Apache-2.0
// The safetensors reader on arbitrary bytes: it either throws specdec::invalid_argument or returns
// tensors whose values match their shape and whose views lie inside them.
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
    fuzz::require(t.shape.empty() ? t.values.size() == 1 : t.values.size() == count, "values do not match the shape",
                  static_cast<long long>(t.values.size()), static_cast<long long>(count));
    fuzz::require(t.values.size() <= size, "more values than input bytes", static_cast<long long>(t.values.size()));
    if (t.shape.size() == 1 || t.shape.size() == 2) {
      const auto m = st.matrix(name);
      fuzz::require(static_cast<std::uint64_t>(m.rows() * m.cols()) == t.values.size(), "matrix view extents",
                    m.rows(), m.cols());
    }
  }
  return 0;
}
