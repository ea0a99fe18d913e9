// The GPU's int8 ops against the CPU reference: quantize_int8 bit for bit (the same IEEE division
// and rounding), from f32 and bf16, channels-last with padding channels; conv_forward_int8 (a cuDNN
// int8 graph summing in int32, then scale, bias, addend and ReLU in fp32) on the same int8 operands.
// Both sides sum the integer products exactly (fan-ins here keep the CPU's float sums below 2^24),
// so the outputs differ only by the epilogue's fp32 roundings (an FMA or not: 1e-6) and y's own
// rounding in bf16 (tol_16bit); a dropped scale, bias, addend or ReLU, or a wrong channel order,
// errs by O(1) (the addend's case checks that it does). The int8 outputs, the int8 addend and the
// int8 fully connected layer are checked below with their own arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "parity_util.hpp"

namespace cnnscale::testing {
namespace {

// NCHW host values -> the same values channels-last (NHWC, or KRSC for filters).
std::vector<int8_t> to_channels_last(const std::vector<int8_t>& v, const Shape& s) {
  const int64_t n = s[0], c = s[1], hw = s[2] * s[3];
  std::vector<int8_t> out(v.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < hw; ++p)
        out[static_cast<size_t>((i * hw + p) * c + ch)] = v[static_cast<size_t>((i * c + ch) * hw + p)];
  return out;
}

std::vector<int8_t> download_i8(Backend& b, const Tensor& q) {
  std::vector<int8_t> out(static_cast<size_t>(q.numel()));
  b.download(q, out.data());
  return out;
}

TEST(Int8Gpu, QuantizeMatchesTheCpuBitForBit) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  Backend& g = gpu_backend();
  Backend& cpu = cpu_backend();
  const Shape s{2, 3, 5, 5}, padded{2, 16, 5, 5};
  for (DType dtype : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor x = g.alloc(s, dtype).as_layout(Layout::NHWC);
    fill_uniform(g, x, 31, -40.0f, 40.0f);
    Tensor xc = cpu.alloc(s);
    from_host(cpu, xc, to_host(g, x));
    Tensor q = g.alloc(padded, DType::I8).as_layout(Layout::NHWC), qc = cpu.alloc(padded, DType::I8);
    g.quantize_int8(x, 0.3f, q);
    cpu.quantize_int8(xc, 0.3f, qc);
    EXPECT_EQ(download_i8(g, q), to_channels_last(download_i8(cpu, qc), padded));
  }
}

struct Int8Case {
  const char* name;
  Shape x;
  int64_t k;
  int kernel, pad, stride;
};

class Int8GpuConv : public ::testing::TestWithParam<Int8Case> {};

TEST_P(Int8GpuConv, EveryEpilogueMatchesTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  const Int8Case& c = GetParam();
  Backend& g = gpu_backend();
  Backend& cpu = cpu_backend();
  ConvParams p;
  p.kernel_h = p.kernel_w = c.kernel;
  p.pad_h = p.pad_w = c.pad;
  p.stride_h = p.stride_w = c.stride;
  const Shape ws{c.k, c.x[1], c.kernel, c.kernel};
  const int64_t out = conv_output_dim(c.x[2], c.kernel, c.stride, c.pad, 1);
  const Shape ys{c.x[0], c.k, out, out};
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> u(-127, 127);
  std::vector<int8_t> xs(static_cast<size_t>(c.x.numel())), wv(static_cast<size_t>(ws.numel()));
  for (auto& v : xs) v = static_cast<int8_t>(u(rng));
  for (auto& v : wv) v = static_cast<int8_t>(u(rng));
  Tensor xq = g.alloc(c.x, DType::I8).as_layout(Layout::NHWC), wq = g.alloc(ws, DType::I8).as_layout(Layout::NHWC);
  g.upload(to_channels_last(xs, c.x).data(), xq);
  g.upload(to_channels_last(wv, ws).data(), wq);
  Tensor xqc = cpu.alloc(c.x, DType::I8), wqc = cpu.alloc(ws, DType::I8);
  cpu.upload(xs.data(), xqc);
  cpu.upload(wv.data(), wqc);
  // Scales that bring acc (about 127^2 * sqrt(fan-in) / 3 in size) to O(1), one per channel.
  const double fan_in = static_cast<double>(ws.numel() / c.k);
  std::vector<float> scale(static_cast<size_t>(c.k)), bias(static_cast<size_t>(c.k));
  for (int64_t o = 0; o < c.k; ++o) {
    scale[static_cast<size_t>(o)] =
        static_cast<float>((1.0 + 0.5 * (o % 3)) / (127.0 * 127.0 * std::sqrt(fan_in) / 3.0));
    bias[static_cast<size_t>(o)] = 0.25f * static_cast<float>(o % 5) - 0.5f;
  }
  Tensor sg = g.alloc(Shape{c.k}), bg = g.alloc(Shape{c.k}), sc = cpu.alloc(Shape{c.k}), bc = cpu.alloc(Shape{c.k});
  from_host(g, sg, scale);
  from_host(g, bg, bias);
  from_host(cpu, sc, scale);
  from_host(cpu, bc, bias);
  for (DType dtype : {DType::F32, DType::BF16})
    for (bool with_addend : {false, true})
      for (bool relu : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << c.name << " y " << dtype_name(dtype) << " addend " << with_addend << " relu " << relu);
        Tensor y = g.alloc(ys, dtype).as_layout(Layout::NHWC), yc = cpu.alloc(ys);
        Tensor z, zc;
        if (with_addend) {
          z = g.alloc(ys, dtype).as_layout(Layout::NHWC);
          fill_uniform(g, z, 41, -1.0f, 1.0f);
          zc = cpu.alloc(ys);
          from_host(cpu, zc, to_host(g, z));
        }
        g.fill(y, 9.0f);
        g.conv_forward_int8(p, xq, wq, sg, bg, z, Tensor(), relu, y);
        cpu.conv_forward_int8(p, xqc, wqc, sc, bc, zc, Tensor(), relu, yc);
        const double tol = dtype == DType::F32 ? 1e-6 : tol_16bit(dtype);
        const std::vector<float> got = to_host(g, y);
        expect_parity(std::string(c.name) + " int8", got, to_host(cpu, yc), tol);
        if (with_addend) {
          // Negative control: the same measure tells the result without the addend apart (the
          // addend, uniform in [-1, 1], moves outputs of size O(1) by up to 1: a normalised error
          // of order 0.1-1, against tolerances of 1e-6 and 1.6e-2).
          Tensor bare = cpu.alloc(ys);
          cpu.conv_forward_int8(p, xqc, wqc, sc, bc, Tensor(), Tensor(), relu, bare);
          EXPECT_GT(parity_error(got, to_host(cpu, bare)).normalized, 5 * tol);
        }
      }

