// `cnnscale --list-options`: every command's options, positionals and subcommands as one JSON
// object, read from the CLI11 definitions themselves. Hidden from --help: it is for tools that
// check text against the program (the docs test reads the command lines of the Markdown pages
// against it), so that no list of flags is kept by hand anywhere.
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "app/commands.hpp"

namespace cnnscale::app {

namespace {

// One command and, after it, each of its subcommands ("bench gemm"), depth first.
void list_command(const CLI::App& cmd, const std::string& path, nlohmann::json& out) {
  nlohmann::json options = nlohmann::json::array();
  nlohmann::json positionals = nlohmann::json::array();
  for (const CLI::Option* option : cmd.get_options()) {
    if (!option->nonpositional()) {
      positionals.push_back(option->get_name());
      continue;
    }
    nlohmann::json names = nlohmann::json::array();
    for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
    for (const std::string& name : option->get_snames()) names.push_back("-" + name);
    // A flag takes no value; an option takes at least one (the word after it).
    options.push_back({{"names", names}, {"value", option->get_items_expected_max() > 0}});
  }
  nlohmann::json subcommands = nlohmann::json::array();
  const auto all = cmd.get_subcommands([](const CLI::App*) { return true; });
  for (const CLI::App* sub : all) subcommands.push_back(sub->get_name());
  out.push_back({{"command", path}, {"options", options}, {"positionals", positionals}, {"subcommands", subcommands}});
  for (const CLI::App* sub : all)
    list_command(*sub, path.empty() ? sub->get_name() : path + " " + sub->get_name(), out);
}

}  // namespace

void add_options_listing(CLI::App& app) {
  const CLI::App* root = &app;
  app.add_flag_callback(
         "--list-options",
         [root] {
           nlohmann::json commands = nlohmann::json::array();
           list_command(*root, "", commands);
           std::cout << nlohmann::json{{"commands", commands}}.dump(1) << "\n";
           throw CLI::Success();
         },
         "Print every command's options as JSON")
      ->group("");  // hidden
}

}  // namespace cnnscale::app
