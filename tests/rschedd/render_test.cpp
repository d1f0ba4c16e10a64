#include "rsched/rschedd/model.hpp"
#include "rsched/rschedd/render.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <string>

using metric = rsched::metrics::id;

using namespace rsched;
using namespace rsched::rschedd;

namespace {

constexpr std::uint32_t all_groups = RSCHED_G_LATENCY | RSCHED_G_SLICE | RSCHED_G_SLEEP |
                                     RSCHED_G_WAKING | RSCHED_G_MIGRATION | RSCHED_G_PERF;

filter no_filter() {
  return filter{};
}

filter make_filter(const filter_options &o) {
  auto f = filter::make(o);
  REQUIRE(f.ok());
  return *f;
}

// A thread with `n` scheduling-delay samples of `us` microseconds.
thread_stats th(std::uint32_t tid, std::string comm, std::uint64_t us, std::uint64_t n = 10,
                std::string cgroup = "/") {
  thread_stats t;
  t.tid = tid;
  t.tgid = tid;
  t.comm = std::move(comm);
  t.cgroup = std::move(cgroup);
  if (n > 0) {
    t.m[metric::sched_delay].hist.add(us * 1000, n);
  }
  return t;
}

void add(model &m, const thread_stats &t, std::uint64_t start = 0) {
  m.threads[{t.tid, start}] = t;
}

std::size_t count(const std::string &hay, const std::string &needle) {
  std::size_t n = 0;
  for (auto p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) {
    ++n;
  }
  return n;
}

// The section starting at `header` up to the next "=== " header (or the end).
std::string section(const std::string &out, const std::string &header) {
  const auto b = out.find(header);
  REQUIRE(b != std::string::npos);
  const auto e = out.find("=== ", b + header.size());
  return out.substr(b, e == std::string::npos ? std::string::npos : e - b);
}

std::string hist_header_collapsed(std::size_t w = 7) {
  return fmt::format("  {:<{}} {:<8} {:<10} {:<10} {:<10} {:<12} {:<20} \n", "COMMAND", w, "PROCS",
                     "p50", "p90", "p99", "COUNT", "PIDs");
}

} // namespace

