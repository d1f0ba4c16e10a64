#include "rsched/query/reader.hpp"

#include "rsched/query/sql_lint.hpp"
#include "rsched/sqlite/quote.hpp"
#include "rsched/sqlite/statement.hpp"
#include "rsched/store/schema.hpp"

#include "sql_functions.hpp"
#include "vtab_tiered.hpp"

#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Exception.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <map>
#include <set>
#include <sqlite3.h>
#include <string_view>
#include <utility>
#include <vector>

namespace rsched::query {

namespace {

constexpr int busy_timeout_ms = 2000;

// First byte at or after `p` that is not whitespace or inside an SQL comment: where SQLite
// considers the next statement to start.
const char *skip_blank(const char *p, const char *end) {
  while (p < end) {
    const char c = *p;
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
      ++p;
    } else if (c == '-' && p + 1 < end && p[1] == '-') {
      while (p < end && *p != '\n') {
        ++p;
      }
    } else if (c == '/' && p + 1 < end && p[1] == '*') {
      p += 2;
      while (p < end && !(*p == '*' && p + 1 < end && p[1] == '/')) {
        ++p;
      }
      p = p < end ? p + 2 : end;
    } else {
      break;
    }
  }
  return p;
}

// "line L" or "line L, column C" (1-based, columns in UTF-8 code points) of `pos` in `sql`.
std::string position(std::string_view sql, std::size_t pos, bool with_column) {
  std::size_t line = 1;
  std::size_t line_start = 0;
  for (std::size_t i = 0; i < pos && i < sql.size(); ++i) {
    if (sql[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  if (!with_column) {
    return fmt::format("line {}", line);
  }
  std::size_t col = 1;
  for (std::size_t i = line_start; i < pos && i < sql.size(); ++i) {
    if ((static_cast<unsigned char>(sql[i]) & 0xC0) != 0x80) {
      ++col;
    }
  }
  return fmt::format("line {}, column {}", line, col);
}

value column_value(sqlite3_stmt *st, int i) {
  switch (sqlite3_column_type(st, i)) {
  case SQLITE_INTEGER:
    return std::int64_t{sqlite3_column_int64(st, i)};
  case SQLITE_FLOAT:
    return sqlite3_column_double(st, i);
  case SQLITE_TEXT: {
    // Pointer first, then the length of that representation (sqlite3_column_bytes after
    // sqlite3_column_text): the exact stored bytes, embedded NULs and invalid UTF-8 included.
    const unsigned char *p = sqlite3_column_text(st, i);
    const int n = sqlite3_column_bytes(st, i);
    if (p == nullptr) {
      return std::string();
    }
    return std::string(reinterpret_cast<const char *>(p), static_cast<std::size_t>(n));
  }
  case SQLITE_BLOB: {
    const auto *p = static_cast<const std::uint8_t *>(sqlite3_column_blob(st, i));
    const int n = sqlite3_column_bytes(st, i);
    if (p == nullptr) {
      return std::vector<std::uint8_t>();
    }
    return std::vector<std::uint8_t>(p, p + n);
  }
  default:
    return std::monostate{};
  }
}

} // namespace

std::optional<std::int64_t> row_view::int_at(int i) const {
  switch (sqlite3_column_type(st_, i)) {
  case SQLITE_INTEGER:
    return sqlite3_column_int64(st_, i);
  case SQLITE_FLOAT:
    return static_cast<std::int64_t>(sqlite3_column_double(st_, i));
  default:
    return std::nullopt;
  }
}

std::optional<std::string_view> row_view::text_at(int i) const {
  if (sqlite3_column_type(st_, i) != SQLITE_TEXT) {
    return std::nullopt;
  }
  const unsigned char *p = sqlite3_column_text(st_, i); // pointer first, then its length
  const int n = sqlite3_column_bytes(st_, i);
  if (p == nullptr) {
    return std::string_view();
  }
  return std::string_view(reinterpret_cast<const char *>(p), static_cast<std::size_t>(n));
}

std::optional<std::span<const std::uint8_t>> row_view::blob_at(int i) const {
  if (sqlite3_column_type(st_, i) != SQLITE_BLOB) {
    return std::nullopt;
  }
  const auto *p = static_cast<const std::uint8_t *>(sqlite3_column_blob(st_, i));
  const int n = sqlite3_column_bytes(st_, i);
  if (p == nullptr) {
    return std::span<const std::uint8_t>();
  }
  return std::span<const std::uint8_t>(p, static_cast<std::size_t>(n));
}

value row_view::value_at(int i) const {
  return column_value(st_, i);
}

namespace {

// A read-only connection to a WAL database needs its -shm (and -wal) file, and cannot create
// them without write access to the directory. rschedd keeps both files (SQLITE_FCNTL_PERSIST_WAL),
// so they are only missing when someone removed them; SQLite's own message ("attempt to write a
// readonly database") does not say so.
error with_wal_hint(error e, const std::string &path, bool read_only) {
  struct stat st {};
  if (read_only && stat((path + "-shm").c_str(), &st) != 0) {
    e.msg += fmt::format(" ({}-shm is missing and a read-only reader cannot create it; opening "
                         "the database once with rschedd or as its owner recreates it)",
                         path);
  }
  return e;
}

// ---- The read-only guard (an SQLite authorizer) ----
//
// SQLITE_OPEN_READONLY keeps this connection from writing the database file, but not from
// writing other files: VACUUM INTO creates (or fills an empty) file with a copy of the database
// (world-readable under root's umask, while the database is 0640), and ATTACH opens another
// database. The authorizer runs while SQLite compiles each statement (and the statements SQLite
// runs itself, such as VACUUM's ATTACH of its target) and refuses everything that writes, except
// TEMP objects: they live in the connection's own temporary database (memory or an unnamed,
// already unlinked temporary file), which nothing else can see.

// Read-only PRAGMAs a query may run without an argument (the pragma_* table functions run
// them too). Everything else (assignments, checkpoints, optimize, incremental_vacuum, ...) is
// refused.
constexpr std::string_view query_pragmas[] = {
    "application_id",   "auto_vacuum",        "automatic_index",
    "busy_timeout",     "cache_size",         "cache_spill",
    "cell_size_check",  "collation_list",     "compile_options",
    "data_version",     "database_list",      "defer_foreign_keys",
    "encoding",         "foreign_key_check",  "foreign_keys",
    "freelist_count",   "fullfsync",          "function_list",
    "integrity_check",  "journal_mode",       "journal_size_limit",
    "locking_mode",     "max_page_count",     "mmap_size",
    "module_list",      "page_count",         "page_size",
    "pragma_list",      "query_only",         "quick_check",
    "read_uncommitted", "recursive_triggers", "reverse_unordered_selects",
    "schema_version",   "secure_delete",      "synchronous",
    "table_list",       "temp_store",         "threads",
    "trusted_schema",   "user_version",       "wal_autocheckpoint",
    "writable_schema",
};
// PRAGMAs whose argument only names what to read (a table, an index, a row limit).
constexpr std::string_view lookup_pragmas[] = {
    "foreign_key_check", "foreign_key_list", "index_info", "index_list", "index_xinfo",
    "integrity_check",   "quick_check",      "table_info", "table_list", "table_xinfo",
};

bool same_name(const char *a, std::string_view b) {
  return a != nullptr && std::strlen(a) == b.size() &&
         sqlite3_strnicmp(a, b.data(), static_cast<int>(b.size())) == 0;
}

template <std::size_t N> bool one_of(const char *name, const std::string_view (&list)[N]) {
  for (const auto &n : list) {
    if (same_name(name, n)) {
      return true;
    }
  }
  return false;
}

bool is_temp(const char *db_name) {
  return same_name(db_name, "temp");
}

const char *or_empty(const char *s) {
  return s != nullptr ? s : "";
}

} // namespace

namespace detail {

// State of the guard: the verb of the statement being compiled (for the message) and, once the
// authorizer refused something, why.
struct guard_state {
  std::string verb;
  std::string denied;
  // Over several hosts: the TEMP views that combine them. Dropping one would let its name fall
  // through to the first host's own object, which is one host's rows under the combined name.
  std::vector<std::string> host_views;
};

} // namespace detail

namespace {

int guard_deny(detail::guard_state &g, std::string why) {
  if (g.denied.empty()) {
    g.denied = std::move(why);
  }
  return SQLITE_DENY;
}

// SQLite authorizer callback (sqlite3_set_authorizer): a1..a4 as documented for each action.
int guard_authorize(void *user, int action, const char *a1, const char *a2, const char *a3,
                    const char * /*a4*/) {
  auto &g = *static_cast<detail::guard_state *>(user);
  const std::string object = or_empty(a1);
  switch (action) {
  case SQLITE_SELECT:
  case SQLITE_READ:
  case SQLITE_RECURSIVE:
  case SQLITE_TRANSACTION:
  case SQLITE_SAVEPOINT:
    return SQLITE_OK;
  case SQLITE_FUNCTION:
    // a2 is the function's name. load_extension is off anyway (never enabled on this
    // connection); refused here too so that no build of SQLite turns it on.
    if (same_name(a2, "load_extension")) {
      return guard_deny(g, "load_extension loads code");
    }
    return SQLITE_OK;
  case SQLITE_CREATE_TEMP_INDEX:
  case SQLITE_CREATE_TEMP_TABLE:
  case SQLITE_CREATE_TEMP_TRIGGER:
  case SQLITE_CREATE_TEMP_VIEW:
  case SQLITE_DROP_TEMP_INDEX:
  case SQLITE_DROP_TEMP_TABLE:
  case SQLITE_DROP_TEMP_TRIGGER:
    return SQLITE_OK;
  case SQLITE_DROP_TEMP_VIEW: // a1 = view
    for (const auto &v : g.host_views) {
      if (same_name(a1, v)) {
        return guard_deny(g, fmt::format("DROP VIEW {}: it combines the hosts' rows (--host)", v));
      }
    }
    return SQLITE_OK;
  case SQLITE_INSERT:
  case SQLITE_UPDATE:
  case SQLITE_DELETE: {
    if (is_temp(a3)) {
      return SQLITE_OK;
    }
    const bool schema_table = same_name(a1, "sqlite_master") || same_name(a1, "sqlite_schema");
    // SQLite updates the schema table of "main" while it declares a virtual table (the
    // pragma_* and rsched's table functions). Nothing else can: user statements may not modify
    // it without writable_schema, which is refused (and SQLITE_DBCONFIG_DEFENSIVE is on).
    if (action == SQLITE_UPDATE && schema_table) {
      return SQLITE_OK;
    }
    if (schema_table) { // CREATE, DROP, ... of a table, view, index or trigger
      return guard_deny(g, fmt::format("{} changes the schema; TEMP tables and views are allowed",
                                       g.verb.empty() ? "the statement" : g.verb));
    }
    const char *what = action == SQLITE_INSERT   ? "INSERT INTO"
                       : action == SQLITE_UPDATE ? "UPDATE"
                                                 : "DELETE FROM";
    return guard_deny(g, fmt::format("{} {}: the database is opened readonly; annotations are "
                                     "added with mark, .mark or .import-incidents",
                                     what, object));
  }
  case SQLITE_ALTER_TABLE: // a1 = database, a2 = table
    if (is_temp(a1)) {
      return SQLITE_OK;
    }
    return guard_deny(g, fmt::format("ALTER TABLE {} writes", or_empty(a2)));
  case SQLITE_CREATE_VTABLE: // a1 = table, a2 = module, a3 = database
  case SQLITE_DROP_VTABLE:
    if (is_temp(a3)) {
      return SQLITE_OK;
    }
    return guard_deny(
        g, fmt::format("{} {} writes the schema",
                       action == SQLITE_CREATE_VTABLE ? "CREATE VIRTUAL TABLE" : "DROP TABLE",
                       object));
  case SQLITE_PRAGMA: { // a1 = name, a2 = argument or NULL, a3 = database or NULL
    if (a2 == nullptr ? one_of(a1, query_pragmas) : one_of(a1, lookup_pragmas)) {
      return SQLITE_OK;
    }
    return guard_deny(g, a2 == nullptr
                             ? fmt::format("PRAGMA {} is not a read-only query", object)
                             : fmt::format("PRAGMA {} = {} changes a setting", object, a2));
  }
  case SQLITE_ATTACH: // a1 = file name; SQLite's own VACUUM attaches its target this way
    if (g.verb.rfind("VACUUM", 0) == 0) {
      return guard_deny(g, a1 != nullptr && *a1 != '\0' ? "VACUUM INTO writes a copy"
                                                        : "VACUUM rewrites the database");
    }
    return guard_deny(g, "ATTACH opens another database file");
  case SQLITE_DETACH:
    return guard_deny(g, "DETACH: nothing can be attached");
  case SQLITE_ANALYZE:
    return guard_deny(g, "ANALYZE writes statistics into the database");
  case SQLITE_REINDEX: // a1 = index, a3 = database (CREATE INDEX on a TEMP table fills it so)
    if (is_temp(a3)) {
      return SQLITE_OK;
    }
    return guard_deny(g, "REINDEX rewrites indexes");
  case SQLITE_CREATE_INDEX:
  case SQLITE_CREATE_TABLE:
  case SQLITE_CREATE_TRIGGER:
  case SQLITE_CREATE_VIEW:
    return guard_deny(
        g, fmt::format("CREATE {} writes the schema (CREATE TEMP objects are allowed)", object));
  case SQLITE_DROP_INDEX:
  case SQLITE_DROP_TABLE:
  case SQLITE_DROP_TRIGGER:
  case SQLITE_DROP_VIEW:
    return guard_deny(g, fmt::format("DROP {} writes the schema", object));
  default:
    return guard_deny(g, fmt::format("statement kind {} is not known to be read-only", action));
  }
}

// The one-line error of a refused statement.
std::string not_allowed(const detail::guard_state &g) {
  return fmt::format("not allowed: rsched-sql only reads the database ({})", g.denied);
}

// The keyword at `p` (upper case; empty when `p` is not at a keyword); `p` moves past it and
// the blanks and comments after it.
std::string next_word(const char *&p, const char *end) {
  std::string w;
  while (p < end && ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_')) {
    w += static_cast<char>(*p >= 'a' ? *p - 'a' + 'A' : *p);
    ++p;
  }
  p = skip_blank(p, end);
  return w;
}

// "VACUUM INTO" when the statement at `p` is one ("VACUUM [schema] INTO ..."), else its first
// keyword (upper case), for the guard's messages.
std::string statement_verb(const char *p, const char *end) {
  std::string verb = next_word(p, end);
  if (verb == "VACUUM") {
    std::string w = next_word(p, end);
    if (w != "INTO" && !w.empty()) {
      w = next_word(p, end);
    }
    if (w == "INTO") {
      verb += " INTO";
    }
  }
  return verb;
}

} // namespace

struct reader::impl {
  // Declared first: destroyed after the connection, whose functions and authorizer point to them.
  detail::fn_context ctx;
  detail::tier_router router;                 // the routed data views (vtab_tiered.hpp)
  std::unique_ptr<detail::guard_state> guard; // null: writable connection (tests, :memory:)
  // open_hosts: each host's own connection (ctx.hosts points into them), and their names.
  std::vector<reader> host_readers;
  std::vector<std::string> host_names;
  std::string path;                            // the file opened (open), for twin()
  std::shared_ptr<detail::twin_slots> twin_of; // a twin: its original's slots (left at close)
  SQLite::Database db;
  explicit impl(SQLite::Database &&d) : db(std::move(d)) {}
  impl(const impl &) = delete;
  impl &operator=(const impl &) = delete;
  ~impl() {
    if (twin_of) {
      sqlite3 *const h = db.getHandle();
      for (auto &slot : twin_of->db) {
        sqlite3 *expected = h;
        slot.compare_exchange_strong(expected, nullptr);
      }
    }
  }
};

namespace {

// No statement run through this connection writes anything (see guard_authorize); DEFENSIVE
// also keeps the schema table and shadow tables out of reach, and extensions stay off.
result<void> make_read_only(std::unique_ptr<detail::guard_state> &slot, sqlite3 *h,
                            const std::string &what) {
  slot = std::make_unique<detail::guard_state>();
  if (sqlite3_db_config(h, SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr) != SQLITE_OK ||
      sqlite3_db_config(h, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, nullptr) != SQLITE_OK ||
      sqlite3_set_authorizer(h, guard_authorize, slot.get()) != SQLITE_OK) {
    return make_error(
        fmt::format("{}: cannot make the connection read-only: {}", what, sqlite3_errmsg(h)));
  }
  return {};
}

} // namespace

result<reader> reader::open(const std::string &path, bool read_only) {
  const bool memory = path == ":memory:";
  if (!memory) {
    // Checked first for a clear message; SQLite is never asked to create the file.
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) {
      const int e = errno;
      return make_error(
          fmt::format("{}: {}", path, e == ENOENT ? "no such file" : std::strerror(e)), e);
    }
    if (S_ISDIR(st.st_mode)) {
      return make_error(fmt::format("{}: is a directory", path), EISDIR);
    }
    // SQLite would open a FIFO and wait for a writer forever (another user may plant one at a
    // path root reads), or read a device.
    if (!S_ISREG(st.st_mode)) {
      return make_error(fmt::format("{}: not a regular file (a FIFO, socket or device)", path),
                        EINVAL);
    }
  }
  try {
    int flags = read_only ? SQLite::OPEN_READONLY : SQLite::OPEN_READWRITE;
    if (memory) {
      flags = SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE;
    }
    // A reader is used by one thread at a time (interrupt() may come from another: SQLite
    // allows that in any threading mode): without the connection's mutex, each of the
    // millions of sqlite3_step and sqlite3_column calls of a long window no longer locks and
    // unlocks it.
    flags |= SQLite::OPEN_NOMUTEX;
    SQLite::Database db(path, flags, busy_timeout_ms);
    sqlite3 *h = db.getHandle();
    sqlite3_extended_result_codes(h, 1);
    if (auto r = store::register_storage(h); !r) {
      return make_error(fmt::format("{}: {}", path, r.err().msg));
    }

    auto state = store::check(h, path);
    if (!state) {
      return with_wal_hint(state.err(), path, read_only && !memory);
    }
    if (state->empty()) {
      if (!memory) {
        return make_error(fmt::format("{}: not an rsched database (empty)", path));
      }
      // An in-memory database gets the schema, so that queries, views and functions can be
      // tried (and tested) without a daemon.
      if (auto r = store::create(h, path); !r) {
        return r.err();
      }
    }
    auto p = std::make_unique<impl>(std::move(db));
    if (auto r = detail::register_functions(p->db.getHandle(), &p->ctx); !r) {
      return make_error(fmt::format("{}: {}", path, r.err().msg));
    }
    // Sorts and groups of long windows (hist blobs by the ten thousand) stay in memory instead
    // of spilling to temporary files, and the pages of a query's window are cached once read.
    if (auto r = sqlite::exec(h, "PRAGMA temp_store = MEMORY; PRAGMA cache_size = -65536"); !r) {
      return make_error(fmt::format("{}: {}", path, r.err().msg));
    }
    // The data views answer long windows from the rollups (schema 10 on).
    if (auto r = detail::register_tiered_module(h, &p->router); !r) {
      return make_error(fmt::format("{}: {}", path, r.err().msg));
    }
    if (auto r = detail::shadow_tiered_views(h); !r) {
      return make_error(fmt::format("{}: {}", path, r.err().msg));
    }
    if (read_only) {
      if (auto r = make_read_only(p->guard, h, path); !r) {
        return r.err();
      }
    }
    p->path = path;
    return reader(std::move(p));
  } catch (const SQLite::Exception &e) {
    return with_wal_hint(make_error(fmt::format("{}: {}", path, e.what())), path,
                         read_only && !memory);
  } catch (const std::exception &e) {
    return make_error(fmt::format("{}: {}", path, e.what()));
  }
}

namespace {

// Host names and the files' object and column names are data, whatever they hold.
std::string ident(std::string_view s) {
  return sqlite::sql_ident(s);
}
std::string literal(std::string_view s) {
  return sqlite::sql_literal(s);
}

// `path` as a read-only SQLite URI (https://sqlite.org/uri.html): every byte but the unreserved
// ones percent-encoded, so that '?', '#' and '%' in a file name stay part of it. mode=ro, not
// immutable: rschedd may be writing the file.
std::string read_only_uri(const std::string &path) {
  std::string out = !path.empty() && path.front() == '/' ? "file://" : "file:";
  for (const char ch : path) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '.' || c == '_' || c == '~' || c == '/') {
      out += ch;
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out + "?mode=ro";
}

// The names of a statement's first column, every row.
result<std::vector<std::string>> names_of(sqlite3 *db, const std::string &sql,
                                          const std::vector<std::string> &params) {
  auto st = sqlite::prepare_stmt(db, sql);
  if (!st) {
    return st.err();
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    sqlite3_bind_text(st->get(), static_cast<int>(i + 1), params[i].data(),
                      static_cast<int>(params[i].size()), SQLITE_TRANSIENT);
  }
  std::vector<std::string> out;
  int rc = 0;
  while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
    out.push_back(sqlite::column_text(st->get(), 0));
  }
  if (rc != SQLITE_DONE) {
    return make_error(sqlite3_errmsg(db));
  }
  return out;
}

bool same_text_nocase(const std::string &a, const std::string &b) {
  return a.size() == b.size() &&
         sqlite3_strnicmp(a.data(), b.data(), static_cast<int>(a.size())) == 0;
}

// What a host's file holds: its schema version and, per table or view, its columns.
struct host_schema {
  std::int64_t version = 0;
  std::map<std::string, std::vector<std::string>> objects;
};

// The TEMP views of a connection over several hosts (returns their names): for each table and
// view of any host, the UNION ALL of the hosts that have it, `host` first, then the columns of
// the newest schema that has it (a schema only adds columns, docs/SCHEMA.md "Stability";
// timeline's v6 reorder is met by naming every column), NULL where a host's file lacks one.
result<std::vector<std::string>> create_host_views(sqlite3 *db, const std::vector<host_file> &hosts,
                                                   const std::vector<host_schema> &schemas) {
  std::set<std::string> names;
  for (const auto &s : schemas) {
    for (const auto &[name, cols] : s.objects) {
      names.insert(name);
    }
  }
  for (const auto &name : names) {
    // The columns: from the newest host that has the object, then any others' extra ones.
    std::vector<std::size_t> order(hosts.size());
    for (std::size_t i = 0; i < order.size(); ++i) {
      order[i] = i;
    }
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return schemas[a].version > schemas[b].version;
    });
    std::vector<std::string> cols;
    for (const std::size_t i : order) {
      const auto it = schemas[i].objects.find(name);
      if (it == schemas[i].objects.end()) {
        continue;
      }
      for (const auto &c : it->second) {
        if (same_text_nocase(c, "host")) {
          return make_error(fmt::format("host {}: {}: {} already has a column named host",
                                        hosts[i].name, hosts[i].path, name));
        }
        if (std::find(cols.begin(), cols.end(), c) == cols.end()) {
          cols.push_back(c);
        }
      }
    }
    std::string sql = "CREATE TEMP VIEW " + ident(name) + " AS";
    bool first = true;
    for (std::size_t i = 0; i < hosts.size(); ++i) {
      const auto it = schemas[i].objects.find(name);
      if (it == schemas[i].objects.end()) {
        continue;
      }
      sql += first ? "\n  SELECT " : "\n  UNION ALL SELECT ";
      first = false;
      sql += literal(hosts[i].name) + " AS host";
      for (const auto &c : cols) {
        const bool has = std::find(it->second.begin(), it->second.end(), c) != it->second.end();
        sql += ", " + (has ? ident(c) : "NULL AS " + ident(c));
      }
      sql += " FROM " + ident(hosts[i].name) + "." + ident(name);
    }
    if (auto r = sqlite::exec(db, sql.c_str()); !r) {
      return make_error(fmt::format("combining {} of the hosts: {}", name, r.err().msg));
    }
  }
  return std::vector<std::string>(names.begin(), names.end());
}

