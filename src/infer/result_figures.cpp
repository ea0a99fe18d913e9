// Measured inference figures as the typed result (see result_figures.hpp).
#include "infer/result_figures.hpp"

#include <algorithm>
#include <cmath>

namespace cnnscale::infer {

InferInt8 int8_result(const InferenceEngine& engine, const std::string& calibration) {
  const Int8Spec& q = *engine.int8();
  const std::vector<std::string> ran = engine.int8_layers_run();
  std::vector<std::string> kept = q.kept;
  for (const std::string& name : q.int8)
    if (std::find(ran.begin(), ran.end(), name) == ran.end()) kept.push_back(name);
  InferInt8 i;
  i.calibration = calibration;
  i.int8_layers = ran;
  i.int8_outputs = q.outputs;
  i.kept = kept;
  i.between_layers = precision_name(engine.options().precision);
  return i;
}

InferLatency latency_result(const LatencyStats& s) {
  InferLatency l;
  l.count = s.count;
  l.mean_s = s.mean;
  l.p50_s = s.p50;
  l.p90_s = s.p90;
  l.p99_s = s.p99;
  l.max_s = s.max;
  return l;
}

InferBatch batch_result(const BatchFigures& f) {
  InferBatch b;
  b.batch = f.batch;
  b.images_per_s = f.images_per_s;
  b.window_batches = f.window_batches;
  b.window_seconds = f.window_seconds;
  b.latency_batches = f.latency.count;
  b.latency_mean_s = f.latency.mean;
  b.latency_p50_s = f.latency.p50;
  b.latency_p90_s = f.latency.p90;
  b.latency_p99_s = f.latency.p99;
  b.joules_per_image = number_or_null(f.joules_per_image);
  b.images_per_joule = number_or_null(f.images_per_joule);
  b.watts = number_or_null(f.watts);
  b.energy_source = text_or_null(f.energy_source);
  b.sm_clock_mhz = number_or_null(f.sm_clock_mhz);
  b.peak_memory_bytes = f.peak_memory_bytes;
  return b;
}

InferServer server_result(const ServerResult& r) {
  InferServer s;
  s.offered_rate = r.offered_rate;
  s.achieved_rate = r.achieved_rate;
  s.queries = r.queries;
  s.batches = r.batches;
  s.mean_batch = r.mean_batch;
  s.latency_bound_s = r.latency_bound;
  s.latency = latency_result(r.latency);
  s.within_bound = r.within_bound;
  s.meets_bound = r.meets_bound;
  return s;
}

InferMaxBatch max_batch_result(const MaxBatch& m, int64_t chosen, const std::vector<int64_t>& beyond) {
  InferMaxBatch out;
  out.batch = chosen;
  out.limit_bytes = m.limit_bytes;
  out.fixed_bytes = m.fixed_bytes;
  out.bytes_per_sample = m.bytes_per_sample;
  out.listed_beyond = beyond;
  return out;
}

void add_job_figures(InferBatch& b, const std::vector<double>& images_per_s, const std::vector<double>& watts) {
  double sum_ips = 0, sum_w = 0;
  bool any_w = false;
  std::vector<InferRankFigures> ranks;
  for (size_t r = 0; r < images_per_s.size(); ++r) {
    const bool read = std::isfinite(watts[r]);
    sum_ips += images_per_s[r];
    any_w |= read;
    sum_w += read ? watts[r] : 0;
    InferRankFigures k;
    k.rank = static_cast<int64_t>(r);
    k.images_per_s = images_per_s[r];
    k.watts = read ? NumberFigure(watts[r]) : NumberFigure::null();
    ranks.push_back(k);
  }
  b.ranks = ranks;
  b.job_images_per_s = sum_ips;
  b.job_watts = any_w ? NumberFigure(sum_w) : NumberFigure::null();
  b.job_images_per_joule = any_w && sum_w > 0 ? NumberFigure(sum_ips / sum_w) : NumberFigure::null();
}

void add_scenario_figures(InferResult& r, const ScenarioFigures& f, double rate, const std::vector<double>& rates) {
  double job_rate = 0;
  for (double x : rates) job_rate += x;
  r.prepared_batch_sizes = f.prepared_sizes;
  r.padded_fraction = f.padded_fraction;
  r.queries_per_s = rate;
  r.job_queries_per_s = job_rate;
  r.rank_queries_per_s = rates;
  r.joules_per_query = number_or_null(f.energy.joules_per_sample);
  r.watts = number_or_null(f.energy.watts);
  r.energy_source = text_or_null(f.energy.source);
  if (f.single_stream) {
    r.queries = f.single_stream->queries;
    r.latency = latency_result(f.single_stream->latency);
  }
  if (f.server) r.server = server_result(*f.server);
  if (f.search) {
    r.best_rate = f.search->best_rate;
    r.resolution = f.search->resolution;
    std::vector<InferServer> trials;
    for (const ServerResult& t : f.search->trials) trials.push_back(server_result(t));
    r.trials = trials;
  }
}

}  // namespace cnnscale::infer
