// why(): what it says where the wakeup group was not recorded, when a waker explains too little
// to follow, and that a stack starts at the kernel's own frames.
#include "store_test_util.hpp"

#include <fmt/format.h>

using namespace store_test;
using rsched::store::blocked_row;
using rsched::store::waker_kind;
using rsched::store::wakeup_row;

namespace {

constexpr std::int64_t t0 = 1'700'000'040'000'000'000;

std::string why_sql(const std::string &columns) {
  return fmt::format("SELECT {} FROM why('api', {}, {})", columns, t0, t0 + 60 * sec);
}

wakeup_row woken(waker_kind k, std::uint32_t pid, const char *comm, std::uint64_t ns) {
  wakeup_row w;
  w.kind = k;
  w.pid = pid;
  w.comm = comm;
  w.state = 0;
  w.sleep_ns = ns;
  w.count = 10;
  return w;
}

} // namespace

TEST_CASE_METHOD(new_db,
                 "why: without the wakeup group, times instead of shares of a whole "
                 "that misses the sleep",
                 "[store][why]") {
  for (int i = 0; i < 6; ++i) {
    auto iv = make_interval(t0 + i * 10 * sec,
                            {make_thread(10, "api", std::vector<std::uint64_t>(10, 1'000'000))});
    iv.groups = 1 | 64; // latency and blame: no wakeup group
    write_ok(w, iv);
  }
  auto r = open_reader(path);
  const auto t = run(r, why_sql("part, summary"));
  REQUIRE_FALSE(t.rows.empty());
  const std::string summary = as_text(t.rows[0][1]);
  INFO(summary);
  CHECK(summary == "comm api: runnable 60.0 ms; its sleep was not recorded in this window (the "
                   "wakeup group was off: rschedd -g wakeup)");
  CHECK(summary.find("100 %") == std::string::npos);
}

TEST_CASE_METHOD(new_db,
                 "why: a waker that ended under a tenth of the sleep is not followed; "
                 "a stack starts at the kernel's own frames",
                 "[store][why]") {
  for (int i = 0; i < 6; ++i) {
    auto t = make_thread(10, "api", std::vector<std::uint64_t>(10, 1'000'000));
    t.wakeups = {woken(waker_kind::timer, 0, "", 9'500'000'000),
                 woken(waker_kind::process, 77, "writer", 400'000'000)};
    blocked_row b; // as rschedd stored them before it dropped its own frames
    b.hash = 0xABCDEF;
    b.state = 1;
    b.frames = {"bpf_prog_3f5cadf490afb94a_sched_switch_btf",
                "bpf_trace_run4",
                "__traceiter_sched_switch",
                "__schedule",
                "schedule",
                "io_schedule"};
    b.sleep_ns = 100'000'000;
    b.count = 1;
    t.blocked = {b};
    auto iv = make_interval(t0 + i * 10 * sec, {t});
    iv.groups = 1 | 64 | 128;
    write_ok(w, iv);
  }
  auto r = open_reader(path);
  CHECK(scalar_int(r, fmt::format("SELECT max(hop) FROM ({})", why_sql("hop"))) == 0);
  const auto s = run(r, why_sql("summary"));
  REQUIRE_FALSE(s.rows.empty());
  CHECK(as_text(s.rows[0][0]).find("woken by") == std::string::npos);
  CHECK(as_text(s.rows[0][0]).find("sleeping") != std::string::npos);
  const auto stack = run(r, why_sql("by_comm") + " WHERE part = 'blocked'");
  REQUIRE(stack.rows.size() == 1);
  CHECK(as_text(stack.rows[0][0]) == "__schedule <- schedule <- io_schedule");
}

TEST_CASE_METHOD(new_db,
                 "why: a throttled cgroup's time is a split of the runnable part; a thread "
                 "blocked in D names the processes whose I/O the window saw most",
                 "[store][why]") {
  for (int i = 0; i < 6; ++i) {
    // api in /api.slice: throttled 90 of 100 periods, the kernel's sum over 8 runqueues 25 s
    // an interval of 10 s: 9 s of wall clock. Blocked in D 4 s an interval; writes 1 MiB.
    auto api = make_thread(10, "api", std::vector<std::uint64_t>(10, 1'000'000), {}, "/api.slice");
    api.wakeups = {woken(waker_kind::softirq, 0, "", 4'000'000'000)};
    api.wakeups[0].state = 1;
    api.io_write_bytes = 1 << 20;
    // backup writes 1 GiB an interval; postgres reads 128 MiB; cron 1 KiB (under a hundredth).
    auto backup = make_thread(977, "backup", std::vector<std::uint64_t>(4, 100'000), {}, "/batch");
    backup.io_write_bytes = 1ULL << 30;
    auto pg = make_thread(300, "postgres", std::vector<std::uint64_t>(4, 100'000), {}, "/db");
    pg.io_read_bytes = 128 << 20;
    auto cron = make_thread(40, "cron", std::vector<std::uint64_t>(4, 100'000), {}, "/");
    cron.io_read_bytes = 1 << 10;
    auto iv = make_interval(t0 + i * 10 * sec, {api, backup, pg, cron});
    iv.groups = 1 | 64 | 128;
    iv.cgroup_cpu = {
        rsched::store::cgroup_cpu_row{"/", 200'000'000, 0, 9'000'000'000, {}, {}, {}},
        rsched::store::cgroup_cpu_row{"/api.slice", 0, 0, 1'000'000'000, 100, 90, 25'000'000'000}};
    write_ok(w, iv);
  }
  auto r = open_reader(path);
  const auto thr = run(r, why_sql("by_cgroup, ns") + " WHERE part = 'throttled'");
  REQUIRE(thr.rows.size() == 1);
  CHECK(as_text(thr.rows[0][0]) == "/api.slice");
  CHECK(as_int(thr.rows[0][1]) == 6 * 9'000'000'000LL);
  const auto io = run(r, why_sql("by_pid, by_comm, by_cgroup, bytes, ns") + " WHERE part = 'io'");
  REQUIRE(io.rows.size() == 2); // backup and postgres; cron's 6 KiB is under a hundredth
  CHECK(as_int(io.rows[0][0]) == 977);
  CHECK(as_text(io.rows[0][1]) == "backup");
  CHECK(as_text(io.rows[0][2]) == "/batch");
  CHECK(as_int(io.rows[0][3]) == 6LL << 30);
  CHECK(is_null(io.rows[0][4]));
  CHECK(as_text(io.rows[1][1]) == "postgres");
  const auto s = run(r, why_sql("summary"));
  REQUIRE_FALSE(s.rows.empty());
  const std::string summary = as_text(s.rows[0][0]);
  INFO(summary);
  CHECK(summary.find("cgroup /api.slice throttled 54.0 s") != std::string::npos);
  CHECK(summary.find("its D sleeps beside the I/O of backup[977] 6.00 GiB, postgres[300] "
                     "768 MiB") != std::string::npos);
}
