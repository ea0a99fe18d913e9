// EngineCache: a file of the kernel choices a GPU backend measured (which cuDNN graph engine runs a
// convolution of a given shape, or that the ops apart beat every fused engine), so that later
// processes on the same GPU model and libraries take the measured winner instead of compiling and
// timing every candidate again. As TensorRT's timing cache: the search of a ResNet-50 int8
// inference process (dozens of runtime-compiled engine candidates per shape and batch size) takes
// minutes where one finalised plan per shape takes seconds.
//
// Opt in with CNNSCALE_ENGINE_CACHE=FILE (every rank of a job may share the file). Keys carry the
// device model, compute capability and cuDNN version (the backend prefixes them), so a file copied
// to other GPUs or libraries is only ever a miss. A choice is the measured winner of one earlier
// search on that model (a convolution direction's entry keeps the winner's time, which the choice
// between a padded and an unpadded plan compares; no other timing is stored), and a run that wants
// its own search leaves the variable unset. infer's JSON and train's results (/system) record the
// file a run used (`engine_cache`); every process logs it.
// Cached: the int8 convolutions' engines, the fused forward plans (convolution with bias, ReLU,
// residual) against the same ops apart, and each plain convolution direction's search (the legacy
// algorithm with its math type, workspace and time, and the graph engine that beat it, if one did).
// In a green context of fewer SMs the key carries the granted SM count: what wins there can differ.
//
// Format: a first line "# cnnscale engine cache 1", then one "KEY<TAB>CHOICE" per line; keys and
// choices hold no tab or newline. A malformed file is a ConfigError naming FILE:LINE. Every put()
// rewrites the file atomically (a temporary name, then rename), merged with what other processes
// wrote meanwhile (theirs kept where keys differ, ours where both have one), so concurrent ranks
// lose no choice and a reader never sees half a file.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace cnnscale {

// The choice that says no fused engine beat the same ops run apart.
inline constexpr const char* kEngineCacheApart = "(ops apart)";

// A convolution direction's search outcome as the cache keeps it: the legacy algorithm cuDNN's
// timed find chose (its number, math type, workspace and median time) and the graph engine that beat
// it ("" when none did). Text: "algo A math M workspace W ms T", then " graph ENGINE" if any.
struct ConvSearchEntry {
  int algo = -1;
  int math = -1;
  std::uint64_t workspace_bytes = 0;
  float ms = 0.0f;
  std::string engine;
  bool operator==(const ConvSearchEntry&) const = default;
};
std::string format_conv_search(const ConvSearchEntry& entry);
// nullopt unless `text` is exactly that form, with A and M >= 0, T finite and >= 0 and ENGINE one
// token: the backend then searches anew and replaces the line. T reads back as the float written.
std::optional<ConvSearchEntry> parse_conv_search(const std::string& text);

class EngineCache {
 public:
  // The process's cache from CNNSCALE_ENGINE_CACHE, read at the first call; null when unset.
  static EngineCache* from_environment();
  // Replaces the process's cache (null: none) and stops the variable from being read afterwards:
  // for tests, which need a cache of their own whatever the environment says.
  static void set_for_process(std::unique_ptr<EngineCache> cache);

  // Reads `path` if it exists (an empty cache otherwise; the file is made by the first put).
  explicit EngineCache(std::string path);

  const std::string& path() const { return path_; }
  std::optional<std::string> find(const std::string& key) const;
  void put(const std::string& key, const std::string& choice);
  size_t size() const;
  std::map<std::string, std::string> entries() const;  // a copy, by key
  size_t loaded() const { return loaded_; }  // entries the file held when this process read it

  static constexpr const char* kHeader = "# cnnscale engine cache 1";

 private:
  static std::map<std::string, std::string> read(const std::string& path);
  std::string path_;
  mutable std::mutex mutex_;
  std::map<std::string, std::string> entries_;
  size_t loaded_ = 0;
};

}  // namespace cnnscale