// Checks the hosts given to open_hosts: their number (at most reader::max_hosts()) and their
// names (non-empty, no NUL, not SQLite's own schemas, distinct regardless of case).
result<void> check_hosts(const std::vector<host_file> &hosts) {
  if (hosts.empty()) {
    return make_error("no host given", EINVAL);
  }
  if (hosts.size() > static_cast<std::size_t>(reader::max_hosts())) {
    return make_error(fmt::format("{} hosts given; at most {} can be read together (SQLite's "
                                  "limit of attached databases)",
                                  hosts.size(), reader::max_hosts()),
                      EINVAL);
  }
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    const std::string &n = hosts[i].name;
    if (n.empty()) {
      return make_error("a host name is empty", EINVAL);
    }
    if (n.find('\0') != std::string::npos) { // SQLite's names end at the first NUL
      return make_error("a host name holds a NUL byte", EINVAL);
    }
    if (same_text_nocase(n, "main") || same_text_nocase(n, "temp")) {
      return make_error(fmt::format("host name '{}' is reserved (SQLite's own schemas)", n),
                        EINVAL);
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (same_text_nocase(n, hosts[j].name)) {
        return make_error(fmt::format("host name '{}' is given twice", n), EINVAL);
      }
    }
  }
  return {};
}

// Opens each host's file on its own, as reader::open does (the single-database checks and
// messages, and the connection the table functions run on); a file given twice is refused.
result<std::vector<reader>> open_each(const std::vector<host_file> &hosts) {
  std::vector<reader> own;
  std::vector<std::pair<dev_t, ino_t>> files;
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    auto r = reader::open(hosts[i].path, true);
    if (!r) {
      return make_error(fmt::format("host {}: {}", hosts[i].name, r.err().msg), r.err().errnum);
    }
    struct stat st {};
    if (stat(hosts[i].path.c_str(), &st) == 0) {
      for (std::size_t j = 0; j < files.size(); ++j) {
        if (files[j] == std::pair{st.st_dev, st.st_ino}) {
          return make_error(fmt::format("host {}: {} is the same file as host {}'s (its rows "
                                        "would count twice)",
                                        hosts[i].name, hosts[i].path, hosts[j].name),
                            EINVAL);
        }
      }
      files.emplace_back(st.st_dev, st.st_ino);
    }
    own.push_back(std::move(r).value());
  }
  return own;
}

