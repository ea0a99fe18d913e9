// Watchdog implementation: the thread wakes a few times per timeout (at least every second), so a
// stuck operation is reported within timeout + max(timeout / 10, 1 s).
#include "core/watchdog.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

#include "core/error.hpp"

namespace cnnscale {

namespace {
std::atomic<Watchdog*> g_active{nullptr};
std::atomic<int64_t> g_iteration{-1};
std::atomic<int64_t> g_arrivals{0};
std::atomic<void (*)(int64_t)> g_publisher{nullptr};
// Test hook (tests/mpi/test_faults.cpp), not a user option: CNNSCALE_INJECT_HANG_AT=R:I makes rank
// R stop for good as it begins iteration I, outside any collective, as a stuck rank would.
int g_hang_rank = -1;
int64_t g_hang_iteration = -1;
int g_rank = -1;
}  // namespace

void set_watchdog_iteration(int64_t iteration) {
  g_iteration.store(iteration, std::memory_order_relaxed);
  if (iteration == g_hang_iteration && g_rank == g_hang_rank && g_hang_rank >= 0) {
    std::fprintf(stderr, "cnnscale: rank %d: CNNSCALE_INJECT_HANG_AT: hanging at iteration %lld\n", g_rank,
                 static_cast<long long>(iteration));
    std::fflush(stderr);
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
}

int64_t note_collective_arrival() {
  return note_collective_arrivals(1);
}

int64_t note_collective_arrivals(int64_t count) {
  if (count <= 0) return collective_arrivals();
  const int64_t n = g_arrivals.fetch_add(count, std::memory_order_relaxed) + count;
  if (auto* publish = g_publisher.load(std::memory_order_acquire)) publish(n);
  return n;
}

int64_t collective_arrivals() {
  return g_arrivals.load(std::memory_order_relaxed);
}

int64_t watchdog_iteration() {
  return g_iteration.load(std::memory_order_relaxed);
}

void set_arrival_publisher(void (*publisher)(int64_t)) {
  g_publisher.store(publisher, std::memory_order_release);
}

void Watchdog::set_peer_report(std::function<std::string(int64_t)> report) {
  std::lock_guard<std::mutex> lock(mutex_);
  peer_report_ = std::move(report);
}

Watchdog::Watchdog(double timeout_seconds, int rank, std::string host, std::function<void()> on_timeout)
    : timeout_(timeout_seconds), rank_(rank), host_(std::move(host)), on_timeout_(std::move(on_timeout)) {
  if (!(timeout_ > 0)) throw_config("--watchdog-timeout must be > 0 seconds, got {}", timeout_);
  Watchdog* expected = nullptr;
  CNNSCALE_CHECK(g_active.compare_exchange_strong(expected, this), "a second watchdog in one process");
  thread_ = std::thread([this] { run(); });
  g_rank = rank_;
  if (const char* v = std::getenv("CNNSCALE_INJECT_HANG_AT"); v && *v) {
    long long r = -1, i = -1;
    if (std::sscanf(v, "%lld:%lld", &r, &i) == 2) {
      g_hang_rank = static_cast<int>(r);
      g_hang_iteration = i;
    }
  }
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  g_active.store(nullptr);
}

Watchdog* Watchdog::active() {
  return g_active.load(std::memory_order_acquire);
}

std::string Watchdog::timeout_line(const char* operation, int64_t iteration) const {
  const std::string when = iteration >= 0 ? fmt::format("at iteration {}", iteration) : std::string("during setup");
  return fmt::format(
      "cnnscale: error: rank {} (host {}): {} {} did not complete within {:g} s; a peer rank failed or hung", rank_,
      host_, operation, when, timeout_);
}

void Watchdog::run() {
  using namespace std::chrono;
  const auto period =
      duration_cast<steady_clock::duration>(duration<double>(std::min(std::max(timeout_ / 10, 0.01), 1.0)));
  const auto limit = duration_cast<steady_clock::duration>(duration<double>(timeout_));
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait_for(lock, period, [&] { return stop_; });
    if (stop_) return;
    if (!mark_.operation || steady_clock::now() - mark_.start < limit) continue;
    std::string line = timeout_line(mark_.operation, mark_.iteration);
    if (peer_report_) {
      const std::string peers = peer_report_(g_arrivals.load(std::memory_order_relaxed));
      if (!peers.empty()) line += ": " + peers;
    }
    lock.unlock();
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
    if (on_timeout_) on_timeout_();
    std::_Exit(3);
  }
}

BlockingOp::BlockingOp(const char* operation) : watchdog_(Watchdog::active()) {
  if (!watchdog_) return;
  std::lock_guard<std::mutex> lock(watchdog_->mutex_);
  previous_ = watchdog_->mark_;
  watchdog_->mark_ = {operation, g_iteration.load(std::memory_order_relaxed), std::chrono::steady_clock::now()};
}

BlockingOp::~BlockingOp() {
  if (!watchdog_) return;
  std::lock_guard<std::mutex> lock(watchdog_->mutex_);
  watchdog_->mark_ = previous_;
}

}  // namespace cnnscale
