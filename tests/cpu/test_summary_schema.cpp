// The summary schema table: names unique, every field written and read back through run.h5,
// summary.json (counts as integers) and the CSV.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "common/temp_dir.hpp"
#include "io/results_writer.hpp"
#include "io/summary_schema.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// A value of the field's kind that tells the fields apart.
SummaryValue value_for(const SummaryField& f, size_t i) {
  switch (f.kind) {
    case FigureKind::Text:
      return std::string(f.name) + "-text";
    case FigureKind::Count:
      return static_cast<double>(i + 2);
    case FigureKind::Number:
      break;
  }
  return 0.25 + static_cast<double>(i);
}

template <class Summary>
SummaryValues every_field(std::span<const FigureField<Summary>> fields) {
  SummaryValues out;
  for (size_t i = 0; i < fields.size(); ++i) out[std::string(fields[i].name)] = value_for(fields[i], i);
  return out;
}

RunResults run_with_every_field() {
  RunResults r;
  r.experiment = "schema";
  r.run_id = "every-field";
  r.summary = run_summary_from_values(every_field(run_summary_fields()));
  r.summary.tags["repeat"] = std::string("1");
  const RankSummary rank = rank_summary_from_values(every_field(rank_summary_fields()));
  r.rank_summary = {rank, rank};
  return r;
}

TEST(SummarySchema, NamesAreUniqueAndFound) {
  auto check = [](const auto fields) {
    std::set<std::string_view> names;
    for (const SummaryField& f : fields) {
      EXPECT_TRUE(names.insert(f.name).second) << f.name;
      EXPECT_EQ(find_summary_field(f.name)->kind, f.kind) << f.name;
      // Texts carry no unit; a name ending in _s is seconds (a rate, _per_s, is not), in _j joules.
      if (f.kind == FigureKind::Text) {
        EXPECT_EQ(f.unit, "") << f.name;
      }
      if (f.name.ends_with("_s") && !f.name.ends_with("_per_s")) {
        EXPECT_EQ(f.unit, "s") << f.name;
      }
      if (f.name.ends_with("_j")) {
        EXPECT_EQ(f.unit, "J") << f.name;
      }
    }
  };
  check(run_summary_fields());
  check(rank_summary_fields());
  EXPECT_EQ(find_summary_field("tag.anything")->kind, FigureKind::Text);
  EXPECT_EQ(find_summary_field("no_such_figure"), nullptr);
}

TEST(SummarySchema, EveryFieldRoundTripsThroughTheRunFolder) {
  TempDir dir;
  const RunResults r = run_with_every_field();
  const std::string folder = write_run_results(r, {dir.str(), {}});
  const RunResults back = read_run_results(folder);
  EXPECT_EQ(back.summary, r.summary);
  EXPECT_EQ(back.rank_summary, r.rank_summary);

  std::ifstream in(fs::path(folder) / "summary.json");
  const auto j = nlohmann::json::parse(in);
  auto check = [](const nlohmann::json& values, const auto fields) {
    for (const SummaryField& f : fields) {
      const nlohmann::json& v = values.at(std::string(f.name));
      switch (f.kind) {
        case FigureKind::Text:
          EXPECT_TRUE(v.is_string()) << f.name;
          break;
        case FigureKind::Count:
          EXPECT_TRUE(v.is_number_integer()) << f.name << ": " << v;
          break;
        case FigureKind::Number:
          EXPECT_TRUE(v.is_number_float()) << f.name << ": " << v;
          break;
      }
    }
  };
  check(j["summary"], run_summary_fields());
  for (const auto& rank : j["ranks"]) check(rank, rank_summary_fields());
  EXPECT_EQ(j["summary"]["tag.repeat"], "1");

  std::ifstream csv(fs::path(folder) / "summary.csv");
  std::string header;
  std::getline(csv, header);
  std::set<std::string> columns;
  for (size_t pos = 0, next; pos <= header.size(); pos = next + 1) {
    next = std::min(header.find(',', pos), header.size());
    columns.insert(header.substr(pos, next - pos));
  }
  for (const SummaryField& f : run_summary_fields()) EXPECT_EQ(columns.count(std::string(f.name)), 1u) << f.name;
}

}  // namespace
}  // namespace cnnscale
