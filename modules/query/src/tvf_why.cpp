// why(victim, [start, end]): where a victim's time went in a window, and up to three hops further.
//
// Hop 0 is the victim: its time running (the slice group's time slices), runnable (its
// scheduling delay, divided among what ran meanwhile: blame's culprits) and sleeping (the wakeup
// group: who ended each sleep, by the state it slept in), and where its D sleeps blocked (their
// kernel stacks, a split of the D part). Hop 1 is the waker that ended most of that sleep (the
// threads of its name in its process): the same three parts of its own time in the same window,
// its runnable delay divided among its culprits; hops 2 and 3 the same from it, as explain()'s
// chains. "slept 80 % on a pipe, woken by db[1234]; db itself
// waited 60 % of its time behind batch[77]".
#include "rsched/base/text.hpp"
#include "rsched/base/timefmt.hpp"
#include "rsched/sqlite/statement.hpp"

#include "explain_read.hpp"
#include "table_functions.hpp"
#include "tvf_blame.hpp"
#include "tvf_window.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <sqlite3.h>
#include <string>
#include <tuple>
#include <vector>

namespace rsched::query::detail {

namespace {

std::optional<std::string_view> text_of(sqlite3_value *v) {
  if (v == nullptr || sqlite3_value_type(v) == SQLITE_NULL) {
    return std::nullopt;
  }
  const auto *p = reinterpret_cast<const char *>(sqlite3_value_text(v));
  return std::string_view(p != nullptr ? p : "", static_cast<std::size_t>(sqlite3_value_bytes(v)));
}

// The sum of the victims' thread_hist totals of `metrics` ("3, 4") in the window; nullopt when
// no row has them (the group was not recorded).
result<std::optional<std::int64_t>> hist_total(sqlite3 *db, const victims &v, std::int64_t a,
                                               std::int64_t b, const char *metrics) {
  std::optional<std::int64_t> total;
  auto r = each_row(
      db,
      fmt::format("SELECT sum(h.total) FROM {} AS i CROSS JOIN thread_hist AS h ON "
                  "h.interval_id = i.id AND h.metric IN ({}) CROSS JOIN thread AS t ON t.id = "
                  "h.thread_id WHERE {} AND {}",
                  timeline(db), metrics, overlaps(db, "i", a), victims_sql(v, 3)),
      a, b, v, [&](sqlite3_stmt *s) {
        if (sqlite3_column_type(s, 0) != SQLITE_NULL) {
          total = sqlite3_column_int64(s, 0);
        }
      });
  if (!r) {
    return r.err();
  }
  return total;
}

// One waker of the victims' sleeps, in one state.
struct waker_part {
  int kind = 0; // culprit.kind: 0 process, 1 <idle>, 3 <other>, 4 <hardirq>, 5 <softirq>, 6 <timer>
  std::optional<std::int64_t> pid;
  std::string comm, cgroup, state;
  std::int64_t sleep_ns = 0, count = 0;
};

result<std::vector<waker_part>> wakers_of(sqlite3 *db, const victims &v, std::int64_t a,
                                          std::int64_t b) {
  std::vector<waker_part> out;
  auto r = each_row(
      db,
      fmt::format("SELECT c.kind, CASE c.kind WHEN 0 THEN nullif(c.pid, 0) WHEN 1 THEN 0 END, "
                  "c.comm, c.cgroup, CASE w.state WHEN 0 THEN 'S' WHEN 1 THEN 'D' ELSE 'other' "
                  "END, sum(w.sleep_ns), sum(w.count) FROM {} AS i CROSS JOIN thread_wakeup AS w "
                  "ON w.interval_id = i.id CROSS JOIN thread AS t ON t.id = w.thread_id JOIN "
                  "culprit AS c ON c.id = w.waker_id WHERE {} AND {} GROUP BY c.kind, c.pid, "
                  "c.comm, c.cgroup, w.state",
                  timeline(db), overlaps(db, "i", a), victims_sql(v, 3)),
      a, b, v, [&](sqlite3_stmt *s) {
        waker_part p;
        p.kind = sqlite3_column_int(s, 0);
        if (sqlite3_column_type(s, 1) != SQLITE_NULL) {
          p.pid = sqlite3_column_int64(s, 1);
        }
        p.comm = sqlite::column_text(s, 2);
        p.cgroup = sqlite::column_text(s, 3);
        p.state = sqlite::column_text(s, 4);
        p.sleep_ns = sqlite3_column_int64(s, 5);
        p.count = sqlite3_column_int64(s, 6);
        out.push_back(std::move(p));
      });
  if (!r) {
    return r.err();
  }
  std::stable_sort(out.begin(), out.end(), [](const waker_part &x, const waker_part &y) {
    return x.sleep_ns != y.sleep_ns ? x.sleep_ns > y.sleep_ns : x.count > y.count;
  });
  return out;
}

// comm[pid] for a process, the name alone for a pseudo one or a rollup identity (no pid).
std::string name_of(const std::string &comm, const std::optional<std::int64_t> &pid, int kind) {
  if (kind == 0 && pid && *pid > 0) {
    return fmt::format("{}[{}]", comm, *pid);
  }
  return comm;
}

std::string pct(std::int64_t part, std::int64_t whole) {
  if (whole <= 0) {
    return "?";
  }
  return fmt::format("{:.0f} %", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

// Where the victims' D sleeps (and, from v16, long sleeps) blocked: per kernel stack, its
// frames (innermost first) and the state of its sleeps.
struct blocked_part {
  std::string state = "D";
  std::string frames;
  std::int64_t sleep_ns = 0, count = 0;
};

// The depth of a stack's first frame of the kernel's own (SQL over kstack_frame of
// x.stack_id): stacks recorded before rschedd dropped them start with its BPF program and the
// tracepoint's dispatch (collect::kallsyms::tracing_frames, the same names).
constexpr const char *own_frames_from =
    "coalesce((SELECT min(depth) FROM kstack_frame WHERE stack_id = x.stack_id AND NOT (func "
    "GLOB 'bpf_prog_*' OR func GLOB 'bpf_trampoline_*' OR func GLOB 'bpf_trace_run*' OR func "
    "GLOB '__bpf_trace_*' OR func GLOB '__traceiter_*' OR func GLOB '0x*')), 0)";

result<std::vector<blocked_part>> blocked_of(sqlite3 *db, const victims &v, std::int64_t a,
                                             std::int64_t b) {
  std::vector<blocked_part> out;
  if (!has_table(db, "thread_blocked")) {
    return out;
  }
  auto r = each_row(
      db,
      fmt::format("SELECT coalesce((SELECT group_concat(f.func, ' <- ') FROM (SELECT func FROM "
                  "kstack_frame WHERE stack_id = x.stack_id AND depth >= {} ORDER BY depth) AS "
                  "f), '<other>'), "
                  "sum(x.sleep_ns), sum(x.count), {} FROM {} AS i CROSS JOIN thread_blocked AS x "
                  "ON x.interval_id = i.id CROSS JOIN thread AS t ON t.id = x.thread_id WHERE {} "
                  "AND {} GROUP BY x.stack_id",
                  own_frames_from,
                  // v16: the state of a stack's sleeps (before, every stack is a D sleep's)
                  has_column(db, "kstack", "state")
                      ? "(SELECT k.state FROM kstack AS k WHERE k.id = x.stack_id)"
                      : "1",
                  timeline(db), overlaps(db, "i", a), victims_sql(v, 3)),
      a, b, v, [&](sqlite3_stmt *s) {
        const std::int64_t st = sqlite3_column_int64(s, 3);
        out.push_back({st == 0   ? "S"
                       : st == 1 ? "D"
                                 : "other",
                       sqlite::column_text(s, 0), sqlite3_column_int64(s, 1),
                       sqlite3_column_int64(s, 2)});
      });
  if (!r) {
    return r.err();
  }
  std::stable_sort(out.begin(), out.end(), [](const blocked_part &x, const blocked_part &y) {
    return x.sleep_ns > y.sleep_ns;
  });
  return out;
}

// One hop's time: running (nullopt: not recorded), runnable culprits, sleeping wakers.
struct hop {
  std::string subject;
  std::optional<std::int64_t> running;
  std::vector<culprit_sum> culprits;
  std::optional<std::int64_t> delay; // sched_delay's total when no blame was recorded
  std::vector<waker_part> wakers;
  std::vector<blocked_part> blocked; // the D part of `wakers` and long sleeps, by kernel stack
  bool sleep_recorded = true;        // some interval of the window recorded the wakeup group
  // The most-throttled cgroup of its threads' cgroups and their ancestors (pressure_of): time
  // its threads could not run though runnable, a split of the runnable part.
  pressure_sum pressure;
  // Where it slept in D: the processes whose I/O the window saw most (by bytes), at most
  // three; what its D sleeps waited behind, if they waited on storage.
  std::vector<io_sum> io;
  // Its threads' (thread name, pid) in the window (at most 64): a waker among them is no hop.
  std::set<std::tuple<std::string, std::int64_t>> members;
  [[nodiscard]] std::int64_t runnable() const {
    std::int64_t n = 0;
    for (const auto &c : culprits) {
      n += c.wait_ns;
    }
    return culprits.empty() ? delay.value_or(0) : n;
  }
  [[nodiscard]] std::int64_t sleeping() const {
    std::int64_t n = 0;
    for (const auto &w : wakers) {
      n += w.sleep_ns;
    }
    return n;
  }
  [[nodiscard]] std::int64_t total() const { return running.value_or(0) + runnable() + sleeping(); }
  [[nodiscard]] std::int64_t sleeping_in(std::string_view state) const {
    std::int64_t n = 0;
    for (const auto &w : wakers) {
      n += w.state == state ? w.sleep_ns : 0;
    }
    return n;
  }
};

// The processes whose I/O (bytes read from storage and dirtied) the window saw most, at most
// three and each at least a hundredth of the whole, largest first.
std::vector<io_sum> top_io(std::vector<io_sum> all) {
  std::int64_t total = 0;
  for (const auto &x : all) {
    total += x.bytes();
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const io_sum &x, const io_sum &y) { return x.bytes() > y.bytes(); });
  std::vector<io_sum> out;
  for (auto &x : all) {
    if (out.size() == 3 || x.bytes() <= 0 || x.bytes() * 100 < total) {
      break;
    }
    out.push_back(std::move(x));
  }
  return out;
}

// Whether an interval overlapping [a, b) recorded the wakeup group (intervals.groups bit 128;
// 0, a daemon that did not say, counts as recorded).
bool wakeup_recorded(sqlite3 *db, std::int64_t a, std::int64_t b) {
  auto st = sqlite::prepare_stmt(
      db, fmt::format("SELECT 1 FROM {} AS i WHERE {} AND (i.groups = 0 OR i.groups & 128) LIMIT 1",
                      timeline(db), overlaps(db, "i", a)));
  if (!st) {
    return true; // unknown: say nothing more than the rows do
  }
  sqlite3_bind_int64(st->get(), 1, a);
  sqlite3_bind_int64(st->get(), 2, b);
  return sqlite3_step(st->get()) == SQLITE_ROW;
}

result<hop> hop_of(sqlite3 *db, const victims &v, std::int64_t a, std::int64_t b,
                   std::string subject) {
  hop h;
  h.subject = std::move(subject);
  auto p = pressure_of(db, v, a, b);
  if (!p) {
    return p.err();
  }
  h.pressure = std::move(*p);
  auto run = hist_total(db, v, a, b, "3, 4"); // timeslice: voluntary and involuntary
  if (!run) {
    return run.err();
  }
  h.running = *run;
  auto c = blame_of(db, v, a, b);
  if (!c) {
    return c.err();
  }
  h.culprits = std::move(*c);
  if (h.culprits.empty()) {
    auto d = hist_total(db, v, a, b, "1"); // sched_delay
    if (!d) {
      return d.err();
    }
    h.delay = *d;
  }
  auto w = wakers_of(db, v, a, b);
  if (!w) {
    return w.err();
  }
  h.wakers = std::move(*w);
  auto bl = blocked_of(db, v, a, b);
  if (!bl) {
    return bl.err();
  }
  h.blocked = std::move(*bl);
  h.sleep_recorded = !h.wakers.empty() || wakeup_recorded(db, a, b);
  auto m = each_row(db,
                    fmt::format("SELECT DISTINCT t.comm, t.pid FROM {} AS i CROSS JOIN thread_hist "
                                "AS x ON x.interval_id = i.id AND x.metric = 1 CROSS JOIN thread "
                                "AS t ON t.id = x.thread_id WHERE {} AND {} LIMIT 64",
                                timeline(db), overlaps(db, "i", a), victims_sql(v, 3)),
                    a, b, v, [&](sqlite3_stmt *st) {
                      h.members.insert({sqlite::column_text(st, 0), sqlite3_column_int64(st, 1)});
                    });
  if (!m) {
    return m.err();
  }
  return h;
}

// "running 2 %, runnable 1 % (behind hog[77] 95 %), sleeping 97 % (S 97 %)".
std::string hop_text(const hop &h) {
  const std::int64_t all = h.total();
  std::string s = h.subject + ":";
  if (all <= 0) {
    return s + " nothing recorded in the window";
  }
  if (!h.sleep_recorded) {
    // Without its sleep, shares of the whole would say "runnable 100 %": times instead.
    s += " runnable " + text::format_duration_ns(static_cast<double>(h.runnable()));
    if (h.running) {
      s += ", running " + text::format_duration_ns(static_cast<double>(*h.running));
    }
    return s + "; its sleep was not recorded in this window (the wakeup group was off: rschedd "
               "-g wakeup)";
  }
  if (h.running) {
    s += " running " + pct(*h.running, all) + ",";
  }
  s += " runnable " + pct(h.runnable(), all);
  std::vector<std::string> runnable_notes;
  if (!h.culprits.empty()) {
    const auto &c = h.culprits.front();
    runnable_notes.push_back(fmt::format("behind {} {} of it", name_of(c.comm, c.pid, c.kind),
                                         pct(c.wait_ns, h.runnable())));
  }
  if (h.pressure.throttled_ns.value_or(0) > 0) {
    runnable_notes.push_back(
        fmt::format("cgroup {} throttled {}", h.pressure.throttled_cgroup,
                    text::format_duration_ns(static_cast<double>(*h.pressure.throttled_ns))));
  }
  for (std::size_t i = 0; i < runnable_notes.size(); ++i) {
    s += (i == 0 ? " (" : "; ") + runnable_notes[i] + (i + 1 == runnable_notes.size() ? ")" : "");
  }
  const std::int64_t sleeping = h.sleeping();
  if (sleeping > 0) {
    std::map<std::string, std::int64_t> by_state;
    for (const auto &w : h.wakers) {
      by_state[w.state] += w.sleep_ns;
    }
    std::string states;
    for (const auto &[st, ns] : by_state) {
      states += (states.empty() ? "" : ", ") + st + " " + pct(ns, all);
    }
    s += ", sleeping " + pct(sleeping, all) + " (" + states + ")";
  }
  if (!h.io.empty()) {
    std::string names;
    for (const auto &x : h.io) {
      names += fmt::format("{}{} {}", names.empty() ? "" : ", ",
                           name_of(x.comm, x.pid > 0 ? std::optional(x.pid) : std::nullopt, 0),
                           text::format_bytes(x.bytes()));
    }
    s += "; its D sleeps beside the I/O of " + names;
  }
  return s;
}

// The waker (thread name, pid) that ended most of a hop's sleep, and how much; none when it
// ended under a tenth of it (too little to follow).
std::optional<std::tuple<std::string, std::int64_t, std::int64_t>> top_waker(const hop &h) {
  std::map<std::tuple<std::string, std::int64_t>, std::int64_t> by_waker;
  for (const auto &p : h.wakers) {
    if (p.kind == 0) {
      by_waker[{p.comm, p.pid.value_or(0)}] += p.sleep_ns;
    }
  }
  const auto top =
      std::max_element(by_waker.begin(), by_waker.end(),
                       [](const auto &x, const auto &y) { return x.second < y.second; });
  if (top == by_waker.end() || top->second <= 0 || top->second * 10 < h.sleeping()) {
    return std::nullopt;
  }
  return std::tuple{std::get<0>(top->first), std::get<1>(top->first), top->second};
}

value opt_value(const std::optional<std::int64_t> &o) {
  value x;
  if (o) {
    x = *o;
  }
  return x;
}

// One row of why(): hop k's part, its size (ns: time, a share of the hop's whole; bytes).
struct part_row {
  const char *part;
  value state, by_pid, by_comm, by_cgroup, ns, count, bytes;
};

void add_row(std::int64_t k, const hop &h, const std::string &summary, part_row p, rows &out) {
  const std::int64_t all = h.total();
  row r;
  r.reserve(12);
  r.emplace_back(k);
  r.emplace_back(h.subject);
  r.emplace_back(std::string(p.part));
  r.push_back(std::move(p.state));
  r.push_back(std::move(p.by_pid));
  r.push_back(std::move(p.by_comm));
  r.push_back(std::move(p.by_cgroup));
  if (const auto *ns = std::get_if<std::int64_t>(&p.ns); ns != nullptr && all > 0) {
    r.push_back(p.ns);
    r.emplace_back(100.0 * static_cast<double>(*ns) / static_cast<double>(all));
  } else {
    r.push_back(std::move(p.ns));
    r.emplace_back();
  }
  r.push_back(std::move(p.count));
  r.emplace_back(summary);
  r.push_back(std::move(p.bytes));
  out.push_back(std::move(r));
}

// Hop k's rows: running, runnable (per culprit), throttled (a split of runnable), sleeping (per
// waker and state), blocked (per kernel stack, a split of sleeping) and io (the busiest
// processes' bytes beside its D sleeps).
void add_hop_rows(std::int64_t k, const hop &h, const std::string &summary, rows &out) {
  const auto add = [&](part_row p) { add_row(k, h, summary, std::move(p), out); };
  if (h.running) {
    add({"running", {}, {}, {}, {}, *h.running, {}, {}});
  }
  for (const auto &c : h.culprits) {
    add({"runnable", {}, opt_value(c.pid), c.comm, c.cgroup, c.wait_ns, c.waits, {}});
  }
  if (h.culprits.empty() && h.delay) {
    add({"runnable", {}, {}, {}, {}, *h.delay, {}, {}});
  }
  if (h.pressure.throttled_ns.value_or(0) > 0) {
    add({"throttled", {}, {}, {}, h.pressure.throttled_cgroup, *h.pressure.throttled_ns, {}, {}});
  }
  for (const auto &p : h.wakers) {
    add({"sleeping", p.state, opt_value(p.pid), p.comm, p.cgroup, p.sleep_ns, p.count, {}});
  }
  // Where the D sleeps and the long sleeps blocked (a split of the sleeping rows above, not
  // added to the hop's time): the kernel stack in by_comm.
  for (const auto &p : h.blocked) {
    add({"blocked", p.state, {}, p.frames, {}, p.sleep_ns, p.count, {}});
  }
  for (const auto &x : h.io) {
    add({"io", {}, x.pid > 0 ? value(x.pid) : value(), x.comm, x.cgroup, {}, {}, x.bytes()});
  }
}

// The window's busiest I/O (top_io) on each hop that slept at least a tenth of its sleep in D;
// read once, and only when some hop did.
result<void> add_io(sqlite3 *db, std::int64_t a, std::int64_t b, std::vector<hop> &hops) {
  const auto in_d = [](const hop &h) {
    return h.sleeping() > 0 && h.sleeping_in("D") * 10 >= h.sleeping();
  };
  if (std::none_of(hops.begin(), hops.end(), in_d)) {
    return {};
  }
  auto io = io_by_process(db, period{a, b, 0});
  if (!io) {
    return io.err();
  }
  const std::vector<io_sum> busiest = top_io(std::move(*io));
  for (hop &h : hops) {
    if (in_d(h)) {
      h.io = busiest;
    }
  }
  return {};
}

} // namespace

result<rows> why_fn(sqlite3 *db, const fn_context &ctx, const args_t &args) {
  auto v = parse_victim(text_of(args[0]), "why");
  if (!v) {
    return v.err();
  }
  auto w = window_args(db, ctx, args, 1, 2, "why");
  if (!w) {
    return w.err();
  }
  if (!has_table(db, "thread_wakeup")) {
    return make_error("why: this database has no wakeup table (recorded before schema 14; "
                      "rschedd -g wakeup records who woke each thread)");
  }
  const auto [a, b] = *w;
  auto h0 = hop_of(db, {*v}, a, b, v->describe());
  if (!h0) {
    return h0.err();
  }
  // Hops 1 to 3: the waker that ended most of the previous hop's sleep (summed over its
  // states): the threads of that name in that process (the wakeup group names a waker by its
  // process and thread name), as explain's chains follow them; not one already on the path.
  std::vector<hop> hops{std::move(*h0)};
  std::vector<std::int64_t> woke_ns; // hop k+1 ended this much of hop k's sleep
  std::set<std::tuple<std::string, std::int64_t>> seen;
  for (int n = 0; n < 3; ++n) {
    auto next = top_waker(hops.back());
    if (!next) {
      break;
    }
    // Not a structured binding: clang 14 cannot capture one in a lambda.
    const std::string &comm = std::get<0>(*next);
    const std::int64_t pid = std::get<1>(*next);
    const std::int64_t ns = std::get<2>(*next);
    const bool earlier = std::any_of(hops.begin(), hops.end(), [&](const hop &x) {
      return x.members.contains({comm, pid});
    });
    if (earlier || !seen.insert({comm, pid}).second) {
      break; // a thread of the path already: each woke the other
    }
    victims vs;
    victim by_comm;
    by_comm.what = victim::kind::comm;
    by_comm.text = comm;
    vs.push_back(by_comm);
    if (pid > 0) { // a rollup row names the waker by comm only
      victim by_pid;
      by_pid.what = victim::kind::pid;
      by_pid.number = pid;
      vs.push_back(by_pid);
    }
    auto h = hop_of(db, vs, a, b, name_of(comm, pid > 0 ? std::optional(pid) : std::nullopt, 0));
    if (!h) {
      return h.err();
    }
    hops.push_back(std::move(*h));
    woke_ns.push_back(ns);
  }
  if (auto r = add_io(db, a, b, hops); !r) {
    return r.err();
  }
  // The sentence every row carries.
  std::string summary = hop_text(hops[0]);
  for (std::size_t k = 1; k < hops.size(); ++k) {
    summary += fmt::format("; woken by {} for {} of its sleep; {}", hops[k].subject,
                           pct(woke_ns[k - 1], hops[k - 1].sleeping()), hop_text(hops[k]));
  }
  rows out;
  for (std::size_t k = 0; k < hops.size(); ++k) {
    add_hop_rows(static_cast<std::int64_t>(k), hops[k], summary, out);
  }
  return out;
}

} // namespace rsched::query::detail
