// check_histogram_aggregation (sql_lint.hpp): a small SQL tokenizer, then a walk over the SELECT
// cores of one statement.
#include "rsched/query/sql_lint.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

namespace rsched::query {

namespace {

enum class tok { word, quoted, literal, lparen, rparen, comma, dot, other };

struct token {
  tok kind = tok::other;
  std::size_t begin = 0;
  std::size_t end = 0;
  std::string lower; // words: lower-case text; quoted identifiers: the name without quotes
};

bool word_start(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
}

bool word_char(unsigned char c) {
  return word_start(c) || (c >= '0' && c <= '9') || c == '$';
}

std::string lower_of(std::string_view s) {
  std::string out(s);
  for (char &c : out) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  return out;
}

// Index just past a quoted run that starts at `i` (s[i] is the opening quote); a doubled closing
// quote is an escaped one. Unterminated: the end of the text.
std::size_t skip_quoted(std::string_view s, std::size_t i, char close) {
  for (std::size_t j = i + 1; j < s.size(); ++j) {
    if (s[j] == close) {
      if (close != ']' && j + 1 < s.size() && s[j + 1] == close) {
        ++j;
        continue;
      }
      return j + 1;
    }
  }
  return s.size();
}

std::vector<token> tokenize(std::string_view s) {
  std::vector<token> out;
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
      ++i;
      continue;
    }
    if (c == '-' && i + 1 < s.size() && s[i + 1] == '-') {
      const auto nl = s.find('\n', i);
      i = nl == std::string_view::npos ? s.size() : nl + 1;
      continue;
    }
    if (c == '/' && i + 1 < s.size() && s[i + 1] == '*') {
      const auto close = s.find("*/", i + 2);
      i = close == std::string_view::npos ? s.size() : close + 2;
      continue;
    }
    token t;
    t.begin = i;
    if ((c == 'x' || c == 'X') && i + 1 < s.size() && s[i + 1] == '\'') {
      t.kind = tok::literal; // blob literal
      i = skip_quoted(s, i + 1, '\'');
    } else if (word_start(c)) {
      std::size_t j = i + 1;
      while (j < s.size() && word_char(static_cast<unsigned char>(s[j]))) {
        ++j;
      }
      t.kind = tok::word;
      t.lower = lower_of(s.substr(i, j - i));
      i = j;
    } else if (c == '"' || c == '`' || c == '[') {
      const char close = c == '[' ? ']' : static_cast<char>(c);
      const std::size_t j = skip_quoted(s, i, close);
      t.kind = tok::quoted;
      t.lower = lower_of(s.substr(i + 1, j > i + 1 ? j - i - 2 : 0));
      i = j;
    } else if (c == '\'') {
      t.kind = tok::literal;
      i = skip_quoted(s, i, '\'');
    } else if ((c >= '0' && c <= '9') ||
               (c == '.' && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '9')) {
      std::size_t j = i + 1;
      while (j < s.size() &&
             (word_char(static_cast<unsigned char>(s[j])) || s[j] == '.' ||
              ((s[j] == '+' || s[j] == '-') && (s[j - 1] == 'e' || s[j - 1] == 'E')))) {
        ++j;
      }
      t.kind = tok::literal;
      i = j;
    } else if (c == '?' || c == ':' || c == '@' || c == '$') {
      std::size_t j = i + 1;
      while (j < s.size() && word_char(static_cast<unsigned char>(s[j]))) {
        ++j;
      }
      t.kind = tok::literal; // a parameter
      i = j;
    } else {
      t.kind = c == '('   ? tok::lparen
               : c == ')' ? tok::rparen
               : c == ',' ? tok::comma
               : c == '.' ? tok::dot
                          : tok::other;
      ++i;
    }
    t.end = i;
    out.push_back(std::move(t));
  }
  return out;
}

constexpr std::array<std::string_view, 7> hist_scalars = {
    "hist_max", "hist_mean", "hist_count", "hist_count_above", "hist_fraction_above",
    "hist_pct", "hist_error"};

