#pragma once
// A synthetic history for the SQL function tests and the docs/SQL.md examples: known samples per
// comm, a gap, a restart, an injected spike where comm "hog" has large delays, a hostile comm, one
// annotation, two CPUs with an LLC each, and a BPF scheduler enabled at 14:15 (with the
// annotation rschedd writes for it). All times are UTC on 2026-11-20.
#include "rsched/base/text.hpp"
#include "rsched/query/annotations.hpp"
#include "rsched/query/reader.hpp"
#include "rsched/store/writer.hpp"

#include "store_test_util.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

using metric = rsched::metrics::id;

namespace sql_fixture {

using store_test::minute;
using store_test::sec;
constexpr std::int64_t t1300 = std::int64_t{1795179600} * sec; // 2026-11-20T13:00:00Z
constexpr std::int64_t t1403 = t1300 + 63 * minute;
constexpr std::int64_t spike_start = t1403; // [14:03:00, 14:03:30): 3 intervals
constexpr std::int64_t spike_end = t1403 + 30 * sec;
constexpr std::int64_t gap_start = t1300 + 40 * minute; // [13:40, 13:45): not recording
constexpr std::int64_t gap_end = t1300 + 45 * minute;
constexpr std::int64_t history_end = t1300 + 90 * minute; // 14:30
constexpr std::int64_t scx_start = t1300 + 75 * minute;   // 14:15: scx_lavd enabled
constexpr std::int64_t interval = 10 * sec;
inline const std::string hostile = "ev\"il,\n\x1b[31m'; DROP\t\xff"; // 15 bytes

struct sample_set {
  std::int64_t ts;
  std::string comm;
  std::uint32_t cpu;
  std::vector<std::uint64_t> ns;
};

struct history {
  store_test::temp_dir dir;
  std::string path;
  std::vector<sample_set> samples;

  // Exact samples of `comm` ("" = all) in intervals starting in [a, b).
  [[nodiscard]] std::vector<std::uint64_t> of(const std::string &comm, std::int64_t a,
                                              std::int64_t b) const {
    std::vector<std::uint64_t> out;
    for (const auto &s : samples) {
      if ((comm.empty() || s.comm == comm) && s.ts >= a && s.ts < b) {
        out.insert(out.end(), s.ns.begin(), s.ns.end());
      }
    }
    return out;
  }
};

inline std::vector<std::uint64_t> uniform(std::mt19937_64 &rng, std::size_t n, std::uint64_t lo,
                                          std::uint64_t hi) {
  std::vector<std::uint64_t> out;
  std::uniform_int_distribution<std::uint64_t> d(lo, hi);
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(d(rng));
  }
  return out;
}

// Who the thread's waits are blamed on: during the spike, web and db wait behind hog (90 %, the
// rest the wakeup path) and hog behind web; otherwise web waits behind db, db behind web, and
// hog's waits are partly <unknown>. Deterministic (no random numbers): the samples stay as they
// are. Preemptions: hog takes the CPU from web 30 times an interval during the spike.
inline void blame(rsched::store::thread_row &t, bool spike) {
  using rsched::store::blame_row;
  using rsched::store::culprit_kind;
  const std::uint64_t total = t.m[metric::sched_delay].total;
  const std::uint64_t n = t.m[metric::sched_delay].count;
  const auto process = [](std::uint32_t pid, const char *comm, const char *cgroup, std::uint64_t ns,
                          std::uint64_t waits, std::uint64_t preempts) {
    blame_row b;
    b.kind = culprit_kind::process;
    b.pid = pid;
    b.comm = comm;
    b.cgroup = cgroup;
    b.wait_ns = ns;
    b.waits = waits;
    b.preempts = preempts;
    return b;
  };
  const auto pseudo = [](culprit_kind k, std::uint64_t ns, std::uint64_t waits) {
    blame_row b;
    b.kind = k;
    b.wait_ns = ns;
    b.waits = waits;
    return b;
  };
  const std::uint64_t main = total * 9 / 10;
  // Schema 9: how each side was scheduled. web runs at nice -5 (prio 115), db at nice 0, and
  // hog is a SCHED_FIFO priority 1 batch job (prio 98) on CPU 0: web waiting behind it is a
  // priority inversion; db behind it is not (nothing was asked for db).
  const auto sched = [&t](blame_row &b) {
    const bool hog_runs = b.comm == "hog";
    b.cpu = hog_runs ? 0 : 1;
    b.policy = hog_runs ? 1 : 0;
    b.prio = hog_runs ? 98 : b.comm == "web" ? 115 : 120;
    b.waiter_policy = t.comm == "hog" ? 1 : 0;
    b.waiter_prio = t.comm == "hog" ? 98 : t.comm == "web" ? 115 : 120;
  };
  if (t.comm == "web" || t.comm == "db") {
    if (spike) {
      t.blame = {process(30, "hog", "/batch.slice", main, n, t.comm == "web" ? 30 : 0),
                 pseudo(culprit_kind::idle, total - main, n / 2)};
    } else if (t.comm == "web") {
      t.blame = {process(20, "db", "/db.slice", main, n / 2, 1),
                 pseudo(culprit_kind::idle, total - main, n)};
    } else {
      t.blame = {process(10, "web", "/web.slice", main, n / 2, 0),
                 pseudo(culprit_kind::idle, total - main, n)};
    }
  } else if (t.comm == "hog") {
    t.blame = {process(10, "web", "/web.slice", main, n, 0),
               pseudo(culprit_kind::unknown, total - main, 1)};
  }
  for (auto &b : t.blame) {
    if (b.kind == culprit_kind::process) {
      sched(b);
    }
  }
}

