// Signal handlers of the graceful stop (see stop_signal.hpp).
#include "core/stop_signal.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace cnnscale {

namespace {

// Atomic, not only volatile: two signals sent back to back may be handled by two threads at the same
// time, and exactly one of them must find itself first (compare_exchange below). A lock-free atomic
// is safe in a signal handler.
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);
// CLOCK_MONOTONIC seconds of the first signal (clock_gettime is async-signal-safe).
volatile sig_atomic_t g_first_second = 0;
const int kStopSignals[] = {SIGTERM, SIGUSR1, SIGINT};

// set_abort_cleanup's paths, read by the handler only while armed.
volatile sig_atomic_t g_cleanup_armed = 0;
char g_cleanup[3][4096];

sig_atomic_t monotonic_second() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<sig_atomic_t>(ts.tv_sec);
}

void on_stop_signal(int signo) {
  int first = 0;
  if (g_stop_signal.compare_exchange_strong(first, signo)) {
    g_first_second = monotonic_second();
    return;
  }
  // A stop is already recorded (`first`). The same signal again within about a second is one
  // request delivered twice: timeout(1) signals its child and then the child's process group, and a
  // terminal's Ctrl-C or a launcher may reach a process twice. Whole seconds: a repeat 1 to 2 s
  // later may count as either. A first handler still running on another thread has not set its
  // second yet (0): that is "at once". SIGUSR1 is a launcher's or scheduler's stop request, never an
  // abort (stop_signal.hpp).
  const sig_atomic_t since = g_first_second;
  const bool at_once = since == 0 || monotonic_second() - since <= 1;
  if (signo == SIGUSR1 || (at_once && (signo == first || first == SIGUSR1))) return;
  // Second signal: no more waiting. Restore the default action and deliver it again, so the
  // exit status says which signal ended the process.
  static const char msg[] = "cnnscale: second stop signal: aborting now\n";
  ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);
  (void)ignored;
  if (g_cleanup_armed) {
    // unlink, rmdir and nanosleep are async-signal-safe. The progress file's writer thread runs on
    // while this handler does: it may just have made its temporary file again, or renamed it into
    // place, so the folder is not empty yet. Try again for up to about 200 ms (a write of a few
    // hundred bytes takes far less); once the folder is gone the writer cannot recreate it (it
    // writes into the folder, it does not make it).
    const struct timespec a_millisecond = {0, 1000000};
    for (int attempt = 0; attempt < 200; ++attempt) {
      ::unlink(g_cleanup[0]);
      ::unlink(g_cleanup[1]);
      if (::rmdir(g_cleanup[2]) == 0 || errno == ENOENT) break;
      ::nanosleep(&a_millisecond, nullptr);
    }
  }
  ::signal(signo, SIG_DFL);
  ::raise(signo);
}

}  // namespace

void install_stop_signals() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_stop_signal;
  // On the thread running it, the handler is not interrupted by another stop signal: the second of
  // two kills sent back to back waits until the first is recorded (other threads: the atomic).
  sigemptyset(&sa.sa_mask);
  for (int s : kStopSignals) sigaddset(&sa.sa_mask, s);
  sa.sa_flags = SA_RESTART;  // blocking reads and waits go on; the loop polls the flag
  for (int s : kStopSignals) ::sigaction(s, &sa, nullptr);
}

void set_abort_cleanup(const char* file, const char* temp_file, const char* folder) {
  g_cleanup_armed = 0;
  const char* paths[3] = {file, temp_file, folder};
  for (const char* p : paths)
    if (std::strlen(p) >= sizeof g_cleanup[0]) return;
  for (int i = 0; i < 3; ++i) std::strcpy(g_cleanup[i], paths[i]);
  std::atomic_thread_fence(std::memory_order_seq_cst);  // the paths are whole before the handler may read them
  g_cleanup_armed = 1;
}

void clear_abort_cleanup() { g_cleanup_armed = 0; }

int stop_signal() {
  return g_stop_signal.load();
}

const char* stop_signal_name(int signo) {
  switch (signo) {
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGINT:
      return "SIGINT";
    default:
      return "signal";
  }
}

}  // namespace cnnscale
