// The recorder driven through its seams: scripted snapshots, a scripted clock, rows kept in a
// vector. No root, no BPF.
#include "rsched/rschedd/filter.hpp"
#include "rsched/rschedd/live.hpp"
#include "rsched/rschedd/model.hpp"
#include "rsched/rschedd/recorder.hpp"
#include "rsched/rschedd/render.hpp"

#include "fake_source.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace rsched;
using namespace rsched::rschedd;
using metrics::id;

namespace {

constexpr std::int64_t s = 1'000'000'000;

// A thread's cumulative scheduling-delay samples (each 1 us).
collect::thread_sample thread(std::uint32_t tid, std::uint64_t count, const std::string &comm = "t",
                              bool dead = false) {
  collect::thread_sample t;
  t.key = {tid, 1000 + tid};
  t.tgid = tid;
  t.comm = comm;
  t.dead = dead;
  t.c.m[id::sched_delay].count = count;
  t.c.m[id::sched_delay].total = count * 1000;
  t.c.m[id::sched_delay].hist.add(1000, count);
  return t;
}

collect::snapshot snap(std::vector<collect::thread_sample> live,
                       std::vector<collect::thread_sample> dead = {}) {
  collect::snapshot sn;
  sn.live = std::move(live);
  sn.dead = std::move(dead);
  return sn;
}

// Scheduling-delay samples of `tid` in a row (0 when it has no row).
std::uint64_t delay_count(const store::interval_row &row, std::uint32_t tid) {
  std::uint64_t n = 0;
  for (const auto &t : row.threads) {
    if (t.tid == tid) {
      n += t.m[id::sched_delay].count;
    }
  }
  return n;
}

recorder_config config(std::int64_t interval_ns, bool per_second,
                       std::optional<std::int64_t> run_ns, std::vector<std::string> *notes) {
  recorder_config c;
  c.interval_ns = interval_ns;
  c.per_second = per_second;
  c.run_ns = run_ns;
  c.groups = RSCHED_G_LATENCY;
  c.delay_clock = "monotonic";
  c.db_path = "/tmp/fake.db";
  if (notes != nullptr) {
    c.note = [notes](std::string_view n) { notes->emplace_back(n); };
  }
  return c;
}

int run(recorder &r) {
  r.setup();
  while (r.step()) {
  }
  return r.finish();
}

bool any_contains(const std::vector<std::string> &v, const std::string &what) {
  for (const auto &x : v) {
    if (x.find(what) != std::string::npos) {
      return true;
    }
  }
  return false;
}

} // namespace

