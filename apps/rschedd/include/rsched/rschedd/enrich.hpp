#pragma once
// What each interval carries besides the BPF counters (recorder_config::enrich): the perf
// counters' enabled/running times, /proc/schedstat deltas, and rschedd's own health (CPU time,
// RSS, the BPF programs' run time). Each part reads its kernel file or fds through a narrow
// seam and adds its rows to the interval; the pure parts are unit-tested.
#include "rsched/base/result.hpp"
#include "rsched/bpf/program.hpp"
#include "rsched/collect/perf.hpp"
#include "rsched/pressure/pressure.hpp"
#include "rsched/schedstat/delta.hpp"
#include "rsched/schedstat/schedstat.hpp"
#include "rsched/store/records.hpp"
#include "rsched/topology/topology.hpp"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rsched::rschedd {

// The non-zero fields of a schedstat delta as the store's rows.
void add_schedstat(store::interval_row &row, const schedstat::deltas &d);

// The perf counters' enabled and running times over each interval (multiplexing shows as
// running < enabled), per CPU and counter.
class counter_times {
public:
  explicit counter_times(const std::vector<collect::counter_set> &sets) : sets_(sets) {}
  void add_to(store::interval_row &row);

private:
  const std::vector<collect::counter_set> &sets_;
  std::map<std::pair<unsigned, unsigned>, std::pair<std::uint64_t, std::uint64_t>> prev_;
};

// /proc/schedstat deltas per interval. /proc/sys/kernel/sched_schedstats is switched on while
// recording and restored afterwards (upstream leaves it on).
class schedstat_feed {
public:
  // The error says why the file cannot be read (for one line; the rest keeps running).
  static result<schedstat_feed>
  open(std::filesystem::path schedstat = "/proc/schedstat",
       std::filesystem::path sysctl = "/proc/sys/kernel/sched_schedstats");
  schedstat_feed(schedstat_feed &&o) noexcept;
  schedstat_feed &operator=(schedstat_feed &&) = delete;
  schedstat_feed(const schedstat_feed &) = delete;
  schedstat_feed &operator=(const schedstat_feed &) = delete;
  ~schedstat_feed();

  // Reads the file and adds the delta since the previous read; a failed read adds nothing.
  void add_to(store::interval_row &row);
  // Takes a new baseline (when recording starts: the first delta covers the first interval).
  void rebase();
  // The live display's schedstat table of the newest delta ("" before the first).
  [[nodiscard]] const std::string &live_table() const { return live_; }

private:
  schedstat_feed(std::filesystem::path path, std::filesystem::path sysctl, bool restore,
                 schedstat::snapshot first);
  std::filesystem::path path_;
  std::filesystem::path sysctl_;
  bool restore_ = false; // write "0" back to the sysctl on destruction
  schedstat::snapshot prev_;
  std::string live_;
};

// CPU pressure (PSI) and CFS throttling per interval (the pressure group): the system ("/") and
// the cgroups whose threads are in the interval, with their ancestors.
class pressure_feed {
public:
  // `note` gets one line when the cgroup tree is larger than the sampler reads.
  pressure_feed(pressure::sources where, std::function<void(std::string_view)> note);
  // Reads every cgroup and adds the interval's rows: the deltas since the previous read, their
  // PSI stall times scaled from the time between the two reads to the interval's dur_ns (see
  // fit_pressure).
  void add_to(store::interval_row &row);
  // Takes a new baseline (when recording starts: the first delta covers the first interval).
  void rebase();
  // What this machine lacks, one line each.
  [[nodiscard]] std::vector<std::string> missing() const { return sampler_.missing(); }
  // Throttled cgroups it cannot see (pressure::sampler::unseen_v1_quotas), one line each.
  [[nodiscard]] std::vector<std::string> unseen() const { return sampler_.unseen_v1_quotas(); }

private:
  pressure::sampler sampler_;
  pressure::readings prev_;
  std::int64_t prev_read_ns_ = 0; // CLOCK_MONOTONIC of prev_
  std::function<void(std::string_view)> note_;
  bool warned_truncated_ = false;
};

// PSI stall times (some_ns, full_ns) of the rows, measured between two reads `read_span_ns`
// apart, as shares of an interval of `dur_ns`: scaled by dur_ns / read_span_ns and at most
// dur_ns. The reads come after each interval's end, a little late by a varying amount, so a raw
// delta can cover more than its interval: on a saturated machine "CPU pressure 101%". Nothing
// changes when either length is not positive. Counts, CPU usage and throttling stay as read.
void fit_pressure(std::vector<store::cgroup_cpu_row> &rows, std::int64_t read_span_ns,
                  std::int64_t dur_ns);

// The pressure rows of an interval from two readings (pure; the active cgroups are those of the
// interval's threads).
std::vector<store::cgroup_cpu_row> pressure_rows(const pressure::readings &prev,
                                                 const pressure::readings &cur,
                                                 const std::vector<store::thread_row> &threads);

// rschedd's own cost per interval: process CPU time, RSS, and the BPF programs' run time and
// count (from bpf_stats; only where the kernel counts them).
class self_health {
public:
  // `prog` null: no BPF run time.
  explicit self_health(const bpf::program *prog);
  void add_to(store::interval_row &row);

private:
  const bpf::program *prog_;
  std::int64_t cpu_prev_ = 0;
  std::optional<bpf::program::run_totals> bpf_prev_;
};

// The machine around the threads (schema v9): the CPU topology with a run's first interval and
// again after a CPU came or went (devices/system/cpu/online, one small file, is compared every
// interval; the topology itself is read only then, and passed again every minute or so, which
// the writer stores only if the file lacks it), and the sched_ext state every interval
// (nothing where the kernel has none). A read that fails is noted once and skipped.
class machine_feed {
public:
  explicit machine_feed(std::filesystem::path sysfs = "/sys",
                        std::function<void(std::string_view)> note = {});
  void add_to(store::interval_row &row);

private:
  std::filesystem::path sysfs_;
  std::function<void(std::string_view)> note_;
  static constexpr unsigned resend_every = 60; // intervals
  std::optional<std::string> online_; // the online mask the last topology sent was read with
  std::vector<store::cpu_topology_row> rows_; // that topology
  unsigned since_sent_ = 0;
  bool topology_noted_ = false;
  bool sched_ext_noted_ = false;
};

// The store's rows of a topology (unknown ids stay -1).
std::vector<store::cpu_topology_row> topology_rows(const topology::topology &t);

// rschedd's resident set size in bytes (/proc/self/statm), nullopt when it cannot be read.
std::optional<std::int64_t> self_rss_bytes();

} // namespace rsched::rschedd
