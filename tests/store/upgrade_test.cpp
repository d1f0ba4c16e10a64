// Upgrades: a real database of every older schema version (tests/store/data/vN.db, each made by
// the rschedd of that version, README in that directory) reads as it is, and the writer upgrades
// it in place, in one transaction, to exactly the schema and reference rows of a new database,
// keeping every row it held. The schema is one numbered step per version
// (modules/store/src/schema.cpp, `migrations`): a new version is a step there and a fixture here.
// What each version's step does to the data (v2's groups, v8's packs, v10's late marks, ...) is
// tested with the feature it serves (rollup_test, blame_test, topology_test, metric_groups_test,
// query/spikes_test).
#include "rsched/query/reader.hpp"
#include "rsched/store/records.hpp"
#include "rsched/store/writer.hpp"

#include "store_test_util.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

using namespace store_test;

namespace {

using rsched::store::schema_version;

// Rows per table of the file (sqlite's own tables left out), read through the reader: a table
// an upgrade renames (thread_hist in 8, thread_blame in 13) still answers by its old name
// through the virtual table that took it.
std::map<std::string, std::int64_t> row_counts(rsched::query::reader &r,
                                               const std::vector<std::string> &tables) {
  std::map<std::string, std::int64_t> out;
  for (const auto &t : tables) {
    out[t] = scalar_int(r, "SELECT count(*) FROM main." + t);
  }
  return out;
}

std::vector<std::string> tables_of(rsched::query::reader &r) {
  std::vector<std::string> out;
  for (const auto &row : run(r, "SELECT name FROM sqlite_master WHERE type = 'table' AND name "
                                "NOT LIKE 'sqlite%' ORDER BY name")
                             .rows) {
    out.push_back(as_text(row[0]));
  }
  return out;
}

std::vector<std::vector<std::string>> rows_as_text(rsched::query::reader &r,
                                                   const std::string &sql) {
  std::vector<std::vector<std::string>> out;
  for (const auto &row : run(r, sql).rows) {
    std::vector<std::string> cells;
    for (const auto &v : row) {
      cells.push_back(std::visit(
          [](const auto &x) -> std::string {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, std::monostate>) {
              return "NULL";
            } else if constexpr (std::is_same_v<T, std::string>) {
              return x;
            } else if constexpr (std::is_same_v<T, std::vector<std::uint8_t>>) {
              return hex(x);
            } else {
              return fmt::format("{}", x);
            }
          },
          v));
    }
    out.push_back(std::move(cells));
  }
  return out;
}

} // namespace

TEST_CASE("every older schema version has a real fixture, read as it is and upgraded to exactly "
          "a new database's schema, its rows kept",
          "[store][upgrade]") {
  temp_dir dir;
  const auto fresh = dir.file("fresh.db");
  { auto w = open_writer(fresh); }
  auto rf = open_reader(fresh);
  const auto want = schema_of(rf);
  const auto want_metrics =
      rows_as_text(rf, "SELECT id, name, unit, layout FROM metric ORDER BY id");
  for (int v = 1; v < schema_version; ++v) {
    const std::string name = fmt::format("v{}.db", v);
    INFO(name);
    REQUIRE(std::filesystem::exists(std::string(RSCHED_TEST_DATA_DIR) + "/" + name));
    const auto path = dir.file(name);
    copy_fixture(name, path);
    std::map<std::string, std::int64_t> before;
    std::vector<std::string> old_tables;
    {
      // As it is: the reader opens it without changing it, at its own version.
      auto r = open_reader(path);
      CHECK(scalar_int(r, "PRAGMA user_version") == v);
      CHECK(scalar_int(r, "SELECT count(*) FROM intervals") > 0);
      old_tables = tables_of(r);
      before = row_counts(r, old_tables);
    }
    std::string upgraded_ns;
    {
      auto w = open_writer(path);
      auto r = open_reader(path);
      CHECK(scalar_int(r, "PRAGMA user_version") == schema_version);
      CHECK(scalar_int(r, "SELECT CAST(value AS INTEGER) FROM meta WHERE key = "
                          "'schema_version'") == schema_version);
      // Object by object and text by text: the ALTER TABLEs of each step give the same tables
      // as a new file, and every view is the current one.
      CHECK(schema_of(r) == want);
      CHECK(columns_of(r, "intervals") == columns_of(rf, "intervals"));
      CHECK(columns_of(r, "health") == columns_of(rf, "health"));
      CHECK(columns_of(r, "timeline") == columns_of(rf, "timeline"));
      // The reference rows a new file has, exactly.
      CHECK(rows_as_text(r, "SELECT id, name, unit, layout FROM metric ORDER BY id") ==
            want_metrics);
      // Every row the old file held is still there (meta gains the upgrade's keys, metric the
      // metrics added since, culprit v15's three pseudo-wakers).
      const auto after = row_counts(r, old_tables);
      for (const auto &[table, n] : before) {
        INFO(table);
        if (table == "meta" || table == "metric") {
          CHECK(after.at(table) >= n);
        } else if (table == "culprit") {
          CHECK(after.at(table) == n + (v < 15 ? 3 : 0));
        } else {
          CHECK(after.at(table) == n);
        }
      }
      CHECK(as_text(run(r, "PRAGMA integrity_check").rows.at(0).at(0)) == "ok");
      upgraded_ns =
          as_text(run(r, "SELECT value FROM meta WHERE key = 'upgraded_ns'").rows.at(0).at(0));
    }
    // Opening it again (the first writer closed) finds the current version: nothing to do.
    { auto w = open_writer(path); }
    auto r = open_reader(path);
    CHECK(as_text(run(r, "SELECT value FROM meta WHERE key = 'upgraded_ns'").rows.at(0).at(0)) ==
          upgraded_ns);
    CHECK(schema_of(r) == want);
  }
}