// Who ended the threads' sleeps (schema 14): web sleeps on db's answers (S, 4 s of each 10-s
// interval) and on a timer, db on web's requests and on its disk (D, ended by the block
// layer's softirq); hog never sleeps. During the spike web waits on db twice as long (8 s of
// each interval: db is slow to answer), and that wait leads, one hop further, to db waiting
// behind hog.
inline void wakeups(rsched::store::thread_row &t, bool spike) {
  using rsched::store::waker_kind;
  using rsched::store::wakeup_row;
  const auto by = [](waker_kind k, std::uint32_t pid, const char *comm, const char *cgroup,
                     std::uint8_t state, std::int64_t ns, std::uint64_t count) {
    wakeup_row w;
    w.kind = k;
    w.pid = pid;
    w.comm = comm;
    w.cgroup = cgroup;
    w.state = state;
    w.sleep_ns = static_cast<std::uint64_t>(ns);
    w.count = count;
    return w;
  };
  if (t.comm == "web") {
    t.wakeups = {by(waker_kind::process, 20, "db", "/db.slice", 0,
                    spike ? interval * 8 / 10 : interval * 4 / 10, 50),
                 by(waker_kind::timer, 0, "", "", 0, interval / 10, 10)};
    // Its long S sleeps (>= --stack-sleep), waiting for db's answer on a socket.
    rsched::store::blocked_row b;
    b.hash = 0x50C;
    b.state = 0;
    b.frames = {"unix_stream_read_generic", "unix_stream_recvmsg", "sock_recvmsg"};
    b.sleep_ns = static_cast<std::uint64_t>(interval * 3 / 10);
    b.count = 20;
    t.blocked = {b};
  } else if (t.comm == "db") {
    t.wakeups = {by(waker_kind::process, 10, "web", "/web.slice", 0, interval / 4, 50),
                 by(waker_kind::softirq, 0, "", "", 1, interval / 20, 5)};
    // Its D sleeps: writing back its data file (the same stack every interval).
    rsched::store::blocked_row b;
    b.hash = 0x5EED;
    b.frames = {"io_schedule", "folio_wait_writeback", "ext4_sync_file", "do_fsync"};
    b.sleep_ns = static_cast<std::uint64_t>(interval / 20);
    b.count = 5;
    t.blocked = {b};
  }
}

