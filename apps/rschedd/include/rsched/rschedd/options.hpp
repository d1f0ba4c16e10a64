#pragma once
// rschedd's command line, parsed into a plain struct (pure, unit-tested).
#include "rsched/abi/sched_abi.h"
#include "rsched/base/result.hpp"
#include "rsched/bpf/program.hpp"
#include "rsched/store/records.hpp"
#include "rsched/store/writer.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rsched::rschedd {

// Metric groups selected with -g (upstream parse_metric_groups, section 1).
struct group_selection {
  std::uint32_t groups = RSCHED_G_LATENCY; // rsched_group bits (BPF side)
  bool schedstat = false;                  // /proc/schedstat, read in user space
  bool pressure = true;            // CPU pressure (PSI) and CFS throttling, read in user space
  bool ipc = false;                // perf=ipc: the 4-counter IPC set
  std::vector<std::string> events; // generic perf events, deduplicated, in order
  // The events named by a bare token (-g cycles, not perf=cycles): a misspelt group too, so one
  // that is no perf event either is reported as an unknown metric group.
  std::vector<std::string> bare_events;
};

// The -g group names, for the error about one that does not exist.
inline constexpr const char *group_names =
    "latency, slice, sleep, waking, migration, blame, "
    "wakeup, schedstat, pressure, perf, perf=EVENT, most, all";

// Parses the -g tokens (already split on commas). An explicit -g replaces the default.
result<group_selection> parse_groups(const std::vector<std::string> &tokens);

enum class display_mode { collapsed, grouped, detailed };

struct options {
  std::uint64_t interval_s = 1;
  std::optional<std::uint64_t> run_time_s;
  std::string db_path = store::default_db_path;
  bool no_db = false;
  // --db-group NAME: the group that may read the history (docs/SCHEMA.md, "Who can read the
  // history"). nullopt: `rsched` when that group exists; "" (--db-group '') leaves ownership as
  // it is.
  std::optional<std::string> db_group;
  bpf::attach_mode mode = bpf::attach_mode::automatic;
  std::uint32_t graveyard_entries = 16384;
  std::uint32_t task_hash_entries = 16384; // raw_tp mode: live threads tracked
  bpf::live_read read = bpf::live_read::automatic;
  std::uint32_t dirty_list_entries = 65536;   // threads that change within one interval, listed
  bool delay_rq_clock = false;                // --delay-clock runqueue
  std::optional<std::int64_t> stack_sleep_ns; // --stack-sleep DURATION (wakeup group; 0 = off)
  bool verbose = false;
  bool help = false;
  bool version = false;
  // upstream flags
  std::vector<std::string> group_tokens;          // -g, split on commas, in order
  group_selection groups;                         // parsed from group_tokens
  std::vector<std::string> comm;                  // -c REGEX (repeatable)
  std::vector<std::string> global_comm;           // --global-comm REGEX
  std::vector<std::string> cgroup;                // --cgroup REGEX
  std::optional<std::uint32_t> pid;               // -p TID
  std::uint64_t min_latency_us = 0;               // -l
  display_mode display = display_mode::collapsed; // -C grouped, -d detailed (-d wins)
  std::string topology_file;                      // --topology FILE
  bool gen_topology = false;                      // --gen-topology
  bool perf_list = false;                         // --perf-list
  bool stats = false; // --stats: per-interval read/drain/write/maintenance times on stderr
  // --view: the live view on a terminal; unset = compact, or tables with -C / -d.
  std::optional<std::string> view;
  std::uint32_t rt_priority = 0; // --rt-priority: the recorder's SCHED_FIFO priority, 0 = none
  int recorder_nice = 0;         // --recorder-nice: its nice value when not SCHED_FIFO
  // --recorder-slice-us: its EEVDF time slice request when not SCHED_FIFO (sched_setattr's
  // sched_runtime, Linux 6.12; the kernel takes 100-100,000 us); 0 = the kernel's default.
  std::uint32_t recorder_slice_us = 100;
  store::retention keep; // --keep-raw, --keep-1m, --keep-1h, --max-size
  // Prometheus (metrics_state.hpp): --metrics-listen [ADDR:]PORT, --metrics-textfile FILE,
  // --metrics-top N (named cgroups, comms and culprits; the rest is "other").
  std::optional<std::string> metrics_listen;
  std::optional<std::string> metrics_textfile;
  std::uint32_t metrics_top = 20;
  // The flight recorder (docs/ARCHITECTURE.md, "Flight recorder"): --flight-recorder SECONDS
  // (0 = off), --flight-trigger DURATION (a thread's wait above it captures), its rate limit
  // --flight-trigger-gap DURATION (default 60 s), and the captures kept: --flight-keep N
  // (default 20) and --flight-max-size SIZE (default 1G), oldest removed first.
  std::uint32_t flight_seconds = 0;
  std::optional<std::int64_t> flight_trigger_ns;
  std::optional<std::int64_t> flight_trigger_gap_ns;
  std::optional<std::uint32_t> flight_keep;
  std::optional<std::uint64_t> flight_max_bytes;
};

