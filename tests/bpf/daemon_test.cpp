// rschedd end to end: interval rows, clean shutdown on signals, hostile comm names through the
// real BPF path into CSV.
#include "rsched/query/reader.hpp"

#include "root_test_util.hpp"
#include "support/temp_dir.hpp"

#include <linux/perf_event.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <unistd.h>
#include <utility>
#include <vector>

using namespace rsched;
using namespace std::chrono_literals;

namespace {

using test::as_int;
using test::as_text;
using test::query_db;

std::string run_capture(const std::string &cmd, int &status) {
  std::string out;
  FILE *f = popen(cmd.c_str(), "r");
  REQUIRE(f != nullptr);
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) {
    out.append(buf, n);
  }
  status = pclose(f);
  return out;
}

// Whether this host counts hardware CPU cycles: what rschedd's perf=ipc group needs. Virtual
// machines often have no PMU; bare metal does.
bool hw_cycles_available() {
  perf_event_attr attr{};
  attr.type = PERF_TYPE_HARDWARE;
  attr.size = sizeof(attr);
  attr.config = PERF_COUNT_HW_CPU_CYCLES;
  attr.disabled = 1;
  const long fd = syscall(SYS_perf_event_open, &attr, -1, 0, -1, PERF_FLAG_FD_CLOEXEC);
  if (fd < 0) {
    return false;
  }
  close(static_cast<int>(fd));
  return true;
}
} // namespace

// Issue 31: the recorder must not cause the latency it records. By default it is an ordinary
// thread (SCHED_OTHER, nice 0: preempted after its slice like any other); SCHED_FIFO only when
// asked with --rt-priority.
TEST_CASE_METHOD(test::db_dir,
                 "the recorder is an ordinary thread (SCHED_OTHER, nice 0 or "
                 "--recorder-nice, a 100 us slice or --recorder-slice-us) unless --rt-priority "
                 "asks for SCHED_FIFO",
                 "[root][bpf]") {
  if (!test::bpf_available()) {
    return;
  }
  // policy and nice of rschedd's recorder (its main thread), from /proc/PID/stat.
  const auto sched_of = [](pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string s;
    std::getline(in, s);
    std::istringstream rest(s.substr(s.rfind(')') + 2));
    std::vector<std::string> f;
    for (std::string w; rest >> w;) {
      f.push_back(w);
    }
    REQUIRE(f.size() > 38);
    // Fields 19 (nice) and 41 (policy) of proc(5); `f` starts at field 3.
    return std::make_pair(std::stoi(f[38]), std::stoi(f[16]));
  };
  // Its EEVDF slice request (se.slice in /proc/PID/sched, ns); -1 when the kernel has none.
  const auto slice_of = [](pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/sched");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("se.slice", 0) == 0) {
        return std::stoll(line.substr(line.find(':') + 1));
      }
    }
    return -1LL;
  };
  const long long kernel_slice = slice_of(getpid());
  {
    test::daemon d({"--db", db, "-i", "1"});
    d.require(d.wait_attached(), "rschedd did not attach");
    std::this_thread::sleep_for(std::chrono::milliseconds(500)); // past the switch, into a tick
    const auto [policy, nice] = sched_of(d.pid());
    CHECK(policy == 0); // SCHED_OTHER
    CHECK(nice == 0);
    if (kernel_slice >= 0) {
      CHECK(slice_of(d.pid()) == 100'000);
    }
    CHECK(d.stop(SIGINT) == 0);
  }
  {
    test::daemon d({"--db", db, "-i", "1", "--recorder-nice", "-7", "--recorder-slice-us", "0"});
    d.require(d.wait_attached(), "rschedd did not attach");
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const auto [policy, nice] = sched_of(d.pid());
    CHECK(policy == 0);
    CHECK(nice == -7);
    CHECK(slice_of(d.pid()) == kernel_slice);
    CHECK(d.stop(SIGINT) == 0);
  }
  {
    test::daemon d({"--db", db, "-i", "1", "--rt-priority", "1"});
    d.require(d.wait_attached(), "rschedd did not attach");
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    CHECK(sched_of(d.pid()).first == 1); // SCHED_FIFO
    CHECK(d.stop(SIGINT) == 0);
  }
}

