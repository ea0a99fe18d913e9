// Theoretical occupancy on sm_90 (H100/H200), each case argued by hand from the rules of
// cuda_occupancy.h: 64 warps, 32 blocks, 65536 registers in 4 sub-partitions allocated per warp in
// units of 256, 228 KiB of shared memory per SM in units of 128 B with 1 KiB reserved per block.
// Every case here was also run through cudaOccMaxActiveBlocksPerMultiprocessor of CUDA 13.0's
// cuda_occupancy.h with sm_90's properties: the same block limits, limiting factors and refusals.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "measure/occupancy.hpp"

namespace cnnscale::measure {
namespace {

Occupancy occupancy_of(int64_t threads, int64_t registers, int64_t static_smem = 0, int64_t dynamic_smem = 0,
                       const SmLimits& sm = sm90_limits()) {
  return theoretical_occupancy(sm, LaunchResources{threads, registers, static_smem, dynamic_smem});
}

TEST(Occupancy, WarpsLimitABlockOf1024Threads) {
  // 32 warps a block: 64 / 32 = 2 blocks by warps; 16 registers = 512 a warp, 16384 / 512 = 32 warps
  // per sub-partition, 128 / 32 = 4 blocks by registers; 1 KiB (reserved) a block: 228 by memory.
  const Occupancy o = occupancy_of(1024, 16);
  EXPECT_EQ(o.blocks_limit_warps, 2);
  EXPECT_EQ(o.blocks_limit_registers, 4);
  EXPECT_EQ(o.blocks_limit_shared_memory, 228);
  EXPECT_EQ(o.active_blocks_per_sm, 2);
  EXPECT_EQ(o.active_warps_per_sm, 64);
  EXPECT_EQ(o.limiters, kLimitWarps);
  EXPECT_EQ(o.occupancy, 1.0);
}

TEST(Occupancy, RegistersLimitAFatKernel) {
  // 128 registers = 4096 a warp: 16384 / 4096 = 4 warps per sub-partition, 16 per SM, 2 blocks of 8
  // warps (256 threads), against 8 by warps: 16 of 64 warps.
  const Occupancy o = occupancy_of(256, 128);
  EXPECT_EQ(o.blocks_limit_registers, 2);
  EXPECT_EQ(o.blocks_limit_warps, 8);
  EXPECT_EQ(o.active_warps_per_sm, 16);
  EXPECT_EQ(o.limiters, kLimitRegisters);
  EXPECT_EQ(o.occupancy, 0.25);
}

TEST(Occupancy, RegistersAreRoundedToTheAllocationUnitPerSubPartition) {
  // 33 registers x 32 = 1056, allocated as 1280 (5 units of 256). 16384 / 1280 = 12 warps per
  // sub-partition, 48 per SM: 16 blocks of 3 warps. Without the rounding (1056: 15 per sub-partition,
  // 60 warps) it would be 20 blocks, and with the rounding but one pool of 65536 (51 warps) 17.
  const Occupancy o = occupancy_of(96, 33);
  EXPECT_EQ(o.registers_per_block, 3 * 1280);
  EXPECT_EQ(o.blocks_limit_registers, 16);
  EXPECT_EQ(o.blocks_limit_warps, 21);
  EXPECT_EQ(o.active_blocks_per_sm, 16);
  EXPECT_EQ(o.active_warps_per_sm, 48);
  EXPECT_EQ(o.limiters, kLimitRegisters);
  EXPECT_EQ(o.occupancy, 0.75);
}

TEST(Occupancy, SharedMemoryLimitsWithTheReservedKibibyteCounted) {
  // 57 KiB dynamic + 1 KiB reserved = 58 KiB a block: 228 / 58 = 3 blocks (3.93). Without the
  // reserved part 228 / 57 = 4 exactly: the reservation costs a block here.
  const int64_t dynamic = 57 * 1024;
  const Occupancy o = occupancy_of(128, 32, 0, dynamic);
  EXPECT_EQ(o.shared_memory_per_block, 58 * 1024);
  EXPECT_EQ(o.blocks_limit_shared_memory, 3);
  EXPECT_EQ(o.active_blocks_per_sm, 3);
  EXPECT_EQ(o.active_warps_per_sm, 12);
  EXPECT_EQ(o.limiters, kLimitSharedMemory);

  SmLimits no_reserve = sm90_limits();
  no_reserve.reserved_shared_memory_per_block = 0;
  EXPECT_EQ(occupancy_of(128, 32, 0, dynamic, no_reserve).blocks_limit_shared_memory, 4);
}

TEST(Occupancy, SharedMemoryIsRoundedToItsAllocationUnit) {
  // 1 B static + 1024 reserved = 1025, allocated as 9 units of 128 = 1152: 233472 / 1152 = 202.
  const Occupancy o = occupancy_of(32, 32, 1, 0);
  EXPECT_EQ(o.shared_memory_per_block, 1152);
  EXPECT_EQ(o.blocks_limit_shared_memory, 202);
}

TEST(Occupancy, BlocksLimitOneWarpBlocks) {
  // 1 warp a block: 64 by warps, 64 by registers (32 a thread: 16 warps per sub-partition), 228 by
  // memory; 32 blocks at most, so 32 warps of 64.
  const Occupancy o = occupancy_of(32, 32);
  EXPECT_EQ(o.active_blocks_per_sm, 32);
  EXPECT_EQ(o.limiters, kLimitBlocks);
  EXPECT_EQ(o.occupancy, 0.5);
}

TEST(Occupancy, APartialWarpTakesAWholeWarpSlot) {
  // 48 threads are 2 warps: 64 / 2 = 32 blocks by warps, also the block limit; the SM holds 64
  // warps (100 %), not the 48 that 32 x 48 threads would fill.
  const Occupancy o = occupancy_of(48, 16);
  EXPECT_EQ(o.warps_per_block, 2);
  EXPECT_EQ(o.active_blocks_per_sm, 32);
  EXPECT_EQ(o.active_warps_per_sm, 64);
  EXPECT_EQ(o.limiters, kLimitWarps | kLimitBlocks);
  EXPECT_EQ(limiter_names(o.limiters), "warps + blocks");
  EXPECT_EQ(o.occupancy, 1.0);
}

TEST(Occupancy, UnusedResourcesDoNotLimit) {
  SmLimits sm = sm90_limits();
  sm.reserved_shared_memory_per_block = 0;
  const Occupancy o = occupancy_of(64, 0, 0, 0, sm);
  EXPECT_EQ(o.blocks_limit_registers, kUnlimitedBlocks);
  EXPECT_EQ(o.blocks_limit_shared_memory, kUnlimitedBlocks);
  EXPECT_EQ(o.registers_per_block, 0);
  EXPECT_EQ(o.shared_memory_per_block, 0);
  EXPECT_EQ(o.active_blocks_per_sm, 32);
  EXPECT_EQ(o.limiters, kLimitWarps | kLimitBlocks);
}

TEST(Occupancy, ThePerBlockMaximumExcludesTheReservedPart) {
  // 227 KiB asked + 1 KiB reserved = the SM's 228 KiB: one block.
  const Occupancy o = occupancy_of(128, 32, 27 * 1024, 200 * 1024);
  EXPECT_EQ(o.active_blocks_per_sm, 1);
  EXPECT_EQ(o.limiters, kLimitSharedMemory);
}

void expect_launch_refused(const LaunchResources& launch, const std::string& says) {
  try {
    theoretical_occupancy(sm90_limits(), launch);
    ADD_FAILURE() << "launch accepted; expected a refusal saying '" << says << "'";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

TEST(Occupancy, InvalidLaunchesAreRefused) {
  expect_launch_refused({1025, 32, 0, 0}, "a block of 1025 threads cannot be launched on sm_90 (1 to 1024");
  expect_launch_refused({0, 32, 0, 0}, "a block of 0 threads");
  expect_launch_refused({128, 256, 0, 0}, "256 registers per thread cannot be launched on sm_90 (at most 255)");
  expect_launch_refused({128, 32, 100 * 1024, 128 * 1024},
                        "233472 B of shared memory per block (static 102400 + dynamic "
                        "131072) is over sm_90's maximum of 232448 B");
  expect_launch_refused({128, 32, -1, 0}, "must not be negative");
  // 1024 threads at 65 registers: 2080 a warp allocated as 2304, x 32 warps = 73728 > 65536.
  expect_launch_refused({1024, 65, 0, 0}, "needs 73728 registers; sm_90 allows 65536 per block");
  // 9 warps at 200 registers: 6400 a warp, 57600 for the block fits, but the hardware's check counts
  // 12 warps (rounded up to the 4 sub-partitions): 76800.
  expect_launch_refused({288, 200, 0, 0}, "needs 76800 registers");
}

TEST(Occupancy, LimitsThatAreNotAGpusAreRefused) {
  SmLimits sm = sm90_limits();
  sm.max_warps_per_sm = 0;
  EXPECT_THROW(theoretical_occupancy(sm, LaunchResources{32, 32, 0, 0}), ConfigError);
  sm = sm90_limits();
  sm.reserved_shared_memory_per_block = -1;
  EXPECT_THROW(theoretical_occupancy(sm, LaunchResources{32, 32, 0, 0}), ConfigError);
}

}  // namespace
}  // namespace cnnscale::measure
