// rsched-history-bench: builds a long history at the default tiers and measures its size and
// the speed of the questions users ask of it (docs/PERFORMANCE.md, "Storage and queries").
//
//   rsched-history-bench generate DB [--groups G,...] [--threads N]
//                                    [--hours H] [--raw-days D] [--1m-days D] [--1h-days D]
//   rsched-history-bench query DB [--runs N]
//   rsched-history-bench pictures DB [--runs N]
//
// generate: H hours (default 24) of 1-second intervals with N (default 200) active threads each
// second are written through rsched::store::writer and rolled up by writer::maintain(), exactly
// as rschedd does (--groups: a comma list of latency (always), migration, blame (each thread's
// delay divided among 1-3 culprit processes and <idle>), wakeup (each thread's sleeps ended by
// 1-2 processes and a timer, a D sleep now and then, with its kernel stack), pressure (PSI and
// CFS bandwidth rows of the system and every service's cgroup), or most = latency, slice, sleep
// and migration;
// waking and perf are left out; the copies back in time below carry no blame or pressure
// rows). The
// thread population: N*0.6 threads active every second, the rest of each second's N drawn from
// a pool of 2.4*N occasional threads, and a new short-lived thread (1-5 s) every other second;
// 60 comms. That recorded period is then copied back in time to fill the tiers (raw D days,
// default 2; 1-minute rollups 30 days; 1-hour rollups 365 days), each copy with thread
// identities of its own, and the tiers' cutoffs are set as retention would have left them.
// It prints the bytes per day of each tier and the size of the whole file.
//
// query: runs the four reference questions N times (default 5) through rsched::query::reader
// (the functions rsched-sql uses) and prints the first and the median time of each.
//
// pictures: draws rsched-sql's heatmaps (a day from the 1-minute tier, an hour from raw rows,
// per comm, 30 days from the 1-hour tier) and the report of the last hour N times each, through
// sql_shell::run_picture (what `rsched-sql heatmap` runs), and prints the first and median time.
#include "rsched/abi/sched_abi.h"
#include "rsched/query/reader.hpp"
#include "rsched/sql_shell/pictures.hpp"
#include "rsched/stats/histogram.hpp"
#include "rsched/store/hist_pack.hpp"
#include "rsched/store/records.hpp"
#include "rsched/store/writer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>
#include <sqlite3.h>
#include <sstream>
#include <string>
#include <vector>

using metric = rsched::metrics::id;

