// End to end: the built rsched-sql binary over a database written by store::writer.
#include "helpers.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <sqlite3.h>

using namespace rsched_sql_test;

namespace {

const std::string percentile_query =
    "SELECT comm, hist_percentile(hist, 99) FROM sched_delay GROUP BY comm";

} // namespace

TEST_CASE("rsched-sql e2e: --csv round-trips a hostile comm byte for byte", "[rsched-sql]") {
  temp_dir dir;
  const std::string db = make_db(dir);
  const auto r = run_sql({db, "-c", percentile_query, "--csv"});
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.err.empty());
  const auto recs = parse_csv(r.out);
  REQUIRE(recs.size() == 3);
  CHECK(recs[0] == std::vector<std::string>{"comm", "hist_percentile(hist, 99)"});
  bool found = false;
  for (std::size_t i = 1; i < recs.size(); ++i) {
    REQUIRE(recs[i].size() == 2);
    if (recs[i][0] == evil_comm) {
      found = true;
      // 99 of 100 samples are 3 us: the 99th percentile lies in their bucket, [0, 10) us.
      const long long p99 = std::stoll(recs[i][1]);
      CHECK(p99 > 0);
      CHECK(p99 < 10'000);
    } else {
      CHECK(recs[i][0] == "plain");
    }
  }
  CHECK(found);
  CHECK(r.out.find('\x1b') != std::string::npos); // data, not display: the ESC is there
}

TEST_CASE("rsched-sql e2e: table mode on a pipe never prints the raw ESC", "[rsched-sql]") {
  temp_dir dir;
  const std::string db = make_db(dir);
  const auto r = run_sql({db, "-c", percentile_query});
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find('\x1b') == std::string::npos);
  CHECK(r.out.find("evil\"c,o\\x1b[2Jm") != std::string::npos);
  CHECK(r.out.rfind("+---", 0) == 0);
}

