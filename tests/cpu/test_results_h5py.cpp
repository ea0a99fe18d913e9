// run.h5 as a user without cnnscale reads it: h5py sees the same values the writer was given
// (NaN as NaN, null as h5py.Empty, empty series as empty datasets).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cpu/results_test_util.hpp"
#include "io/results_writer.hpp"

namespace cnnscale {
namespace {

using nlohmann::json;
using testing::ResultsDir;
using testing::sample;

// Reads the file with h5py, as a user without cnnscale would, and prints what it saw as JSON.
// NaN becomes the string "NaN" and h5py.Empty (our null) becomes None.
const char* kH5pyScript = R"PY(
import json, math, sys
import h5py, numpy as np
def num(x):
    x = float(x)
    return "NaN" if math.isnan(x) else x
def attr(v):
    if isinstance(v, h5py.Empty): return None
    if isinstance(v, (str, bytes)): return v if isinstance(v, str) else v.decode()
    return num(v)
with h5py.File(sys.argv[1], "r") as f:
    out = {"format": f.attrs["format"], "run_id": f.attrs["run_id"],
           "config": f["config/text"].asstr()[()],
           "system": {k: attr(v) for k, v in f["system"].attrs.items()},
           "hosts": list(f["system/hosts"].asstr()[:]),
           "gpu_uuid": list(f["system/gpus/uuid"].asstr()[:]),
           "gpu_name": list(f["system/gpus/name"].asstr()[:]),
           "gpu_limit": [num(x) for x in f["system/gpus/power_limit_w"][:]]}
    s = f["timeline/seconds"]
    out["timeline_shape"] = list(s.shape)
    out["timeline_dtype"] = str(s.dtype)
    out["phases"] = [str(p) for p in s.attrs["phases"]]
    out["seconds"] = [num(x) for x in s[:].ravel()]
    out["warmup"] = [int(x) for x in f["timeline/warmup"][:]]
    out["iteration"] = [int(x) for x in f["timeline/iteration"][:]]
    steady = s[:][f["timeline/warmup"][:] == 0]
    out["steady_mean_total"] = float(np.nanmean(steady[:, :, out["phases"].index("total")]))
    out["power"] = [{"rank": int(g.attrs["rank"]), "uuid": attr(g.attrs["uuid"]),
                     "power_w": [num(x) for x in g["power_w"][:]],
                     "avg_power_w": [num(x) for x in g["avg_power_w"][:]],
                     "energy_mj": [num(x) for x in g["energy_mj"][:]]}
                    for g in (f["power/gpu%d" % k] for k in range(int(f["power"].attrs["count"])))]
    out["epochs"] = {k: [num(x) for x in f["epochs"][k][:]] for k in f["epochs"]}
    out["summary"] = {k: attr(v) for k, v in f["summary"].attrs.items()}
    out["methods"] = {k: attr(v) for k, v in f["summary/methods"].attrs.items()}
    out["split"] = {"policy": f["split"].attrs["policy"], "refine_every": int(f["split"].attrs["refine_every"]),
                    "refine_model": attr(f["split"].attrs["refine_model"]),
                    "iteration": f["split/changes/iteration"][:].tolist(),
                    "shares": f["split/changes/shares"][:].tolist(),
                    "shares_dtype": str(f["split/changes/shares"].dtype),
                    "probe_joules": [num(x) for x in f["split/probe/joules"][:]],
                    "model_rank": f["split/models/rank"][:].tolist(),
                    "step_seconds": [num(x) for x in f["split/steps/seconds"][:]],
                    "exchange": [num(f["split/exchange"].attrs[k]) for k in ("seconds", "joules")]}
print(json.dumps(out))
)PY";

json num(double v) {
  return std::isnan(v) ? json("NaN") : json(v);
}
json nums(const std::vector<double>& v) {
  json a = json::array();
  for (double x : v) a.push_back(num(x));
  return a;
}

TEST(Results, H5pyReadsTheSameValues) {
  const char* python = "/usr/bin/python3";
  if (std::system(fmt::format("{} -c 'import h5py' >/dev/null 2>&1", python).c_str()) != 0)
    GTEST_SKIP() << python << " cannot import h5py (Debian package python3-h5py, installed by scripts/setup.sh)";
  ResultsDir dir;
  const RunResults r = sample();
  const std::string run_dir = write_run_results(r, {dir.str(), {}});
  const std::string script = dir.str() + "/read.py";
  std::ofstream(script) << kH5pyScript;
  FILE* p = ::popen(fmt::format("{} {} {}/run.h5", python, script, run_dir).c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  ASSERT_EQ(::pclose(p), 0) << out;
  json j = json::parse(out);

  EXPECT_EQ(j["format"], "cnnscale-results-1");
  EXPECT_EQ(j["run_id"], r.run_id);
  EXPECT_EQ(j["config"], r.config_text);
  EXPECT_EQ(j["system"]["cuda_version"], "12.4");
  EXPECT_TRUE(j["system"]["cudnn_version"].is_null());
  EXPECT_EQ(j["system"]["mpi_version"], "Open MPI v4.1.6");
  EXPECT_EQ(j["hosts"], json(r.system.hosts));
  EXPECT_EQ(j["gpu_uuid"], json({"GPU-1111", "GPU-2222"}));
  EXPECT_EQ(j["gpu_name"], json({"NVIDIA H100", ""}));
  EXPECT_EQ(j["gpu_limit"], json({700.0, "NaN"}));
  EXPECT_EQ(j["timeline_shape"], json({3, 2, 8}));
  EXPECT_EQ(j["timeline_dtype"], "float64");
  EXPECT_EQ(j["phases"], json(std::vector<std::string>(kTimelinePhaseNames.begin(), kTimelinePhaseNames.end())));
  EXPECT_EQ(j["seconds"], nums(r.timeline.seconds()));
  EXPECT_EQ(j["warmup"], json({1, 0, 0}));
  EXPECT_EQ(j["iteration"], json({100, 101, 102}));
  // Mean total over the two steady iterations and both ranks, as the README's example computes it.
  double mean = 0;
  for (int64_t row = 1; row < 3; ++row)
    for (int64_t rank = 0; rank < 2; ++rank) mean += r.timeline.at(row, rank, TimelinePhase::Total) / 4;
  EXPECT_NEAR(j["steady_mean_total"].get<double>(), mean, 1e-12);
  ASSERT_EQ(j["power"].size(), 2u);
  EXPECT_EQ(j["power"][0]["uuid"], "GPU-1111");
  EXPECT_EQ(j["power"][0]["power_w"], nums(r.power[0].power_w));
  EXPECT_EQ(j["power"][0]["avg_power_w"], nums(r.power[0].avg_power_w));
  EXPECT_EQ(j["power"][0]["energy_mj"], nums(r.power[0].energy_mj));
  EXPECT_EQ(j["power"][1]["rank"], 1);
  EXPECT_TRUE(j["power"][1]["uuid"].is_null());
  EXPECT_EQ(j["power"][1]["power_w"], json::array());
  EXPECT_EQ(j["epochs"]["loss"], json({2.3, 1.7}));
  EXPECT_EQ(j["epochs"]["top5"], json({0.5, "NaN"}));
  EXPECT_EQ(j["epochs"]["iteration"], json({500, 1000}));
  EXPECT_EQ(j["summary"]["seconds_per_batch"], 0.123456789012345);
  EXPECT_TRUE(j["summary"]["joules_per_batch"].is_null());
  EXPECT_EQ(j["summary"]["gflops_per_watt"], "NaN");
  EXPECT_EQ(j["summary"]["tag.note"], "a, \"quoted\" value");
  EXPECT_EQ(j["methods"], json(r.methods));
  EXPECT_EQ(j["split"]["policy"], "auto");
  EXPECT_EQ(j["split"]["refine_every"], 20);
  EXPECT_EQ(j["split"]["refine_model"], "step_ratio");
  EXPECT_EQ(j["split"]["iteration"], json({100, 150}));
  EXPECT_EQ(j["split"]["shares"], json::parse("[[32, 32], [40, 24]]"));
  EXPECT_EQ(j["split"]["shares_dtype"], "int64");
  EXPECT_EQ(j["split"]["probe_joules"], json({2.5, "NaN"}));
  EXPECT_EQ(j["split"]["model_rank"], json({0, 1}));
  EXPECT_EQ(j["split"]["step_seconds"], json({0.05, 0.051}));
  EXPECT_EQ(j["split"]["exchange"], json({0.0035, "NaN"}));
}

}  // namespace
}  // namespace cnnscale