namespace {

using namespace rsched;
using clk = std::chrono::steady_clock;

constexpr std::int64_t sec = 1'000'000'000;
constexpr std::int64_t minute = 60 * sec;
constexpr std::int64_t hour = 60 * minute;
constexpr std::int64_t day = 24 * hour;

const char *const comms[] = {"postgres",
                             "nginx",
                             "java",
                             "python3",
                             "node",
                             "redis-server",
                             "mysqld",
                             "sshd",
                             "systemd",
                             "containerd",
                             "dockerd",
                             "kubelet",
                             "etcd",
                             "haproxy",
                             "memcached",
                             "rsyslogd",
                             "cron",
                             "bash",
                             "grpc-worker",
                             "GC Thread#0",
                             "C2 CompilerThre",
                             "VM Periodic Tas",
                             "pool-1-thread-1",
                             "kworker/0:1",
                             "kworker/1:2",
                             "ksoftirqd/0",
                             "ksoftirqd/1",
                             "rcu_preempt",
                             "migration/0",
                             "migration/1",
                             "jbd2/vda1-8",
                             "kswapd0",
                             "irq/24-virtio0",
                             "watchdogd",
                             "chronyd",
                             "dbus-daemon",
                             "polkitd",
                             "snapd",
                             "tuned",
                             "irqbalance",
                             "gunicorn",
                             "uwsgi",
                             "celery",
                             "sidekiq",
                             "puma",
                             "envoy",
                             "consul",
                             "vault",
                             "prometheus",
                             "node_exporter",
                             "grafana",
                             "fluent-bit",
                             "vector",
                             "clickhouse",
                             "kafka",
                             "zookeeper",
                             "elasticsearch",
                             "mongod",
                             "rabbitmq",
                             "php-fpm"};
constexpr std::size_t n_comms = sizeof(comms) / sizeof(comms[0]);

struct thread_ident {
  std::uint32_t tid;
  std::uint32_t pid;
  std::uint64_t start;
  const char *comm;
  bool hot;
};

// A lognormal duration in ns around `median`, clamped to [1 us, 10 s].
std::uint64_t lognormal(std::mt19937_64 &rng, double median, double sigma) {
  std::normal_distribution<double> n(0, sigma);
  const double v = median * std::exp(n(rng));
  return static_cast<std::uint64_t>(std::clamp(v, 1e3, 1e10));
}

void add_samples(store::hist_value &v, std::mt19937_64 &rng, int n, double median, double sigma) {
  for (int i = 0; i < n; ++i) {
    const auto x = lognormal(rng, median, sigma);
    v.hist.add(x);
    v.count += 1;
    v.total += x;
  }
}

// The metric groups recorded (enum rsched_group bits), and whether cgroup pressure and
// throttling rows are written (rschedd's pressure group, read from /proc and cgroupfs).
std::uint32_t g_groups = RSCHED_G_LATENCY;
bool g_pressure = false;

// One second of one active thread, in the groups of g_groups (latency, slice, sleep,
// migration).
store::thread_row thread_second(const thread_ident &id, std::mt19937_64 &rng) {
  store::thread_row t;
  t.tid = id.tid;
  t.pid = id.pid;
  t.start_time_ns = id.start;
  t.comm = id.comm;
  t.cgroup = fmt::format("/system.slice/{}.service", id.comm);
  std::geometric_distribution<int> wakeups(id.hot ? 0.12 : 0.4);
  const int n = 1 + wakeups(rng);
  store::hist_value delay;
  add_samples(delay, rng, n, 6'000, 1.3);
  t.m[metric::sched_delay].count = delay.count;
  t.m[metric::sched_delay].total = delay.total;
  t.m[metric::sched_delay].hist = delay.hist;
  for (int i = 0; i < n; ++i) {
    const std::uint64_t depth = rng() % 4 == 0 ? 1 + rng() % 3 : 0;
    t.m[metric::runq_depth].hist.add(depth);
    t.m[metric::runq_depth].count += 1;
    t.m[metric::runq_depth].total += depth;
  }
  if ((g_groups & RSCHED_G_SLICE) != 0) {
    add_samples(t.m[metric::slice_voluntary], rng, n, 40'000, 1.2);
    if (rng() % 10 < 3) {
      add_samples(t.m[metric::slice_involuntary], rng, 1 + static_cast<int>(rng() % 2), 3'000'000,
                  0.5);
    }
  }
  if ((g_groups & RSCHED_G_SLEEP) != 0) {
    add_samples(t.m[metric::sleep], rng, n, 10'000'000, 1.5);
  }
  if ((g_groups & RSCHED_G_MIGRATION) != 0 && rng() % 10 == 0) {
    t.migrations = 1 + rng() % 2;
    t.m[metric::migration_rate].hist.add(t.migrations);
    t.m[metric::migration_rate].count = 1;
    t.m[metric::migration_rate].total = t.migrations;
  }
  if ((g_groups & RSCHED_G_BLAME) != 0) {
    // As rschedd writes them: the thread's delay divided exactly among 1-3 culprit processes
    // (threads of other comms) and <idle>, each counted in the waits it had a part in.
    const int k = 1 + static_cast<int>(rng() % 3);
    std::uint64_t left = delay.total;
    for (int c = 0; c <= k && left > 0; ++c) {
      store::blame_row b;
      if (c == k) {
        b.kind = store::culprit_kind::idle;
        b.wait_ns = left;
      } else {
        const std::size_t ci = rng() % n_comms;
        b.pid = 1000 + static_cast<std::uint32_t>(ci) * 8;
        b.comm = comms[ci];
        b.cgroup = fmt::format("/system.slice/{}.service", comms[ci]);
        b.wait_ns = c + 1 == k ? left * 9 / 10 : left / 2;
        b.cpu = static_cast<int>(rng() % 2);
        b.policy = 0;
        b.prio = 120;
        b.waiter_policy = 0;
        b.waiter_prio = 120;
        b.preempts = rng() % 4 == 0 ? 1 : 0;
      }
      b.waits = 1 + rng() % static_cast<std::uint64_t>(n);
      left -= b.wait_ns;
      t.blame.push_back(std::move(b));
    }
  }
  if ((g_groups & RSCHED_G_WAKEUP) != 0) {
    // As rschedd writes them: the second's sleeps, ended by 1-2 processes of other comms (S) and
    // a timer (S); one in ten threads also blocks in D (fsync) now and then, with its stack.
    const int k = 1 + static_cast<int>(rng() % 2);
    for (int c = 0; c < k; ++c) {
      const std::size_t ci = rng() % n_comms;
      store::wakeup_row w;
      w.kind = store::waker_kind::process;
      w.pid = 1000 + static_cast<std::uint32_t>(ci) * 8;
      w.comm = comms[ci];
      w.cgroup = fmt::format("/system.slice/{}.service", comms[ci]);
      w.state = 0;
      w.sleep_ns = lognormal(rng, 50'000'000, 1.0);
      w.count = 1 + rng() % static_cast<std::uint64_t>(n);
      t.wakeups.push_back(std::move(w));
    }
    store::wakeup_row timer;
    timer.kind = store::waker_kind::timer;
    timer.state = 0;
    timer.sleep_ns = lognormal(rng, 200'000'000, 0.8);
    timer.count = 1;
    t.wakeups.push_back(std::move(timer));
    if (id.tid % 10 == 0 && rng() % 4 == 0) {
      store::wakeup_row d;
      d.kind = store::waker_kind::softirq;
      d.state = 1;
      d.sleep_ns = lognormal(rng, 5'000'000, 1.0);
      d.count = 1;
      const std::uint64_t d_ns = d.sleep_ns;
      t.wakeups.push_back(std::move(d));
      store::blocked_row b;
      b.hash = 0xF5'0000ULL + id.tid % 3;
      b.state = 1;
      b.frames = {"__schedule",           "schedule",
                  "io_schedule",          "folio_wait_bit",
                  "folio_wait_writeback", "__filemap_fdatawait_range",
                  "ext4_sync_file"};
      b.sleep_ns = d_ns;
      b.count = 1;
      t.blocked.push_back(std::move(b));
    }
  }
  return t;
}

struct population {
  std::vector<thread_ident> hot;
  std::vector<thread_ident> occasional;
  struct shortlived {
    thread_ident id;
    std::int64_t until;
  };
  std::vector<shortlived> live;
  std::uint32_t next_tid = 100000;
};

population make_population(int n) {
  population p;
  const int hot = n * 6 / 10;
  const int pool = n * 24 / 10;
  for (int i = 0; i < hot + pool; ++i) {
    const auto tid = static_cast<std::uint32_t>(1000 + i);
    thread_ident id{tid, 1000 + static_cast<std::uint32_t>(i / 8) * 8,
                    static_cast<std::uint64_t>(i) * 1'000'000,
                    comms[static_cast<std::size_t>(i) % n_comms], i < hot};
    (i < hot ? p.hot : p.occasional).push_back(id);
  }
  return p;
}

// The threads and CPUs of one 1-second interval starting at `t`.
store::interval_row second(population &p, int n, std::int64_t t, std::mt19937_64 &rng) {
  store::interval_row iv;
  iv.start_ns = t;
  iv.dur_ns = sec;
  iv.boot_id = "6d1f3a52-2c4b-4f0e-9b7a-3e5d8c1f2a90";
  iv.groups = g_groups;
  // A new short-lived thread every other second, active for 1-5 s.
  if (rng() % 2 == 0) {
    const std::uint32_t tid = p.next_tid++;
    p.live.push_back({{tid, tid, static_cast<std::uint64_t>(t), comms[rng() % n_comms], false},
                      t + static_cast<std::int64_t>(1 + rng() % 5) * sec});
  }
  std::erase_if(p.live, [&](const auto &s) { return s.until <= t; });
  for (const auto &id : p.hot) {
    iv.threads.push_back(thread_second(id, rng));
  }
  const int rest = n - static_cast<int>(p.hot.size()) - static_cast<int>(p.live.size());
  for (int i = 0; i < rest; ++i) {
    iv.threads.push_back(thread_second(p.occasional[rng() % p.occasional.size()], rng));
  }
  for (const auto &s : p.live) {
    iv.threads.push_back(thread_second(s.id, rng));
  }
  for (std::uint32_t c = 0; c < 2; ++c) {
    store::cpu_row cpu;
    cpu.cpu = c;
    for (std::size_t i = c; i < iv.threads.size(); i += 2) {
      const auto &th = iv.threads[i];
      auto &d = cpu.m[metric::cpu_sched_delay];
      (void)stats::merge_into(d.hist, th.m[metric::sched_delay].hist);
      d.count += th.m[metric::sched_delay].count;
      d.total += th.m[metric::sched_delay].total;
    }
    add_samples(cpu.m[metric::cpu_idle], rng, 200, 500'000, 1.5);
    iv.cpus.push_back(cpu);
  }
  if (g_pressure) {
    // The system and every service's cgroup, as rschedd reads them each interval: PSI some
    // and full, usage, and CFS bandwidth (one service in ten throttled now and then).
    const auto row = [&](std::string cg, bool quota) {
      store::cgroup_cpu_row c;
      c.cgroup = std::move(cg);
      c.some_ns = static_cast<std::int64_t>(rng() % (sec / 5));
      c.full_ns = *c.some_ns / 4;
      c.usage_ns = static_cast<std::int64_t>(rng() % (2 * sec));
      if (quota) {
        c.periods = 10;
        c.throttled = rng() % 20 == 0 ? static_cast<std::int64_t>(1 + rng() % 5) : 0;
        c.throttled_ns = *c.throttled * 20'000'000;
      }
      iv.cgroup_cpu.push_back(std::move(c));
    };
    row("/", false);
    row("/system.slice", false);
    for (std::size_t ci = 0; ci < n_comms; ++ci) {
      row(fmt::format("/system.slice/{}.service", comms[ci]), ci % 10 == 0);
    }
  }
  return iv;
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) {
    return 0;
  }
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(std::lround(p / 100 * static_cast<double>(v.size() - 1)))];
}

double ms_since(clk::time_point t) {
  return std::chrono::duration<double, std::milli>(clk::now() - t).count();
}

// Direct SQL for the copies (the public API writes one interval at a time, by design).
struct raw_db {
  sqlite3 *db = nullptr;
  explicit raw_db(const std::string &path) {
    if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
      throw std::runtime_error(sqlite3_errmsg(db));
    }
    sqlite3_busy_timeout(db, 60000);
  }
  ~raw_db() { sqlite3_close(db); }
  raw_db(const raw_db &) = delete;
  raw_db &operator=(const raw_db &) = delete;
  void exec(const std::string &sql) const {
    char *msg = nullptr;
    if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &msg) != SQLITE_OK) {
      std::string m = msg != nullptr ? msg : "?";
      sqlite3_free(msg);
      throw std::runtime_error(m + " in: " + sql.substr(0, 200));
    }
  }
  [[nodiscard]] std::int64_t scalar(const std::string &sql) const {
    sqlite3_stmt *st = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
      throw std::runtime_error(sqlite3_errmsg(db));
    }
    std::int64_t v = 0;
    if (sqlite3_step(st) == SQLITE_ROW) {
      v = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
    return v;
  }
};

