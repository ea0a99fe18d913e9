// The results options (results_options.hpp).
#include "app/results_options.hpp"

#include <CLI/CLI.hpp>
#include <cstdlib>

#include "experiment/option_groups.hpp"

namespace cnnscale::app {

void take_results_root_from_environment(std::string& root) {
  if (const char* env = std::getenv("CNNSCALE_RESULTS"); env && *env) root = env;
}

void add_experiment_option(CLI::App& cmd, std::string& experiment) {
  cmd.add_option("--experiment", experiment, "experiment name (the results subfolder)")
      ->capture_default_str()
      ->group(option_group::kResults);
}

void add_results_options(CLI::App& cmd, const ResultsOptions& o) {
  using option_group::kResults;
  CLI::Option* results = cmd.add_option("--results", o.root, o.results_help)->group(kResults);
  take_results_root_from_environment(o.root);
  add_experiment_option(cmd, o.experiment);
  if (o.run_id) cmd.add_option("--run-id", *o.run_id, o.run_id_help)->group(kResults);
  cmd.add_flag("--no-results", o.no_results, o.no_results_help)->excludes(results)->group(kResults);
}

}  // namespace cnnscale::app