TEST_CASE("render helpers: PID lists, CPU ranges, rates", "[rschedd]") {
  using namespace render_detail;
  CHECK(pid_list({7}) == "7");
  CHECK(pid_list({3, 1, 2}) == "1,2,3");
  CHECK(pid_list({5, 4, 3, 2, 1}) == "1,2,3,...(+2)");
  CHECK(pid_list({}).empty());
  CHECK(cpu_ranges({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11");
  CHECK(cpu_ranges({5}) == "5");
  CHECK(cpu_ranges({}).empty());
  std::vector<std::uint32_t> big;
  for (std::uint32_t c = 4; c <= 15; ++c) {
    big.push_back(c);
  }
  for (std::uint32_t c = 126; c <= 141; ++c) {
    big.push_back(c);
  }
  CHECK(cpu_ranges(big) == "4-15,126-141");
  CHECK(format_rate(999) == "999");
  CHECK(format_rate(0) == "0");
  CHECK(format_rate(1500) == "1.5K");
  CHECK(format_rate(2.5e6) == "2.5M");
  CHECK(format_rate(3e9) == "3.0G");
  CHECK(format_rate(4e12) == "4.0T");
}

TEST_CASE("render: exact output of a small latency-only model", "[rschedd]") {
  model m;
  thread_stats t = th(42, "app", 5);
  t.m[metric::runq_depth].hist.add(2, 10);
  add(m, t);
  m.cpus[0].cpu = 0;
  m.cpus[0].m[metric::cpu_sched_delay].hist.add(5000, 10);
  render_options o; // collapsed, latency
  const std::string out = render(m, o, no_filter());
  // 10 samples in [0, 10 us): p50 = 4, p90 = 8, p99 = 9 (nearest rank, mid-share interpolation)
  const std::string expected =
      "=== Collapsed Scheduling Delays (microseconds) ===\n\n"
      "Very Low (<10μs) (1 entries):\n" +
      hist_header_collapsed() +
      fmt::format("  {:<7} {:<8} {:<10} {:<10} {:<10} {:<12} {:<20}\n", "app", 1, 4, 8, 9, 10,
                  "42") +
      "\n"
      "=== Collapsed Runqueue Depth Statistics (nr_running at wakeup) ===\n\n"
      "Processes by runqueue depth at wakeup:\n\n" +
      fmt::format("  {:<7} {:<8} {:<10} {:<10} {:<10} {:<12}\n", "COMMAND", "PROCS", "p50", "p90",
                  "p99", "COUNT") +
      fmt::format("  {:<7} {:<8} {:<10} {:<10} {:<10} {:<12}\n", "app", 1, 2, 2, 2, 10) +
      "\n=== Per-CPU Scheduling Delays (microseconds) ===\n\n"
      "Very Low (<10μs): CPUs (1) 0\n"
      "  Group: p50=4      p90=8      p99=9      count=10\n\n"
      "Global: p50=4      p90=8      p99=9      count=10\n\n";
  CHECK(out == expected);
}

TEST_CASE("render: sections follow upstream order and the group mask", "[rschedd]") {
  model m;
  thread_stats t = th(1, "a", 5);
  t.m[metric::runq_depth].hist.add(1);
  t.m[metric::waking_delay].hist.add(3000);
  t.m[metric::slice_voluntary].hist.add(100'000);
  t.m[metric::sleep].hist.add(1'000'000);
  t.m[metric::migration_rate].hist.add(2);
  t.m[metric::migration_rate_cross_ccx].hist.add(1);
  t.m[metric::migration_rate_cross_numa].hist.add(0);
  add(m, t);
  m.cpus[0].m[metric::cpu_sched_delay].hist.add(1000);
  m.cpus[0].m[metric::cpu_idle].hist.add(1'000'000);
  m.ipc.push_back({1, 1, "a", "/", 1000, 1000, 2000, 500});
  m.ipc_elapsed_s = 1.0;
  event_rates ev;
  ev.name = "L2 Cache Misses";
  ev.threads.push_back({1, 1, "a", "/", {stats::layout::log2, {}}});
  ev.threads.back().rate.add(5000);
  m.events.push_back(ev);
  m.schedstat_table = "\n=== System-wide Schedstat Metrics (deltas) ===\nSCHEDSTAT\n\n";

  render_options o;
  o.groups = all_groups;
  o.ipc = true;
  o.num_dies = 2;
  o.num_numa_nodes = 2;
  const std::string out = render(m, o, no_filter());
  const char *order[] = {
      "=== Collapsed Scheduling Delays (microseconds) ===",
      "=== Collapsed Waking Delay Statistics (Time from sched_waking to sched_switch) ===",
      "=== Collapsed Time Slice Statistics (microseconds) ===",
      ("=== Collapsed Sleep Duration Statistics (Time spent sleeping between sched_switch and "
       "sched_wakeup) ==="),
      "=== Collapsed Runqueue Depth Statistics (nr_running at wakeup) ===",
      "=== Collapsed Migration Statistics (migrations per second) ===",
      "=== Collapsed Cross-CCX Migration Statistics (cross-die migrations per second) ===",
      "=== Collapsed Cross-NUMA Migration Statistics (cross-node migrations per second) ===",
      "=== System-wide Schedstat Metrics (deltas) ===",
      "=== Per-CPU Scheduling Delays (microseconds) ===",
      "=== Per-CPU Idle Duration (microseconds) ===",
      "=== CPU Performance Metrics ===",
      "=== L2 Cache Misses (per second) ===",
  };
  std::size_t pos = 0;
  for (const char *h : order) {
    INFO(h);
    const auto p = out.find(h);
    REQUIRE(p != std::string::npos);
    CHECK(p >= pos);
    pos = p;
  }
  CHECK(out.find("No processes match") == std::string::npos);

  // Latency only: none of the other groups' sections.
  o.groups = RSCHED_G_LATENCY;
  const std::string lat = render(m, o, no_filter());
  CHECK(lat.find("Scheduling Delays") != std::string::npos);
  CHECK(lat.find("Runqueue Depth") != std::string::npos);
  CHECK(lat.find("Per-CPU Scheduling Delays") != std::string::npos);
  for (const char *absent : {"Waking", "Time Slice", "Sleep Duration", "Migration", "Per-CPU Idle",
                             "CPU Performance", "L2 Cache"}) {
    INFO(absent);
    CHECK(lat.find(absent) == std::string::npos);
  }
  CHECK(lat.find("SCHEDSTAT") != std::string::npos); // schedstat: present when provided

  // Sleep only: the thread sleep table and the per-CPU idle table.
  o.groups = RSCHED_G_SLEEP;
  const std::string sl = render(m, o, no_filter());
  CHECK(sl.find("Sleep Duration Statistics") != std::string::npos);
  CHECK(sl.find("Per-CPU Idle Duration") != std::string::npos);
  CHECK(sl.find("Scheduling Delays") == std::string::npos);

  // IPC needs the perf group and opts.ipc.
  o.groups = RSCHED_G_PERF;
  o.ipc = false;
  const std::string perf = render(m, o, no_filter());
  CHECK(perf.find("CPU Performance Metrics") == std::string::npos);
  CHECK(perf.find("L2 Cache Misses") != std::string::npos);
  CHECK(perf.find("No processes match") == std::string::npos); // no per-thread group on
}

TEST_CASE("render: migration sections gated by dies and NUMA nodes", "[rschedd]") {
  model m;
  thread_stats t = th(1, "a", 0, 0);
  t.m[metric::migration_rate].hist.add(3, 4);
  t.m[metric::migration_rate_cross_ccx].hist.add(1, 4);
  t.m[metric::migration_rate_cross_numa].hist.add(0, 4);
  add(m, t);
  render_options o;
  o.groups = RSCHED_G_MIGRATION;
  auto has = [](const std::string &s, const std::string &x) {
    return s.find(x) != std::string::npos;
  };
  std::string out = render(m, o, no_filter());
  CHECK(has(out, "Migration Statistics (migrations per second)"));
  CHECK(has(out, "Processes by migration rate:"));
  CHECK_FALSE(has(out, "Cross-CCX"));
  CHECK_FALSE(has(out, "Cross-NUMA"));
  CHECK(has(out, fmt::format("  {:<7} {:<8} {:<10} {:<10} {:<10} {:<12}\n", "a", 1, 3, 3, 3, 4)));
  o.num_dies = 2;
  out = render(m, o, no_filter());
  CHECK(has(out, "Cross-CCX Migration Statistics"));
  CHECK(has(out, "Processes by cross-CCX migration rate:"));
  CHECK_FALSE(has(out, "Cross-NUMA"));
  o.num_dies = 1;
  o.num_numa_nodes = 2;
  out = render(m, o, no_filter());
  CHECK_FALSE(has(out, "Cross-CCX"));
  CHECK(has(out, "Cross-NUMA Migration Statistics"));

  // Nobody migrated across dies: the section says so.
  model m2;
  thread_stats t2 = th(1, "a", 0, 0);
  t2.m[metric::migration_rate].hist.add(3, 4);
  add(m2, t2);
  o.num_dies = 2;
  out = render(m2, o, no_filter());
  CHECK(has(out, "No cross-CCX migration rate data collected yet."));
  CHECK(has(out, "No cross-NUMA migration rate data collected yet."));
}

TEST_CASE("render: latency groups by p90, ascending", "[rschedd]") {
  model m;
  add(m, th(1, "vlow", 5));
  add(m, th(2, "low", 50));
  add(m, th(3, "medium", 500));
  add(m, th(4, "high", 5000));
  add(m, th(5, "vhigh", 50000));
  const std::string out = section(render(m, {}, no_filter()), "=== Collapsed Scheduling");
  const char *groups[] = {"Very Low (<10μs) (1 entries):", "Low (10-100μs) (1 entries):",
                          "Medium (100μs-1ms) (1 entries):", "High (1-10ms) (1 entries):",
                          "Very High (>10ms) (1 entries):"};
  const char *comms[] = {"vlow", "low", "medium", "high", "vhigh"};
  std::size_t prev = 0;
  for (std::size_t i = 0; i < 5; ++i) {
    const auto g = out.find(std::string("\n") + groups[i]);
    REQUIRE(g != std::string::npos);
    CHECK(g >= prev);
    // the group's only row is the right comm
    const auto row = out.find(std::string("\n  ") + comms[i] + " ", g);
    REQUIRE(row != std::string::npos);
    const auto next_group = i + 1 < 5 ? out.find(std::string("\n") + groups[i + 1]) : out.size();
    CHECK(row < next_group);
    prev = g;
  }
}

TEST_CASE("render: top 10 per group, sorted by p90 descending, then '... and N more'",
          "[rschedd]") {
  model m;
  for (std::uint32_t i = 0; i < 13; ++i) { // all Medium (100us-1ms): 100, 120, ..., 340 us
    add(m, th(100 + i, fmt::format("c{:02}", i), 100 + 20 * i));
  }
  add(m, th(1, "alone", 5));
  const std::string out = section(render(m, {}, no_filter()), "=== Collapsed Scheduling");
  CHECK(out.find("Medium (100μs-1ms) (13 entries):") != std::string::npos);
  CHECK(out.find("  ... and 3 more\n\n") != std::string::npos);
  CHECK(count(out, "... and") == 1);
  // highest p90 first; the 3 smallest are cut
  CHECK(out.find("  c12 ") < out.find("  c11 "));
  CHECK(out.find("  c03 ") != std::string::npos);
  CHECK(out.find("  c02 ") == std::string::npos);
  CHECK(out.find("  c00 ") == std::string::npos);
  // a group that fits ends with a blank line
  CHECK(out.find(fmt::format("  {:<7} {:<8} {:<10} {:<10} {:<10} {:<12} {:<20}\n\n", "alone", 1, 4,
                             8, 9, 10, "1")) != std::string::npos);
}

TEST_CASE("render: collapsed, -C and -d tables", "[rschedd]") {
  model m;
  for (std::uint32_t i = 0; i < 12; ++i) {
    add(m, th(200 - i, "worker", 20 + 5 * i)); // tids 189..200
  }
  add(m, th(7, "solo", 20));

  SECTION("collapsed: one row per comm, PROCS and PIDs") {
    const std::string out = render(m, {}, no_filter());
    CHECK(out.find(hist_header_collapsed()) != std::string::npos);
    CHECK(out.find("  worker  12       ") != std::string::npos);
    CHECK(out.find("189,190,191,...(+9)") != std::string::npos);
    CHECK(out.find("Low (10-100μs) (2 entries):") != std::string::npos);
    CHECK(out.find("... and") == std::string::npos);
  }
  SECTION("-C: one row per thread, Per-Process titles, still top 10") {
    render_options o;
    o.mode = output_mode::grouped;
    const std::string out = render(m, o, no_filter());
    CHECK(out.find("=== Per-Process Scheduling Delays (microseconds) ===") != std::string::npos);
    CHECK(out.find(fmt::format("  {:<8} {:<7} {:<10} {:<10} {:<10} {:<12} \n", "PID", "COMMAND",
                               "p50", "p90", "p99", "COUNT")) != std::string::npos);
    CHECK(out.find("Low (10-100μs) (13 entries):") != std::string::npos);
    CHECK(out.find("  ... and 3 more") != std::string::npos);
    CHECK(out.find("PROCS") == std::string::npos);
    CHECK(out.find("PIDs") == std::string::npos);
    CHECK(out.find("  189      worker ") != std::string::npos); // highest p90 (75 us)
  }
  SECTION("-d: every row, no groups, sorted by tid") {
    render_options o;
    o.mode = output_mode::detailed;
    const std::string out = render(m, o, no_filter());
    const std::string sched = section(out, "=== Per-Process Scheduling Delays");
    CHECK(sched.find("entries):") == std::string::npos);
    CHECK(sched.find("... and") == std::string::npos);
    CHECK(count(sched, " worker ") == 12);
    CHECK(sched.find("  7        solo") < sched.find("  189      worker"));
    CHECK(sched.find("  189      worker") < sched.find("  200      worker"));
    CHECK(out.find("Processes by runqueue depth") == std::string::npos);
  }
}

TEST_CASE("render: PROCS counts threads with data in any selected metric", "[rschedd]") {
  model m;
  add(m, th(1, "w", 50));
  thread_stats only_slice = th(2, "w", 0, 0);
  only_slice.m[metric::slice_voluntary].hist.add(100'000, 3);
  add(m, only_slice);
  render_options o;
  o.groups = RSCHED_G_LATENCY | RSCHED_G_SLICE;
  std::string out = section(render(m, o, no_filter()), "=== Collapsed Scheduling");
  CHECK(out.find(fmt::format("  {:<7} {:<8} ", "w", 2)) != std::string::npos);
  CHECK(out.find(" 1,2") != std::string::npos);
  o.groups = RSCHED_G_LATENCY; // slice not selected: thread 2 has no data
  out = section(render(m, o, no_filter()), "=== Collapsed Scheduling");
  CHECK(out.find(fmt::format("  {:<7} {:<8} ", "w", 1)) != std::string::npos);
}

TEST_CASE("render: per-CPU Group and Global lines, -l and -d", "[rschedd]") {
  model m;
  for (std::uint32_t c : {0U, 1U, 2U, 3U, 10U, 11U}) {
    m.cpus[c].cpu = c;
    m.cpus[c].m[metric::cpu_sched_delay].hist.add(5000, 10); // 5 us
  }
  m.cpus[8].cpu = 8;
  m.cpus[8].m[metric::cpu_sched_delay].hist.add(50'000, 10); // 50 us
  m.cpus[9].cpu = 9;                                         // no samples: never listed
  render_options o;
  std::string out = render(m, o, no_filter());
  const std::string cpu = out.substr(out.find("=== Per-CPU Scheduling Delays"));
  CHECK(cpu == "=== Per-CPU Scheduling Delays (microseconds) ===\n\n"
               "Very Low (<10μs): CPUs (6) 0-3,10-11\n"
               "  Group: p50=4      p90=8      p99=9      count=60\n\n"
               "Low (10-100μs): CPUs (1) 8\n"
               "  Group: p50=54     p90=58     p99=59     count=10\n\n"
               "Global: p50=5      p90=52     p99=59     count=70\n\n");

  // -l hides CPUs whose p50 is below it
  filter_options fo;
  fo.min_latency_us = 10;
  out = render(m, o, make_filter(fo));
  CHECK(out.find("Very Low (<10μs): CPUs") == std::string::npos);
  CHECK(out.find("Low (10-100μs): CPUs (1) 8\n") != std::string::npos);
  fo.min_latency_us = 100;
  out = render(m, o, make_filter(fo));
  CHECK(out.find("=== Per-CPU Scheduling Delays (microseconds) ===\n"
                 "No CPUs match the specified filters.\n\n") != std::string::npos);

  o.mode = output_mode::detailed;
  out = render(m, o, no_filter());
  CHECK(out.find("\n\nCPU      p50        p90        p99        COUNT       \n"
                 "0        4          8          9          10          \n"
                 "1        ") != std::string::npos);
  CHECK(out.find("\n8        54         58         59         10          \n") !=
        std::string::npos);
  CHECK(out.find("\n9 ") == std::string::npos);

  // idle: its own bands and empty message
  o.mode = output_mode::collapsed;
  o.groups = RSCHED_G_SLEEP;
  out = render(m, o, no_filter());
  CHECK(out.find("=== Per-CPU Idle Duration (microseconds) ===\n"
                 "No CPU idle data collected yet.\n\n") != std::string::npos);
  m.cpus[0].m[metric::cpu_idle].hist.add(50'000'000, 4); // 50 ms
  m.cpus[1].m[metric::cpu_idle].hist.add(50'000, 4);     // 50 us
  out = render(m, o, no_filter());
  CHECK(out.find("Very Short (<100μs): CPUs (1) 1\n") != std::string::npos);
  CHECK(out.find("Long (10-100ms): CPUs (1) 0\n") != std::string::npos);
  // busy periods (a registry CPU metric): after idle, the same duration bands
  CHECK(out.find("=== Per-CPU Busy Duration (microseconds) ===\n"
                 "No CPU busy data collected yet.\n\n") != std::string::npos);
  m.cpus[1].m[metric::cpu_busy].hist.add(2'000'000, 3); // 2 ms
  out = render(m, o, no_filter());
  const auto busy = out.find("=== Per-CPU Busy Duration (microseconds) ===\n\n"
                             "Medium (1-10ms): CPUs (1) 1\n");
  CHECK(busy != std::string::npos);
  CHECK(busy > out.find("=== Per-CPU Idle Duration"));
  CHECK(out.find("Very Short") < out.find("Long (10-100ms)"));
}

TEST_CASE("render: time slice table and PREEMPT% formatting", "[rschedd]") {
  model m;
  thread_stats a = th(1, "preempty", 0, 0);
  a.m[metric::slice_voluntary].hist.add(100'000, 3);  // 100 us
  a.m[metric::slice_involuntary].hist.add(2'000'000); // 2 ms, 1 preemption
  thread_stats b = th(2, "calm", 0, 0);
  b.m[metric::slice_voluntary].hist.add(30'000, 4);
  thread_stats c = th(3, "nodata", 50); // latency data only: still listed, with dashes
  add(m, a);
  add(m, b);
  add(m, c);
  render_options o;
  o.groups = RSCHED_G_LATENCY | RSCHED_G_SLICE;
  const std::string out = render(m, o, no_filter());
  const std::string ts = section(out, "=== Collapsed Time Slice Statistics");
  CHECK(ts.find("Time slice statistics grouped by preemption rate:\n\n") != std::string::npos);
  const std::size_t w = 8; // "preempty"
  CHECK(ts.find(fmt::format("  {:<{}} {:<8} {:<12} {:<20} {:<20} {:<12}\n", "COMMAND", w, "PROCS",
                            "INVOL_COUNT", "VOLUNTARY(p50/p90)", "PREEMPTED(p50/p90)",
                            "PREEMPT%")) != std::string::npos);
  // 2000 us is in [1024, 2047] us; one sample: the middle of the bucket
  const std::string row_a = fmt::format("  {:<{}} {:<8} {:<12} {:<20} {:<20} ", "preempty", w, 1, 1,
                                        "105/108", "1536/1536") +
                            "25.0        %\n";
  CHECK(ts.find(row_a) != std::string::npos);
  CHECK(ts.find(fmt::format("  {:<{}} {:<8} {:<12} {:<20} {:<20} ", "nodata", w, 1, 0, "-", "-") +
                "0.0         %\n") != std::string::npos);
  CHECK(ts.find("preempty") < ts.find("calm")); // by preemption rate
  // the slice section is followed by a blank line
  CHECK(out.find("0.0         %\n\n=== Collapsed Runqueue") != std::string::npos);
}

TEST_CASE("render: 'No processes match the specified filters.'", "[rschedd]") {
  model m;
  add(m, th(1, "bash", 50));
  m.cpus[0].m[metric::cpu_sched_delay].hist.add(5000);
  filter_options fo;
  fo.comm = {"nomatch"};
  const filter f = make_filter(fo);
  render_options o;
  std::string out = render(m, o, f);
  CHECK(out.rfind("No processes match the specified filters.\n\n"
                  "=== Collapsed Scheduling Delays (microseconds) ===\n\n"
                  "No scheduling delays data collected yet.\n\n",
                  0) == 0);
  CHECK(out.find("No runqueue depth data collected yet.") != std::string::npos);
  CHECK(out.find("Very Low (<10μs): CPUs (1) 0") != std::string::npos); // CPUs not filtered

  o.groups = RSCHED_G_WAKING;
  out = render(m, o, f);
  CHECK(out.find("No processes match the specified filters.") == 0);
  CHECK(out.find("No waking delay statistics data collected yet.") != std::string::npos);

  o.groups = RSCHED_G_PERF;
  CHECK(render(m, o, f).find("No processes match") == std::string::npos);
}

TEST_CASE("render: filtering happens before collapsing, -l hides threads everywhere", "[rschedd]") {
  model m;
  add(m, th(1, "x", 50, 10, "/a"));
  add(m, th(2, "x", 50, 10, "/b"));
  thread_stats slow = th(3, "y", 500);
  slow.m[metric::slice_voluntary].hist.add(1000);
  thread_stats fast = th(4, "z", 5);
  fast.m[metric::slice_voluntary].hist.add(1000);
  add(m, slow);
  add(m, fast);
  filter_options fo;
  fo.cgroup = {"^a$"};
  fo.global_comm = {"^[yz]$"};
  render_options o;
  o.groups = RSCHED_G_LATENCY | RSCHED_G_SLICE;
  std::string out = render(m, o, make_filter(fo));
  CHECK(out.find(fmt::format("  {:<7} {:<8} {:<10} {:<10} {:<10} {:<12} {:<20}\n", "x", 1, 54, 58,
                             59, 10, "1")) != std::string::npos);
  CHECK(out.find("  z ") != std::string::npos);

  fo.min_latency_us = 100;
  out = render(m, o, make_filter(fo));
  CHECK(out.find("  x ") == std::string::npos);
  CHECK(out.find("  z ") == std::string::npos); // global-comm match, still hidden by -l
  CHECK(count(out, "  y ") == 2);               // delays and time slices
}

TEST_CASE("render: hostile comm and event names are escaped everywhere", "[rschedd]") {
  const std::string evil = "\x1b]0;pwn\x07\x1b[2J";
  model m;
  thread_stats t = th(1, evil, 50);
  t.m[metric::runq_depth].hist.add(1);
  t.m[metric::waking_delay].hist.add(1000);
  t.m[metric::slice_involuntary].hist.add(1000);
  t.m[metric::sleep].hist.add(1000);
  t.m[metric::migration_rate].hist.add(1);
  add(m, t);
  m.cpus[0].m[metric::cpu_sched_delay].hist.add(1000);
  m.ipc.push_back({1, 1, evil, "/", 10, 10, 10, 10});
  m.ipc_elapsed_s = 1;
  event_rates ev;
  ev.name = evil;
  ev.threads.push_back({1, 1, evil, "/", {stats::layout::log2, {}}});
  ev.threads.back().rate.add(10);
  m.events.push_back(ev);
  for (auto mode : {output_mode::collapsed, output_mode::grouped, output_mode::detailed}) {
    render_options o;
    o.mode = mode;
    o.groups = all_groups;
    o.ipc = true;
    const std::string out = render(m, o, no_filter());
    CHECK(out.find('\x1b') == std::string::npos);
    CHECK(out.find('\x07') == std::string::npos);
    CHECK(count(out, "\\x1b]0;pwn\\x07\\x1b[2J") >= 7);
  }
}

TEST_CASE("render: COMMAND width is the widest display width of the table", "[rschedd]") {
  model m;
  add(m, th(1, "café", 50)); // 4 columns, 5 bytes
  std::string out = render(m, {}, no_filter());
  CHECK(out.find("\n  café    1        ") != std::string::npos); // padded to 7 columns
  add(m, th(2, "a-long-comm-nam", 50));
  out = section(render(m, {}, no_filter()), "=== Collapsed Scheduling");
  CHECK(out.find(hist_header_collapsed(15)) != std::string::npos);
  CHECK(out.find("\n  café            1        ") != std::string::npos);
}

TEST_CASE("render: IPC section", "[rschedd]") {
  model m;
  m.ipc.push_back({1, 1, "busy", "/", 2'000'000'000, 500'000'000, 4'000'000'000, 250'000'000});
  m.ipc.push_back({2, 2, "idle", "/", 500, 0, 100, 0});
  m.ipc.push_back({3, 3, "zero", "/", 0, 0, 0, 0});
  m.ipc_elapsed_s = 2.0;
  render_options o;
  o.groups = RSCHED_G_PERF;
  o.ipc = true;
  std::string out = render(m, o, no_filter());
  CHECK(out.rfind("\n=== CPU Performance Metrics ===\n"
                  "Global: User 1.0G cycles/sec (IPC: 2.00), Kernel 250.0M cycles/sec (IPC: "
                  "0.50)\n"
                  "\nCPU Performance by Usage Group:\n\n"
                  "High (1-10G cycles/sec) (1 entries):\n",
                  0) == 0);
  CHECK(out.find(fmt::format("  {:<7} {:<8} {:<14} {:<14} {:<8} {:<8} {:<15}\n", "COMMAND", "PROCS",
                             "USER CYC/s", "KERN CYC/s", "U-IPC", "K-IPC", "PIDs")) !=
        std::string::npos);
  CHECK(out.find(fmt::format("  {:<7} {:<8} {:<14} {:<14} {:<8} {:<8} {:<15}\n", "busy", 1, "1.0G",
                             "250.0M", "2.00", "0.50", "1")) != std::string::npos);
  // groups in descending order; collapsed keeps zero-cycle entries
  CHECK(out.find("High (1-10G") < out.find("Very Low (<1M cycles/sec) (2 entries):"));
  CHECK(out.find("  zero ") != std::string::npos);

  o.mode = output_mode::grouped; // per-thread drops zero-cycle rows
  out = render(m, o, no_filter());
  CHECK(out.find("  zero") == std::string::npos);
  CHECK(out.find("Very Low (<1M cycles/sec) (1 entries):") != std::string::npos);
  CHECK(out.find(fmt::format("  {:<8} {:<7} {:<14} {:<14} {:<8} {:<8}\n", 2, "idle", "250", "0",
                             "0.20", "0.00")) != std::string::npos);

  o.mode = output_mode::detailed;
  out = render(m, o, no_filter());
  CHECK(out.find("\nDetailed CPU Performance by Process (2 processes):\n\n") != std::string::npos);
  CHECK(out.find("  1        busy") < out.find("  2        idle"));

  filter_options fo;
  fo.pid = 99;
  out = render(m, o, make_filter(fo));
  CHECK(out.find("No processes match the specified filters for CPU metrics.\n\n") !=
        std::string::npos);

  m.ipc_elapsed_s = 0; // no interval length: no rates
  CHECK(render(m, o, no_filter()).find("CPU Performance") == std::string::npos);
}

TEST_CASE("render: generic events, top 20 and 'No data.'", "[rschedd]") {
  model m;
  event_rates ev;
  ev.name = "raw:0x964";
  for (std::uint32_t i = 0; i < 25; ++i) {
    ev.threads.push_back({i + 1, i + 1, fmt::format("t{:02}", i), "/", {stats::layout::log2, {}}});
    ev.threads.back().rate.add(std::uint64_t{1} << (i + 1), 3);
  }
  m.events.push_back(ev);
  event_rates empty;
  empty.name = "L1D Read Misses";
  m.events.push_back(empty);
  render_options o;
  o.groups = RSCHED_G_PERF;
  o.mode = output_mode::grouped;
  std::string out = render(m, o, no_filter());
  CHECK(out.find("\n=== raw:0x964 (per second) ===\n" +
                 fmt::format("  {:<8} {:<7} {:<12} {:<12} {:<12} {:<10}\n", "PID", "COMMAND",
                             "p50/s", "p90/s", "p99/s", "SAMPLES")) != std::string::npos);
  CHECK(out.find("  ... and 5 more\n\n") != std::string::npos);
  CHECK(out.find("  25       t24 ") < out.find("  24       t23 ")); // by p90 descending
  CHECK(out.find(" t04 ") == std::string::npos);
  CHECK(out.find(" t05 ") != std::string::npos);
  // one sample value 2^25 in [2^25, 2^26): three samples, p50 is the middle of the bucket
  CHECK(out.find(fmt::format("  {:<8} {:<7} {:<12} {:<12} {:<12} {:<10}\n", 25, "t24", "50.3M",
                             "61.5M", "61.5M", 3)) != std::string::npos);
  CHECK(out.find("\n=== L1D Read Misses (per second) ===\nNo data.\n\n") != std::string::npos);

  o.mode = output_mode::detailed;
  out = render(m, o, no_filter());
  CHECK(out.find("... and") == std::string::npos);
  CHECK(out.find(" t00 ") != std::string::npos);

  o.mode = output_mode::collapsed;
  out = render(m, o, no_filter());
  CHECK(out.find(fmt::format("  {:<7} {:<8} {:<12} {:<12} {:<12} {:<10}\n", "COMMAND", "PROCS",
                             "p50/s", "p90/s", "p99/s", "SAMPLES")) != std::string::npos);
}

TEST_CASE("render: band boundaries belong to the upper band", "[rschedd]") {
  // 85 samples at 5 us and 10 at 10 us: p90 is the first sample of [10, 20) us -> exactly 10.
  model m;
  thread_stats t = th(1, "edge", 5, 85);
  t.m[metric::sched_delay].hist.add(10'000, 10);
  add(m, t);
  m.cpus[0].m[metric::cpu_idle].hist.add(50'000, 85);
  m.cpus[0].m[metric::cpu_idle].hist.add(100'000, 10); // p90 exactly 100 us
  m.ipc.push_back({1, 1, "edge", "/", 1'000'000, 0, 0, 0});
  m.ipc_elapsed_s = 1.0; // exactly 1M cycles/s
  render_options o;
  o.groups = RSCHED_G_LATENCY | RSCHED_G_SLEEP | RSCHED_G_PERF;
  o.ipc = true;
  const std::string out = render(m, o, no_filter());
  CHECK(out.find(fmt::format("Low (10-100μs) (1 entries):\n{}  {:<7} {:<8} {:<10} {:<10} ",
                             hist_header_collapsed(), "edge", 1, 5, 10)) != std::string::npos);
  CHECK(out.find("Short (100μs-1ms): CPUs (1) 0\n") != std::string::npos);
  CHECK(out.find("\nLow (1-100M cycles/sec) (1 entries):\n") != std::string::npos);
}

// ---- the live model fed from recorded rows (the display thread's input) ----------------------

namespace {
store::thread_row trow(std::uint32_t tid, const char *comm, std::uint64_t us, std::uint64_t n) {
  store::thread_row r;
  r.tid = tid;
  r.pid = tid;
  r.start_time_ns = 1000 + tid;
  r.comm = comm;
  r.cgroup = "/";
  r.m[metric::sched_delay].count = n;
  r.m[metric::sched_delay].total = n * us * 1000;
  r.m[metric::sched_delay].hist.add(us * 1000, n);
  return r;
}
} // namespace

TEST_CASE("fold_row: intervals accumulate per thread and per CPU, IPC is per interval",
          "[rschedd]") {
  model m;
  store::interval_row a;
  a.threads.push_back(trow(1, "one", 10, 5));
  a.threads.back().has_ipc = true;
  a.threads.back().user_cycles = 100;
  a.threads.back().user_instructions = 200;
  store::cpu_row c;
  c.cpu = 3;
  c.m[metric::cpu_sched_delay].hist.add(5000, 2);
  a.cpus.push_back(c);
  fold_row(m, a, true, {}, 1);
  store::interval_row b;
  b.threads.push_back(trow(1, "renamed", 20, 3));
  b.cpus.push_back(c);
  fold_row(m, b, true, {}, 2);
  REQUIRE(m.threads.size() == 1);
  const auto &t = m.threads.begin()->second;
  CHECK(t.m[metric::sched_delay].hist.total() == 8);
  CHECK(t.comm == "renamed"); // the newest name
  CHECK(t.last_seen == 2);
  CHECK(m.cpus.at(3).m[metric::cpu_sched_delay].hist.total() == 4);
  CHECK(m.ipc.empty()); // the second interval had no counters
}

// With a terminal and heavy thread churn the cumulative model grew to 631 MiB: it kept every
// thread ever seen. It is bounded now, the longest unseen threads leaving first.
TEST_CASE("bound_threads keeps the cumulative tables bounded under thread churn", "[rschedd]") {
  model m;
  std::uint64_t seq = 0;
  for (std::uint32_t round = 0; round < 50; ++round) {
    store::interval_row r;
    for (std::uint32_t i = 0; i < 2000; ++i) {
      r.threads.push_back(trow(round * 2000 + i, "churn", 10, 1)); // new threads every interval
    }
    fold_row(m, r, false, {}, ++seq);
    bound_threads(m, 16384);
    REQUIRE(m.threads.size() <= 16384);
  }
  CHECK(m.evicted_threads == 100000 - m.threads.size());
  // The survivors are the most recent ones.
  std::uint64_t oldest = seq;
  for (const auto &[id, t] : m.threads) {
    oldest = std::min(oldest, t.last_seen);
  }
  CHECK(oldest > 50 - 16384 / 2000 - 1);
  const std::string out = render(m, render_options{}, no_filter());
  CHECK(out.find("threads not seen for the longest time") != std::string::npos);
}
