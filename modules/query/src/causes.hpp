#pragma once
// The causes engine: what the kernel recorded against a set of victim threads over a window
// (the culprits of their scheduling delay, priority inversions, throttling and pressure), read
// once for many windows. blame(), inversions(), spikes(), explain() and why() stand on it.
#include "victims.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace rsched::query::detail {

// One culprit of a window's blame.
struct culprit_sum {
  int kind = 0; // 0 process, 1 <idle>, 2 <unknown>, 3 <other>
  std::optional<std::int64_t> pid;
  std::string comm;
  std::string cgroup;
  std::int64_t wait_ns = 0;
  std::int64_t waits = 0;
  std::int64_t preempts = 0;
  // Schema v11: the part of wait_ns estimated; nullopt when every row was written before.
  std::optional<std::int64_t> approx_ns;
};

// The victims' blame in intervals overlapping [a, b), culprits by wait (then preemptions),
// descending. An empty list where the database has no blame tables (schema < 5).
result<std::vector<culprit_sum>> blame_of(sqlite3 *db, const victims &v, std::int64_t a,
                                          std::int64_t b);

// The same per victim thread (thread.id), unsorted: explain() ranks each thread's culprits.
struct thread_culprit {
  std::int64_t thread_id = 0;
  culprit_sum culprit;
};
result<std::vector<thread_culprit>> blame_by_thread(sqlite3 *db, const victims &v, std::int64_t a,
                                                    std::int64_t b);

// The victims' waits in raw intervals overlapping [a, b) behind a culprit process that were
// priority inversions (store::priority_inversion, the rule of inversions()), per victim thread
// (thread.id) and culprit (pid, comm, cgroup), with the latest such row's scheduling. Empty
// where the blame rows keep no priorities (schema < 9).
struct inverted_wait {
  std::int64_t thread_id = 0;
  std::int64_t culprit_pid = 0;
  std::string comm;
  std::string cgroup;
  std::int64_t wait_ns = 0;
  int policy = 0, prio = 0, by_policy = 0, by_prio = 0;
};
result<std::vector<inverted_wait>> inverted_waits(sqlite3 *db, const victims &v, std::int64_t a,
                                                  std::int64_t b);

// Whether `table` (thread_blame or cgroup_cpu, keyed by interval_id first) has rows in the
// intervals overlapping [a, b): spikes() asks once for its whole window instead of running
// blame_of and pressure_of for each of (possibly thousands of) spikes over nothing.
bool recorded_in(sqlite3 *db, const char *table, std::int64_t a, std::int64_t b);

// The wall-clock time a cgroup was throttled in an interval of `dur` ns at most, from the
// kernel's throttled time summed over runqueues and the interval's (periods, throttled) counts
// (nullopt where not recorded): min(thr_ns, dur, dur * throttled / periods).
std::int64_t throttled_wall_ns(std::int64_t thr_ns, std::int64_t dur,
                               std::optional<std::pair<std::int64_t, std::int64_t>> periods);

// What the kernel said about the victims' cgroups and the system in [a, b): the most-throttled
// cgroup among the victims' cgroups and their ancestors (below the root), the highest PSI
// "some" share among the victims' cgroups, and the system's PSI "some" share. Empty where not
// recorded.
struct pressure_sum {
  std::optional<std::int64_t> throttled_ns;
  std::string throttled_cgroup;
  std::optional<double> victim_some_pct;
  std::optional<double> system_some_pct;
};
result<pressure_sum> pressure_of(sqlite3 *db, const victims &v, std::int64_t a, std::int64_t b);

// blame_of and pressure_of of many windows at once (spikes(): every incident's cause; explain():
// every victim cgroup's pressure): the same answers, from one read of the blame, sched_delay
// and cgroup_cpu rows of the intervals overlapping any of the windows instead of one read per
// window (an hour's incidents overlap, and each re-read every row of its window). `blame` or
// `pressure` false leaves that part empty; `per_thread` gives blame_by_thread's rows instead of
// blame_of's.
struct window_query {
  victims who;
  std::int64_t a = 0, b = 0;
  // The victims' cgroups when the caller knows them (explain(): the pressure of one cgroup in a
  // window and its baseline): the pressure part takes them instead of reading which cgroups
  // the victims' threads with samples in the window were in.
  std::optional<std::vector<std::string>> cgroups = std::nullopt;
};
struct window_causes {
  std::vector<culprit_sum> culprits;     // blame_of(who, a, b)
  std::vector<thread_culprit> by_thread; // per_thread: blame_by_thread(who, a, b)
  pressure_sum pressure;                 // pressure_of(who, a, b)
};
// With an inversion_sink: window 0's priority inversions (inverted_waits(qs[0].who, qs[0].a,
// qs[0].b), of the threads in `only` when given) from the same read of the blame packs, not a
// second one. `complete` false when an interval of window 0 had blame rows but no pack (raw rows
// written before schema 13, rollups): then only inverted_waits has the answer.
struct inversion_sink {
  std::vector<inverted_wait> waits;
  bool complete = true;
};
// `only`, when given: the blame rows of other threads (thread.id) are left out, as if they were
// no window's victims (explain() needs the culprits of the threads it ranks, not of every
// thread it read); the pressure part is not narrowed.
result<std::vector<window_causes>> causes_of(sqlite3 *db, const std::vector<window_query> &qs,
                                             bool blame, bool pressure, bool per_thread = false,
                                             const std::unordered_set<std::int64_t> *only = nullptr,
                                             inversion_sink *inversions = nullptr);

} // namespace rsched::query::detail
