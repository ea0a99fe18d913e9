// Errors: library code throws cnnscale::Error; only main() maps the kind to an exit code
// (0 ok, 1 runtime failure, 2 usage/config error, 3 a peer rank failed).
#pragma once
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace cnnscale {

enum class ErrorKind { Runtime = 1, Config = 2, Peer = 3 };

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }
  int exit_code() const { return static_cast<int>(kind_); }

 private:
  ErrorKind kind_;
};

// Bad input from the user: a YAML file, a dataset file, a command-line value. Exit code 2.
class ConfigError : public Error {
 public:
  explicit ConfigError(const std::string& message) : Error(ErrorKind::Config, message) {}
};

// Something failed while running (library call, out of memory, I/O). Exit code 1.
class RuntimeError : public Error {
 public:
  explicit RuntimeError(const std::string& message) : Error(ErrorKind::Runtime, message) {}
};

// Another rank failed (died, hung, or a collective errored): the whole job ends. Exit code 3.
class PeerError : public Error {
 public:
  explicit PeerError(const std::string& message) : Error(ErrorKind::Peer, message) {}
};

template <typename... Args>
[[noreturn]] void throw_config(fmt::format_string<Args...> f, Args&&... args) {
  throw ConfigError(fmt::format(f, std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] void throw_runtime(fmt::format_string<Args...> f, Args&&... args) {
  throw RuntimeError(fmt::format(f, std::forward<Args>(args)...));
}

// Internal invariant; failing it is a bug in cnnscale, reported with its location.
#define CNNSCALE_CHECK(cond, ...)                                                                \
  do {                                                                                           \
    if (!(cond))                                                                                 \
      throw ::cnnscale::RuntimeError(::fmt::format("{}:{}: check '{}' failed: {}", __FILE__,     \
                                                   __LINE__, #cond, ::fmt::format(__VA_ARGS__))); \
  } while (0)

}  // namespace cnnscale