// SQLite's built-in aggregates and rsched's; min and max aggregate with one argument only.
constexpr std::array<std::string_view, 13> aggregates = {"count",
                                                         "sum",
                                                         "avg",
                                                         "total",
                                                         "group_concat",
                                                         "string_agg",
                                                         "json_group_array",
                                                         "json_group_object",
                                                         "jsonb_group_array",
                                                         "jsonb_group_object",
                                                         "hist_percentile",
                                                         "hist_merge",
                                                         "hist_percentile_error"};

template <std::size_t N>
bool one_of(const std::array<std::string_view, N> &set, std::string_view w) {
  return std::find(set.begin(), set.end(), w) != set.end();
}

// The data views' measure columns: what rollup rows add up (tier_text_of).
constexpr std::array<std::string_view, 34> measure_columns = {"count",
                                                              "total_ns",
                                                              "hist",
                                                              "voluntary_count",
                                                              "involuntary_count",
                                                              "voluntary_hist",
                                                              "involuntary_hist",
                                                              "voluntary_ns",
                                                              "involuntary_ns",
                                                              "seconds",
                                                              "total",
                                                              "cross_ccx_hist",
                                                              "cross_numa_hist",
                                                              "cross_ccx",
                                                              "cross_numa",
                                                              "user_cycles",
                                                              "kernel_cycles",
                                                              "user_instructions",
                                                              "kernel_instructions",
                                                              "value",
                                                              "rate_hist",
                                                              "enabled_ns",
                                                              "running_ns",
                                                              "delta",
                                                              "wait_ns",
                                                              "approx_ns",
                                                              "some_ns",
                                                              "full_ns",
                                                              "some_pct",
                                                              "full_pct",
                                                              "usage_ns",
                                                              "periods",
                                                              "throttled",
                                                              "throttled_ns"};

enum class clause { result, from, where, group, having, window, order, limit };

struct candidate {
  std::size_t name_tok = 0; // index of the function's name
  std::string column;       // the bare column's name (last part, lower case)
  bool by_alias = false;    // in HAVING or ORDER BY, where a result alias may be meant
  std::size_t arg_begin = 0, arg_end = 0, rest_end = 0; // byte ranges of the call's text
};

struct core_state {
  bool aggregate = false;
  std::vector<std::string> grouped; // words of the GROUP BY clause
  std::vector<std::string> aliases; // result aliases
  std::vector<candidate> found;
};

class linter {
public:
  linter(std::string_view text, std::vector<token> toks) : s_(text), t_(std::move(toks)) {
    match_.assign(t_.size(), t_.size());
    std::vector<std::size_t> open;
    for (std::size_t i = 0; i < t_.size(); ++i) {
      if (t_[i].kind == tok::lparen) {
        open.push_back(i);
      } else if (t_[i].kind == tok::rparen) {
        if (open.empty()) {
          balanced_ = false;
          return;
        }
        match_[open.back()] = i;
        open.pop_back();
      }
    }
    balanced_ = open.empty();
  }

  std::optional<sql_lint_error> run() {
    if (balanced_) {
      statement(0, t_.size());
    }
    return std::move(error_);
  }

private:
  [[nodiscard]] bool is_word(std::size_t i, std::string_view w) const {
    return i < t_.size() && t_[i].kind == tok::word && t_[i].lower == w;
  }

  [[nodiscard]] bool starts_query(std::size_t b, std::size_t e) const {
    return b < e && (is_word(b, "select") || is_word(b, "with") || is_word(b, "values"));
  }

  // A statement or subquery in tokens [b, e): its parenthesised parts outside SELECT cores (CTE
  // bodies, INSERT's column list) are statements of their own; each SELECT starts a core that
  // runs to the next compound operator at this level.
  void statement(std::size_t b, std::size_t e) {
    std::size_t i = b;
    while (i < e && !error_) {
      if (is_word(i, "select")) {
        std::size_t j = i + 1;
        while (j < e && !is_word(j, "union") && !is_word(j, "intersect") && !is_word(j, "except") &&
               !is_word(j, "select")) {
          j = t_[j].kind == tok::lparen ? match_[j] + 1 : j + 1;
        }
        core(i + 1, std::min(j, e));
        i = j;
      } else if (t_[i].kind == tok::lparen) {
        statement(i + 1, match_[i]);
        i = match_[i] + 1;
      } else {
        ++i;
      }
    }
  }

