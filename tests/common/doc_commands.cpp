// Command lines of Markdown pages, split as a shell splits them, checked against the program's
// options (doc_commands.hpp).
#include "doc_commands.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace cnnscale::testing::doc_commands {

namespace {

// Text with the Markdown line of each of its characters.
struct Source {
  std::string text;
  std::vector<int> line;
  void add(const std::string& s, int at) {
    text += s;
    line.insert(line.end(), s.size(), at);
  }
};

// The simple commands of a shell command line: words, quotes removed, comments and redirections
// dropped, cut at `&&`, `||`, `;`, `|` and `&`.
std::vector<std::vector<Word>> split_commands(const Source& src) {
  const std::string& s = src.text;
  std::vector<std::vector<Word>> commands(1);
  Word word;
  bool in_word = false;
  const auto finish_word = [&] {
    if (in_word) commands.back().push_back(word);
    word = Word{};
    in_word = false;
  };
  const auto start_word = [&](size_t i) {
    if (!in_word) word.line = src.line[i];
    in_word = true;
  };
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      finish_word();
    } else if (c == '#' && !in_word) {
      break;  // a comment, to the end of the line
    } else if (c == '\'' || c == '"') {
      start_word(i);
      word.quoted = true;
      for (++i; i < s.size() && s[i] != c; ++i) {
        if (c == '"' && s[i] == '\\' && i + 1 < s.size()) ++i;
        word.text += s[i];
      }
    } else if (c == '\\') {
      start_word(i);
      if (i + 1 < s.size()) word.text += s[++i];
    } else if (c == '&' || c == '|' || c == ';') {
      finish_word();
      while (i + 1 < s.size() && (s[i + 1] == '&' || s[i + 1] == '|')) ++i;
      if (!commands.back().empty()) commands.emplace_back();
    } else if (c == '<' && !in_word && i + 1 < s.size() && std::isalpha(static_cast<unsigned char>(s[i + 1]))) {
      // A placeholder such as <file> or <cnnscale arguments>: one word, to its '>'.
      start_word(i);
      for (; i < s.size() && s[i] != '>'; ++i) word.text += s[i];
      word.text += '>';
    } else if (c == '<' || c == '>') {
      // A redirection (`> out`, `2>&1`, `< in`): the operator, a file descriptor before it and
      // the word after it are no arguments.
      if (in_word && std::all_of(word.text.begin(), word.text.end(), [](char d) { return std::isdigit(d); })) {
        word = Word{};
        in_word = false;
      }
      finish_word();
      while (i + 1 < s.size() && (s[i + 1] == '>' || s[i + 1] == '&')) ++i;
      while (i + 1 < s.size() && std::isspace(static_cast<unsigned char>(s[i + 1]))) ++i;
      while (i + 1 < s.size() && !std::isspace(static_cast<unsigned char>(s[i + 1]))) ++i;
    } else {
      start_word(i);
      word.text += c;
    }
  }
  finish_word();
  if (commands.back().empty()) commands.pop_back();
  return commands;
}

bool is_program(const std::string& w) {
  return w == "cnnscale" || (w.size() > 9 && w.compare(w.size() - 9, 9, "/cnnscale") == 0);
}

// Words before a command that leave it the command: a prompt, shell keywords and prefixes, and launchers
// whose own arguments come before the program.
bool is_prefix(const std::string& w) {
  static const std::set<std::string> prefixes = {"$",    "do",    "then",    "else", "time",
                                                 "exec", "nohup", "command", "sudo", "!"};
  return prefixes.count(w) > 0;
}
bool is_launcher(const std::string& w) {
  static const std::set<std::string> launchers = {"mpirun",  "mpiexec", "srun", "env",    "timeout", "numactl",
                                                  "taskset", "nsys",    "ncu",  "sbatch", "qsub"};
  const std::string base = w.substr(w.rfind('/') == std::string::npos ? 0 : w.rfind('/') + 1);
  return launchers.count(base) > 0;
}
bool is_assignment(const std::string& w) {
  const size_t eq = w.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  return std::all_of(w.begin(), w.begin() + static_cast<long>(eq),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }) &&
         !std::isdigit(static_cast<unsigned char>(w[0]));
}
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Where the program's arguments start among a simple command's words; npos where it does not run
// cnnscale. The scripts of launch/ take them too: `launch/mpirun.sh N ARGS`, `launch/slurm.sbatch ARGS`.
size_t program_arguments(const std::vector<Word>& words) {
  size_t k = 0;
  while (k < words.size() && !words[k].quoted && (is_assignment(words[k].text) || is_prefix(words[k].text))) ++k;
  const bool launched = k < words.size() && is_launcher(words[k].text);
  for (; k < words.size(); ++k) {
    const std::string& w = words[k].text;
    if (is_program(w)) return k + 1;
    if (ends_with(w, "launch/mpirun.sh")) return k + 2;
    if (ends_with(w, "launch/slurm.sbatch")) return k + 1;
    if (!launched) break;
  }
  return std::string::npos;
}

