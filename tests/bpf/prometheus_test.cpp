// Debian's Prometheus, on loopback, scrapes `rschedd --metrics-listen` during a real workload;
// what its HTTP API answers for a window (increase() of the counts, histogram_quantile of p99,
// and the raw samples behind them) is checked against rsched-sql's numbers for the same window.
#include "rsched/openmetrics/openmetrics.hpp"
#include "rsched/query/reader.hpp"
#include "rsched/stats/encoding.hpp"
#include "rsched/stats/histogram.hpp"

#include "root_test_util.hpp"
#include "support/net.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

#include <fmt/format.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <algorithm>
#include <arpa/inet.h>
#include <cctype>
#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <regex>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace rsched;
using namespace std::chrono_literals;
using json = nlohmann::json;

namespace {

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) == 0);
  close(fd);
  return ntohs(a.sin_port);
}

// GET http://127.0.0.1:port/path; the status line and body ("" when nothing answers).
std::pair<std::string, std::string> http_get(int port, const std::string &path) {
  const int fd = test::connect_loopback(port);
  if (fd < 0) {
    return {};
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  (void)send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string reply;
  char buf[65536];
  pollfd p{fd, POLLIN, 0};
  while (poll(&p, 1, 10000) > 0) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      break;
    }
    reply.append(buf, static_cast<std::size_t>(n));
  }
  close(fd);
  const auto eol = reply.find("\r\n");
  const auto body = reply.find("\r\n\r\n");
  if (eol == std::string::npos || body == std::string::npos) {
    return {};
  }
  return {reply.substr(0, eol), reply.substr(body + 4)};
}

std::string urlencode(const std::string &s) {
  std::string out;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) != 0 || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

// Prometheus as a child process, killed and reaped on every exit path.
class prometheus {
public:
  prometheus(const std::string &dir, int port, int target_port) : port_(port) {
    const std::string cfg = dir + "/prometheus.yml";
    std::ofstream(cfg) << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                       << "scrape_configs:\n  - job_name: rsched\n    static_configs:\n"
                       << "      - targets: ['127.0.0.1:" << target_port << "']\n";
    const test::exec_argv argv("/usr/bin/prometheus",
                               {"--config.file=" + cfg, "--storage.tsdb.path=" + dir + "/data",
                                "--web.listen-address=127.0.0.1:" + std::to_string(port),
                                "--log.level=warn"});
    const std::string log = dir + "/prometheus.log";
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      execv("/usr/bin/prometheus", argv.get());
      _exit(127);
    }
  }
  ~prometheus() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  prometheus(const prometheus &) = delete;
  prometheus &operator=(const prometheus &) = delete;

  bool wait_ready() const {
    for (int i = 0; i < 300; ++i) {
      if (http_get(port_, "/-/ready").first.find(" 200") != std::string::npos) {
        return true;
      }
      std::this_thread::sleep_for(100ms);
    }
    return false;
  }
  // An instant query at `t` (seconds): its data.result.
  json query(const std::string &q, double t) const {
    const auto [status, body] = http_get(port_, "/api/v1/query?query=" + urlencode(q) +
                                                    "&time=" + fmt::format("{:.3f}", t));
    INFO(q << " -> " << status << " " << body);
    REQUIRE(status.find(" 200") != std::string::npos);
    const json j = json::parse(body);
    REQUIRE(j.at("status") == "success");
    return j.at("data").at("result");
  }
  json targets() const {
    return json::parse(http_get(port_, "/api/v1/targets").second).at("data").at("activeTargets");
  }

private:
  int port_;
  pid_t pid_ = -1;
};

// The raw samples of a range selector per series: (labels minus __name__) -> [(t, value)].
std::map<std::string, std::vector<std::pair<double, double>>> raw(const json &result) {
  std::map<std::string, std::vector<std::pair<double, double>>> out;
  for (const auto &series : result) {
    json m = series.at("metric");
    m.erase("__name__");
    auto &v = out[m.dump()];
    for (const auto &p : series.at("values")) {
      v.emplace_back(p.at(0).get<double>(), std::stod(p.at(1).get<std::string>()));
    }
  }
  return out;
}

double scalar(const json &result) {
  REQUIRE(result.size() == 1);
  return std::stod(result.at(0).at("value").at(1).get<std::string>());
}

} // namespace

