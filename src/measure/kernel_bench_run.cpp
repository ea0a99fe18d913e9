// Inputs, references, tolerances, timing and power windows of the kernel benchmarks.
#include "measure/kernel_bench_run.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.hpp"
#include "core/half.hpp"
#include "core/rng.hpp"

namespace cnnscale::measure {

namespace {

std::vector<float> draw(int64_t n, KernelPrecision precision, uint64_t seed, uint64_t stream) {
  std::vector<float> v(static_cast<size_t>(n));
  const DType t = kernel_input_dtype(precision);
  // One SplitMix64 hash per element (DeepBench's matrices run to 10^8 elements): 24 random bits.
  const uint64_t base = mix64(seed ^ mix64(stream));
  for (int64_t i = 0; i < n; ++i) {
    const float u = static_cast<float>(mix64(base + static_cast<uint64_t>(i)) >> 40) * (1.0f / 16777216.0f);
    v[static_cast<size_t>(i)] = t == DType::I8 ? std::floor(u * 17.0f) - 8.0f : round_to(t, 2.0f * u - 1.0f);
  }
  return v;
}

}  // namespace

KernelInputs gemm_inputs(const GemmProblem& p, KernelPrecision precision, uint64_t seed) {
  return {draw(p.m * p.k, precision, seed, 1), draw(p.k * p.n, precision, seed, 2)};
}

KernelInputs conv_inputs(const ConvProblem& p, ConvPass pass, KernelPrecision precision, uint64_t seed) {
  const int64_t nx = p.x_shape().numel(), nw = p.w_shape().numel(), ny = p.y_shape().numel();
  switch (pass) {
    case ConvPass::Forward:
      return {draw(nx, precision, seed, 1), draw(nw, precision, seed, 2)};
    case ConvPass::BackwardData:
      return {draw(ny, precision, seed, 3), draw(nw, precision, seed, 2)};
    case ConvPass::BackwardFilter:
      return {draw(nx, precision, seed, 1), draw(ny, precision, seed, 3)};
  }
  return {};
}

RnnInputs rnn_inputs(const RnnProblem& p, KernelPrecision precision, uint64_t seed) {
  if (precision == KernelPrecision::INT8) throw_config("bench rnn: cuDNN's RNNs have no int8 format");
  const DType t = kernel_input_dtype(precision);
  const int64_t h = p.hidden;
  // Weights uniform in +-0.5/h and biases in +-0.25 (rounded to the format): every pre-activation's
  // terms sum to at most 0.5 |x| + 0.5 |h| + 0.5 in magnitude, so no gate saturates and the
  // gains of the recurrence stay bounded (see rnn_check_tolerance).
  auto scaled = [&](int64_t n, uint64_t stream, float scale) {
    std::vector<float> v = draw(n, precision, seed, stream);
    for (float& e : v) e = round_to(t, e * scale);
    return v;
  };
  RnnInputs in;
  in.x = draw(p.time_steps * p.batch * h, precision, seed, 11);
  for (int64_t g = 0; g < p.gates(); ++g) {
    const uint64_t s = 12 + 4 * static_cast<uint64_t>(g);
    in.w.push_back(scaled(h * h, s, 0.5f / static_cast<float>(h)));
    in.r.push_back(scaled(h * h, s + 1, 0.5f / static_cast<float>(h)));
    in.bw.push_back(scaled(h, s + 2, 0.25f));
    in.br.push_back(scaled(h, s + 3, 0.25f));
  }
  return in;
}

Reference rnn_reference(const RnnProblem& p, const RnnInputs& in) {
  const size_t H = static_cast<size_t>(p.hidden), B = static_cast<size_t>(p.batch);
  const size_t T = static_cast<size_t>(p.time_steps), G = static_cast<size_t>(p.gates());
  Reference r{std::vector<double>(T * B * H), std::vector<double>(T * B * H, 1.0)};
  auto sigmoid = [](double a) { return 1.0 / (1.0 + std::exp(-a)); };
  std::vector<double> h(B * H, 0.0), c(B * H, 0.0), wx(G * H), rh(G * H);
  for (size_t t = 0; t < T; ++t) {
    std::vector<double> next(B * H);
    for (size_t b = 0; b < B; ++b) {
      const float* x = in.x.data() + (t * B + b) * H;
      const double* hp = h.data() + b * H;
      // Per gate the input and recurrent parts apart: GRU's new gate scales only the recurrent one.
      for (size_t g = 0; g < G; ++g)
        for (size_t i = 0; i < H; ++i) {
          double sx = in.bw[g][i], sh = in.br[g][i];
          for (size_t j = 0; j < H; ++j) {
            sx += double(in.w[g][i * H + j]) * x[j];
            sh += double(in.r[g][i * H + j]) * hp[j];
          }
          wx[g * H + i] = sx;
          rh[g * H + i] = sh;
        }
      for (size_t i = 0; i < H; ++i) {
        double out = 0;
        switch (p.cell) {
          case RnnCell::Vanilla:
            out = std::max(0.0, wx[i] + rh[i]);
            break;
          case RnnCell::Lstm: {
            const double ig = sigmoid(wx[i] + rh[i]), fg = sigmoid(wx[H + i] + rh[H + i]);
            const double cg = std::tanh(wx[2 * H + i] + rh[2 * H + i]), og = sigmoid(wx[3 * H + i] + rh[3 * H + i]);
            double& cell = c[b * H + i];
            cell = fg * cell + ig * cg;
            out = og * std::tanh(cell);
            break;
          }
          case RnnCell::Gru: {
            const double reset = sigmoid(wx[i] + rh[i]), update = sigmoid(wx[H + i] + rh[H + i]);
            const double fresh = std::tanh(wx[2 * H + i] + reset * rh[2 * H + i]);
            out = (1.0 - update) * fresh + update * hp[i];
            break;
          }
        }
        next[b * H + i] = out;
        r.value[(t * B + b) * H + i] = out;
      }
    }
    h = std::move(next);
  }
  return r;
}

double rnn_check_tolerance(KernelPrecision precision, const RnnProblem& p) {
  // The reference's magnitudes are 1, so the error checked is absolute. With rnn_inputs' scale
  // (row sums of |w| and |r| <= 0.5, biases +-0.25, |x| <= 1) every pre-activation is at most
  // 0.5 + 0.5 |h| + 0.5 <= 2 in magnitude (|h| <= 2 for the ReLU cell, <= 1 for the gated ones), so
  // a step computes each one to within 2 x the format's bound for 2h + 2 terms; through the cell's
  // slopes (sigmoid 1/4, tanh and ReLU 1; LSTM's cell state |c| <= 0.82 x 0.91 / 0.18 < 5 multiplies
  // a gate's error by 1/4) that is at most 3 pre-activation errors in h and c: delta = 6 x bound.
  // An error in h (and c) carries into the next step with a gain L at most: vanilla 0.5 (the row
  // sums, ReLU slope 1); GRU 1.25 (the update gate's mix is at most 1, its own slope adds
  // 2 x 1/4 x 0.5); LSTM 2 (the infinity norm of the (h, c) step's Jacobian: forget <= 0.82, the gates'
  // dependence on h <= 1.15). So after t steps the error is at most delta (1 + L + ... + L^(t-1)).
  // A proof, not an estimate: loose for the gated cells and 16-bit formats (where it flags only gross
  // failures), tight for the ReLU cell; the weight layout and gate order are pinned by the fp32
  // check of short sequences, which goes through the same code.
  const double gain = p.cell == RnnCell::Vanilla ? 0.5 : p.cell == RnnCell::Gru ? 1.25 : 2.0;
  double steps = 0, power = 1;
  for (int64_t k = 0; k < p.time_steps && std::isfinite(steps); ++k, power *= gain) steps += power;
  return 6.0 * check_tolerance(precision, 2 * p.hidden + 2) * steps;
}

SparseInputs sparse_inputs(const SparseProblem& p, uint64_t seed) {
  SparseInputs in;
  in.row_ptr.reserve(static_cast<size_t>(p.m) + 1);
  in.row_ptr.push_back(0);
  const uint64_t where = mix64(seed ^ mix64(4)), what = mix64(seed ^ mix64(5));
  const double keep = 1.0 - p.sparsity;
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.k; ++j) {
      const uint64_t cell = static_cast<uint64_t>(i * p.k + j);
      if (static_cast<double>(mix64(where + cell) >> 11) * 0x1.0p-53 >= keep) continue;
      in.col_idx.push_back(static_cast<int32_t>(j));
      in.values.push_back(static_cast<float>(mix64(what + cell) >> 40) * (2.0f / 16777216.0f) - 1.0f);
    }
    if (in.values.size() > 0x7fffffffu) throw_config("bench spmm: more than 2^31 non-zeros");
    in.row_ptr.push_back(static_cast<int32_t>(in.values.size()));
  }
  in.b = draw(p.k * p.n, KernelPrecision::FP32, seed, 6);
  return in;
}

