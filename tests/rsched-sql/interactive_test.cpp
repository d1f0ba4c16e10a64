// The interactive shell driven through a pseudo-terminal: prompts, multi-line statements, errors
// that do not end the session, Ctrl-C, Ctrl-D, and history kept across sessions.
#include "rsched/sql_shell/shell.hpp"

#include "helpers.hpp"

#include <catch2/catch.hpp>
#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <thread>
#include <unistd.h>

using namespace rsched_sql_test;

namespace {

class pty_session {
public:
  // `pager`: the PAGER the session sees ("": none, the default here: a test must not wait on
  // less).
  pty_session(const std::vector<std::string> &args, const std::string &history,
              const std::string &pager = "") {
    winsize ws{};
    ws.ws_row = 40;
    ws.ws_col = 200;
    const rsched::test::exec_argv argv(binary, args);
    pid_ = forkpty(&fd_, nullptr, nullptr, &ws);
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      setenv("TERM", "dumb", 1);
      setenv("INPUTRC", "/dev/null", 1);
      setenv("RSCHED_SQL_HISTORY", history.c_str(), 1);
      setenv("PAGER", pager.c_str(), 1);
      execv(binary.c_str(), argv.get());
      _exit(127);
    }
  }
  ~pty_session() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) {
      close(fd_);
    }
  }
  pty_session(const pty_session &) = delete;
  pty_session &operator=(const pty_session &) = delete;

  void send(const std::string &keys) {
    REQUIRE(write(fd_, keys.data(), keys.size()) == static_cast<ssize_t>(keys.size()));
  }

  // Reads until `needle` shows up after the current mark; moves the mark past it.
  bool expect(const std::string &needle, std::chrono::seconds timeout = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (const auto pos = output_.find(needle, mark_); pos != std::string::npos) {
        mark_ = pos + needle.size();
        return true;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !read_some(static_cast<int>(left.count()))) {
        UNSCOPED_INFO("waiting for: " << needle << "\noutput so far:\n" << output_);
        return false;
      }
    }
  }

  // Waits for the process to end (reading what it still writes); returns its exit status.
  int wait_exit() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      int ws = 0;
      if (waitpid(pid_, &ws, WNOHANG) == pid_) {
        reaped_ = true;
        while (read_some(100)) {
        }
        return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
      }
      read_some(50);
    }
    return -2;
  }

  [[nodiscard]] const std::string &output() const { return output_; }
  [[nodiscard]] std::string since(std::size_t pos) const { return output_.substr(pos); }
  [[nodiscard]] std::size_t mark() const { return mark_; }

private:
  bool read_some(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) {
      return false;
    }
    char buf[4096];
    const ssize_t n = read(fd_, buf, sizeof buf);
    if (n <= 0) {
      return false; // EIO once the child is gone
    }
    output_.append(buf, static_cast<std::size_t>(n));
    return true;
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  bool reaped_ = false;
  std::string output_;
  std::size_t mark_ = 0;
};

} // namespace

