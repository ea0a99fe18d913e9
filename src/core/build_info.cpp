// The version half of build_info.hpp; cnnscale_git_describe() is generated (cmake/GitDescribe.cmake).
#include "core/build_info.hpp"

namespace cnnscale {

std::string_view cnnscale_version() { return CNNSCALE_VERSION; }

std::string cnnscale_version_line() {
  std::string line(cnnscale_version());
  if (!cnnscale_git_describe().empty()) line += " (git " + std::string(cnnscale_git_describe()) + ")";
  return line;
}

}  // namespace cnnscale
