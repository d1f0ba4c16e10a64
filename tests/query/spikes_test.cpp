// spikes() finds incidents, not fragments: a thread that stalls alone among its comm's threads is
// its own row, and one incident is one row across dips, fluctuation and a '3x' baseline that
// would otherwise rise with the incident. Histories of 1-s intervals, as rschedd records.
#include "store_test_util.hpp"
// The store's own (modules/store/src): the per-window blame and pressure that spikes' one-pass
// causes are checked against.
#include "rsched/store/schema.hpp"

#include "tvf_blame.hpp"
#include "tvf_window.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
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
  // Summaries' per-series feeds go to a second thread in batches: the default (one batch here)
  // and batches so small that every series crosses many hand-offs give the same answers.
  {
    const auto saved_batch = rsched::query::detail::spike_feed_batch;
    struct restore {
      std::size_t v;
      ~restore() { rsched::query::detail::spike_feed_batch = v; }
    } restored{saved_batch};
    for (const std::size_t batch : {std::size_t{1}, std::size_t{7}}) {
      rsched::query::detail::spike_feed_batch = batch;
      INFO("batch " << batch);
      CHECK(answers() == with);
    }
  }
  std::size_t rows = 0;
  for (const auto &a : with) {
    rows += static_cast<std::size_t>(std::count(a.begin(), a.end(), '\n'));
  }
  INFO("seed " << seed << ": " << rows << " rows in all");
  CHECK(rows >= 10); // incidents to compare, not empty answers
  // A statement that reads some columns gets the same values in them (spikes skips the work
  // of top_comms and cause when they are not read).
  {
    auto r = open_reader(path);
    for (const auto &c : calls) {
      INFO(c);
      const auto full = run(r, "SELECT ts, victim, tid, cause, top_comms FROM " + c);
      const auto some = run(r, "SELECT ts, victim, tid FROM " + c);
      const auto one = run(r, "SELECT cause FROM " + c);
      REQUIRE(some.rows.size() == full.rows.size());
      REQUIRE(one.rows.size() == full.rows.size());
      for (std::size_t i = 0; i < full.rows.size(); ++i) {
        CHECK(some.rows[i] == std::vector<value>(full.rows[i].begin(), full.rows[i].begin() + 3));
        CHECK(one.rows[i][0] == full.rows[i][3]);
      }
    }
  }
  raw_exec(path, "DELETE FROM hist_summary WHERE interval_id % 2 = 0");
  const auto mixed = answers();
  // Damaged summaries (a wrong version, a truncated one): their intervals' rows answer.
  raw_exec(path, "UPDATE hist_summary SET data = X'09' WHERE interval_id % 3 = 0; UPDATE "
                 "hist_summary SET data = substr(data, 1, 5) WHERE interval_id % 3 = 1");
  const auto damaged = answers();
  raw_exec(path, "DELETE FROM hist_summary");
  const auto without = answers();
  for (std::size_t i = 0; i < calls.size(); ++i) {
    INFO(calls[i]);
    CHECK(with[i] == without[i]);
    CHECK(mixed[i] == without[i]);
    CHECK(damaged[i] == without[i]);
  }
}

