// Every setting of infer's, time's, calibrate's and each bench's table (experiment/
// command_settings.hpp) is an option of its command: found in that command's --help with its help
// text, and each table is well formed (one entry per name and per flag, defaults of the entry's type,
// a choice's default among its choices).
#include <gtest/gtest.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "cpu/cli_runner.hpp"
#include "experiment/command_settings.hpp"

namespace cnnscale::testing {
namespace {

struct Command {
  std::vector<std::string> words;  // the subcommand: {"bench", "gemm"}
  const std::vector<Setting>* table;
};

std::vector<Command> commands() {
  return {{{"infer"}, &infer_settings()},
          {{"time"}, &time_settings()},
          {{"calibrate"}, &calibrate_settings()},
          {{"bench", "allreduce"}, &allreduce_bench_settings()},
          {{"bench", "gemm"}, &kernel_bench_settings("gemm")},
          {{"bench", "conv"}, &kernel_bench_settings("conv")},
          {{"bench", "spmm"}, &kernel_bench_settings("spmm")},
          {{"bench", "rnn"}, &kernel_bench_settings("rnn")},
          {{"bench", "data"}, &data_bench_settings()}};
}

// The option's long name in an entry's flag ("-b,--minbytes": "--minbytes").
std::string long_flag(const Setting& s) {
  const size_t comma = s.flag.rfind(',');
  return comma == std::string::npos ? s.flag : s.flag.substr(comma + 1);
}

// CLI11 wraps nothing, so a help text's first words stand on the option's line as written.
TEST(CommandSettings, EveryEntryIsInItsCommandsHelp) {
  for (const Command& c : commands()) {
    std::vector<std::string> args = c.words;
    args.push_back("--help");
    const CliResult help = run_cnnscale(args);
    const std::string name = fmt::format("{}", fmt::join(c.words, " "));
    ASSERT_EQ(help.exit_code, 0) << name << ": " << help.err;
    for (const Setting& s : *c.table) {
      EXPECT_NE(help.out.find(long_flag(s)), std::string::npos) << name << ": " << s.flag;
      EXPECT_NE(help.out.find(s.help.substr(0, 30)), std::string::npos) << name << ": " << s.help;
    }
  }
}

TEST(CommandSettings, EachTableIsWellFormed) {
  for (const Command& c : commands()) {
    std::set<std::string> names, flags;
    for (const Setting& s : *c.table) {
      const std::string where = fmt::format("{} {}", fmt::join(c.words, " "), s.name);
      EXPECT_TRUE(names.insert(s.name).second) << where << ": named twice";
      EXPECT_TRUE(flags.insert(long_flag(s)).second) << where << ": flag twice";
      EXPECT_FALSE(s.help.empty()) << where;
      const nlohmann::json& d = s.default_value;
      switch (s.type) {
        case SettingType::Switch:
          EXPECT_TRUE(d.is_boolean()) << where;
          break;
        case SettingType::Integer:
          EXPECT_TRUE(d.is_number_integer()) << where;
          break;
        case SettingType::Number:
          EXPECT_TRUE(d.is_number()) << where;
          break;
        case SettingType::Choice:
          EXPECT_TRUE(d.get<std::string>().empty() ||
                      std::count(s.choices.begin(), s.choices.end(), d.get<std::string>()) == 1)
              << where;
          break;
        case SettingType::Text:
          EXPECT_TRUE(d.is_null() || d.is_string()) << where;
          break;
        case SettingType::TextList:
        case SettingType::IntegerList:
        case SettingType::NumberList:
          EXPECT_TRUE(d.is_array()) << where;
          break;
      }
    }
  }
}

}  // namespace
}  // namespace cnnscale::testing
