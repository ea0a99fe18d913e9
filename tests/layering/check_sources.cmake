# Source rules the include roots cannot enforce (run as `cmake -DSRC=<src dir> -P ...`):
#  - no #include "../...": a relative path would step around the include roots;
#  - nothing above the backend asks whether CUDA is built (CNNSCALE_HAVE_CUDA) or includes a CUDA,
#    cuDNN, cuBLAS, NCCL or NVML header: those sit below backend/devices.hpp and the communicator.
file(GLOB_RECURSE files ${SRC}/*.cpp ${SRC}/*.hpp ${SRC}/*.cu ${SRC}/*.cuh)
set(problems "")
foreach(f IN LISTS files)
  file(RELATIVE_PATH rel ${SRC} ${f})
  file(STRINGS ${f} lines REGEX "#include \"\\.\\./")
  foreach(l IN LISTS lines)
    string(APPEND problems "src/${rel}: relative include: ${l}\n")
  endforeach()
  if(NOT rel MATCHES "^backend/")
    file(STRINGS ${f} lines REGEX "CNNSCALE_HAVE_CUDA|#include <(cuda|cudnn|cublas|nccl|nvml|cuda_runtime)")
    foreach(l IN LISTS lines)
      string(APPEND problems "src/${rel}: CUDA above the backend: ${l}\n")
    endforeach()
  endif()
endforeach()
if(problems)
  message(FATAL_ERROR "layering rules broken:\n${problems}")
endif()
message(STATUS "layering: ${SRC}: every rule holds")
