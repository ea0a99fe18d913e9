// What `cnnscale time` measures, below the command: the network as training runs it (epilogues
// fused unless asked not to) or as `cnnscale infer` runs it (batch norms folded, epilogues fused,
// the calibrated convolutions in int8), each rewrite read from the one before, timed layer by layer
// with the training step's own update at learning rate 0. The command parses and prints.
#pragma once
#include <cstddef>
#include <string>

#include "backend/backend.hpp"
#include "measure/layer_timing.hpp"
#include "net/net.hpp"

namespace cnnscale {

struct TimeRequest {
  NetSpec spec;                // as written
  LayerTimingOptions options;  // batch, iterations, warm-up, seed, precision, inference
  bool fuse = true;            // batch norms and convolutions include their ReLU (and residual sum)
  bool fold = true;            // with options.inference: fold batch norms into the convolutions
  std::string calibration;     // with options.inference: a calibration table; its convolutions run in int8
};

struct TimedNetwork {
  LayerTimingResult result;
  std::size_t fused_epilogues = 0;  // batch norms and convolutions that include their ReLU
  std::size_t folded_batch_norms = 0;
  std::size_t int8_layers = 0, int8_outputs = 0;
};

// Refuses what does not go together (a ConfigError): --no-fold or a calibration without inference.
void check_time_request(const TimeRequest& r);

// `backend` made for r.options.precision.
TimedNetwork time_network(const TimeRequest& r, Backend& backend);
// The same network with other timing options (more or fewer iterations, kernel profiling's marks).
TimedNetwork time_network(const TimeRequest& r, Backend& backend, const LayerTimingOptions& options);

}  // namespace cnnscale