namespace {

namespace detail = rsched::query::detail;

// A random busy history of 1-s intervals: threads of a few comms, processes and nested cgroups
// (one tid reused by a second thread), each with its own delay level and random episodes at 4
// to 12 times it; culprits of every kind with waits from a few values (ties), some rows of a
// thread with blame but no delay samples; pressure and throttling rows of some cgroups and the
// system, each value sometimes unknown.
void write_random_history(writer &w, std::mt19937_64 &rng, int seconds) {
  struct th {
    std::uint32_t tid, pid;
    std::uint64_t start;
    const char *comm, *cgroup;
    std::uint64_t level;
    std::vector<std::pair<int, int>> episodes; // [from, to) seconds
    std::uint64_t factor;
  };
  std::vector<th> ths = {
      {101, 100, 1, "web", "/s/web", 100'000, {}, 0},
      {102, 100, 2, "web", "/s/web", 100'000, {}, 0},
      {103, 100, 3, "web", "/s/web", 150'000, {}, 0},
      {104, 104, 4, "web", "/s/web2", 100'000, {}, 0},
      {201, 200, 5, "db", "/s/db", 200'000, {}, 0},
      {202, 200, 6, "db", "/s/db", 200'000, {}, 0},
      {301, 301, 7, "cron", "/t/x", 50'000, {}, 0},
      {302, 302, 8, "cron", "", 50'000, {}, 0},
      {401, 400, 9, "w2", "/s", 80'000, {}, 0},
      {101, 500, 10, "worker", "/t", 120'000, {}, 0}, // tid 101 again: another thread
  };
  std::uniform_int_distribution<int> pct(0, 99);
  for (auto &t : ths) {
    const int n = 1 + pct(rng) % 3;
    for (int e = 0; e < n; ++e) {
      const int from = 40 + pct(rng) * (seconds - 60) / 100;
      t.episodes.emplace_back(from, from + 3 + pct(rng) % 40);
    }
    t.factor = 4 + static_cast<std::uint64_t>(pct(rng) % 9);
  }
  struct who {
    rsched::store::culprit_kind kind;
    std::uint32_t pid;
    const char *comm, *cgroup;
  };
  using rsched::store::culprit_kind;
  const std::vector<who> culprits = {
      {culprit_kind::process, 900, "rtjob", "/batch"},
      {culprit_kind::process, 901, "hog", "/hog"},
      {culprit_kind::process, 902, "hog", "/hog"},
      {culprit_kind::process, 903, "hog", "/t"},
      {culprit_kind::process, 101, "web", "/s/web"},
      {culprit_kind::idle, 0, "", ""},
      {culprit_kind::unknown, 0, "", ""},
      {culprit_kind::other, 0, "", ""},
  };
  const std::vector<const char *> cgroups = {"/s", "/s/web", "/s/web2", "/s/db",
                                             "/t", "/t/x",   "/hog",    "/batch"};
  const auto maybe = [&](std::int64_t v) -> std::optional<std::int64_t> {
    return pct(rng) < 15 ? std::nullopt : std::optional<std::int64_t>(v);
  };
  for (int i = 0; i < seconds; ++i) {
    std::vector<rsched::store::thread_row> rows;
    for (const auto &t : ths) {
      if (pct(rng) < 10) {
        continue; // not seen this second
      }
      const bool hot = std::any_of(t.episodes.begin(), t.episodes.end(),
                                   [&](const auto &e) { return i >= e.first && i < e.second; });
      const std::uint64_t level = (hot ? t.level * t.factor : t.level) *
                                  static_cast<std::uint64_t>(90 + pct(rng) % 20) / 100;
      // Some seconds: blame rows but no delay samples.
      const bool samples = pct(rng) >= 8;
      auto row = make_thread(t.tid, t.comm,
                             samples ? std::vector<std::uint64_t>(20, level)
                                     : std::vector<std::uint64_t>{},
                             {}, t.cgroup);
      row.pid = t.pid;
      row.start_time_ns = t.start;
      std::vector<std::size_t> order(culprits.size());
      for (std::size_t k = 0; k < order.size(); ++k) {
        order[k] = k;
      }
      std::shuffle(order.begin(), order.end(), rng);
      const std::size_t n = static_cast<std::size_t>(pct(rng) % (hot ? 5 : 3));
      for (std::size_t k = 0; k < n; ++k) {
        const who &c = culprits[order[k]];
        blame_row b;
        b.kind = c.kind;
        b.pid = c.pid;
        b.comm = c.comm;
        b.cgroup = c.cgroup;
        // Few values: equal waits (and preemptions) across culprits, as ties to order.
        b.wait_ns = static_cast<std::uint64_t>(1 + pct(rng) % 4) * (hot ? 2'000'000 : 500'000);
        b.waits = static_cast<std::uint64_t>(1 + pct(rng) % 3);
        b.preempts = static_cast<std::uint64_t>(pct(rng) % 2);
        b.approx_ns = pct(rng) < 30 ? static_cast<std::uint64_t>(pct(rng)) * 1000 : 0;
        row.blame.push_back(std::move(b));
      }
      rows.push_back(std::move(row));
    }
    auto iv = make_interval(t0 + i * sec, std::move(rows));
    iv.dur_ns = sec;
    iv.cgroup_cpu.push_back({"/", maybe(pct(rng) * 5'000'000), {}, maybe(900'000'000), {}, {}, {}});
    for (const char *c : cgroups) {
      if (pct(rng) < 40) {
        continue;
      }
      iv.cgroup_cpu.push_back({c,
                               maybe(pct(rng) * 4'000'000),
                               {},
                               maybe(100'000'000),
                               maybe(100),
                               maybe(pct(rng) % 10),
                               maybe(pct(rng) < 50 ? 0 : pct(rng) * 1'000'000)});
    }
    write_ok(w, iv);
  }
}

void check_culprit(const detail::culprit_sum &x, const detail::culprit_sum &y) {
  INFO("culprit " << y.comm << " " << y.pid.value_or(-1));
  CHECK(x.kind == y.kind);
  CHECK(x.pid == y.pid);
  CHECK(x.comm == y.comm);
  CHECK(x.cgroup == y.cgroup);
  CHECK(x.wait_ns == y.wait_ns);
  CHECK(x.waits == y.waits);
  CHECK(x.preempts == y.preempts);
  CHECK(x.approx_ns == y.approx_ns);
}

// The old path, one window at a time, against causes_of's one pass over all of them: every
// culprit (in order; per thread too, as explain asks) and pressure field equal.
void check_same(sqlite3 *db, const std::vector<detail::window_query> &qs) {
  auto all = detail::causes_of(db, qs, true, true);
  REQUIRE(all.ok());
  REQUIRE(all->size() == qs.size());
  auto threads = detail::causes_of(db, qs, true, false, true);
  REQUIRE(threads.ok());
  REQUIRE(threads->size() == qs.size());
  for (std::size_t k = 0; k < qs.size(); ++k) {
    INFO("window " << k << " [" << qs[k].a << ", " << qs[k].b << ")");
    auto c = detail::blame_of(db, qs[k].who, qs[k].a, qs[k].b);
    auto p = detail::pressure_of(db, qs[k].who, qs[k].a, qs[k].b);
    auto t = detail::blame_by_thread(db, qs[k].who, qs[k].a, qs[k].b);
    REQUIRE(c.ok());
    REQUIRE(p.ok());
    REQUIRE(t.ok());
    const auto &got = (*all)[k];
    REQUIRE(got.culprits.size() == c->size());
    CHECK(got.by_thread.empty());
    for (std::size_t i = 0; i < c->size(); ++i) {
      check_culprit(got.culprits[i], (*c)[i]);
    }
    const auto &per = (*threads)[k];
    CHECK(per.culprits.empty());
    REQUIRE(per.by_thread.size() == t->size());
    for (std::size_t i = 0; i < t->size(); ++i) {
      CHECK(per.by_thread[i].thread_id == (*t)[i].thread_id);
      check_culprit(per.by_thread[i].culprit, (*t)[i].culprit);
    }
    CHECK(got.pressure.throttled_ns == p->throttled_ns);
    CHECK(got.pressure.throttled_cgroup == p->throttled_cgroup);
    CHECK(got.pressure.victim_some_pct == p->victim_some_pct);
    CHECK(got.pressure.system_some_pct == p->system_some_pct);
  }
}

} // namespace

TEST_CASE("spikes: each incident's cause is what blame and pressure of its window say, on random "
          "histories",
          "[store][spikes]") {
  for (const std::uint64_t seed : {1U, 2U}) {
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    new_db d;
    constexpr int seconds = 300;
    write_random_history(d.w, rng, seconds);
    auto r = open_reader(d.path);
    sqlite3 *raw = nullptr;
    REQUIRE(sqlite3_open_v2(d.path.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
    std::unique_ptr<sqlite3, decltype(&sqlite3_close)> db(raw, &sqlite3_close);
    REQUIRE(rsched::store::register_storage(db.get()).ok());
    std::size_t incidents = 0, throttled = 0, two_culprits = 0;
    std::vector<detail::window_query> windows;
    for (const std::string pattern : {"", "w*", "cgroup:/s", "pid:100"}) {
      auto vic = detail::parse_victim(pattern, "spikes");
      REQUIRE(vic.ok());
      for (const std::string by : {"tid", "comm", "cgroup", "pid", "all"}) {
        for (const std::string thr : {"'3x'", "'500us'", "'1ms'"}) {
          INFO(pattern << " by " << by << " " << thr);
          const auto t =
              run(r, fmt::format("SELECT ts, end_ts, victim, tid, cause FROM "
                                 "spikes('sched_delay', {}, NULL, NULL, {}, '{}')",
                                 thr, pattern.empty() ? "NULL" : "'" + pattern + "'", by));
          for (const auto &row : t.rows) {
            // The incident's victims as spikes chose them: the pattern's threads, and the
            // thread (tid), else those of its series' key.
            detail::victims who;
            if (!pattern.empty()) {
              who.push_back(*vic);
            }
            detail::victim k;
            k.descendants = false;
            if (!is_null(row[3])) {
              k.what = detail::victim::kind::tid;
              k.number = as_int(row[3]);
            } else if (by == "pid") {
              k.what = detail::victim::kind::pid;
              k.number = as_int(row[2]);
            } else if (by != "all") {
              k.what = by == "cgroup" ? detail::victim::kind::cgroup : detail::victim::kind::comm;
              k.text = as_text(row[2]);
            }
            if (k.what != detail::victim::kind::all) {
              who.push_back(k);
            }
            const std::int64_t a = as_int(row[0]);
            const std::int64_t b = as_int(row[1]);
            auto c = detail::blame_of(db.get(), who, a, b);
            auto p = detail::pressure_of(db.get(), who, a, b);
            REQUIRE(c.ok());
            REQUIRE(p.ok());
            const std::string cause = as_text(row[4]);
            INFO("incident [" << a << ", " << b << ")");
            CHECK(cause == detail::cause_text(*c, *p));
            ++incidents;
            throttled += cause.find("throttled") != std::string::npos ? 1U : 0U;
            two_culprits += cause.find("% of the wait, ") != std::string::npos ? 1U : 0U;
            windows.push_back({std::move(who), a, b});
          }
        }
      }
    }
    // The histories have what the causes are made of.
    CHECK(incidents >= 100);
    CHECK(throttled >= 10);
    CHECK(two_culprits >= 10);
    // Every field, for all the incidents at once, and for random windows and victims (edges
    // on and inside intervals, windows before, after and around the history).
    check_same(db.get(), windows);
    std::vector<detail::window_query> random;
    std::uniform_int_distribution<std::int64_t> at(-20 * sec, (seconds + 20) * sec);
    const std::vector<std::string> patterns = {
        "",        "web",     "w*",        "cgroup:/s",   "cgroup:/t",
        "pid:200", "tid:101", "comm:c?on", "cgroup:/s/*", "tid:999"};
    for (int i = 0; i < 60; ++i) {
      std::int64_t a = t0 + at(rng);
      std::int64_t b = t0 + at(rng);
      if (b < a) {
        std::swap(a, b);
      }
      if (i % 2 == 0) { // on interval edges
        a -= (a - t0) % sec;
        b -= (b - t0) % sec;
      }
      detail::window_query q;
      q.a = a;
      q.b = b;
      for (int j = 0; j < 1 + i % 2; ++j) {
        auto v = detail::parse_victim(patterns[static_cast<std::size_t>(rng() % patterns.size())],
                                      "blame");
        REQUIRE(v.ok());
        if (v->what != detail::victim::kind::all) {
          q.who.push_back(*v);
        }
      }
      if (i % 5 == 0) { // a cgroup alone, not its descendants (explain's pressure per cgroup)
        detail::victim v;
        v.what = detail::victim::kind::cgroup;
        v.text = i % 10 == 0 ? "/s/web" : "/t";
        v.descendants = false;
        q.who = {v};
      }
      random.push_back(std::move(q));
    }
    check_same(db.get(), random);
    // Windows of one thread each (tid:N): causes_of seeks their threads' rows in an interval
    // whose windows are all such, instead of reading all of them. The incidents' (spikes by
    // tid) and random ones, some of threads that never ran or never waited.
    std::vector<detail::window_query> one_thread;
    for (const auto &q : windows) {
      if (std::any_of(q.who.begin(), q.who.end(), [](const detail::victim &v) {
            return v.what == detail::victim::kind::tid;
          })) {
        one_thread.push_back(q);
      }
    }
    CHECK(one_thread.size() >= 20);
    for (int i = 0; i < 30; ++i) {
      std::int64_t a = t0 + at(rng);
      std::int64_t b = t0 + at(rng);
      if (b < a) {
        std::swap(a, b);
      }
      // tid 101 is two threads; 999 none.
      constexpr std::array<int, 7> tids = {101, 102, 104, 201, 301, 401, 999};
      auto v = detail::parse_victim(fmt::format("tid:{}", tids[rng() % tids.size()]), "blame");
      REQUIRE(v.ok());
      one_thread.push_back({{*v}, a, b});
    }
    check_same(db.get(), one_thread);
  }
}

TEST_CASE("a real version 11 database is read as it is and upgraded: hist_summary, and the same "
          "spikes",
          "[store][spikes]") {
  // tests/store/data/v11.db: v10.db upgraded by the schema 11 rschedd (commit 1fb1a0f), which
  // recorded 3 s of this machine into it with -g latency,migration,blame.
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  copy_fixture("v11.db", path);
  const std::string q = "SELECT * FROM spikes('sched_delay', '1us', NULL, NULL, NULL, 'comm')";
  const std::string q_tid = "SELECT * FROM spikes('sched_delay', '1us')";
  std::vector<std::vector<value>> before, before_tid;
  std::int64_t next = 0;
  {
    auto r = open_reader(path);
    CHECK(scalar_int(r, "PRAGMA user_version") == 11);
    CHECK(scalar_int(r, "SELECT count(*) FROM sqlite_master WHERE name = 'hist_summary'") == 0);
    before = run(r, q).rows;
    before_tid = run(r, q_tid).rows;
    REQUIRE_FALSE(before.empty());
    REQUIRE_FALSE(before_tid.empty());
    next = scalar_int(r, "SELECT max(start_ns + dur_ns) FROM intervals");
  }
  {
    auto w = open_writer(path);
    write_ok(w,
             make_interval(next, {make_thread(7, "fresh",
                                              std::vector<std::uint64_t>(
                                                  12, 2'000'000))})); // 12 samples: min_samples 10
  }
  auto r = open_reader(path);
  CHECK(scalar_int(r, "PRAGMA user_version") == rsched::store::schema_version);
  // Only the new interval has a summary; the old ones are read from their rows.
  CHECK(scalar_int(r, "SELECT count(*) FROM hist_summary") == 1);
  const std::string old = " WHERE ts < " + std::to_string(next);
  CHECK(run(r, q + old).rows == before);
  CHECK(run(r, q_tid + old).rows == before_tid);
  CHECK(scalar_int(r, "SELECT count(*) FROM spikes('sched_delay', '1us') WHERE victim = 'fresh'") ==
        1);
  CHECK(as_text(run(r, "PRAGMA quick_check").rows.at(0).at(0)) == "ok");
}
