// explain(annotation_id) and explain(start, end [, victims]): from an incident's window to the
// threads that did worst against their own baseline and, for each, the causes the history
// holds, ranked by the share of the thread's extra wait they explain (docs/SQL.md, "explain").
#include "rsched/base/text.hpp"
#include "rsched/sqlite/statement.hpp"
#include "rsched/stats/encoding.hpp"
#include "rsched/stats/histogram.hpp"
#include "rsched/stats/percentile.hpp"
#include "rsched/store/hist_pack.hpp"
#include "rsched/store/row_pack.hpp"

#include "explain_read.hpp"
#include "explain_scope.hpp"
#include "sql_functions.hpp"
#include "table_functions.hpp"
#include "tvf_blame.hpp"
#include "tvf_window.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <sqlite3.h>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace rsched::query::detail {

namespace {

// The baseline: the period just before the window's first interval, as long as the window but
// at least this.
constexpr std::int64_t min_baseline_ns = 5LL * 60 * 1'000'000'000;
// Evidence that is not a share of the wait (migrations, pressure) is reported when it stands out:
// migrations at least twice the baseline rate's and at least this many more; PSI "some" at least
// this many percentage points above the baseline's.
constexpr double min_extra_migrations = 10.0;
constexpr double min_pressure_rise_pct = 10.0;

std::optional<std::int64_t> p99(const std::optional<stats::histogram> &h) {
  if (!h) {
    return std::nullopt;
  }
  auto r = stats::percentile(*h, 99.0);
  if (!r) {
    return std::nullopt;
  }
  return static_cast<std::int64_t>(r->value);
}

// A culprit process's identity: pid (NULL on rollup rows, 0 for <idle>), comm, cgroup.
using culprit_key = std::tuple<int, std::int64_t, std::string, std::string>;
culprit_key key_of(const culprit_sum &c) {
  return {c.kind, c.pid.value_or(-1), c.comm, c.cgroup};
}

std::string culprit_name(const culprit_sum &c) {
  std::string name = c.comm;
  if (c.kind == 0 && c.pid && *c.pid > 0) {
    name += fmt::format("[{}]", *c.pid);
  }
  return name;
}

const char *policy_name(int policy) {
  switch (policy) {
  case 1:
    return "SCHED_FIFO";
  case 2:
    return "SCHED_RR";
  case 6:
    return "SCHED_DEADLINE";
  default:
    return "fair";
  }
}

// One cause of one victim.
struct cause_row {
  std::string kind;
  std::optional<std::int64_t> pid;
  std::optional<std::string> comm, cgroup;
  std::optional<double> share; // percent of the victim's excess wait; NULL for evidence
  // The cause's size in the window and at the baseline rate, in `unit`'s columns.
  enum class unit : std::uint8_t { ns, pct, count } in = unit::ns;
  double measure = 0, measure_baseline = 0;
  std::string summary;
  std::optional<std::string> via; // the path from the victim to the culprit (a held sleep's)
  int order = 0; // 0: a share of the wait; 1: migrations; 2: pressure; 3: a waker (after them)
};

// How a victim is ranked: against its own baseline; new in the window (no baseline of its own:
// everything is excess), ranked after those; a culprit of the window (its process held up
// other processes' threads longer than its own threads' excess), ranked last.
enum class victim_class : std::uint8_t { baseline, fresh, culprit };
const char *class_name(victim_class c) {
  switch (c) {
  case victim_class::baseline:
    return "baseline";
  case victim_class::fresh:
    return "new";
  case victim_class::culprit:
    return "culprit";
  }
  return "";
}

struct victim_row {
  std::int64_t thread_id = 0;
  const thread_stats *w = nullptr;
  const thread_stats *base = nullptr; // nullptr: nothing of it in the baseline
  std::int64_t expected_ns = 0;       // its scheduling delay at the baseline rate
  std::int64_t excess_ns = 0;         // ... and the delay beyond it
  std::int64_t late_excess_ns = 0;    // its lateness (delay, held, blocked) beyond the rate's
  victim_class cls = victim_class::baseline;
};

// --- Stage 1: the scope (the window, the victims and why those, the baseline) ---------------

// What explain() judges.
struct explain_scope {
  std::int64_t a = 0, b = 0;                   // the window, as given
  std::optional<std::int64_t> annotation;      // explain(ID)
  victims vs;                                  // empty: every thread
  std::shared_ptr<const service_rule> service; // victims from the page
  std::string rule;                            // which rule chose the victims (victims_rule)
};

struct annotation_info {
  std::int64_t a = 0, b = 0;
  std::string tags;
};

result<annotation_info> annotation_of(sqlite3 *db, sqlite3_value *v) {
  if (sqlite3_value_type(v) != SQLITE_INTEGER) {
    return make_error("explain: explain(ANNOTATION_ID) takes an annotation's id (an integer), "
                      "explain(start, end [, victims]) a window");
  }
  const std::int64_t id = sqlite3_value_int64(v);
  auto st =
      sqlite::prepare_stmt(db, "SELECT start_ns, end_ns, tags FROM annotations WHERE id = ?1");
  if (!st) {
    return make_error("explain: this database has no annotations table");
  }
  sqlite3_bind_int64(st->get(), 1, id);
  if (sqlite3_step(st->get()) != SQLITE_ROW) {
    return make_error(
        fmt::format("explain: no annotation {} (SELECT id, text FROM annotations)", id));
  }
  annotation_info out;
  out.a = sqlite3_column_int64(st->get(), 0);
  // A point in time: the interval that holds it.
  out.b = sqlite3_column_type(st->get(), 1) == SQLITE_NULL ? out.a + 1
                                                           : sqlite3_column_int64(st->get(), 1);
  out.tags = sqlite::column_text(st->get(), 2);
  if (out.b <= out.a) {
    return make_error(fmt::format("explain: annotation {} ends before it starts", id));
  }
  return out;
}

// The patterns recorded for service `name` (table services, schema 19; none before it).
result<std::vector<std::string>> service_patterns(sqlite3 *db, const std::string &name) {
  std::vector<std::string> out;
  if (!has_table(db, "services")) {
    return out;
  }
  auto st = sqlite::prepare_stmt(
      db, "SELECT pattern FROM services WHERE name = ?1 ORDER BY created_ns, pattern");
  if (!st) {
    return st.err();
  }
  sqlite3_bind_text(st->get(), 1, name.data(), static_cast<int>(name.size()), SQLITE_TRANSIENT);
  int rc = 0;
  while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
    out.push_back(sqlite::column_text(st->get(), 0));
  }
  if (rc != SQLITE_DONE) {
    return make_error(std::string("explain: ") + sqlite3_errmsg(db));
  }
  return out;
}

