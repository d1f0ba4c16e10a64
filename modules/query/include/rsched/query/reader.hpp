#pragma once
// The query side: a connection with rsched's SQL functions registered, statements run one by
// one, results handed back as plain values. Used by rsched-sql and the tests.
#include "rsched/base/result.hpp"
#include "rsched/base/timefmt.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

struct sqlite3_stmt;

namespace rsched::query {

// One SQL value. Blobs are raw bytes.
using value =
    std::variant<std::monostate, std::int64_t, double, std::string, std::vector<std::uint8_t>>;

// One row of a statement as it steps, read in place (no copy of its text or blobs): valid only
// during the call it is given to. For readers of many rows (a heatmap reads hundreds of
// thousands); everything else takes rows as values.
class row_view {
public:
  explicit row_view(sqlite3_stmt *st, int columns) : st_(st), columns_(columns) {}
  [[nodiscard]] int size() const { return columns_; }
  // An INTEGER (or a REAL, truncated); nullopt for NULL, text and blobs.
  [[nodiscard]] std::optional<std::int64_t> int_at(int i) const;
  // The text's stored bytes; nullopt unless the column is TEXT.
  [[nodiscard]] std::optional<std::string_view> text_at(int i) const;
  // The blob's bytes; nullopt unless the column is a BLOB.
  [[nodiscard]] std::optional<std::span<const std::uint8_t>> blob_at(int i) const;
  // The column as a value (a copy).
  [[nodiscard]] value value_at(int i) const;

private:
  sqlite3_stmt *st_;
  int columns_;
};

struct result_sink {
  // Called once per statement that returns columns, before its rows.
  std::function<void(const std::vector<std::string> &columns)> on_columns;
  // Called per row.
  std::function<void(const std::vector<value> &row)> on_row;
  // Called per row instead of on_row when set: the row read in place.
  std::function<void(const row_view &row)> on_row_view;
};

// One host of a connection over several hosts: its name (the `host` column) and its database.
struct host_file {
  std::string name;
  std::string path;
};

// What one scan of a data view read from one tier (reader::take_tier_reads, `.tiers on`).
struct tier_read {
  std::string view;
  int tier = 0;          // 2: the view's _1h rows, 1: its _1m rows, 0: the view (finest kept)
  std::int64_t from = 0; // the ts range it covered, UTC ns: [from, to); 0, 0 for a scan of the
  std::int64_t to = 0;   // whole view (no window routed)
  std::int64_t rows = 0; // rows read
  std::string why;       // tier 0 read whole: why no rollup could answer ("" when routed)
};

class reader {
public:
  // Opens an existing database read-only (mode=ro, busy_timeout) unless `read_only` is false
  // (an in-memory or test database). Missing file, non-SQLite file or a foreign/newer schema:
  // a one-line error. A schema version 1 database is opened as it is (the reader never
  // upgrades): only the version 1 tables and views exist in it.
  // A read-only reader also refuses, through an SQLite authorizer, every statement that would
  // write the database or another file (VACUUM [INTO], ATTACH, DML/DDL outside TEMP, PRAGMA
  // assignments, load_extension, ...): exec fails with "not allowed: rsched-sql only reads the
  // database (why)". TEMP tables, views, indexes and triggers are allowed (docs/SQL.md).
  static result<reader> open(const std::string &path, bool read_only = true);

