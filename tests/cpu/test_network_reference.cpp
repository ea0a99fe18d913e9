// docs/network-reference.md against the program: the doc's reference part lists exactly the tables
// (layer types included) and keys that `cnnscale netinfo --layers` prints, which come from the lists
// the parsers check. A layer type or key added to the code but not to the doc fails here, as does one
// the doc keeps after the code dropped it; and the text must be the listing itself, so types,
// defaults and meanings cannot drift either.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "common/doc_pages.hpp"
#include "net/net.hpp"
#include "net/network_reference.hpp"

namespace cnnscale::testing {
namespace {

const std::string kReferenceDoc = "docs/network-reference.md";
// The doc's line after which its reference part (the listing) runs to the end of the file.
const std::string kReferenceMarker =
    "<!-- reference: the output of `cnnscale netinfo --layers` (tests/cpu/test_network_reference.cpp) -->";

// The reference part of the doc: what follows the marker line and one blank line.
std::string reference_part(const std::string& doc) {
  const size_t at = doc.find(kReferenceMarker + "\n\n");
  EXPECT_NE(at, std::string::npos) << kReferenceDoc << " lacks the line " << kReferenceMarker;
  return at == std::string::npos ? "" : doc.substr(at + kReferenceMarker.size() + 2);
}

// "## section" / "### heading" -> the names in backticks at the start of the table rows below it.
using RefTables = std::map<std::string, std::set<std::string>>;
RefTables tables_of(const std::string& markdown) {
  RefTables tables;
  std::string section, table;
  std::istringstream in(markdown);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("## ")) {
      section = line.substr(3);
    } else if (line.starts_with("### ")) {
      table = section + " / " + line.substr(4);
      tables[table];
    } else if (line.starts_with("| `") && !table.empty()) {
      const size_t end = line.find('`', 3);
      if (end != std::string::npos) tables[table].insert(line.substr(3, end - 3));
    }
  }
  return tables;
}

// What differs between the program's tables and the doc's, one line each; empty when they agree.
std::vector<std::string> reference_differences(const RefTables& program, const RefTables& doc) {
  std::vector<std::string> out;
  for (const auto& [table, keys] : program) {
    auto it = doc.find(table);
    if (it == doc.end()) {
      out.push_back("the program accepts " + table + ", which the doc does not list");
      continue;
    }
    for (const auto& k : keys)
      if (!it->second.count(k)) out.push_back(table + ": the program accepts `" + k + "`, the doc does not list it");
    for (const auto& k : it->second)
      if (!keys.count(k)) out.push_back(table + ": the doc lists `" + k + "`, which the program does not accept");
  }
  for (const auto& [table, keys] : doc)
    if (!program.count(table)) out.push_back("the doc lists " + table + ", which the program does not accept");
  return out;
}

