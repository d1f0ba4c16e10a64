// Schema v9 in the store (issue 18): each boot's CPU topology (table cpu_topology, the llc and
// node columns of the per-CPU views, CPU hotplug) and the sched_ext state per interval with its
// changes as annotations.
#include "store_test_util.hpp"

#include <fmt/format.h>

using namespace store_test;
using rsched::store::cpu_row;
using rsched::store::cpu_topology_row;
using rsched::store::sched_ext_row;

namespace {

constexpr std::int64_t t0 = 1'700'000'040'000'000'000; // a whole minute (UTC ns)
constexpr std::int64_t step = 10 * sec;

// Two LLCs on one node: CPUs 0-1 share LLC 0, CPUs 2-3 LLC 1 (a split-L3 part); CPU 3 is on
// node 1 to tell the columns apart.
std::vector<cpu_topology_row> machine() {
  return {{0, 0, 0, 0, 0, 0}, {1, 1, 0, 0, 0, 0}, {2, 2, 0, 1, 1, 0}, {3, 3, 0, 1, 1, 1}};
}

cpu_row cpu_with(std::uint32_t cpu, std::uint64_t delay_ns) {
  cpu_row c;
  c.cpu = cpu;
  auto &v = c.m[metric::cpu_sched_delay];
  v.hist.add(delay_ns);
  v.count = 1;
  v.total = delay_ns;
  return c;
}

// An interval where CPU c waited c+1 ms.
rsched::store::interval_row interval_at(std::int64_t ts) {
  std::vector<cpu_row> cpus;
  for (std::uint32_t c = 0; c < 4; ++c) {
    cpus.push_back(cpu_with(c, (c + 1) * 1'000'000ULL));
  }
  auto iv = make_interval(ts, {make_thread(7, "w", {1'000})}, std::move(cpus));
  iv.dur_ns = step;
  return iv;
}

} // namespace

TEST_CASE("the topology is stored once per boot and per change, and per-CPU views join it",
          "[store]") {
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  const std::string boot2 = "11111111-2222-3333-4444-555555555555";
  {
    auto w = open_writer(path);
    auto iv = interval_at(t0);
    iv.topology = machine();
    write_ok(w, iv);
    auto same = interval_at(t0 + step); // unchanged: rschedd passes it again after a restart
    same.topology = machine();
    write_ok(w, same);
    write_ok(w, interval_at(t0 + 2 * step)); // nothing passed: unchanged
    // CPU 3 goes offline.
    auto off = interval_at(t0 + 3 * step);
    off.topology = machine();
    off.topology.pop_back();
    write_ok(w, off);
    // ... and comes back, now reported on node 0.
    auto on = interval_at(t0 + 4 * step);
    on.topology = machine();
    on.topology[3].node = 0;
    write_ok(w, on);
  }
  {
    // A restart in the same boot with the topology in force: nothing new. Another boot: its own
    // set, from its boot, unknown ids stored as NULL.
    auto w = open_writer(path);
    auto again = interval_at(t0 + 5 * step);
    again.topology = machine();
    again.topology[3].node = 0;
    write_ok(w, again);
    auto other = interval_at(t0 + 6 * step);
    other.boot_id = boot2;
    other.topology = {{0, -1, -1, -1, 0, -1}, {1, -1, -1, -1, 0, -1}};
    write_ok(w, other);
  }
  auto r = open_reader(path);
  const std::string boot1 = make_interval(0, {}).boot_id;
  CHECK(run(r, "SELECT boot_id, since_ns, count(*) FROM cpu_topology GROUP BY 1, 2 ORDER BY 2")
            .rows.size() == 4);
  CHECK(scalar_int(r, fmt::format("SELECT count(*) FROM cpu_topology WHERE boot_id = '{}' AND "
                                  "since_ns = 0",
                                  boot1)) == 4);
  CHECK(scalar_int(r, fmt::format("SELECT count(*) FROM cpu_topology WHERE since_ns = {}",
                                  t0 + 3 * step)) == 3);
  CHECK(scalar_int(r, fmt::format("SELECT count(*) FROM cpu_topology WHERE since_ns = {}",
                                  t0 + 4 * step)) == 4);
  CHECK(scalar_int(r, fmt::format("SELECT count(*) FROM cpu_topology WHERE boot_id = '{}' AND "
                                  "since_ns = 0 AND core IS NULL AND node IS NULL AND llc = 0",
                                  boot2)) == 2);

  // Per row: the set in force at its start, of its boot.
  const auto rows = run(r, "SELECT ts, cpu, llc, node FROM cpu_sched_delay ORDER BY ts, cpu");
  REQUIRE(rows.rows.size() == 7 * 4);
  const auto at = [&](int k, int cpu) {
    return rows.rows.at(static_cast<std::size_t>(k * 4 + cpu));
  };
  CHECK(as_int(at(0, 3)[2]) == 1);
  CHECK(as_int(at(0, 3)[3]) == 1);
  CHECK(as_int(at(2, 2)[2]) == 1);
  CHECK(as_int(at(2, 1)[2]) == 0);
  CHECK(is_null(at(3, 3)[2])); // offline in the set in force
  CHECK(is_null(at(3, 3)[3]));
  CHECK(as_int(at(3, 2)[2]) == 1);
  CHECK(as_int(at(4, 3)[3]) == 0); // back, on node 0
  CHECK(as_int(at(5, 3)[3]) == 0);
  CHECK(as_int(at(6, 1)[2]) == 0); // boot 2
  CHECK(is_null(at(6, 1)[3]));
  CHECK(is_null(at(6, 2)[2])); // not in boot 2's topology
  // The other per-CPU views have the columns too, and grouping by LLC is one GROUP BY.
  CHECK(scalar_int(r, "SELECT count(*) FROM cpu_idle WHERE llc IS NOT NULL") == 0); // no rows
  const auto per_llc =
      run(r, "SELECT llc, sum(count), sum(total_ns) FROM cpu_sched_delay WHERE ts < " +
                 std::to_string(t0 + 3 * step) + " GROUP BY llc ORDER BY llc");
  REQUIRE(per_llc.rows.size() == 2);
  CHECK(as_int(per_llc.rows[0][1]) == 6);             // CPUs 0, 1 x 3 intervals
  CHECK(as_int(per_llc.rows[0][2]) == 3 * 3'000'000); // 1 + 2 ms
  CHECK(as_int(per_llc.rows[1][2]) == 3 * 7'000'000); // 3 + 4 ms
}

TEST_CASE("rollup rows of per-CPU views carry the topology of their boot", "[store][rollup]") {
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  auto w = open_writer(path);
  w.set_retention(forever());
  for (int k = 0; k < 13; ++k) { // two whole minutes and a bit
    auto iv = interval_at(t0 + k * step);
    if (k == 0) {
      iv.topology = machine();
    }
    write_ok(w, iv);
    REQUIRE(w.maintain(t0 + (k + 1) * step).ok());
  }
  auto r = open_reader(path);
  REQUIRE(scalar_int(r, "SELECT count(*) FROM cpu_sched_delay_1m") == 8);
  CHECK(run(r, "SELECT DISTINCT cpu, llc, node FROM cpu_sched_delay_1m ORDER BY cpu").rows ==
        run(r, "SELECT DISTINCT cpu, llc, node FROM cpu_sched_delay ORDER BY cpu").rows);
  CHECK(scalar_int(r, "SELECT count(*) FROM cpu_sched_delay_1m WHERE llc = 1 AND node = 1") == 2);
}

TEST_CASE("sched_ext changes: the annotation texts", "[store]") {
  using rsched::store::sched_ext_change;
  const sched_ext_row off{"disabled", "", 2};
  const sched_ext_row lavd{"enabled", "scx_lavd", 3};
  const sched_ext_row bpfland{"enabled", "scx_bpfland", 4};
  CHECK(sched_ext_change(nullptr, lavd).empty()); // nothing known before: no change to mark
  CHECK(sched_ext_change(&off, off).empty());
  CHECK(sched_ext_change(&lavd, lavd).empty());
  CHECK(sched_ext_change(&off, lavd) == "sched_ext enabled: scx_lavd");
  CHECK(sched_ext_change(&lavd, sched_ext_row{"disabled", "", 3}) ==
        "sched_ext disabled (was scx_lavd)");
  CHECK(sched_ext_change(&lavd, sched_ext_row{"disabling", "scx_lavd", 3}) ==
        "sched_ext disabled (was scx_lavd)");
  CHECK(sched_ext_change(&lavd, bpfland) == "sched_ext: scx_bpfland replaced scx_lavd");
  CHECK(sched_ext_change(&lavd, sched_ext_row{"enabled", "scx_lavd", 5}) ==
        "sched_ext re-enabled: scx_lavd");
  CHECK(sched_ext_change(&off, sched_ext_row{"disabled", "", 4}) ==
        "sched_ext enabled and disabled again");
  // Mid-transition reads mark nothing; the read after them does.
  const sched_ext_row enabling{"enabling", "scx_lavd", 3};
  CHECK(sched_ext_change(&off, enabling).empty());
  CHECK(sched_ext_change(&enabling, lavd) == "sched_ext enabled: scx_lavd");
  CHECK(sched_ext_change(&off, sched_ext_row{"enabled", "", 3}) == "sched_ext enabled: (unnamed)");
}

TEST_CASE("the sched_ext state is stored per interval and its changes become annotations",
          "[store]") {
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  const std::string hostile = "scx_\x1b[31mevil,\"q\"\xff";
  const std::vector<std::optional<sched_ext_row>> states = {
      std::nullopt,                            // a kernel without sched_ext... then one with it
      sched_ext_row{"disabled", "", 0},        // first known state: nothing to mark
      sched_ext_row{"enabled", "scx_lavd", 1}, // enabled
      sched_ext_row{"enabled", "scx_lavd", 1},
      sched_ext_row{"enabled", hostile, 2}, // replaced
      sched_ext_row{"disabled", "", 2},     // disabled
  };
  {
    auto w = open_writer(path);
    for (std::size_t k = 0; k < states.size(); ++k) {
      auto iv = interval_at(t0 + static_cast<std::int64_t>(k) * step);
      iv.sched_ext = states[k];
      write_ok(w, iv);
    }
  }
  {
    // After a restart the state before is read back from the file: enabled again is marked.
    auto w = open_writer(path);
    auto iv = interval_at(t0 + 6 * step);
    iv.sched_ext = sched_ext_row{"enabled", "scx_lavd", 3};
    write_ok(w, iv);
    // A new boot starts over: its first state is not a change.
    auto boot = interval_at(t0 + 7 * step);
    boot.boot_id = "11111111-2222-3333-4444-555555555555";
    boot.sched_ext = sched_ext_row{"disabled", "", 0};
    write_ok(w, boot);
  }
  auto r = open_reader(path);
  const auto iv = run(r, "SELECT scx_state, scx_ops, scx_enable_seq FROM intervals WHERE tier = 0 "
                         "ORDER BY start_ns");
  REQUIRE(iv.rows.size() == 8);
  CHECK(is_null(iv.rows[0][0]));
  CHECK(is_null(iv.rows[0][2]));
  CHECK(as_text(iv.rows[1][0]) == "disabled");
  CHECK(is_null(iv.rows[1][1]));
  CHECK(as_int(iv.rows[1][2]) == 0);
  CHECK(as_text(iv.rows[2][1]) == "scx_lavd");
  CHECK(as_text(iv.rows[4][1]) == hostile); // bytes as given
  const auto a = run(r, "SELECT start_ns, end_ns, source, text, tags FROM annotations ORDER BY "
                        "start_ns");
  REQUIRE(a.rows.size() == 4);
  const char *texts[] = {"sched_ext enabled: scx_lavd", nullptr, "sched_ext disabled (was ",
                         "sched_ext enabled: scx_lavd"};
  const std::int64_t at[] = {2, 4, 5, 6};
  for (std::size_t i = 0; i < 4; ++i) {
    INFO(i);
    CHECK(as_int(a.rows[i][0]) == t0 + at[i] * step); // the interval in which it changed
    CHECK(as_int(a.rows[i][1]) == t0 + (at[i] + 1) * step);
    CHECK(as_text(a.rows[i][2]) == "rschedd");
    CHECK(as_text(a.rows[i][4]) == "sched_ext");
  }
  CHECK(as_text(a.rows[0][3]) == texts[0]);
  CHECK(as_text(a.rows[1][3]) == "sched_ext: " + hostile + " replaced scx_lavd");
  CHECK(as_text(a.rows[2][3]) == "sched_ext disabled (was " + hostile + ")");
  CHECK(as_text(a.rows[3][3]) == texts[3]);
}

TEST_CASE("a 1-minute rollup keeps one sched_ext state or says mixed", "[store][rollup]") {
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  auto w = open_writer(path);
  w.set_retention(forever());
  for (int k = 0; k < 13; ++k) {
    auto iv = interval_at(t0 + k * step);
    // First minute: scx_lavd throughout; second: enabled, then disabled.
    iv.sched_ext = k < 6 || k == 6 ? sched_ext_row{"enabled", "scx_lavd", 1}
                                   : sched_ext_row{"disabled", "", 1};
    write_ok(w, iv);
    REQUIRE(w.maintain(t0 + (k + 1) * step).ok());
  }
  auto r = open_reader(path);
  const auto m = run(r, "SELECT scx_state, scx_ops, scx_enable_seq FROM intervals WHERE tier = 1 "
                        "ORDER BY start_ns");
  REQUIRE(m.rows.size() == 2);
  CHECK(as_text(m.rows[0][0]) == "enabled");
  CHECK(as_text(m.rows[0][1]) == "scx_lavd");
  CHECK(as_text(m.rows[1][0]) == "mixed");
  CHECK(as_text(m.rows[1][1]) == "mixed");
  CHECK(as_int(m.rows[1][2]) == 1);
}

TEST_CASE("a real version 8 database is upgraded in place to version 9", "[store]") {
  // tests/store/data/v8.db: 3 s recorded by rschedd at schema 8 (commit 01331f2) with
  // -g latency,sleep,migration,blame.
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  copy_fixture("v8.db", path);
  std::vector<std::vector<value>> before;
  {
    auto r = open_reader(path);
    REQUIRE(scalar_int(r, "PRAGMA user_version") == 8);
    before = run(r, "SELECT cpu, sum(count), sum(total_ns) FROM cpu_sched_delay GROUP BY cpu "
                    "ORDER BY cpu")
                 .rows;
    REQUIRE_FALSE(before.empty());
    CHECK(run_error(r, "SELECT llc FROM cpu_sched_delay").find("no such column") !=
          std::string::npos);
    CHECK(run_error(r, "SELECT * FROM inversions()").find("before schema 9") != std::string::npos);
  }
  const std::int64_t next = [&] {
    auto r = open_reader(path);
    return scalar_int(r, "SELECT max(start_ns + dur_ns) FROM intervals");
  }();
  const std::string boot = [&] {
    auto r = open_reader(path);
    return as_text(run(r, "SELECT boot_id FROM intervals LIMIT 1").rows.at(0).at(0));
  }();
  {
    auto w = open_writer(path);
    auto iv = interval_at(next);
    iv.boot_id = boot;
    iv.topology = machine();
    write_ok(w, iv);
  }
  auto r = open_reader(path);
  CHECK(scalar_int(r, "PRAGMA user_version") == rsched::store::schema_version);
  // The old rows are as they were, with the topology now recorded for their boot (since 0).
  CHECK(run(r, "SELECT cpu, sum(count), sum(total_ns) FROM cpu_sched_delay WHERE ts < " +
                   std::to_string(next) + " GROUP BY cpu ORDER BY cpu")
            .rows == before);
  CHECK(scalar_int(r, "SELECT count(*) FROM cpu_sched_delay WHERE llc IS NULL") == 0);
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals WHERE scx_state IS NOT NULL") == 0);
  CHECK(scalar_int(r, "SELECT count(*) FROM delay_blame WHERE by_prio IS NOT NULL AND ts < " +
                          std::to_string(next)) == 0);
  CHECK(scalar_int(r, "SELECT count(*) FROM inversions()") == 0);
  CHECK(as_text(run(r, "PRAGMA quick_check").rows.at(0).at(0)) == "ok");
}
