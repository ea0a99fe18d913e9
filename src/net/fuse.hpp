// Epilogue fusion for training. In a residual network most batch norms are followed by a ReLU, or
// by the shortcut's Eltwise sum and then a ReLU; in AlexNet-style networks most convolutions are
// followed by a ReLU. Each of those layers is another full pass over an activation, forward and
// backward. cuDNN's channels-last batch norm can apply both inside its own kernels (BatchNormLayer's
// `relu` key and second bottom), its graph API can fuse a convolution with its bias and ReLU
// (ConvolutionLayer's `relu` key), and cuBLASLt's epilogues a fully connected layer's bias and ReLU
// (InnerProductLayer's `relu` key), so the training network is rewritten to use them, as fold.hpp
// rewrites the inference network: the result is a NetSpec of its own, loaded from YAML text, and
// computes the same function with the same parameters.
#pragma once
#include <string>
#include <vector>

#include "net/net.hpp"

namespace cnnscale {

// The layers one fused BatchNorm, Convolution or InnerProduct took over (layer names).
struct FusedEpilogue {
  std::string layer;  // the BatchNorm, Convolution or InnerProduct
  std::vector<std::string> absorbed;  // the ReLU, or the Eltwise and the ReLU
};

struct FusedSpec {
  NetSpec spec;
  std::vector<FusedEpilogue> fused;  // in network order
};

// A BatchNorm (one bottom, no `relu` yet) fuses:
//  - a ReLU that is the only reader of its top: the BatchNorm gains `relu: true` and the ReLU's top;
//  - an Eltwise sum of exactly two bottoms with coefficients 1 that is the only reader of its top,
//    when that sum's only reader is a ReLU: the BatchNorm gains the sum's other bottom as its second
//    bottom (the addend), `relu: true` and the ReLU's top.
// All layers involved must run in the same phases. The fused layer keeps the BatchNorm's name (its
// parameters and state are unchanged: checkpoints, which name every array, carry over both ways)
// and its place, unless its addend is computed later in the network (a projection shortcut listed
// after the block's second BatchNorm): then it takes the sum's place. Weights are initialised in
// network order from one generator, so such a move changes the initial weights only if that
// BatchNorm has random fillers (the shipped networks' are constant).
// A Convolution or InnerProduct (no `relu` yet) fuses a ReLU that is the only reader of its top, in
// the same phases: it gains `relu: true` and the ReLU's top, and keeps its name and place. A
// Convolution with a bias also fuses a sum and ReLU as a BatchNorm does (its addend its second
// bottom), which training networks, whose convolutions feed batch norms, never show, but an
// inference network whose batch norms were folded (fold.hpp) shows in every residual block.
// Everything else is kept.
FusedSpec fuse_epilogues(const NetSpec& spec);

}  // namespace cnnscale
