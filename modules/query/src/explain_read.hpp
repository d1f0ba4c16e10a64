#pragma once
// explain()'s and why()'s reads of a period: each victim thread's lateness (scheduling delay,
// held and blocked sleep) with its histogram, its wakers, migrations, every process's I/O and
// each victim cgroup's pressure, each read once per period (explain() reads two: the window and
// its baseline).
#include "rsched/stats/histogram.hpp"

#include "causes.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace rsched::query::detail {

// A thread's lateness in a period: runnable (its scheduling delay), held (asleep in S or another
// state until a process woke it: a lock, a queue, an answer) and blocked (asleep in D: I/O, a
// kernel lock), the last two from the wakeup group (0 where it was not recorded).
struct thread_stats {
  std::int64_t tid = 0, pid = 0;
  std::string comm, cgroup;
  std::int64_t wait_ns = 0;
  std::int64_t held_ns = 0;
  std::int64_t blocked_ns = 0;
  bool any = false; // a row of the thread in the period (a delay or a sleep)
  std::optional<stats::histogram> hist;
  [[nodiscard]] std::int64_t late_ns() const { return wait_ns + held_ns + blocked_ns; }
};

struct period {
  std::int64_t a = 0, b = 0;
  std::int64_t recorded_ns = 0; // the summed length of the intervals overlapping [a, b)
};

// The period [a, b) with the length of its recorded intervals.
result<period> period_of(sqlite3 *db, std::int64_t a, std::int64_t b);

using thread_stats_map = std::unordered_map<std::int64_t, thread_stats>; // by thread.id

// sched_delay (metric 1) per thread (thread.id) of the victims in the intervals overlapping the
// period: its summed wait and merged histogram.
result<void> delay_by_thread(sqlite3 *db, const victims &vs, const period &p,
                             thread_stats_map &out);

// Migrations per thread (thread.id) of the victims in the period; empty where not recorded.
result<std::unordered_map<std::int64_t, std::int64_t>>
migrations_by_thread(sqlite3 *db, const victims &vs, const period &p);

// One process's I/O in a period (thread_io, schema 20): bytes read from storage and of page
// cache dirtied or written, by the kernel's per-task accounting.
struct io_sum {
  std::int64_t pid = 0; // 0 on rollups (a comm's threads)
  std::string comm, cgroup;
  std::int64_t read_bytes = 0, write_bytes = 0;
  [[nodiscard]] std::int64_t bytes() const { return read_bytes + write_bytes; }
};

// Every process's (pid, comm, cgroup) I/O in a period; none before schema 20.
result<std::vector<io_sum>> io_by_process(sqlite3 *db, const period &p);

// One waker of one thread (wakeup group, schema v15): culprit.kind (0 process, 1 <idle>,
// 3 <other>, 4-6 <hardirq>/<softirq>/<timer>), pid (NULL on rollups, 0 for <idle>), comm,
// cgroup, and the sleep of the thread it ended in the period.
struct waker_sum {
  int kind = 0;
  std::optional<std::int64_t> pid;
  std::string comm, cgroup;
  int state = 0; // the sleeps' state: 0 S, 1 D, 2 other
  std::int64_t sleep_ns = 0;
};

using wakers_map = std::unordered_map<std::int64_t, std::vector<waker_sum>>;

// The victims' sleep in a period, read once: per thread its held and blocked parts and per
// waker and state its sleep. The raw tier's packs (schema 18) are decoded here, not through the
// thread_wakeup virtual table (an hour of 200 threads is ~1.8 M rows: 1.6 s through it, twice
// per period); rollups and older raw rows come from thread_wakeup_row, and a file before schema
// 18 is read through its table in SQL. Each thread's identity and whether it is a victim, and
// each waker's culprit row, are looked up once.
class sleep_reader {
public:
  sleep_reader(sqlite3 *db, const victims &vs);
  sleep_reader(const sleep_reader &) = delete;
  sleep_reader &operator=(const sleep_reader &) = delete;
  ~sleep_reader();
  // The victims' held and blocked sleep in `p` into `stats` (a victim without a delay row is
  // added), their wakers into `wakers`.
  result<void> read(const period &p, thread_stats_map &stats, wakers_map &wakers);

private:
  class impl;
  std::unique_ptr<impl> impl_;
};

// The pressure of each victim cgroup (pressure_of of the cgroup alone) in the window and in the
// baseline, all from one read of the two periods' rows (not two reads per cgroup).
result<std::map<std::string, std::pair<pressure_sum, pressure_sum>>>
pressure_by_cgroup(sqlite3 *db, const std::set<std::string> &cgroups, const period &window,
                   const period &baseline);

} // namespace rsched::query::detail