  // Opens several hosts' databases read-only as one connection (docs/SQL.md, "Several hosts"):
  // each file is opened as by open() (its errors name the host: "host NAME: PATH: ...") and
  // attached read-only (URI mode=ro) under the host's name, and every table and view of the files
  // becomes a TEMP view of the same name, the UNION ALL of the hosts' rows with a leading `host`
  // column (TEXT, the name); a column a host's file lacks (an older schema) is NULL in its rows.
  // `"NAME".view` still reads one host's own view. The table functions run on each host's own
  // connection and get a leading `host` column (during and around return every host's interval
  // starts). Names are data (quoted in the generated SQL); they must be non-empty, distinct
  // regardless of case, not "main" or "temp", and the files distinct: otherwise, or for more
  // than max_hosts() hosts, an error with errnum EINVAL. Nothing is written to any file. `note`,
  // when given, receives a one-line remark about the files (their schema versions differ) or "".
  static result<reader> open_hosts(const std::vector<host_file> &hosts,
                                   std::string *note = nullptr);
  // How many hosts open_hosts can combine (SQLite's limit of attached databases, 10 by default).
  static int max_hosts();
  // A second read-only connection to the same database file, with this one's settings (zone,
  // `now`, tier routing, annotation margin; not its TEMP objects or notices), for a reader of
  // independent parts at once: one thread per connection. interrupt() on this reader also
  // interrupts its twins while they live. An error for an in-memory database or several hosts.
  result<reader> twin();

  // Whether answers may read independent parts on a second connection at once (the report's
  // heatmaps beside its other parts): on by default; the answers are the same.
  void set_parallel(bool on);
  [[nodiscard]] bool parallel() const;

  // The hosts' names in order (open_hosts), or empty for a single database.
  [[nodiscard]] const std::vector<std::string> &hosts() const;

  // Runs every statement in `sql` in order. Stops at the first error and returns it; the error
  // message names the statement's line and the position SQLite reports, when it can.
  result<void> exec(std::string_view sql, const result_sink &sink);
  // The same with values bound to the parameters ?1, ?2, ... of each statement (params[0] to
  // ?1): a value from a user or a file goes in as a value, never spliced into the text. A
  // statement with more parameters than values given is an error.
  result<void> exec(std::string_view sql, const std::vector<value> &params,
                    const result_sink &sink);

  // The zone of t(), fmt_time() and the window functions for times written without an offset
  // (docs/SQL.md, "Time grammar"). Default: local.
  void set_zone(timefmt::zone z);
  // Interrupts the statement running on this connection (sqlite3_interrupt): exec returns an
  // error. Safe to call from a signal handler or another thread.
  void interrupt() noexcept;
  // The last window a statement asked of during()/around() since the previous call, as
  // [start, end) UTC ns, or nullopt. The shell uses it to report partial coverage.
  std::optional<std::pair<std::int64_t, std::int64_t>> take_window();
  // Whether a statement since the previous call gave a table function a time window of its own
  // (its times as numbers, text or t()): an empty result then means "no data in that window".
  bool take_window_named();
  // The span of the windows given to the last statement's table functions with both bounds
  // (none: no such window); cleared by the call.
  std::optional<std::pair<std::int64_t, std::int64_t>> take_named_window();
  [[nodiscard]] const timefmt::zone &zone() const;
  // Fixes what `now` means for the time functions (tests, reproducible examples); nullopt =
  // the real clock (default).
  void set_now(std::optional<std::int64_t> utc_ns);

  // Whether the data views answer whole minutes and hours of a window from the rollups where
  // they are exact (docs/SQL.md, "Which tier answers"): on by default; off, every view reads
  // the finest tier kept, as `main.VIEW` always does. Databases before schema 10 and
  // connections over several hosts are never routed.
  void set_tier_routing(bool on);
  [[nodiscard]] bool tier_routing() const;
  // What the data views read since the previous call, scan by scan and tier by tier.
  std::vector<tier_read> take_tier_reads();
  // Receives a one-line remark when one scan of a data view has read `rows` rows from the
  // finest tier (and why no rollup answered). Default: none.
  void on_notice(std::function<void(const std::string &)> f, std::int64_t rows = 2'000'000);

  // True when `sql` ends in a complete statement (sqlite3_complete), for multi-line input.
  static bool complete(std::string_view sql);

  reader(reader &&) noexcept;
  reader &operator=(reader &&) noexcept;
  ~reader();

private:
  result<void> exec_bound(std::string_view sql, const std::vector<value> *params,
                          const result_sink &sink);
  struct impl;
  explicit reader(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
};

} // namespace rsched::query
