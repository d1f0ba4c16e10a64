// rschedd's command line: -g groups and every flag (hand-written; see options.hpp).
#include "rsched/rschedd/options.hpp"

#include "rsched/base/text.hpp"
#include "rsched/base/units.hpp"
#include "rsched/rschedd/metrics_endpoint.hpp"

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rsched::rschedd {

result<group_selection> parse_groups(const std::vector<std::string> &tokens) {
  group_selection g;
  if (tokens.empty()) {
    return g;
  }
  g.groups = 0;
  g.pressure = false; // an explicit -g replaces the default groups
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
    } else if (t == "blame") {
      // Blame divides the scheduling delay among what ran meanwhile: it needs the delay.
      g.groups |= RSCHED_G_BLAME | RSCHED_G_LATENCY;
    } else if (t == "wakeup") {
      // A thread's time is running, runnable and asleep: the runnable part is the delay (and
      // the store keeps a thread's rows under its histograms: without one, nothing is kept).
      g.groups |= RSCHED_G_WAKEUP | RSCHED_G_LATENCY;
    } else if (t == "schedstat") {
      g.schedstat = true;
    } else if (t == "pressure") {
      g.pressure = true;
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
      g.pressure = true;
      // upstream: `most` adds ipc only when no perf event was named yet (order matters)
      if (!g.ipc && g.events.empty()) {
        add_event("ipc");
      }
      if (t == "all") {
        g.groups |= RSCHED_G_WAKING | RSCHED_G_BLAME;
      }
    } else if (t.empty()) {
      return make_error("empty metric group in -g");
    } else {
      // anything else is tried as a perf event name (resolved later, with a clear error: an
      // unknown metric group when it is no perf event either)
      add_event(t);
      g.bare_events.push_back(t);
    }
  }
  if (g.events.size() > RSCHED_MAX_GENERIC_EVENTS) {
    return make_error("Too many generic perf events (" + std::to_string(g.events.size()) +
                      ", max 8)");
  }
  return g;
}

namespace detail {
static result<std::uint64_t> parse_u64(const std::string &flag, const std::string &v,
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

// "2d", "30d", "12h", "0" (forever): a duration of the time grammar (rsched-sql's dur()) with
// its unit, and nothing around it (rsched::units). A bare number is refused: the grammar would
// read it as seconds, and "--keep-raw 2" meant as two days kept two seconds of history.
static result<std::int64_t> parse_keep(const std::string &flag, const std::string &v) {
  if (v == "0") {
    return std::int64_t{0};
  }
  if (units::bare_number(v)) {
    return make_error(flag + " " + v + ": a duration needs a unit (" + v + "d? " + v +
                      "h?): s, m, h, d, w");
  }
  auto d = units::parse_duration(v);
  if (!d) {
    return make_error(flag + " '" + text::escape_for_terminal(v) + "': " + d.err().msg);
  }
  if (*d <= 0) {
    return make_error(flag + " needs a duration such as 2d, 12h or 30m (0 = forever), got '" +
                      text::escape_for_terminal(v) + "'");
  }
  return *d;
}

// Why a value that looks right is refused: white space or a control byte around or in it.
static std::string unclean_note(const std::string &v) {
  return units::clean(v) ? "" : " (a space, tab, newline or control character around or in it)";
}

// "8G", "512M", "64K", "0" (no cap): rsched::units::parse_size, binary multiples; a bare number
// other than 0 is refused ("--max-size 8" capped the history at 8 bytes).
static result<std::uint64_t> parse_size(const std::string &flag, const std::string &v) {
  auto n = units::parse_size(v);
  if (!n) {
    return make_error(flag + " '" + text::escape_for_terminal(v) + "': " + n.err().msg);
  }
  return *n;
}

result<options> parse_options(const std::vector<std::string> &args) {
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
    } else if (flag == "--db-group") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      o.db_group = *v;
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
    } else if (flag == "--recorder-nice") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      int n = 0;
      const auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
      if (v->empty() || ec != std::errc() || p != v->data() + v->size() || n < -20 || n > 19) {
        return make_error("--recorder-nice '" + text::escape_for_terminal(*v) +
                          "': a nice value from -20 to 19");
      }
      o.recorder_nice = n;
    } else if (flag == "--recorder-slice-us") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      std::uint32_t n = 0;
      const auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
      if (v->empty() || ec != std::errc() || p != v->data() + v->size() ||
          (n != 0 && (n < 100 || n > 100000))) {
        return make_error("--recorder-slice-us '" + text::escape_for_terminal(*v) +
                          "': 0 (the kernel's default) or 100 to 100000 microseconds");
      }
      o.recorder_slice_us = n;
    } else if (flag == "--metrics-listen") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      if (auto addr = parse_listen_address(*v); !addr) {
        return addr.err();
      }
      o.metrics_listen = *v;
    } else if (flag == "--metrics-textfile") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      if (v->empty()) {
        return make_error("--metrics-textfile needs a file name");
      }
      o.metrics_textfile = *v;
    } else if (flag == "--metrics-top") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      auto n = detail::parse_u64(flag, *v, 0, 1000);
      if (!n) {
        return n.err();
      }
      o.metrics_top = static_cast<std::uint32_t>(*n);
    } else if (flag == "--flight-recorder") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      auto n = detail::parse_u64(flag, *v, 1, 3600);
      if (!n) {
        return n.err();
      }
      o.flight_seconds = static_cast<std::uint32_t>(*n);
    } else if (flag == "--flight-trigger" || flag == "--flight-trigger-gap") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      auto d = units::parse_duration(*v);
      if (!d || *d <= 0) {
        return make_error(flag + " needs a duration with a unit such as 50ms or 2s, got '" +
                          text::escape_for_terminal(*v) + "'" + unclean_note(*v));
      }
      (flag == "--flight-trigger" ? o.flight_trigger_ns : o.flight_trigger_gap_ns) = *d;
    } else if (flag == "--stack-sleep") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      const bool zero = *v == "0";
      auto d = units::parse_duration(*v);
      if (!zero && (!d || *d <= 0)) {
        return make_error("--stack-sleep needs a duration with a unit such as 1ms or 0.5s (0 = D "
                          "sleeps only), got '" +
                          text::escape_for_terminal(*v) + "'" + unclean_note(*v));
      }
      o.stack_sleep_ns = zero ? 0 : *d;
    } else if (flag == "--flight-keep") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      auto n = detail::parse_u64(flag, *v, 1, 100000);
      if (!n) {
        return n.err();
      }
      o.flight_keep = static_cast<std::uint32_t>(*n);
    } else if (flag == "--flight-max-size") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      auto n = parse_size(flag, *v);
      if (!n) {
        return n.err();
      }
      o.flight_max_bytes = *n;
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
  const bool flight_options =
      o.flight_trigger_ns || o.flight_trigger_gap_ns || o.flight_keep || o.flight_max_bytes;
  if (flight_options && o.flight_seconds == 0) {
    return make_error("--flight-trigger, --flight-trigger-gap, --flight-keep and "
                      "--flight-max-size need --flight-recorder SECONDS");
  }
  if (o.flight_seconds != 0 && o.no_db) {
    return make_error("--flight-recorder keeps its captures beside the database: it needs one "
                      "(not --no-db)");
  }
  auto g = parse_groups(o.group_tokens);
  if (!g) {
    return g.err();
  }
  o.groups = *g;
  if (o.stack_sleep_ns && (o.groups.groups & RSCHED_G_WAKEUP) == 0) {
    return make_error("--stack-sleep is an option of the wakeup group: it needs -g wakeup");
  }
  return o;
}

} // namespace rsched::rschedd
