// The compact live view: a sliding window of bounded per-comm summaries, rendered to fit the
// terminal, worst scheduling delay first.
#include "rsched/rschedd/compact.hpp"
#include "rsched/rschedd/live.hpp"

#include <catch2/catch.hpp>

#include <poll.h>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

using metric = rsched::metrics::id;

using namespace rsched;
using namespace rsched::rschedd;

namespace {

constexpr std::int64_t sec = 1'000'000'000;

store::thread_row thread(std::uint32_t tid, std::string comm, std::uint64_t delay_us,
                         std::uint64_t n) {
  store::thread_row t;
  t.tid = tid;
  t.pid = tid;
  t.comm = std::move(comm);
  t.cgroup = "/";
  t.m[metric::sched_delay].count = n;
  t.m[metric::sched_delay].total = n * delay_us * 1000;
  t.m[metric::sched_delay].hist.add(delay_us * 1000, n);
  return t;
}

// An interval ending at `end_s` seconds.
store::interval_row interval(std::int64_t end_s, std::vector<store::thread_row> threads) {
  store::interval_row r;
  r.start_ns = (end_s - 1) * sec;
  r.dur_ns = sec;
  r.threads = std::move(threads);
  store::cpu_row c;
  c.cpu = 0;
  c.m[metric::cpu_sched_delay].hist.add(5000, 3);
  r.cpus.push_back(c);
  return r;
}

std::vector<std::string> lines_of(const std::string &s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string l;
  while (std::getline(ss, l)) {
    out.push_back(l);
  }
  return out;
}

std::string show(const compact_window &w, const filter &f = {}, int rows = 40, int cols = 160) {
  compact_header h;
  h.end_ns = 100 * sec;
  h.dur_ns = sec;
  h.recording = "recording to /tmp/x.db";
  return render_compact(w, h, render_options{}, f, rows, cols);
}

} // namespace

