#include "damage.hpp"

#include "rsched/sqlite/statement.hpp"
#include "rsched/stats/encoding.hpp"
#include "rsched/store/blame_pack.hpp"
#include "rsched/store/hist_pack.hpp"
#include "rsched/store/row_pack.hpp"

#include <fmt/format.h>

#include <cstddef>
#include <map>
#include <optional>
#include <span>
#include <sqlite3.h>
#include <string>
#include <utility>
#include <vector>

namespace rsched::store::detail {

namespace {

// How a source table's blob is read.
enum class codec : std::uint8_t { hist, hist_pack, blame_pack, wakeup_pack, blocked_pack };

// A table the rollups decode a blob of: its columns after interval_id (the first `keys` of them
// its primary key's rest, the first one the metric where `metric_first`), and the blob's.
struct source {
  const char *table;
  std::vector<const char *> cols;
  std::size_t keys;
  const char *blob;
  codec kind;
  bool metric_first;
};

const std::vector<source> &sources() {
  static const std::vector<source> s = {
      {"thread_hist_pack", {"metric", "threads"}, 1, "data", codec::hist_pack, true},
      {"thread_hist_row", {"metric", "thread_id", "count", "total"}, 2, "hist", codec::hist, true},
      {"cpu_hist", {"metric", "cpu", "count", "total"}, 2, "hist", codec::hist, true},
      {"thread_perf_event", {"event_id", "thread_id", "value"}, 2, "rate_hist", codec::hist, false},
      {"thread_blame_pack", {"rows"}, 0, "data", codec::blame_pack, false},
      {"thread_wakeup_pack", {"rows"}, 0, "data", codec::wakeup_pack, false},
      {"thread_blocked_pack", {"rows"}, 0, "data", codec::blocked_pack, false},
  };
  return s;
}

using bytes = std::span<const std::uint8_t>;

// What is wrong with a histogram blob, as the rollups' merge would find it (a bucket walk with
// decode's checks, and the layout the row's merge expects); nullopt when it decodes.
std::optional<std::string> hist_damage(bytes blob, std::optional<stats::layout> want) {
  auto r = stats::for_each_stored_bucket(
      blob, [](std::size_t, std::uint64_t) -> result<void> { return {}; });
  if (!r) {
    return r.err().msg;
  }
  const auto got = stats::blob_layout(blob);
  if (want && got != stats::coarse_layout(*want)) {
    return fmt::format("histogram of layout {} where its rows have layout {}", blob[0],
                       static_cast<int>(*want));
  }
  return std::nullopt;
}

// A row (or a pack's entry) to set aside.
struct found {
  std::int64_t interval = 0;
  std::vector<std::optional<std::int64_t>> vals; // the source's cols
  std::vector<std::uint8_t> data;
  std::string error;
  std::string row_values; // JSON object of the cols (an entry's own for a pack entry)
};

// A thread_hist_pack that decodes whose damaged entries are taken out: the pack again without
// them.
struct rewrite {
  std::int64_t interval = 0;
  std::int64_t metric = 0;
  std::size_t threads = 0;
  std::vector<std::uint8_t> data;
};

std::string json_of(const std::vector<const char *> &names,
                    const std::vector<std::optional<std::int64_t>> &vals) {
  std::string s = "{";
  for (std::size_t i = 0; i < names.size() && i < vals.size(); ++i) {
    s += fmt::format("{}\"{}\":{}", i == 0 ? "" : ",", names[i],
                     vals[i] ? std::to_string(*vals[i]) : std::string("null"));
  }
  return s + "}";
}

// The entries of a thread_hist_pack (whose structure decodes) whose histograms do not: each as
// a found row of its own, and the pack without them (nullopt when none is damaged).
std::optional<rewrite> split_pack(std::int64_t interval, std::int64_t metric,
                                  const std::vector<pack_entry> &entries,
                                  std::optional<stats::layout> want, std::vector<found> &out) {
  pack_builder pb;
  bool any = false;
  for (const auto &e : entries) {
    if (auto why = hist_damage(e.hist, want)) {
      any = true;
      out.push_back({interval,
                     {},
                     std::vector<std::uint8_t>(e.hist.begin(), e.hist.end()),
                     fmt::format("thread {}: {}", e.thread_id, *why),
                     json_of({"metric", "thread_id", "count", "total"},
                             {metric, e.thread_id, e.count, e.total})});
    } else {
      pb.add(e.thread_id, e.count, e.total, e.hist);
    }
  }
  if (!any) {
    return std::nullopt;
  }
  const std::size_t n = pb.size();
  return rewrite{interval, metric, n, n > 0 ? pb.finish() : std::vector<std::uint8_t>{}};
}

// What is wrong with one source row's blob (nullopt: it decodes); a thread_hist_pack whose
// structure decodes is checked entry by entry into `out` and `rw` instead.
std::optional<std::string> row_damage(const source &s, std::int64_t interval,
                                      const std::vector<std::optional<std::int64_t>> &vals,
                                      bytes blob, const std::map<std::int64_t, stats::layout> &lay,
                                      std::vector<found> &out, std::vector<rewrite> &rw) {
  std::optional<stats::layout> want;
  if (s.metric_first && vals[0]) {
    if (auto it = lay.find(*vals[0]); it != lay.end()) {
      want = it->second;
    }
  } else if (s.kind == codec::hist) { // thread_perf_event.rate_hist
    want = stats::layout::log2;
  }
  switch (s.kind) {
  case codec::hist:
    return hist_damage(blob, want);
  case codec::hist_pack: {
    auto entries = unpack(blob);
    if (!entries) {
      return entries.err().msg;
    }
    if (auto r = split_pack(interval, vals[0].value_or(0), *entries, want, out)) {
      rw.push_back(std::move(*r));
    }
    return std::nullopt;
  }
  case codec::blame_pack: {
    std::vector<blame_entry> e;
    auto r = unpack_blame(blob, e);
    return r ? std::nullopt : std::optional<std::string>(r.err().msg);
  }
  case codec::wakeup_pack:
  case codec::blocked_pack: {
    std::vector<std::int64_t> e;
    auto r = unpack_rows(blob, s.kind == codec::wakeup_pack ? 5 : 4, e);
    return r ? std::nullopt : std::optional<std::string>(r.err().msg);
  }
  }
  return std::nullopt;
}

// Binds `v` (NULL for nullopt) to ?i.
void bind(sqlite3_stmt *st, int i, const std::optional<std::int64_t> &v) {
  if (v) {
    sqlite3_bind_int64(st, i, *v);
  } else {
    sqlite3_bind_null(st, i);
  }
}

result<void> step_done(sqlite3 *db, sqlite3_stmt *st) {
  const int rc = sqlite3_step(st);
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
    return make_error(sqlite3_errmsg(db), sqlite3_system_errno(db));
  }
  return {};
}

// The rows of source `s` in the intervals `ids` (a subquery over ?1..?3) that do not decode.
result<void> scan(sqlite3 *db, const source &s, const std::string &ids,
                  const std::map<std::int64_t, stats::layout> &lay, std::vector<found> &out,
                  std::vector<rewrite> &rw) {
  std::string cols;
  for (const char *c : s.cols) {
    cols += fmt::format("{}, ", c);
  }
  auto st = sqlite::prepare_stmt(db, fmt::format("SELECT interval_id, {}{} FROM {} WHERE "
                                                 "interval_id IN ({}) AND {} IS NOT NULL",
                                                 cols, s.blob, s.table, ids, s.blob));
  if (!st) {
    return st.err();
  }
  sqlite3_stmt *q = st->get();
  const int n = static_cast<int>(s.cols.size());
  int rc = 0;
  while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
    std::vector<std::optional<std::int64_t>> vals;
    for (int i = 1; i <= n; ++i) {
      vals.push_back(sqlite3_column_type(q, i) == SQLITE_NULL
                         ? std::nullopt
                         : std::optional<std::int64_t>(sqlite3_column_int64(q, i)));
    }
    const auto *p = static_cast<const std::uint8_t *>(sqlite3_column_blob(q, n + 1));
    const bytes blob(p,
                     p == nullptr ? 0 : static_cast<std::size_t>(sqlite3_column_bytes(q, n + 1)));
    const std::int64_t interval = sqlite3_column_int64(q, 0);
    // A text or number where the blob belongs fails hist_merge whatever its bytes.
    std::optional<std::string> why;
    if (const int type = sqlite3_column_type(q, n + 1); type != SQLITE_BLOB) {
      why = fmt::format("a {} where a BLOB belongs", type == SQLITE_TEXT ? "TEXT" : "number");
    } else {
      why = row_damage(s, interval, vals, blob, lay, out, rw);
    }
    if (why) {
      out.push_back({interval, vals, std::vector<std::uint8_t>(blob.begin(), blob.end()), *why,
                     json_of(s.cols, vals)});
    }
  }
  if (rc != SQLITE_DONE) {
    return make_error(sqlite3_errmsg(db), sqlite3_system_errno(db));
  }
  return {};
}

