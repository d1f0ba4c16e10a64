#include "root_test_util.hpp"

#include "root_guard.hpp"
#include "support/process.hpp"

#include <sys/mount.h>
#include <sys/wait.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <poll.h>
#include <sstream>
#include <thread>
#include <unistd.h>
#include <variant>

namespace rsched::test {

bool bpf_available() {
  return root_available("BPF test");
}

std::int64_t as_int(const query::value &v) {
  if (const auto *i = std::get_if<std::int64_t>(&v)) {
    return *i;
  }
  if (const auto *d = std::get_if<double>(&v)) {
    return static_cast<std::int64_t>(*d);
  }
  REQUIRE(std::holds_alternative<std::monostate>(v));
  return 0;
}

std::string as_text(const query::value &v) {
  if (const auto *t = std::get_if<std::string>(&v)) {
    return *t;
  }
  REQUIRE(std::holds_alternative<std::monostate>(v));
  return {};
}

std::uint64_t mono_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

namespace {
std::optional<schedstat> read_schedstat(const std::string &path) {
  std::ifstream in(path);
  schedstat s;
  if (!(in >> s.exec_ns >> s.run_delay_ns >> s.timeslices)) {
    return std::nullopt;
  }
  return s;
}
} // namespace

std::optional<schedstat> self_schedstat() {
  return read_schedstat("/proc/thread-self/schedstat");
}

std::optional<schedstat> proc_schedstat(pid_t pid) {
  return read_schedstat("/proc/" + std::to_string(pid) + "/schedstat");
}

pid_t fork_child(const std::function<void()> &body) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    body();
    _exit(0);
  }
  return pid;
}

int read_zombie(pid_t pid, std::chrono::milliseconds settle, const std::function<void()> &read) {
  siginfo_t si{};
  REQUIRE(waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOWAIT) == 0);
  std::this_thread::sleep_for(settle);
  read();
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return status;
}

sysctl_guard::sysctl_guard(std::string path, const std::string &value) : path_(std::move(path)) {
  std::ifstream in(path_);
  std::getline(in, old_);
  std::ofstream out(path_);
  out << value;
}

sysctl_guard::~sysctl_guard() {
  std::ofstream out(path_);
  out << old_;
}

std::vector<std::vector<query::value>> query_db(const std::string &db, const std::string &sql) {
  auto r = query::reader::open(db);
  INFO((r.ok() ? std::string() : r.err().msg));
  REQUIRE(r.ok());
  std::vector<std::vector<query::value>> rows;
  query::result_sink sink;
  sink.on_columns = [](const std::vector<std::string> &) {};
  sink.on_row = [&](const std::vector<query::value> &row) { rows.push_back(row); };
  auto ok = r->exec(sql, sink);
  INFO(sql);
  INFO((ok.ok() ? std::string() : ok.err().msg));
  REQUIRE(ok.ok());
  return rows;
}

std::string rschedd_path() {
  return std::string(RSCHED_BINARY_DIR) + "/apps/rschedd/rschedd";
}
std::string rsched_sql_path() {
  return std::string(RSCHED_BINARY_DIR) + "/apps/rsched-sql/rsched-sql";
}

daemon::daemon(const std::vector<std::string> &args, const spawn_options &so) {
  const std::string path = rschedd_path();
  const exec_argv argv(path, args);
  // The environment, built before fork (the child only dup2s and execs).
  std::vector<std::string> env_text(so.env);
  for (char **e = environ; *e != nullptr; ++e) {
    env_text.emplace_back(*e);
  }
  std::vector<char *> envp;
  envp.reserve(env_text.size() + 1);
  for (auto &e : env_text) {
    envp.push_back(e.data());
  }
  envp.push_back(nullptr);
  int fds[2];
  REQUIRE(pipe2(fds, O_CLOEXEC) == 0);
  pid_ = fork();
  REQUIRE(pid_ >= 0);
  if (pid_ == 0) {
    dup2(fds[1], STDERR_FILENO);
    if (so.stdout_fd >= 0) {
      setsid(); // a terminal on stdout becomes the controlling one, as in a real session
      dup2(so.stdout_fd, STDOUT_FILENO);
    } else {
      int devnull = open("/dev/null", O_WRONLY);
      dup2(devnull, STDOUT_FILENO);
    }
    if (so.ignore_sighup) {
      signal(SIGHUP, SIG_IGN); // survives exec, as nohup relies on
    }
    execve(path.c_str(), argv.get(), envp.data());
    _exit(127);
  }
  close(fds[1]);
  err_fd_ = fds[0];
}

daemon::~daemon() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (err_fd_ >= 0) {
    close(err_fd_);
  }
}

void daemon::drain(int timeout_ms) {
  pollfd p{err_fd_, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) <= 0) {
    return;
  }
  char buf[4096];
  const ssize_t n = read(err_fd_, buf, sizeof(buf));
  if (n > 0) {
    err_.append(buf, static_cast<std::size_t>(n));
  }
}

bool daemon::reaped() {
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) != pid_) {
    return false;
  }
  drain(100);
  pid_ = -1;
  exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  return true;
}

bool daemon::wait_attached(int timeout_ms) {
  for (int waited = 0; waited < timeout_ms; waited += 50) {
    drain(50);
    if (err_.find("attached") != std::string::npos) {
      return true;
    }
    if (reaped()) {
      return false;
    }
  }
  return false;
}

