// Rank -> device binding: which GPU a rank uses (its node-local rank, or that entry of --gpus),
// and the check, before any work, that no two ranks drive the same physical GPU (compared by
// UUID, which survives CUDA_VISIBLE_DEVICES renumbering).
#pragma once
#include <string>
#include <vector>

namespace cnnscale {

// The GPU index of the rank with node-local rank `local_rank`: gpus[local_rank] when a list is
// given (ConfigError naming the list and the ranks on this node if it is too short), else
// local_rank itself.
int gpu_for_local_rank(int local_rank, int local_size, const std::vector<int>& gpus);

// ConfigError when this node shows fewer GPUs (`visible`) than the index the rank was bound to:
// more ranks on a node than GPUs (8 ranks on a 4-GPU host) or a --gpus entry naming a hidden
// device. The message names the rank, its host and what to launch instead. No-op when visible <= 0
// (no usable device at all: the backend says why).
void check_gpu_visible(int rank, int local_rank, const std::string& host, int gpu, int visible);

// One entry per rank, indexed by world rank.
struct RankDevice {
  std::string host;
  std::string device;  // "gpu:1"
  std::string uuid;    // empty: no device to check (CPU rank)
};
// ConfigError naming both ranks, their hosts and the GPU if two ranks share a UUID.
void check_distinct_devices(const std::vector<RankDevice>& ranks);

// RankDevice as text for MpiEnv::allgather and back.
std::string encode_rank_device(const RankDevice& d);
RankDevice decode_rank_device(const std::string& text);

}  // namespace cnnscale
