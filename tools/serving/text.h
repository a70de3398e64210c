// tools/serving/text.h — small text helpers shared by the engine and the command.
#pragma once

#include <string>
#include <vector>

namespace lattn::serving {

// "a, b, c" for separator ", ".
inline std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i) s += (i ? separator : "") + items[i];
  return s;
}

}  // namespace lattn::serving