// The victims of explain(ID) without victims given: the service its tags name, by its mapping
// or its name; every thread when they name none.
result<void> victims_from_page(sqlite3 *db, const annotation_info &an, std::int64_t id,
                               explain_scope &s) {
  const auto name = service_of_tags(an.tags);
  if (!name) {
    s.rule = fmt::format("every thread (annotation {} names no service: tag it service:NAME)", id);
    return {};
  }
  auto patterns = service_patterns(db, *name);
  if (!patterns) {
    return patterns.err();
  }
  s.service = std::make_shared<const service_rule>(service_rule{*name, std::move(*patterns)});
  victim v;
  v.what = victim::kind::service;
  v.service = s.service;
  s.vs.push_back(std::move(v));
  s.rule = s.service->describe();
  return {};
}

result<victim> victim_arg(sqlite3_value *v) {
  const auto *p = reinterpret_cast<const char *>(sqlite3_value_text(v));
  return parse_victim(
      std::string_view(p != nullptr ? p : "", static_cast<std::size_t>(sqlite3_value_bytes(v))),
      "explain");
}

result<explain_scope> scope_of(sqlite3 *db, const fn_context &ctx, const args_t &args) {
  const auto given = [&](std::size_t i) {
    return i < args.size() && args[i] != nullptr && sqlite3_value_type(args[i]) != SQLITE_NULL;
  };
  explain_scope s;
  if (!given(1)) {
    if (!given(0)) {
      return make_error("explain: give an annotation id, or a window: explain(ANNOTATION_ID "
                        "[, NULL, victims]) or explain(start, end [, victims])");
    }
    auto an = annotation_of(db, args[0]);
    if (!an) {
      return an.err();
    }
    s.a = an->a;
    s.b = an->b;
    s.annotation = sqlite3_value_int64(args[0]);
    ctx.window_named = true;
    ctx.name_window(s.a, s.b);
    if (!given(2)) {
      if (auto r = victims_from_page(db, *an, *s.annotation, s); !r) {
        return r.err();
      }
      return s;
    }
  } else {
    if (!given(0)) {
      return make_error("explain: a window needs both start and end: explain(start, end [, "
                        "victims])");
    }
    auto ww = window_args(db, ctx, args, 0, 1, "explain");
    if (!ww) {
      return ww.err();
    }
    std::tie(s.a, s.b) = *ww;
    if (s.b <= s.a) {
      return make_error("explain: the window ends before it starts");
    }
  }
  if (given(2)) {
    auto v = victim_arg(args[2]);
    if (!v) {
      return v.err();
    }
    s.rule = "victims given: " + v->describe();
    s.vs.push_back(std::move(*v));
  } else {
    s.rule = "every thread (no victims given)";
  }
  return s;
}

// The windows of the other incidents (annotations with an end, not rschedd's own notes).
result<std::vector<stretch>> other_incidents(sqlite3 *db, std::optional<std::int64_t> self) {
  std::vector<stretch> out;
  if (!has_table(db, "annotations")) {
    return out;
  }
  auto st = sqlite::prepare_stmt(db, "SELECT start_ns, end_ns FROM annotations WHERE end_ns > "
                                     "start_ns AND source <> 'rschedd' AND id IS NOT ?1");
  if (!st) {
    return st.err();
  }
  if (self) {
    sqlite3_bind_int64(st->get(), 1, *self);
  }
  int rc = 0;
  while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
    out.push_back({sqlite3_column_int64(st->get(), 0), sqlite3_column_int64(st->get(), 1)});
  }
  if (rc != SQLITE_DONE) {
    return make_error(std::string("explain: ") + sqlite3_errmsg(db));
  }
  return out;
}

// The baseline before the window's first interval `first`: the nearest stretch outside every
// other incident and at least half recorded (choose_baseline), else the one just before.
result<period> baseline_of(sqlite3 *db, const explain_scope &s, std::int64_t first) {
  auto incidents = other_incidents(db, s.annotation);
  if (!incidents) {
    return incidents.err();
  }
  std::int64_t horizon = first;
  if (auto st = sqlite::prepare_stmt(db, fmt::format("SELECT min(start_ns) FROM {}", timeline(db)));
      st && sqlite3_step(st->get()) == SQLITE_ROW &&
      sqlite3_column_type(st->get(), 0) != SQLITE_NULL) {
    horizon = sqlite3_column_int64(st->get(), 0);
  }
  std::optional<error> failed;
  const auto recorded = [&](std::int64_t a, std::int64_t b) -> std::int64_t {
    auto p = period_of(db, a, b);
    if (!p) {
      failed = p.err();
      return 0;
    }
    return p->recorded_ns;
  };
  const auto c = choose_baseline({first, s.b}, min_baseline_ns, *incidents, horizon, recorded);
  if (failed) {
    return *failed;
  }
  return period_of(db, c.at.a, c.at.b);
}

// --- Stage 2: the victims, ranked ------------------------------------------------------------

