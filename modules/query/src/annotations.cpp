// Incident annotations: the read-write connection (only INSERT INTO main.annotations is
// authorized), validation, add_annotation and import_incidents. The timeline formats are in
// annotations_csv.cpp and annotations_json.cpp.
#include "rsched/query/annotations.hpp"

#include "rsched/base/safe_file.hpp"
#include "rsched/base/text.hpp"
#include "rsched/base/timefmt.hpp"
#include "rsched/sqlite/statement.hpp"
#include "rsched/store/schema.hpp"

#include "annotations_records.hpp"

#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Statement.h>
#include <SQLiteCpp/Transaction.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <sqlite3.h>
#include <string>
#include <string_view>
#include <unistd.h>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace rsched::query {

namespace {

constexpr int busy_timeout_ms = 5000;

// The authorizer of the read-write connection: it only ever runs the statements of this file
// (user SQL never reaches it), and those may only read, add rows to main.annotations and
// replace the rows of main.services.
int annotations_only(void * /*user*/, int action, const char *a1, const char *a2, const char *a3,
                     const char * /*a4*/) {
  auto is = [](const char *s, const char *want) {
    return s != nullptr && sqlite3_stricmp(s, want) == 0;
  };
  switch (action) {
  case SQLITE_SELECT:
  case SQLITE_READ:
  case SQLITE_FUNCTION:
  case SQLITE_TRANSACTION:
    return SQLITE_OK;
  case SQLITE_PRAGMA: // detail::check reads the header: application_id, user_version
    return a2 == nullptr && (is(a1, "application_id") || is(a1, "user_version")) ? SQLITE_OK
                                                                                 : SQLITE_DENY;
  case SQLITE_INSERT:
    return (is(a1, "annotations") || is(a1, "services")) && is(a3, "main") ? SQLITE_OK
                                                                           : SQLITE_DENY;
  case SQLITE_DELETE:
    return is(a1, "services") && is(a3, "main") ? SQLITE_OK : SQLITE_DENY;
  default:
    return SQLITE_DENY;
  }
}

// Opens `path` read-write (never creating it) and checks it is a current rsched database.
result<std::unique_ptr<SQLite::Database>> open_rw(const std::string &path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    const int e = errno;
    return make_error(fmt::format("{}: {}", path, e == ENOENT ? "no such file" : std::strerror(e)),
                      e);
  }
  // A reader of the history (the readers' group) is not a writer: one clear line rather than
  // SQLite's "attempt to write a readonly database" half-way through.
  if (::access(path.c_str(), W_OK) != 0 && (errno == EACCES || errno == EPERM)) {
    return make_error(fmt::format("{}: annotations are written as root (or the database's "
                                  "owner); this user may read the history, not change it",
                                  path),
                      EACCES);
  }
  // Written in place as root, like rschedd's own writes: only a database (and -wal, -shm) of
  // root's or this user's that nobody else may change or swap (docs/ARCHITECTURE.md, "Databases
  // in shared places"). `real`: the path with its links resolved.
  auto real = database_place(path, std::nullopt);
  if (!real) {
    return make_error(fmt::format("refusing database {}: {}", path, real.err().msg),
                      real.err().errnum);
  }
  return sqlite::sqlite_guard(path + ": ", [&]() -> result<std::unique_ptr<SQLite::Database>> {
    auto db = std::make_unique<SQLite::Database>(*real, SQLite::OPEN_READWRITE, busy_timeout_ms);
    // Connection settings SQLiteCpp has no call for.
    sqlite3 *h = db->getHandle();
    sqlite3_extended_result_codes(h, 1);
    if (sqlite3_db_config(h, SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr) != SQLITE_OK ||
        sqlite3_set_authorizer(h, annotations_only, nullptr) != SQLITE_OK) {
      return make_error(fmt::format("{}: {}", path, sqlite3_errmsg(h)));
    }
    auto state = store::check(h, path);
    if (!state) {
      return state.err();
    }
    if (state->empty()) {
      return make_error(fmt::format("{}: not an rsched database (empty)", path));
    }
    if (state->version == 1) {
      return make_error(fmt::format("{}: schema version 1 has no annotations table (running "
                                    "rschedd once upgrades the file)",
                                    path));
    }
    return db;
  });
}

