#pragma once
// rschedd's options turned into the config of every part main.cpp wires, in one pure step
// (unit-tested: tests/rschedd/config_test.cpp). main.cpp adds only what it finds at run time: the
// readers' group, the perf counters that opened, the CPU topology, the boot id, the time the run
// started, and the callbacks between the parts. The startup steps (banner, open_perf,
// load_topology: startup.hpp) read the options themselves.
#include "rsched/base/result.hpp"
#include "rsched/bpf/program.hpp"
#include "rsched/flight/program.hpp"
#include "rsched/flight/recorder.hpp"
#include "rsched/rschedd/filter.hpp"
#include "rsched/rschedd/live.hpp"
#include "rsched/rschedd/metrics_endpoint.hpp"
#include "rsched/rschedd/metrics_state.hpp"
#include "rsched/rschedd/options.hpp"
#include "rsched/rschedd/recorder.hpp"
#include "rsched/store/writer.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace rsched::rschedd {

// The database: --db, --db-group, --keep-*, --max-size.
struct store_config {
  std::string path;
  // --db-group NAME: nullopt = `rsched` when that group exists; "" = ownership left as it is.
  // main resolves it before anything is loaded and puts the gid in open.group.
  std::optional<std::string> group_name;
  store::open_options open;
  store::retention keep; // set on the writer once it is open
};

// Prometheus: --metrics-listen, --metrics-textfile, --metrics-top.
struct metrics_output {
  metrics_config state; // top; start_ns is the run's start, set by main
  std::optional<listen_address> listen;
  std::optional<std::string> textfile;
  // A metrics_state is kept only when something reads it.
  [[nodiscard]] bool on() const { return listen.has_value() || textfile.has_value(); }
};

// The recorder thread's scheduling (main.cpp; issue 31): --rt-priority, --recorder-nice,
// --recorder-slice-us.
struct recorder_priority {
  std::uint32_t rt_priority = 0; // SCHED_FIFO priority; 0: SCHED_OTHER at `nice`
  int nice = 0;
  std::uint32_t slice_us = 100; // EEVDF slice request when not SCHED_FIFO; 0: the kernel's
  bool verbose = false;         // -v: a note when the nice value or the slice cannot be set
};

// The feeds read in user space that the enrich step adds (enrich.hpp): -g schedstat, pressure.
struct enrich_feeds {
  bool schedstat = false;
  bool pressure = true;
};

// The flight recorder (--flight-recorder and its options): nullopt when off. main adds the
// captures' group (the database's), the note callback, and loads the programs in the mode of
// the main ones.
struct flight_setup {
  flight::load_options load;
  flight::recorder_config recorder; // span, threshold, gap, the captures directory
  std::string legacy_dir;           // where an rschedd before issue 51 wrote them: still pruned
  std::uint32_t keep = 20;          // captures kept
  std::uint64_t max_bytes = 1ULL << 30;
};

// Everything main.cpp configures, from the options alone.
struct daemon_config {
  // -g's groups, --bpf-mode, --live-read, --delay-clock, the map sizes, -v. main adds the perf
  // counters and the CPU tables, drops RSCHED_G_PERF when no counter opened, and turns on
  // verbose with RSCHED_BPF_VERBOSE.
  bpf::options bpf;
  std::optional<store_config> store; // nullopt: --no-db
  filter_options filter;             // -p, -c, --global-comm, --cgroup, -l
  // The live view: its kind, the tables' mode (-C, -d), the compact view's window. main adds
  // the groups after perf, IPC, the topology, the compiled filter and the event names.
  live_config live;
  // -i, -r, -g's groups, --delay-clock, --db, --stats; per_second for the migration group. main
  // adds the perf events (and per_second for them), the topology, the boot id and the callbacks.
  recorder_config recorder;
  metrics_output metrics;
  recorder_priority priority;
  enrich_feeds feeds;
  std::optional<flight_setup> flight;
};

// The options' config. An error (a --metrics-listen address that parse_options would have
// refused) is bad usage.
result<daemon_config> make_config(const options &opt);

} // namespace rsched::rschedd
