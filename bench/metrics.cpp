// What rschedd's /metrics costs on a big machine, synthetic: every interval 1,000 active threads
// (in 200 cgroups, 300 comms, every thread metric with samples, 3 culprits each) on 64 CPUs.
// Prints the recorder thread's share (metrics_state::add and the published copy), the render of
// each format (once per interval and format, on the server's thread), the size of a scrape, and
// scrapes over loopback HTTP (one client, then four at once) with the recording-side cost
// measured while they run.
//   build/bench/rsched-metrics-bench [THREADS] [CPUS] [INTERVALS]
#include "rsched/openmetrics/openmetrics.hpp"
#include "rsched/rschedd/http_server.hpp"
#include "rsched/rschedd/metrics_board.hpp"
#include "rsched/rschedd/metrics_state.hpp"

#include <fmt/format.h>
#include <sys/socket.h>

#include <algorithm>
#include <arpa/inet.h>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <netinet/in.h>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace rsched;
using namespace rsched::rschedd;
using clk = std::chrono::steady_clock;

namespace {

double ms_since(clk::time_point t) {
  return std::chrono::duration<double, std::milli>(clk::now() - t).count();
}

store::interval_row make_interval(std::int64_t start, int threads, int cpus, std::mt19937 &rng) {
  store::interval_row r;
  r.start_ns = start;
  r.dur_ns = 1'000'000'000;
  r.groups = RSCHED_G_LATENCY | RSCHED_G_SLICE | RSCHED_G_SLEEP | RSCHED_G_WAKING |
             RSCHED_G_MIGRATION | RSCHED_G_BLAME;
  std::uniform_int_distribution<std::uint64_t> lat(1'000, 20'000'000);
  for (int i = 0; i < threads; ++i) {
    store::thread_row t;
    t.tid = static_cast<std::uint32_t>(1000 + i);
    t.pid = t.tid;
    t.comm = fmt::format("worker-{}", i % 300);
    t.cgroup = fmt::format("/system.slice/service-{}.service", i % 200);
    for (const auto m :
         {metrics::id::sched_delay, metrics::id::slice_voluntary, metrics::id::slice_involuntary,
          metrics::id::sleep, metrics::id::waking_delay}) {
      auto &v = t.m[m];
      for (int k = 0; k < 20; ++k) {
        const auto x = lat(rng);
        v.hist.add(x);
        v.total += x;
        ++v.count;
      }
    }
    auto &d = t.m[metrics::id::runq_depth];
    d.hist.add(2, 20);
    d.count = 20;
    d.total = 40;
    t.migrations = 3;
    for (int k = 0; k < 3; ++k) {
      store::blame_row b;
      b.comm = fmt::format("worker-{}", (i + k + 1) % 300);
      b.wait_ns = lat(rng);
      b.waits = 2;
      t.blame.push_back(b);
    }
    r.threads.push_back(std::move(t));
  }
  for (int c = 0; c < cpus; ++c) {
    store::cpu_row row;
    row.cpu = static_cast<std::uint32_t>(c);
    for (const auto m : {metrics::id::cpu_sched_delay, metrics::id::cpu_idle}) {
      auto &v = row.m[m];
      for (int k = 0; k < 300; ++k) {
        const auto x = lat(rng);
        v.hist.add(x);
        v.total += x;
        ++v.count;
      }
    }
    r.cpus.push_back(std::move(row));
  }
  for (int g = 0; g < 200; ++g) {
    store::cgroup_cpu_row p;
    p.cgroup = fmt::format("/system.slice/service-{}.service", g);
    p.some_ns = 1000;
    p.full_ns = 500;
    r.cgroup_cpu.push_back(p);
  }
  return r;
}

// One GET /metrics over a fresh connection; the bytes received.
std::size_t scrape(int port, bool openmetrics) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) {
    close(fd);
    return 0;
  }
  const std::string req =
      std::string("GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n") +
      (openmetrics ? "Accept: application/openmetrics-text;version=1.0.0\r\n" : "") + "\r\n";
  (void)send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::size_t got = 0;
  char buf[65536];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      break;
    }
    got += static_cast<std::size_t>(n);
  }
  close(fd);
  return got;
}

} // namespace

