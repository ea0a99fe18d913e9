// Finite-difference gradient checker (see gradient_check.hpp).
#include "gradient_check.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace cnnscale::testing {

namespace {

// L = sum_j r_j * top_j, accumulated in double so the difference quotient is limited by the
// layer's own float rounding, not by the objective's.
double objective(LayerHarness& h, const std::vector<std::vector<float>>& projection, Phase phase) {
  h.forward(phase);
  double sum = 0.0;
  for (size_t t = 0; t < h.tops.size(); ++t) {
    const float* y = h.tops[t].f32();
    for (size_t i = 0; i < projection[t].size(); ++i) sum += static_cast<double>(projection[t][i]) * y[i];
  }
  return sum;
}

struct Checker {
  LayerHarness& h;
  const GradCheckOptions& opt;
  const std::vector<std::vector<float>>& projection;
  GradCheckResult result;

  // Perturbs data[i] of `what` and compares with analytic[i].
  void check_tensor(const std::string& what, float* data, const std::vector<float>& analytic, bool use_kink) {
    for (size_t i = 0; i < analytic.size(); ++i) {
      const float saved = data[i];
      if (use_kink && opt.kink_range >= 0.0f && std::fabs(saved - opt.kink) < opt.kink_range) {
        ++result.skipped;
        continue;
      }
      data[i] = saved + opt.step;
      const double plus = objective(h, projection, opt.phase);
      data[i] = saved - opt.step;
      const double minus = objective(h, projection, opt.phase);
      data[i] = saved;
      const double numeric = (plus - minus) / (2.0 * opt.step);
      const double a = analytic[i];
      const double scale = std::max({std::fabs(a), std::fabs(numeric), static_cast<double>(opt.floor)});
      const double error = std::fabs(a - numeric) / scale;
      ++result.checked;
      result.max_error = std::max(result.max_error, error);
      if (error > opt.threshold) {
        if (++result.failures <= 10)
          result.report += fmt::format("{}[{}]: analytic {:.6g}, numeric {:.6g} (relative error {:.3g})\n", what, i, a,
                                       numeric, error);
      }
    }
  }
};

}  // namespace

GradCheckResult check_gradients(LayerHarness& h, const GradCheckOptions& opt) {
  CNNSCALE_CHECK(h.backend->device().is_cpu(), "the gradient checker perturbs host memory: use the CPU backend");
  const Layer& layer = *h.layer;

  // Fixed random projection; a loss layer ignores its top diff and scales by loss_weight itself.
  std::mt19937_64 rng(opt.seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<std::vector<float>> projection;
  for (const Tensor& top : h.tops) {
    std::vector<float> r(static_cast<size_t>(top.numel()));
    for (auto& v : r) v = layer.is_loss() ? layer.loss_weight() : dist(rng);
    projection.push_back(r);
    from_host(*h.backend, h.top_diffs[projection.size() - 1], r);
  }

  // Analytic gradients from one forward + backward.
  h.forward(opt.phase);
  h.backward(opt.phase);
  std::vector<int> bottoms = opt.bottoms;
  if (bottoms.empty())
    for (size_t i = 0; i < h.bottoms.size(); ++i)
      if (h.bottoms[i].dtype() == DType::F32) bottoms.push_back(static_cast<int>(i));
  std::vector<std::vector<float>> bottom_grads;
  for (int b : bottoms) bottom_grads.push_back(to_host(*h.backend, h.bottom_diffs.at(static_cast<size_t>(b))));
  std::vector<std::vector<float>> param_grads;
  for (const Param& p : h.layer->params()) param_grads.push_back(to_host(*h.backend, p.diff));

  Checker checker{h, opt, projection, {}};
  for (size_t k = 0; k < bottoms.size(); ++k)
    checker.check_tensor(fmt::format("bottom{}", bottoms[k]), h.bottoms[static_cast<size_t>(bottoms[k])].f32(),
                         bottom_grads[k], true);
  if (opt.check_params)
    for (size_t k = 0; k < param_grads.size(); ++k)
      checker.check_tensor(h.layer->params()[k].spec.name, h.layer->params()[k].data.f32(), param_grads[k], false);
  return checker.result;
}

}  // namespace cnnscale::testing
