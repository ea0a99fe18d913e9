// The process environment's variables of one family (NCCL_*, OMPI_MCA_*), for the results: a
// library's behaviour set from the environment is part of what was measured.
#pragma once
#include <string>
#include <vector>

namespace cnnscale {

// "NAME=value" for every variable whose name starts with `prefix`, sorted by name.
std::vector<std::string> environment_with_prefix(const std::string& prefix);
// The same from an explicit environment (a null-terminated array of "NAME=value", as `environ`).
std::vector<std::string> environment_with_prefix(const std::string& prefix, const char* const* env);
// The process's variables of `prefix` as one line, "A=1 B=2" ("" when none is set), for results.
std::string environment_line(const std::string& prefix);

}  // namespace cnnscale