// Converts a baseline amount to the window's recorded time (whole ns); 0 without a baseline.
struct rate {
  long double scale = 0.0L;
  [[nodiscard]] std::int64_t operator()(std::int64_t x) const {
    return static_cast<std::int64_t>(std::llround(static_cast<long double>(x) * scale));
  }
};

std::vector<victim_row>
rank_victims(const std::unordered_map<std::int64_t, thread_stats> &in_window,
             const std::unordered_map<std::int64_t, thread_stats> &in_base,
             const rate &at_baseline_rate) {
  std::vector<victim_row> out;
  for (const auto &[id, t] : in_window) {
    victim_row v;
    v.thread_id = id;
    v.w = &t;
    std::int64_t expected_late = 0;
    auto it = in_base.find(id);
    if (it != in_base.end() && it->second.any) {
      v.base = &it->second;
      v.expected_ns = at_baseline_rate(it->second.wait_ns);
      expected_late = at_baseline_rate(it->second.late_ns());
    } else {
      v.cls = victim_class::fresh;
    }
    v.excess_ns = t.wait_ns - v.expected_ns;
    v.late_excess_ns = t.late_ns() - expected_late;
    if (v.late_excess_ns > 0) {
      out.push_back(v);
    }
  }
  std::sort(out.begin(), out.end(), [](const victim_row &x, const victim_row &y) {
    return x.late_excess_ns != y.late_excess_ns ? x.late_excess_ns > y.late_excess_ns
                                                : x.w->tid < y.w->tid;
  });
  return out;
}

// Marks the victims whose process is a root culprit of the window: the wait it caused other
// processes' ranked threads (their blame) is at least its own threads' summed excess, and its
// own threads did not wait mostly behind one of those processes (two fair processes that hold
// each other up, a service and the batch job beside it, are each other's culprits: neither is
// the root). Then orders the victims by class (stable: by excess within one).
void classify(std::vector<victim_row> &victims, const window_causes &blame_w) {
  std::unordered_map<std::int64_t, std::int64_t> pid_of, own_excess;
  std::map<std::int64_t, std::map<std::int64_t, std::int64_t>> caused; // culprit -> victim pid
  std::map<std::int64_t, std::map<std::int64_t, std::int64_t>> behind; // victim -> culprit pid
  for (const auto &v : victims) {
    pid_of[v.thread_id] = v.w->pid;
    own_excess[v.w->pid] += v.late_excess_ns;
  }
  for (const auto &tc : blame_w.by_thread) {
    const auto &c = tc.culprit;
    const auto victim_pid = pid_of.find(tc.thread_id);
    if (c.kind != 0 || !c.pid || *c.pid <= 0 || victim_pid == pid_of.end() ||
        victim_pid->second == *c.pid) {
      continue; // a pseudo-culprit, a rollup's (no pid), or its own process
    }
    caused[*c.pid][victim_pid->second] += c.wait_ns;
    behind[victim_pid->second][*c.pid] += c.wait_ns;
  }
  const auto root = [&](std::int64_t pid) {
    const auto c = caused.find(pid);
    if (pid <= 0 || c == caused.end()) {
      return false;
    }
    std::int64_t total = 0;
    for (const auto &[held, ns] : c->second) {
      total += ns;
    }
    if (total < own_excess[pid]) {
      return false;
    }
    const auto b = behind.find(pid);
    if (b == behind.end() || b->second.empty()) {
      return true;
    }
    const auto top =
        std::max_element(b->second.begin(), b->second.end(),
                         [](const auto &x, const auto &y) { return x.second < y.second; });
    return !c->second.contains(top->first);
  };
  std::unordered_map<std::int64_t, bool> is_root;
  for (auto &v : victims) {
    auto [it, fresh] = is_root.try_emplace(v.w->pid, false);
    if (fresh) {
      it->second = root(v.w->pid);
    }
    if (it->second) {
      v.cls = victim_class::culprit;
    }
  }
  std::stable_sort(victims.begin(), victims.end(), [](const victim_row &x, const victim_row &y) {
    return static_cast<int>(x.cls) < static_cast<int>(y.cls);
  });
}

// --- Stage 3: the evidence of the window and the baseline ------------------------------------

struct evidence {
  std::vector<window_causes> blame; // [0] the window's, [1] the baseline's
  std::vector<inverted_wait> inverted;
  std::unordered_map<std::int64_t, std::vector<const culprit_sum *>> culprits_w;
  std::map<std::pair<std::int64_t, culprit_key>, std::int64_t> wait_b;
  std::map<std::pair<std::int64_t, culprit_key>, const inverted_wait *> inv;
  std::unordered_map<std::int64_t, std::int64_t> mig_w, mig_b;
  std::map<std::string, std::pair<pressure_sum, pressure_sum>> pressures;
  std::unordered_map<std::int64_t, std::vector<waker_sum>> wake_w, wake_b;
  // The processes whose I/O grew most beyond their baseline rate's, most first (schema 20).
  struct io_extra {
    io_sum w;
    std::int64_t expected = 0;
  };
  std::vector<io_extra> io;
};

// The processes by the growth of their I/O in the window over the baseline rate's, those that
// grew only, most first.
std::vector<evidence::io_extra> io_growth(const std::vector<io_sum> &w,
                                          const std::vector<io_sum> &b, long double scale) {
  std::map<std::tuple<std::int64_t, std::string, std::string>, std::int64_t> before;
  for (const auto &x : b) {
    before[{x.pid, x.comm, x.cgroup}] += x.bytes();
  }
  std::vector<evidence::io_extra> out;
  for (const auto &x : w) {
    const auto it = before.find({x.pid, x.comm, x.cgroup});
    const std::int64_t expected =
        it == before.end()
            ? 0
            : static_cast<std::int64_t>(std::llround(static_cast<long double>(it->second) * scale));
    if (x.bytes() > expected) {
      out.push_back({x, expected});
    }
  }
  std::sort(out.begin(), out.end(), [](const auto &a, const auto &c) {
    const std::int64_t ea = a.w.bytes() - a.expected, ec = c.w.bytes() - c.expected;
    return ea != ec ? ea > ec : a.w.pid < c.w.pid;
  });
  return out;
}