// All of `v` in one IMMEDIATE transaction (rolled back on any error); their ids into `ids`.
// With `skip_known`, an annotation whose source, start_ns, end_ns and text (exact bytes) equal
// an existing row's (or one added earlier in the same call) is not added but counted in
// `*known`: the lookup runs in the write transaction, so two imports cannot both add it. It
// uses the index on start_ns (annotations_start_ns): no schema change.
result<void> insert_all(SQLite::Database &db, const std::string &path,
                        const std::vector<annotation> &v, std::vector<std::int64_t> *ids,
                        bool skip_known = false, std::size_t *known = nullptr) {
  return sqlite::sqlite_guard(path + ": adding annotations: ", [&]() -> result<void> {
    SQLite::Transaction tx(db, SQLite::TransactionBehavior::IMMEDIATE);
    SQLite::Statement ins(db, "INSERT INTO annotations(start_ns, end_ns, source, text, tags, "
                              "created_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
    SQLite::Statement find(db, "SELECT 1 FROM annotations WHERE start_ns = ?1 AND end_ns IS ?2 "
                               "AND source = ?3 AND text = ?4 LIMIT 1");
    const std::int64_t now = timefmt::realtime_now_ns();
    for (const auto &a : v) {
      if (skip_known) {
        find.reset();
        find.bind(1, a.start_ns);
        if (a.end_ns) {
          find.bind(2, *a.end_ns);
        } else {
          find.bind(2); // NULL: IS matches NULL
        }
        find.bindNoCopy(3, a.source);
        find.bindNoCopy(4, a.text);
        if (find.executeStep()) {
          if (known != nullptr) {
            ++*known;
          }
          continue;
        }
      }
      ins.reset();
      ins.bind(1, a.start_ns);
      if (a.end_ns) {
        ins.bind(2, *a.end_ns);
      } else {
        ins.bind(2); // NULL
      }
      // Exact bytes (the length is passed): embedded NULs and invalid UTF-8 stay data.
      ins.bindNoCopy(3, a.source);
      ins.bindNoCopy(4, a.text);
      ins.bindNoCopy(5, a.tags);
      ins.bind(6, now);
      ins.exec();
      if (ids != nullptr) {
        ids->push_back(db.getLastInsertRowid());
      }
    }
    tx.commit();
    return {};
  });
}

result<void> validate(const annotation &a) {
  if (a.text.empty()) {
    return make_error("text is empty");
  }
  if (a.end_ns && *a.end_ns < a.start_ns) {
    return make_error("end is before start");
  }
  if (a.source.empty()) {
    return make_error("source is empty");
  }
  return {};
}

result<std::vector<detail::incident_record>> records_of(std::string_view content,
                                                        incident_format fmt) {
  if (fmt == incident_format::automatic) {
    std::size_t i = 0;
    while (i < content.size() && std::strchr(" \t\r\n", content[i]) != nullptr) {
      ++i;
    }
    // '[' and '{' start no sensible CSV header; a whole document that is one JSON value (42,
    // "x", true) is a JSON file that holds no incidents, not a CSV file without rows.
    const bool json = i < content.size() && (content[i] == '[' || content[i] == '{');
    fmt = json || detail::is_json_value(content) ? incident_format::json : incident_format::csv;
  }
  if (fmt == incident_format::json) {
    return detail::json_records(content);
  }
  return detail::csv_records(content);
}

} // namespace

result<std::int64_t> add_annotation(const std::string &path, const annotation &a) {
  if (auto r = validate(a); !r) {
    return make_error(fmt::format("{}: annotation: {}", path, r.err().msg));
  }
  auto db = open_rw(path);
  if (!db) {
    return db.err();
  }
  std::vector<std::int64_t> ids;
  if (auto r = insert_all(**db, path, {a}, &ids); !r) {
    return r.err();
  }
  return ids.at(0);
}

