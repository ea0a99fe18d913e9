// Rank -> device binding and the shared-GPU check.
#include "parallel/device_binding.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

#include "core/error.hpp"

namespace cnnscale {

int gpu_for_local_rank(int local_rank, int local_size, const std::vector<int>& gpus) {
  if (gpus.empty()) return local_rank;
  if (static_cast<int>(gpus.size()) < local_size)
    throw_config("--gpus {} lists {} GPU(s) but this node runs {} ranks (node-local rank {} has none)",
                 fmt::join(gpus, ","), gpus.size(), local_size, gpus.size());
  const int gpu = gpus[static_cast<size_t>(local_rank)];
  if (gpu < 0) throw_config("--gpus: GPU indices must be >= 0, got {}", gpu);
  return gpu;
}

void check_gpu_visible(int rank, int local_rank, const std::string& host, int gpu, int visible) {
  if (visible <= 0 || gpu < visible) return;
  throw_config(
      "rank {} (node-local rank {} on host {}) has no GPU: it was bound to gpu:{}, but {} GPU(s) are visible "
      "there (0..{}); launch at most one rank per GPU on each node (here: at most {} ranks), or use --device cpu",
      rank, local_rank, host, gpu, visible, visible - 1, visible);
}

void check_distinct_devices(const std::vector<RankDevice>& ranks) {
  std::map<std::string, size_t> owner;  // uuid -> first rank
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankDevice& d = ranks[r];
    if (d.uuid.empty()) continue;
    auto [it, inserted] = owner.emplace(d.uuid, r);
    if (inserted) continue;
    const RankDevice& first = ranks[it->second];
    throw_config(
        "ranks {} (host {}, {}) and {} (host {}, {}) are bound to the same GPU {}: give each rank its own "
        "GPU (--gpus, or one rank per GPU per node)",
        it->second, first.host, first.device, r, d.host, d.device, d.uuid);
  }
}

// Fields separated by '\n', which none of them contains.
std::string encode_rank_device(const RankDevice& d) {
  return d.host + "\n" + d.device + "\n" + d.uuid;
}

RankDevice decode_rank_device(const std::string& text) {
  RankDevice d;
  const size_t a = text.find('\n'), b = a == std::string::npos ? a : text.find('\n', a + 1);
  CNNSCALE_CHECK(b != std::string::npos, "malformed rank device record '{}'", text);
  d.host = text.substr(0, a);
  d.device = text.substr(a + 1, b - a - 1);
  d.uuid = text.substr(b + 1);
  return d;
}

}  // namespace cnnscale
