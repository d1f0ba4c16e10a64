#pragma once
// The CPU topology of a machine as rsched uses it: per online CPU its socket, core, die ("CCX"),
// last-level-cache group and NUMA node, read from sysfs.
//
// Die ids follow upstream's detect_topology: CPUs are grouped by the exact text of
// topology/die_cpus_list and the groups numbered 0.. in the order of their lowest CPU, because
// die_id restarts at 0 in every socket of a multi-socket AMD machine. The snapshot is immutable:
// after CPU hotplug, load again.
#include "rsched/base/result.hpp"

#include <filesystem>
#include <optional>
#include <vector>

namespace rsched::topology {

// CPUs numbered >= max_cpus are ignored everywhere, as upstream does; equals RSCHED_MAX_CPUS
// (sched_abi.h), the size of the BPF tables (checked by the topology tests).
inline constexpr unsigned max_cpus = 1024;

struct cpu_info {
  unsigned cpu = 0;
  int package = -1; // topology/physical_package_id (kernel id), -1 unknown
  int core = -1;    // topology/core_id (kernel id, unique only within a package), -1 unknown
  int die = -1;     // dense die/CCX id (see above), -1 unknown
  int llc = -1;     // dense last-level-cache group id; load always sets it, from_json gives -1
  int numa = -1;    // NUMA node (kernel id), -1 unknown (no devices/system/node, or not listed)

  friend bool operator==(const cpu_info &, const cpu_info &) = default;
};

struct topology {
  std::vector<cpu_info> cpus; // sorted by cpu, each cpu at most once, all < max_cpus

  // Distinct ids >= 0, like upstream's num_dies / num_numa_nodes.
  [[nodiscard]] int num_dies() const;
  [[nodiscard]] int num_numa_nodes() const;
  [[nodiscard]] int num_llcs() const;
  // The CPU's entry; nullopt if the CPU is not in the topology (offline, absent, >= max_cpus).
  [[nodiscard]] std::optional<cpu_info> find(unsigned cpu) const;

  friend bool operator==(const topology &, const topology &) = default;
};

// Reads the topology under `sysfs_root` (a real /sys or a fake tree): only files below
// <root>/devices/system/cpu/cpu<N>/ and <root>/devices/system/node/node<M>/cpulist.
//  - CPUs: directories cpu<N> with N < max_cpus; a CPU whose `online` file exists and does not
//    read "1" is offline and skipped (cpu0 usually has no such file). Numbers need not be
//    contiguous.
//  - package/core: topology/physical_package_id and topology/core_id (missing: -1).
//  - die: see the file comment; without die_cpus_list, upstream's fallback die_id, then
//    physical_package_id, then -1.
//  - llc: CPUs grouped by (numa, package, shared_cpu_list of cache/index3, else of cache/index2,
//    else no cache at all) and numbered 0.. by lowest CPU, following scx's L3 -> L2 -> 0 rule.
//  - numa: from node<M>/cpulist; a machine without devices/system/node (CONFIG_NUMA=n) gives -1
//    for every CPU, like upstream ("unknown": no cross-NUMA migration is ever reported).
// A missing attribute file takes its default; an attribute that exists but cannot be read or
// parsed, a missing or unreadable devices/system/cpu, a cpu<N> that is not a directory, or no
// online CPU at all is an error naming the path.
result<topology> load(const std::filesystem::path &sysfs_root = "/sys");

} // namespace rsched::topology
