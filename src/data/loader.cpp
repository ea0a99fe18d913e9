// Loader implementation: one producer (a prefetch thread, or the caller) walks (epoch, position)
// and fills free slots in order; the consumer pops ready slots in the same order. The checkpoint
// position is the consumer's, so batches prefetched but not consumed are simply produced again.
#include "data/loader.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/byte_input.hpp"
#include "core/rng.hpp"

namespace cnnscale {

namespace {
constexpr uint64_t kShuffleSalt = 0x53485546464C45ull;  // "SHUFFLE": a stream apart from weight init

std::string rng_text(const std::mt19937_64& rng) {
  std::ostringstream os;
  os << rng;
  return os.str();
}

std::shared_ptr<Storage> aligned_host(size_t bytes) {
  size_t padded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, padded ? padded : 64);
  if (!p) throw_runtime("host allocation of {} bytes for the data loader failed", bytes);
  return std::make_shared<Storage>(p, bytes, Device{}, [](void* q) { std::free(q); });
}
}  // namespace

std::vector<int64_t> Loader::epoch_order(int64_t size, bool shuffle, std::mt19937_64& rng) {
  std::vector<int64_t> order(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) order[static_cast<size_t>(i)] = i;
  if (shuffle) {
    // Fisher-Yates with an explicit draw (std::shuffle's algorithm differs between standard
    // libraries, and the order must be the same everywhere). Modulo bias is below 2^-40 here.
    for (int64_t i = size - 1; i > 0; --i) {
      uint64_t j = rng() % static_cast<uint64_t>(i + 1);
      std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
    }
  }
  return order;
}

Loader::Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options, HostAllocator alloc)
    : dataset_(std::move(dataset)), options_(options), rng_(mix64(options.seed ^ kShuffleSalt)) {
  const int64_t size = dataset_->size();
  if (options_.batch < 1) throw_config("batch size must be >= 1, got {}", options_.batch);
  // Without drop_last a batch past the dataset is one batch of the whole dataset: the buffers are
  // sized for that, not for the batch asked (a test batch of 10^11 would allocate terabytes).
  if (!options_.drop_last && options_.shard_count == 0 && size > 0) options_.batch = std::min(options_.batch, size);
  if (options_.slots < 2) throw_config("the data loader needs at least 2 buffers, got {}", options_.slots);
  batches_per_epoch_ = options_.drop_last ? size / options_.batch : (size + options_.batch - 1) / options_.batch;
  if (batches_per_epoch_ < 1)
    throw_config("batch size {} is larger than {} ({} samples)", options_.batch, dataset_->name(), size);
  sample_numel_ = dataset_->sample_shape().numel();
  check_augment(options_.augment, dataset_->sample_shape().dims());
  if (options_.shard_count == 0) options_.shard_count = options_.batch;
  if (options_.shard_begin < 0 || options_.shard_count < 1 ||
      options_.shard_begin + options_.shard_count > options_.batch)
    throw_config("data loader shard [{}, {}) is outside a batch of {}", options_.shard_begin,
                 options_.shard_begin + options_.shard_count, options_.batch);

  if (options_.bytes && !dataset_->byte_affine())
    throw_config("{}: samples are not stored as bytes; the loader cannot hand them out undecoded", dataset_->name());
  if (!options_.bytes && options_.augment.mirror)
    if (std::optional<ByteAffine> map = dataset_->byte_affine(); map && map->negates_any())
      negating_map_ = std::move(map);

  // A slot: the samples (floats, or bytes), then the labels, then (byte mode with augmentation)
  // the draws, each part starting on a 64-byte boundary.
  auto padded = [](size_t bytes) { return (bytes + 63) / 64 * 64; };
  const auto count = static_cast<size_t>(options_.shard_count);
  const size_t data_bytes =
      padded(count * static_cast<size_t>(sample_numel_) * (options_.bytes ? sizeof(uint8_t) : sizeof(float)));
  const size_t label_bytes = padded(count * sizeof(int32_t));
  const size_t draw_bytes = options_.bytes && options_.augment.any() ? count * kDrawInts * sizeof(int32_t) : 0;
  for (int s = 0; s < options_.slots; ++s) {
    const size_t total = data_bytes + label_bytes + draw_bytes;
    auto storage = alloc ? alloc(total) : aligned_host(total);
    char* base = static_cast<char*>(storage->ptr());
    HostBatch b;
    if (options_.bytes)
      b.bytes = reinterpret_cast<uint8_t*>(base);
    else
      b.data = reinterpret_cast<float*>(base);
    b.labels = reinterpret_cast<int32_t*>(base + data_bytes);
    if (draw_bytes) b.draws = reinterpret_cast<int32_t*>(base + data_bytes + label_bytes);
    b.slot = s;
    storage_.push_back(std::move(storage));
    batches_.push_back(b);
    free_slots_.push_back(s);
  }
  epoch_rng_[0] = rng_text(rng_);
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Loader::restore(const LoaderState& state) {
  std::lock_guard<std::mutex> lock(mutex_);
  CNNSCALE_CHECK(!started_, "Loader::restore after the first batch");
  if (state.epoch < 0 || state.position < 0 || state.position >= batches_per_epoch_)
    throw_config("data loader position (epoch {}, batch {}) is outside an epoch of {} batches", state.epoch,
                 state.position, batches_per_epoch_);
  std::istringstream is(state.rng_state);
  std::mt19937_64 rng;
  is >> rng;
  if (is.fail()) throw_config("invalid data loader RNG state ({} characters)", state.rng_state.size());
  rng_ = rng;
  epoch_rng_.clear();
  epoch_rng_[state.epoch] = state.rng_state;
  consume_epoch_ = produce_epoch_ = state.epoch;
  consume_position_ = produce_position_ = state.position;
}

LoaderState Loader::state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  LoaderState s;
  s.epoch = consume_epoch_;
  s.position = consume_position_;
  auto it = epoch_rng_.find(consume_epoch_);
  CNNSCALE_CHECK(it != epoch_rng_.end(), "no RNG state recorded for epoch {}", consume_epoch_);
  s.rng_state = it->second;
  return s;
}

