// Theoretical occupancy by the rules of the CUDA toolkit's cuda_occupancy.h for compute capability
// 7.0 and later (no partitioned global caching, which those GPUs do not have).
#include "measure/occupancy.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace cnnscale::measure {
namespace {

int64_t occupancy_round_up(int64_t x, int64_t unit) {
  return (x + unit - 1) / unit * unit;
}

void check_sm_limits(const SmLimits& sm) {
  const std::pair<const char*, int64_t> positive[] = {
      {"warp_size", sm.warp_size},
      {"max_threads_per_sm", sm.max_threads_per_sm},
      {"max_warps_per_sm", sm.max_warps_per_sm},
      {"max_blocks_per_sm", sm.max_blocks_per_sm},
      {"max_threads_per_block", sm.max_threads_per_block},
      {"registers_per_sm", sm.registers_per_sm},
      {"max_registers_per_block", sm.max_registers_per_block},
      {"max_registers_per_thread", sm.max_registers_per_thread},
      {"register_allocation_unit", sm.register_allocation_unit},
      {"register_sub_partitions", sm.register_sub_partitions},
      {"shared_memory_per_sm", sm.shared_memory_per_sm},
      {"max_shared_memory_per_block", sm.max_shared_memory_per_block},
      {"shared_memory_allocation_unit", sm.shared_memory_allocation_unit}};
  for (const auto& [field, value] : positive)
    if (value <= 0) throw_config("SM limits '{}': {} must be positive, got {}", sm.name, field, value);
  if (sm.reserved_shared_memory_per_block < 0)
    throw_config("SM limits '{}': reserved_shared_memory_per_block must not be negative, got {}", sm.name,
                 sm.reserved_shared_memory_per_block);
}

void check_launch(const SmLimits& sm, const LaunchResources& launch) {
  if (launch.threads_per_block <= 0 || launch.threads_per_block > sm.max_threads_per_block)
    throw_config("a block of {} threads cannot be launched on {} (1 to {} threads per block)", launch.threads_per_block,
                 sm.name, sm.max_threads_per_block);
  if (launch.registers_per_thread < 0 || launch.registers_per_thread > sm.max_registers_per_thread)
    throw_config("{} registers per thread cannot be launched on {} (at most {})", launch.registers_per_thread, sm.name,
                 sm.max_registers_per_thread);
  if (launch.static_shared_memory < 0 || launch.dynamic_shared_memory < 0)
    throw_config("shared memory per block must not be negative (static {} B, dynamic {} B)",
                 launch.static_shared_memory, launch.dynamic_shared_memory);
  const int64_t shared = launch.static_shared_memory + launch.dynamic_shared_memory;
  if (shared > sm.max_shared_memory_per_block)
    throw_config("{} B of shared memory per block (static {} + dynamic {}) is over {}'s maximum of {} B", shared,
                 launch.static_shared_memory, launch.dynamic_shared_memory, sm.name, sm.max_shared_memory_per_block);
}

}  // namespace

SmLimits sm90_limits() {
  SmLimits sm;
  sm.name = "sm_90";
  sm.warp_size = 32;
  sm.max_threads_per_sm = 2048;
  sm.max_warps_per_sm = 64;
  sm.max_blocks_per_sm = 32;
  sm.max_threads_per_block = 1024;
  sm.registers_per_sm = 64 * 1024;
  sm.max_registers_per_block = 64 * 1024;
  sm.max_registers_per_thread = 255;
  sm.register_allocation_unit = 256;
  sm.register_sub_partitions = 4;
  sm.shared_memory_per_sm = 228 * 1024;
  sm.max_shared_memory_per_block = 227 * 1024;
  sm.shared_memory_allocation_unit = 128;
  sm.reserved_shared_memory_per_block = 1024;
  return sm;
}

SmLimits sm_limits_for_arch(const std::string& arch) {
  if (arch == "sm_90") return sm90_limits();
  throw_config("occupancy: no SM limits for {} (known: sm_90, the H100 and H200)", arch);
}

Occupancy theoretical_occupancy(const SmLimits& sm, const LaunchResources& launch) {
  check_sm_limits(sm);
  check_launch(sm, launch);
  Occupancy o;
  o.warps_per_block = (launch.threads_per_block + sm.warp_size - 1) / sm.warp_size;
  // A partial warp holds a whole warp's slot: threads are scheduled in warps.
  o.blocks_limit_warps = std::min(sm.max_warps_per_sm, sm.max_threads_per_sm / sm.warp_size) / o.warps_per_block;
  o.blocks_limit_blocks = sm.max_blocks_per_sm;

  const int64_t registers_per_warp =
      occupancy_round_up(launch.registers_per_thread * sm.warp_size, sm.register_allocation_unit);
  o.registers_per_block = registers_per_warp * o.warps_per_block;
  // The launch check of the hardware assumes a block's warps spread over all sub-partitions, so it
  // counts the warps rounded up to a multiple of their number.
  const int64_t registers_checked =
      registers_per_warp * occupancy_round_up(o.warps_per_block, sm.register_sub_partitions);
  if (std::max(o.registers_per_block, registers_checked) > sm.max_registers_per_block)
    throw_config("a block of {} threads at {} registers per thread needs {} registers; {} allows {} per block",
                 launch.threads_per_block, launch.registers_per_thread,
                 std::max(o.registers_per_block, registers_checked), sm.name, sm.max_registers_per_block);
  if (registers_per_warp == 0) {
    o.blocks_limit_registers = kUnlimitedBlocks;
  } else {
    const int64_t warps_per_sub_partition = sm.registers_per_sm / sm.register_sub_partitions / registers_per_warp;
    o.blocks_limit_registers = warps_per_sub_partition * sm.register_sub_partitions / o.warps_per_block;
  }

  o.shared_memory_per_block = occupancy_round_up(
      launch.static_shared_memory + launch.dynamic_shared_memory + sm.reserved_shared_memory_per_block,
      sm.shared_memory_allocation_unit);
  o.blocks_limit_shared_memory =
      o.shared_memory_per_block == 0 ? kUnlimitedBlocks : sm.shared_memory_per_sm / o.shared_memory_per_block;

  o.active_blocks_per_sm =
      std::min({o.blocks_limit_warps, o.blocks_limit_registers, o.blocks_limit_shared_memory, o.blocks_limit_blocks});
  if (o.active_blocks_per_sm == o.blocks_limit_warps) o.limiters |= kLimitWarps;
  if (o.active_blocks_per_sm == o.blocks_limit_registers) o.limiters |= kLimitRegisters;
  if (o.active_blocks_per_sm == o.blocks_limit_shared_memory) o.limiters |= kLimitSharedMemory;
  if (o.active_blocks_per_sm == o.blocks_limit_blocks) o.limiters |= kLimitBlocks;
  o.active_warps_per_sm = o.active_blocks_per_sm * o.warps_per_block;
  o.occupancy = static_cast<double>(o.active_warps_per_sm) / static_cast<double>(sm.max_warps_per_sm);
  return o;
}

std::string limiter_names(unsigned limiters) {
  const std::pair<unsigned, const char*> names[] = {{kLimitWarps, "warps"},
                                                    {kLimitRegisters, "registers"},
                                                    {kLimitSharedMemory, "shared memory"},
                                                    {kLimitBlocks, "blocks"}};
  std::string out;
  for (const auto& [flag, name] : names) {
    if (!(limiters & flag)) continue;
    if (!out.empty()) out += " + ";
    out += name;
  }
  return out;
}

}  // namespace cnnscale::measure
