// rsched::flight's window and wait watch, fed by hand-made ring records.
#include "rsched/flight/window.hpp"

#include <catch2/catch.hpp>

#include <cstring>

using namespace rsched;

namespace {

constexpr std::uint64_t ms = 1'000'000;

rsched_flight_event ev(std::uint8_t kind, std::uint64_t ts, int pid, int tid, const char *comm) {
  rsched_flight_event e{};
  e.kind = kind;
  e.ts = ts;
  e.pid = pid;
  e.tid = tid;
  e.tgid = tid;
  e.prio = 120;
  std::strncpy(e.comm, comm, sizeof e.comm - 1);
  return e;
}

rsched_flight_event sw(std::uint64_t ts, int prev, int next, const char *comm, bool preempt,
                       std::uint32_t state) {
  auto e = ev(RSCHED_FL_SWITCH, ts, prev, next, comm);
  e.preempt = preempt ? 1 : 0;
  e.state = state;
  e.prev_prio = 100;
  return e;
}

} // namespace

TEST_CASE("ring records become trace events of their kind", "[flight]") {
  auto s = flight::to_trace_event(1, sw(5, 10, 20, "next", true, 1));
  CHECK(s.kind == trace::event_kind::sched_switch);
  CHECK(s.cpu == 1);
  CHECK(s.pid == 10);
  CHECK(s.tid == 20);
  CHECK(s.prev_prio == 100);
  CHECK(s.prev_state == 0x100);
  CHECK(trace::comm_view(s.comm) == "next");
  auto w = ev(RSCHED_FL_WAKING, 6, 10, 30, "woken");
  w.cpu = 3;
  auto t = flight::to_trace_event(0, w);
  CHECK(t.kind == trace::event_kind::sched_waking);
  CHECK(t.target_cpu == 3);
  auto m = ev(RSCHED_FL_MIGRATE, 7, 10, 30, "woken");
  m.cpu = 0;
  m.orig_cpu = 1;
  auto u = flight::to_trace_event(0, m);
  CHECK(u.kind == trace::event_kind::sched_migrate_task);
  CHECK(u.orig_cpu == 1);
  CHECK(u.target_cpu == 0);
  // A comm of 16 bytes without NUL stays within its 15.
  auto full = ev(RSCHED_FL_EXIT, 8, 10, 10, "");
  std::memset(full.comm, 'x', sizeof full.comm);
  CHECK(trace::comm_view(flight::to_trace_event(0, full).comm).size() == 15);
}

