#pragma once
// Schema of the rsched database (docs/SCHEMA.md; version 13, upgraded in place from versions 1
// to 12) and the checks both sides run on open: the writer here, the query module's reader and
// annotations. Works on a raw sqlite3 connection and never throws.
#include "rsched/base/result.hpp"

#include <cstdint>
#include <string>

struct sqlite3;

namespace rsched::store {

// PRAGMA application_id of every rsched database: 'rsch' in ASCII.
inline constexpr std::int32_t application_id = 0x72736368;

// What an opened database holds.
enum class db_state {
  empty,     // no schema objects, application_id and user_version 0: a new database
  version1,  // an rsched database of schema version 1: readable; the writer upgrades it
  version2,  // schema version 2 (no rollup tiers): readable; the writer upgrades it
  version3,  // schema version 3 (no delay clock, no segment drops): readable; the writer upgrades
  version4,  // schema version 4 (no blame, no pressure): readable; the writer upgrades
  version5,  // schema version 5 (timeline without ts and dur): readable; the writer upgrades
  version6,  // schema version 6 (annotation_summary with start_ns, end_ns): readable; upgraded
  version7,  // schema version 7 (thread_hist a table): readable; upgraded
  version8,  // schema version 8 (no topology, no sched_ext): readable; upgraded
  version9,  // schema version 9 (raw intervals written late into a rollup unmarked): upgraded
  version10, // schema version 10 (blame without approx_ns): upgraded
  version11, // schema version 11 (no hist_summary): upgraded
  version12, // schema version 12 (thread_blame a table): upgraded
  current,   // an rsched database of schema_version
};

// What every connection to an rsched database needs before it touches the schema: the virtual
// table modules behind thread_hist (schema 8) and thread_blame (schema 13), and the histogram
// functions the schema's views and rollups call (hist_functions.hpp).
result<void> register_storage(sqlite3 *db);

// Classifies the database behind `db`. Everything that is neither empty nor a current rsched
// database is an error whose message starts with `path`: not SQLite at all ("file is not a
// database"), a foreign application_id, rsched's application_id without a schema version, or a
// newer schema version. Reads only: the file is left untouched.
result<db_state> check(sqlite3 *db, const std::string &path);

// Creates the current schema (tables, views, metric rows, meta rows, application_id,
// user_version) in one IMMEDIATE transaction: schema v1 followed by every upgrade step, so a new
// database is identical to an upgraded one. The state is checked again inside the transaction,
// so two processes creating the same file race safely: the loser finds the schema in place and
// creates nothing.
result<void> create(sqlite3 *db, const std::string &path);

// Upgrades a schema version 1 to 10 database (`from`) to the current version in place, in one
// IMMEDIATE transaction (new tables and views, new intervals columns, metric rows, meta,
// user_version). v1 tables, views and rows are kept as they are. Re-checks inside the transaction:
// a database another process upgraded meanwhile is left alone. On error nothing changes.
result<void> upgrade(sqlite3 *db, const std::string &path, db_state from);

// Gives every metric of the registry (rsched/metrics/registry.hpp) that the database does not
// know yet its `metric` row and its views (all tiers), in one IMMEDIATE transaction; no-op when
// all are known. A new metric needs no schema version: old readers ignore its rows.
result<void> add_new_metrics(sqlite3 *db, const std::string &path);

} // namespace rsched::store
