// Signal handlers of the graceful stop (see stop_signal.hpp).
#include "core/stop_signal.hpp"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace cnnscale {

namespace {

volatile sig_atomic_t g_stop_signal = 0;
const int kStopSignals[] = {SIGTERM, SIGUSR1, SIGINT};

void on_stop_signal(int signo) {
  if (g_stop_signal != 0) {
    // Second signal: no more waiting. Restore the default action and deliver it again, so the
    // exit status says which signal ended the process.
    static const char msg[] = "cnnscale: second stop signal: aborting now\n";
    ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)ignored;
    ::signal(signo, SIG_DFL);
    ::raise(signo);
    return;
  }
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
