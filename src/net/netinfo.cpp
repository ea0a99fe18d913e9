// netinfo tables. Definitions (also printed under the table and in networks/README.md):
//  - operations = forward multiply-accumulates per sample, as the layers report them (conv, fc);
//  - bytes read/written per sample as the layers report them (fp32; parameters count as read);
//  - CTC (Castro et al., Table 1) = operations / fp32 values read. The study's MB are 2^20 bytes: with
//    that unit its CaffeNet row (727.2 M ops, 239.1 MB read) gives its 11.6;
//  - FLOPs per gradient byte = 6 x MACs x batch / (4 x params): the compute of one data-parallel
//    iteration per byte each rank must allreduce, i.e. how well communication can be hidden;
//  - with Counting::Study, the study's own counts beside these (net/study_count.hpp): its Table 1
//    counts operations of every layer, not only multiply-accumulates.
#include "net/netinfo.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/ranges.h>

#include "net/study_count.hpp"

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

// The study counts fp32 values; its MB are 2^20 bytes of them.
int64_t value_bytes(int64_t values) { return values * static_cast<int64_t>(dtype_size(DType::F32)); }

std::string table1_row(const std::string& name, size_t name_w, double ops, int64_t read, int64_t written, double ctc) {
  return fmt::format("  {:<{}}  {:>22}  {:>16}  {:>19}  {:>9.1f}\n", name, name_w, fmt::format("{:.2f}M", ops / 1e6),
                     mib(read), mib(written), ctc);
}

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

std::string netinfo_table(const NetSpec& spec, int64_t batch, Counting counting) {
  NetTotals t = net_totals(spec, batch);
  const bool study = counting == Counting::Study;
  const std::vector<StudyLayer> study_info = study ? study_layers(spec) : std::vector<StudyLayer>{};
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
                 const std::string& e, const std::string& f, const std::string& g, const StudyCount* sc) {
    out += fmt::format("{:<{}}  {:<{}}  {:<{}}  {:>12}  {:>10}  {:>12}  {:>12}", a, name_w, b, type_w, c, shape_w, d, e,
                       f, g);
    if (sc)
      out += fmt::format("  {:>10}  {:>12}  {:>12}", human(static_cast<double>(sc->ops)), mib(value_bytes(sc->read)),
                         mib(value_bytes(sc->written)));
    out += "\n";
  };
  out += fmt::format("{:<{}}  {:<{}}  {:<{}}  {:>12}  {:>10}  {:>12}  {:>12}", "layer", name_w, "type", type_w, "output",
                     shape_w, "params", "fwd MACs", "read", "written");
  out += study ? fmt::format("  {:>10}  {:>12}  {:>12}\n", "study ops", "study read", "study wrote") : "\n";
  for (size_t i = 0; i < spec.layers().size(); ++i) {
    const LayerInfo& l = spec.layers()[i];
    StudyCount sc = study ? study_count(study_info[i]) : StudyCount{};
    row(l.name, l.type, top_shapes(l), fmt::format("{}", l.params), human(static_cast<double>(l.cost.forward_macs)),
        mib(l.cost.bytes_read), mib(l.cost.bytes_written), study ? &sc : nullptr);
  }
  StudyTotals st = study ? study_totals(study_info) : StudyTotals{};
  row("total", "", "", fmt::format("{}", t.params), human(static_cast<double>(t.forward_macs)), mib(t.bytes_read),
      mib(t.bytes_written), study ? &st.count : nullptr);

  out += fmt::format(
      "\nparameters        {} ({} as fp32)\n"
      "forward MACs      {} per sample ({} per batch of {})\n",
      t.params, mib(t.gradient_bytes), t.forward_macs, human(static_cast<double>(t.forward_macs) * static_cast<double>(batch)), batch);
  out += "\nSeed 003, Table 1 style (per sample, forward; MB = 2^20 bytes):\n";
  const size_t net_w = study ? std::max<size_t>(12, spec.name().size() + 8) : 12;
  out += fmt::format("  {:<{}}  {:>22}  {:>16}  {:>19}  {:>9}\n", "network", net_w, "# arithmetic operations",
                     "data volume read", "data volume written", "CTC ratio");
  out += table1_row(study ? spec.name() + " (ours)" : spec.name(), net_w, static_cast<double>(t.forward_macs),
                    t.bytes_read, t.bytes_written, t.ctc);
  if (study)
    out += table1_row(spec.name() + " (study)", net_w, static_cast<double>(st.count.ops), value_bytes(st.count.read),
                      value_bytes(st.count.written), st.ctc);
  out += "  operations = multiply-accumulates; CTC = operations / fp32 values read (the study's definition)\n";
  if (study)
    out += "  study: operations of its Eqs. 1-9 (convolution with bias adds, fully connected, pooling, ReLU, dropout,\n"
           "  batch norm, softmax; LRN and Eltwise sums as Netscope counts them); read = inputs + parameters (Eq. 8),\n"
           "  written = outputs (Eq. 9); docs/seeds.md, \"Table 1\"\n";
  out += fmt::format(
      "\nData-parallel at batch {} per rank: {} training FLOPs per iteration (6 x MACs x batch),\n"
      "{} of gradients allreduced per iteration (4 x params): {:.1f} FLOPs per gradient byte\n",
      batch, human(t.training_flops_per_iteration), mib(t.gradient_bytes), t.flops_per_gradient_byte);
  return out;
}

nlohmann::json netinfo_json(const NetSpec& spec, int64_t batch, Counting counting) {
  NetTotals t = net_totals(spec, batch);
  const bool study = counting == Counting::Study;
  const std::vector<StudyLayer> study_info = study ? study_layers(spec) : std::vector<StudyLayer>{};
  auto study_json = [](const StudyCount& c) {
    return nlohmann::json{{"ops", c.ops}, {"bytes_read", value_bytes(c.read)}, {"bytes_written", value_bytes(c.written)}};
  };
  nlohmann::json layers = nlohmann::json::array();
  for (size_t i = 0; i < spec.layers().size(); ++i) {
    const LayerInfo& l = spec.layers()[i];
    nlohmann::json tops = nlohmann::json::array();
    for (const auto& s : l.top_shapes) tops.push_back(s.dims());
    layers.push_back({{"name", l.name},
                      {"type", l.type},
                      {"top_shapes", tops},
                      {"params", l.params},
                      {"forward_macs", l.cost.forward_macs},
                      {"bytes_read", l.cost.bytes_read},
                      {"bytes_written", l.cost.bytes_written}});
    if (study) layers.back()["study"] = study_json(study_count(study_info[i]));
  }
  nlohmann::json j = {{"name", spec.name()},
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
  if (study) {
    StudyTotals st = study_totals(study_info);
    j["study"] = study_json(st.count);
    j["study"]["ctc"] = st.ctc;
    j["definitions"]["study"] =
        "Castro et al. Eqs. 1-9: ops of every layer, bytes = 4 x (inputs + parameters) read and 4 x outputs "
        "written; ctc = ops / fp32 values read (docs/seeds.md, Table 1)";
  }
  return j;
}

}  // namespace cnnscale