// The packed raw rows of the intervals `src` selects, with interval ids and thread ids moved by
// id_off and th_off (schema 8: the thread ids are inside the packs, so each is rebuilt), into
// thread_hist_pack; their thread ids into temp.copy_threads.
void copy_packs(const raw_db &db, const std::string &src, std::int64_t id_off,
                std::int64_t th_off) {
  sqlite3_stmt *sel = nullptr;
  sqlite3_stmt *ins = nullptr;
  sqlite3_stmt *tid = nullptr;
  const std::string q = "SELECT interval_id, metric, data FROM thread_hist_pack WHERE "
                        "interval_id IN (" +
                        src + ") ORDER BY interval_id, metric";
  if (sqlite3_prepare_v2(db.db, q.c_str(), -1, &sel, nullptr) != SQLITE_OK ||
      sqlite3_prepare_v2(db.db, "INSERT INTO thread_hist_pack VALUES(?1, ?2, ?3, ?4)", -1, &ins,
                         nullptr) != SQLITE_OK ||
      sqlite3_prepare_v2(db.db, "INSERT OR IGNORE INTO temp.copy_threads VALUES(?1)", -1, &tid,
                         nullptr) != SQLITE_OK) {
    const std::string m = sqlite3_errmsg(db.db);
    sqlite3_finalize(sel);
    sqlite3_finalize(ins);
    sqlite3_finalize(tid);
    throw std::runtime_error(m);
  }
  // Read all first: inserting into the table being read would be read again.
  struct pack_row {
    std::int64_t iv, metric;
    std::vector<std::uint8_t> data;
  };
  std::vector<pack_row> rows;
  while (sqlite3_step(sel) == SQLITE_ROW) {
    const auto *p = static_cast<const std::uint8_t *>(sqlite3_column_blob(sel, 2));
    rows.push_back({sqlite3_column_int64(sel, 0), sqlite3_column_int64(sel, 1),
                    std::vector<std::uint8_t>(p, p + sqlite3_column_bytes(sel, 2))});
  }
  sqlite3_finalize(sel);
  store::pack_builder b;
  std::string err;
  for (const auto &r : rows) {
    auto entries = store::unpack(r.data);
    if (!entries) {
      err = entries.err().msg;
      break;
    }
    b.clear();
    for (const auto &e : *entries) {
      b.add(e.thread_id + th_off, e.count, e.total, e.hist);
      sqlite3_reset(tid);
      sqlite3_bind_int64(tid, 1, e.thread_id);
      sqlite3_step(tid);
    }
    const auto &blob = b.finish();
    sqlite3_reset(ins);
    sqlite3_bind_int64(ins, 1, r.iv + id_off);
    sqlite3_bind_int64(ins, 2, r.metric);
    sqlite3_bind_int64(ins, 3, static_cast<std::int64_t>(b.size()));
    sqlite3_bind_blob(ins, 4, blob.data(), static_cast<int>(blob.size()), SQLITE_STATIC);
    if (sqlite3_step(ins) != SQLITE_DONE) {
      err = sqlite3_errmsg(db.db);
      break;
    }
  }
  sqlite3_finalize(ins);
  sqlite3_finalize(tid);
  if (!err.empty()) {
    throw std::runtime_error(err);
  }
}

