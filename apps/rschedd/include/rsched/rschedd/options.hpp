#pragma once
// rschedd's command line, parsed into a plain struct (pure, unit-tested).
#include "rsched/abi/sched_abi.h"
#include "rsched/base/result.hpp"
#include "rsched/base/text.hpp"
#include "rsched/base/timefmt.hpp"
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
  bool ipc = false;                        // perf=ipc: the 4-counter IPC set
  std::vector<std::string> events;         // generic perf events, deduplicated, in order
};

// Parses the -g tokens (already split on commas). An explicit -g replaces the default.
inline result<group_selection> parse_groups(const std::vector<std::string> &tokens) {
  group_selection g;
  if (tokens.empty()) {
    return g;
  }
  g.groups = 0;
  auto add_event = [&](const std::string &e) {
    if (e == "ipc") {
      g.ipc = true;
      g.groups |= RSCHED_G_PERF;
      return;
    }
    for (const auto &x : g.events) {
      if (x == e) {
        return;
      }
    }
    g.events.push_back(e);
    g.groups |= RSCHED_G_PERF;
  };
  for (const auto &t : tokens) {
    if (t == "latency") {
      g.groups |= RSCHED_G_LATENCY;
    } else if (t == "slice") {
      g.groups |= RSCHED_G_SLICE;
    } else if (t == "sleep") {
      g.groups |= RSCHED_G_SLEEP;
    } else if (t == "waking") {
      g.groups |= RSCHED_G_WAKING;
    } else if (t == "migration") {
      g.groups |= RSCHED_G_MIGRATION;
    } else if (t == "schedstat") {
      g.schedstat = true;
    } else if (t == "perf") {
      add_event("ipc");
    } else if (t.rfind("perf=", 0) == 0) {
      if (t.size() == 5) {
        return make_error("perf= needs an event name");
      }
      add_event(t.substr(5));
    } else if (t == "most" || t == "all") {
      g.groups |= RSCHED_G_LATENCY | RSCHED_G_SLICE | RSCHED_G_SLEEP | RSCHED_G_MIGRATION;
      g.schedstat = true;
      // upstream: `most` adds ipc only when no perf event was named yet (order matters)
      if (!g.ipc && g.events.empty()) {
        add_event("ipc");
      }
      if (t == "all") {
        g.groups |= RSCHED_G_WAKING;
      }
    } else if (t.empty()) {
      return make_error("empty metric group in -g");
    } else {
      // anything else is tried as a perf event name (resolved later, with a clear error)
      add_event(t);
    }
  }
  if (g.events.size() > RSCHED_MAX_GENERIC_EVENTS) {
    return make_error("Too many generic perf events (" + std::to_string(g.events.size()) +
                      ", max 8)");
  }
  return g;
}

enum class display_mode { collapsed, grouped, detailed };

struct options {
  std::uint64_t interval_s = 1;
  std::optional<std::uint64_t> run_time_s;
  std::string db_path = store::default_db_path;
  bool no_db = false;
  bpf::attach_mode mode = bpf::attach_mode::automatic;
  std::uint32_t graveyard_entries = 16384;
  std::uint32_t task_hash_entries = 16384; // raw_tp mode: live threads tracked
  bpf::live_read read = bpf::live_read::automatic;
  std::uint32_t dirty_list_entries = 65536; // threads that change within one interval, listed
  bool delay_rq_clock = false;              // --delay-clock runqueue
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
  std::uint32_t rt_priority = 1; // --rt-priority: the recorder's SCHED_FIFO priority, 0 = none
  store::retention keep;         // --keep-raw, --keep-1m, --keep-1h, --max-size
};

