// heatmap, plot (pictures.hpp): the history read through SQL into rsched::charts data.
#include "rsched/sql_shell/pictures.hpp"

#include "rsched/base/text.hpp"
#include "rsched/base/timefmt.hpp"
#include "rsched/base/units.hpp"
#include "rsched/sql_shell/export.hpp"
#include "rsched/sql_shell/files.hpp"
#include "rsched/sqlite/quote.hpp"
#include "rsched/stats/encoding.hpp"

#include "sql_util.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <map>
#include <set>
#include <span>
#include <string_view>
#include <unordered_map>

namespace rsched::sql_shell {

namespace {

using detail::has_object;
using detail::int_of;
using detail::placeholders;
using detail::query;
using sqlite::sql_ident;

// An error in an argument's value (a view that does not exist, a time that is not one): exit 2
// as bad usage, like an unknown flag; errors of the SQL itself stay errnum 0 (exit 1).
error bad_arg(std::string msg) {
  return make_error(std::move(msg), EINVAL);
}

// One integer from `sql` (its first row and column); nullopt for no row or NULL.
result<std::optional<std::int64_t>> scalar(query::reader &db, const std::string &sql,
                                           const std::vector<query::value> &params = {}) {
  auto r = query(db, sql, params);
  if (!r) {
    return r.err();
  }
  if (r->rows.empty() || r->rows[0].empty()) {
    return std::optional<std::int64_t>{};
  }
  return int_of(r->rows[0][0]);
}

// A time in the reader's grammar, zone and `now`: t(...).
result<std::int64_t> time_of(query::reader &db, const std::string &text, const char *what) {
  auto v = scalar(db, "SELECT t(?1)", {text});
  if (!v) {
    // The grammar's own words, without the statement's "line 1: t: ".
    auto direct = timefmt::parse_time(text, timefmt::realtime_now_ns(), db.zone());
    return bad_arg(std::string(what) + ": " + (direct ? v.err().msg : direct.err().msg));
  }
  if (!*v) {
    return bad_arg(std::string(what) + ": not a time");
  }
  return **v;
}

result<std::int64_t> duration_of(query::reader &db, const std::string &text, const char *what) {
  auto v = scalar(db, "SELECT dur(?1)", {text});
  if (!v) {
    auto direct = timefmt::parse_duration(text);
    return bad_arg(std::string(what) + ": " + (direct ? v.err().msg : direct.err().msg));
  }
  if (!*v || **v <= 0) {
    return bad_arg(std::string(what) + ": needs a positive duration ('10s', '5m')");
  }
  return **v;
}

// The window [from, to): by default the hour before the end of the newest recorded interval,
// starting no earlier than the first interval recorded in that hour (a recording of ten minutes
// is drawn over ten minutes, not as an hour that is mostly "not recorded").
result<std::pair<std::int64_t, std::int64_t>> window_of(query::reader &db,
                                                        const std::optional<std::string> &from,
                                                        const std::optional<std::string> &to,
                                                        std::optional<std::int64_t> from_ns = {},
                                                        std::optional<std::int64_t> to_ns = {}) {
  const std::string src = has_object(db, "timeline") ? "timeline" : "intervals";
  std::int64_t b = 0;
  if (to_ns) {
    b = *to_ns;
  } else if (to) {
    auto t = time_of(db, *to, "--to");
    if (!t) {
      return t.err();
    }
    b = *t;
  } else {
    auto end = scalar(db, "SELECT max(start_ns + dur_ns) FROM " + src);
    if (!end) {
      return end.err();
    }
    if (!*end) {
      return make_error("the database holds no recorded interval");
    }
    b = **end;
  }
  std::int64_t a = b - 3'600'000'000'000;
  if (from_ns) {
    a = *from_ns;
  } else if (from) {
    auto t = time_of(db, *from, "--from");
    if (!t) {
      return t.err();
    }
    a = *t;
  } else {
    auto first = scalar(
        db, "SELECT min(start_ns) FROM " + src + " WHERE start_ns + dur_ns > ?1 AND start_ns < ?2",
        {a, b});
    if (first && *first && **first > a) {
      a = **first;
    }
  }
  if (b <= a) {
    return bad_arg("the window ends before it starts (--from, --to)");
  }
  return std::pair{a, b};
}

std::vector<std::string> columns_of(query::reader &db, const std::string &view) {
  std::vector<std::string> out;
  if (auto r = query(db, "SELECT name FROM pragma_table_info(?1)", {view})) {
    for (const auto &row : r->rows) {
      if (const auto *s = std::get_if<std::string>(&row[0])) {
        out.push_back(*s);
      }
    }
  }
  return out;
}

// Whether an SQL condition names a per-thread column (then only raw rows can answer it).
bool names_thread_column(const std::string &where) {
  std::string w;
  for (const char c : where) {
    w += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  for (const std::string id : {"tid", "pid", "start_time"}) {
    for (std::size_t p = w.find(id); p != std::string::npos; p = w.find(id, p + 1)) {
      const bool before =
          p == 0 || !(std::isalnum(static_cast<unsigned char>(w[p - 1])) != 0 || w[p - 1] == '_');
      const std::size_t e = p + id.size();
      const bool after =
          e >= w.size() || !(std::isalnum(static_cast<unsigned char>(w[e])) != 0 || w[e] == '_');
      if (before && after) {
        return true;
      }
    }
  }
  return false;
}

struct piece {
  std::string source; // a view
  std::int64_t a = 0;
  std::int64_t b = 0;
};

std::int64_t floor_to(std::int64_t t, std::int64_t w) {
  std::int64_t q = t / w;
  if (t % w != 0 && t < 0) {
    --q;
  }
  return q * w;
}

// Where the rows of [a, b) come from: the whole minutes (hours) a rollup tier has built and
// kept from `view_1m` (`view_1h`) when the columns are that wide, the rest from the view itself
// (each moment from the finest tier kept). Exact: a rollup row holds the same samples as the
// rows it was built from.
std::vector<piece> pieces_of(query::reader &db, const std::string &view, std::int64_t a,
                             std::int64_t b, std::int64_t step, const std::string &where) {
  constexpr std::int64_t minute = 60'000'000'000;
  constexpr std::int64_t hour = 60 * minute;
  std::vector<piece> out;
  int k = 0;
  std::int64_t width = 0;
  if (!names_thread_column(where) && has_object(db, "tiers")) {
    if (step % hour == 0 && has_object(db, view + "_1h")) {
      k = 2;
      width = hour;
    } else if (step % minute == 0 && has_object(db, view + "_1m")) {
      k = 1;
      width = minute;
    }
  }
  if (k != 0) {
    const std::vector<query::value> tier = {static_cast<std::int64_t>(k)};
    auto built = scalar(db, "SELECT built_ns FROM tiers WHERE tier = ?1", tier);
    auto cutoff = scalar(db, "SELECT cutoff_ns FROM tiers WHERE tier = ?1", tier);
    if (built && *built && cutoff && *cutoff) {
      const std::int64_t lo = std::max(a, **cutoff);
      const std::int64_t ta = floor_to(lo, width) == lo ? lo : floor_to(lo, width) + width;
      const std::int64_t tb = floor_to(std::min(b, **built), width);
      if (ta < tb) {
        if (a < ta) {
          out.push_back({view, a, ta});
        }
        out.push_back({fmt::format("{}_{}", view, k == 1 ? "1m" : "1h"), ta, tb});
        if (tb < b) {
          out.push_back({view, tb, b});
        }
        return out;
      }
    }
  }
  out.push_back({view, a, b});
  return out;
}

std::vector<charts::span> gaps_of(query::reader &db, std::int64_t a, std::int64_t b) {
  std::vector<charts::span> out;
  if (auto r = query(db, "SELECT ts, end_ts, reason FROM gaps(?1, ?2)", {a, b})) {
    for (const auto &row : r->rows) {
      const auto s = int_of(row[0]);
      const auto e = int_of(row[1]);
      if (s && e) {
        const auto *why = std::get_if<std::string>(&row[2]);
        out.push_back({*s, *e, why != nullptr ? *why : std::string()});
      }
    }
  }
  return out;
}

// The length in bytes of the first `n` characters of `s` as SQLite's substr() counts them (a
// byte from 0xC0 up takes the continuation bytes after it), or nullopt when `s` has no more.
std::optional<std::size_t> sqlite_chars(std::string_view s, std::size_t n) {
  std::size_t i = 0;
  for (std::size_t c = 0; c < n; ++c) {
    if (i >= s.size()) {
      return std::nullopt;
    }
    if (static_cast<unsigned char>(s[i++]) >= 0xC0) {
      while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) {
        ++i;
      }
    }
  }
  return i < s.size() ? std::optional<std::size_t>(i) : std::nullopt;
}

// A heatmap's condition on the view's rows as SQL, "" for none: its --where, SQL by design (the
// user's condition on the view's columns, spliced as written into statements the reader runs
// read-only; without parameters, see detail::has_sql_parameter), and its comms as values
// appended to `params` (their placeholders in the text).
std::string condition_of(const heatmap_args &a, std::vector<query::value> &params) {
  if (a.comms.empty()) {
    return a.where;
  }
  const std::string in = "comm IN (" + placeholders(params, a.comms) + ")";
  return a.where.empty() ? in : "(" + a.where + ") AND " + in;
}

// The same condition as titles show it: the comms as SQL literals. Shown, never run.
std::string shown_condition(const heatmap_args &a) {
  if (a.comms.empty()) {
    return a.where;
  }
  std::string in;
  for (const auto &c : a.comms) {
    in += (in.empty() ? "" : ", ") + sqlite::sql_literal(c);
  }
  in = "comm IN (" + in + ")";
  return a.where.empty() ? in : "(" + a.where + ") AND " + in;
}

} // namespace

result<mark_list> load_marks(query::reader &db, std::int64_t from, std::int64_t to) {
  mark_list out;
  if (!has_object(db, "annotations")) {
    return out;
  }
  // Those that overlap the window: ?1 (from) and ?2 (to).
  const std::string overlap = "start_ns < ?2 AND coalesce(end_ns, start_ns) >= ?1";
  auto n = query(db, "SELECT count(*) FROM annotations WHERE " + overlap, {from, to});
  if (!n) {
    return n.err();
  }
  out.total = n->rows.empty() ? 0 : int_of(n->rows[0][0]).value_or(0);
  if (out.total == 0) {
    return out;
  }
  // The choice reads the times and the source only; the texts of the chosen rows alone are
  // read, and only their first characters leave SQLite. Over several hosts the rows are
  // (host, id).
  const bool hosts = !db.hosts().empty();
  auto r = query(db,
                 std::string("SELECT start_ns, coalesce(end_ns, start_ns), substr(text, 1, ?3), id "
                             "FROM annotations WHERE ") +
                     (hosts ? "(host, id)" : "id") + " IN (SELECT " + (hosts ? "host, id" : "id") +
                     " FROM annotations WHERE " + overlap +
                     " ORDER BY source LIKE 'import:%', coalesce(end_ns, start_ns) - start_ns "
                     "DESC, start_ns, id LIMIT ?4) ORDER BY start_ns, id",
                 {from, to, static_cast<std::int64_t>(mark_text_chars + 1),
                  static_cast<std::int64_t>(max_marks)});
  if (!r) {
    return r.err();
  }
  for (const auto &row : r->rows) {
    const auto s = int_of(row[0]);
    const auto e = int_of(row[1]);
    if (!s || !e) {
      continue;
    }
    std::string text;
    if (const auto *t = std::get_if<std::string>(&row[2])) {
      text = *t;
      if (const auto cut = sqlite_chars(text, mark_text_chars)) {
        text.resize(*cut);
        text += mark_cut_note;
      }
    }
    out.marks.push_back({*s, *e, std::move(text)});
    out.ids.push_back(hosts ? 0 : int_of(row[3]).value_or(0));
  }
  return out;
}

namespace {

std::string key_text(const query::value &v) {
  if (const auto *s = std::get_if<std::string>(&v)) {
    return *s;
  }
  if (const auto i = int_of(v)) {
    return std::to_string(*i);
  }
  return "NULL";
}

// Parses "N" (a whole number) or a duration (latency layouts) into a clip value.
result<std::uint64_t> clip_of(query::reader &db, const std::string &text) {
  std::uint64_t n = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec == std::errc() && p == text.data() + text.size()) {
    return n;
  }
  auto d = duration_of(db, text, "--max");
  if (!d) {
    return d.err();
  }
  return static_cast<std::uint64_t>(*d);
}

} // namespace

