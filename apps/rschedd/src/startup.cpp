// rschedd's startup steps (startup.hpp).
#include "rsched/rschedd/startup.hpp"

#include "rsched/abi/sched_abi.h"
#include "rsched/base/text.hpp"
#include "rsched/topology/json.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <fstream>
#include <sstream>

namespace rsched::rschedd {

namespace {

std::string escaped_list(const std::vector<std::string> &v) {
  std::string s;
  for (const auto &x : v) {
    s += (s.empty() ? "" : ", ") + text::escape_for_terminal(x);
  }
  return s;
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
    add(g.pressure, "pressure");
    active += "  - Metric groups: " + escaped_list(names) + "\n";
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
