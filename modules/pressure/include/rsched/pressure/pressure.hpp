#pragma once
// rsched::pressure: CPU pressure (PSI) and CFS bandwidth throttling, system-wide and per cgroup,
// read from the kernel's text files and turned into per-interval deltas. Pure parsing and
// delta logic; the sampler is the only I/O, over root directories tests can fake. Knows nothing
// of BPF or SQL.
//
// Files (Documentation/accounting/psi.rst, Documentation/admin-guide/cgroup-v2.rst):
//   /proc/pressure/cpu         "some avg10=.. avg60=.. avg300=.. total=<us>" and "full ..."
//   <cgroup2>/<path>/cpu.pressure   the same, for the cgroup's tasks
//   <cgroup2>/<path>/cpu.stat       usage_usec (always), nr_periods, nr_throttled,
//                                   throttled_usec (only with the cpu controller on v2)
//   <cpu v1>/<path>/cpu.stat        nr_periods, nr_throttled, throttled_time (ns): hybrid
//                                   systems, where the cpu controller is mounted as cgroup v1
// The root cgroup "/" stands for the whole system: its pressure is /proc/pressure/cpu.
#include "rsched/base/result.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace rsched::pressure {

// Cumulative PSI stall totals of one file, in microseconds (the kernel's unit). `full` is
// missing from the system file before Linux 5.13.
struct psi_totals {
  std::optional<std::uint64_t> some_us;
  std::optional<std::uint64_t> full_us;
};

// Parses a PSI file. The error names the line that is not "some|full ... total=N".
result<psi_totals> parse_psi(std::string_view text);

// What a cpu.stat says (either version), cumulative, in ns and counts. Absent keys stay empty.
struct cpu_stat {
  std::optional<std::uint64_t> usage_ns;     // v2 usage_usec
  std::optional<std::uint64_t> periods;      // nr_periods: enforcement periods that had work
  std::optional<std::uint64_t> throttled;    // nr_throttled: periods the group was throttled in
  std::optional<std::uint64_t> throttled_ns; // v2 throttled_usec, v1 throttled_time
};

// Parses "key value" lines; unknown keys are ignored, a line that is not a key and a number is
// an error naming it.
result<cpu_stat> parse_cpu_stat(std::string_view text);

// One cgroup's CPU pressure and bandwidth counters (cumulative as read, or a delta).
struct cgroup_cpu {
  std::optional<std::uint64_t> some_ns; // PSI some: time at least one task waited for a CPU
  std::optional<std::uint64_t> full_ns; // PSI full: time all non-idle tasks waited at once
  std::optional<std::uint64_t> usage_ns;
  std::optional<std::uint64_t> periods;
  std::optional<std::uint64_t> throttled;
  std::optional<std::uint64_t> throttled_ns;
  [[nodiscard]] bool any() const {
    return some_ns || full_ns || usage_ns || periods || throttled || throttled_ns;
  }
  friend bool operator==(const cgroup_cpu &, const cgroup_cpu &) = default;
};

// Cumulative values by cgroup path ("/" = the system, "/system.slice/x.service", ...).
using readings = std::map<std::string, cgroup_cpu>;

// cur - prev for every field both have (a counter that went down, a cgroup re-created under
// its old name, restarts from 0: the delta is cur); a field missing from either stays empty.
cgroup_cpu delta(const cgroup_cpu &cur, const cgroup_cpu &prev);

// The interval's rows: for each path of `active` (the cgroups whose threads ran) and each of its
// ancestors, and for "/", the delta since `prev`. A cgroup missing from `prev` (created in the
// interval) is counted from 0; one missing from `cur` (removed) has no row. Sorted by path.
std::vector<std::pair<std::string, cgroup_cpu>>
interval_rows(const readings &prev, const readings &cur, const std::set<std::string> &active);

// The parents of a cgroup path up to "/" ("/a/b" -> "/a", "/"); none for "/".
std::vector<std::string> ancestors(std::string_view path);

// Where the files are.
struct sources {
  std::string system_psi = "/proc/pressure/cpu";
  std::string cgroup2;            // mount point; "" = no cgroup v2
  std::string cpu_v1;             // mount point of the v1 cpu controller; "" = none
  std::size_t max_cgroups = 4096; // cgroups read per interval at most (the rest are noted)
};

// The sources of this machine, from a mountinfo text.
sources find_sources(std::string_view mountinfo);

// Reads every cgroup's files (and the system's) each interval: the delta of a cgroup that just
// became active needs its value at the start of the interval.
class sampler {
public:
  explicit sampler(sources s) : src_(std::move(s)) {}
  // The system and up to max_cgroups cgroups (the tree in breadth-first order, so a cap drops
  // the deepest ones). `truncated()` says whether the cap was hit on the last read.
  readings read();
  [[nodiscard]] bool truncated() const { return truncated_; }
  // What this machine lacks, one line each (for rschedd's startup notes), empty when complete.
  [[nodiscard]] std::vector<std::string> missing() const;
  // On a hybrid machine: the cgroups of the v1 cpu hierarchy that have a CFS quota but no
  // cgroup v2 counterpart (made by hand, or by Docker's cgroupfs driver), one line each, at
  // most `max_lines` and a last line counting the rest. Their threads are recorded under their v2
  // cgroup and their throttling is never read: rschedd says so at start.
  [[nodiscard]] std::vector<std::string> unseen_v1_quotas(std::size_t max_lines = 10) const;
  [[nodiscard]] const sources &where() const { return src_; }

private:
  sources src_;
  bool truncated_ = false;
};

} // namespace rsched::pressure
