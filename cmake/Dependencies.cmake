# Host dependencies, all from Debian/Ubuntu packages (see README.md).
find_package(Threads REQUIRED)
find_package(ZLIB REQUIRED)
find_package(fmt REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(HDF5 REQUIRED COMPONENTS C)
# Open MPI (libopenmpi-dev): rank lifetime, the CPU communicator and NCCL's bootstrap (src/parallel/).
find_package(MPI REQUIRED COMPONENTS C)

# yaml-cpp 0.7 (Debian 12) exports `yaml-cpp`, 0.8 (Ubuntu 24.04) `yaml-cpp::yaml-cpp`.
find_package(yaml-cpp REQUIRED)
add_library(cnnscale::yaml INTERFACE IMPORTED)
if(TARGET yaml-cpp::yaml-cpp)
  target_link_libraries(cnnscale::yaml INTERFACE yaml-cpp::yaml-cpp)
else()
  target_link_libraries(cnnscale::yaml INTERFACE yaml-cpp)
  if(YAML_CPP_INCLUDE_DIR)
    target_include_directories(cnnscale::yaml INTERFACE ${YAML_CPP_INCLUDE_DIR})
  endif()
endif()

# OpenBLAS: the CPU backend's GEMM. Prefer the pthread/openmp build's cblas.h.
set(BLA_VENDOR OpenBLAS)
find_package(BLAS REQUIRED)
find_path(CNNSCALE_OPENBLAS_INCLUDE cblas.h PATH_SUFFIXES openblas-pthread openblas openblas-openmp
  PATHS /usr/include/x86_64-linux-gnu /usr/include)
if(NOT CNNSCALE_OPENBLAS_INCLUDE)
  message(FATAL_ERROR "cblas.h not found: install libopenblas-dev")
endif()
