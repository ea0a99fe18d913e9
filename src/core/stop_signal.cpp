// Signal handlers of the graceful stop (see stop_signal.hpp).
#include "core/stop_signal.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace cnnscale {

namespace {

volatile sig_atomic_t g_stop_signal = 0;
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
  if (g_stop_signal != 0) {
    // The same signal again within about a second is one request delivered twice: timeout(1) signals
    // its child and then the child's process group, and a terminal's Ctrl-C or a launcher may reach a
    // process twice. Whole seconds: a repeat 1 to 2 s later may count as either. SIGUSR1 is a
    // launcher's or scheduler's stop request, never an abort (stop_signal.hpp).
    const bool at_once = monotonic_second() - g_first_second <= 1;
    if (signo == SIGUSR1 || (at_once && (signo == g_stop_signal || g_stop_signal == SIGUSR1))) return;
    // Second signal: no more waiting. Restore the default action and deliver it again, so the
    // exit status says which signal ended the process.
    static const char msg[] = "cnnscale: second stop signal: aborting now\n";
    ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)ignored;
    if (g_cleanup_armed) {  // unlink and rmdir are async-signal-safe
      ::unlink(g_cleanup[0]);
      ::unlink(g_cleanup[1]);
      ::rmdir(g_cleanup[2]);
    }
    ::signal(signo, SIG_DFL);
    ::raise(signo);
    return;
  }
  g_first_second = monotonic_second();
  g_stop_signal = signo;
}

}  // namespace

void install_stop_signals() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
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
  return g_stop_signal;
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
