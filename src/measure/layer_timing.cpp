// Layer timing implementation. Every iteration records one event before the forward, one after each
// layer's forward and backward, and one after forward, backward and update; a layer's time is the
// span from the previous event, so the per-layer times add up to the forward/backward totals
// (minus the loss combination). Events are read only after the final synchronisation.
#include "measure/layer_timing.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <random>

#include "core/error.hpp"

namespace cnnscale {

namespace {

using EventPtr = std::shared_ptr<TimingEvent>;

struct IterationEvents {
  EventPtr begin, after_copies, forward_end, backward_end, update_end;
  std::vector<EventPtr> after_forward, after_backward;  // per layer index; null: did not run
};

}  // namespace

LayerTimingResult time_layers(const NetSpec& spec, Backend& backend, const LayerTimingOptions& o) {
  if (o.batch < 1) throw_config("--batch must be >= 1, got {}", o.batch);
  if (o.iterations < 1) throw_config("--iterations must be >= 1, got {}", o.iterations);
  if (o.warmup < 0) throw_config("--warmup must be >= 0, got {}", o.warmup);

  Net net(spec, backend, o.batch, o.seed, compute_dtype(o.precision),
          o.inference ? NetUse::Inference : NetUse::Training);
  if (o.inference) net.freeze_weights(true);
  const std::vector<Layer*> layers = net.layers();
  {
    // Random inputs and valid labels: data-dependent layers (ReLU, max pooling) see realistic work.
    std::mt19937_64 rng(o.seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int32_t> label(0, static_cast<int32_t>(std::max<int64_t>(spec.classes(), 1) - 1));
    std::vector<float> data(static_cast<size_t>(net.input().shape().numel()));
    for (float& v : data) v = normal(rng);
    std::vector<int32_t> labels(static_cast<size_t>(net.labels().shape().numel()));
    for (int32_t& v : labels) v = label(rng);
    backend.upload(data.data(), net.input());
    backend.upload(labels.data(), net.labels());
  }
  // The update of a full step; lr 0 keeps the weights (and so every iteration's work) unchanged
  // while the kernel does the same memory traffic as a real SGD step.
  std::function<void()> update = o.inference ? [] {} : o.make_update ? o.make_update(net) : std::function<void()>();
  Tensor history;
  if (!update) {
    history = backend.alloc(net.flat_params().shape());
    update = [&] { backend.sgd_update(net.flat_params(), net.flat_grads(), history, 0.0f, 0.9f, 0.0f); };
  }

  std::vector<IterationEvents> timed;
  timed.reserve(static_cast<size_t>(o.iterations));
  measure::StepScopes* scopes = o.scopes;
  using measure::KernelOwner;
  using measure::KernelPass;
  // The part that ends at a mark, and the next that starts there (kernel profiling only).
  const auto mark = [&](bool record, const KernelOwner& ended, bool more) {
    if (!record || scopes == nullptr) return;
    scopes->close_as(ended);
    if (more) scopes->open();
  };
  const auto iterate = [&](int64_t it) {
    const bool record = it >= o.warmup;
    IterationEvents ev;
    if (record) {
      ev.after_forward.resize(layers.size());
      ev.after_backward.resize(layers.size());
      ev.begin = backend.record_timing_event();
      if (scopes != nullptr) scopes->begin_step();
    }
    const auto iteration = static_cast<uint64_t>(it);
    net.forward(
        o.inference ? Phase::Test : Phase::Train, iteration,
        [&](size_t l) {
          if (record) ev.after_forward[l] = backend.record_timing_event();
          mark(record, KernelOwner{layers[l]->name(), KernelPass::Forward}, true);
        },
        [&] {
          if (record) ev.after_copies = backend.record_timing_event();
          mark(record, KernelOwner{"", KernelPass::InputCopy}, true);
        });
    if (record) ev.forward_end = backend.record_timing_event();
    // What the forward runs after its last layer (the loss's combination) is the forward's own.
    mark(record, KernelOwner{"", KernelPass::Forward}, !o.inference);
    if (!o.inference) {
      net.backward(iteration, [&](size_t l) {
        if (record) ev.after_backward[l] = backend.record_timing_event();
        mark(record, KernelOwner{layers[l]->name(), KernelPass::Backward}, true);
      });
      mark(record, KernelOwner{"", KernelPass::Backward}, true);
    }
    // Inference: nothing after the forward, so backward and update take no time.
    if (record) ev.backward_end = o.inference ? ev.forward_end : backend.record_timing_event();
    update();
    if (!o.inference) mark(record, KernelOwner{"", KernelPass::Update}, false);
    if (record) {
      ev.update_end = o.inference ? ev.backward_end : backend.record_timing_event();
      timed.push_back(std::move(ev));
    }
  };
  for (int64_t it = 0; it < o.warmup; ++it) iterate(it);
  const auto recorded = [&] {
    for (int64_t it = o.warmup; it < o.warmup + o.iterations; ++it) iterate(it);
  };
  if (o.around_recorded)
    o.around_recorded(recorded);
  else
    recorded();
  backend.synchronize();  // every event is complete: reading them below never stalls

  LayerTimingResult r;
  if (!backend.device().is_cpu()) {
    // The batch as a loader hands it over: pinned host buffers, copied on the compute stream.
    r.h2d_bytes = static_cast<int64_t>(net.input().bytes() + net.labels().bytes());
    std::shared_ptr<Storage> input = backend.alloc_host(net.input().bytes());
    std::shared_ptr<Storage> labels = backend.alloc_host(net.labels().bytes());
    backend.download(net.input(), input->ptr());  // the same (non-zero) values as the timed steps
    backend.download(net.labels(), labels->ptr());
    auto a = backend.record_timing_event();
    for (int64_t i = 0; i < o.iterations; ++i) {
      backend.upload(input->ptr(), net.input());
      backend.upload(labels->ptr(), net.labels());
    }
    auto b = backend.record_timing_event();
    backend.synchronize();
    r.h2d_ms = backend.elapsed_ms(*a, *b) / static_cast<double>(o.iterations);
  }
  r.batch = o.batch;
  r.iterations = o.iterations;
  r.warmup = o.warmup;
  r.precision = o.precision;
  r.peak_memory_bytes = backend.memory_stats().peak_bytes;
  std::vector<LayerTime> per_layer(layers.size());
  std::map<std::string, const LayerInfo*> infos;
  for (const LayerInfo& info : spec.layers()) infos[info.name] = &info;
  for (size_t l = 0; l < layers.size(); ++l) {
    per_layer[l].name = layers[l]->name();
    per_layer[l].type = layers[l]->type();
    per_layer[l].implementation = layers[l]->implementation(backend);
    if (auto it = infos.find(layers[l]->name()); it != infos.end())
      for (size_t t = 0; t < it->second->top_shapes.size(); ++t) {
        // Shapes of one sample: (1, C, H, W) or (1, D) grow with the batch; a loss's scalar does not.
        const Shape& top = it->second->top_shapes[t];
        per_layer[l].activation_bytes +=
            top.numel() * (top.rank() >= 2 ? o.batch : 1) * static_cast<int64_t>(dtype_size(layers[l]->top_dtype(t)));
      }
    // fp32 runs keep one copy: the masters are the weights themselves (the same storage), counted once.
    for (const Param& p : layers[l]->params()) {
      int64_t bytes = static_cast<int64_t>(p.data.bytes() + p.diff.bytes());
      if (p.master.raw() != p.data.raw()) bytes += static_cast<int64_t>(p.master.bytes());
      if (p.master_diff.raw() != p.diff.raw()) bytes += static_cast<int64_t>(p.master_diff.bytes());
      per_layer[l].param_bytes += bytes;
    }
  }
  for (const IterationEvents& ev : timed) {
    const TimingEvent* previous = ev.after_copies.get();
    for (size_t l = 0; l < layers.size(); ++l) {
      if (!ev.after_forward[l]) continue;
      per_layer[l].forward_ms += backend.elapsed_ms(*previous, *ev.after_forward[l]);
      previous = ev.after_forward[l].get();
    }
    previous = ev.forward_end.get();
    for (size_t l = layers.size(); l-- > 0;) {  // backward runs last to first
      if (!ev.after_backward[l]) continue;
      per_layer[l].backward_ms += backend.elapsed_ms(*previous, *ev.after_backward[l]);
      previous = ev.after_backward[l].get();
    }
    r.forward_ms += backend.elapsed_ms(*ev.begin, *ev.forward_end);
    r.copies_ms += backend.elapsed_ms(*ev.begin, *ev.after_copies);
    r.backward_ms += backend.elapsed_ms(*ev.forward_end, *ev.backward_end);
    r.update_ms += backend.elapsed_ms(*ev.backward_end, *ev.update_end);
    r.step_ms += backend.elapsed_ms(*ev.begin, *ev.update_end);
  }
  const double n = static_cast<double>(o.iterations);
  r.forward_ms /= n;
  r.copies_ms /= n;
  r.backward_ms /= n;
  r.update_ms /= n;
  r.step_ms /= n;
  double sum = 0;
  for (LayerTime& t : per_layer) {
    t.forward_ms /= n;
    t.backward_ms /= n;
    sum += t.forward_ms + t.backward_ms;
  }
  for (LayerTime& t : per_layer) t.share = sum > 0 ? (t.forward_ms + t.backward_ms) / sum : 0.0;
  // Stable: layers of equal time keep network order.
  std::stable_sort(per_layer.begin(), per_layer.end(), [](const LayerTime& a, const LayerTime& b) {
    return a.forward_ms + a.backward_ms > b.forward_ms + b.backward_ms;
  });
  r.layers = std::move(per_layer);
  return r;
}

std::vector<TypeTime> time_by_type(const std::vector<LayerTime>& layers) {
  std::vector<TypeTime> types;
  double sum = 0;
  for (const LayerTime& t : layers) {
    auto it = std::find_if(types.begin(), types.end(), [&](const TypeTime& x) { return x.type == t.type; });
    if (it == types.end()) it = types.insert(types.end(), TypeTime{.type = t.type});
    ++it->layers;
    it->forward_ms += t.forward_ms;
    it->backward_ms += t.backward_ms;
    sum += t.forward_ms + t.backward_ms;
  }
  for (TypeTime& x : types) x.share = sum > 0 ? (x.forward_ms + x.backward_ms) / sum : 0.0;
  std::stable_sort(types.begin(), types.end(), [](const TypeTime& a, const TypeTime& b) {
    return a.forward_ms + a.backward_ms > b.forward_ms + b.backward_ms;
  });
  return types;
}

}  // namespace cnnscale
