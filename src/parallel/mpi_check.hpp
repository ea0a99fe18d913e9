// MPI_CHECK: the MPI member of the check-macro family (CUDA_CHECK, NCCL_CHECK, ...). Included only
// by src/parallel/*.cpp, so no other header sees <mpi.h>. Our communicators return MPI errors
// (MPI_ERRORS_RETURN) instead of letting MPI abort silently, and at run time an MPI error almost
// always means that a peer is gone: it becomes a PeerError (exit code 3) naming the call.
#pragma once
#include <mpi.h>

namespace cnnscale {

// Throws PeerError "MPI call `statement` failed at file:line: <MPI error string>; ...".
[[noreturn]] void mpi_fail(int code, const char* statement, const char* file, int line);

}  // namespace cnnscale

#define MPI_CHECK(statement)                                                                                     \
  do {                                                                                                           \
    const int cnnscale_mpi_rc_ = (statement);                                                                    \
    if (cnnscale_mpi_rc_ != MPI_SUCCESS) ::cnnscale::mpi_fail(cnnscale_mpi_rc_, #statement, __FILE__, __LINE__); \
  } while (0)
