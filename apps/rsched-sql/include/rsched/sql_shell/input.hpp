#pragma once
// Input handling shared by the interactive shell and scripts on stdin: accumulating lines into
// whole statements, and recognising and splitting dot commands.
#include <cstddef>
#include <functional>
#include <istream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rsched::sql_shell {

// Accumulates input lines until they form complete SQL statement(s) (by default per
// query::reader::complete, i.e. sqlite3_complete: ends with ';' outside quotes, comments and
// triggers).
class statement_buffer {
public:
  using completeness = std::function<bool(std::string_view)>;
  statement_buffer();
  explicit statement_buffer(completeness is_complete) : complete_(std::move(is_complete)) {}

  // Adds one line (without its line end) read at input line `line_no` (1-based). Returns true when
  // the buffer now holds complete statement(s), ready for take().
  bool add_line(std::string_view line, std::size_t line_no = 0);

  // True while nothing but whitespace and SQL comments has been added since the last
  // take()/clear() (see is_blank_sql).
  [[nodiscard]] bool empty() const;
  [[nodiscard]] const std::string &text() const { return text_; }
  // Input line number of the buffer's first line (as given to add_line).
  [[nodiscard]] std::size_t first_line() const { return first_line_; }

  // Returns the accumulated lines joined with '\n' and empties the buffer.
  std::string take();
  void clear();

private:
  completeness complete_;
  bool sql_rules_ = false; // complete_ is SQLite's: a line can only complete SQL in some ways
  std::string text_;
  bool has_lines_ = false;
  std::size_t first_line_ = 0;
};

// True when `s` holds only spaces, tabs, CR or LF.
bool is_blank(std::string_view s);

// True when `s` holds only blanks, "-- ..." comments and closed "/* ... */" comments: nothing to
// run. An unterminated "/*" is not blank (the statement goes on).
bool is_blank_sql(std::string_view s);

// True when `line` is a dot command: its first non-blank character is '.'. Only meaningful at the
// start of a statement (an empty statement_buffer).
bool is_dot_command(std::string_view line);

struct dot_command {
  std::string name;              // with the dot: ".schema"
  std::vector<std::string> args; // split on blanks; '...' and "..." group (no escapes inside)
};

// Splits a dot command line. An unterminated quote runs to the end of the line.
dot_command parse_dot_command(std::string_view line);

// The most rsched-sql reads as one input line, one statement or one incident file (64 MiB): an
// endless input (/dev/zero, a runaway pipe) is an error, not an allocation failure.
inline constexpr std::size_t max_input_bytes = std::size_t{64} << 20;

enum class line_read {
  line,     // `line` holds the next line (without its '\n')
  end,      // end of input, nothing read
  too_long, // more than `max` bytes without a line end (the rest of that line is not read)
};

// Reads one line of at most `max` bytes (a last line without '\n' counts).
line_read read_line(std::istream &in, std::string &line, std::size_t max = max_input_bytes);

// `s` as an SQL string literal: 'it''s'.
std::string sql_quote(std::string_view s);

} // namespace rsched::sql_shell
