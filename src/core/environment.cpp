#include "core/environment.hpp"

#include <unistd.h>

#include <algorithm>

namespace cnnscale {

std::vector<std::string> environment_with_prefix(const std::string& prefix, const char* const* env) {
  std::vector<std::string> out;
  for (const char* const* e = env; e && *e; ++e) {
    const std::string entry(*e);
    if (entry.rfind(prefix, 0) == 0 && entry.find('=') != std::string::npos) out.push_back(entry);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> environment_with_prefix(const std::string& prefix) {
  return environment_with_prefix(prefix, environ);
}

std::string environment_line(const std::string& prefix) {
  std::string line;
  for (const std::string& e : environment_with_prefix(prefix)) line += (line.empty() ? "" : " ") + e;
  return line;
}

}  // namespace cnnscale
