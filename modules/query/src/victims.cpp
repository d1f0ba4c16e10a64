// The victim patterns: parsed, as SQL over the thread identity, and checked on one identity.
#include "victims.hpp"

#include "rsched/base/text.hpp"
#include "rsched/sqlite/statement.hpp"

#include "explain_scope.hpp"
#include "sql_functions.hpp"

#include <fmt/format.h>

#include <charconv>
#include <sqlite3.h>

namespace rsched::query::detail {

bool has_table(sqlite3 *db, const char *name) {
  auto st =
      sqlite::prepare_stmt(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1");
  if (!st) {
    return false;
  }
  sqlite3_bind_text(st->get(), 1, name, -1, SQLITE_STATIC);
  return sqlite3_step(st->get()) == SQLITE_ROW;
}

bool has_column(sqlite3 *db, const char *table, const char *column) {
  auto st = sqlite::prepare_stmt(db, "SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2");
  if (!st) {
    return false;
  }
  sqlite3_bind_text(st->get(), 1, table, -1, SQLITE_STATIC);
  sqlite3_bind_text(st->get(), 2, column, -1, SQLITE_STATIC);
  return sqlite3_step(st->get()) == SQLITE_ROW;
}

namespace {

bool has_glob(std::string_view s) {
  return s.find_first_of("*?[") != std::string_view::npos;
}

} // namespace

// Prepares `sql`, whose ?1 and ?2 are a window [a, b) and ?3... the conditions of `vs`.
result<sqlite::stmt_ptr> prepare_window(sqlite3 *db, const std::string &sql, std::int64_t a,
                                        std::int64_t b, const victims &vs) {
  auto st = sqlite::prepare_stmt(db, sql);
  if (!st) {
    return st.err();
  }
  sqlite3_bind_int64(st->get(), 1, a);
  sqlite3_bind_int64(st->get(), 2, b);
  bind_victims(st->get(), vs, 3);
  return st;
}

result<void> each_row(sqlite3 *db, const std::string &sql, std::int64_t a, std::int64_t b,
                      const victims &vs, const std::function<void(sqlite3_stmt *)> &on_row) {
  auto st = prepare_window(db, sql, a, b, vs);
  if (!st) {
    return st.err();
  }
  int rc = 0;
  while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
    on_row(st->get());
  }
  if (rc != SQLITE_DONE) {
    return make_error(sqlite3_errmsg(db));
  }
  return {};
}

std::string victim::sql(int param) const {
  switch (what) {
  case kind::all:
    return "1";
  case kind::comm:
    return fmt::format("t.comm {} ?{}", glob ? "GLOB" : "=", param);
  case kind::cgroup:
    // A cgroup without wildcards takes its descendants too.
    if (!glob && !descendants) {
      return fmt::format("t.cgroup = ?{}", param);
    }
    return glob ? fmt::format("t.cgroup GLOB ?{}", param)
                : fmt::format("(t.cgroup = ?{0} OR substr(t.cgroup, 1, length(?{0}) + 1) = "
                              "?{0} || '/')",
                              param);
  case kind::pid:
    return fmt::format("t.pid = ?{}", param);
  case kind::tid:
    return fmt::format("t.tid = ?{}", param);
  case kind::service:
    return fmt::format("{}(?{}, t.comm, t.cgroup)", in_service_function, param);
  }
  return "1";
}

void victim::bind(sqlite3_stmt *st, int param) const {
  switch (what) {
  case kind::all:
    break;
  case kind::comm:
  case kind::cgroup:
    sqlite3_bind_text(st, param, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
    break;
  case kind::pid:
  case kind::tid:
    sqlite3_bind_int64(st, param, number);
    break;
  case kind::service:
    // A pointer only rsched_in_service reads (SQLite's pointer passing: SQL cannot forge one).
    sqlite3_bind_pointer(st, param, const_cast<service_rule *>(service.get()),
                         service_rule_pointer_type, nullptr);
    break;
  }
}

bool victim::matches(std::string_view comm, std::string_view cgroup) const {
  const auto glob_match = [](const std::string &pattern, std::string_view s) {
    return sqlite3_strglob(pattern.c_str(), std::string(s).c_str()) == 0;
  };
  switch (what) {
  case kind::all:
    return true;
  case kind::comm:
    return glob ? glob_match(text, comm) : comm == text;
  case kind::cgroup:
    if (glob) {
      return glob_match(text, cgroup);
    }
    // sql(): the cgroup, or (descendants) a path under it
    return cgroup == text || (descendants && cgroup.size() > text.size() &&
                              cgroup.starts_with(text) && cgroup[text.size()] == '/');
  case kind::pid:
  case kind::tid:
    return false;
  case kind::service:
    return service != nullptr && service->matches(comm, cgroup);
  }
  return false;
}

std::string victim::describe() const {
  switch (what) {
  case kind::all:
    return "all threads";
  case kind::comm:
    return "comm " + text;
  case kind::cgroup:
    return "cgroup " + text;
  case kind::pid:
    return fmt::format("pid {}", number);
  case kind::tid:
    return fmt::format("tid {}", number);
  case kind::service:
    return service ? service->describe() : std::string("no service");
  }
  return {};
}

std::string victims_sql(const victims &vs, int first) {
  std::string out = "1";
  for (std::size_t i = 0; i < vs.size(); ++i) {
    out += " AND " + vs[i].sql(first + static_cast<int>(i));
  }
  return out;
}

void bind_victims(sqlite3_stmt *st, const victims &vs, int first) {
  for (std::size_t i = 0; i < vs.size(); ++i) {
    vs[i].bind(st, first + static_cast<int>(i));
  }
}

result<victim> parse_victim(std::optional<std::string_view> in, const char *fn) {
  victim v;
  if (!in || in->empty()) {
    return v;
  }
  std::string_view s = *in;
  const auto prefixed = [&](std::string_view p) {
    if (s.substr(0, p.size()) == p) {
      s.remove_prefix(p.size());
      return true;
    }
    return false;
  };
  if (prefixed("pid:") || prefixed("tid:")) {
    v.what = in->substr(0, 4) == "pid:" ? victim::kind::pid : victim::kind::tid;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v.number);
    if (ec != std::errc() || p != s.data() + s.size() || v.number <= 0) {
      return make_error(
          fmt::format("{}: '{}' needs a process or thread id", fn, text::escape_for_terminal(*in)));
    }
    return v;
  }
  if (prefixed("cgroup:")) {
    v.what = victim::kind::cgroup;
    while (s.size() > 1 && s.back() == '/') {
      s.remove_suffix(1);
    }
  } else {
    (void)prefixed("comm:");
    v.what = victim::kind::comm;
  }
  if (s.empty()) {
    return make_error(
        fmt::format("{}: empty victim pattern '{}' (a comm, comm:GLOB, cgroup:PATH, pid:N or "
                    "tid:N)",
                    fn, text::escape_for_terminal(*in)));
  }
  v.text = std::string(s);
  v.glob = has_glob(s);
  return v;
}

} // namespace rsched::query::detail
