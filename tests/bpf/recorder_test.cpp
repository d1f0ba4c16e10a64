// The recorder keeps its cadence whatever the live view, the terminal, the signals and the load
// do (issue 10): a paused terminal, a display filter against hostile names, SIGSTOP/SIGCONT,
// SIGHUP under nohup, a closed pipe on stderr, a switch storm on every CPU.
#include "rsched/query/reader.hpp"

#include "root_test_util.hpp"
#include "support/temp_dir.hpp"

#include <sys/ioctl.h>
#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <pty.h>
#include <string>
#include <termios.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace rsched;
using namespace std::chrono_literals;

namespace {

using test::as_int;
using test::as_text;

// A pseudo-terminal nobody reads: once its buffer is full, every write to it blocks (or, in
// non-blocking mode, fails with EAGAIN), as with a stopped tmux or a frozen ssh link.
struct pty {
  int master = -1;
  int slave = -1;
  pty() {
    winsize ws{};
    ws.ws_row = 50;
    ws.ws_col = 200;
    REQUIRE(openpty(&master, &slave, nullptr, nullptr, &ws) == 0);
  }
  ~pty() {
    close(master);
    close(slave);
  }
  pty(const pty &) = delete;
  pty &operator=(const pty &) = delete;
  // Fills the terminal's output buffer from the slave side until a write would block: from
  // then on the terminal is paused for whatever writes to it, however small its frames.
  [[nodiscard]] std::size_t fill() const {
    const int fd = ::open(ptsname(master), O_WRONLY | O_NONBLOCK | O_NOCTTY);
    REQUIRE(fd >= 0);
    const std::string chunk(4096, 'x');
    std::size_t total = 0;
    // The kernel moves buffered output on to the master side in the background, freeing room
    // after a write would block: fill again until a whole pass writes nothing.
    for (bool wrote = true; wrote;) {
      wrote = false;
      ssize_t n = 0;
      while ((n = write(fd, chunk.data(), chunk.size())) > 0) {
        total += static_cast<std::size_t>(n);
        wrote = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    close(fd);
    return total;
  }
  // Reads what is waiting on the master side (non-blocking).
  [[nodiscard]] std::string drain() const {
    std::string out;
    const int fl = fcntl(master, F_GETFL);
    fcntl(master, F_SETFL, fl | O_NONBLOCK);
    char buf[65536];
    ssize_t n = 0;
    while ((n = read(master, buf, sizeof(buf))) > 0) {
      out.append(buf, static_cast<std::size_t>(n));
    }
    fcntl(master, F_SETFL, fl);
    return out;
  }
};

// Lengths (ms) of the raw intervals, in order, and whether each was the final / a stalled one.
struct iv {
  double ms;
  bool final_iv;
  bool stalled;
};
std::vector<iv> intervals(const std::string &db) {
  std::vector<iv> out;
  for (const auto &r : test::query_db(db, "SELECT dur_ns, flags FROM intervals WHERE tier = 0 "
                                          "ORDER BY start_ns")) {
    out.push_back({static_cast<double>(as_int(r[0])) / 1e6, (as_int(r[1]) & 1) != 0,
                   (as_int(r[1]) & 2) != 0});
  }
  return out;
}

std::string describe(const std::vector<iv> &ivs) {
  std::string s;
  for (const auto &i : ivs) {
    s += std::to_string(static_cast<long>(i.ms)) + (i.final_iv ? "F" : "") +
         (i.stalled ? "S" : "") + " ";
  }
  return s;
}

// Every interval but the final one lasted `ms` within `tol_ms`.
void check_cadence(const std::vector<iv> &ivs, double ms, double tol_ms) {
  INFO("interval lengths (ms): " << describe(ivs));
  REQUIRE(ivs.size() >= 2);
  for (std::size_t i = 0; i + 1 < ivs.size(); ++i) {
    CHECK(ivs[i].ms > ms - tol_ms);
    CHECK(ivs[i].ms < ms + tol_ms);
    CHECK_FALSE(ivs[i].stalled);
  }
  CHECK(ivs.back().final_iv);
}

} // namespace

// A terminal that stops reading (a stopped tmux, Ctrl-S, a slow link) held up rschedd's writes to
// stdout, and recording with it: one 14.5 s interval, and -r and SIGTERM not honoured. The live
// view now writes from its own thread through a non-blocking file description.
TEST_CASE("A paused terminal never holds up recording", "[root][bpf]") {
  if (!test::bpf_available()) {
    return;
  }
  for (const char *view : {"tables", "compact"}) {
    INFO("--view " << view);
    const test::db_dir files;
    pty t;
    // tables -d: frames big enough (every thread, every section) to fill the pty's buffer
    // within a few seconds. The compact view fits the screen, so its terminal is paused from
    // the start: the buffer is filled before rschedd runs.
    const bool prefilled = std::string(view) == "compact";
    if (prefilled) {
      REQUIRE(t.fill() > 0);
    }
    test::daemon d(
        {"--db", files.db, "-r", "6", "-g", "latency,slice,sleep,migration", "--view", view, "-d"},
        {t.slave, false});
    REQUIRE(d.wait_attached());
    const auto status = d.wait_exit(12000);
    INFO(d.stderr_text());
    REQUIRE(status.has_value()); // -r was honoured
    CHECK(*status == 0);
    check_cadence(intervals(files.db), 1000, 150);
    CHECK(intervals(files.db).size() == 6);
    const std::string shown = t.drain();
    if (prefilled) {
      // Not one frame got through, and recording went on regardless.
      CHECK(shown.find("intervals written") == std::string::npos);
    } else {
      CHECK(shown.size() > 1000); // the view showed something before the terminal filled
    }
  }
}

TEST_CASE_METHOD(test::db_dir, "SIGTERM is honoured at once while the terminal is paused",
                 "[root][bpf]") {
  if (!test::bpf_available()) {
    return;
  }
  pty t;
  test::daemon d({"--db", db, "-g", "latency,slice,sleep,migration", "--view", "tables", "-d"},
                 {t.slave, false});
  REQUIRE(d.wait_attached());
  std::this_thread::sleep_for(3500ms); // the pty's buffer is full by now
  kill(d.pid(), SIGTERM);
  const auto status = d.wait_exit(2000);
  INFO(d.stderr_text());
  REQUIRE(status.has_value());
  CHECK(*status == 0);
  const auto ivs = intervals(db);
  CHECK(ivs.size() == 4);
  CHECK(ivs.back().final_iv);
}

// A display filter that backtracks (`(a*)*b`) against a long cgroup name any user can create
// pinned rschedd in std::regex for tens of seconds per match. RE2 is linear, and the filter runs
// on the display thread anyway.
TEST_CASE_METHOD(test::db_dir,
                 "A backtracking display filter against a long cgroup name keeps the cadence",
                 "[root][bpf]") {
  if (!test::bpf_available()) {
    return;
  }
  std::string mount;
  for (const char *m : {"/sys/fs/cgroup/unified", "/sys/fs/cgroup"}) {
    if (std::filesystem::exists(std::string(m) + "/cgroup.procs") &&
        std::filesystem::exists(std::string(m) + "/cgroup.threads")) {
      mount = m;
      break;
    }
  }
  if (mount.empty()) {
    FAIL("no cgroup v2 hierarchy mounted");
  }
  const std::string cg = mount + "/" + std::string(200, 'a');
  std::filesystem::create_directory(cg);
  // A busy child in that cgroup, named with as many a's as a comm holds.
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::ofstream(cg + "/cgroup.procs") << getpid();
    const char name[] = "aaaaaaaaaaaaaaa";
    pthread_setname_np(pthread_self(), name);
    for (;;) {
      usleep(1000);
    }
  }
  {
    pty t;
    test::daemon d(
        {"--db", db, "-r", "5", "--cgroup", "(a*)*b", "-c", "(a*)*b", "--view", "tables", "-d"},
        {t.slave, false});
    REQUIRE(d.wait_attached());
    std::string shown;
    const auto status = d.wait_exit(10000);
    shown = t.drain();
    INFO(d.stderr_text());
    REQUIRE(status.has_value());
    CHECK(*status == 0);
    check_cadence(intervals(db), 1000, 150);
    CHECK(shown.find("No processes match") != std::string::npos);
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  std::filesystem::remove(cg);
}

// After SIGSTOP/SIGCONT rschedd replayed every missed tick as a run of 0.07-0.87 ms intervals.
// The missed ticks are coalesced into one interval, marked stalled, visible in health and gaps().
TEST_CASE_METHOD(test::db_dir, "Missed ticks are coalesced into one stalled interval",
                 "[root][bpf]") {
  if (!test::bpf_available()) {
    return;
  }
  test::daemon d({"--db", db, "-r", "9"});
  REQUIRE(d.wait_attached());
  std::this_thread::sleep_for(2200ms);
  kill(d.pid(), SIGSTOP);
  std::this_thread::sleep_for(4000ms);
  kill(d.pid(), SIGCONT);
  const auto status = d.wait_exit(10000);
  INFO(d.stderr_text());
  REQUIRE(status.has_value());
  CHECK(*status == 0);
  const auto ivs = intervals(db);
  INFO("interval lengths (ms): " << describe(ivs));
  int stalled = 0;
  int short_ones = 0;
  for (std::size_t i = 0; i + 1 < ivs.size(); ++i) {
    stalled += ivs[i].stalled ? 1 : 0;
    short_ones += ivs[i].ms < 500 ? 1 : 0;
    if (ivs[i].stalled) {
      CHECK(ivs[i].ms > 3500);
    }
  }
  CHECK(stalled == 1);
  CHECK(short_ones <= 1); // the one that realigns with the 1-s grid after the stall
  CHECK(ivs.size() <= 7);
  CHECK(d.stderr_text().find("fell behind") != std::string::npos);
  const auto h = test::query_db(db, "SELECT count(*) FROM health WHERE stalled = 1");
  CHECK(as_int(h[0][0]) == 1);
  const auto g =
      test::query_db(db, "SELECT count(*) FROM gaps() WHERE reason = 'recorder stalled'");
  CHECK(as_int(g[0][0]) == 1);
}

TEST_CASE_METHOD(test::db_dir,
                 "SIGHUP does not stop rschedd when it was started ignoring it (nohup)",
                 "[root][bpf]") {
  if (!test::bpf_available()) {
    return;
  }
  test::daemon d({"--db", db, "-r", "4"}, {-1, true});
  REQUIRE(d.wait_attached());
  std::this_thread::sleep_for(1200ms);
  kill(d.pid(), SIGHUP);
  CHECK_FALSE(d.wait_exit(1500).has_value()); // still running
  const auto status = d.wait_exit(5000);
  INFO(d.stderr_text());
  REQUIRE(status.has_value());
  CHECK(*status == 0);
  CHECK(intervals(db).size() == 4);
  // Without nohup, SIGHUP still ends the run cleanly.
  const test::temp_dir dir2_tmp;
  const std::string dir2 = dir2_tmp.str();
  test::daemon h({"--db", dir2 + "/rsched.db"});
  REQUIRE(h.wait_attached());
  std::this_thread::sleep_for(1200ms);
  CHECK(h.stop(SIGHUP) == 0);
}

// `rschedd 2>&1 | head -1`: once head exits, the next note hits a closed pipe. SIGPIPE killed
// rschedd there, before anything was recorded.
TEST_CASE_METHOD(test::db_dir,
                 "A closed pipe on stdout and stderr does not lose the final interval",
                 "[root][bpf]") {
  if (!test::bpf_available()) {
    return;
  }
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    const std::string path = test::rschedd_path();
    execl(path.c_str(), path.c_str(), "--db", db.c_str(), "-r", "3", nullptr);
    _exit(127);
  }
  close(fds[1]);
  char c = 0;
  while (read(fds[0], &c, 1) == 1 && c != '\n') {
  }
  close(fds[0]); // head -1 has its line and exits
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  INFO("status " << status);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  const auto ivs = intervals(db);
  REQUIRE(ivs.size() == 3);
  CHECK(ivs.back().final_iv);
}

// During a switch storm on every CPU, with the live view on a terminal, the recorder wrote
// intervals of up to 2.5 s (21.9 s in the run). The view runs on its own thread at nice
// 10. With --rt-priority 1 (SCHED_FIFO) the recorder keeps its cadence exactly. By default it is
// an ordinary thread (issue 31: it must not cause the latency it records): a late tick makes a
// longer interval, and nothing is lost: the intervals still cover the whole run, back to back.
TEST_CASE_METHOD(test::db_dir,
                 "The recorder keeps its cadence during a switch storm with the live view on",
                 "[root][bpf]") {
  if (!test::bpf_available()) {
    return;
  }
  const pid_t storm = fork();
  REQUIRE(storm >= 0);
  if (storm == 0) {
    execlp("stress-ng", "stress-ng", "--switch", "32", "--cpu", "4", "-t", "28", nullptr);
    _exit(127);
  }
  std::this_thread::sleep_for(1000ms);
  for (const bool fifo : {true, false}) {
    INFO((fifo ? "--rt-priority 1" : "the default (SCHED_OTHER)"));
    const std::string path = dir + (fifo ? "/fifo.db" : "/other.db");
    pty t;
    std::vector<std::string> args = {"--db", path, "-r",
                                     "10",   "-g", "latency,slice,sleep,migration"};
    if (fifo) {
      args.insert(args.end(), {"--rt-priority", "1"});
    }
    test::daemon d(args, {t.slave, false});
    REQUIRE(d.wait_attached(20000));
    // Read the terminal as a live user would, so the view really renders all along.
    std::string shown;
    std::optional<int> status;
    for (int i = 0; i < 200 && !status; ++i) {
      shown += t.drain();
      status = d.wait_exit(100);
    }
    INFO(d.stderr_text());
    REQUIRE(status.has_value());
    CHECK(*status == 0);
    CHECK(shown.size() > 1000);
    if (fifo) {
      check_cadence(intervals(path), 1000, 250);
      continue;
    }
    // Back to back: each interval starts where the one before ended (within 50 ms), and
    // together they cover the 10 s asked for.
    const auto rows = test::query_db(path, "SELECT start_ns, dur_ns FROM intervals WHERE tier = 0 "
                                           "ORDER BY start_ns");
    REQUIRE(rows.size() >= 2);
    std::int64_t total = 0;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      total += as_int(rows[i][1]);
      if (i > 0) {
        const std::int64_t hole =
            as_int(rows[i][0]) - (as_int(rows[i - 1][0]) + as_int(rows[i - 1][1]));
        CHECK(std::llabs(hole) < 50'000'000);
      }
    }
    CHECK(total > 9'500'000'000);
    CHECK(total < 10'500'000'000);
  }
  kill(storm, SIGTERM);
  waitpid(storm, nullptr, 0);
}

TEST_CASE("rschedd: an unknown metric group is bad usage (exit 2)", "[rschedd]") {
  const std::string cmd = test::rschedd_path() + " -g bogus --no-db -r 1 2>/dev/null";
  const int status = std::system(cmd.c_str());
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 2);
}
