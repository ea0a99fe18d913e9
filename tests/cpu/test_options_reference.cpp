// The docs pages' "All options" blocks against the program: each block between
// `<!-- options: COMMAND -->` and `<!-- /options -->` is, character for character, what
// `cnnscale --options-reference COMMAND` prints from the CLI11 definitions (every option of the
// command and of its subcommands, grouped as --help groups them, with value, default and help); and
// every command and subcommand of the program has a block on some page. An option added, removed
// or changed without regenerating the block fails here, naming the command that regenerates it.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "common/doc_commands.hpp"
#include "common/doc_pages.hpp"
#include "experiment/train_settings.hpp"

namespace cnnscale::testing {
namespace {

namespace dc = doc_commands;

const std::string kOpen = "<!-- options: ";
const std::string kClose = "<!-- /options -->";
const std::string kRegenerate = "python3 scripts/update_options_reference.py";

// One generated block of a page: the command it is of and its text between the marker lines
// (blank lines at either end left out).
struct Block {
  std::string page;
  int line = 0;  // of the opening marker
  std::string command;
  std::string text;
};

std::string trim_blank_lines(const std::string& text) {
  const size_t first = text.find_first_not_of('\n');
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of('\n') - first + 1);
}

// The blocks of a page; a block left open is one whose text runs to the end of the page (and then
// differs from the program's).
std::vector<Block> blocks_of(const std::string& page, const std::string& markdown) {
  std::vector<Block> blocks;
  std::istringstream in(markdown);
  Block* open = nullptr;
  std::string text;
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (line.rfind(kOpen, 0) == 0 && line.size() > kOpen.size() + 4 && line.ends_with(" -->")) {
      blocks.push_back({page, number, line.substr(kOpen.size(), line.size() - kOpen.size() - 4), ""});
      open = &blocks.back();
      text.clear();
    } else if (open != nullptr && line == kClose) {
      open->text = trim_blank_lines(text);
      open = nullptr;
    } else if (open != nullptr) {
      text += line + "\n";
    }
  }
  if (open != nullptr) open->text = trim_blank_lines(text);
  return blocks;
}

std::vector<Block> page_blocks() {
  std::vector<Block> all;
  for (const std::string& page : user_pages())
    for (Block& b : blocks_of(page, repo_text(page))) all.push_back(std::move(b));
  return all;
}

std::string options_reference(const std::string& command) {
  const CliResult r = run_cnnscale({"--options-reference", command});
  EXPECT_EQ(r.exit_code, 0) << command << ": " << r.err;
  return r.out;
}

// What is wrong with a block whose command prints `program`: "" when it is the program's own.
std::string block_problem(const Block& b, const std::string& program) {
  const std::string diff =
      first_differing_line(b.text, trim_blank_lines(program), "of the block", "cnnscale --options-reference");
  if (diff.empty()) return "";
  return b.page + ":" + std::to_string(b.line) + ": the `" + b.command + "` block is not what `cnnscale " +
         "--options-reference " + b.command + "` prints, from " + diff + "\nregenerate it: " + kRegenerate +
         " (or put that command's output between the marker lines)\n";
}

// The commands and subcommands of `cli` ("train", "bench gemm") that no block covers: a block of a
// command covers it and its subcommands. The program itself ("": --version, --help) has none.
std::vector<std::string> commands_without_block(const dc::Cli& cli, const std::vector<Block>& blocks) {
  std::vector<std::string> missing;
  for (const auto& [path, spec] : cli) {
    if (path.empty()) continue;
    bool covered = false;
    for (const Block& b : blocks) covered = covered || path == b.command || path.rfind(b.command + " ", 0) == 0;
    if (!covered) missing.push_back(path);
  }
  return missing;
}