  // An int8 y (after the ReLU), the next layer's input: scale, bias and addend scale carry the
  // output's 1 / s_y (here x40, putting v in about [0, 200], so some outputs saturate), and the
  // addend is none, or bf16 or int8 times its per-channel scale. The CPU's f32 y of the same call is
  // v before rounding; the GPU's int8 y must be min(127, round(v)), except where v lies within
  // 2^-12 of a half-integer: the two sides' fp32 epilogues (FMA or not, another order) differ by a
  // few roundings of terms below 2^10, each at most 2^-15.
  std::vector<float> scale8(scale), bias8(bias), zscale(static_cast<size_t>(c.k));
  for (size_t o = 0; o < scale8.size(); ++o) {
    scale8[o] *= 40.0f;
    bias8[o] *= 40.0f;
    zscale[o] = 0.25f + 0.25f * static_cast<float>(o % 4);
  }
  from_host(g, sg, scale8);
  from_host(g, bg, bias8);
  from_host(cpu, sc, scale8);
  from_host(cpu, bc, bias8);
  Tensor zsg = g.alloc(Shape{c.k}), zsc = cpu.alloc(Shape{c.k});
  from_host(g, zsg, zscale);
  from_host(cpu, zsc, zscale);
  for (const char* addend : {"none", "bf16", "i8"}) {
    SCOPED_TRACE(::testing::Message() << c.name << " y i8, addend " << addend);
    const std::string kind = addend;
    Tensor y = g.alloc(ys, DType::I8).as_layout(Layout::NHWC), yc = cpu.alloc(ys);
    Tensor z, zc, zs_g, zs_c;
    if (kind == "bf16") {
      z = g.alloc(ys, DType::BF16).as_layout(Layout::NHWC);
      fill_uniform(g, z, 43, -20.0f, 20.0f);
      zc = cpu.alloc(ys);
      from_host(cpu, zc, to_host(g, z));
      zs_g = zsg;  // a floating-point addend beside an int8 y carries the output's 1 / s_y
      zs_c = zsc;
    } else if (kind == "i8") {
      std::vector<int8_t> zv(static_cast<size_t>(ys.numel()));
      std::uniform_int_distribution<int> pos(0, 127);
      for (auto& v : zv) v = static_cast<int8_t>(pos(rng));
      z = g.alloc(ys, DType::I8).as_layout(Layout::NHWC);
      g.upload(to_channels_last(zv, ys).data(), z);
      zc = cpu.alloc(ys, DType::I8);
      cpu.upload(zv.data(), zc);
      zs_g = zsg;
      zs_c = zsc;
    }
    g.conv_forward_int8(p, xq, wq, sg, bg, z, zs_g, true, y);
    cpu.conv_forward_int8(p, xqc, wqc, sc, bc, zc, zs_c, true, yc);  // v, unrounded, NCHW
    const std::vector<int8_t> got = download_i8(g, y);
    const std::vector<float> v = to_host(cpu, yc);
    const int64_t k = ys[1], hw = ys[2] * ys[3];
    int64_t exact = 0, near_ties = 0, saturated = 0, zero = 0;
    for (int64_t i = 0; i < ys[0]; ++i)
      for (int64_t o = 0; o < k; ++o)
        for (int64_t px = 0; px < hw; ++px) {
          const float vv = v[static_cast<size_t>((i * k + o) * hw + px)];
          const int want = static_cast<int>(std::min(127.0f, std::nearbyint(vv)));
          const int have = got[static_cast<size_t>((i * hw + px) * k + o)];
          saturated += vv > 127.5f;
          zero += vv == 0.0f;
          if (have == want) {
            ++exact;
            continue;
          }
          const bool near_tie = std::fabs(vv - std::floor(vv) - 0.5f) < 1.0f / 4096;
          near_ties += near_tie;
          EXPECT_TRUE(near_tie && std::abs(have - want) == 1)
              << "at n " << i << " k " << o << " pixel " << px << ": v " << vv << ", int8 " << have;
        }
    EXPECT_GT(saturated, 0);
    EXPECT_GT(zero, 0);
    EXPECT_EQ(exact + near_ties, ys.numel());
  }
}

