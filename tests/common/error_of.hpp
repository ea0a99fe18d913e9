// The message of the cnnscale::Error a call throws ("" when it throws none), for tests that check
// what an error line says rather than only its type; config_error_of, of a refusal alone.
#pragma once
#include <functional>
#include <string>

#include "core/error.hpp"

namespace cnnscale::testing {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The line of the ConfigError a call throws (bad input refused: exit 2), "" when it throws none. Any
// other error is no refusal: it goes on, and fails the test.
inline std::string config_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace cnnscale::testing
