#include "rsched/store/annotations.hpp"

#include "rsched/base/timefmt.hpp"

#include "schema.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <sqlite3.h>
#include <string>
#include <utility>
#include <vector>

namespace rsched::store {

namespace {

constexpr int busy_timeout_ms = 5000;

struct db_closer {
  void operator()(sqlite3 *db) const { sqlite3_close_v2(db); }
};
using db_ptr = std::unique_ptr<sqlite3, db_closer>;

struct stmt_deleter {
  void operator()(sqlite3_stmt *s) const { sqlite3_finalize(s); }
};
using stmt_ptr = std::unique_ptr<sqlite3_stmt, stmt_deleter>;

// The authorizer of the read-write connection: it only ever runs the statements of this file
// (user SQL never reaches it), and those may only read and add rows to main.annotations.
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
    return is(a1, "annotations") && is(a3, "main") ? SQLITE_OK : SQLITE_DENY;
  default:
    return SQLITE_DENY;
  }
}

// Opens `path` read-write (never creating it) and checks it is a current rsched database.
result<db_ptr> open_rw(const std::string &path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    const int e = errno;
    return make_error(fmt::format("{}: {}", path, e == ENOENT ? "no such file" : std::strerror(e)),
                      e);
  }
  sqlite3 *raw = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE, nullptr);
  db_ptr db(raw);
  if (rc != SQLITE_OK) {
    return make_error(
        fmt::format("{}: {}", path, raw != nullptr ? sqlite3_errmsg(raw) : sqlite3_errstr(rc)));
  }
  sqlite3_busy_timeout(db.get(), busy_timeout_ms);
  sqlite3_extended_result_codes(db.get(), 1);
  if (sqlite3_db_config(db.get(), SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr) != SQLITE_OK ||
      sqlite3_set_authorizer(db.get(), annotations_only, nullptr) != SQLITE_OK) {
    return make_error(fmt::format("{}: {}", path, sqlite3_errmsg(db.get())));
  }
  auto state = detail::check(db.get(), path);
  if (!state) {
    return state.err();
  }
  if (*state == detail::db_state::empty) {
    return make_error(fmt::format("{}: not an rsched database (empty)", path));
  }
  if (*state == detail::db_state::version1) {
    return make_error(fmt::format("{}: schema version 1 has no annotations table (running "
                                  "rschedd once upgrades the file)",
                                  path));
  }
  return db;
}