std::optional<int> daemon::wait_exit(int timeout_ms) {
  if (pid_ <= 0) {
    return exit_status_;
  }
  // A clock, not a count of drains: at EOF on its stderr a drain returns at once.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    drain(20);
    if (reaped()) {
      return exit_status_;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

int daemon::stop(int sig) {
  if (pid_ <= 0) {
    return exit_status_; // already reaped (wait_attached, wait_exit, an earlier stop)
  }
  kill(pid_, sig);
  for (;;) {
    drain(20);
    if (reaped()) {
      return exit_status_;
    }
  }
}

void daemon::require(bool ok, const char *what) {
  if (!ok) {
    stop(SIGINT);
    FAIL(what << "\nrschedd's stderr:\n" << stderr_text());
  }
}

namespace {
std::vector<std::string> with_db(const std::string &db, const std::vector<std::string> &args) {
  std::vector<std::string> all{"--db", db};
  all.insert(all.end(), args.begin(), args.end());
  return all;
}
} // namespace

recording::recording(const std::vector<std::string> &args, const spawn_options &so)
    : d(with_db(db, args), so) {
  d.require(d.wait_attached(), "rschedd did not attach");
}

tmpfs_dir::tmpfs_dir(const std::string &size) : mnt_(dir_.file("mnt")) {
  std::filesystem::create_directories(mnt_);
  const std::string opts = "size=" + size + ",mode=0755";
  mounted_ = mount("tmpfs", mnt_.c_str(), "tmpfs", 0, opts.c_str()) == 0;
}

tmpfs_dir::~tmpfs_dir() {
  if (mounted_) {
    umount2(mnt_.c_str(), MNT_DETACH);
  }
  // dir_ removes the directory after this body
}

bool tmpfs_dir::remount_read_only() {
  return mounted_ && mount("tmpfs", mnt_.c_str(), "tmpfs", MS_REMOUNT | MS_RDONLY, nullptr) == 0;
}

std::int64_t fill(const std::string &path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return -1;
  }
  const std::vector<char> chunk(64 * 1024, 'x');
  std::int64_t total = 0;
  for (;;) {
    const ssize_t n = ::write(fd, chunk.data(), chunk.size());
    if (n > 0) {
      total += n;
      continue;
    }
    const int e = errno;
    ::close(fd);
    return n < 0 && e == ENOSPC ? total : -1;
  }
}

std::int64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

cpu_times proc_stat_cpu(int cpu) {
  std::ifstream in("/proc/stat");
  std::string line;
  const std::string want = "cpu" + std::to_string(cpu) + " ";
  const auto tick_ns = 1'000'000'000 / sysconf(_SC_CLK_TCK);
  while (std::getline(in, line)) {
    if (line.rfind(want, 0) != 0) {
      continue;
    }
    std::istringstream f(line.substr(want.size()));
    std::int64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0,
                 steal = 0;
    f >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
    return {(user + nice + system + irq + softirq + steal) * tick_ns, (idle + iowait) * tick_ns};
  }
  FAIL("no " << want << "line in /proc/stat");
  return {};
}

std::int64_t raw_intervals(const std::string &db) {
  return std::get<std::int64_t>(
      query_db(db, "SELECT count(*) FROM intervals WHERE tier = 0")[0][0]);
}

bool wait_for_intervals(const std::string &db, std::int64_t n, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (raw_intervals(db) > n) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

cgroup_mount_points cgroup_mounts() {
  std::ifstream in("/proc/self/mounts");
  std::string dev, path, type, opts, rest;
  cgroup_mount_points m;
  while (in >> dev >> path >> type >> opts && std::getline(in, rest)) {
    if (type == "cgroup2" && m.v2.empty()) {
      m.v2 = path;
    }
    if (type == "cgroup") {
      std::stringstream o(opts);
      for (std::string opt; std::getline(o, opt, ',');) {
        if (opt == "cpu") {
          m.v1cpu = path;
        }
      }
    }
  }
  return m;
}

void put(const std::string &file, const std::string &value) {
  std::ofstream out(file);
  out << value;
  out.flush();
  INFO(file << " <- " << value);
  REQUIRE(out.good());
}

hybrid_cgroup::hybrid_cgroup(const std::string &name) : path_("/" + name) {
  const auto m = cgroup_mounts();
  REQUIRE(!m.v2.empty());
  const std::string v2dir = m.v2 + path_;
  REQUIRE(std::filesystem::create_directory(v2dir));
  dirs_.push_back(v2dir);
  if (!m.v1cpu.empty()) {
    cpu_dir_ = m.v1cpu + path_;
    REQUIRE(std::filesystem::create_directory(cpu_dir_));
    dirs_.push_back(cpu_dir_);
    v1_ = true;
  } else {
    put(m.v2 + "/cgroup.subtree_control", "+cpu");
    cpu_dir_ = v2dir;
  }
}

hybrid_cgroup::~hybrid_cgroup() {
  for (auto it = dirs_.rbegin(); it != dirs_.rend(); ++it) {
    std::error_code ec;
    std::filesystem::remove(*it, ec);
  }
}

void hybrid_cgroup::set_quota(long quota_us, long period_us) const {
  if (v1_) {
    put(cpu_dir_ + "/cpu.cfs_period_us", std::to_string(period_us));
    put(cpu_dir_ + "/cpu.cfs_quota_us", std::to_string(quota_us));
  } else {
    put(cpu_dir_ + "/cpu.max", (quota_us < 0 ? std::string("max") : std::to_string(quota_us)) +
                                   " " + std::to_string(period_us));
  }
}

void hybrid_cgroup::add(pid_t pid) const {
  for (const auto &d : dirs_) {
    put(d + "/cgroup.procs", std::to_string(pid));
  }
}

} // namespace rsched::test
