#pragma once
// The interval assembly: adds up the per-tick deltas of one recording interval and turns them
// into the store's rows. Ticks are 1 s when the migration group or generic perf events are on
// (their per-second rate metrics need one sample per second, as upstream), else one tick is the
// whole interval. Pure: no kernel, no SQL; the cgroup resolver is a function the caller gives.
#include "rsched/collect/snapshot.hpp"
#include "rsched/store/records.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace rsched::record {

// One row of an interval: a thread under one attribution (comm, cgroup). A thread renamed or
// moved within the interval has a row for each attribution its samples happened under.
struct attr_key {
  collect::thread_key key;
  std::uint64_t cgroup_id = 0;
  std::string comm;
  friend auto operator<=>(const attr_key &, const attr_key &) = default;
};

struct acc_thread {
  // Counters summed over the ticks; its per-second metrics (registry origin per_second) are
  // filled here, one sample per per-second tick.
  collect::thread_sample s;
  std::vector<stats::histogram> event_rates; // log2, one per generic event
  // Blame over the ticks, per culprit (s.c.blame is not used here): to_row keeps the
  // store::max_culprits with the most wait and sums the rest into <other>.
  // Per culprit also where and how it was last scheduled while the thread waited (priority
  // inversion; prio unknown until seen).
  struct culprit_acc {
    collect::blame_counts n;
    std::uint16_t cpu = 0;
    collect::sched_prio prio;
    culprit_acc &operator+=(const culprit_acc &o) {
      n += o.n;
      if (o.prio.known()) { // the later one's
        cpu = o.cpu;
        prio = o.prio;
      }
      return *this;
    }
  };
  // One entry per culprit, in the order first seen (a thread has a few; a vector searched
  // linearly instead of a map allocated per thread and interval).
  std::vector<std::pair<collect::culprit, culprit_acc>> culprits;
  collect::blame_counts idle, unknown, other;
  collect::sched_prio waiter; // the thread at its latest switch-in after a wait
  culprit_acc &culprit(const collect::culprit &who) {
    for (auto &[w, c] : culprits) {
      if (w == who) {
        return c;
      }
    }
    return culprits.emplace_back(who, culprit_acc{}).second;
  }
};

class interval_acc {
public:
  explicit interval_acc(std::size_t generic_events = 0) : events_(generic_events) {}

  // Adds one tick. With `per_second`, the tick's tallies also become one sample each of the
  // per-second metrics, and generic-event counts of their rate histograms (only when > 0, as
  // upstream: a second without a migration is no sample).
  void add_tick(const collect::interval_delta &d, bool per_second);
  // The same, taking the tick's samples over instead of copying them.
  void add_tick(collect::interval_delta &&d, bool per_second);

  struct entry {
    attr_key key;
    acc_thread a;
  };
  // One entry per thread and attribution, in the order first seen.
  [[nodiscard]] const std::vector<entry> &threads() const { return rows_; }
  // For to_row(interval_acc &&), which moves the values out.
  std::vector<entry> &threads() { return rows_; }
  [[nodiscard]] const std::map<std::uint32_t, collect::cpu_sample> &cpus() const { return cpus_; }
  [[nodiscard]] const collect::drop_counters &drops() const { return drops_; }
  [[nodiscard]] std::size_t events() const { return events_; }
  // The kernel stacks the ticks named (wakeup group), kept for the run: ids are the run's.
  [[nodiscard]] const collect::kernel_stacks &stacks() const { return stacks_; }

  // Forgets the interval; the memory of its rows and index is kept for the next one (a busy
  // machine has the same ten thousand threads every second).
  void clear() {
    rows_.clear();
    std::fill(index_.begin(), index_.end(), empty_slot);
    cpus_.clear();
    drops_ = {};
  }

private:
  // rows_ position of `k`, or of a new entry for it (open addressing over index_: no node
  // allocated per thread and interval).
  std::size_t find_or_add(attr_key &&k);
  void rehash(std::size_t slots);
  static constexpr std::uint32_t empty_slot = 0xFFFFFFFFU;
  std::size_t events_;
  std::vector<entry> rows_;
  std::vector<std::uint32_t> index_; // rows_ positions by hash; a power of two, at most half full
  std::map<std::uint32_t, collect::cpu_sample> cpus_;
  collect::drop_counters drops_{};
  collect::kernel_stacks stacks_;
};

// What the run records beyond the metrics' own groups.
struct row_options {
  bool ipc = false;       // perf=ipc: the four IPC counters are valid
  bool migration = false; // the migration group: its per-second metrics are written
  int dies = 1;           // the machine's dies and NUMA nodes: a per-second metric that needs
  int numa_nodes = 1;     // more than one (registry `need`) is written only then
};

// The store's rows for one interval. `cgroup_path` maps a cgroup id to its path. Two
// attributions of one thread whose cgroup ids resolve to the same path (ids no longer
// resolvable, a cgroup re-created under its old name) and comm are one row (the store's key).
store::interval_row to_row(const interval_acc &acc,
                           const std::function<std::string(std::uint64_t)> &cgroup_path,
                           const row_options &o);
// The same, moving the threads' values out of `acc` (left cleared): no copy of every
// thread's histograms at the end of each interval.
store::interval_row to_row(interval_acc &&acc,
                           const std::function<std::string(std::uint64_t)> &cgroup_path,
                           const row_options &o);

} // namespace rsched::record
