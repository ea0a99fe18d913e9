// CPU package and DRAM energy from Linux RAPL (powercap sysfs: intel-rapl:N/energy_uj, wrapping at
// max_energy_range_uj). The root directory is a constructor argument so tests use a fake tree;
// unreadable counters (energy_uj is root-only on current kernels) give null, never an error.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace cnnscale::measure {

struct RaplDomain {
  std::string zone;  // directory name, e.g. "intel-rapl:0" or "intel-rapl:0:1"
  std::string name;  // contents of `name`: "package-0", "dram", "core", ...
  std::optional<std::uint64_t> max_range_uj;
  bool is_package() const { return name.rfind("package", 0) == 0; }
  bool is_dram() const { return name == "dram"; }
};

struct RaplSnapshot {
  std::vector<std::optional<std::uint64_t>> energy_uj;  // one per domain, same order as domains()
};

struct RaplEnergy {
  std::optional<double> package_j;  // summed over sockets; null if any package was unreadable
  std::optional<double> dram_j;     // null if no DRAM domain or any unreadable
  std::string method;
};

class RaplReader {
 public:
  explicit RaplReader(std::filesystem::path root = "/sys/class/powercap");
  const std::vector<RaplDomain>& domains() const { return domains_; }
  // True when at least one package counter can be read.
  bool available() const;
  RaplSnapshot read() const;
  // Joules between two snapshots, one wrap per domain allowed (see rapl_counter_difference).
  RaplEnergy difference(const RaplSnapshot& begin, const RaplSnapshot& end) const;

 private:
  std::filesystem::path root_;
  std::vector<RaplDomain> domains_;
};

}  // namespace cnnscale::measure
