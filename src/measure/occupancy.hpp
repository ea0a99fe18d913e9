// Theoretical occupancy of a kernel launch: how many of its blocks one SM can hold at once, given
// the launch's block size, registers and shared memory and the SM's limits. The kernel-level view
// (issue 57; Li et al.'s Table II) explains a kernel's speed by this figure, so it is computed here
// from recorded launch attributes alone, without the CUDA runtime: the same numbers on a CPU build,
// in tests and in the report, from a profile recorded elsewhere.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace cnnscale::measure {

// Per-SM limits of one compute capability (the SM count does not enter: occupancy is per SM).
// The values of a GPU are those of the CUDA C Programming Guide's table of technical
// specifications per compute capability, with the allocation rules of the CUDA toolkit's
// cuda_occupancy.h (the header behind cudaOccupancyMaxActiveBlocksPerMultiprocessor).
struct SmLimits {
  std::string name;  // e.g. "sm_90"
  int64_t warp_size = 32;
  int64_t max_threads_per_sm = 0;
  int64_t max_warps_per_sm = 0;
  int64_t max_blocks_per_sm = 0;
  int64_t max_threads_per_block = 0;
  int64_t registers_per_sm = 0;  // 32-bit registers
  int64_t max_registers_per_block = 0;
  int64_t max_registers_per_thread = 0;
  // Registers are allocated per warp (every GPU since compute capability 2.x), in units of this many,
  // from one of `register_sub_partitions` equal slices of the register file (a warp's registers
  // live in its scheduler's sub-partition, so a slice's remainder cannot serve another slice's warp).
  int64_t register_allocation_unit = 0;
  int64_t register_sub_partitions = 0;
  // The shared memory an SM gives to blocks: the largest carveout, which the occupancy API assumes
  // without a carveout preference. A kernel given a preference (cudaFuncAttributePreferredShared-
  // MemoryCarveout) may run with less; model that by lowering this figure to the carveout it got.
  int64_t shared_memory_per_sm = 0;
  int64_t max_shared_memory_per_block = 0;  // opt-in maximum, static + dynamic
  int64_t shared_memory_allocation_unit = 0;
  // Shared memory the system keeps for each resident block (sm_80 and later): it counts against the
  // SM's shared memory but not against the per-block maximum a kernel may ask for.
  int64_t reserved_shared_memory_per_block = 0;
};

// H100 and H200 (compute capability 9.0).
SmLimits sm90_limits();
// The limits of a traced GPU by its architecture ("sm_90"); ConfigError naming the ones known for any
// other, rather than another generation's figures.
SmLimits sm_limits_for_arch(const std::string& arch);

// What one block of a launch uses.
struct LaunchResources {
  int64_t threads_per_block = 0;  // block x * y * z
  int64_t registers_per_thread = 0;
  int64_t static_shared_memory = 0;   // bytes per block
  int64_t dynamic_shared_memory = 0;  // bytes per block
};

// Bit flags: several limits can be reached at once (then each is a limiting factor, as in
// cuda_occupancy.h's limitingFactors).
enum OccupancyLimiter : unsigned {
  kLimitWarps = 1u << 0,
  kLimitRegisters = 1u << 1,
  kLimitSharedMemory = 1u << 2,
  kLimitBlocks = 1u << 3,
};

// Blocks per SM each resource allows; a resource the launch does not use allows any number
// (kUnlimitedBlocks).
inline constexpr int64_t kUnlimitedBlocks = std::numeric_limits<int64_t>::max();

struct Occupancy {
  int64_t warps_per_block = 0;
  int64_t registers_per_block = 0;      // as allocated (per-warp rounding)
  int64_t shared_memory_per_block = 0;  // as allocated (reserved part and rounding included)
  int64_t blocks_limit_warps = 0;
  int64_t blocks_limit_registers = 0;
  int64_t blocks_limit_shared_memory = 0;
  int64_t blocks_limit_blocks = 0;
  int64_t active_blocks_per_sm = 0;
  int64_t active_warps_per_sm = 0;
  unsigned limiters = 0;   // OccupancyLimiter flags
  double occupancy = 0.0;  // active warps / max warps per SM
};

// Throws ConfigError for a launch the GPU would refuse (a block of 0 threads or over the per-block
// thread maximum, more registers per thread or per block than allowed, static + dynamic shared
// memory over the per-block maximum) and for limits that are not a GPU's (a zero or negative one).
Occupancy theoretical_occupancy(const SmLimits& sm, const LaunchResources& launch);

// "registers", "shared memory + warps", ... in a fixed order (warps, registers, shared memory,
// blocks), for tables.
std::string limiter_names(unsigned limiters);

}  // namespace cnnscale::measure
