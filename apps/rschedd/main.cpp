// rschedd: attaches rsched's BPF programs, and every interval turns the kernel-side counters into
// per-thread and per-CPU deltas, records them into SQLite and (on a terminal) shows them live.
#include "rsched/base/text.hpp"
#include "rsched/bpf/program.hpp"
#include "rsched/collect/cgroup.hpp"
#include "rsched/collect/perf.hpp"
#include "rsched/collect/source.hpp"
#include "rsched/flight/program.hpp"
#include "rsched/flight/recorder.hpp"
#include "rsched/rschedd/config.hpp"
#include "rsched/rschedd/enrich.hpp"
#include "rsched/rschedd/filter.hpp"
#include "rsched/rschedd/http_server.hpp"
#include "rsched/rschedd/live.hpp"
#include "rsched/rschedd/metrics_board.hpp"
#include "rsched/rschedd/metrics_state.hpp"
#include "rsched/rschedd/metrics_textfile.hpp"
#include "rsched/rschedd/options.hpp"
#include "rsched/rschedd/recorder.hpp"
#include "rsched/rschedd/startup.hpp"
#include "rsched/store/writer.hpp"
#include "rsched/topology/json.hpp"
#include "rsched/topology/migration.hpp"
#include "rsched/topology/topology.hpp"

#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <grp.h>
#include <memory>
#include <optional>
#include <sched.h>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <unistd.h>
#include <utility>
#include <vector>

namespace {
// struct sched_attr (include/uapi/linux/sched/types.h), which glibc does not declare.
struct sched_attr_v1 {
  std::uint32_t size;
  std::uint32_t sched_policy;
  std::uint64_t sched_flags;
  std::int32_t sched_nice;
  std::uint32_t sched_priority;
  std::uint64_t sched_runtime;
  std::uint64_t sched_deadline;
  std::uint64_t sched_period;
};
} // namespace

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

std::string read_boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

// The group that may read the history (--db-group; docs/SCHEMA.md, "Who can read the history"):
// the named one, which must exist, or by default `rsched` when the install step created it.
result<std::optional<gid_t>> readers_group(const std::optional<std::string> &name) {
  if (name && name->empty()) {
    return std::optional<gid_t>{};
  }
  const std::string want = name ? *name : std::string("rsched");
  std::vector<char> buf(16384);
  struct group gr {};
  struct group *found = nullptr;
  int rc = 0;
  // A group with many members needs more room than the first guess.
  while ((rc = ::getgrnam_r(want.c_str(), &gr, buf.data(), buf.size(), &found)) == ERANGE &&
         buf.size() < (std::size_t{1} << 24)) {
    buf.resize(buf.size() * 4);
  }
  if (found != nullptr) {
    return std::optional<gid_t>{gr.gr_gid};
  }
  if (!name) {
    return std::optional<gid_t>{}; // no rsched group here: root alone reads the history
  }
  return make_error(fmt::format("--db-group {}: {}", text::escape_for_terminal(want),
                                rc != 0 ? std::strerror(rc) : "no such group"));
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
  result<void> note_lost(std::int64_t start_ns, std::int64_t end_ns, std::uint64_t intervals,
                         const std::string &error) override {
    return w_.note_write_failure(start_ns, end_ns, intervals, error);
  }

private:
  store::writer &w_;
};

