// rschedd's Prometheus side (metrics.hpp) over plain data and a loopback socket: which keys get
// series, that every series only grows, the numbers against the intervals they came from, hostile
// names, content negotiation, the HTTP server's bounds and the textfile. No root, no BPF.
#include "rsched/openmetrics/openmetrics.hpp"
#include "rsched/rschedd/metrics.hpp"

#include "support/net.hpp"
#include "support/temp_dir.hpp"

#include <catch2/catch.hpp>
#include <sys/socket.h>
#include <sys/stat.h>

#include <arpa/inet.h>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <netinet/in.h>
#include <poll.h>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace rsched;
using namespace rsched::rschedd;
namespace om = rsched::openmetrics;
using metrics::id;

namespace {

constexpr std::int64_t s = 1'000'000'000;
constexpr std::int64_t t0 = 1'795'000'000 * s;

store::thread_row thread(std::uint32_t tid, const std::string &comm, const std::string &cgroup,
                         std::uint64_t delays, std::uint64_t delay_ns = 30'000) {
  store::thread_row t;
  t.tid = tid;
  t.pid = tid;
  t.comm = comm;
  t.cgroup = cgroup;
  auto &d = t.m[id::sched_delay];
  d.count = delays;
  d.total = delays * delay_ns;
  d.hist.add(delay_ns, delays);
  return t;
}

store::interval_row interval(std::int64_t start, std::vector<store::thread_row> threads) {
  store::interval_row r;
  r.start_ns = start;
  r.dur_ns = s;
  r.groups = RSCHED_G_LATENCY | RSCHED_G_MIGRATION | RSCHED_G_BLAME;
  r.threads = std::move(threads);
  return r;
}

std::string render(const metrics_state &m, om::format f = om::format::prometheus) {
  std::ostringstream out;
  m.render(out, f);
  return out.str();
}

// "name{labels}" -> value of every sample line.
std::map<std::string, std::string> samples(const std::string &text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') {
      continue;
    }
    const auto sp = line.rfind(' ');
    REQUIRE(sp != std::string::npos);
    out[line.substr(0, sp)] = line.substr(sp + 1);
  }
  return out;
}

double num(const std::map<std::string, std::string> &m, const std::string &key) {
  const auto it = m.find(key);
  INFO(key);
  REQUIRE(it != m.end());
  return std::stod(it->second);
}

bool valid_utf8(const std::string &sv) {
  std::size_t i = 0;
  while (i < sv.size()) {
    const auto c = static_cast<unsigned char>(sv[i]);
    const std::size_t n = c < 0x80         ? 1
                          : (c >> 5) == 6  ? 2
                          : (c >> 4) == 14 ? 3
                          : (c >> 3) == 30 ? 4
                                           : 0;
    if (n == 0 || i + n > sv.size()) {
      return false;
    }
    for (std::size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(sv[i + k]) >> 6) != 2) {
        return false;
      }
    }
    i += n;
  }
  return true;
}

// A loopback TCP client that sends `request` and reads until the server closes or `wait_ms`.
std::string http(int port, const std::string &request, int wait_ms = 5000) {
  const int fd = test::connect_loopback(port);
  REQUIRE(fd >= 0);
  std::size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      break; // the server may close on an oversized request before it is all sent
    }
    sent += static_cast<std::size_t>(n);
  }
  std::string reply;
  char buf[65536];
  pollfd p{fd, POLLIN, 0};
  while (poll(&p, 1, wait_ms) > 0) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      break;
    }
    reply.append(buf, static_cast<std::size_t>(n));
  }
  close(fd);
  return reply;
}

std::string get(const std::string &path, const std::string &accept = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" +
         (accept.empty() ? std::string() : "Accept: " + accept + "\r\n") + "\r\n";
}

} // namespace