// The culprits of the ranked threads only (the others' are never read), from one read of both
// periods; the inversions, migrations, pressure of their cgroups and their wakers.
result<evidence> gather(sqlite3 *db, const victims &vs, const period &window,
                        const period &baseline, const std::vector<victim_row> &victims_ranked,
                        wakers_map wake_w, wakers_map wake_b) {
  evidence e;
  std::unordered_set<std::int64_t> ranked;
  std::set<std::string> cgroups;
  for (const auto &v : victims_ranked) {
    ranked.insert(v.thread_id);
    if (!v.w->cgroup.empty()) {
      cgroups.insert(v.w->cgroup);
    }
  }
  auto blame = causes_of(db, {{vs, window.a, window.b}, {vs, baseline.a, baseline.b}}, true, false,
                         true, &ranked);
  auto inverted = inverted_waits(db, vs, window.a, window.b);
  auto mig_w = migrations_by_thread(db, vs, window);
  auto mig_b = migrations_by_thread(db, vs, baseline);
  auto pressures = pressure_by_cgroup(db, cgroups, window, baseline);
  auto io_w = io_by_process(db, window);
  auto io_b = io_by_process(db, baseline);
  for (const error *err : {blame ? nullptr : &blame.err(), inverted ? nullptr : &inverted.err(),
                           mig_w ? nullptr : &mig_w.err(), mig_b ? nullptr : &mig_b.err(),
                           pressures ? nullptr : &pressures.err(), io_w ? nullptr : &io_w.err(),
                           io_b ? nullptr : &io_b.err()}) {
    if (err != nullptr) {
      return *err;
    }
  }
  e.blame = std::move(*blame);
  e.inverted = std::move(*inverted);
  for (const auto &tc : e.blame[0].by_thread) {
    e.culprits_w[tc.thread_id].push_back(&tc.culprit);
  }
  for (const auto &tc : e.blame[1].by_thread) {
    e.wait_b[{tc.thread_id, key_of(tc.culprit)}] += tc.culprit.wait_ns;
  }
  for (const auto &x : e.inverted) {
    e.inv[{x.thread_id, culprit_key{0, x.culprit_pid, x.comm, x.cgroup}}] = &x;
  }
  e.mig_w = std::move(*mig_w);
  e.mig_b = std::move(*mig_b);
  e.pressures = std::move(*pressures);
  e.wake_w = std::move(wake_w);
  e.wake_b = std::move(wake_b);
  e.io = io_growth(*io_w, *io_b,
                   baseline.recorded_ns > 0 ? static_cast<long double>(window.recorded_ns) /
                                                  static_cast<long double>(baseline.recorded_ns)
                                            : 0.0L);
  return e;
}

// --- Stage 4: the causes of one victim -------------------------------------------------------

// What every cause of one victim is judged with.
struct judge {
  const evidence &e;
  const period &window;
  rate at_baseline_rate;
  double scale = 0.0; // the same as a double (counts)
};

// One victim's extra time behind each thing that can be named: CPU culprits (blame), process
// wakers of its held sleep, and its blocked (D) sleep, each against its baseline rate's.
struct extras {
  struct part {
    std::int64_t extra = 0, expected = 0;
  };
  std::vector<std::pair<const culprit_sum *, part>> cpu;
  std::vector<std::pair<const waker_sum *, part>> held; // process wakers, S and other sleeps
  part blocked;
  // What a share is of: the victim's extra lateness, or the sum of every part's positive extra
  // where that is larger (other parts fell): shares add up to 100 at most.
  std::int64_t denominator = 0;
  [[nodiscard]] double share(std::int64_t extra) const {
    return 100.0 * static_cast<double>(extra) / static_cast<double>(denominator);
  }
};

// Sum of the baseline's wakers of the same process and sleep class (held: not D).
std::int64_t baseline_held(const std::vector<waker_sum> *before, const waker_sum &x) {
  std::int64_t n = 0;
  if (before != nullptr) {
    for (const waker_sum &y : *before) {
      if (y.kind == x.kind && y.pid == x.pid && y.comm == x.comm && y.cgroup == x.cgroup &&
          y.state != 1) {
        n += y.sleep_ns;
      }
    }
  }
  return n;
}

extras extras_of(const victim_row &v, const judge &j) {
  extras x;
  std::int64_t positive = 0;
  if (const auto found = j.e.culprits_w.find(v.thread_id); found != j.e.culprits_w.end()) {
    for (const culprit_sum *c : found->second) {
      auto bi = j.e.wait_b.find({v.thread_id, key_of(*c)});
      const std::int64_t expected = bi != j.e.wait_b.end() ? j.at_baseline_rate(bi->second) : 0;
      x.cpu.push_back({c, {c->wait_ns - expected, expected}});
      positive += std::max<std::int64_t>(0, c->wait_ns - expected);
    }
  }
  if (const auto wi = j.e.wake_w.find(v.thread_id); wi != j.e.wake_w.end()) {
    const auto bi = j.e.wake_b.find(v.thread_id);
    const std::vector<waker_sum> *before = bi != j.e.wake_b.end() ? &bi->second : nullptr;
    // One entry per process: its S and other sleeps of the window together.
    std::map<std::tuple<std::int64_t, std::string, std::string>,
             std::pair<const waker_sum *, std::int64_t>>
        held;
    for (const waker_sum &w : wi->second) {
      if (w.kind != 0 || w.state == 1) {
        continue; // a pseudo-waker (a timer, an interrupt: no one held it up), or D
      }
      auto &h = held[{w.pid.value_or(-1), w.comm, w.cgroup}];
      if (h.first == nullptr) {
        h.first = &w;
      }
      h.second += w.sleep_ns;
    }
    for (const auto &[key, h] : held) {
      const std::int64_t expected = j.at_baseline_rate(baseline_held(before, *h.first));
      x.held.push_back({h.first, {h.second - expected, expected}});
      positive += std::max<std::int64_t>(0, h.second - expected);
    }
  }
  const std::int64_t base_blocked = v.base != nullptr ? v.base->blocked_ns : 0;
  x.blocked.expected = j.at_baseline_rate(base_blocked);
  x.blocked.extra = v.w->blocked_ns - x.blocked.expected;
  positive += std::max<std::int64_t>(0, x.blocked.extra);
  x.denominator = std::max(v.late_excess_ns, positive);
  return x;
}

