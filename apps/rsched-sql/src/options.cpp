#include "rsched/sql_shell/options.hpp"

#include "rsched/store/records.hpp"

#include <fmt/format.h>

namespace rsched::sql_shell {

result<options> parse_args(std::span<const std::string_view> args) {
  options o;
  std::optional<std::string> db;
  bool options_ended = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    const bool is_option = !options_ended && a.size() > 1 && a.front() == '-';
    if (!is_option) {
      if (db) {
        return make_error(
            fmt::format("too many arguments: '{}' (only one database is allowed)", a));
      }
      if (a.empty()) {
        return make_error("the database path is empty");
      }
      db = std::string(a);
    } else if (a == "--") {
      options_ended = true;
    } else if (a == "-c") {
      if (i + 1 == args.size()) {
        return make_error("option '-c' needs an SQL argument");
      }
      o.commands.emplace_back(args[++i]);
    } else if (a == "--csv") {
      o.mode = output_mode::csv;
    } else if (a == "-h" || a == "--help") {
      o.help = true;
    } else if (a == "--version") {
      o.version = true;
    } else {
      return make_error(fmt::format("unknown option '{}'", a));
    }
  }
  o.db_path = db ? *db : std::string(store::default_db_path);
  return o;
}

result<options> parse_args(int argc, const char *const *argv) {
  std::vector<std::string_view> args;
  for (int i = 1; i < argc; ++i) {
    args.emplace_back(argv[i]);
  }
  return parse_args(std::span<const std::string_view>(args));
}

std::string usage_text() {
  return fmt::format(
      R"(Usage: {0} [DB] [-c SQL]... [--csv]
       {0} -h | --help | --version
SQL shell over the history recorded by rschedd. The database is opened read-only.

  DB          the database (default {1})
  -c SQL      run SQL and exit; may be repeated, runs in order, stops at the first error.
              SQL starting with '.' is a dot command (e.g. -c .tables)
  --csv       print CSV instead of a table
  -h, --help  print this help and exit
  --version   print the version and exit

Without -c, SQL is read from standard input when it is not a terminal (stops at the first
error), otherwise an interactive shell starts (line editing, history in $RSCHED_SQL_HISTORY or
~/.rsched_sql_history, Ctrl-D to leave, .help for its dot commands).

Functions: hist_percentile(hist, p) aggregates histogram blobs into the p-th percentile (ns);
ipc(instructions, cycles).

Output:
  table  (default) aligned columns, numbers right-aligned, NULL shown as NULL, blobs as
         <blob N bytes>. Text is always escaped for the terminal: control bytes, backslash and
         invalid UTF-8 appear as \xNN (backslash as \\).
  csv    RFC 4180: a header row, CRLF line ends, fields with a comma, double quote, CR or LF
         quoted (quotes doubled); NULL is an empty field and the empty string is "";
         integers in decimal, reals with enough digits to round-trip, blobs as x'<lowercase hex>'.
         Text is written byte for byte as stored, except when standard output is a terminal,
         where it is escaped as in table mode.

Exit status: 0 success, 1 the database could not be opened or a statement failed,
2 bad usage.
)",
      program_name, store::default_db_path);
}

std::optional<std::string> history_path(const char *env_override, const char *home) {
  if (env_override != nullptr) {
    if (*env_override == '\0') {
      return std::nullopt;
    }
    return std::string(env_override);
  }
  if (home == nullptr || *home == '\0') {
    return std::nullopt;
  }
  std::string p(home);
  if (p.back() != '/') {
    p += '/';
  }
  return p + ".rsched_sql_history";
}

} // namespace rsched::sql_shell
