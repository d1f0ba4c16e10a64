#pragma once
// Plain records the daemon hands to the store, one interval at a time.
#include "rsched/abi/sched_abi.h"
#include "rsched/metrics/registry.hpp"
#include "rsched/stats/histogram.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace rsched::store {

inline constexpr int schema_version = 22;
inline constexpr const char *default_db_path = "/var/lib/rsched/rsched.db";

// A histogram-valued metric's value; its id in thread_hist.metric / cpu_hist.metric is the
// registry's db_id (rsched/metrics/registry.hpp), which also names it in table `metric`.
using hist_value = metrics::value;

// Blame group: what a culprit did to a thread in one interval. A culprit is a process under
// the comm and cgroup it ran as, or a pseudo-culprit.
enum class culprit_kind : std::uint8_t {
  process = 0, // pid, comm and cgroup say which
  idle = 1,    // <idle>: nothing else ran (leaving idle, the wakeup path)
  unknown = 2, // <unknown>: not attributable (see docs/SCHEMA.md)
  other = 3,   // <other>: culprits past the bound (max_culprits)
};

// The processes kept per waiting thread and interval, by wait (then preemptions); the rest is
// summed per comm and cgroup (pid 0: the comm's other processes), the max_culprit_groups with
// the most wait kept, and what is left into <other>.
inline constexpr std::size_t max_culprits = 8;
inline constexpr std::size_t max_culprit_groups = 8;

struct blame_row {
  culprit_kind kind = culprit_kind::process;
  std::uint32_t pid = 0;      // process (tgid) of a culprit of kind process
  std::string comm;           // what it ran as (exact kernel bytes); ignored for pseudo-culprits
  std::string cgroup;         // cgroup v2 path it ran in, "" unknown
  std::uint64_t wait_ns = 0;  // it ran this long on the CPU while the thread waited there
  std::uint64_t waits = 0;    // scheduling delays of the thread it had a part in
  std::uint64_t preempts = 0; // involuntary switches of the thread in which it took the CPU
  // Schema v11: the part of wait_ns estimated (a share of a CPU's coarse epoch of runners, in
  // proportion to what ran there): its true value lies within approx_ns of wait_ns's.
  std::uint64_t approx_ns = 0;
  // Schema v9 (priority inversion), process culprits only; -1 unknown (NULL in the database).
  // The culprit as it last ran while the thread waited (or took the CPU from it): the CPU and
  // its scheduling policy (SCHED_NORMAL 0, FIFO 1, RR 2, BATCH 3, IDLE 5, DEADLINE 6, EXT 7) and
  // kernel priority (task->prio: 0-99 real-time, 99 - rt_priority; 100-139 for nice -20..19).
  int cpu = -1;
  int policy = -1;
  int prio = -1;
  // The waiting thread as it was scheduled at its latest switch-in after a wait.
  int waiter_policy = -1;
  int waiter_prio = -1;
};

// Wakeup group (schema v15): who ended a thread's sleeps in one interval. A waker is a process
// under the comm and cgroup it had at sched_waking, or a pseudo-waker (the `culprit` table holds
// both, kinds 0, 1 <idle>, 3 <other>, 4 <hardirq>, 5 <softirq>, 6 <timer>).
enum class waker_kind : std::uint8_t {
  process = 0,
  hardirq = 1, // a hard interrupt handler
  softirq = 2, // a softirq (the timer wheel's expiry included)
  timer = 3,   // an hrtimer callback
  idle = 4,    // the idle task outside those contexts
  other = 5,   // <other>: wakers past the kernel's slots or the bound (max_wakers)
};

// The processes kept per sleeping thread and interval, by sleep; the rest is summed into <other>.
inline constexpr std::size_t max_wakers = 8;

struct wakeup_row {
  waker_kind kind = waker_kind::process;
  std::uint32_t pid = 0;      // the waker's process (tgid), kind process
  std::string comm;           // its comm (exact kernel bytes), kind process
  std::string cgroup;         // its cgroup v2 path, "" unknown
  std::uint8_t state = 0;     // the sleeper's state at switch-out: 0 S, 1 D, 2 other
  std::uint64_t sleep_ns = 0; // switch-out -> sched_waking, summed over the sleeps it ended
  std::uint64_t count = 0;    // sleeps it ended
};

// Wakeup group (schema v15): where a thread's D sleeps blocked in one interval: a kernel stack
// (its functions, innermost first; `hash` identifies it within a boot; 0 and no frames:
// <other>, the stacks past the kernel's slots or not taken).
struct blocked_row {
  std::uint64_t hash = 0;
  std::uint8_t state = 1; // the sleeps' state: 0 S, 1 D, 2 other (as thread_wakeup.state)
  std::vector<std::string> frames;
  std::uint64_t sleep_ns = 0; // switch-out -> sched_waking, summed over those sleeps
  std::uint64_t count = 0;
};

