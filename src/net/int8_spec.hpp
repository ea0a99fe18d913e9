// The int8 form of an inference network: each Convolution and InnerProduct named in a calibration
// table gains the `int8_input_scale` key (its input's scale, threshold / 127), with which the layer
// runs in int8 (its input quantised with that scale, its weights per output channel, the products
// summed in int32: Backend::conv_forward_int8, Backend::linear_forward_int8). Between two int8
// convolutions the activation itself stays int8: a convolution whose output (after its fused ReLU)
// only int8 convolutions read, as their input with one shared scale or as a residual addend, gains
// `int8_output_scale` (that scale) and stores its output quantised; the readers of it as an addend
// gain `int8_addend_scale`. Like fold.hpp and fuse.hpp, the result is a NetSpec of its own, loaded
// from YAML text; names, parameters and state are unchanged.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "net/net.hpp"

namespace cnnscale {

struct Int8Spec {
  NetSpec spec;
  std::vector<std::string> int8;     // the layers that run in int8, in network order
  std::vector<std::string> kept;     // convolutions and fully connected layers that keep the net's precision
  std::vector<std::string> outputs;  // the int8 convolutions whose outputs stay int8
};

// An int8 convolution pads its input channels to a multiple of 16 on a GPU (cuDNN's int8 engines
// want that): for an input of fewer channels, such as an RGB or grey image, that multiplies the
// work up to 16-fold for a layer holding a small share of the network's MACs (ResNet-50's 7x7 stem
// ran some 8x longer in int8 than in bf16: docs/measurements/2026-11-25-convolution-choices.md), so
// such a convolution keeps the network's precision, on every backend alike so that accuracy figures
// match what runs.
inline constexpr int64_t kInt8MinInputChannels = 16;

// `input_scales`: layer name -> its input's scale (> 0). A name that is no Convolution or
// InnerProduct of `spec` is a ConfigError (a table of another network). Convolutions with groups
// stay in the network's precision (cuDNN's int8 engines serve ungrouped ones), as do those with
// fewer than kInt8MinInputChannels input channels. `int8_activations` false: no output stays int8
// (every int8 layer quantises its own input), for a net whose int8 convolutions may not run --
// a GPU net of NCHW activations, which cuDNN's int8 engines do not take: there each layer falls back
// to the net's precision with a warning, which an int8 operand would make impossible.
Int8Spec with_int8_scales(const NetSpec& spec, const std::map<std::string, double>& input_scales,
                          bool int8_activations = true);

// Whether a net of `compute` activations on `backend` runs int8 activations (with_int8_scales'
// `int8_activations`): on the CPU, and on a GPU whose activations are channels-last.
bool int8_activations_run(const Backend& backend, DType compute);

}  // namespace cnnscale
