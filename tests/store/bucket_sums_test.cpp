// The 1-minute rollup of thread_hist and thread_blame from the writer's own sums
// (modules/store/src/bucket_sums.hpp) writes exactly the rows the rollup from the raw rows
// writes: the same history written by one writer (sums), by a writer reopened before every
// interval (rows only) and by one reopened once mid-minute (both) gives identical rollup tiers.
#include "bucket_sums.hpp"
#include "store_test_util.hpp"

#include <fmt/format.h>

#include <random>

using namespace store_test;
using rsched::store::blame_row;
using rsched::store::blocked_row;
using rsched::store::culprit_kind;
using rsched::store::waker_kind;
using rsched::store::wakeup_row;

namespace {

constexpr std::int64_t t0 = 1'700'000'040'000'000'000; // a whole minute (UTC ns)
constexpr std::int64_t step = 10 * sec;

// Wakeups and blocked sleeps of one thread (schema v15, packed since v18).
void add_sleeps(rsched::store::thread_row &t, std::mt19937_64 &rng) {
  for (std::uint64_t k = 0, m = rng() % 4; k < m; ++k) {
    wakeup_row w;
    const auto pick = rng() % 4;
    w.kind = pick < 2 ? waker_kind::process : pick == 2 ? waker_kind::softirq : waker_kind::timer;
    if (w.kind == waker_kind::process) {
      w.pid = 900 + static_cast<std::uint32_t>(rng() % 3); // blame's culprits too
      w.comm = rng() % 3 == 0 ? "hog" : "writer";
      w.cgroup = rng() % 2 == 0 ? "/batch" : "";
    }
    w.state = static_cast<std::uint8_t>(rng() % 3);
    w.sleep_ns = rng() % 50'000'000;
    w.count = 1 + rng() % 5;
    t.wakeups.push_back(w);
    if (rng() % 3 == 0) {
      t.wakeups.push_back(w); // one waker and state twice: the writer sums them
    }
  }
  for (std::uint64_t k = 0, m = rng() % 3; k < m; ++k) {
    blocked_row b;
    b.hash = rng() % 4; // 0: <other>
    if (b.hash != 0) {
      b.frames = {"io_schedule", b.hash % 2 == 0 ? "ext4_sync_file" : "folio_wait_bit"};
    }
    b.sleep_ns = rng() % 20'000'000;
    b.count = 1 + rng() % 3;
    t.blocked.push_back(b);
  }
}

// Interval n of a history: threads under a few (comm, cgroup) groups, one renamed halfway,
// one listed twice (the writer sums the two rows), blame on process culprits (several pids
// of one comm and cgroup, one rollup group) and pseudo-culprits, wakeups by processes (a waker
// also a culprit, two rows of one waker and state) and pseudo-wakers, sleeps by kernel stack
// (the <other> one without frames), a reboot inside a minute.
// With `fine`, each thread's delays also have the kernel's fine tail (latency_fine slots from
// 512 us): its sched_delay rows are written as latency_fine (issue 36).
rsched::store::interval_row interval(int n, std::mt19937_64 &rng, bool fine) {
  const char *comms[] = {"db", "web", "web", "a,\"b\"\x1b[2J", "db", "batch"};
  const char *cgroups[] = {"/app", "/app", "/web", "", "/batch", "/batch"};
  std::vector<rsched::store::thread_row> threads;
  for (std::uint32_t i = 0; i < 6; ++i) {
    if (rng() % 5 == 0) {
      continue; // not active this interval
    }
    std::vector<std::uint64_t> d;
    for (std::uint64_t k = 0, m = 1 + rng() % 12; k < m; ++k) {
      d.push_back((500 + rng() % 5000) << (rng() % 14));
    }
    std::string comm = comms[i];
    if (i == 1 && n >= 17) {
      comm = "web-renamed";
    }
    auto t = make_thread(200 + i, comm, d, {rng() % 4, rng() % 3}, cgroups[i]);
    for (const std::uint64_t v : d) {
      const std::size_t f = rsched_hist_fine_slot(v);
      auto &delay = t.m[metric::sched_delay];
      if (fine && f > RSCHED_HIST_LINEAR_SLOTS) {
        if (!delay.tail) {
          delay.tail = rsched::base::make_cached<rsched::metrics::fine_tail>();
        }
        delay.tail->slots[f - RSCHED_HIST_LINEAR_SLOTS - 1] += 1;
      }
    }
    if (rng() % 2 == 0) {
      t.m[metric::slice_voluntary] = value_of(layout::latency, {1000 + rng() % 90000});
    }
    for (std::uint64_t k = 0, m = rng() % 4; k < m; ++k) {
      blame_row b;
      b.kind = culprit_kind::process;
      b.pid = 900 + static_cast<std::uint32_t>(rng() % 3); // three pids, one (comm, cgroup)
      b.comm = rng() % 3 == 0 ? "hog" : "kworker/0:1";
      b.cgroup = rng() % 2 == 0 ? "/batch" : "";
      b.wait_ns = rng() % 3'000'000;
      b.waits = 1 + rng() % 4;
      b.preempts = rng() % 3;
      b.approx_ns = b.wait_ns / (1 + rng() % 4); // schema 11: the part estimated
      t.blame.push_back(b);
    }
    if (rng() % 2 == 0) {
      blame_row b;
      b.kind = rng() % 2 == 0 ? culprit_kind::idle : culprit_kind::other;
      b.wait_ns = rng() % 400'000;
      b.approx_ns = b.wait_ns / (1 + rng() % 4);
      b.waits = 1;
      t.blame.push_back(b);
    }
    add_sleeps(t, rng);
    threads.push_back(std::move(t));
  }
  if (!threads.empty() && n % 4 == 0) {
    threads.push_back(threads.front()); // the same identity twice in one read
  }
  auto iv = make_interval(t0 + n * step, std::move(threads));
  iv.dur_ns = step;
  if (n >= 27) { // a reboot 30 s into minute 4: two boots in one bucket
    iv.boot_id = "7a9d3c1e-0000-4000-8000-000000000002";
  }
  return iv;
}

constexpr int intervals = 40; // 6 min 40 s: six whole minutes

// The history written into a fresh file; a new writer before interval n when reopen(n).
// Returns the buckets merged from the writer's sums.
template <typename Reopen> int record(const std::string &path, Reopen reopen, bool fine) {
  std::mt19937_64 rng(7);
  std::optional<writer> w;
  int from_sums = 0;
  for (int n = 0; n < intervals; ++n) {
    if (!w || reopen(n)) {
      w.reset();
      w.emplace(open_writer(path));
      w->set_retention(forever());
    }
    write_ok(*w, interval(n, rng, fine));
    auto r = w->maintain(t0 + (n + 1) * step);
    INFO("maintain: " << (r.ok() ? std::string() : r.err().msg));
    REQUIRE(r.ok());
    from_sums += r->buckets_from_sums;
  }
  return from_sums;
}

// Every rollup row of thread_hist and thread_blame, identities resolved to names, then the
// thread and culprit identities.
std::vector<std::vector<value>> rollups(const std::string &path) {
  auto r = open_reader(path);
  auto hists = run(r, "SELECT i.tier, i.start_ns, i.boot_id, h.metric, t.comm, t.cgroup, h.count, "
                      "h.total, hex(h.hist) FROM thread_hist AS h JOIN intervals AS i ON i.id = "
                      "h.interval_id JOIN thread AS t ON t.id = h.thread_id WHERE i.tier > 0 "
                      "ORDER BY 1, 2, 3, 4, 5, 6")
                   .rows;
  auto blame = run(r, "SELECT i.tier, i.start_ns, i.boot_id, t.comm, t.cgroup, c.comm, c.cgroup, "
                      "c.kind, b.wait_ns, b.waits, b.preempts, b.approx_ns FROM thread_blame AS "
                      "b JOIN "
                      "intervals AS i ON i.id = b.interval_id JOIN thread AS t ON t.id = "
                      "b.thread_id JOIN culprit AS c ON c.id = b.culprit_id WHERE i.tier > 0 "
                      "ORDER BY 1, 2, 3, 4, 5, 6, 7, 8")
                   .rows;
  // The identities and the newest bucket each appears in (the rollup keeps last_ns).
  auto ids = run(r, "SELECT boot_id, tid, start_time_ns, comm, cgroup, last_ns FROM thread "
                    "ORDER BY 1, 2, 3, 4, 5")
                 .rows;
  auto culprits = run(r, "SELECT boot_id, pid, comm, cgroup, kind, last_ns FROM culprit "
                         "ORDER BY 1, 2, 3, 4, 5")
                      .rows;
  auto wakeups = run(r, "SELECT i.tier, i.start_ns, i.boot_id, t.comm, t.cgroup, c.comm, "
                        "c.cgroup, c.kind, c.pid, x.state, x.sleep_ns, x.count FROM thread_wakeup "
                        "AS x JOIN intervals AS i ON i.id = x.interval_id JOIN thread AS t ON "
                        "t.id = x.thread_id JOIN culprit AS c ON c.id = x.waker_id WHERE "
                        "i.tier > 0 ORDER BY 1, 2, 3, 4, 5, 6, 7, 8, 9, 10")
                     .rows;
  auto blocked = run(r, "SELECT i.tier, i.start_ns, i.boot_id, t.comm, t.cgroup, k.hash, "
                        "k.boot_id, x.sleep_ns, x.count FROM thread_blocked AS x JOIN intervals "
                        "AS i ON i.id = x.interval_id JOIN thread AS t ON t.id = x.thread_id "
                        "JOIN kstack AS k ON k.id = x.stack_id WHERE i.tier > 0 "
                        "ORDER BY 1, 2, 3, 4, 5, 6, 7")
                     .rows;
  for (auto *more : {&blame, &wakeups, &blocked, &ids, &culprits}) {
    hists.insert(hists.end(), more->begin(), more->end());
  }
  return hists;
}

} // namespace

