// The `cnnscale ...` command lines of Markdown pages (fenced shell blocks and inline code), read
// as a shell would split them, and checked against the program's own options (the JSON of
// `cnnscale --list-options`): every subcommand must exist and every flag must be one of its
// options. The docs test (tests/cpu/test_doc_commands.cpp) runs this over the pages users read.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace cnnscale::testing::doc_commands {

// One word of a command line as the shell passes it (quotes removed), with the Markdown line it
// starts on (a line continued with `\` spans several).
struct Word {
  std::string text;
  int line = 0;
  bool quoted = false;  // written in quotes: never a placeholder
};

// One invocation of cnnscale: the words after the program (launcher and program left out).
struct Invocation {
  std::string file;
  int line = 0;      // where the command line starts
  std::string text;  // "cnnscale ARGS" (quotes removed, continuations joined), for messages
  std::vector<Word> args;
};

// Every invocation of cnnscale in `markdown` (named `file` in messages), in order: in fenced code
// blocks of shell or no language (one command line per line, `\` continuing it) and in inline
// code spans (which may run over a line break). `cnnscale`, `build/bin/cnnscale` and the like,
// after environment assignments, a prompt (`$`) or a launcher (`mpirun -np 4 ...`, `srun ...`,
// `env ...`); the arguments of launch/mpirun.sh and launch/slurm.sbatch, and the CNNSCALE_ARGS
// that launch/pbs.sh reads. Words after `#` are a comment; `&&`, `||`, `;` and `|` end a command;
// redirections are dropped.
std::vector<Invocation> extract(const std::string& file, const std::string& markdown);

// What a command accepts: option names (`--net`, `-b`) to whether they take a value, the names of
// its positionals, and its subcommands.
struct CommandSpec {
  std::map<std::string, bool> options;
  std::vector<std::string> positionals;
  std::vector<std::string> subcommands;
};
// By path: "" the program, "train", "bench gemm".
using Cli = std::map<std::string, CommandSpec>;

// The output of `cnnscale --list-options`.
Cli parse_listing(const std::string& json);

// A word standing for something the reader fills in: `<file>`, `FILE`, `$VAR`, `...`.
bool is_placeholder(const Word& word);

struct Checked {
  std::string path;                   // the (sub)command it reached: "sweep", "bench gemm"
  bool complete = true;               // false: a placeholder where the subcommand goes; not checked further
  bool exact = true;                  // no placeholder anywhere: the line can be run as written
  std::vector<std::string> problems;  // "FILE:LINE: `command`: what is wrong"
};

// Checks an invocation's subcommands and flags against the program's.
Checked check(const Cli& cli, const Invocation& invocation);

}  // namespace cnnscale::testing::doc_commands
