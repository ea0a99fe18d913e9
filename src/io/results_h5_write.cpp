// run.h5 of a run folder: /config, /system, /timeline, /power, /epochs, /summary, /split, /curve
// and /provenance (schema in results/README.md), written through core/hdf5_file with strings as
// variable-length UTF-8.
#include <fmt/format.h>

#include "core/error.hpp"
#include "core/hdf5_file.hpp"
#include "io/results_files.hpp"
#include "io/results_writer.hpp"
#include "io/summary_schema.hpp"

namespace cnnscale {

namespace {

void require_same_length(size_t expected, size_t got, const std::string& what) {
  if (expected != got) throw_runtime("results: {} has {} values, expected {}", what, got, expected);
}

// /split: the policy, the shares in force from each change on (a (changes, ranks) array, so h5py
// gives it as one matrix), the start-up probe and the per-rank models, each as columns.
void write_split(h5::Writer& w, const SplitRecord& split) {
  h5::Handle g = w.group("/split");
  w.attr_str(g.get(), "policy", split.policy);
  if (split.refine_every >= 0) w.attr_i64(g.get(), "refine_every", split.refine_every);
  if (!split.refine_model.empty()) w.attr_str(g.get(), "refine_model", split.refine_model);
  const size_t ranks = split.changes.empty() ? 0 : split.changes.front().shares.size();
  std::vector<int64_t> iteration, shares;
  for (const SplitChange& c : split.changes) {
    require_same_length(ranks, c.shares.size(), fmt::format("split shares at iteration {}", c.iteration));
    iteration.push_back(c.iteration);
    shares.insert(shares.end(), c.shares.begin(), c.shares.end());
  }
  h5::Handle changes = w.group("/split/changes");
  w.i64(changes.get(), "iteration", iteration);
  w.dataset(changes.get(), "shares", {iteration.size(), ranks}, H5T_STD_I64LE, H5T_NATIVE_INT64, shares.data());

  for (const auto& [name, points] :
       {std::pair{"/split/probe", &split.probe}, std::pair{"/split/steps", &split.steps}}) {
    h5::Handle group = w.group(name);
    std::vector<int64_t> rank, batch;
    std::vector<double> seconds, joules;
    for (const ProbePoint& p : *points) {
      rank.push_back(p.rank);
      batch.push_back(p.batch);
      seconds.push_back(p.seconds);
      joules.push_back(p.joules);
    }
    w.i64(group.get(), "rank", rank);
    w.i64(group.get(), "batch", batch);
    w.f64(group.get(), "seconds", seconds);
    w.f64(group.get(), "joules", joules);
  }
  h5::Handle exchange = w.group("/split/exchange");
  w.attr_f64(exchange.get(), "seconds", split.exchange_seconds);
  w.attr_f64(exchange.get(), "joules", split.exchange_joules);

  h5::Handle models = w.group("/split/models");
  std::vector<int64_t> model_rank;
  std::vector<double> a, b, c, d, wait;
  for (const RankModel& m : split.models) {
    model_rank.push_back(m.rank);
    a.push_back(m.seconds_fixed);
    b.push_back(m.seconds_per_sample);
    c.push_back(m.joules_fixed);
    d.push_back(m.joules_per_sample);
    wait.push_back(m.wait_watts);
  }
  w.i64(models.get(), "rank", model_rank);
  w.f64(models.get(), "seconds_fixed", a);
  w.f64(models.get(), "seconds_per_sample", b);
  w.f64(models.get(), "joules_fixed", c);
  w.f64(models.get(), "joules_per_sample", d);
  w.f64(models.get(), "wait_watts", wait);
}

}  // namespace

void write_results_h5(const std::string& path, const RunResults& r, const ResultsStep& step) {
  h5::Writer w(path, "results file");
  const hid_t root = w.root();
  w.attr_str(root, "format", std::string(kResultsFormat));
  w.attr_str(root, "experiment", r.experiment);
  w.attr_str(root, "run_id", r.run_id);
  w.attr_str(root, "status", r.status);

  {
    h5::Handle g = w.group("/config");
    w.text(g.get(), "text", r.config_text);
  }
  step("h5:config");

  {
    h5::Handle g = w.group("/system");
    w.attr_str(g.get(), "cuda_version", r.system.cuda_version);
    w.attr_str(g.get(), "cudnn_version", r.system.cudnn_version);
    w.attr_str(g.get(), "nccl_version", r.system.nccl_version);
    w.attr_str(g.get(), "mpi_version", r.system.mpi_version);
    w.attr_str(g.get(), "nccl_env", r.system.nccl_env);
    w.attr_str(g.get(), "engine_cache", r.system.engine_cache);
    w.strings(g.get(), "hosts", r.system.hosts);
    h5::Handle gpus = w.group("/system/gpus");
    std::vector<int64_t> rank;
    std::vector<std::string> host, name, uuid, driver, cc;
    std::vector<double> limit, clock;
    std::vector<int64_t> sms, memory;
    for (const auto& gi : r.system.gpus) {
      sms.push_back(gi.sm_count);
      memory.push_back(gi.memory_bytes);
      clock.push_back(gi.peak_sm_clock_mhz);
      cc.push_back(gi.compute_capability.value_or(""));
      rank.push_back(gi.rank);
      host.push_back(gi.host.value_or(""));  // "" is the unknown string in string columns
      name.push_back(gi.name.value_or(""));
      uuid.push_back(gi.uuid.value_or(""));
      driver.push_back(gi.driver.value_or(""));
      limit.push_back(gi.power_limit_w);
    }
    w.i64(gpus.get(), "rank", rank);
    w.strings(gpus.get(), "host", host);
    w.strings(gpus.get(), "name", name);
    w.strings(gpus.get(), "uuid", uuid);
    w.strings(gpus.get(), "driver", driver);
    w.f64(gpus.get(), "power_limit_w", limit);
    w.i64(gpus.get(), "sm_count", sms);
    w.i64(gpus.get(), "memory_bytes", memory);
    w.f64(gpus.get(), "peak_sm_clock_mhz", clock);
    w.strings(gpus.get(), "compute_capability", cc);
  }
  step("h5:system");

  {
    const Timeline& t = r.timeline;
    require_same_length(static_cast<size_t>(t.iterations() * t.ranks() * kTimelinePhaseCount), t.seconds().size(),
                        "timeline seconds");
    h5::Handle g = w.group("/timeline");
    h5::Handle ds = w.dataset(g.get(), "seconds",
                            {static_cast<hsize_t>(t.iterations()), static_cast<hsize_t>(t.ranks()),
                             static_cast<hsize_t>(kTimelinePhaseCount)},
                            H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, t.seconds().data());
    w.attr_str_array(ds.get(), "phases",
                     std::vector<std::string>(kTimelinePhaseNames.begin(), kTimelinePhaseNames.end()));
    w.attr_str(ds.get(), "units", std::string("s"));
    w.i64(g.get(), "iteration", t.iteration());
    w.dataset(g.get(), "warmup", {t.warmup().size()}, H5T_STD_U8LE, H5T_NATIVE_UINT8, t.warmup().data());
  }
  step("h5:timeline");

  {
    h5::Handle g = w.group("/power");
    w.attr_i64(g.get(), "count", static_cast<int64_t>(r.power.size()));
    for (size_t k = 0; k < r.power.size(); ++k) {
      const PowerSeries& p = r.power[k];
      const size_t n = p.t_s.size();
      require_same_length(n, p.power_w.size(), "power_w");
      require_same_length(n, p.avg_power_w.size(), "avg_power_w");
      require_same_length(n, p.energy_mj.size(), "energy_mj");
      require_same_length(n, p.sm_clock_mhz.size(), "sm_clock_mhz");
      require_same_length(n, p.temperature_c.size(), "temperature_c");
      h5::Handle s = w.group(fmt::format("/power/gpu{}", k));
      w.attr_i64(s.get(), "rank", p.rank);
      w.attr_str(s.get(), "uuid", p.uuid);
      w.f64(s.get(), "t_s", p.t_s);
      w.f64(s.get(), "power_w", p.power_w);
      w.f64(s.get(), "avg_power_w", p.avg_power_w);
      w.f64(s.get(), "energy_mj", p.energy_mj);
      w.f64(s.get(), "sm_clock_mhz", p.sm_clock_mhz);
      w.f64(s.get(), "temperature_c", p.temperature_c);
    }
  }
  step("h5:power");

  {
    h5::Handle g = w.group("/epochs");
    std::vector<int64_t> epoch, iteration;
    std::vector<double> loss, top1, top5, lr, seconds;
    for (const auto& e : r.epochs) {
      seconds.push_back(e.seconds);
      epoch.push_back(e.epoch);
      iteration.push_back(e.iteration);
      loss.push_back(e.loss);
      top1.push_back(e.top1);
      top5.push_back(e.top5);
      lr.push_back(e.lr);
    }
    w.i64(g.get(), "epoch", epoch);
    w.i64(g.get(), "iteration", iteration);
    w.f64(g.get(), "loss", loss);
    w.f64(g.get(), "top1", top1);
    w.f64(g.get(), "top5", top5);
    w.f64(g.get(), "lr", lr);
    w.f64(g.get(), "seconds", seconds);
  }
  step("h5:epochs");

  {
    auto write_values = [&](hid_t g, const SummaryValues& values) {
      for (const auto& [name, v] : values) w.attr_value(g, name, v);
    };
    h5::Handle g = w.group("/summary");
    write_values(g.get(), summary_values(r.summary));
    h5::Handle m = w.group("/summary/methods");
    for (const auto& [name, method] : r.methods) w.attr_str(m.get(), name, method);
    if (!r.rank_summary.empty()) {
      h5::Handle ranks = w.group("/summary/ranks");
      for (size_t i = 0; i < r.rank_summary.size(); ++i) {
        h5::Handle rg = w.group("/summary/ranks/" + std::to_string(i));
        write_values(rg.get(), summary_values(r.rank_summary[i]));
      }
    }
  }
  step("h5:summary");

  write_split(w, r.split);
  step("h5:split");

  {
    const TrainingCurve& c = r.curve;
    const size_t n = c.iteration.size();
    require_same_length(n, c.loss.size(), "curve loss");
    require_same_length(n, c.lr.size(), "curve lr");
    require_same_length(n, c.samples_per_s.size(), "curve samples_per_s");
    h5::Handle g = w.group("/curve");
    w.attr_i64(g.get(), "start_iteration", c.start_iteration);
    w.i64(g.get(), "iteration", c.iteration);
    w.f64(g.get(), "loss", c.loss);
    w.f64(g.get(), "lr", c.lr);
    w.f64(g.get(), "samples_per_s", c.samples_per_s);
  }
  step("h5:curve");

  if (r.provenance) write_provenance_h5(w, "/provenance", *r.provenance);
  step("h5:provenance");

  w.close();
}

}  // namespace cnnscale