result<std::vector<std::string>> set_service(const std::string &path, const std::string &name,
                                             const std::vector<std::string> &patterns) {
  if (name.empty()) {
    return make_error(fmt::format("{}: service: the name is empty", path));
  }
  std::vector<std::string> kept;
  for (const auto &p : patterns) {
    std::string_view v = p;
    if (v.starts_with("pid:") || v.starts_with("tid:")) {
      return make_error(fmt::format("{}: service {}: '{}' changes with every restart; a service "
                                    "is its threads' comm (comm:GLOB) or cgroup (cgroup:PATH)",
                                    path, text::escape_for_terminal(name),
                                    text::escape_for_terminal(p)));
    }
    const std::string_view bare = v.starts_with("cgroup:") ? v.substr(7)
                                  : v.starts_with("comm:") ? v.substr(5)
                                                           : v;
    if (bare.empty()) {
      return make_error(fmt::format("{}: service {}: empty pattern '{}' (a comm, comm:GLOB or "
                                    "cgroup:PATH)",
                                    path, text::escape_for_terminal(name),
                                    text::escape_for_terminal(p)));
    }
    if (std::find(kept.begin(), kept.end(), p) == kept.end()) {
      kept.push_back(p);
    }
  }
  auto db = open_rw(path);
  if (!db) {
    return db.err();
  }
  auto state = store::check((*db)->getHandle(), path);
  if (state && state->version < 19) {
    return make_error(fmt::format("{}: schema version {} has no services table (running this "
                                  "rschedd once upgrades the file)",
                                  path, state->version));
  }
  auto r = sqlite::sqlite_guard(path + ": service: ", [&]() -> result<void> {
    SQLite::Transaction tx(**db, SQLite::TransactionBehavior::IMMEDIATE);
    SQLite::Statement del(**db, "DELETE FROM services WHERE name = ?1");
    del.bindNoCopy(1, name);
    del.exec();
    SQLite::Statement ins(**db, "INSERT INTO services(name, pattern, created_ns) VALUES (?1, ?2, "
                                "?3)");
    const std::int64_t now = timefmt::realtime_now_ns();
    for (const auto &p : kept) {
      ins.reset();
      ins.bindNoCopy(1, name);
      ins.bindNoCopy(2, p);
      ins.bind(3, now);
      ins.exec();
    }
    tx.commit();
    return {};
  });
  if (!r) {
    return r.err();
  }
  return kept;
}

result<std::size_t> import_incidents(const std::string &path, std::string_view content,
                                     incident_format fmt, std::string_view source,
                                     std::int64_t now_ns) {
  incident_import opts;
  opts.format = fmt;
  opts.source = std::string(source);
  opts.now_ns = now_ns;
  auto r = import_incidents(path, content, opts);
  if (!r) {
    return r.err();
  }
  return r->ids.size();
}

namespace {

constexpr std::array<const char *, 5> incident_fields = {"start", "end", "text", "source", "tags"};

bool is_field(std::string_view f) {
  return std::find(incident_fields.begin(), incident_fields.end(), f) != incident_fields.end();
}

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && s.front() == ' ') {
    s.remove_prefix(1);
  }
  while (!s.empty() && s.back() == ' ') {
    s.remove_suffix(1);
  }
  return s;
}

std::string lower_trimmed(std::string_view s) {
  std::string out(trimmed(s));
  for (auto &c : out) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

} // namespace

result<std::vector<std::pair<std::string, std::string>>> parse_import_map(std::string_view text) {
  std::vector<std::pair<std::string, std::string>> out;
  std::size_t i = 0;
  while (i <= text.size()) {
    const auto comma = std::min(text.find(',', i), text.size());
    const std::string_view part = text.substr(i, comma - i);
    const auto eq = part.find('=');
    const std::string field = lower_trimmed(part.substr(0, eq));
    if (eq == std::string_view::npos || field.empty() || trimmed(part.substr(eq + 1)).empty()) {
      return make_error(
          fmt::format("--map: expected FIELD=COLUMN, got '{}'", text::escape_for_terminal(part)));
    }
    if (!is_field(field)) {
      return make_error(fmt::format("--map: unknown field '{}' (start, end, text, source, tags)",
                                    text::escape_for_terminal(field)));
    }
    out.emplace_back(field, std::string(trimmed(part.substr(eq + 1))));
    i = comma + 1;
  }
  return out;
}