result<void> insert_all(sqlite3 *db, const std::string &path, const std::vector<annotation> &v,
                        std::vector<std::int64_t> *ids) {
  auto fail = [&](const std::string &msg) -> result<void> {
    if (sqlite3_get_autocommit(db) == 0) {
      (void)detail::exec(db, "ROLLBACK");
    }
    return make_error(fmt::format("{}: adding annotations: {}", path, msg));
  };
  if (auto r = detail::exec(db, "BEGIN IMMEDIATE"); !r) {
    return fail(r.err().msg);
  }
  sqlite3_stmt *raw = nullptr;
  if (sqlite3_prepare_v2(db,
                         "INSERT INTO annotations(start_ns, end_ns, source, text, tags, "
                         "created_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                         -1, &raw, nullptr) != SQLITE_OK) {
    return fail(sqlite3_errmsg(db));
  }
  const stmt_ptr st(raw);
  const std::int64_t now = timefmt::realtime_now_ns();
  for (const auto &a : v) {
    sqlite3_reset(st.get());
    sqlite3_bind_int64(st.get(), 1, a.start_ns);
    if (a.end_ns) {
      sqlite3_bind_int64(st.get(), 2, *a.end_ns);
    } else {
      sqlite3_bind_null(st.get(), 2);
    }
    sqlite3_bind_text64(st.get(), 3, a.source.data(), a.source.size(), SQLITE_STATIC, SQLITE_UTF8);
    sqlite3_bind_text64(st.get(), 4, a.text.data(), a.text.size(), SQLITE_STATIC, SQLITE_UTF8);
    sqlite3_bind_text64(st.get(), 5, a.tags.data(), a.tags.size(), SQLITE_STATIC, SQLITE_UTF8);
    sqlite3_bind_int64(st.get(), 6, now);
    if (sqlite3_step(st.get()) != SQLITE_DONE) {
      return fail(sqlite3_errmsg(db));
    }
    if (ids != nullptr) {
      ids->push_back(sqlite3_last_insert_rowid(db));
    }
  }
  if (auto r = detail::exec(db, "COMMIT"); !r) {
    return fail(r.err().msg);
  }
  return {};
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

// ---- CSV (RFC 4180) ----

using record = std::map<std::string, std::optional<std::string>>;

result<std::vector<std::vector<std::string>>> parse_csv(std::string_view s) {
  std::vector<std::vector<std::string>> out;
  std::vector<std::string> rec;
  std::string field;
  std::size_t i = 0;
  std::size_t line = 1;
  bool any = false; // the current record has content
  if (s.size() >= 3 && s.substr(0, 3) == "\xEF\xBB\xBF") {
    i = 3; // UTF-8 byte order mark
  }
  while (i < s.size()) {
    const char c = s[i];
    if (c == '"' && field.empty()) {
      const std::size_t start_line = line;
      ++i;
      bool closed = false;
      while (i < s.size()) {
        if (s[i] == '"') {
          if (i + 1 < s.size() && s[i + 1] == '"') {
            field += '"';
            i += 2;
            continue;
          }
          ++i;
          closed = true;
          break;
        }
        if (s[i] == '\n') {
          ++line;
        }
        field += s[i++];
      }
      if (!closed) {
        return make_error(fmt::format("line {}: unterminated quoted field", start_line));
      }
      if (i < s.size() && s[i] != ',' && s[i] != '\n' && s[i] != '\r') {
        return make_error(fmt::format("line {}: text after a closing quote", line));
      }
      any = true;
      continue;
    }
    if (c == ',') {
      rec.push_back(std::move(field));
      field.clear();
      any = true;
      ++i;
      continue;
    }
    if (c == '\r' || c == '\n') {
      if (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') {
        ++i;
      }
      ++i;
      ++line;
      if (any || !field.empty()) {
        rec.push_back(std::move(field));
        out.push_back(std::move(rec));
      }
      rec.clear();
      field.clear();
      any = false;
      continue;
    }
    field += c;
    any = true;
    ++i;
  }
  if (any || !field.empty()) {
    rec.push_back(std::move(field));
    out.push_back(std::move(rec));
  }
  return out;
}

// ---- JSON (the subset needed: an array of flat objects) ----

struct json_parser {
  std::string_view s;
  std::size_t i = 0;
  std::string err;

  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) {
      ++i;
    }
  }
  bool fail(const std::string &m) {
    if (err.empty()) {
      err = fmt::format("JSON at byte {}: {}", i, m);
    }
    return false;
  }
  static void put_utf8(std::string &out, std::uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  bool hex4(std::uint32_t &v) {
    if (i + 4 > s.size()) {
      return fail("truncated \\u escape");
    }
    v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s[i++];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= static_cast<std::uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        v |= static_cast<std::uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        v |= static_cast<std::uint32_t>(c - 'A' + 10);
      } else {
        return fail("bad \\u escape");
      }
    }
    return true;
  }
  bool string(std::string &out) {
    if (i >= s.size() || s[i] != '"') {
      return fail("expected a string");
    }
    ++i;
    while (i < s.size()) {
      const char c = s[i++];
      if (c == '"') {
        return true;
      }
      if (c != '\\') {
        if (static_cast<unsigned char>(c) < 0x20) {
          return fail("control character in a string");
        }
        out += c;
        continue;
      }
      if (i >= s.size()) {
        break;
      }
      const char e = s[i++];
      switch (e) {
      case '"':
        out += '"';
        break;
      case '\\':
        out += '\\';
        break;
      case '/':
        out += '/';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        std::uint32_t cp = 0;
        if (!hex4(cp)) {
          return false;
        }
        if (cp >= 0xD800 && cp < 0xDC00) {
          std::uint32_t lo = 0;
          if (i + 2 > s.size() || s[i] != '\\' || s[i + 1] != 'u') {
            return fail("unpaired surrogate");
          }
          i += 2;
          if (!hex4(lo) || lo < 0xDC00 || lo > 0xDFFF) {
            return fail("unpaired surrogate");
          }
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp < 0xE000) {
          return fail("unpaired surrogate");
        }
        put_utf8(out, cp);
        break;
      }
      default:
        return fail("bad escape");
      }
    }
    return fail("unterminated string");
  }
  // A scalar (string, number, true/false/null) or an array of strings (tags), as text.
  bool scalar(std::optional<std::string> &out) {
    ws();
    if (i >= s.size()) {
      return fail("unexpected end");
    }
    if (s[i] == '"') {
      std::string v;
      if (!string(v)) {
        return false;
      }
      out = std::move(v);
      return true;
    }
    if (s[i] == '[') {
      ++i;
      std::string joined;
      ws();
      if (i < s.size() && s[i] == ']') {
        ++i;
        out = joined;
        return true;
      }
      for (;;) {
        ws();
        std::string v;
        if (!string(v)) {
          return false;
        }
        joined += (joined.empty() ? "" : ",") + v;
        ws();
        if (i < s.size() && s[i] == ',') {
          ++i;
          continue;
        }
        if (i < s.size() && s[i] == ']') {
          ++i;
          break;
        }
        return fail("expected ',' or ']'");
      }
      out = joined;
      return true;
    }
    if (s.substr(i, 4) == "null") {
      i += 4;
      out.reset();
      return true;
    }
    if (s.substr(i, 4) == "true" || s.substr(i, 5) == "false") {
      return fail("booleans are not accepted");
    }
    const std::size_t st = i;
    while (i < s.size() &&
           (std::strchr("+-.eE", s[i]) != nullptr || (s[i] >= '0' && s[i] <= '9'))) {
      ++i;
    }
    if (i == st) {
      return fail("expected a value");
    }
    out = std::string(s.substr(st, i - st));
    return true;
  }
  bool parse(std::vector<record> &recs) {
    ws();
    if (i >= s.size() || s[i] != '[') {
      return fail("expected an array of objects");
    }
    ++i;
    ws();
    if (i < s.size() && s[i] == ']') {
      ++i;
    } else {
      for (;;) {
        ws();
        if (i >= s.size() || s[i] != '{') {
          return fail("expected an object");
        }
        ++i;
        record r;
        ws();
        if (i < s.size() && s[i] == '}') {
          ++i;
        } else {
          for (;;) {
            ws();
            std::string key;
            if (!string(key)) {
              return false;
            }
            ws();
            if (i >= s.size() || s[i] != ':') {
              return fail("expected ':'");
            }
            ++i;
            std::optional<std::string> v;
            if (!scalar(v)) {
              return false;
            }
            r[key] = std::move(v);
            ws();
            if (i < s.size() && s[i] == ',') {
              ++i;
              continue;
            }
            if (i < s.size() && s[i] == '}') {
              ++i;
              break;
            }
            return fail("expected ',' or '}'");
          }
        }
        recs.push_back(std::move(r));
        ws();
        if (i < s.size() && s[i] == ',') {
          ++i;
          continue;
        }
        if (i < s.size() && s[i] == ']') {
          ++i;
          break;
        }
        return fail("expected ',' or ']'");
      }
    }
    ws();
    if (i != s.size()) {
      return fail("text after the array");
    }
    return true;
  }
};

