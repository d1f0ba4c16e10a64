// rschedd's startup steps (startup.hpp).
#include "rsched/rschedd/startup.hpp"

#include "rsched/abi/sched_abi.h"
#include "rsched/base/text.hpp"
#include "rsched/topology/json.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <utility>

namespace rsched::rschedd {

namespace {

std::string escaped_list(const std::vector<std::string> &v) {
  std::string s;
  for (const auto &x : v) {
    s += (s.empty() ? "" : ", ") + text::escape_for_terminal(x);
  }
  return s;
}

// A retention as --keep-* takes it: the largest unit that divides it exactly ("2d", "12h",
// "90m"), "forever" for 0.
std::string keep_label(std::int64_t ns) {
  if (ns <= 0) {
    return "forever";
  }
  constexpr std::array<std::pair<std::int64_t, const char *>, 7> units{{{86'400'000'000'000, "d"},
                                                                        {3'600'000'000'000, "h"},
                                                                        {60'000'000'000, "m"},
                                                                        {1'000'000'000, "s"},
                                                                        {1'000'000, "ms"},
                                                                        {1'000, "us"},
                                                                        {1, "ns"}}};
  for (const auto &[per, unit] : units) {
    if (ns % per == 0) {
      return fmt::format("{}{}", ns / per, unit);
    }
  }
  return fmt::format("{}ns", ns);
}

// A size as --max-size takes it: "8G", "500M", "4096"; "none" for 0.
std::string size_label(std::uint64_t bytes) {
  if (bytes == 0) {
    return "none";
  }
  for (const auto &[shift, unit] : {std::pair{40U, "T"}, {30U, "G"}, {20U, "M"}, {10U, "K"}}) {
    if (bytes % (std::uint64_t{1} << shift) == 0) {
      return fmt::format("{}{}", bytes >> shift, unit);
    }
  }
  return std::to_string(bytes);
}

} // namespace

std::string banner(const options &opt) {
  std::string out = "Starting rsched\n";
  std::string active;
  auto plural = [](std::size_t n, const char *one, const char *many) {
    return n == 1 ? one : many;
  };
  if (!opt.comm.empty()) {
    active += fmt::format("  - Command {}: {}\n", plural(opt.comm.size(), "pattern", "patterns"),
                          escaped_list(opt.comm));
  }
  if (!opt.global_comm.empty()) {
    active += fmt::format("  - Global command {}: {}\n",
                          plural(opt.global_comm.size(), "pattern", "patterns"),
                          escaped_list(opt.global_comm));
  }
  if (!opt.cgroup.empty()) {
    active += fmt::format("  - Cgroup {}: {}\n", plural(opt.cgroup.size(), "pattern", "patterns"),
                          escaped_list(opt.cgroup));
  }
  if (opt.pid) {
    active += fmt::format("  - PID: {}\n", *opt.pid);
  }
  if (opt.min_latency_us > 0) {
    active += fmt::format("  - Minimum latency: {}μs\n", opt.min_latency_us);
  }
  if (opt.display == display_mode::grouped) {
    active += "  - Not collapsing by command name\n";
  }
  if (opt.run_time_s) {
    active += fmt::format("  - Runtime limit: {} seconds\n", *opt.run_time_s);
  }
  const auto &g = opt.groups;
  const bool default_groups = opt.group_tokens.empty();
  if (!default_groups) {
    std::vector<std::string> names;
    auto add = [&](bool on, const char *n) {
      if (on) {
        names.emplace_back(n);
      }
    };
    add((g.groups & RSCHED_G_LATENCY) != 0, "latency");
    add((g.groups & RSCHED_G_SLICE) != 0, "slice");
    add((g.groups & RSCHED_G_SLEEP) != 0, "sleep");
    if ((g.groups & RSCHED_G_PERF) != 0) {
      std::vector<std::string> events;
      if (g.ipc) {
        events.emplace_back("ipc");
      }
      events.insert(events.end(), g.events.begin(), g.events.end());
      std::string perf = "perf=";
      for (std::size_t i = 0; i < events.size(); ++i) {
        perf += (i ? "," : "") + events[i];
      }
      names.push_back(perf);
    }
    add(g.schedstat, "schedstat");
    add((g.groups & RSCHED_G_WAKING) != 0, "waking");
    add((g.groups & RSCHED_G_MIGRATION) != 0, "migration");
    add((g.groups & RSCHED_G_BLAME) != 0, "blame");
    add((g.groups & RSCHED_G_WAKEUP) != 0, "wakeup");
    add(g.pressure, "pressure");
    active += "  - Metric groups: " + escaped_list(names) + "\n";
  }
  if (!opt.no_db) {
    // Always shown: how long each tier is kept decides what can still be asked tomorrow.
    active += fmt::format("  - Retention: raw {}, 1m {}, 1h {}; size cap {}\n",
                          keep_label(opt.keep.keep_raw_ns), keep_label(opt.keep.keep_1m_ns),
                          keep_label(opt.keep.keep_1h_ns), size_label(opt.keep.max_bytes));
  }
  if (!active.empty()) {
    out += "Options active:\n" + active;
  }
  return out;
}

result<perf_counters> open_perf(const group_selection &g, std::uint32_t groups) {
  perf_counters pc;
  if ((groups & RSCHED_G_PERF) == 0) {
    return pc;
  }
  // Every event is resolved first (a bad name is an error), then the counters are opened.
  std::vector<collect::event_spec> generic;
  for (const auto &name : g.events) {
    auto e = collect::resolve_event(name);
    if (!e) {
      // -g wakeup: a group that does not exist, not a perf event the user meant.
      if (e.err().errnum == ENOENT &&
          std::find(g.bare_events.begin(), g.bare_events.end(), name) != g.bare_events.end()) {
        return make_error(fmt::format("unknown metric group '{}' in -g: expected {} (or a perf "
                                      "event name, see --perf-list)",
                                      text::escape_for_terminal(name), group_names),
                          EINVAL);
      }
      return make_error(e.err().msg, EINVAL);
    }
    generic.push_back(*e);
  }
  auto cpus = collect::online_cpus();
  if (!cpus) {
    return cpus.err();
  }
  if (g.ipc) {
    auto set = collect::counter_set::open({}, true, *cpus);
    if (set) {
      pc.sets.push_back(std::move(*set));
      pc.ipc = true;
      pc.notes += "CPU performance counters enabled (IPC)\n";
    } else {
      pc.notes += fmt::format("rschedd: perf=ipc unavailable: {}\n", set.err().msg);
    }
  }
  if (!generic.empty()) {
    auto set = collect::counter_set::open(generic, false, *cpus);
    if (set) {
      for (const auto &e : generic) {
        pc.event_names.push_back(e.name);
        pc.event_defs.push_back({e.name, e.type, e.config});
      }
      pc.sets.push_back(std::move(*set));
      pc.notes += fmt::format("Generic perf events: {}\n", escaped_list(pc.event_names));
    } else {
      pc.notes += fmt::format("rschedd: perf events unavailable: {}\n", set.err().msg);
    }
  }
  for (const auto &set : pc.sets) {
    pc.slot_mask |= set.slot_mask();
  }
  return pc;
}

result<topology::topology> load_topology(const options &opt) {
  if (opt.topology_file.empty()) {
    return topology::load("/sys");
  }
  std::ifstream in(opt.topology_file);
  if (!in) {
    return make_error("cannot read topology file " + text::escape_for_terminal(opt.topology_file));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return topology::from_json(ss.str());
}

} // namespace rsched::rschedd
