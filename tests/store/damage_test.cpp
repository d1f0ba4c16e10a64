// Issue 51, damage contained: a stored blob that no longer decodes (bit rot SQLite's checks
// cannot see) is set aside into damaged_rows, counted, shown by gaps() and health, and every
// maintenance pass goes on with the rest: rollups from everything that decodes, retention and
// the size cap as before.
#include "rsched/query/reader.hpp"
#include "rsched/store/hist_pack.hpp"
#include "rsched/store/writer.hpp"

#include "store_test_util.hpp"

#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

using namespace store_test;
using rsched::store::retention;

namespace {

constexpr std::int64_t t0 = 1'699'999'200LL * sec; // an hour boundary
constexpr std::int64_t step = 10 * sec;

std::string str(std::int64_t v) {
  return std::to_string(v);
}

// One interval: three threads (sched_delay, a perf event's rate, a culprit, a waker, a blocked
// stack) and two CPUs.
rsched::store::interval_row sample(std::int64_t start, std::mt19937_64 &rng) {
  std::vector<rsched::store::thread_row> threads;
  const char *comms[] = {"alpha", "beta", "gamma"};
  for (std::uint32_t i = 0; i < 3; ++i) {
    std::vector<std::uint64_t> d;
    for (std::uint64_t n = 1 + rng() % 9; n > 0; --n) {
      d.push_back((1000 + rng() % 1000) << (rng() % 14));
    }
    auto t = make_thread(100 + i, comms[i], d, {rng() % 4});
    t.events = {{0, 1 + rng() % 1000}};
    t.event_rates = {{0, value_of(layout::log2, {rng() % 1000}).hist}};
    rsched::store::blame_row b;
    b.pid = 900;
    b.comm = "hog";
    b.wait_ns = 1 + rng() % 100'000;
    b.waits = 1 + rng() % 5;
    t.blame = {b};
    rsched::store::wakeup_row wk;
    wk.pid = 901;
    wk.comm = "waker";
    wk.sleep_ns = 1 + rng() % 100'000;
    wk.count = 1 + rng() % 5;
    t.wakeups = {wk};
    rsched::store::blocked_row bl;
    bl.hash = 77;
    bl.frames = {"io_schedule", "blk_mq_get_tag"};
    bl.sleep_ns = 1 + rng() % 100'000;
    bl.count = 1 + rng() % 3;
    t.blocked = {bl};
    threads.push_back(std::move(t));
  }
  std::vector<rsched::store::cpu_row> cpus(2);
  for (std::uint32_t c = 0; c < 2; ++c) {
    cpus[c].cpu = c;
    const std::vector<std::uint64_t> d = {1000 + rng() % 5000, 20'000 + rng() % 5000};
    cpus[c].m[metric::cpu_sched_delay].hist = latency_hist(d);
    cpus[c].m[metric::cpu_sched_delay].count = d.size();
    cpus[c].m[metric::cpu_sched_delay].total = static_cast<std::uint64_t>(d[0] + d[1]);
  }
  auto iv = make_interval(start, std::move(threads), std::move(cpus));
  iv.dur_ns = step;
  iv.groups = 1 | 2 | 4 | 16 | 32;
  iv.events = {{"cs", 1, 3}};
  return iv;
}

// The raw interval at `t` (its id).
std::int64_t raw_id(reader &r, std::int64_t t) {
  return scalar_int(r, "SELECT id FROM intervals WHERE tier = 0 AND start_ns = " + str(t));
}

// What the planted damage takes out of the sums the test compares, and how many rows it is.
struct planted {
  std::int64_t delay_count = 0;     // sched_delay samples
  std::int64_t cpu_count = 0;       // cpu_sched_delay samples
  std::int64_t event_value = 0;     // perf_events values
  std::int64_t wait_ns = 0;         // delay_blame
  std::int64_t sleep_ns = 0;        // wakeups
  std::int64_t blocked_ns = 0;      // blocked_stacks
  std::int64_t rows = 0;            // rows set aside
  std::vector<std::int64_t> starts; // the damaged intervals' starts
};

// Damages, in the raw tier of the first hour: a whole thread_hist_pack (truncated), one entry
// of another (its histogram garbage, the pack itself whole), a cpu_hist and a
// thread_perf_event histogram, and a blame, a wakeup and a blocked pack (each truncated).
planted plant_damage(const std::string &path) {
  planted p;
  auto r = open_reader(path);
  const std::int64_t delay = scalar_int(r, "SELECT id FROM metric WHERE name = 'sched_delay'");
  const std::int64_t cpu = delay; // cpu_hist's sched_delay is metric 1 too
  const auto at = [&](std::int64_t minutes, std::int64_t s) { return t0 + minutes * minute + s; };
  // 1. A whole pack.
  const std::int64_t a = raw_id(r, at(3, 20 * sec));
  p.delay_count +=
      scalar_int(r, "SELECT sum(count) FROM thread_hist WHERE interval_id = " + str(a) +
                        " AND metric = " + str(delay));
  raw_exec(path, "UPDATE thread_hist_pack SET data = substr(data, 1, length(data) - 5) WHERE "
                 "interval_id = " +
                     str(a) + " AND metric = " + str(delay));
  ++p.rows;
  // 2. One entry of a pack: the other two threads stay.
  const std::int64_t b = raw_id(r, at(7, 0));
  auto blob = as_blob(run(r, "SELECT data FROM thread_hist_pack WHERE interval_id = " + str(b) +
                                 " AND metric = " + str(delay))
                          .rows.at(0)
                          .at(0));
  auto entries = rsched::store::unpack(blob);
  REQUIRE(entries.ok());
  REQUIRE(entries->size() == 3);
  rsched::store::pack_builder pb;
  const std::vector<std::uint8_t> garbage = {0x01, 0xFF, 0xFF, 0xFF};
  for (std::size_t i = 0; i < entries->size(); ++i) {
    const auto &e = (*entries)[i];
    REQUIRE(pb.add(e.thread_id, e.count, e.total, i == 1 ? std::span(garbage) : e.hist));
  }
  p.delay_count += (*entries)[1].count;
  raw_exec(path, "UPDATE thread_hist_pack SET data = X'" + hex(pb.finish()) +
                     "' WHERE interval_id = " + str(b) + " AND metric = " + str(delay));
  ++p.rows;
  // 3. A CPU's histogram: a layout that is not the metric's.
  const std::int64_t c = raw_id(r, at(12, 30 * sec));
  p.cpu_count += scalar_int(r, "SELECT count FROM cpu_hist WHERE interval_id = " + str(c) +
                                   " AND cpu = 1 AND metric = " + str(cpu));
  raw_exec(path, "UPDATE cpu_hist SET hist = X'020001' WHERE interval_id = " + str(c) +
                     " AND cpu = 1 AND metric = " + str(cpu));
  ++p.rows;
  // 4. A perf event's rate histogram (its row, value included, is set aside).
  const std::int64_t d = raw_id(r, at(12, 40 * sec));
  const std::int64_t tid = scalar_int(r, "SELECT min(thread_id) FROM thread_perf_event WHERE "
                                         "interval_id = " +
                                             str(d));
  p.event_value +=
      scalar_int(r, "SELECT value FROM thread_perf_event WHERE interval_id = " + str(d) +
                        " AND thread_id = " + str(tid));
  raw_exec(path, "UPDATE thread_perf_event SET rate_hist = X'04FF' WHERE interval_id = " + str(d) +
                     " AND thread_id = " + str(tid));
  ++p.rows;
  // 5-7. The blame, wakeup and blocked packs of three intervals.
  const std::int64_t e = raw_id(r, at(20, 0));
  p.wait_ns += scalar_int(r, "SELECT sum(wait_ns) FROM thread_blame WHERE interval_id = " + str(e));
  raw_exec(path, "UPDATE thread_blame_pack SET data = substr(data, 1, length(data) - 3) WHERE "
                 "interval_id = " +
                     str(e));
  const std::int64_t f = raw_id(r, at(21, 0));
  p.sleep_ns +=
      scalar_int(r, "SELECT sum(sleep_ns) FROM thread_wakeup WHERE interval_id = " + str(f));
  raw_exec(path, "UPDATE thread_wakeup_pack SET data = substr(data, 1, length(data) - 2) WHERE "
                 "interval_id = " +
                     str(f));
  const std::int64_t g = raw_id(r, at(22, 50 * sec));
  p.blocked_ns +=
      scalar_int(r, "SELECT sum(sleep_ns) FROM thread_blocked WHERE interval_id = " + str(g));
  raw_exec(path, "UPDATE thread_blocked_pack SET data = X'01FF' WHERE interval_id = " + str(g));
  p.starts = {at(3, 20 * sec), at(7, 0),  at(12, 30 * sec), at(12, 40 * sec),
              at(20, 0),       at(21, 0), at(22, 50 * sec)};
  p.rows += 3;
  return p;
}

// Sums over [a, b) of the view family `sfx` ("" finest, "_1m", "_1h"), read as stored (main.V:
// the reader would answer whole minutes and hours from the rollups).
std::vector<std::int64_t> sums(reader &r, const std::string &sfx, std::int64_t a, std::int64_t b) {
  const std::string w = " WHERE ts >= " + str(a) + " AND ts < " + str(b);
  std::vector<std::int64_t> out;
  for (const std::string q :
       {"SELECT sum(count) FROM main.sched_delay",
        "SELECT hist_count(hist_merge(hist)) FROM main.sched_delay",
        "SELECT sum(count) FROM main.cpu_sched_delay", "SELECT sum(value) FROM main.perf_events",
        "SELECT sum(wait_ns) FROM main.delay_blame", "SELECT sum(sleep_ns) FROM main.wakeups",
        "SELECT sum(sleep_ns) FROM main.blocked_stacks"}) {
    out.push_back(scalar_int(r, q + sfx + w));
  }
  return out;
}

// Calls maintain() until it has nothing left to do; the summed report.
rsched::store::maintenance_report settle(writer &w, std::int64_t now) {
  rsched::store::maintenance_report sum;
  for (int i = 0; i < 10000; ++i) {
    auto m = w.maintain(now);
    INFO("maintain: " << (m.ok() ? std::string() : m.err().msg));
    REQUIRE(m.ok());
    sum.buckets_built += m->buckets_built;
    sum.rows_deleted += m->rows_deleted;
    sum.rows_set_aside += m->rows_set_aside;
    sum.over_size = sum.over_size || m->over_size;
    if (m->idle()) {
      return sum;
    }
  }
  FAIL("maintenance never settled");
  return sum;
}

// Two hours (and 30 s) of history written without maintenance, damaged, then opened by a new
// writer (no sums of its own: the rollups read the raw rows back) that notes into `notes`.
struct damaged_history {
  temp_dir dir;
  std::string path = dir.file("rsched.db");
  std::int64_t end = t0;
  std::vector<std::int64_t> before; // sums() of the finest views before the damage
  planted p;
  std::vector<std::string> notes;
  std::optional<writer> w;
  damaged_history() {
    {
      writer first = open_writer(path);
      first.set_retention(forever());
      std::mt19937_64 rng(51);
      for (; end < t0 + 2 * hour + 30 * sec; end += step) {
        write_ok(first, sample(end, rng));
      }
    }
    {
      auto r = open_reader(path);
      before = sums(r, "", t0, t0 + 2 * hour);
    }
    p = plant_damage(path);
    rsched::store::open_options o;
    o.note = [this](std::string_view s) { notes.emplace_back(s); };
    auto opened = writer::open(path, o);
    REQUIRE(opened.ok());
    w.emplace(std::move(opened).value());
  }
};

} // namespace

TEST_CASE("a blob that does not decode is set aside and maintenance goes on with the rest",
          "[store][rollup][maintenance][damage]") {
  damaged_history h;
  h.w->set_retention(forever());
  const auto rep = settle(*h.w, h.end);
  CHECK(rep.rows_set_aside == h.p.rows);
  auto r = open_reader(h.path);

  // Every minute and hour was rolled up.
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals WHERE tier = 1") == 120);
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals WHERE tier = 2") == 2);
  CHECK(scalar_int(r, "SELECT built_ns FROM tiers WHERE tier = 2") == t0 + 2 * hour);

  // The rollups hold exactly what decodes: the sums before the damage less the damaged rows'.
  const auto &p = h.p;
  const std::vector<std::int64_t> want = {h.before[0] - p.delay_count, h.before[1] - p.delay_count,
                                          h.before[2] - p.cpu_count,   h.before[3] - p.event_value,
                                          h.before[4] - p.wait_ns,     h.before[5] - p.sleep_ns,
                                          h.before[6] - p.blocked_ns};
  CHECK(sums(r, "", t0, t0 + 2 * hour) == want);
  CHECK(sums(r, "_1m", t0, t0 + 2 * hour) == want);
  CHECK(sums(r, "_1h", t0, t0 + 2 * hour) == want);
  // The pack whose one entry was damaged keeps its other two threads.
  CHECK(scalar_int(r, "SELECT count(*) FROM sched_delay WHERE ts = " + str(t0 + 7 * minute)) == 2);

  // The damaged rows, kept with their bytes and where they were.
  CHECK(scalar_int(r, "SELECT count(*) FROM damaged_rows") == p.rows);
  CHECK(scalar_int(r, "SELECT count(DISTINCT source) FROM damaged_rows") == 6);
  CHECK(scalar_int(r, "SELECT count(*) FROM damaged_rows WHERE tier = 0 AND found_ns = " +
                          str(h.end) + " AND length(data) > 0 AND error <> ''") == p.rows);
  CHECK(as_text(run(r, "SELECT hex(data) FROM damaged_rows WHERE source = 'cpu_hist'")
                    .rows.at(0)
                    .at(0)) == "020001");
  CHECK(as_text(run(r, "SELECT hex(data) FROM damaged_rows WHERE source = 'thread_hist_pack' "
                       "AND start_ns = " +
                           str(t0 + 7 * minute))
                    .rows.at(0)
                    .at(0)) == "01FFFFFF");
  // Key columns and the others as a JSON object: the pack entry's and thread_perf_event's name a
  // thread.
  CHECK(scalar_int(r, "SELECT count(*) FROM damaged_rows WHERE row_values LIKE "
                      "'%\"thread_id\":%'") == 2);
  // The health view counts them per interval.
  CHECK(scalar_int(r, "SELECT sum(damaged_rows) FROM health") == p.rows);
  CHECK(scalar_int(r, "SELECT damaged_rows FROM health WHERE ts = " + str(t0 + 7 * minute)) == 1);

  // gaps() names each interval with damage, in time order.
  auto g = run(r, "SELECT ts, dur, reason FROM gaps(" + str(t0) + ", " + str(t0 + 2 * hour) + ")");
  std::vector<std::int64_t> at;
  for (const auto &row : g.rows) {
    if (as_text(row[2]).find("damaged") != std::string::npos) {
      at.push_back(as_int(row[0]));
      CHECK(as_int(row[1]) == step);
    }
  }
  CHECK(at == p.starts);
  CHECK(scalar_int(r, "SELECT count(*) FROM gaps(" + str(t0) + ", " + str(t0 + hour) +
                          ") WHERE reason = '1 damaged row set aside (cpu_hist): in no tier, see "
                          "damaged_rows' AND ts = " +
                          str(t0 + 12 * minute + 30 * sec)) == 1);

  // One line per pass that set rows aside; none once they are.
  REQUIRE(!h.notes.empty());
  CHECK(h.notes.size() <= 4);
  for (const auto &n : h.notes) {
    CHECK(n.find("damaged") != std::string::npos);
  }
  const auto lines = h.notes.size();
  auto again = h.w->maintain(h.end);
  REQUIRE(again.ok());
  CHECK(again->idle());
  CHECK(again->rows_set_aside == 0);
  CHECK(h.notes.size() == lines);
  CHECK(as_text(run(r, "PRAGMA integrity_check").rows.at(0).at(0)) == "ok");
}

TEST_CASE("with damaged rows, retention by age and by size still delete, the set-aside rows stay",
          "[store][rollup][maintenance][damage]") {
  damaged_history h;
  auto r = open_reader(h.path);
  SECTION("by age") {
    retention keep = forever();
    keep.keep_raw_ns = 30 * minute;
    keep.keep_1m_ns = hour;
    h.w->set_retention(keep);
    const auto rep = settle(*h.w, h.end);
    CHECK(rep.rows_set_aside == h.p.rows);
    CHECK(rep.rows_deleted > 0);
    const std::int64_t cut0 = (h.end - 30 * minute) / minute * minute;
    CHECK(scalar_int(r, "SELECT cutoff_ns FROM tiers WHERE tier = 0") == cut0);
    CHECK(scalar_int(r, "SELECT min(start_ns) FROM intervals WHERE tier = 0") >= cut0);
    CHECK(scalar_int(r, "SELECT cutoff_ns FROM tiers WHERE tier = 1") == t0 + hour);
  }
  SECTION("by size") {
    auto sz = h.w->size();
    REQUIRE(sz.ok());
    retention keep = forever();
    keep.max_bytes = sz->first / 2;
    h.w->set_retention(keep);
    const auto rep = settle(*h.w, h.end);
    CHECK(rep.rows_set_aside == h.p.rows);
    CHECK(rep.over_size);
    CHECK(rep.rows_deleted > 0);
    CHECK(scalar_int(r, "SELECT max(start_ns) - min(start_ns) FROM intervals WHERE tier = 0") <
          hour + minute);
  }
  // The damaged intervals are gone with their minutes; what was set aside stays, and gaps()
  // still names it.
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals WHERE tier = 0 AND start_ns < " +
                          str(t0 + 23 * minute)) == 0);
  CHECK(scalar_int(r, "SELECT count(*) FROM damaged_rows") == h.p.rows);
  CHECK(scalar_int(r, "SELECT count(*) FROM gaps(" + str(t0) + ", " + str(t0 + hour) +
                          ") WHERE reason LIKE '%damaged%'") ==
        static_cast<std::int64_t>(h.p.starts.size()));
}

