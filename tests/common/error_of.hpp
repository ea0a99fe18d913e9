// The message of the cnnscale::Error a call throws ("" when it throws none), for tests that check
// what an error line says rather than only its type.
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

}  // namespace cnnscale::testing
