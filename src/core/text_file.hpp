// Reading a configuration file (a network or experiment YAML) whole, refusing before any read what
// cannot be one: a FIFO or device (`/dev/zero` would be read forever), a directory, a file larger
// than a configuration could need. Every refusal is one ConfigError naming the path.
#pragma once
#include <cstdint>
#include <string>

namespace cnnscale {

// The largest configuration file read: 16 MiB. The largest shipped network or experiment is a few
// KiB; a ResNet-1001 written out layer by layer without blocks stays under 1 MiB.
inline constexpr int64_t kMaxConfigBytes = int64_t{16} << 20;

// The text of `path`, a regular file (a link to one is fine) of at most `max_bytes`; `what` names it
// in errors ("network file", "experiment file").
std::string read_config_text(const std::string& path, const std::string& what, int64_t max_bytes = kMaxConfigBytes);

}  // namespace cnnscale
