// RAPL powercap reader: discovers intel-rapl zones under the root, reads their counters, and sums
// package and DRAM energy over sockets with per-domain wrap handling.
#include "measure/rapl.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>

#include "measure/energy_window.hpp"

namespace cnnscale::measure {

namespace {
std::optional<std::string> read_line(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string s;
  if (!in || !std::getline(in, s)) return std::nullopt;
  return s;
}
std::optional<std::uint64_t> read_u64(const std::filesystem::path& p) {
  auto s = read_line(p);
  if (!s || s->empty()) return std::nullopt;
  try {
    std::size_t used = 0;
    unsigned long long v = std::stoull(*s, &used);
    if (used == 0) return std::nullopt;
    return static_cast<std::uint64_t>(v);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}
}  // namespace

RaplReader::RaplReader(std::filesystem::path root) : root_(std::move(root)) {
  std::error_code ec;
  std::filesystem::directory_iterator it(root_, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::string zone = it->path().filename().string();
    // "intel-rapl:" only: the intel-rapl-mmio zones duplicate the package counter on some CPUs.
    if (zone.rfind("intel-rapl:", 0) != 0) continue;
    auto name = read_line(it->path() / "name");
    if (!name) continue;
    domains_.push_back({zone, *name, read_u64(it->path() / "max_energy_range_uj")});
  }
  std::sort(domains_.begin(), domains_.end(), [](const auto& a, const auto& b) { return a.zone < b.zone; });
}

bool RaplReader::available() const {
  for (const auto& d : domains_)
    if (d.is_package() && read_u64(root_ / d.zone / "energy_uj")) return true;
  return false;
}

RaplSnapshot RaplReader::read() const {
  RaplSnapshot s;
  for (const auto& d : domains_) s.energy_uj.push_back(read_u64(root_ / d.zone / "energy_uj"));
  return s;
}

RaplEnergy RaplReader::difference(const RaplSnapshot& begin, const RaplSnapshot& end) const {
  RaplEnergy e;
  bool pkg_ok = true, dram_ok = true;
  int n_pkg = 0, n_dram = 0;
  double pkg = 0, dram = 0;
  for (std::size_t i = 0; i < domains_.size(); ++i) {
    const auto& d = domains_[i];
    if (!d.is_package() && !d.is_dram()) continue;
    std::optional<std::uint64_t> b = i < begin.energy_uj.size() ? begin.energy_uj[i] : std::nullopt;
    std::optional<std::uint64_t> a = i < end.energy_uj.size() ? end.energy_uj[i] : std::nullopt;
    auto diff = rapl_counter_difference(b, a, d.max_range_uj);
    if (d.is_package()) {
      ++n_pkg;
      if (diff.joules)
        pkg += *diff.joules;
      else
        pkg_ok = false;
    } else {
      ++n_dram;
      if (diff.joules)
        dram += *diff.joules;
      else
        dram_ok = false;
    }
  }
  if (n_pkg > 0 && pkg_ok) e.package_j = pkg;
  if (n_dram > 0 && dram_ok) e.dram_j = dram;
  e.method = (e.package_j || e.dram_j) ? fmt::format(
                                             "RAPL powercap energy_uj difference ({} package, {} dram domains, wrap at "
                                             "max_energy_range_uj)",
                                             n_pkg, n_dram)
                                       : "RAPL not readable (no powercap intel-rapl zones or energy_uj not permitted)";
  return e;
}

}  // namespace cnnscale::measure
