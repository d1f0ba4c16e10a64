#pragma once
// Incident annotations: the only thing rsched-sql ever writes. A short read-write connection per
// call (busy timeout, one transaction), so it never blocks rschedd for long.
#include "rsched/base/result.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rsched::query {

struct annotation {
  std::int64_t start_ns = 0;          // UTC ns
  std::optional<std::int64_t> end_ns; // UTC ns; nullopt = a point in time
  std::string source = "rsched-sql";  // who wrote it ("rsched-sql", "import:<file>", ...)
  std::string text;                   // free text, exact bytes
  std::string tags;                   // comma-separated tags, "" none
};

// Adds one annotation to the database at `path` (which must exist and be an rsched database).
// Returns its id.
result<std::int64_t> add_annotation(const std::string &path, const annotation &a);

// Which threads are service `name` (table services, schema 19): explain(ANNOTATION_ID) finds
// the victims of an incident whose tags name a service (service_name:X, service:X) by these
// patterns (comm, comm:GLOB or cgroup:PATH, as explain's victims; pid:N and tid:N are refused:
// they change with every restart) instead of by the name. Replaces the service's patterns in one
// transaction; no patterns: forgets the service. Returns the patterns stored, in order.
result<std::vector<std::string>> set_service(const std::string &path, const std::string &name,
                                             const std::vector<std::string> &patterns);

enum class incident_format { automatic, csv, json };

// Imports a timeline: CSV with a header row naming at least `start` and `text` (optional `end`,
// `source`, `tags`; times in any form rsched::timefmt::parse_time accepts) or JSON (an array of
// objects with the same keys; values are strings, numbers (read as their text), null or, for tags,
// arrays of strings; JSON must be UTF-8 as RFC 8259 says, CSV fields are taken as exact bytes).
// The format is JSON when the file starts (after white space) with '[' or '{' or is as a whole
// a JSON value, CSV otherwise; JSON that is not an array of objects (a top-level object, a
// scalar) is an error. All rows in one transaction; any bad row fails the whole import with a
// one-line error naming the row (the byte, or the JSON object and field, for a malformed file).
// Importing is idempotent: a row whose source, start, end and text (exact bytes) equal an
// annotation already in the database, or an earlier row of the same file, is not added again
// (tags are not compared). Returns the number of annotations added.
result<std::size_t> import_incidents(const std::string &path, std::string_view content,
                                     incident_format fmt, std::string_view source,
                                     std::int64_t now_ns);

// Timelines as they come from incident tools. The file's columns (JSON keys) are matched to the
// annotation's fields: by name (start, end, text, source, tags), by a known export recognised
// from its header (a PagerDuty incidents CSV: created_on, resolved_on, description or title;
// its service_name and incident_number become tags "service_name:X,incident_number:N"), or by
// `map` (field -> column, e.g. {"start", "created_on"}), which wins. Columns used for no field
// are ignored and listed in the report.
struct incident_import {
  incident_format format = incident_format::automatic;
  std::string source;                                   // the source of rows that name none
  std::int64_t now_ns = 0;                              // what relative times ("2h ago") count from
  std::vector<std::pair<std::string, std::string>> map; // field -> column
};
struct incident_import_report {
  std::vector<std::int64_t> ids; // the annotations added, in order
  std::size_t already = 0;       // rows not added: the same source, start, end and text were there
  std::string recognised;        // "PagerDuty incidents export", ""
  std::vector<std::pair<std::string, std::string>> mapping; // field -> column(s) used, '+'
  std::vector<std::string> ignored;                         // columns used for nothing, sorted
};
// Parses `field=column,field=column` (as --map takes it); errors name the bad part.
result<std::vector<std::pair<std::string, std::string>>> parse_import_map(std::string_view text);
result<incident_import_report> import_incidents(const std::string &path, std::string_view content,
                                                const incident_import &opts);

} // namespace rsched::query
