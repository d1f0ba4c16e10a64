#include "rsched/store/reader.hpp"

#include "rsched/store/sql_lint.hpp"

#include "schema.hpp"
#include "sql_functions.hpp"
#include "sqlite_util.hpp"

#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Exception.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <sqlite3.h>
#include <string_view>
#include <utility>

namespace rsched::store {

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
  case SQLITE_DROP_TEMP_VIEW:
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
  std::unique_ptr<detail::guard_state> guard; // null: writable connection (tests, :memory:)
  SQLite::Database db;
  explicit impl(SQLite::Database &&d) : db(std::move(d)) {}
};

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
  }
  try {
    int flags = read_only ? SQLite::OPEN_READONLY : SQLite::OPEN_READWRITE;
    if (memory) {
      flags = SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE;
    }
    SQLite::Database db(path, flags, busy_timeout_ms);
    sqlite3 *h = db.getHandle();
    sqlite3_extended_result_codes(h, 1);

    auto state = detail::check(h, path);
    if (!state) {
      return with_wal_hint(state.err(), path, read_only && !memory);
    }
    if (*state == detail::db_state::empty) {
      if (!memory) {
        return make_error(fmt::format("{}: not an rsched database (empty)", path));
      }
      // An in-memory database gets the schema, so that queries, views and functions can be
      // tried (and tested) without a daemon.
      if (auto r = detail::create(h, path); !r) {
        return r.err();
      }
    }
    auto p = std::make_unique<impl>(std::move(db));
    if (auto r = detail::register_functions(p->db.getHandle(), &p->ctx); !r) {
      return make_error(fmt::format("{}: {}", path, r.err().msg));
    }
    if (read_only) {
      // No statement run through this connection writes anything (see guard_authorize);
      // DEFENSIVE also keeps the schema table and shadow tables out of reach, and extensions
      // stay off.
      p->guard = std::make_unique<detail::guard_state>();
      if (sqlite3_db_config(h, SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr) != SQLITE_OK ||
          sqlite3_db_config(h, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, nullptr) != SQLITE_OK ||
          sqlite3_set_authorizer(h, guard_authorize, p->guard.get()) != SQLITE_OK) {
        return make_error(
            fmt::format("{}: cannot make the connection read-only: {}", path, sqlite3_errmsg(h)));
      }
    }
    return reader(std::move(p));
  } catch (const SQLite::Exception &e) {
    return with_wal_hint(make_error(fmt::format("{}: {}", path, e.what())), path,
                         read_only && !memory);
  } catch (const std::exception &e) {
    return make_error(fmt::format("{}: {}", path, e.what()));
  }
}

result<void> reader::exec(std::string_view sql, const result_sink &sink) {
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
      const detail::stmt_ptr st(raw); // finalized on every path: no statement outlives exec()
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

void reader::interrupt() noexcept {
  if (p_) {
    sqlite3_interrupt(p_->db.getHandle());
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

} // namespace rsched::store