// Attaches each host's file read-only (URI mode=ro) to the hosts' connection `h`, under the
// host's name.
result<void> attach_hosts(sqlite3 *h, const std::vector<host_file> &hosts) {
  for (const auto &host : hosts) {
    auto st = sqlite::prepare_stmt(h, "ATTACH DATABASE ?1 AS ?2");
    if (!st) {
      return make_error(fmt::format("host {}: {}", host.name, st.err().msg));
    }
    const std::string uri = read_only_uri(host.path);
    sqlite3_bind_text(st->get(), 1, uri.data(), static_cast<int>(uri.size()), SQLITE_TRANSIENT);
    sqlite3_bind_text(st->get(), 2, host.name.data(), static_cast<int>(host.name.size()),
                      SQLITE_TRANSIENT);
    if (sqlite3_step(st->get()) != SQLITE_DONE) {
      return with_wal_hint(
          make_error(fmt::format("host {}: {}: {}", host.name, host.path, sqlite3_errmsg(h))),
          host.path, true);
    }
  }
  return {};
}

// Each host's host_schema: its version from its own connection (`own[i]`), its tables, views
// and their columns through the hosts' connection `h` (the files attached).
result<std::vector<host_schema>> read_host_schemas(sqlite3 *h, const std::vector<host_file> &hosts,
                                                   const std::vector<sqlite3 *> &own) {
  std::vector<host_schema> schemas(hosts.size());
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    auto v = sqlite::query_int(own[i], "PRAGMA user_version");
    schemas[i].version = v ? *v : 0;
    auto objs = names_of(h,
                         "SELECT name FROM " + ident(hosts[i].name) +
                             ".sqlite_master WHERE type IN ('table', 'view') AND name NOT "
                             "LIKE 'sqlite\\_%' ESCAPE '\\'",
                         {});
    if (!objs) {
      return make_error(
          fmt::format("host {}: {}: {}", hosts[i].name, hosts[i].path, objs.err().msg));
    }
    for (const auto &o : *objs) {
      auto cols = names_of(h, "SELECT name FROM pragma_table_info(?1, ?2)", {o, hosts[i].name});
      if (!cols) {
        return make_error(
            fmt::format("host {}: {}: {}: {}", hosts[i].name, hosts[i].path, o, cols.err().msg));
      }
      schemas[i].objects[o] = std::move(*cols);
    }
  }
  return schemas;
}