inline constexpr const char *usage_text =
    "Usage: rschedd [-i SECONDS] [-r SECONDS] [--db PATH | --no-db] [-g GROUPS]... [filters]\n"
    "\n"
    "Records per-thread and per-CPU scheduling delay and runqueue depth every interval into a\n"
    "SQLite database (query it with rsched-sql); with a terminal on stdout it also shows the\n"
    "live view (a compact screen of the last 5 s, worst first; --view tables for upstream\n"
    "rsched's cumulative tables).\n"
    "\n"
    "  -g, --group GROUPS       metric groups, comma-separated, repeatable: latency (default),\n"
    "                           slice, sleep, waking, migration, schedstat, perf (= perf=ipc),\n"
    "                           perf=EVENT, most (all but waking), all; a bare name is a perf "
    "event\n"
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
    "      --bpf-mode MODE      auto (default), tp_btf or raw_tp\n"
    "      --live-read HOW      tp_btf mode: auto (default), dirty-list or iterator: read only\n"
    "                           the threads that changed from a list the tracepoints fill, or\n"
    "                           visit every thread of the system each interval\n"
    "      --delay-clock CLOCK  scheduling delay from the monotonic clock (default: wakeup to\n"
    "                           switch-in as the task lived it, leaving idle included, as\n"
    "                           runqlat and perf sched) or the runqueue clock (runqueue: the\n"
    "                           kernel's run_delay in /proc/<pid>/schedstat)\n"
    "      --keep-raw DURATION  keep raw intervals this long (default 2d; 0 = forever)\n"
    "      --keep-1m DURATION   keep 1-minute rollups this long (default 30d; 0 = forever)\n"
    "      --keep-1h DURATION   keep 1-hour rollups this long (default 365d; 0 = forever)\n"
    "      --max-size SIZE      cap the database at SIZE bytes (K/M/G/T suffixes; default 8G;\n"
    "                           0 = no cap): the oldest rows go first, finest tier first\n"
    "      --graveyard-entries N  exited threads held between two reads (default 16384)\n"
    "      --task-hash-entries N  raw_tp mode: live threads tracked (default 16384); threads\n"
    "                           beyond it are counted in drops_task_state\n"
    "      --dirty-list-entries N  threads that may change within one interval before that\n"
    "                           interval is read with the iterator instead (default 65536)\n"
    "      --stats              per interval on stderr: threads written, map read (+ deltas),\n"
    "                           database write and maintenance times, RSS, map drain alone,\n"
    "                           reads of every thread\n"
    "      --rt-priority N      the recorder thread's SCHED_FIFO priority (default 1; 0 = normal\n"
    "                           scheduling): keeps the interval cadence under CPU saturation\n"
    "  -v, --verbose            show libbpf messages (verifier log on load failures)\n"
    "  -h, --help               this text\n"
    "  -V, --version            print the version\n";

namespace detail {
inline result<std::uint64_t> parse_u64(const std::string &flag, const std::string &v,
                                       std::uint64_t min, std::uint64_t max) {
  if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 12) {
    return make_error(flag + " needs a whole number, got '" + v + "'");
  }
  const std::uint64_t n = std::stoull(v);
  if (n < min || n > max) {
    return make_error(flag + " must be between " + std::to_string(min) + " and " +
                      std::to_string(max) + ", got " + v);
  }
  return n;
}
} // namespace detail

// "2d", "30d", "12h", "0" (forever): a duration of the time grammar (rsched-sql's dur()).
inline result<std::int64_t> parse_keep(const std::string &flag, const std::string &v) {
  if (v == "0") {
    return std::int64_t{0};
  }
  auto d = timefmt::parse_duration(v);
  if (!d || *d <= 0) {
    return make_error(flag + " needs a duration such as 2d, 12h or 30m (0 = forever), got '" + v +
                      "'");
  }
  return *d;
}

// "8G", "512M", "100000", "0" (no cap): bytes, binary suffixes K, M, G, T.
inline result<std::uint64_t> parse_size(const std::string &flag, const std::string &v) {
  std::string digits = v;
  unsigned shift = 0;
  if (!v.empty()) {
    switch (v.back()) {
    case 'K':
    case 'k':
      shift = 10;
      break;
    case 'M':
    case 'm':
      shift = 20;
      break;
    case 'G':
    case 'g':
      shift = 30;
      break;
    case 'T':
    case 't':
      shift = 40;
      break;
    default:
      break;
    }
    if (shift != 0) {
      digits.pop_back();
    }
  }
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos ||
      digits.size() > 12) {
    return make_error(flag + " needs a size such as 8G, 500M or 0 (no cap), got '" + v + "'");
  }
  const std::uint64_t n = std::stoull(digits);
  if (n > (std::uint64_t{1} << (60 - shift))) {
    return make_error(flag + " is too large: '" + v + "'");
  }
  return n << shift;
}