void add_invocation(const std::string& file, int line, std::vector<Word> args, std::vector<Invocation>& out) {
  if (args.empty()) return;  // the program's name alone, as prose names it
  Invocation inv{file, line, "cnnscale", std::move(args)};
  for (const Word& w : inv.args) inv.text += " " + w.text;
  out.push_back(std::move(inv));
}

// The invocations of cnnscale in one shell command line.
void add_invocations(const std::string& file, int line, const Source& src, std::vector<Invocation>& out) {
  static const std::string args_variable = "CNNSCALE_ARGS=";  // launch/pbs.sh's arguments (qsub -v)
  for (const auto& words : split_commands(src)) {
    if (const size_t k = program_arguments(words); k < words.size())
      add_invocation(file, line, {words.begin() + static_cast<long>(k), words.end()}, out);
    for (const Word& w : words) {
      if (w.text.rfind(args_variable, 0) != 0) continue;
      Source value;
      value.add(w.text.substr(args_variable.size()), w.line);
      for (const auto& args : split_commands(value)) add_invocation(file, line, args, out);
    }
  }
}

std::string trim_right(const std::string& s) {
  size_t end = s.size();
  while (end > 0 && std::isspace(static_cast<unsigned char>(s[end - 1]))) --end;
  return s.substr(0, end);
}

// The fence that opens or closes a code block on this line (```` ``` ```` or `~~~`, indented by up
// to three spaces, or more inside a list), and the block's language; empty when none.
std::string fence_of(const std::string& line, std::string& language) {
  size_t i = line.find_first_not_of(' ');
  if (i == std::string::npos || (line[i] != '`' && line[i] != '~')) return {};
  const size_t end = line.find_first_not_of(line[i], i);
  const std::string fence = line.substr(i, (end == std::string::npos ? line.size() : end) - i);
  if (fence.size() < 3) return {};
  std::istringstream rest(end == std::string::npos ? "" : line.substr(end));
  rest >> language;
  return fence;
}

bool shell_language(const std::string& language) {
  static const std::set<std::string> shells = {"", "sh", "bash", "shell", "console", "zsh"};
  return shells.count(language) > 0;
}

}  // namespace

std::vector<Invocation> extract(const std::string& file, const std::string& markdown) {
  std::vector<Invocation> out;
  std::istringstream in(markdown);
  std::string fence;   // of the open code block; empty outside one
  bool shell = false;  // the open block's language is a shell's (or none)
  Source command;      // a fenced command line being continued with `\`
  int command_line = 0;
  Source span;  // an inline code span not yet closed (spans may run over a line break)
  size_t span_ticks = 0;
  int span_line = 0;
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::string language;
    const std::string f = fence_of(line, language);
    if (!fence.empty()) {
      if (!f.empty() && f[0] == fence[0] && f.size() >= fence.size() && language.empty()) {
        fence.clear();
        if (!command.text.empty()) add_invocations(file, command_line, command, out);
        command = Source{};
        continue;
      }
      if (!shell) continue;
      const std::string text = trim_right(line);
      if (command.text.empty()) command_line = number;
      if (!text.empty() && text.back() == '\\') {
        command.add(text.substr(0, text.size() - 1) + " ", number);
        continue;
      }
      command.add(text, number);
      add_invocations(file, command_line, command, out);
      command = Source{};
      continue;
    }
    if (!f.empty()) {
      fence = f;
      shell = shell_language(language);
      span_ticks = 0;
      continue;
    }
    if (trim_right(line).empty()) {  // a paragraph ends: an unclosed backtick was a literal one
      span_ticks = 0;
      continue;
    }
    for (size_t i = 0; i < line.size(); ++i) {
      if (line[i] == '\\' && span_ticks == 0) {
        ++i;  // an escaped character, a backtick too, opens nothing
        continue;
      }
      if (line[i] != '`') {
        if (span_ticks > 0) span.add(std::string(1, line[i]), number);
        continue;
      }
      size_t run = 1;
      while (i + run < line.size() && line[i + run] == '`') ++run;
      if (span_ticks == 0) {
        span_ticks = run;
        span = Source{};
        span_line = number;
      } else if (run == span_ticks) {
        span_ticks = 0;
        add_invocations(file, span_line, span, out);
      } else {
        span.add(std::string(run, '`'), number);
      }
      i += run - 1;
    }
    if (span_ticks > 0) span.add(" ", number);
  }
  return out;
}