// open_hosts' note: the hosts' schema versions when they differ, else "".
std::string schema_note(const std::vector<host_file> &hosts,
                        const std::vector<host_schema> &schemas) {
  std::string versions;
  bool differ = false;
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    versions += fmt::format("{}{} {}", i == 0 ? "" : ", ", hosts[i].name, schemas[i].version);
    differ = differ || schemas[i].version != schemas[0].version;
  }
  if (!differ) {
    return {};
  }
  return fmt::format(
      "the hosts' files have different schema versions ({}): in the combined views a "
      "column a host's file lacks is NULL in its rows, a view it lacks has no rows of it "
      "(docs/SCHEMA.md, Stability)",
      versions);
}

} // namespace

int reader::max_hosts() {
  sqlite3 *db = nullptr;
  int n = 10; // SQLITE_MAX_ATTACHED's default
  if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) ==
      SQLITE_OK) {
    n = sqlite3_limit(db, SQLITE_LIMIT_ATTACHED, -1);
  }
  sqlite3_close(db);
  return n;
}

result<reader> reader::open_hosts(const std::vector<host_file> &hosts, std::string *note) {
  if (note != nullptr) {
    note->clear();
  }
  if (auto r = check_hosts(hosts); !r) {
    return r.err();
  }
  // Each file on its own first: the single-database checks and messages, and the connection the
  // table functions run on.
  auto own = open_each(hosts);
  if (!own) {
    return own.err();
  }
  try {
    SQLite::Database db(":memory:", SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE | SQLite::OPEN_URI,
                        busy_timeout_ms);
    auto p = std::make_unique<impl>(std::move(db));
    sqlite3 *h = p->db.getHandle();
    sqlite3_extended_result_codes(h, 1);
    if (auto r = attach_hosts(h, hosts); !r) {
      return r.err();
    }
    std::vector<sqlite3 *> own_dbs;
    for (std::size_t i = 0; i < hosts.size(); ++i) {
      reader &o = (*own)[i];
      p->ctx.hosts.push_back({hosts[i].name, o.p_->db.getHandle(), &o.p_->ctx});
      p->host_names.push_back(hosts[i].name);
      own_dbs.push_back(o.p_->db.getHandle());
    }
    // Functions before the views: the files' views call them (annotation_summary), and
    // pragma_table_info compiles a view to name its columns.
    if (auto r = store::register_storage(h); !r) {
      return r.err();
    }
    if (auto r = detail::register_functions(h, &p->ctx); !r) {
      return r.err();
    }
    auto schemas = read_host_schemas(h, hosts, own_dbs);
    if (!schemas) {
      return schemas.err();
    }
    auto views = create_host_views(h, hosts, *schemas);
    if (!views) {
      return views.err();
    }
    if (auto r = make_read_only(p->guard, h, "the hosts' connection"); !r) {
      return r.err();
    }
    p->guard->host_views = std::move(*views);
    p->host_readers = std::move(*own);
    if (note != nullptr) {
      *note = schema_note(hosts, *schemas);
    }
    return reader(std::move(p));
  } catch (const SQLite::Exception &e) {
    return make_error(fmt::format("opening the hosts: {}", e.what()));
  } catch (const std::exception &e) {
    return make_error(fmt::format("opening the hosts: {}", e.what()));
  }
}

