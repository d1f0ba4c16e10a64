#include "rsched/sql_shell/shell.hpp"

#include "rsched/base/text.hpp"
#include "rsched/sql_shell/input.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>

namespace rsched::sql_shell {

namespace {

constexpr const char *help_text = R"(.exit                 leave (also .quit or Ctrl-D)
.headers on|off       show or hide the header row
.help                 show this message
.mode table|csv       aligned table (text escaped) or RFC 4180 CSV
.quit                 leave (also .exit or Ctrl-D)
.schema [PATTERN]     CREATE statements of the objects whose name is LIKE PATTERN
.tables               list the tables and views
Statements end with ';' and may span lines. Views: sched_delay, cpu_sched_delay, runq_depth.
Functions: hist_percentile(hist, p) (aggregate, ns), ipc(instructions, cycles).
)";

} // namespace

std::string locate(const std::string &msg, std::size_t first_line) {
  constexpr std::string_view prefix = "line ";
  if (msg.rfind(prefix, 0) == 0) {
    std::size_t i = prefix.size();
    std::size_t n = 0;
    while (i < msg.size() && msg[i] >= '0' && msg[i] <= '9' && n < 1'000'000'000) {
      n = n * 10 + static_cast<std::size_t>(msg[i] - '0');
      ++i;
    }
    if (i > prefix.size() && n > 0) {
      return fmt::format("line {}{}", n + first_line - 1, msg.substr(i));
    }
  }
  return fmt::format("{} (input line {})", msg, first_line);
}

shell::shell(store::reader &db, std::ostream &out, std::ostream &err, output_config cfg)
    : db_(db), out_(out), err_(err), printer_(out, cfg) {}

const std::vector<std::string> &shell::dot_commands() {
  static const std::vector<std::string> names = {".exit", ".headers", ".help",  ".mode",
                                                 ".quit", ".schema",  ".tables"};
  return names;
}

void shell::report_error(std::string_view msg) {
  printer_.finish();
  err_ << program_name << ": " << text::escape_for_terminal(msg) << '\n';
  err_.flush();
}

shell::status shell::run_sql(std::string_view sql, std::size_t first_line) {
  auto r = db_.exec(sql, printer_.sink());
  printer_.finish();
  if (!r) {
    report_error(first_line > 0 ? locate(r.err().msg, first_line) : r.err().msg);
    return status::failed;
  }
  return status::ok;
}

shell::status shell::query_lines(std::string_view sql, std::vector<std::string> &lines) {
  store::result_sink sink;
  sink.on_columns = [](const std::vector<std::string> &) {};
  sink.on_row = [&](const std::vector<store::value> &row) {
    if (!row.empty()) {
      if (const auto *s = std::get_if<std::string>(&row.front())) {
        lines.push_back(*s);
      }
    }
  };
  auto r = db_.exec(sql, sink);
  if (!r) {
    report_error(r.err().msg);
    return status::failed;
  }
  return status::ok;
}

shell::status shell::run_dot(std::string_view line) {
  const dot_command cmd = parse_dot_command(line);
  const auto &args = cmd.args;
  auto usage = [&](std::string_view u) {
    report_error(fmt::format("usage: {}", u));
    return status::failed;
  };
  if (cmd.name == ".quit" || cmd.name == ".exit") {
    return status::quit;
  }
  if (cmd.name == ".help") {
    out_ << help_text;
    out_.flush();
    return status::ok;
  }
  if (cmd.name == ".mode") {
    if (args.size() != 1 || (args[0] != "table" && args[0] != "csv")) {
      return usage(".mode table|csv");
    }
    printer_.config().mode = args[0] == "csv" ? output_mode::csv : output_mode::table;
    return status::ok;
  }
  if (cmd.name == ".headers") {
    if (args.size() != 1 || (args[0] != "on" && args[0] != "off")) {
      return usage(".headers on|off");
    }
    printer_.config().headers = args[0] == "on";
    return status::ok;
  }
  if (cmd.name == ".tables") {
    if (!args.empty()) {
      return usage(".tables");
    }
    std::vector<std::string> names;
    const auto st = query_lines("SELECT name FROM sqlite_schema WHERE type IN ('table', 'view') "
                                "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name",
                                names);
    for (const auto &n : names) {
      out_ << text::escape_for_terminal(n) << '\n';
    }
    out_.flush();
    return st;
  }
  if (cmd.name == ".schema") {
    if (args.size() > 1) {
      return usage(".schema [PATTERN]");
    }
    std::string sql = "SELECT sql FROM sqlite_schema WHERE sql IS NOT NULL";
    if (!args.empty()) {
      sql += " AND name LIKE " + sql_quote(args[0]);
    }
    sql += " ORDER BY type = 'view', tbl_name, type <> 'table', name";
    std::vector<std::string> stmts;
    const auto st = query_lines(sql, stmts);
    for (const auto &s : stmts) {
      // Line by line: the statement keeps its layout, any other control byte is escaped.
      std::size_t start = 0;
      for (std::size_t nl = s.find('\n'); nl != std::string::npos; nl = s.find('\n', start)) {
        out_ << text::escape_for_terminal(std::string_view(s).substr(start, nl - start)) << '\n';
        start = nl + 1;
      }
      out_ << text::escape_for_terminal(std::string_view(s).substr(start)) << ";\n";
    }
    out_.flush();
    return st;
  }
  report_error(fmt::format("unknown command '{}' (see .help)", cmd.name));
  return status::failed;
}

