// The watchdog's report of the ranks that did not arrive: from every rank's count of collectives
// started (parallel/progress_board.hpp), the ranks behind this rank's own count are named, the
// others (ahead or level: they arrived) are not.
#include <gtest/gtest.h>

#include "core/watchdog.hpp"
#include "parallel/counted_communicator.hpp"
#include "parallel/progress_board.hpp"

namespace cnnscale {
namespace {

TEST(ProgressBoard, NamesTheRanksBehindThisOne) {
  const int64_t counts[] = {313, 312, 313, 300};
  EXPECT_EQ(describe_ranks_behind(counts, 4, 0, 313),
            "rank 1 did not arrive (collectives it started: 312, this rank: 313); "
            "rank 3 did not arrive (collectives it started: 300, this rank: 313)");
  // Rank 2 sees the same: its own slot never counts.
  EXPECT_EQ(describe_ranks_behind(counts, 4, 2, 313).find("rank 2"), std::string::npos);
}

TEST(ProgressBoard, NobodyBehindSaysNothing) {
  const int64_t level[] = {40, 40, 41};  // rank 2 already started the next one: it arrived too
  EXPECT_EQ(describe_ranks_behind(level, 3, 0, 40), "");
}

// Without an MPI job there is no window: nothing is published and nothing reported.
TEST(ProgressBoard, SingleProcessHasNoBoard) {
  ProgressBoard board;
  EXPECT_EQ(board.behind(5), "");
  const int64_t before = note_collective_arrival();
  EXPECT_EQ(note_collective_arrival(), before + 1);
}

// A device communicator that only records what reaches it (the NCCL one needs a GPU).
class RecordingDeviceCommunicator final : public DeviceCommunicator {
 public:
  std::string* log;
  explicit RecordingDeviceCommunicator(std::string* l) : log(l) {}
  std::string name() const override { return "nccl"; }
  int rank() const override { return 1; }
  int size() const override { return 2; }
  void allreduce_sum_async(const Tensor&) override { *log += "allreduce "; }
  void allgather_async(const Tensor&, const Tensor&) override { *log += "allgather "; }
  void wait() override { *log += "wait "; }
  void synchronize_host() override { *log += "sync "; }
  void abort() override { *log += "abort "; }
  int record_timestamp() override { return 7; }
  double elapsed_ms(int, int) override { return 0; }
  void clear_timestamps() override {}
  void set_busy_tag(std::int64_t) override {}
  std::vector<std::pair<std::int64_t, double>> take_busy_ms(std::int64_t) override { return {}; }
  void begin_captured_brackets() override {}
  std::vector<std::pair<size_t, size_t>> captured_brackets() const override { return {}; }
  void add_busy_bracket(std::int64_t, std::shared_ptr<TimingEvent>, std::shared_ptr<TimingEvent>) override {}
};

// GPU ranks count their collectives as MPI ones do, so a hung GPU rank is named too: each
// allreduce and allgather handed to the device communicator raises this rank's count by one, a
// blocking allreduce_sum included; waits and the rest only pass through.
TEST(ProgressBoard, DeviceCommunicatorCountsEachCollective) {
  std::string log;
  CountedDeviceCommunicator comm(std::make_unique<RecordingDeviceCommunicator>(&log));
  EXPECT_EQ(comm.name(), "nccl");
  EXPECT_EQ(comm.rank(), 1);
  EXPECT_EQ(comm.record_timestamp(), 7);
  const int64_t before = collective_arrivals();
  comm.allreduce_sum_async(Tensor{});
  comm.allgather_async(Tensor{}, Tensor{});
  EXPECT_EQ(collective_arrivals(), before + 2);
  comm.allreduce_sum(Tensor{});
  EXPECT_EQ(collective_arrivals(), before + 3);
  comm.wait();
  comm.synchronize_host();
  comm.abort();
  EXPECT_EQ(collective_arrivals(), before + 3);
  EXPECT_EQ(log, "allreduce allgather allreduce wait wait sync abort ");
}

// A replayed CUDA graph's collectives are counted at once (one publication per replay).
TEST(ProgressBoard, ManyArrivalsAtOnce) {
  const int64_t before = collective_arrivals();
  EXPECT_EQ(note_collective_arrivals(5), before + 5);
  EXPECT_EQ(note_collective_arrivals(0), before + 5);
  EXPECT_EQ(collective_arrivals(), before + 5);
}

}  // namespace
}  // namespace cnnscale
