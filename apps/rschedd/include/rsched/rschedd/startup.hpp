#pragma once
// rschedd's startup steps that are not the recorder: the banner (upstream's "Options active"),
// the perf counters the selected groups ask for, and the topology of the migration group.
#include "rsched/base/result.hpp"
#include "rsched/collect/perf.hpp"
#include "rsched/rschedd/options.hpp"
#include "rsched/store/records.hpp"
#include "rsched/topology/topology.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace rsched::rschedd {

// Upstream's startup banner (for stderr: stdout is the live display), plus the retention in
// effect when recording to a database ("  - Retention: raw 2d, 1m 30d, 1h 365d; size cap 8G").
std::string banner(const options &opt);

// The perf group's counters, opened. Where the PMU is missing (as in most VMs) the IPC set
// fails: `ipc` is then false and `notes` says why in one line; the rest keeps running.
struct perf_counters {
  bool ipc = false;                              // the IPC set is open
  std::vector<std::string> event_names;          // generic events that opened, in -g order
  std::vector<store::perf_event_def> event_defs; // the same, for the store
  std::vector<collect::counter_set> sets;        // owns the fds
  std::uint32_t slot_mask = 0;                   // every slot opened (bpf::options)
  std::string notes;                             // lines for stderr, each ending in '\n'
};

// Opens the counters of `g` (nothing when the perf group is off). An unknown event name is
// bad usage: the error then has errnum EINVAL (rschedd exits 2); other errors exit 1.
result<perf_counters> open_perf(const group_selection &g, std::uint32_t groups);

// The topology from sysfs, or from the --topology JSON file when one is given.
result<topology::topology> load_topology(const options &opt);

} // namespace rsched::rschedd
