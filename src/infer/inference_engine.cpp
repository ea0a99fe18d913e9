// InferenceEngine implementation: weights loaded once into a batch-1 source net and copied into
// each batch size's net as it is first asked for.
#include "infer/inference_engine.hpp"

#include <map>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "solver/checkpoint.hpp"

namespace cnnscale::infer {

InputFill parse_input_fill(const std::string& text) {
  if (text == "gaussian") return InputFill::Gaussian;
  if (text == "constant") return InputFill::Constant;
  throw_config("--fill must be gaussian or constant, got '{}'", text);
}

std::string input_fill_name(InputFill fill) { return fill == InputFill::Gaussian ? "gaussian" : "constant"; }

namespace {

// Every parameter master and state tensor of `to` from the layer of the same name in `from`: fusion
// keeps each layer's name, parameters and state, but may move a layer (and so its place in the
// flat parameter buffer).
void copy_weights_by_name(const Net& from, Net& to) {
  std::map<std::string, const Layer*> by_name;
  for (const Layer* l : from.layers()) by_name[l->name()] = l;
  Backend& backend = to.backend();
  for (const Layer* l : to.layers()) {
    auto it = by_name.find(l->name());
    CNNSCALE_CHECK(it != by_name.end(), "fused net: no layer '{}' in the net it was fused from", l->name());
    const Layer& src = *it->second;
    CNNSCALE_CHECK(src.params().size() == l->params().size() && src.state().size() == l->state().size(),
                   "fused net: layer '{}' has other parameters than before", l->name());
    for (size_t p = 0; p < l->params().size(); ++p) backend.copy(src.params()[p].master, l->params()[p].master);
    for (size_t s = 0; s < l->state().size(); ++s) backend.copy(src.state()[s], l->state()[s]);
  }
}

}  // namespace

InferenceEngine::InferenceEngine(const NetSpec& spec, Backend& backend, EngineOptions options)
    : spec_(spec), backend_(backend), options_(std::move(options)) {
  if (!backend_.can_capture())
    graph_note_ = fmt::format("{} backend: ops run as they are called", backend_.name());
  else if (!options_.cuda_graph)
    graph_note_ = "turned off (--no-graph)";
  const DType compute = compute_dtype(options_.precision);
  source_ = std::make_unique<Net>(spec_, backend_, 1, options_.seed, compute, NetUse::Inference);
  if (!options_.checkpoint.empty())
    restore_weights(read_checkpoint(options_.checkpoint), options_.checkpoint, *source_);
  // Each rewrite of the network (fold, fuse, int8) that changed something gets a batch-1 net of its
  // own, filled from the previous one, and becomes the weights' source.
  auto adopt = [&](const NetSpec& next, auto&& copy) {
    auto net = std::make_unique<Net>(next, backend_, 1, options_.seed, compute, NetUse::Inference);
    copy(*source_, *net);
    source_ = std::move(net);
  };
  if (options_.fold_batch_norm) {
    FoldedSpec folded = fold_batch_norm(spec_);
    if (!folded.folded.empty()) {
      folded_.emplace(std::move(folded));
      adopt(folded_->spec, [&](const Net& from, Net& to) { copy_folded_weights(from, *folded_, to); });
    }
  }
  if (options_.fuse_epilogues) {
    FusedSpec fused = fuse_epilogues(run_spec());
    if (!fused.fused.empty()) {
      fused_.emplace(std::move(fused));
      adopt(fused_->spec, copy_weights_by_name);
    }
  }
  if (!options_.int8_input_scales.empty()) {
    int8_.emplace(with_int8_scales(run_spec(), options_.int8_input_scales, int8_activations_run(backend_, compute)));
    adopt(int8_->spec, copy_weights_by_name);
  }
}

InferenceEngine::~InferenceEngine() = default;

Net& InferenceEngine::net(int64_t batch) { return *batch_net(batch).net; }

InferenceEngine::BatchNet& InferenceEngine::batch_net(int64_t batch) {
  if (batch < 1) throw_config("batch size must be >= 1, got {}", batch);
  auto it = nets_.find(batch);
  if (it != nets_.end()) return it->second;
  auto net = std::make_unique<Net>(run_spec(), backend_, batch, options_.seed, compute_dtype(options_.precision),
                                   NetUse::Inference);
  // Same spec, so the same flat layout and state list: the weights are two copies.
  backend_.copy(source_->flat_params(), net->flat_params());
  const auto from = source_->state();
  const auto to = net->state();
  CNNSCALE_CHECK(from.size() == to.size(), "state of {} and {} tensors", from.size(), to.size());
  for (size_t i = 0; i < from.size(); ++i) backend_.copy(from[i].second, to[i].second);
  net->freeze_weights(true);  // no per-batch refresh of 16-bit weight copies
  // The input, once: its values never change between timed batches (labels stay 0, a valid class).
  std::vector<float> host(static_cast<size_t>(net->input().numel()));
  if (options_.fill == InputFill::Constant) {
    std::fill(host.begin(), host.end(), 0.5f);
  } else {
    std::mt19937_64 rng(options_.seed ^ static_cast<uint64_t>(batch));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : host) v = normal(rng);
  }
  backend_.upload(host.data(), net->input());
  backend_.fill(net->labels(), 0.0f);
  backend_.synchronize();  // `host` goes out of scope
  return nets_.emplace(batch, BatchNet{std::move(net), nullptr, 0}).first->second;
}

// The first pass of a batch size runs uncaptured: it makes every algorithm choice and workspace and
// refreshes the frozen 16-bit weight copies, so the captured pass is the steady forward alone.
void InferenceEngine::run(int64_t batch) {
  BatchNet& b = batch_net(batch);
  Net& n = *b.net;
  if (b.graph && !b.graph->valid()) b.graph.reset();  // a workspace grew since: capture again
  if (!b.graph && graph_note_.empty() && b.passes >= 1) {
    try {
      b.graph = backend_.capture([&] { n.forward(Phase::Test, 0); });
    } catch (const Error& e) {
      graph_note_ = fmt::format("capture failed: {}", e.what());
      log::warn("CUDA graph: {}; every forward pass is queued op by op", graph_note_);
    }
  }
  if (b.graph) {
    b.graph->launch();
    ++graph_replays_;
  } else {
    n.forward(Phase::Test, 0);
  }
  ++b.passes;
}

std::string InferenceEngine::cuda_graph() const {
  if (graph_replays_ > 0) return "on";
  return "off: " + (graph_note_.empty() ? std::string("no batch size ran twice") : graph_note_);
}

std::vector<std::string> InferenceEngine::int8_layers_run() const {
  std::vector<std::string> out;
  // Any net that ran (passes through run(), or forward passes of its own, as top-1 evaluations make).
  for (const auto& [batch, b] : nets_) {
    for (const Layer* l : b.net->layers())
      if (l->implementation(backend_).rfind("int8 (", 0) == 0) out.push_back(l->name());
    if (!out.empty()) break;
  }
  return out;
}

void InferenceEngine::release_nets() {
  backend_.synchronize();
  nets_.clear();
}

NetSpec network_to_run(const std::string& net, const std::string& checkpoint) {
  if (!net.empty()) return NetSpec::load(resolve_network_path(net));
  const CheckpointContents c = read_checkpoint(checkpoint);
  if (c.meta.network.empty()) throw_config("{}: the checkpoint holds no network; give --net", checkpoint);
  return NetSpec::load_string(c.meta.network, checkpoint);
}

}  // namespace cnnscale::infer
