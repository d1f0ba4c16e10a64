// Schema v15 in the store: the wakeup group (view wakeups): written rows, pseudo-wakers, two rows
// of one waker summed, rollups per (comm, cgroup) of both sides, exactly, and retention keeping
// the wakers that rows still name.
#include "store_test_util.hpp"

#include <fmt/format.h>

using namespace store_test;
using rsched::store::waker_kind;
using rsched::store::wakeup_row;

namespace {

constexpr std::int64_t t0 = 1'700'000'040'000'000'000; // a whole minute (UTC ns)

wakeup_row by_process(std::uint32_t pid, std::string comm, std::string cgroup, int state,
                      std::uint64_t ns, std::uint64_t count) {
  wakeup_row w;
  w.kind = waker_kind::process;
  w.pid = pid;
  w.comm = std::move(comm);
  w.cgroup = std::move(cgroup);
  w.state = static_cast<std::uint8_t>(state);
  w.sleep_ns = ns;
  w.count = count;
  return w;
}

wakeup_row by_pseudo(waker_kind k, int state, std::uint64_t ns, std::uint64_t count) {
  wakeup_row w;
  w.kind = k;
  w.state = static_cast<std::uint8_t>(state);
  w.sleep_ns = ns;
  w.count = count;
  return w;
}

// A reader woken by its writer (S), by the block layer's softirq (D), a timer and <other>.
rsched::store::thread_row sleeper(std::uint32_t tid, const std::string &comm) {
  auto t = make_thread(tid, comm, {1'000}, {}, "/app");
  t.wakeups = {by_process(77, "writer", "/app", 0, 8'000'000, 4),
               by_pseudo(waker_kind::softirq, 1, 2'000'000, 1),
               by_pseudo(waker_kind::timer, 0, 1'000'000, 1),
               by_pseudo(waker_kind::hardirq, 2, 500, 1),
               by_pseudo(waker_kind::idle, 0, 700, 1),
               by_pseudo(waker_kind::other, 0, 300'000, 3)};
  return t;
}

} // namespace

TEST_CASE_METHOD(new_db, "wakeup rows: the view, pseudo-wakers by name, states, hostile comms",
                 "[store][wakeup]") {
  auto iv = make_interval(t0, {sleeper(10, "reader"), sleeper(11, "reader")});
  iv.threads[1].wakeups.push_back(by_process(66, "<softirq>", "/x", 1, 5, 1));
  iv.threads[1].wakeups.push_back(by_process(67, "a,\"b\"\x1b[2J", "", 2, 6, 2));
  // Two rows of one waker and state are one row, summed.
  iv.threads[1].wakeups.push_back(by_process(77, "writer", "/app", 0, 1'000'000, 1));
  write_ok(w, iv);
  auto r = open_reader(path);
  CHECK(columns_of(r, "wakeups") ==
        std::vector<std::string>{"ts", "dur", "tid", "pid", "comm", "cgroup", "by_pid", "by_comm",
                                 "by_cgroup", "state", "sleep_ns", "count", "tier"});
  CHECK(columns_of(r, "wakeups_1m") == columns_of(r, "wakeups"));
  CHECK(columns_of(r, "wakeups_1h") == columns_of(r, "wakeups"));
  auto rows = run(r, "SELECT by_pid, by_comm, state, sleep_ns, count FROM wakeups WHERE tid = 10 "
                     "ORDER BY sleep_ns DESC");
  REQUIRE(rows.rows.size() == 6);
  CHECK(as_int(rows.rows[0][0]) == 77);
  CHECK(as_text(rows.rows[0][1]) == "writer");
  CHECK(as_text(rows.rows[0][2]) == "S");
  CHECK(as_text(rows.rows[1][1]) == "<softirq>");
  CHECK(as_text(rows.rows[1][2]) == "D");
  CHECK(is_null(rows.rows[1][0])); // a pseudo-waker names no process
  CHECK(as_text(rows.rows[2][1]) == "<timer>");
  CHECK(as_text(rows.rows[3][1]) == "<other>");
  CHECK(as_text(rows.rows[4][1]) == "<idle>");
  CHECK(as_int(rows.rows[4][0]) == 0); // the idle task is pid 0, as in blame
  CHECK(as_text(rows.rows[5][1]) == "<hardirq>");
  CHECK(as_text(rows.rows[5][2]) == "other");
  CHECK(scalar_int(r, "SELECT sum(sleep_ns) FROM wakeups WHERE tid = 11 AND by_pid = 77") ==
        9'000'000);
  CHECK(scalar_int(r, "SELECT count(*) FROM wakeups WHERE tid = 11 AND by_pid = 77") == 1);
  // The process named like a pseudo-waker and the hostile comm are data.
  CHECK(scalar_int(r, "SELECT by_pid FROM wakeups WHERE tid = 11 AND by_comm = '<softirq>' AND "
                      "state = 'D' AND count = 1 AND sleep_ns = 5") == 66);
  CHECK(scalar_int(r, "SELECT sleep_ns FROM wakeups WHERE by_comm = 'a,\"b\"' || char(27) || "
                      "'[2J'") == 6);
}

TEST_CASE_METHOD(new_db, "wakeups roll up per (comm, cgroup) of sleeper and waker, exactly",
                 "[store][wakeup][rollup]") {
  for (int i = 0; i < 12; ++i) {
    auto a = sleeper(10, "reader");
    auto b = sleeper(20 + static_cast<std::uint32_t>(i), "reader");
    b.wakeups[0].pid = 78; // another writer process, same comm and cgroup
    write_ok(w, make_interval(t0 + i * 10 * sec, {a, b}));
  }
  write_ok(w, make_interval(t0 + 2 * minute, {make_thread(1, "later", {1})}));
  REQUIRE(w.maintain(t0 + 3 * minute).ok());
  auto r = open_reader(path);
  const char *q = "SELECT comm, by_comm, state, sum(sleep_ns), sum(count) FROM {} GROUP BY 1, 2, "
                  "3 ORDER BY 1, 2, 3";
  auto raw = run(r, fmt::format(fmt::runtime(q), "wakeups"));
  auto m = run(r, fmt::format(fmt::runtime(q), "wakeups_1m"));
  REQUIRE(!raw.rows.empty());
  CHECK(m.rows == raw.rows);
  // One 1-minute row per minute and (reader, writer, state): the writer processes are one comm.
  CHECK(scalar_int(r, "SELECT count(*) FROM wakeups_1m WHERE by_comm = 'writer'") == 2);
  CHECK(scalar_int(r, "SELECT count(by_pid) FROM wakeups_1m WHERE by_comm = 'writer'") == 0);
  CHECK(scalar_int(r, "SELECT sum(count) FROM wakeups_1m WHERE by_comm = 'writer'") == 12 * 8);
}

TEST_CASE_METHOD(new_db, "blocked stacks: frames stored once per stack and boot, the view, rollups",
                 "[store][wakeup]") {
  const auto blocked = [](std::uint64_t hash, std::vector<std::string> frames, std::uint64_t ns,
                          std::uint64_t n, std::uint8_t state = 1) {
    rsched::store::blocked_row b;
    b.hash = hash;
    b.state = state;
    b.frames = std::move(frames);
    b.sleep_ns = ns;
    b.count = n;
    return b;
  };
  for (int i = 0; i < 12; ++i) {
    auto t = sleeper(10, "fsyncer");
    t.blocked = {
        blocked(0xF00DULL << 40, {"io_schedule", "folio_wait_bit", "ext4_sync_file"}, 700, 3),
        blocked(0, {}, 50, 1)};
    auto u = sleeper(11, "fsyncer");
    u.blocked = {
        blocked(0xF00DULL << 40, {"io_schedule", "folio_wait_bit", "ext4_sync_file"}, 300, 1),
        // a long S sleep's stack (v16)
        blocked(0xBEEFULL << 40, {"anon_pipe_read", "vfs_read"}, 9'000'000, 1, 0)};
    write_ok(w, make_interval(t0 + i * 10 * sec, {t, u}));
  }
  write_ok(w, make_interval(t0 + 2 * minute, {make_thread(1, "later", {1})}));
  REQUIRE(w.maintain(t0 + 3 * minute).ok());
  auto r = open_reader(path);
  CHECK(columns_of(r, "blocked_stacks") ==
        std::vector<std::string>{"ts", "dur", "tid", "pid", "comm", "cgroup", "stack_id", "frames",
                                 "sleep_ns", "count", "tier", "state"});
  CHECK(columns_of(r, "blocked_stacks_1m") == columns_of(r, "blocked_stacks"));
  CHECK(columns_of(r, "blocked_stacks_1h") == columns_of(r, "blocked_stacks"));
  // One stack row and its frames, whatever the intervals and threads that name it.
  CHECK(scalar_int(r, "SELECT count(*) FROM kstack WHERE hash <> 0") == 2);
  CHECK(scalar_int(r, "SELECT count(*) FROM kstack_frame") == 5);
  // The long sleep's stack says S, with its time; the D stacks (and <other>) say D.
  auto s_rows = run(r, "SELECT frames, sum(sleep_ns), sum(count) FROM blocked_stacks WHERE state "
                       "= 'S' GROUP BY stack_id");
  REQUIRE(s_rows.rows.size() == 1);
  CHECK(as_text(s_rows.rows[0][0]) == "anon_pipe_read <- vfs_read");
  CHECK(as_int(s_rows.rows[0][1]) == 12 * 9'000'000);
  auto rows = run(r, "SELECT frames, sum(sleep_ns), sum(count) FROM blocked_stacks WHERE state = "
                     "'D' GROUP BY stack_id ORDER BY 2 DESC");
  REQUIRE(rows.rows.size() == 2);
  CHECK(as_text(rows.rows[0][0]) == "io_schedule <- folio_wait_bit <- ext4_sync_file");
  CHECK(as_int(rows.rows[0][1]) == 12 * 1000);
  CHECK(as_text(rows.rows[1][0]) == "<other>");
  CHECK(as_int(rows.rows[1][2]) == 12);
  // Rolled up per (comm, cgroup) and stack, exactly.
  auto m = run(r, "SELECT frames, sum(sleep_ns), sum(count) FROM blocked_stacks_1m WHERE state = "
                  "'D' GROUP BY stack_id ORDER BY 2 DESC");
  CHECK(m.rows == rows.rows);
  CHECK(run(r, "SELECT frames, sum(sleep_ns), sum(count) FROM blocked_stacks_1m WHERE state = "
               "'S' GROUP BY stack_id")
            .rows == s_rows.rows);
  CHECK(scalar_int(r, "SELECT count(DISTINCT tid) FROM blocked_stacks_1m") == 1);
}

TEST_CASE("schema v18: a v17 file's wakeup rows stay b-tree rows, new intervals are one pack "
          "per table, and every view and lookup reads both",
          "[store][wakeup][upgrade]") {
  // tests/store/data/v17.db: recorded by the schema-17 rschedd with the wakeup group (its
  // README).
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  copy_fixture("v17.db", path);
  const std::string wk = "SELECT * FROM wakeups ORDER BY 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12";
  const std::string bl = "SELECT * FROM blocked_stacks ORDER BY 1, 2, 3, 4, 5, 6, 7, 8, 9, 10";
  std::vector<std::vector<value>> wakeups_before, blocked_before;
  std::int64_t old_wakeup = 0, old_blocked = 0, next = 0;
  {
    auto r = open_reader(path);
    CHECK(scalar_int(r, "PRAGMA user_version") == 17);
    next = scalar_int(r, "SELECT max(start_ns + dur_ns) FROM intervals");
    wakeups_before = run(r, wk).rows;
    blocked_before = run(r, bl).rows;
    old_wakeup = scalar_int(r, "SELECT count(*) FROM thread_wakeup");
    old_blocked = scalar_int(r, "SELECT count(*) FROM thread_blocked");
    REQUIRE(wakeups_before.size() > 100);
    REQUIRE(blocked_before.size() > 100);
  }
  rsched::store::blocked_row d;
  d.hash = 0xD15CULL << 40;
  d.state = 1;
  d.frames = {"io_schedule", "blkdev_issue_flush"};
  d.sleep_ns = 4'000;
  d.count = 2;
  {
    auto w = open_writer(path);
    auto a = sleeper(900'001, "packed");
    auto b = sleeper(900'002, "packed");
    b.wakeups.push_back(by_pseudo(waker_kind::timer, 0, 9, 1)); // summed with its twin
    a.blocked = {d, d};                                         // one row, summed
    write_ok(w, make_interval(next, {a, b}));
  }
  auto r = open_reader(path);
  CHECK(scalar_int(r, "PRAGMA user_version") == rsched::store::schema_version);
  // The rows written before stay b-tree rows; the new interval's are one pack each.
  CHECK(scalar_int(r, "SELECT count(*) FROM thread_wakeup_row") == old_wakeup);
  CHECK(scalar_int(r, "SELECT count(*) FROM thread_blocked_row") == old_blocked);
  CHECK(scalar_int(r, "SELECT count(*) FROM thread_wakeup_pack") == 1);
  CHECK(scalar_int(r, "SELECT count(*) FROM thread_blocked_pack") == 1);
  CHECK(scalar_int(r, "SELECT rows FROM thread_wakeup_pack") == 12);
  CHECK(scalar_int(r, "SELECT rows FROM thread_blocked_pack") == 1);
  CHECK(scalar_int(r, "SELECT count(*) FROM thread_wakeup") == old_wakeup + 12);
  CHECK(scalar_int(r, "SELECT count(*) FROM thread_blocked") == old_blocked + 1);
  // The views read both: the old window as before, the new rows as written.
  CHECK(run(r, "SELECT * FROM (" + wk + ") WHERE ts < " + std::to_string(next)).rows ==
        wakeups_before);
  CHECK(run(r, "SELECT * FROM (" + bl + ") WHERE ts < " + std::to_string(next)).rows ==
        blocked_before);
  CHECK(scalar_int(r, "SELECT sum(sleep_ns) FROM wakeups WHERE comm = 'packed' AND by_comm = "
                      "'<timer>'") == 2 * 1'000'000 + 9);
  CHECK(scalar_int(r, "SELECT count(*) FROM wakeups WHERE comm = 'packed'") == 12);
  CHECK(scalar_int(r, "SELECT sleep_ns FROM blocked_stacks WHERE comm = 'packed'") == 8'000);
  CHECK(scalar_int(r, "SELECT count FROM blocked_stacks WHERE comm = 'packed'") == 4);
  // One thread of one interval (the lookup form) and ranges, against the tables themselves.
  const auto id = scalar_int(r, "SELECT max(id) FROM intervals");
  const auto b_thread = scalar_int(r, fmt::format("SELECT max(thread_id) FROM thread_wakeup "
                                                  "WHERE interval_id = {}",
                                                  id));
  CHECK(scalar_int(r, fmt::format("SELECT count(*) FROM thread_wakeup WHERE interval_id = {} AND "
                                  "thread_id = {}",
                                  id, b_thread)) == 6);
  CHECK(scalar_int(r, fmt::format("SELECT count(*) FROM thread_wakeup WHERE interval_id = {} AND "
                                  "thread_id = {}",
                                  id, b_thread + 1)) == 0);
  const auto iv = scalar_int(r, "SELECT interval_id FROM thread_wakeup_row LIMIT 1");
  const auto thread = scalar_int(r, "SELECT thread_id FROM thread_wakeup_row LIMIT 1");
  CHECK(scalar_int(r, fmt::format("SELECT count(*) FROM thread_wakeup WHERE interval_id = {} AND "
                                  "thread_id = {}",
                                  iv, thread)) ==
        scalar_int(r, fmt::format("SELECT count(*) FROM thread_wakeup_row WHERE interval_id = {} "
                                  "AND thread_id = {}",
                                  iv, thread)));
  CHECK(scalar_int(r, fmt::format("SELECT count(*) FROM thread_wakeup WHERE interval_id > {} AND "
                                  "interval_id <= {}",
                                  iv, id)) ==
        scalar_int(r, fmt::format("SELECT count(*) FROM thread_wakeup_row WHERE interval_id > {} "
                                  "AND interval_id <= {}",
                                  iv, id)) +
            12);
  CHECK(scalar_int(
            r, fmt::format("SELECT count(*) FROM thread_blocked WHERE interval_id = {}", id)) == 1);
  CHECK(as_text(run(r, "PRAGMA quick_check").rows.at(0).at(0)) == "ok");
}

TEST_CASE_METHOD(new_db, "retention deletes the wakeup group's packs with their intervals",
                 "[store][wakeup][rollup]") {
  for (int i = 0; i < 6; ++i) {
    write_ok(w, make_interval(t0 + i * 10 * sec, {sleeper(10, "reader")}));
  }
  write_ok(w, make_interval(t0 + 2 * minute, {make_thread(1, "later", {1})}));
  REQUIRE(w.maintain(t0 + 3 * minute).ok());
  {
    auto r = open_reader(path);
    CHECK(scalar_int(r, "SELECT count(*) FROM thread_wakeup_pack") == 6);
    CHECK(scalar_int(r, "SELECT count(*) FROM thread_wakeup_row") > 0); // the 1-minute rollup
  }
  // Past the raw tier's retention (2 days by default): the packs go with their intervals, the
  // rollup stays.
  REQUIRE(w.maintain(t0 + 3 * 24 * 60 * minute).ok());
  auto r = open_reader(path);
  CHECK(scalar_int(r, "SELECT count(*) FROM thread_wakeup_pack") == 0);
  CHECK(scalar_int(r, "SELECT count(*) FROM thread_wakeup_pack WHERE interval_id NOT IN (SELECT "
                      "id FROM intervals)") == 0);
  CHECK(scalar_int(r, "SELECT sum(count) FROM wakeups_1m WHERE comm = 'reader'") == 6 * 11);
}
