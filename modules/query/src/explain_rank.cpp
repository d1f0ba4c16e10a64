// explain()'s stages 2 and 3 (explain_stages.hpp): the threads that did worst against their own
// baseline, ranked and classed, and the evidence of the window and the baseline for the ranked.
#include "explain_stages.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace rsched::query::detail {

// --- Stage 2: the victims, ranked ------------------------------------------------------------

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

void classify(std::vector<victim_row> &ranked, const window_causes &blame_w) {
  std::unordered_map<std::int64_t, std::int64_t> pid_of, own_excess;
  std::map<std::int64_t, std::map<std::int64_t, std::int64_t>> caused; // culprit -> victim pid
  std::map<std::int64_t, std::map<std::int64_t, std::int64_t>> behind; // victim -> culprit pid
  for (const auto &v : ranked) {
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
  for (auto &v : ranked) {
    auto [it, fresh] = is_root.try_emplace(v.w->pid, false);
    if (fresh) {
      it->second = root(v.w->pid);
    }
    if (it->second) {
      v.cls = victim_class::culprit;
    }
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const victim_row &x, const victim_row &y) {
    return static_cast<int>(x.cls) < static_cast<int>(y.cls);
  });
}

// --- Stage 3: the evidence of the window and the baseline ------------------------------------

namespace {

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

} // namespace

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
  // The window's priority inversions from the same read of its packs (inverted_waits reads
  // them again only where some interval of the window has no pack).
  inversion_sink inv;
  auto blame = causes_of(db, {{vs, window.a, window.b}, {vs, baseline.a, baseline.b}}, true, false,
                         true, &ranked, &inv);
  auto inverted = blame && !inv.complete ? inverted_waits(db, vs, window.a, window.b)
                                         : result<std::vector<inverted_wait>>(std::move(inv.waits));
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

} // namespace rsched::query::detail