result<reader> reader::twin() {
  if (!p_ || !p_->host_names.empty() || p_->path.empty() || p_->path == ":memory:") {
    return make_error("no second connection to an in-memory database or over several hosts");
  }
  auto t = open(p_->path, true);
  if (!t) {
    return t.err();
  }
  impl &c = *t->p_;
  const detail::fn_context &from = p_->ctx;
  c.ctx.zone = from.zone;
  c.ctx.fixed_now = from.fixed_now;
  c.ctx.annotation_margin_ns = from.annotation_margin_ns;
  c.ctx.tier_routing = from.tier_routing;
  c.ctx.parallel = from.parallel;
  c.router.enabled = p_->router.enabled;
  for (auto &slot : from.twins->db) {
    sqlite3 *expected = nullptr;
    if (slot.compare_exchange_strong(expected, c.db.getHandle())) {
      c.twin_of = from.twins;
      break;
    }
  }
  return t;
}

void reader::set_parallel(bool on) {
  if (p_) {
    p_->ctx.parallel = on;
  }
}

bool reader::parallel() const {
  return p_ && p_->ctx.parallel;
}

const std::vector<std::string> &reader::hosts() const {
  static const std::vector<std::string> none;
  return p_ ? p_->host_names : none;
}

void reader::set_tier_routing(bool on) {
  if (p_) {
    p_->router.enabled = on;
    p_->ctx.tier_routing = on;
  }
}

