#pragma once
// Formatting query results: RFC 4180 CSV and aligned tables, written to a std::ostream.
//
// CSV is data: text is written byte for byte as stored (any bytes, not only UTF-8) unless the
// caller asks for terminal escaping (stdout is a terminal). Tables are for people: every text
// cell and column name goes through rsched::text::escape_for_terminal, whatever stdout is, so a
// table never carries a raw control byte.
#include "rsched/sql_shell/options.hpp"
#include "rsched/store/reader.hpp"

#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace rsched::sql_shell {

// Shortest decimal form that reads back as the same double; always has a '.' or an exponent so
// it does not look like an integer ("2.0", "0.1", "1e+20"). Infinities are "Inf" and "-Inf".
std::string format_real(double d);

// Lowercase hex of a blob as an SQL literal: x'00ff'.
std::string blob_literal(const std::vector<std::uint8_t> &b);

// Appends `s` as one RFC 4180 field: quoted when it holds a comma, double quote, CR or LF or is
// empty (so "" is the empty string and an unquoted empty field is NULL), quotes doubled. Other
// bytes are copied unchanged.
void append_csv_text(std::string &out, std::string_view s);

// Appends one value as a CSV field: NULL empty, integers in decimal, reals per format_real, blobs
// per blob_literal, text per append_csv_text (escaped for the terminal first if `escape_text`).
void append_csv_field(std::string &out, const store::value &v, bool escape_text);

// One CSV record: the fields separated by ',' and terminated by CRLF.
std::string csv_record(const std::vector<store::value> &row, bool escape_text);
std::string csv_header(const std::vector<std::string> &columns, bool escape_text);

// A table cell as displayed: escaped text, numbers right-aligned.
struct cell {
  std::string text; // already safe for a terminal
  bool right = false;
};

// Display form of a value in a table: NULL as "NULL", blobs as "<blob N bytes>", text escaped.
cell table_cell(const store::value &v);

// Draws an ASCII table (sqlite3's ".mode table" look). `header` (escaped by this function) is
// drawn when `show_header`; all rows must have header.size() cells. Widths use
// text::display_width.
//   +------+-----+
//   | comm | n   |
//   +------+-----+
//   | a    |   1 |
//   +------+-----+
void render_table(std::ostream &out, const std::vector<std::string> &header,
                  const std::vector<std::vector<cell>> &rows, bool show_header);

struct output_config {
  output_mode mode = output_mode::table;
  bool headers = true;          // header row (table and CSV)
  bool escape_csv_text = false; // set when stdout is a terminal
};

// Receives the results of statements and prints them. CSV rows are written as they arrive;
// a table is buffered until its statement ends (a new statement's columns, or finish()).
class printer {
public:
  printer(std::ostream &out, output_config cfg) : out_(out), cfg_(cfg) {}

  void begin(const std::vector<std::string> &columns);
  void row(const std::vector<store::value> &values);
  // Prints a pending table. Call after every exec (successful or not).
  void finish();

  // A sink whose callbacks forward to begin()/row(); valid while this printer lives.
  store::result_sink sink();

  output_config &config() { return cfg_; }
  const output_config &config() const { return cfg_; }

private:
  std::ostream &out_;
  output_config cfg_;
  bool pending_ = false;
  std::vector<std::string> columns_;
  std::vector<std::vector<cell>> rows_;
};

} // namespace rsched::sql_shell