result<heatmap_plan> plan_heatmap(query::reader &db, const heatmap_args &a,
                                  std::size_t max_columns) {
  heatmap_plan pl;
  if (detail::has_sql_parameter(a.where)) {
    return bad_arg(std::string("heatmap: ") + detail::where_parameter_error);
  }
  const auto cols = columns_of(db, a.view);
  if (cols.empty()) {
    return bad_arg(fmt::format("no view named '{}' (sched_delay, cpu_sched_delay, "
                               "waking_delay, sleep, timeslice, cpu_idle, ...)",
                               a.view));
  }
  const auto has = [&](const std::string &c) {
    return std::find(cols.begin(), cols.end(), c) != cols.end();
  };
  if (a.column) {
    if (!has(*a.column)) {
      return bad_arg(fmt::format("view '{}' has no column '{}'", a.view, *a.column));
    }
    pl.hist_cols.push_back(*a.column);
  } else if (has("hist")) {
    pl.hist_cols.emplace_back("hist");
  } else {
    for (const auto &c : cols) {
      if (c.size() > 5 && c.compare(c.size() - 5, 5, "_hist") == 0) {
        pl.hist_cols.push_back(c);
      }
    }
  }
  if (pl.hist_cols.empty() || !has("ts")) {
    return bad_arg(fmt::format("view '{}' has no histogram (a ts and a hist column)", a.view));
  }
  if (a.by) {
    if (*a.by != "cpu" && *a.by != "comm" && *a.by != "cgroup") {
      return bad_arg(fmt::format("--by must be cpu, comm or cgroup, not '{}'", *a.by));
    }
    if (!has(*a.by)) {
      return bad_arg(fmt::format("view '{}' has no column '{}' to split by", a.view, *a.by));
    }
    pl.key = *a.by;
  }
  auto w = window_of(db, a.from, a.to, a.from_ns, a.to_ns);
  if (!w) {
    return w.err();
  }
  std::tie(pl.from, pl.to) = *w;
  if (a.step_ns) {
    if (*a.step_ns <= 0) {
      return bad_arg("--step: needs a positive duration ('10s', '5m')");
    }
    pl.step = *a.step_ns;
  } else if (a.step) {
    auto s = duration_of(db, *a.step, "--step");
    if (!s) {
      return s.err();
    }
    pl.step = *s;
  } else {
    // Not finer than the recording's intervals: a column narrower than one would be empty.
    auto iv = scalar(db,
                     std::string("SELECT max(dur_ns) FROM intervals WHERE start_ns >= ?1 AND "
                                 "start_ns < ?2") +
                         (has_object(db, "tiers") ? " AND tier = 0" : ""),
                     {pl.from, pl.to});
    const std::int64_t min_step =
        iv && *iv ? std::max<std::int64_t>(**iv, 1'000'000'000) : 1'000'000'000;
    pl.step = charts::nice_step(pl.to - pl.from, max_columns, min_step);
  }
  if ((pl.to - pl.from) / pl.step > 20'000) {
    return bad_arg("--step is too fine for the window: more than 20,000 columns");
  }
  if (a.max) {
    auto c = clip_of(db, *a.max);
    if (!c) {
      return c.err();
    }
    pl.clip = *c;
  }
  pl.args = a;
  return pl;
}

namespace {

// Hashes std::string and std::string_view alike: an index found by a row's key in place.
struct text_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// What one heatmap of load_heatmaps gathers while the rows go by.
struct heatmap_acc {
  std::map<std::string, charts::heatmap, std::less<>> panels; // in key order (ties: finish)
  std::unordered_map<std::string, charts::heatmap *, text_hash, std::equal_to<>> index;
  std::optional<stats::layout> layout;
  std::vector<std::uint16_t> slot_rows; // the panels' row of each slot of `layout`
  std::vector<std::string> sources;     // distinct, in the order read
};

// Where load_heatmaps finds things in each row of its statement: ts, the keys, the histogram
// columns [hist0, flag0), then one flag per plan (unless every plan shares one condition).
struct heatmap_columns {
  std::vector<std::size_t> key_of; // per plan: column of its key, 0: none
  std::size_t keys = 0;
  std::size_t hist0 = 0;
  std::size_t flag0 = 0;
  bool one_where = true;
};

// Adds the rows of one shared read to every plan's panels, and the first plan's rows to the
// merged columns (the timeline's). Rows are read in place and each histogram decoded once,
// sparse: an hour of a busy host is hundreds of thousands of rows of a few buckets each.
class heatmap_rows {
public:
  heatmap_rows(const std::vector<heatmap_plan> &plans, std::vector<heatmap_acc> &accs,
               const heatmap_columns &cols, std::vector<std::optional<stats::histogram>> *merged)
      : plans_(plans), accs_(accs), cols_(cols), merged_(merged), key_views_(cols.keys),
        key_scratch_(cols.keys) {
    const heatmap_plan &first = plans.front();
    col0_ = first.from - (((first.from % first.step) + first.step) % first.step);
  }

  void add(const query::row_view &row) {
    if (failure) {
      return;
    }
    const auto ts = row.int_at(0);
    if (!ts) {
      return;
    }
    read_keys(row);
    for (auto i = static_cast<int>(cols_.hist0); i < static_cast<int>(cols_.flag0); ++i) {
      const auto blob = row.blob_at(i);
      if (!blob) {
        continue; // NULL: no samples of that kind
      }
      if (!decode(*blob)) {
        return;
      }
      for (std::size_t n = 0; n < plans_.size(); ++n) {
        if (!cols_.one_where && row.int_at(static_cast<int>(cols_.flag0 + n)).value_or(0) != 1) {
          continue;
        }
        if (!add_to_plan(n, *ts)) {
          return;
        }
      }
    }
  }

  std::optional<error> failure;

private:
  void read_keys(const query::row_view &row) {
    for (std::size_t k = 0; k < cols_.keys; ++k) {
      const int c = static_cast<int>(1 + k);
      if (const auto text = row.text_at(c)) {
        key_views_[k] = *text;
      } else {
        key_scratch_[k] = key_text(row.value_at(c));
        key_views_[k] = key_scratch_[k];
      }
    }
  }

  // The blob's buckets into buckets_ and its layout into kind_.
  bool decode(std::span<const std::uint8_t> blob) {
    buckets_.clear();
    auto r = stats::for_each_bucket(blob, [this](std::size_t slot, std::uint64_t count) {
      buckets_.emplace_back(slot, count);
      return result<void>{};
    });
    if (!r) {
      failure = make_error("stored histogram: " + r.err().msg);
      return false;
    }
    kind_ = stats::coarse_layout(static_cast<stats::layout>(blob[0]));
    return true;
  }

  charts::heatmap &panel(std::size_t n, std::string_view key) {
    heatmap_acc &acc = accs_[n];
    if (auto it = acc.index.find(key); it != acc.index.end()) {
      return *it->second;
    }
    const heatmap_plan &pl = plans_[n];
    auto &h = acc.panels
                  .emplace(std::string(key),
                           charts::make_heatmap(*acc.layout, pl.from, pl.to, pl.step, pl.clip))
                  .first->second;
    acc.index.emplace(std::string(key), &h);
    return h;
  }

  bool add_to_plan(std::size_t n, std::int64_t ts) {
    heatmap_acc &acc = accs_[n];
    if (!acc.layout) {
      acc.layout = kind_;
    }
    const std::string_view key =
        cols_.key_of[n] == 0 ? std::string_view() : key_views_[cols_.key_of[n] - 1];
    charts::heatmap &h = panel(n, key);
    if (acc.slot_rows.empty()) { // the plan's panels share their rows: the first one's
      acc.slot_rows = charts::rows_of_slots(h.bins);
    }
    if (kind_ != h.layout) {
      failure = make_error("a histogram of another layout than the heatmap's");
      return false;
    }
    if (const auto c = charts::column_of(h, ts)) {
      auto &col = h.counts[*c];
      for (const auto &[slot, count] : buckets_) {
        if (slot < acc.slot_rows.size()) { // always, for a layout's own slots
          col[acc.slot_rows[slot]] += count;
        }
      }
    }
    return n != 0 || add_merged(ts);
  }

  bool add_merged(std::int64_t ts) {
    const heatmap_plan &first = plans_.front();
    if (merged_ == nullptr || ts < first.from || ts >= first.to) {
      return true;
    }
    auto &m = (*merged_)[static_cast<std::size_t>((ts - col0_) / first.step)];
    if (!m) {
      m = stats::histogram{kind_, {}};
    }
    if (m->kind != kind_) {
      failure = make_error("stored histograms of different layouts in one column");
      return false;
    }
    for (const auto &[slot, count] : buckets_) {
      m->slots[slot] += count;
    }
    return true;
  }

  const std::vector<heatmap_plan> &plans_;
  std::vector<heatmap_acc> &accs_;
  const heatmap_columns &cols_;
  std::vector<std::optional<stats::histogram>> *merged_;
  std::int64_t col0_ = 0;
  std::vector<std::string_view> key_views_; // each row's keys, in place where they are text
  std::vector<std::string> key_scratch_;
  std::vector<std::pair<std::size_t, std::uint64_t>> buckets_; // the row's, sparse
  stats::layout kind_ = stats::layout::latency;
};

// The panels of one plan from its rows: the top keys, rows trimmed, gaps, marks, source.
std::vector<charts::heatmap> finish_heatmap(query::reader &db, const heatmap_plan &pl,
                                            heatmap_acc &acc) {
  const heatmap_args &a = pl.args;
  const auto gaps = gaps_of(db, pl.from, pl.to);
  mark_list marks;
  if (a.marks) {
    marks = *a.marks;
  } else if (auto m = load_marks(db, pl.from, pl.to)) {
    marks = std::move(*m);
  }
  std::string what = a.view;
  if (const std::string shown = shown_condition(a); !shown.empty()) {
    what += " where " + shown;
  }
  if (a.column) {
    what += " (" + *a.column + ")";
  }
  std::vector<charts::heatmap> out;
  if (pl.key.empty()) {
    charts::heatmap h = acc.panels.empty() ? charts::make_heatmap(stats::layout::latency, pl.from,
                                                                  pl.to, pl.step, pl.clip)
                                           : std::move(acc.panels.begin()->second);
    h.title = what;
    out.push_back(std::move(h));
  } else {
    std::vector<std::pair<std::uint64_t, std::string>> order;
    for (const auto &[k, h] : acc.panels) {
      order.emplace_back(h.total(), k);
    }
    std::stable_sort(order.begin(), order.end(),
                     [](const auto &x, const auto &y) { return x.first > y.first; });
    for (std::size_t i = 0; i < order.size() && i < a.top; ++i) {
      charts::heatmap h = std::move(acc.panels[order[i].second]);
      h.title = fmt::format("{} = {}", pl.key, order[i].second);
      out.push_back(std::move(h));
    }
    if (out.empty()) {
      charts::heatmap h =
          charts::make_heatmap(stats::layout::latency, pl.from, pl.to, pl.step, pl.clip);
      h.title = what + " (no rows)";
      out.push_back(std::move(h));
    }
  }
  // Rows above the highest one with samples (in any panel) hold nothing: drawn, they would
  // squeeze the picture; one empty row stays above the data (the axis says where it ends).
  std::size_t used = 0;
  for (const auto &h : out) {
    for (const auto &col : h.counts) {
      for (std::size_t r = 0; r < col.size(); ++r) {
        if (col[r] != 0) {
          used = std::max(used, r + 1);
        }
      }
    }
  }
  for (auto &h : out) {
    const std::size_t keep = std::min(h.bins.size(), std::max<std::size_t>(used + 1, 4));
    if (keep < h.bins.size() && !(pl.clip && used == h.bins.size())) {
      h.bins.resize(keep);
      for (auto &col : h.counts) {
        col.resize(keep);
      }
    }
    h.gaps = gaps;
    h.marks = marks.marks;
    h.marks_not_drawn = marks.total - static_cast<std::int64_t>(marks.marks.size());
    h.source.clear();
    for (const auto &src : acc.sources) {
      h.source += (h.source.empty() ? "" : " + ") + src;
    }
  }
  return out;
}

} // namespace

result<std::vector<std::vector<charts::heatmap>>>
load_heatmaps(query::reader &db, const std::vector<heatmap_plan> &plans,
              std::vector<std::optional<stats::histogram>> *merged) {
  std::vector<std::vector<charts::heatmap>> out;
  if (plans.empty()) {
    return out;
  }
  const heatmap_plan &first = plans.front();
  // One read serves plans of one view, histogram columns, window, columns and tiers; others
  // are read one after the other.
  const auto pieces =
      pieces_of(db, first.args.view, first.from, first.to, first.step, first.args.where);
  const auto same_pieces = [&](const heatmap_plan &pl) {
    const auto ps = pieces_of(db, pl.args.view, pl.from, pl.to, pl.step, pl.args.where);
    return ps.size() == pieces.size() &&
           std::equal(ps.begin(), ps.end(), pieces.begin(), [](const piece &x, const piece &y) {
             return x.source == y.source && x.a == y.a && x.b == y.b;
           });
  };
  bool shared = true;
  for (const auto &pl : plans) {
    shared = shared && pl.args.view == first.args.view && pl.hist_cols == first.hist_cols &&
             pl.from == first.from && pl.to == first.to && pl.step == first.step &&
             pl.clip == first.clip && same_pieces(pl);
  }
  if (!shared) {
    if (merged != nullptr) {
      return make_error("load_heatmaps: the merged columns need plans read together");
    }
    for (const auto &pl : plans) {
      auto one = load_heatmaps(db, {pl}, nullptr);
      if (!one) {
        return one.err();
      }
      out.push_back(std::move(one->front()));
    }
    return out;
  }
  // The columns read: ts, each plan's key (once), the histograms, then each plan's condition
  // as a flag unless every plan has the same one (then it is the statement's own).
  std::vector<std::string> keys;
  heatmap_columns cols;
  cols.key_of.assign(plans.size(), 0);
  for (const auto &pl : plans) {
    cols.one_where =
        cols.one_where && pl.args.where == first.args.where && pl.args.comms == first.args.comms;
  }
  // The statement's values: ?1 and ?2 the piece's [a, b) (set per piece below), then the comms
  // of the plans' conditions.
  std::vector<query::value> params = {std::int64_t{0}, std::int64_t{0}};
  std::string sql = "SELECT ts";
  for (std::size_t i = 0; i < plans.size(); ++i) {
    if (plans[i].key.empty()) {
      continue;
    }
    auto it = std::find(keys.begin(), keys.end(), plans[i].key);
    if (it == keys.end()) {
      keys.push_back(plans[i].key);
      sql += ", " + sql_ident(plans[i].key);
      it = keys.end() - 1;
    }
    cols.key_of[i] = 1 + static_cast<std::size_t>(it - keys.begin());
  }
  cols.keys = keys.size();
  cols.hist0 = 1 + keys.size();
  for (const auto &h : first.hist_cols) {
    sql += ", " + sql_ident(h);
  }
  cols.flag0 = cols.hist0 + first.hist_cols.size();
  // One host: each piece read from the file's own view (main.V), not through the routed TEMP
  // table over it (the pieces already name the tier; the routed table's copy of every column
  // was a fifth of the read). The condition then goes in as one filter, +(...), so that SQLite
  // cannot drive the view's join from an automatic index on thread(comm) (vtab_tiered.cpp).
  const bool own_views = db.hosts().empty();
  const char *open_cond = own_views ? " AND +(" : " AND (";
  std::string cond;
  if (cols.one_where) {
    const std::string w = condition_of(first.args, params);
    cond = w.empty() ? std::string() : open_cond + w + ")";
  } else {
    std::string any;
    for (const auto &pl : plans) {
      std::string w = condition_of(pl.args, params);
      if (w.empty()) {
        w = "1";
      }
      sql += ", (" + w + ") IS 1";
      any += (any.empty() ? "(" : " OR (") + w + ")";
    }
    cond = open_cond + any + ")";
  }
  std::vector<heatmap_acc> accs(plans.size());
  if (merged != nullptr) {
    merged->assign(static_cast<std::size_t>((first.to - first.from) / first.step + 2),
                   std::nullopt);
  }
  heatmap_rows rows(plans, accs, cols, merged);
  for (const auto &p : pieces) {
    for (auto &acc : accs) {
      if (std::find(acc.sources.begin(), acc.sources.end(), p.source) == acc.sources.end()) {
        acc.sources.push_back(p.source);
      }
    }
    // The same text for every piece but its source (a view, or its rollup: view_1m, view_1h).
    std::string q = sql;
    q.append(" FROM ").append(own_views ? "main." : "").append(sql_ident(p.source));
    q.append(" WHERE ts >= ?1 AND ts < ?2").append(cond);
    params[0] = p.a;
    params[1] = p.b;
    query::result_sink sink;
    sink.on_columns = [](const std::vector<std::string> &) {};
    sink.on_row_view = [&rows](const query::row_view &row) { rows.add(row); };
    if (auto r = db.exec(q, params, sink); !r) {
      return r.err();
    }
    if (rows.failure) {
      return *rows.failure;
    }
  }
  for (std::size_t n = 0; n < plans.size(); ++n) {
    out.push_back(finish_heatmap(db, plans[n], accs[n]));
  }
  return out;
}

result<std::vector<charts::heatmap>> load_heatmap(query::reader &db, const heatmap_args &a,
                                                  std::size_t max_columns) {
  auto pl = plan_heatmap(db, a, max_columns);
  if (!pl) {
    return pl.err();
  }
  auto maps = load_heatmaps(db, {*pl}, nullptr);
  if (!maps) {
    return maps.err();
  }
  return std::move(maps->front());
}

std::string heatmap_svg(const std::vector<charts::heatmap> &panels, const heatmap_args &a,
                        const timefmt::zone &zone) {
  charts::svg_options o;
  o.zone = zone;
  std::string title = a.view;
  if (const std::string shown = shown_condition(a); !shown.empty()) {
    title += " where " + shown;
  }
  if (a.by) {
    title += fmt::format(" by {} (top {})", *a.by, panels.size());
  }
  return panels.size() == 1 && !a.by ? charts::to_svg(panels.front(), o)
                                     : charts::to_svg(panels, title, o);
}

result<charts::series_chart> load_plot(query::reader &db, const plot_args &a) {
  auto r = query(db, a.sql, a.params);
  if (!r) {
    return r.err();
  }
  return plot_of_rows(db, a, r->columns, r->rows);
}

result<charts::series_chart> plot_of_rows(query::reader &db, const plot_args &a,
                                          const std::vector<std::string> &columns,
                                          const std::vector<std::vector<query::value>> &rows) {
  const struct {
    const std::vector<std::string> &columns;
    const std::vector<std::vector<query::value>> &rows;
  } given{columns, rows};
  const auto *r = &given;
  if (r->columns.size() < 2) {
    return bad_arg("plot needs a query of two or more columns: a time (UTC ns), then numbers");
  }
  charts::series_chart c;
  c.title = a.title ? *a.title : a.sql.substr(0, a.sql.find('\n')).substr(0, 120);
  c.log = a.log;
  c.names.assign(r->columns.begin() + 1, r->columns.end());
  c.durations = std::all_of(c.names.begin(), c.names.end(), [](const std::string &n) {
    return n == "dur" || (n.size() > 3 && n.compare(n.size() - 3, 3, "_ns") == 0);
  });
  std::vector<std::pair<std::int64_t, std::vector<std::optional<double>>>> points;
  for (const auto &row : r->rows) {
    const auto x = int_of(row[0]);
    if (!x) {
      return bad_arg("plot: the first column must be a time (UTC ns); got a value that is "
                     "not a number");
    }
    std::vector<std::optional<double>> ys;
    for (std::size_t i = 1; i < row.size(); ++i) {
      if (const auto *d = std::get_if<double>(&row[i])) {
        ys.emplace_back(*d);
      } else if (const auto *n = std::get_if<std::int64_t>(&row[i])) {
        ys.emplace_back(static_cast<double>(*n));
      } else if (std::holds_alternative<std::monostate>(row[i])) {
        ys.emplace_back(std::nullopt);
      } else {
        return bad_arg(fmt::format("plot: column '{}' is not a number",
                                   text::escape_for_terminal(r->columns[i])));
      }
    }
    points.emplace_back(*x, std::move(ys));
  }
  std::stable_sort(points.begin(), points.end(),
                   [](const auto &p, const auto &q) { return p.first < q.first; });
  c.y.assign(c.names.size(), {});
  for (auto &[x, ys] : points) {
    c.x.push_back(x);
    for (std::size_t s = 0; s < ys.size(); ++s) {
      c.y[s].push_back(ys[s]);
    }
  }
  if (!c.x.empty()) {
    c.gaps = gaps_of(db, c.x.front(), c.x.back());
    auto m = a.marks ? result<mark_list>(*a.marks) : load_marks(db, c.x.front(), c.x.back());
    if (m) {
      c.marks = std::move(m->marks);
      c.marks_not_drawn = m->total - static_cast<std::int64_t>(c.marks.size());
    }
  }
  return c;
}

// ---- argument parsing -----------------------------------------------------------------------

namespace {

// A count from 1 to `max` ("--top 5").
result<std::size_t> parse_count(const std::string &v, const char *what, std::size_t max) {
  std::size_t n = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || p != v.data() + v.size() || n == 0 || n > max) {
    return make_error(fmt::format("{} needs a number from 1 to {}", what, max));
  }
  return n;
}

// --flag VALUE pairs of `args`; `known` lists the flags taking a value, `switches` those that
// do not.
template <typename Set>
result<void> parse_flags(const std::vector<std::string> &args, const std::set<std::string> &known,
                         const std::set<std::string> &switches, const char *cmd, Set set) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string &f = args[i];
    if (switches.contains(f)) {
      if (auto r = set(f, std::string()); !r) {
        return r;
      }
      continue;
    }
    if (!known.contains(f)) {
      return make_error(fmt::format("{}: unknown argument '{}'", cmd, f));
    }
    if (i + 1 >= args.size()) {
      return make_error(fmt::format("{}: '{}' needs a value", cmd, f));
    }
    if (auto r = set(f, args[i + 1]); !r) {
      return r;
    }
    ++i;
  }
  return {};
}