  void core(std::size_t b, std::size_t e) {
    core_state st;
    scan(b, e, st, clause::result, false, true);
    if (error_ || !st.aggregate) {
      return;
    }
    for (const candidate &c : st.found) {
      const bool grouped =
          std::find(st.grouped.begin(), st.grouped.end(), c.column) != st.grouped.end();
      const bool alias = c.by_alias && std::find(st.aliases.begin(), st.aliases.end(), c.column) !=
                                           st.aliases.end();
      if (!grouped && !alias) {
        report(c);
        return;
      }
    }
  }

  // `v` on one line: every run of whitespace or control bytes (a statement's newlines) becomes
  // one space, so the hint quoting the statement stays one line.
  static std::string one_line(std::string_view v) {
    std::string out;
    bool space = false;
    for (const char ch : v) {
      const auto u = static_cast<unsigned char>(ch);
      if (u < 0x20 || u == 0x7f || ch == ' ') {
        space = true;
        continue;
      }
      if (space && !out.empty()) {
        out += ' ';
      }
      space = false;
      out += ch;
    }
    return out;
  }

  void report(const candidate &c) {
    const token &name = t_[c.name_tok];
    const std::string_view fn = s_.substr(name.begin, name.end - name.begin);
    const std::string arg = one_line(s_.substr(c.arg_begin, c.arg_end - c.arg_begin));
    const std::string rest = one_line(s_.substr(c.arg_end, c.rest_end - c.arg_end));
    std::string group_form = fmt::format("{}(hist_merge({}){})", fn, arg, rest);
    if (name.lower == "hist_pct") {
      group_form = fmt::format("hist_percentile({}{})", arg, rest);
    } else if (name.lower == "hist_error") {
      group_form = fmt::format("hist_percentile_error({}{})", arg, rest);
    }
    error_ = sql_lint_error{
        name.begin,
        fmt::format("{}({}{}) would read one row of each group, not the group (this query "
                    "aggregates): write {} for the group's histogram, or an aggregate of the "
                    "per-row values such as max({}({}{}))",
                    fn, arg, rest, group_form, fn, arg, rest)};
  }

  // Tokens [b, e) of one core. `top`: at the core's own level, where clause keywords count.
  void scan(std::size_t b, std::size_t e, core_state &st, clause cl, bool in_agg, bool top) {
    std::size_t i = b;
    while (i < e && !error_) {
      const token &t = t_[i];
      if (top && t.kind == tok::word) {
        const std::string &w = t.lower;
        if (w == "from") {
          cl = clause::from;
        } else if (w == "where") {
          cl = clause::where;
        } else if (w == "group" && is_word(i + 1, "by")) {
          cl = clause::group;
          st.aggregate = true;
        } else if (w == "having") {
          cl = clause::having;
        } else if (w == "window") {
          cl = clause::window;
        } else if (w == "order" && is_word(i + 1, "by")) {
          cl = clause::order;
        } else if (w == "limit") {
          cl = clause::limit;
        } else if (w == "as" && cl == clause::result && i + 1 < e &&
                   (t_[i + 1].kind == tok::word || t_[i + 1].kind == tok::quoted)) {
          st.aliases.push_back(t_[i + 1].lower);
        }
      }
      if (cl == clause::group && (t.kind == tok::word || t.kind == tok::quoted)) {
        st.grouped.push_back(t.lower);
      }
      if (t.kind == tok::lparen) {
        const std::size_t close = match_[i];
        if (starts_query(i + 1, close)) {
          statement(i + 1, close);
        } else {
          scan(i + 1, close, st, cl, in_agg, false);
        }
        i = close + 1;
        continue;
      }
      if (t.kind == tok::word && i + 1 < e && t_[i + 1].kind == tok::lparen &&
          !starts_query(i + 2, match_[i + 1])) {
        i = call(i, st, cl, in_agg);
        continue;
      }
      ++i;
    }
  }

