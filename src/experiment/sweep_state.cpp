// Results-folder state of a sweep: which runs are finished and intact (matching tag.config_hash and
// status in summary.json, as train writes them, and files matching their done marker), leftovers of
// killed or interrupted runs, and the sweep.json record that keeps one experiment name bound to one
// configuration.
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "io/infer_results.hpp"
#include "experiment/sweep.hpp"
#include "io/atomic_file.hpp"
#include "io/results_writer.hpp"
#include "io/safe_open.hpp"

namespace cnnscale {

namespace fs = std::filesystem;

const char* run_state_name(RunState s) {
  switch (s) {
    case RunState::Todo:
      return "todo";
    case RunState::Done:
      return "done";
    case RunState::Partial:
      return "partial";
    case RunState::Corrupt:
      return "corrupt";
    case RunState::Conflict:
      return "conflict";
  }
  return "?";
}

std::string experiment_dir(const std::string& results_root, const Experiment& e) {
  // Checked before any run: the name's length (its characters were checked where it was read) and
  // a file where the folder should be, which every run would otherwise fail on at its end.
  check_results_name(e.file + ": name", e.name);
  const fs::path dir = fs::path(results_root) / e.name;
  std::error_code ec;
  refuse_link(dir.string());  // every lock, record, log and run of the sweep would go where it points
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw_config("{}: exists and is not a folder (the results folder of experiment '{}')", dir.string(), e.name);
  return dir.string();
}

namespace {

std::optional<nlohmann::json> read_json(const fs::path& p) {
  std::ifstream in(p);
  if (!in) return std::nullopt;
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

// A training run's status as its summary.json states it: train writes "complete" or
// "interrupted"; files from before it wrote one are complete; a value that is no string reads "?".
std::string summary_status(const nlohmann::json& summary) {
  if (!summary.contains("status")) return std::string(kRunComplete);
  return summary["status"].is_string() ? summary["status"].get<std::string>() : std::string("?");
}

}  // namespace

std::string infer_run_file(const std::string& exp_dir, const RunSpec& run) {
  return (fs::path(exp_dir) / "infer" / (run.id + ".json")).string();
}

namespace {

// An inference run is one file, which infer writes whole under a temporary name and links into
// place: there, it is complete unless damaged since (unreadable, or not the run it is named after).
RunStatus infer_run_status(const std::string& exp_dir, const RunSpec& run) {
  const fs::path file = infer_run_file(exp_dir, run);
  std::error_code ec;
  if (!fs::exists(file, ec)) return {RunState::Todo, ""};
  const auto corrupt = [&](const std::string& why) { return RunStatus{RunState::Corrupt, why}; };
  auto j = read_json(file);
  if (!j || !j->is_object()) return corrupt(fmt::format("{} is unreadable (truncated or not JSON)", file.string()));
  // What the report reads: an offline result of ours with a table of batch sizes.
  const auto format = j->find("format");
  const auto batches = j->find("batches");
  if (format == j->end() || *format != kInferFormat || batches == j->end() || !batches->is_array() ||
      batches->empty())
    return corrupt(fmt::format("{} is no offline infer result", file.string()));
  const auto id = j->find("run_id");
  const std::string holds = id != j->end() && id->is_string() ? id->get<std::string>() : std::string("?");
  if (holds != run.id)
    return {RunState::Conflict, fmt::format("{} holds the result of run '{}'", file.string(), holds)};
  return {RunState::Done, ""};
}

}  // namespace

RunStatus run_status(const std::string& exp_dir, const RunSpec& run) {
  if (run.infer) return infer_run_status(exp_dir, run);
  std::error_code ec;
  const fs::path dir = fs::path(exp_dir) / run.id;
  if (fs::exists(dir, ec)) {
    const auto corrupt = [&](const std::string& why) { return RunStatus{RunState::Corrupt, why}; };
    if (!fs::is_directory(dir, ec)) return corrupt("not a folder");
    // A done marker vouches for every byte; without one (an older sweep's folder, or train has just
    // finished) the files are read through instead.
    const bool sealed = fs::exists(dir / kDoneMarker, ec);
    if (sealed) {
      if (std::string why = check_done_marker(dir.string()); !why.empty()) return corrupt(why);
    }
    if (!fs::exists(dir / "summary.json", ec)) return corrupt("summary.json is missing");
    auto summary = read_json(dir / "summary.json");
    if (!summary || !summary->is_object()) return corrupt("summary.json is unreadable (truncated or not JSON)");
    const nlohmann::json* tag = nullptr;
    if (summary->contains("summary") && (*summary)["summary"].contains("tag.config_hash"))
      tag = &(*summary)["summary"]["tag.config_hash"];
    if (!tag || !tag->is_string() || tag->get<std::string>() != run.config_hash)
      return {RunState::Conflict,
              fmt::format("{} holds a run of another configuration (tag.config_hash {}, expected {})", dir.string(),
                          tag ? tag->dump() : "missing", run.config_hash)};
    // train writes "interrupted" when a signal stopped it early; a rerun of the id replaces it.
    const std::string status = summary_status(*summary);
    if (status == kRunInterrupted) return {RunState::Partial, "an interrupted run (status interrupted)"};
    if (status != kRunComplete) return corrupt(fmt::format("summary.json has status '{}'", status));
    if (sealed) return {RunState::Done, ""};
    if (!fs::exists(dir / "run.h5", ec)) return corrupt("run.h5 is missing");
    try {
      read_run_results(dir.string());
    } catch (const std::exception& e) {
      return corrupt(fmt::format("run.h5 is unreadable: {}", e.what()));
    }
    return {RunState::Done, "", true};
  }
  if (fs::exists(fs::path(exp_dir) / (run.id + ".partial"), ec)) return {RunState::Partial, "a killed run's folder"};
  return {RunState::Todo, ""};
}

void check_sweep_record(const std::string& exp_dir, const Experiment& e, const std::vector<std::string>& overrides,
                        bool write) {
  const fs::path record = fs::path(exp_dir) / "sweep.json";
  const nlohmann::json fixed = e.fixed_json();
  const std::string hash = e.fixed_hash();
  std::error_code ec;
  if (fs::exists(record, ec)) {
    auto old = read_json(record);
    if (!old || !old->contains("config_hash") || !old->contains("fixed"))
      throw_config("{} is not a cnnscale sweep record: remove it or use another --results directory", record.string());
    if ((*old)["config_hash"] != hash) {
      std::string changed;
      int shown = 0;
      for (const auto& op : nlohmann::json::diff((*old)["fixed"], fixed)) {
        std::string path = op["path"].get<std::string>().substr(1);
        std::replace(path.begin(), path.end(), '/', '.');
        if (shown++ < 6) changed += (changed.empty() ? "" : ", ") + path;
      }
      throw_config(
          "experiment '{}' in {} was run with another configuration (changed: {}); its finished runs would not be "
          "comparable: give the experiment a new name (name=...) or use another --results directory",
          e.name, exp_dir, changed.empty() ? "?" : changed);
    }
  }
  if (!write) return;
  fs::create_directories(exp_dir, ec);
  if (ec) throw_runtime("cannot create {}: {}", exp_dir, ec.message());
  nlohmann::json j = {{"format", "cnnscale-sweep-1"}, {"experiment", e.name}, {"file", e.file},
                      {"overrides", overrides},       {"config_hash", hash},  {"fixed", fixed},
                      {"resolved", e.resolved_json()}};
  // Written under a per-process name and renamed: concurrent array tasks write identical records.
  write_file_atomically(record.string(), j.dump(2) + "\n");
}

std::map<std::string, std::string> finished_run_gpu_models(const std::string& exp_dir,
                                                           const std::vector<std::string>& run_ids) {
  std::map<std::string, std::string> models;
  for (const std::string& id : run_ids) {
    const auto summary = read_json(fs::path(exp_dir) / id / "summary.json");
    if (!summary || !summary->is_object() || !summary->contains("system") || summary_status(*summary) != kRunComplete)
      continue;
    const nlohmann::json& system = (*summary)["system"];
    if (!system.contains("gpus") || !system["gpus"].is_array()) continue;  // a CPU run
    for (const nlohmann::json& g : system["gpus"])
      if (g.contains("name") && g["name"].is_string()) models.emplace(g["name"].get<std::string>(), id);
  }
  return models;
}

std::string other_gpu_models_problem(const std::string& exp_dir, const std::map<std::string, std::string>& recorded,
                                     const std::vector<std::string>& here) {
  if (here.empty() || recorded.empty()) return "";
  for (const auto& [model, run] : recorded)
    if (std::find(here.begin(), here.end(), model) != here.end()) return "";
  const auto& [model, run] = *recorded.begin();
  return fmt::format(
      "{} holds finished runs measured on {} (run {}), and the GPUs visible here are {}: resumed here, the sweep would "
      "skip them and mix two GPU models in one experiment; use another --results directory, or "
      "--allow-other-gpus to keep them as they are",
      exp_dir, model, run, fmt::join(here, ", "));
}

}  // namespace cnnscale
