// Batch-norm folding for inference. At test time a BatchNorm is a per-channel affine map of its
// input, y = a * x + b with a = scale / sqrt(running_var + eps) and b = shift - running_mean * a;
// when its input is a convolution's output that nothing else reads, the map can be moved into that
// convolution's weights and bias, and the inference network skips one pass over the activation.
// Two steps, because the folded network is a network of its own: fold_batch_norm turns the
// trained NetSpec into the inference NetSpec, and copy_folded_weights fills a Net built from it
// with the trained Net's parameters, folding where the spec said so.
#pragma once
#include <string>
#include <vector>

#include "net/net.hpp"

namespace cnnscale {

// A BatchNorm layer of the trained network and the convolution it was folded into (layer names).
struct FoldedPair {
  std::string convolution, batch_norm;
};

struct FoldedSpec {
  NetSpec spec;                    // the inference network
  std::vector<FoldedPair> folded;  // in network order
};

// The inference form of `trained`. A BatchNorm folds when its bottom is the top of a Convolution
// that runs in the same phases and whose top no other layer reads: the BatchNorm disappears, the
// convolution gains a bias (if it had none) and produces the BatchNorm's top instead of its own,
// so every later layer reads the blobs it read before. Other BatchNorms (after pooling, after a
// fully-connected layer, after a convolution whose output is also read elsewhere) stay. Layer
// names, the input and every other layer are kept; the convolution's own top, which only the
// BatchNorm read, is the one blob the folded network lacks. The result is loaded from YAML text
// (see fold.cpp), so a problem with it is a ConfigError naming that text's lines.
FoldedSpec fold_batch_norm(const NetSpec& trained);

// Writes every parameter master and every state tensor of `folded` (a Net built from `f.spec`)
// from `trained` (a Net built from the spec `f` was made from, its weights loaded). Unchanged
// layers are copied; a folded convolution gets, per output channel k, with
// s[k] = scale[k] / sqrt(running_var[k] + eps) of its BatchNorm:
//   weight'[k] = weight[k] * s[k],   bias'[k] = (bias[k] - running_mean[k]) * s[k] + shift[k]
// (bias[k] = 0 when it had none), computed in double on the host from the f32 values and rounded
// once. The 16-bit compute copies of a mixed-precision net follow, since every forward refreshes
// them from the masters. RuntimeError when the two nets do not match `f`.
void copy_folded_weights(const Net& trained, const FoldedSpec& f, Net& folded);

}  // namespace cnnscale