// CPU pressure and bandwidth throttling of a cgroup ("/" = the whole system) in one interval:
// deltas, each NULL in the database when the kernel does not say.
struct cgroup_cpu_row {
  std::string cgroup;
  std::optional<std::int64_t> some_ns;      // PSI cpu some
  std::optional<std::int64_t> full_ns;      // PSI cpu full
  std::optional<std::int64_t> usage_ns;     // cpu.stat usage_usec
  std::optional<std::int64_t> periods;      // nr_periods
  std::optional<std::int64_t> throttled;    // nr_throttled
  std::optional<std::int64_t> throttled_ns; // throttled_usec (v2), throttled_time (v1)
};

// One thread's data for one interval (deltas, not cumulative values).
struct thread_row {
  std::uint32_t tid = 0;           // kernel task->pid
  std::uint32_t pid = 0;           // thread group id (task->tgid)
  std::uint64_t start_time_ns = 0; // task->start_time (ns since boot); identity with tid + boot
  std::string comm;                // exact kernel bytes, may be hostile
  std::string cgroup; // cgroup v2 path relative to the mount ("/system.slice/x"), "" unknown
  // Every histogram-valued metric of the registry, by id. Values without samples are not
  // written; the per-second rates are written only with the migration group.
  metrics::thread_set m;
  std::uint64_t migrations = 0; // migration group: count, cross-die, cross-NUMA
  std::uint64_t cross_ccx = 0;
  std::uint64_t cross_numa = 0;
  bool has_ipc = false; // perf=ipc: the four IPC counters below are valid
  std::uint64_t user_cycles = 0;
  std::uint64_t kernel_cycles = 0;
  std::uint64_t user_instructions = 0;
  std::uint64_t kernel_instructions = 0;
  // Generic perf events: (index into interval_row::events, value). Rows with value 0 skipped.
  std::vector<std::pair<std::uint32_t, std::uint64_t>> events;
  // Per-second rate histogram per generic event (log2 layout), same order/indexes as `events`.
  std::vector<std::pair<std::uint32_t, stats::histogram>> event_rates;
  // Blame group (schema v5): the culprits of this thread's waits and preemptions.
  std::vector<blame_row> blame;
  // Wakeup group (schema v15): who ended this thread's sleeps, by sleep state.
  std::vector<wakeup_row> wakeups;
  std::vector<blocked_row> blocked; // their D sleeps by kernel stack
  // Wakeup group (schema v20): its I/O by the kernel's per-task accounting, bytes read from
  // storage and bytes of page cache dirtied or written (thread_io; no row when both are 0).
  std::uint64_t io_read_bytes = 0, io_write_bytes = 0;
};

// A generic perf event of the run (stable for the whole run; identified by name in the DB).
struct perf_event_def {
  std::string name;       // as the user gave it / the alias ("l2-miss", "raw:0x1234", ...)
  std::uint32_t type = 0; // perf_event_attr.type
  std::uint64_t config = 0;
};

// Multiplexing visibility: per interval, per CPU and counter, how long it was enabled and how
// long it really counted (running < enabled means the PMU multiplexed it).
struct counter_time {
  std::uint32_t cpu = 0;
  std::string counter; // "user_cycles", ..., or a generic event name
  std::uint64_t enabled_ns = 0;
  std::uint64_t running_ns = 0;
};

struct schedstat_cpu_delta {
  std::uint32_t cpu = 0;
  std::string field; // kernel field name ("run_delay_ns", "sched_count", ...)
  std::int64_t delta = 0;
};

struct schedstat_domain_delta {
  std::uint32_t cpu = 0;
  std::uint32_t domain = 0; // domainN index
  std::string name;         // v17 domain name ("SMT", "MC", ...), "" before v17
  std::string field;        // "lb_count_idle", ...
  std::int64_t delta = 0;
};

struct cpu_row {
  std::uint32_t cpu = 0;
  metrics::cpu_set m; // every CPU metric of the registry, by id
};

// Schema v9: one online CPU's place in the machine (rsched/topology/topology.hpp, as plain
// numbers: the store knows nothing of sysfs). -1 unknown.
struct cpu_topology_row {
  std::uint32_t cpu = 0;
  int core = -1;    // topology/core_id (unique only within a package)
  int package = -1; // physical_package_id
  int die = -1;     // dense die/CCX id
  int llc = -1;     // dense last-level-cache group id
  int node = -1;    // NUMA node
  friend bool operator==(const cpu_topology_row &, const cpu_topology_row &) = default;
};

// Schema v9: the kernel's sched_ext state (/sys/kernel/sched_ext), read at an interval's end.
struct sched_ext_row {
  std::string state; // "enabled", "disabled", "enabling", "disabling", ... as the kernel says
  std::string ops;   // the loaded BPF scheduler's name (root/ops), "" none
  std::int64_t enable_seq = 0; // how many times a BPF scheduler was enabled since boot
  friend bool operator==(const sched_ext_row &, const sched_ext_row &) = default;
};