TEST_CASE("SIGTERM and SIGINT record the partial interval and exit 0", "[root][bpf]") {
  if (!test::bpf_available()) {
    return;
  }
  for (int sig : {SIGTERM, SIGINT}) {
    const test::temp_dir dir_tmp;
    const std::string dir = dir_tmp.str();
    const std::string db = dir + "/sub/dir/rsched.db"; // directories are created
    test::daemon d({"--db", db, "-i", "1"});
    REQUIRE(d.wait_attached());
    std::this_thread::sleep_for(2500ms);
    INFO(d.stderr_text());
    REQUIRE(d.stop(sig) == 0);
    // Raw intervals only: a run that crosses a minute boundary also writes a 1-minute rollup.
    const auto rows =
        query_db(db, "SELECT count(*), sum(flags & 1), "
                     "(SELECT dur_ns FROM intervals WHERE tier = 0 ORDER BY id DESC LIMIT 1), "
                     "(SELECT flags FROM intervals WHERE tier = 0 ORDER BY id DESC LIMIT 1) "
                     "FROM intervals WHERE tier = 0");
    REQUIRE(rows.size() == 1);
    CHECK(as_int(rows[0][0]) == 3);          // two full intervals and the partial one
    CHECK(as_int(rows[0][1]) == 1);          // exactly one final interval ...
    CHECK(as_int(rows[0][3]) & 1);           // ... the last one
    CHECK(as_int(rows[0][2]) < 900'000'000); // and it is partial (~0.5 s)
    CHECK((std::filesystem::status(db).permissions() & std::filesystem::perms::all) ==
          (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write |
           std::filesystem::perms::group_read));
    const auto sample = query_db(db, "SELECT count(*), sum(count) FROM sched_delay");
    CHECK(as_int(sample[0][0]) > 0);
  }
}