// Wires the parts: `cfg` is what the options say (config.hpp); what only the machine can tell
// (the readers' group, the perf counters, the topology, the boot id) is added here. The startup
// steps (banner, open_perf, load_topology) read `opt`.
// Tests only (tests/bpf/accounting_test.cpp): RSCHED_TEST_HIDE_SWITCH_INS=N makes every Nth
// switch to a thread named "rs-hide*" reach no BPF program (bpf::options::test_hide_every), to
// stage a switch-in no tracepoint reported. 0 when it is unset.
result<std::uint32_t> test_hide_every_from_env() {
  const char *h = std::getenv("RSCHED_TEST_HIDE_SWITCH_INS");
  if (h == nullptr || *h == '\0') {
    return std::uint32_t{0};
  }
  char *end = nullptr;
  errno = 0;
  const unsigned long n = std::strtoul(h, &end, 10);
  if (*end != '\0' || errno != 0 || n == 0 || n > UINT32_MAX || *h == '-') {
    return make_error(
        fmt::format("RSCHED_TEST_HIDE_SWITCH_INS must be a whole number from 1 to {} (got '{}')",
                    UINT32_MAX, h));
  }
  return static_cast<std::uint32_t>(n);
}

int run(const rschedd::options &opt, daemon_config cfg) {
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
  // SIGUSR1 asks the flight recorder for a capture (taken in the recorder's wait). Without the
  // recorder it is one note and ignored: its default action would end the run unrecorded.
  sigset_t blocked = sigs;
  sigaddset(&blocked, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &blocked, nullptr);

  std::uint32_t groups = cfg.bpf.groups;
  // Before anything is loaded: a --db-group that does not exist is the only line.
  if (cfg.store) {
    auto g = readers_group(cfg.store->group_name);
    if (!g) {
      note("rschedd: {}\n", g.err().msg);
      return 1;
    }
    cfg.store->open.group = *g;
    // A database in a place another user controls (their file, link or directory): refused
    // before anything is loaded; writer::open checks again as it opens.
    if (auto r = store::check_place(cfg.store->path, *g); !r) {
      note("rschedd: {}\n", r.err().msg);
      return 1;
    }
  }

  // Prometheus: the endpoint binds before anything is loaded, so a taken port is the only line.
  // Its threads start here, before the recorder sets its own priority (they keep the normal
  // policy at nice 10).
  metrics_board board;
  std::optional<metrics_state> mstate;
  std::unique_ptr<metrics_server> server;
  if (cfg.metrics.on()) {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    cfg.metrics.state.start_ns = static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
    mstate.emplace(cfg.metrics.state);
    board.publish(*mstate);
  }
  if (cfg.metrics.listen) {
    auto srv = metrics_server::start(*cfg.metrics.listen, board);
    if (!srv) {
      note("rschedd: {}\n", srv.err().msg);
      return 1;
    }
    server = std::move(*srv);
  }

  bpf::options &bo = cfg.bpf;
  // Startup notes are printed once the programs are loaded: a failure to load is then the
  // only line (what is missing), as promised.
  std::string notes = banner(opt);

  // perf: an unknown event name is bad usage (2); a missing PMU is one line and the rest runs.
  auto perf = open_perf(opt.groups, groups);
  if (!perf) {
    note("rschedd: {}\n", perf.err().msg);
    return perf.err().errnum == EINVAL ? 2 : 1;
  }
  notes += perf->notes;
  const bool ipc = perf->ipc;
  const std::vector<std::string> &event_names = perf->event_names;
  bo.counter_mask = perf->slot_mask;
  for (const auto &set : perf->sets) {
    for (const auto &f : set.fds()) {
      bo.counter_fds.push_back({f.cpu, f.slot, f.fd});
    }
  }
  if (bo.counter_mask == 0) {
    groups &= ~static_cast<std::uint32_t>(RSCHED_G_PERF);
  }

  auto filt = filter::make(cfg.filter);
  if (!filt) {
    note("rschedd: {}\n", filt.err().msg);
    return 2;
  }
  int num_dies = 0;
  int num_numa_nodes = 0;
  if ((groups & RSCHED_G_MIGRATION) != 0) {
    auto topo = load_topology(opt);
    if (!topo) {
      note("rschedd: {}\n", topo.err().msg);
      return 1;
    }
    notes += fmt::format("CPU topology: {} dies/CCX, {} NUMA nodes\n", topo->num_dies(),
                         topo->num_numa_nodes());
    num_dies = topo->num_dies();
    num_numa_nodes = topo->num_numa_nodes();
    const auto tables = topology::make_cpu_tables(*topo);
    bo.cpu_to_die = tables.cpu_to_die;
    bo.cpu_to_numa = tables.cpu_to_numa;
  }
  // schedstat: read in user space; where the file is missing, one line and the rest runs.
  std::optional<schedstat_feed> schedstat;
  if (cfg.feeds.schedstat) {
    auto f = schedstat_feed::open();
    if (!f) {
      notes += fmt::format("rschedd: schedstat group unavailable: {}\n", f.err().msg);
    } else {
      schedstat.emplace(std::move(*f));
    }
  }
  // pressure: PSI and CFS throttling; what the machine lacks costs one line each.
  std::optional<pressure_feed> pressure;
  if (cfg.feeds.pressure) {
    std::ifstream mi("/proc/self/mountinfo");
    std::stringstream text;
    text << mi.rdbuf();
    pressure.emplace(pressure::find_sources(text.str()), [](std::string_view s) { note("{}", s); });
    for (const auto &m : pressure->missing()) {
      notes += fmt::format("rschedd: {}\n", m);
    }
    for (const auto &m : pressure->unseen()) {
      notes += fmt::format("rschedd: {}\n", text::escape_for_terminal(m));
    }
  }
  bo.groups = groups;
  bo.verbose = bo.verbose || std::getenv("RSCHED_BPF_VERBOSE") != nullptr;
  if (auto h = test_hide_every_from_env(); !h) {
    note("rschedd: {}\n", h.err().msg);
    return 2;
  } else if (*h != 0) {
    bo.test_hide_every = *h;
    note("rschedd: tests only: every {}th switch to an rs-hide* thread reaches no program\n", *h);
  }
  if (const char *t = std::getenv("RSCHED_TEST_IRQ_TRACEPOINTS"); t != nullptr && *t != '\0') {
    bo.irq_tracepoints = true; // tests only (tests/bpf/wakeup_test.cpp): the fallback path
  }
  auto prog = bpf::program::load(bo);
  if (!prog) {
    note("rschedd: {}\n", prog.err().msg);
    return 1;
  }

  std::optional<store::writer> db;
  if (cfg.store) {
    store::open_options oo = cfg.store->open;
    oo.note = [](std::string_view s) { note("rschedd: {}", s); };
    auto w = store::writer::open(cfg.store->path, oo);
    if (!w) {
      note("rschedd: {}\n", w.err().msg);
      return 1;
    }
    db.emplace(std::move(*w));
    db->set_retention(cfg.store->keep);
  }
  // The flight recorder: its own BPF programs and thread (flight/recorder.hpp); captures beside
  // the database, as protected as it (its mode, at most 0640, and its group).
  std::unique_ptr<flight::recorder> flight_rec;
  std::int64_t last_annotation = 0;
  if (cfg.flight && db) {
    auto fp = flight::program::load(cfg.flight->load);
    if (!fp) {
      note("rschedd: flight recorder: {}\n", fp.err().msg);
      return 1;
    }
    auto &fc = cfg.flight->recorder;
    struct stat st {};
    if (::stat(cfg.store->path.c_str(), &st) == 0) {
      fc.file_mode = st.st_mode & 0640;
      if ((st.st_mode & 0040) != 0) {
        fc.group = st.st_gid;
      }
    }
    fc.note = [](std::string_view s) { note("{}", s); };
    if (auto last = db->last_annotation_id()) {
      last_annotation = *last;
    }
    notes += fmt::format(
        "rschedd: flight recorder: the last {} s of scheduler events ({} programs, {} mode; a "
        "ring of {} MiB a CPU, at most {} MiB a CPU in memory); captures in {}\n",
        fc.span_ns / 1'000'000'000, fp->attached().size(), bpf::to_string(fp->mode()),
        std::size_t{fp->slots_per_cpu()} * sizeof(rsched_flight_event) >> 20,
        fc.max_events_per_cpu * sizeof(rsched_flight_event) >> 20,
        text::escape_for_terminal(fc.dir));
    flight_rec = std::make_unique<flight::recorder>(std::move(*fp), fc);
  }
  // The textfile: written once now, so that a directory that cannot take it is the one line.
  std::unique_ptr<metrics_textfile> textfile;
  if (cfg.metrics.textfile) {
    textfile = std::make_unique<metrics_textfile>(*cfg.metrics.textfile, board,
                                                  [](std::string_view s) { note("{}", s); });
    if (!textfile->flush()) {
      return 1; // the writer noted why
    }
  }
  if (server) {
    notes += fmt::format("rschedd: metrics at http://{}/metrics\n", server->address());
  }
  note("{}", notes);

  recorder_config &rc = cfg.recorder;
  const bool tty = isatty(STDOUT_FILENO) == 1;
  note("rschedd: {} BPF programs attached ({} mode{}); {} every {} s{}\n", prog->attached().size(),
       bpf::to_string(prog->mode()),
       prog->mode() == bpf::attach_mode::tp_btf
           ? fmt::format(", {} reads", bpf::to_string(prog->read_mode()))
           : std::string(),
       cfg.store ? "recording to " + cfg.store->path : std::string("live display only"),
       rc.interval_ns / 1'000'000'000,
       rc.run_ns ? fmt::format(" for {} s", *rc.run_ns / 1'000'000'000) : std::string());

  collect::bpf_source src(*prog);
  collect::cgroup_resolver cgroups;

  // Generic events need 1-second ticks for their per-second rate histograms (as migration does).
  if (!event_names.empty()) {
    rc.per_second = true;
  }
  rc.groups = groups;
  rc.ipc = ipc;
  rc.dies = num_dies;
  rc.numa_nodes = num_numa_nodes;
  rc.events = perf->event_defs;
  rc.boot_id = read_boot_id();
  rc.note = [](std::string_view s) { note("{}", s); };
  rc.cgroup_path = [&](std::uint64_t id) { return cgroups.path_of(id); };
  // Once a minute: the heap trimmed (recorder.hpp, trim_heap).
  rc.new_interval = [&, last_trim = std::chrono::steady_clock::now()]() mutable {
    cgroups.new_interval();
    if (const auto now = std::chrono::steady_clock::now();
        now - last_trim >= std::chrono::minutes(1)) {
      rsched::rschedd::trim_heap();
      last_trim = now;
    }
  };
  if (mstate) {
    rc.done = [&](const store::interval_row &row, const interval_outcome &o) {
      mstate->add(row, o);
      board.publish(*mstate);
    };
  }
  // Once an interval, on this thread (the database's): the annotations that ask for a capture
  // go to the flight recorder, and its finished captures are listed and the oldest removed.
  bool capture_failing = false;
  bool capture_list_failing = false;
  auto flight_tick = [&] {
    if (!flight_rec || !db) {
      return;
    }
    if (auto q = db->capture_requests(last_annotation)) {
      timespec now{};
      clock_gettime(CLOCK_REALTIME, &now);
      const std::int64_t now_ns =
          static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
      for (auto &a : *q) {
        last_annotation = a.id;
        // A mark older than the window (an imported incident, --at in the past) has nothing
        // left to save; one later than now is taken when its time comes.
        if (a.start_ns < now_ns - cfg.flight->recorder.span_ns) {
          note("rschedd: flight recorder: annotation {} is older than the last {} s: not "
               "captured\n",
               a.id, cfg.flight->recorder.span_ns / 1'000'000'000);
          continue;
        }
        flight_rec->request("annotation", a.text, a.id, a.start_ns);
      }
    }
    for (auto &r : flight_rec->take_results()) {
      if (!r.skipped.empty()) {
        note("rschedd: flight recorder: {} ({}): nothing written: {}\n", r.trigger,
             text::escape_for_terminal(r.reason), text::escape_for_terminal(r.skipped));
        continue;
      }
      if (!r.error.empty()) {
        if (!capture_failing) {
          note("rschedd: flight recorder: capture ({}) not saved: {}; recording goes on\n",
               r.trigger, r.error);
        }
        capture_failing = true;
        continue;
      }
      capture_failing = false;
      std::string lossy;
      for (auto c : r.lossy_cpus) {
        lossy += (lossy.empty() ? "" : ",") + std::to_string(c);
      }
      note("rschedd: flight recorder: {} ({}{}): {} events, {} bytes in {}\n", r.trigger,
           text::escape_for_terminal(r.reason),
           r.coalesced == 0 ? std::string()
                            : fmt::format("; and {} later requests within its window", r.coalesced),
           r.events, r.bytes, text::escape_for_terminal(r.file));
      timespec now{};
      clock_gettime(CLOCK_REALTIME, &now);
      store::capture_row row{
          r.start_ns,      r.end_ns,
          r.trigger,       r.reason,
          r.annotation_id, r.file,
          r.bytes,         r.events,
          lossy,           static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec};
      auto added = db->add_capture(row);
      auto gone = added ? db->prune_captures(cfg.flight->keep, cfg.flight->max_bytes)
                        : result<std::vector<std::string>>(added.err());
      if (!gone) {
        if (!capture_list_failing) {
          note("rschedd: flight recorder: {}\n", gone.err().msg);
        }
        capture_list_failing = true;
        continue;
      }
      capture_list_failing = false;
      for (const auto &f : *gone) {
        (void)flight::remove_capture(f, {cfg.flight->recorder.dir, cfg.flight->legacy_dir});
      }
    }
  };
  if (flight_rec) {
    rc.done = [&, prev = std::move(rc.done)](const store::interval_row &row,
                                             const interval_outcome &o) {
      if (prev) {
        prev(row, o);
      }
      flight_tick();
    };
  }

  // What the recorder does not collect itself: perf counter times, schedstat deltas, the CPU
  // topology and sched_ext state, and the daemon's own health (CPU time, RSS, its BPF programs'
  // run time).
  counter_times times(perf->sets);
  self_health health(&*prog);
  machine_feed machine("/sys", [](std::string_view s) { note("{}", s); });
  rc.enrich = [&](store::interval_row &row) {
    times.add_to(row);
    machine.add_to(row);
    if (schedstat) {
      schedstat->add_to(row);
    }
    if (pressure) {
      pressure->add_to(row);
    }
    health.add_to(row);
  };

  // The live view runs on its own thread and never holds up recording (live.hpp).
  std::unique_ptr<live_display> display;
  if (tty) {
    if (auto out = terminal_out::open_stdout()) {
      live_config &lc = cfg.live;
      lc.ropt.groups = groups;
      lc.ropt.ipc = ipc;
      lc.ropt.num_dies = num_dies;
      lc.ropt.num_numa_nodes = num_numa_nodes;
      lc.filt = *filt;
      lc.ipc = ipc;
      lc.event_names = event_names;
      display = std::make_unique<live_display>(std::move(lc), std::move(*out));
      rc.show = [&](live_frame &&f) {
        if (schedstat && !schedstat->live_table().empty()) {
          f.schedstat_table = schedstat->live_table();
        }
        display->offer(std::move(f));
      };
    }
  }
  // The recorder's own priority (issue 31: it must not cause the latency it records). By default
  // an ordinary SCHED_OTHER thread at nice 0 (--recorder-nice): preempted after its slice like
  // any other, it never holds a CPU for the whole of its work (at SCHED_FIFO 1 it held one for up
  // to 57 ms at 10,000 threads, and every thread queued behind it waited that long). A late tick
  // only makes a longer interval: intervals are timed by the monotonic clock and nothing is
  // lost (under a switch storm on 2 CPUs the longest interval was 1.17 s, none stalled).
  // --rt-priority N is the explicit choice of SCHED_FIFO N, with that cost (docs/PERFORMANCE.md,
  // "The observer effect"). Set after the display thread exists: that one runs at nice 10.
  const recorder_priority &prio = cfg.priority;
  if (prio.rt_priority > 0) {
    sched_param sp{};
    sp.sched_priority = static_cast<int>(prio.rt_priority);
    if (sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &sp) != 0) {
      note("rschedd: cannot run the recorder at SCHED_FIFO {} ({}); it keeps normal "
           "scheduling and may fall behind when the CPUs are saturated\n",
           prio.rt_priority, std::strerror(errno));
    }
  } else {
    if (setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), prio.nice) != 0 && prio.verbose) {
      note("rschedd: the recorder keeps its nice value ({}); it may fall behind when the CPUs "
           "are saturated\n",
           std::strerror(errno));
    }
    // A short EEVDF slice (--recorder-slice-us): the tick's work (tens of ms of CPU at 10,000
    // threads) runs in pieces no longer than the microsecond runs of the threads around it, so
    // a wakeup waits behind it no longer than behind any of them.
    if (prio.slice_us > 0) {
      sched_attr_v1 attr{};
      attr.size = sizeof(attr);
      attr.sched_policy = SCHED_OTHER;
      attr.sched_nice = prio.nice;
      attr.sched_runtime = std::uint64_t{prio.slice_us} * 1000;
      if (syscall(SYS_sched_setattr, 0, &attr, 0U) != 0 && prio.verbose) {
        note("rschedd: the recorder keeps the kernel's time slice ({})\n", std::strerror(errno));
      }
    }
  }

  system_clock clock(sigs);
  bool usr1_noted = false;
  clock.on_signal(SIGUSR1, [&] {
    if (flight_rec) {
      flight_rec->request("signal", "SIGUSR1");
    } else if (!std::exchange(usr1_noted, true)) {
      note("rschedd: SIGUSR1 asks the flight recorder for a capture, but it is off "
           "(--flight-recorder SECONDS): ignored, as any later one\n");
    }
  });
  std::optional<writer_sink> sink;
  if (db) {
    sink.emplace(*db);
  }
  recorder rec(std::move(rc), src, clock, sink ? &*sink : nullptr);
  // The kernel's counters read in user space start counting with the first interval.
  if (schedstat) {
    schedstat->rebase();
  }
  if (pressure) {
    pressure->rebase();
  }
  rsched::rschedd::tune_recorder_thread();
  rec.setup();
  while (rec.step()) {
  }
  display.reset(); // within ~100 ms, whatever the terminal is doing
  if (flight_rec) {
    // The captures asked for before the stop are taken (within one read period) and listed,
    // those waiting for their window's end too: it ends now.
    flight_rec->flush();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    while (flight_rec->pending() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    flight_tick();
    const auto st = flight_rec->stats();
    note("rschedd: flight recorder: {} events read, {} lost (ring overrun), {} threshold "
         "crossings ({} not captured: --flight-trigger-gap), {} captures ({} requests answered "
         "by another's capture, {} empty windows not written)\n",
         st.events, st.lost, st.crossings, st.rate_limited, st.captures, st.coalesced, st.empty);
    flight_rec.reset();
  }
  if (textfile) {
    (void)textfile->flush(); // the final interval; an error was reported by the writer thread
  }
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
  auto cfg = rsched::rschedd::make_config(*opt);
  if (!cfg) {
    note("rschedd: {}\n", cfg.err().msg);
    return 2;
  }
  rsched::rschedd::tune_heap(); // run() trims it once a minute
  try {
    return run(*opt, std::move(*cfg));
  } catch (const std::exception &e) {
    note("rschedd: {}\n", e.what());
    return 1;
  }
}
