#pragma once
// The part of rsched-sql between its input and the database: runs SQL and dot commands against a
// query::reader, prints results through a printer and errors as one line each. No terminal, no
// readline: the interactive loop (interactive.hpp) and the tests drive it.
#include "rsched/base/result.hpp"
#include "rsched/base/safe_file.hpp"
#include "rsched/base/timefmt.hpp"
#include "rsched/query/reader.hpp"
#include "rsched/sql_shell/options.hpp"
#include "rsched/sql_shell/output.hpp"

#include <csignal>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <istream>
#include <memory>
#include <optional>
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
  // `cfg` describes `out`: escape_csv_text and max_rows are meant for a terminal and are dropped
  // while results go to a file (.output, .once).
  shell(query::reader &db, std::ostream &out, std::ostream &err, const output_config &cfg);

  // The database file, for the commands that write annotations (.mark, .import-incidents).
  void set_db_path(std::string path) { db_path_ = std::move(path); }
  // --bail: run_script stops at the first failure.
  void set_bail(bool on) { bail_ = on; }
  // A pager command (run by /bin/sh) for human-mode results that do not fit the terminal
  // (stdout's size): set by interactive sessions on a terminal; nullopt (the default): none.
  void set_pager(std::optional<std::string> cmd) { pager_ = std::move(cmd); }
  [[nodiscard]] const std::optional<std::string> &pager() const { return pager_; }
  // What .pager on and interactive sessions use: $PAGER (set but empty: none), else
  // "less -SFRX" when less is installed, else none.
  static std::optional<std::string> default_pager();

  // Runs every statement of `sql` and prints the results. On error prints one line to `err`;
  // `first_line` > 0 is the script line `sql` starts at, and the message names script lines
  // (see locate()). A result without rows from SQL that calls a time window function (see
  // names_time_window) prints "rsched-sql: no recorded data in that window" and sets no_data().
  status run_sql(std::string_view sql, std::size_t first_line = 0);

  // Runs one dot command line (".tables", ".mode csv", ...).
  status run_dot(std::string_view line);

  // One -c argument: a dot command when it starts with '.', else SQL.
  status run_command(std::string_view text);

  // Runs a script line by line (statements and dot commands) until EOF or .quit. A failed
  // statement or dot command is reported and the script goes on, unless --bail (set_bail), which
  // stops it. A last statement without ';' is run at EOF. Returns exit_failure when anything
  // failed, else exit_ok (see no_data() for exit_no_data). A line or statement longer than
  // max_input_bytes (input.hpp) stops the script with an error naming `source` and the line.
  int run_script(std::istream &in, std::string_view source = "standard input");

  // Sends an interrupt to the running statement: safe to call from a signal handler. The
  // statement fails with "Interrupted" (needs query::reader::interrupt(); without it this only
  // sets the flag). True when the reader can be interrupted.
  void interrupt() noexcept;
  static bool can_interrupt();

  // Names for tab completion: tables, views and their columns (sorted, unique).
  std::vector<std::string> schema_names();
  // The SQL functions and table-valued functions the connection knows, lower case, sorted.
  std::vector<std::string> function_names();
  // The ".help" lines naming this database's views.
  std::string views_help();
  // schema_names() plus the SQL functions and table-valued functions the connection knows.
  std::vector<std::string> completion_names();

  // Prints "rsched-sql: <msg>" (escaped for the terminal) on the error stream.
  void report_error(std::string_view msg);

  [[nodiscard]] const output_config &config() const { return printer_.config(); }
  // True once a statement naming a time window returned no rows.
  [[nodiscard]] bool no_data() const { return no_data_; }

  // The dot commands, for .help and completion.
  static const std::vector<std::string> &dot_commands();

private:
  // run_sql for the shell's own statements: `params` bound to ?1, ?2, ... of `sql`.
  status run_bound(std::string_view sql, const std::vector<query::value> &params);
  status run_statements(std::string_view sql, std::size_t first_line,
                        const std::vector<query::value> *params);
  // Reports on stderr when the window a statement asked for is only partly recorded.
  void note_coverage(std::int64_t a, std::int64_t b);
  std::optional<double> recorded_pct(std::int64_t a, std::int64_t b);
  status query_lines(std::string_view sql, std::vector<std::string> &lines,
                     const std::vector<query::value> &params = {});
  status open_output(const std::string &file, std::unique_ptr<safe_file> &slot);
  void route_output(); // points the printer at the .once file, the .output file or `out_`
  status dot_mark(const std::vector<std::string> &args);
  status dot_picture(const std::string &kind, const std::vector<std::string> &args);
  status dot_import(const std::vector<std::string> &args);
  status dot_read(const std::vector<std::string> &args);

  query::reader &db_;
  std::ostream &out_;
  std::ostream &err_;
  printer printer_;
  bool terminal_escape_;          // cfg.escape_csv_text given for `out_`
  std::size_t terminal_max_rows_; // cfg.max_rows given for `out_`
  std::optional<std::string> pager_;
  // Writes a rendered result to `out_`, or through the pager when it is wider or taller than
  // the terminal.
  void emit_paged(const std::string &text);
  std::unique_ptr<safe_file> output_file_; // .output FILE (sticky)
  std::unique_ptr<safe_file> once_file_;   // .once FILE (next statement)
  std::string db_path_;
  bool bail_ = false;
  bool timer_ = false;
  bool tiers_ = false; // .tiers on: what the data views read, after each statement
  bool no_data_ = false;
  int read_depth_ = 0;
  volatile std::sig_atomic_t interrupted_ = 0;
};

// True when `sql` calls one of the time window functions t(, ago(, around(, during( (name
// directly followed by '(', any case, outside string literals, quoted identifiers and comments).
bool names_time_window(std::string_view sql);

// Adds the annotation of a mark command (times parsed in `z`, relative to `now_ns`); returns its
// id. Writes through query::add_annotation (a short read-write connection).
result<std::int64_t> add_mark(const std::string &db_path, const mark_args &m,
                              const timefmt::zone &z, std::int64_t now_ns);

// Parses the arguments of ".mark TEXT [--at T] [--until T] [--tags a,b]" (the words of TEXT are
// joined with spaces).
result<mark_args> parse_mark_args(const std::vector<std::string> &args);

// An error of query::reader::exec on SQL that starts at input line `first_line` (1-based), with
// its position made relative to the whole input: a leading "line L" (the reader's line within the
// SQL it got) becomes "line L + first_line - 1"; other messages get " (input line N)".
std::string locate(const std::string &msg, std::size_t first_line);

// Tab completion candidates for `word`, the word being completed; `before` is the current line up
// to that word and `statement_start` tells whether the line starts a new statement. At the start
// of a statement, a word starting with '.' completes to dot commands; after ".mode", ".headers",
// ".timer" and ".tz" to their arguments; elsewhere to `names` (case-insensitive match) and SQL
// keywords and rsched functions (in the case of the word's first letter).
std::vector<std::string> completions(std::string_view before, std::string_view word,
                                     bool statement_start, const std::vector<std::string> &names);

// True when the word being completed is the file argument of .output, .once, .read or
// .import-incidents (the interactive shell then completes file names).
bool completes_file_name(std::string_view before, bool statement_start);

} // namespace rsched::sql_shell
