#pragma once
// Shared by the rsched-sql tests: a synthetic database written through
// store::writer, a shell over it, and running the built rsched-sql binary.
#include "rsched/query/reader.hpp"
#include "rsched/sql_shell/shell.hpp"
#include "rsched/store/writer.hpp"

#include "support/process.hpp"
#include "support/sanitizers.hpp"
#include "support/temp_dir.hpp"

#include <catch2/catch.hpp>
#include <sys/resource.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <optional>
#include <spawn.h>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

using metric = rsched::metrics::id;

extern char **environ;

namespace rsched_sql_test {

inline const std::string binary = RSCHED_BINARY_DIR "/apps/rsched-sql/rsched-sql";

// The hostile comm of the end-to-end tests: a quote, a comma and an erase-screen sequence.
inline const std::string evil_comm = "evil\"c,o\x1b[2Jm";

using rsched::test::temp_dir;

// Writes one interval with two threads (the evil comm and "plain") and one CPU. Returns the path.
inline std::string make_db(const temp_dir &dir) {
  using namespace rsched;
  std::string path = dir.file("rsched.db");
  auto w = store::writer::open(path);
  REQUIRE(w.ok());
  store::interval_row iv;
  iv.start_ns = 1'700'000'000'000'000'000;
  iv.dur_ns = 10'000'000'000;
  iv.boot_id = "00000000-0000-0000-0000-000000000001";
  store::thread_row t;
  t.tid = 42;
  t.pid = 42;
  t.start_time_ns = 123;
  t.comm = evil_comm;
  t.cgroup = "/system.slice/x.service";
  for (int i = 0; i < 99; ++i) {
    t.m[metric::sched_delay].hist.add(3'000); // 3 us
  }
  t.m[metric::sched_delay].hist.add(40'000'000); // 40 ms
  t.m[metric::sched_delay].count = 100;
  t.m[metric::sched_delay].total = 99 * 3'000 + 40'000'000;
  iv.threads.push_back(t);
  store::thread_row p;
  p.tid = 7;
  p.pid = 7;
  p.start_time_ns = 5;
  p.comm = "plain";
  p.m[metric::sched_delay].hist.add(1'000);
  p.m[metric::sched_delay].count = 1;
  p.m[metric::sched_delay].total = 1'000;
  iv.threads.push_back(p);
  store::cpu_row c;
  c.cpu = 0;
  c.m[metric::cpu_sched_delay].hist.add(2'000);
  c.m[metric::cpu_sched_delay].count = 1;
  c.m[metric::cpu_sched_delay].total = 2'000;
  iv.cpus.push_back(c);
  REQUIRE(w->write(iv).ok());
  return path;
}

struct run_result {
  int status = -1; // exit status, or -1 when killed by a signal
  std::string out;
  std::string err;
};

// A shell over make_db's database, with what it prints kept in `out` and `err`.
struct shell_fixture {
  temp_dir dir;
  std::string path = make_db(dir);
  rsched::query::reader db = open_reader(path);
  std::ostringstream out;
  std::ostringstream err;
  rsched::sql_shell::shell sh{db, out, err, rsched::sql_shell::output_config{}};

  static rsched::query::reader open_reader(const std::string &p) {
    auto r = rsched::query::reader::open(p, true);
    REQUIRE(r.ok());
    return std::move(r).value();
  }
};

// Whole file as bytes ("" when missing). POSIX read: GCC 12's -Wnull-dereference trips over
// istreambuf_iterator.
inline std::string slurp(const std::string &path) {
  std::string data;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return data;
  }
  char buf[65536];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) {
      break;
    }
    data.append(buf, static_cast<std::size_t>(n));
  }
  close(fd);
  return data;
}

// Waits for rsched-sql's process `pid` to end; its status and what it wrote to the files `out` and
// `err`.
inline run_result reap(pid_t pid, const std::string &out, const std::string &err) {
  int ws = 0;
  REQUIRE(waitpid(pid, &ws, 0) == pid);
  run_result r;
  r.status = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

// Runs rsched-sql with `args`; stdin from `input` (a regular file, so not a terminal), stdout and
// stderr to files (pipes' worth of data without deadlock).
inline run_result run_sql(const std::vector<std::string> &args, const std::string &input = "") {
  temp_dir io;
  const std::string in = io.file("stdin"), out = io.file("stdout"), err = io.file("stderr");
  {
    std::ofstream f(in, std::ios::binary);
    f << input;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, in.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  const rsched::test::exec_argv argv(binary, args);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, binary.c_str(), &fa, nullptr, argv.get(), environ);
  posix_spawn_file_actions_destroy(&fa);
  REQUIRE(rc == 0);
  return reap(pid, out, err);
}

// Splits RFC 4180 CSV (CRLF records) into records of fields. Fails the test on malformed input.
inline std::vector<std::vector<std::string>> parse_csv(const std::string &s) {
  std::vector<std::vector<std::string>> records;
  std::vector<std::string> rec;
  std::string field;
  std::size_t i = 0;
  bool record_open = false;
  while (i < s.size()) {
    record_open = true;
    if (s[i] == '"') {
      ++i;
      for (;;) {
        REQUIRE(i < s.size()); // unterminated quoted field
        if (s[i] == '"') {
          if (i + 1 < s.size() && s[i + 1] == '"') {
            field += '"';
            i += 2;
            continue;
          }
          ++i;
          break;
        }
        field += s[i++];
      }
    } else {
      while (i < s.size() && s[i] != ',' && s[i] != '\r' && s[i] != '"') {
        field += s[i++];
      }
      REQUIRE((i == s.size() || s[i] != '"')); // quote inside an unquoted field
    }
    rec.push_back(std::move(field));
    field.clear();
    if (i < s.size() && s[i] == ',') {
      ++i;
      continue;
    }
    REQUIRE(s.compare(i, 2, "\r\n") == 0); // every record ends with CRLF
    i += 2;
    records.push_back(std::move(rec));
    rec.clear();
    record_open = false;
  }
  REQUIRE_FALSE(record_open);
  return records;
}

// run_sql for inputs that used to exhaust memory: the child gets at most `max_mem` bytes of
// address space and `seconds` of real time (SIGALRM: status -1), so that a regression fails the
// test instead of the machine.
inline run_result run_sql_bounded(const std::vector<std::string> &args,
                                  const std::string &stdin_path, unsigned seconds = 60,
                                  rlim_t max_mem = rlim_t{1} << 30) {
  temp_dir io;
  const std::string out = io.file("stdout"), err = io.file("stderr");
  const rsched::test::exec_argv argv(binary, args);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int in = open(stdin_path.c_str(), O_RDONLY);
    const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (in < 0 || o < 0 || e < 0 || dup2(in, 0) < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0) {
      _exit(127);
    }
#if defined(RSCHED_TEST_ASAN)
    // ASan reserves terabytes of shadow address space, so RLIMIT_AS would stop it at startup:
    // its own RSS watchdog bounds the child instead (it aborts, which the test sees as failure).
    std::string asan = "hard_rss_limit_mb=" + std::to_string(max_mem >> 20);
    if (const char *old = std::getenv("ASAN_OPTIONS"); old != nullptr && *old != '\0') {
      asan = std::string(old) + ":" + asan;
    }
    setenv("ASAN_OPTIONS", asan.c_str(), 1);
#else
    const rlimit lim{max_mem, max_mem};
    setrlimit(RLIMIT_AS, &lim);
#endif
    alarm(seconds); // kept across execv
    execv(binary.c_str(), argv.get());
    _exit(127);
  }
  return reap(pid, out, err);
}

} // namespace rsched_sql_test
