// The fine latency layout (latency_fine, layout 5) recorded end to end: a victim pinned to a CPU
// waits about 6 ms behind a SCHED_FIFO hog there, hundreds of times. Its recorded p99
// (hist_percentile over its sched_delay rows) must be printed as one bucket no wider than
// 12.5 % of its lower bound, and that bucket must hold the exact p99 of an independent probe
// (tests/bpf/probe/wakelat.bpf.c: runqlat's method, every delay of the victim as measured).
#include "rsched/query/reader.hpp"
#include "rsched/stats/histogram.hpp"
#include "rsched/stats/percentile.hpp"

#include "root_test_util.hpp"
#include "wakelat.skel.h"

#include <bpf/bpf.h>
#include <catch2/catch.hpp>
#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <sched.h>
#include <string>
#include <unistd.h>
#include <vector>

using namespace rsched;
using namespace std::chrono_literals;

namespace {

using test::as_int;
using test::mono_ns;

constexpr unsigned cpu = 1;

// In a child: pinned to `cpu`, named `name`, optionally SCHED_FIFO 1.
void become(const char *name, bool fifo) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    _exit(3);
  }
  prctl(PR_SET_NAME, name);
  prctl(PR_SET_TIMERSLACK, 1UL);
  if (fifo) {
    sched_param sp{};
    sp.sched_priority = 1;
    if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0) {
      _exit(4);
    }
  }
}

// Keeps every thread of `pid` (rschedd) off `cpu`.
void keep_off_cpu(pid_t pid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  const auto n = static_cast<std::size_t>(sysconf(_SC_NPROCESSORS_ONLN));
  for (std::size_t c = 0; c < CPU_SETSIZE && c < n; ++c) {
    if (c != std::size_t{cpu}) {
      CPU_SET(c, &set);
    }
  }
  std::error_code ec;
  for (const auto &t :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    const auto tid = static_cast<pid_t>(std::stol(t.path().filename().string()));
    CHECK(sched_setaffinity(tid, sizeof(set), &set) == 0);
  }
  CHECK(!ec);
}

// A loop of `spin` then `sleep` until `end` (CLOCK_MONOTONIC ns).
void cycle(std::uint64_t end, std::uint64_t spin, long sleep) {
  volatile std::uint64_t sink = 0;
  while (mono_ns() < end) {
    const std::uint64_t until = mono_ns() + spin;
    while (mono_ns() < until) {
      sink = sink + 1;
    }
    timespec ts{0, sleep};
    nanosleep(&ts, nullptr);
  }
}

struct probe_deleter {
  void operator()(wakelat_bpf *p) const { wakelat_bpf::destroy(p); }
};

// The probe's delays of `tid`, in the order measured.
std::vector<std::uint64_t> probe_delays(const wakelat_bpf *p, pid_t tid) {
  std::vector<std::uint64_t> out;
  const auto n = std::min<std::size_t>(p->bss->nsamples, std::size(p->bss->sample_ns));
  for (std::size_t i = 0; i < n; ++i) {
    if (p->bss->sample_tid[i] == static_cast<__u32>(tid)) {
      out.push_back(p->bss->sample_ns[i]);
    }
  }
  return out;
}