Reference sparse_reference(const SparseProblem& p, const SparseInputs& in) {
  Reference r{std::vector<double>(static_cast<size_t>(p.m * p.n)), std::vector<double>(static_cast<size_t>(p.m * p.n))};
  for (int64_t j = 0; j < p.n; ++j)
    for (int64_t i = 0; i < p.m; ++i) {
      double s = 0, mag = 0;
      for (int32_t e = in.row_ptr[static_cast<size_t>(i)]; e < in.row_ptr[static_cast<size_t>(i) + 1]; ++e) {
        const double t = double(in.values[static_cast<size_t>(e)]) *
                         in.b[static_cast<size_t>(j * p.k + in.col_idx[static_cast<size_t>(e)])];
        s += t;
        mag += std::fabs(t);
      }
      r.value[static_cast<size_t>(j * p.m + i)] = s;
      r.magnitude[static_cast<size_t>(j * p.m + i)] = mag;
    }
  return r;
}

Reference gemm_reference(const GemmProblem& p, const KernelInputs& in) {
  Reference r{std::vector<double>(static_cast<size_t>(p.m * p.n)), std::vector<double>(static_cast<size_t>(p.m * p.n))};
  const int64_t lda = p.trans_a ? p.k : p.m, ldb = p.trans_b ? p.n : p.k;
  for (int64_t j = 0; j < p.n; ++j)
    for (int64_t i = 0; i < p.m; ++i) {
      double s = 0, mag = 0;
      for (int64_t l = 0; l < p.k; ++l) {
        const double a = in.first[static_cast<size_t>(p.trans_a ? i * lda + l : l * lda + i)];
        const double b = in.second[static_cast<size_t>(p.trans_b ? l * ldb + j : j * ldb + l)];
        s += a * b;
        mag += std::fabs(a * b);
      }
      r.value[static_cast<size_t>(j * p.m + i)] = s;
      r.magnitude[static_cast<size_t>(j * p.m + i)] = mag;
    }
  return r;
}