int Loader::held() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return held_;
}

// Producer only. Records the RNG state before this epoch's shuffle (already known) and after it,
// which is the state before the next epoch's: a consumer that reaches the next epoch can always
// report it, even if the producer has not begun that epoch yet.
void Loader::begin_epoch() {
  order_ = epoch_order(dataset_->size(), options_.shuffle, rng_);
  std::lock_guard<std::mutex> lock(mutex_);
  epoch_rng_[produce_epoch_ + 1] = rng_text(rng_);
  // Only the consumer's epoch and the next are ever asked for.
  while (!epoch_rng_.empty() && epoch_rng_.begin()->first < consume_epoch_) epoch_rng_.erase(epoch_rng_.begin());
}

void Loader::advance_producer() {
  if (++produce_position_ == batches_per_epoch_) {
    produce_position_ = 0;
    ++produce_epoch_;
    begin_epoch();
  }
}

void Loader::fill_slot(int slot, int64_t epoch, int64_t index) {
  HostBatch& b = batches_[static_cast<size_t>(slot)];
  const int64_t begin = index * options_.batch + options_.shard_begin;
  const int64_t count = std::max<int64_t>(0, std::min(options_.shard_count, dataset_->size() - begin));
  const int64_t* ids = order_.data() + begin;
  const int64_t parts = std::clamp<int64_t>(options_.threads, 1, std::max<int64_t>(count, 1));
  const Shape shape = dataset_->sample_shape();
  // Samples [lo, hi) of the batch: read, normalised, augmented.
  auto fill_part = [&](int64_t lo, int64_t hi) {
    const std::span<const int64_t> part(ids + lo, static_cast<size_t>(hi - lo));
    if (options_.bytes) {
      dataset_->fill_bytes(part, b.bytes + lo * sample_numel_, b.labels + lo);
      if (b.draws)
        for (int64_t s = lo; s < hi; ++s) {
          const AugmentDraw d =
              augment_draw(options_.seed, epoch, ids[s], options_.augment.crop_pad, options_.augment.mirror);
          int32_t* out = b.draws + s * kDrawInts;
          out[0] = static_cast<int32_t>(d.dy);
          out[1] = static_cast<int32_t>(d.dx);
          out[2] = d.mirror ? 1 : 0;
        }
      return;
    }
    if (negating_map_) {
      std::vector<uint8_t> bytes(static_cast<size_t>((hi - lo) * sample_numel_));
      dataset_->fill_bytes(part, bytes.data(), b.labels + lo);
      for (int64_t s = lo; s < hi; ++s)
        decode_augmented(bytes.data() + (s - lo) * sample_numel_, b.data + s * sample_numel_, shape[0], shape[1],
                         shape[2], *negating_map_,
                         augment_draw(options_.seed, epoch, ids[s], options_.augment.crop_pad, options_.augment.mirror));
      return;
    }
    dataset_->fill(part, b.data + lo * sample_numel_, b.labels + lo);
    if (!options_.augment.any()) return;
    std::vector<float> scratch;
    for (int64_t s = lo; s < hi; ++s)
      augment_sample(b.data + s * sample_numel_, shape[0], shape[1], shape[2],
                     augment_draw(options_.seed, epoch, ids[s], options_.augment.crop_pad, options_.augment.mirror),
                     scratch);
  };
  if (parts == 1) {
    fill_part(0, count);
  } else {
    // Part p is samples [p count / parts, (p + 1) count / parts): the calling thread fills part 0.
    std::vector<std::exception_ptr> errors(static_cast<size_t>(parts));
    auto part = [&](int64_t p) {
      const int64_t lo = p * count / parts, hi = (p + 1) * count / parts;
      try {
        fill_part(lo, hi);
      } catch (...) {
        errors[static_cast<size_t>(p)] = std::current_exception();
      }
    };
    std::vector<std::thread> workers;
    for (int64_t p = 1; p < parts; ++p) workers.emplace_back(part, p);
    part(0);
    for (std::thread& w : workers) w.join();
    for (const std::exception_ptr& e : errors)
      if (e) std::rethrow_exception(e);  // the first part's failure, as one thread would have met it
  }
  b.count = count;
  b.epoch = epoch;
  b.index = index;
}