// The flags heatmap, report and export share (--from, --to, --where, -o): the outcome when `f`
// was one of them, nullopt otherwise.
template <typename Args>
std::optional<result<void>> window_flag(Args &a, const char *cmd, const std::string &f,
                                        const std::string &v) {
  if (f == "--from") {
    a.from = v;
  } else if (f == "--to") {
    a.to = v;
  } else if (f == "--where") {
    if (detail::has_sql_parameter(v)) {
      return result<void>{make_error(fmt::format("{}: {}", cmd, detail::where_parameter_error))};
    }
    a.where = v;
  } else if (f == "-o") {
    if (v.empty()) {
      return result<void>{make_error(fmt::format("{}: -o needs a file name", cmd))};
    }
    a.output = v;
  } else {
    return std::nullopt;
  }
  return result<void>{};
}

} // namespace

result<heatmap_args> parse_heatmap_args(const std::vector<std::string> &args) {
  heatmap_args a;
  auto r = parse_flags(
      args,
      {"--view", "--where", "--from", "--to", "--step", "--by", "--top", "--max", "--column", "-o"},
      {}, "heatmap", [&](const std::string &f, const std::string &v) -> result<void> {
        if (auto common = window_flag(a, "heatmap", f, v)) {
          return *common;
        }
        if (f == "--view") {
          a.view = v;
        } else if (f == "--step") {
          // A unit, and nothing around it (rsched::units): a bare "--step 60" is refused.
          if (auto d = units::parse_duration(v); !d) {
            return make_error(
                fmt::format("heatmap: --step '{}': {}", text::escape_for_terminal(v), d.err().msg));
          }
          a.step = v;
        } else if (f == "--by") {
          a.by = v;
        } else if (f == "--top") {
          auto n = parse_count(v, "heatmap: --top", 64);
          if (!n) {
            return n.err();
          }
          a.top = *n;
        } else if (f == "--max") {
          // A whole number (a count) or a duration with its unit, nothing around either.
          const bool count = !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
          if (auto d = units::parse_duration(v); !count && !d) {
            return make_error(
                fmt::format("heatmap: --max '{}': {}", text::escape_for_terminal(v), d.err().msg));
          }
          a.max = v;
        } else if (f == "--column") {
          a.column = v;
        }
        return {};
      });
  if (!r) {
    return r.err();
  }
  return a;
}