// CPU culprits: the culprit's wait in the window beyond its baseline rate's, as a share of the
// victim's extra lateness; an inversion where at least half of it was one (inversions()).
void cpu_causes(const victim_row &v, const judge &j, const extras &x,
                std::vector<cause_row> &causes) {
  for (const auto &[c, part] : x.cpu) {
    if (c->kind != 0 || part.extra <= 0) {
      continue; // <idle>, <unknown>, <other>: no culprit to name
    }
    cause_row r;
    r.pid = c->pid;
    r.comm = c->comm;
    r.cgroup = c->cgroup;
    r.share = x.share(part.extra);
    r.measure = static_cast<double>(c->wait_ns);
    r.measure_baseline = static_cast<double>(part.expected);
    const auto ii = c->pid
                        ? j.e.inv.find({v.thread_id, culprit_key{0, *c->pid, c->comm, c->cgroup}})
                        : j.e.inv.end();
    if (ii != j.e.inv.end() && 2 * ii->second->wait_ns >= c->wait_ns) {
      const inverted_wait &w = *ii->second;
      r.kind = "inversion";
      r.summary = fmt::format("{} ({} {}) ran ahead of it at nice {}: {:.0f}% of the extra time",
                              culprit_name(*c), policy_name(w.by_policy),
                              w.by_policy == 6 ? 0 : 99 - w.by_prio, w.prio - 120, *r.share);
    } else {
      r.kind = "cpu";
      r.summary = fmt::format("{} ran while it waited: {:.0f}% of the extra time", culprit_name(*c),
                              *r.share);
    }
    causes.push_back(std::move(r));
  }
}

// Its blocked (D) sleep beyond the baseline rate's, with the processes whose I/O grew most in
// the window (other than its own): the first is the culprit, the device busy with its bytes.
cause_row io_cause(const victim_row &v, const judge &j, const extras &x) {
  cause_row r;
  r.kind = "io";
  r.share = x.share(x.blocked.extra);
  r.measure = static_cast<double>(v.w->blocked_ns);
  r.measure_baseline = static_cast<double>(x.blocked.expected);
  std::string busy;
  int named = 0;
  for (const auto &io : j.e.io) {
    if (io.w.pid != 0 && io.w.pid == v.w->pid) {
      continue; // its own process's I/O is its own wait, not a culprit
    }
    if (named == 0) {
      r.pid = io.w.pid;
      r.comm = io.w.comm;
      r.cgroup = io.w.cgroup;
    }
    busy +=
        fmt::format("{}{} ({} read, {} written; {} at its baseline rate)", named == 0 ? "" : ", ",
                    io.w.pid != 0 ? fmt::format("{}[{}]", io.w.comm, io.w.pid) : io.w.comm,
                    text::format_bytes(io.w.read_bytes), text::format_bytes(io.w.write_bytes),
                    text::format_bytes(io.expected));
    if (++named == 3) {
      break;
    }
  }
  r.summary = fmt::format("blocked {} in D (I/O or a kernel lock; {} at its baseline rate): "
                          "{:.0f}% of the extra time",
                          text::format_duration_ns(r.measure),
                          text::format_duration_ns(r.measure_baseline), *r.share);
  r.summary += busy.empty() ? "; why() shows where"
                            : "; the I/O that grew: " + busy + "; why() shows where it blocked";
  return r;
}

// Sleep: the processes that ended its held sleeps (a lock's holder, the thread it waited for)
// beyond their baseline rate's, and its blocked (D) sleep; shares of its extra lateness. why()
// of the victim follows the waker one hop further, and shows the D sleep's stacks.
void sleep_causes(const victim_row &v, const judge &j, const extras &x,
                  std::vector<cause_row> &causes) {
  for (const auto &[w, part] : x.held) {
    if (part.extra <= 0) {
      continue;
    }
    cause_row r;
    r.kind = "wakeup";
    r.pid = w->pid;
    r.comm = w->comm;
    r.cgroup = w->cgroup;
    r.share = x.share(part.extra);
    r.measure = static_cast<double>(part.extra + part.expected);
    r.measure_baseline = static_cast<double>(part.expected);
    // A thread name of a process (the waker's thread is named in `via`).
    const std::string who =
        w->pid && *w->pid != 0 ? fmt::format("{} (pid {})", w->comm, *w->pid) : w->comm;
    r.summary = fmt::format("slept {} until {} woke it ({} at its baseline rate): {:.0f}% of the "
                            "extra time; why() follows it",
                            text::format_duration_ns(r.measure), who,
                            text::format_duration_ns(r.measure_baseline), *r.share);
    causes.push_back(std::move(r));
  }
  if (x.blocked.extra > 0) {
    causes.push_back(io_cause(v, j, x));
  }
}