TEST_CASE(
    "rsched-sql interactive: prompts and escaping and errors and Ctrl-C and Ctrl-D and history",
    "[rsched-sql]") {
  temp_dir dir;
  const std::string db = make_db(dir);
  const std::string history = dir.file("history");
  {
    pty_session s({db}, history);
    REQUIRE(s.expect("Enter .help"));
    REQUIRE(s.expect("rsched> "));

    // A statement over two lines: continuation prompt, then a table with the comm escaped.
    s.send("SELECT comm FROM sched_delay\r");
    REQUIRE(s.expect("   ...> "));
    const std::size_t before = s.mark();
    s.send("WHERE tid = 42;\r");
    REQUIRE(s.expect("| evil\"c,o\\x1b[2Jm |"));
    REQUIRE(s.expect("rsched> "));
    CHECK(s.since(before).find("\x1b[2J") == std::string::npos);

    // CSV on a terminal is escaped too.
    s.send(".mode csv\r");
    REQUIRE(s.expect("rsched> "));
    s.send("SELECT comm FROM sched_delay WHERE tid = 42;\r");
    REQUIRE(s.expect("\"evil\"\"c,o\\x1b[2Jm\""));
    REQUIRE(s.expect("rsched> "));
    s.send(".mode table\r");
    REQUIRE(s.expect("rsched> "));

    // A failed statement prints its error and the session goes on.
    s.send("SELEC 1;\r");
    REQUIRE(s.expect("rsched-sql: "));
    REQUIRE(s.expect("rsched> "));
    s.send("SELECT 7 AS seven;\r");
    REQUIRE(s.expect("|     7 |"));

    // Ctrl-C drops the statement being typed.
    s.send("SELECT 1\r");
    REQUIRE(s.expect("   ...> "));
    s.send("\x03");
    REQUIRE(s.expect("rsched> "));
    const std::size_t after_ctrl_c = s.mark();
    s.send("SELECT 8 AS eight;\r");
    REQUIRE(s.expect("|     8 |"));
    CHECK(s.since(after_ctrl_c).find("rsched-sql:") == std::string::npos);

    // The last statement, over two lines, is recalled by the next session.
    s.send("SELECT 40\r");
    REQUIRE(s.expect("   ...> "));
    s.send("+ 2 AS answer;\r");
    REQUIRE(s.expect("|     42 |"));
    REQUIRE(s.expect("rsched> "));
    s.send("\x04"); // Ctrl-D
    CHECK(s.wait_exit() == 0);
  }
  const std::string saved = slurp(history);
  CHECK(saved.find("SELECT comm FROM sched_delay\nWHERE tid = 42;\n") != std::string::npos);
  CHECK(saved.find(".mode csv\n") != std::string::npos);
  CHECK(saved.find("SELECT 1\n") == std::string::npos); // interrupted, never entered
  {
    pty_session s({db}, history);
    REQUIRE(s.expect("rsched> "));
    s.send("\x10\r"); // Ctrl-P (previous history), Enter
    REQUIRE(s.expect("|     42 |"));
    REQUIRE(s.expect("rsched> "));
    s.send(".quit\r");
    CHECK(s.wait_exit() == 0);
  }
}

TEST_CASE("rsched-sql interactive: tab completes dot commands and names", "[rsched-sql]") {
  temp_dir dir;
  const std::string db = make_db(dir);
  pty_session s({db}, dir.file("history"));
  REQUIRE(s.expect("rsched> "));
  s.send(".tab\t\r");
  REQUIRE(s.expect("cpu_sched_delay\r\n")); // .tables ran
  REQUIRE(s.expect("rsched> "));
  s.send("SELECT count(*) AS n FROM cpu_sched_d\t;\r");
  REQUIRE(s.expect("| 1 |"));
  REQUIRE(s.expect("rsched> "));
  // A function completes with no space before its parenthesis (issue 17); the statement is
  // recalled from the history, as typed.
  s.send("SELECT hist_mea\t(hist) AS m FROM sched_delay LIMIT 0;\r");
  REQUIRE(s.expect("rsched> "));
  s.send("\x1b[A"); // up: the line as it was entered
  REQUIRE(s.expect("SELECT hist_mean(hist) AS m"));
  s.send("\r"); // run it again; then a marker, so that the last prompt is a fresh one
  s.send("SELECT 'done' AS marker;\r");
  REQUIRE(s.expect("| done"));
  REQUIRE(s.expect("rsched> "));
  s.send("\x04");
  CHECK(s.wait_exit() == 0);
}