// Inserts `f` into damaged_rows (with its interval's place in time); with a whole row
// (`f.vals` set), deletes it from its table.
result<void> move_aside(sqlite3 *db, const source &s, const found &f, std::int64_t now_ns) {
  auto ins = sqlite::prepare_stmt(
      db, "INSERT INTO damaged_rows(interval_id, tier, boot_id, start_ns, dur_ns, source, "
          "row_values, data, error, found_ns) SELECT id, tier, boot_id, start_ns, dur_ns, ?2, ?3, "
          "?4, ?5, ?6 FROM intervals WHERE id = ?1");
  if (!ins) {
    return ins.err();
  }
  sqlite3_stmt *i = ins->get();
  sqlite3_bind_int64(i, 1, f.interval);
  sqlite3_bind_text(i, 2, s.table, -1, SQLITE_STATIC);
  sqlite3_bind_text(i, 3, f.row_values.data(), static_cast<int>(f.row_values.size()),
                    SQLITE_STATIC);
  if (f.data.empty()) {
    sqlite3_bind_zeroblob(i, 4, 0); // a pointer-less empty blob would bind NULL
  } else {
    sqlite3_bind_blob(i, 4, f.data.data(), static_cast<int>(f.data.size()), SQLITE_STATIC);
  }
  sqlite3_bind_text(i, 5, f.error.data(), static_cast<int>(f.error.size()), SQLITE_STATIC);
  sqlite3_bind_int64(i, 6, now_ns);
  if (auto r = step_done(db, i); !r) {
    return r;
  }
  if (f.vals.empty()) {
    return {}; // a pack's entry: the pack is written again without it
  }
  std::string where = "interval_id = ?1";
  for (std::size_t k = 0; k < s.keys; ++k) {
    where += fmt::format(" AND {} = ?{}", s.cols[k], k + 2);
  }
  auto del = sqlite::prepare_stmt(db, fmt::format("DELETE FROM {} WHERE {}", s.table, where));
  if (!del) {
    return del.err();
  }
  sqlite3_bind_int64(del->get(), 1, f.interval);
  for (std::size_t k = 0; k < s.keys; ++k) {
    bind(del->get(), static_cast<int>(k) + 2, f.vals[k]);
  }
  return step_done(db, del->get());
}