// Throttling of its cgroup or an ancestor (an upper bound of its share: throttled time is the
// cgroup's), and PSI "some" of its cgroup, else of the system.
void cgroup_causes(const victim_row &v, const judge &j, std::vector<cause_row> &causes) {
  const thread_stats &t = *v.w;
  if (t.cgroup.empty()) {
    return;
  }
  const auto &[pw, pb] = j.e.pressures.at(t.cgroup);
  if (pw.throttled_ns && *pw.throttled_ns > 0) {
    const std::int64_t expected = pb.throttled_ns && pb.throttled_cgroup == pw.throttled_cgroup
                                      ? j.at_baseline_rate(*pb.throttled_ns)
                                      : 0;
    const std::int64_t extra = *pw.throttled_ns - expected;
    if (extra > 0) {
      cause_row r;
      r.kind = "throttle";
      r.cgroup = pw.throttled_cgroup;
      r.share = std::min(100.0, 100.0 * static_cast<double>(extra) /
                                    static_cast<double>(v.late_excess_ns));
      r.measure = static_cast<double>(*pw.throttled_ns);
      r.measure_baseline = static_cast<double>(expected);
      r.summary = fmt::format("{} was throttled {} ({} at its baseline rate): up to {:.0f}% "
                              "of the extra time",
                              pw.throttled_cgroup, text::format_duration_ns(r.measure),
                              text::format_duration_ns(r.measure_baseline), *r.share);
      causes.push_back(std::move(r));
    }
  }
  const bool own = pw.victim_some_pct.has_value();
  const auto now = own ? pw.victim_some_pct : pw.system_some_pct;
  const auto before = own ? pb.victim_some_pct : pb.system_some_pct;
  if (now && *now - before.value_or(0.0) >= min_pressure_rise_pct) {
    cause_row r;
    r.kind = "pressure";
    r.cgroup = own ? t.cgroup : std::string("/");
    r.in = cause_row::unit::pct;
    r.measure = std::min(*now, 100.0);
    r.measure_baseline = std::min(before.value_or(0.0), 100.0);
    r.order = 2;
    r.summary = fmt::format("CPU pressure {:.0f}% in {} ({:.0f}% before)", r.measure, *r.cgroup,
                            r.measure_baseline);
    causes.push_back(std::move(r));
  }
}

// Migrations against its baseline rate.
void migration_cause(const victim_row &v, const judge &j, std::vector<cause_row> &causes) {
  const auto mi = j.e.mig_w.find(v.thread_id);
  if (mi == j.e.mig_w.end()) {
    return;
  }
  auto bi = j.e.mig_b.find(v.thread_id);
  const double expected = bi != j.e.mig_b.end() ? static_cast<double>(bi->second) * j.scale : 0.0;
  const auto n = static_cast<double>(mi->second);
  if (n >= 2 * expected && n - expected >= min_extra_migrations) {
    cause_row r;
    r.kind = "migration";
    r.in = cause_row::unit::count;
    r.measure = n;
    r.measure_baseline = expected;
    r.order = 1;
    r.summary = fmt::format("migrated {:.0f} times ({:.0f} at its baseline rate)", n, expected);
    causes.push_back(std::move(r));
  }
}

// Every cause of one victim, shares first (by share), then migrations and pressure.
std::vector<cause_row> causes_for(const victim_row &v, const judge &j) {
  std::vector<cause_row> causes;
  const extras x = extras_of(v, j);
  cpu_causes(v, j, x, causes);
  sleep_causes(v, j, x, causes);
  cgroup_causes(v, j, causes);
  migration_cause(v, j, causes);
  std::stable_sort(causes.begin(), causes.end(), [](const cause_row &a, const cause_row &b) {
    if (a.order != b.order) {
      return a.order < b.order;
    }
    return a.share.value_or(0.0) != b.share.value_or(0.0)
               ? a.share.value_or(0.0) > b.share.value_or(0.0)
               : a.measure > b.measure;
  });
  return causes;
}

// --- Stage 5: the rows -----------------------------------------------------------------------

template <typename T> value opt_value(const std::optional<T> &o) {
  value x;
  if (o) {
    x = *o;
  }
  return x;
}

// One victim's rows: one per cause, or one saying nothing was found. The victim's columns
// first, then the cause's, then how the victims and the baseline were chosen.
void emit(rows &out, std::int64_t rank, const victim_row &v, std::vector<cause_row> causes,
          const explain_scope &s, const period &baseline) {
  const thread_stats &t = *v.w;
  const auto victim_part = [&] {
    row r;
    r.reserve(31);
    r.emplace_back(rank);
    r.emplace_back(t.tid);
    r.emplace_back(t.pid);
    r.emplace_back(t.comm);
    r.emplace_back(t.cgroup);
    r.push_back(opt_value(v.base != nullptr ? p99(v.base->hist) : std::nullopt));
    r.push_back(opt_value(p99(t.hist)));
    r.emplace_back(t.wait_ns);
    r.emplace_back(v.expected_ns);
    r.emplace_back(v.excess_ns);
    return r;
  };
  const auto scope_part = [&](row &r) {
    r.emplace_back(std::string(class_name(v.cls)));
    r.emplace_back(s.rule);
    r.emplace_back(baseline.a);
    r.emplace_back(baseline.b);
    r.emplace_back(t.held_ns);
    r.emplace_back(t.blocked_ns);
    r.emplace_back(v.late_excess_ns);
  };
  if (causes.empty()) {
    row r = victim_part();
    for (int i = 0; i < 13; ++i) {
      r.emplace_back();
    }
    r.emplace_back(std::string("no recorded cause"));
    scope_part(r);
    out.push_back(std::move(r));
    return;
  }
  std::int64_t cause_rank = 0;
  for (auto &c : causes) {
    row r = victim_part();
    r.emplace_back(++cause_rank);
    r.emplace_back(c.kind);
    r.push_back(opt_value(c.pid));
    r.push_back(opt_value(c.comm));
    r.push_back(opt_value(c.cgroup));
    r.push_back(opt_value(c.via));
    r.push_back(opt_value(c.share));
    // measure_ns, baseline_ns, measure_pct, baseline_pct, measure_count, baseline_count: the
    // pair of the cause's unit.
    for (const auto u : {cause_row::unit::ns, cause_row::unit::pct, cause_row::unit::count}) {
      if (u == c.in) {
        if (u == cause_row::unit::ns) {
          r.emplace_back(static_cast<std::int64_t>(std::llround(c.measure)));
          r.emplace_back(static_cast<std::int64_t>(std::llround(c.measure_baseline)));
        } else {
          r.emplace_back(c.measure);
          r.emplace_back(c.measure_baseline);
        }
      } else {
        r.emplace_back();
        r.emplace_back();
      }
    }
    r.emplace_back(std::move(c.summary));
    scope_part(r);
    out.push_back(std::move(r));
  }
}