namespace {

// How a file's columns become annotations: the file's columns, the column each field is read
// from, and the columns kept as tags "<column>:<value>". Every look-up by name is a hash look-up:
// an export may have tens of thousands of columns (issue 51: each was searched for in the list
// of those seen before it, quadratic in their number).
struct column_plan {
  std::vector<std::string> columns;
  std::unordered_set<std::string> column_set; // the same names
  std::map<std::string, std::string> field_col;
  std::vector<std::string> tag_cols;
  // Whether the file has column `c` (as it spells it).
  [[nodiscard]] bool has(const std::string &c) const { return column_set.contains(c); }
};

// The file's columns, in the order first seen (sorted: a record maps names to values).
void file_columns(const std::vector<detail::incident_record> &recs, column_plan &plan) {
  for (const auto &rec : recs) {
    for (const auto &[k, v] : rec) {
      if (plan.column_set.insert(k).second) {
        plan.columns.push_back(k);
      }
    }
  }
}

// The fields the file's columns name, and those of an export it is recognised as (named in
// `recognised`) with the export's tag columns.
void default_fields(column_plan &plan, std::string &recognised) {
  for (const char *f : incident_fields) {
    if (plan.has(f)) {
      plan.field_col[f] = f;
    }
  }
  // A PagerDuty incidents export (Incidents > Export CSV): no start column, created_on and a
  // description or title.
  if (!plan.has("start") && plan.has("created_on") &&
      (plan.has("description") || plan.has("title"))) {
    recognised = "PagerDuty incidents export";
    plan.field_col["start"] = "created_on";
    if (plan.has("resolved_on")) {
      plan.field_col["end"] = "resolved_on";
    }
    if (!plan.has("text")) {
      plan.field_col["text"] = plan.has("description") ? "description" : "title";
    }
  }
  // Columns kept as tags "<column>:<value>": PagerDuty's service and incident number, which say
  // which incident of which service an annotation is (its text alone often does not).
  if (!recognised.empty()) {
    for (const char *c : {"service_name", "incident_number"}) {
      if (plan.has(c)) {
        plan.tag_cols.emplace_back(c);
      }
    }
  }
}

// The fields --map names, each read from the column it names; errors for an unknown field or
// a column the file lacks.
result<void> apply_map(column_plan &plan,
                       const std::vector<std::pair<std::string, std::string>> &map) {
  // A column named in the map, as the file spells it (CSV headers are lower-cased when read;
  // JSON keys keep their case): matched without regard to case, the first of the file's
  // columns that match.
  std::unordered_map<std::string, const std::string *> by_lower;
  if (!map.empty()) {
    by_lower.reserve(plan.columns.size());
    for (const auto &x : plan.columns) {
      by_lower.emplace(lower_trimmed(x), &x);
    }
  }
  const auto column_named = [&](const std::string &c) -> std::optional<std::string> {
    if (const auto it = by_lower.find(lower_trimmed(c)); it != by_lower.end()) {
      return *it->second;
    }
    return std::nullopt;
  };
  for (const auto &[f, c] : map) {
    if (!is_field(f)) {
      return make_error(fmt::format("importing incidents: --map: unknown field '{}'",
                                    text::escape_for_terminal(f)));
    }
    const auto actual = column_named(c);
    if (!actual) {
      std::string list;
      for (const auto &x : plan.columns) {
        list += (list.empty() ? "" : ", ") + text::escape_for_terminal(x);
      }
      return make_error(fmt::format("importing incidents: --map {}={}: the file has no column "
                                    "'{}' (its columns: {})",
                                    f, text::escape_for_terminal(c), text::escape_for_terminal(c),
                                    list));
    }
    plan.field_col[f] = *actual;
  }
  return {};
}

// The report's mapping (field -> the column or '+'-joined columns it is read from) and the
// columns used for nothing.
void describe_plan(const column_plan &plan, incident_import_report &rep) {
  for (const char *f : incident_fields) {
    std::string from;
    if (const auto it = plan.field_col.find(f); it != plan.field_col.end()) {
      from = it->second;
    }
    if (std::string_view(f) == "tags") {
      for (const auto &c : plan.tag_cols) {
        from += (from.empty() ? "" : "+") + c;
      }
    }
    if (!from.empty()) {
      rep.mapping.emplace_back(f, std::move(from));
    }
  }
  std::unordered_set<std::string_view> used;
  for (const auto &fc : plan.field_col) {
    used.insert(fc.second);
  }
  used.insert(plan.tag_cols.begin(), plan.tag_cols.end());
  for (const auto &c : plan.columns) {
    if (!used.contains(c)) {
      rep.ignored.push_back(c);
    }
  }
}

// The text of `field` in `rec`, nullopt when no column gives it or the record has none (null).
std::optional<std::string> field_text(const detail::incident_record &rec, const column_plan &plan,
                                      const char *field) {
  const auto fc = plan.field_col.find(field);
  if (fc == plan.field_col.end()) {
    return std::nullopt;
  }
  const auto it = rec.find(fc->second);
  if (it == rec.end() || !it->second) {
    return std::nullopt;
  }
  return it->second;
}

// Appends to `tags` the record's tag columns that have a value, as "<column>:<value>".
void add_tag_columns(const detail::incident_record &rec, const column_plan &plan,
                     std::string &tags) {
  for (const auto &c : plan.tag_cols) {
    const auto it = rec.find(c);
    if (it == rec.end() || !it->second || trimmed(*it->second).empty()) {
      continue;
    }
    // Tags are comma-separated: a comma in the value would split the tag.
    std::string v(trimmed(*it->second));
    std::replace(v.begin(), v.end(), ',', ';');
    if (!tags.empty()) {
      tags += ',';
    }
    tags.append(c).append(":").append(v);
  }
}

// Record `r` (0-based) as an annotation, validated; the error names its row.
result<annotation> annotation_of(const detail::incident_record &rec, std::size_t r,
                                 const column_plan &plan, const incident_import &opts,
                                 const timefmt::zone &local) {
  // Rows are numbered from 1 (the first data row after a CSV header, the first JSON object).
  auto bad = [&](const std::string &m) {
    return make_error(fmt::format("importing incidents: row {}: {}", r + 1, m));
  };
  annotation a;
  const auto start = field_text(rec, plan, "start");
  if (!start || start->empty()) {
    return bad("start is missing");
  }
  auto st = timefmt::parse_time(*start, opts.now_ns, local);
  if (!st) {
    return bad("start: " + st.err().msg);
  }
  a.start_ns = *st;
  if (const auto end = field_text(rec, plan, "end"); end && !end->empty()) {
    auto en = timefmt::parse_time(*end, opts.now_ns, local);
    if (!en) {
      return bad("end: " + en.err().msg);
    }
    a.end_ns = *en;
  }
  const auto text = field_text(rec, plan, "text");
  a.text = text ? *text : std::string();
  const auto src = field_text(rec, plan, "source");
  a.source = src && !src->empty() ? *src : opts.source;
  const auto tags = field_text(rec, plan, "tags");
  a.tags = tags ? *tags : std::string();
  add_tag_columns(rec, plan, a.tags);
  if (auto v = validate(a); !v) {
    return bad(v.err().msg);
  }
  return a;
}

} // namespace

