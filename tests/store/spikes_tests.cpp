// spikes() finds incidents, not fragments: a thread that stalls alone among its comm's threads is
// its own row, and one incident is one row across dips, fluctuation and a '3x' baseline that
// would otherwise rise with the incident. Histories of 1-s intervals, as rschedd records.
#include "store_test_util.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <random>
#include <variant>

using namespace store_test;
using rsched::store::blame_row;
using rsched::store::culprit_kind;

namespace {

constexpr std::int64_t t0 = 1'700'000'040'000'000'000; // a whole minute (UTC ns)

// One 1-s interval starting `i` seconds after t0.
void write_second(rsched::store::writer &w, int i, std::vector<rsched::store::thread_row> threads) {
  auto iv = make_interval(t0 + i * sec, std::move(threads));
  iv.dur_ns = sec;
  write_ok(w, iv);
}

// 'svc' (one thread), 20 delays a second of `level(i)` ns in second i.
template <typename Level> void write_svc(rsched::store::writer &w, int seconds, Level level) {
  for (int i = 0; i < seconds; ++i) {
    write_second(w, i, {make_thread(2, "svc", std::vector<std::uint64_t>(20, level(i)))});
  }
}

std::string at(int i) {
  return std::to_string(t0 + i * sec);
}

} // namespace

