// backend/engine_cache: the file of measured kernel choices that GPU processes share
// (CNNSCALE_ENGINE_CACHE). What the GPU backend does with a hit is checked on the GPU; here, that
// choices survive processes and concurrent writers, and that a bad file is one clear error.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

#include "backend/engine_cache.hpp"
#include "common/temp_dir.hpp"
#include "core/error.hpp"

namespace cnnscale {
namespace {

using testing::TempDir;

std::string text_of(const std::string& path) {
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  return text.str();
}

TEST(EngineCache, ChoicesOutliveTheProcessThatMeasuredThem) {
  TempDir dir;
  const std::string path = dir.file("engines.txt");
  EngineCache first(path);
  EXPECT_EQ(first.loaded(), 0u);  // no file yet: an empty cache, and nothing written until a put
  EXPECT_EQ(dir.entries(), std::vector<std::string>{});
  first.put("H200 sm_90 cudnn 9.14.0 | int8 conv x (1,56,56,64)", "eng7_k2=1");
  first.put("H200 sm_90 cudnn 9.14.0 | conv_forward_bias_relu bf16", kEngineCacheApart);
  first.put("H200 sm_90 cudnn 9.14.0 | int8 conv x (1,56,56,64)", "eng9");  // a new measurement replaces
  EXPECT_EQ(dir.entries(), std::vector<std::string>({"engines.txt"}));      // no temporary left behind
  EXPECT_EQ(text_of(path), std::string(EngineCache::kHeader) +
                               "\nH200 sm_90 cudnn 9.14.0 | conv_forward_bias_relu bf16\t(ops apart)"
                               "\nH200 sm_90 cudnn 9.14.0 | int8 conv x (1,56,56,64)\teng9\n");
  const EngineCache later(path);
  EXPECT_EQ(later.loaded(), 2u);
  EXPECT_EQ(later.find("H200 sm_90 cudnn 9.14.0 | int8 conv x (1,56,56,64)"), std::optional<std::string>("eng9"));
  EXPECT_EQ(later.find("H100 sm_90 cudnn 9.14.0 | int8 conv x (1,56,56,64)"), std::nullopt);  // another GPU: a miss
}

TEST(EngineCache, ConcurrentWritersLoseNoChoice) {
  // Two ranks of one job read the same (empty) file, then each adds its own searches.
  TempDir dir;
  const std::string path = dir.file("engines.txt");
  EngineCache rank0(path), rank1(path);
  rank0.put("k0", "a");
  rank1.put("k1", "b");  // rewrites the file: rank 0's choice, which it never read, stays
  rank0.put("k2", "c");
  rank1.put("k0", "a2");  // both measured k0: the later writer's stands
  const EngineCache merged(path);
  EXPECT_EQ(merged.size(), 3u);
  EXPECT_EQ(merged.find("k0"), std::optional<std::string>("a2"));
  EXPECT_EQ(merged.find("k1"), std::optional<std::string>("b"));
  EXPECT_EQ(merged.find("k2"), std::optional<std::string>("c"));
}

TEST(EngineCache, BadFilesAndBadEntriesAreOneClearError) {
  TempDir dir;
  const auto expect_config = [](const std::string& path, const std::string& message) {
    try {
      EngineCache cache(path);
      ADD_FAILURE() << "no error for " << path;
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), message);
    }
  };
  const std::string other = dir.file("other.txt");
  std::ofstream(other) << "results of something else\n";
  expect_config(other, other + ":1: not a cnnscale engine cache (CNNSCALE_ENGINE_CACHE): expected the line '" +
                           EngineCache::kHeader + "'");
  const std::string broken = dir.file("broken.txt");
  std::ofstream(broken) << EngineCache::kHeader << "\nkey\tchoice\n\nkey without a choice\n";
  expect_config(broken, broken + ":4: expected KEY<TAB>CHOICE in the engine cache (CNNSCALE_ENGINE_CACHE)");
  std::ofstream(broken) << EngineCache::kHeader << "\nkey\tchoice\textra\n";
  expect_config(broken, broken + ":2: expected KEY<TAB>CHOICE in the engine cache (CNNSCALE_ENGINE_CACHE)");

  // Searches add to the file mid-run: a folder that cannot take it is refused when the cache opens.
  const std::string nowhere = dir.file("missing") + "/engines.txt";
  expect_config(nowhere, nowhere + ": the engine cache (CNNSCALE_ENGINE_CACHE) cannot be written there: folder " +
                             dir.file("missing") + "/ is missing or not writable");

  EngineCache cache(dir.file("ok.txt"));
  EXPECT_THROW(cache.put("a\tb", "c"), RuntimeError);
  EXPECT_THROW(cache.put("a", "line\nbreak"), RuntimeError);
  EXPECT_THROW(cache.put("", "c"), RuntimeError);
  EXPECT_EQ(cache.size(), 0u);
}

// A convolution direction's entry: what is written reads back as it was, the measured time to the
// same float (fmt's shortest form), and any other text is no entry at all, so that the backend
// searches anew rather than run something the line did not say.
TEST(EngineCache, ConvolutionSearchEntriesReadBackAsWrittenAndNothingElse) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> ms(0.0f, 50.0f);
  for (int i = 0; i < 200; ++i) {
    ConvSearchEntry e{i % 8, i % 3, (uint64_t{1} << (i % 40)) + static_cast<uint64_t>(i), ms(rng),
                      i % 2 ? "eng" + std::to_string(i) + "_k2=1_k13=0" : std::string()};
    const std::string text = format_conv_search(e);
    EXPECT_EQ(parse_conv_search(text), std::optional<ConvSearchEntry>(e)) << text;
  }
  EXPECT_EQ(format_conv_search({1, 0, 4096, 0.5f, ""}), "algo 1 math 0 workspace 4096 ms 0.5");
  EXPECT_EQ(format_conv_search({6, 1, 0, 0.25f, "eng41_k2=0"}), "algo 6 math 1 workspace 0 ms 0.25 graph eng41_k2=0");
  for (const char* bad :
       {"", "algo 1", "algo 1 math 0 workspace 4096", "algo 1 math 0 workspace 4096 ms",
        "algo x math 0 workspace 4096 ms 0.5", "algo 1 math 0 workspace -1 ms 0.5", "algo -1 math 0 workspace 0 ms 0.5",
        "algo 1 math -2 workspace 0 ms 0.5", "algo 1 math 0 workspace 0 ms nan", "algo 1 math 0 workspace 0 ms -0.5",
        "algo 1 math 0 workspace 0 ms inf", "algo 1.5 math 0 workspace 0 ms 0.5",
        "algo 1 math 0 workspace 0 ms 0.5 graph", "algo 1 math 0 workspace 0 ms 0.5 engine e1",
        "algo 1 math 0 workspace 0 ms 0.5 graph e1 extra", "math 0 algo 1 workspace 0 ms 0.5",
        "algo 1 math 0 workspace 12x ms 0.5", kEngineCacheApart, "eng41_k2=0"})
    EXPECT_EQ(parse_conv_search(bad), std::nullopt) << "'" << bad << "'";
}

}  // namespace
}  // namespace cnnscale