result<incident_import_report> import_incidents(const std::string &path, std::string_view content,
                                                const incident_import &opts) {
  auto recs = records_of(content, opts.format);
  if (!recs) {
    return make_error(fmt::format("importing incidents: {}", recs.err().msg));
  }
  incident_import_report rep;
  column_plan plan;
  file_columns(*recs, plan);
  default_fields(plan, rep.recognised);
  if (auto r = apply_map(plan, opts.map); !r) {
    return r.err();
  }
  if (!recs->empty() && !plan.field_col.contains("start")) {
    return make_error("importing incidents: no start column (name one: --map start=COLUMN)");
  }
  // A column --map gave a field is not a tag as well.
  std::erase_if(plan.tag_cols, [&](const std::string &c) {
    return std::any_of(plan.field_col.begin(), plan.field_col.end(),
                       [&](const auto &fc) { return fc.second == c; });
  });
  describe_plan(plan, rep);
  const timefmt::zone local = timefmt::zone::local();
  std::vector<annotation> out;
  for (std::size_t r = 0; r < recs->size(); ++r) {
    auto a = annotation_of((*recs)[r], r, plan, opts, local);
    if (!a) {
      return a.err();
    }
    out.push_back(std::move(*a));
  }
  auto db = open_rw(path);
  if (!db) {
    return db.err();
  }
  if (auto r = insert_all(**db, path, out, &rep.ids, true, &rep.already); !r) {
    return r.err();
  }
  return rep;
}

} // namespace rsched::query
