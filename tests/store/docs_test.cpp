// The docs against the code (issue 51, "docs name the wrong textfile temporary and schema
// version"): every place README.md and docs/*.md name the current schema version names
// rsched::store::schema_version, and every temporary file they name is the one rsched::safe_file
// makes. docs/SCHEMA.md said 18 in its title, 13 for PRAGMA user_version and 9 for meta's
// schema_version, docs/ARCHITECTURE.md 15, while the code was at 20; docs/FLEET.md said the
// textfile and the export go to FILE.tmp.
#include "rsched/base/safe_file.hpp"
#include "rsched/store/records.hpp"

#include "store_test_util.hpp"

#include <catch2/catch.hpp>

#include <array>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

struct doc_line {
  std::string file; // relative to the source directory
  int number = 0;
  std::string text;
};

// The lines of README.md and every docs/*.md.
std::vector<doc_line> doc_lines() {
  const fs::path root = RSCHED_SOURCE_DIR;
  std::vector<fs::path> files = {root / "README.md"};
  for (const auto &e : fs::directory_iterator(root / "docs")) {
    if (e.path().extension() == ".md") {
      files.push_back(e.path());
    }
  }
  std::vector<doc_line> out;
  for (const auto &f : files) {
    std::ifstream in(f);
    REQUIRE(in);
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      out.push_back({fs::relative(f, root).string(), ++n, line});
    }
  }
  return out;
}

// A statement of the docs that names the current version: a pattern whose groups are versions,
// each `below[i]` below the current one (0: the current one; 1: the last one upgraded, as in
// "1 to N-1"), and the file it must be found in at least once (so that rewording a doc cannot
// turn its check off unnoticed).
struct claim {
  const char *file;
  const char *pattern;
  const char *what;
  std::array<int, 2> below{};
};

const claim claims[] = {
    {"docs/SCHEMA.md", R"(^# rsched database schema \(version (\d+)\)$)", "the title"},
    {"docs/SCHEMA.md",
     R"(\| `PRAGMA user_version` \| `(\d+)` \(the schema version; `1` to `(\d+)`)",
     "the file's user_version",
     {0, 1}},
    {"docs/SCHEMA.md", R"(the current schema \(version (\d+)\))", "a new file's version"},
    {"docs/SCHEMA.md", R"(upgraded in place to version (\d+))", "the upgrade's target"},
    {"docs/SCHEMA.md", R"(\| `user_version` = (\d+) \| opened \|)", "the version opened as is"},
    {"docs/SCHEMA.md", R"(\| `user_version` > (\d+) \| refused)", "the versions refused"},
    {"docs/SCHEMA.md", R"(newer than this rsched supports \((\d+)\))", "the refusal's text"},
    {"docs/SCHEMA.md",
     R"(When rschedd opens a version 1 to (\d+) database)",
     "the versions upgraded",
     {1, 0}},
    {"docs/SCHEMA.md", R"(`meta`: `schema_version` = `(\d+)`, .*`PRAGMA user_version = (\d+)`)",
     "the upgrade's meta row"},
    {"docs/SCHEMA.md", R"(\| `schema_version` \| `(\d+)` \(the schema version)",
     "meta's schema_version"},
    {"docs/ARCHITECTURE.md", R"(schema v(\d+) \+ upgrades)", "the module picture"},
    {"docs/ARCHITECTURE.md",
     R"(`schema\.cpp` \(v(\d+), upgrades from v1-v(\d+))",
     "the module table",
     {0, 1}},
};

} // namespace

TEST_CASE("the docs name the code's schema version wherever they name the current one", "[store]") {
  const int current = rsched::store::schema_version;
  const auto lines = doc_lines();
  for (const auto &c : claims) {
    const std::regex re(c.pattern);
    int found = 0;
    // Every doc is searched: the same statement elsewhere must agree too.
    for (const auto &l : lines) {
      std::smatch m;
      if (!std::regex_search(l.text, m, re)) {
        continue;
      }
      found += l.file == c.file ? 1 : 0;
      INFO(l.file << ":" << l.number << " (" << c.what << "): " << l.text);
      for (std::size_t g = 1; g < m.size() && g <= c.below.size(); ++g) {
        CHECK(std::stoi(m[g].str()) == current - c.below[g - 1]);
      }
    }
    INFO(c.file << " no longer says " << c.what << " (pattern " << c.pattern << ")");
    CHECK(found > 0);
  }
  // The table of versions ends at the current one, one row per version.
  const std::regex row(R"(^\| (\d+) \| (rsched|this rsched))");
  int rows = 0;
  int last = 0;
  for (const auto &l : lines) {
    std::smatch m;
    if (l.file == "docs/SCHEMA.md" && std::regex_search(l.text, m, row)) {
      ++rows;
      last = std::stoi(m[1].str());
      INFO(l.file << ":" << l.number);
      CHECK(last == rows);
    }
  }
  CHECK(last == current);
}

TEST_CASE("the docs name the temporary file safe_file makes, never a predictable FILE.tmp",
          "[store]") {
  // What the code makes: ".NAME.<16 hex digits>.tmp" beside the target.
  store_test::temp_dir dir;
  auto f = rsched::safe_file::create(dir.file("rsched.prom"));
  REQUIRE(f);
  const std::string temp = fs::path(f->temp_path()).filename().string();
  INFO(temp);
  CHECK(std::regex_match(temp, std::regex(R"(\.rsched\.prom\.[0-9a-f]{16}\.tmp)")));
  // What the docs say: every temporary named in code quotes is ".NAME.<16 hex digits...>.tmp".
  const std::regex named(R"(`([^`]*\.tmp)`)");
  const std::regex documented(R"(\.[A-Z]+\.<16 hex digits[^>]*>\.tmp)");
  int found = 0;
  for (const auto &l : doc_lines()) {
    for (std::sregex_iterator it(l.text.begin(), l.text.end(), named), end; it != end; ++it) {
      ++found;
      INFO(l.file << ":" << l.number << ": " << l.text);
      CHECK(std::regex_match((*it)[1].str(), documented));
    }
  }
  CHECK(found > 0);
}