int main(int argc, char **argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1000;
  const int cpus = argc > 2 ? std::atoi(argv[2]) : 64;
  const int intervals = argc > 3 ? std::atoi(argv[3]) : 60;
  std::mt19937 rng(42);
  std::vector<store::interval_row> rows;
  for (int i = 0; i < 8; ++i) {
    rows.push_back(make_interval(0, threads, cpus, rng));
  }
  metrics_config cfg;
  cfg.start_ns = 1'795'000'000'000'000'000;
  metrics_state m(cfg);
  metrics_board board;

  // The recorder thread's share, per interval.
  double add_ms = 0;
  double publish_ms = 0;
  double max_add = 0;
  double max_publish = 0;
  for (int i = 0; i < intervals; ++i) {
    auto &r = rows[static_cast<std::size_t>(i) % rows.size()];
    r.start_ns = cfg.start_ns + static_cast<std::int64_t>(i) * 1'000'000'000;
    auto t = clk::now();
    m.add(r, {.written = true, .write_failed = false, .write_ns = 1'000'000});
    const double a = ms_since(t);
    t = clk::now();
    board.publish(m);
    const double p = ms_since(t);
    add_ms += a;
    publish_ms += p;
    max_add = std::max(max_add, a);
    max_publish = std::max(max_publish, p);
  }
  fmt::print("{} threads, {} CPUs, {} intervals (top {} cgroups/comms/culprits)\n", threads, cpus,
             intervals, cfg.top);
  fmt::print("recorder thread per interval: add {:.3f} ms (max {:.3f}), publish (copy) {:.3f} ms "
             "(max {:.3f})\n",
             add_ms / intervals, max_add, publish_ms / intervals, max_publish);

  // Rendering: once per interval and format, on the first scrape that asks for it.
  for (const auto f : {openmetrics::format::prometheus, openmetrics::format::openmetrics}) {
    double total = 0;
    std::size_t bytes = 0;
    std::size_t lines = 0;
    const int reps = 20;
    for (int i = 0; i < reps; ++i) {
      std::ostringstream out;
      const auto t = clk::now();
      m.render(out, f);
      total += ms_since(t);
      const std::string s = out.str();
      bytes = s.size();
      lines = static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n'));
    }
    fmt::print("render {}: {:.3f} ms, {} bytes, {} lines\n",
               f == openmetrics::format::prometheus ? "0.0.4      " : "OpenMetrics", total / reps,
               bytes, lines);
  }

  // Scrapes over loopback while intervals are published every 10 ms (100 x faster than rschedd).
  auto srv = metrics_server::start({"127.0.0.1", 0}, board);
  if (!srv) {
    fmt::print(stderr, "{}\n", srv.err().msg);
    return 1;
  }
  const int port = (*srv)->port();
  for (const int clients : {1, 4}) {
    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> scrapes{0};
    std::atomic<std::uint64_t> bytes{0};
    std::vector<std::thread> ts;
    for (int c = 0; c < clients; ++c) {
      ts.emplace_back([&, c] {
        while (!stop) {
          bytes += scrape(port, c % 2 == 1);
          ++scrapes;
        }
      });
    }
    double worst_publish = 0;
    double worst_add = 0;
    const auto t0 = clk::now();
    int n = 0;
    while (ms_since(t0) < 3000) {
      auto &r = rows[static_cast<std::size_t>(n) % rows.size()];
      r.start_ns += 1'000'000'000;
      auto t = clk::now();
      m.add(r, {});
      worst_add = std::max(worst_add, ms_since(t));
      t = clk::now();
      board.publish(m);
      worst_publish = std::max(worst_publish, ms_since(t));
      ++n;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    stop = true;
    for (auto &t : ts) {
      t.join();
    }
    const double secs = ms_since(t0) / 1000;
    fmt::print("{} client(s) scraping in a loop: {:.0f} scrapes/s, {:.1f} MB/s; meanwhile {} "
               "intervals published, worst add {:.3f} ms, worst publish {:.3f} ms\n",
               clients, static_cast<double>(scrapes) / secs,
               static_cast<double>(bytes) / secs / 1e6, n, worst_add, worst_publish);
  }
  return 0;
}
