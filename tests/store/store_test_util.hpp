#pragma once
// Helpers shared by the store tests: running SQL through a reader and
// building synthetic intervals.
#include "rsched/query/reader.hpp"
#include "rsched/stats/encoding.hpp"
#include "rsched/stats/histogram.hpp"
#include "rsched/store/records.hpp"
#include "rsched/store/writer.hpp"

#include "support/temp_dir.hpp"

#include <catch2/catch.hpp>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sqlite3.h>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

using metric = rsched::metrics::id;

namespace store_test {

namespace fs = std::filesystem;
using rsched::query::reader;
using rsched::query::value;
using rsched::stats::layout;
using rsched::store::hist_value;
using rsched::store::writer;

using rsched::test::temp_dir;

// Nanoseconds in a second, a minute, an hour (the unit of every time in the store).
inline constexpr std::int64_t sec = 1'000'000'000;
inline constexpr std::int64_t minute = 60 * sec;
inline constexpr std::int64_t hour = 60 * minute;

struct table {
  std::vector<std::vector<std::string>> headers; // one entry per statement with columns
  std::vector<std::vector<value>> rows;
};

// Runs `sql` and returns what the sink saw, or the error message in `err` when it failed.
inline table run(rsched::query::reader &r, std::string_view sql, std::string *err = nullptr) {
  table t;
  rsched::query::result_sink sink;
  sink.on_columns = [&](const std::vector<std::string> &c) { t.headers.push_back(c); };
  sink.on_row = [&](const std::vector<value> &row) { t.rows.push_back(row); };
  auto res = r.exec(sql, sink);
  if (err != nullptr) {
    *err = res.ok() ? std::string() : res.err().msg;
  } else {
    INFO("SQL: " << sql);
    INFO("error: " << (res.ok() ? std::string() : res.err().msg));
    REQUIRE(res.ok());
  }
  return t;
}

// The error of a statement that must fail.
inline std::string run_error(rsched::query::reader &r, std::string_view sql) {
  std::string err;
  run(r, sql, &err);
  INFO("SQL: " << sql);
  REQUIRE_FALSE(err.empty());
  return err;
}

inline std::int64_t as_int(const value &v) {
  REQUIRE(std::holds_alternative<std::int64_t>(v));
  return std::get<std::int64_t>(v);
}
inline double as_real(const value &v) {
  REQUIRE(std::holds_alternative<double>(v));
  return std::get<double>(v);
}
inline std::string as_text(const value &v) {
  REQUIRE(std::holds_alternative<std::string>(v));
  return std::get<std::string>(v);
}
inline std::vector<std::uint8_t> as_blob(const value &v) {
  REQUIRE(std::holds_alternative<std::vector<std::uint8_t>>(v));
  return std::get<std::vector<std::uint8_t>>(v);
}
inline bool is_null(const value &v) {
  return std::holds_alternative<std::monostate>(v);
}

// The single integer of a one-row, one-column query.
inline std::int64_t scalar_int(rsched::query::reader &r, std::string_view sql) {
  auto t = run(r, sql);
  REQUIRE(t.rows.size() == 1);
  REQUIRE(t.rows[0].size() == 1);
  return as_int(t.rows[0][0]);
}

// Retention that keeps everything (no age or size limit).
inline rsched::store::retention forever() {
  rsched::store::retention r;
  r.keep_raw_ns = r.keep_1m_ns = r.keep_1h_ns = 0;
  r.max_bytes = 0;
  return r;
}

inline rsched::store::writer open_writer(const std::string &path) {
  auto w = rsched::store::writer::open(path);
  INFO("error: " << (w.ok() ? std::string() : w.err().msg));
  REQUIRE(w.ok());
  return std::move(w).value();
}

inline rsched::query::reader open_reader(const std::string &path, bool read_only = true) {
  auto r = rsched::query::reader::open(path, read_only);
  INFO("error: " << (r.ok() ? std::string() : r.err().msg));
  REQUIRE(r.ok());
  return std::move(r).value();
}

inline void write_ok(rsched::store::writer &w, const rsched::store::interval_row &iv) {
  auto r = w.write(iv);
  INFO("error: " << (r.ok() ? std::string() : r.err().msg));
  REQUIRE(r.ok());
}

// The steps of EXPLAIN QUERY PLAN for `select` (their detail column), one line each.
inline std::string query_plan(rsched::query::reader &r, const std::string &select) {
  std::string details;
  for (const auto &row : run(r, "EXPLAIN QUERY PLAN " + select).rows) {
    details += as_text(row.back()) + "\n";
  }
  return details;
}

// Whether a plan reads the hist tables by key only: each step either searches an index or is
// a call of thread_hist's virtual table for one interval (v8: it reads that interval's pack and
// rollup rows; "interval_id=" in its index string), and thread_hist is read at least once.
inline bool indexed_hist_plan(const std::string &details) {
  bool hist = false;
  std::size_t at = 0;
  while (at < details.size()) {
    std::size_t end = details.find('\n', at);
    if (end == std::string::npos) {
      end = details.size();
    }
    const std::string line = details.substr(at, end - at);
    at = end + 1;
    if (line.find("VIRTUAL TABLE INDEX") != std::string::npos) {
      if (line.find(":interval_id=") == std::string::npos) {
        UNSCOPED_INFO("not by interval: " << line);
        return false;
      }
      hist = true;
    } else if (line.find("SCAN") != std::string::npos) {
      UNSCOPED_INFO("scans: " << line);
      return false;
    } else if (line.find("PRIMARY KEY (interval_id=?") != std::string::npos) {
      hist = true;
    }
  }
  return hist;
}

// Column names of a table or view, in order.
inline std::vector<std::string> columns_of(rsched::query::reader &r, const std::string &name) {
  auto t = run(r, "SELECT name FROM pragma_table_info('" + name + "') ORDER BY cid");
  std::vector<std::string> names;
  for (const auto &row : t.rows) {
    names.push_back(as_text(row[0]));
  }
  return names;
}

// Everything of the schema: (type, name, tbl_name, sql), in a canonical order.
inline std::vector<std::vector<std::string>> schema_of(rsched::query::reader &r) {
  auto t = run(r, "SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_master "
                  "ORDER BY type, name");
  std::vector<std::vector<std::string>> out;
  for (const auto &row : t.rows) {
    out.push_back({as_text(row[0]), as_text(row[1]), as_text(row[2]), as_text(row[3])});
  }
  return out;
}

inline rsched::stats::histogram latency_hist(const std::vector<std::uint64_t> &ns) {
  rsched::stats::histogram h{rsched::stats::layout::latency, {}};
  for (auto v : ns) {
    h.add(v);
  }
  return h;
}

// A histogram of `layout` holding `samples`, and the same with its count and exact total.
inline rsched::stats::histogram hist_of(rsched::stats::layout l,
                                        const std::vector<std::uint64_t> &samples) {
  rsched::stats::histogram h{l, {}};
  for (auto v : samples) {
    h.add(v);
  }
  return h;
}

inline rsched::store::hist_value value_of(rsched::stats::layout l,
                                          const std::vector<std::uint64_t> &samples) {
  rsched::store::hist_value v;
  v.hist = hist_of(l, samples);
  v.count = samples.size();
  for (auto s : samples) {
    v.total += s;
  }
  return v;
}

// Rows of table `metric` in a current database: one per metric id of the registry.
inline std::int64_t known_metrics() {
  std::vector<int> ids;
  for (const auto &d : rsched::metrics::registry) {
    if (std::find(ids.begin(), ids.end(), d.db_id) == ids.end()) {
      ids.push_back(d.db_id);
    }
  }
  return static_cast<std::int64_t>(ids.size());
}

inline rsched::stats::histogram depth_hist(const std::vector<std::uint64_t> &depths) {
  rsched::stats::histogram h{rsched::stats::layout::depth, {}};
  for (auto v : depths) {
    h.add(v);
  }
  return h;
}

inline rsched::store::thread_row make_thread(std::uint32_t tid, std::string comm,
                                             const std::vector<std::uint64_t> &delays_ns,
                                             const std::vector<std::uint64_t> &depths = {},
                                             std::string cgroup = "") {
  rsched::store::thread_row t;
  t.tid = tid;
  t.pid = tid;
  t.start_time_ns = 1000 + tid;
  t.comm = std::move(comm);
  t.cgroup = std::move(cgroup);
  t.m[metric::sched_delay].hist = latency_hist(delays_ns);
  t.m[metric::sched_delay].count = delays_ns.size();
  for (auto v : delays_ns) {
    t.m[metric::sched_delay].total += v;
  }
  t.m[metric::runq_depth].hist = depth_hist(depths);
  t.m[metric::runq_depth].count = depths.size();
  for (auto v : depths) {
    t.m[metric::runq_depth].total += v;
  }
  return t;
}

inline rsched::store::interval_row make_interval(std::int64_t start_ns,
                                                 std::vector<rsched::store::thread_row> threads,
                                                 std::vector<rsched::store::cpu_row> cpus = {}) {
  rsched::store::interval_row iv;
  iv.start_ns = start_ns;
  iv.dur_ns = 10'000'000'000;
  iv.boot_id = "0f2c1e8a-9b7d-4c3e-8f1a-2b3c4d5e6f70";
  iv.threads = std::move(threads);
  iv.cpus = std::move(cpus);
  return iv;
}

inline std::string hex(const std::vector<std::uint8_t> &bytes) {
  static constexpr char digits[] = "0123456789ABCDEF";
  std::string s;
  for (auto b : bytes) {
    s += digits[b >> 4];
    s += digits[b & 0xF];
  }
  return s;
}

// X'..' literal of a histogram's blob.
inline std::string blob_literal(const rsched::stats::histogram &h) {
  return "X'" + hex(rsched::stats::encode(h)) + "'";
}

inline std::string read_file(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::string s(static_cast<std::size_t>(fs::file_size(path)), '\0');
  in.read(s.data(), static_cast<std::streamsize>(s.size()));
  REQUIRE(in.gcount() == static_cast<std::streamsize>(s.size()));
  return s;
}

inline void write_file(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  REQUIRE(out.good());
}

// A new database in a temporary directory and its writer: the fixture (TEST_CASE_METHOD) of the
// tests that start from an empty database.
struct new_db {
  temp_dir dir;
  std::string path = dir.file("rsched.db");
  writer w = open_writer(path);
};

// A copy of the fixture database tests/store/data/`name` at `path`, to open and upgrade without
// touching the fixture.
inline void copy_fixture(const std::string &name, const std::string &path) {
  write_file(path, read_file(std::string(RSCHED_TEST_DATA_DIR) + "/" + name));
}

// Runs SQL on a plain sqlite3 connection (fixtures, and observing the file from outside).
inline void raw_exec(const std::string &path, const std::string &sql) {
  sqlite3 *db = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) ==
          SQLITE_OK);
  char *msg = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &msg);
  INFO("sqlite: " << (msg != nullptr ? msg : ""));
  sqlite3_free(msg);
  sqlite3_close(db);
  REQUIRE(rc == SQLITE_OK);
}

inline mode_t file_mode(const std::string &path) {
  struct stat st {};
  REQUIRE(stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

} // namespace store_test
