// Python's repr of strings and lists of strings, so reason lists print as the
// seeds print them (f"Reason: {invalid_reasons}" → "Reason: ['a', 'b']").
#include <cstdio>

#include "lattn/selector.h"

namespace lattn {
namespace {

// str.__repr__: single quotes unless the text contains a single quote and no
// double quote; backslash, the chosen quote, \t \n \r and other control bytes
// escaped. Bytes >= 0x80 (UTF-8) are kept: Python keeps printable non-ASCII.
std::string python_str_repr(const std::string& text) {
  const bool has_single = text.find('\'') != std::string::npos;
  const bool has_double = text.find('"') != std::string::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == quote) {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  out += quote;
  return out;
}

}  // namespace

std::string python_list_repr(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += python_str_repr(items[i]);
  }
  return out + "]";
}

}  // namespace lattn
