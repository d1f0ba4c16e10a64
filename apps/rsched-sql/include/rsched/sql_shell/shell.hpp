#pragma once
// The part of rsched-sql between its input and the database: runs SQL and dot commands against a
// store::reader, prints results through a printer and errors as one line each. No terminal, no
// readline: the interactive loop (interactive.hpp) and the tests drive it.
#include "rsched/sql_shell/output.hpp"
#include "rsched/store/reader.hpp"

#include <cstddef>
#include <istream>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace rsched::sql_shell {

class shell {
public:
  enum class status {
    ok,     // ran (or nothing to run)
    failed, // an error was printed
    quit,   // .quit / .exit
  };

  // `out` gets results, `err` error lines ("rsched-sql: ..."). Both must outlive the shell.
  shell(store::reader &db, std::ostream &out, std::ostream &err, output_config cfg);

  // Runs every statement of `sql` and prints the results. On error prints one line to `err`;
  // `first_line` > 0 is the script line `sql` starts at, and the message names script lines
  // (see locate()).
  status run_sql(std::string_view sql, std::size_t first_line = 0);

  // Runs one dot command line (".tables", ".mode csv", ...).
  status run_dot(std::string_view line);

  // One -c argument: a dot command when it starts with '.', else SQL.
  status run_command(std::string_view text);

  // Runs a script line by line (statements and dot commands) until EOF, .quit or the first
  // failure. A last statement without ';' is run at EOF. Returns the exit status.
  int run_script(std::istream &in);

  // Names for tab completion: tables, views and their columns (sorted, unique).
  std::vector<std::string> schema_names();

  // Prints "rsched-sql: <msg>" (escaped for the terminal) on the error stream.
  void report_error(std::string_view msg);

  [[nodiscard]] const output_config &config() const { return printer_.config(); }

  // The dot commands, for .help and completion.
  static const std::vector<std::string> &dot_commands();

private:
  status query_lines(std::string_view sql, std::vector<std::string> &lines);

  store::reader &db_;
  std::ostream &out_;
  std::ostream &err_;
  printer printer_;
};

// An error of store::reader::exec on SQL that starts at input line `first_line` (1-based), with
// its position made relative to the whole input: a leading "line L" (the reader's line within the
// SQL it got) becomes "line L + first_line - 1"; other messages get " (input line N)".
std::string locate(const std::string &msg, std::size_t first_line);

// Tab completion candidates for `word`, the word being completed; `before` is the current line up
// to that word and `statement_start` tells whether the line starts a new statement. At the start
// of a statement, a word starting with '.' completes to dot commands; after ".mode" and
// ".headers" to their arguments; elsewhere to `names` (case-sensitive) and SQL keywords and rsched
// functions (in the case of the word's first letter).
std::vector<std::string> completions(std::string_view before, std::string_view word,
                                     bool statement_start, const std::vector<std::string> &names);

} // namespace rsched::sql_shell
