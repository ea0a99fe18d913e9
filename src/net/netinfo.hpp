// netinfo: per-layer shapes, parameters, forward MACs and bytes (the study's Table 1, seed 003)
// as a text table or JSON, with the computation-to-communication ratios defined in netinfo.cpp.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "net/net.hpp"

namespace cnnscale {

struct NetTotals {
  int64_t params = 0;
  int64_t forward_macs = 0;   // per sample
  int64_t bytes_read = 0;     // per sample, forward (activations + parameters, fp32)
  int64_t bytes_written = 0;  // per sample, forward
  // The study's CTC ratio: forward operations per fp32 value read (Table 1 of seed 003).
  double ctc = 0;
  // Data-parallel training at `batch` samples per rank: FLOPs per iteration (2 x 3 x MACs x batch)
  // over the bytes of gradients each rank allreduces per iteration (4 x params).
  int64_t batch = 1;
  double training_flops_per_iteration = 0;
  int64_t gradient_bytes = 0;
  double flops_per_gradient_byte = 0;
};

// Which operation and byte counts netinfo prints: its own (forward multiply-accumulates and the
// bytes the layers report), or, beside them, the study's (net/study_count.hpp, Eqs. 1-9).
enum class Counting { Ours, Study };

NetTotals net_totals(const NetSpec& spec, int64_t batch);
std::string netinfo_table(const NetSpec& spec, int64_t batch, Counting counting = Counting::Ours);
nlohmann::json netinfo_json(const NetSpec& spec, int64_t batch, Counting counting = Counting::Ours);

}  // namespace cnnscale
