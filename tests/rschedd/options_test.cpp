#include "rsched/rschedd/options.hpp"
#include "rsched/rschedd/startup.hpp"

#include <catch2/catch.hpp>

#include <cerrno>
#include <string>
#include <vector>

using rsched::rschedd::parse_options;

TEST_CASE("rschedd defaults", "[rschedd]") {
  auto o = parse_options({});
  REQUIRE(o.ok());
  CHECK_FALSE(o->delay_rq_clock); // the monotonic clock
  auto rq = parse_options({"--delay-clock", "runqueue"});
  REQUIRE(rq.ok());
  CHECK(rq->delay_rq_clock);
  auto mono = parse_options({"--delay-clock=runqueue", "--delay-clock", "monotonic"});
  REQUIRE(mono.ok());
  CHECK_FALSE(mono->delay_rq_clock);
  CHECK(o->interval_s == 1);
  CHECK_FALSE(o->run_time_s.has_value());
  CHECK(o->db_path == "/var/lib/rsched/rsched.db");
  CHECK_FALSE(o->no_db);
}

TEST_CASE("rschedd flags", "[rschedd]") {
  auto o = parse_options({"-i", "5", "-r", "30", "--db", "/tmp/x.db", "--bpf-mode=raw_tp"});
  REQUIRE(o.ok());
  CHECK(o->interval_s == 5);
  CHECK(o->run_time_s == 30u);
  CHECK(o->db_path == "/tmp/x.db");
  CHECK(o->mode == rsched::bpf::attach_mode::raw_tp);
  auto n = parse_options({"--no-db", "--interval=2"});
  REQUIRE(n.ok());
  CHECK(n->no_db);
  CHECK(n->interval_s == 2);
  CHECK(n->read == rsched::bpf::live_read::automatic);
  CHECK(n->dirty_list_entries == 65536);
  auto r = parse_options({"--live-read", "iterator", "--dirty-list-entries", "4096"});
  REQUIRE(r.ok());
  CHECK(r->read == rsched::bpf::live_read::iterator);
  CHECK(r->dirty_list_entries == 4096);
  auto l = parse_options({"--live-read=dirty-list"});
  REQUIRE(l.ok());
  CHECK(l->read == rsched::bpf::live_read::dirty_list);
}

TEST_CASE("rschedd bad usage is a one-line error", "[rschedd]") {
  for (const auto &args : std::vector<std::vector<std::string>>{{"-i"},
                                                                {"-i", "0"},
                                                                {"-i", "abc"},
                                                                {"-i", "-1"},
                                                                {"-r", "1.5"},
                                                                {"--bogus"},
                                                                {"--db", "/x", "--no-db"},
                                                                {"--bpf-mode", "kprobe"},
                                                                {"--live-read", "list"},
                                                                {"--delay-clock", "rq"},
                                                                {"--delay-clock"},
                                                                {"--dirty-list-entries", "8"},
                                                                {"--dirty-list-entries", "x"},
                                                                {"--db", ""}}) {
    auto o = parse_options(args);
    INFO(args[0]);
    REQUIRE_FALSE(o.ok());
    CHECK(o.err().msg.find('\n') == std::string::npos);
  }
}

TEST_CASE("metric groups (-g): defaults, most, all, perf events and order rules", "[rschedd]") {
  using rsched::rschedd::parse_groups;
  auto def = parse_groups({});
  REQUIRE(def.ok());
  CHECK(def->groups == RSCHED_G_LATENCY);
  auto most = parse_groups({"most"});
  REQUIRE(most.ok());
  CHECK((most->groups & RSCHED_G_WAKING) == 0);
  CHECK((most->groups & RSCHED_G_SLICE) != 0);
  CHECK(most->schedstat);
  CHECK(most->ipc);
  auto all = parse_groups({"all"});
  REQUIRE(all.ok());
  CHECK((all->groups & RSCHED_G_WAKING) != 0);
  // upstream: `-g l2-miss,all` gives no IPC, `-g all,l2-miss` gives both
  auto a = parse_groups({"l2-miss", "all"});
  REQUIRE(a.ok());
  CHECK_FALSE(a->ipc);
  CHECK(a->events == std::vector<std::string>{"l2-miss"});
  auto b = parse_groups({"all", "l2-miss"});
  REQUIRE(b.ok());
  CHECK(b->ipc);
  CHECK(b->events == std::vector<std::string>{"l2-miss"});
  auto p = parse_groups({"perf"});
  REQUIRE(p.ok());
  CHECK(p->ipc);
  CHECK(p->groups == RSCHED_G_PERF);
  auto dedup = parse_groups({"perf=cs", "cs", "perf=ipc"});
  REQUIRE(dedup.ok());
  CHECK(dedup->events.size() == 1);
  CHECK(dedup->ipc);
  CHECK_FALSE(parse_groups({"perf="}).ok());
  CHECK_FALSE(parse_groups({""}).ok());
  CHECK_FALSE(parse_groups({"e1", "e2", "e3", "e4", "e5", "e6", "e7", "e8", "e9"}).ok()); // max 8
}

