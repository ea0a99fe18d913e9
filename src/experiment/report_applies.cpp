// Which group keys say something of a group's runs (report_data.hpp): a train setting says nothing
// of runs it did not apply to (auto_start of an even split, bucket_mb of one rank), nor the
// allreduce's settings of a single rank that exchanged nothing; and a setting a run left unrecorded
// where it applied had its default.
#include <cmath>

#include "experiment/report_data.hpp"
#include "experiment/train_settings.hpp"

namespace cnnscale::report {

RunContext run_context_of(const ConfigGroup& g) {
  const RunRecord& r = *g.runs.front();
  const bool gpu = g.key.at("device") == "gpu";
  const nlohmann::json graph =
      r.run_config.is_object() ? r.run_config.value("cuda_graph", nlohmann::json(true)) : nlohmann::json(true);
  // Recorded on every auto run (Record::Always).
  const nlohmann::json auto_start =
      r.run_config.is_object() ? r.run_config.value("auto_start", nlohmann::json("probe")) : nlohmann::json("probe");
  const auto world = static_cast<int64_t>(g.world_size());
  return {.gpu = gpu,
          .world_size = world,
          .exchanges = world > 1 || is_one_rank_exchange(g),
          .graph = gpu && graph != false,
          .precision = g.key.at("precision"),
          .split = r.summary.split.value_or("even"),
          .auto_start = auto_start.is_string() ? auto_start.get<std::string>() : "probe",
          .measure = g.key.at("measure"),
          .mfu = !std::isnan(r.number(&RunSummary::mfu)),
          .synthetic = g.key.at("data").rfind("synthetic", 0) == 0};
}

bool irrelevant(const std::string& key, const ConfigGroup& g) {
  // A single rank exchanges no gradients: its allreduce settings (NCCL's environment among them) are
  // not part of what it measured. One kept on the data-parallel path (--one-rank-exchange) measured
  // them: its runs of other settings stay apart.
  if ((key == "allreduce_overlap" || key == "allreduce_algo" || key == "allreduce_dtype" ||
       key == "allreduce_tuning" || key == "nccl_env") &&
      g.world_size() == 1 && !is_one_rank_exchange(g))
    return true;
  const TrainSetting* s = setting_of_label(key);
  return s && !s->applies_to(run_context_of(g));
}

std::string variant_value(const std::string& key, const ConfigGroup& g) {
  const std::string& value = g.key.at(key);
  if (!value.empty()) return value;
  // Not recorded, nor tagged by a sweep: the run had the default (display's 50, not "none").
  const TrainSetting* s = setting_of_label(key);
  return s && !s->default_value.is_null() && s->default_value != "" && !s->default_value.empty()
             ? s->text(s->default_value)
             : value;
}

}  // namespace cnnscale::report
