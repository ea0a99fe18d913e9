// `cnnscale bench allreduce` results: the --json object (also the result folder's summary.json) as a
// typed struct whose schema table (allreduce_results.cpp) writes it and reads it back for the report.
// Fields that files of earlier versions lack are optional (results/README.md says what they mean).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "io/provenance_field.hpp"
#include "io/result_schema.hpp"
#include "io/setting_values.hpp"

namespace cnnscale {

inline constexpr std::string_view kAllreduceBenchFormat = "cnnscale-allreduce-bench-1";

// One message size.
struct AllreduceSizeResult {
  CountFigure bytes, count;
  TextFigure type;  // nccl-tests' name of the dtype
  NumberFigure time_us, time_min_us, time_max_us, algbw_gbs, busbw_gbs;
  CountFigure wrong;  // null without --check
  CountFigure energy_iters;
  NumberFigure energy_seconds, joules, nj_per_byte, dynamic_nj_per_byte, watts_per_device;
  static std::span<const SchemaField<AllreduceSizeResult>> fields();
  bool operator==(const AllreduceSizeResult&) const = default;
};

struct AllreduceResult {
  TextFigure benchmark, format, time, host, op, dtype;
  FlagFigure in_place;
  CountFigure ranks;
  TextFigure device, algo, issue;
  CountFigure max_ctas;
  TextFigure cta_policy, priority, library;
  TextListFigure rank_devices;
  CountFigure warmup_iters, iters, repeats;
  TextFigure time_definition, busbw_definition;
  FlagFigure checked;
  Figure<std::vector<AllreduceSizeResult>> rows;
  TextFigure nccl_env, energy_method;
  NumberFigure energy_window_seconds, energy_settle_seconds, idle_watts_per_device;
  Figure<Provenance> provenance;  // absent in files written before it was recorded
  Figure<SettingValues> settings;  // bench allreduce's table (experiment/command_settings.hpp); absent likewise
  static std::span<const SchemaField<AllreduceResult>> fields();
  bool operator==(const AllreduceResult&) const = default;
};

nlohmann::json allreduce_result_json(const AllreduceResult& r);
// ConfigError naming `file` and the key path for a field of the wrong type or a required one missing.
AllreduceResult allreduce_result_from_json(const nlohmann::json& j, const std::string& file);

}  // namespace cnnscale
