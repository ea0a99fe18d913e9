// int8 post-training calibration of a trained network on real data, and the accuracy it costs:
// fp32 forward passes (test phase, batch norms folded as inference runs them) over calibration
// samples from the training set collect the |v| histogram of every tensor a convolution or fully
// connected layer reads, from which each gets a clipping threshold (calibration.hpp); each of those
// layers' weights gets per-output-channel scales. The table is what an int8 engine quantises with.
//
// The accuracy cost is measured on the test set by running the same network twice: in fp32, and
// with every such input and weight replaced by its quantised value (q * scale), the products then
// summed in fp32. That is the int8 engine's arithmetic up to fp32 rounding of the sums: an int8
// kernel multiplies the same integers and accumulates them exactly in int32 before scaling by
// the same s_x * s_w. Biases stay in fp32, as int8 engines keep them in higher precision.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "infer/calibration.hpp"
#include "io/calibration_results.hpp"
#include "infer/inference_engine.hpp"
#include "net/net.hpp"

namespace cnnscale::infer {

struct CalibrationOptions {
  CalibrationMethod method = CalibrationMethod::Percentile;
  double percentile = 99.99;  // CalibrationMethod::Percentile
  int64_t batch = 100;
};

// One quantised layer: the tensor it reads and that tensor's threshold, and its weights' scales.
struct QuantizedLayer {
  std::string layer, type, input;
  double input_max_abs = 0, input_threshold = 0;
  std::vector<float> weight_scales;
  double input_scale() const { return input_threshold > 0 ? input_threshold / 127.0 : 1.0; }
};

struct CalibrationTable {
  std::vector<QuantizedLayer> layers;  // in network order
  int64_t samples = 0;
  void record(CalibrationResult& r) const;  // its samples and layers
};

// Calibrates every Convolution and InnerProduct layer of the engine's (folded) network on the
// first `samples` samples of `data`. The engine must run fp32 (thresholds of the values int8 stands for).
CalibrationTable calibrate(InferenceEngine& engine, const Dataset& data, int64_t samples,
                           const CalibrationOptions& options);

struct AccuracyPair {
  int64_t samples = 0;
  double fp32_top1 = 0, int8_top1 = 0;  // fractions
};
// Top-1 on `test` in fp32 and with the table's quantisation simulated (the net's Accuracy layer's
// scores). Leaves the engine's batch net with quantised weights: use a fresh engine afterwards.
AccuracyPair int8_accuracy_cost(InferenceEngine& engine, const Dataset& test, const CalibrationTable& table,
                                int64_t batch);

// Top-1 of the engine's network on `test` (its Accuracy layer's scores), forward passes of `batch`
// samples as the network runs them: with an int8 engine, the int8 convolutions executed.
double top1(InferenceEngine& engine, const Dataset& test, int64_t batch);

// Layer name -> input scale of a calibration table (`cnnscale calibrate --out`'s file); ConfigError
// naming the file and the key for anything else.
std::map<std::string, double> read_int8_input_scales(const std::string& path);

}  // namespace cnnscale::infer
