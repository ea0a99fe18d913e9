// The watchdog's report of the ranks that did not arrive: from every rank's count of collectives
// started (parallel/progress_board.hpp), the ranks behind this rank's own count are named, the
// others (ahead or level: they arrived) are not.
#include <gtest/gtest.h>

#include "core/watchdog.hpp"
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

}  // namespace
}  // namespace cnnscale
