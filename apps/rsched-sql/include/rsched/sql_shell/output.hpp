#pragma once
// Formatting query results: tables for people (ASCII, box, Markdown, line), RFC 4180 CSV and
// RFC 8259 JSON / JSON lines, written to a std::ostream.
//
// CSV is data: text is written byte for byte as stored (any bytes, not only UTF-8) unless the
// caller asks for terminal escaping (stdout is a terminal). JSON is data too and is always safe on
// a terminal (every control character is a \u escape; see text::append_json_string). The human
// modes escape every text cell and column name through rsched::text::escape_for_terminal, whatever
// stdout is, so they never carry a raw control byte; they also show ns columns with units and
// UTC ns timestamps as times in the display zone.
#include "rsched/base/timefmt.hpp"
#include "rsched/query/reader.hpp"
#include "rsched/sql_shell/options.hpp"

#include <cstddef>
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
void append_csv_field(std::string &out, const query::value &v, bool escape_text);

// One CSV record: the fields separated by ',' and terminated by CRLF.
std::string csv_record(const std::vector<query::value> &row, bool escape_text);
std::string csv_header(const std::vector<std::string> &columns, bool escape_text);

// Appends one value as JSON: null, integer, real (non-finite: null), string (per
// text::append_json_string: U+FFFD for each byte that is not part of valid UTF-8), blob as a
// string of lowercase hex.
void append_json_value(std::string &out, const query::value &v);

// One JSON object {"col":value,...} for a row (no line end). A text value that is not valid UTF-8
// is followed by a member "<col>_hex" with its exact bytes in lowercase hex (rsched/base/text.hpp);
// when a column of the result already has that name, "_hex" is added again until the name is free.
std::string json_object(const std::vector<std::string> &columns,
                        const std::vector<query::value> &row);

// How the human modes show a column, from its name (ASCII case-insensitive):
//   time      ts, peak_ts, start_ns, end_ns: UTC ns, shown as a time when the value is > 1e17
//   percentile  p50_ns, p99_ns, p99_9_ns (also a_/b_ prefixed, as compare() names them) and
//             peak_ns: a latency percentile, shown as the histogram bucket that holds it
//   duration  dur, or another name ending in _ns: ns shown with a unit
//   percent   a name ending in _pct (share_pct, coverage_pct, some_pct, ...): a REAL shown with
//             one decimal (97.6); the data modes keep the full value
//   plain     everything else
enum class column_kind { plain, duration, time, percentile, percent };
column_kind classify_column(std::string_view name);

// ns with a unit and three significant digits: "950 ns", "1.50 µs", "4.10 ms", "12.3 s",
// "250 s" (seconds are the largest unit).
std::string format_duration_ns(double ns);

// A latency percentile (ns) as the bucket of the latency layout that holds it, the precision it
// has: the reported value and the exact percentile both lie in that bucket (docs/SQL.md,
// "Percentiles"). "8.19–16.4 ms", "120–130 µs"; the open-ended top bucket "≥ 4295 s". `fine`:
// the bucket of layout 5 (latency_fine), for a value answered at its precision ("5.63–6.14 ms").
// Values that are no bucket's (negative, not finite) fall back to format_duration_ns.
std::string format_percentile_ns(double ns, bool fine = false);

// A table cell as displayed: escaped text, numbers right-aligned.
struct cell {
  std::string text; // already safe for a terminal
  bool right = false;
};

// Display form of a value in a table: NULL as "NULL", blobs as "<blob N bytes>", text escaped.
cell table_cell(const query::value &v);

// table_cell with units: a number in a duration column per format_duration_ns, in a percentile
// column per format_percentile_ns, a REAL in a percent column with one decimal, an integer > 1e17
// in a time column per timefmt::format_time in `z`.
cell human_cell(const query::value &v, column_kind kind, const timefmt::zone &z);

enum class table_style { ascii, box };

// Draws a table (sqlite3's ".mode table" look, or with box-drawing characters). `header`
// (escaped by this function) is drawn when `show_header`; all rows must have header.size()
// cells. Widths use text::display_width.
//   +------+-----+
//   | comm | n   |
//   +------+-----+
//   | a    |   1 |
//   +------+-----+
void render_table(std::ostream &out, const std::vector<std::string> &header,
                  const std::vector<std::vector<cell>> &rows, bool show_header,
                  table_style style = table_style::ascii);

// A Markdown table: "| a | b |", "|---|--:|" (numbers right-aligned), rows; '|' in a cell or
// name is written as '\|'. Without a header an empty header row is written (Markdown needs one).
void render_markdown(std::ostream &out, const std::vector<std::string> &header,
                     const std::vector<std::vector<cell>> &rows, bool show_header);

// sqlite3's line mode: per row one "name = value" line per column (names right-aligned), rows
// separated by a blank line.
void render_line(std::ostream &out, const std::vector<std::string> &header,
                 const std::vector<std::vector<cell>> &rows);

struct output_config {
  output_mode mode = output_mode::table;
  bool headers = true;                         // header row (table, markdown and CSV)
  bool escape_csv_text = false;                // set when the output is a terminal
  timefmt::zone zone = timefmt::zone::local(); // display zone of the human modes
  bool units = true;                           // human modes: durations and times with units
  std::size_t max_rows = 0; // human modes: rows shown per result, 0 = all (set on a terminal)
};

// Receives the results of statements and prints them. CSV and JSON lines rows are written as they
// arrive (the CSV header with the first row); human modes are buffered until their statement ends
// (a new statement's columns, or finish()); JSON arrays are opened at the first row and closed at
// the end of the statement. A statement that fails before its first row prints nothing at all:
// no header, no empty table, no "[]" - only the error.
class printer {
public:
  printer(std::ostream &out, output_config cfg) : out_(&out), cfg_(std::move(cfg)) {}

  void begin(const std::vector<std::string> &columns);
  void row(const std::vector<query::value> &values);
  // Prints a pending result. Call after every exec; `ok` false when it failed (interrupted, an
  // error): a result without rows is then dropped, one with rows is printed as far as it got.
  void finish(bool ok = true);

  // A sink whose callbacks forward to begin()/row(); valid while this printer lives.
  query::result_sink sink();

  // Where results go from now on (call between statements).
  void set_stream(std::ostream &out) { out_ = &out; }
  [[nodiscard]] std::ostream &stream() const { return *out_; }

  output_config &config() { return cfg_; }
  const output_config &config() const { return cfg_; }

  // Results (statements with columns) that had no row, since the last reset.
  [[nodiscard]] std::size_t empty_results() const { return empty_results_; }
  void reset_counts() { empty_results_ = 0; }

private:
  std::ostream *out_;
  output_config cfg_;
  bool pending_ = false; // a statement's columns were seen, not yet finished
  std::size_t row_count_ = 0;
  bool csv_header_due_ = false; // CSV: the header waits for the first row or a successful end
  std::vector<std::string> columns_;
  std::vector<column_kind> kinds_;
  std::vector<std::vector<cell>> rows_;
  // The percentile cells of rows_ (row, column, ns): printed in layout 5's buckets at finish()
  // when every percentile the statement's functions answered was at layout 5's precision
  // (store::answered_precision, reset by begin()).
  struct percentile_cell {
    std::size_t row;
    std::size_t col;
    double ns;
  };
  std::vector<percentile_cell> percentiles_;
  std::size_t empty_results_ = 0;
};

} // namespace rsched::sql_shell
