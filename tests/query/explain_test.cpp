// explain(): from an incident's window (or annotation) to the threads that did worst against
// their own baseline, and for each the causes the history holds, by share of the extra wait.
#include "rsched/query/annotations.hpp"
#include "rsched/store/schema.hpp"

#include "store_test_util.hpp"

#include <fmt/format.h>

#include <random>

using namespace store_test;
using rsched::store::blame_row;
using rsched::store::cgroup_cpu_row;
using rsched::store::culprit_kind;

namespace {

constexpr std::int64_t t0 = 1'700'000'040'000'000'000; // a whole minute (UTC ns)
// 30 intervals of 10 s of baseline (5 minutes), then the window: 6 intervals (1 minute).
constexpr int baseline_ivs = 30;
constexpr int window_ivs = 6;
constexpr std::int64_t win_a = t0 + baseline_ivs * 10 * sec;
constexpr std::int64_t win_b = win_a + window_ivs * 10 * sec;

blame_row culprit(std::uint32_t pid, std::string comm, std::string cgroup, std::uint64_t wait_ns,
                  int policy = 0, int prio = 120, int waiter_prio = 120) {
  blame_row b;
  b.kind = culprit_kind::process;
  b.pid = pid;
  b.comm = std::move(comm);
  b.cgroup = std::move(cgroup);
  b.wait_ns = wait_ns;
  b.waits = 1;
  b.cpu = 0;
  b.policy = policy;
  b.prio = prio;
  b.waiter_policy = 0;
  b.waiter_prio = waiter_prio;
  return b;
}

blame_row idle(std::uint64_t wait_ns) {
  blame_row b;
  b.kind = culprit_kind::idle;
  b.wait_ns = wait_ns;
  b.waits = 1;
  return b;
}

// The SRE's incident: web (pid 100) has four threads at nice -20, each waiting 20 x 0.2 ms an
// interval behind `noise`; in the window thread 103 is pinned behind rtjob (SCHED_FIFO 1): 20 x
// 8 ms, 144 ms of it while rtjob ran. 'other' waits 1 ms instead of 0.2 ms in the window, behind
// a fair hog.
void write_sre_incident(writer &w) {
  for (int i = 0; i < baseline_ivs + window_ivs; ++i) {
    const bool in_window = i >= baseline_ivs;
    std::vector<rsched::store::thread_row> th;
    for (std::uint32_t tid = 101; tid <= 104; ++tid) {
      const bool pinned = in_window && tid == 103;
      auto t = make_thread(tid, "web", std::vector<std::uint64_t>(20, pinned ? 8'000'000 : 200'000),
                           {}, "/web.slice");
      t.pid = 100;
      t.blame = {culprit(50, "noise", "/", 4'000'000, 0, 120, 100)};
      if (pinned) {
        t.blame.push_back(culprit(900, "rtjob", "/batch.slice", 144'000'000, 1, 98, 100));
        t.blame.push_back(idle(12'000'000));
      }
      th.push_back(std::move(t));
    }
    auto other =
        make_thread(200, "other", std::vector<std::uint64_t>(20, in_window ? 1'000'000 : 200'000),
                    {}, "/other.slice");
    other.blame = {culprit(50, "noise", "/", 4'000'000)};
    if (in_window) {
      other.blame.push_back(culprit(300, "hog", "/hog.slice", 16'000'000));
    }
    th.push_back(std::move(other));
    write_ok(w, make_interval(t0 + i * 10 * sec, th));
  }
}

std::string window_sql(const std::string &columns, const std::string &extra = "") {
  return fmt::format("SELECT {} FROM explain({}, {}{})", columns, win_a, win_b, extra);
}

} // namespace

TEST_CASE_METHOD(new_db,
                 "explain: one thread of four pinned behind an RT job is the first victim, the "
                 "job its first cause",
                 "[store][explain]") {
  write_sre_incident(w);
  auto r = open_reader(path);
  const auto t = run(r, window_sql("victim_rank, victim_tid, victim_pid, victim_comm, "
                                   "victim_cgroup, baseline_p99_ns, window_p99_ns, wait_ns, "
                                   "expected_ns, excess_ns, cause_rank, cause, culprit_pid, "
                                   "culprit_comm, culprit_cgroup, share_pct, summary"));
  // Only the pinned web thread and 'other' did worse than their baselines; the three other web
  // threads waited exactly as before and are no victims.
  REQUIRE(t.rows.size() == 2);
  const auto &v = t.rows[0];
  CHECK(as_int(v[0]) == 1);
  CHECK(as_int(v[1]) == 103);
  CHECK(as_int(v[2]) == 100);
  CHECK(as_text(v[3]) == "web");
  CHECK(as_text(v[4]) == "/web.slice");
  CHECK(as_int(v[5]) < 300'000);   // 0.2 ms before
  CHECK(as_int(v[6]) > 7'000'000); // 8 ms in the window
  CHECK(as_int(v[7]) == 6 * 160'000'000);
  CHECK(as_int(v[8]) == 30 * 4'000'000 / 5); // the baseline's 5 minutes scaled to 1
  CHECK(as_int(v[9]) == 6 * 160'000'000 - 24'000'000);
  CHECK(as_int(v[10]) == 1);
  // A nice -20 thread behind SCHED_FIFO 1: an inversion, 864 ms of the 936 ms extra.
  CHECK(as_text(v[11]) == "inversion");
  CHECK(as_int(v[12]) == 900);
  CHECK(as_text(v[13]) == "rtjob");
  CHECK(as_text(v[14]) == "/batch.slice");
  CHECK(as_real(v[15]) == Approx(100.0 * 864.0 / 936.0));
  CHECK(as_text(v[16]) == "rtjob[900] (SCHED_FIFO 1) ran ahead of it at nice -20: 92% of the "
                          "extra time");
  // 'other': rank 2, behind a fair hog (a cpu cause), all of its extra wait.
  const auto &o = t.rows[1];
  CHECK(as_int(o[0]) == 2);
  CHECK(as_int(o[1]) == 200);
  CHECK(as_int(o[9]) == 6 * 20'000'000 - 24'000'000);
  CHECK(as_text(o[11]) == "cpu");
  CHECK(as_int(o[12]) == 300);
  CHECK(as_text(o[13]) == "hog");
  CHECK(as_real(o[15]) == Approx(100.0));
  CHECK(as_text(o[16]) == "hog[300] ran while it waited: 100% of the extra time");
  // The worst thread of a comm and its first cause, as docs/SQL.md promises.
  const auto first =
      run(r, window_sql("victim_tid, cause, culprit_comm") + " WHERE victim_comm = 'web' LIMIT 1");
  REQUIRE(first.rows.size() == 1);
  CHECK(as_int(first.rows[0][0]) == 103);
  CHECK(as_text(first.rows[0][2]) == "rtjob");
  // A victim pattern narrows the threads, as for blame().
  const auto web = run(r, window_sql("victim_tid, victim_rank", ", 'web'"));
  REQUIRE(web.rows.size() == 1);
  CHECK(as_int(web.rows[0][0]) == 103);
  CHECK(as_int(web.rows[0][1]) == 1);
  CHECK(run(r, window_sql("*", ", 'tid:101'")).rows.empty());
  CHECK(run(r, window_sql("victim_tid", ", 'pid:100'")).rows.size() == 1);
}

TEST_CASE_METHOD(new_db,
                 "explain: a throttled cgroup, its pressure and the thread's migrations are "
                 "causes, throttling first",
                 "[store][explain]") {
  for (int i = 0; i < baseline_ivs + window_ivs; ++i) {
    const bool in_window = i >= baseline_ivs;
    auto api =
        make_thread(400, "api", std::vector<std::uint64_t>(20, in_window ? 5'000'000 : 200'000), {},
                    "/api.slice");
    api.blame = {idle(in_window ? 100'000'000 : 4'000'000)};
    api.migrations = in_window ? 50 : 1;
    auto iv = make_interval(t0 + i * 10 * sec, {api});
    const std::int64_t some = in_window ? 6'000'000'000 : 500'000'000;
    iv.cgroup_cpu = {cgroup_cpu_row{"/", 200'000'000, 0, 9'000'000'000, {}, {}, {}},
                     cgroup_cpu_row{"/api.slice", some, 0, 1'000'000'000, 100, in_window ? 40 : 0,
                                    in_window ? 2'000'000'000 : 0}};
    write_ok(w, iv);
  }
  auto r = open_reader(path);
  const auto t = run(r, window_sql("victim_tid, cause_rank, cause, culprit_pid, culprit_cgroup, "
                                   "share_pct, coalesce(measure_ns, measure_pct, measure_count), "
                                   "coalesce(baseline_ns, baseline_pct, baseline_count), summary"));
  REQUIRE(t.rows.size() == 3);
  // Each cause's value in the columns of its unit: throttled ns, migrations, PSI percent.
  const auto units = run(r, window_sql("cause, measure_ns IS NOT NULL, baseline_ns IS NOT NULL, "
                                       "measure_count IS NOT NULL, baseline_count IS NOT NULL, "
                                       "measure_pct IS NOT NULL, baseline_pct IS NOT NULL"));
  REQUIRE(units.rows.size() == 3);
  const std::vector<std::pair<std::string, int>> in_columns = {
      {"throttle", 1}, {"migration", 3}, {"pressure", 5}};
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(as_text(units.rows[i][0]) == in_columns[i].first);
    for (int c = 1; c <= 6; ++c) {
      const bool filled = c == in_columns[i].second || c == in_columns[i].second + 1;
      CHECK(as_int(units.rows[i][static_cast<std::size_t>(c)]) == (filled ? 1 : 0));
    }
  }
  for (const auto &row : t.rows) {
    CHECK(as_int(row[0]) == 400);
  }
  // Throttled 2 s an interval in the window, never before: up to all of the 576 ms extra.
  CHECK(as_int(t.rows[0][1]) == 1);
  CHECK(as_text(t.rows[0][2]) == "throttle");
  CHECK(is_null(t.rows[0][3]));
  CHECK(as_text(t.rows[0][4]) == "/api.slice");
  CHECK(as_real(t.rows[0][5]) == Approx(100.0));
  CHECK(as_int(t.rows[0][6]) == 12'000'000'000);
  CHECK(as_int(t.rows[0][7]) == 0);
  // 300 migrations against 6 at the baseline rate: evidence, no share.
  CHECK(as_text(t.rows[1][2]) == "migration");
  CHECK(is_null(t.rows[1][5]));
  CHECK(as_real(t.rows[1][6]) == Approx(300.0));
  CHECK(as_real(t.rows[1][7]) == Approx(6.0));
  CHECK(as_text(t.rows[1][8]) == "migrated 300 times (6 at its baseline rate)");
  // PSI "some" of its own cgroup: 60 % against 5 %.
  CHECK(as_text(t.rows[2][2]) == "pressure");
  CHECK(as_text(t.rows[2][4]) == "/api.slice");
  CHECK(as_real(t.rows[2][6]) == Approx(60.0));
  CHECK(as_real(t.rows[2][7]) == Approx(5.0));
  CHECK(as_text(t.rows[2][8]) == "CPU pressure 60% in /api.slice (5% before)");
}

TEST_CASE_METHOD(new_db, "explain(annotation id) is explain over the annotation's window",
                 "[store][explain]") {
  write_sre_incident(w);
  raw_exec(path, fmt::format("INSERT INTO annotations(start_ns, end_ns, source, text, created_ns) "
                             "VALUES ({}, {}, 't', 'web slow', 0), ({}, NULL, 't', 'deploy', 0)",
                             win_a, win_b, t0 + 5 * sec));
  auto r = open_reader(path);
  // Every column but victims_rule (which says the annotation named no service).
  const std::string cols = "victim_rank, victim_tid, victim_pid, victim_comm, victim_cgroup, "
                           "baseline_p99_ns, window_p99_ns, wait_ns, expected_ns, excess_ns, "
                           "cause_rank, cause, culprit_pid, culprit_comm, culprit_cgroup, "
                           "via, share_pct, measure_ns, baseline_ns, measure_pct, baseline_pct, "
                           "measure_count, baseline_count, summary, victim_class, "
                           "baseline_start_ns, baseline_end_ns";
  const auto by_id = run(r, "SELECT " + cols + " FROM explain(1)");
  const auto by_window = run(r, window_sql(cols));
  REQUIRE(by_id.rows.size() == 2);
  CHECK(by_id.rows == by_window.rows);
  CHECK(as_int(by_id.rows[0][1]) == 103);
  CHECK(as_text(run(r, "SELECT victims_rule FROM explain(1)").rows.at(0).at(0)) ==
        "every thread (annotation 1 names no service: tag it service:NAME)");
  CHECK(as_text(run(r, window_sql("victims_rule")).rows.at(0).at(0)) ==
        "every thread (no victims given)");
  // A point in time: the interval holding it, against the (empty) time before: every wait is
  // extra, so every thread with a delay there is a victim.
  CHECK(run(r, "SELECT DISTINCT victim_tid FROM explain(2)").rows.size() == 5);
}

TEST_CASE_METHOD(new_db, "explain: bad arguments are one clear line", "[store][explain]") {
  write_sre_incident(w);
  auto r = open_reader(path);
  const auto one_line = [&](const std::string &sql, const std::string &says) {
    const auto err = run_error(r, sql);
    INFO(sql << " -> " << err);
    CHECK(err.find(says) != std::string::npos);
    CHECK(err.find('\n') == std::string::npos);
  };
  one_line("SELECT * FROM explain(99)", "explain: no annotation 99");
  one_line("SELECT * FROM explain('yesterday')", "explain(ANNOTATION_ID) takes an annotation's id");
  one_line("SELECT * FROM explain(NULL, 5)", "explain: a window needs both start and end");
  one_line(fmt::format("SELECT * FROM explain({}, {})", win_b, win_a), "explain");
  one_line(fmt::format("SELECT * FROM explain({}, {}, 'tid:x')", win_a, win_b),
           "explain: 'tid:x' needs a process or thread id");
  one_line("SELECT * FROM explain(NULL)", "explain: give an annotation id, or a window");
  one_line(fmt::format("SELECT * FROM explain({}, 'soon')", win_a), "explain: end");
}

TEST_CASE_METHOD(new_db,
                 "explain: where the wait behind one culprit fell as another's rose, the shares "
                 "still add up to 100 at most",
                 "[store][explain]") {
  // db waits 4 ms an interval behind noise before the window; 6 ms behind hog in it (none
  // behind noise): 12 ms of excess, 36 ms more behind hog.
  for (int i = 0; i < baseline_ivs + window_ivs; ++i) {
    const bool in_window = i >= baseline_ivs;
    auto db = make_thread(300, "db", std::vector<std::uint64_t>(20, in_window ? 300'000 : 200'000));
    db.blame = {in_window ? culprit(77, "hog", "/", 6'000'000)
                          : culprit(50, "noise", "/", 4'000'000)};
    write_ok(w, make_interval(t0 + i * 10 * sec, {db}));
  }
  auto r = open_reader(path);
  const auto t = run(r, window_sql("excess_ns, cause, culprit_comm, share_pct, measure_ns, "
                                   "baseline_ns"));
  REQUIRE(t.rows.size() == 1);
  CHECK(as_int(t.rows[0][0]) == 12'000'000);
  CHECK(as_text(t.rows[0][1]) == "cpu");
  CHECK(as_text(t.rows[0][2]) == "hog");
  CHECK(as_real(t.rows[0][3]) == Approx(100.0)); // not 300
  CHECK(as_int(t.rows[0][4]) == 36'000'000);
  CHECK(as_int(t.rows[0][5]) == 0);
}

TEST_CASE("explain: the same answers from histogram packs, from rows, and without summaries",
          "[store][explain]") {
  // Random threads of three comms in two cgroups, with blame, migrations and cgroup pressure; a
  // few stall in the window. explain() reads each thread's histograms from the interval's pack
  // (or its rows) and its cgroups' threads from the interval's summary (or the histograms).
  const auto seed = static_cast<std::uint32_t>(GENERATE(1, 2));
  std::mt19937 gen(seed);
  const auto rng = [&gen] { return static_cast<std::uint32_t>(gen()); };
  temp_dir dir;
  const std::string path = dir.file("rsched.db");
  {
    auto w = open_writer(path);
    for (int i = 0; i < baseline_ivs + window_ivs; ++i) {
      const bool in_window = i >= baseline_ivs;
      std::vector<rsched::store::thread_row> th;
      for (std::uint32_t tid = 501; tid <= 530; ++tid) {
        if (rng() % 5 == 0) {
          continue;
        }
        const bool stalled = in_window && tid % 7 == 0;
        std::vector<std::uint64_t> d(1 + rng() % 30);
        for (auto &x : d) {
          x = 50'000 + rng() % (stalled ? 9'000'000 : 400'000);
        }
        const std::string cg = tid % 2 == 0 ? "/a.slice" : "/b.slice";
        auto t = make_thread(tid, tid % 3 == 0 ? "web" : tid % 3 == 1 ? "db" : "batch", d, {}, cg);
        t.pid = 500 + tid % 4;
        t.blame = {culprit(50 + rng() % 3, "noise", "/", 1'000'000 + rng() % 4'000'000)};
        if (stalled) {
          t.blame.push_back(culprit(900, "hog", "/hog.slice", 20'000'000 + rng() % 9'000'000));
          // A SCHED_FIFO job ahead of a thread at nice -20 (an inversion) for some of them.
          if (tid % 2 == 0) {
            t.blame.push_back(
                culprit(901, "rtjob", "/batch.slice", 5'000'000 + rng() % 9'000'000, 1, 98, 100));
          }
        }
        t.migrations = stalled ? 40 + rng() % 10 : rng() % 3;
        th.push_back(std::move(t));
      }
      auto iv = make_interval(t0 + i * 10 * sec, th);
      iv.cgroup_cpu = {cgroup_cpu_row{"/", 200'000'000, 0, 9'000'000'000, {}, {}, {}},
                       cgroup_cpu_row{"/a.slice", in_window ? 5'000'000'000 : 400'000'000, 0,
                                      1'000'000'000, 100, 0, 0},
                       cgroup_cpu_row{"/b.slice", 300'000'000, 0, 1'000'000'000, 100, 0, 0}};
      write_ok(w, iv);
    }
  }
  const std::vector<std::string> calls = {window_sql("*"), window_sql("*", ", 'web'"),
                                          window_sql("*", ", 'pid:501'"),
                                          window_sql("*", ", 'tid:507'")};
  const auto answers = [&] {
    auto r = open_reader(path);
    std::vector<std::vector<std::vector<value>>> out;
    out.reserve(calls.size());
    for (const auto &c : calls) {
      out.push_back(run(r, c).rows);
    }
    return out;
  };
  const auto packed = answers();
  std::size_t rows = 0;
  for (const auto &a : packed) {
    rows += a.size();
  }
  INFO("seed " << seed << ": " << rows << " rows");
  CHECK(rows >= 20);
  std::size_t inversions = 0;
  for (const auto &a : packed) {
    for (const auto &row : a) {
      inversions += static_cast<std::size_t>(
          std::count(row.begin(), row.end(), value{std::string("inversion")}));
    }
  }
  CHECK(inversions > 0);
  raw_exec(path, "DELETE FROM hist_summary");
  CHECK(answers() == packed);
  // The packs' entries as rows of thread_hist_row and thread_blame_row (as a history written
  // before schemas 8 and 13 has them), through a connection that can read the thread_hist table.
  {
    sqlite3 *c = nullptr;
    REQUIRE(sqlite3_open_v2(path.c_str(), &c, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK);
    REQUIRE(rsched::store::register_storage(c));
    char *msg = nullptr;
    const int rc = sqlite3_exec(
        c,
        "CREATE TEMP TABLE moved AS SELECT interval_id, metric, thread_id, count, total, hist "
        "FROM thread_hist WHERE interval_id IN (SELECT interval_id FROM thread_hist_pack);"
        "DELETE FROM thread_hist_pack;"
        "INSERT INTO thread_hist_row(interval_id, metric, thread_id, count, total, hist) "
        "SELECT * FROM moved;"
        "CREATE TEMP TABLE moved_blame AS SELECT interval_id, thread_id, culprit_id, wait_ns, "
        "waits, preempts, cpu, policy, prio, waiter_policy, waiter_prio, approx_ns FROM "
        "thread_blame WHERE interval_id IN (SELECT interval_id FROM thread_blame_pack);"
        "DELETE FROM thread_blame_pack;"
        "INSERT INTO thread_blame_row(interval_id, thread_id, culprit_id, wait_ns, waits, "
        "preempts, cpu, policy, prio, waiter_policy, waiter_prio, approx_ns) SELECT * FROM "
        "moved_blame;",
        nullptr, nullptr, &msg);
    INFO("sqlite: " << (msg != nullptr ? msg : ""));
    sqlite3_free(msg);
    sqlite3_close(c);
    REQUIRE(rc == SQLITE_OK);
  }
  CHECK(answers() == packed);
}

TEST_CASE_METHOD(new_db,
                 "explain(id) from the page: the service its tags name, by name or by "
                 "its recorded mapping; explicit victims win",
                 "[store][explain][service]") {
  write_sre_incident(w);
  raw_exec(path, fmt::format("INSERT INTO annotations(start_ns, end_ns, source, text, tags, "
                             "created_ns) VALUES ({0}, {1}, 't', 'web slow', "
                             "'service_name:web,incident_number:7', 0), ({0}, {1}, 't', "
                             "'other slow', 'service:other.slice', 0), ({0}, {1}, 't', 'gone', "
                             "'service_name:billing', 0), ({0}, {1}, 't', 'mapped', "
                             "'service_name:Checkout', 0)",
                             win_a, win_b));
  {
    auto r = open_reader(path);
    // By name: the comm web (pid 100's four threads, one a victim), never 'other'.
    const auto web = run(r, "SELECT DISTINCT victim_tid, victim_class, victims_rule FROM "
                            "explain(1)");
    REQUIRE(web.rows.size() == 1);
    CHECK(as_int(web.rows[0][0]) == 103);
    CHECK(as_text(web.rows[0][1]) == "baseline");
    CHECK(as_text(web.rows[0][2]) ==
          "service web: threads whose comm or a cgroup path component is its name");
    // By a cgroup path component: /other.slice is the unit of service other.slice.
    const auto other = run(r, "SELECT DISTINCT victim_tid FROM explain(2)");
    REQUIRE(other.rows.size() == 1);
    CHECK(as_int(other.rows[0][0]) == 200);
    // A service no thread of the window is: every thread, and the rule says so.
    const auto gone = run(r, "SELECT DISTINCT victim_tid, victims_rule FROM explain(3)");
    CHECK(gone.rows.size() == 2);
    CHECK(as_text(gone.rows[0][1]) ==
          "service billing: threads whose comm or a cgroup path component is its name: no "
          "thread of it in the window; every thread");
    // Explicit victims win over the tags.
    const auto given = run(r, "SELECT DISTINCT victim_tid, victims_rule FROM explain(1, NULL, "
                              "'other')");
    REQUIRE(given.rows.size() == 1);
    CHECK(as_int(given.rows[0][0]) == 200);
    CHECK(as_text(given.rows[0][1]) == "victims given: comm other");
  }
  // A mapping recorded once (rsched-sql DB service Checkout ...): its patterns, not the name.
  auto kept = rsched::query::set_service(path, "Checkout",
                                         {"cgroup:/web.slice", "comm:oth*", "cgroup:/web.slice"});
  REQUIRE(kept.ok());
  CHECK(*kept == std::vector<std::string>{"cgroup:/web.slice", "comm:oth*"});
  CHECK_FALSE(rsched::query::set_service(path, "Checkout", {"pid:100"}).ok());
  CHECK_FALSE(rsched::query::set_service(path, "Checkout", {"cgroup:"}).ok());
  CHECK_FALSE(rsched::query::set_service(path, "", {"web"}).ok());
  auto r = open_reader(path);
  const auto mapped = run(r, "SELECT DISTINCT victim_tid, victims_rule FROM explain(4) ORDER BY 1");
  REQUIRE(mapped.rows.size() == 2);
  CHECK(as_int(mapped.rows[0][0]) == 103);
  CHECK(as_int(mapped.rows[1][0]) == 200);
  CHECK(as_text(mapped.rows[0][1]) ==
        "service Checkout: its mapping (cgroup:/web.slice, comm:oth*)");
  // No patterns: forgotten, the name rule again (no thread is called Checkout: every thread).
  REQUIRE(rsched::query::set_service(path, "Checkout", {}).ok());
  CHECK(scalar_int(r, "SELECT count(*) FROM services") == 0);
}

namespace {

// A longer history (10 minutes of baseline before a 1-minute window at interval 60) with an
// earlier incident at intervals 40-44 in which thread 103 already waited 8 ms; rtjob (pid 900)
// recorded as a thread too (a little worse in the window, behind nobody), and batch (tid 700)
// only in the window.
constexpr int long_window_iv = 60;
constexpr std::int64_t long_a = t0 + long_window_iv * 10 * sec;
constexpr std::int64_t long_b = long_a + 6 * 10 * sec;

void write_long_history(writer &w) {
  for (int i = 0; i < long_window_iv + 6; ++i) {
    const bool in_window = i >= long_window_iv;
    const bool earlier = i >= 40 && i < 45;
    std::vector<rsched::store::thread_row> th;
    for (std::uint32_t tid = 101; tid <= 104; ++tid) {
      const bool slow = (in_window || earlier) && tid == 103;
      auto t = make_thread(tid, "web", std::vector<std::uint64_t>(20, slow ? 8'000'000 : 200'000),
                           {}, "/web.slice");
      t.pid = 100;
      if (slow) {
        t.blame = {culprit(900, "rtjob", "/batch.slice", 144'000'000, 1, 98, 100)};
      }
      th.push_back(std::move(t));
    }
    auto rt = make_thread(900, "rtjob", std::vector<std::uint64_t>(4, in_window ? 30'000 : 10'000),
                          {}, "/batch.slice");
    th.push_back(std::move(rt));
    if (in_window) {
      th.push_back(make_thread(700, "batch", std::vector<std::uint64_t>(50, 50'000'000), {},
                               "/batch.slice"));
    }
    write_ok(w, make_interval(t0 + i * 10 * sec, th));
  }
}

} // namespace

TEST_CASE_METHOD(new_db,
                 "explain: the baseline is the nearest recorded stretch outside every "
                 "other incident; new threads and root culprits are ranked apart",
                 "[store][explain]") {
  write_long_history(w);
  raw_exec(path, fmt::format("INSERT INTO annotations(start_ns, end_ns, source, text, tags, "
                             "created_ns) VALUES ({}, {}, 't', 'earlier', '', 0), ({}, {}, 't', "
                             "'now', '', 0), ({}, NULL, 't', 'a deploy: a point, no window', '', "
                             "0)",
                             t0 + 400 * sec, t0 + 450 * sec, long_a, long_b, t0 + 350 * sec));
  auto r = open_reader(path);
  const auto t = run(r, "SELECT DISTINCT victim_rank, victim_tid, victim_class, expected_ns, "
                        "excess_ns, baseline_start_ns, baseline_end_ns FROM explain(2) ORDER BY 1");
  REQUIRE(t.rows.size() == 3);
  // The baseline: 5 minutes before the earlier incident (the point annotation is no window).
  for (const auto &row : t.rows) {
    CHECK(as_int(row[5]) == t0 + 100 * sec);
    CHECK(as_int(row[6]) == t0 + 400 * sec);
  }
  // 103 against a baseline without the earlier incident: 0.2 ms x 20 x 30 intervals, scaled
  // to the 1-minute window.
  CHECK(as_int(t.rows[0][1]) == 103);
  CHECK(as_text(t.rows[0][2]) == "baseline");
  CHECK(as_int(t.rows[0][3]) == 30 * 4'000'000 / 5);
  CHECK(as_int(t.rows[0][4]) == 6 * 160'000'000 - 24'000'000);
  // batch waited far longer, but had no baseline: new, ranked after.
  CHECK(as_int(t.rows[1][1]) == 700);
  CHECK(as_text(t.rows[1][2]) == "new");
  CHECK(as_int(t.rows[1][4]) == 6 * 50 * 50'000'000LL);
  // rtjob did a little worse than before, and held up web for far longer: the root culprit.
  CHECK(as_int(t.rows[2][1]) == 900);
  CHECK(as_text(t.rows[2][2]) == "culprit");
  // Explained over the earlier incident instead, the baseline steps back from the later one?
  // No: only windows before the one explained are looked at; its own is not in the way.
  const auto e1 = run(r, "SELECT DISTINCT baseline_start_ns, baseline_end_ns FROM explain(1)");
  REQUIRE(e1.rows.size() == 1);
  CHECK(as_int(e1.rows[0][0]) == t0 + 100 * sec);
  CHECK(as_int(e1.rows[0][1]) == t0 + 400 * sec);
}

TEST_CASE_METHOD(new_db,
                 "explain: a service slowed by a lock or by I/O ranks by its whole "
                 "lateness, its held and blocked sleep, not its scheduling delay",
                 "[store][explain]") {
  using rsched::store::waker_kind;
  using rsched::store::wakeup_row;
  const auto woken = [](waker_kind k, std::uint32_t pid, const char *comm, int state,
                        std::uint64_t ns) {
    wakeup_row x;
    x.kind = k;
    x.pid = pid;
    x.comm = comm;
    x.cgroup = "/app";
    x.state = static_cast<std::uint8_t>(state);
    x.sleep_ns = ns;
    x.count = 10;
    return x;
  };
  for (int i = 0; i < baseline_ivs + window_ivs; ++i) {
    const bool in_window = i >= baseline_ivs;
    // api: its delay falls in the window (0.2 -> 0.1 ms), but it sleeps on the lock holder
    // (flusher, pid 415) 6 s an interval instead of 1 s; its timer sleeps are no lateness.
    auto api = make_thread(
        412, "api", std::vector<std::uint64_t>(20, in_window ? 100'000 : 200'000), {}, "/app");
    api.wakeups = {
        woken(waker_kind::process, 415, "flusher", 0, in_window ? 6'000'000'000 : 1'000'000'000),
        woken(waker_kind::timer, 0, "", 0, in_window ? 3'000'000'000 : 9'000'000'000)};
    // logger: blocked in D (fsync) 4 s an interval instead of 0.1 s.
    auto logger = make_thread(500, "logger", std::vector<std::uint64_t>(20, 200'000), {}, "/app");
    logger.wakeups = {
        woken(waker_kind::softirq, 0, "", 1, in_window ? 4'000'000'000 : 100'000'000)};
    // idle: waits for its next tick ten times longer: not late.
    auto idle_one = make_thread(600, "idle", std::vector<std::uint64_t>(20, 200'000), {}, "/app");
    idle_one.wakeups = {
        woken(waker_kind::timer, 0, "", 0, in_window ? 9'000'000'000 : 900'000'000)};
    auto iv = make_interval(t0 + i * 10 * sec, {api, logger, idle_one});
    iv.groups = 1 | 64 | 128;
    write_ok(w, iv);
  }
  auto r = open_reader(path);
  const auto t = run(r, window_sql("victim_tid, cause_rank, cause, culprit_pid, share_pct, "
                                   "excess_ns, held_ns, blocked_ns, late_excess_ns") +
                            " ORDER BY victim_rank, cause_rank");
  REQUIRE(t.rows.size() == 2); // api and logger; idle is no victim
  // api: 6 x 6 s held against 1 s at the baseline rate (x 6): 30 s late, all behind flusher,
  // though its scheduling delay fell.
  CHECK(as_int(t.rows[0][0]) == 412);
  CHECK(as_text(t.rows[0][2]) == "wakeup");
  CHECK(as_int(t.rows[0][3]) == 415);
  CHECK(as_real(t.rows[0][4]) == Approx(100.0));
  CHECK(as_int(t.rows[0][5]) < 0);
  CHECK(as_int(t.rows[0][6]) == 36'000'000'000);
  CHECK(as_int(t.rows[0][8]) == 30'000'000'000 - 6 * 2'000'000);
  // logger: 6 x 4 s in D against 6 x 0.1 s: an io cause, all of its extra time.
  CHECK(as_int(t.rows[1][0]) == 500);
  CHECK(as_text(t.rows[1][2]) == "io");
  CHECK(t.rows[1][3].index() == 0); // no culprit named
  CHECK(as_real(t.rows[1][4]) == Approx(100.0));
  CHECK(as_int(t.rows[1][7]) == 24'000'000'000);
  CHECK(as_int(t.rows[1][8]) == 24'000'000'000 - 600'000'000);
}

namespace {

using rsched::store::waker_kind;
using rsched::store::wakeup_row;

wakeup_row woken_by(std::uint32_t pid, const char *comm, std::uint64_t ns, int state = 0) {
  wakeup_row x;
  x.kind = waker_kind::process;
  x.pid = pid;
  x.comm = comm;
  x.cgroup = "/app";
  x.state = static_cast<std::uint8_t>(state);
  x.sleep_ns = ns;
  x.count = 10;
  return x;
}

// One chain per victim, as data: who woke whom (held sleep, baseline -> window per interval) and
// who waited behind whom for the CPU.
struct chain_case {
  std::uint32_t tid, pid;
  const char *comm;
  std::vector<std::tuple<std::uint32_t, const char *, std::uint64_t, std::uint64_t>> wakers;
  std::vector<std::tuple<std::uint32_t, const char *, std::uint64_t>> cpu; // in the window
  std::uint64_t idle_wait_ns = 0; // in the window, behind no one named
};

const std::vector<chain_case> chains = {
    // api's lock holder flusher (a thread of api's own process) waits on journal's commit, and
    // journal waits for the CPU behind reindex: three hops to the root.
    {412, 400, "api", {{400, "flusher", 1'000'000'000, 6'000'000'000}}, {}},
    {415, 400, "flusher", {{500, "journal", 500'000'000, 5'000'000'000}}, {}},
    {501, 500, "journal", {}, {{977, "reindex", 800'000'000}}},
    {977, 977, "reindex", {}, {}},
    // web waits on cache, which was late mostly behind no one: 5 % named (hog); the chain stops
    // at cache, the root.
    {612, 610, "web", {{620, "cache", 1'000'000'000, 4'000'000'000}}, {}},
    {621, 620, "cache", {}, {{77, "hog", 5'000'000}}, 95'000'000},
    // ping and pong wait on each other: a cycle, the chain stops at pong.
    {701, 700, "ping", {{710, "pong", 1'000'000'000, 5'000'000'000}}, {}},
    {711, 710, "pong", {{700, "ping", 1'000'000'000, 5'000'000'000}}, {}},
    // a pool whose threads hand a lock on to each other: 432's sleep ended by 433 is followed
    // through 433 to what held the pool up, beyond it.
    {432, 430, "pool", {{430, "pool", 1'000'000'000, 6'000'000'000}}, {}},
    {433, 430, "pool", {{440, "holder", 1'000'000'000, 6'000'000'000}}, {}},
    {441, 440, "holder", {}, {{977, "reindex", 700'000'000}}},
    // a five-step chain: followed for three hops, then named where it stops.
    {801, 800, "s0", {{810, "s1", 1'000'000'000, 6'000'000'000}}, {}},
    {811, 810, "s1", {{820, "s2", 1'000'000'000, 6'000'000'000}}, {}},
    {821, 820, "s2", {{830, "s3", 1'000'000'000, 6'000'000'000}}, {}},
    {831, 830, "s3", {{840, "s4", 1'000'000'000, 6'000'000'000}}, {}},
    {841, 840, "s4", {}, {{77, "hog", 900'000'000}}},
};

} // namespace

TEST_CASE_METHOD(new_db,
                 "explain: a held sleep is followed from waker thread to waker thread, up to "
                 "three hops, to the root culprit; cycles and hops under a tenth stop it",
                 "[store][explain][chain]") {
  for (int i = 0; i < baseline_ivs + window_ivs; ++i) {
    const bool in_window = i >= baseline_ivs;
    std::vector<rsched::store::thread_row> th;
    for (const auto &c : chains) {
      std::vector<std::uint64_t> delays(4, 100'000);
      std::vector<blame_row> blame;
      if (in_window) {
        std::uint64_t extra = c.idle_wait_ns;
        for (const auto &[pid, comm, ns] : c.cpu) {
          blame.push_back(culprit(pid, comm, "/", ns));
          extra += ns;
        }
        if (c.idle_wait_ns > 0) {
          blame.push_back(idle(c.idle_wait_ns));
        }
        if (extra > 0) {
          delays.push_back(extra); // the wait itself, as one long sample
        }
      }
      auto t = make_thread(c.tid, c.comm, delays, {}, "/app");
      t.pid = c.pid;
      t.blame = std::move(blame);
      for (const auto &[pid, comm, before, during] : c.wakers) {
        t.wakeups.push_back(woken_by(pid, comm, in_window ? during : before));
      }
      th.push_back(std::move(t));
    }
    auto iv = make_interval(t0 + i * 10 * sec, th);
    iv.groups = 1 | 64 | 128;
    write_ok(w, iv);
  }
  auto r = open_reader(path);
  const auto first = [&](const char *victim) {
    const auto t = run(r, fmt::format("SELECT cause, culprit_pid, culprit_comm, via, summary FROM "
                                      "explain({}, {}, '{}') WHERE cause_rank = 1",
                                      win_a, win_b, victim));
    REQUIRE(t.rows.size() == 1);
    return t.rows[0];
  };
  const auto api = first("api");
  CHECK(as_text(api[0]) == "lock");
  CHECK(as_int(api[1]) == 977);
  CHECK(as_text(api[2]) == "reindex");
  CHECK(as_text(api[3]) == "api[412] \u2190 flusher[415] \u2190 journal[501] \u2190 reindex[977]");
  CHECK(as_text(api[4]).find("flusher[415] was held up") != std::string::npos);
  CHECK(as_text(api[4]).find("journal[501] was held up: reindex[977] ran") != std::string::npos);
  const auto web = first("web");
  CHECK(as_text(web[0]) == "wakeup");
  CHECK(as_int(web[1]) == 620);
  CHECK(as_text(web[3]) == "web[612] \u2190 cache[621]");
  const auto ping = first("ping");
  CHECK(as_text(ping[0]) == "wakeup");
  CHECK(as_text(ping[2]) == "pong");
  CHECK(as_text(ping[3]) == "ping[701] \u2190 pong[711]");
  const auto s0 = first("s0");
  CHECK(as_text(s0[0]) == "lock");
  CHECK(as_text(s0[2]) == "s3");
  CHECK(as_text(s0[3]) == "s0[801] \u2190 s1[811] \u2190 s2[821] \u2190 s3[831]");
  CHECK(as_text(s0[4]).find("s3[831] was held up in turn") != std::string::npos);
  const auto pool = first("tid:432");
  CHECK(as_text(pool[0]) == "lock");
  CHECK(as_text(pool[2]) == "reindex");
  CHECK(as_text(pool[3]) == "pool[432] \u2190 pool[433] \u2190 holder[441] \u2190 reindex[977]");
  // A CPU cause names its culprit one step away; over every thread, the same paths.
  const auto journal = first("journal");
  CHECK(as_text(journal[0]) == "cpu");
  CHECK(as_text(journal[3]) == "journal[501] \u2190 reindex[977]");
  // why() follows the same threads, hop by hop: api, flusher (of api's process), journal.
  const auto why = run(r, fmt::format("SELECT DISTINCT hop, subject FROM why('tid:412', {}, {}) "
                                      "ORDER BY hop",
                                      win_a, win_b));
  REQUIRE(why.rows.size() == 3);
  CHECK(as_text(why.rows[1][1]) == "flusher[400]");
  CHECK(as_text(why.rows[2][1]) == "journal[500]");
  // ... and stops where a waker is a thread of the path already (ping and pong).
  CHECK(scalar_int(r, fmt::format("SELECT max(hop) FROM why('tid:701', {}, {})", win_a, win_b)) ==
        1);
  const auto all = run(r, window_sql("via") + " WHERE victim_tid = 412 AND cause_rank = 1");
  REQUIRE(all.rows.size() == 1);
  CHECK(as_text(all.rows[0][0]) == as_text(api[3]));
}

TEST_CASE_METHOD(new_db,
                 "explain and blame: a cgroup's throttled time summed over runqueues is held to "
                 "the wall-clock time its throttled periods allow, never above the window",
                 "[store][explain]") {
  // 8 CPUs' runqueues throttled together: the kernel's sum is 25 s an interval of 10 s; 90 of
  // 100 periods throttled: at most 9 s an interval on the wall clock.
  for (int i = 0; i < baseline_ivs + window_ivs; ++i) {
    const bool in_window = i >= baseline_ivs;
    auto api =
        make_thread(400, "api", std::vector<std::uint64_t>(20, in_window ? 5'000'000 : 200'000), {},
                    "/api.slice");
    api.blame = {idle(in_window ? 100'000'000 : 4'000'000)};
    auto iv = make_interval(t0 + i * 10 * sec, {api});
    iv.cgroup_cpu = {cgroup_cpu_row{"/", 200'000'000, 0, 9'000'000'000, {}, {}, {}},
                     cgroup_cpu_row{"/api.slice", 0, 0, 1'000'000'000, 100, in_window ? 90 : 0,
                                    in_window ? 25'000'000'000 : 0}};
    write_ok(w, iv);
  }
  auto r = open_reader(path);
  const auto t =
      run(r, window_sql("cause, measure_ns, share_pct, summary") + " WHERE cause = 'throttle'");
  REQUIRE(t.rows.size() == 1);
  CHECK(as_int(t.rows[0][1]) == 6 * 9'000'000'000LL);
  CHECK(as_real(t.rows[0][2]) <= 100.0);
  CHECK(as_text(t.rows[0][3]).rfind("/api.slice was throttled 54.0 s", 0) == 0);
  const auto b = run(r, fmt::format("SELECT DISTINCT victim_throttled_ns FROM blame('api', {}, {})",
                                    win_a, win_b));
  REQUIRE(b.rows.size() == 1);
  CHECK(as_int(b.rows[0][0]) == 6 * 9'000'000'000LL);
}

TEST_CASE_METHOD(new_db,
                 "explain: a thread blocked on I/O names the processes whose I/O grew, the "
                 "largest the culprit, its own process left out",
                 "[store][explain][io]") {
  for (int i = 0; i < baseline_ivs + window_ivs; ++i) {
    const bool in_window = i >= baseline_ivs;
    // logger: blocked in D 4 s an interval in the window (0.1 s before); writes 1 MiB itself.
    auto logger = make_thread(500, "logger", std::vector<std::uint64_t>(20, 200'000), {}, "/app");
    logger.wakeups = {woken_by(0, "", in_window ? 4'000'000'000 : 100'000'000, 1)};
    logger.wakeups[0].kind = rsched::store::waker_kind::softirq;
    logger.io_write_bytes = 1 << 20;
    // backup: 1 GiB an interval in the window, nothing before; postgres: the same 8 MiB always,
    // and indexer a little more in the window than before.
    auto backup = make_thread(977, "backup", std::vector<std::uint64_t>(4, 100'000), {}, "/batch");
    if (in_window) {
      backup.io_write_bytes = 1ULL << 30;
    }
    auto pg = make_thread(300, "postgres", std::vector<std::uint64_t>(4, 100'000), {}, "/db");
    pg.io_read_bytes = 8 << 20;
    auto indexer = make_thread(400, "indexer", std::vector<std::uint64_t>(4, 100'000), {}, "/db");
    indexer.io_read_bytes = in_window ? 3 << 20 : 2 << 20;
    auto iv = make_interval(t0 + i * 10 * sec, {logger, backup, pg, indexer});
    iv.groups = 1 | 64 | 128;
    write_ok(w, iv);
  }
  auto r = open_reader(path);
  const auto t = run(r, window_sql("cause, culprit_pid, culprit_comm, culprit_cgroup, via, "
                                   "summary") +
                            " WHERE victim_tid = 500 AND cause_rank = 1");
  REQUIRE(t.rows.size() == 1);
  CHECK(as_text(t.rows[0][0]) == "io");
  CHECK(as_int(t.rows[0][1]) == 977);
  CHECK(as_text(t.rows[0][2]) == "backup");
  CHECK(as_text(t.rows[0][3]) == "/batch");
  CHECK(as_text(t.rows[0][4]) == "logger[500] \u2190 I/O \u2190 backup[977]");
  CHECK(as_text(t.rows[0][5]) ==
        "blocked 24.0 s in D (I/O or a kernel lock; 600 ms at its baseline rate): 100% of the "
        "extra time; the I/O that grew: backup[977] (0 B read, 6.00 GiB written; 0 B at its "
        "baseline rate), indexer[400] (18.0 MiB read, 0 B written; 12.0 MiB at its baseline "
        "rate); why() shows where it blocked");
  // The io view holds each thread's bytes per interval.
  CHECK(scalar_int(r, "SELECT sum(write_bytes) FROM io WHERE comm = 'backup'") == 6LL << 30);
}