  // A call name(args) at `i`; returns the index after it (and its FILTER/OVER parts).
  std::size_t call(std::size_t i, core_state &st, clause cl, bool in_agg) {
    const std::string &name = t_[i].lower;
    const std::size_t open = i + 1;
    const std::size_t close = match_[open];
    std::size_t after = close + 1;
    std::size_t filter_open = t_.size();
    if (is_word(after, "filter") && after + 1 < t_.size() && t_[after + 1].kind == tok::lparen) {
      filter_open = after + 1;
      after = match_[filter_open] + 1;
    }
    bool window = false;
    if (is_word(after, "over")) {
      window = true;
      after += 1;
      if (after < t_.size() && t_[after].kind == tok::lparen) {
        after = match_[after] + 1; // the window definition: per row, nothing to check
      } else if (after < t_.size()) {
        after += 1; // a window's name
      }
    }
    bool agg = false;
    if (!window) {
      if (one_of(aggregates, name)) {
        agg = true;
      } else if (name == "min" || name == "max") {
        agg = args(open, close) == 1;
      }
    }
    if (agg) {
      st.aggregate = true;
    }
    if (!in_agg && !window && one_of(hist_scalars, name) &&
        (cl == clause::result || cl == clause::having || cl == clause::order)) {
      if (auto c = bare_column(i, open, close)) {
        c->by_alias = cl != clause::result;
        st.found.push_back(std::move(*c));
      }
    }
    scan(open + 1, close, st, cl, in_agg || agg || window, false);
    if (filter_open < t_.size()) {
      scan(filter_open + 1, match_[filter_open], st, clause::where, true, false);
    }
    return after;
  }

  // Number of top-level arguments of the call whose parentheses are at `open`, `close`.
  [[nodiscard]] std::size_t args(std::size_t open, std::size_t close) const {
    if (close == open + 1) {
      return 0;
    }
    std::size_t n = 1;
    for (std::size_t j = open + 1; j < close; ++j) {
      if (t_[j].kind == tok::lparen) {
        j = match_[j];
      } else if (t_[j].kind == tok::comma) {
        ++n;
      }
    }
    return n;
  }

  // The call's first argument when it is a bare column (`hist`, `d.hist`, `main.d."hist"`).
  [[nodiscard]] std::optional<candidate> bare_column(std::size_t name, std::size_t open,
                                                     std::size_t close) const {
    std::size_t j = open + 1;
    std::size_t last = t_.size();
    bool expect_name = true;
    while (j < close && t_[j].kind != tok::comma) {
      const token &t = t_[j];
      if (expect_name && (t.kind == tok::word || t.kind == tok::quoted)) {
        last = j;
        expect_name = false;
      } else if (!expect_name && t.kind == tok::dot) {
        expect_name = true;
      } else {
        return std::nullopt;
      }
      ++j;
    }
    if (last == t_.size() || expect_name) {
      return std::nullopt;
    }
    static constexpr std::array<std::string_view, 6> not_columns = {
        "null", "true", "false", "current_time", "current_date", "current_timestamp"};
    if (t_[last].kind == tok::word && one_of(not_columns, t_[last].lower)) {
      return std::nullopt;
    }
    candidate c;
    c.name_tok = name;
    c.column = t_[last].lower;
    c.arg_begin = t_[open + 1].begin;
    c.arg_end = t_[last].end;
    c.rest_end = t_[close].begin;
    return c;
  }

  std::string_view s_;
  std::vector<token> t_;
  std::vector<std::size_t> match_;
  bool balanced_ = true;
  std::optional<sql_lint_error> error_;
};

} // namespace

std::optional<sql_lint_error> check_histogram_aggregation(std::string_view statement) {
  return linter(statement, tokenize(statement)).run();
}

bool is_measure_column(std::string_view name) {
  return one_of(measure_columns, name);
}

std::optional<std::string> tier_variant_reason(std::string_view statement) {
  return tier_text_of(statement).why;
}

