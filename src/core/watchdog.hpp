// Watchdog: one thread per rank that ends the job when a host-blocking operation (allreduce wait,
// host sync, download, MPI call) runs longer than the timeout, because a peer rank died or hung.
// The main thread marks each such operation with a BlockingOp {operation, iteration, start}; on
// expiry the watchdog prints ONE line
//   cnnscale: error: rank R (host H): <operation> at iteration I did not complete within T s; a peer rank failed or
//   hung
// and runs its on_timeout action (abort the communicator, then end the job with exit code 3).
// Where the peers publish their progress (parallel/progress_board.hpp), the line goes on to name the
// ranks that did not arrive: "...; a peer rank failed or hung: rank 1 did not arrive (...)".
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace cnnscale {

class Watchdog {
 public:
  // Starts the thread and becomes the process's active watchdog (at most one at a time).
  // `on_timeout` runs on the watchdog thread after the line is printed and should end the
  // process; if it returns, the watchdog calls std::_Exit(3).
  Watchdog(double timeout_seconds, int rank, std::string host, std::function<void()> on_timeout);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  static Watchdog* active();
  double timeout_seconds() const { return timeout_; }
  // The line the watchdog prints (without the trailing newline); exposed for tests.
  std::string timeout_line(const char* operation, int64_t iteration) const;
  // What the line adds about the peers, asked on the watchdog thread at expiry with this rank's
  // collective arrivals (note_collective_arrival); it must not block or call MPI. "" adds nothing.
  void set_peer_report(std::function<std::string(int64_t arrivals)> report);

 private:
  friend class BlockingOp;
  struct Mark {
    const char* operation = nullptr;  // null: nothing blocking right now
    int64_t iteration = -1;
    std::chrono::steady_clock::time_point start{};
  };
  void run();

  double timeout_;
  int rank_;
  std::string host_;
  std::function<void()> on_timeout_;
  std::function<std::string(int64_t)> peer_report_;  // guarded by mutex_
  std::mutex mutex_;
  std::condition_variable cv_;
  Mark mark_;
  bool stop_ = false;
  std::thread thread_;
};

// The training iteration that marks report (-1: setup, before the first iteration). Cheap: the
// trainer sets it every step.
void set_watchdog_iteration(int64_t iteration);

// Every communicator calls this as it starts a collective (main thread only): the count is this
// rank's progress, the same sequence on every rank (they start the same collectives in the same
// order), which `publisher` (installed by the progress board; null: none) shows to the peers, so a
// waiting rank can name the one that did not arrive. Returns the new count.
int64_t note_collective_arrival();
// `n` collectives started at once (a replayed CUDA graph's), shown to the peers in one publication;
// n <= 0 does nothing. Returns the new count.
int64_t note_collective_arrivals(int64_t n);
int64_t collective_arrivals();  // this rank's count so far
void set_arrival_publisher(void (*publisher)(int64_t arrivals));
int64_t watchdog_iteration();  // the last set_watchdog_iteration (-1: setup)

// RAII mark of a host-blocking operation on the active watchdog; no-op without one (single
// process). Nests: an inner mark replaces the outer one until it ends. `operation` must outlive it.
class BlockingOp {
 public:
  explicit BlockingOp(const char* operation);
  ~BlockingOp();
  BlockingOp(const BlockingOp&) = delete;
  BlockingOp& operator=(const BlockingOp&) = delete;

 private:
  Watchdog* watchdog_;
  Watchdog::Mark previous_;
};

}  // namespace cnnscale
