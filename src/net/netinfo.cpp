// netinfo tables. Definitions (also printed under the table and in networks/README.md):
//  - operations = forward multiply-accumulates per sample, as the layers report them (conv, fc);
//  - bytes read/written per sample as the layers report them (fp32; parameters count as read);
//  - CTC (Castro et al., Table 1) = operations / fp32 values read. The study's MB are 2^20 bytes: with
//    that unit its CaffeNet row (727.2 M ops, 239.1 MB read) gives its 11.6;
//  - FLOPs per gradient byte = 6 x MACs x batch / (4 x params): the compute of one data-parallel
//    iteration per byte each rank must allreduce, i.e. how well communication can be hidden.
#include "net/netinfo.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/ranges.h>

namespace cnnscale {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::string sample_shape(const Shape& s) {
  // Per-sample extent: drop the batch dimension; rank-1 tops (losses, accuracies) are scalars.
  if (s.rank() <= 1) return "scalar";
  std::vector<int64_t> dims(s.dims().begin() + 1, s.dims().end());
  return fmt::format("({})", fmt::join(dims, ", "));
}

std::string top_shapes(const LayerInfo& l) {
  std::vector<std::string> shapes;
  for (const auto& s : l.top_shapes) shapes.push_back(sample_shape(s));
  return fmt::format("{}", fmt::join(shapes, " "));
}

// 1234567 -> "1.23M"; keeps the table narrow while totals print exact values too.
std::string human(double v) {
  const char* units[] = {"", "K", "M", "G", "T"};
  int u = 0;
  while (std::abs(v) >= 1000.0 && u < 4) {
    v /= 1000.0;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f}", v) : fmt::format("{:.2f}{}", v, units[u]);
}

std::string mib(int64_t bytes) { return fmt::format("{:.2f} MB", static_cast<double>(bytes) / kMiB); }

}  // namespace

NetTotals net_totals(const NetSpec& spec, int64_t batch) {
  if (batch <= 0) throw_config("--batch: expected a positive batch size, got {}", batch);
  NetTotals t;
  for (const auto& l : spec.layers()) {
    t.params += l.params;
    t.forward_macs += l.cost.forward_macs;
    t.bytes_read += l.cost.bytes_read;
    t.bytes_written += l.cost.bytes_written;
  }
  // Gradients are exchanged in fp32 (the master weights' dtype); CTC counts fp32 elements read.
  const auto f32 = static_cast<int64_t>(dtype_size(DType::F32));
  t.ctc = t.bytes_read > 0
              ? static_cast<double>(t.forward_macs) / (static_cast<double>(t.bytes_read) / static_cast<double>(f32))
              : 0.0;
  t.batch = batch;
  t.training_flops_per_iteration = 6.0 * static_cast<double>(t.forward_macs) * static_cast<double>(batch);
  t.gradient_bytes = f32 * t.params;
  t.flops_per_gradient_byte =
      t.gradient_bytes > 0 ? t.training_flops_per_iteration / static_cast<double>(t.gradient_bytes) : 0.0;
  return t;
}

std::string netinfo_table(const NetSpec& spec, int64_t batch) {
  NetTotals t = net_totals(spec, batch);
  size_t name_w = 5, type_w = 4, shape_w = 12;
  for (const auto& l : spec.layers()) {
    name_w = std::max(name_w, l.name.size());
    type_w = std::max(type_w, l.type.size());
    shape_w = std::max(shape_w, top_shapes(l).size());
  }
  const auto& in = spec.input_shape();
  std::string out = fmt::format("network {} ({}): input ({}, {}, {}), {} classes; per sample, forward, fp32\n\n",
                                spec.name(), spec.file(), in[0], in[1], in[2], spec.classes());
  auto row = [&](const std::string& a, const std::string& b, const std::string& c, const std::string& d,
                 const std::string& e, const std::string& f, const std::string& g) {
    out += fmt::format("{:<{}}  {:<{}}  {:<{}}  {:>12}  {:>10}  {:>12}  {:>12}\n", a, name_w, b, type_w, c, shape_w, d,
                       e, f, g);
  };
  row("layer", "type", "output", "params", "fwd MACs", "read", "written");
  for (const auto& l : spec.layers())
    row(l.name, l.type, top_shapes(l), fmt::format("{}", l.params), human(static_cast<double>(l.cost.forward_macs)),
        mib(l.cost.bytes_read), mib(l.cost.bytes_written));
  row("total", "", "", fmt::format("{}", t.params), human(static_cast<double>(t.forward_macs)), mib(t.bytes_read),
      mib(t.bytes_written));

  out += fmt::format(
      "\nparameters        {} ({} as fp32)\n"
      "forward MACs      {} per sample ({} per batch of {})\n",
      t.params, mib(t.gradient_bytes), t.forward_macs, human(static_cast<double>(t.forward_macs) * static_cast<double>(batch)), batch);
  out += "\nSeed 003, Table 1 style (per sample, forward; MB = 2^20 bytes):\n";
  out += fmt::format("  {:<12}  {:>22}  {:>16}  {:>19}  {:>9}\n", "network", "# arithmetic operations",
                     "data volume read", "data volume written", "CTC ratio");
  out += fmt::format("  {:<12}  {:>22}  {:>16}  {:>19}  {:>9.1f}\n", spec.name(),
                     fmt::format("{:.2f}M", static_cast<double>(t.forward_macs) / 1e6), mib(t.bytes_read),
                     mib(t.bytes_written), t.ctc);
  out += "  operations = multiply-accumulates; CTC = operations / fp32 values read (the study's definition)\n";
  out += fmt::format(
      "\nData-parallel at batch {} per rank: {} training FLOPs per iteration (6 x MACs x batch),\n"
      "{} of gradients allreduced per iteration (4 x params): {:.1f} FLOPs per gradient byte\n",
      batch, human(t.training_flops_per_iteration), mib(t.gradient_bytes), t.flops_per_gradient_byte);
  return out;
}

nlohmann::json netinfo_json(const NetSpec& spec, int64_t batch) {
  NetTotals t = net_totals(spec, batch);
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& l : spec.layers()) {
    nlohmann::json tops = nlohmann::json::array();
    for (const auto& s : l.top_shapes) tops.push_back(s.dims());
    layers.push_back({{"name", l.name},
                      {"type", l.type},
                      {"top_shapes", tops},
                      {"params", l.params},
                      {"forward_macs", l.cost.forward_macs},
                      {"bytes_read", l.cost.bytes_read},
                      {"bytes_written", l.cost.bytes_written}});
  }
  return {{"name", spec.name()},
          {"file", spec.file()},
          {"input_shape", spec.input_shape()},
          {"classes", spec.classes()},
          {"batch", batch},
          {"layers", layers},
          {"params", t.params},
          {"forward_macs", t.forward_macs},
          {"bytes_read", t.bytes_read},
          {"bytes_written", t.bytes_written},
          {"ctc", t.ctc},
          {"training_flops_per_iteration", t.training_flops_per_iteration},
          {"gradient_bytes", t.gradient_bytes},
          {"flops_per_gradient_byte", t.flops_per_gradient_byte},
          {"definitions",
           {{"shapes", "per sample (batch 1); rank-1 tops are scalars"},
            {"bytes", "fp32, per sample, forward; parameters count as read"},
            {"ctc", "forward MACs / fp32 values read (Castro et al., Table 1)"},
            {"flops_per_gradient_byte", "6 * forward_macs * batch / (4 * params)"}}}};
}

}  // namespace cnnscale