shell::status shell::run_command(std::string_view text) {
  return is_dot_command(text) ? run_dot(text) : run_sql(text);
}

int shell::run_script(std::istream &in) {
  statement_buffer buf;
  std::string line;
  std::size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') {
      line.pop_back();
    }
    if (buf.empty() && is_dot_command(line)) {
      buf.clear();
      const auto st = run_dot(line);
      if (st == status::quit) {
        return exit_ok;
      }
      if (st == status::failed) {
        return exit_failure;
      }
      continue;
    }
    if (buf.add_line(line, line_no)) {
      const std::size_t first = buf.first_line();
      if (run_sql(buf.take(), first) != status::ok) {
        return exit_failure;
      }
    } else if (buf.empty()) {
      buf.clear(); // only blanks and comments so far
    }
  }
  if (!buf.empty()) {
    const std::size_t first = buf.first_line();
    if (run_sql(buf.take(), first) != status::ok) {
      return exit_failure;
    }
  }
  return exit_ok;
}

std::vector<std::string> shell::schema_names() {
  std::vector<std::string> names;
  store::result_sink sink;
  sink.on_columns = [](const std::vector<std::string> &) {};
  sink.on_row = [&](const std::vector<store::value> &row) {
    for (const auto &v : row) {
      if (const auto *s = std::get_if<std::string>(&v)) {
        names.push_back(*s);
      }
    }
  };
  (void)db_.exec("SELECT s.name, p.name FROM sqlite_schema AS s, pragma_table_info(s.name) AS p "
                 "WHERE s.type IN ('table', 'view') AND s.name NOT LIKE 'sqlite\\_%' ESCAPE '\\'",
                 sink);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

std::vector<std::string> completions(std::string_view before, std::string_view word,
                                     bool statement_start, const std::vector<std::string> &names) {
  static const std::vector<std::string> keywords = {
      "AND",  "AS",       "ASC",    "AVG",  "BETWEEN", "BY",    "CASE",     "COUNT",
      "DESC", "DISTINCT", "ELSE",   "END",  "EXPLAIN", "FROM",  "GROUP",    "HAVING",
      "IN",   "IS",       "JOIN",   "LEFT", "LIKE",    "LIMIT", "MAX",      "MIN",
      "NOT",  "NULL",     "OFFSET", "ON",   "OR",      "ORDER", "SELECT",   "SUM",
      "THEN", "UNION",    "USING",  "WHEN", "WHERE",   "WITH",  "datetime", "hist_percentile",
      "ipc"};
  std::vector<std::string> out;
  auto lower = [](std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](char c) {
      return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
    });
    return s;
  };
  const std::string word_lc = lower(std::string(word));
  // SQL names are case-insensitive: so is the match; the candidate keeps its spelling.
  auto offer = [&](const std::string &candidate) {
    if (candidate.size() >= word.size() && lower(candidate.substr(0, word.size())) == word_lc) {
      out.push_back(candidate);
    }
  };
  const bool dot_line = statement_start && is_dot_command(std::string(before) + std::string(word));
  if (dot_line && is_blank(before)) {
    for (const auto &c : shell::dot_commands()) {
      offer(c);
    }
  } else if (dot_line) {
    const auto cmd = parse_dot_command(before);
    if (cmd.args.empty() && cmd.name == ".mode") {
      offer("table");
      offer("csv");
    } else if (cmd.args.empty() && cmd.name == ".headers") {
      offer("on");
      offer("off");
    } else if (cmd.args.empty() && cmd.name == ".schema") {
      for (const auto &n : names) {
        offer(n);
      }
    }
  } else {
    for (const auto &n : names) {
      offer(n);
    }
    const bool lower_case = !word.empty() && word.front() >= 'a' && word.front() <= 'z';
    for (const auto &k : keywords) {
      offer(lower_case ? lower(k) : k);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

} // namespace rsched::sql_shell
