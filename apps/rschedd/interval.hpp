#pragma once
// Adds up the per-tick deltas of one recording interval. Ticks are 1 s when the migration group
// or generic perf events are on (their per-second rate histograms need one sample per second,
// as upstream), else one tick is the whole interval. Pure: no kernel, no SQL.
#include "rsched/collect/delta.hpp"
#include "rsched/store/records.hpp"

#include "model.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace rsched::rschedd {

// One row of an interval: a thread under one attribution (comm, cgroup). A thread renamed or
// moved within the interval has a row for each attribution its samples happened under.
struct attr_key {
  collect::thread_key key;
  std::uint64_t cgroup_id = 0;
  std::string comm;
  friend auto operator<=>(const attr_key &, const attr_key &) = default;
};

struct acc_thread {
  collect::thread_sample s; // counters summed over the ticks
  stats::histogram mig_rate{stats::layout::count, {}};
  stats::histogram ccx_rate{stats::layout::count, {}};
  stats::histogram numa_rate{stats::layout::count, {}};
  std::vector<stats::histogram> event_rates; // log2, one per generic event
};

class interval_acc {
public:
  explicit interval_acc(std::size_t generic_events = 0) : events_(generic_events) {}

  // Adds one tick. With `per_second`, the tick's migration and generic-event counts also become
  // one sample each of the per-second rate histograms (only when > 0, as upstream).
  void add_tick(const collect::interval_delta &d, bool per_second) {
    for (const auto &t : d.threads) {
      auto [it, fresh] = threads_.try_emplace(attr_key{t.key, t.cgroup_id, t.comm});
      acc_thread &a = it->second;
      if (fresh) {
        a.s = t;
        a.event_rates.assign(events_, stats::histogram{stats::layout::log2, {}});
      } else {
        collect::accumulate(a.s.c, t.c);
        a.s.tgid = t.tgid;
        a.s.dead = a.s.dead || t.dead;
      }
      if (!per_second) {
        continue;
      }
      if (t.c.migrations.count > 0) {
        a.mig_rate.add(t.c.migrations.count);
        a.ccx_rate.add(t.c.migrations.cross_ccx);
        a.numa_rate.add(t.c.migrations.cross_numa);
      }
      for (std::size_t e = 0; e < events_; ++e) {
        const auto v = t.c.counters[RSCHED_CTR_GENERIC0 + e];
        if (v > 0) {
          a.event_rates[e].add(v);
        }
      }
    }
    for (const auto &c : d.cpus) {
      auto [it, fresh] = cpus_.try_emplace(c.cpu, c);
      if (!fresh) {
        collect::accumulate(it->second.delay, c.delay);
        collect::accumulate(it->second.idle, c.idle);
      }
    }
    for (std::size_t i = 0; i < drops_.size(); ++i) {
      drops_[i] += d.drops[i];
    }
  }

  [[nodiscard]] const std::map<attr_key, acc_thread> &threads() const { return threads_; }
  [[nodiscard]] const std::map<std::uint32_t, collect::cpu_sample> &cpus() const { return cpus_; }
  [[nodiscard]] const collect::drop_counters &drops() const { return drops_; }
  [[nodiscard]] std::size_t events() const { return events_; }

  void clear() {
    threads_.clear();
    cpus_.clear();
    drops_ = {};
  }

private:
  std::size_t events_;
  std::map<attr_key, acc_thread> threads_;
  std::map<std::uint32_t, collect::cpu_sample> cpus_;
  collect::drop_counters drops_{};
};

inline store::hist_value to_value(const collect::delay_counters &d) {
  return {d.count, d.total_ns, d.hist};
}

// into += a: the counters and rate histograms of two rows of one thread.
inline void merge_into(acc_thread &into, const acc_thread &a) {
  collect::accumulate(into.s.c, a.s.c);
  into.s.dead = into.s.dead || a.s.dead;
  (void)stats::merge_into(into.mig_rate, a.mig_rate);
  (void)stats::merge_into(into.ccx_rate, a.ccx_rate);
  (void)stats::merge_into(into.numa_rate, a.numa_rate);
  for (std::size_t e = 0; e < into.event_rates.size() && e < a.event_rates.size(); ++e) {
    (void)stats::merge_into(into.event_rates[e], a.event_rates[e]);
  }
}