// Writes a thread_hist_pack again without its damaged entries (deletes it when none is left).
result<void> write_back(sqlite3 *db, const rewrite &w) {
  auto st = sqlite::prepare_stmt(
      db, w.threads > 0 ? "UPDATE thread_hist_pack SET threads = ?3, data = ?4 WHERE "
                          "interval_id = ?1 AND metric = ?2"
                        : "DELETE FROM thread_hist_pack WHERE interval_id = ?1 AND metric = ?2");
  if (!st) {
    return st.err();
  }
  sqlite3_bind_int64(st->get(), 1, w.interval);
  sqlite3_bind_int64(st->get(), 2, w.metric);
  if (w.threads > 0) {
    sqlite3_bind_int64(st->get(), 3, static_cast<std::int64_t>(w.threads));
    sqlite3_bind_blob(st->get(), 4, w.data.data(), static_cast<int>(w.data.size()), SQLITE_STATIC);
  }
  return step_done(db, st->get());
}

// Each metric's histogram layout (table metric).
result<std::map<std::int64_t, stats::layout>> metric_layouts(sqlite3 *db) {
  auto st = sqlite::prepare_stmt(db, "SELECT id, layout FROM metric");
  if (!st) {
    return st.err();
  }
  std::map<std::int64_t, stats::layout> out;
  int rc = 0;
  while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
    const std::int64_t l = sqlite3_column_int64(st->get(), 1);
    if (l >= 0 && l < 256 && stats::valid_layout(static_cast<std::uint8_t>(l))) {
      out.emplace(sqlite3_column_int64(st->get(), 0), static_cast<stats::layout>(l));
    }
  }
  if (rc != SQLITE_DONE) {
    return make_error(sqlite3_errmsg(db));
  }
  return out;
}

} // namespace

result<damage_found> set_aside_damage(sqlite3 *db, int tier, std::int64_t a, std::int64_t b,
                                      std::int64_t now_ns) {
  auto lay = metric_layouts(db);
  if (!lay) {
    return lay.err();
  }
  const std::string ids = fmt::format(
      "SELECT id FROM intervals WHERE tier = {} AND start_ns >= {} AND start_ns < {}", tier, a, b);
  damage_found out;
  for (const source &s : sources()) {
    std::vector<found> bad;
    std::vector<rewrite> rw;
    if (auto r = scan(db, s, ids, *lay, bad, rw); !r) {
      return make_error(fmt::format("{}: {}", s.table, r.err().msg));
    }
    for (const auto &f : bad) {
      if (auto r = move_aside(db, s, f, now_ns); !r) {
        return make_error(fmt::format("setting aside a row of {}: {}", s.table, r.err().msg));
      }
      if (out.rows++ == 0) {
        out.first = fmt::format("{} of interval {}: {}", s.table, f.interval, f.error);
      }
    }
    for (const auto &w : rw) {
      if (auto r = write_back(db, w); !r) {
        return make_error(fmt::format("thread_hist_pack: {}", r.err().msg));
      }
    }
  }
  return out;
}

} // namespace rsched::store::detail
