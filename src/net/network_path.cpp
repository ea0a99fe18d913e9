// Network name -> file: lets `cnnscale netinfo caffenet` and `cnnscale train --net resnet34` find
// networks/<name>.yaml from the working directory or the source tree the binary was built from.
#include <filesystem>

#include "net/net.hpp"

namespace cnnscale {

std::string resolve_network_path(const std::string& name_or_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(name_or_path, ec)) return name_or_path;
  std::vector<fs::path> tried{name_or_path};
  // Only a bare name (no directory, no extension) is looked up under networks/.
  fs::path p(name_or_path);
  const bool bare = !name_or_path.empty() && !p.has_parent_path() && !p.has_extension();
  // Any other path that exists (a FIFO, a device, a directory) is what was meant: NetSpec::load
  // says what it is, rather than that nothing was found.
  if (!bare && fs::exists(name_or_path, ec)) return name_or_path;
  if (bare) {
    std::vector<fs::path> roots{fs::path(".")};
#ifdef CNNSCALE_SOURCE_DIR
    roots.emplace_back(CNNSCALE_SOURCE_DIR);
#endif
    for (const auto& root : roots) {
      fs::path candidate = root / "networks" / (name_or_path + ".yaml");
      if (fs::is_regular_file(candidate, ec)) return candidate.lexically_normal().string();
      tried.push_back(candidate);
    }
  }
  std::string list;
  for (const auto& t : tried) list += (list.empty() ? "" : ", ") + t.string();
  throw_config("network '{}' not found (tried {})", name_or_path, list);
}

}  // namespace cnnscale
