// Real perf counters (root): software events on every online CPU, the one-line error where there
// is no hardware PMU, and a software counter read by rsched's BPF program at every context switch
// and charged to the thread that ran, compared with the kernel's own switch counts.
#include "rsched/bpf/program.hpp"
#include "rsched/collect/perf.hpp"
#include "rsched/collect/source.hpp"

#include "root_guard.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>
#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <unistd.h>

using namespace rsched;
using namespace rsched::collect;
using namespace std::chrono_literals;

namespace {

bool have_core_pmu() {
  for (const char *name : {"cpu", "cpu_core", "cpu_atom"}) {
    if (std::filesystem::exists(std::filesystem::path("/sys/bus/event_source/devices") / name)) {
      return true;
    }
  }
  return false;
}

event_spec must_resolve(const char *token) {
  auto e = resolve_event(token);
  INFO(token);
  REQUIRE(e.ok());
  return *e;
}

// Sleeps and spins a little on every online CPU's behalf: context switches and CPU time.
void some_activity() {
  const auto end = std::chrono::steady_clock::now() + 200ms;
  volatile unsigned long sink = 0;
  while (std::chrono::steady_clock::now() < end) {
    for (int i = 0; i < 10000; ++i) {
      sink = sink + 1;
    }
    std::this_thread::sleep_for(200us);
  }
}

struct switches {
  std::uint64_t voluntary = 0;
  std::uint64_t involuntary = 0;
  [[nodiscard]] std::uint64_t total() const { return voluntary + involuntary; }
};

std::optional<switches> thread_switches(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/status");
  std::string line;
  switches s;
  int found = 0;
  while (std::getline(in, line)) {
    if (line.starts_with("voluntary_ctxt_switches:")) {
      s.voluntary = std::stoull(line.substr(line.find(':') + 1));
      ++found;
    } else if (line.starts_with("nonvoluntary_ctxt_switches:")) {
      s.involuntary = std::stoull(line.substr(line.find(':') + 1));
      ++found;
    }
  }
  return found == 2 ? std::optional<switches>(s) : std::nullopt;
}

std::optional<std::uint64_t> charged(const snapshot &snap, pid_t tid, unsigned slot) {
  for (const auto &t : snap.live) {
    if (t.key.tid == static_cast<std::uint32_t>(tid)) {
      return t.c.counters[slot];
    }
  }
  return std::nullopt;
}

} // namespace

TEST_CASE("software counters open on every online CPU and advance", "[root][perf]") {
  if (!rsched::test::root_available("perf/BPF test")) {
    return;
  }
  auto cpus = online_cpus();
  REQUIRE(cpus.ok());
  auto set = counter_set::open(
      {must_resolve("context-switches"), must_resolve("task-clock"), must_resolve("cpu-clock")},
      false, *cpus);
  INFO((set.ok() ? std::string() : set.err().msg));
  REQUIRE(set.ok());
  CHECK(set->slot_mask() == 0x70);
  REQUIRE(set->fds().size() == 3 * cpus->size());
  for (const auto &c : set->fds()) {
    CHECK(c.fd >= 0);
    CHECK(std::find(cpus->begin(), cpus->end(), c.cpu) != cpus->end());
  }

  some_activity();

  auto times = set->read_times();
  REQUIRE(times.ok());
  REQUIRE(times->size() == set->fds().size());
  std::uint64_t switches_total = 0;
  for (const auto &t : *times) {
    INFO(t.name << " cpu " << t.cpu << " value " << t.value << " enabled " << t.enabled_ns
                << " running " << t.running_ns);
    CHECK(t.running_ns > 0);
    CHECK(t.enabled_ns >= t.running_ns);
    if (t.slot == RSCHED_CTR_GENERIC0) {
      CHECK(t.name == "context-switches");
      switches_total += t.value;
    } else {
      CHECK(t.value > 0); // the clocks tick on every CPU (exclude_idle does not stop them)
    }
  }
  CHECK(switches_total > 100); // ~1000 sleeps in some_activity()
  WARN("context switches counted on all CPUs in 200 ms: " << switches_total);

  // Moving keeps the fds open exactly once.
  const int first_fd = set->fds().front().fd;
  counter_set moved = std::move(*set);
  CHECK(set->fds().empty());
  CHECK(moved.fds().front().fd == first_fd);
  CHECK(moved.read_times().ok());
}

TEST_CASE("hardware counters fail with one line where there is no hardware PMU", "[root][perf]") {
  if (!rsched::test::root_available("perf/BPF test")) {
    return;
  }
  auto cpus = online_cpus();
  REQUIRE(cpus.ok());
  auto ipc = counter_set::open({}, true, *cpus);
  if (have_core_pmu()) {
    WARN("this machine has a hardware PMU: checking that the IPC set opens instead");
    INFO((ipc.ok() ? std::string() : ipc.err().msg));
    CHECK(ipc.ok());
    return;
  }
  REQUIRE_FALSE(ipc.ok());
  const auto &msg = ipc.err().msg;
  WARN("IPC set: " << msg);
  CHECK(msg.find('\n') == std::string::npos);
  CHECK(msg.starts_with("perf counters unavailable: user_cycles (hardware"));
  CHECK(msg.find("no hardware PMU") != std::string::npos);

  for (const char *hw : {"cycles", "l2-miss", "l1d-miss", "r0964"}) {
    auto g = counter_set::open({must_resolve(hw)}, false, *cpus);
    INFO(hw);
    REQUIRE_FALSE(g.ok());
    CHECK(g.err().msg.find('\n') == std::string::npos);
    CHECK(g.err().msg.find("no hardware PMU") != std::string::npos);
  }
}