void Loader::start() {
  // Called with mutex_ unlocked and started_ already set.
  begin_epoch();
  if (options_.prefetch) thread_ = std::thread([this] { produce_loop(); });
}

void Loader::produce_loop() {
  try {
    for (;;) {
      int slot;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return stop_ || !free_slots_.empty(); });
        if (stop_) return;
        slot = free_slots_.front();
        free_slots_.pop_front();
        ++filling_;
      }
      fill_slot(slot, produce_epoch_, produce_position_);
      advance_producer();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        --filling_;
        ready_.push_back(slot);
      }
      cv_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    --filling_;
    error_ = std::current_exception();
    cv_.notify_all();
  }
}

const HostBatch& Loader::next() {
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!started_) started_ = first = true;
  }
  if (first) start();

  int slot;
  if (!options_.prefetch) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      CNNSCALE_CHECK(!free_slots_.empty(), "all {} loader buffers are held: release one first", options_.slots);
      slot = free_slots_.front();
      free_slots_.pop_front();
    }
    fill_slot(slot, produce_epoch_, produce_position_);
    advance_producer();
    std::lock_guard<std::mutex> lock(mutex_);
    ready_.push_back(slot);
  }
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return error_ || !ready_.empty() || (free_slots_.empty() && filling_ == 0); });
  if (ready_.empty() && error_) std::rethrow_exception(error_);
  CNNSCALE_CHECK(!ready_.empty(), "all {} loader buffers are held: release one first", options_.slots);
  slot = ready_.front();
  ready_.pop_front();
  ++held_;
  const HostBatch& b = batches_[static_cast<size_t>(slot)];
  consume_epoch_ = b.epoch;
  consume_position_ = b.index + 1;
  if (consume_position_ == batches_per_epoch_) {
    consume_position_ = 0;
    ++consume_epoch_;
  }
  return b;
}

void Loader::release(int slot) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    CNNSCALE_CHECK(slot >= 0 && slot < options_.slots && held_ > 0, "release of slot {} not held", slot);
    --held_;
    free_slots_.push_back(slot);
  }
  cv_.notify_all();
}

}  // namespace cnnscale
