// Graceful stop on SIGTERM, SIGUSR1 and SIGINT (Slurm's --signal, PBS pre-emption, Ctrl-C): the
// first signal only records itself, and the training loop stops at the next step boundary,
// writes a checkpoint and results marked interrupted, and exits with kExitRequeue. A second
// signal ends the process at once (default action), for a user who does not want to wait; the same
// signal repeated within a second is the first one delivered twice (timeout(1) sends it to its child
// and to the child's process group) and is ignored. SIGUSR1 (Slurm's --signal, a batch system's
// early warning) asks for the graceful stop only, never for the abort: it may come beside the
// scheduler's SIGTERM, which reaches every process of a job. A SIGUSR1 after a stop is ignored, and
// so is any signal within a second after a SIGUSR1.
#pragma once

namespace cnnscale {

// Exit code of a run stopped by a signal after saving its state: EX_TEMPFAIL of sysexits.h
// ("temporary failure; the user is invited to retry"). launch/slurm.sbatch requeues on it.
inline constexpr int kExitRequeue = 75;

// Installs the handlers (idempotent). Async-signal-safe: the handler stores the signal number.
void install_stop_signals();
// The first stop signal received since install (0: none).
int stop_signal();
// "SIGTERM", "SIGUSR1", "SIGINT" or "signal N".
const char* stop_signal_name(int signo);

// What the abort of a second stop signal removes before the process ends: two files (unlink) and
// then their folder (rmdir, which leaves a folder that holds anything else). A running train's
// progress file, its temporary name and its partial folder: a user's abort leaves no folder behind,
// as before the progress file existed (a SIGKILL still may). Paths longer than 4095 bytes are not
// taken. clear_abort_cleanup() forgets them. Not for concurrent use by several threads.
void set_abort_cleanup(const char* file, const char* temp_file, const char* folder);
void clear_abort_cleanup();

}  // namespace cnnscale