// The store row of thread `key` under one attribution (`a`, its cgroup `path`).
inline void add_thread_row(store::interval_row &row, const collect::thread_key &key,
                           const acc_thread &a, const std::string &path, bool ipc, bool migration,
                           bool cross_ccx, bool cross_numa, std::size_t events) {
  const auto &c = a.s.c;
  store::thread_row &r = row.threads.emplace_back();
  r.tid = key.tid;
  r.pid = a.s.tgid;
  r.start_time_ns = key.start_time;
  r.comm = a.s.comm;
  r.cgroup = path;
  r.delay_count = c.delay.count;
  r.delay_total_ns = c.delay.total_ns;
  r.delay_hist = c.delay.hist;
  r.depth_count = c.depth.count;
  r.depth_total = c.depth.total;
  r.depth_hist = c.depth.hist;
  r.slice_vol = to_value(c.slice_vol);
  r.slice_invol = to_value(c.slice_invol);
  r.sleep = to_value(c.sleep);
  r.waking = to_value(c.waking);
  r.migrations = c.migrations.count;
  r.cross_ccx = c.migrations.cross_ccx;
  r.cross_numa = c.migrations.cross_numa;
  if (migration) {
    r.migration_rate = {a.mig_rate.total(), c.migrations.count, a.mig_rate};
    // Only where the topology can classify them (upstream shows these sections under the
    // same conditions): on one die / one node they would be all-zero samples.
    if (cross_ccx) {
      r.cross_ccx_rate = {a.ccx_rate.total(), c.migrations.cross_ccx, a.ccx_rate};
    }
    if (cross_numa) {
      r.cross_numa_rate = {a.numa_rate.total(), c.migrations.cross_numa, a.numa_rate};
    }
  }
  if (ipc) {
    r.user_cycles = c.counters[RSCHED_CTR_USER_CYCLES];
    r.kernel_cycles = c.counters[RSCHED_CTR_KERNEL_CYCLES];
    r.user_instructions = c.counters[RSCHED_CTR_USER_INSTRUCTIONS];
    r.kernel_instructions = c.counters[RSCHED_CTR_KERNEL_INSTRUCTIONS];
    r.has_ipc = r.user_cycles + r.kernel_cycles + r.user_instructions + r.kernel_instructions != 0;
  }
  for (std::size_t e = 0; e < events; ++e) {
    const auto v = c.counters[RSCHED_CTR_GENERIC0 + e];
    if (v != 0) {
      r.events.emplace_back(static_cast<std::uint32_t>(e), v);
      if (!a.event_rates[e].empty()) {
        r.event_rates.emplace_back(static_cast<std::uint32_t>(e), a.event_rates[e]);
      }
    }
  }
}

// The store's rows for one interval. `cgroup_path` maps a cgroup id to its path.
inline store::interval_row to_row(const interval_acc &acc,
                                  const std::function<std::string(std::uint64_t)> &cgroup_path,
                                  bool ipc, bool migration, bool cross_ccx = true,
                                  bool cross_numa = true) {
  store::interval_row row;
  row.drops = acc.drops();
  row.threads.reserve(acc.threads().size());
  // A row per thread, comm and cgroup path: two attributions of one thread whose cgroup ids
  // resolve to the same path (ids no longer resolvable, a cgroup re-created under its old name)
  // are merged. Rows of one thread are adjacent in the accumulator's order; only a merge copies.
  struct pending {
    std::string path;
    const acc_thread *a;
  };
  std::vector<pending> one_thread;
  std::deque<acc_thread> copies; // merged rows
  const auto flush = [&](const collect::thread_key &key) {
    for (const auto &p : one_thread) {
      add_thread_row(row, key, *p.a, p.path, ipc, migration, cross_ccx, cross_numa, acc.events());
    }
    one_thread.clear();
    copies.clear();
  };
  const collect::thread_key *current = nullptr;
  for (const auto &[key, a] : acc.threads()) {
    if (current != nullptr && !(*current == key.key)) {
      flush(*current);
    }
    current = &key.key;
    std::string path = cgroup_path(a.s.cgroup_id);
    auto same = std::find_if(one_thread.begin(), one_thread.end(), [&](const pending &p) {
      return p.path == path && p.a->s.comm == a.s.comm;
    });
    if (same == one_thread.end()) {
      one_thread.push_back({std::move(path), &a});
    } else {
      acc_thread &m = copies.emplace_back(*same->a);
      merge_into(m, a);
      same->a = &m;
    }
  }
  if (current != nullptr) {
    flush(*current);
  }
  for (const auto &[cpu, c] : acc.cpus()) {
    store::cpu_row r;
    r.cpu = cpu;
    r.delay_count = c.delay.count;
    r.delay_total_ns = c.delay.total_ns;
    r.delay_hist = c.delay.hist;
    r.idle = to_value(c.idle);
    row.cpus.push_back(std::move(r));
  }
  return row;
}

