#include "backend/engine_cache.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"

namespace cnnscale {
namespace {

void check_field(const std::string& text, const char* what) {
  if (text.empty() || text.find_first_of("\t\n\r") != std::string::npos)
    throw_runtime("engine cache: a {} must be non-empty without tabs or newlines, got '{}'", what, text);
}

std::once_flag environment_read;
std::unique_ptr<EngineCache>& process_cache() {
  static std::unique_ptr<EngineCache> cache;
  return cache;
}

}  // namespace

std::string format_conv_search(const ConvSearchEntry& e) {
  // fmt's shortest form of a float reads back as the same float.
  return fmt::format("algo {} math {} workspace {} ms {}{}", e.algo, e.math, e.workspace_bytes, e.ms,
                     e.engine.empty() ? std::string() : " graph " + e.engine);
}

std::optional<ConvSearchEntry> parse_conv_search(const std::string& text) {
  std::vector<std::string> tokens;
  std::istringstream in(text);
  for (std::string t; in >> t;) tokens.push_back(t);
  if (tokens.size() != 8 && tokens.size() != 10) return std::nullopt;
  if (tokens[0] != "algo" || tokens[2] != "math" || tokens[4] != "workspace" || tokens[6] != "ms") return std::nullopt;
  if (tokens.size() == 10 && tokens[8] != "graph") return std::nullopt;
  // The whole token must be the number: from_chars accepts no sign on unsigned, no spaces, and
  // stops at the first character that is not part of it.
  auto whole = [](const std::string& t, auto& value) {
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
    return ec == std::errc() && end == t.data() + t.size();
  };
  ConvSearchEntry e;
  if (!whole(tokens[1], e.algo) || !whole(tokens[3], e.math) || !whole(tokens[5], e.workspace_bytes) ||
      !whole(tokens[7], e.ms))
    return std::nullopt;
  if (e.algo < 0 || e.math < 0 || !std::isfinite(e.ms) || e.ms < 0.0f) return std::nullopt;
  if (tokens.size() == 10) e.engine = tokens[9];
  return e;
}

EngineCache* EngineCache::from_environment() {
  // Read once. train and infer ask before any work, so a malformed file or an unwritable folder
  // ends the run there; a failed read leaves the flag unset and the next call throws again.
  std::call_once(environment_read, [] {
    const char* path = std::getenv("CNNSCALE_ENGINE_CACHE");
    if (!path || !*path) return;
    process_cache() = std::make_unique<EngineCache>(path);
    log::info("engine cache {}: {} measured choice(s) read; new searches are added", process_cache()->path(),
              process_cache()->loaded());
  });
  return process_cache().get();
}

void EngineCache::set_for_process(std::unique_ptr<EngineCache> cache) {
  std::call_once(environment_read, [] {});
  process_cache() = std::move(cache);
}

EngineCache::EngineCache(std::string path) : path_(std::move(path)) {
  entries_ = read(path_);
  loaded_ = entries_.size();
  // Searches add to the file mid-run: a folder that cannot take it is an error before any work.
  std::string dir = path_.substr(0, path_.find_last_of('/') + 1);
  if (dir.empty()) dir = ".";
  if (access(dir.c_str(), W_OK) != 0)
    throw_config(
        "{}: the engine cache (CNNSCALE_ENGINE_CACHE) cannot be written there: folder {} is missing or "
        "not writable",
        path_, dir);
}

std::map<std::string, std::string> EngineCache::read(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  if (!in) {
    if (access(path.c_str(), F_OK) == 0)
      throw_config("{}: engine cache (CNNSCALE_ENGINE_CACHE) exists but cannot be read", path);
    return out;  // not made yet
  }
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (number == 1) {
      if (line != kHeader)
        throw_config("{}:1: not a cnnscale engine cache (CNNSCALE_ENGINE_CACHE): expected the line '{}'", path,
                     kHeader);
      continue;
    }
    if (line.empty()) continue;
    const size_t tab = line.find('\t');
    if (tab == std::string::npos || tab == 0 || tab + 1 == line.size() || line.find('\t', tab + 1) != std::string::npos)
      throw_config("{}:{}: expected KEY<TAB>CHOICE in the engine cache (CNNSCALE_ENGINE_CACHE)", path, number);
    out[line.substr(0, tab)] = line.substr(tab + 1);
  }
  return out;
}

std::optional<std::string> EngineCache::find(const std::string& key) const {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

size_t EngineCache::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

std::map<std::string, std::string> EngineCache::entries() const {
  std::lock_guard lock(mutex_);
  return entries_;
}

void EngineCache::put(const std::string& key, const std::string& choice) {
  check_field(key, "key");
  check_field(choice, "choice");
  std::lock_guard lock(mutex_);
  entries_[key] = choice;
  // What other processes added since (a rank of the same job, an earlier run) stays.
  for (auto& [k, v] : read(path_)) entries_.try_emplace(k, v);
  std::ostringstream text;
  text << kHeader << '\n';
  for (const auto& [k, v] : entries_) text << k << '\t' << v << '\n';
  // A name of this process's own, renamed over the file once complete: readers see the old file or
  // the new one, never a part (io/atomic_file does the same for results, but lives above the backend).
  const std::string tmp = path_ + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text.str();
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw_runtime("{}: cannot write the engine cache (CNNSCALE_ENGINE_CACHE)", tmp);
    }
  }
  if (std::rename(tmp.c_str(), path_.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw_runtime("{}: cannot replace the engine cache (CNNSCALE_ENGINE_CACHE)", path_);
  }
}

}  // namespace cnnscale
