// The study's counting, Eqs. 1-9 of Castro et al. (seed 003), with the choices its Table 1 pins:
//  - operations: Eq. 1 convolution k_w k_h w_out h_out (ch_in / group) ch_out multiply-accumulates,
//    plus ch_out additions with a bias (as the text says: ch_out, not per output value); Eq. 2 fully
//    connected w_in h_in ch_in ch_out; Eq. 3 pooling k_w k_h w_out h_out ch (global: the plane);
//    Eqs. 4-5 ReLU and dropout one per input value; Eq. 6 batch norm two; Eq. 7 softmax three;
//    LRN, which the equations leave out, local_size + 4 per value (the sum of squares, one add, one
//    power, two divisions: the count of the Netscope analyser the equations follow); an Eltwise
//    sum one addition per value and extra bottom. Every other layer: none.
//  - read (Eq. 8): the layer's input values plus all its parameters. The equation prints the weight
//    term as k_w k_h ch_in, one filter; the study's CaffeNet row (239.1 MB read) counts every one:
//    its 60.97 M parameters are 232.6 MB of it, and one filter per layer would give 6.6 MB in all.
//  - written (Eq. 9): the output values; a softmax writes its K probabilities.
//  - units: MB = 2^20 bytes of fp32 values; CTC = operations / values read (11.6 for CaffeNet).
// With these, CaffeNet gives the study's row to its printed digits: 727.20 M, 239.1 MB, 6 MB, 11.6.
#include "net/study_count.hpp"

#include "layers/layer_params.hpp"
#include "net/net_spec_impl.hpp"

namespace cnnscale {

StudyCount study_count(const StudyLayer& l) {
  StudyCount c;
  if (!l.runs_in_training) return c;
  c.read = l.input + l.params;
  c.written = l.output;
  const std::string& t = l.type;
  if (t == "Convolution") {
    const int64_t positions = l.out_channels > 0 ? l.output / l.out_channels : 0;  // w_out h_out
    c.ops = l.weights * positions + (l.bias ? l.out_channels : 0);
    c.ops += l.input - l.first_input;  // a residual addend summed into the output
  } else if (t == "InnerProduct") {
    c.ops = l.weights;
  } else if (t == "Pooling") {
    c.ops = l.window * l.output;
  } else if (t == "ReLU" || t == "Dropout") {
    c.ops = l.first_input;
  } else if (t == "BatchNorm") {
    c.ops = 2 * l.first_input;
  } else if (t == "SoftmaxWithLoss") {
    c.ops = 3 * l.first_input;
    c.written = l.first_input;
  } else if (t == "LRN") {
    c.ops = (l.local_size + 4) * l.first_input;
  } else if (t == "Eltwise") {
    c.ops = l.input - l.first_input;
  }
  if (l.fused_relu) {
    // As the separate ReLU layer the study's networks have: it reads and writes the output again.
    c.ops += l.output;
    c.read += l.output;
    c.written += l.output;
  }
  return c;
}

std::vector<StudyLayer> study_layers(const NetSpec& spec) {
  const auto& infos = spec.layers();
  const auto& specs = spec.impl().layers;
  std::vector<StudyLayer> out;
  out.reserve(infos.size());
  for (size_t i = 0; i < infos.size(); ++i) {
    const LayerInfo& info = infos[i];
    const ConfigNode& node = specs[i].config.node;
    StudyLayer l;
    l.type = info.type;
    for (size_t b = 0; b < info.bottom_shapes.size(); ++b) {
      l.input += info.bottom_shapes[b].numel();
      if (b == 0) l.first_input = info.bottom_shapes[b].numel();
    }
    for (const auto& s : info.top_shapes) l.output += s.numel();
    if (!info.top_shapes.empty() && info.top_shapes[0].rank() > 1) l.out_channels = info.top_shapes[0][1];
    l.params = info.params;
    l.runs_in_training = runs_in(specs[i].phase, Phase::Train);
    if (l.type == "Convolution" || l.type == "InnerProduct") {
      l.bias = node.get_or<bool>("bias", true);
      l.weights = l.params - (l.bias ? l.out_channels : 0);
      l.fused_relu = node.get_or<bool>("relu", false);
      // The study's inner product has no bias term in Eq. 2; its parameters are still read.
      if (l.type == "InnerProduct") l.bias = false;
    } else if (l.type == "Pooling") {
      if (node.get_or<bool>("global_pooling", false)) {
        const Shape& in = info.bottom_shapes.at(0);
        l.window = in[2] * in[3];
      } else {
        Extent2 k = parse_extent2(node, "kernel", std::nullopt, 1);
        l.window = static_cast<int64_t>(k.h) * k.w;
      }
    } else if (l.type == "LRN") {
      l.local_size = parse_int_at_least(node, "local_size", 5, 1);
    }
    out.push_back(std::move(l));
  }
  return out;
}

StudyTotals study_totals(const std::vector<StudyLayer>& layers) {
  StudyTotals t;
  for (const auto& l : layers) {
    StudyCount c = study_count(l);
    t.count.ops += c.ops;
    t.count.read += c.read;
    t.count.written += c.written;
  }
  t.ctc = t.count.read > 0 ? static_cast<double>(t.count.ops) / static_cast<double>(t.count.read) : 0.0;
  return t;
}

}  // namespace cnnscale