TEST_CASE("rsched-sql e2e: -c runs in order and stops at the first error", "[rsched-sql]") {
  temp_dir dir;
  const std::string db = make_db(dir);
  const auto r = run_sql(
      {"--csv", db, "-c", "SELECT 1 AS a", "-c", "SELECT * FROM nowhere", "-c", "SELECT 3"});
  CHECK(r.status == 1);
  CHECK(r.out == "a\r\n1\r\n");
  CHECK(r.err.rfind("rsched-sql: ", 0) == 0);
  CHECK(r.err.find("nowhere") != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

TEST_CASE("rsched-sql e2e: bad SQL exits 1", "[rsched-sql]") {
  temp_dir dir;
  const std::string db = make_db(dir);
  const auto r = run_sql({db, "-c", "SELEC 1"});
  CHECK(r.status == 1);
  CHECK(r.out.empty());
  CHECK(r.err.rfind("rsched-sql: ", 0) == 0);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

TEST_CASE("rsched-sql e2e: writes are refused (read-only)", "[rsched-sql]") {
  temp_dir dir;
  const std::string db = make_db(dir);
  const auto r = run_sql({db, "-c", "DELETE FROM thread"});
  CHECK(r.status == 1);
  const auto n = run_sql({db, "--csv", "-c", "SELECT count(*) AS n FROM thread"});
  CHECK(n.out == "n\r\n2\r\n");
}

TEST_CASE("rsched-sql e2e: bad usage exits 2 with one line on stderr", "[rsched-sql]") {
  for (const auto &args : std::vector<std::vector<std::string>>{
           {"--bogus"}, {"-c"}, {"a.db", "b.db"}, {"-csv"}, {"-x", "-c", "SELECT 1"}}) {
    const auto r = run_sql(args);
    INFO(args.front());
    CHECK(r.status == 2);
    CHECK(r.out.empty());
    CHECK(r.err.rfind("rsched-sql: ", 0) == 0);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
}

TEST_CASE("rsched-sql e2e: usage errors are escaped once on stderr", "[rsched-sql]") {
  const auto r = run_sql({"--\x1b[2J\\"});
  CHECK(r.status == 2);
  CHECK(r.err == "rsched-sql: unknown option '--\\x1b[2J\\\\' (see --help)\n");
}

TEST_CASE("rsched-sql e2e: --help and --version", "[rsched-sql]") {
  const auto v = run_sql({"--version"});
  CHECK(v.status == 0);
  CHECK(v.out == "rsched-sql 0.1.0\n");
  const auto h = run_sql({"--help"});
  CHECK(h.status == 0);
  CHECK(h.out.rfind("Usage: rsched-sql", 0) == 0);
  CHECK(h.err.empty());
}

TEST_CASE("rsched-sql e2e: missing or non-SQLite or foreign databases exit 1", "[rsched-sql]") {
  temp_dir dir;
  SECTION("missing") {
    const auto r = run_sql({dir.file("nope.db"), "-c", "SELECT 1"});
    CHECK(r.status == 1);
    CHECK(r.err.rfind("rsched-sql: ", 0) == 0);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK_FALSE(std::filesystem::exists(dir.file("nope.db"))); // never created
  }
  SECTION("not SQLite") {
    const std::string p = dir.file("junk.db");
    std::ofstream(p) << std::string(4096, 'j');
    const auto r = run_sql({p, "-c", "SELECT 1"});
    CHECK(r.status == 1);
    CHECK(r.err.rfind("rsched-sql: ", 0) == 0);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
  SECTION("another application's SQLite database") {
    const std::string p = dir.file("foreign.db");
    sqlite3 *raw = nullptr;
    REQUIRE(sqlite3_open(p.c_str(), &raw) == SQLITE_OK);
    const int rc = sqlite3_exec(raw, "CREATE TABLE x(y); INSERT INTO x VALUES (1);", nullptr,
                                nullptr, nullptr);
    sqlite3_close(raw);
    REQUIRE(rc == SQLITE_OK);
    const auto r = run_sql({p, "-c", "SELECT 1"});
    CHECK(r.status == 1);
    CHECK(r.err.rfind("rsched-sql: ", 0) == 0);
  }
}

TEST_CASE("rsched-sql e2e: SQL from stdin when it is not a terminal", "[rsched-sql]") {
  temp_dir dir;
  const std::string db = make_db(dir);
  SECTION("runs every statement") {
    const auto r = run_sql({db, "--csv"}, "SELECT comm FROM sched_delay\n WHERE tid = 42;\n"
                                          ".headers off\nSELECT 5;\n");
    INFO(r.err);
    CHECK(r.status == 0);
    const auto recs = parse_csv(r.out);
    REQUIRE(recs.size() == 3);
    CHECK(recs[1][0] == evil_comm);
    CHECK(recs[2][0] == "5");
  }
  SECTION("with --bail a failing statement stops the script and exits 1") {
    const auto r = run_sql({db, "--bail"}, "SELECT 1;\nSELECT broken(;\nSELECT 2;\n");
    CHECK(r.status == 1);
    CHECK(r.err.rfind("rsched-sql: line 2, column ", 0) == 0); // lines of the whole input
    CHECK(r.out.find("| 2 |") == std::string::npos);
  }
  SECTION("without --bail the script goes on and exits 1") {
    const auto r = run_sql({db}, "SELECT 1;\nSELECT broken(;\nSELECT 2;\n");
    CHECK(r.status == 1);
    CHECK(r.err.rfind("rsched-sql: line 2, column ", 0) == 0);
    CHECK(r.out.find("| 2 |") != std::string::npos);
  }
}

TEST_CASE("rsched-sql e2e: --json and --jsonl keep the hostile comm exact", "[rsched-sql]") {
  temp_dir dir;
  const std::string db = make_db(dir);
  const auto r = run_sql({db, "--json", "-c", "SELECT comm, count FROM sched_delay ORDER BY tid"});
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out == "[{\"comm\":\"plain\",\"count\":1},\n"
                 "{\"comm\":\"evil\\\"c,o\\u001b[2Jm\",\"count\":100}]\n");
  const auto l = run_sql({db, "--jsonl", "-c", "SELECT tid FROM sched_delay ORDER BY tid"});
  CHECK(l.out == "{\"tid\":7}\n{\"tid\":42}\n");
}

namespace {

// python3 reads `file` as strict UTF-8 and parses it with json (one document, or one per line
// with `lines`), refuses any string holding a lone surrogate (what "\udcff" decodes to), and
// prints each row object as json.dumps(sort_keys, ensure_ascii) with one line per "_hex" member:
// "'KEY' <- b'the bytes of KEY_hex'" (Python's ascii() and repr()).
std::string strict_json_rows(const std::string &file, bool lines) {
  static const std::string script = R"(
import json, sys
text = open(sys.argv[1], 'rb').read().decode('utf-8')  # strict: invalid UTF-8 raises
docs = [json.loads(l) for l in text.splitlines()] if sys.argv[2] == 'lines' else [json.loads(text)]
def check(v):
    if isinstance(v, str):
        v.encode('utf-8')  # a lone surrogate raises
    elif isinstance(v, list):
        for x in v: check(x)
    elif isinstance(v, dict):
        for k, x in v.items(): check(k); check(x)
for d in docs:
    check(d)
    for r in d if isinstance(d, list) else [d]:
        print(json.dumps(r, sort_keys=True, ensure_ascii=True))
        for k in sorted(r):
            if k + '_hex' in r:
                print(ascii(k), '<-', bytes.fromhex(r[k + '_hex']))
)";
  const auto r =
      rsched::test::run_program({"python3", "-c", script, file, lines ? "lines" : "doc"});
  INFO(r.err);
  REQUIRE(r.status == 0);
  return r.out;
}

} // namespace

TEST_CASE("rsched-sql e2e: --json and --jsonl are strict JSON, invalid UTF-8 as U+FFFD and hex "
          "(issue 30)",
          "[rsched-sql]") {
  temp_dir dir;
  const std::string db = make_db(dir);
  const std::string file = dir.file("out.json");
  const std::string sql = "SELECT comm, CAST(x'61ff62' AS TEXT) AS s, CAST(x'eda080' AS TEXT) AS "
                          "sur, CAST(x'f09f9880' AS TEXT) AS ok, x'00ff' AS b FROM sched_delay "
                          "ORDER BY tid";
  const auto r = run_sql({db, "--json", "-o", file, "-c", sql});
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(
      strict_json_rows(file, false) ==
      R"({"b": "00ff", "comm": "plain", "ok": "\ud83d\ude00", "s": "a\ufffdb", "s_hex": "61ff62", "sur": "\ufffd\ufffd\ufffd", "sur_hex": "eda080"})"
      "\n"
      R"('s' <- b'a\xffb')"
      "\n"
      R"('sur' <- b'\xed\xa0\x80')"
      "\n"
      R"({"b": "00ff", "comm": "evil\"c,o\u001b[2Jm", "ok": "\ud83d\ude00", "s": "a\ufffdb", "s_hex": "61ff62", "sur": "\ufffd\ufffd\ufffd", "sur_hex": "eda080"})"
      "\n"
      R"('s' <- b'a\xffb')"
      "\n"
      R"('sur' <- b'\xed\xa0\x80')"
      "\n");
  // JSON lines; a column name that is not UTF-8 (the user's SQL) is U+FFFD in the key too.
  const std::string not_utf8 = "SELECT CAST(x'c0af' AS TEXT) AS \"k\xff\", 'x' AS k2 UNION ALL "
                               "SELECT 'fine', CAST(x'80' AS TEXT)";
  const auto l = run_sql({db, "--jsonl", "-o", file, "-c", not_utf8});
  INFO(l.err);
  REQUIRE(l.status == 0);
  CHECK(strict_json_rows(file, true) ==
        R"({"k2": "x", "k\ufffd": "\ufffd\ufffd", "k\ufffd_hex": "c0af"})"
        "\n"
        R"('k\ufffd' <- b'\xc0\xaf')"
        "\n"
        R"({"k2": "\ufffd", "k2_hex": "80", "k\ufffd": "fine"})"
        "\n"
        R"('k2' <- b'\x80')"
        "\n");
}

TEST_CASE("rsched-sql e2e: -o writes results to a file", "[rsched-sql]") {
  temp_dir dir;
  const std::string db = make_db(dir);
  const std::string file = dir.file("out.csv");
  const auto r = run_sql({db, "--csv", "-o", file, "-c", "SELECT comm FROM sched_delay"});
  REQUIRE(r.status == 0);
  CHECK(r.out.empty());
  const auto recs = parse_csv(slurp(file));
  REQUIRE(recs.size() == 3);
  const auto bad = run_sql({db, "-o", dir.file("no/dir/x"), "-c", "SELECT 1"});
  CHECK(bad.status == 1);
}

TEST_CASE("rsched-sql e2e: mark adds an annotation and prints its id", "[rsched-sql]") {
  temp_dir dir;
  const std::string db = make_db(dir);
  const auto r = run_sql({db, "mark", "deploy v42", "--at", "2026-11-20T14:03:00Z", "--until",
                          "2026-11-20T14:05:00Z", "--tags", "deploy"});
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out == "1\n");
  const auto q =
      run_sql({db, "--csv", "-c", "SELECT start_ns, end_ns, text, tags FROM annotations"});
  CHECK(q.out == "start_ns,end_ns,text,tags\r\n"
                 "1795183380000000000,1795183500000000000,deploy v42,deploy\r\n");
  CHECK(run_sql({db, "mark", "x", "--at", "whenever"}).status == 1);
  CHECK(run_sql({db, "mark"}).status == 2);
}

