// backend/engine_cache: the file of measured kernel choices that GPU processes share
// (CNNSCALE_ENGINE_CACHE). What the GPU backend does with a hit is checked on the GPU; here, that
// choices survive processes and concurrent writers, and that a bad file is one clear error.
#include <gtest/gtest.h>

#include <fstream>
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

}  // namespace
}  // namespace cnnscale