// One loop over every (output pixel, filter tap, channel) term; each pass adds the term to its own
// output: y[n,k,p,q] (forward), dx[n,c,h,w] (backward-data), dw[k,c,r,s] (backward-filter).
Reference conv_reference(const ConvProblem& p, ConvPass pass, const KernelInputs& in) {
  const int64_t P = p.out_h(), Q = p.out_w();
  const int64_t out_n = pass == ConvPass::Forward        ? p.y_shape().numel()
                        : pass == ConvPass::BackwardData ? p.x_shape().numel()
                                                         : p.w_shape().numel();
  Reference r{std::vector<double>(static_cast<size_t>(out_n)), std::vector<double>(static_cast<size_t>(out_n))};
  const std::vector<float>& x = pass == ConvPass::BackwardData ? in.second : in.first;    // unused for bwd_data
  const std::vector<float>& w = pass == ConvPass::BackwardFilter ? in.first : in.second;  // unused for bwd_filter
  const std::vector<float>& dy = pass == ConvPass::BackwardData ? in.first : in.second;   // unused for fwd
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t k = 0; k < p.k; ++k)
      for (int64_t op = 0; op < P; ++op)
        for (int64_t oq = 0; oq < Q; ++oq)
          for (int64_t c = 0; c < p.c; ++c)
            for (int64_t fr = 0; fr < p.r; ++fr) {
              const int64_t ih = op * p.stride_h - p.pad_h + fr;
              if (ih < 0 || ih >= p.h) continue;
              for (int64_t fs = 0; fs < p.s; ++fs) {
                const int64_t iw = oq * p.stride_w - p.pad_w + fs;
                if (iw < 0 || iw >= p.w) continue;
                const size_t xi = static_cast<size_t>(((n * p.c + c) * p.h + ih) * p.w + iw);
                const size_t wi = static_cast<size_t>(((k * p.c + c) * p.r + fr) * p.s + fs);
                const size_t yi = static_cast<size_t>(((n * p.k + k) * P + op) * Q + oq);
                double t = 0;
                size_t o = 0;
                switch (pass) {
                  case ConvPass::Forward:
                    t = double(x[xi]) * w[wi];
                    o = yi;
                    break;
                  case ConvPass::BackwardData:
                    t = double(dy[yi]) * w[wi];
                    o = xi;
                    break;
                  case ConvPass::BackwardFilter:
                    t = double(x[xi]) * dy[yi];
                    o = wi;
                    break;
                }
                r.value[o] += t;
                r.magnitude[o] += std::fabs(t);
              }
            }
  return r;
}

