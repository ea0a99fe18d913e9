// Error checks for CUPTI calls. A status that says profiling cannot be had on this machine (no
// permission to the counters, a virtualised GPU, a device or driver CUPTI does not support) is the
// user's situation, not a failure: it becomes ConfigError (exit 2) naming the reason, so that a
// `--kernels` or `--metrics` run refuses before its work. Anything else is a RuntimeError.
#pragma once
#include <cupti.h>

namespace cnnscale::cuda {

[[noreturn]] void fail(CUptiResult status, const char* statement, const char* file, int line);

}  // namespace cnnscale::cuda

#define CUPTI_CHECK(stmt)                                                                                       \
  do {                                                                                                          \
    CUptiResult cnnscale_status_ = (stmt);                                                                      \
    if (cnnscale_status_ != CUPTI_SUCCESS) ::cnnscale::cuda::fail(cnnscale_status_, #stmt, __FILE__, __LINE__); \
  } while (0)
