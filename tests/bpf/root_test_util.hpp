#pragma once
// Helpers for the root tests: skip-or-fail without root, run rschedd, read /proc ground truth.
#include "rsched/query/reader.hpp"

#include "support/temp_dir.hpp"

#include <catch2/catch.hpp>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace rsched::test {

// True when the test may use BPF. Without root: fails under RSCHED_REQUIRE_BPF=1, else warns and
// returns false (the caller returns: Catch2 v2 has no SKIP).
bool bpf_available();

struct schedstat {
  std::uint64_t exec_ns = 0;
  std::uint64_t run_delay_ns = 0;
  std::uint64_t timeslices = 0;
};
// /proc/thread-self/schedstat of the calling thread.
std::optional<schedstat> self_schedstat();
// /proc/<pid>/schedstat (of a zombie child: its final accounting, see read_zombie).
std::optional<schedstat> proc_schedstat(pid_t pid);

// Forks a child that runs `body` and then exits 0 (_exit: nothing of the test runs on in it);
// returns its pid. Fails the test when fork does.
pid_t fork_child(const std::function<void()> &body);

// Waits for the child `pid` to exit without reaping it and lets `settle` pass (its last switch is
// done): while it is a zombie its /proc files hold its final accounting, for `read`. Then reaps it
// and returns its wait status.
int read_zombie(pid_t pid, std::chrono::milliseconds settle, const std::function<void()> &read);

// Writes a sysctl value and restores the old one on destruction.
// Sets an environment variable for the scope (rschedd's test-only switches such as
// RSCHED_TEST_HIDE_SWITCH_INS).
class env_guard {
public:
  env_guard(const char *name, const char *value) : name_(name) { ::setenv(name, value, 1); }
  ~env_guard() { ::unsetenv(name_); }
  env_guard(const env_guard &) = delete;
  env_guard &operator=(const env_guard &) = delete;

private:
  const char *name_;
};

class sysctl_guard {
public:
  sysctl_guard(std::string path, const std::string &value);
  ~sysctl_guard();
  sysctl_guard(const sysctl_guard &) = delete;
  sysctl_guard &operator=(const sysctl_guard &) = delete;

private:
  std::string path_;
  std::string old_;
};

// How a daemon child is started.
struct spawn_options {
  int stdout_fd = -1;             // its stdout (a pty slave, a pipe); -1: /dev/null
  bool ignore_sighup = false;     // start with SIGHUP ignored, as under nohup
  std::vector<std::string> env{}; // NAME=VALUE added to the test's environment (LD_PRELOAD=...)
};

// A running rschedd child process.
class daemon {
public:
  explicit daemon(const std::vector<std::string> &args, const spawn_options &so = {});
  [[nodiscard]] pid_t pid() const { return pid_; }
  // Waits up to `timeout_ms` for it to exit by itself: its exit status (or -signal), or
  // nullopt when it is still running.
  std::optional<int> wait_exit(int timeout_ms);
  ~daemon();
  daemon(const daemon &) = delete;
  daemon &operator=(const daemon &) = delete;
  // Waits until its stderr says the programs are attached (or it exited). False on failure.
  bool wait_attached(int timeout_ms = 10000);
  // SIGINT (or `sig`) and wait; returns the exit status (or -signal).
  int stop(int sig = 2);
  // Unless `ok`: stops it (SIGINT) and fails the test with `what` and its stderr up to then (an
  // INFO would have taken the stderr of the moment it was written).
  void require(bool ok, const char *what);
  [[nodiscard]] const std::string &stderr_text() const { return err_; }

private:
  pid_t pid_ = -1;
  int exit_status_ = -1;
  int err_fd_ = -1;
  std::string err_;
  void drain(int timeout_ms);
  // Reaps it if it has exited: its status (or -signal) in exit_status_, the rest of its stderr
  // read. False while it runs.
  bool reaped();
};

// A test's temporary directory (removed with everything in it) and the path of rschedd's database
// there, rsched.db (not created): the fixture (TEST_CASE_METHOD) of the tests that use one
// database.
struct db_dir {
  const temp_dir tmp;
  const std::string dir = tmp.str();
  const std::string db = dir + "/rsched.db";
};

