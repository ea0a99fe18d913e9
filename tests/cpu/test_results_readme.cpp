// results/README.md against the schema tables (io/result_schema.hpp): every field of every table of
// every product is named in the product's section, and every name the section's field tables list
// in their first column is a field of the product's tables. A field added to a struct without a
// word in the README, or a README row left behind by a removed field, fails here.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "io/result_schema.hpp"

namespace cnnscale {
namespace {

std::string readme() {
  std::ifstream in(std::string(CNNSCALE_SOURCE_DIR) + "/results/README.md");
  EXPECT_TRUE(in) << "results/README.md not found";
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The README's text from the heading `from` up to the heading `to`.
std::string section(const std::string& text, const std::string& from, const std::string& to) {
  const size_t begin = text.find("\n" + from + "\n");
  const size_t end = text.find("\n" + to + "\n", begin == std::string::npos ? 0 : begin);
  EXPECT_NE(begin, std::string::npos) << from;
  EXPECT_NE(end, std::string::npos) << to;
  if (begin == std::string::npos || end == std::string::npos) return "";
  return text.substr(begin, end - begin);
}

// `time_{data,h2d}_s` -> time_data_s, time_h2d_s (one brace group, as the README writes them).
std::vector<std::string> expand_braces(const std::string& token) {
  const size_t open = token.find('{'), close = token.find('}');
  if (open == std::string::npos || close == std::string::npos || close < open) return {token};
  std::vector<std::string> out;
  std::stringstream alternatives(token.substr(open + 1, close - open - 1));
  for (std::string alt; std::getline(alternatives, alt, ',');)
    out.push_back(token.substr(0, open) + alt + token.substr(close + 1));
  return out;
}

// The names in backticks of one table cell or line: braces expanded, a list's `[]` dropped; `(+
// `_std`)` after names adds each with `_std`. Values and flags (with spaces, quotes, `--`, `=`, `:`,
// `/` or `<`) are no names.
void names_in_piece(const std::string& text, std::set<std::string>& out) {
  std::vector<std::string> seen;
  for (size_t at = text.find('`'); at != std::string::npos; at = text.find('`', at)) {
    const size_t end = text.find('`', at + 1);
    if (end == std::string::npos) break;
    std::string token = text.substr(at + 1, end - at - 1);
    at = end + 1;
    if (token == "_std") {
      for (const std::string& s : seen) out.insert(s + "_std");
      continue;
    }
    if (token.ends_with("[]")) token.resize(token.size() - 2);
    if (token.empty() || token.starts_with("-") || token.find_first_of(" \"'=<:/") != std::string::npos) continue;
    for (const std::string& name : expand_braces(token)) {
      out.insert(name);
      seen.push_back(name);
    }
  }
}

// The names of `text`, cell by cell and line by line.
std::set<std::string> names_in(const std::string& text) {
  std::set<std::string> out;
  size_t begin = 0;
  for (size_t i = 0; i <= text.size(); ++i)
    if (i == text.size() || text[i] == '\n' || text[i] == '|') {
      names_in_piece(text.substr(begin, i - begin), out);
      begin = i + 1;
    }
  return out;
}

// The first cells of the rows of the section's field tables (headed `| field |` or `| names |`).
std::vector<std::string> field_table_first_cells(const std::string& text) {
  std::vector<std::string> cells;
  std::stringstream lines(text);
  bool in_field_table = false;
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("|")) {
      in_field_table = false;
      continue;
    }
    const size_t second = line.find(" |", 1);
    const std::string first = line.substr(1, second == std::string::npos ? std::string::npos : second - 1);
    if (first == " field" || first == " names") {
      in_field_table = true;
      continue;
    }
    if (in_field_table && !line.starts_with("|---")) cells.push_back(first);
  }
  return cells;
}

struct ProductSection {
  std::string product, from, to;
};
const std::vector<ProductSection> kSections = {
    {"training", "## run.h5 schema", "## h5py"},
    {"inference", "## Inference files", "## Calibration files"},
    {"calibration", "## Calibration files", "## Allreduce benchmark files"},
    {"allreduce", "## Allreduce benchmark files", "## Kernel benchmark folders"},
    {"kernels", "## Kernel benchmark folders", "## Kernel profile folders"},
    {"kernel_profile", "## Kernel profile folders", "## Conventions"},
};

TEST(ResultsReadme, EveryFieldOfEveryTableIsDocumented) {
  const std::string text = readme();
  std::set<std::string> products;
  for (const SchemaTable& t : result_schema_tables()) products.insert(std::string(t.product));
  for (const ProductSection& s : kSections) products.erase(s.product);
  EXPECT_TRUE(products.empty()) << "a product without a README section in this test: " << *products.begin();
  for (const ProductSection& s : kSections) {
    const std::set<std::string> documented = names_in(section(text, s.from, s.to));
    for (const SchemaTable& t : result_schema_tables()) {
      if (t.product != s.product) continue;
      for (const FieldInfo& f : t.fields)
        EXPECT_TRUE(documented.count(std::string(f.name)))
            << t.name << "." << f.name << " is not documented under '" << s.from << "' of results/README.md";
    }
  }
}

TEST(ResultsReadme, EveryDocumentedFieldIsInTheTables) {
  const std::string text = readme();
  for (const ProductSection& s : kSections) {
    std::set<std::string> fields;
    for (const SchemaTable& t : result_schema_tables())
      if (t.product == s.product && t.name.find('.') == std::string::npos)  // the product's own, not nested
        for (const FieldInfo& f : t.fields) fields.insert(std::string(f.name));
    const std::vector<std::string> cells = field_table_first_cells(section(text, s.from, s.to));
    EXPECT_FALSE(cells.empty()) << "no field table under '" << s.from << "'";
    for (const std::string& cell : cells)
      for (const std::string& name : names_in(cell))
        EXPECT_TRUE(fields.count(name)) << "'" << s.from << "' of results/README.md documents `" << name
                                        << "`, which no " << s.product << " table has";
  }
}

// The checks themselves: names are found as the README writes them.
TEST(ResultsReadme, NamesAreReadAsWritten) {
  EXPECT_EQ(names_in("`time_{data,h2d}_s`, `batches[]`, `--flag`, `\"text\"`, `tag.<key>`"),
            (std::set<std::string>{"time_data_s", "time_h2d_s", "batches"}));
  EXPECT_EQ(names_in("| `loop_s`, `other_s` (+ `_std`) |"),
            (std::set<std::string>{"loop_s", "other_s", "loop_s_std", "other_s_std"}));
  EXPECT_EQ(field_table_first_cells("| field | meaning |\n|---|---|\n| `a`, `b` | x \\| y |\n\n| path | k |\n| `c` | d |\n"),
            (std::vector<std::string>{" `a`, `b`"}));
}

}  // namespace
}  // namespace cnnscale