TEST_CASE("top_keys: the busiest keys get series, keep them until outrun or idle, and every "
          "change is reported",
          "[metrics]") {
  top_keys k(2, 600 * s, 60 * s);
  k.update({{"a", 50}, {"b", 30}, {"c", 10}}, t0);
  CHECK(k.named("a"));
  CHECK(k.named("b"));
  CHECK_FALSE(k.named("c"));
  CHECK(k.created("a") == t0);
  CHECK(k.expired().empty());
  // c busier than b, but not twice as busy: no churn at the boundary.
  k.update({{"c", 40}, {"a", 50}, {"b", 30}}, t0 + s);
  CHECK_FALSE(k.named("c"));
  CHECK(k.expired().empty());
  // A newcomer far busier than the least busy named key takes its slot at once.
  k.update({{"d", 1000}, {"a", 50}, {"b", 30}}, t0 + 2 * s);
  CHECK(k.named("d"));
  CHECK(k.created("d") == t0 + 2 * s);
  CHECK(k.named("a"));
  CHECK_FALSE(k.named("b"));
  CHECK(k.expired() == std::vector<std::string>{"b"});
  CHECK(k.created("a") == t0); // kept its series
  // Idle for longer than the expiry: the slot is free again.
  top_keys idle(2, 10 * s, 60 * s);
  idle.update({{"a", 5}, {"b", 5}}, t0);
  idle.update({{"b", 5}}, t0 + 20 * s);
  CHECK(idle.expired() == std::vector<std::string>{"a"});
  CHECK(idle.size() == 1);
  // Keys that may not be named never are.
  top_keys e(5, 60 * s);
  e.update({{"other", 9}, {"x", 1}}, t0, [](const std::string &key) { return key != "other"; });
  CHECK_FALSE(e.named("other"));
  CHECK(e.named("x"));
}

