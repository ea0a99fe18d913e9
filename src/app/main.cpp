// The cnnscale executable: a CLI11 app whose subcommands register themselves (commands.hpp).
// The only place where errors become messages and exit codes: cnnscale::Error -> its kind's code
// (1 runtime, 2 usage/config, 3 peer), CLI11 parse errors -> 2, anything else -> 1.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>

#include "app/commands.hpp"
#include "core/error.hpp"

namespace {

// One line on stderr, whatever the message contains.
void print_error(const std::string& message) {
  std::string line = message;
  for (char& c : line)
    if (c == '\n' || c == '\r') c = ' ';
  std::fprintf(stderr, "cnnscale: error: %s\n", line.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cnnscale: multi-GPU CNN training studies (time, energy and accuracy per rank and phase)", "cnnscale"};
  app.set_version_flag("--version", std::string("cnnscale ") + CNNSCALE_VERSION);
  app.require_subcommand(1);
  // CLI11's default adds a second "Run with --help" line; keep errors to one line.
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return std::string("cnnscale: error: ") + e.what() + " (see --help)\n";
  });
  cnnscale::app::register_train(app);
  cnnscale::app::register_netinfo(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version arrive here too, with exit code 0.
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  } catch (const cnnscale::Error& e) {
    print_error(e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    print_error(e.what());
    return 1;
  }
  return 0;
}
