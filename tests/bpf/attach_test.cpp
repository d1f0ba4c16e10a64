// Exactly one variant per tracepoint is attached; clear errors without privileges.
#include "rsched/bpf/program.hpp"

#include "root_test_util.hpp"
#include "support/process.hpp"

#include <sys/wait.h>

#include <algorithm>
#include <fcntl.h>
#include <pwd.h>
#include <set>
#include <unistd.h>

using namespace rsched;

namespace {
bool ends_with(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
} // namespace

TEST_CASE("automatic mode attaches tp_btf programs only, once per tracepoint", "[root][bpf]") {
  if (!test::bpf_available()) {
    return;
  }
  REQUIRE(bpf::kernel_supports_tp_btf()); // this project's kernel has BTF
  auto p = bpf::program::load({});
  INFO((p.ok() ? std::string() : p.err().msg));
  REQUIRE(p.ok());
  CHECK(p->mode() == bpf::attach_mode::tp_btf);
  const auto progs = p->attached();
  // the latency group's three, and the three that close a thread's attribution (rename, exec,
  // cgroup move; this kernel has the task iterator, so a process move reaches every thread)
  REQUIRE(progs.size() == 6);
  std::set<std::string> names;
  for (const auto &pi : progs) {
    CHECK(ends_with(pi.name, "_btf"));
    names.insert(pi.name.substr(0, pi.name.size() - 4));
  }
  CHECK(names == std::set<std::string>{"sched_switch", "sched_wakeup", "sched_wakeup_new",
                                       "task_rename", "sched_process_exec", "cgroup_attach_task"});
  CHECK(p->moves_whole_process());
  CHECK_FALSE(p->delay_rq_clock());
}

TEST_CASE("raw_tp mode attaches raw_tp programs only", "[root][bpf]") {
  if (!test::bpf_available()) {
    return;
  }
  bpf::options o;
  o.mode = bpf::attach_mode::raw_tp;
  auto p = bpf::program::load(o);
  INFO((p.ok() ? std::string() : p.err().msg));
  REQUIRE(p.ok());
  const auto progs = p->attached();
  REQUIRE(progs.size() == 6);
  for (const auto &pi : progs) {
    CHECK(ends_with(pi.name, "_raw"));
  }
  CHECK_FALSE(p->moves_whole_process());
}

TEST_CASE("without privileges rschedd says what is missing in one line and exits 1",
          "[root][bpf]") {
  if (!test::bpf_available()) {
    return;
  }
  const std::string path = test::rschedd_path();
  const auto [err, status] = test::run_child([&](int fd) {
    dup2(fd, STDERR_FILENO);
    if (setgid(65534) != 0 || setuid(65534) != 0) {
      _exit(99);
    }
    execl(path.c_str(), path.c_str(), "--no-db", "-r", "1", nullptr);
    _exit(127);
  });
  INFO(err);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK(err.find("root") != std::string::npos);
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);
}
