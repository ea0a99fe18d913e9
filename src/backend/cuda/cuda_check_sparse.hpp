// CUSPARSE_CHECK, in the family of cuda_check.hpp: a failing cuSPARSE call throws RuntimeError naming
// the status, statement, file:line, host and rank. Apart so that only cuSPARSE's users include it.
#pragma once
#include <cusparse.h>

#include "backend/cuda/cuda_check.hpp"

namespace cnnscale::cuda {

[[noreturn]] void fail(cusparseStatus_t status, const char* statement, const char* file, int line);

}  // namespace cnnscale::cuda

#define CUSPARSE_CHECK(stmt) CNNSCALE_CUDA_CHECK_STATUS(CUSPARSE_STATUS_SUCCESS, stmt)