TEST_CASE("rsched-sql e2e: service records which threads a service is, and forgets them",
          "[rsched-sql]") {
  temp_dir dir;
  const std::string db = make_db(dir);
  auto r = run_sql({db, "service", "API Gateway", "comm:gunicorn*",
                    "cgroup:/system.slice/api.service", "--", "-dash"});
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out == "service API Gateway: comm:gunicorn*, cgroup:/system.slice/api.service, -dash\n");
  const auto q = run_sql({db, "--csv", "-c", "SELECT name, pattern FROM services ORDER BY 2"});
  CHECK(q.out == "name,pattern\r\nAPI Gateway,-dash\r\nAPI Gateway,cgroup:/system.slice/api.service"
                 "\r\nAPI Gateway,comm:gunicorn*\r\n");
  // A pid changes with every restart: one line, exit 1, the mapping kept.
  r = run_sql({db, "service", "API Gateway", "pid:12"});
  CHECK(r.status == 1);
  CHECK(r.err.find("changes with every restart") != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(run_sql({db, "-c", "SELECT count(*) FROM services"}).out.find('3') != std::string::npos);
  // A hostile name is data: stored as given, printed escaped.
  r = run_sql({db, "service", "x\x1b[2J", "web"});
  REQUIRE(r.status == 0);
  CHECK(r.out.find('\x1b') == std::string::npos);
  // No pattern: forgotten.
  r = run_sql({db, "service", "API Gateway"});
  REQUIRE(r.status == 0);
  CHECK(r.out.find("no patterns") != std::string::npos);
  CHECK(run_sql({db, "--csv", "-c", "SELECT count(*) FROM services"}).out == "count(*)\r\n1\r\n");
  CHECK(run_sql({db, "service"}).status == 2);
  CHECK(run_sql({db, "service", "a", "--bogus"}).status == 2);
}

