// What the running cnnscale was built from: the project's version (CMakeLists.txt's project()) and
// the source's git description, looked up at build time (cmake/GitDescribe.cmake).
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace cnnscale {

// "0.1.0": CMake's PROJECT_VERSION.
std::string_view cnnscale_version();
// `git describe --always --dirty --tags` of the source at the last build ("e782645",
// "v0.1.0-3-ge782645-dirty"); "" when it was built outside a git checkout (a release tarball).
std::string_view cnnscale_git_describe();
// The version as `cnnscale --version` prints it: "0.1.0 (git e782645-dirty)", or "0.1.0".
std::string cnnscale_version_line();

}  // namespace cnnscale