// Copies the rows of `tier` that start in [from, from + span) to start `shift` ns earlier, with
// thread identities of their own (boot id suffixed with `tag`).
void copy_back(const raw_db &db, int tier, std::int64_t from, std::int64_t span, std::int64_t shift,
               int tag) {
  const std::int64_t id_off = db.scalar("SELECT coalesce(max(id), 0) FROM intervals") + 1;
  const std::int64_t th_off = db.scalar("SELECT coalesce(max(id), 0) FROM thread") + 1;
  const std::string src =
      fmt::format("SELECT id FROM intervals WHERE tier = {} AND start_ns >= {} AND start_ns < {}",
                  tier, from, from + span);
  db.exec("BEGIN");
  db.exec("CREATE TEMP TABLE IF NOT EXISTS copy_threads(id INTEGER PRIMARY KEY)");
  db.exec("DELETE FROM temp.copy_threads");
  db.exec(fmt::format("INSERT OR IGNORE INTO temp.copy_threads SELECT thread_id FROM "
                      "thread_hist_row WHERE interval_id IN ({})",
                      src));
  copy_packs(db, src, id_off, th_off);
  db.exec(fmt::format(
      "INSERT INTO thread(id, boot_id, tid, pid, start_time_ns, comm, cgroup, last_ns) "
      "SELECT id + {0}, boot_id || '-{1}', tid, pid, start_time_ns, comm, cgroup, last_ns - {2} "
      "FROM thread WHERE id IN (SELECT id FROM temp.copy_threads)",
      th_off, tag, shift));
  db.exec(fmt::format(
      "INSERT INTO intervals(id, start_ns, dur_ns, boot_id, flags, drops_task_state, "
      "drops_graveyard, drops_stale_tid, drops_no_rq, discarded_too_long, groups, "
      "drops_perf_read, tier, collect_ns, write_ns, maint_ns, cpu_ns, rss_bytes, bpf_run_ns, "
      "bpf_run_cnt) SELECT id + {0}, start_ns - {1}, dur_ns, boot_id || '-{2}', flags, "
      "drops_task_state, drops_graveyard, drops_stale_tid, drops_no_rq, discarded_too_long, "
      "groups, drops_perf_read, tier, collect_ns, write_ns, maint_ns, cpu_ns, rss_bytes, "
      "bpf_run_ns, bpf_run_cnt FROM intervals WHERE id IN ({3}) ORDER BY id",
      id_off, shift, tag, src));
  db.exec(fmt::format("INSERT INTO thread_hist_row SELECT interval_id + {0}, metric, "
                      "thread_id + {1}, count, total, hist FROM thread_hist_row WHERE interval_id "
                      "IN ({2}) ORDER BY interval_id, metric, thread_id",
                      id_off, th_off, src));
  db.exec(fmt::format("INSERT INTO cpu_hist SELECT interval_id + {0}, metric, cpu, count, total, "
                      "hist FROM cpu_hist WHERE interval_id IN ({1})",
                      id_off, src));
  db.exec(fmt::format("INSERT INTO thread_migration SELECT interval_id + {0}, thread_id + {1}, "
                      "count, cross_ccx, cross_numa FROM thread_migration WHERE interval_id IN "
                      "({2})",
                      id_off, th_off, src));
  db.exec("COMMIT");
}

