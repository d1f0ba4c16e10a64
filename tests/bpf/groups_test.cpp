// The metric groups against the kernel's own per-thread accounting: voluntary/involuntary
// switches (/proc/<pid>/status), migrations (se.nr_migrations in /proc/<pid>/sched), a known
// 20 ms sleep, CPU idle. Children exit before recording stops, so exits are covered.
#include "rsched/query/reader.hpp"
#include "rsched/stats/encoding.hpp"
#include "rsched/stats/percentile.hpp"

#include "root_test_util.hpp"
#include "support/temp_dir.hpp"

#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sched.h>
#include <spawn.h>
#include <thread>
#include <unistd.h>
#include <vector>

extern char **environ;

using namespace rsched;
using namespace std::chrono_literals;

namespace {

using test::as_int;
using test::as_text;
using test::query_db;

using test::mono_ns;

void spin_for(std::uint64_t ns) {
  const std::uint64_t until = mono_ns() + ns;
  volatile std::uint64_t sink = 0;
  while (mono_ns() < until) {
    sink = sink + 1;
  }
}

// "key: value" fields of /proc/<pid>/status or "key : value" of /proc/<pid>/sched.
std::map<std::string, std::uint64_t> proc_fields(pid_t pid, const std::string &file) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/" + file);
  std::map<std::string, std::uint64_t> out;
  std::string line;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) {
      continue;
    }
    std::string key = line.substr(0, colon);
    while (!key.empty() && key.back() == ' ') {
      key.pop_back();
    }
    try {
      out[key] = static_cast<std::uint64_t>(std::stod(line.substr(colon + 1)));
    } catch (...) {
    }
  }
  return out;
}

struct truth {
  std::uint64_t voluntary = 0, involuntary = 0, migrations = 0;
};

// Runs `body(i)` in n forked children named rs-grp-<i>, collects each zombie's accounting.
template <typename F> std::map<pid_t, truth> run_children(int n, F body) {
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    pids.push_back(test::fork_child([&body, i] {
      const std::string name = "rs-grp-" + std::to_string(i);
      prctl(PR_SET_NAME, name.c_str());
      body(i);
    }));
  }
  std::map<pid_t, truth> out;
  for (pid_t p : pids) {
    test::read_zombie(p, 20ms, [&] {
      auto st = proc_fields(p, "status");
      auto sc = proc_fields(p, "sched");
      out[p] = {st["voluntary_ctxt_switches"], st["nonvoluntary_ctxt_switches"],
                sc["se.nr_migrations"]};
    });
  }
  return out;
}

bool within(std::uint64_t got, std::uint64_t want, double rel, std::uint64_t abs_slack) {
  const double diff = std::fabs(static_cast<double>(got) - static_cast<double>(want));
  return diff <= std::max(rel * static_cast<double>(want), static_cast<double>(abs_slack));
}

} // namespace