// issue 32: `-g wakeup` answered "unknown perf event 'wakeup': expected a built-in alias ...".
// (wakeup is a group since issue 34: `offcpu` stands for a name that is none.)
TEST_CASE("options: -g with a group that does not exist names it as an unknown metric group",
          "[rschedd]") {
  using rsched::rschedd::open_perf;
  using rsched::rschedd::parse_groups;
  auto g = parse_groups({"latency", "offcpu"});
  REQUIRE(g.ok());
  auto p = open_perf(*g, g->groups);
  REQUIRE_FALSE(p.ok());
  CHECK(p.err().errnum == EINVAL); // bad usage: exit status 2
  const std::string &m = p.err().msg;
  CHECK(m.rfind("unknown metric group 'offcpu' in -g: expected latency, slice, sleep, waking, "
                "migration, blame, wakeup, schedstat, pressure, perf, perf=EVENT, most, all",
                0) == 0);
  CHECK(m.find('\n') == std::string::npos);
  // Named as a perf event, it stays an unknown perf event.
  auto e = parse_groups({"perf=offcpu"});
  REQUIRE(e.ok());
  auto q = open_perf(*e, e->groups);
  REQUIRE_FALSE(q.ok());
  CHECK(q.err().msg.rfind("unknown perf event 'offcpu'", 0) == 0);
}

TEST_CASE("metric group wakeup: -g wakeup selects it and latency, all leaves it out", "[rschedd]") {
  // Alone, its rows were never kept (a thread's rows hang off its histograms): it implies the
  // delay, as blame does.
  auto g = rsched::rschedd::parse_groups({"wakeup"});
  REQUIRE(g.ok());
  CHECK(g->groups == (RSCHED_G_WAKEUP | RSCHED_G_LATENCY));
  auto a = rsched::rschedd::parse_groups({"all"});
  REQUIRE(a.ok());
  CHECK((a->groups & RSCHED_G_WAKEUP) == 0);
}

TEST_CASE("option stack-sleep takes a duration or 0 and needs -g wakeup", "[rschedd]") {
  auto o = parse_options({"-g", "wakeup", "--stack-sleep", "5ms"});
  REQUIRE(o.ok());
  CHECK(o->stack_sleep_ns == std::optional<std::int64_t>{5'000'000});
  auto z = parse_options({"-g", "wakeup", "--stack-sleep", "0"});
  REQUIRE(z.ok());
  CHECK(z->stack_sleep_ns == std::optional<std::int64_t>{0});
  auto bare = parse_options({"-g", "wakeup", "--stack-sleep", "5"});
  REQUIRE_FALSE(bare.ok());
  CHECK(bare.err().msg.find("needs a duration with a unit") != std::string::npos);
  auto alone = parse_options({"--stack-sleep", "5ms"});
  REQUIRE_FALSE(alone.ok());
  CHECK(alone.err().msg.find("needs -g wakeup") != std::string::npos);
}

TEST_CASE("metric groups (-g) split on commas and repeat, filters and modes", "[rschedd]") {
  auto o = parse_options({"-g", "slice,sleep", "-g", "migration", "-c", "a,b", "-c", "x",
                          "--global-comm", "g", "--cgroup", "system", "-p", "42", "-l", "100", "-C",
                          "-d"});
  REQUIRE(o.ok());
  CHECK(o->groups.groups == (RSCHED_G_SLICE | RSCHED_G_SLEEP | RSCHED_G_MIGRATION));
  CHECK(o->comm == std::vector<std::string>{"a,b", "x"}); // comma is not a separator in -c
  CHECK(o->global_comm == std::vector<std::string>{"g"});
  CHECK(o->cgroup == std::vector<std::string>{"system"});
  CHECK(o->pid == 42u);
  CHECK(o->min_latency_us == 100);
  CHECK(o->display == rsched::rschedd::display_mode::detailed); // -d wins over -C
  auto c = parse_options({"-C"});
  REQUIRE(c.ok());
  CHECK(c->display == rsched::rschedd::display_mode::grouped);
}

