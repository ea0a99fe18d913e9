// What the host offers a sweep: its GPUs (CUDA_VISIBLE_DEVICES, the CUDA device count, or inside
// Slurm the allocation's), whether mpirun spreads ranks over hosts, and why a run does not fit.
#include <fmt/format.h>

#include <cstdlib>
#include <optional>
#include <sstream>

#include "backend/devices.hpp"
#include "experiment/experiment.hpp"

namespace cnnscale {

namespace {

// "4" or Slurm's "h200:4" -> 4; nullopt when it is neither.
std::optional<int> count_value(const char* v) {
  if (!v) return std::nullopt;
  std::string s(v);
  s = s.substr(s.rfind(':') + 1);
  if (s.empty() || s.size() > 6 || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoi(s);
}

}  // namespace

HostInfo HostInfo::detect() {
  return detect([](const char* name) -> const char* { return std::getenv(name); });
}

HostInfo HostInfo::detect(const Getenv& getenv) {
  HostInfo h;
  // This node's GPUs: CUDA_VISIBLE_DEVICES first (what the runs will see; no driver needed to read
  // it), else the CUDA device count.
  auto this_node = [&](std::optional<int>& count, std::string& source) {
    if (const char* v = getenv("CUDA_VISIBLE_DEVICES")) {
      std::string s(v);
      int n = 0;
      std::stringstream ss(s);
      for (std::string item; std::getline(ss, item, ',');)
        if (!item.empty()) ++n;
      if (s == "-1" || s == "NoDevFiles") n = 0;
      count = n;
      source = fmt::format("CUDA_VISIBLE_DEVICES={}", s);
      return;
    }
    if (cuda_backend_built()) {
      count = cuda_device_count();
      source = "CUDA device count";
    }
  };
  h.in_slurm = getenv("SLURM_JOB_ID") != nullptr;
  if (h.in_slurm) {
    // The runs are srun steps of this allocation: its nodes, each with as many GPUs as this one.
    const auto nodes = count_value(getenv("SLURM_JOB_NUM_NODES")).value_or(0);
    h.nodes = nodes > 0 ? nodes : std::max(1, count_value(getenv("SLURM_NNODES")).value_or(1));
    for (const char* name : {"SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE"}) {
      const char* v = getenv(name);
      if (auto n = count_value(v)) {
        h.gpus_per_node = n;
        h.gpus_source = fmt::format("{}={}", name, v);
        break;
      }
    }
    if (!h.gpus_per_node) this_node(h.gpus_per_node, h.gpus_source);
    if (h.gpus_per_node) h.gpus = h.nodes * *h.gpus_per_node;
    return h;
  }
  this_node(h.gpus, h.gpus_source);
  h.gpus_per_node = h.gpus;
  if (const char* args = getenv("MPIRUN_ARGS")) {
    std::stringstream ss(args);
    for (std::string w; ss >> w;)
      for (const std::string f : {"--hostfile", "-hostfile", "--machinefile", "-machinefile", "-H", "--host", "-host"})
        if (w == f || w.rfind(f + "=", 0) == 0) h.hosts_from_launcher = true;
  }
  return h;
}

std::string HostInfo::lacks_gpus_for(int64_t ranks) const {
  if (!check_gpus || hosts_from_launcher || !gpus || ranks <= *gpus) return "";
  if (in_slurm)
    return fmt::format("{} rank(s) need {} GPU(s), but the Slurm allocation has {} ({} node(s) x {} GPU(s): {})", ranks,
                       ranks, *gpus, nodes, gpus_per_node.value_or(0), gpus_source);
  return fmt::format("{} rank(s) need {} GPU(s) on one node, but only {} visible ({})", ranks, ranks, *gpus,
                     gpus_source);
}

std::string HostInfo::lacks_gpu_index(int64_t index) const {
  const std::optional<int> per_node = gpus_per_node ? gpus_per_node : gpus;
  if (!check_gpus || hosts_from_launcher || !per_node || index < *per_node) return "";
  if (in_slurm)
    return fmt::format("GPU {} does not exist: the Slurm allocation has {} per node ({})", index, *per_node,
                       gpus_source);
  return fmt::format("GPU {} does not exist: {} visible ({})", index, *per_node, gpus_source);
}

}  // namespace cnnscale