TEST_CASE("rsched-sql e2e: a time window without data exits 3", "[rsched-sql]") {
  temp_dir dir;
  const std::string db = make_db(dir);
  const auto r = run_sql(
      {db, "--csv", "-c", "SELECT start_ns FROM intervals WHERE start_ns >= t('2099-01-01')"});
  CHECK(r.status == 3);
  CHECK(r.out == "start_ns\r\n");
  CHECK(r.err == "rsched-sql: no recorded data in that window\n");
  // The window holds the interval: 0.
  const auto ok = run_sql(
      {db, "--csv", "-c", "SELECT count(*) AS n FROM intervals WHERE start_ns < t('2099-01-01')"});
  CHECK(ok.status == 0);
  // An empty result without a window function is not "no data".
  CHECK(run_sql({db, "-c", "SELECT 1 WHERE 0"}).status == 0);
  // From stdin too; an SQL error takes precedence.
  CHECK(run_sql({db}, "SELECT 1 WHERE ts > ago('1h');\n").status == 1); // no column ts
  CHECK(run_sql({db}, "SELECT start_ns FROM intervals WHERE start_ns > ago('1h');\n").status == 3);
}

TEST_CASE("rsched-sql e2e: a window only partly recorded is reported with its coverage",
          "[rsched-sql]") {
  temp_dir dir;
  const std::string db = make_db(dir); // one 10 s interval from 1.7e18 ns
  // 40 s around the interval's middle: 10 s of 40 s recorded = 25 %
  const auto r = run_sql({db, "-c",
                          "SELECT count(*) FROM sched_delay WHERE ts IN "
                          "around(1700000005000000000, '20s')",
                          "--csv"});
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.err.find("25.0% covered") != std::string::npos);
  CHECK(r.err.find("see gaps(") != std::string::npos);
  // a fully covered window says nothing
  const auto full = run_sql({db, "-c",
                             "SELECT count(*) FROM sched_delay WHERE ts IN "
                             "during(1700000001000000000, 1700000009000000000)",
                             "--csv"});
  REQUIRE(full.status == 0);
  CHECK(full.err.empty());
}

