// `cnnscale --options-reference COMMAND`: the "All options" block of a command's docs page, read
// from the CLI11 definitions themselves (options_reference.hpp). Hidden from --help, as
// --list-options is: it is for the docs, whose blocks a test holds equal to it
// (tests/cpu/test_options_reference.cpp), so that no list of options is kept by hand.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "core/error.hpp"

namespace cnnscale::app {

namespace {

// Text as Markdown prose shows it: `<` (which would open an HTML tag: DIR/<experiment>) and `*`
// escaped, except inside code spans, which show every character as it is.
std::string prose(const std::string& text) {
  std::string out;
  bool code = false;
  for (char c : text) {
    if (c == '`') code = !code;
    if (!code && (c == '<' || c == '*')) out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out;
}

// "`-b`, `--minbytes`": every spelling, short ones first (as --help lists them).
std::string names_of(const CLI::Option& option) {
  std::vector<std::string> names;
  for (const std::string& n : option.get_snames()) names.push_back("`-" + n + "`");
  for (const std::string& n : option.get_lnames()) names.push_back("`--" + n + "`");
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// The value an option takes: "one of `a`, `b`" for a choice, else its type as --help names it
// (`INT`, `FLOAT`, `TEXT`), without the range checks --help appends to it (`INT:INT in [1 - 16]`),
// which a table entry's help text states already; "" for a flag.
std::string value_of(const CLI::Option& option) {
  if (option.get_items_expected_max() == 0) return "";
  const std::string type = option.get_type_name();
  const size_t open = type.find(":{");
  if (open != std::string::npos && type.back() == '}') {
    std::string out = "one of ";
    std::istringstream choices(type.substr(open + 2, type.size() - open - 3));
    int n = 0;
    for (std::string c; std::getline(choices, c, ',');) out += (n++ ? ", `" : "`") + c + "`";
    return out;
  }
  return "`" + type.substr(0, type.find(':')) + "`";
}

std::string option_names(const std::set<CLI::Option*>& options) {
  std::vector<std::string> names;
  for (const CLI::Option* o : options) names.push_back(o->get_name());
  std::sort(names.begin(), names.end());
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "`" : "`, `") + n;
  return out + "`";
}

// One list item: the names, what the value is and how it is given, then the help text.
std::string option_item(const CLI::Option& option, const std::string& names) {
  std::vector<std::string> parts;
  if (const std::string value = value_of(option); !value.empty()) parts.push_back(value);
  if (option.get_required()) parts.push_back("required");
  if (option.get_expected_max() > 1 && option.get_items_expected_max() > 0)
    parts.push_back(option.get_delimiter() == ',' ? "comma-separated" : "repeatable");
  if (!option.get_default_str().empty()) parts.push_back("default `" + option.get_default_str() + "`");
  if (!option.get_needs().empty()) parts.push_back("needs " + option_names(option.get_needs()));
  if (!option.get_excludes().empty()) parts.push_back("excludes " + option_names(option.get_excludes()));
  std::string head = names;
  if (!parts.empty()) {
    head += " ";
    for (size_t i = 0; i < parts.size(); ++i) head += (i ? ", " : "") + parts[i];
  }
  return fmt::format("- {}: {}\n", head, prose(option.get_description()));
}

bool listed(const CLI::App& cmd, const CLI::Option* option) {
  return option != cmd.get_help_ptr() && option != cmd.get_help_all_ptr() && !option->get_group().empty();
}

// One command's section, then each of its subcommands', depth first.
void command_reference(const CLI::App& cmd, const std::string& path, std::string& out) {
  std::string description = cmd.get_description();
  if (!description.empty() && description.back() != '.') description += '.';
  out += fmt::format("### `cnnscale {}`\n\n{}\n\n", path, prose(description));
  const auto subcommands = cmd.get_subcommands([](const CLI::App*) { return true; });
  if (!subcommands.empty()) {
    std::string names;
    for (const CLI::App* sub : subcommands) names += (names.empty() ? "`" : "`, `") + sub->get_name();
    out += fmt::format("Subcommands: {}`.\n\n", names);
  }
  const auto positionals = cmd.get_options([](const CLI::Option* o) { return !o->nonpositional(); });
  if (!positionals.empty()) {
    out += "#### Arguments\n\n";
    for (const CLI::Option* o : positionals) out += option_item(*o, "`" + o->get_name() + "`");
    out += "\n";
  }
  for (const std::string& group : cmd.get_groups()) {
    const auto options = cmd.get_options([&](const CLI::Option* o) {
      return o->nonpositional() && o->get_group() == group && listed(cmd, o);
    });
    if (options.empty()) continue;
    out += fmt::format("#### {}\n\n", group);
    for (const CLI::Option* o : options) out += option_item(*o, names_of(*o));
    out += "\n";
  }
  for (const CLI::App* sub : subcommands) command_reference(*sub, path + " " + sub->get_name(), out);
}

}  // namespace

std::string options_reference(const CLI::App& root, const std::string& command) {
  const CLI::App* cmd = &root;
  std::string path;  // the words of `command`, one space apart
  std::istringstream words(command);
  for (std::string word; words >> word;) {
    path += (path.empty() ? "" : " ") + word;
    const CLI::App* sub = nullptr;
    for (const CLI::App* s : cmd->get_subcommands([](const CLI::App*) { return true; }))
      if (s->get_name() == word) sub = s;
    if (sub == nullptr) throw_config("--options-reference: no command '{}'", command);
    cmd = sub;
  }
  if (cmd == &root) throw_config("--options-reference: name a command (train, bench, bench gemm, ...)");
  std::string out;
  command_reference(*cmd, path, out);
  out.pop_back();  // the blank line after the last list: the block ends with its last item
  return out;
}

void add_options_reference(CLI::App& app) {
  const CLI::App* root = &app;
  app.add_option_function<std::string>(
         "--options-reference",
         [root](const std::string& command) {
           std::cout << options_reference(*root, command);
           throw CLI::Success();
         },
         "Print a command's options, grouped, as the Markdown of its docs page's \"All options\" block")
      ->group("");  // hidden
}

}  // namespace cnnscale::app
