// Data-parallel settings of one rank, as the Trainer sees them: who the peers are (a
// Communicator), how each global batch is split across ranks, and how gradients are exchanged.
// Also the host-side helpers that move a few values through a Communicator (which only sums
// device tensors), so the Trainer and sync batch norm work with MPI and NCCL alike.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/communicator.hpp"
#include "layers/layer.hpp"
#include "net/gradient_plan.hpp"  // kDefaultBucketBytes
#include "parallel/split_policy.hpp"

namespace cnnscale {

struct DataParallel {
  Communicator* comm = nullptr;  // null: a single process (no exchange at all)
  RankExchange* exchange = nullptr;  // over `comm`, for layers (sync batch norm)
  int rank = 0;
  // Samples of every global batch per rank (sum = the global batch). Each rank takes its
  // contiguous slice of each global batch, in rank order. Empty: a single process.
  std::vector<int64_t> rank_batches;
  bool overlap = true;  // bucket allreduces during backward
  int64_t bucket_bytes = kDefaultBucketBytes;
  // The dtype gradients are summed in: F32 (the master gradients, as PyTorch DDP under autocast) or
  // BF16/F16, each bucket rounded to 16 bits for the exchange and widened back after it (half the
  // bytes, as DDP's bf16/fp16 compression hooks). Buckets are cut by their f32 bytes either way.
  DType exchange_dtype = DType::F32;
  // Each bucket's parameters updated as soon as the bucket is summed (Communicator::
  // after_collectives: on GPU ranks a side stream beside the rest of backward), instead of one
  // update after the whole exchange. The same arithmetic either way. The gradient plan falls back
  // to the one update where a step's update needs every gradient first (fp16 loss scaling).
  bool update_per_bucket = true;
  // --allreduce-dtype compute: where the compute dtype is bf16, the compute gradients themselves are
  // summed, in place, and the update reads them there: no f32 gradient is written in backward,
  // rounded for the exchange or widened after it (the sums are those of the bf16 exchange of the
  // f32 gradients, bit for bit: those are backward's bf16 values widened). Elsewhere the f32 path.
  bool exchange_compute_grads = false;
  // Layers whose gathered inputs and output gradients are fewer bytes than their parameter
  // gradients (fully-connected ones: Layer::gathers_gradients) form those gradients from every
  // rank's rows, gathered during backward, instead of allreducing them. The sum is the same up to
  // its order; every rank then computes the same gradient, bit for bit only where every rank runs
  // the same kernels on the same device model (whole, identical GPUs).
  bool gather_gradients = false;

  bool active() const { return comm != nullptr; }
  int size() const { return rank_batches.empty() ? 1 : static_cast<int>(rank_batches.size()); }
};

// The study's split of a global batch over `ranks`: shares differ by at most one, larger shares
// first (64 on 3 ranks: 22, 21, 21). ConfigError if a rank would get no sample.
std::vector<int64_t> split_global_batch(int64_t global_batch, int ranks);
// The one check of --batch itself (ConfigError unless >= 1): `train` runs it before touching a
// device, and the Trainer again for callers that build one directly.
void check_global_batch(int64_t global_batch);

// `shares` in rank order: one per rank, each at least one sample, summing to `global_batch`;
// ConfigError naming --shares otherwise.
std::vector<int64_t> manual_split(int64_t global_batch, const std::vector<int64_t>& shares, int ranks);

AllreduceAlgo parse_allreduce_algo(const std::string& text);  // ring, tree, auto
std::string to_string(AllreduceAlgo algo);
// default, efficiency, zero; ConfigError naming `what` (the flag or key) for anything else.
CtaPolicy parse_cta_policy(const std::string& text, const std::string& what);

// Sum of `values` over all ranks, through a device tensor of `backend` (host round trip).
std::vector<float> allreduce_sum_host(Communicator& comm, Backend& backend, const std::vector<float>& values);
// Every rank's `values` (same length everywhere), indexed by rank. Exact: each rank writes its own
// slot of a zeroed buffer and the sum adds only zeros to it, so all ranks get identical bits.
std::vector<std::vector<float>> allgather_host(Communicator& comm, Backend& backend, const std::vector<float>& values);

// The layers' view of the job's ranks (layers/layer.hpp), over a communicator.
class CommunicatorExchange final : public RankExchange {
 public:
  explicit CommunicatorExchange(Communicator& comm) : comm_(comm) {}
  int ranks() const override { return comm_.size(); }
  std::vector<std::vector<float>> allgather(Backend& backend, const std::vector<float>& values) override {
    return allgather_host(comm_, backend, values);
  }
  void gather_async(const Tensor& mine, const Tensor& all) override { comm_.allgather_async(mine, all); }
  void wait_gathers() override { comm_.wait_collectives(); }

 private:
  Communicator& comm_;
};

}  // namespace cnnscale