result<std::vector<record>> records_of(std::string_view content, incident_format fmt) {
  if (fmt == incident_format::automatic) {
    std::size_t i = 0;
    while (i < content.size() && std::strchr(" \t\r\n", content[i]) != nullptr) {
      ++i;
    }
    fmt = i < content.size() && content[i] == '[' ? incident_format::json : incident_format::csv;
  }
  std::vector<record> out;
  if (fmt == incident_format::json) {
    json_parser p;
    p.s = content;
    if (!p.parse(out)) {
      return make_error(p.err);
    }
    return out;
  }
  auto rows = parse_csv(content);
  if (!rows) {
    return rows.err();
  }
  if (rows->empty()) {
    return make_error("CSV has no header row");
  }
  std::vector<std::string> header;
  for (auto h : (*rows)[0]) {
    while (!h.empty() && h.back() == ' ') {
      h.pop_back();
    }
    while (!h.empty() && h.front() == ' ') {
      h.erase(0, 1);
    }
    for (auto &c : h) {
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    header.push_back(h);
  }
  for (std::size_t r = 1; r < rows->size(); ++r) {
    const auto &fields = (*rows)[r];
    if (fields.size() != header.size()) {
      return make_error(
          fmt::format("row {}: {} fields, the header has {}", r, fields.size(), header.size()));
    }
    record rec;
    for (std::size_t c = 0; c < header.size(); ++c) {
      rec[header[c]] = fields[c];
    }
    out.push_back(std::move(rec));
  }
  return out;
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
  if (auto r = insert_all(db->get(), path, {a}, &ids); !r) {
    return r.err();
  }
  return ids.at(0);
}

result<std::size_t> import_incidents(const std::string &path, std::string_view content,
                                     incident_format fmt, std::string_view source,
                                     std::int64_t now_ns) {
  auto recs = records_of(content, fmt);
  if (!recs) {
    return make_error(fmt::format("importing incidents: {}", recs.err().msg));
  }
  const timefmt::zone local = timefmt::zone::local();
  std::vector<annotation> out;
  for (std::size_t r = 0; r < recs->size(); ++r) {
    const auto &rec = (*recs)[r];
    // Rows are numbered from 1 (the first data row after a CSV header, the first JSON object).
    auto bad = [&](const std::string &m) {
      return make_error(fmt::format("importing incidents: row {}: {}", r + 1, m));
    };
    for (const auto &[k, v] : rec) {
      if (k != "start" && k != "end" && k != "text" && k != "source" && k != "tags") {
        return bad(fmt::format("unknown column '{}' (start, end, text, source, tags)", k));
      }
    }
    auto get = [&](const char *k) -> std::optional<std::string> {
      const auto it = rec.find(k);
      if (it == rec.end() || !it->second) {
        return std::nullopt;
      }
      return it->second;
    };
    annotation a;
    const auto start = get("start");
    if (!start || start->empty()) {
      return bad("start is missing");
    }
    auto st = timefmt::parse_time(*start, now_ns, local);
    if (!st) {
      return bad("start: " + st.err().msg);
    }
    a.start_ns = *st;
    if (const auto end = get("end"); end && !end->empty()) {
      auto en = timefmt::parse_time(*end, now_ns, local);
      if (!en) {
        return bad("end: " + en.err().msg);
      }
      a.end_ns = *en;
    }
    const auto text = get("text");
    a.text = text ? *text : std::string();
    const auto src = get("source");
    a.source = src && !src->empty() ? *src : std::string(source);
    const auto tags = get("tags");
    a.tags = tags ? *tags : std::string();
    if (auto v = validate(a); !v) {
      return bad(v.err().msg);
    }
    out.push_back(std::move(a));
  }
  auto db = open_rw(path);
  if (!db) {
    return db.err();
  }
  if (auto r = insert_all(db->get(), path, out, nullptr); !r) {
    return r.err();
  }
  return out.size();
}

} // namespace rsched::store