TEST_CASE("rschedd retention and map size options", "[rschedd]") {
  auto d = parse_options({});
  REQUIRE(d.ok());
  CHECK(d->keep.keep_raw_ns == 2LL * 86400 * 1'000'000'000);
  CHECK(d->keep.keep_1m_ns == 30LL * 86400 * 1'000'000'000);
  CHECK(d->keep.keep_1h_ns == 365LL * 86400 * 1'000'000'000);
  CHECK(d->keep.max_bytes == 8ULL << 30);
  CHECK(d->task_hash_entries == 16384);
  auto o = parse_options({"--keep-raw", "12h", "--keep-1m=7d", "--keep-1h", "0", "--max-size",
                          "500M", "--task-hash-entries", "65536", "--graveyard-entries=1024"});
  REQUIRE(o.ok());
  CHECK(o->keep.keep_raw_ns == 12LL * 3600 * 1'000'000'000);
  CHECK(o->keep.keep_1m_ns == 7LL * 86400 * 1'000'000'000);
  CHECK(o->keep.keep_1h_ns == 0); // forever
  CHECK(o->keep.max_bytes == 500ULL << 20);
  CHECK(o->task_hash_entries == 65536);
  CHECK(o->graveyard_entries == 1024);
  for (const auto &[size, bytes] : std::vector<std::pair<std::string, std::uint64_t>>{
           {"0", 0}, {"4096B", 4096}, {"2k", 2048}, {"8G", 8ULL << 30}, {"1T", 1ULL << 40}}) {
    auto s = parse_options({"--max-size", size});
    REQUIRE(s.ok());
    CHECK(s->keep.max_bytes == bytes);
  }
  for (const auto &args : std::vector<std::vector<std::string>>{{"--keep-raw", "soon"},
                                                                {"--keep-raw", "-1d"},
                                                                {"--keep-1m"},
                                                                {"--max-size", "8X"},
                                                                {"--max-size", "G"},
                                                                {"--max-size", "99999999999999G"},
                                                                {"--task-hash-entries", "3"}}) {
    auto e = parse_options(args);
    INFO(args[0]);
    REQUIRE_FALSE(e.ok());
    CHECK(e.err().msg.find('\n') == std::string::npos);
    CHECK(e.err().msg.find(args[0]) != std::string::npos);
  }
}

TEST_CASE("a --keep-* value without a unit is refused in one line naming the flag and the units",
          "[rschedd]") {
  // Read as seconds, "--keep-raw 2" (meant as two days) kept two seconds of history.
  for (const std::string flag : {"--keep-raw", "--keep-1m", "--keep-1h"}) {
    for (const std::string v : {"2", "365", "1.5"}) {
      for (const auto &args : std::vector<std::vector<std::string>>{{flag, v}, {flag + "=" + v}}) {
        auto e = parse_options(args);
        INFO(flag << " '" << v << "'");
        REQUIRE_FALSE(e.ok());
        CHECK(e.err().msg == flag + " " + v + ": a duration needs a unit (" + v + "d? " + v +
                                 "h?): s, m, h, d, w");
      }
    }
  }
  // With a unit (any the time grammar knows) or 0 (forever) it is taken as before.
  auto o = parse_options(
      {"--keep-raw", "2d", "--keep-1m", "36h", "--keep-1h=1w", "--keep-raw", "90 minutes"});
  REQUIRE(o.ok());
  CHECK(o->keep.keep_raw_ns == 90LL * 60 * 1'000'000'000);
  CHECK(o->keep.keep_1m_ns == 36LL * 3600 * 1'000'000'000);
  CHECK(o->keep.keep_1h_ns == 7LL * 86400 * 1'000'000'000);
  auto forever = parse_options({"--keep-1h", "0"});
  REQUIRE(forever.ok());
  CHECK(forever->keep.keep_1h_ns == 0);
}

TEST_CASE("the retention in effect is in \"Options active\"", "[rschedd]") {
  auto d = parse_options({});
  REQUIRE(d.ok());
  const std::string b = rsched::rschedd::banner(*d);
  INFO(b);
  CHECK(b == "Starting rsched\nOptions active:\n"
             "  - Retention: raw 2d, 1m 30d, 1h 365d; size cap 8G\n");
  auto o = parse_options(
      {"--keep-raw", "36h", "--keep-1m", "90m", "--keep-1h", "0", "--max-size", "1536M"});
  REQUIRE(o.ok());
  CHECK(rsched::rschedd::banner(*o).find(
            "  - Retention: raw 36h, 1m 90m, 1h forever; size cap 1536M\n") != std::string::npos);
  auto n = parse_options({"--max-size", "0", "--keep-raw", "1.5s"});
  REQUIRE(n.ok());
  CHECK(rsched::rschedd::banner(*n).find("1m 30d, 1h 365d; size cap none\n") != std::string::npos);
  CHECK(rsched::rschedd::banner(*n).find("raw 1500ms") != std::string::npos);
  // Recording nothing, there is nothing to keep.
  auto live = parse_options({"--no-db"});
  REQUIRE(live.ok());
  CHECK(rsched::rschedd::banner(*live) == "Starting rsched\n");
}

TEST_CASE("rschedd --view, --rt-priority, --recorder-nice and --recorder-slice-us", "[rschedd]") {
  auto d = parse_options({});
  REQUIRE(d.ok());
  CHECK_FALSE(d->view.has_value()); // compact, or tables with -C / -d
  CHECK(d->rt_priority == 0);       // an ordinary thread by default (issue 31)
  auto t = parse_options({"--view", "tables", "--rt-priority", "0"});
  REQUIRE(t.ok());
  CHECK(t->view == std::string("tables"));
  CHECK(t->rt_priority == 0);
  auto c = parse_options({"--view=compact", "--rt-priority=99"});
  REQUIRE(c.ok());
  CHECK(c->view == std::string("compact"));
  CHECK(c->rt_priority == 99);
  CHECK(d->recorder_nice == 0);
  auto n = parse_options({"--recorder-nice", "-20"});
  REQUIRE(n.ok());
  CHECK(n->recorder_nice == -20);
  CHECK(d->recorder_slice_us == 100); // a short EEVDF slice by default
  for (const char *ok : {"0", "100", "100000"}) {
    auto s = parse_options({"--recorder-slice-us", ok});
    REQUIRE(s.ok());
    CHECK(s->recorder_slice_us == std::stoul(ok));
  }
  for (const auto &args : std::vector<std::vector<std::string>>{{"--view", "big"},
                                                                {"--view"},
                                                                {"--rt-priority", "100"},
                                                                {"--rt-priority", "-1"},
                                                                {"--recorder-nice", "-21"},
                                                                {"--recorder-nice", "20"},
                                                                {"--recorder-nice", "x"},
                                                                {"--recorder-nice", ""},
                                                                {"--recorder-slice-us", "99"},
                                                                {"--recorder-slice-us", "100001"},
                                                                {"--recorder-slice-us", "-1"},
                                                                {"--recorder-slice-us", "1ms"}}) {
    auto o = parse_options(args);
    REQUIRE_FALSE(o.ok());
    CHECK(o.err().msg.find('\n') == std::string::npos);
  }
}

TEST_CASE("options: the flight recorder's flags and their one-line refusals", "[rschedd]") {
  auto o = parse_options({"--flight-recorder", "10", "--flight-trigger", "50ms",
                          "--flight-trigger-gap=30s", "--flight-keep", "5", "--flight-max-size",
                          "100M"});
  REQUIRE(o.ok());
  CHECK(o->flight_seconds == 10);
  CHECK(o->flight_trigger_ns == 50'000'000);
  CHECK(o->flight_trigger_gap_ns == 30'000'000'000);
  CHECK(o->flight_keep == 5u);
  CHECK(o->flight_max_bytes == 100ULL << 20);
  CHECK(parse_options({}).value().flight_seconds == 0); // off by default
  const std::pair<std::vector<std::string>, const char *> bad[] = {
      {{"--flight-recorder", "0"}, "--flight-recorder"},
      {{"--flight-recorder", "x"}, "--flight-recorder"},
      {{"--flight-recorder", "5", "--flight-trigger", "50"}, "with a unit"},
      {{"--flight-recorder", "5", "--flight-trigger", "-1s"}, "with a unit"},
      {{"--flight-recorder", "5", "--flight-trigger", "\x1b[31m"}, "with a unit"},
      {{"--flight-trigger", "50ms"}, "need --flight-recorder"},
      {{"--flight-keep", "3"}, "need --flight-recorder"},
      {{"--flight-recorder", "5", "--no-db"}, "needs one"},
      {{"--flight-recorder", "5", "--flight-keep", "0"}, "--flight-keep"},
  };
  for (const auto &[args, says] : bad) {
    auto r = parse_options(args);
    INFO(args.front() << " " << args.back());
    REQUIRE_FALSE(r.ok());
    CHECK(r.err().msg.find(says) != std::string::npos);
    CHECK(r.err().msg.find('\n') == std::string::npos);
    CHECK(r.err().msg.find('\x1b') == std::string::npos);
  }
}

TEST_CASE("durations and sizes on rschedd's command line: nothing around them, a unit on each",
          "[rschedd]") {
  // Issue 51: --keep-raw with a tab or newline around the number still meant seconds (the time
  // grammar trims white space, and the bare-number check looked for spaces only), a duration
  // with a newline after it was taken, and --max-size 8 meant 8 bytes.
  const std::vector<std::string> durations = {" 7\t", "7\n",  "\t7", "\n7\n", " 7",   "7 ",
                                              "2d\n", "\t2d", " 2d", "2d ",   "2d\r", "1h\t30m"};
  for (const std::string flag : {"--keep-raw", "--keep-1m", "--keep-1h", "--flight-trigger",
                                 "--flight-trigger-gap", "--stack-sleep"}) {
    for (const auto &v : durations) {
      for (const auto &args : std::vector<std::vector<std::string>>{
               {"--flight-recorder", "5", "-g", "wakeup", flag, v},
               {"--flight-recorder", "5", "-g", "wakeup", flag + "=" + v}}) {
        auto e = parse_options(args);
        INFO(flag << " '" << v << "'");
        REQUIRE_FALSE(e.ok());
        CHECK(e.err().msg.find(flag) != std::string::npos);
        CHECK(e.err().msg.find('\n') == std::string::npos);
        CHECK(e.err().msg.find('\t') == std::string::npos);
      }
    }
  }
  auto tab = parse_options({"--keep-raw= 7\t"});
  REQUIRE_FALSE(tab.ok());
  CHECK(tab.err().msg == "--keep-raw ' 7\\x09': a space, tab, newline or control character "
                         "around or in it (write just the value)");
  // A bare size is refused as a bare duration is, in one line naming the flag and a unit.
  for (const std::string flag : {"--max-size", "--flight-max-size"}) {
    for (const std::string v : {"8", "4096", "1", " 8G", "8G\n", "\t8G", "8 G"}) {
      auto e = parse_options({"--flight-recorder", "5", flag, v});
      INFO(flag << " '" << v << "'");
      REQUIRE_FALSE(e.ok());
      CHECK(e.err().msg.find(flag) != std::string::npos);
      CHECK(e.err().msg.find('\n') == std::string::npos);
    }
  }
  auto eight = parse_options({"--max-size", "8"});
  REQUIRE_FALSE(eight.ok());
  CHECK(eight.err().msg ==
        "--max-size '8': a size needs a unit (8G? 8M?): B, K, M, G or T (1K = 1024 bytes)");
  // With the unit, or 0 (no cap / forever), as before; 8GB and 8GiB are 8G.
  auto ok = parse_options({"--max-size", "8GB", "--flight-recorder", "5", "--flight-max-size",
                           "100MiB", "--keep-raw", "0", "--keep-1m", "1h 30m"});
  REQUIRE(ok.ok());
  CHECK(ok->keep.max_bytes == 8ULL << 30);
  CHECK(ok->flight_max_bytes == 100ULL << 20);
  CHECK(ok->keep.keep_raw_ns == 0);
  CHECK(ok->keep.keep_1m_ns == 90LL * 60 * 1'000'000'000);
  auto none = parse_options({"--max-size", "0"});
  REQUIRE(none.ok());
  CHECK(none->keep.max_bytes == 0);
  // Whole-number options were already strict.
  for (const std::string v : {" 1", "1\n", "1\t"}) {
    CHECK_FALSE(parse_options({"-i", v}).ok());
    CHECK_FALSE(parse_options({"--run-time", v}).ok());
  }
}