TEST_CASE("compact view: a storm shows while in the window and leaves it after", "[rschedd]") {
  compact_window w(5 * sec);
  w.push(interval(1, {thread(1, "calm", 10, 100)}), {});
  w.push(interval(2, {thread(1, "calm", 10, 100), thread(2, "storm", 80'000, 50)}), {});
  auto out = show(w);
  INFO(out);
  // Worst p99 first.
  REQUIRE(out.find("storm") != std::string::npos);
  CHECK(out.find("storm") < out.find("calm"));
  for (std::int64_t s = 3; s <= 7; ++s) {
    w.push(interval(s, {thread(1, "calm", 10, 100)}), {});
  }
  CHECK(w.intervals().size() == 5);
  out = show(w);
  INFO(out);
  CHECK(out.find("storm") == std::string::npos);
  CHECK(out.find("calm") != std::string::npos);
}

TEST_CASE("compact view: memory is bounded whatever the number of comms", "[rschedd]") {
  compact_window w(5 * sec, 64);
  std::vector<store::thread_row> many;
  for (std::uint32_t i = 0; i < 100'000; ++i) {
    many.push_back(thread(i + 1, "c" + std::to_string(i), 1 + i % 1000, 1));
  }
  many.push_back(thread(200'000, "worst", 900'000, 1));
  many.push_back(thread(200'001, "busiest", 5, 100'000));
  w.push(interval(1, std::move(many)), {});
  REQUIRE(w.intervals().size() == 1);
  const auto &iv = w.intervals().front();
  CHECK(iv.comms.size() == 64);
  CHECK(iv.other_comms == 100'002 - 64);
  bool worst = false;
  bool busiest = false;
  for (const auto &c : iv.comms) {
    worst = worst || c.comm == "worst";
    busiest = busiest || c.comm == "busiest";
  }
  CHECK(worst);
  CHECK(busiest);
  CHECK(iv.threads == 100'002);
}

TEST_CASE("compact view: every line fits the terminal", "[rschedd]") {
  compact_window w;
  std::vector<store::thread_row> ts;
  for (std::uint32_t i = 0; i < 300; ++i) {
    ts.push_back(thread(i + 1, "a-rather-long-comm" + std::to_string(i), 10 + i, 5));
  }
  w.push(interval(1, ts), {});
  for (int rows = 1; rows <= 60; rows += 3) {
    for (int cols = 10; cols <= 200; cols += 19) {
      const auto out = show(w, {}, rows, cols);
      const auto ls = lines_of(out);
      INFO(rows << "x" << cols << "\n" << out);
      CHECK(ls.size() <= static_cast<std::size_t>(rows));
      for (const auto &l : ls) {
        CHECK(text::display_width(l) <= static_cast<std::size_t>(cols));
      }
      CHECK((out.empty() || out.back() != '\n')); // never scrolls the screen
    }
  }
  const auto out = show(w, {}, 24, 120);
  CHECK(out.find("more)") != std::string::npos); // says what did not fit
}

TEST_CASE("compact view: hostile names are escaped, filters apply", "[rschedd]") {
  compact_window w;
  filter_options o;
  o.comm = {"^web"};
  auto f = filter::make(o);
  REQUIRE(f.ok());
  w.push(interval(1, {thread(1, "web\x1b[2J\"a,b\xff", 100, 10), thread(2, "postgres", 900, 10)}),
         *f);
  const auto out = show(w, *f);
  INFO(out);
  CHECK(out.find('\x1b') == std::string::npos);
  CHECK(out.find("\\x1b") != std::string::npos);
  CHECK(out.find("postgres") == std::string::npos); // filtered out by -c

  filter_options l;
  l.min_latency_us = 500; // -l: hide comms whose p50 is below 500 us
  auto fl = filter::make(l);
  REQUIRE(fl.ok());
  compact_window w2;
  w2.push(interval(1, {thread(1, "fast", 100, 10), thread(2, "slow", 900, 10)}), *fl);
  const auto out2 = show(w2, *fl);
  CHECK(out2.find("fast") == std::string::npos);
  CHECK(out2.find("slow") != std::string::npos);
}

TEST_CASE("compact view: the header says when the recorder or the display fell behind",
          "[rschedd]") {
  compact_window w;
  w.push(interval(1, {thread(1, "x", 10, 1)}), {});
  compact_header h;
  h.end_ns = sec;
  h.dur_ns = 4 * sec;
  h.recording = "recording to /tmp/x.db";
  h.intervals_written = 41;
  h.stalled = true;
  h.write_failures = 3;
  h.display_skipped = 2;
  const auto out = render_compact(w, h, render_options{}, {}, 24, 200);
  INFO(out);
  CHECK(out.find("recorder fell behind") != std::string::npos);
  CHECK(out.find("3 intervals not written") != std::string::npos);
  CHECK(out.find("display skipped 2") != std::string::npos);
  CHECK(out.find("41 intervals written") != std::string::npos);
  compact_header live_only;
  live_only.recording = "not recording (--no-db)";
  CHECK(render_compact(w, live_only, render_options{}, {}, 24, 200).find("intervals written") ==
        std::string::npos);
  compact_window empty;
  CHECK(render_compact(empty, {}, render_options{}, {}, 24, 80).find("waiting") !=
        std::string::npos);
}

// issue 32: RQ99 was not explained on screen.
TEST_CASE("compact view: a legend line says what RQ99 (and SLP99, WAK99) are", "[rschedd]") {
  compact_window w;
  w.push(interval(1, {thread(1, "x", 10, 5)}), {});
  const auto ls = lines_of(show(w));
  REQUIRE_FALSE(ls.empty());
  CHECK(ls.back() == "RQ99: run-queue depth at wakeup, p99");
  compact_header h;
  h.end_ns = 100 * sec;
  render_options o;
  o.groups = RSCHED_G_LATENCY | RSCHED_G_SLEEP | RSCHED_G_WAKING;
  const auto all = lines_of(render_compact(w, h, o, {}, 40, 160));
  REQUIRE_FALSE(all.empty());
  CHECK(all.back() == "RQ99: run-queue depth at wakeup, p99; SLP99: sleep duration, p99; "
                      "WAK99: waking delay, p99");
  // Without the latency group there is no RQ99 column and nothing to explain.
  o.groups = RSCHED_G_SLICE;
  const auto none = render_compact(w, h, o, {}, 40, 160);
  CHECK(none.find("RQ99") == std::string::npos);
}

// issue 32: the last frame had no line end ("...9.6msrschedd: stopped after 20.0 s").
TEST_CASE("live view: the last frame's line is ended when the display stops", "[rschedd]") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  std::string got;
  {
    live_config lc;
    live_display d(std::move(lc), terminal_out(fds[1]));
    live_frame f;
    f.row = interval(1, {thread(1, "x", 10, 5)});
    f.header.end_ns = 100 * sec;
    d.offer(std::move(f));
    // Wait for the frame (the display thread writes it whole; the pipe holds 64 KiB).
    char buf[4096];
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    REQUIRE(n > 0);
    got.append(buf, static_cast<std::size_t>(n));
    for (int i = 0; i < 50 && got.find("CPU delay p99: ") == std::string::npos; ++i) {
      pollfd p{fds[0], POLLIN, 0};
      if (::poll(&p, 1, 100) > 0) {
        const ssize_t m = ::read(fds[0], buf, sizeof buf);
        REQUIRE(m > 0);
        got.append(buf, static_cast<std::size_t>(m));
      }
    }
    REQUIRE(got.find("CPU delay p99: ") != std::string::npos); // the frame's last lines
    CHECK(got.back() != '\n');                                 // a frame alone never scrolls
  } // stops the display; the write end is closed with it
  char buf[64];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) {
    got.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  CHECK(got.back() == '\n');
  CHECK(got.find("\n\n", got.size() - 2) == std::string::npos); // one line end, not a blank line
}
