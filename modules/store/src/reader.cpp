#include "rsched/store/reader.hpp"

#include "schema.hpp"
#include "sql_functions.hpp"

#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Exception.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <sqlite3.h>
#include <utility>

namespace rsched::store {

namespace {

constexpr int busy_timeout_ms = 2000;

struct stmt_deleter {
  void operator()(sqlite3_stmt *s) const { sqlite3_finalize(s); }
};
using stmt_ptr = std::unique_ptr<sqlite3_stmt, stmt_deleter>;

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

} // namespace

struct reader::impl {
  // Declared first: destroyed after the connection, whose functions point to it.
  detail::fn_context ctx;
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
      if (sqlite3_prepare_v2(db, cur, static_cast<int>(remaining), &raw, &tail) != SQLITE_OK) {
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
      const stmt_ptr st(raw); // finalized on every path: no statement outlives exec()
      const char *const start = cur;
      cur = (tail != nullptr && tail > cur) ? tail : end;
      if (!st) {
        continue; // only a comment or a lone ';'
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