// Folds one recorded interval into the live model (cumulative histograms; per-interval IPC and
// events). The display works from the rows as written, so it needs nothing of the recorder's
// state (the cgroup resolver, the accumulator) and can run on its own thread. `seq` numbers the
// intervals (for bound_threads).
inline void fold_row(model &m, const store::interval_row &row, bool ipc,
                     const std::vector<std::string> &event_names, std::uint64_t seq) {
  m.ipc.clear();
  m.events.clear();
  for (const auto &name : event_names) {
    m.events.push_back({name, {}});
  }
  for (const auto &r : row.threads) {
    thread_stats &t = m.threads[{r.tid, r.start_time_ns}];
    t.tid = r.tid;
    t.tgid = r.pid;
    t.comm = r.comm;
    t.cgroup = r.cgroup;
    t.last_seen = seq;
    (void)stats::merge_into(t.delay, r.delay_hist);
    (void)stats::merge_into(t.depth, r.depth_hist);
    (void)stats::merge_into(t.slice_vol, r.slice_vol.hist);
    (void)stats::merge_into(t.slice_invol, r.slice_invol.hist);
    (void)stats::merge_into(t.sleep, r.sleep.hist);
    (void)stats::merge_into(t.waking, r.waking.hist);
    (void)stats::merge_into(t.mig_rate, r.migration_rate.hist);
    (void)stats::merge_into(t.ccx_rate, r.cross_ccx_rate.hist);
    (void)stats::merge_into(t.numa_rate, r.cross_numa_rate.hist);
    if (ipc && r.has_ipc) {
      m.ipc.push_back({r.tid, r.pid, r.comm, r.cgroup, r.user_cycles, r.kernel_cycles,
                       r.user_instructions, r.kernel_instructions});
    }
    for (const auto &[e, h] : r.event_rates) {
      if (e < m.events.size() && !h.empty()) {
        m.events[e].threads.push_back({r.tid, r.pid, r.comm, r.cgroup, h});
      }
    }
  }
  for (const auto &c : row.cpus) {
    cpu_stats &s = m.cpus[c.cpu];
    s.cpu = c.cpu;
    (void)stats::merge_into(s.delay, c.delay_hist);
    (void)stats::merge_into(s.idle, c.idle.hist);
  }
}

// Keeps the cumulative tables to at most `max_threads` threads whatever the thread churn: past
// it, the threads seen longest ago (exited ones first, in practice) leave the tables, down to
// 90 % of the bound so that this runs rarely. Counted in m.evicted_threads (shown).
inline void bound_threads(model &m, std::size_t max_threads) {
  if (m.threads.size() <= max_threads) {
    return;
  }
  const std::size_t keep = max_threads - max_threads / 10;
  std::vector<std::pair<std::uint64_t, thread_id>> age;
  age.reserve(m.threads.size());
  for (const auto &[id, t] : m.threads) {
    age.emplace_back(t.last_seen, id);
  }
  const auto cut = age.begin() + static_cast<std::ptrdiff_t>(age.size() - keep);
  std::nth_element(age.begin(), cut, age.end());
  for (auto it = age.begin(); it != cut; ++it) {
    m.threads.erase(it->second);
  }
  m.evicted_threads += static_cast<std::uint64_t>(cut - age.begin());
}

} // namespace rsched::rschedd
