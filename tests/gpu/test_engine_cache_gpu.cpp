// The engine cache on the GPU: a backend that finds an int8 convolution's engine in the cache
// compiles only that engine, without searching (the file is left as it was), and computes what the
// searching backend computed, bit for bit (the same engine on the same operands); a cached name the
// GPU does not offer (a file from other libraries, or edited) is searched anew and replaced.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "backend/engine_cache.hpp"
#include "common/temp_dir.hpp"
#include "parity_util.hpp"

namespace cnnscale::testing {
namespace {

std::string text_of(const std::string& path) {
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  return text.str();
}

// One int8 convolution (3x3, 64 -> 64 channels, bf16 y with bias and ReLU) on a fresh backend, as
// a new process would run it.
std::vector<float> int8_conv_on_fresh_backend() {
  std::unique_ptr<Backend> g = make_backend("gpu:0", 0, Precision::BF16);
  ConvParams p;
  p.kernel_h = p.kernel_w = 3;
  p.pad_h = p.pad_w = 1;
  const Shape xs{4, 64, 14, 14}, ws{64, 64, 3, 3}, ys{4, 64, 14, 14};
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> u(-127, 127);
  std::vector<int8_t> xv(static_cast<size_t>(xs.numel())), wv(static_cast<size_t>(ws.numel()));
  for (auto& v : xv) v = static_cast<int8_t>(u(rng));
  for (auto& v : wv) v = static_cast<int8_t>(u(rng));
  // Channel order does not matter here: both backends see the same bytes.
  Tensor xq = g->alloc(xs, DType::I8).as_layout(Layout::NHWC), wq = g->alloc(ws, DType::I8).as_layout(Layout::NHWC);
  g->upload(xv.data(), xq);
  g->upload(wv.data(), wq);
  Tensor scale = g->alloc(Shape{64}), bias = g->alloc(Shape{64});
  from_host(*g, scale, std::vector<float>(64, 1.0f / (127.0f * 127.0f * 8.0f)));
  from_host(*g, bias, std::vector<float>(64, 0.1f));
  Tensor y = g->alloc(ys, DType::BF16).as_layout(Layout::NHWC);
  g->conv_forward_int8(p, xq, wq, scale, bias, Tensor(), Tensor(), true, y);
  return to_host(*g, y);
}

TEST(EngineCacheGpu, AHitCompilesTheMeasuredEngineAndComputesTheSame) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  TempDir dir;
  const std::string path = dir.file("engines.txt");
  EngineCache::set_for_process(std::make_unique<EngineCache>(path));
  const std::vector<float> searched = int8_conv_on_fresh_backend();
  const std::string after_search = text_of(path);
  const auto found = EngineCache(path).entries();
  ASSERT_EQ(found.size(), 1u) << after_search;  // the search's winner, one line
  const auto& [key, engine] = *found.begin();
  EXPECT_NE(key.find("| int8 conv "), std::string::npos) << key;

  EngineCache::set_for_process(std::make_unique<EngineCache>(path));  // a new process reads the file
  const std::vector<float> cached = int8_conv_on_fresh_backend();
  EXPECT_EQ(text_of(path), after_search);  // a hit: no search, nothing rewritten
  EXPECT_EQ(cached, searched);

  // A name this GPU does not offer: searched again, and the file then holds a real engine. The
  // search may time another engine fastest. Every engine sums the int8 products exactly in int32
  // (fan-in 576, |sum| < 2^24), so only the fp32 epilogue may round differently (an FMA or not:
  // 1e-6 relative) before y's own bf16 rounding, which can then land one bf16 ulp apart: at most
  // 2^-8 of max |y|, inside tol_16bit (4 x 2^-8 + 1e-4, normalised by max |y|).
  std::ofstream(path) << EngineCache::kHeader << '\n' << key << "\tno_such_engine\n";
  EngineCache::set_for_process(std::make_unique<EngineCache>(path));
  const std::vector<float> researched = int8_conv_on_fresh_backend();
  EngineCache::set_for_process(nullptr);
  const auto replaced = EngineCache(path).find(key);
  ASSERT_TRUE(replaced.has_value());
  EXPECT_NE(*replaced, "no_such_engine");
  expect_parity("int8 conv searched anew", researched, searched, tol_16bit(DType::BF16));
}

}  // namespace
}  // namespace cnnscale::testing