TEST_CASE_METHOD(test::db_dir, "-r records every interval including the last partial one",
                 "[root][bpf]") {
  if (!test::bpf_available()) {
    return;
  }
  test::daemon d({"--db", db, "-i", "2", "-r", "5"});
  REQUIRE(d.wait_attached());
  const auto rc = d.wait_exit(10000); // it exits by itself after 5 s, with status 0
  INFO(d.stderr_text());
  REQUIRE(rc.has_value());
  REQUIRE(*rc == 0);
  const auto rows =
      query_db(db, "SELECT count(*), sum(dur_ns), max(flags & 1) FROM intervals WHERE tier = 0");
  CHECK(as_int(rows[0][0]) == 3); // 2 s + 2 s + 1 s
  CHECK(as_int(rows[0][1]) > 4'900'000'000);
  CHECK(as_int(rows[0][1]) < 5'300'000'000);
  CHECK(as_int(rows[0][2]) == 1);
}

TEST_CASE_METHOD(test::db_dir,
                 "a recording stores this boot's CPU topology and the per-CPU "
                 "views carry each CPU's LLC and node",
                 "[root][bpf]") {
  if (!test::bpf_available()) {
    return;
  }
  test::daemon d({"--db", db, "-i", "1", "-r", "3"});
  REQUIRE(d.wait_attached());
  const auto rc = d.wait_exit(10000);
  INFO(d.stderr_text());
  REQUIRE(rc.has_value());
  REQUIRE(*rc == 0);
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  // One set for the boot, in force from the boot (since_ns 0), every online CPU in it.
  const auto topo = query_db(db, "SELECT count(*), count(DISTINCT since_ns), min(since_ns), "
                                 "count(llc), min(t.boot_id = i.boot_id) FROM cpu_topology AS t, "
                                 "(SELECT boot_id FROM intervals LIMIT 1) AS i");
  CHECK(as_int(topo[0][0]) == online);
  CHECK(as_int(topo[0][1]) == 1);
  CHECK(as_int(topo[0][2]) == 0);
  CHECK(as_int(topo[0][3]) == online);
  CHECK(as_int(topo[0][4]) == 1);
  const auto rows = query_db(db, "SELECT count(*), count(llc), count(node) FROM cpu_sched_delay");
  CHECK(as_int(rows[0][0]) > 0);
  CHECK(as_int(rows[0][1]) == as_int(rows[0][0]));
  // sched_ext: NULL where the kernel has none (this CI kernel), a state where it has.
  const bool scx = std::filesystem::exists("/sys/kernel/sched_ext");
  CHECK(as_int(query_db(db, "SELECT count(scx_state) FROM intervals")[0][0]) ==
        (scx ? as_int(query_db(db, "SELECT count(*) FROM intervals")[0][0]) : 0));
}

TEST_CASE_METHOD(test::db_dir,
                 "a hostile comm recorded by BPF round-trips exactly through rsched-sql --csv",
                 "[root][bpf]") {
  if (!test::bpf_available()) {
    return;
  }
  test::daemon d({"--db", db, "-i", "1"});
  REQUIRE(d.wait_attached());
  // 15 bytes (the kernel keeps 15): quote, comma, an escape sequence, a non-UTF-8 byte
  const std::string hostile = std::string("q\"x,y\x1b[2J\xff") + "end";
  REQUIRE(hostile.size() <= 15);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    prctl(PR_SET_NAME, hostile.c_str());
    for (int i = 0; i < 300; ++i) {
      usleep(2000); // sleeps and wakeups: scheduling delay samples
    }
    _exit(0);
  }
  REQUIRE(waitpid(child, nullptr, 0) == child);
  std::this_thread::sleep_for(1200ms);
  REQUIRE(d.stop(SIGINT) == 0);

  int status = 0;
  const std::string csv =
      run_capture(test::rsched_sql_path() + " " + db +
                      " --csv -c \"SELECT comm, sum(count) AS n FROM sched_delay WHERE tid = " +
                      std::to_string(child) + " GROUP BY comm\"",
                  status);
  REQUIRE(status == 0);
  // RFC 4180: the field has quotes and a comma, so it is quoted and its quote doubled
  std::string field = "\"q\"\"x,y\x1b[2J\xff"
                      "end\"";
  INFO(csv);
  CHECK(csv.rfind("comm,n", 0) == 0);
  CHECK(csv.find(field + ",") != std::string::npos);
  // the human table never shows the escape byte raw
  const std::string table = run_capture(
      test::rsched_sql_path() + " " + db +
          " -c \"SELECT comm FROM sched_delay WHERE tid = " + std::to_string(child) + "\"",
      status);
  REQUIRE(status == 0);
  CHECK(table.find('\x1b') == std::string::npos);
  CHECK(table.find("\\x1b[2J") != std::string::npos);
}

TEST_CASE_METHOD(test::db_dir,
                 "all groups: every section with data, one line per group this host cannot provide",
                 "[root][bpf]") {
  if (!test::bpf_available()) {
    return;
  }
  // `script` gives rschedd a terminal, so it shows the live display.
  const std::string out = dir + "/out.txt";
  const std::string cmd =
      "script -qec '" + test::rschedd_path() + " --no-db -g all -r 3 --view tables' /dev/null > " +
      out + " 2>&1 & " +
      "sleep 0.5; stress-ng --switch 2 --taskset 0,1 --timeout 2 >/dev/null 2>&1; "
      "taskset -c 0 true; wait $!"; // script -e: rschedd's exit status
  int status = 0;
  (void)run_capture(cmd, status);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0); // an unavailable group is a note, not an error
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  INFO(text);
  for (const char *section :
       {"=== Collapsed Scheduling Delays (microseconds) ===",
        "=== Collapsed Waking Delay Statistics (Time from sched_waking to sched_switch) ===",
        "=== Collapsed Time Slice Statistics (microseconds) ===",
        "=== Collapsed Sleep Duration Statistics",
        "=== Collapsed Runqueue Depth Statistics (nr_running at wakeup) ===",
        "=== Per-CPU Scheduling Delays (microseconds) ===",
        "=== Per-CPU Idle Duration (microseconds) ==="}) {
    CHECK(text.find(section) != std::string::npos);
  }
  // Each optional group: its section where the host has what it needs, else one line saying why
  // (virtual machines often have no PMU; kernels without CONFIG_SCHEDSTATS no /proc/schedstat).
  if (hw_cycles_available()) {
    CHECK(text.find("perf=ipc unavailable") == std::string::npos);
    CHECK(text.find("=== CPU Performance Metrics ===") != std::string::npos);
  } else {
    CHECK(text.find("perf=ipc unavailable") != std::string::npos);
    if (!std::filesystem::exists("/sys/bus/event_source/devices/cpu")) {
      CHECK(text.find("no hardware PMU") != std::string::npos);
    }
  }
  if (std::filesystem::exists("/proc/schedstat")) {
    CHECK(text.find("schedstat group unavailable") == std::string::npos);
    CHECK(text.find("=== System-wide Schedstat Metrics (deltas) ===") != std::string::npos);
  } else {
    CHECK(text.find("schedstat group unavailable") != std::string::npos);
    CHECK(text.find("CONFIG_SCHEDSTATS") != std::string::npos);
  }
  CHECK(text.find("stopped after") != std::string::npos);
  // With every group the drain program still passes the verifier: auto did not fall back.
  CHECK(text.find("(tp_btf mode, dirty-list reads)") != std::string::npos);
}