TEST_CASE("the window keeps the last span and at most its cap a CPU", "[flight]") {
  flight::window w(2, 100 * ms, 1000);
  for (std::uint64_t t = 0; t <= 300; ++t) {
    w.add(static_cast<std::uint32_t>(t % 2), sw(t * ms, 1, 2, "a", false, 1));
  }
  // Each CPU drops what is older than the span when it adds: CPU 1's last add (299 ms) kept
  // 199 ms.
  CHECK(w.events() == 102);
  auto c = w.snapshot(300 * ms);
  CHECK(c.from_ts == 200 * ms);
  CHECK(c.to_ts == 300 * ms);
  CHECK(c.events.size() == 101);
  // Per CPU in time order, CPU 0 first.
  CHECK(c.events.front().cpu == 0);
  CHECK(c.events.back().cpu == 1);
  // A capture that ends earlier holds what is still there up to then: [199, 250] ms.
  CHECK(w.snapshot(250 * ms).events.size() == 52);

  flight::window small(1, 1'000 * ms, 10);
  for (std::uint64_t t = 0; t < 50; ++t) {
    small.add(0, sw(t * ms, 1, 2, "a", false, 1));
  }
  CHECK(small.events() == 10);
  CHECK(small.evicted_early() == 40);
  auto sc = small.snapshot(49 * ms);
  CHECK(sc.events.size() == 10);
  CHECK(sc.from_ts == 40 * ms); // the window starts where the cap cut it
}

TEST_CASE("a capture names threads seen before it and gives forks and renames their old names",
          "[flight]") {
  flight::window w(1, 50 * ms, 1000);
  w.add(0, sw(1 * ms, 0, 7, "worker \"7\"", false, 0)); // falls out of the window
  w.add(0, ev(RSCHED_FL_RENAME, 60 * ms, 7, 7, "renamed"));
  w.add(0, ev(RSCHED_FL_FORK, 70 * ms, 7, 8, "renamed"));
  w.add(0, sw(80 * ms, 7, 0, "swapper/0", false, 1));
  w.add(0, ev(RSCHED_FL_WAKING, 70 * ms, 9, 7, "renamed")); // an interrupt's, out of order
  auto c = w.snapshot(100 * ms);
  REQUIRE(c.events.size() == 4);
  // Time order within the CPU.
  CHECK(c.events[0].kind == trace::event_kind::task_rename);
  CHECK(c.events[1].ts == 70 * ms);
  CHECK(c.events[3].kind == trace::event_kind::sched_switch);
  CHECK(trace::comm_view(c.events[0].comm2) == "worker \"7\""); // old name from the cache
  // The fork's parent name: the thread's name at the fork (after the rename).
  const auto &fork =
      c.events[1].kind == trace::event_kind::sched_process_fork ? c.events[1] : c.events[2];
  CHECK(trace::comm_view(fork.comm2) == "renamed");
  // Thread 7 runs before the window's first switch names it: listed with its latest name.
  bool named = false;
  for (const auto &n : c.names) {
    named = named || (n.tid == 7 && trace::comm_view(n.comm) == "renamed");
  }
  CHECK(named);
  // The whole capture encodes.
  trace::trace_input in;
  in.events = c.events;
  in.names = c.names;
  CHECK(trace::encode(in));
}

TEST_CASE("lost events mark the CPUs whose window lost some", "[flight]") {
  flight::window w(2, 100 * ms, 1000);
  w.add(0, sw(10 * ms, 1, 2, "a", false, 1));
  w.note_lost(1, 50 * ms);
  CHECK(w.snapshot(120 * ms).lossy_cpus == std::vector<std::uint32_t>{1});
  CHECK(w.snapshot(200 * ms).lossy_cpus.empty()); // the loss is before this window
}

TEST_CASE("the wait watch sees each wait above the threshold at its switch-in", "[flight]") {
  flight::wait_watch ww(50 * ms);
  // Woken at 0, in at 60 ms: a crossing.
  CHECK_FALSE(ww.add(ev(RSCHED_FL_WAKING, 0, 1, 10, "victim")));
  auto c = ww.add(sw(60 * ms, 1, 10, "victim", false, 1));
  REQUIRE(c);
  CHECK(c->tid == 10);
  CHECK(c->wait_ns == 60 * ms);
  CHECK(trace::comm_view(c->comm) == "victim");
  // Preempted at 100 ms (still runnable), in again at 120: below.
  CHECK_FALSE(ww.add(sw(100 * ms, 10, 11, "hog", true, 0)));
  CHECK_FALSE(ww.add(sw(120 * ms, 11, 10, "victim", false, 1)));
  // Went to sleep (state 1): a switch-in without a wakeup is no wait.
  CHECK_FALSE(ww.add(sw(130 * ms, 10, 11, "hog", false, 1)));
  CHECK_FALSE(ww.add(sw(500 * ms, 11, 10, "victim", false, 1)));
  // A second waking while already waiting keeps the first stamp.
  CHECK_FALSE(ww.add(ev(RSCHED_FL_WAKING, 600 * ms, 1, 12, "x")));
  CHECK_FALSE(ww.add(ev(RSCHED_FL_WAKING, 640 * ms, 1, 12, "x")));
  auto c2 = ww.add(sw(660 * ms, 1, 12, "x", false, 1));
  REQUIRE(c2);
  CHECK(c2->wait_ns == 60 * ms);
  // An exit forgets the thread.
  CHECK_FALSE(ww.add(ev(RSCHED_FL_WAKING, 700 * ms, 1, 13, "gone")));
  CHECK_FALSE(ww.add(ev(RSCHED_FL_EXIT, 701 * ms, 13, 13, "gone")));
  CHECK_FALSE(ww.add(sw(900 * ms, 1, 13, "gone", false, 1)));
}