result<plot_args> parse_plot_args(const std::vector<std::string> &args) {
  plot_args a;
  auto r = parse_flags(args, {"-c", "--title", "-o"}, {"--log"}, "plot",
                       [&](const std::string &f, const std::string &v) -> result<void> {
                         if (f == "-c") {
                           a.sql = v;
                         } else if (f == "--title") {
                           a.title = v;
                         } else if (f == "--log") {
                           a.log = true;
                         } else {
                           if (v.empty()) {
                             return make_error("plot: -o needs a file name");
                           }
                           a.output = v;
                         }
                         return {};
                       });
  if (!r) {
    return r.err();
  }
  if (a.sql.empty()) {
    return make_error("plot needs -c SQL: a query whose first column is a time (ns), e.g. "
                      "SELECT bucket(ts, '10s'), hist_percentile(hist, 99) FROM sched_delay "
                      "GROUP BY 1");
  }
  return a;
}

result<report_args> parse_report_args(const std::vector<std::string> &args) {
  report_args a;
  auto r = parse_flags(args, {"--from", "--to", "--where", "-o"}, {}, "report",
                       [&](const std::string &f, const std::string &v) -> result<void> {
                         return window_flag(a, "report", f, v).value_or(result<void>{});
                       });
  if (!r) {
    return r.err();
  }
  return a;
}