TEST_CASE("without privileges the error says what is needed, in one line", "[root][perf]") {
  if (!rsched::test::root_available("perf/BPF test")) {
    return;
  }
  const auto [msg, status] = rsched::test::run_child([](int fd) {
    if (setgid(65534) != 0 || setuid(65534) != 0) {
      _exit(99);
    }
    auto cs = resolve_event("context-switches");
    auto set = counter_set::open({*cs}, false, {0});
    const std::string text = set.ok() ? std::string("opened") : set.err().msg;
    const ssize_t n = write(fd, text.data(), text.size());
    _exit(n == static_cast<ssize_t>(text.size()) ? 0 : 98);
  });
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  INFO(msg);
  std::ifstream paranoid("/proc/sys/kernel/perf_event_paranoid");
  int level = 0;
  paranoid >> level;
  if (level <= 0) { // system-wide events are open to everyone at this level
    CHECK(msg == "opened");
    return;
  }
  CHECK(msg.starts_with("perf counters unavailable: context-switches (software"));
  CHECK(msg.find("kernel.perf_event_paranoid") != std::string::npos);
  CHECK(msg.find('\n') == std::string::npos);
}

TEST_CASE("a software counter read by the BPF program is charged to the thread that ran",
          "[root][perf]") {
  if (!rsched::test::root_available("perf/BPF test")) {
    return;
  }
  auto cpus = online_cpus();
  REQUIRE(cpus.ok());
  const auto mode = GENERATE(bpf::attach_mode::tp_btf, bpf::attach_mode::raw_tp);
  INFO("attach mode " << bpf::to_string(mode));
  bpf::options opt;
  opt.mode = mode;
  opt.groups = RSCHED_G_PERF | RSCHED_G_LATENCY;
  opt.counter_mask = 1u << RSCHED_CTR_GENERIC0;
  auto prog = bpf::program::load(opt);
  INFO((prog.ok() ? std::string() : prog.err().msg));
  REQUIRE(prog.ok());

  auto set = counter_set::open({must_resolve("cs")}, false, *cpus);
  INFO((set.ok() ? std::string() : set.err().msg));
  REQUIRE(set.ok());
  REQUIRE(set->slot_mask() == opt.counter_mask);
  for (const auto &c : set->fds()) {
    auto r = prog->set_counter_fd(c.cpu, c.slot, c.fd);
    INFO((r.ok() ? std::string() : r.err().msg));
    REQUIRE(r.ok());
  }

  // The worker sleeps 50 us at a time for ~1 s (thousands of voluntary switches), then blocks
  // until the readings are taken, so that it is alive (and in the task iterator) for them.
  std::atomic<pid_t> tid{0};
  std::atomic<bool> started{false}, worked{false}, release{false};
  std::thread worker([&] {
    tid = static_cast<pid_t>(syscall(SYS_gettid));
    while (!started) {
      std::this_thread::sleep_for(1ms);
    }
    const auto end = std::chrono::steady_clock::now() + 1s;
    while (std::chrono::steady_clock::now() < end) {
      timespec ts{0, 50'000};
      nanosleep(&ts, nullptr);
    }
    worked = true;
    while (!release) {
      std::this_thread::sleep_for(1ms);
    }
  });
  while (tid == 0) {
    std::this_thread::sleep_for(1ms);
  }

  bpf_source src(*prog);
  auto before = src.read();
  REQUIRE(before.ok());
  const auto truth_before = thread_switches(tid);
  REQUIRE(truth_before);
  const std::uint64_t ours_before = charged(*before, tid, RSCHED_CTR_GENERIC0).value_or(0);

  started = true;
  while (!worked) {
    std::this_thread::sleep_for(10ms);
  }
  std::this_thread::sleep_for(20ms); // settle: the worker is in its 1 ms polling sleeps

  auto after = src.read();
  const auto truth_after = thread_switches(tid);
  release = true;
  worker.join();
  REQUIRE(after.ok());
  REQUIRE(truth_after);
  const auto ours_after = charged(*after, tid, RSCHED_CTR_GENERIC0);
  REQUIRE(ours_after);

  const std::uint64_t ours = *ours_after - ours_before;
  const std::uint64_t kernel = truth_after->total() - truth_before->total();
  const std::uint64_t vol = truth_after->voluntary - truth_before->voluntary;
  const std::uint64_t invol = truth_after->involuntary - truth_before->involuntary;
  WARN(bpf::to_string(mode) << ": context-switches charged by BPF: " << ours
                            << "; kernel's voluntary+involuntary: " << kernel << " (" << vol
                            << " + " << invol << ")");
  CHECK(kernel > 1000);
  // Each run of the thread is charged the one switch counted on its CPU between its switch-in and
  // its switch-out (the counter advances just after the sched_switch tracepoint), so both sides
  // count the thread's runs. The two readings are not atomic with the thread (it keeps switching
  // in 1 ms sleeps around them), hence a tolerance; double charging would be far outside it.
  const auto diff = ours > kernel ? ours - kernel : kernel - ours;
  CHECK(diff <= kernel / 4);

  // No counter read failed at a switch once the fds were installed. (Switches between attach and
  // set_counter_fd do count RSCHED_DROP_PERF_READ: the array slot is still empty then.)
  CHECK(after->drops[RSCHED_DROP_PERF_READ] == before->drops[RSCHED_DROP_PERF_READ]);
}
