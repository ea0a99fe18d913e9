// MPI_CHECK: the MPI member of the check-macro family (CUDA_CHECK, NCCL_CHECK, ...). Included only
// by src/parallel/*.cpp, so no other header sees <mpi.h>. Our communicators return MPI errors
// (MPI_ERRORS_RETURN) instead of letting MPI abort silently, and at run time an MPI error almost
// always means that a peer is gone: it becomes a PeerError (exit code 3) naming the call.
#pragma once
#include <mpi.h>

#include "core/dtype.hpp"

namespace cnnscale {

// The MPI element type and sum operation for an in-place sum of `dtype` (f32, bf16 or f16). MPI
// has no 16-bit floats: bf16 and f16 travel as MPI_UINT16_T and are added by an operation of our
// own that widens both operands, adds in f32 and rounds back (ties to even), the sum NCCL forms
// element by element. Other dtypes are a caller's error (RuntimeError).
MPI_Datatype mpi_sum_type(DType dtype);
MPI_Op mpi_sum_op(DType dtype);

// Throws PeerError "MPI call `statement` failed at file:line: <MPI error string>; ...".
[[noreturn]] void mpi_fail(int code, const char* statement, const char* file, int line);

}  // namespace cnnscale

#define MPI_CHECK(statement)                                                                                     \
  do {                                                                                                           \
    const int cnnscale_mpi_rc_ = (statement);                                                                    \
    if (cnnscale_mpi_rc_ != MPI_SUCCESS) ::cnnscale::mpi_fail(cnnscale_mpi_rc_, #statement, __FILE__, __LINE__); \
  } while (0)