int generate(const std::string &path, int n, int hours, int raw_days, int m_days, int h_days) {
  if (std::filesystem::exists(path)) {
    fmt::print(stderr, "rsched-history-bench: {} exists; give a new path\n", path);
    return 2;
  }
  const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
  const std::int64_t end = now / hour * hour;
  const std::int64_t begin = end - hours * hour;
  auto w = store::writer::open(path);
  if (!w) {
    fmt::print(stderr, "rsched-history-bench: {}\n", w.err().msg);
    return 1;
  }
  store::retention forever;
  forever.keep_raw_ns = forever.keep_1m_ns = forever.keep_1h_ns = 0;
  forever.max_bytes = 0;
  w->set_retention(forever);

  std::mt19937_64 rng(20261123);
  population pop = make_population(n);
  std::vector<double> write_ms;
  std::vector<double> maint_ms;
  std::uint64_t threads_written = 0;
  const auto t_start = clk::now();
  for (std::int64_t t = begin; t < end + 10 * sec; t += sec) {
    auto iv = second(pop, n, t, rng);
    threads_written += iv.threads.size();
    auto t0 = clk::now();
    if (auto r = w->write(iv); !r) {
      fmt::print(stderr, "rsched-history-bench: {}\n", r.err().msg);
      return 1;
    }
    write_ms.push_back(ms_since(t0));
    t0 = clk::now();
    if (auto r = w->maintain(t + sec); !r) {
      fmt::print(stderr, "rsched-history-bench: {}\n", r.err().msg);
      return 1;
    }
    maint_ms.push_back(ms_since(t0));
  }
  const double gen_s = ms_since(t_start) / 1000;
  const std::size_t intervals = write_ms.size();
  fmt::print("recorded {} h of 1 s intervals, {} active threads/s ({:.0f} thread rows/interval) "
             "in {:.0f} s\n",
             hours, n, static_cast<double>(threads_written) / static_cast<double>(intervals),
             gen_s);
  fmt::print("  write per interval:       p50 {:.2f} ms  p99 {:.2f} ms  max {:.2f} ms\n",
             pct(write_ms, 50), pct(write_ms, 99), pct(write_ms, 100));
  fmt::print("  maintain per interval:    p50 {:.2f} ms  p99 {:.2f} ms  max {:.2f} ms\n",
             pct(maint_ms, 50), pct(maint_ms, 99), pct(maint_ms, 100));

  raw_db db(path);
  db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
  // Bytes per day of each tier, from the recorded period (extrapolated to 24 h).
  const double per_day = 24.0 / hours;
  // Copy one day of each tier into a scratch file to weigh it on its own.
  std::int64_t tier_bytes[3] = {0, 0, 0};
  for (int k = 0; k < 3; ++k) {
    const std::string scratch = path + ".tier";
    std::filesystem::remove(scratch);
    db.exec(fmt::format("ATTACH '{}' AS s", scratch));
    db.exec("CREATE TABLE s.intervals AS SELECT * FROM intervals WHERE tier = " +
            std::to_string(k));
    db.exec("CREATE TABLE s.thread_hist_row(interval_id INTEGER NOT NULL, metric INTEGER NOT "
            "NULL, thread_id INTEGER NOT NULL, count INTEGER NOT NULL, total INTEGER NOT NULL, "
            "hist BLOB NOT NULL, PRIMARY KEY(interval_id, metric, thread_id)) WITHOUT ROWID");
    db.exec("INSERT INTO s.thread_hist_row SELECT * FROM thread_hist_row WHERE interval_id IN "
            "(SELECT id FROM s.intervals) ORDER BY 1, 2, 3");
    db.exec("CREATE TABLE s.thread_hist_pack(interval_id INTEGER NOT NULL, metric INTEGER NOT "
            "NULL, threads INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY(interval_id, "
            "metric))");
    db.exec("INSERT INTO s.thread_hist_pack SELECT * FROM thread_hist_pack WHERE interval_id IN "
            "(SELECT id FROM s.intervals) ORDER BY 1, 2");
    db.exec("CREATE TABLE s.cpu_hist AS SELECT * FROM cpu_hist WHERE interval_id IN (SELECT id "
            "FROM s.intervals)");
    db.exec("CREATE TABLE s.thread_migration AS SELECT * FROM thread_migration WHERE "
            "interval_id IN (SELECT id FROM s.intervals)");
    db.exec("DETACH s");
    tier_bytes[k] = static_cast<std::int64_t>(std::filesystem::file_size(scratch));
    std::filesystem::remove(scratch);
  }
  // Thread identities (table and its unique index), from SQLite's dbstat.
  const std::int64_t threads_bytes =
      db.scalar("SELECT sum(pgsize) FROM dbstat WHERE name IN ('thread', "
                "'sqlite_autoindex_thread_1')");
  fmt::print("  bytes per day: raw {:.1f} MB, 1-minute {:.1f} MB, 1-hour {:.2f} MB "
             "(thread identities: {:.1f} MB per day)\n",
             static_cast<double>(tier_bytes[0]) * per_day / 1e6,
             static_cast<double>(tier_bytes[1]) * per_day / 1e6,
             static_cast<double>(tier_bytes[2]) * per_day / 1e6,
             static_cast<double>(threads_bytes) * per_day / 1e6);
  fmt::print("  bytes per active thread-second (raw tier): {:.1f}\n",
             static_cast<double>(tier_bytes[0]) / static_cast<double>(threads_written));

  // Fill the tiers back in time from the recorded period.
  const std::int64_t span = hours * hour;
  const auto t_copy = clk::now();
  int tag = 0;
  auto fill = [&](int tier, int days) {
    for (std::int64_t shift = span; shift < days * day; shift += span) {
      copy_back(db, tier, begin, span, shift, ++tag);
    }
  };
  fill(0, raw_days);
  fill(1, m_days);
  fill(2, h_days);
  db.exec(fmt::format("UPDATE tiers SET cutoff_ns = {} WHERE tier = 0", end - raw_days * day));
  db.exec(fmt::format("UPDATE tiers SET cutoff_ns = {} WHERE tier = 1", end - m_days * day));
  db.exec(fmt::format("UPDATE tiers SET cutoff_ns = {} WHERE tier = 2", end - h_days * day));
  db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
  db.exec("ANALYZE");
  fmt::print("filled raw {} d, 1-minute {} d, 1-hour {} d by copying in {:.0f} s\n", raw_days,
             m_days, h_days, ms_since(t_copy) / 1000);
  fmt::print("  file: {:.2f} GB ({} intervals rows, {} thread identities)\n",
             static_cast<double>(std::filesystem::file_size(path)) / 1e9,
             db.scalar("SELECT count(*) FROM intervals"), db.scalar("SELECT count(*) FROM thread"));
  fmt::print("  end of history: {} (UTC ns; the query mode's 'now')\n", end);
  return 0;
}

