// The options that say where a command's results go (--results, --experiment, --run-id,
// --no-results), declared once for every command that saves a result: each command says what it
// saves where, the rest reads the same everywhere.
#pragma once
#include <string>

namespace CLI {
class App;
}

namespace cnnscale::app {

// A batch script or a test harness moves (or, for the commands that save only when given a root,
// turns on) every run's results without editing command lines: $CNNSCALE_RESULTS, when set and not
// empty, becomes `root`. Call it after the option's default is captured, so that --help and the
// docs show the same default whatever the environment.
void take_results_root_from_environment(std::string& root);

// --experiment NAME (the results subfolder), its default the field's value.
void add_experiment_option(CLI::App& cmd, std::string& experiment);

// The fields the options write, and the help that differs by command.
struct ResultsOptions {
  std::string& root;
  std::string& experiment;
  bool& no_results;
  std::string results_help;       // what --results saves, where, and the default
  std::string* run_id = nullptr;  // with it, --run-id NAME between --experiment and --no-results
  std::string run_id_help = {};
  std::string no_results_help = "save nothing, even with $CNNSCALE_RESULTS set";
};

// The results options, in group "Results and output", of a command that saves only where a root is
// given (--results or $CNNSCALE_RESULTS): --no-results and --results exclude each other.
void add_results_options(CLI::App& cmd, const ResultsOptions& o);

}  // namespace cnnscale::app
