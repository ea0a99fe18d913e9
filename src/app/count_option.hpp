// The check of a count given on the command line (--classes, --train-samples, --display, ...):
// a whole number of at least `min`, refused with a line a user can read ("--classes: must be at
// least 1, got 0"). CLI11's PositiveNumber says "Value 0 not in range 0.000000 to" and DBL_MAX in
// 309 digits; CLI11 prefixes the option's name to the returned text.
#pragma once
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdlib>
#include <string>

namespace cnnscale::app {

inline CLI::Validator at_least(long long min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        // Read as CLI11 then converts it (strtoll, base 0), so the two agree on what a number is.
        errno = 0;
        char* end = nullptr;
        const long long value = text.empty() ? 0 : std::strtoll(text.c_str(), &end, 0);
        if (text.empty() || end != text.c_str() + text.size()) {
          std::string shown;  // the value as typed, control characters made visible: one line
          for (char c : text) shown += static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? '?' : c;
          return fmt::format("must be a whole number of at least {}, got '{}'", min, shown);
        }
        if (errno == ERANGE) return fmt::format("{} is out of range", text);
        if (value < min) return fmt::format("must be at least {}, got {}", min, value);
        return {};
      },
      fmt::format("INT>={}", min), fmt::format("at least {}", min));
}

}  // namespace cnnscale::app
