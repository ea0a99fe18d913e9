#include "infer/calibrate_run.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <set>

#include "core/error.hpp"

namespace cnnscale::infer {

namespace {

bool quantized_type(const std::string& type) {
  return type == "Convolution" || type == "InnerProduct";
}

// The layers an int8 engine quantises, by index in net.layers(), and the tensor each reads.
struct Consumer {
  size_t index;
  Layer* layer;
  std::string input;
};

std::vector<Consumer> consumers(Net& net) {
  std::vector<Consumer> out;
  const std::vector<Layer*> layers = net.layers();
  for (size_t i = 0; i < layers.size(); ++i)
    if (quantized_type(layers[i]->type()) && net.runs_in_phase(i, Phase::Test)) {
      if (layers[i]->bottoms().empty()) throw_runtime("layer {} has no input", layers[i]->name());
      out.push_back({i, layers[i], layers[i]->bottoms()[0]});
    }
  if (out.empty()) throw_config("the network has no convolution or fully connected layer to quantise");
  return out;
}

std::vector<float> download(Backend& backend, const Tensor& t) {
  if (t.dtype() != DType::F32) throw_runtime("int8 calibration reads fp32 tensors, got {}", dtype_name(t.dtype()));
  std::vector<float> v(static_cast<size_t>(t.numel()));
  backend.download(t, v.data());
  return v;
}

// Runs net.forward(Test) and calls `visit(consumer)` for each quantised layer just before it runs
// (its input final, nothing later has overwritten it), each input tensor once per pass.
void forward_visiting(Net& net, const std::vector<Consumer>& cs, const std::function<void(const Consumer&)>& visit) {
  const size_t count = net.layers().size();
  size_t next = 0;
  std::set<std::string> seen;
  auto upto = [&](size_t index) {  // every consumer at or before `index` not visited yet
    for (; next < cs.size() && cs[next].index <= index; ++next)
      if (seen.insert(cs[next].input).second) visit(cs[next]);
  };
  // After layer l, the next layer to run is the first after l that runs in the test phase: every
  // consumer up to it reads what is final now (layers in between are skipped, writing nothing).
  auto next_running = [&](size_t after) {
    size_t i = after;
    while (i < count && !net.runs_in_phase(i, Phase::Test)) ++i;
    return i;
  };
  net.forward(
      Phase::Test, 0, [&](size_t l) { upto(next_running(l + 1)); }, [&] { upto(next_running(0)); });
}

// Samples [begin, begin + count) of `data` into the net's input and labels (the net reshaped to count).
void load_batch(Net& net, const Dataset& data, int64_t begin, int64_t count, std::vector<float>& x,
                std::vector<int32_t>& y) {
  if (net.batch() != count) net.reshape(count);
  std::vector<int64_t> indices(static_cast<size_t>(count));
  std::iota(indices.begin(), indices.end(), begin);
  x.resize(static_cast<size_t>(net.input().numel()));
  y.resize(static_cast<size_t>(count));
  data.fill(indices, x.data(), y.data());
  net.backend().upload(x.data(), net.input());
  if (net.has_blob("label")) net.backend().upload(y.data(), net.labels());
  net.backend().synchronize();  // the host vectors are refilled for the next batch
}

}  // namespace

void CalibrationTable::record(CalibrationResult& r) const {
  std::vector<CalibrationLayer> out;
  for (const QuantizedLayer& l : layers) {
    CalibrationLayer c;
    c.layer = l.layer;
    c.type = l.type;
    c.input = l.input;
    c.input_max_abs = l.input_max_abs;
    c.input_threshold = l.input_threshold;
    c.input_scale = l.input_scale();
    c.weight_scales = std::vector<double>(l.weight_scales.begin(), l.weight_scales.end());  // each float exactly
    out.push_back(std::move(c));
  }
  r.samples = samples;
  r.layers = std::move(out);
}

CalibrationTable calibrate(InferenceEngine& engine, const Dataset& data, int64_t samples,
                           const CalibrationOptions& options) {
  if (engine.options().precision != Precision::FP32) throw_config("int8 calibration runs the network in fp32");
  if (samples < 1 || samples > data.size())
    throw_config("calibration samples: {} asked, {} has {}", samples, data.name(), data.size());
  if (options.batch < 1) throw_config("calibration batch must be >= 1, got {}", options.batch);
  Net& net = engine.net(std::min(options.batch, samples));
  Backend& backend = net.backend();
  const std::vector<Consumer> cs = consumers(net);
  std::map<std::string, AbsHistogram> hist;
  std::vector<float> x;
  std::vector<int32_t> y;
  for (int64_t begin = 0; begin < samples; begin += options.batch) {
    load_batch(net, data, begin, std::min(options.batch, samples - begin), x, y);
    forward_visiting(net, cs, [&](const Consumer& c) {
      const std::vector<float> v = download(backend, net.blob(c.input));
      hist[c.input].add(v.data(), static_cast<int64_t>(v.size()));
    });
  }
  CalibrationTable table;
  table.samples = samples;
  for (const Consumer& c : cs) {
    QuantizedLayer q;
    q.layer = c.layer->name();
    q.type = c.layer->type();
    q.input = c.input;
    const AbsHistogram& h = hist.at(c.input);
    if (h.non_finite() > 0)
      throw_runtime("int8 calibration: {} non-finite values in {} (the input of {})", h.non_finite(), c.input, q.layer);
    q.input_max_abs = h.max_abs();
    q.input_threshold = threshold(h, options.method, options.percentile);
    const Param& w = c.layer->params().at(0);
    q.weight_scales = weight_scales(download(backend, w.master), w.spec.shape[0]);
    table.layers.push_back(std::move(q));
  }
  return table;
}

namespace {

// The blob the network's Accuracy layer scores.
std::string scored_blob(Net& net) {
  for (Layer* l : net.layers())
    if (l->type() == "Accuracy") return l->bottoms().at(0);
  throw_config("the network has no Accuracy layer to score the test set with");
}

// Top-1 over `test` in batches of `batch`, `forward` running each batch's pass.
double scored_top1(Net& net, const Dataset& test, int64_t batch, const std::string& scores,
                   const std::function<void()>& forward) {
  Backend& backend = net.backend();
  Tensor top1 = backend.alloc(Shape{1});
  std::vector<float> x;
  std::vector<int32_t> y;
  double hits = 0;
  for (int64_t begin = 0; begin < test.size(); begin += batch) {
    const int64_t count = std::min(batch, test.size() - begin);
    load_batch(net, test, begin, count, x, y);
    forward();
    backend.accuracy_topk(net.blob(scores), net.labels(), {1}, top1);
    float f = 0;
    backend.download(top1, &f);
    // A batch's top-1 is hits / count in float: its hits are the nearest integer to f * count.
    hits += std::round(static_cast<double>(f) * static_cast<double>(count));
  }
  return hits / static_cast<double>(test.size());
}

}  // namespace

AccuracyPair int8_accuracy_cost(InferenceEngine& engine, const Dataset& test, const CalibrationTable& table,
                                int64_t batch) {
  if (batch < 1) throw_config("evaluation batch must be >= 1, got {}", batch);
  if (engine.options().precision != Precision::FP32) throw_config("the int8 simulation runs the network in fp32");
  Net& net = engine.net(std::min(batch, test.size()));
  Backend& backend = net.backend();
  const std::vector<Consumer> cs = consumers(net);
  const std::string scores = scored_blob(net);
  std::map<std::string, double> input_scale;
  for (const QuantizedLayer& q : table.layers) input_scale[q.input] = q.input_scale();

  auto pass = [&](bool quantized) {
    return scored_top1(net, test, batch, scores, [&] {
      forward_visiting(net, cs, [&](const Consumer& c) {
        if (!quantized) return;
        const Tensor& t = net.blob(c.input);
        std::vector<float> v = download(backend, t);
        const float s = static_cast<float>(input_scale.at(c.input));
        for (float& e : v) e = static_cast<float>(quantize(e, s)) * s;
        backend.upload(v.data(), t);
        backend.synchronize();
      });
    });
  };

  AccuracyPair r;
  r.samples = test.size();
  r.fp32_top1 = pass(false);
  // The weights as int8 stores them: each output channel's row quantised with its scale.
  for (size_t k = 0; k < cs.size(); ++k) {
    const QuantizedLayer& q = table.layers.at(k);
    if (q.layer != cs[k].layer->name()) throw_runtime("calibration table of another network (layer {})", q.layer);
    const Param& w = cs[k].layer->params().at(0);
    std::vector<float> v = download(backend, w.master);
    const size_t per = v.size() / q.weight_scales.size();
    for (size_t i = 0; i < v.size(); ++i) {
      const float s = q.weight_scales[i / per];
      v[i] = static_cast<float>(quantize(v[i], s)) * s;
    }
    backend.upload(v.data(), w.master);
    backend.synchronize();  // v dies here
  }
  // The masters are what changed: the compute copies (where the layer has its own) are converted
  // from them once more.
  net.freeze_weights(true);
  r.int8_top1 = pass(true);
  return r;
}

double top1(InferenceEngine& engine, const Dataset& test, int64_t batch) {
  if (batch < 1) throw_config("evaluation batch must be >= 1, got {}", batch);
  Net& net = engine.net(std::min(batch, test.size()));
  const std::string scores = scored_blob(net);
  return scored_top1(net, test, batch, scores, [&] { net.forward(Phase::Test, 0); });
}

std::map<std::string, double> read_int8_input_scales(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw_config("{}: cannot read the calibration table", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw_config("{}: not JSON ({})", path, e.what());
  }
  if (!j.is_object() || !j.contains("layers") || !j["layers"].is_array() || j["layers"].empty())
    throw_config("{}: layers: expected the non-empty list of a calibration table", path);
  std::map<std::string, double> scales;
  for (size_t i = 0; i < j["layers"].size(); ++i) {
    const nlohmann::json& l = j["layers"][i];
    if (!l.is_object() || !l.contains("layer") || !l["layer"].is_string() || !l.contains("input_scale") ||
        !l["input_scale"].is_number() || !(l["input_scale"].get<double>() > 0))
      throw_config("{}: layers[{}]: expected a layer name and a positive input_scale", path, i);
    scales[l["layer"].get<std::string>()] = l["input_scale"].get<double>();
  }
  return scales;
}

}  // namespace cnnscale::infer