TEST_CASE("slice and migration counts match the kernel per thread", "[root][bpf][groups]") {
  if (!test::bpf_available()) {
    return;
  }
  for (const std::string mode : {"tp_btf", "raw_tp"}) {
    test::recording rec({"-i", "1", "-g", "latency,slice,sleep,migration", "--bpf-mode", mode});
    // 4 children on 2 CPUs: bursts of spinning and short sleeps (voluntary and involuntary
    // switches), and explicit hops between the two CPUs (migrations).
    const auto kernel = run_children(4, [](int i) {
      cpu_set_t set;
      for (int k = 0; k < 150; ++k) {
        spin_for(300'000 + static_cast<std::uint64_t>(i) * 100'000);
        if (k % 3 == 0) {
          CPU_ZERO(&set);
          CPU_SET(static_cast<unsigned>((k / 3 + i) % 2), &set);
          sched_setaffinity(0, sizeof(set), &set);
        }
        if (i % 2 == 0) {
          usleep(200);
        }
      }
    });
    std::this_thread::sleep_for(1200ms);
    REQUIRE(rec.d.stop(SIGINT) == 0);

    for (const auto &[pid, k] : kernel) {
      const auto slices =
          query_db(rec.db, "SELECT sum(voluntary_count), sum(involuntary_count) FROM "
                           "timeslice WHERE tid = " +
                               std::to_string(pid));
      const auto mig =
          query_db(rec.db, "SELECT sum(count) FROM migration WHERE tid = " + std::to_string(pid));
      const auto vol = static_cast<std::uint64_t>(as_int(slices[0][0]));
      const auto invol = static_cast<std::uint64_t>(as_int(slices[0][1]));
      const auto migs = static_cast<std::uint64_t>(as_int(mig[0][0]));
      std::printf(
          "groups[%s] pid %d: voluntary kernel %llu recorded %llu; involuntary kernel "
          "%llu recorded %llu; migrations kernel %llu recorded %llu\n",
          mode.c_str(), pid, static_cast<unsigned long long>(k.voluntary),
          static_cast<unsigned long long>(vol), static_cast<unsigned long long>(k.involuntary),
          static_cast<unsigned long long>(invol), static_cast<unsigned long long>(k.migrations),
          static_cast<unsigned long long>(migs));
      INFO("mode " << mode << " pid " << pid);
      REQUIRE(k.migrations >= 20); // the workload really migrated
      // Exact (the zombie's counts, read after its last switch): a slice that began with a
      // switch-in no program saw is measured from the kernel's arrival time
      // (docs/ARCHITECTURE.md, "Switch-ins no program saw"), so no switch-out is uncounted.
      CHECK(vol == k.voluntary);
      CHECK(invol == k.involuntary);
      CHECK(within(migs, k.migrations, 0.01, 1));
    }
  }
}