bool reader::tier_routing() const {
  return p_ && p_->router.enabled;
}

std::vector<tier_read> reader::take_tier_reads() {
  if (!p_) {
    return {};
  }
  return std::exchange(p_->router.reads, {});
}

void reader::on_notice(std::function<void(const std::string &)> f, std::int64_t rows) {
  if (p_) {
    p_->router.warn = std::move(f);
    p_->router.warn_rows = rows;
  }
}

namespace {

// Binds one value to parameter `i` of `st`.
result<void> bind_value(sqlite3_stmt *st, int i, const value &v) {
  int rc = SQLITE_OK;
  if (const auto *n = std::get_if<std::int64_t>(&v)) {
    rc = sqlite3_bind_int64(st, i, *n);
  } else if (const auto *d = std::get_if<double>(&v)) {
    rc = sqlite3_bind_double(st, i, *d);
  } else if (const auto *t = std::get_if<std::string>(&v)) {
    rc = sqlite3_bind_text64(st, i, t->data(), t->size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  } else if (const auto *b = std::get_if<std::vector<std::uint8_t>>(&v)) {
    rc = sqlite3_bind_blob64(st, i, b->data(), b->size(), SQLITE_TRANSIENT);
  } else {
    rc = sqlite3_bind_null(st, i);
  }
  if (rc != SQLITE_OK) {
    return make_error(fmt::format("binding parameter {}: {}", i, sqlite3_errstr(rc)));
  }
  return {};
}

} // namespace

result<void> reader::exec(std::string_view sql, const result_sink &sink) {
  return exec_bound(sql, nullptr, sink);
}

result<void> reader::exec(std::string_view sql, const std::vector<value> &params,
                          const result_sink &sink) {
  return exec_bound(sql, &params, sink);
}

result<void> reader::exec_bound(std::string_view sql, const std::vector<value> *params,
                                const result_sink &sink) {
  if (!p_) {
    return make_error("store reader used after move");
  }
  sqlite3 *db = p_->db.getHandle();
  const char *const base = sql.data();
  const char *const end = base + sql.size();
  const char *cur = base;
  auto offset = [base](const char *p) { return static_cast<std::size_t>(p - base); };
  try {
    while (cur < end) {
      cur = skip_blank(cur, end);
      if (cur == end) {
        break;
      }
      const auto remaining = static_cast<std::size_t>(end - cur);
      if (remaining > static_cast<std::size_t>(INT_MAX)) {
        return make_error("SQL text is too long");
      }
      sqlite3_stmt *raw = nullptr;
      const char *tail = nullptr;
      detail::guard_state *const g = p_->guard.get();
      if (g != nullptr) {
        g->verb = statement_verb(cur, end);
        g->denied.clear();
        // VACUUM is refused before SQLite compiles it: the authorizer only sees it when it runs,
        // through the ATTACH of its target (refused there too).
        if (g->verb == "VACUUM INTO" || g->verb == "VACUUM") {
          g->denied =
              g->verb == "VACUUM" ? "VACUUM rewrites the database" : "VACUUM INTO writes a copy";
          return make_error(not_allowed(*g));
        }
      }
      if (sqlite3_prepare_v2(db, cur, static_cast<int>(remaining), &raw, &tail) != SQLITE_OK) {
        if (g != nullptr && !g->denied.empty()) {
          return make_error(not_allowed(*g));
        }
        const std::string msg = sqlite3_errmsg(db);
#if SQLITE_VERSION_NUMBER >= 3038000
        // Byte offset of the offending token in the text given to prepare, or -1.
        const int at = sqlite3_error_offset(db);
        if (at >= 0 && static_cast<std::size_t>(at) <= remaining) {
          return make_error(fmt::format(
              "{}: {}", position(sql, offset(cur) + static_cast<std::size_t>(at), true), msg));
        }
#endif
        return make_error(fmt::format("{}: {}", position(sql, offset(cur), false), msg));
      }
      const sqlite::stmt_ptr st(raw); // finalized on every path: no statement outlives exec()
      const char *const start = cur;
      cur = (tail != nullptr && tail > cur) ? tail : end;
      if (!st) {
        continue; // only a comment or a lone ';'
      }
      if (auto bad = check_histogram_aggregation(
              std::string_view(start, static_cast<std::size_t>(cur - start)))) {
        return make_error(
            fmt::format("{}: {}", position(sql, offset(start) + bad->offset, true), bad->message));
      }
      // Whether the routed data views may answer this statement from rollup rows.
      {
        auto text = tier_text_of(std::string_view(start, static_cast<std::size_t>(cur - start)));
        p_->router.statement_ok = !text.why.has_value();
        p_->router.statement_why = text.why.value_or("");
        p_->router.ts_terms = text.ts_terms;
      }
      if (params != nullptr) {
        const int want = sqlite3_bind_parameter_count(st.get());
        if (static_cast<std::size_t>(want) > params->size()) {
          return make_error(fmt::format("{}: the statement has {} parameters, {} values given",
                                        position(sql, offset(start), false), want, params->size()));
        }
        for (int i = 0; i < want; ++i) {
          if (auto r = bind_value(st.get(), i + 1, (*params)[static_cast<std::size_t>(i)]); !r) {
            return r;
          }
        }
      }
      const int ncol = sqlite3_column_count(st.get());
      if (ncol > 0 && sink.on_columns) {
        std::vector<std::string> names;
        names.reserve(static_cast<std::size_t>(ncol));
        for (int i = 0; i < ncol; ++i) {
          const char *n = sqlite3_column_name(st.get(), i);
          names.emplace_back(n != nullptr ? n : "");
        }
        sink.on_columns(names);
      }
      std::vector<value> row;
      const row_view view(st.get(), ncol);
      for (;;) {
        const int rc = sqlite3_step(st.get());
        if (rc == SQLITE_DONE) {
          break;
        }
        if (rc != SQLITE_ROW) {
          if (g != nullptr && !g->denied.empty()) {
            return make_error(not_allowed(*g));
          }
          return make_error(
              fmt::format("{}: {}", position(sql, offset(start), false), sqlite3_errmsg(db)));
        }
        if (sink.on_row_view) {
          sink.on_row_view(view);
          continue;
        }
        row.clear();
        row.reserve(static_cast<std::size_t>(ncol));
        for (int i = 0; i < ncol; ++i) {
          row.push_back(column_value(st.get(), i));
        }
        if (sink.on_row) {
          sink.on_row(row);
        }
      }
    }
  } catch (const std::exception &e) {
    return make_error(e.what()); // from a sink callback, or out of memory
  }
  return {};
}

std::optional<std::pair<std::int64_t, std::int64_t>> reader::take_window() {
  auto w = p_->ctx.last_window;
  p_->ctx.last_window.reset();
  return w;
}

bool reader::take_window_named() {
  const bool named = p_->ctx.window_named;
  p_->ctx.window_named = false;
  return named;
}

std::optional<std::pair<std::int64_t, std::int64_t>> reader::take_named_window() {
  auto w = p_->ctx.named_window;
  p_->ctx.named_window.reset();
  return w;
}

void reader::interrupt() noexcept {
  if (p_) {
    sqlite3_interrupt(p_->db.getHandle());
    // A table function over several hosts runs its statements on the hosts' connections.
    for (auto &h : p_->host_readers) {
      h.interrupt();
    }
    for (auto &slot : p_->ctx.twins->db) {
      if (sqlite3 *h = slot.load(); h != nullptr) {
        sqlite3_interrupt(h);
      }
    }
  }
}

void reader::set_zone(timefmt::zone z) {
  if (p_) {
    p_->ctx.zone = std::move(z);
  }
}

const timefmt::zone &reader::zone() const {
  static const timefmt::zone fallback = timefmt::zone::local();
  return p_ ? p_->ctx.zone : fallback;
}

void reader::set_now(std::optional<std::int64_t> utc_ns) {
  if (p_) {
    p_->ctx.fixed_now = utc_ns;
  }
}

bool reader::complete(std::string_view sql) {
  const std::string s(sql); // sqlite3_complete wants a NUL-terminated string
  return sqlite3_complete(s.c_str()) != 0;
}

reader::reader(std::unique_ptr<impl> p) : p_(std::move(p)) {}
reader::reader(reader &&) noexcept = default;
reader &reader::operator=(reader &&) noexcept = default;
reader::~reader() = default;

} // namespace rsched::query