TEST_CASE("metrics_state: per-CPU and per-cgroup histograms are the sums of the intervals, the "
          "rest is \"other\", and no series ever shrinks",
          "[metrics]") {
  metrics_config cfg;
  cfg.top = 2;
  cfg.start_ns = t0 - 5 * s;
  metrics_state m(cfg);

  auto iv1 =
      interval(t0, {thread(1, "pg", "/a", 10), thread(2, "pg", "/a", 5), thread(3, "web", "/b", 7),
                    thread(4, "batch", "/c", 2), thread(5, "kthread", "", 1)});
  store::cpu_row c0;
  c0.cpu = 0;
  c0.m[id::cpu_sched_delay].count = 3;
  c0.m[id::cpu_sched_delay].total = 3 * 15'000 + 40'000'000;
  c0.m[id::cpu_sched_delay].hist.add(15'000, 3);
  c0.m[id::cpu_sched_delay].hist.add(40'000'000, 1);
  c0.m[id::cpu_sched_delay].count = 4;
  iv1.cpus.push_back(c0);
  iv1.threads[0].migrations = 4;
  m.add(iv1, {.written = true, .write_failed = false, .write_ns = 2'000'000});

  auto v = samples(render(m));
  // /a and /b were the busiest; /c and the unknown cgroup are the rest.
  CHECK(num(v, R"(rsched_cgroup_sched_delay_seconds_count{cgroup="/a"})") == 15);
  CHECK(num(v, R"(rsched_cgroup_sched_delay_seconds_count{cgroup="/b"})") == 7);
  CHECK(num(v, R"(rsched_cgroup_sched_delay_seconds_count{cgroup="other"})") == 3);
  CHECK(num(v, R"(rsched_cgroup_sched_delay_seconds_sum{cgroup="/a"})") == Approx(15 * 30e-6));
  CHECK(num(v, R"(rsched_cgroup_migrations_total{cgroup="/a"})") == 4);
  // The CPU histogram: 3 samples at 15 µs are below the 20 µs edge, the 40 ms one above 32.768 ms.
  CHECK(num(v, R"(rsched_cpu_sched_delay_seconds_bucket{cpu="0",le="0.00001"})") == 0);
  CHECK(num(v, R"(rsched_cpu_sched_delay_seconds_bucket{cpu="0",le="0.00002"})") == 3);
  CHECK(num(v, R"(rsched_cpu_sched_delay_seconds_bucket{cpu="0",le="0.032768"})") == 3);
  CHECK(num(v, R"(rsched_cpu_sched_delay_seconds_bucket{cpu="0",le="0.065536"})") == 4);
  CHECK(num(v, R"(rsched_cpu_sched_delay_seconds_bucket{cpu="0",le="+Inf"})") == 4);
  CHECK(num(v, R"(rsched_cpu_sched_delay_seconds_count{cpu="0"})") == 4);
  CHECK(num(v, R"(rsched_cpu_sched_delay_seconds_sum{cpu="0"})") == Approx(0.040045));
  CHECK(num(v, "rsched_intervals_total") == 1);
  CHECK(num(v, "rsched_write_seconds_total") == Approx(0.002));
  // The 0.0.4 format has no _created and no # EOF.
  const std::string text = render(m);
  CHECK(text.find("_created") == std::string::npos);
  CHECK(text.find("# EOF") == std::string::npos);

  // /c a little busier than /b: no slot changes hands; its samples go on in "other", which only
  // grows.
  m.add(interval(t0 + s, {thread(4, "batch", "/c", 10), thread(1, "pg", "/a", 1)}), {});
  v = samples(render(m));
  CHECK(num(v, R"(rsched_cgroup_sched_delay_seconds_count{cgroup="/a"})") == 16);
  CHECK(num(v, R"(rsched_cgroup_sched_delay_seconds_count{cgroup="/b"})") == 7);
  CHECK(num(v, R"(rsched_cgroup_sched_delay_seconds_count{cgroup="other"})") == 13);
  CHECK(num(v, "rsched_intervals_total") == 2);
  // /c far busier: it takes the slot of /b (the least busy), whose series ends; /c's starts at
  // zero, and what /c did before stays in "other".
  m.add(interval(t0 + 2 * s, {thread(4, "batch", "/c", 500), thread(1, "pg", "/a", 1)}), {});
  v = samples(render(m));
  CHECK(v.count(R"(rsched_cgroup_sched_delay_seconds_count{cgroup="/b"})") == 0);
  CHECK(num(v, R"(rsched_cgroup_sched_delay_seconds_count{cgroup="/c"})") == 500);
  CHECK(num(v, R"(rsched_cgroup_sched_delay_seconds_count{cgroup="other"})") == 13);
  CHECK(num(v, R"(rsched_cgroup_sched_delay_seconds_count{cgroup="/a"})") == 17);

  // OpenMetrics: _created per series (a named key: the interval it got its slot; "other" and the
  // CPUs: the start of the run) and # EOF at the end.
  const std::string omt = render(m, om::format::openmetrics);
  const auto ov = samples(omt);
  CHECK(num(ov, R"(rsched_cgroup_sched_delay_seconds_created{cgroup="/a"})") ==
        Approx(static_cast<double>(t0) / 1e9));
  CHECK(num(ov, R"(rsched_cgroup_sched_delay_seconds_created{cgroup="other"})") ==
        Approx(static_cast<double>(cfg.start_ns) / 1e9));
  CHECK(num(ov, R"(rsched_cpu_sched_delay_seconds_created{cpu="0"})") ==
        Approx(static_cast<double>(cfg.start_ns) / 1e9));
  CHECK(omt.size() > 6);
  CHECK(omt.substr(omt.size() - 6) == "# EOF\n");
}

TEST_CASE("metrics_state: an idle cgroup gives its slot back and a new one starts from zero",
          "[metrics]") {
  metrics_config cfg;
  cfg.top = 1;
  cfg.idle_expiry_ns = 10 * s;
  cfg.start_ns = t0;
  metrics_state m(cfg);
  m.add(interval(t0, {thread(1, "a", "/a", 5), thread(2, "b", "/b", 2)}), {});
  m.add(interval(t0 + 20 * s, {thread(2, "b", "/b", 4)}), {});
  auto v = samples(render(m));
  CHECK(v.count(R"(rsched_cgroup_sched_delay_seconds_count{cgroup="/a"})") == 0);
  // /b's samples before it had a series stay in "other"; from its slot on they count there.
  CHECK(num(v, R"(rsched_cgroup_sched_delay_seconds_count{cgroup="/b"})") == 4);
  CHECK(num(v, R"(rsched_cgroup_sched_delay_seconds_count{cgroup="other"})") == 2);
}

TEST_CASE("metrics_state: hostile comms and cgroups are label values, never markup; comms "
          "that cannot be told from the rest count in it",
          "[metrics]") {
  metrics_config cfg;
  cfg.top = 10;
  cfg.start_ns = t0;
  metrics_state m(cfg);
  const std::string evil = std::string("a\"b\\c\nd\x1b[31m,e=\"f\"} 1\xff");
  m.add(interval(t0, {thread(1, evil, "/x\"y\n", 3), thread(2, "other", "/a", 4),
                      thread(3, "", "/a", 5), thread(4, "ok", "/a", 6)}),
        {});
  for (const auto f : {om::format::prometheus, om::format::openmetrics}) {
    const std::string text = render(m, f);
    CHECK(valid_utf8(text));
    // Every line is a comment or `name{...} value`: no label value broke out of its quotes.
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
      INFO(line);
      CHECK(line.find('\x1b') == std::string::npos);
      if (line.empty() || line[0] == '#') {
        continue;
      }
      CHECK(line.rfind("rsched_", 0) == 0);
    }
    const auto v = samples(text);
    const std::string label = om::escape_label_value(evil);
    CHECK(num(v, "rsched_comm_sched_delay_seconds_count{comm=\"" + label + "\"}") == 3);
    CHECK(num(v, R"(rsched_comm_sched_delay_seconds_count{comm="other"})") == 9); // "other", ""
    CHECK(num(v, R"(rsched_comm_sched_delay_seconds_count{comm="ok"})") == 6);
    CHECK(num(v, "rsched_cgroup_sched_delay_seconds_count{cgroup=\"" +
                     om::escape_label_value("/x\"y\n") + "\"}") == 3);
  }
}