TEST_CASE("rsched-sql interactive: multi-line recall, completion, Ctrl-C in a query, .once",
          "[rsched-sql]") {
  temp_dir dir;
  const std::string db = make_db(dir);
  const std::string csv = dir.file("x.csv");
  pty_session s({db}, dir.file("history"));
  REQUIRE(s.expect("rsched> "));

  // A statement over three lines, then recalled whole with the up arrow.
  s.send("SELECT 6\r");
  REQUIRE(s.expect("   ...> "));
  s.send("* 7\r");
  REQUIRE(s.expect("   ...> "));
  s.send("AS product;\r");
  REQUIRE(s.expect("|      42 |"));
  REQUIRE(s.expect("rsched> "));
  s.send("\x1b[A\r"); // up arrow, Enter
  REQUIRE(s.expect("|      42 |"));
  REQUIRE(s.expect("rsched> "));

  // Tab completes a view name (the only match of "runq_dep").
  s.send("SELECT count(*) >= 0 AS n FROM runq_dep\t;\r");
  REQUIRE(s.expect("| 1 |"));
  REQUIRE(s.expect("rsched> "));

  // Ctrl-C during a long query cancels it and the prompt works again.
  if (rsched::sql_shell::shell::can_interrupt()) {
    s.send("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) "
           "SELECT count(*) FROM c;\r");
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    s.send("\x03");
    REQUIRE(s.expect("Interrupted"));
    REQUIRE(s.expect("rsched> "));
    s.send("SELECT 9 AS nine;\r");
    REQUIRE(s.expect("|    9 |"));
    REQUIRE(s.expect("rsched> "));
  } else {
    WARN("query::reader has no interrupt(): Ctrl-C during a query is not tested");
  }

  // .once writes the next result as CSV to a file; the one after comes back to the terminal.
  s.send(".mode csv\r");
  REQUIRE(s.expect("rsched> "));
  s.send(".once " + csv + "\r");
  REQUIRE(s.expect("rsched> "));
  const std::size_t before_once = s.mark();
  s.send("SELECT comm FROM sched_delay ORDER BY tid;\r");
  REQUIRE(s.expect("rsched> "));
  CHECK(s.since(before_once).find("plain") == std::string::npos); // went to the file
  s.send("SELECT 'back' AS w;\r");
  REQUIRE(s.expect("back"));
  REQUIRE(s.expect("rsched> "));
  s.send("\x04");
  CHECK(s.wait_exit() == 0);
  const auto recs = parse_csv(slurp(csv));
  REQUIRE(recs.size() == 3);
  CHECK(recs[1][0] == "plain");
  CHECK(recs[2][0] == evil_comm); // exact bytes in the file
}

TEST_CASE("rsched-sql interactive: results wider or taller than the terminal go through the "
          "pager, .pager off prints them as they are",
          "[rsched-sql]") {
  temp_dir dir;
  const std::string db = make_db(dir);
  // The pager marks every line it passes on (the terminal is 200 x 40).
  pty_session s({db}, dir.file("history"), "sed 's/^/PAGED:/'");
  REQUIRE(s.expect("rsched> "));
  s.send("SELECT 1 AS narrow;\r"); // fits: printed as it is
  REQUIRE(s.expect("| narrow |"));
  REQUIRE(s.expect("rsched> "));
  CHECK(s.output().find("PAGED:") == std::string::npos);
  s.send("SELECT printf('%.250c', 'x') AS wide;\r"); // 250 columns: paged
  REQUIRE(s.expect("PAGED:| wide"));
  REQUIRE(s.expect("rsched> "));
  // 60 rows on 40 lines: paged
  s.send("WITH RECURSIVE n(value) AS (SELECT 1 UNION ALL SELECT value + 1 FROM n WHERE value < "
         "60) SELECT value FROM n;\r");
  REQUIRE(s.expect("PAGED:|    60 |"));
  REQUIRE(s.expect("rsched> "));
  s.send(".pager off\r");
  REQUIRE(s.expect("rsched> "));
  const auto mark = s.mark();
  s.send("SELECT printf('%.250c', 'y') AS wide2;\r");
  REQUIRE(s.expect("| wide2"));
  REQUIRE(s.expect("rsched> "));
  CHECK(s.since(mark).find("PAGED:") == std::string::npos);
  s.send(".pager\r");
  REQUIRE(s.expect("off"));
  s.send("SELECT 'end' AS marker;\r");
  REQUIRE(s.expect("| end"));
  REQUIRE(s.expect("rsched> "));
  s.send("\x04");
  CHECK(s.wait_exit() == 0);
}
