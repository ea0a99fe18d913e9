// The int8 form of an inference network: each Convolution named in a calibration table gains the
// `int8_input_scale` key (its input's scale, threshold / 127), with which ConvolutionLayer runs as
// an int8 convolution (its input quantised with that scale, its filters per output channel, the
// products summed in int32: Backend::conv_forward_int8). Like fold.hpp and fuse.hpp, the result is
// a NetSpec of its own, loaded from YAML text; names, parameters and state are unchanged.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "net/net.hpp"

namespace cnnscale {

struct Int8Spec {
  NetSpec spec;
  std::vector<std::string> int8;  // the convolutions that run in int8, in network order
  std::vector<std::string> kept;  // convolutions and fully connected layers that keep the net's precision
};

// `input_scales`: layer name -> its input's scale (> 0). A name that is no Convolution or
// InnerProduct of `spec` is a ConfigError (a table of another network). Convolutions with groups
// stay in the network's precision (cuDNN's int8 engines serve ungrouped ones), as do fully
// connected layers, which run as in the rest of the network.
Int8Spec with_int8_scales(const NetSpec& spec, const std::map<std::string, double>& input_scales);

}  // namespace cnnscale
