// The cnnscale executable: a CLI11 app whose subcommands register themselves (commands.hpp).
// The only place where errors become messages and exit codes: cnnscale::Error -> its kind's code
// (1 runtime, 2 usage/config, 3 peer), CLI11 parse errors -> 2, anything else -> 1.
// Under an MPI launcher it also owns MPI (MpiEnv): an error on any rank prints one line naming the
// rank and host and ends the whole job with MPI_Abort and that code, so no peer is left waiting.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <exception>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "app/commands.hpp"
#include "core/build_info.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/stop_signal.hpp"
#include "experiment/experiment_reader.hpp"
#include "io/provenance.hpp"
#include "io/requeue_record.hpp"
#include "parallel/mpi_env.hpp"

namespace {

// One line on stderr, whatever the message contains.
void print_error(const std::string& message) {
  std::string line = message;
  for (char& c : line)
    if (c == '\n' || c == '\r') c = ' ';
  const cnnscale::MpiEnv* mpi = cnnscale::MpiEnv::current();
  if (mpi && mpi->distributed())
    std::fprintf(stderr, "cnnscale: error: rank %d (host %s): %s\n", mpi->rank(), mpi->host().c_str(), line.c_str());
  else
    std::fprintf(stderr, "cnnscale: error: %s\n", line.c_str());
}

// A failed rank ends the job: its peers would otherwise wait in their next collective. A bad
// option fails on every rank at once, and the first MPI_Abort kills the others, possibly before
// they print: the other ranks give rank 0 a moment to abort first, so that its line is the one the
// user reads. A failure of one rank alone costs that moment once.
int fail(int code) {
  const cnnscale::MpiEnv* mpi = cnnscale::MpiEnv::current();
  if (mpi && mpi->initialized() && code != 0) {
    std::fflush(stderr);
    if (mpi->rank() != 0) std::this_thread::sleep_for(std::chrono::seconds(1));
    mpi->abort_job(code);
  }
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  // As given, before MPI_Init may take its own arguments out: results record it (io/provenance.hpp).
  cnnscale::record_command_line(argc, argv);
  std::unique_ptr<cnnscale::MpiEnv> mpi;
  try {
    mpi = std::make_unique<cnnscale::MpiEnv>(&argc, &argv);
  } catch (const cnnscale::Error& e) {
    print_error(e.what());
    return fail(e.exit_code());
  }
  if (mpi->distributed()) cnnscale::log::set_rank(mpi->rank());

  CLI::App app{"cnnscale: multi-GPU CNN training studies (time, energy and accuracy per rank and phase)", "cnnscale"};
  app.set_version_flag("--version", "cnnscale " + cnnscale::cnnscale_version_line());
  app.require_subcommand(1);
  // CLI11's default adds a second "Run with --help" line; keep errors to one line.
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return std::string("cnnscale: error: ") + e.what() + " (see --help)\n";
  });
  cnnscale::app::register_train(app);
  cnnscale::app::register_netinfo(app);
  cnnscale::app::register_bench(app);
  cnnscale::app::register_time(app);
  cnnscale::app::register_sweep(app);
  cnnscale::app::register_report(app);
  cnnscale::app::register_infer(app);
  cnnscale::app::register_calibrate(app);
  cnnscale::app::register_data(app);
  cnnscale::app::add_options_listing(app);
  cnnscale::app::add_options_reference(app);
  // An experiment's extra_args are checked against the options of the command each run starts,
  // taken from its CLI definition here (experiment/ cannot see app/).
  for (const char* command : {"train", "infer"}) {
    std::set<std::string> flags;
    for (const CLI::Option* option : app.get_subcommand(command)->get_options()) {
      for (const std::string& name : option->get_lnames()) flags.insert("--" + name);
      for (const std::string& name : option->get_snames()) flags.insert("-" + name);
    }
    cnnscale::set_command_flags(command, std::move(flags));
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version arrive here too, with exit code 0.
    int code = app.exit(e);
    return fail(code == 0 ? 0 : 2);
  } catch (const cnnscale::Error& e) {
    print_error(e.what());
    return fail(e.exit_code());
  } catch (const std::exception& e) {
    print_error(e.what());
    return fail(1);
  }
  const int code = cnnscale::app::requested_exit_code();
  // Stopped for requeue (every rank alike): rank 0 tells the launcher, before MPI_Finalize lets any
  // rank exit, because mpirun told to stop reports 1 whatever the ranks return.
  if (code == cnnscale::kExitRequeue && mpi->rank() == 0)
    if (const std::string warning = cnnscale::write_requeue_record(mpi->size(), mpi->host()); !warning.empty())
      std::fprintf(stderr, "cnnscale: warning: %s\n", warning.c_str());
  return code;
}