double normalized_error(const std::vector<float>& out, const Reference& ref) {
  if (out.size() != ref.value.size())
    throw_runtime("bench --check: {} output values against a reference of {}", out.size(), ref.value.size());
  double worst = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double err = std::fabs(static_cast<double>(out[i]) - ref.value[i]);
    // An element no term reached (a padding-only input pixel) must come out exactly 0.
    const double scale = std::max(ref.magnitude[i], std::numeric_limits<double>::min());
    if (!std::isfinite(static_cast<double>(out[i]))) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, err / scale);
  }
  return worst;
}

// The inputs are exact in their format (the caller rounded them), so a correct kernel's error comes
// from three places, each bounded relative to S = sum |terms| of the element:
//  - operands rounded inside the math: TF32 keeps 10 of fp32's 23 mantissa bits; whether the tensor
//    cores round to nearest (2^-11 per factor) or drop the low bits (2^-10, errors of one sign that
//    do not cancel) is not documented, so each factor may be off by 2^-10 and a term by
//    2 * 2^-10 = 2^-9 (other formats: exact products; bf16 x bf16 and fp16 x fp16 fit fp32's 24 bits);
//  - fp32 accumulation of `terms` terms in any order: at most terms * 2^-24 (the worst-case bound
//    of recursive summation; blocked and tree sums do better);
//  - the output rounded to its format: half an ulp, 2^-24 (fp32), 2^-8 (bf16), 2^-11 (fp16), of a
//    value no larger than S.
// int8: int32 sums of integers are exact, so the tolerance is 0. Transform-based algorithms (FFT,
// Winograd) round inside their transforms and are not covered by this bound: one that exceeds it is
// reported as disagreeing, which is the finding a user wants to see.
double check_tolerance(KernelPrecision precision, int64_t terms) {
  const double acc = static_cast<double>(terms) * std::ldexp(1.0, -24);
  switch (precision) {
    case KernelPrecision::INT8:
      return 0.0;
    case KernelPrecision::FP32:
      return acc + std::ldexp(1.0, -24);
    case KernelPrecision::TF32:
      return std::ldexp(1.0, -9) + acc + std::ldexp(1.0, -24);
    case KernelPrecision::BF16:
      return acc + std::ldexp(1.0, -8);
    case KernelPrecision::FP16:
      return acc + std::ldexp(1.0, -11);
  }
  return 0.0;
}

int64_t calls_per_repeat(double first_call_ms, const TimingOptions& o) {
  if (!(first_call_ms > 0)) return o.max_calls_per_repeat;
  const double c = std::ceil(o.min_repeat_ms / first_call_ms);
  return static_cast<int64_t>(std::clamp(c, 1.0, static_cast<double>(o.max_calls_per_repeat)));
}

TimingStats time_calls(Backend& backend, const std::function<void()>& call, const TimingOptions& o) {
  auto timed = [&](int64_t calls) {
    auto a = backend.record_timing_event();
    for (int64_t i = 0; i < calls; ++i) call();
    auto b = backend.record_timing_event();
    backend.synchronize();
    return backend.elapsed_ms(*a, *b);
  };
  const double budget_ms = o.max_seconds * 1e3;
  if (o.warmup_calls > 0) {
    // The first call is cold (module loading, plan building) and timed alone: further warm-up calls
    // only while they fit half the budget, so a call of seconds is not warmed up three times.
    const double cold_ms = timed(1);
    int more = o.warmup_calls - 1;
    if (budget_ms > 0 && cold_ms > 0)
      more = static_cast<int>(std::min<double>(more, std::floor(0.5 * budget_ms / cold_ms)));
    for (int i = 0; i < more; ++i) call();
  }
  const double first_ms = timed(1);
  const int64_t calls = calls_per_repeat(first_ms, o);
  int repeats = o.repeats;
  if (budget_ms > 0 && first_ms > 0) {
    const double fit = std::floor(budget_ms / (static_cast<double>(calls) * first_ms));
    repeats = static_cast<int>(std::clamp<double>(fit, std::min(o.min_repeats, o.repeats), o.repeats));
  }
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) ms.push_back(timed(calls));
  return timing_stats(std::move(ms), calls);
}

}  // namespace cnnscale::measure
