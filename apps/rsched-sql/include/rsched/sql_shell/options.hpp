#pragma once
// Command line of rsched-sql: parsed into a plain struct, no I/O, so the tests can check it.
//
//   rsched-sql [DB] [-c SQL]... [--csv|--json|--jsonl] [-o FILE] [--bail]
//   rsched-sql --host NAME=PATH [--host NAME=PATH]... [-c SQL]... [...]   (several hosts)
//   rsched-sql DB mark TEXT [--at T] [--until T] [--tags a,b]
//   rsched-sql [DB] heatmap|plot|report [ARGS]...   (pictures.hpp)
//   rsched-sql [DB] export openmetrics|perfetto [ARGS]...   (export.hpp)
//   rsched-sql -h | --help | --version
#include "rsched/base/result.hpp"

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rsched::sql_shell {

inline constexpr std::string_view program_name = "rsched-sql";
inline constexpr std::string_view program_version = "0.1.0";

// Exit statuses of rsched-sql.
inline constexpr int exit_ok = 0;      // everything ran
inline constexpr int exit_failure = 1; // the database could not be opened or a statement failed
inline constexpr int exit_usage = 2;   // bad command line
// A statement that names a time window function (t(, ago(, around(, during() returned no rows
// (non-interactive runs only; an SQL error takes precedence).
inline constexpr int exit_no_data = 3;

enum class output_mode {
  table,    // aligned ASCII table for people; text always escaped for the terminal
  box,      // the same with Unicode box-drawing lines
  markdown, // a GitHub-flavoured Markdown table ('|' in cells escaped as '\|')
  line,     // one "column = value" line per column, a blank line between rows
  csv,      // RFC 4180 data; text byte-exact unless stdout is a terminal
  json,     // one JSON array of objects per statement (RFC 8259)
  jsonl,    // one JSON object per row and line
};

// True for the modes meant for people (units, local times, truncation on a terminal).
constexpr bool is_human(output_mode m) {
  return m == output_mode::table || m == output_mode::box || m == output_mode::markdown ||
         m == output_mode::line;
}

// "table", "csv", ... to a mode; nullopt for an unknown name.
std::optional<output_mode> parse_mode(std::string_view name);
std::string_view mode_name(output_mode m);

// `rsched-sql DB mark TEXT [--at T] [--until T] [--tags a,b]`: times as text, parsed later (they
// need the clock and the zone).
struct mark_args {
  std::string text;
  std::optional<std::string> at;    // default: now
  std::optional<std::string> until; // default: a point in time
  std::string tags;                 // comma-separated, "" none
};

// `DB service NAME [PATTERN...]`: which threads are a service (explain() from a page).
struct service_args {
  std::string name;
  std::vector<std::string> patterns; // none: forget the service
};

// `--host NAME=PATH`: one host of a session over several hosts' databases.
struct host_arg {
  std::string name; // the `host` column's value
  std::string path;
};

// Longest host name --host accepts.
inline constexpr std::size_t max_host_name = 64;

struct options {
  std::string db_path;         // the DB argument, else store::default_db_path ("" with --host)
  std::vector<host_arg> hosts; // every --host, in order (empty: one database, db_path)
  std::vector<std::string> commands; // every -c argument, in order
  output_mode mode = output_mode::table;
  std::optional<std::string> output_file; // -o FILE
  bool bail = false;                      // --bail: stop a script at its first error
  std::optional<mark_args> mark;          // the mark subcommand
  std::optional<service_args> service;    // the service subcommand
  // heatmap, plot, report or export and its arguments as given (parsed by pictures.hpp).
  std::optional<std::pair<std::string, std::vector<std::string>>> picture;
  bool help = false;
  bool version = false;
};

// Parses the arguments after argv[0]. A bad command line (unknown option, -c without its
// argument, more than one DB, an empty DB path) is an error whose message is one line without the
// program name, quoting the argument as given (raw: the caller escapes it for the terminal); the
// caller prints it and exits with exit_usage. Options and the DB may come in any
// order; "--" ends the options (for a DB path starting with '-'). -c takes the next argument as is,
// even when it starts with '-'. A second positional argument "mark" starts the mark subcommand:
// the next positional argument is its text and --at, --until and --tags its options.
// --host NAME=PATH (repeatable) opens several hosts' databases instead of DB: it cannot be
// combined with a DB argument, mark, heatmap, report or export (plot is allowed); the names must
// be distinct regardless of case (see parse_host_arg).
result<options> parse_args(std::span<const std::string_view> args);
result<options> parse_args(int argc, const char *const *argv);

// The value of one --host: NAME=PATH split at the first '='. NAME: 1 to max_host_name
// characters, letters, digits, '.', '_' and '-', starting with a letter or digit, and not "main"
// or "temp" (SQLite's own schema names); PATH non-empty. Errors are one line quoting the value.
result<host_arg> parse_host_arg(std::string_view value);

// The --help text (several lines, ends with a newline).
std::string usage_text();

// Where interactive history lives: $RSCHED_SQL_HISTORY when set (set but empty disables history),
// else <home>/.rsched_sql_history; nullopt when there is neither. Arguments may be null.
std::optional<std::string> history_path(const char *env_override, const char *home);

} // namespace rsched::sql_shell
