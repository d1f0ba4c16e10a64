#pragma once
// Command line of rsched-sql: parsed into a plain struct, no I/O, so the tests can check it.
//
//   rsched-sql [DB] [-c SQL]... [--csv]
//   rsched-sql -h | --help | --version
#include "rsched/base/result.hpp"

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rsched::sql_shell {

inline constexpr std::string_view program_name = "rsched-sql";
inline constexpr std::string_view program_version = "0.1.0";

// Exit statuses of rsched-sql.
inline constexpr int exit_ok = 0;      // everything ran
inline constexpr int exit_failure = 1; // the database could not be opened or a statement failed
inline constexpr int exit_usage = 2;   // bad command line

enum class output_mode {
  table, // aligned table for people; text always escaped for the terminal
  csv,   // RFC 4180 data; text byte-exact unless stdout is a terminal
};

struct options {
  std::string db_path;               // the DB argument, else store::default_db_path
  std::vector<std::string> commands; // every -c argument, in order
  output_mode mode = output_mode::table;
  bool help = false;
  bool version = false;
};

// Parses the arguments after argv[0]. A bad command line (unknown option, -c without its
// argument, more than one DB, an empty DB path) is an error whose message is one line without the
// program name, quoting the argument as given (raw: the caller escapes it for the terminal); the
// caller prints it and exits with exit_usage. Options and the DB may come in any
// order; "--" ends the options (for a DB path starting with '-'). -c takes the next argument as is,
// even when it starts with '-'.
result<options> parse_args(std::span<const std::string_view> args);
result<options> parse_args(int argc, const char *const *argv);

// The --help text (several lines, ends with a newline).
std::string usage_text();

// Where interactive history lives: $RSCHED_SQL_HISTORY when set (set but empty disables history),
// else <home>/.rsched_sql_history; nullopt when there is neither. Arguments may be null.
std::optional<std::string> history_path(const char *env_override, const char *home);

} // namespace rsched::sql_shell