TEST_CASE("the minute rollup from the writer's sums equals the rollup from the rows",
          "[store][rollup]") {
  temp_dir dir;
  const std::string one = dir.file("one.db");
  const std::string each = dir.file("each.db");
  const std::string mid = dir.file("mid.db");
  // Without fine tails, rows with a delay from 512 us are latency, the others latency_fine;
  // with them, every sched_delay row is latency_fine.
  const bool fine = GENERATE(false, true);
  INFO("fine tails " << fine);
  const int sums_one = record(
      one, [](int) { return false; }, fine);
  const int sums_each = record(
      each, [](int) { return true; }, fine);
  const int sums_mid = record(
      mid, [](int n) { return n == 9; }, fine); // 30 s into minute 1

  // Minutes 0-5 are complete, minute 4 twice (two boots); the last one is still open.
  CHECK(sums_one == 7);
  CHECK(sums_each == 0); // every writer saw one interval of its bucket
  CHECK(sums_mid == 6);  // minute 1 was read from the rows

  const auto expected = rollups(each);
  auto r = open_reader(each);
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals WHERE tier = 1") == 7);
  CHECK(scalar_int(r, "SELECT count(*) FROM thread_blame AS b JOIN intervals AS i ON i.id = "
                      "b.interval_id WHERE i.tier = 1") > 20);
  CHECK(scalar_int(r, "SELECT count(*) FROM thread_wakeup AS x JOIN intervals AS i ON i.id = "
                      "x.interval_id WHERE i.tier = 1") > 20);
  CHECK(scalar_int(r, "SELECT count(*) FROM thread_blocked AS x JOIN intervals AS i ON i.id = "
                      "x.interval_id WHERE i.tier = 1") > 10);
  CHECK(scalar_int(r, "SELECT count(DISTINCT t.comm) FROM thread_hist AS h JOIN intervals AS i "
                      "ON i.id = h.interval_id JOIN thread AS t ON t.id = h.thread_id WHERE "
                      "i.tier = 1") == 5); // web-renamed too
  const auto layouts = [&](int tier) {
    return scalar_int(r, "SELECT count(DISTINCT hex(substr(h.hist, 1, 1))) * 10 + "
                         "max(hex(substr(h.hist, 1, 1)) = '05') FROM thread_hist AS h JOIN "
                         "intervals AS i ON i.id = h.interval_id WHERE h.metric = 1 AND i.tier = " +
                             std::to_string(tier));
  };
  CHECK(layouts(0) == (fine ? 11 : 21)); // latency_fine only, or both
  if (fine) {
    CHECK(layouts(1) == 11); // minutes of latency_fine rows only stay latency_fine
  }
  REQUIRE(expected.size() > 100);
  CHECK(rollups(one) == expected);
  CHECK(rollups(mid) == expected);
}

