// summary.json of a run folder: the summary figures (counts as JSON integers, null and NaN as
// null), their methods, each rank's figures, the system info, the timeline's size, the split and
// the provenance.
#include <cmath>

#include "io/results_files.hpp"
#include "io/results_writer.hpp"
#include "io/summary_schema.hpp"

namespace cnnscale {

namespace {

// A count (summary_schema.hpp) is a JSON integer when whole; any other number stays a JSON number.
bool is_count(const std::string& name) {
  const SummaryField* f = find_summary_field(name);
  return f && f->kind == FigureKind::Count;
}

nlohmann::json summary_number_json(const std::string& name, double v) {
  if (!std::isfinite(v)) return nlohmann::json();
  // Below 2^53 every whole double is exact as an int64; a count that is not whole stays a number.
  if (is_count(name) && v == std::floor(v) && std::abs(v) < 9007199254740992.0)
    return nlohmann::json(static_cast<int64_t>(v));
  return nlohmann::json(v);
}

nlohmann::json values_json(const SummaryValues& values) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, v] : values) {
    if (std::holds_alternative<double>(v))
      out[name] = summary_number_json(name, std::get<double>(v));
    else if (std::holds_alternative<std::string>(v))
      out[name] = std::get<std::string>(v);
    else
      out[name] = nullptr;
  }
  return out;
}

}  // namespace

nlohmann::json summary_values_json(const RunSummary& s) { return values_json(summary_values(s)); }
nlohmann::json summary_values_json(const RankSummary& s) { return values_json(summary_values(s)); }

nlohmann::json summary_json(const RunResults& r) {
  using nlohmann::json;
  auto opt = [](const std::optional<std::string>& s) { return s ? json(*s) : json(nullptr); };
  auto num = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  json j;
  j["format"] = kResultsFormat;
  j["experiment"] = r.experiment;
  j["run_id"] = r.run_id;
  j["status"] = r.status;
  j["summary"] = summary_values_json(r.summary);
  j["methods"] = r.methods;
  j["ranks"] = json::array();
  for (const auto& rank : r.rank_summary) j["ranks"].push_back(summary_values_json(rank));
  json gpus = json::array();
  for (const auto& g : r.system.gpus)
    gpus.push_back({{"rank", g.rank},
                    {"host", opt(g.host)},
                    {"name", opt(g.name)},
                    {"uuid", opt(g.uuid)},
                    {"driver", opt(g.driver)},
                    {"power_limit_w", num(g.power_limit_w)},
                    {"sm_count", g.sm_count},
                    {"memory_bytes", g.memory_bytes},
                    {"peak_sm_clock_mhz", num(g.peak_sm_clock_mhz)},
                    {"compute_capability", opt(g.compute_capability)}});
  j["system"] = {{"hosts", r.system.hosts},
                 {"gpus", gpus},
                 {"cuda_version", opt(r.system.cuda_version)},
                 {"cudnn_version", opt(r.system.cudnn_version)},
                 {"nccl_version", opt(r.system.nccl_version)},
                 {"mpi_version", opt(r.system.mpi_version)},
                 {"nccl_env", opt(r.system.nccl_env)},
                 {"engine_cache", opt(r.system.engine_cache)}};
  json changes = json::array(), models = json::array();
  for (const SplitChange& c : r.split.changes) changes.push_back({{"iteration", c.iteration}, {"shares", c.shares}});
  auto points_json = [&num](const std::vector<ProbePoint>& points) {
    json out = json::array();
    for (const ProbePoint& p : points)
      out.push_back({{"rank", p.rank}, {"batch", p.batch}, {"seconds", num(p.seconds)}, {"joules", num(p.joules)}});
    return out;
  };
  for (const RankModel& m : r.split.models)
    models.push_back({{"rank", m.rank},
                      {"seconds_fixed", num(m.seconds_fixed)},
                      {"seconds_per_sample", num(m.seconds_per_sample)},
                      {"joules_fixed", num(m.joules_fixed)},
                      {"joules_per_sample", num(m.joules_per_sample)},
                      {"wait_watts", num(m.wait_watts)}});
  j["split"] = {{"policy", r.split.policy},
                {"refine_every", r.split.refine_every >= 0 ? json(r.split.refine_every) : json(nullptr)},
                {"refine_model", r.split.refine_model.empty() ? json(nullptr) : json(r.split.refine_model)},
                {"changes", changes},
                {"probe", points_json(r.split.probe)},
                {"models", models},
                {"steps", points_json(r.split.steps)},
                {"exchange", {{"seconds", num(r.split.exchange_seconds)}, {"joules", num(r.split.exchange_joules)}}}};
  int64_t warmup = 0;
  for (uint8_t w : r.timeline.warmup()) warmup += w;
  j["timeline"] = {
      {"iterations", r.timeline.iterations()}, {"ranks", r.timeline.ranks()}, {"warmup_iterations", warmup}};
  if (r.provenance) j["provenance"] = provenance_json(*r.provenance);
  return j;
}

}  // namespace cnnscale