TEST_CASE("rsched-sql e2e: the report names a spike of one thread as that thread and blames it "
          "as the thread",
          "[rsched-sql]") {
  // 'webworker': four threads of pid 100 waiting 0.1 ms 400 times a second; from second 120 to
  // 179 thread 103 waits 20 ms 10 times a second behind an RT job (its blame says so). The spike
  // is the thread's: the report must show it as such and ask blame() about tid:103, not about
  // the comm (whose other three threads waited behind nobody in particular).
  using namespace rsched;
  temp_dir dir;
  const std::string db = dir.file("rsched.db");
  constexpr std::int64_t t0 = 1'700'000'040'000'000'000;
  constexpr std::int64_t sec = 1'000'000'000;
  {
    auto w = store::writer::open(db);
    REQUIRE(w.ok());
    for (int i = 0; i < 240; ++i) {
      store::interval_row iv;
      iv.start_ns = t0 + i * sec;
      iv.dur_ns = sec;
      iv.boot_id = "00000000-0000-0000-0000-000000000001";
      const bool stalled = i >= 120 && i < 180;
      for (std::uint32_t tid = 101; tid <= 104; ++tid) {
        store::thread_row t;
        t.tid = tid;
        t.pid = 100;
        t.start_time_ns = 5;
        t.comm = "webworker";
        const bool me = stalled && tid == 103;
        const int n = me ? 10 : 400;
        const std::uint64_t d = me ? 20'000'000 : 100'000;
        for (int k = 0; k < n; ++k) {
          t.m[metric::sched_delay].hist.add(d);
        }
        t.m[metric::sched_delay].count = static_cast<std::uint64_t>(n);
        t.m[metric::sched_delay].total = static_cast<std::uint64_t>(n) * d;
        if (me) {
          store::blame_row b;
          b.kind = store::culprit_kind::process;
          b.pid = 900;
          b.comm = "rtjob";
          b.cgroup = "/batch";
          b.wait_ns = 10 * 20'000'000;
          b.waits = 10;
          t.blame = {b};
          // Between its waits it sleeps, woken by db (pid 20): the wakeup group's rows.
          store::wakeup_row wk;
          wk.kind = store::waker_kind::process;
          wk.pid = 20;
          wk.comm = "db";
          wk.cgroup = "/db";
          wk.state = 0;
          wk.sleep_ns = 500'000'000;
          wk.count = 10;
          t.wakeups = {wk};
        }
        iv.threads.push_back(t);
      }
      REQUIRE(w->write(iv).ok());
    }
    // A flight recorder capture of the stall's first seconds, its file name hostile.
    store::capture_row c;
    c.start_ns = t0 + 115 * sec;
    c.end_ns = t0 + 125 * sec;
    c.trigger = "threshold";
    c.reason = "webworker <tid 103> waited 20 ms";
    c.file = dir.file("rsched.captures/x \"<a>\" #1.pftrace");
    c.bytes = 4650;
    c.events = 410;
    c.created_ns = t0 + 126 * sec;
    REQUIRE(w->add_capture(c).ok());
  }
  const std::string f = dir.file("r.html");
  const auto r = run_sql({db, "report", "--from", std::to_string(t0 / sec), "--to",
                          std::to_string(t0 / sec + 240), "-o", f});
  INFO(r.err);
  REQUIRE(r.status == 0);
  const std::string html = slurp(f);
  CHECK(html.find("<td>webworker (tid 103)</td>") != std::string::npos);
  CHECK(html.find("who ran while webworker (tid 103) waited") != std::string::npos);
  CHECK(html.find("<td>rtjob</td>") != std::string::npos);
  CHECK(html.find("<section id=\"annotation-") == std::string::npos);

  // An incident annotated over the stall: a section of its own holds the spike; the spikes
  // table has nothing left; an annotation far from it has a section saying so.
  const auto m1 =
      run_sql({db, "mark", "checkout <b>slow</b>", "--at", std::to_string(t0 / sec + 110),
               "--until", std::to_string(t0 / sec + 190)});
  INFO(m1.err);
  REQUIRE(m1.status == 0);
  REQUIRE(run_sql({db, "mark", "deploy", "--at", std::to_string(t0 / sec + 10), "--until",
                   std::to_string(t0 / sec + 20)})
              .status == 0);
  const auto r2 = run_sql({db, "report", "--from", std::to_string(t0 / sec), "--to",
                           std::to_string(t0 / sec + 240), "-o", f});
  INFO(r2.err);
  REQUIRE(r2.status == 0);
  const std::string h2 = slurp(f);
  const auto sec1 = h2.find("<section id=\"annotation-1\"><h2>Annotation 1: checkout "
                            "&lt;b&gt;slow&lt;/b&gt;</h2>");
  const auto sec2 = h2.find("<section id=\"annotation-2\"><h2>Annotation 2: deploy</h2>");
  REQUIRE(sec1 != std::string::npos);
  REQUIRE(sec2 != std::string::npos);
  const auto spike_in_1 = h2.find("<td>webworker (tid 103)</td>", sec1);
  CHECK(spike_in_1 < h2.find("</section>", sec1));
  // explain() in the section: the stalled thread first, the RT job its cause.
  // It leads with the victims' rule and the root culprit with its path: explain(id) of the
  // incident names no service, so every thread, and the section says so.
  const auto lead = h2.find("<p class=\"lead\">Victims: every thread (annotation 1 names no "
                            "service: tag it service:NAME). Root culprit of its worst thread: "
                            "<b>webworker[103] \u2190 db[20]</b> (wakeup, 71 % of its extra "
                            "time)",
                            sec1);
  CHECK(lead < h2.find("</section>", sec1));
  const auto why = h2.find("Who did worst against their own baseline", sec1);
  CHECK(why < h2.find("</section>", sec1));
  CHECK(h2.find("<td class=\"num\">1</td><td>webworker (tid 103)</td>", why) <
        h2.find("</section>", sec1));
  CHECK(h2.find("rtjob[900]", why) < h2.find("</section>", sec1));
  // ... and a timeline of the worst threads, the stalled one first in its legend.
  const auto tl1 = h2.find("p99 scheduling delay of the worst threads", sec1);
  CHECK(tl1 < h2.find("</section>", sec1));
  CHECK(h2.find(">webworker (tid 103)</text>", tl1) < h2.find("</section>", sec1));
  CHECK(h2.find("No spike in this window.", sec2) < h2.find("</section>", sec2));
  // The whole wait of the stalled thread (why()): its sleep is db's; and the capture of the
  // stall linked from the section to its row in the captures table, the file name as data.
  const auto whole = h2.find("The whole wait of the worst threads", sec1);
  CHECK(whole < h2.find("</section>", sec1));
  CHECK(h2.find("woken by db[20]", whole) < h2.find("</section>", sec1));
  CHECK(h2.find("Flight recorder captures of this window: <a href=\"#capture-1\">#1 "
                "(threshold)</a>.",
                sec1) < h2.find("</section>", sec1));
  CHECK(h2.find("Flight recorder captures of this window", sec2) > h2.find("</section>", sec2));
  const auto caps = h2.find("<h2 id=\"captures\">Flight recorder captures</h2>");
  REQUIRE(caps != std::string::npos);
  CHECK(h2.find("<tr id=\"capture-1\"><td>#1</td>", caps) != std::string::npos);
  CHECK(h2.find("webworker &lt;tid 103&gt; waited 20 ms", caps) != std::string::npos);
  CHECK(h2.find("rsched.captures/x%20%22%3Ca%3E%22%20%231.pftrace\">", caps) != std::string::npos);
  CHECK(h2.find("rsched.captures/x &quot;&lt;a&gt;&quot; #1.pftrace</a>", caps) !=
        std::string::npos);
  CHECK(h2.find("All of them are inside annotations' windows.") != std::string::npos);
  // The annotations' labels start with their id, as their table rows and sections name them.
  CHECK(h2.find(">#1 checkout &lt;b&gt;slow&lt;/b&gt;</text>") != std::string::npos);
  CHECK(h2.find(">#2 deploy</text>") != std::string::npos);
  CHECK(h2.find("<tr><td>#1</td>") != std::string::npos);
  // On the timeline the spike's band is dashed and orange, the annotations' solid and blue.
  CHECK(h2.find(R"~(<rect class="mark spike" )~") != std::string::npos);
  CHECK(h2.find(R"~(stroke="rgba(214,110,20,0.9)" stroke-dasharray="4 2" )~") != std::string::npos);
  CHECK(h2.find(R"~(<rect class="mark" )~") != std::string::npos);

  // --where narrows every section about threads: without thread 103 neither the spike, nor
  // explain's first victim, nor its RT job are left; with it alone, they are all there.
  const auto r3 = run_sql({db, "report", "--from", std::to_string(t0 / sec), "--to",
                           std::to_string(t0 / sec + 240), "--where", "tid <> 103", "-o", f});
  INFO(r3.err);
  REQUIRE(r3.status == 0);
  const std::string h3 = slurp(f);
  REQUIRE(h3.find("<section id=\"annotation-1\">") != std::string::npos);
  CHECK(h3.find("(tid 103)") == std::string::npos);
  CHECK(h3.find("rtjob") == std::string::npos);
  const auto r4 = run_sql({db, "report", "--from", std::to_string(t0 / sec), "--to",
                           std::to_string(t0 / sec + 240), "--where", "tid = 103", "-o", f});
  INFO(r4.err);
  REQUIRE(r4.status == 0);
  const std::string h4 = slurp(f);
  const auto s4 = h4.find("<section id=\"annotation-1\">");
  REQUIRE(s4 != std::string::npos);
  CHECK(h4.find("<td>webworker (tid 103)</td>", s4) < h4.find("</section>", s4));
  CHECK(h4.find("rtjob[900]", s4) < h4.find("</section>", s4));
}