tier_text tier_text_of(std::string_view statement) {
  tier_text out;
  const auto toks = tokenize(statement);
  const auto word = [&](std::size_t i) -> std::string_view {
    return i < toks.size() && (toks[i].kind == tok::word || toks[i].kind == tok::quoted)
               ? std::string_view(toks[i].lower)
               : std::string_view();
  };
  const auto is = [&](std::size_t i, tok k) { return i < toks.size() && toks[i].kind == k; };
  // A comparison operator ending just before token i, or starting at it: "<", "<=", ">", ">=",
  // "=", "==", "!=" and "<>" are one or two `other` tokens.
  const auto cmp_char = [&](std::size_t i) {
    if (i >= toks.size() || toks[i].kind != tok::other) {
      return false;
    }
    const char ch = statement[toks[i].begin];
    return ch == '<' || ch == '>' || ch == '=' || ch == '!';
  };
  // The aggregates whose result is the same over raw rows and over their rollups (sums and
  // histogram merges), and the data views' measure columns (what rollup rows add up). A
  // measure is allowed only as the first argument of one of them, as itself: sum(count),
  // hist_percentile(d.hist, 99); not sum(count * 2) or sum(CASE WHEN count > 5 ...), whose
  // answer depends on how the samples are split into rows.
  constexpr std::array<std::string_view, 5> additive = {"sum", "total", "hist_merge",
                                                        "hist_percentile", "hist_percentile_error"};

  bool aggregated = false;
  for (std::size_t i = 0; i < toks.size(); ++i) {
    const std::string_view w = word(i);
    if (w.empty()) {
      continue;
    }
    const bool call = toks[i].kind == tok::word && is(i + 1, tok::lparen);
    if (call && (w == "count" || w == "avg" || w == "min" || w == "max" || w == "group_concat" ||
                 w == "string_agg" || w.rfind("json", 0) == 0)) {
      out.why = fmt::format("{}() describes rows, and rollup rows are not raw ones", w);
      return out;
    }
    if (w == "over" && toks[i].kind == tok::word) {
      out.why = std::string("a window function sees rows one by one");
      return out;
    }
    if (call && one_of(additive, w)) {
      // Its first argument must be a measure column as it is: sum(1) or sum(length(comm))
      // count rows, which rollups do not keep.
      std::size_t arg = i + 2;
      const bool qualified = is(arg + 1, tok::dot) && !word(arg).empty();
      const std::size_t col = qualified ? arg + 2 : arg;
      if (!one_of(measure_columns, word(col)) ||
          !(is(col + 1, tok::rparen) || is(col + 1, tok::comma))) {
        out.why = fmt::format("{}() of something other than a measure column as it is", w);
        return out;
      }
      aggregated = true;
      continue;
    }
    if (w == "group" && word(i + 1) == "by") {
      aggregated = true;
    }
    if (w == "dur") {
      out.why = std::string("it names dur, which a rollup row sums over its bucket");
      return out;
    }
    if (w == "ts") {
      // Allowed only as one side of a comparison (a window): ts >= x, x < t.ts, ts BETWEEN.
      const bool before = i > 0 && cmp_char(i - 1);
      const bool after = cmp_char(i + 1) || word(i + 1) == "between";
      out.ts_terms += word(i + 1) == "between" ? 2 : 1;
      if (!before && !after) {
        out.why = std::string("it uses ts other than in a window condition (a rollup row's ts is "
                              "its bucket's start)");
        return out;
      }
    }
    if (!call && (w == "some_pct" || w == "full_pct")) {
      out.why = fmt::format("it uses {}, a ratio of each row's own length", w);
      return out;
    }
    if (!call && one_of(measure_columns, w)) {
      // The reference, qualified or not, must be a whole first argument of an additive call.
      const std::size_t first = i >= 2 && is(i - 1, tok::dot) && !word(i - 2).empty() ? i - 2 : i;
      const bool in_call = first >= 2 && is(first - 1, tok::lparen) &&
                           toks[first - 2].kind == tok::word && one_of(additive, word(first - 2));
      const bool whole = is(i + 1, tok::rparen) || is(i + 1, tok::comma);
      if (!in_call || !whole) {
        out.why = fmt::format("it uses {} other than summed or merged as it is (a rollup row "
                              "holds many samples)",
                              w);
        return out;
      }
    }
  }
  if (!aggregated) {
    out.why = std::string("it lists rows rather than adding them up");
    return out;
  }
  return out;
}

} // namespace rsched::query
