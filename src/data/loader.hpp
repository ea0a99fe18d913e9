// Loader: turns a Dataset into a stream of host batches, in an order reshuffled every epoch by a
// seeded std::mt19937_64. The order depends only on the seed and the dataset size (not on the
// batch size, timing or threads), and the position plus the RNG state can be checkpointed so a
// resumed run sees exactly the batches an uninterrupted one would.
//
// Batches live in a ring of `slots` host buffers (pinned when the allocator comes from
// Backend::alloc_host). A buffer handed out by next() stays the caller's until release(): on GPU
// the caller releases it only after a synchronisation point has passed its (asynchronous) upload.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/tensor.hpp"
#include "data/augment.hpp"
#include "data/dataset.hpp"

namespace cnnscale {

struct LoaderOptions {
  int64_t batch = 64;  // samples per batch position (data parallel: the global batch)
  // Data parallel: this rank fills only samples [shard_begin, shard_begin + shard_count) of each
  // batch; 0 means the whole batch. Order, positions and checkpoint state are those of the whole
  // batch, so every rank walks the same global order (which depends only on the seed).
  int64_t shard_begin = 0, shard_count = 0;
  bool shuffle = true;    // reshuffle every epoch (training); false: dataset order (testing)
  bool drop_last = true;  // an epoch is floor(size / batch) full batches; false: a last partial one
  uint64_t seed = 0;
  int slots = 3;         // host buffers in the ring (>= 2)
  bool prefetch = true;  // prepare batches on a background thread
  // Threads filling one batch, each a contiguous part of its samples (reading, checking and
  // normalising in parallel); the batch's contents do not depend on it.
  int threads = 1;
  // Training-time augmentation of every sample (augment.hpp), after normalisation.
  AugmentOptions augment;
  // Batches as the dataset stores them (HostBatch::bytes) with each sample's augmentation draw
  // (HostBatch::draws) instead of normalised, augmented floats: a GPU run uploads a quarter of the
  // bytes and decodes them on the device (Backend::decode_bytes) to what the float batch would
  // hold. Needs a byte-stored dataset (Dataset::byte_affine).
  bool bytes = false;
};

struct HostBatch {
  float* data = nullptr;      // (count, C, H, W): this rank's shard of the batch (null in byte mode)
  uint8_t* bytes = nullptr;   // byte mode: (count, C, H, W) as stored
  int32_t* draws = nullptr;   // byte mode with augmentation: (count, 3) = dy, dx, mirror (augment_draw)
  int32_t* labels = nullptr;  // (count)
  int64_t count = 0;
  int64_t epoch = 0;
  int64_t index = 0;  // batch index within the epoch
  int slot = -1;
};

// Where the next batch comes from: epoch, batch position in it, and the shuffle RNG's state
// (std::mt19937_64 operator<< text) as it was before that epoch's shuffle.
struct LoaderState {
  int64_t epoch = 0;
  int64_t position = 0;
  std::string rng_state;
};

using HostAllocator = std::function<std::shared_ptr<Storage>(size_t bytes)>;

class Loader {
 public:
  // `alloc` provides each slot's buffer; empty means plain aligned host memory.
  Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options, HostAllocator alloc = {});
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  const Dataset& dataset() const { return *dataset_; }
  const LoaderOptions& options() const { return options_; }
  int64_t batches_per_epoch() const { return batches_per_epoch_; }

  // The next batch, blocking while it is prepared. Valid until release(batch.slot). Throws if
  // every slot is held by the caller (release some first) or if filling failed.
  const HostBatch& next();
  void release(int slot);
  int held() const;  // batches handed out and not yet released

  LoaderState state() const;               // of the batch next() would return
  void restore(const LoaderState& state);  // only before the first next()

  // The sample order of an epoch given the RNG state before its shuffle (tests, sharding).
  static std::vector<int64_t> epoch_order(int64_t size, bool shuffle, std::mt19937_64& rng);

 private:
  void start();
  void produce_loop();
  void begin_epoch();  // producer: order_ for produce_epoch_
  void fill_slot(int slot, int64_t epoch, int64_t index);
  void advance_producer();

  std::shared_ptr<const Dataset> dataset_;
  LoaderOptions options_;
  // Float batches mirrored over a dataset whose mirror negates channels (optical-flow volumes): its
  // map, the samples then read as bytes and decoded with their draws (decode_augmented).
  std::optional<ByteAffine> negating_map_;
  int64_t batches_per_epoch_ = 0;
  int64_t sample_numel_ = 0;

  std::vector<std::shared_ptr<Storage>> storage_;  // one per slot: data then labels
  std::vector<HostBatch> batches_;                 // per slot

  // Producer side (the prefetch thread, or next() itself without prefetch).
  std::mt19937_64 rng_;
  std::vector<int64_t> order_;  // sample order of produce_epoch_
  int64_t produce_epoch_ = 0, produce_position_ = 0;

  // Shared state, under mutex_.
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<int> free_slots_;
  std::deque<int> ready_;
  int filling_ = 0;
  int held_ = 0;
  bool started_ = false, stop_ = false;
  std::exception_ptr error_;
  std::map<int64_t, std::string> epoch_rng_;  // epoch -> RNG text before its shuffle
  int64_t consume_epoch_ = 0, consume_position_ = 0;

  std::thread thread_;
};

}  // namespace cnnscale