TEST_CASE("rsched-sql e2e: an incident's section lists the spikes of its window, also those "
          "milder than the report's worst 12, cut at its edges",
          "[rsched-sql]") {
  // 14 comms with a 100 ms spike each, one after another, and 'quiet' with a 5 ms one (15th by
  // peak) under an incident that ends in the middle of it.
  using namespace rsched;
  temp_dir dir;
  const std::string db = dir.file("rsched.db");
  constexpr std::int64_t t0 = 1'700'000'040'000'000'000;
  constexpr std::int64_t sec = 1'000'000'000;
  constexpr int loud = 14;
  {
    auto w = store::writer::open(db);
    REQUIRE(w.ok());
    for (int i = 0; i < 300; ++i) {
      store::interval_row iv;
      iv.start_ns = t0 + i * sec;
      iv.dur_ns = sec;
      iv.boot_id = "00000000-0000-0000-0000-000000000001";
      for (int c = 0; c <= loud; ++c) {
        store::thread_row t;
        t.tid = static_cast<std::uint32_t>(200 + c);
        t.pid = t.tid;
        t.start_time_ns = 5;
        t.comm = c == loud ? std::string("quiet") : "loud" + std::to_string(c);
        const int at = 30 + c * 15; // its spike: 10 s from here
        const bool spiking = i >= at && i < at + 10;
        const std::uint64_t d = !spiking ? 100'000 : c == loud ? 5'000'000 : 100'000'000;
        for (int k = 0; k < 100; ++k) {
          t.m[metric::sched_delay].hist.add(d);
        }
        t.m[metric::sched_delay].count = 100;
        t.m[metric::sched_delay].total = 100 * d;
        iv.threads.push_back(t);
      }
      REQUIRE(w->write(iv).ok());
    }
  }
  const std::int64_t quiet_at = 30 + loud * 15;
  REQUIRE(run_sql({db, "mark", "quiet slow", "--at", std::to_string(t0 / sec + quiet_at - 5),
                   "--until", std::to_string(t0 / sec + quiet_at + 5)})
              .status == 0);
  const std::string f = dir.file("r.html");
  const auto r = run_sql({db, "report", "--from", std::to_string(t0 / sec), "--to",
                          std::to_string(t0 / sec + 300), "-o", f});
  INFO(r.err);
  REQUIRE(r.status == 0);
  const std::string html = slurp(f);
  const auto sec1 = html.find("<section id=\"annotation-1\">");
  REQUIRE(sec1 != std::string::npos);
  const auto end1 = html.find("</section>", sec1);
  // The section's spikes: quiet's, unnumbered (not among the worst 12), 5 s of its 10 (the
  // incident ends in its middle).
  const auto table = html.find("<th>peak p99</th>", sec1);
  REQUIRE(table < end1);
  const auto row = html.find("<td>quiet (tid 214)</td>", table);
  INFO(html.substr(table, std::min<std::size_t>(2000, end1 - table)));
  REQUIRE(row < end1);
  const auto tr = html.rfind("<tr>", row);
  CHECK(html.substr(tr, row - tr).find("<td></td>") != std::string::npos);
  CHECK(html.substr(tr, row - tr).find(">5.00 s</td>") != std::string::npos);
  // The report's own spikes table holds the worst 12, quiet not among them.
  const auto spikes = html.find("the worst 12 by peak");
  REQUIRE(spikes != std::string::npos);
  CHECK(html.find("<td>quiet (tid 214)</td>", spikes) == std::string::npos);
}