// The end of the recorded raw history, on a whole minute; -1 (said on stderr) on an error.
std::int64_t history_end(query::reader &r) {
  std::int64_t end = 0;
  query::result_sink sink;
  sink.on_row = [&](const std::vector<query::value> &row) {
    if (const auto *v = std::get_if<std::int64_t>(&row[0])) {
      end = *v;
    }
  };
  if (auto e = r.exec("SELECT max(start_ns + dur_ns) FROM intervals WHERE tier = 0", sink); !e) {
    fmt::print(stderr, "rsched-history-bench: {}\n", e.err().msg);
    return -1;
  }
  return end / minute * minute;
}

// The main views' questions of issue 19, each answered by the routed view (whole hours and
// minutes from the rollups) and by main.sched_delay, the file's own view (the finest tier
// kept at every moment: what every release before schema 10 read), with a check that both
// answers are the same rows. The finest side runs once (it takes seconds).
int routed(query::reader &r, std::int64_t end, int runs) {
  const auto time_of =
      [&](const std::string &sql, int n,
          std::vector<std::vector<query::value>> &out) -> std::optional<std::vector<double>> {
    std::vector<double> t;
    for (int i = 0; i < n; ++i) {
      out.clear();
      query::result_sink s;
      s.on_row = [&](const std::vector<query::value> &row) { out.push_back(row); };
      const auto t0 = clk::now();
      if (auto e = r.exec(sql, s); !e) {
        fmt::print(stderr, "rsched-history-bench: {}: {}\n", sql, e.err().msg);
        return std::nullopt;
      }
      t.push_back(ms_since(t0));
    }
    return t;
  };
  struct q {
    std::string name;
    std::string sql; // {V}: the view
  };
  std::vector<q> qs;
  for (const auto &[name, w] : {std::pair{"hour", hour}, std::pair{"day", day},
                                std::pair{"week", 7 * day}, std::pair{"30 days", 30 * day}}) {
    qs.push_back({fmt::format("p99 per comm from the main view, the last {}", name),
                  fmt::format("SELECT comm, hist_percentile(hist, 99) FROM {{V}} WHERE ts >= {} "
                              "GROUP BY comm ORDER BY comm",
                              end - w)});
  }
  qs.push_back({"p99 per thread (tid) from the main view, the last hour",
                fmt::format("SELECT tid, hist_percentile(hist, 99) FROM {{V}} WHERE ts >= {} "
                            "GROUP BY tid ORDER BY tid",
                            end - hour)});
  fmt::print(
      "\nThe main view routed (rollups for whole hours and minutes) against main.sched_delay "
      "(the finest tier kept):\n");
  for (const auto &x : qs) {
    std::vector<std::vector<query::value>> a;
    std::vector<std::vector<query::value>> b;
    auto ta = time_of(fmt::format(fmt::runtime(x.sql), fmt::arg("V", "sched_delay")), runs, a);
    auto tiers = r.take_tier_reads();
    auto tb = time_of(fmt::format(fmt::runtime(x.sql), fmt::arg("V", "main.sched_delay")), 1, b);
    if (!ta || !tb) {
      return 1;
    }
    std::int64_t by_tier[3] = {0, 0, 0};
    for (const auto &t : tiers) {
      by_tier[std::clamp(t.tier, 0, 2)] += t.rows;
    }
    const std::string read = fmt::format("rows read per run: 1h {}, 1m {}, finest {}",
                                         by_tier[2] / runs, by_tier[1] / runs, by_tier[0] / runs);
    fmt::print("{:<58} routed first {:8.1f} ms median {:8.1f} ms | finest {:9.1f} ms | {} | {} "
               "rows, {}\n",
               x.name, ta->front(), pct(*ta, 50), tb->front(), a == b ? "same answer" : "DIFFERENT",
               a.size(), read);
  }
  const std::vector<q> fns = {
      {"spikes('sched_delay', '3x') over the last day",
       fmt::format("SELECT count(*) FROM spikes('sched_delay', '3x', {}, {})", end - day, end)},
      {"compare() of the last day with the day before",
       fmt::format("SELECT count(*) FROM compare({}, {}, {}, {})", end - 2 * day, end - day,
                   end - day, end)},
      {"blame('postgres') over the last hour",
       fmt::format("SELECT count(*) FROM blame('postgres', {}, {})", end - hour, end)},
      {"explain() of the last hour (victims: every thread)",
       fmt::format("SELECT count(*) FROM explain({}, {})", end - hour, end)},
  };
  for (const auto &x : fns) {
    std::vector<std::vector<query::value>> a;
    auto t = time_of(x.sql, std::max(1, std::min(runs, 2)), a);
    if (!t) {
      return 1;
    }
    fmt::print("{:<58} first {:8.1f} ms median {:8.1f} ms\n", x.name, t->front(), pct(*t, 50));
  }
  return 0;
}

