// Another framework's training throughput beside the runs' (`report --baseline FILE`): JSON lines,
// one measurement each, {"net", "batch" (global), "mode" (precision), "world" (GPUs),
// "samples_per_s"} and optionally "compile" (a compiler mode; "" or absent: eager) -- the format the
// PyTorch reference script of the study writes, one line per network, batch, precision and world
// size. A line with "error" (a configuration that failed there, e.g. out of memory) is counted and
// left out. The baseline table (report_tables.hpp) puts each point beside the runs of the same
// network, precision, global batch and GPU count, with both sides' strong and weak efficiency.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace cnnscale::report {

struct BaselinePoint {
  std::string source;     // the file's stem, and " compile=<mode>" where the line names one
  std::string net;        // the line's "net", its alias resolved (baseline_net)
  std::string precision;  // the line's "mode"
  int64_t batch = 0;      // global batch
  int64_t world = 0;      // GPUs
  double samples_per_s = 0;
};

struct BaselineFile {
  std::string path;
  std::vector<BaselinePoint> points;
  int failed = 0;  // lines with "error"
};

// This project's name of a network the reference script names otherwise ("resnetim", its
// ImageNet-shaped ResNet-34, is "resnet34"); any other name is kept.
std::string baseline_net(const std::string& name);

// ConfigError naming the file, and the line for a line that is not a JSON object, lacks a key or
// holds a wrong type or value; the file unreadable or without a single line: ConfigError too.
BaselineFile read_baseline(const std::string& path);

}  // namespace cnnscale::report