// The int8 fully connected layer (cuBLASLt's int8 matmul, int32 sums, then the epilogue kernel)
// against the CPU's exact int64 sums: only the epilogue's fp32 rounding (1e-6) and y's own rounding
// in bf16 (tol_16bit) remain; the weights' padding rows are ignored on both.
TEST(Int8Gpu, LinearMatchesTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  Backend& g = gpu_backend();
  Backend& cpu = cpu_backend();
  for (int64_t n : {1, 7, 64}) {
    const int64_t c = 48, k = 10, kp = 16;
    std::mt19937 rng(static_cast<unsigned>(13 + n));
    std::uniform_int_distribution<int> u(-127, 127);
    std::vector<int8_t> xs(static_cast<size_t>(n * c)), ws(static_cast<size_t>(kp * c));
    for (auto& v : xs) v = static_cast<int8_t>(u(rng));
    for (auto& v : ws) v = static_cast<int8_t>(u(rng));
    Tensor xq = g.alloc(Shape{n, c}, DType::I8), wq = g.alloc(Shape{kp, c}, DType::I8);
    Tensor xqc = cpu.alloc(Shape{n, c}, DType::I8), wqc = cpu.alloc(Shape{kp, c}, DType::I8);
    g.upload(xs.data(), xq);
    g.upload(ws.data(), wq);
    cpu.upload(xs.data(), xqc);
    cpu.upload(ws.data(), wqc);
    std::vector<float> scale(static_cast<size_t>(k)), bias(static_cast<size_t>(k));
    for (int64_t o = 0; o < k; ++o) {
      scale[static_cast<size_t>(o)] = static_cast<float>((1 + o % 3) * 3.0 / (127.0 * 127.0 * std::sqrt(48.0)));
      bias[static_cast<size_t>(o)] = 0.25f * static_cast<float>(o % 5) - 0.5f;
    }
    Tensor sg = g.alloc(Shape{k}), bg = g.alloc(Shape{k}), sc = cpu.alloc(Shape{k}), bc = cpu.alloc(Shape{k});
    from_host(g, sg, scale);
    from_host(g, bg, bias);
    from_host(cpu, sc, scale);
    from_host(cpu, bc, bias);
    for (DType dtype : {DType::F32, DType::BF16})
      for (bool relu : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "n " << n << " y " << dtype_name(dtype) << " relu " << relu);
        Tensor y = g.alloc(Shape{n, k}, dtype), yc = cpu.alloc(Shape{n, k});
        g.fill(y, 9.0f);
        g.linear_forward_int8(xq, wq, sg, bg, relu, y);
        cpu.linear_forward_int8(xqc, wqc, sc, bc, relu, yc);
        expect_parity("int8 linear", to_host(g, y), to_host(cpu, yc), dtype == DType::F32 ? 1e-6 : tol_16bit(dtype));
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Int8GpuConv,
                         ::testing::Values(Int8Case{"k3_pad1_c16_k32", {2, 16, 9, 9}, 32, 3, 1, 1},
                                           Int8Case{"k1_c64_k128", {2, 64, 8, 8}, 128, 1, 0, 1},
                                           Int8Case{"k3_stride2_c32_k64", {2, 32, 10, 10}, 64, 3, 1, 2}),
                         [](const ::testing::TestParamInfo<Int8Case>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace cnnscale::testing