void run_fine(const std::string &mode) {
  test::recording rec({"-i", "1", "-g", "latency", "--bpf-mode", mode});
  keep_off_cpu(rec.d.pid());
  std::unique_ptr<wakelat_bpf, probe_deleter> probe(wakelat_bpf::open_and_load());
  REQUIRE(probe != nullptr);
  REQUIRE(wakelat_bpf::attach(probe.get()) == 0);
  const auto self = static_cast<__u32>(getpid());
  const __u8 one = 1;
  REQUIRE(bpf_map_update_elem(bpf_map__fd(probe->maps.watched), &self, &one, BPF_ANY) == 0);

  const std::uint64_t end = mono_ns() + 4'000'000'000ULL;
  // The hog spins 6 ms and sleeps 1 ms at SCHED_FIFO 1: a victim that wakes while it spins
  // waits until it sleeps, up to 6 ms. The victim runs 50 us and sleeps 300 us: it wakes in
  // every spin of the hog, early in some.
  const pid_t hog = test::fork_child([&] {
    become("rs-hog", true);
    cycle(end, 6'000'000, 1'000'000);
  });
  const pid_t victim = test::fork_child([&] {
    become("rs-victim", false);
    cycle(end, 50'000, 300'000);
  });
  test::read_zombie(victim, 200ms, [] {});
  test::read_zombie(hog, 200ms, [] {});
  REQUIRE(rec.d.stop(SIGINT) == 0);
  wakelat_bpf::detach(probe.get());

  std::vector<std::uint64_t> exact = probe_delays(probe.get(), victim);
  REQUIRE(probe->bss->nsamples < std::size(probe->bss->sample_ns)); // every delay kept
  const auto rows = test::query_db(
      rec.db, "SELECT coalesce(sum(count), 0), hist_percentile(hist, 99), "
              "hist_percentile_error(hist, 99), sum(hex(substr(hist, 1, 1)) <> '05') "
              "FROM sched_delay WHERE pid = " +
                  std::to_string(victim));
  REQUIRE(rows.size() == 1);
  const std::int64_t samples = as_int(rows[0][0]);
  const auto p99 = static_cast<std::uint64_t>(as_int(rows[0][1]));
  const auto err = static_cast<std::uint64_t>(as_int(rows[0][2]));
  const std::int64_t coarse_rows = as_int(rows[0][3]);
  REQUIRE(!exact.empty());
  std::sort(exact.begin(), exact.end());
  const std::uint64_t rank = stats::percentile_rank(exact.size(), 99);
  const std::uint64_t truth = exact[rank - 1];
  // The bucket the recorded p99 names: the fine bucket of the value printed (the value is in
  // the bucket that holds the p99, docs/SQL.md), whose width hist_percentile_error gives.
  const stats::bucket b =
      stats::bucket_bounds(stats::layout::latency_fine, rsched_hist_fine_slot(p99));
  std::printf("fine p99[%s]: recorded %llu ns in [%llu, %llu] (error %llu, %.1f %%) over %lld "
              "samples; probe p99 %llu ns over %zu, max %llu\n",
              mode.c_str(), static_cast<unsigned long long>(p99),
              static_cast<unsigned long long>(b.lo), static_cast<unsigned long long>(b.hi),
              static_cast<unsigned long long>(err),
              100.0 * static_cast<double>(err) / static_cast<double>(b.lo),
              static_cast<long long>(samples), static_cast<unsigned long long>(truth), exact.size(),
              static_cast<unsigned long long>(exact.back()));
  INFO(mode << ": recorded p99 " << p99 << " in [" << b.lo << ", " << b.hi << "], error " << err
            << ", " << samples << " samples, " << coarse_rows
            << " rows not latency_fine; probe p99 " << truth << " of " << exact.size()
            << " delays");
  // Enough long waits for a p99 about the hog's 6 ms.
  REQUIRE(exact.size() >= 300);
  CHECK(truth >= 4'000'000);
  // Every row of the victim is latency_fine, and the same delays as the probe's, plus the
  // switch-ins no program saw, which rschedd recovers from the kernel's account and the probe
  // (runqlat's method) lacks: at most all the events recovered in the recording.
  CHECK(coarse_rows == 0);
  const std::int64_t unseen =
      as_int(test::query_db(rec.db, "SELECT sum(unseen_events) FROM intervals WHERE tier = 0")
                 .at(0)
                 .at(0));
  CHECK(samples >= static_cast<std::int64_t>(exact.size()));
  CHECK(samples <= static_cast<std::int64_t>(exact.size()) + unseen);
  // The printed range is one fine bucket, at most 12.5 % wide.
  CHECK(err == b.width());
  CHECK(err * 8 <= b.lo);
  // It holds the probe's exact p99; the two programs read the clock at the same tracepoints a
  // few microseconds apart at most, so a p99 that close to an edge may sit across it.
  constexpr std::uint64_t skew_ns = 5'000;
  CHECK(truth + skew_ns >= b.lo);
  CHECK(truth <= b.hi + skew_ns);
}

} // namespace

TEST_CASE("Fine layout: a victim's p99 behind a 6 ms hog is one bucket of at most 12.5 % that "
          "holds the probe's exact p99 (tp_btf)",
          "[root][bpf][fine]") {
  if (test::bpf_available() && sysconf(_SC_NPROCESSORS_ONLN) >= 2) {
    run_fine("tp_btf");
  }
}

TEST_CASE("Fine layout: the same in raw_tp mode", "[root][bpf][fine]") {
  if (test::bpf_available() && sysconf(_SC_NPROCESSORS_ONLN) >= 2) {
    run_fine("raw_tp");
  }
}