int run_queries(const std::string &path, int runs) {
  auto r = query::reader::open(path);
  if (!r) {
    fmt::print(stderr, "rsched-history-bench: {}\n", r.err().msg);
    return 1;
  }
  const std::int64_t end = history_end(*r);
  if (end < 0) {
    return 1;
  }
  struct q {
    const char *name;
    std::string sql;
  };
  const std::vector<q> qs = {
      {"p99 per comm, a 5-minute window (raw 1 s rows)",
       fmt::format("SELECT comm, hist_percentile(hist, 99) FROM sched_delay WHERE ts >= {} AND "
                   "ts < {} GROUP BY comm",
                   end - 3 * hour - 5 * minute, end - 3 * hour)},
      {"p99 per comm, the last hour (1-minute tier)",
       fmt::format("SELECT comm, hist_percentile(hist, 99) FROM sched_delay_1m WHERE ts >= {} "
                   "GROUP BY comm",
                   end - hour)},
      {"p99 per comm, a whole day (1-hour tier)",
       fmt::format("SELECT comm, hist_percentile(hist, 99) FROM sched_delay_1h WHERE ts >= {} AND "
                   "ts < {} GROUP BY comm",
                   end - 5 * day, end - 4 * day)},
      {"worst 10 minutes of the month (p99 of all CPUs, 1-minute tier)",
       fmt::format("SELECT ts / 600000000000 AS w, hist_percentile(hist, 99) AS p99 FROM "
                   "cpu_sched_delay_1m WHERE ts >= {} GROUP BY w ORDER BY p99 DESC LIMIT 1",
                   end - 30 * day)},
      {"p99 per comm, a 5-minute window 20 days ago (finest tier kept: 1 minute)",
       fmt::format("SELECT comm, hist_percentile(hist, 99) FROM sched_delay WHERE ts >= {} AND "
                   "ts < {} GROUP BY comm",
                   end - 20 * day - 5 * minute, end - 20 * day)},
  };
  for (const auto &x : qs) {
    std::vector<double> t;
    std::size_t rows = 0;
    for (int i = 0; i < runs; ++i) {
      query::result_sink s;
      std::size_t n = 0;
      s.on_row = [&](const std::vector<query::value> &) { ++n; };
      const auto t0 = clk::now();
      if (auto e = r->exec(x.sql, s); !e) {
        fmt::print(stderr, "rsched-history-bench: {}: {}\n", x.name, e.err().msg);
        return 1;
      }
      t.push_back(ms_since(t0));
      rows = n;
    }
    fmt::print("{:<75} first {:7.1f} ms  median {:7.1f} ms  ({} rows)\n", x.name, t.front(),
               pct(t, 50), rows);
  }
  return routed(*r, end, runs);
}