// rschedd recording into a fresh db_dir: `d` started with "--db <db>" and `args`, attached (the
// test fails with its stderr otherwise). One per run where a test records in a loop or per mode.
struct recording : db_dir {
  explicit recording(const std::vector<std::string> &args, const spawn_options &so = {});
  daemon d;
};

// Runs `sql` on the database at `db` through rsched's reader (its SQL functions included);
// fails the test on any error.
std::vector<std::vector<query::value>> query_db(const std::string &db, const std::string &sql);

// A result column as an integer: INTEGER as is, REAL truncated, NULL as 0 (a sum over no rows);
// text or a blob fails the test.
std::int64_t as_int(const query::value &v);
// A result column as text ("" for NULL); anything else fails the test.
std::string as_text(const query::value &v);

// CLOCK_MONOTONIC now, ns (rs_workload.cpp, which links none of this, has its own).
std::uint64_t mono_ns();
// CLOCK_REALTIME now, ns (the clock of intervals.start_ns).
std::int64_t realtime_ns();
// /proc/stat's times of one CPU, ns (the kernel's own per-CPU accounting, in ticks): busy (user,
// nice, system, irq, softirq, steal) and idle (idle, iowait). Fails the test for a CPU it lacks.
struct cpu_times {
  std::int64_t busy = 0;
  std::int64_t idle = 0;
};
cpu_times proc_stat_cpu(int cpu);

// Raw intervals (tier 0) recorded in the database at `db`.
std::int64_t raw_intervals(const std::string &db);
// Polls until the database holds more than `n` raw intervals; false after `timeout`.
bool wait_for_intervals(const std::string &db, std::int64_t n, std::chrono::milliseconds timeout);

// A fresh temporary directory with a small tmpfs mounted at its "mnt"; on every exit path the
// tmpfs is unmounted (lazily, so that a daemon still holding files does not block it) and the
// directory removed.
class tmpfs_dir {
public:
  explicit tmpfs_dir(const std::string &size);
  ~tmpfs_dir();
  tmpfs_dir(const tmpfs_dir &) = delete;
  tmpfs_dir &operator=(const tmpfs_dir &) = delete;
  [[nodiscard]] bool mounted() const { return mounted_; }
  [[nodiscard]] const std::string &mnt() const { return mnt_; }
  // Remounts it read-only (true on success).
  bool remount_read_only();

private:
  temp_dir dir_{"rsched-tmpfs"};
  std::string mnt_;
  bool mounted_ = false;
};

// Writes `path` until the file system is full; returns the bytes written (-1 on another error).
std::int64_t fill(const std::string &path);

std::string rschedd_path();
std::string rsched_sql_path();

// Mount points of cgroup v2 and of the cgroup v1 hierarchy holding the cpu controller ("" where
// there is none).
struct cgroup_mount_points {
  std::string v2, v1cpu;
};
cgroup_mount_points cgroup_mounts();

// Writes `value` to `file` (a cgroup or proc knob); fails the test when it cannot.
void put(const std::string &file, const std::string &value);

// A cgroup under both hierarchies of this VM's hybrid layout, at the same path: cgroup v2 and
// (where mounted) the v1 cpu controller, as systemd makes its units; both directories removed
// on every exit path (after their processes are gone).
class hybrid_cgroup {
public:
  explicit hybrid_cgroup(const std::string &name);
  ~hybrid_cgroup();
  hybrid_cgroup(const hybrid_cgroup &) = delete;
  hybrid_cgroup &operator=(const hybrid_cgroup &) = delete;
  // "/NAME", the path rschedd records.
  [[nodiscard]] const std::string &path() const { return path_; }
  // The directory whose cpu.stat and CFS knobs hold its bandwidth: the v1 cpu controller's
  // where mounted, else cgroup v2's (with the cpu controller enabled for it).
  [[nodiscard]] const std::string &cpu_dir() const { return cpu_dir_; }
  // Sets a CFS quota of `quota_us` every `period_us` (-1: none).
  void set_quota(long quota_us, long period_us = 100'000) const;
  // Moves process `pid` into it, in every hierarchy.
  void add(pid_t pid) const;

private:
  std::vector<std::string> dirs_;
  std::string path_, cpu_dir_;
  bool v1_ = false;
};

} // namespace rsched::test