TEST_CASE("a damaged 1-minute rollup row is set aside when its hour is built",
          "[store][rollup][maintenance][damage]") {
  temp_dir dir;
  const std::string path = dir.file("rsched.db");
  std::vector<std::string> notes;
  rsched::store::open_options o;
  o.note = [&notes](std::string_view s) { notes.emplace_back(s); };
  auto opened = writer::open(path, o);
  REQUIRE(opened.ok());
  writer w = std::move(opened).value();
  w.set_retention(forever());
  std::mt19937_64 rng(7);
  std::int64_t t = t0;
  for (; t < t0 + 90 * minute; t += step) {
    write_ok(w, sample(t, rng));
  }
  settle(w, t);
  // Minutes up to 1 h 30 are built, the first hour too; damage a minute of the second hour.
  const std::int64_t m = t0 + 70 * minute;
  std::int64_t lost = 0;
  {
    auto r = open_reader(path);
    REQUIRE(scalar_int(r, "SELECT built_ns FROM tiers WHERE tier = 2") == t0 + hour);
    lost = scalar_int(r, "SELECT count FROM sched_delay_1m WHERE ts = " + str(m) +
                             " AND comm = 'beta'");
  }
  // Bit rot in the record header: the blob is now a TEXT (`||` makes one), which hist_merge
  // refuses.
  raw_exec(path, "UPDATE thread_hist_row SET hist = X'01' || hist || X'80' WHERE interval_id = "
                 "(SELECT id FROM intervals WHERE tier = 1 AND start_ns = " +
                     str(m) +
                     ") AND thread_id = (SELECT id FROM thread WHERE boot_id = '' AND "
                     "comm = 'beta') AND metric = 1");
  for (; t < t0 + 2 * hour + 30 * sec; t += step) {
    write_ok(w, sample(t, rng));
  }
  const auto rep = settle(w, t);
  CHECK(rep.rows_set_aside == 1);
  auto r = open_reader(path);
  CHECK(scalar_int(r, "SELECT built_ns FROM tiers WHERE tier = 2") == t0 + 2 * hour);
  CHECK(scalar_int(r, "SELECT count(*) FROM damaged_rows WHERE tier = 1 AND source = "
                      "'thread_hist_row' AND dur_ns = " +
                          str(minute) + " AND start_ns = " + str(m)) == 1);
  // The hour holds the minutes less the damaged row; the raw tier still has it all (main.V:
  // the reader would answer whole hours from the rollups).
  const std::string hour2 =
      " WHERE comm = 'beta' AND ts >= " + str(t0 + hour) + " AND ts < " + str(t0 + 2 * hour);
  CHECK(scalar_int(r, "SELECT sum(count) FROM sched_delay_1h" + hour2) ==
        scalar_int(r, "SELECT sum(count) FROM sched_delay_1m" + hour2));
  CHECK(scalar_int(r, "SELECT sum(count) FROM main.sched_delay" + hour2) ==
        scalar_int(r, "SELECT sum(count) FROM sched_delay_1h" + hour2) + lost);
  auto g = run(r, "SELECT ts, dur, reason FROM gaps(" + str(t0) + ", " + str(t0 + 2 * hour) + ")");
  REQUIRE(g.rows.size() == 1);
  CHECK(as_int(g.rows[0][0]) == m);
  CHECK(as_int(g.rows[0][1]) == minute);
  CHECK(as_text(g.rows[0][2]) ==
        "1 damaged row set aside (thread_hist_row): in no tier, see damaged_rows");
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].find("maintenance set aside 1 damaged row whose blobs no longer decode") !=
        std::string::npos);
  CHECK(notes[0].find("thread_hist_row of interval ") != std::string::npos);
  CHECK(notes[0].back() == '\n');
}

TEST_CASE("gaps() and health read a version 21 file, which has no damaged_rows, as before",
          "[store][damage]") {
  temp_dir dir;
  const std::string path = dir.file("v21.db");
  copy_fixture("v21.db", path);
  auto r = open_reader(path);
  CHECK(scalar_int(r, "PRAGMA user_version") == 21);
  CHECK(scalar_int(r, "SELECT count(*) FROM gaps() WHERE reason LIKE '%damaged%'") == 0);
  CHECK(scalar_int(r, "SELECT count(*) FROM gaps()") > 0);
  CHECK(columns_of(r, "health").size() == 16);
}