// Whether thread `t` is one of the victims `vs` (it matches every one), as victims_sql() says.
bool in_scope(const victims &vs, const thread_stats &t) {
  return std::all_of(vs.begin(), vs.end(), [&](const victim &v) {
    switch (v.what) {
    case victim::kind::pid:
      return t.pid == v.number;
    case victim::kind::tid:
      return t.tid == v.number;
    default:
      return v.matches(t.comm, t.cgroup);
    }
  });
}

// One pass of explain over a set of threads: their time in the window and the baseline, those
// later than their baseline rate ranked, and the evidence of the ranked ones. Owned whole: the
// ranked rows and the evidence point into its maps.
struct analysis {
  std::unordered_map<std::int64_t, thread_stats> in_window, in_baseline;
  std::vector<victim_row> ranked;
  evidence e;
  rate at_baseline_rate;
};

result<std::unique_ptr<analysis>> analyze(sqlite3 *db, const victims &vs, const period &window,
                                          const period &baseline) {
  auto a = std::make_unique<analysis>();
  if (auto r = delay_by_thread(db, vs, window, a->in_window); !r) {
    return r.err();
  }
  if (auto r = delay_by_thread(db, vs, baseline, a->in_baseline); !r) {
    return r.err();
  }
  wakers_map wake_w, wake_b;
  sleep_reader sleep(db, vs);
  if (auto r = sleep.read(window, a->in_window, wake_w); !r) {
    return r.err();
  }
  if (auto r = sleep.read(baseline, a->in_baseline, wake_b); !r) {
    return r.err();
  }
  // The baseline rate over the window's recorded time; with no recorded baseline, nothing is
  // expected (every wait is extra).
  if (baseline.recorded_ns > 0) {
    a->at_baseline_rate.scale = static_cast<long double>(window.recorded_ns) /
                                static_cast<long double>(baseline.recorded_ns);
  }
  a->ranked = rank_victims(a->in_window, a->in_baseline, a->at_baseline_rate);
  auto e = gather(db, vs, window, baseline, a->ranked, std::move(wake_w), std::move(wake_b));
  if (!e) {
    return e.err();
  }
  a->e = std::move(*e);
  return a;
}

// --- Stage 6: the chain behind a held sleep --------------------------------------------------

// A hop of a chain: the waker of a held sleep (a process and thread name, as the wakeup group
// records it) judged as a victim itself over the same window and baseline: its thread that did
// worst and that thread's first cause, when it explains at least a tenth of its extra lateness.
struct hop {
  std::int64_t tid = 0, pid = 0;
  std::string comm, cgroup;
  std::optional<cause_row> top; // nullopt: it was not held up (by a tenth or more)
};

constexpr double min_hop_share_pct = 10.0;
constexpr int max_hops = 3;

std::string thread_label(const std::string &comm, std::int64_t id) {
  return fmt::format("{}[{}]", comm, id);
}

// Where a chain ends: the culprit of its last hop's cause.
std::string end_label(const cause_row &c) {
  if (c.kind == "throttle") {
    return "throttling of " + c.cgroup.value_or("?");
  }
  if (c.kind == "io") {
    return c.comm ? "I/O \u2190 " + (c.pid && *c.pid > 0 ? thread_label(*c.comm, *c.pid) : *c.comm)
                  : std::string("I/O");
  }
  return c.pid && *c.pid > 0 ? thread_label(c.comm.value_or("?"), *c.pid) : c.comm.value_or("?");
}

// Follows the wakers of held sleeps: each hop's waker is explained as a victim itself, over
// every thread of the window (one more pass over the window and the baseline when explain's
// own was over fewer), up to max_hops, stopping where a hop is not held up by a tenth or more or
// comes back to a thread group of the path.
class chain_follower {
public:
  chain_follower(const period &window, const analysis &every_thread)
      : window_(window), all_(every_thread) {}

  // The wakeup causes of `v` with their path (`via`), the culprit at its end and kind `lock`
  // where the waker was itself held up.
  // Every other cause with a share names its culprit one step from the victim.
  void follow(const victim_row &v, std::vector<cause_row> &causes) {
    for (auto &c : causes) {
      if (c.kind == "wakeup" && c.pid && *c.pid > 0 && c.comm &&
          c.share.value_or(0.0) >= min_hop_share_pct) {
        follow_one(v, c);
      } else if (c.share) {
        c.via = thread_label(v.w->comm, v.w->tid) + " \u2190 " + end_label(c);
      }
    }
  }

private:
  using key = std::pair<std::int64_t, std::string>; // the waker: its pid and thread name