// Priority inversion (docs/SQL.md, "inversions"): whether a thread scheduled as (`policy`,
// `prio`) (task->policy, task->prio) waiting while one scheduled as (`by_policy`, `by_prio`) ran
// is an inversion of what their owners asked for. Three conditions: the waiter was raised in its
// class (a fair-class thread with nice < 0; a real-time one always), the culprit's scheduling
// class outranks the waiter's (deadline > real-time > fair, sched_ext and idle), so the waiter's
// priority cannot help it, and the waiter stands higher in its class than the culprit in its
// own (positions 0..1: real-time priority 1..99, nice 19..-20; deadline 1). A nice -20 thread
// waiting behind a SCHED_FIFO priority 1 batch job is one; behind FIFO 99, or a nice -10 thread
// behind FIFO 75, is not (the owner put that task above); a nice 0 thread waiting behind any
// real-time task is not (nothing was asked for it). Within one class the kernel orders by the
// owners' priorities itself: never an inversion.
bool priority_inversion(int policy, int prio, int by_policy, int by_prio);

// The annotation text for a sched_ext change from `before` (the state at the previous interval
// of the same boot; nullptr: not known) to `after`, "" when there is none to mark: a scheduler
// enabled ("sched_ext enabled: scx_lavd"), disabled ("sched_ext disabled (was scx_lavd)"),
// replaced by another ("sched_ext: scx_bpfland replaced scx_lavd"), enabled again
// ("sched_ext re-enabled: scx_lavd"), or enabled and disabled between two reads
// ("sched_ext enabled and disabled again"). Only "enabled" counts as active: a transition state
// (enabling, disabling) is marked once the kernel reports where it went.
std::string sched_ext_change(const sched_ext_row *before, const sched_ext_row &after);

// A step of the wall clock: at `at_ns` (UTC after the step) its mapping of the monotonic clock
// moved by `step_ns` (> 0: forward; settimeofday, NTP's step, a VM resumed), so that the
// intervals after it are timed by the new mapping (the recorder re-reads it every interval).
struct clock_step {
  std::int64_t at_ns = 0;
  std::int64_t step_ns = 0;
};

struct interval_row {
  // UTC ns at the start of the interval: its CLOCK_MONOTONIC start through the wall clock's
  // mapping as read at its end (a step within it moves the whole interval)
  std::int64_t start_ns = 0;
  std::int64_t dur_ns = 0;     // length (CLOCK_MONOTONIC) ns
  std::string boot_id;         // /proc/sys/kernel/random/boot_id
  bool final_interval = false; // the last (possibly partial) interval of a run
  // The recorder fell behind: this interval lasted much longer than asked (a stopped or starved
  // process; the ticks it missed were coalesced into it). Its data is whole, its timing coarse.
  bool stalled = false;
  std::array<std::uint64_t, RSCHED_DROP_COUNT> drops{}; // delta of the BPF drop counters
  std::vector<thread_row> threads;                      // only threads with data in the interval
  std::vector<cpu_row> cpus;                            // only CPUs with data in the interval

  // Schema v2.
  std::uint32_t groups = 0;                // enum rsched_group bits of the metric groups recorded
  std::vector<perf_event_def> events;      // generic perf events; thread_row::events index into it
  std::vector<counter_time> counter_times; // per CPU and counter, as given
  std::vector<schedstat_cpu_delta> schedstat_cpu;       // zero deltas are not written
  std::vector<schedstat_domain_delta> schedstat_domain; // zero deltas are not written

  // Schema v3: the daemon's own health in this interval (NULL in the database when unknown).
  // The SQLite write time of an interval is measured by the writer and stored with the next one.
  std::optional<std::int64_t> collect_ns;  // reading the maps and taking deltas
  std::optional<std::int64_t> maint_ns;    // writer::maintain() after the previous interval
  std::optional<std::int64_t> cpu_ns;      // rschedd's CPU time (user + system)
  std::optional<std::int64_t> rss_bytes;   // rschedd's VmRSS at the end of the interval
  std::optional<std::int64_t> bpf_run_ns;  // run_time_ns of its BPF programs (bpf_stats on)
  std::optional<std::int64_t> bpf_run_cnt; // run_cnt of its BPF programs (bpf_stats on)

  // Schema v4: the clock of the scheduling delay ("monotonic" or "runqueue"; empty: the latency
  // group was not recorded, NULL in the database).
  std::string delay_clock;

  // Schema v5: CPU pressure and throttling of the cgroups that had activity, their ancestors
  // and the system ("/").
  std::vector<cgroup_cpu_row> cgroup_cpu;

  // Schema v9: the CPU topology as read at this interval (rschedd passes it with the first
  // interval of a run and after a CPU came or went; empty: unchanged). The writer stores it
  // only when it differs from the one in force for the boot (table cpu_topology).
  std::vector<cpu_topology_row> topology;
  // Schema v9: sched_ext (nullopt: the kernel has none, NULL columns). A change from the
  // previous interval of the database is also written as an annotation (source "rschedd").
  std::optional<sched_ext_row> sched_ext;

  // Schema v21: the wall clock's steps the recorder saw since the previous interval it wrote
  // (CLOCK_REALTIME against CLOCK_MONOTONIC; table clock_steps).
  std::vector<clock_step> clock_steps;
};

} // namespace rsched::store