TEST_CASE("an overflow in a minute's sums is the rows' rollup's error, not a wrapped sum",
          "[store][rollup]") {
  temp_dir dir;
  const std::string path = dir.file("o.db");
  auto w = open_writer(path);
  w.set_retention(forever());
  const bool samples = GENERATE(false, true);
  for (int n = 0; n < 7; ++n) {
    auto t = make_thread(5, "big", {1000});
    if (samples) { // two histograms whose samples pass 2^64 - 1
      t.m[metric::sched_delay].hist.slots[3] = std::uint64_t{1} << 63;
    } else { // two totals that pass 2^63 - 1
      t.m[metric::sched_delay].total = std::uint64_t{1} << 62;
    }
    write_ok(w, make_interval(t0 + n * step, {t}));
  }
  auto r = w.maintain(t0 + 7 * step);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.err().msg, Catch::Contains(samples ? "sample counts overflow" : "overflow"));
}

TEST_CASE("a rollup sum keeps latency_fine while every row is, as hist_merge does", "[store]") {
  namespace stats = rsched::stats;
  auto r = open_reader(":memory:", false);
  std::mt19937_64 rng(3606);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<std::vector<std::uint8_t>> blobs;
    stats::fine_histogram fine_sum;
    stats::histogram all{stats::layout::latency, {}};
    const int rows = 1 + static_cast<int>(rng() % 6);
    const bool with_old = trial % 2 == 1; // a minute across the upgrade
    for (int k = 0; k < rows; ++k) {
      stats::fine_histogram f;
      stats::histogram c{stats::layout::latency, {}};
      for (int i = 0, n = 1 + static_cast<int>(rng() % 30); i < n; ++i) {
        const std::uint64_t v = (500 + rng() % 5000) << (rng() % 20);
        f.add(v);
        c.add(v);
      }
      const bool old_row = with_old && k == 0;
      blobs.push_back(old_row ? stats::encode(c) : stats::encode(f));
      if (!old_row) {
        stats::merge_into(fine_sum, f);
      }
      REQUIRE(stats::merge_into(all, c).ok());
    }
    rsched::store::detail::hist_sum sum;
    std::string values;
    for (const auto &b : blobs) {
      REQUIRE(sum.add(1, 1, b).ok());
      values += (values.empty() ? "(X'" : ", (X'") + hex(b) + "')";
    }
    const auto expect = with_old ? stats::encode(all) : stats::encode(fine_sum);
    CHECK(sum.encoded() == expect);
    auto t = run(r, "SELECT hist_merge(column1) FROM (VALUES " + values + ")");
    REQUIRE(t.rows.size() == 1);
    CHECK(as_blob(t.rows[0][0]) == expect);
  }
  rsched::store::detail::hist_sum mixed;
  REQUIRE(mixed.add(1, 1, stats::encode(stats::fine_histogram{})).ok());
  CHECK_FALSE(mixed.add(1, 1, stats::encode(stats::histogram{stats::layout::depth, {}})).ok());
}