dc::Cli program_cli() {
  const CliResult r = run_cnnscale({"--list-options"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return dc::parse_listing(r.out);
}

TEST(OptionsReference, EveryBlockIsWhatTheProgramPrints) {
  const std::vector<Block> blocks = page_blocks();
  ASSERT_GE(blocks.size(), 9u);  // train, sweep, report, infer, calibrate, bench, data, time, netinfo
  std::string problems;
  for (const Block& b : blocks) problems += block_problem(b, options_reference(b.command));
  EXPECT_EQ(problems, "");
}

TEST(OptionsReference, EveryCommandAndSubcommandHasABlock) {
  const std::vector<std::string> missing = commands_without_block(program_cli(), page_blocks());
  std::string names;
  for (const std::string& m : missing) names += " '" + m + "'";
  EXPECT_TRUE(missing.empty()) << "no docs page has an options block (" << kOpen << "COMMAND -->) for:" << names
                               << "; add one to the command's page and run " << kRegenerate;
}

// Were an option added to train or removed from it without regenerating, docs/train.md's block
// would fail, naming the line and the command that regenerates it; so would a new subcommand
// without a block.
TEST(OptionsReference, AnOptionAddedOrRemovedWithoutRegeneratingFails) {
  std::vector<Block> train;
  for (const Block& b : page_blocks())
    if (b.command == "train") train.push_back(b);
  ASSERT_EQ(train.size(), 1u);
  const std::string program = options_reference("train");
  ASSERT_EQ(block_problem(train[0], program), "");

  const std::regex lr_item("- `--lr` [^\n]*\n");
  const std::string removed = std::regex_replace(program, lr_item, "");
  ASSERT_NE(removed, program);
  const std::string added = std::regex_replace(program, lr_item, "$&- `--lr-new` `FLOAT`: a new option\n");
  for (const std::string& changed : {removed, added}) {
    const std::string problem = block_problem(train[0], changed);
    EXPECT_NE(problem.find("docs/train.md:"), std::string::npos) << problem;
    EXPECT_NE(problem.find("the `train` block is not what `cnnscale --options-reference train` prints"),
              std::string::npos)
        << problem;
    EXPECT_NE(problem.find("regenerate it: " + kRegenerate), std::string::npos) << problem;
  }
  EXPECT_NE(block_problem(train[0], added).find("  cnnscale --options-reference: - `--lr-new` `FLOAT`: a new option"),
            std::string::npos);

  dc::Cli cli = program_cli();
  cli["bench frobnicate"] = {};
  cli["frobnicate"] = {};
  EXPECT_EQ(commands_without_block(cli, page_blocks()), (std::vector<std::string>{"frobnicate"}))
      << "a subcommand of a command with a block is covered by that block (and then fails it)";
}

// The block lists every option of the command, each once, under the spellings the program accepts.
TEST(OptionsReference, BlockListsEveryOptionOfEveryCommandOnce) {
  const dc::Cli cli = program_cli();
  for (const char* command : {"train", "bench"}) {
    const std::string text = options_reference(command);
    std::map<std::string, std::multiset<std::string>> listed;  // "bench gemm" -> "--device", ...
    std::string path;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("### `cnnscale ", 0) == 0) path = line.substr(14, line.size() - 15);
      static const std::regex head("^- ((`-[^`]+`, )*`-[^`]+`)"), name("`(-[^`]+)`");
      std::smatch item;
      if (!std::regex_search(line, item, head)) continue;  // a positional's, or no item
      const std::string names = item[1];
      for (std::sregex_iterator m(names.begin(), names.end(), name), end; m != end; ++m) listed[path].insert((*m)[1]);
    }
    for (const auto& [p, spec] : cli) {
      if (p != command && p.rfind(std::string(command) + " ", 0) != 0) continue;
      std::multiset<std::string> expected;
      for (const auto& [option, value] : spec.options)
        if (option != "-h" && option != "--help") expected.insert(option);
      EXPECT_EQ(listed[p], expected) << p;
    }
  }
}

// train's options are grouped by purpose: every entry of its settings table names a group, and
// --help and the block show the groups in this order, nothing left under CLI11's plain "Options".
TEST(OptionsReference, TrainOptionsAreGroupedByPurpose) {
  for (const Setting& s : train_settings()) EXPECT_FALSE(s.group.empty()) << s.name << " has no --help group";
  const std::vector<std::string> groups = {option_group::kNetworkSolver, option_group::kEpochsData,
                                           option_group::kDeviceStep,    option_group::kMeasurement,
                                           option_group::kCheckpoints,   option_group::kDataParallel,
                                           option_group::kResults};
  const std::string help = run_cnnscale({"train", "--help"}).out;
  const std::string block = options_reference("train");
  size_t in_help = 0, in_block = 0;
  for (const std::string& g : groups) {
    const size_t h = help.find("\n" + g + ":\n"), b = block.find("\n#### " + g + "\n");
    ASSERT_NE(h, std::string::npos) << g << "\n" << help;
    ASSERT_NE(b, std::string::npos) << g;
    EXPECT_GT(h, in_help) << g << " out of order in --help";
    EXPECT_GT(b, in_block) << g << " out of order in the block";
    in_help = h;
    in_block = b;
  }
  EXPECT_EQ(block.find("#### Options"), std::string::npos) << "an option of train is in no group";
}

TEST(OptionsReference, NamesACommandAndIsHidden) {
  expect_usage_error({"--options-reference", "frobnicate"}, {"--options-reference", "no command 'frobnicate'"});
  const std::string gemm = options_reference("bench gemm");
  EXPECT_EQ(gemm.rfind("### `cnnscale bench gemm`\n", 0), 0u) << gemm;
  EXPECT_NE(gemm.find("\n- `-q`, `--quiet`: no progress lines on stderr\n"), std::string::npos) << gemm;
  EXPECT_NE(options_reference("train").find("- `--precision` one of `fp32`, `tf32`, `bf16`, `fp16`, default `fp32`: "),
            std::string::npos);
  EXPECT_EQ(run_cnnscale({"--help"}).out.find("--options-reference"), std::string::npos);
}

}  // namespace
}  // namespace cnnscale::testing
