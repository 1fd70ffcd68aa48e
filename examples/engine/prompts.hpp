// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Prompt files, as the examples read them: one prompt per line, a JSON string ("..." with JSON
/// escapes, \uXXXX in the basic plane) or, when the line does not start with a quote, the line as it
/// is; and the JSON form of a text, as the examples print their outputs.
#pragma once

#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace engine {

/// The prompts of `path` (empty lines skipped). \throws std::runtime_error when it cannot be read.
inline std::vector<std::string> read_prompts(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<std::string> prompts;
  for (std::string line; std::getline(in, line);) {
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
      else if (e == 'u' && i + 4 < line.size()) {
        const auto cp = static_cast<unsigned>(std::stoul(line.substr(i + 1, 4), nullptr, 16));
        i += 4;
        if (cp < 0x80) text += static_cast<char>(cp);
        else if (cp < 0x800) text += {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
        else text += {static_cast<char>(0xE0 | (cp >> 12)), static_cast<char>(0x80 | ((cp >> 6) & 0x3F)), static_cast<char>(0x80 | (cp & 0x3F))};
      } else text += e;  // \" \\ \/
    }
    prompts.push_back(text);
  }
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