result<export_args> parse_export_args(const std::vector<std::string> &args) {
  export_args a;
  if (args.empty() || args[0].empty() || args[0][0] == '-') {
    return make_error("export: name a format (export openmetrics|perfetto [--from T] [--to T] "
                      "[--where SQL] [--top N] [-o FILE])");
  }
  if (args[0] != "openmetrics" && args[0] != "perfetto") {
    return make_error(
        fmt::format("export: unknown format '{}' (openmetrics or perfetto)", args[0]));
  }
  a.format = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  auto r = parse_flags(rest, {"--from", "--to", "--where", "--top", "-o"}, {}, "export",
                       [&](const std::string &f, const std::string &v) -> result<void> {
                         if (auto common = window_flag(a, "export", f, v)) {
                           return *common;
                         }
                         auto n = parse_count(v, "export: --top", 1000); // the only other flag
                         if (!n) {
                           return n.err();
                         }
                         a.top = *n;
                         return {};
                       });
  if (!r) {
    return r.err();
  }
  return a;
}

// ---- running a picture command ----------------------------------------------------------------

namespace {

result<void> write_file(const std::string &path, const std::string &doc) {
  return write_file_safely(path, doc, document_file());
}

error usage(const error &e) {
  return make_error(e.msg, EINVAL);
}

} // namespace