// The pictures of rsched-sql on the year: a day's heatmap from the 1-minute tier, an hour's from
// raw rows, the same hour split per comm, and the report of the last hour; each drawn `runs`
// times (reading, binning and the SVG or HTML text; nothing written to disk).
int pictures(const std::string &path, int runs) {
  auto r = query::reader::open(path);
  if (!r) {
    fmt::print(stderr, "rsched-history-bench: {}\n", r.err().msg);
    return 1;
  }
  r->set_zone(timefmt::zone::utc());
  const std::int64_t end = history_end(*r);
  if (end < 0) {
    return 1;
  }
  const auto secs = [](std::int64_t ns) { return std::to_string(ns / 1'000'000'000); };
  struct p {
    const char *name;
    std::vector<std::string> args; // rsched-sql heatmap/report arguments
    bool report = false;
  };
  const std::vector<p> ps = {
      {"heatmap of a day, 4 days ago (1-minute tier, 10 min columns)",
       {"--from", secs(end - 5 * day), "--to", secs(end - 4 * day)}},
      {"heatmap of an hour, 3 h ago (raw 1 s rows, 30 s columns)",
       {"--from", secs(end - 4 * hour), "--to", secs(end - 3 * hour)}},
      {"heatmap of that hour per comm (top 6)",
       {"--from", secs(end - 4 * hour), "--to", secs(end - 3 * hour), "--by", "comm"}},
      {"heatmap of 30 days (1-hour tier, 6 h columns)",
       {"--from", secs(end - 30 * day), "--to", secs(end)}},
      {"report of the last hour", {"--from", secs(end - hour), "--to", secs(end)}, true},
  };
  for (const auto &x : ps) {
    std::vector<double> t;
    std::size_t bytes = 0;
    for (int i = 0; i < runs; ++i) {
      std::ostringstream out;
      sql_shell::picture_target target;
      target.out = &out;
      std::string note;
      const auto t0 = clk::now();
      if (auto e =
              sql_shell::run_picture(*r, x.report ? "report" : "heatmap", x.args, target, note);
          !e) {
        fmt::print(stderr, "rsched-history-bench: {}: {}\n", x.name, e.err().msg);
        return 1;
      }
      t.push_back(ms_since(t0));
      bytes = out.str().size();
    }
    fmt::print("{:<66} first {:7.1f} ms  median {:7.1f} ms  ({} KB)\n", x.name, t.front(),
               pct(t, 50), bytes / 1000);
  }
  return 0;
}

int arg_int(const std::vector<std::string> &a, const std::string &flag, int dflt) {
  for (std::size_t i = 0; i + 1 < a.size(); ++i) {
    if (a[i] == flag) {
      return std::stoi(a[i + 1]);
    }
  }
  return dflt;
}

} // namespace

int main(int argc, char **argv) {
  const std::vector<std::string> a(argv + 1, argv + argc);
  try {
    for (std::size_t i = 0; i + 1 < a.size(); ++i) {
      if (a[i] == "--groups") {
        // A comma list of latency, migration, blame, pressure, or most (latency, slice, sleep
        // and migration); latency is always recorded.
        g_groups = RSCHED_G_LATENCY;
        std::string list = a[i + 1] + ",";
        for (std::size_t at = 0, comma; (comma = list.find(',', at)) != std::string::npos;
             at = comma + 1) {
          const std::string g = list.substr(at, comma - at);
          if (g == "latency") {
          } else if (g == "migration") {
            g_groups |= RSCHED_G_MIGRATION;
          } else if (g == "blame") {
            g_groups |= RSCHED_G_BLAME;
          } else if (g == "wakeup") {
            g_groups |= RSCHED_G_WAKEUP;
          } else if (g == "pressure") {
            g_pressure = true;
          } else if (g == "most") {
            g_groups |= RSCHED_G_SLICE | RSCHED_G_SLEEP | RSCHED_G_MIGRATION;
          } else {
            fmt::print(stderr,
                       "rsched-history-bench: --groups: unknown group '{}' (expected "
                       "latency, migration, blame, wakeup, pressure or most)\n",
                       g);
            return 2;
          }
        }
      }
    }
    if (a.size() >= 2 && a[0] == "generate") {
      return generate(a[1], arg_int(a, "--threads", 200), arg_int(a, "--hours", 24),
                      arg_int(a, "--raw-days", 2), arg_int(a, "--1m-days", 30),
                      arg_int(a, "--1h-days", 365));
    }
    if (a.size() >= 2 && a[0] == "query") {
      return run_queries(a[1], arg_int(a, "--runs", 5));
    }
    if (a.size() >= 2 && a[0] == "pictures") {
      return pictures(a[1], arg_int(a, "--runs", 5));
    }
  } catch (const std::exception &e) {
    fmt::print(stderr, "rsched-history-bench: {}\n", e.what());
    return 1;
  }
  fmt::print(stderr,
             "usage: rsched-history-bench generate DB [--groups G] [--threads N] [--hours H] "
             "[--raw-days D] [--1m-days D] [--1h-days D]\n"
             "       rsched-history-bench query DB [--runs N]\n"
             "       rsched-history-bench pictures DB [--runs N]\n");
  return 2;
}