  void follow_one(const victim_row &v, cause_row &c) {
    std::vector<std::string> via{thread_label(v.w->comm, v.w->tid)};
    const key own{v.w->pid, v.w->comm};
    std::set<key> seen{own};
    key k{*c.pid, *c.comm};
    std::string story;
    for (int n = 1;; ++n) {
      // A sleep another thread of its own group ended (a pool handing a lock on) is followed
      // through that thread: the group's worst thread but the victim, its causes beyond the
      // group.
      const bool handoff = n == 1 && k == own;
      const hop *x = hop_of(k, handoff ? v.w->tid : 0);
      via.push_back(x != nullptr ? thread_label(x->comm, x->tid) : thread_label(k.second, k.first));
      // Held up by a waker of the path already (each woke the other): neither is the root.
      bool cycle = false;
      if (x != nullptr && x->top && x->top->kind == "wakeup" && x->top->pid && x->top->comm) {
        const key next{*x->top->pid, *x->top->comm};
        cycle = next == k || seen.contains(next);
      }
      // The path is max_hops long: this waker is named the root, whatever held it up.
      const bool held = x != nullptr && x->top && !cycle && (handoff || !seen.contains(k));
      if (held && n >= max_hops) {
        story += fmt::format("; {} was held up in turn: why() follows it", via.back());
      }
      if (!held || n >= max_hops) {
        if (n > 1) { // a waker further on, not held up itself (or the last named): the root
          c.pid = k.first;
          c.comm = k.second;
          c.cgroup = x != nullptr ? std::optional<std::string>(x->cgroup) : std::nullopt;
        }
        break;
      }
      seen.insert(k);
      const cause_row &t = *x->top;
      c.kind = "lock";
      std::string_view said = t.summary;
      if (constexpr std::string_view follows = "; why() follows it"; said.ends_with(follows)) {
        said.remove_suffix(follows.size());
      }
      story += fmt::format("; {} was held up: {}", via.back(), said);
      if (t.kind == "wakeup" && t.pid && *t.pid > 0 && t.comm) {
        k = {*t.pid, *t.comm};
        continue;
      }
      c.pid = t.pid;
      c.comm = t.comm;
      c.cgroup = t.cgroup;
      via.push_back(end_label(t));
      break;
    }
    std::string path;
    for (const auto &p : via) {
      path += (path.empty() ? "" : " \u2190 ") + p;
    }
    c.via = std::move(path);
    if (!story.empty()) {
      constexpr std::string_view follows = "; why() follows it";
      if (c.summary.ends_with(follows)) {
        c.summary.resize(c.summary.size() - follows.size());
      }
      c.summary += story;
    }
  }

  // The hop of waker `k`: its thread that did worst (by extra lateness; else the latest of its
  // threads in the window) and that one's first cause; nullptr when no thread of it is recorded
  // in the window.
  const hop *hop_of(const key &k, std::int64_t but_tid) {
    const auto memo = std::make_tuple(k.first, k.second, but_tid);
    if (auto it = hops_.find(memo); it != hops_.end()) {
      return it->second ? &*it->second : nullptr;
    }
    const analysis &a = all_;
    const victim_row *worst = nullptr;
    const auto of_k = [&](const thread_stats &t) {
      return t.pid == k.first && t.comm == k.second && t.tid != but_tid;
    };
    for (const auto &v : a.ranked) {
      if (of_k(*v.w) && (worst == nullptr || v.late_excess_ns > worst->late_excess_ns)) {
        worst = &v;
      }
    }
    std::optional<hop> h;
    if (worst != nullptr) {
      h = hop{worst->w->tid, worst->w->pid, worst->w->comm, worst->w->cgroup, std::nullopt};
      const judge j{a.e, window_, a.at_baseline_rate,
                    static_cast<double>(a.at_baseline_rate.scale)};
      for (auto &c : causes_for(*worst, j)) {
        // Sleeps another thread of the group ended are the group's own hand-offs: what held
        // the group up is beyond it.
        const bool within = c.kind == "wakeup" && c.pid == k.first && c.comm == k.second;
        if (c.order == 0 && !within && c.share.value_or(0.0) >= min_hop_share_pct) {
          h->top = std::move(c);
          break;
        }
      }
    } else {
      const thread_stats *latest = nullptr;
      for (const auto &[id, t] : a.in_window) {
        if (of_k(t) && (latest == nullptr || t.late_ns() > latest->late_ns())) {
          latest = &t;
        }
      }
      if (latest != nullptr) {
        h = hop{latest->tid, latest->pid, latest->comm, latest->cgroup, std::nullopt};
      }
    }
    auto &slot = hops_[memo];
    slot = std::move(h);
    return slot ? &*slot : nullptr;
  }

  const period &window_;
  const analysis &all_;
  std::map<std::tuple<std::int64_t, std::string, std::int64_t>, std::optional<hop>> hops_;
};

} // namespace

result<rows> explain_fn(sqlite3 *db, const fn_context &ctx, const args_t &args) {
  auto s = scope_of(db, ctx, args);
  if (!s) {
    return s.err();
  }
  // The window and the baseline before its first interval.
  auto window = period_of(db, s->a, s->b);
  if (!window) {
    return window.err();
  }
  std::int64_t first = s->a;
  if (auto ivs = intervals_in(db, s->a, s->b); ivs && !ivs->empty()) {
    first = ivs->front().start;
  }
  auto baseline = baseline_of(db, *s, first);
  if (!baseline) {
    return baseline.err();
  }
  // Every thread is judged (the chains behind the victims' sleeps lead to others), once; the
  // victims are those of the scope among them.
  auto a = analyze(db, {}, *window, *baseline);
  if (!a) {
    return a.err();
  }
  const analysis &an = **a;
  std::vector<victim_row> ranked = an.ranked; // the victims' (the chains read every thread's)
  if (!s->vs.empty()) {
    const bool any = std::any_of(an.in_window.begin(), an.in_window.end(),
                                 [&](const auto &t) { return in_scope(s->vs, t.second); });
    if (s->service && !any) {
      // The service names no thread in the window: every thread, and the rule says so.
      s->rule += ": no thread of it in the window; every thread";
      s->vs.clear();
    } else {
      std::erase_if(ranked, [&](const victim_row &v) { return !in_scope(s->vs, *v.w); });
    }
  }
  classify(ranked, an.e.blame[0]);
  const judge j{an.e, *window, an.at_baseline_rate, static_cast<double>(an.at_baseline_rate.scale)};
  chain_follower chains(*window, an);
  rows out;
  std::int64_t rank = 0;
  for (const auto &v : ranked) {
    auto causes = causes_for(v, j);
    chains.follow(v, causes);
    emit(out, ++rank, v, std::move(causes), *s, *baseline);
  }
  return out;
}

} // namespace rsched::query::detail