result<void> run_picture(query::reader &db, const std::string &kind,
                         const std::vector<std::string> &args, const picture_target &target,
                         std::string &note) {
  note.clear();
  const auto emit = [&](const std::optional<std::string> &file, const std::string &doc,
                        const std::string &what) -> result<void> {
    if (file) {
      if (auto w = write_file(*file, doc); !w) {
        return w;
      }
      note = fmt::format("{} written to {}", what, *file);
      return {};
    }
    *target.out << doc;
    target.out->flush();
    return {};
  };
  if (kind == "heatmap") {
    auto a = parse_heatmap_args(args);
    if (!a) {
      return usage(a.err());
    }
    const bool text = !a->output && target.terminal;
    const std::size_t columns =
        text ? static_cast<std::size_t>(std::max(target.cols - 14, 20)) : svg_columns;
    auto panels = load_heatmap(db, *a, columns);
    if (!panels) {
      return panels.err();
    }
    if (text) {
      std::string out;
      const int per =
          a->by ? std::max(10, target.rows / static_cast<int>(panels->size())) : target.rows;
      for (const auto &p : *panels) {
        out += charts::to_terminal(p, per, target.cols, target.color, db.zone());
      }
      *target.out << out;
      target.out->flush();
      return {};
    }
    std::uint64_t total = 0;
    for (const auto &p : *panels) {
      total += p.total();
    }
    return emit(a->output, heatmap_svg(*panels, *a, db.zone()),
                fmt::format("heatmap ({} samples)", total));
  }
  if (kind == "plot") {
    auto a = parse_plot_args(args);
    if (!a) {
      return usage(a.err());
    }
    auto c = load_plot(db, *a);
    if (!c) {
      return c.err();
    }
    if (!a->output && target.terminal) {
      *target.out << charts::to_terminal(*c, target.rows, target.cols, target.color, db.zone());
      target.out->flush();
      return {};
    }
    charts::svg_options o;
    o.zone = db.zone();
    // A chart with nothing drawn says why: no rows, every value NULL, or none above 0 on a log
    // axis (an empty picture alone looked like a drawing error).
    std::string what = fmt::format("plot ({} points", c->x.size());
    if (c->x.empty()) {
      what += ", none: the query returned no rows";
    } else if (!charts::y_range(*c)) {
      what += c->log ? ", none drawn: no value above 0 for the log axis"
                     : ", none drawn: every value is NULL";
    }
    return emit(a->output, charts::to_svg(*c, o), what + ")");
  }
  if (kind == "report") {
    auto a = parse_report_args(args);
    if (!a) {
      return usage(a.err());
    }
    auto html = build_report(db, *a);
    if (!html) {
      return html.err();
    }
    return emit(a->output, *html, "report");
  }
  if (kind == "export") {
    auto a = parse_export_args(args);
    if (!a) {
      return usage(a.err());
    }
    auto w = window_of(db, a->from, a->to);
    if (!w) {
      return w.err();
    }
    const auto write = a->format == "perfetto" ? write_perfetto : write_openmetrics;
    if (!a->output) {
      auto st = write(db, *a, w->first, w->second, *target.out);
      return st ? result<void>{} : result<void>{st.err()};
    }
    // Into a temporary renamed over FILE at the end (safe_file): never a half-written export.
    auto f = safe_file::create(*a->output, document_file());
    if (!f) {
      return f.err();
    }
    auto st = write(db, *a, w->first, w->second, f->stream());
    if (!st) {
      return st.err(); // the temporary is removed, FILE is left as it was
    }
    if (auto c = f->commit(); !c) {
      return c.err();
    }
    note = a->format == "perfetto"
               ? fmt::format("perfetto trace ({} events) written to {}", st->points, *a->output)
               : fmt::format("openmetrics export ({} series, {} points) written to {}", st->series,
                             st->points, *a->output);
    return {};
  }
  return make_error(fmt::format("unknown picture '{}' (heatmap, plot or report)", kind), EINVAL);
}

} // namespace rsched::sql_shell
