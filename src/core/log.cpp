// Logging implementation: one line per call, prefixed with the level and the rank when set.
#include "core/log.hpp"

#include <atomic>
#include <cstdlib>
#include <mutex>

namespace cnnscale::log {
namespace {
// CNNSCALE_LOG_LEVEL=debug|info|warning|error sets the starting level (e.g. to see which cuDNN
// algorithm every convolution got and what the others measured).
Level initial_level() {
  const char* env = std::getenv("CNNSCALE_LOG_LEVEL");
  if (!env) return Level::Info;
  std::string v(env);
  if (v == "debug") return Level::Debug;
  if (v == "warning" || v == "warn") return Level::Warn;
  if (v == "error") return Level::Error;
  return Level::Info;
}
std::atomic<Level> g_level{initial_level()};
std::atomic<int> g_rank{-1};
std::mutex g_mutex;
}  // namespace

void set_level(Level l) { g_level = l; }
Level level() { return g_level; }
void set_rank(int rank) { g_rank = rank; }

void write(Level l, const std::string& message) {
  if (l < g_level) return;
  static const char* names[] = {"debug", "info", "warning", "error"};
  std::lock_guard<std::mutex> lock(g_mutex);
  int r = g_rank;
  if (r >= 0)
    std::fprintf(stderr, "[rank %d] %s: %s\n", r, names[static_cast<int>(l)], message.c_str());
  else
    std::fprintf(stderr, "%s: %s\n", names[static_cast<int>(l)], message.c_str());
}

}  // namespace cnnscale::log
