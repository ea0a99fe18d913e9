// Convolution and fully connected layers of a network as benchmark problems.
#include "net/bench_problems.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "layers/layer_params.hpp"
#include "net/net_spec_impl.hpp"

namespace cnnscale {

NetProblems net_problems(const std::string& net, int64_t batch) {
  const NetSpec spec = NetSpec::load(resolve_network_path(net));
  NetProblems out;
  std::vector<int> conv_count, gemm_count;
  // A repeated problem counts on its first layer's entry.
  auto add = [](auto& list, std::vector<std::string>& names, std::vector<int>& counts, const auto& p,
                const std::string& name) {
    const auto it = std::find(list.begin(), list.end(), p);
    if (it != list.end()) {
      ++counts[static_cast<size_t>(it - list.begin())];
      return;
    }
    list.push_back(p);
    names.push_back(name);
    counts.push_back(1);
  };
  const auto& layers = spec.impl().layers;
  const auto& infos = spec.impl().infos;
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerConfig& cfg = layers[l].config;
    const LayerInfo& info = infos[l];
    if (info.bottom_shapes.empty() || info.top_shapes.empty()) continue;
    const Shape& x = info.bottom_shapes[0];  // (1, C, H, W) or (1, D): one sample
    const Shape& y = info.top_shapes[0];
    if (cfg.type == "Convolution") {
      if (parse_int_at_least(cfg.node, "group", 1, 1) != 1) {
        out.skipped.push_back(cfg.name + " (grouped)");
        continue;
      }
      const Extent2 kernel = parse_extent2(cfg.node, "kernel", std::nullopt, 1);
      const Extent2 stride = parse_extent2(cfg.node, "stride", Extent2{1, 1}, 1);
      const Extent2 pad = parse_extent2(cfg.node, "pad", Extent2{0, 0}, 0);
      const Extent2 dilation = parse_extent2(cfg.node, "dilation", Extent2{1, 1}, 1);
      if (dilation.h != 1 || dilation.w != 1) {
        out.skipped.push_back(cfg.name + " (dilated)");
        continue;
      }
      ConvProblem p;
      if (x.rank() != 4) continue;
      p.n = batch, p.c = x[1], p.h = x[2], p.w = x[3], p.k = y[1];
      p.r = kernel.h, p.s = kernel.w, p.stride_h = stride.h, p.stride_w = stride.w, p.pad_h = pad.h, p.pad_w = pad.w;
      add(out.convs, out.conv_names, conv_count, p, cfg.name);
    } else if (cfg.type == "InnerProduct") {
      GemmProblem p{y.numel(), batch, x.numel(), true, false};
      add(out.gemms, out.gemm_names, gemm_count, p, cfg.name);
    }
  }
  for (size_t i = 0; i < out.convs.size(); ++i)
    if (conv_count[i] > 1) out.conv_names[i] += fmt::format(" (x{})", conv_count[i]);
  for (size_t i = 0; i < out.gemms.size(); ++i)
    if (gemm_count[i] > 1) out.gemm_names[i] += fmt::format(" (x{})", gemm_count[i]);
  return out;
}

}  // namespace cnnscale
