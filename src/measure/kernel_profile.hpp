// The kernel-level view of a step (issue 57, after Li et al.'s Fig. 4 and Table II): every kernel
// the GPU ran, attributed to the layer and pass that launched it, rolled up per owner and kernel.
// The records are what a CUDA profiling feed (CUPTI's kernel and external-correlation activity
// records) gives; this file holds only what follows from them, so that the attribution and the
// arithmetic are tested on recorded feeds without a GPU. The feed belongs in backend/cuda, where
// all CUDA code lives.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backend/kernel_trace.hpp"
#include "measure/occupancy.hpp"

namespace cnnscale::measure {

// The part of the step a kernel belongs to. Update, exchange and input copy belong to the step (their
// layer name may name a bucket or stay empty); Unattributed is a kernel no owner claimed (a library's
// own housekeeping, or a launch outside every pushed range), counted apart rather than guessed.
enum class KernelPass { Forward, Backward, Update, Exchange, InputCopy, Unattributed };

const char* kernel_pass_name(KernelPass pass);

struct KernelOwner {
  std::string layer;
  KernelPass pass = KernelPass::Unattributed;
  auto operator<=>(const KernelOwner&) const = default;
};

KernelOwner unattributed_owner();
// "conv1 forward", "update", "unattributed".
std::string owner_label(const KernelOwner& owner);

using cnnscale::ExternalCorrelation;
using cnnscale::KernelLaunch;

// What the occupancy calculator reads of a launch. A launch with a carveout runs on an SM whose
// shared memory is that carveout (`sm` lowered to it by sm_limits_for_launch).
LaunchResources launch_resources(const KernelLaunch& launch);
SmLimits sm_limits_for_launch(const SmLimits& sm, const KernelLaunch& launch);

// A traced kernel and whose it is.
struct KernelRecord : TracedKernel {
  KernelOwner owner;         // set by attribute_kernels
  uint64_t external_id = 0;  // the part it was linked to; 0 when unattributed
  int64_t step = -1;         // the recorded step (or bench call) its part ran in; -1 when unattributed
};

// What the GPU side records beside the kernels: the owner of each external id it pushed
// (cuptiActivityPushExternalCorrelationId around each layer's pass), and the links CUPTI made.
struct AttributionInput {
  std::map<uint64_t, KernelOwner> owner_of_external;
  std::vector<ExternalCorrelation> links;
};

struct AttributionCounts {
  int64_t attributed = 0;
  int64_t unattributed = 0;
};

// Sets each record's owner from its correlation id alone, never from its name: two layers may run
// kernels of the same name, and a name says nothing about who launched it. A record without a link
// is unattributed. Throws RuntimeError for a feed that contradicts itself (a correlation id linked
// to two external ids, a link to an external id nobody pushed): attributing it would be a guess.
AttributionCounts attribute_kernels(std::vector<KernelRecord>& records, const AttributionInput& input);

// One kernel of one owner with one launch configuration: launches that differ in grid, block,
// registers or shared memory are rows of their own, since their occupancy differs.
struct KernelSummary {
  KernelOwner owner;
  std::string name;
  KernelLaunch launch;
  int64_t launches = 0;
  double launches_per_step = 0.0;
  int64_t total_ns = 0;
  double mean_ns = 0.0;
  // Of the owner's kernel time, and of the step's: the step's kernel time is the sum of all its
  // kernels' durations (unattributed ones included), as Li et al.'s runtime breakdowns are; kernels
  // on concurrent streams each count in full, so it can exceed the step's wall time.
  double share_of_owner = 0.0;
  double share_of_step = 0.0;
  Occupancy occupancy;
};

struct KernelProfile {
  int64_t profiled_steps = 0;
  int64_t kernel_ns = 0;               // the sum of all records' durations
  std::vector<KernelSummary> kernels;  // by owner, then by total time (longest first)
  // The gaps before each owner's launches, summed over the profiled steps: for each kernel, the time
  // from the latest end of every kernel before it to its start, where no kernel ran. A part's events
  // count these gaps (launch turnaround, the host falling behind, and copies and memsets, which the
  // trace does not record), its kernels do not. A step's first kernel adds none: what comes before
  // it is between steps.
  std::map<KernelOwner, int64_t> gap_before_ns;
};

// Throws ConfigError for profiled_steps < 1, a record ending before it starts, or a launch the
// occupancy calculator refuses (which a real feed never holds: its launches ran).
KernelProfile summarize_kernels(const std::vector<KernelRecord>& records, int64_t profiled_steps, const SmLimits& sm);

// The n rows with the most time in the step, longest first (ties by owner, then name).
std::vector<KernelSummary> top_kernels(const KernelProfile& profile, size_t n);

}  // namespace cnnscale::measure
