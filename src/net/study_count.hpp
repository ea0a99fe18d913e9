// The study's counting (Castro et al., seed 003, Section 4, Eqs. 1-9): operations, values read and
// values written per sample in a forward pass, layer by layer, as its Table 1 counts them. netinfo
// prints it beside its own counting (`--counting study`); the definitions, and which of the study's
// choices its own CaffeNet row pins, are in docs/seeds.md ("Table 1").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "net/net.hpp"

namespace cnnscale {

// What the equations need of one layer, per sample; counts are fp32 values.
struct StudyLayer {
  std::string type;           // the layer type (Convolution, InnerProduct, Pooling, ReLU, ...)
  int64_t input = 0;          // values of all bottoms: Eq. 8's first term (an Eltwise reads both)
  int64_t first_input = 0;    // values of the first bottom: w_in h_in ch_in of Eqs. 4-7
  int64_t output = 0;         // values of the tops: Eq. 9 (w_out h_out ch_out)
  int64_t out_channels = 0;   // ch_out of the first top
  int64_t params = 0;         // learnable values: Eq. 8's second term (weights and biases)
  int64_t weights = 0;        // convolution / fully connected weights, without the bias
  bool bias = false;          // a convolution's bias: Eq. 1's ch_out extra additions
  int64_t window = 0;         // pooling: k_w k_h of Eq. 3 (the whole plane for global pooling)
  int64_t local_size = 0;     // LRN: channels each window spans
  bool fused_relu = false;    // a convolution or fully connected layer that applies its ReLU itself
  bool runs_in_training = true;  // false for test-only layers (Accuracy): not in a training forward
};

struct StudyCount {
  int64_t ops = 0;      // arithmetic operations
  int64_t read = 0;     // values read (activations + parameters)
  int64_t written = 0;  // values written
};

// One layer, from its shapes alone (a pure function; tests check it equation by equation).
StudyCount study_count(const StudyLayer& layer);

// Every layer of a network, in order, with what its file and inferred shapes say.
std::vector<StudyLayer> study_layers(const NetSpec& spec);

// The sum over the network, and the study's CTC: operations per value read.
struct StudyTotals {
  StudyCount count;
  double ctc = 0;
};
StudyTotals study_totals(const std::vector<StudyLayer>& layers);

}  // namespace cnnscale