TEST_CASE_METHOD(test::db_dir,
                 "Prometheus scraping rschedd --metrics-listen agrees with rsched-sql on a window",
                 "[root][bpf][prometheus]") {
  if (!test::bpf_available()) {
    return;
  }
  REQUIRE(test::in_path("prometheus"));
  test::daemon d({"--db", db, "-i", "1", "-g", "latency,migration,blame,pressure",
                  "--metrics-listen", "127.0.0.1:0"});
  d.require(d.wait_attached(), "rschedd did not attach");
  std::smatch m;
  const std::string err = d.stderr_text();
  REQUIRE(std::regex_search(err, m, std::regex(R"(metrics at http://127\.0\.0\.1:(\d+)/metrics)")));
  const int target = std::stoi(m[1]);

  const int port = free_port();
  prometheus prom(dir, port, target);
  d.require(prom.wait_ready(), "prometheus did not become ready");

  // The workload: CPU hogs named rs-prom-hog (more than CPUs: they wait for each other) and a
  // thread that sleeps and wakes (short waits).
  std::vector<pid_t> kids;
  for (int i = 0; i < 4; ++i) {
    kids.push_back(test::fork_child([] {
      prctl(PR_SET_NAME, "rs-prom-hog");
      volatile std::uint64_t x = 0;
      for (;;) {
        x = x + 1;
      }
    }));
  }
  kids.push_back(test::fork_child([] {
    prctl(PR_SET_NAME, "rs-prom-nap");
    for (;;) {
      usleep(2000);
    }
  }));
  std::this_thread::sleep_for(26s);
  const double t = static_cast<double>(test::realtime_ns()) / 1e9;
  for (pid_t p : kids) {
    kill(p, SIGKILL);
    waitpid(p, nullptr, 0);
  }

  // Prometheus saw a healthy target (it parsed every scrape).
  const json targets = prom.targets();
  REQUIRE(targets.size() == 1);
  INFO(targets.dump());
  CHECK(targets.at(0).at("health") == "up");
  CHECK(targets.at(0).at("lastError") == "");

  // The window: the scrapes of the last 20 s. rsched_intervals_total says which intervals each
  // scrape had seen; the ones between the first and the last scrape are the window in SQL.
  const std::string w = "[20s]";
  const auto iv = raw(prom.query("rsched_intervals_total" + w, t));
  REQUIRE(iv.size() == 1);
  const auto &ivs = iv.begin()->second;
  REQUIRE(ivs.size() >= 10);
  const auto first_iv = static_cast<std::int64_t>(ivs.front().second);
  const auto last_iv = static_cast<std::int64_t>(ivs.back().second);
  REQUIRE(last_iv - first_iv >= 10);

  struct family {
    std::string prom_selector; // the _count/_bucket series, without suffix
    std::string sql_from;      // FROM ... WHERE ...
  };
  const std::vector<family> families = {
      {"rsched_cpu_sched_delay_seconds", "cpu_sched_delay WHERE 1"},
      {"rsched_comm_sched_delay_seconds{comm=\"rs-prom-hog\"}",
       "sched_delay WHERE comm = 'rs-prom-hog'"},
  };
  auto suffixed = [](const std::string &sel, const std::string &suffix) {
    const auto brace = sel.find('{');
    return brace == std::string::npos ? sel + suffix
                                      : sel.substr(0, brace) + suffix + sel.substr(brace);
  };

  // Every number Prometheus holds for the window, before rschedd stops (a stop ends the run's
  // series; the data stays queryable).
  struct answers {
    std::map<std::string, std::vector<std::pair<double, double>>> counts, buckets;
    double increase = 0;
    double p99 = 0;
  };
  std::vector<answers> got;
  for (const family &f : families) {
    answers a;
    a.counts = raw(prom.query(suffixed(f.prom_selector, "_count") + w, t));
    a.buckets = raw(prom.query(suffixed(f.prom_selector, "_bucket") + w, t));
    a.increase =
        scalar(prom.query("sum(increase(" + suffixed(f.prom_selector, "_count") + w + "))", t));
    a.p99 = scalar(prom.query("histogram_quantile(0.99, sum by (le) (increase(" +
                                  suffixed(f.prom_selector, "_bucket") + w + ")))",
                              t));
    got.push_back(std::move(a));
  }
  REQUIRE(d.stop(SIGINT) == 0);

  // The intervals (first_iv, last_iv] of the run, in recording order.
  const auto starts =
      test::query_db(db, "SELECT start_ns FROM intervals WHERE tier = 0 ORDER BY start_ns");
  REQUIRE(static_cast<std::int64_t>(starts.size()) >= last_iv);
  const std::int64_t from = test::as_int(starts[static_cast<std::size_t>(first_iv)][0]);
  const std::int64_t to = test::as_int(starts[static_cast<std::size_t>(last_iv - 1)][0]);
  const auto edges = openmetrics::latency_edges_ns();

  for (std::size_t i = 0; i < families.size(); ++i) {
    const family &f = families[i];
    const answers &a = got[i];
    INFO(f.prom_selector);
    const auto row = test::query_db(db, fmt::format("SELECT sum(count), hist_merge(hist), "
                                                    "hist_pct(hist_merge(hist), 99) FROM {} AND ts "
                                                    "BETWEEN {} AND {}",
                                                    f.sql_from, from, to));
    REQUIRE(row.size() == 1);
    const std::int64_t sql_count = test::as_int(row[0][0]);
    const auto *blob = std::get_if<std::vector<std::uint8_t>>(&row[0][1]);
    REQUIRE(blob != nullptr);
    auto h = stats::decode(*blob);
    REQUIRE(h);
    const std::int64_t sql_p99 = test::as_int(row[0][2]);
    REQUIRE(sql_count > 100);

    // 1. Exact: the raw samples' growth over the window is the count of the same intervals.
    double prom_delta = 0;
    for (const auto &[labels, v] : a.counts) {
      REQUIRE(v.size() == ivs.size()); // scraped together with rsched_intervals_total
      prom_delta += v.back().second - v.front().second;
    }
    CHECK(static_cast<std::int64_t>(prom_delta) == sql_count);
    // Every `le` bucket too: our histogram summed on the documented edges.
    const auto cum = openmetrics::cumulative_counts(*h, edges);
    std::map<std::string, double> by_le;
    for (const auto &[labels, v] : a.buckets) {
      by_le[json::parse(labels).at("le").get<std::string>()] += v.back().second - v.front().second;
    }
    for (std::size_t e = 0; e < cum.size(); ++e) {
      const std::string le = e < edges.size() ? openmetrics::format_le_seconds(edges[e]) : "+Inf";
      INFO("le=" << le);
      CHECK(static_cast<std::uint64_t>(by_le[le]) == cum[e]);
    }

    // 2. increase() is the raw growth extrapolated to the window's edges, as Prometheus does it
    // (promql/functions.go, extrapolatedRate): to an edge when the gap to it is less than 1.1
    // sample intervals, else by half an interval; never before the counter's zero. Recomputed
    // from the raw samples it is within 0.5 %, and within -3 %/+12 % of the SQL count.
    double expected = 0;
    for (const auto &[labels, v] : a.counts) {
      const double first_t = v.front().first;
      const double last_t = v.back().first;
      const double growth = v.back().second - v.front().second;
      const double sampled = last_t - first_t;
      if (growth <= 0 || sampled <= 0) {
        continue;
      }
      const double avg = sampled / static_cast<double>(v.size() - 1);
      double to_start = first_t - (t - 20);
      const double to_end = t - last_t;
      to_start = std::min(to_start, sampled * (v.front().second / growth));
      const double limit = avg * 1.1;
      const double span =
          sampled + (to_start < limit ? to_start : avg / 2) + (to_end < limit ? to_end : avg / 2);
      expected += growth * span / sampled;
    }
    INFO("increase " << a.increase << ", recomputed " << expected << ", sql " << sql_count);
    CHECK(a.increase == Approx(expected).epsilon(0.005));
    CHECK(a.increase >= 0.97 * static_cast<double>(sql_count));
    CHECK(a.increase <= 1.12 * static_cast<double>(sql_count));

    // 3. p99: Prometheus interpolates inside the `le` bucket that holds the 99th percentile;
    // rsched-sql's p99 is in that same bucket.
    std::size_t k = 0;
    while (k < edges.size() &&
           static_cast<double>(cum[k]) < 0.99 * static_cast<double>(cum.back())) {
      ++k;
    }
    const double lo = k == 0 ? 0.0 : static_cast<double>(edges[k - 1]) / 1e9;
    const double hi = k < edges.size() ? static_cast<double>(edges[k]) / 1e9 : 1e9;
    INFO("p99 prometheus " << a.p99 << " s, rsched-sql " << sql_p99 << " ns, bucket " << lo
                           << " .. " << hi);
    CHECK(a.p99 >= lo);
    CHECK(a.p99 <= hi);
    CHECK(static_cast<double>(sql_p99) / 1e9 >= lo);
    CHECK(static_cast<double>(sql_p99) / 1e9 <= hi);
  }
}
