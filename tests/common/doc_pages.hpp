// The Markdown pages users read, for the tests that check them against the program (the docs'
// command lines, the network reference, the option references): which pages those are, their
// text, and where a page's generated part first differs from what the program prints.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace cnnscale::testing {

// A file of the source tree, by its path relative to the tree.
inline std::string repo_text(const std::string& relative) {
  std::ifstream in(std::filesystem::path(CNNSCALE_SOURCE_DIR) / relative);
  EXPECT_TRUE(in) << relative << " not found";
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The pages users read: README.md, docs/ and its subfolders, and the README.md of each top-level
// folder (networks/, experiments/, results/, data/, ...), paths relative to the source tree.
inline std::vector<std::string> user_pages() {
  namespace fs = std::filesystem;
  const fs::path root = CNNSCALE_SOURCE_DIR;
  std::vector<std::string> pages = {"README.md"};
  for (const auto& e : fs::recursive_directory_iterator(root / "docs"))
    if (e.is_regular_file() && e.path().extension() == ".md") pages.push_back(fs::relative(e.path(), root).string());
  static const std::set<std::string> not_read = {"src", "tests", "cmake", "third_party"};
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || name[0] == '.' || name.rfind("build", 0) == 0 || not_read.count(name)) continue;
    if (fs::exists(e.path() / "README.md")) pages.push_back(name + "/README.md");
  }
  std::sort(pages.begin() + 1, pages.end());
  return pages;
}

// The first line where a page's generated part `doc` and the program's output differ, as "line N
// <where>:\n  doc: ...\n  <program>: ..."; empty when they are equal.
inline std::string first_differing_line(const std::string& doc, const std::string& output, const std::string& where,
                                        const std::string& program) {
  std::istringstream d(doc), p(output);
  std::string dl, pl;
  const std::string pad(program.size() > 3 ? program.size() - 3 : 0, ' ');
  for (int n = 1;; ++n) {
    const bool more_d = static_cast<bool>(std::getline(d, dl)), more_p = static_cast<bool>(std::getline(p, pl));
    if (!more_d && !more_p) return "";
    if (!more_d || !more_p || dl != pl)
      return "line " + std::to_string(n) + " " + where + ":\n  doc: " + pad + (more_d ? dl : "(end)") + "\n  " +
             program + ": " + (more_p ? pl : "(end)");
  }
}

}  // namespace cnnscale::testing
