// Minimal leveled logging to stderr; rank-prefixed once a distributed run sets the rank.
#pragma once
#include <cstdio>
#include <string>

#include <fmt/format.h>

namespace cnnscale::log {

enum class Level { Debug, Info, Warn, Error };
void set_level(Level level);
Level level();
void set_rank(int rank);  // -1: single process, no prefix
void write(Level level, const std::string& message);

template <typename... A>
void info(fmt::format_string<A...> f, A&&... a) { write(Level::Info, fmt::format(f, std::forward<A>(a)...)); }
template <typename... A>
void warn(fmt::format_string<A...> f, A&&... a) { write(Level::Warn, fmt::format(f, std::forward<A>(a)...)); }
template <typename... A>
void debug(fmt::format_string<A...> f, A&&... a) {
  if (level() <= Level::Debug) write(Level::Debug, fmt::format(f, std::forward<A>(a)...));
}

}  // namespace cnnscale::log
