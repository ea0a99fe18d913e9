// The engine cache on the GPU: a backend that finds an int8 convolution's engine in the cache
// compiles only that engine, without searching (the file is left as it was), and computes what the
// searching backend computed, bit for bit (the same engine on the same operands); a cached name the
// GPU does not offer (a file from other libraries, or edited) is searched anew and replaced.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
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

// One bf16 convolution (3x3, 64 -> 64 channels, channels-last) forward, backward to its input and
// to its filter on a fresh backend, as a new process would run them: the three outputs, in order.
std::vector<std::vector<float>> bf16_conv_directions_on_fresh_backend() {
  std::unique_ptr<Backend> g = make_backend("gpu:0", 0, Precision::BF16);
  ConvParams p;
  p.kernel_h = p.kernel_w = 3;
  p.pad_h = p.pad_w = 1;
  const Shape xs{8, 64, 14, 14}, ws{64, 64, 3, 3};
  auto random = [](const Shape& s, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(static_cast<size_t>(s.numel()));
    for (auto& e : v) e = u(rng);
    return v;
  };
  auto tensor = [&](const Shape& s) { return g->alloc(s, DType::BF16).as_layout(Layout::NHWC); };
  Tensor x = tensor(xs), w = tensor(ws), y = tensor(xs), dy = tensor(xs), dx = tensor(xs), dw = tensor(ws);
  from_host(*g, x, random(xs, 1));
  from_host(*g, w, random(ws, 2));
  from_host(*g, dy, random(xs, 3));
  g->conv_forward(p, x, w, y);
  g->conv_backward_data(p, w, dy, dx);
  g->conv_backward_filter(p, x, dy, dw);
  return {to_host(*g, y), to_host(*g, dx), to_host(*g, dw)};
}

// The plain convolutions' searches: each direction's outcome is one line, and a later process
// takes it without timing anything (the file is left as it was) and computes what the searching
// process computed (the same algorithm or engine on the same operands). A line this backend cannot take
// (an algorithm number cuDNN does not have) is a miss: searched anew and replaced.
TEST(EngineCacheGpu, ConvolutionSearchesAreTakenFromTheCacheByALaterProcess) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  TempDir dir;
  const std::string path = dir.file("engines.txt");
  EngineCache::set_for_process(std::make_unique<EngineCache>(path));
  const auto searched = bf16_conv_directions_on_fresh_backend();
  const std::string after_search = text_of(path);
  std::string backward_data_key;
  int directions = 0;
  for (const auto& [key, choice] : EngineCache(path).entries()) {
    for (const char* op : {"| conv_forward bf16 ", "| conv_backward_data bf16 ", "| conv_backward_filter bf16 "})
      if (key.find(op) != std::string::npos) {
        ++directions;
        EXPECT_EQ(choice.rfind("algo ", 0), 0u) << key << "\t" << choice;
      }
    if (key.find("| conv_backward_data bf16 ") != std::string::npos) backward_data_key = key;
  }
  ASSERT_EQ(directions, 3) << after_search;

  EngineCache::set_for_process(std::make_unique<EngineCache>(path));  // a new process reads the file
  const auto cached = bf16_conv_directions_on_fresh_backend();
  EXPECT_EQ(text_of(path), after_search);  // every search a hit: nothing rewritten
  // The same algorithms run on the same operands; some of cuDNN's backward algorithms (dx, dw) sum
  // with atomics in an order that varies from run to run, so the fp32 sums may differ in their last
  // bits and the bf16 rounding of an output land one ulp apart: at most 2^-7 of |v| <= max |v|,
  // inside tol_16bit (4 x 2^-8 + 1e-4, normalised by max |v|).
  ASSERT_EQ(cached.size(), searched.size());
  for (size_t i = 0; i < searched.size(); ++i)
    expect_parity("direction " + std::to_string(i) + " from the cache", cached[i], searched[i], tol_16bit(DType::BF16));

  std::map<std::string, std::string> edited = EngineCache(path).entries();
  edited[backward_data_key] = "algo 999 math 0 workspace 0 ms 1";
  {
    std::ofstream out(path);
    out << EngineCache::kHeader << '\n';
    for (const auto& [key, choice] : edited) out << key << '\t' << choice << '\n';
  }
  EngineCache::set_for_process(std::make_unique<EngineCache>(path));
  bf16_conv_directions_on_fresh_backend();
  EngineCache::set_for_process(nullptr);
  const auto replaced = EngineCache(path).find(backward_data_key);
  ASSERT_TRUE(replaced.has_value());
  EXPECT_NE(*replaced, "algo 999 math 0 workspace 0 ms 1");
  EXPECT_EQ(replaced->rfind("algo ", 0), 0u) << *replaced;
}

}  // namespace
}  // namespace cnnscale::testing
