// CountedDeviceCommunicator: a device communicator (NCCL) that counts each collective it enqueues
// (core/watchdog.hpp's note_collective_arrival), as MpiCommunicator counts its own, so the progress
// board (progress_board.hpp) shows GPU ranks' progress too and a waiting rank's watchdog can name
// the rank that did not arrive. Counting here, above the backend, keeps the CUDA code unaware of it.
// A captured step's collectives are counted as they are captured; the Trainer counts each replay's.
#pragma once
#include <memory>
#include <utility>

#include "backend/communicator.hpp"
#include "core/watchdog.hpp"

namespace cnnscale {

class CountedDeviceCommunicator final : public DeviceCommunicator {
 public:
  explicit CountedDeviceCommunicator(std::unique_ptr<DeviceCommunicator> inner) : inner_(std::move(inner)) {}

  std::string name() const override { return inner_->name(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  // Counted before the call: a peer waiting in this collective must find this rank's count raised
  // even when enqueueing itself blocks. allreduce_sum (blocking) comes through here too.
  void allreduce_sum_async(const Tensor& t) override {
    note_collective_arrival();
    inner_->allreduce_sum_async(t);
  }
  void allgather_async(const Tensor& mine, const Tensor& all) override {
    note_collective_arrival();
    inner_->allgather_async(mine, all);
  }
  void wait() override { inner_->wait(); }
  void wait_collectives() override { inner_->wait_collectives(); }
  void after_collectives(const std::function<void()>& work) override { inner_->after_collectives(work); }
  void synchronize_host() override { inner_->synchronize_host(); }
  void abort() override { inner_->abort(); }

  int record_timestamp() override { return inner_->record_timestamp(); }
  double elapsed_ms(int from, int to) override { return inner_->elapsed_ms(from, to); }
  void clear_timestamps() override { inner_->clear_timestamps(); }
  void set_busy_tag(std::int64_t tag) override { inner_->set_busy_tag(tag); }
  std::vector<std::pair<std::int64_t, double>> take_busy_ms(std::int64_t up_to) override {
    return inner_->take_busy_ms(up_to);
  }
  using DeviceCommunicator::take_busy_ms;
  void begin_captured_brackets() override { inner_->begin_captured_brackets(); }
  std::vector<std::pair<size_t, size_t>> captured_brackets() const override { return inner_->captured_brackets(); }
  void add_busy_bracket(std::int64_t tag, std::shared_ptr<TimingEvent> start,
                        std::shared_ptr<TimingEvent> end) override {
    inner_->add_busy_bracket(tag, std::move(start), std::move(end));
  }

 private:
  std::unique_ptr<DeviceCommunicator> inner_;
};

}  // namespace cnnscale
