// Per-layer forward/backward timing of a network (`cnnscale time NET`, like `caffe time`): timing
// events around each layer's forward and backward on the backend's stream (CUDA events on GPU,
// host clocks on CPU), averaged over the iterations after a warm-up, hotspots first.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "core/precision.hpp"
#include "measure/kernel_scopes.hpp"
#include "net/net.hpp"

namespace cnnscale {

struct LayerTimingOptions {
  int64_t batch = 64;
  int64_t iterations = 50;  // timed, after the warm-up
  int64_t warmup = 5;       // run, not timed (first-call costs: cuDNN algorithm search, allocations)
  uint64_t seed = 1;
  // The run's precision: the net computes in its compute_dtype (bf16/f16 activations and weight
  // copies: mixed precision); the backend must have been made with the same one.
  Precision precision = Precision::FP32;
  // The step's update, made once for the net under timing; it must leave the weights as they are
  // (learning rate 0), so every iteration does the same work. Unset: one plain sgd_update over the
  // flat buffers. The training command's solver is above this layer, so the caller hands it in.
  std::function<std::function<void()>(Net&)> make_update;
  // Forward passes alone, in the test phase, of a net built for inference (NetUse::Inference, its
  // 16-bit weight copies made once): what `cnnscale infer` runs, layer by layer. Backward, update
  // and make_update are not run; their times stay 0.
  bool inference = false;
  // Kernel profiling (`time --kernels`, `--metrics`): the recorded iterations run inside
  // around_recorded (which starts a tracer or profiler before them and stops it after, so that the
  // warm-up's kernels stay out), and mark their parts on `scopes` (input copy, each layer's forward
  // and backward, the loss's tail of each, the update). Unset: plain timing.
  std::function<void(const std::function<void()>& recorded)> around_recorded;
  measure::StepScopes* scopes = nullptr;
};

struct LayerTime {
  std::string name, type;
  double forward_ms = 0, backward_ms = 0;  // mean per iteration
  double share = 0;                        // (forward + backward) / the sum over all layers
  // How the backend ran it, where it chose (Layer::implementation: a convolution's form and
  // algorithm per direction); empty otherwise.
  std::string implementation;
  // Device memory the layer holds (Li et al.'s per-layer memory): its outputs at the batch in their
  // storage type, and its parameters with every copy the run keeps (gradients when training, fp32
  // masters beside 16-bit weights). Workspaces are shared and counted in peak_memory_bytes only.
  int64_t activation_bytes = 0, param_bytes = 0;
};

struct LayerTimingResult {
  std::vector<LayerTime> layers;  // descending forward + backward time (hotspots first)
  int64_t batch = 0, iterations = 0, warmup = 0;
  // Means per iteration: the whole forward (loss combination included), the whole backward, and a
  // full step (forward, backward and the SGD update of every parameter).
  double forward_ms = 0, backward_ms = 0, update_ms = 0, step_ms = 0;
  // The part of forward_ms before the first layer: the input's compute copy, and the weights'
  // (16-bit, or channels-last filters) where the update did not already write them from the fp32
  // masters. 0 where there are none (fp32 on the CPU); in no layer's time.
  double copies_ms = 0;
  Precision precision = Precision::FP32;
  int64_t peak_memory_bytes = 0;  // the most the backend held at once (Backend::memory_stats), net included
  // Li et al.'s transfer overhead: a step's host -> device copy of its batch (input and labels) from
  // pinned host memory, mean over `iterations` copies between two timing events; 0 on the CPU, where
  // the batch is already in host memory.
  double h2d_ms = 0;
  int64_t h2d_bytes = 0;
};

// The layers' times summed by layer type (Li et al.'s Fig. 2: the share of convolution, pooling,
// normalisation, fully connected, ReLU, ... in forward + backward), largest first, ties in order of
// first appearance. A fused row counts as its own type (a Convolution with its ReLU is Convolution).
struct TypeTime {
  std::string type;
  int64_t layers = 0;
  double forward_ms = 0, backward_ms = 0;
  double share = 0;  // (forward + backward) / the sum over all layers; 0 when that sum is 0
};
std::vector<TypeTime> time_by_type(const std::vector<LayerTime>& layers);

// Builds the net on `backend` with random inputs and labels and times it. Throws ConfigError for
// iterations < 1, warmup < 0 or batch < 1.
LayerTimingResult time_layers(const NetSpec& spec, Backend& backend, const LayerTimingOptions& options);

}  // namespace cnnscale
