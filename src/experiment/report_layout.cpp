// The parts every report table shares (see report_layout.hpp): leading columns, per-run figures
// averaged per group, and the notes under an all-null table.
#include "experiment/report_layout.hpp"

#include <algorithm>
#include <cmath>

namespace cnnscale::report {

Stat stat_by(const ConfigGroup& g, const RunFigure& f) {
  std::vector<double> values;
  for (const RunRecord* r : g.runs) values.push_back(f(*r));
  return stat_of(values);
}

RunFigure scaled(NumberFigure RunSummary::*figure, double scale) {
  return [figure, scale](const RunRecord& r) { return r.number(figure) * scale; };
}

bool any_threads(const std::vector<ConfigGroup>& groups) {
  return std::any_of(groups.begin(), groups.end(),
                     [](const ConfigGroup& g) { return !g.key.at("threads_per_rank").empty(); });
}

Table Layout::start(std::string name, std::string title, std::string caption) const {
  Table t{std::move(name), std::move(title), std::move(caption), {}, {}, {}};
  t.columns = {{"network", "net", false}, {noun.many, "gpus", false}};
  if (threads) t.columns.push_back({"threads/rank", "threads_per_rank", false});
  t.columns.push_back({"batch", "batch", false});
  if (any_varying(varying)) t.columns.push_back({"variant", "variant", false});
  t.columns.push_back({"runs", "runs", false});
  return t;
}

std::vector<Cell> Layout::row(const ConfigGroup& g) const {
  std::vector<Cell> cells = {Cell::of(g.net()), Cell::of(g.key.at("world_size"))};
  if (threads) cells.push_back(Cell::of(g.key.at("threads_per_rank")));
  cells.push_back(Cell::of(g.key.at("global_batch")));
  if (any_varying(varying)) cells.push_back(Cell::of(variant_label(g, varying)));
  cells.push_back(Cell::of(std::to_string(g.runs.size())));
  return cells;
}

Column seconds(std::string header, std::string csv, double si) {
  return {std::move(header), std::move(csv), true, false, Quantity::Seconds, si};
}
Column joules(std::string header, std::string csv, double si) {
  return {std::move(header), std::move(csv), true, false, Quantity::Joules, si};
}

bool any_value(const std::vector<ConfigGroup>& groups, NumberFigure RunSummary::*figure) {
  for (const ConfigGroup& g : groups)
    if (!g.stat(figure).null()) return true;
  return false;
}

bool all_cpu(const std::vector<ConfigGroup>& groups) {
  for (const ConfigGroup& g : groups)
    if (g.key.at("device") != "cpu") return false;
  return true;
}

void note_if_all_null(Table& t, const std::vector<ConfigGroup>& groups, const std::string& method_key,
                      const std::string& fallback) {
  if (!t.all_null()) return;
  std::string why = fallback;
  for (const ConfigGroup& g : groups) {
    const std::string m = g.method(method_key);
    // The measuring code writes "unavailable: why" or "...; null: why" next to a null figure.
    if (m.find("unavailable") != std::string::npos || m.find("null:") != std::string::npos) {
      why = fallback + " (" + method_key + ": " + m + ")";
      break;
    }
  }
  t.notes.push_back("Every value in this table is null (unknown): " + why + ".");
}

bool uses_loops(const ConfigGroup& g) {
  return g.measure() == MeasureMode::Phases;
}

Stat speedup_of(const Stat& s, const Stat& b, bool self) {
  Stat out;
  if (s.null() || b.null() || b.mean == 0) return out;
  auto rel2 = [](const Stat& x) { return std::isnan(x.std) ? 0.0 : std::pow(x.std / x.mean, 2); };
  const bool spread = !std::isnan(s.std) || !std::isnan(b.std);
  out.mean = s.mean / b.mean;
  out.std = spread && !self ? out.mean * std::sqrt(rel2(s) + rel2(b)) : kMissing;
  out.n = std::min(s.n, b.n);
  return out;
}

std::string energy_null_reason(const std::vector<ConfigGroup>& groups) {
  return all_cpu(groups) ? "no energy counters were readable (CPU run without NVML/RAPL)"
                         : "no energy counters were readable (NVML unavailable)";
}

}  // namespace cnnscale::report
