// Formatting of CUDA/cuDNN/cuBLAS/NCCL failures into cnnscale::RuntimeError: library, status code
// and name, the failing statement, file:line, host and (under a launcher) the rank.
#include "backend/cuda/cuda_check.hpp"

#include <unistd.h>

#include <cstdlib>
#include <string>

#include "backend/cuda/cuda_check_sparse.hpp"
#include "backend/cuda/cuda_kernels.hpp"
#include "core/error.hpp"

namespace cnnscale::cuda {
namespace {

// The rank as the launcher exports it: cuda code sits below src/parallel, so it cannot ask the
// communicator, and an error raised before MPI_Init still deserves a rank.
std::string where() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '?';
  std::string s = fmt::format("on host {}", host);
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"}) {
    if (const char* r = std::getenv(var)) return s + fmt::format(", rank {}", r);
  }
  return s;
}

[[noreturn]] void raise(const char* library, int code, const char* name, const char* detail, const char* statement,
                        const char* file, int line) {
  throw RuntimeError(fmt::format("{} error {} ({}{}{}) in '{}' at {}:{} {}", library, code, name,
                                 detail && *detail ? ": " : "", detail ? detail : "", statement, file, line, where()));
}

}  // namespace

void throw_no_kernel(const char* op, DType t) {
  throw_runtime("{} on cuda: no kernel for {} tensors (f32, bf16 and f16 have one)", op, dtype_name(t));
}

void throw_kernel_unfit(const char* op, const char* why) { throw_runtime("{} on cuda: {}", op, why); }

void fail(cudaError_t status, const char* statement, const char* file, int line) {
  // A failed runtime call also sets the runtime's last error; clear it so that the next kernel
  // launch's check (cudaGetLastError) does not report this failure again as its own.
  cudaGetLastError();
  raise("CUDA", static_cast<int>(status), cudaGetErrorName(status), cudaGetErrorString(status), statement, file,
        line);
}

void fail(cudnnStatus_t status, const char* statement, const char* file, int line) {
  // cudnnGetLastErrorString holds the library's own explanation of the last failure (cuDNN >= 9).
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  raise("cuDNN", static_cast<int>(status), cudnnGetErrorString(status), detail, statement, file, line);
}

void fail(cusparseStatus_t status, const char* statement, const char* file, int line) {
  raise("cuSPARSE", static_cast<int>(status), cusparseGetErrorName(status), cusparseGetErrorString(status), statement,
        file, line);
}

void fail(cublasStatus_t status, const char* statement, const char* file, int line) {
  raise("cuBLAS", static_cast<int>(status), cublasGetStatusName(status), cublasGetStatusString(status), statement,
        file, line);
}

void fail(ncclResult_t status, const char* statement, const char* file, int line) {
  raise("NCCL", static_cast<int>(status), ncclGetErrorString(status), ncclGetLastError(nullptr), statement, file,
        line);
}

}  // namespace cnnscale::cuda