TEST_CASE_METHOD(new_db, "spikes: one thread of four stalled is its own row, with its tid",
                 "[store][spikes]") {
  // 'webworker': four threads of pid 100, each waiting 400 times a second for 0.1 ms; from
  // second 120 to 179, thread 103 is pinned behind an RT job and waits 10 times a second for
  // 20 ms (the RT job's doing). 10 of the comm's 1,210 samples: under 1 %, the comm's p99 is
  // still 0.1 ms.
  for (int i = 0; i < 240; ++i) {
    const bool stalled = i >= 120 && i < 180;
    std::vector<rsched::store::thread_row> ts;
    for (std::uint32_t tid = 101; tid <= 104; ++tid) {
      auto t = stalled && tid == 103
                   ? make_thread(tid, "webworker", std::vector<std::uint64_t>(10, 20'000'000))
                   : make_thread(tid, "webworker", std::vector<std::uint64_t>(400, 100'000));
      t.pid = 100;
      if (stalled && tid == 103) {
        blame_row b;
        b.kind = culprit_kind::process;
        b.pid = 900;
        b.comm = "rtjob";
        b.cgroup = "/batch";
        b.wait_ns = 10 * 20'000'000;
        b.waits = 10;
        t.blame = {b};
      }
      ts.push_back(std::move(t));
    }
    write_second(w, i, std::move(ts));
  }
  auto r = open_reader(path);
  for (const std::string victim : {"NULL", "'webworker'"}) {
    for (const std::string thr : {"'3x'", "'5ms'"}) {
      INFO(victim << " " << thr);
      const std::string call = "spikes('sched_delay', " + thr + ", NULL, NULL, " + victim + ")";
      // The columns of before first: the stalled thread was no row at all.
      REQUIRE(run(r, "SELECT ts, dur, victim FROM " + call).rows.size() == 1);
      auto t = run(r, "SELECT ts, dur, victim, tid, threads, cause, top_comms FROM " + call);
      REQUIRE(t.rows.size() == 1);
      CHECK(as_int(t.rows[0][0]) == t0 + 120 * sec);
      CHECK(as_int(t.rows[0][1]) == 60 * sec);
      CHECK(as_text(t.rows[0][2]) == "webworker");
      CHECK(as_int(t.rows[0][3]) == 103);
      CHECK(as_int(t.rows[0][4]) == 1);
      CHECK(as_text(t.rows[0][5]) == "rtjob[900] 100% of the wait");
      CHECK(as_text(t.rows[0][6]) == "webworker (600)"); // its own samples, not its comm's
    }
  }
  // The comm-merged view (by 'comm') averages the thread away, as before; tid and threads are
  // NULL there.
  CHECK(run(r, "SELECT * FROM spikes('sched_delay', '3x', NULL, NULL, 'webworker', 'comm')")
            .rows.empty());
  auto c = run(r, "SELECT tid, threads FROM spikes('sched_delay', '10us', NULL, NULL, NULL, "
                  "'comm')");
  REQUIRE(c.rows.size() == 1);
  CHECK(is_null(c.rows[0][0]));
  CHECK(is_null(c.rows[0][1]));
  // All four threads over an absolute threshold: one row of the comm, no single tid.
  auto all4 = run(r, "SELECT ts, dur, victim, tid, threads FROM spikes('sched_delay', '10us')");
  REQUIRE(all4.rows.size() == 1);
  CHECK(as_int(all4.rows[0][0]) == t0);
  CHECK(as_int(all4.rows[0][1]) == 240 * sec);
  CHECK(as_text(all4.rows[0][2]) == "webworker");
  CHECK(is_null(all4.rows[0][3]));
  CHECK(as_int(all4.rows[0][4]) == 4);
}

TEST_CASE_METHOD(new_db, "spikes: a 60-s incident with a dip in the middle is one row",
                 "[store][spikes]") {
  // 0.1 ms, then 5 ms from second 120 to 179 except 150..154 (back to 0.1 ms), then 0.1 ms.
  write_svc(w, 240, [](int i) -> std::uint64_t {
    const bool in = i >= 120 && i < 180 && !(i >= 150 && i < 155);
    return in ? 5'000'000 : 100'000;
  });
  auto r = open_reader(path);
  for (const std::string thr : {"'2ms'", "'3x'"}) {
    INFO(thr);
    auto t = run(r, "SELECT ts, dur, peak_ns FROM spikes('sched_delay', " + thr + ")");
    REQUIRE(t.rows.size() == 1);
    CHECK(as_int(t.rows[0][0]) == t0 + 120 * sec);
    CHECK(as_int(t.rows[0][1]) == 60 * sec);
    CHECK(as_int(t.rows[0][2]) > 5'000'000);
  }
  // A gap shorter than the dip: two incidents.
  auto t = run(r, "SELECT ts, dur FROM spikes('sched_delay', '2ms', NULL, NULL, NULL, NULL, "
                  "NULL, '4s')");
  REQUIRE(t.rows.size() == 2);
  CHECK(as_int(t.rows[0][1]) == 30 * sec);
  CHECK(as_int(t.rows[1][0]) == t0 + 155 * sec);
  CHECK(as_int(t.rows[1][1]) == 25 * sec);
  CHECK(run_error(r, "SELECT * FROM spikes('sched_delay', '2ms', NULL, NULL, NULL, NULL, NULL, "
                     "'-1s')")
            .find("gap") != std::string::npos);
}

TEST_CASE_METHOD(new_db, "spikes: '3x' over a 60-s incident is one row covering it",
                 "[store][spikes]") {
  // The baseline (0.1 ms) must not rise with the incident: a rolling median of the previous 60
  // intervals that took them in would be the incident's own level after 30 s.
  write_svc(w, 300,
            [](int i) -> std::uint64_t { return i >= 120 && i < 180 ? 5'000'000 : 100'000; });
  auto r = open_reader(path);
  auto t = run(r, "SELECT ts, dur, victim FROM spikes('sched_delay', '3x')");
  REQUIRE(t.rows.size() == 1);
  CHECK(as_int(t.rows[0][0]) == t0 + 120 * sec);
  CHECK(as_int(t.rows[0][1]) == 60 * sec);
  CHECK(as_text(t.rows[0][2]) == "svc");
  // A window that starts inside the incident: its part in the window, still one row.
  auto late = run(r, "SELECT ts, dur FROM spikes('sched_delay', '3x', " + at(160) + ", NULL)");
  REQUIRE(late.rows.size() == 1);
  CHECK(as_int(late.rows[0][0]) == t0 + 160 * sec);
  CHECK(as_int(late.rows[0][1]) == 20 * sec);
}

TEST_CASE("spikes: an absolute threshold over a fluctuating incident is one row",
          "[store][spikes]") {
  // A throttled minute (seconds 120..179): 4 s at 5 ms, then 2 s at `low`, ten times over.
  for (const std::uint64_t low : {std::uint64_t{1'000'000}, std::uint64_t{3'000'000}}) {
    INFO(low);
    new_db d;
    write_svc(d.w, 240, [low](int i) -> std::uint64_t {
      if (i < 120 || i >= 180) {
        return 100'000;
      }
      return (i - 120) % 6 < 4 ? 5'000'000 : low;
    });
    auto r = open_reader(d.path);
    auto t = run(r, "SELECT ts, dur FROM spikes('sched_delay', '5ms')");
    REQUIRE(t.rows.size() == 1);
    CHECK(as_int(t.rows[0][0]) == t0 + 120 * sec);
    // The last 2 s at 1 ms are below half the threshold: not the incident's.
    CHECK(as_int(t.rows[0][1]) == (low == 1'000'000 ? 58 : 60) * sec);
    // Without the gap, the stay level (half the threshold) alone still holds it together when
    // the dips stay above it; dips below it split the minute into its ten pieces.
    auto g = run(r, "SELECT ts, dur FROM spikes('sched_delay', '5ms', NULL, NULL, NULL, NULL, "
                    "NULL, 0)");
    CHECK(g.rows.size() == (low == 1'000'000 ? 10U : 1U));
  }
}

// The summaries (schema v12, hist_summary) stand for the histograms: spikes() gives the same
// rows from them, from the histograms alone (summaries deleted) and from a mix (half deleted),
// on random histories of threads of several comms that come and go, with hostile comm bytes.
TEST_CASE_METHOD(new_db, "spikes: the per-interval summaries give the same rows as the histograms",
                 "[store][spikes]") {
  const auto seed = static_cast<std::uint32_t>(GENERATE(1, 2, 3));
  std::mt19937 rng(seed);
  const std::vector<std::string> comms = {"web", "db", "we,b\"\x1b[31m", "batch\xff"};
  constexpr int seconds = 400;
  for (int i = 0; i < seconds; ++i) {
    std::vector<rsched::store::thread_row> ts;
    for (std::uint32_t tid = 101; tid <= 112; ++tid) {
      if (rng() % 7 == 0) {
        continue; // no row this second
      }
      // A thread renames in the second half: a new identity under another comm.
      const std::size_t c = (tid + (i >= seconds / 2 && tid % 5 == 0 ? 1 : 0)) % comms.size();
      // Quiet most of the time; each thread has a few random stalls of a few seconds.
      const bool stalled =
          (rng() % 40 == 0) || ((static_cast<std::uint32_t>(i) / 7 + tid) % 23 == 0);
      const std::uint64_t base = 20'000 + rng() % 80'000;
      std::vector<std::uint64_t> d(static_cast<std::size_t>(rng() % 60), base);
      for (auto &x : d) {
        x = base + rng() % (stalled ? 20'000'000 : 50'000);
      }
      auto t = make_thread(tid, comms[c], d, {}, tid % 3 == 0 ? "/svc/a" : "/svc/b");
      t.pid = 100 + tid % 2;
      ts.push_back(std::move(t));
    }
    write_second(w, i, std::move(ts));
  }
  const std::vector<std::string> calls = {
      "spikes('sched_delay', '3x')",
      "spikes('sched_delay', '5x', NULL, NULL, NULL, NULL, 1)",
      "spikes('sched_delay', '2ms')",
      "spikes('sched_delay', '3x', NULL, NULL, NULL, 'comm')",
      "spikes('sched_delay', '1ms', NULL, NULL, NULL, 'all')",
      "spikes('sched_delay', '3x', NULL, NULL, 'web')",
      "spikes('sched_delay', '3x', NULL, NULL, 'comm:w*', 'tid', 5, '3s')",
      // Not served by summaries (a victim of some threads of a comm, a split by cgroup): the
      // rows, whatever is stored.
      "spikes('sched_delay', '3x', NULL, NULL, 'pid:101')",
      "spikes('sched_delay', '2ms', NULL, NULL, NULL, 'cgroup')",
      "spikes('sched_delay', '3x', " + std::to_string(t0 + 100 * sec) + ", " +
          std::to_string(t0 + 300 * sec) + ")",
  };
  const auto answers = [&] {
    auto r = open_reader(path);
    std::vector<std::string> out;
    for (const auto &c : calls) {
      std::string text;
      for (const auto &row : run(r, "SELECT * FROM " + c).rows) {
        for (const auto &v : row) {
          std::visit(
              [&](const auto &x) {
                using T = std::decay_t<decltype(x)>;
                if constexpr (std::is_same_v<T, std::string>) {
                  text += x;
                } else if constexpr (std::is_arithmetic_v<T>) {
                  text += fmt::format("{}", x);
                } else if constexpr (std::is_same_v<T, std::monostate>) {
                  text += "NULL";
                } else {
                  text += "<blob>";
                }
              },
              v);
          text += '|';
        }
        text += '\n';
      }
      out.push_back(text);
    }
    return out;
  };
  {
    auto r = open_reader(path);
    REQUIRE(scalar_int(r, "SELECT count(*) FROM hist_summary") == seconds);
  }
  const auto with = answers();
  std::size_t rows = 0;
  for (const auto &a : with) {
    rows += static_cast<std::size_t>(std::count(a.begin(), a.end(), '\n'));
  }
  INFO("seed " << seed << ": " << rows << " rows in all");
  CHECK(rows >= 10); // incidents to compare, not empty answers
  raw_exec(path, "DELETE FROM hist_summary WHERE interval_id % 2 = 0");
  const auto mixed = answers();
  raw_exec(path, "DELETE FROM hist_summary");
  const auto without = answers();
  for (std::size_t i = 0; i < calls.size(); ++i) {
    INFO(calls[i]);
    CHECK(with[i] == without[i]);
    CHECK(mixed[i] == without[i]);
  }
}
