#include "rsched/sql_shell/input.hpp"

#include "rsched/query/reader.hpp"

namespace rsched::sql_shell {

namespace {

bool blank_char(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

} // namespace

line_read read_line(std::istream &in, std::string &line, std::size_t max) {
  line.clear();
  std::streambuf *sb = in.rdbuf();
  if (sb == nullptr || !in.good()) {
    return line_read::end;
  }
  using traits = std::istream::traits_type;
  for (;;) {
    const auto c = sb->sbumpc();
    if (traits::eq_int_type(c, traits::eof())) {
      in.setstate(std::ios::eofbit);
      return line.empty() ? line_read::end : line_read::line;
    }
    if (traits::to_char_type(c) == '\n') {
      return line_read::line;
    }
    if (line.size() >= max) {
      return line_read::too_long;
    }
    line.push_back(traits::to_char_type(c));
  }
}

namespace {

// False when adding `line` cannot have made the SQL complete, so that a long statement is not
// rescanned whole for every line: complete SQL ends with ';' followed only by blanks and
// comments, so the line (its last non-blank part) must end with ';' or "*/", or hold a "--"
// comment.
bool may_complete(std::string_view line) {
  while (!line.empty() && blank_char(line.back())) {
    line.remove_suffix(1);
  }
  if (line.empty()) {
    return false;
  }
  return line.back() == ';' || line.ends_with("*/") || line.find("--") != std::string_view::npos;
}

} // namespace

statement_buffer::statement_buffer() : complete_(&query::reader::complete), sql_rules_(true) {}

bool statement_buffer::add_line(std::string_view line, std::size_t line_no) {
  if (!has_lines_) {
    first_line_ = line_no;
    has_lines_ = true;
  } else {
    text_ += '\n';
  }
  text_ += line;
  if (sql_rules_ && !may_complete(line)) {
    return false;
  }
  return !empty() && complete_(text_);
}

bool statement_buffer::empty() const {
  return is_blank_sql(text_);
}

std::string statement_buffer::take() {
  std::string s = std::move(text_);
  clear();
  return s;
}

void statement_buffer::clear() {
  text_.clear();
  has_lines_ = false;
  first_line_ = 0;
}

bool is_blank(std::string_view s) {
  for (const char c : s) {
    if (!blank_char(c)) {
      return false;
    }
  }
  return true;
}

bool is_blank_sql(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    if (blank_char(s[i])) {
      ++i;
    } else if (s.substr(i, 2) == "--") {
      const auto nl = s.find('\n', i);
      i = nl == std::string_view::npos ? s.size() : nl + 1;
    } else if (s.substr(i, 2) == "/*") {
      const auto end = s.find("*/", i + 2);
      if (end == std::string_view::npos) {
        return false;
      }
      i = end + 2;
    } else {
      return false;
    }
  }
  return true;
}

bool is_dot_command(std::string_view line) {
  for (const char c : line) {
    if (!blank_char(c)) {
      return c == '.';
    }
  }
  return false;
}

dot_command parse_dot_command(std::string_view line) {
  std::vector<std::string> words;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && blank_char(line[i])) {
      ++i;
    }
    if (i == line.size()) {
      break;
    }
    std::string w;
    if (line[i] == '\'' || line[i] == '"') {
      const char q = line[i++];
      while (i < line.size() && line[i] != q) {
        w += line[i++];
      }
      if (i < line.size()) {
        ++i; // closing quote
      }
    } else {
      while (i < line.size() && !blank_char(line[i])) {
        w += line[i++];
      }
    }
    words.push_back(std::move(w));
  }
  dot_command d;
  if (!words.empty()) {
    d.name = std::move(words.front());
    d.args.assign(std::make_move_iterator(words.begin() + 1), std::make_move_iterator(words.end()));
  }
  return d;
}

std::string sql_quote(std::string_view s) {
  std::string out = "'";
  for (const char c : s) {
    if (c == '\'') {
      out += '\'';
    }
    out += c;
  }
  out += '\'';
  return out;
}

} // namespace rsched::sql_shell