inline result<options> parse_options(const std::vector<std::string> &args) {
  options o;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string &a = args[i];
    std::string flag = a;
    std::optional<std::string> inline_value;
    if (a.rfind("--", 0) == 0) {
      if (auto eq = a.find('='); eq != std::string::npos) {
        flag = a.substr(0, eq);
        inline_value = a.substr(eq + 1);
      }
    }
    auto value = [&]() -> result<std::string> {
      if (inline_value) {
        return *inline_value;
      }
      if (i + 1 >= args.size()) {
        return make_error(flag + " needs a value");
      }
      return args[++i];
    };
    if (flag == "-i" || flag == "--interval") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      auto n = detail::parse_u64(flag, *v, 1, 86400);
      if (!n) {
        return n.err();
      }
      o.interval_s = *n;
    } else if (flag == "-r" || flag == "--run-time") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      auto n = detail::parse_u64(flag, *v, 1, 100ULL * 365 * 86400);
      if (!n) {
        return n.err();
      }
      o.run_time_s = *n;
    } else if (flag == "--db") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      if (v->empty()) {
        return make_error("--db needs a path");
      }
      o.db_path = *v;
    } else if (flag == "--no-db") {
      o.no_db = true;
    } else if (flag == "--bpf-mode") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      if (*v == "auto") {
        o.mode = bpf::attach_mode::automatic;
      } else if (*v == "tp_btf") {
        o.mode = bpf::attach_mode::tp_btf;
      } else if (*v == "raw_tp") {
        o.mode = bpf::attach_mode::raw_tp;
      } else {
        return make_error("--bpf-mode must be auto, tp_btf or raw_tp, got '" + *v + "'");
      }
    } else if (flag == "--delay-clock") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      if (*v == "monotonic") {
        o.delay_rq_clock = false;
      } else if (*v == "runqueue") {
        o.delay_rq_clock = true;
      } else {
        return make_error("--delay-clock must be monotonic or runqueue, got '" + *v + "'");
      }
    } else if (flag == "--live-read") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      if (*v == "auto") {
        o.read = bpf::live_read::automatic;
      } else if (*v == "dirty-list") {
        o.read = bpf::live_read::dirty_list;
      } else if (*v == "iterator") {
        o.read = bpf::live_read::iterator;
      } else {
        return make_error("--live-read must be auto, dirty-list or iterator, got '" + *v + "'");
      }
    } else if (flag == "--keep-raw" || flag == "--keep-1m" || flag == "--keep-1h") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      auto d = parse_keep(flag, *v);
      if (!d) {
        return d.err();
      }
      (flag == "--keep-raw"  ? o.keep.keep_raw_ns
       : flag == "--keep-1m" ? o.keep.keep_1m_ns
                             : o.keep.keep_1h_ns) = *d;
    } else if (flag == "--max-size") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      auto n = parse_size(flag, *v);
      if (!n) {
        return n.err();
      }
      o.keep.max_bytes = *n;
    } else if (flag == "--graveyard-entries" || flag == "--task-hash-entries" ||
               flag == "--dirty-list-entries") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      auto n = detail::parse_u64(flag, *v, 16, 1U << 22);
      if (!n) {
        return n.err();
      }
      (flag == "--graveyard-entries"   ? o.graveyard_entries
       : flag == "--task-hash-entries" ? o.task_hash_entries
                                       : o.dirty_list_entries) = static_cast<std::uint32_t>(*n);
    } else if (flag == "-g" || flag == "--group") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      std::size_t start = 0;
      for (;;) {
        const auto comma = v->find(',', start);
        o.group_tokens.push_back(v->substr(start, comma - start));
        if (comma == std::string::npos) {
          break;
        }
        start = comma + 1;
      }
    } else if (flag == "-c" || flag == "--comm" || flag == "--global-comm" || flag == "--cgroup") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      auto &list = flag == "--global-comm" ? o.global_comm : flag == "--cgroup" ? o.cgroup : o.comm;
      list.push_back(*v); // a comma inside a regex is not a separator (upstream)
    } else if (flag == "-p" || flag == "--pid") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      auto n = detail::parse_u64(flag, *v, 0, 4194304);
      if (!n) {
        return n.err();
      }
      o.pid = static_cast<std::uint32_t>(*n);
    } else if (flag == "-l" || flag == "--min-latency") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      auto n = detail::parse_u64(flag, *v, 0, 3'600'000'000ULL);
      if (!n) {
        return n.err();
      }
      o.min_latency_us = *n;
    } else if (flag == "--view") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      if (*v != "compact" && *v != "tables") {
        return make_error("--view must be compact or tables, got '" +
                          text::escape_for_terminal(*v) + "'");
      }
      o.view = *v;
    } else if (flag == "--rt-priority") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      auto n = detail::parse_u64(flag, *v, 0, 99);
      if (!n) {
        return n.err();
      }
      o.rt_priority = static_cast<std::uint32_t>(*n);
    } else if (flag == "-C" || flag == "--no-collapse") {
      if (o.display != display_mode::detailed) {
        o.display = display_mode::grouped;
      }
    } else if (flag == "-d" || flag == "--detailed") {
      o.display = display_mode::detailed; // -d takes priority over -C
    } else if (flag == "--topology") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      o.topology_file = *v;
    } else if (flag == "--gen-topology") {
      o.gen_topology = true;
    } else if (flag == "--perf-list") {
      o.perf_list = true;
    } else if (flag == "--stats") {
      o.stats = true;
    } else if (flag == "-v" || flag == "--verbose") {
      o.verbose = true;
    } else if (flag == "-h" || flag == "--help") {
      o.help = true;
    } else if (flag == "-V" || flag == "--version") {
      o.version = true;
    } else {
      return make_error("unknown option '" + a + "' (see rschedd --help)");
    }
  }
  if (o.no_db && o.db_path != store::default_db_path) {
    return make_error("--db and --no-db exclude each other");
  }
  auto g = parse_groups(o.group_tokens);
  if (!g) {
    return g.err();
  }
  o.groups = *g;
  return o;
}

} // namespace rsched::rschedd
