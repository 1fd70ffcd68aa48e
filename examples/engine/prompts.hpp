// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Prompt files, as the examples read them: one prompt per line, a JSON string ("..." with JSON
/// escapes, \uXXXX with surrogate pairs beyond the basic plane) or, when the line does not start with
/// a quote, the line as it is; and the JSON form of a text, as the examples print their outputs.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace engine {

namespace detail {
inline std::string where(const std::string& path, std::size_t line) { return path + ":" + std::to_string(line) + ": "; }
/// The code unit of the four hexadecimal digits at line[at]: exactly four, no sign, no space.
inline std::uint32_t hex4(const std::string& line, std::size_t at, const std::string& path, std::size_t number) {
  std::uint32_t cp = 0;
  const char* first = line.data() + std::min(at, line.size());
  const char* last = line.data() + std::min(at + 4, line.size());
  const auto [end, error] = std::from_chars(first, last, cp, 16);
  if (last - first != 4 || error != std::errc() || end != last)
    throw std::runtime_error(where(path, number) + "\\u" + std::string(first, last) + " is not four hexadecimal digits");
  return cp;
}
}  // namespace detail

/// The prompts of `path` (empty lines skipped). \throws std::runtime_error when it cannot be read
/// (a directory, a device or a pipe included) or a \u escape is not four hexadecimal digits (a
/// surrogate pair is one character, a lone surrogate an error).
inline std::vector<std::string> read_prompts(const std::string& path) {
  using detail::hex4;
  using detail::where;
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) throw std::runtime_error("cannot read " + path + ": not a regular file");
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<std::string> prompts;
  std::size_t number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (line.empty()) continue;
    if (line.front() != '"') {
      prompts.push_back(line);
      continue;
    }
    std::string text;
    for (std::size_t i = 1; i < line.size() && line[i] != '"'; ++i) {
      if (line[i] != '\\' || i + 1 >= line.size()) {
        text += line[i];
        continue;
      }
      const char e = line[++i];
      if (e == 'n') text += '\n';
      else if (e == 't') text += '\t';
      else if (e == 'r') text += '\r';
      else if (e == 'u') {
        std::uint32_t cp = hex4(line, i + 1, path, number);
        i += 4;
        if (cp >= 0xDC00 && cp <= 0xDFFF) throw std::runtime_error(where(path, number) + "a lone low surrogate \\u" + line.substr(i - 3, 4));
        if (cp >= 0xD800 && cp <= 0xDBFF) {  // a high surrogate: its low half must follow
          if (line.compare(i + 1, 2, "\\u") != 0)
            throw std::runtime_error(where(path, number) + "a lone high surrogate \\u" + line.substr(i - 3, 4));
          const std::uint32_t low = hex4(line, i + 3, path, number);
          if (low < 0xDC00 || low > 0xDFFF)
            throw std::runtime_error(where(path, number) + "\\u" + line.substr(i - 3, 4) + " is not followed by a low surrogate");
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          i += 6;
        }
        if (cp < 0x80) text += static_cast<char>(cp);
        else if (cp < 0x800) text += {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
        else if (cp < 0x10000)
          text += {static_cast<char>(0xE0 | (cp >> 12)), static_cast<char>(0x80 | ((cp >> 6) & 0x3F)), static_cast<char>(0x80 | (cp & 0x3F))};
        else
          text += {static_cast<char>(0xF0 | (cp >> 18)), static_cast<char>(0x80 | ((cp >> 12) & 0x3F)),
                   static_cast<char>(0x80 | ((cp >> 6) & 0x3F)), static_cast<char>(0x80 | (cp & 0x3F))};
      } else text += e;  // \" \\ \/
    }
    prompts.push_back(text);
  }
  if (in.bad()) throw std::runtime_error("cannot read " + path);
  return prompts;
}

/// `text` as a JSON string (the form --prompts reads, and what the TEXT and CHAT lines print).
inline std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') out += {'\\', c};
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (static_cast<unsigned char>(c) < 0x20) {
      char code[8];
      std::snprintf(code, sizeof code, "\\u%04x", static_cast<unsigned>(c));
      out += code;
    } else out += c;
  }
  return out + '"';
}

}  // namespace engine
