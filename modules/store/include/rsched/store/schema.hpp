#pragma once
// Schema of the rsched database (docs/SCHEMA.md; version schema_version, records.hpp, upgraded in
// place from every older one) and the checks both sides run on open: the writer here, the query
// module's reader and annotations. Works on a raw sqlite3 connection and never throws.
#include "rsched/base/result.hpp"
#include "rsched/store/records.hpp"

#include <cstdint>
#include <string>

struct sqlite3;

namespace rsched::store {

// PRAGMA application_id of every rsched database: 'rsch' in ASCII.
inline constexpr std::int32_t application_id = 0x72736368;

// What an opened database holds: nothing yet (version 0: no schema objects, application_id and
// user_version 0: a new database), or an rsched database of schema `version`, 1 to
// schema_version. Below schema_version it reads as it is, and the writer upgrades it.
struct db_state {
  int version = 0;
  [[nodiscard]] bool empty() const { return version == 0; }
  [[nodiscard]] bool current() const { return version == schema_version; }
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

// Upgrades a database of schema version 1 to schema_version - 1 (`from`) to the current version in
// place, in one IMMEDIATE transaction (new tables and views, new intervals columns, metric rows,
// meta, user_version). v1 tables, views and rows are kept as they are. Re-checks inside the
// transaction: a database another process upgraded meanwhile is left alone. On error nothing
// changes.
result<void> upgrade(sqlite3 *db, const std::string &path, db_state from);

// Gives every metric of the registry (rsched/metrics/registry.hpp) that the database does not
// know yet its `metric` row and its views (all tiers), in one IMMEDIATE transaction; no-op when
// all are known. A new metric needs no schema version: old readers ignore its rows.
result<void> add_new_metrics(sqlite3 *db, const std::string &path);

} // namespace rsched::store
