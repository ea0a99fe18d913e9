// The docs run: every `cnnscale ...` command line of the Markdown pages users read names a
// subcommand that exists and only options of that subcommand, as the program itself lists them
// (`cnnscale --list-options`), and the cheap ones (sweep --dry-run, netinfo, --help) run. The
// checker itself is shown to report a made-up flag and subcommand with file and line.
#include <algorithm>
#include <filesystem>
#include <regex>
#include <set>
#include <sstream>

#include "cli_runner.hpp"
#include "common/doc_commands.hpp"
#include "common/doc_pages.hpp"

namespace cnnscale::testing {
namespace doc_commands_test {

namespace dc = doc_commands;
namespace fs = std::filesystem;

const dc::Cli& program_cli() {
  static const dc::Cli cli = [] {
    const CliResult r = run_cnnscale({"--list-options"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return dc::parse_listing(r.out);
  }();
  return cli;
}

std::vector<dc::Invocation> documented_commands() {
  std::vector<dc::Invocation> all;
  for (const auto& page : user_pages()) {
    auto found = dc::extract(page, repo_text(page));
    all.insert(all.end(), found.begin(), found.end());
  }
  return all;
}

// Every problem of the invocations against `cli`, one per line.
std::string problems_of(const dc::Cli& cli, const std::vector<dc::Invocation>& invocations) {
  std::string out;
  for (const auto& inv : invocations)
    for (const auto& p : dc::check(cli, inv).problems) out += p + "\n";
  return out;
}

std::vector<std::string> args_of(const dc::Invocation& inv) {
  std::vector<std::string> args;
  for (const auto& w : inv.args) args.push_back(w.text);
  return args;
}

// The subcommands of a command as a message lists them: "gemm, conv, ...".
std::string subcommands_of(const std::string& command) {
  std::string names;
  for (const auto& s : program_cli().at(command).subcommands) names += (names.empty() ? "" : ", ") + s;
  return names;
}

TEST(DocCommands, ListOptionsIsTheProgramsOwn) {
  const dc::Cli& cli = program_cli();
  ASSERT_TRUE(cli.count("train") && cli.count("sweep") && cli.count("bench gemm") && cli.count("data fashion-mnist"));
  EXPECT_TRUE(cli.at("train").options.at("--net"));    // takes a value
  EXPECT_FALSE(cli.at("train").options.at("--json"));  // a flag
  EXPECT_FALSE(cli.at("sweep").options.at("--dry-run"));
  EXPECT_EQ(cli.at("sweep").positionals.front(), "file");
  const auto& bench = cli.at("bench").subcommands;
  EXPECT_NE(std::find(bench.begin(), bench.end(), "allreduce"), bench.end());
  EXPECT_TRUE(cli.at("").options.count("--version"));
  // A tool's flag: not offered to users.
  EXPECT_EQ(run_cnnscale({"--help"}).out.find("--list-options"), std::string::npos);
}

TEST(DocCommands, ExtractsShellLinesAndInlineCodeAsTheShellSplitsThem) {
  const std::string page =
      "Prose naming `cnnscale` alone, or `cnnscale time`, and\n"                       // 1
      "a span over a line break: `cnnscale sweep f.yaml\n"                             // 2
      "--dry-run` ends here; `--precision bf16` is no command.\n"                      // 3
      "```sh\n"                                                                        // 4
      "OMP_NUM_THREADS=1 mpirun -np 4 -x A=1 build/bin/cnnscale train \\\n"            // 5
      "  --net lenet --only 'a=b|c' # a comment --not-read\n"                          // 6
      "cnnscale netinfo caffenet --json | head && cnnscale report r 2>&1 > out.txt\n"  // 7
      "$ cnnscale bench gemm --device cpu\n"                                           // 8
      "for n in 2 4; do launch/mpirun.sh $n bench allreduce -b 8; done\n"              // 9
      "qsub -v CNNSCALE_ARGS=\"infer --net lenet\" launch/pbs.sh\n"                    // 10
      "```\n"                                                                          // 11
      "```yaml\n"                                                                      // 12
      "cnnscale train --in-yaml-block\n"                                               // 13
      "```\n";                                                                         // 14
  const auto found = dc::extract("p.md", page);
  std::vector<std::string> lines;
  for (const auto& inv : found) lines.push_back(std::to_string(inv.line) + " " + inv.text);
  const std::vector<std::string> expected = {"1 cnnscale time",
                                             "2 cnnscale sweep f.yaml --dry-run",
                                             "5 cnnscale train --net lenet --only a=b|c",
                                             "7 cnnscale netinfo caffenet --json",
                                             "7 cnnscale report r",
                                             "8 cnnscale bench gemm --device cpu",
                                             "9 cnnscale bench allreduce -b 8",
                                             "10 cnnscale infer --net lenet"};
  EXPECT_EQ(lines, expected);
  ASSERT_EQ(found.size(), 8u);
  EXPECT_EQ(found[1].args[2].line, 3);  // --dry-run: on the span's second line
  EXPECT_EQ(found[2].args[1].line, 6);  // --net: on the continued line
}

// A flag or subcommand a page names that the program does not have is reported with the page's
// name and the line the word is on.
TEST(DocCommands, ReportsAMadeUpFlagAndSubcommandWithFileAndLine) {
  const std::string page =
      "# Guide\n"                                                          // 1
      "Train with `cnnscale train --net lenet --no-such-flag`.\n"          // 2
      "```sh\n"                                                            // 3
      "cnnscale sweep experiments/quickstart.yaml \\\n"                    // 4
      "  --dry-run --no-such-flag\n"                                       // 5
      "cnnscale frobnicate --json\n"                                       // 6
      "cnnscale bench no-such-bench --device cpu\n"                        // 7
      "mpirun -np 2 build/bin/cnnscale train --net lenet --batch 64 -h\n"  // 8
      "cnnscale data fashion-mnist --out x --no-such-flag=1\n"             // 9
      "```\n";
  const std::string problems = problems_of(program_cli(), dc::extract("guide.md", page));
  EXPECT_EQ(problems,
            "guide.md:2: `cnnscale train --net lenet --no-such-flag`: cnnscale train has no option --no-such-flag\n"
            "guide.md:5: `cnnscale sweep experiments/quickstart.yaml --dry-run --no-such-flag`: cnnscale sweep has no "
            "option --no-such-flag\n"
            "guide.md:6: `cnnscale frobnicate --json`: cnnscale has no subcommand 'frobnicate' (it has: " +
                subcommands_of("") +
                ")\n"
                "guide.md:7: `cnnscale bench no-such-bench --device cpu`: cnnscale bench has no subcommand "
                "'no-such-bench' (it has: " +
                subcommands_of("bench") +
                ")\n"
                "guide.md:9: `cnnscale data fashion-mnist --out x --no-such-flag=1`: cnnscale data fashion-mnist has "
                "no option --no-such-flag\n");
}

// Placeholders are no subcommands to check, and make a line one not to run as written.
TEST(DocCommands, PlaceholdersAreNotCheckedAsSubcommandsNorRun) {
  const auto found = dc::extract("p.md",
                                 "`cnnscale <command> --help`, `cnnscale sweep FILE --dry-run`, "
                                 "`mpirun -np 2 cnnscale train ... --batch 64`\n");
  ASSERT_EQ(found.size(), 3u);
  const dc::Checked command = dc::check(program_cli(), found[0]);
  EXPECT_FALSE(command.complete);
  EXPECT_TRUE(command.problems.empty());
  const dc::Checked sweep = dc::check(program_cli(), found[1]);
  EXPECT_TRUE(sweep.complete && sweep.problems.empty());
  EXPECT_FALSE(sweep.exact);
  const dc::Checked train = dc::check(program_cli(), found[2]);
  EXPECT_TRUE(train.problems.empty());
  EXPECT_FALSE(train.exact);
}

// Were a documented flag removed from the program, the docs test would fail on the lines naming
// it: the program's options less sweep's --dry-run, against the real pages.
TEST(DocCommands, AFlagRemovedFromTheProgramFailsThePagesNamingIt) {
  dc::Cli cli = program_cli();
  ASSERT_EQ(cli.at("sweep").options.erase("--dry-run"), 1u);
  const std::string problems = problems_of(cli, documented_commands());
  EXPECT_TRUE(
      std::regex_search(problems, std::regex("(^|\n)README.md:[0-9]+: `cnnscale sweep [^`\n]*--dry-run[^`\n]*`: "
                                             "cnnscale sweep has no option --dry-run\n")))
      << problems;
}

TEST(DocCommands, EveryDocumentedCommandNamesASubcommandAndOptionsThatExist) {
  const auto invocations = documented_commands();
  // Far more than this are documented: fewer means the pages are no longer read.
  EXPECT_GT(invocations.size(), 40u);
  const std::string problems = problems_of(program_cli(), invocations);
  EXPECT_TRUE(problems.empty()) << problems;
}

// A YAML file a command line names (an experiment, a network, inside an override too) that the
// source tree does not have: one the reader writes first (`cp networks/lenet.yaml mynet.yaml`).
bool names_a_readers_file(const std::vector<std::string>& args) {
  static const std::regex yaml_file("[A-Za-z0-9_./-]+\\.ya?ml");
  for (const auto& a : args)
    for (std::sregex_iterator m(a.begin(), a.end(), yaml_file), end; m != end; ++m)
      if (!fs::exists(fs::path(CNNSCALE_SOURCE_DIR) / m->str())) return true;
  return false;
}

// The cheap documented commands run as written (from the source tree, results in a temporary
// root): sweep --dry-run (the plan), netinfo of a network, --help and --version; not those of a
// file the reader makes first.
TEST(DocCommands, CheapDocumentedCommandsRun) {
  std::set<std::vector<std::string>> done;
  int ran = 0;
  for (const auto& inv : documented_commands()) {
    const dc::Checked c = dc::check(program_cli(), inv);
    if (!c.complete || !c.exact || !c.problems.empty()) continue;
    const auto args = args_of(inv);
    const auto has = [&](const char* flag) { return std::find(args.begin(), args.end(), flag) != args.end(); };
    const bool cheap = (c.path == "sweep" && has("--dry-run")) ||
                       (c.path == "netinfo" && args.size() > 1 && args[1][0] != '-') || has("--help") || has("-h") ||
                       has("--version");
    if (!cheap || names_a_readers_file(args) || !done.insert(args).second) continue;
    ++ran;
    const CliResult r = run_cnnscale(args);
    EXPECT_EQ(r.exit_code, 0) << inv.file << ":" << inv.line << ": `" << inv.text << "` exits " << r.exit_code << ": "
                              << (r.err_lines().empty() ? "" : r.err_lines().back());
  }
  EXPECT_GT(ran, 3);
}

}  // namespace doc_commands_test
}  // namespace cnnscale::testing