Cli parse_listing(const std::string& json) {
  Cli cli;
  const nlohmann::json listing = nlohmann::json::parse(json);
  for (const auto& c : listing.at("commands")) {
    CommandSpec& spec = cli[c.at("command").get<std::string>()];
    for (const auto& o : c.at("options"))
      for (const auto& name : o.at("names")) spec.options[name.get<std::string>()] = o.at("value").get<bool>();
    spec.positionals = c.at("positionals").get<std::vector<std::string>>();
    spec.subcommands = c.at("subcommands").get<std::vector<std::string>>();
  }
  return cli;
}

bool is_placeholder(const Word& word) {
  if (word.quoted) return false;
  const std::string& w = word.text;
  if (w.empty() || w[0] == '<' || w[0] == '$' || w[0] == '{' || w[0] == '[') return true;
  if (w.find("...") != std::string::npos || w.find("\u2026") != std::string::npos) return true;
  // A name in capitals (FILE, RESULTS_DIR, ROOT/): no file, network or subcommand is one.
  const std::string name = w.substr(0, w.find_last_not_of("/.,:") + 1);
  return !name.empty() && std::isupper(static_cast<unsigned char>(name[0])) &&
         std::all_of(name.begin(), name.end(), [](char c) { return std::isupper(c) || std::isdigit(c) || c == '_'; });
}

namespace {

// A word the program reads as an option: `--name`, `--name=value`, `-x`, `-xVALUE`; not `-`, `--`
// or a negative number.
bool is_flag(const std::string& w) {
  if (w.size() < 2 || w[0] != '-' || w == "--") return false;
  return !(std::isdigit(static_cast<unsigned char>(w[1])) || w[1] == '.');
}

// The option's name, and whether its value is in the same word.
std::string flag_name(const std::string& w, bool& inline_value) {
  if (w[1] == '-') {
    const size_t eq = w.find('=');
    inline_value = eq != std::string::npos;
    return w.substr(0, eq);
  }
  inline_value = w.size() > 2;
  return w.substr(0, 2);
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

Checked check(const Cli& cli, const Invocation& inv) {
  Checked result;
  const CommandSpec* spec = &cli.at("");
  bool options_ended = false;    // after `--`, every word is a positional
  bool positional_seen = false;  // of the current (sub)command: no subcommand can follow it
  const auto problem = [&](int line, const std::string& what) {
    result.problems.push_back(fmt::format("{}:{}: `{}`: {}", inv.file, line, inv.text, what));
  };
  const auto name = [&] { return result.path.empty() ? std::string("cnnscale") : "cnnscale " + result.path; };
  for (size_t k = 0; k < inv.args.size(); ++k) {
    Word w = inv.args[k];
    if (!w.quoted && w.text.rfind("[-", 0) == 0) {  // an optional option, as a synopsis writes it: [--json]
      w.text = w.text.substr(1, w.text.find_last_not_of(']'));
      result.exact = false;
    }
    if (is_placeholder(w)) result.exact = false;
    if (!options_ended && w.text == "--") {
      options_ended = true;
    } else if (!options_ended && is_flag(w.text)) {
      bool inline_value = false;
      const std::string flag = flag_name(w.text, inline_value);
      const auto it = spec->options.find(flag);
      if (it == spec->options.end()) {
        problem(w.line, fmt::format("{} has no option {}", name(), flag));
      } else if (it->second && !inline_value && k + 1 < inv.args.size() && !is_flag(inv.args[k + 1].text)) {
        if (is_placeholder(inv.args[++k])) result.exact = false;
      }
    } else if (!positional_seen && !spec->subcommands.empty()) {
      if (is_placeholder(w)) {
        result.complete = false;
        return result;
      }
      if (std::find(spec->subcommands.begin(), spec->subcommands.end(), w.text) != spec->subcommands.end()) {
        result.path = result.path.empty() ? w.text : result.path + " " + w.text;
        spec = &cli.at(result.path);
      } else if (spec->positionals.empty()) {
        problem(w.line, fmt::format("{} has no subcommand '{}' (it has: {})", name(), w.text, join(spec->subcommands)));
        result.complete = false;
        return result;
      } else {
        positional_seen = true;
      }
    } else {
      positional_seen = true;
    }
  }
  return result;
}

}  // namespace cnnscale::testing::doc_commands