TEST_CASE("recorder: 1-s ticks are summed into 3-s intervals, the last one final", "[rschedd]") {
  test::fake_source src({snap({thread(10, 2)}), snap({thread(10, 5)}), snap({thread(10, 9)}),
                         snap({thread(10, 10)}), snap({thread(10, 12)}), snap({thread(10, 20)})});
  test::fake_clock clock;
  test::vector_sink sink;
  recorder r(config(3 * s, true, 6 * s, nullptr), src, clock, &sink);
  CHECK(run(r) == 0);
  CHECK(src.reads() == 6);
  REQUIRE(sink.rows.size() == 2);
  CHECK(delay_count(sink.rows[0], 10) == 9);
  CHECK(delay_count(sink.rows[1], 10) == 11);
  CHECK(sink.rows[0].threads[0].m[id::sched_delay].total == 9000);
  CHECK(sink.rows[0].dur_ns == 3 * s);
  CHECK(sink.rows[1].dur_ns == 3 * s);
  CHECK(sink.rows[0].start_ns == 1'000 * s);
  CHECK(sink.rows[1].start_ns == 1'003 * s);
  CHECK_FALSE(sink.rows[0].final_interval);
  CHECK(sink.rows[1].final_interval);
  CHECK_FALSE(sink.rows[0].stalled);
  CHECK(sink.rows[0].delay_clock == "monotonic");
  CHECK(sink.rows[0].groups == RSCHED_G_LATENCY);
  CHECK(r.intervals_written() == 2);
}

TEST_CASE("recorder: without per-second metrics one read per interval", "[rschedd]") {
  test::fake_source src({snap({thread(10, 4)}), snap({thread(10, 7)})});
  test::fake_clock clock;
  test::vector_sink sink;
  recorder r(config(2 * s, false, 4 * s, nullptr), src, clock, &sink);
  CHECK(run(r) == 0);
  CHECK(src.reads() == 2);
  REQUIRE(sink.rows.size() == 2);
  CHECK(delay_count(sink.rows[0], 10) == 4);
  CHECK(delay_count(sink.rows[1], 10) == 3);
  CHECK(sink.rows[0].dur_ns == 2 * s);
}

TEST_CASE("recorder: a thread exiting mid-interval has its final record counted once",
          "[rschedd]") {
  // Read 1: alive with 4 samples; read 2: its final record (7); read 3: gone.
  test::fake_source src({snap({thread(10, 1), thread(11, 4)}),
                         snap({thread(10, 2)}, {thread(11, 7, "t", true)}), snap({thread(10, 3)}),
                         snap({thread(10, 5)}), snap({thread(10, 6)}), snap({thread(10, 8)})});
  test::fake_clock clock;
  test::vector_sink sink;
  recorder r(config(3 * s, true, 6 * s, nullptr), src, clock, &sink);
  CHECK(run(r) == 0);
  REQUIRE(sink.rows.size() == 2);
  CHECK(delay_count(sink.rows[0], 11) == 7);
  CHECK(delay_count(sink.rows[1], 11) == 0);
  CHECK(delay_count(sink.rows[0], 10) == 3);
  CHECK(delay_count(sink.rows[1], 10) == 5);
}

TEST_CASE("recorder: missed ticks are coalesced into one interval marked stalled", "[rschedd]") {
  test::fake_source src({snap({thread(10, 1)}), snap({thread(10, 3)}), snap({thread(10, 6)}),
                         snap({thread(10, 10)})});
  test::fake_clock clock;
  clock.late(2, 2 * s + s / 2); // the second wait ends at 4.5 s instead of 2 s
  test::vector_sink sink;
  std::vector<std::string> notes;
  recorder r(config(s, false, 6 * s, &notes), src, clock, &sink);
  CHECK(run(r) == 0);
  CHECK(src.reads() == 4); // not 6: ticks 2 and 3 were not replayed
  REQUIRE(sink.rows.size() == 4);
  CHECK(sink.rows[0].dur_ns == s);
  CHECK(sink.rows[1].dur_ns == 3 * s + s / 2);
  CHECK(sink.rows[2].dur_ns == s / 2); // back on the grid at 5 s
  CHECK(sink.rows[3].dur_ns == s);
  CHECK_FALSE(sink.rows[0].stalled);
  CHECK(sink.rows[1].stalled);
  CHECK_FALSE(sink.rows[2].stalled);
  CHECK_FALSE(sink.rows[3].stalled);
  CHECK(delay_count(sink.rows[1], 10) == 2);
  CHECK(delay_count(sink.rows[3], 10) == 4);
  CHECK(sink.rows[2].start_ns == sink.rows[1].start_ns + sink.rows[1].dur_ns);
  CHECK(any_contains(notes, "2 missed ticks coalesced"));
  CHECK(any_contains(notes, "on schedule again"));
}

TEST_CASE("recorder: a stop ends the current interval early as the final one", "[rschedd]") {
  test::fake_source src({snap({thread(10, 1)}), snap({thread(10, 2)}), snap({thread(10, 3)}),
                         snap({thread(10, 5)}), snap({thread(10, 8)})});
  test::fake_clock clock;
  clock.stop_at(5, 4 * s + 4 * s / 10); // a signal at 4.4 s, during the fifth wait
  test::vector_sink sink;
  std::vector<live_frame> frames;
  auto cfg = config(3 * s, true, std::nullopt, nullptr);
  cfg.show = [&](live_frame &&f) { frames.push_back(std::move(f)); };
  recorder r(std::move(cfg), src, clock, &sink);
  CHECK(run(r) == 0);
  CHECK(src.reads() == 5);
  REQUIRE(sink.rows.size() == 2);
  CHECK(sink.rows[1].final_interval);
  CHECK(sink.rows[1].dur_ns == s + 4 * s / 10);
  CHECK(delay_count(sink.rows[1], 10) == 5);
  // The display gets every interval but the final one.
  REQUIRE(frames.size() == 1);
  CHECK(frames[0].header.intervals_written == 1);
  CHECK(frames[0].header.dur_ns == 3 * s);
  CHECK(frames[0].header.recording == "recording to /tmp/fake.db");
}

TEST_CASE("recorder: display filters hide threads from the display, never from the database",
          "[rschedd]") {
  test::fake_source src({snap({thread(10, 50, "keepme"), thread(11, 60, "other")}),
                         snap({thread(10, 70, "keepme"), thread(11, 90, "other")})});
  test::fake_clock clock;
  test::vector_sink sink;
  std::vector<live_frame> frames;
  auto cfg = config(s, false, 2 * s, nullptr);
  cfg.show = [&](live_frame &&f) { frames.push_back(std::move(f)); };
  recorder r(std::move(cfg), src, clock, &sink);
  CHECK(run(r) == 0);
  REQUIRE(sink.rows.size() == 2);
  CHECK(delay_count(sink.rows[0], 11) == 60);
  CHECK(delay_count(sink.rows[1], 11) == 30);
  REQUIRE(frames.size() == 1);
  CHECK(delay_count(frames[0].row, 11) == 60);

  filter_options fo;
  fo.comm = {"keep"};
  auto f = filter::make(fo);
  REQUIRE(f);
  model m;
  fold_row(m, frames[0].row, false, {}, 1);
  render_options ro;
  ro.groups = RSCHED_G_LATENCY;
  const std::string shown = render(m, ro, *f);
  CHECK(shown.find("keepme") != std::string::npos);
  CHECK(shown.find("other") == std::string::npos);
  const std::string unfiltered = render(m, ro, filter());
  CHECK(unfiltered.find("other") != std::string::npos);
}

TEST_CASE("recorder: intervals lost to failing writes are noted in the database once writing "
          "works again (gaps() says \"write failed\")",
          "[rschedd]") {
  std::vector<collect::snapshot> snaps;
  for (std::uint64_t i = 1; i <= 7; ++i) {
    snaps.push_back(snap({thread(10, i)}));
  }
  test::fake_source src(std::move(snaps));
  test::fake_clock clock;
  test::vector_sink sink;
  sink.fail_from = 2; // the 3rd, 4th and 5th writes fail
  sink.fail_until = 5;
  sink.fail_notes = 1; // and the first try to note it too: it is tried again with the next
  std::vector<std::string> notes;
  recorder r(config(s, false, 7 * s, &notes), src, clock, &sink);
  CHECK(run(r) == 0);
  REQUIRE(sink.rows.size() == 4);
  REQUIRE(sink.lost.size() == 1);
  const auto &l = sink.lost[0];
  CHECK(l.intervals == 3);
  CHECK(l.error == "disk full");
  // From the first lost interval's start to the last one's end: where the hole is.
  CHECK(l.start_ns == sink.rows[1].start_ns + sink.rows[1].dur_ns);
  CHECK(l.end_ns == sink.rows[2].start_ns);
  CHECK(any_contains(notes, "writing intervals again"));
  CHECK(any_contains(notes, "cannot note the lost intervals in the database"));
}

TEST_CASE("recorder: two outages whose notes fail in between are two spans, never one across "
          "the intervals written between them",
          "[rschedd]") {
  std::vector<collect::snapshot> snaps;
  for (std::uint64_t i = 1; i <= 9; ++i) {
    snaps.push_back(snap({thread(10, i)}));
  }
  test::fake_source src(std::move(snaps));
  test::fake_clock clock;
  test::vector_sink sink;
  sink.fail_from = 1; // write 1 fails; 2 and 3 are written (the notes after them fail)
  sink.fail_until = 2;
  sink.fail_from2 = 4; // writes 4 and 5 fail too
  sink.fail_until2 = 6;
  sink.fail_notes = 2;
  std::vector<std::string> notes;
  recorder r(config(s, false, 9 * s, &notes), src, clock, &sink);
  CHECK(run(r) == 0);
  REQUIRE(sink.lost.size() == 2);
  CHECK(sink.lost[0].intervals == 1);
  CHECK(sink.lost[1].intervals == 2);
  CHECK(sink.lost[0].end_ns == sink.rows[1].start_ns); // ends where writing resumed
  CHECK(sink.lost[1].start_ns == sink.rows[2].start_ns + sink.rows[2].dur_ns);
  CHECK(sink.lost[1].end_ns == sink.rows[3].start_ns);
}

TEST_CASE("recorder: nothing written, or a failed read, is exit status 1", "[rschedd]") {
  SECTION("every write fails") {
    test::fake_source src({snap({thread(10, 1)}), snap({thread(10, 2)})});
    test::fake_clock clock;
    test::vector_sink sink;
    sink.fail = true;
    std::vector<std::string> notes;
    recorder r(config(s, false, 2 * s, &notes), src, clock, &sink);
    CHECK(run(r) == 1);
    CHECK(r.write_failures() == 2);
    CHECK(any_contains(notes, "rschedd: writing interval failed: disk full"));
    CHECK(any_contains(notes, "nothing could be written to /tmp/fake.db"));
  }
  SECTION("the source fails") {
    test::fake_source src({snap({thread(10, 1)})});
    test::fake_clock clock;
    test::vector_sink sink;
    std::vector<std::string> notes;
    recorder r(config(s, false, 5 * s, &notes), src, clock, &sink);
    CHECK(run(r) == 1);
    CHECK(sink.rows.size() == 1);
    CHECK(any_contains(notes, "no more snapshots"));
  }
  SECTION("no sink (--no-db): nothing to write is fine") {
    test::fake_source src({snap({thread(10, 1)})});
    test::fake_clock clock;
    recorder r(config(s, false, s, nullptr), src, clock, nullptr);
    CHECK(run(r) == 0);
  }
}

TEST_CASE("recorder: intervals follow the wall clock's steps, each step is written with the next "
          "interval written, and retention's now never jumps ahead with the clock",
          "[rschedd][clock]") {
  constexpr std::int64_t utc0 = 1'000'000'000'000; // fake_clock's UTC at monotonic 0
  constexpr std::int64_t day = 86400 * s;
  std::vector<collect::snapshot> snaps;
  for (std::uint64_t i = 1; i <= 8; ++i) {
    snaps.push_back(snap({thread(10, i)}));
  }
  test::fake_source src(std::move(snaps));
  test::fake_clock clock;
  clock.step_wall(2, 500'000); // 0.5 ms: reading noise, not a step
  clock.step_wall(3, 3 * day); // NTP correcting a clock 3 days behind
  clock.step_wall(6, -60 * s); // and one set back a minute
  test::vector_sink sink;
  sink.fail_from = 2; // the 3rd interval's write fails: its step goes with the 4th
  sink.fail_until = 3;
  std::vector<std::string> notes;
  recorder r(config(s, false, 8 * s, &notes), src, clock, &sink);
  CHECK(run(r) == 0);
  REQUIRE(sink.rows.size() == 7); // intervals 1, 2, 4, 5, 6, 7, 8
  CHECK(sink.rows[0].start_ns == utc0);
  CHECK(sink.rows[1].start_ns == utc0 + s); // the 0.5 ms moved nothing
  CHECK(sink.rows[1].clock_steps.empty());
  // From the 3rd interval on (its end saw the step), times are the new clock's.
  const std::int64_t fwd = 3 * day + 500'000;
  CHECK(sink.rows[2].start_ns == utc0 + 3 * s + fwd);
  REQUIRE(sink.rows[2].clock_steps.size() == 1);
  CHECK(sink.rows[2].clock_steps[0].step_ns == fwd);
  CHECK(sink.rows[2].clock_steps[0].at_ns == utc0 + 3 * s + fwd);
  CHECK(sink.rows[3].clock_steps.empty());
  CHECK(sink.rows[4].start_ns == utc0 + 5 * s + fwd - 60 * s);
  REQUIRE(sink.rows[4].clock_steps.size() == 1);
  CHECK(sink.rows[4].clock_steps[0].step_ns == -60 * s);
  for (const auto &row : sink.rows) {
    CHECK(row.dur_ns == s); // lengths are the monotonic clock's
  }
  CHECK(any_contains(notes, "the wall clock stepped forward by 259200.00"));
  CHECK(any_contains(notes, "the wall clock stepped back by 60.000 s"));
  // Retention runs on the data's time, advanced by the boot clock from the first interval: the
  // step forward does not move it (3 days of history would go), the step back does.
  REQUIRE(sink.maintained.size() == 8);
  for (std::size_t i = 0; i < 8; ++i) {
    INFO("maintenance " << i);
    CHECK(sink.maintained[i] == utc0 + static_cast<std::int64_t>(i + 1) * s);
  }
}

TEST_CASE("recorder: consecutive intervals meet exactly however late the clocks are read, and a "
          "suspend is a gap, not a step of the wall clock",
          "[rschedd][clock]") {
  // Reads of the boot clock late by 0, 0.3 or 0.6 ms in turn (the first recording), or an hour
  // asleep during the 4th interval (the second).
  for (const bool asleep : {false, true}) {
    INFO((asleep ? "suspended" : "late reads"));
    std::vector<collect::snapshot> snaps;
    for (std::uint64_t i = 1; i <= 6; ++i) {
      snaps.push_back(snap({thread(10, i)}));
    }
    test::fake_source src(std::move(snaps));
    test::fake_clock clock;
    if (asleep) {
      clock.suspend(4, 3600 * s);
    } else {
      clock.boot_jitter(300'000);
    }
    test::vector_sink sink;
    recorder r(config(s, false, 6 * s, nullptr), src, clock, &sink);
    CHECK(run(r) == 0);
    REQUIRE(sink.rows.size() == 6);
    for (std::size_t i = 0; i + 1 < sink.rows.size(); ++i) {
      INFO("interval " << i);
      CHECK(sink.rows[i].dur_ns == s); // the monotonic clock's: the time asleep is not in it
      CHECK(sink.rows[i].clock_steps.empty());
      const std::int64_t gap = sink.rows[i + 1].start_ns - sink.rows[i].start_ns - s;
      CHECK(gap == (asleep && i == 3 ? 3600 * s : 0)); // the 4th ends where the wall clock says
    }
  }
}