std::string reference_lines(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

std::string netinfo_layers_output() {
  CliResult r = run_cnnscale({"netinfo", "--layers"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  return r.out;
}

TEST(NetworkReference, DocListsExactlyTheTypesAndKeysTheProgramAccepts) {
  const std::string program = netinfo_layers_output();
  const std::string doc = reference_part(repo_text(kReferenceDoc));
  const std::vector<std::string> diff = reference_differences(tables_of(program), tables_of(doc));
  EXPECT_TRUE(diff.empty()) << kReferenceDoc << " and `cnnscale netinfo --layers` disagree:\n" << reference_lines(diff);
  // Types, defaults and meanings too: the reference part is the listing, character for character.
  EXPECT_EQ(first_differing_line(doc, program, "of the reference part", "netinfo"), "")
      << kReferenceDoc << ": replace everything after the marker line (and one blank line) with the output of "
      << "`cnnscale netinfo --layers`";
}

// The comparison itself: a key or type missing from the doc, or one the doc has in excess, is named.
TEST(NetworkReference, ComparisonNamesAMissingOrExtraTypeOrKey) {
  const RefTables program = tables_of(netinfo_layers_output());
  const std::string dropout = std::string(kLayerTypesSection) + " / Dropout";
  ASSERT_TRUE(program.count(dropout)) << "no Dropout table in the listing";
  ASSERT_TRUE(program.at(dropout).count("ratio"));

  RefTables doc = program;
  doc[dropout].erase("ratio");
  EXPECT_EQ(reference_differences(program, doc),
            std::vector<std::string>{dropout + ": the program accepts `ratio`, the doc does not list it"});
  doc = program;
  doc[dropout].insert("dropout_ratio");
  EXPECT_EQ(reference_differences(program, doc),
            std::vector<std::string>{dropout + ": the doc lists `dropout_ratio`, which the program does not accept"});
  doc = program;
  doc.erase(dropout);
  EXPECT_EQ(reference_differences(program, doc),
            std::vector<std::string>{"the program accepts " + dropout + ", which the doc does not list"});
  doc = program;
  doc[std::string(kLayerTypesSection) + " / Scale"];
  EXPECT_EQ(reference_differences(program, doc),
            std::vector<std::string>{"the doc lists " + std::string(kLayerTypesSection) +
                                     " / Scale, which the program does not accept"});
}

// The listing is the registry's: one table per registered layer type, with exactly its declared
// keys, and the network file, block, repeat and common layer keys the parsers check.
TEST(NetworkReference, ListingComesFromTheRegistryAndTheParsersKeyLists) {
  std::vector<std::string> types;
  for (const auto& t : network_key_tables()) {
    if (t.section != kLayerTypesSection) continue;
    types.push_back(t.heading);
    std::set<std::string> keys;
    for (const auto& k : t.keys) keys.insert(k.name);
    EXPECT_EQ(keys, key_names(layer_type_doc(t.heading).keys)) << t.heading;
    for (const auto& k : t.keys) {
      EXPECT_FALSE(k.type.empty()) << t.heading << "." << k.name;
      EXPECT_FALSE(k.default_value.empty()) << t.heading << "." << k.name;
      EXPECT_FALSE(k.meaning.empty()) << t.heading << "." << k.name;
    }
  }
  EXPECT_EQ(types, registered_layer_types());
  const RefTables program = tables_of(network_reference_markdown());
  EXPECT_EQ(program.at("Network file / Top-level keys"), key_names(network_file_keys()));
  EXPECT_EQ(program.at("Layers / Keys of every layer"),
            (std::set<std::string>{"name", "type", "bottom", "top", "phase"}));
  EXPECT_EQ(program.at("Blocks and repeat / `repeat`"),
            (std::set<std::string>{"block", "times", "prefix", "input", "args", "first", "output"}));
}

// A Caffe habit: `dropout_ratio` is refused with the key the layer takes, and the reference's row
// of that key names the Caffe spelling, so a search of the doc for it lands there.
TEST(NetworkReference, CaffeSpellingLeadsToTheKey) {
  const std::string net =
      "input: {shape: [1, 4, 4], classes: 2}\nlayers:\n"
      "  - {name: drop, type: Dropout, bottom: data, top: drop, dropout_ratio: 0.3}\n";
  try {
    NetSpec::load_string(net, "caffe_habit.yaml");
    ADD_FAILURE() << "dropout_ratio was accepted";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("unknown key 'dropout_ratio'"), std::string::npos) << what;
    EXPECT_NE(what.find("ratio"), std::string::npos) << what;
  }
  const std::string doc = repo_text(kReferenceDoc);
  const size_t row = doc.find("| `ratio` |");
  ASSERT_NE(row, std::string::npos);
  EXPECT_NE(doc.substr(row, doc.find('\n', row) - row).find("dropout_ratio"), std::string::npos);
}

TEST(NetworkReference, NetworksReadmeLinksTheReference) {
  EXPECT_NE(repo_text("networks/README.md").find("](../docs/network-reference.md"), std::string::npos);
}

TEST(NetinfoCli, LayersExcludesANetworkAndNeedsOneWithout) {
  expect_usage_error({"netinfo"}, {"netinfo", "--layers"});
  CliResult both = run_cnnscale({"netinfo", "--layers", "lenet"});
  EXPECT_EQ(both.exit_code, 2) << both.err;
  EXPECT_NE(both.err.find("--layers"), std::string::npos) << both.err;
}

}  // namespace
}  // namespace cnnscale::testing
