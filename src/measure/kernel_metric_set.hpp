// The hardware metrics cnnscale reports per kernel (`--metrics`), each declared once: our key, the
// CUPTI (Nsight Compute) metrics it is computed from and how, its unit and label, and which of Li
// et al.'s nvprof metrics (their Fig. 6) it stands for on Hopper. The backend profiles the CUPTI
// names (backend/kernel_trace.hpp: KernelMetricProfiler); the values follow from them here, so the
// arithmetic is tested on recorded values without a GPU.
#pragma once
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cnnscale::measure {

enum class MetricFormula {
  Direct,    // the CUPTI value times `scale`
  Quotient,  // numerator / denominator times `scale`; no value where the denominator is 0
};

struct KernelMetricDefinition {
  const char* key;    // our name: a schema column, a --metrics value
  const char* label;  // for tables and figure axes
  const char* unit;   // "%", "inst/cycle", "sectors/request"
  MetricFormula formula;
  const char* numerator;    // the CUPTI metric (the only one for Direct)
  const char* denominator;  // Quotient only; "" otherwise
  double scale;             // 1 for Direct
  // nvprof's counterpart (NVIDIA's nvprof-to-Nsight-Compute table); in_li_fig6: one of the six
  // metrics of Li et al.'s Fig. 6, which this key takes the place of on Hopper.
  const char* nvprof;
  bool in_li_fig6;
  const char* meaning;  // one sentence for the docs and --help
};

// In the order tables and figures show them. Every CUPTI name here is one CUPTI 13's profiler host
// accepts for GH100 (checked with cuptiProfilerHostGetMetricProperties).
std::span<const KernelMetricDefinition> kernel_metric_catalogue();

// Throws ConfigError naming the key and every known key.
const KernelMetricDefinition& kernel_metric(std::string_view key);

// A --metrics value: "default" (every key, in catalogue order) or a comma-separated list of keys
// (in the order given). Throws ConfigError for an unknown, repeated or empty key.
std::vector<std::string> parse_metric_keys(std::string_view spec);

// The CUPTI metrics the keys need, each once, in the order the keys first need them.
std::vector<std::string> cupti_metrics_for(const std::vector<std::string>& keys);

// Our values from one kernel's evaluated CUPTI values. A key whose inputs are missing or not finite,
// or whose denominator is 0, has no entry: no value is ever shown as 0.
std::map<std::string, double> kernel_metric_values(const std::vector<std::string>& keys,
                                                   const std::map<std::string, double>& cupti_values);

}  // namespace cnnscale::measure