inline constexpr const char *usage_text =
    "Usage: rschedd [-i SECONDS] [-r SECONDS] [--db PATH | --no-db] [-g GROUPS]... [filters]\n"
    "\n"
    "Records per-thread and per-CPU scheduling delay and runqueue depth every interval into a\n"
    "SQLite database (query it with rsched-sql); with a terminal on stdout it also shows the\n"
    "live view (a compact screen of the last 5 s, worst first; --view tables for upstream\n"
    "rsched's cumulative tables).\n"
    "\n"
    "  -g, --group GROUPS       metric groups, comma-separated, repeatable: latency and\n"
    "                           pressure (the default), slice, sleep, waking, migration, blame\n"
    "                           (who ran while threads waited; implies latency), wakeup (who\n"
    "                           woke threads, off-CPU time by state, each thread's I/O\n"
    "                           bytes; implies latency; not in all), schedstat,\n"
    "                           perf (= perf=ipc), perf=EVENT, most (all but waking and blame),\n"
    "                           all; a bare name is a perf event. The systemd unit records\n"
    "                           latency,migration,blame,wakeup,pressure: the whole wait (on\n"
    "                           the CPU and asleep, and who caused each) for less BPF time\n"
    "                           per context switch than runqlat's (docs/PERFORMANCE.md)\n"
    "  -c, --comm REGEX         only threads whose comm matches (repeatable, OR'd)\n"
    "      --global-comm REGEX  threads whose comm matches, regardless of -c and --cgroup\n"
    "      --cgroup REGEX       only threads in a matching cgroup v2 (or below it)\n"
    "  -p, --pid TID            only this thread\n"
    "  -l, --min-latency US     hide threads whose p50 scheduling delay is below US\n"
    "  -C, --no-collapse        one row per thread, grouped\n"
    "  -d, --detailed           one row per thread and per CPU, ungrouped\n"
    "      --view VIEW          live view on a terminal: compact (default: the last 5 s, worst\n"
    "                           first, fits the screen) or tables (upstream's, cumulative; the\n"
    "                           default with -C or -d)\n"
    "      --topology FILE      die/NUMA map as JSON instead of sysfs (migration group)\n"
    "      --gen-topology       print this machine's topology as JSON and exit\n"
    "      --perf-list          list perf event names and exit\n"
    "  -i, --interval SECONDS   interval length (default 1)\n"
    "  -r, --run-time SECONDS   stop after this long (the last partial interval is recorded)\n"
    "      --db PATH            database (default /var/lib/rsched/rsched.db)\n"
    "      --no-db              live display only, record nothing\n"
    "      --db-group NAME      members of group NAME may read the history without root: the\n"
    "                           database (0640) and its directory (0750) get that group\n"
    "                           (default: rsched when it exists; '' leaves them as they are)\n"
    "      --bpf-mode MODE      auto (default), tp_btf or raw_tp\n"
    "      --live-read HOW      tp_btf mode: auto (default), dirty-list or iterator: read only\n"
    "                           the threads that changed from a list the tracepoints fill, or\n"
    "                           visit every thread of the system each interval\n"
    "      --stack-sleep DURATION  wakeup group: a sleep that is not D (those always get\n"
    "                           theirs) and lasts at least DURATION gets the kernel stack it\n"
    "                           blocked in (default 10ms; 0 = D sleeps only)\n"
    "      --delay-clock CLOCK  scheduling delay from the monotonic clock (default: wakeup to\n"
    "                           switch-in as the task lived it, leaving idle included, as\n"
    "                           runqlat and perf sched) or the runqueue clock (runqueue: the\n"
    "                           kernel's run_delay in /proc/<pid>/schedstat)\n"
    "      --keep-raw DURATION  keep raw intervals this long (default 2d; 0 = forever); a\n"
    "                           duration has a unit: s, m, h, d or w (12h, 30d, 1d12h)\n"
    "      --keep-1m DURATION   keep 1-minute rollups this long (default 30d; 0 = forever)\n"
    "      --keep-1h DURATION   keep 1-hour rollups this long (default 365d; 0 = forever)\n"
    "      --max-size SIZE      cap the database at SIZE, with its unit: B, K, M, G or T\n"
    "                           (binary: 8G = 8 GiB; default 8G; 0 = no cap): the oldest\n"
    "                           rows go first, finest tier first\n"
    "      --graveyard-entries N  exited threads held between two reads (default 16384)\n"
    "      --task-hash-entries N  raw_tp mode: live threads tracked (default 16384); threads\n"
    "                           beyond it are counted in drops_task_state\n"
    "      --dirty-list-entries N  threads that may change within one interval before that\n"
    "                           interval is read with the iterator instead (default 65536)\n"
    "      --stats              per interval on stderr: threads written, map read (+ deltas),\n"
    "                           database write and maintenance times, RSS, map drain alone,\n"
    "                           reads of every thread\n"
    "      --recorder-nice N    the recorder thread's nice value (default 0: an ordinary\n"
    "                           thread, preempted after its slice like any other, so it never\n"
    "                           makes the threads it records wait for its whole tick)\n"
    "      --recorder-slice-us N  the recorder's time slice (default 100: it runs its tick in\n"
    "                           pieces no longer than the threads around it, so nobody waits\n"
    "                           long behind it; 0 = the kernel's default; Linux 6.12+)\n"
    "      --rt-priority N      run the recorder at SCHED_FIFO N instead (default 0 = no):\n"
    "                           an exact cadence under a switch storm, but every thread queued\n"
    "                           on its CPU waits for its whole tick (tens of ms at 10,000\n"
    "                           threads; docs/PERFORMANCE.md)\n"
    "      --metrics-listen [ADDR:]PORT  serve GET /metrics (Prometheus text, or OpenMetrics\n"
    "                           when asked): cumulative histograms per CPU and for the\n"
    "                           busiest cgroups and comms, and rschedd's health. A bare PORT\n"
    "                           binds 127.0.0.1; 0.0.0.0:PORT or [::]:PORT exposes it\n"
    "                           (docs/FLEET.md). Off by default\n"
    "      --metrics-textfile FILE  the same text for node_exporter's textfile collector,\n"
    "                           replaced atomically after every interval\n"
    "      --metrics-top N      cgroups, comms and culprits with a series of their own\n"
    "                           (default 20; the rest is \"other\")\n"
    "      --flight-recorder SECONDS  keep the last SECONDS of every scheduler event (switch,\n"
    "                           waking, wakeup of a new thread, migration, fork, exit, rename)\n"
    "                           in memory (64 bytes an event, at most 64 MiB a CPU) and save\n"
    "                           them as a Perfetto trace beside the database (DB.captures/,\n"
    "                           table captures) on SIGUSR1, on an annotation tagged capture\n"
    "                           (rsched-sql mark --tags capture TEXT) or on --flight-trigger.\n"
    "                           Off by default\n"
    "      --flight-trigger DURATION  also save when a thread waited longer than DURATION\n"
    "                           to run (50ms): once per crossing, at most once per\n"
    "                           --flight-trigger-gap DURATION (default 60s)\n"
    "      --flight-keep N      captures kept (default 20); --flight-max-size SIZE: their\n"
    "                           total size (default 1G; a unit as --max-size); the oldest\n"
    "                           go first\n"
    "  -v, --verbose            show libbpf messages (verifier log on load failures)\n"
    "  -h, --help               this text\n"
    "  -V, --version            print the version\n";

// Parses rschedd's arguments (argv without the program name). Errors are one line (exit 2).
result<options> parse_options(const std::vector<std::string> &args);

} // namespace rsched::rschedd