TEST_CASE("metrics_state: runqueue depth is an integer histogram with exact le bounds",
          "[metrics]") {
  metrics_config cfg;
  cfg.start_ns = t0;
  metrics_state m(cfg);
  auto t = thread(1, "a", "/a", 1);
  auto &d = t.m[id::runq_depth];
  d.hist.kind = stats::layout::depth;
  d.hist.add(0, 2);
  d.hist.add(4, 1);
  d.hist.add(5, 1);
  d.hist.add(100, 1); // the open bucket
  d.count = 5;
  d.total = 0 + 4 + 5 + 100;
  m.add(interval(t0, {t}), {});
  const auto v = samples(render(m));
  CHECK(num(v, R"(rsched_cgroup_runqueue_depth_bucket{cgroup="/a",le="0"})") == 2);
  CHECK(num(v, R"(rsched_cgroup_runqueue_depth_bucket{cgroup="/a",le="3"})") == 2);
  CHECK(num(v, R"(rsched_cgroup_runqueue_depth_bucket{cgroup="/a",le="4"})") == 3);
  CHECK(num(v, R"(rsched_cgroup_runqueue_depth_bucket{cgroup="/a",le="6"})") == 4);
  CHECK(num(v, R"(rsched_cgroup_runqueue_depth_bucket{cgroup="/a",le="62"})") == 4);
  CHECK(num(v, R"(rsched_cgroup_runqueue_depth_bucket{cgroup="/a",le="+Inf"})") == 5);
  CHECK(num(v, R"(rsched_cgroup_runqueue_depth_sum{cgroup="/a"})") == 109);
}

TEST_CASE("Listen addresses (--metrics-listen): a bare port is loopback; bad ones are one line",
          "[metrics]") {
  auto a = parse_listen_address("9466");
  REQUIRE(a);
  CHECK(a->host == "127.0.0.1");
  CHECK(a->port == 9466);
  a = parse_listen_address("0.0.0.0:9466");
  REQUIRE(a);
  CHECK(a->host == "0.0.0.0");
  a = parse_listen_address("[::1]:80");
  REQUIRE(a);
  CHECK(a->host == "::1");
  CHECK(a->port == 80);
  for (const char *bad :
       {"", ":", "x", "65536", "::1:80", "[::1]80", "host:", "a b:1", "1.2.3.4:-1", "\x1b[2J:1"}) {
    INFO(bad);
    const auto r = parse_listen_address(bad);
    REQUIRE_FALSE(r);
    CHECK(r.err().msg.find('\n') == std::string::npos);
    CHECK(r.err().msg.find('\x1b') == std::string::npos);
  }
}