inline void build(history &h) {
  h.path = h.dir.file("rsched.db");
  std::mt19937_64 rng(20261120);
  auto w = rsched::store::writer::open(h.path);
  REQUIRE(w.ok());
  for (std::int64_t ts = t1300; ts < history_end; ts += interval) {
    if (ts >= gap_start && ts < gap_end) {
      continue;
    }
    const bool spike = ts >= spike_start && ts < spike_end;
    struct who {
      std::uint32_t tid;
      std::string comm;
      std::string cgroup;
      std::uint32_t cpu;
      std::vector<std::uint64_t> ns;
    };
    std::vector<who> ws = {
        {10, "web", "/web.slice", 0,
         spike ? uniform(rng, 40, 1'000'000, 5'000'000) : uniform(rng, 40, 5'000, 200'000)},
        {20, "db", "/db.slice", 1, uniform(rng, 20, 50'000, 2'000'000)},
        {30, "hog", "/batch.slice", 0,
         spike ? uniform(rng, 300, 20'000'000, 80'000'000) : uniform(rng, 2, 10'000, 50'000)},
        {40, hostile, "/evil\"slice,\n", 1, {100'000, 100'000, 100'000}},
    };
    rsched::store::cpu_row c0;
    c0.cpu = 0;
    rsched::store::cpu_row c1;
    c1.cpu = 1;
    std::vector<rsched::store::thread_row> threads;
    for (auto &x : ws) {
      threads.push_back(store_test::make_thread(x.tid, x.comm, x.ns, {1, 2}, x.cgroup));
      blame(threads.back(), spike);
      wakeups(threads.back(), spike);
      auto &c = x.cpu == 0 ? c0 : c1;
      for (auto v : x.ns) {
        c.m[metric::cpu_sched_delay].hist.add(v);
        c.m[metric::cpu_sched_delay].total += v;
        ++c.m[metric::cpu_sched_delay].count;
      }
      h.samples.push_back({ts, x.comm, x.cpu, x.ns});
    }
    auto iv = store_test::make_interval(ts, std::move(threads), {c0, c1});
    // CPU pressure of the system and the web and batch slices; the batch slice has a CPU quota
    // and is throttled during the spike.
    const std::int64_t some = spike ? interval * 6 / 10 : interval / 20;
    iv.cgroup_cpu = {{"/", some, 0, 15 * sec, {}, {}, {}},
                     {"/batch.slice", spike ? interval / 2 : interval / 100, 0,
                      spike ? 8 * sec : sec / 10, 100, spike ? 40 : 0, spike ? 4 * sec : 0},
                     {"/web.slice", spike ? interval / 2 : interval / 50, 0, 3 * sec, {}, {}, {}}};
    // Schema 9: CPUs 0 and 1 on one node with an LLC each (recorded with the first interval of
    // each run), and the BPF scheduler scx_lavd enabled at 14:15 (rschedd's writer adds the
    // annotation "sched_ext enabled: scx_lavd").
    if (ts == t1300 || ts == gap_end) {
      iv.topology = {{0, 0, 0, 0, 0, 0}, {1, 1, 0, 0, 1, 0}};
    }
    iv.sched_ext = ts < scx_start ? rsched::store::sched_ext_row{"disabled", "", 0}
                                  : rsched::store::sched_ext_row{"enabled", "scx_lavd", 1};
    iv.final_interval = ts + interval == gap_start; // rschedd stopped before the gap
    // ... and was restarted after it without --delay-clock runqueue
    iv.delay_clock = ts < gap_start ? "runqueue" : "monotonic";
    REQUIRE(w->write(iv).ok());
  }
  rsched::query::annotation a;
  a.start_ns = t1403;
  a.end_ns = t1403 + 30 * sec;
  a.text = "deploy v42";
  a.tags = "deploy,web";
  REQUIRE(rsched::query::add_annotation(h.path, a).ok());
}

// The history, built once per test process.
inline history &fixture() {
  static history h;
  static bool built = false;
  if (!built) {
    build(h);
    built = true;
  }
  return h;
}

// A reader on the fixture with UTC display and `now` fixed at 14:30 (the end of the history).
inline rsched::query::reader open(const history &h) {
  auto r = rsched::query::reader::open(h.path);
  INFO((r.ok() ? std::string() : r.err().msg));
  REQUIRE(r.ok());
  r->set_zone(rsched::timefmt::zone::utc());
  r->set_now(history_end);
  return std::move(r).value();
}

// Runs `sql` through the built rsched-sql binary as a user would: --csv, `now` pinned to the end
// of the fixture's history, times in UTC. Returns stdout (and stderr, when asked) with CRLF turned
// into LF.
inline std::string run_rsched_sql(const std::string &db, const std::string &sql, int &status,
                                  bool with_stderr = false) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string input = (dir / ("rsched-doc-" + std::to_string(getpid()) + ".sql")).string();
  {
    std::ofstream f(input, std::ios::binary);
    f << sql;
  }
  const std::string now = std::to_string(history_end / 1'000'000'000) + "." +
                          std::to_string(1'000'000'000 + history_end % 1'000'000'000).substr(1);
  const std::string cmd = "TZ=UTC RSCHED_SQL_NOW=" + now + " " +
                          RSCHED_BINARY_DIR "/apps/rsched-sql/rsched-sql '" + db + "' --csv < '" +
                          input + (with_stderr ? "' 2>&1" : "' 2>/dev/null");
  FILE *p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) {
    out.append(buf, n);
  }
  status = pclose(p);
  std::filesystem::remove(input);
  std::string lf;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (!(out[i] == '\r' && i + 1 < out.size() && out[i + 1] == '\n')) {
      lf += out[i];
    }
  }
  return lf;
}

// What rsched-sql printed for `sql` over `db`, line by line through escape_for_terminal (so a
// hostile comm's control bytes never sit raw in an expected file; injective: `\` becomes `\\`).
inline std::string escaped_output(const std::string &db, const std::string &sql, int &status,
                                  bool with_stderr = false) {
  const std::string raw = run_rsched_sql(db, sql, status, with_stderr);
  std::istringstream rs(raw);
  std::string got;
  for (std::string l; std::getline(rs, l);) {
    got += rsched::text::escape_for_terminal(l) + "\n";
  }
  return got;
}

} // namespace sql_fixture
