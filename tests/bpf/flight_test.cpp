// The flight recorder (rschedd --flight-recorder) in this kernel: a staged stall (a victim that
// wakes every 2 ms on a CPU where a SCHED_FIFO hog runs 300 ms bursts, at 1, 1.6, 4 and 7 s) is
// captured by the wait threshold once per crossing, within its rate limit, and by SIGUSR1; a
// capture decodes to the kernel's own count of the victim's context switches (/proc/<tid>/status)
// and to the hog's burst around the crossing. An unwritable captures directory is one line and
// recording goes on. A burst of requests is one capture per window and an empty window is not
// written; SIGUSR1 without the recorder is one line; a.db and a.sqlite keep their captures
// apart; every capture starts with a clock snapshot that protoc reads as Perfetto's.
#include "rsched/flight/recorder.hpp"
#include "rsched/trace/perfetto.hpp"

#include "root_test_util.hpp"
#include "support/process.hpp"

#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <pthread.h>
#include <regex>
#include <sched.h>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace rsched;
using namespace std::chrono_literals;

namespace {

std::uint64_t boot_ns() {
  timespec ts{};
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000U +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(static_cast<std::size_t>(cpu), &set);
  sched_setaffinity(0, sizeof set, &set);
}

// voluntary_ctxt_switches and nonvoluntary_ctxt_switches of the calling thread.
std::pair<std::uint64_t, std::uint64_t> own_switches() {
  std::ifstream in("/proc/thread-self/status");
  std::string line;
  std::uint64_t vol = 0;
  std::uint64_t invol = 0;
  while (std::getline(in, line)) {
    if (line.rfind("voluntary_ctxt_switches:", 0) == 0) {
      vol = std::stoull(line.substr(24));
    } else if (line.rfind("nonvoluntary_ctxt_switches:", 0) == 0) {
      invol = std::stoull(line.substr(27));
    }
  }
  return {vol, invol};
}

// What the staged stall's child reports.
struct stall_report {
  int victim = 0;
  int hog = 0;
  std::uint64_t t1 = 0, t2 = 0;       // boot ns of the victim's two readings
  std::uint64_t vol1 = 0, invol1 = 0; // its counts then
  std::uint64_t vol2 = 0, invol2 = 0;
  std::uint64_t burst[4] = {}; // boot ns each burst began
};

std::string slurp(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::int64_t captures_of(const std::string &db) {
  return test::as_int(test::query_db(db, "SELECT count(*) FROM captures")[0][0]);
}

// Waits up to `timeout` for more than `n` rows in `captures`.
bool wait_for_captures(const std::string &db, std::int64_t n, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (captures_of(db) > n) {
      return true;
    }
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

std::size_t count_of(const std::string &text, const std::string &what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

} // namespace

TEST_CASE("flight recorder: a staged stall is captured once per crossing within the rate "
          "limit, and captures decode to the kernel's counts",
          "[root][flight]") {
  if (!test::bpf_available()) {
    return;
  }
  if (std::thread::hardware_concurrency() < 2) {
    WARN("needs 2 CPUs");
    return;
  }
  test::recording rec({"-g", "latency", "--flight-recorder", "8", "--flight-trigger", "200ms",
                       "--flight-trigger-gap", "5s"});
  const pid_t daemon_pid = rec.d.pid();

  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t child = test::fork_child([&] {
    close(fds[0]);
    stall_report r;
    const std::uint64_t t0 = boot_ns();
    const std::uint64_t s = 1'000'000'000;
    std::atomic<bool> stop{false};
    std::thread victim([&] {
      pin(1);
      r.victim = static_cast<int>(syscall(SYS_gettid));
      bool have1 = false;
      bool have2 = false;
      while (boot_ns() < t0 + 85 * s / 10) {
        const std::uint64_t now = boot_ns();
        if (!have1 && now >= t0 + 5 * s) {
          r.t1 = boot_ns();
          std::tie(r.vol1, r.invol1) = own_switches();
          have1 = true;
        } else if (!have2 && now >= t0 + 8 * s) {
          r.t2 = boot_ns();
          std::tie(r.vol2, r.invol2) = own_switches();
          have2 = true;
        }
        const timespec two_ms{0, 2'000'000};
        nanosleep(&two_ms, nullptr);
      }
      stop = true;
    });
    std::thread hog([&] {
      pin(1);
      r.hog = static_cast<int>(syscall(SYS_gettid));
      sched_param sp{};
      sp.sched_priority = 1;
      pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
      const std::uint64_t at[4] = {10 * s / 10, 16 * s / 10, 40 * s / 10, 70 * s / 10};
      for (int i = 0; i < 4; ++i) {
        while (boot_ns() < t0 + at[i]) {
          const timespec one_ms{0, 1'000'000};
          nanosleep(&one_ms, nullptr);
        }
        r.burst[i] = boot_ns();
        while (boot_ns() < r.burst[i] + 300'000'000) {
        }
      }
      while (boot_ns() < t0 + 83 * s / 10) {
        const timespec one_ms{0, 1'000'000};
        nanosleep(&one_ms, nullptr);
      }
      kill(daemon_pid, SIGUSR1);
    });
    victim.join();
    hog.join();
    (void)!write(fds[1], &r, sizeof r);
    close(fds[1]);
  });
  close(fds[1]);
  stall_report r;
  REQUIRE(read(fds[0], &r, sizeof r) == static_cast<ssize_t>(sizeof r));
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  // The signal's capture is taken within a read period; then stop, inside the rate limit's gap
  // (no third threshold capture can come).
  std::this_thread::sleep_for(700ms);
  CHECK(rec.d.stop() == 0);
  const std::string err = rec.d.stderr_text();
  INFO(err);
  // Crossings: the 1st burst (captured), the 2nd within 1 s of it (the same episode), the 3rd
  // (a new crossing, 3 s after the capture: rate-limited), the 4th (6 s after: captured). Other
  // threads of this busy machine may cross too (the trigger is any thread's): at least those.
  std::smatch m;
  REQUIRE(
      std::regex_search(err, m, std::regex(R"((\d+) threshold crossings \((\d+) not captured)")));
  CHECK(std::stoi(m[1]) >= 3);
  CHECK(std::stoi(m[2]) >= 1);

  const auto rows = test::query_db(
      rec.db, "SELECT trigger, file, start_ns, end_ns, bytes, events FROM captures ORDER BY id");
  REQUIRE(rows.size() == 3);
  CHECK(test::as_text(rows[0][0]) == "threshold");
  CHECK(test::as_text(rows[1][0]) == "threshold");
  CHECK(test::as_text(rows[2][0]) == "signal");
  // The two threshold captures end at the first switch-in after a 200 ms wait: just after the
  // 1st and the 4th bursts.
  const auto boot_of = [&](std::int64_t real) {
    return static_cast<std::uint64_t>(real -
                                      (test::realtime_ns() - static_cast<std::int64_t>(boot_ns())));
  };
  CHECK(boot_of(test::as_int(rows[0][3])) > r.burst[0] + 150'000'000);
  // (the first episode's: the 1st burst's, or the 2nd's on a host so busy that the 1st made
  // no one wait 200 ms)
  CHECK(boot_of(test::as_int(rows[0][3])) < r.burst[1] + 450'000'000);
  CHECK(boot_of(test::as_int(rows[1][3])) > r.burst[3] + 150'000'000);
  CHECK(boot_of(test::as_int(rows[1][3])) < r.burst[3] + 450'000'000);
  struct stat db_st {};
  REQUIRE(stat(rec.db.c_str(), &db_st) == 0);
  for (const auto &row : rows) {
    const std::string file = test::as_text(row[1]);
    struct stat st {};
    REQUIRE(stat(file.c_str(), &st) == 0);
    CHECK(static_cast<std::int64_t>(st.st_size) == test::as_int(row[4]));
    CHECK((st.st_mode & 0777) == (db_st.st_mode & 0640)); // as protected as the database
    CHECK(test::as_int(row[3]) - test::as_int(row[2]) == 8'000'000'000);
  }

  // The first threshold capture holds the first burst: the hog switched in, and out again
  // ~300 ms later on the same CPU, the victim woken meanwhile.
  {
    auto d = trace::decode(slurp(test::as_text(rows[0][1])));
    REQUIRE(d);
    CHECK(static_cast<std::int64_t>(d->events.size()) == test::as_int(rows[0][5]));
    std::uint64_t in = 0;
    std::uint64_t out = 0;
    std::uint32_t cpu = 0;
    bool woken = false;
    // The hog's last switch-in before its burst began (it woke from a sleep to start it).
    for (const auto &e : d->events) {
      if (e.kind == trace::event_kind::sched_switch && e.tid == r.hog &&
          e.ts <= r.burst[0] + 1'000'000 && e.ts > in) {
        in = e.ts;
        cpu = e.cpu;
      }
    }
    REQUIRE(in != 0);
    for (const auto &e : d->events) {
      // The hog's last switch-out there within 400 ms: since kernel 6.12 the fair server may
      // run CFS tasks for a few ms inside a FIFO burst (65 ms in once on a slow host), so its
      // first switch-out is not always the burst's end.
      if (e.cpu == cpu && e.kind == trace::event_kind::sched_switch && e.ts > in &&
          e.ts < in + 400'000'000 && e.pid == r.hog) {
        out = std::max(out, e.ts);
      }
      // The victim woke during the burst (it sleeps 2 ms at a time), or was preempted by it.
      woken = woken ||
              (e.kind == trace::event_kind::sched_waking && e.tid == r.victim &&
               e.ts + 5'000'000 > in && e.ts < in + 300'000'000) ||
              (e.kind == trace::event_kind::sched_switch && e.ts == in && e.pid == r.victim);
    }
    REQUIRE(out > in);
    CHECK(out - in >= 120'000'000); // it held the CPU longer than the threshold
    CHECK(woken);
  }
  // The signal's capture (the last 8 s before SIGUSR1) holds both of the victim's readings: its
  // switches out between them are the kernel's count, and so are its wakeups (each sleep ends
  // with one).
  {
    auto d = trace::decode(slurp(test::as_text(rows[2][1])));
    REQUIRE(d);
    std::uint64_t outs = 0;
    std::uint64_t wakings = 0;
    for (const auto &e : d->events) {
      if (e.ts <= r.t1 || e.ts > r.t2) {
        continue;
      }
      if (e.kind == trace::event_kind::sched_switch && e.pid == r.victim) {
        ++outs;
      } else if (e.kind == trace::event_kind::sched_waking && e.tid == r.victim) {
        ++wakings;
      }
    }
    const std::uint64_t kernel_outs = (r.vol2 + r.invol2) - (r.vol1 + r.invol1);
    const std::uint64_t kernel_vol = r.vol2 - r.vol1;
    INFO("capture: " << outs << " switches out, " << wakings << " wakings; kernel: " << kernel_outs
                     << " switches out, " << kernel_vol << " voluntary");
    // Within 1 % (README: on this VM the kernel's tracepoint stream lacks a few events of busy
    // threads that /proc counts, which no tracer sees).
    const auto near = [](std::uint64_t got, std::uint64_t want) {
      const std::uint64_t tol = std::max<std::uint64_t>(2, want / 100);
      return got + tol >= want && got <= want + tol;
    };
    CHECK(kernel_outs > 500);
    CHECK(near(outs, kernel_outs));
    CHECK(near(wakings, kernel_vol));
    // The process tree names both threads.
    std::map<int, std::string> names;
    for (const auto &t : d->threads) {
      names[t.tid] = std::string(trace::comm_view(t.comm));
    }
    CHECK(names.count(r.victim) == 1);
    CHECK(names.count(r.hog) == 1);
    // Each burst made the victim wait: its longest wait (waking or preemption to switch-in)
    // that ended within 400 ms of the burst's start.
    std::uint64_t since = 0;
    std::uint64_t longest[4] = {};
    // All CPUs in time order: the victim runs on CPU 1, but its timer may fire elsewhere.
    auto timeline = d->events;
    std::stable_sort(timeline.begin(), timeline.end(),
                     [](const auto &a, const auto &b) { return a.ts < b.ts; });
    for (const auto &e : timeline) {
      if (e.kind == trace::event_kind::sched_waking && e.tid == r.victim && since == 0) {
        since = e.ts;
      } else if (e.kind == trace::event_kind::sched_switch && e.pid == r.victim &&
                 e.prev_state == 0x100) {
        since = e.ts;
      } else if (e.kind == trace::event_kind::sched_switch && e.tid == r.victim && since != 0) {
        for (int b = 0; b < 4; ++b) {
          if (e.ts > r.burst[b] && e.ts < r.burst[b] + 400'000'000) {
            longest[b] = std::max(longest[b], e.ts - since);
          }
        }
        since = 0;
      }
    }
    INFO("victim's longest waits by burst (ms): "
         << longest[0] / 1'000'000 << " " << longest[1] / 1'000'000 << " " << longest[2] / 1'000'000
         << " " << longest[3] / 1'000'000);
    // Three of the four at least: the fair server (kernel 6.12+: CFS tasks get up to 50 ms a
    // second under RT starvation) can let the victim run inside a burst; once, on a slow host,
    // it waited at most 0.26 ms in the third.
    int waited = 0;
    for (auto l : longest) {
      waited += l > 200'000'000 ? 1 : 0;
    }
    CHECK(waited >= 3);
  }
}

TEST_CASE("flight recorder: an unwritable captures directory is one line and recording goes on",
          "[root][flight]") {
  if (!test::bpf_available()) {
    return;
  }
  test::db_dir dd;
  // A file where the captures directory would be.
  const std::string dir = flight::captures_dir(dd.db);
  { std::ofstream(dir) << "not a directory"; }
  test::daemon d({"--db", dd.db, "--flight-recorder", "2"});
  d.require(d.wait_attached(), "rschedd did not attach");
  REQUIRE(test::wait_for_intervals(dd.db, 1, 10s));
  kill(d.pid(), SIGUSR1);
  std::this_thread::sleep_for(1500ms);
  kill(d.pid(), SIGUSR1);
  std::this_thread::sleep_for(1500ms);
  const auto before = test::raw_intervals(dd.db);
  std::this_thread::sleep_for(2s);
  CHECK(test::raw_intervals(dd.db) > before); // still recording
  // The directory can be made again: the next capture is saved.
  std::filesystem::remove(dir);
  kill(d.pid(), SIGUSR1);
  std::this_thread::sleep_for(1500ms);
  CHECK(d.stop() == 0);
  const std::string err = d.stderr_text();
  INFO(err);
  std::size_t lines = 0;
  for (std::size_t at = err.find("not saved"); at != std::string::npos;
       at = err.find("not saved", at + 1)) {
    ++lines;
  }
  CHECK(lines == 1);
  const auto rows = test::query_db(dd.db, "SELECT count(*) FROM captures");
  CHECK(test::as_int(rows[0][0]) == 1);
}

TEST_CASE("flight recorder: rsched-sql mark --tag capture saves the seconds before the mark "
          "(raw_tp)",
          "[root][flight]") {
  if (!test::bpf_available()) {
    return;
  }
  // In raw_tp mode, so that the flight programs' other variant is loaded and checked too.
  test::recording rec({"--bpf-mode", "raw_tp", "--flight-recorder", "3"});
  REQUIRE(test::wait_for_intervals(rec.db, 2, 10s));
  const std::int64_t before = test::realtime_ns();
  auto m = test::run_program(
      {test::rsched_sql_path(), rec.db, "mark", "checkout \"slow\"", "--tag", "capture"});
  INFO(m.err);
  REQUIRE(m.status == 0);
  // Noticed at the next interval's end, taken within a read period.
  for (int i = 0; i < 40 && test::as_int(test::query_db(rec.db, "SELECT count(*) FROM "
                                                                "captures")[0][0]) == 0;
       ++i) {
    std::this_thread::sleep_for(100ms);
  }
  CHECK(rec.d.stop() == 0);
  const auto rows = test::query_db(
      rec.db, "SELECT c.trigger, c.reason, c.annotation_id = a.id, c.end_ns, c.start_ns, c.file "
              "FROM captures AS c JOIN annotations AS a ON a.text = 'checkout \"slow\"'");
  REQUIRE(rows.size() == 1);
  CHECK(test::as_text(rows[0][0]) == "annotation");
  CHECK(test::as_text(rows[0][1]) == "checkout \"slow\"");
  CHECK(test::as_int(rows[0][2]) == 1);
  // The window ends at the mark and holds the 3 s before it.
  CHECK(test::as_int(rows[0][3]) >= before);
  CHECK(test::as_int(rows[0][3]) - test::as_int(rows[0][4]) == 3'000'000'000);
  auto d = trace::decode(slurp(test::as_text(rows[0][5])));
  REQUIRE(d);
  CHECK(d->events.size() > 100);
  bool switches = false;
  for (const auto &e : d->events) {
    switches = switches || (e.kind == trace::event_kind::sched_switch && e.tid > 0 &&
                            !trace::comm_view(e.comm).empty());
  }
  CHECK(switches);
}

TEST_CASE("flight recorder: --flight-keep removes the oldest capture and its file",
          "[root][flight]") {
  if (!test::bpf_available()) {
    return;
  }
  test::recording rec({"--flight-recorder", "2", "--flight-keep", "1"});
  REQUIRE(test::wait_for_intervals(rec.db, 1, 10s));
  std::vector<std::string> files;
  for (int i = 0; i < 2; ++i) {
    kill(rec.d.pid(), SIGUSR1);
    std::string file;
    for (int t = 0; t < 40 && file.empty(); ++t) {
      std::this_thread::sleep_for(100ms);
      const auto rows =
          test::query_db(rec.db, "SELECT file FROM captures ORDER BY id DESC LIMIT 1");
      if (!rows.empty() && (files.empty() || test::as_text(rows[0][0]) != files.back())) {
        file = test::as_text(rows[0][0]);
      }
    }
    REQUIRE_FALSE(file.empty());
    files.push_back(file);
  }
  CHECK(rec.d.stop() == 0);
  const auto rows = test::query_db(rec.db, "SELECT file FROM captures");
  REQUIRE(rows.size() == 1);
  CHECK(test::as_text(rows[0][0]) == files[1]);
  CHECK_FALSE(std::filesystem::exists(files[0]));
  CHECK(std::filesystem::exists(files[1]));
}

TEST_CASE("flight recorder: a full disk is one line, recording goes on, and the next capture "
          "after space returns is saved",
          "[root][flight]") {
  if (!test::bpf_available()) {
    return;
  }
  test::tmpfs_dir fs("64m");
  REQUIRE(fs.mounted());
  const std::string db = fs.mnt() + "/rsched.db";
  const std::string filler = fs.mnt() + "/filler";
  test::daemon d({"--db", db, "--flight-recorder", "2"});
  d.require(d.wait_attached(), "rschedd did not attach");
  d.require(test::wait_for_intervals(db, 1, 10s), "no intervals before the disk filled up");
  d.require(test::fill(filler) > 0, "could not fill the tmpfs");
  for (int i = 0; i < 2; ++i) {
    kill(d.pid(), SIGUSR1);
    std::this_thread::sleep_for(1500ms);
  }
  std::filesystem::remove(filler);
  const auto n = test::raw_intervals(db);
  d.require(test::wait_for_intervals(db, n, 10s), "recording did not go on");
  kill(d.pid(), SIGUSR1);
  std::this_thread::sleep_for(1500ms);
  CHECK(d.stop() == 0);
  const std::string err = d.stderr_text();
  INFO(err);
  const std::string what = "rschedd: flight recorder: capture (signal) not saved: ";
  const auto at = err.find(what);
  REQUIRE(at != std::string::npos);
  CHECK(err.find("No space left on device", at) < err.find('\n', at));
  CHECK(err.find(what, at + 1) == std::string::npos); // one line for the episode
  // The capture after space returned is saved and listed.
  const auto rows = test::query_db(db, "SELECT count(*), min(bytes) FROM captures");
  CHECK(test::as_int(rows[0][0]) == 1);
  CHECK(test::as_int(rows[0][1]) > 0);
}

TEST_CASE("flight recorder: a mark older than the window is one note, not a capture",
          "[root][flight]") {
  if (!test::bpf_available()) {
    return;
  }
  test::recording rec({"--flight-recorder", "2"});
  REQUIRE(test::wait_for_intervals(rec.db, 1, 10s));
  auto m = test::run_program({test::rsched_sql_path(), rec.db, "mark", "yesterday's", "--at",
                              "1h ago", "--tag", "capture"});
  REQUIRE(m.status == 0);
  const auto n = test::raw_intervals(rec.db);
  REQUIRE(test::wait_for_intervals(rec.db, n + 1, 10s));
  CHECK(rec.d.stop() == 0);
  const std::string err = rec.d.stderr_text();
  INFO(err);
  CHECK(err.find("is older than the last 2 s: not captured") != std::string::npos);
  CHECK(test::as_int(test::query_db(rec.db, "SELECT count(*) FROM captures")[0][0]) == 0);
}

TEST_CASE("flight recorder: a.db and a.sqlite keep their captures apart, and each capture's "
          "clock snapshot maps its boot times to wall time as Perfetto reads it",
          "[root][flight]") {
  if (!test::bpf_available()) {
    return;
  }
  REQUIRE(test::in_path("protoc"));
  // Before issue 51 both wrote into a.captures/, and no capture had a clock snapshot.
  test::db_dir dd;
  std::vector<std::string> files;
  for (const char *name : {"a.db", "a.sqlite"}) {
    const std::string db = dd.dir + "/" + name;
    test::daemon d({"--db", db, "--flight-recorder", "2"});
    d.require(d.wait_attached(), "rschedd did not attach");
    d.require(test::wait_for_intervals(db, 0, 10s), "no interval");
    kill(d.pid(), SIGUSR1);
    d.require(wait_for_captures(db, 0, 5s), "no capture");
    const std::int64_t real_minus_boot = test::realtime_ns() - static_cast<std::int64_t>(boot_ns());
    CHECK(d.stop() == 0);
    const auto rows = test::query_db(db, "SELECT file, end_ns FROM captures");
    REQUIRE(rows.size() == 1);
    const std::string file = test::as_text(rows[0][0]);
    INFO(file);
    CHECK(file.rfind(db + ".captures/", 0) == 0);
    files.push_back(file);
    // rsched's decoder: the snapshot's offset is the wall clock's now, and the row's end is
    // the window's end in boot time moved by it.
    auto t = trace::decode(slurp(file));
    REQUIRE(t);
    REQUIRE(t->clocks);
    const auto &c = *t->clocks;
    const std::int64_t offset =
        static_cast<std::int64_t>(c.realtime_ns) - static_cast<std::int64_t>(c.boottime_ns);
    CHECK(std::llabs(offset - real_minus_boot) < 50'000'000);
    // Read right after it; the boot clock also counts suspend, the monotonic one not.
    CHECK(c.monotonic_ns <= c.boottime_ns + 1'000'000);
    std::uint64_t last = 0;
    for (const auto &e : t->events) {
      last = std::max(last, e.ts);
    }
    const auto end_boot = static_cast<std::uint64_t>(test::as_int(rows[0][1]) - offset);
    CHECK(last <= end_boot);
    CHECK(end_boot - last < 1'000'000'000);
    // protoc with Perfetto's messages: the first packet is the ClockSnapshot.
    auto r = test::run_program({"sh", "-c",
                                "protoc --decode=perfetto.protos.Trace -I " RSCHED_TRACE_PROTO_DIR
                                " rsched_perfetto.proto < '" +
                                    file + "'"});
    REQUIRE(r.status == 0);
    const std::string want = "packet {\n"
                             "  clock_snapshot {\n"
                             "    clocks {\n"
                             "      clock_id: 6\n"
                             "      timestamp: " +
                             std::to_string(c.boottime_ns) +
                             "\n"
                             "    }\n"
                             "    clocks {\n"
                             "      clock_id: 3\n"
                             "      timestamp: " +
                             std::to_string(c.monotonic_ns) +
                             "\n"
                             "    }\n"
                             "    clocks {\n"
                             "      clock_id: 1\n"
                             "      timestamp: " +
                             std::to_string(c.realtime_ns) +
                             "\n"
                             "    }\n"
                             "    primary_trace_clock: BUILTIN_CLOCK_BOOTTIME\n"
                             "  }\n";
    CHECK(r.out.substr(0, want.size()) == want);
  }
  CHECK(files[0] != files[1]);
  CHECK(std::filesystem::exists(files[0]));
  CHECK(std::filesystem::exists(files[1]));
  CHECK_FALSE(std::filesystem::exists(dd.dir + "/a.captures"));
}

TEST_CASE("rschedd without --flight-recorder: SIGUSR1 is one line and ignored", "[root][flight]") {
  if (!test::bpf_available()) {
    return;
  }
  // Before issue 51 its default action ended the run: exit by signal, the interval unrecorded.
  test::recording rec({});
  REQUIRE(test::wait_for_intervals(rec.db, 0, 10s));
  kill(rec.d.pid(), SIGUSR1);
  std::this_thread::sleep_for(200ms);
  kill(rec.d.pid(), SIGUSR1);
  const auto n = test::raw_intervals(rec.db);
  rec.d.require(test::wait_for_intervals(rec.db, n + 1, 10s), "recording did not go on");
  CHECK(rec.d.stop() == 0);
  const std::string err = rec.d.stderr_text();
  INFO(err);
  CHECK(count_of(err, "SIGUSR1") == 1);
  CHECK(err.find("rschedd: SIGUSR1 asks the flight recorder for a capture, but it is off "
                 "(--flight-recorder SECONDS): ignored") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(flight::captures_dir(rec.db)));
}

TEST_CASE("flight recorder: a burst of requests is one capture per window, an empty window is "
          "not written, and the captures before stay within --flight-keep",
          "[root][flight]") {
  if (!test::bpf_available()) {
    return;
  }
  // Before issue 51 every request was a file: the marks below were three 8-byte traces and the
  // burst a dozen near-copies of one window, and --flight-keep 3 kept none of the real ones.
  test::recording rec({"--flight-recorder", "8", "--flight-keep", "3"});
  REQUIRE(test::wait_for_intervals(rec.db, 0, 10s));
  // Marks 5 s back: within the last 8 s, but before the recorder started (a second or two ago):
  // their windows hold nothing.
  for (int i = 0; i < 3; ++i) {
    auto m =
        test::run_program({test::rsched_sql_path(), rec.db, "mark", "before " + std::to_string(i),
                           "--at", "5s ago", "--tag", "capture"});
    REQUIRE(m.status == 0);
  }
  const auto n = test::raw_intervals(rec.db);
  rec.d.require(test::wait_for_intervals(rec.db, n + 1, 10s), "no intervals after the marks");
  CHECK(captures_of(rec.db) == 0);
  // The capture that matters.
  kill(rec.d.pid(), SIGUSR1);
  rec.d.require(wait_for_captures(rec.db, 0, 5s), "no capture of the first SIGUSR1");
  const auto first = test::query_db(rec.db, "SELECT file, end_ns FROM captures");
  // The burst: ten signals and two marks within a second, all in the 8 s after the first
  // capture: one capture of those 8 s, saved when they have passed.
  for (int i = 0; i < 10; ++i) {
    kill(rec.d.pid(), SIGUSR1);
    std::this_thread::sleep_for(50ms);
  }
  for (int i = 0; i < 2; ++i) {
    auto m = test::run_program({test::rsched_sql_path(), rec.db, "mark",
                                "burst " + std::to_string(i), "--tag", "capture"});
    REQUIRE(m.status == 0);
  }
  std::this_thread::sleep_for(2s);
  CHECK(captures_of(rec.db) == 1);
  rec.d.require(wait_for_captures(rec.db, 1, 12s), "no capture of the burst's window");
  // One more, and the stop before its window ends: saved at the stop.
  kill(rec.d.pid(), SIGUSR1);
  std::this_thread::sleep_for(300ms);
  const std::int64_t stopped = test::realtime_ns();
  CHECK(rec.d.stop() == 0);
  const std::string err = rec.d.stderr_text();
  INFO(err);
  const auto rows =
      test::query_db(rec.db, "SELECT file, start_ns, end_ns, bytes, events, trigger FROM captures "
                             "ORDER BY id");
  REQUIRE(rows.size() == 3);
  CHECK(test::as_text(rows[0][0]) == test::as_text(first[0][0])); // kept
  // The burst's window: the 8 s after the first capture's end.
  const std::int64_t first_end = test::as_int(first[0][1]);
  CHECK(std::llabs(test::as_int(rows[1][1]) - first_end) < 1'000'000);
  CHECK(test::as_int(rows[1][2]) - test::as_int(rows[1][1]) == 8'000'000'000);
  // The last one ends at the stop.
  CHECK(std::llabs(test::as_int(rows[2][2]) - stopped) < 1'000'000'000);
  for (const auto &row : rows) {
    CHECK(test::as_int(row[3]) > 1000);
    CHECK(test::as_int(row[4]) > 0);
    CHECK(std::filesystem::file_size(test::as_text(row[0])) ==
          static_cast<std::uintmax_t>(test::as_int(row[3])));
  }
  std::size_t files = 0;
  for ([[maybe_unused]] const auto &f :
       std::filesystem::directory_iterator(flight::captures_dir(rec.db))) {
    ++files;
  }
  CHECK(files == 3);
  CHECK(count_of(err, "nothing written: its window holds no scheduler events") == 3);
  CHECK(count_of(err, "later requests within its window") == 1);
  std::smatch m;
  REQUIRE(std::regex_search(
      err, m,
      std::regex(R"((\d+) captures \((\d+) requests answered by another's capture, )"
                 R"((\d+) empty windows not written\))")));
  CHECK(m[1] == "3");
  CHECK(std::stoi(m[2]) >= 2); // the burst's signals arrive as fewer when they meet pending
  CHECK(m[3] == "3");
}
