// This machine's host name, for records, lock holders, run ids and temporary names.
// One lookup so that every writer names the host the same way (and the same fallback).
#pragma once

#include <unistd.h>

#include <string>

namespace cnnscale {

// gethostname() truncates silently on some systems without a terminator, so the buffer is
// terminated here; a failed or empty lookup gives "unknown" rather than an empty field.
inline std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  name[sizeof name - 1] = '\0';
  return name[0] ? std::string(name) : std::string("unknown");
}

}  // namespace cnnscale
