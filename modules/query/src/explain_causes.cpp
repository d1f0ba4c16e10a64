// explain()'s stage 4 (explain_stages.hpp): the causes of one victim, each the share of its
// extra lateness it explains (CPU culprits and inversions, the wakers of its held sleep, its
// blocked sleep and the I/O that grew, its cgroup's throttling) or evidence that stands out
// (migrations, pressure).
#include "rsched/base/text.hpp"

#include "explain_stages.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace rsched::query::detail {

namespace {

// Evidence that is not a share of the wait (migrations, pressure) is reported when it stands out:
// migrations at least twice the baseline rate's and at least this many more; PSI "some" at least
// this many percentage points above the baseline's.
constexpr double min_extra_migrations = 10.0;
constexpr double min_pressure_rise_pct = 10.0;

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

} // namespace

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

} // namespace rsched::query::detail