TEST_CASE_METHOD(test::db_dir,
                 "a known 20 ms sleep lands in the bucket that holds 20 ms, CPU idle is seen",
                 "[root][bpf][groups]") {
  if (!test::bpf_available()) {
    return;
  }
  // slice too: its count of the child's switch-outs shows one no program saw (below)
  test::daemon d({"--db", db, "-i", "1", "-g", "sleep,slice"});
  INFO(d.stderr_text());
  REQUIRE(d.wait_attached());
  const auto ncpu = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  std::vector<test::cpu_times> idle_before;
  for (int c = 0; c < ncpu; ++c) {
    idle_before.push_back(test::proc_stat_cpu(c));
  }
  // The child at SCHED_FIFO: no CPU hog of a loaded machine (CI runs this beside a compile)
  // preempts it between arming its timer and blocking, which would make a sleep shorter, nor
  // keeps it queued after a wakeup. It measures each sleep itself, on the monotonic clock, into
  // memory shared with the test: the longest is the independent bound of the longest recorded
  // (a VM whose host delays the timer's interrupt makes a sleep longer, for the kernel too).
  auto *longest = static_cast<std::int64_t *>(mmap(
      nullptr, sizeof(std::int64_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  REQUIRE(longest != MAP_FAILED);
  *longest = 0;
  const auto kernel = run_children(1, [longest](int) {
    const sched_param fifo{1};
    if (sched_setscheduler(0, SCHED_FIFO, &fifo) != 0) {
      _exit(3);
    }
    for (int k = 0; k < 25; ++k) {
      timespec ts{0, 20'000'000};
      timespec a{}, b{};
      clock_gettime(CLOCK_MONOTONIC, &a);
      nanosleep(&ts, nullptr);
      clock_gettime(CLOCK_MONOTONIC, &b);
      *longest = std::max<std::int64_t>(*longest, (b.tv_sec - a.tv_sec) * 1'000'000'000LL +
                                                      (b.tv_nsec - a.tv_nsec));
    }
  });
  const std::int64_t longest_ns = *longest;
  munmap(longest, sizeof(std::int64_t));
  std::this_thread::sleep_for(1200ms);
  REQUIRE(d.stop(SIGINT) == 0);
  std::vector<std::int64_t> kernel_idle; // ns each CPU idled while rschedd recorded
  for (int c = 0; c < ncpu; ++c) {
    kernel_idle.push_back(test::proc_stat_cpu(c).idle -
                          idle_before[static_cast<std::size_t>(c)].idle);
  }
  const pid_t pid = kernel.begin()->first;
  const auto rows = query_db(db, "SELECT sum(count), hist_percentile(hist, 1), "
                                 "hist_percentile(hist, 100) FROM sleep WHERE tid = " +
                                     std::to_string(pid));
  const auto slices =
      as_int(query_db(db, "SELECT coalesce(sum(voluntary_count + involuntary_count), 0) FROM "
                          "timeslice WHERE tid = " +
                              std::to_string(pid))[0][0]);
  {
    std::string per_interval; // which interval lost a sample, if one did
    for (const auto &r : query_db(db, "SELECT ts, count, hist_percentile(hist, 1) FROM sleep "
                                      "WHERE tid = " +
                                          std::to_string(pid))) {
      per_interval += std::to_string(as_int(r[0])) + ":" + std::to_string(as_int(r[1])) + ":" +
                      std::to_string(as_int(r[2])) + " ";
    }
    // Each sleep is a voluntary switch, and so is the exit. A timer that fires while the child
    // is preempted between arming it and blocking (a loaded machine) ends that "sleep" before
    // it began: the kernel then counts one voluntary switch fewer, and so must we. A sleep
    // begins at the child's switch-out; one that this VM showed to no program (docs/
    // ARCHITECTURE.md, "Switch-ins no program saw") merges two of its time slices into one:
    // the kernel's switches less the slices recorded count them, and only they may be missing.
    const auto voluntary = kernel.begin()->second.voluntary;
    const auto switches = static_cast<std::int64_t>(voluntary + kernel.begin()->second.involuntary);
    const auto unseen_out = switches - slices;
    INFO("per interval (ts:count:min): "
         << per_interval << "; drops "
         << as_int(query_db(db, "SELECT sum(drops) FROM health")[0][0]) << " kinds "
         << as_int(query_db(db, "SELECT sum(drops_task_state) FROM intervals")[0][0]) << "/"
         << as_int(query_db(db, "SELECT sum(drops_no_rq) FROM intervals")[0][0]) << "/"
         << as_int(query_db(db, "SELECT sum(drops_graveyard) FROM intervals")[0][0]) << "/"
         << as_int(query_db(db, "SELECT sum(drops_stale_tid) FROM intervals")[0][0]) << " unseen "
         << as_int(query_db(db, "SELECT sum(unseen_events) FROM intervals")[0][0])
         << "; kernel voluntary switches " << voluntary << ", all switches " << switches
         << ", time slices recorded " << slices);
    CHECK(unseen_out >= 0);
    CHECK(as_int(rows[0][0]) >=
          std::min<std::int64_t>(25, static_cast<std::int64_t>(voluntary) - 1) - unseen_out);
    CHECK(as_int(rows[0][0]) <= 25);
    CHECK(as_int(rows[0][0]) >= 20);
  }
  const auto bucket20 = stats::bucket_bounds(stats::layout::latency,
                                             stats::slot_of(stats::layout::latency, 20'000'000));
  const auto bucket_longest = stats::bucket_bounds(
      stats::layout::latency,
      stats::slot_of(stats::layout::latency, static_cast<std::uint64_t>(longest_ns)));
  INFO("20 ms bucket [" << bucket20.lo << ", " << bucket20.hi << "]; the child's longest sleep "
                        << longest_ns << " ns, its bucket's top " << bucket_longest.hi);
  for (int c = 1; c <= 2; ++c) {
    const auto v = static_cast<std::uint64_t>(as_int(rows[0][static_cast<std::size_t>(c)]));
    CHECK(v >= bucket20.lo);
    // No longer than the child measured it (switch-out to wakeup lies within its call).
    CHECK(v <= std::max(bucket20.hi, bucket_longest.hi));
  }
  // CPU idle: each CPU the kernel saw idle for 100 ms or more while rschedd recorded
  // (/proc/stat, in ticks) has idle periods recorded, within the recording's length. Beside a
  // load that keeps every CPU busy (stress-ng --cpu 2) there is no idle to see: said, not failed.
  const auto idle =
      query_db(db, "SELECT cpu, sum(count), sum(total_ns), "
                   "(SELECT sum(dur_ns) FROM intervals WHERE tier = 0) FROM cpu_idle GROUP BY cpu");
  std::map<int, std::int64_t> recorded_idle;
  for (const auto &r : idle) {
    recorded_idle[static_cast<int>(as_int(r[0]))] = as_int(r[2]);
    CHECK(as_int(r[1]) > 0);
    CHECK(as_int(r[2]) <= as_int(r[3]) + 1'000'000'000); // + one idle period spanning a boundary
  }
  int idled = 0;
  for (int c = 0; c < ncpu; ++c) {
    const auto k = kernel_idle[static_cast<std::size_t>(c)];
    INFO("CPU " << c << ": kernel idle " << k << " ns, recorded idle " << recorded_idle[c]
                << " ns");
    if (k >= 100'000'000) {
      ++idled;
      CHECK(recorded_idle[c] > 0);
    }
  }
  if (idled == 0) {
    WARN("no CPU idled 100 ms while rschedd recorded (a loaded machine): CPU idle not checked");
  }
}

namespace {
// voluntary/nonvoluntary switches of the calling thread so far.
std::pair<std::uint64_t, std::uint64_t> self_switches() {
  std::ifstream in("/proc/thread-self/status");
  std::string line;
  std::uint64_t v = 0, nv = 0;
  while (std::getline(in, line)) {
    if (line.rfind("voluntary_ctxt_switches:", 0) == 0) {
      v = std::stoull(line.substr(24));
    } else if (line.rfind("nonvoluntary_ctxt_switches:", 0) == 0) {
      nv = std::stoull(line.substr(27));
    }
  }
  return {v, nv};
}
} // namespace

// Issue 11, point 3: a new thread's or process's first slice is counted like every other one.
// New threads (pthreads), forked children, vfork children (posix_spawn) that exec: per thread,
// voluntary and involuntary slices against the kernel's counts.
//
// What cannot be counted: on this VM the kernel sometimes emits no sched_switch at all for a
// switch out of the idle task or out of a thread of PID 1 (the VM agent). The kernel's own ftrace
// shows the gap (a CPU's next event comes from a task no sched_switch switched to), and an
// independent BPF probe on the same tracepoints misses exactly the same switch-ins. Under CPU load
// about 1 % of short-lived processes lose one switch-in that way: the slice that starts there has
// no start, so it (and its delay sample) cannot be measured, while the kernel's nvcsw/nivcsw
// count it at the switch-out. So a zombie may be short by one, never more, and never over; a
// thread read by itself likewise one short of one kind, in at most 5 % of the threads. (In tp_btf
// mode a switch-in is also lost when the task's storage cannot be created, counted in
// drops_task_state and printed below.)
TEST_CASE("Every switch of new threads and processes is counted, the first one included",
          "[root][bpf][groups]") {
  if (!test::bpf_available()) {
    return;
  }
  for (const std::string mode : {"tp_btf", "raw_tp"}) {
    test::recording rec({"-i", "1", "-g", "latency,slice", "--bpf-mode", mode});
    // Threads: each reads its own counts last thing; the switches after that read (the mutex,
    // its exit, preemptions on a loaded machine) are a few more.
    struct seen {
      std::uint64_t vol = 0, invol = 0;
      bool exact = true; // read from a zombie: nothing happens after it
    };
    std::map<pid_t, seen> kernel;
    std::mutex mu;
    for (int round = 0; round < 10; ++round) {
      std::vector<std::thread> threads;
      for (int i = 0; i < 6; ++i) {
        threads.emplace_back([&, i] {
          for (int k = 0; k < 3 + i; ++k) {
            spin_for(30'000);
            usleep(150);
          }
          const auto [v, nv] = self_switches();
          std::lock_guard<std::mutex> g(mu);
          kernel[static_cast<pid_t>(gettid())] = {v, nv, false};
        });
      }
      for (auto &t : threads) {
        t.join();
      }
    }
    // Processes: forked children that sleep a few times, and vfork children that exec sleep(1).
    for (int i = 0; i < 20; ++i) {
      pid_t pid = -1;
      if (i % 2 == 0) {
        pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
          for (int k = 0; k < 4; ++k) {
            usleep(200);
          }
          _exit(0);
        }
      } else {
        char arg0[] = "sleep", arg1[] = "0.001";
        char *argv[] = {arg0, arg1, nullptr};
        REQUIRE(posix_spawn(&pid, "/bin/sleep", nullptr, nullptr, argv, environ) == 0);
      }
      test::read_zombie(pid, 10ms, [&] {
        auto st = proc_fields(pid, "status");
        kernel[pid] = {st["voluntary_ctxt_switches"], st["nonvoluntary_ctxt_switches"], true};
      });
    }
    std::this_thread::sleep_for(1200ms);
    REQUIRE(rec.d.stop(SIGINT) == 0);

    std::map<pid_t, std::pair<std::uint64_t, std::uint64_t>> ours;
    for (const auto &r :
         query_db(rec.db, "SELECT tid, sum(voluntary_count), sum(involuntary_count) "
                          "FROM timeslice GROUP BY tid")) {
      ours[static_cast<pid_t>(as_int(r[0]))] = {static_cast<std::uint64_t>(as_int(r[1])),
                                                static_cast<std::uint64_t>(as_int(r[2]))};
    }
    int exact = 0, zombies_exact = 0, zombies = 0, threads = 0, threads_short = 0;
    for (const auto &[tid, k] : kernel) {
      const auto [vol, invol] = ours[tid];
      INFO("mode " << mode << " tid " << tid << ": voluntary kernel " << k.vol << " recorded "
                   << vol << "; involuntary kernel " << k.invol << " recorded " << invol
                   << (k.exact ? " (zombie)" : " (read by the thread)"));
      if (k.exact) {
        // Every switch-out counted (read after the last one). The kinds may trade one: a
        // switch whose block was cancelled by a signal is voluntary to the kernel (nvcsw) but
        // leaves the thread runnable (involuntary here).
        CHECK(vol <= k.vol);
        CHECK(invol <= k.invol + 1);
        CHECK(vol + invol == k.vol + k.invol);
      } else {
        // Read by the thread itself, running: its switches after the read (the report, the
        // exit) are recorded on top, so no kind may fall short of the kernel's.
        const std::uint64_t short_by =
            (k.vol > vol ? k.vol - vol : 0) + (k.invol > invol ? k.invol - invol : 0);
        CHECK(short_by == 0);
        threads_short += short_by != 0 ? 1 : 0;
        threads += 1;
        CHECK(vol + invol <= k.vol + k.invol + 6);
      }
      exact += (vol == k.vol && invol == k.invol) ? 1 : 0;
      zombies_exact += (k.exact && vol == k.vol && invol == k.invol) ? 1 : 0;
      zombies += k.exact ? 1 : 0;
    }
    INFO(zombies_exact << " of " << zombies << " processes with exactly the kernel's counts");
    CHECK(zombies_exact * 10 >= zombies * 9);
    INFO(threads_short << " of " << threads << " threads short of the kernel's count");
    CHECK(threads_short == 0);
    std::printf(
        "new threads[%s]: %zu threads and processes, %d with exactly the kernel's "
        "counts at the read, %d of %d threads short of the kernel's count; drops %lld (task state "
        "%lld)\n",
        mode.c_str(), kernel.size(), exact, threads_short, threads,
        static_cast<long long>(as_int(query_db(rec.db, "SELECT sum(drops) FROM health")[0][0])),
        static_cast<long long>(as_int(query_db(
            rec.db, "SELECT CAST(total(drops_task_state) AS INTEGER) FROM timeline")[0][0])));
  }
}