TEST_CASE("Content negotiation: OpenMetrics when the scraper lists it (not with q=0)",
          "[metrics]") {
  // What Prometheus 2.42 sends.
  CHECK(negotiate("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                  "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1") ==
        om::format::openmetrics);
  CHECK(negotiate("") == om::format::prometheus);
  CHECK(negotiate("text/plain") == om::format::prometheus);
  CHECK(negotiate("*/*") == om::format::prometheus);
  CHECK(negotiate("application/openmetrics-text; q=0") == om::format::prometheus);
  CHECK(negotiate("application/openmetrics-text;q=0.000, text/plain") == om::format::prometheus);
  CHECK(negotiate("text/plain, application/openmetrics-text ; q=0.2") == om::format::openmetrics);
  CHECK(content_type(om::format::openmetrics).starts_with("application/openmetrics-text"));
  CHECK(content_type(om::format::prometheus).starts_with("text/plain; version=0.0.4"));
}

TEST_CASE("metrics_server: GET /metrics serves the latest interval in the format asked for, "
          "within its bounds",
          "[metrics]") {
  metrics_config cfg;
  cfg.start_ns = t0;
  metrics_state m(cfg);
  metrics_board board;
  board.publish(m);
  server_limits lim;
  lim.workers = 2;
  lim.queued = 2;
  lim.timeout_s = 1;
  lim.keep_alive_s = 1;
  auto srv = metrics_server::start({"127.0.0.1", 0}, board, lim);
  REQUIRE(srv);
  const int port = (*srv)->port();
  REQUIRE(port > 0);
  CHECK((*srv)->address() == "127.0.0.1:" + std::to_string(port));

  std::string reply = http(port, get("/metrics"));
  CHECK(reply.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(reply.find("Content-Type: text/plain; version=0.0.4; charset=utf-8") != std::string::npos);
  CHECK(reply.find("rsched_intervals_total 0") != std::string::npos);

  m.add(interval(t0, {thread(1, "pg", "/a", 10)}), {});
  board.publish(m);
  reply = http(port, get("/metrics", "application/openmetrics-text;version=1.0.0"));
  CHECK(reply.find("Content-Type: application/openmetrics-text; version=1.0.0; charset=utf-8") !=
        std::string::npos);
  CHECK(reply.find("rsched_intervals_total 1") != std::string::npos);
  CHECK(reply.find(R"(rsched_cgroup_sched_delay_seconds_count{cgroup="/a"} 10)") !=
        std::string::npos);
  CHECK(reply.find("# EOF\n") != std::string::npos);

  CHECK(http(port, get("/nope")).rfind("HTTP/1.1 404", 0) == 0);
  // An oversized request is refused and the server goes on.
  const std::string big = "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n" +
                          std::string(1'000'000, 'x');
  const std::string refused = http(port, big);
  CHECK(refused.rfind("HTTP/1.1 200", 0) != 0);
  // Stalled clients (connected, never sending) hold a worker for at most the timeout: more of
  // them than workers and queue together, and a scrape still gets through, while intervals are
  // published all along (the recorder never waits for the server).
  std::vector<int> stalled;
  for (int i = 0; i < 8; ++i) {
    const int fd = test::connect_loopback(port);
    REQUIRE(fd >= 0);
    stalled.push_back(fd);
  }
  for (int i = 0; i < 50; ++i) {
    m.add(interval(t0 + (i + 1) * s, {thread(1, "pg", "/a", 1)}), {});
    board.publish(m);
  }
  reply = http(port, get("/metrics"), 20000);
  CHECK(reply.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(reply.find("rsched_intervals_total 51") != std::string::npos);
  for (int fd : stalled) {
    close(fd);
  }
}

TEST_CASE("The textfile (--metrics-textfile) takes the latest interval atomically; a "
          "place that cannot take it is one line",
          "[metrics]") {
  test::temp_dir tmp;
  const std::string path = tmp.str() + "/rsched.prom";
  metrics_config cfg;
  cfg.start_ns = t0;
  metrics_state m(cfg);
  metrics_board board;
  board.publish(m);
  std::vector<std::string> notes;
  {
    metrics_textfile tf(path, board, [&](std::string_view n) { notes.emplace_back(n); });
    REQUIRE(tf.flush());
    m.add(interval(t0, {thread(1, "pg", "/a", 10)}), {});
    board.publish(m);
    REQUIRE(tf.flush());
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    CHECK(text.str() == *board.render(om::format::prometheus).body);
    CHECK(text.str().find("rsched_intervals_total 1") != std::string::npos);
    CHECK((std::filesystem::status(path).permissions() & std::filesystem::perms::others_read) !=
          std::filesystem::perms::none);
  }
  // Nothing but the file itself: no temporary left behind.
  CHECK(std::distance(std::filesystem::directory_iterator(tmp.str()),
                      std::filesystem::directory_iterator()) == 1);

  metrics_board b2;
  b2.publish(m);
  std::vector<std::string> n2;
  metrics_textfile bad(tmp.str() + "/no/such/dir/\x1b[2Jx.prom", b2,
                       [&](std::string_view n) { n2.emplace_back(n); });
  const auto r = bad.flush();
  REQUIRE_FALSE(r);
  CHECK(r.err().msg.find("No such file or directory") != std::string::npos);
  CHECK(r.err().msg.find('\x1b') == std::string::npos);
  REQUIRE(n2.size() == 1);
}

// Issue 30: the textfile directory is often node_exporter's (another user's). A link planted at
// FILE or at the old predictable FILE.tmp must never make root truncate and rewrite what it
// points at; FILE is replaced by a new 0644 file.
TEST_CASE("The textfile never writes through a link planted at FILE or FILE.tmp", "[metrics]") {
  test::temp_dir tmp;
  test::temp_dir elsewhere;
  const std::string path = tmp.str() + "/rsched.prom";
  const std::string victim = elsewhere.str() + "/root-file";
  const std::string victim_tmp = elsewhere.str() + "/root-file-2";
  for (const auto &v : {victim, victim_tmp}) {
    std::ofstream(v) << "precious\n";
    REQUIRE(::chmod(v.c_str(), 0600) == 0);
  }
  REQUIRE(::symlink(victim.c_str(), path.c_str()) == 0);
  REQUIRE(::symlink(victim_tmp.c_str(), (path + ".tmp").c_str()) == 0);
  metrics_config cfg;
  cfg.start_ns = t0;
  metrics_state m(cfg);
  m.add(interval(t0, {thread(1, "\" /path/x.so \"", "/a", 10)}), {});
  metrics_board board;
  board.publish(m);
  {
    metrics_textfile tf(path, board, nullptr);
    REQUIRE(tf.flush());
  }
  for (const auto &v : {victim, victim_tmp}) {
    std::ifstream in(v);
    std::stringstream text;
    text << in.rdbuf();
    CHECK(text.str() == "precious\n");
    CHECK((std::filesystem::status(v).permissions() & std::filesystem::perms::all) ==
          (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write));
  }
  CHECK(std::filesystem::is_regular_file(std::filesystem::symlink_status(path)));
  CHECK((std::filesystem::status(path).permissions() & std::filesystem::perms::all) ==
        (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write |
         std::filesystem::perms::group_read | std::filesystem::perms::others_read));
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(text.str().find("rsched_intervals_total 1") != std::string::npos);
}

TEST_CASE("Every family the endpoint serves is in the dashboard's list (tests/dist), and the "
          "other way round",
          "[metrics]") {
  metrics_config cfg;
  cfg.start_ns = t0;
  metrics_state m(cfg);
  auto row = interval(t0, {thread(1, "pg", "/a", 10)});
  row.groups = RSCHED_G_LATENCY | RSCHED_G_SLICE | RSCHED_G_SLEEP | RSCHED_G_WAKING |
               RSCHED_G_MIGRATION | RSCHED_G_BLAME;
  store::blame_row b;
  b.comm = "hog";
  b.wait_ns = 1000;
  b.waits = 1;
  row.threads[0].blame.push_back(b);
  store::cpu_row c;
  c.cpu = 0;
  row.cpus.push_back(c);
  store::cgroup_cpu_row p;
  p.cgroup = "/";
  p.some_ns = p.full_ns = p.usage_ns = p.periods = p.throttled = p.throttled_ns = 1;
  row.cgroup_cpu.push_back(p);
  row.bpf_run_ns = 1;
  row.bpf_run_cnt = 1;
  row.rss_bytes = 1;
  m.add(row, {});
  std::set<std::string> served;
  std::istringstream text(render(m));
  std::string line;
  while (std::getline(text, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      served.insert(line.substr(7, line.find(' ', 7) - 7));
    }
  }
  // The list in the dashboard check, between `cat >"$tmp/families" <<'EOF'` and `EOF`.
  std::ifstream in(std::filesystem::path(__FILE__).parent_path().parent_path() / "dist" /
                   "check_grafana.sh");
  REQUIRE(in);
  std::set<std::string> listed;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line.find("\"$tmp/families\"") != std::string::npos) {
      inside = true;
    } else if (inside && line == "EOF") {
      break;
    } else if (inside) {
      listed.insert(line.substr(line.find(' ') + 1));
    }
  }
  CHECK(served == listed);
}

TEST_CASE("metrics_server: stopped right after it started (rschedd failing at startup), it "
          "ends",
          "[metrics]") {
  metrics_board board;
  for (int i = 0; i < 50; ++i) {
    auto srv = metrics_server::start({"127.0.0.1", 0}, board);
    REQUIRE(srv);
  } // each destructor returns: a hang here is the failure (ctest's timeout)
  // A port that is taken is one line.
  auto first = metrics_server::start({"127.0.0.1", 0}, board);
  REQUIRE(first);
  const auto taken = metrics_server::start({"127.0.0.1", (*first)->port()}, board);
  REQUIRE_FALSE(taken);
  CHECK(taken.err().msg.find("cannot listen on 127.0.0.1:") != std::string::npos);
  CHECK(taken.err().msg.find('\n') == std::string::npos);
}
