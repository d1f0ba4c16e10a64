// rschedd: attaches rsched's BPF programs, and every interval turns the kernel-side counters into
// per-thread and per-CPU deltas, records them into SQLite and (on a terminal) shows them live.
#include "rsched/base/text.hpp"
#include "rsched/bpf/program.hpp"
#include "rsched/collect/cgroup.hpp"
#include "rsched/collect/perf.hpp"
#include "rsched/collect/source.hpp"
#include "rsched/rschedd/filter.hpp"
#include "rsched/rschedd/live.hpp"
#include "rsched/rschedd/options.hpp"
#include "rsched/rschedd/recorder.hpp"
#include "rsched/rschedd/render.hpp"
#include "rsched/schedstat/delta.hpp"
#include "rsched/schedstat/render.hpp"
#include "rsched/schedstat/schedstat.hpp"
#include "rsched/store/writer.hpp"
#include "rsched/topology/json.hpp"
#include "rsched/topology/migration.hpp"
#include "rsched/topology/topology.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <malloc.h>
#include <map>
#include <memory>
#include <optional>
#include <sched.h>
#include <sstream>
#include <string>
#include <string_view>
#include <unistd.h>
#include <utility>
#include <vector>

namespace {

using namespace rsched;
using namespace rsched::rschedd;

// A note on stderr that can never stop the recorder: stderr may be a closed pipe
// (`rschedd 2>&1 | head -1`) or a full one; fmt::print would throw on the failed write.
template <typename... T> void note(fmt::format_string<T...> f, T &&...args) {
  std::string s;
  try {
    s = fmt::format(f, std::forward<T>(args)...);
  } catch (...) {
    return;
  }
  std::string_view left = s;
  while (!left.empty()) {
    const ssize_t n = ::write(STDERR_FILENO, left.data(), left.size());
    if (n <= 0) {
      if (n < 0 && errno == EINTR) {
        continue;
      }
      return; // best effort
    }
    left.remove_prefix(static_cast<std::size_t>(n));
  }
}

std::int64_t clock_ns(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// rschedd's resident set size, bytes (/proc/self/statm: pages).
std::optional<std::int64_t> self_rss_bytes() {
  std::ifstream in("/proc/self/statm");
  std::int64_t size = 0;
  std::int64_t resident = 0;
  if (!(in >> size >> resident)) {
    return std::nullopt;
  }
  return resident * sysconf(_SC_PAGESIZE);
}

std::string read_boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

// Reads a whole file; nullopt when it cannot be read.
std::optional<std::string> slurp(const std::string &path) {
  std::ifstream in(path);
  if (!in) {
    return std::nullopt;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

result<topology::topology> load_topology(const rschedd::options &opt) {
  if (opt.topology_file.empty()) {
    return topology::load("/sys");
  }
  auto text = slurp(opt.topology_file);
  if (!text) {
    return make_error("cannot read topology file " + opt.topology_file);
  }
  return topology::from_json(*text);
}

// /proc/sys/kernel/sched_schedstats is switched on while recording and restored afterwards
// (upstream leaves it on).
class schedstats_switch {
public:
  schedstats_switch() {
    auto old = slurp(path_);
    if (old && !old->empty() && (*old)[0] == '0') {
      std::ofstream out(path_);
      out << "1";
      restore_ = static_cast<bool>(out);
    }
  }
  ~schedstats_switch() {
    if (restore_) {
      std::ofstream out(path_);
      out << "0";
    }
  }
  schedstats_switch(const schedstats_switch &) = delete;
  schedstats_switch &operator=(const schedstats_switch &) = delete;

private:
  const char *path_ = "/proc/sys/kernel/sched_schedstats";
  bool restore_ = false;
};

void add_schedstat(store::interval_row &row, const schedstat::deltas &d) {
  for (const auto &c : d.cpus) {
    for (const auto &f : schedstat::cpu_field_layout) {
      const auto v = c.fields.*f.member;
      if (v != 0) {
        row.schedstat_cpu.push_back({c.cpu, std::string(f.name), static_cast<std::int64_t>(v)});
      }
    }
  }
  for (const auto &dom : d.domains) {
    for (const auto &f : dom.fields) {
      if (f.value != 0) {
        row.schedstat_domain.push_back({dom.cpu, dom.index, dom.name, std::string(f.name),
                                        static_cast<std::int64_t>(f.value)});
      }
    }
  }
}

// The store writer as the recorder's sink.
class writer_sink final : public interval_sink {
public:
  explicit writer_sink(store::writer &w) : w_(w) {}
  result<void> write(const store::interval_row &row) override { return w_.write(row); }
  result<void> maintain(std::int64_t now_real_ns) override {
    auto m = w_.maintain(now_real_ns);
    if (!m) {
      return m.err();
    }
    return {};
  }

private:
  store::writer &w_;
};

// Upstream's startup banner (for stderr: stdout is the live display).
std::string banner(const rschedd::options &opt) {
  std::string out = "Starting rsched\n";
  std::string active;
  auto list = [](const std::vector<std::string> &v) {
    std::string s;
    for (const auto &x : v) {
      s += (s.empty() ? "" : ", ") + text::escape_for_terminal(x);
    }
    return s;
  };
  auto plural = [](std::size_t n, const char *one, const char *many) {
    return n == 1 ? one : many;
  };
  if (!opt.comm.empty()) {
    active += fmt::format("  - Command {}: {}\n", plural(opt.comm.size(), "pattern", "patterns"),
                          list(opt.comm));
  }
  if (!opt.global_comm.empty()) {
    active +=
        fmt::format("  - Global command {}: {}\n",
                    plural(opt.global_comm.size(), "pattern", "patterns"), list(opt.global_comm));
  }
  if (!opt.cgroup.empty()) {
    active += fmt::format("  - Cgroup {}: {}\n", plural(opt.cgroup.size(), "pattern", "patterns"),
                          list(opt.cgroup));
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
  const bool default_groups = opt.group_tokens.empty() ||
                              (opt.group_tokens.size() == 1 && opt.group_tokens[0] == "latency");
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
      std::string perf = "perf=";
      std::vector<std::string> events;
      if (g.ipc) {
        events.emplace_back("ipc");
      }
      events.insert(events.end(), g.events.begin(), g.events.end());
      for (std::size_t i = 0; i < events.size(); ++i) {
        perf += (i ? "," : "") + text::escape_for_terminal(events[i]);
      }
      names.push_back(perf);
    }
    add(g.schedstat, "schedstat");
    add((g.groups & RSCHED_G_WAKING) != 0, "waking");
    add((g.groups & RSCHED_G_MIGRATION) != 0, "migration");
    active += "  - Metric groups: " + list(names) + "\n";
  }
  if (!active.empty()) {
    out += "Options active:\n" + active;
  }
  return out;
}

int run(const rschedd::options &opt) {
  // Signals are taken synchronously (sigtimedwait) so that an interrupt ends the current
  // interval cleanly: it is recorded, the database is closed, the exit status is 0.
  // SIGHUP stops the run unless it is ignored (nohup): a blocked signal is queued even when
  // ignored, so it must then stay out of the set. SIGPIPE is ignored: a closed pipe on stderr or
  // stdout (`rschedd 2>&1 | head -1`) must not kill the recorder before the final interval is
  // written; the write fails with EPIPE instead, and notes are best effort.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  struct sigaction hup {};
  if (sigaction(SIGHUP, nullptr, &hup) != 0 || hup.sa_handler != SIG_IGN) {
    sigaddset(&sigs, SIGHUP);
  }
  std::signal(SIGPIPE, SIG_IGN);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  std::uint32_t groups = opt.groups.groups;
  bpf::options bo;
  // Startup notes are printed once the programs are loaded: a failure to load is then the
  // only line (what is missing), as promised.
  std::string notes = banner(opt);

  // perf: resolve every event first (a bad name is an error), then open the counters. Where
  // the PMU is missing (as in most VMs) the IPC set fails: one line, and the rest keeps running.
  bool ipc = opt.groups.ipc;
  std::vector<std::string> event_names;
  std::vector<store::perf_event_def> event_defs;
  std::vector<collect::counter_set> counter_sets;
  if ((groups & RSCHED_G_PERF) != 0) {
    std::vector<collect::event_spec> generic;
    for (const auto &name : opt.groups.events) {
      auto e = collect::resolve_event(name);
      if (!e) {
        // An unknown group or event name is bad usage, as any other bad flag.
        note("rschedd: {}\n", e.err().msg);
        return 2;
      }
      generic.push_back(*e);
    }
    auto cpus = collect::online_cpus();
    if (!cpus) {
      note("rschedd: {}\n", cpus.err().msg);
      return 1;
    }
    if (ipc) {
      auto set = collect::counter_set::open({}, true, *cpus);
      if (set) {
        counter_sets.push_back(std::move(*set));
      } else {
        notes += fmt::format("rschedd: perf=ipc unavailable: {}\n", set.err().msg);
        ipc = false;
      }
    }
    if (!generic.empty()) {
      auto set = collect::counter_set::open(generic, false, *cpus);
      if (set) {
        for (const auto &g : generic) {
          event_names.push_back(g.name);
          event_defs.push_back({g.name, g.type, g.config});
        }
        counter_sets.push_back(std::move(*set));
      } else {
        notes += fmt::format("rschedd: perf events unavailable: {}\n", set.err().msg);
      }
    }
    if (ipc) {
      notes += fmt::format("CPU performance counters enabled (IPC)\n");
    }
    if (!event_names.empty()) {
      std::string names;
      for (const auto &n : event_names) {
        names += (names.empty() ? "" : ", ") + text::escape_for_terminal(n);
      }
      notes += fmt::format("Generic perf events: {}\n", names);
    }
    for (const auto &set : counter_sets) {
      bo.counter_mask |= set.slot_mask();
      for (const auto &f : set.fds()) {
        bo.counter_fds.push_back({f.cpu, f.slot, f.fd});
      }
    }
    if (bo.counter_mask == 0) {
      groups &= ~static_cast<std::uint32_t>(RSCHED_G_PERF);
    }
  }

  render_options ropt;
  ropt.mode = opt.display == display_mode::detailed  ? output_mode::detailed
              : opt.display == display_mode::grouped ? output_mode::grouped
                                                     : output_mode::collapsed;
  filter_options fo;
  fo.pid = opt.pid;
  fo.comm = opt.comm;
  fo.global_comm = opt.global_comm;
  fo.cgroup = opt.cgroup;
  fo.min_latency_us = opt.min_latency_us;
  fo.latency_on = (groups & RSCHED_G_LATENCY) != 0;
  auto filt = filter::make(fo);
  if (!filt) {
    note("rschedd: {}\n", filt.err().msg);
    return 2;
  }
  if ((groups & RSCHED_G_MIGRATION) != 0) {
    auto topo = load_topology(opt);
    if (!topo) {
      note("rschedd: {}\n", topo.err().msg);
      return 1;
    }
    notes += fmt::format("CPU topology: {} dies/CCX, {} NUMA nodes\n", topo->num_dies(),
                         topo->num_numa_nodes());
    ropt.num_dies = topo->num_dies();
    ropt.num_numa_nodes = topo->num_numa_nodes();
    const auto tables = topology::make_cpu_tables(*topo);
    bo.cpu_to_die = tables.cpu_to_die;
    bo.cpu_to_numa = tables.cpu_to_numa;
  }
  // schedstat: read in user space; where the file is missing, one line and the rest runs.
  std::optional<schedstat::snapshot> schedstat_prev;
  std::optional<schedstats_switch> schedstat_on;
  if (opt.groups.schedstat) {
    schedstat_on.emplace();
    auto s = schedstat::read();
    if (!s) {
      notes += fmt::format("rschedd: schedstat group unavailable: {}\n", s.err().msg);
      schedstat_on.reset();
    } else {
      schedstat_prev = std::move(*s);
    }
  }
  bo.mode = opt.mode;
  bo.groups = groups;
  bo.graveyard_entries = opt.graveyard_entries;
  bo.task_hash_entries = opt.task_hash_entries;
  bo.read = opt.read;
  bo.dirty_list_entries = opt.dirty_list_entries;
  bo.delay_rq_clock = opt.delay_rq_clock;
  bo.verbose = opt.verbose || std::getenv("RSCHED_BPF_VERBOSE") != nullptr;
  auto prog = bpf::program::load(bo);
  if (!prog) {
    note("rschedd: {}\n", prog.err().msg);
    return 1;
  }

  std::optional<store::writer> db;
  if (!opt.no_db) {
    auto w = store::writer::open(opt.db_path);
    if (!w) {
      note("rschedd: {}\n", w.err().msg);
      return 1;
    }
    db.emplace(std::move(*w));
    db->set_retention(opt.keep);
  }
  note("{}", notes);

  const bool tty = isatty(STDOUT_FILENO) == 1;
  note("rschedd: {} BPF programs attached ({} mode{}); {} every {} s{}\n", prog->attached().size(),
       bpf::to_string(prog->mode()),
       prog->mode() == bpf::attach_mode::tp_btf
           ? fmt::format(", {} reads", bpf::to_string(prog->read_mode()))
           : std::string(),
       opt.no_db ? std::string("live display only") : "recording to " + opt.db_path, opt.interval_s,
       opt.run_time_s ? fmt::format(" for {} s", *opt.run_time_s) : std::string());

  collect::bpf_source src(*prog);
  collect::cgroup_resolver cgroups;
  const std::int64_t interval_ns = static_cast<std::int64_t>(opt.interval_s) * 1'000'000'000;

  recorder_config rc;
  rc.interval_ns = interval_ns;
  // Migration and generic events need 1-second ticks for their per-second rate histograms.
  rc.per_second = (groups & RSCHED_G_MIGRATION) != 0 || !event_names.empty();
  if (opt.run_time_s) {
    rc.run_ns = static_cast<std::int64_t>(*opt.run_time_s) * 1'000'000'000;
  }
  rc.groups = groups;
  rc.ipc = ipc;
  rc.dies = ropt.num_dies;
  rc.numa_nodes = ropt.num_numa_nodes;
  rc.events = event_defs;
  if ((groups & RSCHED_G_LATENCY) != 0) {
    rc.delay_clock = opt.delay_rq_clock ? "runqueue" : "monotonic";
  }
  rc.boot_id = read_boot_id();
  rc.db_path = opt.no_db ? std::string() : opt.db_path;
  rc.stats = opt.stats;
  rc.note = [](std::string_view s) { note("{}", s); };
  rc.cgroup_path = [&](std::uint64_t id) { return cgroups.path_of(id); };
  rc.new_interval = [&] { cgroups.new_interval(); };

  // What the recorder does not collect itself: perf counter times, schedstat deltas, and the
  // daemon's own health (CPU time, RSS, its BPF programs' run time).
  std::map<std::pair<unsigned, unsigned>, std::pair<std::uint64_t, std::uint64_t>> counter_prev;
  std::string live_schedstat;
  std::int64_t cpu_prev = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
  // The programs were loaded by this process, so their run counts start at zero: the first
  // interval's samples (everything since attach) are matched by everything the programs ran.
  auto bpf_prev = prog->run_stats();
  if (bpf_prev) {
    *bpf_prev = {};
  }
  rc.enrich = [&](store::interval_row &row) {
    for (const auto &set : counter_sets) {
      auto times = set.read_times();
      if (!times) {
        continue;
      }
      for (const auto &t : *times) {
        auto &prev = counter_prev[{t.cpu, t.slot}];
        row.counter_times.push_back(
            {t.cpu, t.name, t.enabled_ns - prev.first, t.running_ns - prev.second});
        prev = {t.enabled_ns, t.running_ns};
      }
    }
    if (schedstat_prev) {
      auto cur = schedstat::read();
      if (cur) {
        auto d = schedstat::delta(*schedstat_prev, *cur);
        if (d) {
          add_schedstat(row, *d);
          live_schedstat = schedstat::render(*d);
        }
        schedstat_prev = std::move(*cur);
      }
    }
    const std::int64_t cpu_now = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    row.cpu_ns = cpu_now - cpu_prev;
    cpu_prev = cpu_now;
    row.rss_bytes = self_rss_bytes();
    const auto bpf_now = prog->run_stats();
    if (bpf_now && bpf_prev) {
      row.bpf_run_ns = static_cast<std::int64_t>(bpf_now->run_time_ns - bpf_prev->run_time_ns);
      row.bpf_run_cnt = static_cast<std::int64_t>(bpf_now->run_cnt - bpf_prev->run_cnt);
    }
    bpf_prev = bpf_now;
  };

  // The live view runs on its own thread and never holds up recording (live.hpp).
  std::unique_ptr<live_display> display;
  if (tty) {
    if (auto out = terminal_out::open_stdout()) {
      live_config lc;
      lc.view = opt.view ? (*opt.view == "tables" ? view_kind::tables : view_kind::compact)
                : opt.display != display_mode::collapsed ? view_kind::tables
                                                         : view_kind::compact;
      ropt.groups = groups;
      ropt.ipc = ipc;
      lc.ropt = ropt;
      lc.filt = *filt;
      lc.ipc = ipc;
      lc.event_names = event_names;
      lc.window_ns = std::max<std::int64_t>(5'000'000'000, interval_ns);
      display = std::make_unique<live_display>(std::move(lc), std::move(*out));
      rc.show = [&](live_frame &&f) {
        if (!live_schedstat.empty()) {
          f.schedstat_table = live_schedstat;
        }
        display->offer(std::move(f));
      };
    }
  }
  // The recorder's own priority: its work per tick is small and bounded, and with SCHED_FIFO
  // it keeps its cadence when the CPUs are saturated (measured: intervals of up to 2.5 s under
  // a switch storm on 2 CPUs at SCHED_OTHER, within 5 ms at SCHED_FIFO 1; docs/PERFORMANCE.md).
  // Set after the display thread exists: that one runs at nice 10, SCHED_OTHER.
  if (opt.rt_priority > 0) {
    sched_param sp{};
    sp.sched_priority = static_cast<int>(opt.rt_priority);
    if (sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &sp) != 0) {
      note("rschedd: cannot run the recorder at SCHED_FIFO {} ({}); it keeps normal "
           "scheduling and may fall behind when the CPUs are saturated\n",
           opt.rt_priority, std::strerror(errno));
    }
  }

  system_clock clock(sigs);
  std::optional<writer_sink> sink;
  if (db) {
    sink.emplace(*db);
  }
  recorder rec(std::move(rc), src, clock, sink ? &*sink : nullptr);
  rec.setup();
  while (rec.step()) {
  }
  display.reset(); // within ~100 ms, whatever the terminal is doing
  return rec.finish();
}

} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  auto opt = rsched::rschedd::parse_options(args);
  if (!opt) {
    note("rschedd: {}\n", opt.err().msg);
    return 2;
  }
  if (opt->help) {
    fmt::print("{}", rsched::rschedd::usage_text);
    return 0;
  }
  if (opt->version) {
    fmt::print("rschedd 0.1.0\n");
    return 0;
  }
  if (opt->perf_list) {
    fmt::print("{}", rsched::collect::perf_list());
    return 0;
  }
  if (opt->gen_topology) { // no BPF, no root
    auto topo = rsched::topology::load("/sys");
    if (!topo) {
      note("rschedd: {}\n", topo.err().msg);
      return 1;
    }
    fmt::print("{}\n", rsched::topology::to_json(*topo));
    return 0;
  }
  // Every interval builds and frees a few MB of per-thread buffers. glibc would hand them back
  // to the kernel each time (mmap for large blocks, trimming the heap top) and fault every page
  // in again the next second: keep them in the heap instead (measured: a fifth of rschedd's CPU
  // time at 1000 threads went to those page faults).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 128 << 20);
  try {
    return run(*opt);
  } catch (const std::exception &e) {
    note("rschedd: {}\n", e.what());
    return 1;
  }
}
