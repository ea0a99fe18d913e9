// Reads a run folder's run.h5 back into RunResults (the inverse of results_h5_write.cpp), checking
// the format, the phase names and that the columns of each table agree in length. Files written
// before /split existed read as an even split with no recorded changes.
#include <fmt/ranges.h>

#include <algorithm>
#include <cstddef>
#include <filesystem>

#include "core/error.hpp"
#include "core/hdf5_file.hpp"
#include "io/results_writer.hpp"
#include "io/summary_schema.hpp"

namespace cnnscale {

namespace {

namespace fs = std::filesystem;

std::optional<std::string> unless_empty(const std::string& s) {
  return s.empty() ? std::nullopt : std::optional<std::string>(s);
}

// A /summary group's attributes by name; the schema (summary_schema.hpp) turns them into members.
SummaryValues read_values(const h5::Reader& in, hid_t group) {
  SummaryValues values;
  for (const auto& name : in.attr_names(group)) values[name] = in.attr(group, name);
  return values;
}

SplitRecord read_split(const h5::Reader& in, hid_t root, const std::string& file_path) {
  SplitRecord split;
  if (!in.exists(root, "split")) return split;
  h5::Handle g = in.group(root, "split");
  if (in.has_attr(g.get(), "policy")) split.policy = in.attr_str(g.get(), "policy").value_or(split.policy);
  if (in.has_attr(g.get(), "refine_every")) split.refine_every = in.attr_i64(g.get(), "refine_every");
  if (in.has_attr(g.get(), "refine_model")) split.refine_model = in.attr_str(g.get(), "refine_model").value_or("");
  {
    h5::Handle c = in.group(g.get(), "changes");
    auto iteration = in.i64(c.get(), "iteration");
    std::vector<hsize_t> dims;
    auto shares = in.read<int64_t>(c.get(), "shares", H5T_NATIVE_INT64, &dims);
    if (dims.size() != 2 || dims[0] != iteration.size())
      throw_config("{}: /split/changes/shares is not (changes, ranks) with one row per iteration", file_path);
    const size_t ranks = dims[1];
    for (size_t i = 0; i < iteration.size(); ++i)
      split.changes.push_back(SplitChange{
          iteration[i], std::vector<int64_t>(shares.begin() + static_cast<std::ptrdiff_t>(i * ranks),
                                             shares.begin() + static_cast<std::ptrdiff_t>((i + 1) * ranks))});
  }
  // /split/steps and /split/exchange: absent from files written before the exchange was probed.
  for (const auto& [name, points] : {std::pair{"probe", &split.probe}, std::pair{"steps", &split.steps}}) {
    if (!in.exists(g.get(), name)) continue;
    h5::Handle p = in.group(g.get(), name);
    auto rank = in.i64(p.get(), "rank");
    auto batch = in.i64(p.get(), "batch");
    auto seconds = in.f64(p.get(), "seconds");
    auto joules = in.f64(p.get(), "joules");
    for (size_t n : {batch.size(), seconds.size(), joules.size()})
      if (n != rank.size()) throw_config("{}: /split/{} columns differ in length", file_path, name);
    for (size_t i = 0; i < rank.size(); ++i) points->push_back(ProbePoint{rank[i], batch[i], seconds[i], joules[i]});
  }
  if (in.exists(g.get(), "exchange")) {
    h5::Handle x = in.group(g.get(), "exchange");
    auto number = [&](const char* key) {
      const h5::Value v = in.has_attr(x.get(), key) ? in.attr(x.get(), key) : h5::Value{};
      return std::holds_alternative<double>(v) ? std::get<double>(v) : kMissing;
    };
    split.exchange_seconds = number("seconds");
    split.exchange_joules = number("joules");
  }
  {
    h5::Handle m = in.group(g.get(), "models");
    auto rank = in.i64(m.get(), "rank");
    auto a = in.f64(m.get(), "seconds_fixed");
    auto b = in.f64(m.get(), "seconds_per_sample");
    auto c = in.f64(m.get(), "joules_fixed");
    auto d = in.f64(m.get(), "joules_per_sample");
    auto wait = in.f64(m.get(), "wait_watts");
    for (size_t n : {a.size(), b.size(), c.size(), d.size(), wait.size()})
      if (n != rank.size()) throw_config("{}: /split/models columns differ in length", file_path);
    for (size_t i = 0; i < rank.size(); ++i)
      split.models.push_back(RankModel{rank[i], a[i], b[i], c[i], d[i], wait[i]});
  }
  return split;
}

}  // namespace

RunResults read_run_results(const std::string& path) {
  std::error_code ec;
  const std::string file_path = fs::is_directory(path, ec) ? (fs::path(path) / "run.h5").string() : path;
  const h5::Reader in(file_path, "results file");
  const hid_t root = in.root();
  if (!in.has_attr(root, "format") || in.attr_str(root, "format") != std::string(kResultsFormat))
    throw_config("{}: not a {} file", file_path, kResultsFormat);

  RunResults r;
  r.experiment = in.attr_str(root, "experiment").value_or("");
  r.run_id = in.attr_str(root, "run_id").value_or("");
  if (in.has_attr(root, "status")) r.status = in.attr_str(root, "status").value_or(std::string(kRunComplete));
  {
    h5::Handle g = in.group(root, "config");
    r.config_text = in.text(g.get(), "text");
  }
  {
    h5::Handle g = in.group(root, "system");
    r.system.cuda_version = in.attr_str(g.get(), "cuda_version");
    r.system.cudnn_version = in.attr_str(g.get(), "cudnn_version");
    r.system.nccl_version = in.attr_str(g.get(), "nccl_version");
    r.system.mpi_version = in.attr_str(g.get(), "mpi_version");
    // Absent in files written before it was recorded.
    if (in.has_attr(g.get(), "nccl_env")) r.system.nccl_env = in.attr_str(g.get(), "nccl_env");
    if (in.has_attr(g.get(), "engine_cache")) r.system.engine_cache = in.attr_str(g.get(), "engine_cache");
    r.system.hosts = in.strings(g.get(), "hosts");
    h5::Handle gpus = in.group(g.get(), "gpus");
    auto rank = in.i64(gpus.get(), "rank");
    auto host = in.strings(gpus.get(), "host");
    auto name = in.strings(gpus.get(), "name");
    auto uuid = in.strings(gpus.get(), "uuid");
    auto driver = in.strings(gpus.get(), "driver");
    auto limit = in.f64(gpus.get(), "power_limit_w");
    // Files written before the speed columns existed read them as unknown.
    const size_t n = rank.size();
    const bool facts = in.exists(gpus.get(), "sm_count");
    auto sms = facts ? in.i64(gpus.get(), "sm_count") : std::vector<int64_t>(n, 0);
    auto memory = facts ? in.i64(gpus.get(), "memory_bytes") : std::vector<int64_t>(n, 0);
    auto clock = facts ? in.f64(gpus.get(), "peak_sm_clock_mhz") : std::vector<double>(n, kMissing);
    auto cc = facts ? in.strings(gpus.get(), "compute_capability") : std::vector<std::string>(n);
    for (size_t size : {host.size(), name.size(), uuid.size(), driver.size(), limit.size(), sms.size(), memory.size(),
                        clock.size(), cc.size()})
      if (size != n) throw_config("{}: /system/gpus columns differ in length", file_path);
    for (size_t i = 0; i < n; ++i)
      r.system.gpus.push_back(GpuInfo{rank[i], unless_empty(host[i]), unless_empty(name[i]), unless_empty(uuid[i]),
                                      unless_empty(driver[i]), limit[i], sms[i], memory[i], clock[i],
                                      unless_empty(cc[i])});
  }
  {
    h5::Handle g = in.group(root, "timeline");
    std::vector<hsize_t> dims;
    auto seconds = in.read<double>(g.get(), "seconds", H5T_NATIVE_DOUBLE, &dims);
    if (dims.size() != 3 || dims[2] != static_cast<hsize_t>(kTimelinePhaseCount))
      throw_config("{}: /timeline/seconds is not (iterations, ranks, {})", file_path, kTimelinePhaseCount);
    {
      h5::Handle ds = in.dataset(g.get(), "seconds", dims);
      auto phases = in.attr_str_array(ds.get(), "phases");
      if (!std::equal(phases.begin(), phases.end(), kTimelinePhaseNames.begin(), kTimelinePhaseNames.end()))
        throw_config("{}: /timeline/seconds has phases [{}], expected [{}]", file_path, fmt::join(phases, ", "),
                     fmt::join(kTimelinePhaseNames, ", "));
    }
    auto iteration = in.i64(g.get(), "iteration");
    auto warmup = in.read<uint8_t>(g.get(), "warmup", H5T_NATIVE_UINT8);
    if (iteration.size() != dims[0] || warmup.size() != dims[0])
      throw_config("{}: /timeline iteration/warmup lengths differ from the seconds array", file_path);
    r.timeline.assign(static_cast<int64_t>(dims[1]), std::move(iteration), std::move(warmup), std::move(seconds));
  }
  {
    h5::Handle g = in.group(root, "power");
    const int64_t count = in.attr_i64(g.get(), "count");
    for (int64_t k = 0; k < count; ++k) {
      h5::Handle s = in.group(g.get(), fmt::format("gpu{}", k));
      PowerSeries p;
      p.rank = in.attr_i64(s.get(), "rank");
      p.uuid = in.attr_str(s.get(), "uuid");
      p.t_s = in.f64(s.get(), "t_s");
      p.power_w = in.f64(s.get(), "power_w");
      p.avg_power_w = in.f64(s.get(), "avg_power_w");
      p.energy_mj = in.f64(s.get(), "energy_mj");
      p.sm_clock_mhz = in.f64(s.get(), "sm_clock_mhz");
      p.temperature_c = in.f64(s.get(), "temperature_c");
      for (size_t n :
           {p.power_w.size(), p.avg_power_w.size(), p.energy_mj.size(), p.sm_clock_mhz.size(), p.temperature_c.size()})
        if (n != p.t_s.size()) throw_config("{}: /power/gpu{} columns differ in length", file_path, k);
      r.power.push_back(std::move(p));
    }
  }
  {
    h5::Handle g = in.group(root, "epochs");
    auto epoch = in.i64(g.get(), "epoch");
    auto iteration = in.i64(g.get(), "iteration");
    auto loss = in.f64(g.get(), "loss");
    auto top1 = in.f64(g.get(), "top1");
    auto top5 = in.f64(g.get(), "top5");
    auto lr = in.f64(g.get(), "lr");
    // Files written before the epochs' seconds were recorded have none: NaN.
    auto seconds =
        in.exists(g.get(), "seconds") ? in.f64(g.get(), "seconds") : std::vector<double>(epoch.size(), kMissing);
    for (size_t n : {iteration.size(), loss.size(), top1.size(), top5.size(), lr.size(), seconds.size()})
      if (n != epoch.size()) throw_config("{}: /epochs columns differ in length", file_path);
    for (size_t i = 0; i < epoch.size(); ++i)
      r.epochs.push_back(EpochRecord{epoch[i], iteration[i], loss[i], top1[i], top5[i], lr[i], seconds[i]});
  }
  {
    h5::Handle g = in.group(root, "summary");
    r.summary = run_summary_from_values(read_values(in, g.get()));
    h5::Handle m = in.group(g.get(), "methods");
    for (const auto& name : in.attr_names(m.get())) {
      auto s = in.attr_str(m.get(), name);
      if (!s) throw_config("{}: /summary/methods/{} is null", file_path, name);
      r.methods[name] = *s;
    }
    if (in.exists(g.get(), "ranks")) {
      h5::Handle ranks = in.group(g.get(), "ranks");
      for (size_t i = 0; in.exists(ranks.get(), std::to_string(i)); ++i) {
        h5::Handle rg = in.group(ranks.get(), std::to_string(i));
        r.rank_summary.push_back(rank_summary_from_values(read_values(in, rg.get())));
      }
    }
  }
  r.split = read_split(in, root, file_path);
  // Files written before the curve and the provenance were recorded have neither.
  if (in.exists(root, "curve")) {
    h5::Handle g = in.group(root, "curve");
    TrainingCurve& c = r.curve;
    c.start_iteration = in.attr_i64(g.get(), "start_iteration");
    c.iteration = in.i64(g.get(), "iteration");
    c.loss = in.f64(g.get(), "loss");
    c.lr = in.f64(g.get(), "lr");
    c.samples_per_s = in.f64(g.get(), "samples_per_s");
    for (size_t n : {c.loss.size(), c.lr.size(), c.samples_per_s.size()})
      if (n != c.iteration.size()) throw_config("{}: /curve columns differ in length", file_path);
  }
  r.provenance = read_provenance_h5(in, "provenance");
  return r;
}

}  // namespace cnnscale
