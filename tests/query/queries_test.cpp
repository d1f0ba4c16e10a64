// The table functions as data (tests/query/CMakeLists.txt): each cases/NAME.sql is run as a user
// runs it, and what rsched-sql prints must be cases/NAME.csv. A new case is two files; C++ cases
// elsewhere keep what needs code (random histories, cross-checks against other functions).
#include "sql_fixture.hpp"

#include <catch2/catch.hpp>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path &p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<fs::path> case_files() {
  std::vector<fs::path> out;
  for (const auto &e : fs::directory_iterator(RSCHED_QUERY_CASES)) {
    if (e.path().extension() == ".sql") {
      out.push_back(e.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

} // namespace

TEST_CASE("the table functions as data: every cases/*.sql prints its cases/*.csv", "[query]") {
  const auto cases = case_files();
  // The table functions each have cases: a deleted directory must not pass as "no differences".
  REQUIRE(cases.size() >= 20);
  const bool update = std::getenv("RSCHED_UPDATE_GOLDEN") != nullptr;
  const auto &h = sql_fixture::fixture();
  for (const auto &sql_file : cases) {
    DYNAMIC_SECTION(sql_file.filename().string()) {
      const std::string sql = slurp(sql_file);
      auto expected_file = sql_file;
      expected_file.replace_extension(".csv");
      int status = 0;
      const std::string got = sql_fixture::escaped_output(h.path, sql, status, true);
      CHECK(WIFEXITED(status));
      if (update) {
        std::ofstream(expected_file, std::ios::binary | std::ios::trunc) << got;
        continue;
      }
      REQUIRE(fs::exists(expected_file));
      const std::string want = slurp(expected_file);
      INFO(sql);
      CHECK(got == want);
    }
  }
}