TEST_CASE_METHOD(test::db_dir,
                 "a restart continues the same history, the downtime is a gap, health is recorded",
                 "[root][bpf]") {
  if (!test::bpf_available()) {
    return;
  }
  test::sysctl_guard stats("/proc/sys/kernel/bpf_stats_enabled", "1");
  for (int run = 0; run < 2; ++run) {
    test::daemon d({"--db", db, "-i", "1"});
    REQUIRE(d.wait_attached());
    std::this_thread::sleep_for(2500ms);
    INFO(d.stderr_text());
    REQUIRE(d.stop(SIGTERM) == 0);
    if (run == 0) {
      std::this_thread::sleep_for(3s); // down for 3 s
    }
  }
  // Both runs in one history: raw intervals of the two runs, contiguous within each.
  CHECK(as_int(query_db(db, "SELECT count(*) FROM intervals WHERE tier = 0")[0][0]) >= 5);
  CHECK(as_int(query_db(db, "SELECT count(*) FROM intervals WHERE tier = 0 AND flags & 1")[0][0]) ==
        2);
  // The downtime is the one gap of at least 2 s, and coverage says so.
  const auto gaps = query_db(db, "SELECT count(*), max(dur) FROM gaps() WHERE dur >= 2000000000");
  CHECK(as_int(gaps[0][0]) == 1);
  CHECK(as_int(gaps[0][1]) >= 3'000'000'000);
  CHECK(as_int(query_db(db, "SELECT CAST(coverage_pct AS INTEGER) FROM coverage()")[0][0]) < 100);
  // Health of every raw interval: collect time, CPU time, RSS; BPF run time with bpf_stats on;
  // the write time of every interval (the last of each run gets its own after its commit).
  const auto h = query_db(db, "SELECT count(*), count(collect_ns), count(cpu_ns), min(rss_bytes), "
                              "count(write_ns), sum(bpf_run_cnt), sum(bpf_run_ns), sum(drops) "
                              "FROM health");
  const auto n = as_int(h[0][0]);
  CHECK(as_int(h[0][1]) == n);
  CHECK(as_int(h[0][2]) == n);
  CHECK(as_int(h[0][3]) > 1'000'000);
  CHECK(as_int(h[0][4]) == n);
  CHECK(as_int(h[0][5]) > 0);
  CHECK(as_int(h[0][6]) > 0);
  // The kernel's run count of our programs covers at least one event per recorded sample: each
  // delay sample is a switch-in and each depth sample a wakeup that a program handled, but for
  // the switch-ins no program saw, found later from the kernel's account (unseen_events: one
  // sched_switch run can count the switch-out's thread's unseen switch-in and the next's).
  const auto samples = as_int(
      query_db(db, "SELECT (SELECT coalesce(sum(count), 0) FROM sched_delay WHERE tier = 0) + "
                   "(SELECT coalesce(sum(count), 0) FROM runq_depth WHERE tier = 0)")[0][0]);
  const auto unseen = as_int(
      query_db(db, "SELECT coalesce(sum(unseen_events), 0) FROM intervals WHERE tier = 0")[0][0]);
  INFO("samples " << samples << ", bpf_run_cnt " << as_int(h[0][5]) << ", unseen " << unseen);
  CHECK(samples > 0);
  CHECK(as_int(h[0][5]) + unseen >= samples);
  // Drops are recorded (a task-storage creation can fail for a task exiting at attach time:
  // counted, not hidden).
  CHECK(as_int(h[0][7]) >= 0);
}
