// /proc/schedstat parsing: the kernel's layout for versions 15, 16 and 17, and every malformed
// input gives an error naming its line instead of a crash or a silent zero.
#include "rsched/schedstat/schedstat.hpp"

#include "fixture.hpp"

#include <catch2/catch.hpp>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>

using namespace rsched::schedstat;

namespace {

std::string replace_first(std::string s, const std::string &from, const std::string &to) {
  const auto pos = s.find(from);
  REQUIRE(pos != std::string::npos);
  s.replace(pos, from.size(), to);
  return s;
}

std::string parse_error(std::string_view text) {
  const auto r = parse(text);
  REQUIRE_FALSE(r.ok());
  CHECK(r.err().msg.find('\n') == std::string::npos); // one line
  return r.err().msg;
}

} // namespace

TEST_CASE("domain field lists follow the kernel's print order", "[schedstat]") {
  const auto v15 = domain_field_names(15);
  REQUIRE(v15.size() == 36);
  CHECK(v15[0] == "lb_count_idle");
  CHECK(v15[1] == "lb_balanced_idle");
  CHECK(v15[3] == "lb_imbalance_idle");
  CHECK(v15[7] == "lb_nobusyg_idle");
  CHECK(v15[8] == "lb_count_not_idle");
  CHECK(v15[16] == "lb_count_newly_idle");
  CHECK(v15[24] == "alb_count");
  CHECK(v15[27] == "sbe_count");
  CHECK(v15[30] == "sbf_count");
  CHECK(v15[35] == "ttwu_move_balance");

  const auto v16 = domain_field_names(16);
  REQUIRE(v16.size() == 36);
  CHECK(v16[0] == "lb_count_not_idle");
  CHECK(v16[8] == "lb_count_idle");
  CHECK(v16[16] == "lb_count_newly_idle");
  CHECK(v16[24] == "alb_count");

  const auto v17 = domain_field_names(17);
  REQUIRE(v17.size() == 45);
  CHECK(v17[0] == "lb_count_not_idle");
  CHECK(v17[3] == "lb_imbalance_load_not_idle");
  CHECK(v17[4] == "lb_imbalance_util_not_idle");
  CHECK(v17[5] == "lb_imbalance_task_not_idle");
  CHECK(v17[6] == "lb_imbalance_misfit_not_idle");
  CHECK(v17[7] == "lb_gained_not_idle");
  CHECK(v17[10] == "lb_nobusyg_not_idle");
  CHECK(v17[11] == "lb_count_idle");
  CHECK(v17[22] == "lb_count_newly_idle");
  CHECK(v17[33] == "alb_count");
  CHECK(v17[44] == "ttwu_move_balance");

  CHECK(domain_field_names(14).empty());
  CHECK(domain_field_names(18).empty());
}

TEST_CASE("v15 sample: CPU and domain fields by the kernel's layout", "[schedstat]") {
  const auto s = fixture_snapshot("schedstat_v15.txt");
  CHECK(s.version == 15);
  CHECK(s.version_line);
  REQUIRE(s.timestamp_jiffies);
  CHECK(*s.timestamp_jiffies == 4298713511ULL);
  REQUIRE(s.cpus.size() == 4);
  REQUIRE(s.domains.size() == 8);

  const auto *cpu1 = s.cpu(1);
  REQUIRE(cpu1 != nullptr);
  // cpu1 3221 0 6581145 2764080 4493763 1617754 1465690953529 64873944414 3821500
  check_cpu_fields(cpu1->fields, {3221, 0, 6581145, 2764080, 4493763, 1617754, 1465690953529ULL,
                                  64873944414ULL, 3821500});

  const auto *d = s.domain(0, 0);
  REQUIRE(d != nullptr);
  CHECK(d->name.empty());
  CHECK(d->cpumask == "3");
  REQUIRE(d->fields.size() == 36);
  CHECK(d->field("lb_count_idle") == 5012U);
  CHECK(d->field("lb_balanced_idle") == 4956U);
  CHECK(d->field("lb_failed_idle") == 40U);
  CHECK(d->field("lb_imbalance_idle") == 963U);
  CHECK(d->field("lb_nobusyg_idle") == 4170U);
  CHECK(d->field("lb_count_not_idle") == 75496U);
  CHECK(d->field("lb_imbalance_not_idle") == 10680U);
  CHECK(d->field("lb_count_newly_idle") == 202593U);
  CHECK(d->field("lb_nobusyg_newly_idle") == 127608U);
  CHECK(d->field("alb_count") == 170U);
  CHECK(d->field("alb_failed") == 2U);
  CHECK(d->field("sbe_count") == 518U);
  CHECK(d->field("sbf_pushed") == 1059U);
  CHECK(d->field("ttwu_wake_remote") == 527073U);
  CHECK(d->field("ttwu_move_balance") == 728U);
  CHECK_FALSE(d->field("lb_balance_idle")); // upstream's spelling is not ours
  CHECK_FALSE(d->field("lb_imbalance_load_idle"));

  const auto *top = s.domain(3, 1);
  REQUIRE(top != nullptr);
  CHECK(top->cpumask == "f");
  CHECK(top->field("ttwu_move_balance") == 260U);
  CHECK(s.domain(3, 2) == nullptr);
  CHECK(s.domain(2, 0)->cpumask == "c");
  CHECK(s.cpu(4) == nullptr);
}

TEST_CASE("v16 sample: NOT_IDLE block first", "[schedstat]") {
  const auto s = fixture_snapshot("schedstat_v16.txt");
  CHECK(s.version == 16);
  REQUIRE(s.cpus.size() == 4);
  REQUIRE(s.domains.size() == 8);
  CHECK(s.cpu(1)->fields.run_delay_ns == 94382289808ULL);
  CHECK(s.cpu(1)->fields.pcount == 3238331);
  CHECK(s.cpu(1)->fields.rq_cpu_time_ns == 806801582501ULL);

  const auto *d = s.domain(0, 0);
  REQUIRE(d != nullptr);
  CHECK(d->cpumask == "3");
  CHECK(d->field("lb_count_not_idle") == 5691U);
  CHECK(d->field("lb_imbalance_not_idle") == 1797U);
  CHECK(d->field("lb_count_idle") == 114866U);
  CHECK(d->field("lb_imbalance_idle") == 25909U);
  CHECK(d->field("lb_count_newly_idle") == 390463U);
  CHECK(d->field("alb_count") == 11U);
  CHECK(d->field("ttwu_move_balance") == 402U);
}

TEST_CASE("v17 sample: domain names and the four imbalance kinds", "[schedstat]") {
  const auto s = fixture_snapshot("schedstat_v17.txt");
  CHECK(s.version == 17);
  CHECK(*s.timestamp_jiffies == 4317042275ULL);
  REQUIRE(s.cpus.size() == 4);
  REQUIRE(s.domains.size() == 8);
  CHECK(s.cpu(1)->fields.run_delay_ns == 151994607475ULL);
  CHECK(s.cpu(1)->fields.pcount == 2661871);
  CHECK(s.cpu(1)->fields.sched_count == 4291037);

  const auto *d = s.domain(1, 0);
  REQUIRE(d != nullptr);
  CHECK(d->cpu == 1);
  CHECK(d->index == 0);
  CHECK(d->name == "SMT");
  CHECK(d->cpumask == "3");
  REQUIRE(d->fields.size() == 45);
  // domain0 SMT 3 5587 5444 140 11835000 7865 353 65 122 14 367 4243 84741 ...
  CHECK(d->field("lb_count_not_idle") == 5587U);
  CHECK(d->field("lb_balanced_not_idle") == 5444U);
  CHECK(d->field("lb_failed_not_idle") == 140U);
  CHECK(d->field("lb_imbalance_load_not_idle") == 11835000U);
  CHECK(d->field("lb_imbalance_util_not_idle") == 7865U);
  CHECK(d->field("lb_imbalance_task_not_idle") == 353U);
  CHECK(d->field("lb_imbalance_misfit_not_idle") == 65U);
  CHECK(d->field("lb_gained_not_idle") == 122U);
  CHECK(d->field("lb_nobusyg_not_idle") == 4243U);
  CHECK(d->field("lb_count_idle") == 84741U);
  CHECK(d->field("lb_imbalance_load_idle") == 309304000U);
  CHECK(d->field("lb_count_newly_idle") == 331946U);
  CHECK(d->field("lb_nobusyg_newly_idle") == 217237U);
  CHECK(d->field("alb_count") == 287U);
  CHECK(d->field("ttwu_wake_remote") == 334098U);
  CHECK(d->field("ttwu_move_balance") == 827U);
  CHECK_FALSE(d->field("lb_imbalance_not_idle")); // removed in v17

  const auto *pkg = s.domain(1, 1);
  REQUIRE(pkg != nullptr);
  CHECK(pkg->name == "PKG");
  CHECK(pkg->cpumask == "f");
  CHECK(pkg->field("lb_count_not_idle") == 5657U);
}

TEST_CASE("v15 and v16 label the same numbers differently", "[schedstat]") {
  const std::string text15 = fixture_text("schedstat_v15.txt");
  const std::string text16 = replace_first(text15, "version 15", "version 16");
  const auto a = parse(text15);
  const auto b = parse(text16);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(a->domains.size() == b->domains.size());
  const char *lb[] = {"lb_count",  "lb_balanced",   "lb_failed",  "lb_imbalance",
                      "lb_gained", "lb_hot_gained", "lb_nobusyq", "lb_nobusyg"};
  for (std::size_t i = 0; i < a->domains.size(); ++i) {
    const auto &d15 = a->domains[i];
    const auto &d16 = b->domains[i];
    for (const char *f : lb) {
      const std::string n = f;
      CHECK(d15.field(n + "_idle") == d16.field(n + "_not_idle"));
      CHECK(d15.field(n + "_not_idle") == d16.field(n + "_idle"));
      CHECK(d15.field(n + "_newly_idle") == d16.field(n + "_newly_idle"));
    }
    CHECK(d15.field("ttwu_wake_remote") == d16.field("ttwu_wake_remote"));
    // the swap is observable: the two blocks hold different numbers
    CHECK(d15.field("lb_count_idle") != d16.field("lb_count_idle"));
  }
  CHECK(a->domain(0, 0)->field("lb_count_idle") == 5012U);
  CHECK(b->domain(0, 0)->field("lb_count_not_idle") == 5012U);
  CHECK(b->domain(0, 0)->field("lb_count_idle") == 75496U);
  CHECK(a->cpus[1].fields == b->cpus[1].fields);
}

TEST_CASE("a missing version line means version 15", "[schedstat]") {
  const std::string text = fixture_text("schedstat_v15.txt");
  const std::string body = replace_first(text, "version 15\n", "");
  const auto s = parse(body);
  REQUIRE(s.ok());
  CHECK(s->version == 15);
  CHECK_FALSE(s->version_line);
  CHECK(s->domain(0, 0)->field("lb_count_idle") == 5012U);

  const auto bare = parse("cpu0 1 0 2 3 4 5 6 7 8\n");
  REQUIRE(bare.ok());
  CHECK(bare->version == 15);
  CHECK_FALSE(bare->timestamp_jiffies);
  CHECK(bare->cpus[0].fields.pcount == 8);
}

TEST_CASE("unsupported versions are errors", "[schedstat]") {
  const std::string body = "timestamp 1\ncpu0 1 0 2 3 4 5 6 7 8\n";
  CHECK_THAT(parse_error("version 18\n" + body),
             Catch::Contains("unsupported schedstat version 18"));
  CHECK_THAT(parse_error("version 14\n" + body),
             Catch::Contains("unsupported schedstat version 14"));
  CHECK_THAT(parse_error("version 0\n" + body), Catch::Contains("unsupported schedstat version 0"));
  CHECK_THAT(parse_error("version 99999999999999999999\n" + body),
             Catch::Contains("line 1: invalid version"));
  CHECK_THAT(parse_error("version x17\n" + body), Catch::Contains("line 1: invalid version"));
  CHECK_THAT(parse_error("version\n" + body), Catch::Contains("line 1"));
}

TEST_CASE("malformed lines are errors that name the line", "[schedstat]") {
  const std::string head = "version 15\ntimestamp 100\n";
  const std::string cpu0 = "cpu0 1 0 2 3 4 5 6 7 8\n";
  std::string dom36 = "domain0 3";
  for (int i = 1; i <= 36; ++i) {
    // Two appends, not += " " + std::to_string(..): GCC 12 at -O2 warns -Wrestrict on that
    // (a false positive, GCC bug 105329).
    dom36.append(1, ' ').append(std::to_string(i));
  }
  REQUIRE(parse(head + cpu0 + dom36 + "\n").ok());

  SECTION("too few CPU values") {
    CHECK_THAT(parse_error(head + "cpu0 1 0 2 3 4 5 6 7\n"),
               Catch::Contains("line 3") && Catch::Contains("cpu0 has 8 values, expected 9"));
    CHECK_THAT(parse_error(head + "cpu0\n"), Catch::Contains("cpu0 has 0 values"));
  }
  SECTION("too few domain values") {
    const std::string short_dom = dom36.substr(0, dom36.rfind(' '));
    CHECK_THAT(parse_error(head + cpu0 + short_dom + "\n"),
               Catch::Contains("line 4") && Catch::Contains("has 35 values, version 15 needs 36"));
    CHECK_THAT(parse_error(head + cpu0 + "domain0\n"), Catch::Contains("line 4"));
    // a v17 line needs the name before the cpumask: 36 values are not enough
    CHECK_THAT(parse_error("version 17\n" + cpu0 + "domain0 SMT " + dom36.substr(8) + "\n"),
               Catch::Contains("line 3") && Catch::Contains("needs 45"));
  }
  SECTION("bad numbers") {
    CHECK_THAT(parse_error(head + "cpu0 1 0 2x 3 4 5 6 7 8\n"),
               Catch::Contains("line 3") && Catch::Contains("invalid sched_count \"2x\""));
    CHECK_THAT(parse_error(head + "cpu0 1 0 2 3 4 5 6 -7 8\n"),
               Catch::Contains("invalid run_delay_ns \"-7\""));
    CHECK_THAT(parse_error(head + "cpu0 1 0 2 3 4 5 6 7 18446744073709551616\n"),
               Catch::Contains("invalid pcount"));
    CHECK(parse(head + "cpu0 1 0 2 3 4 5 6 7 18446744073709551615\n")->cpus[0].fields.pcount ==
          18446744073709551615ULL);
    CHECK_THAT(parse_error(head + "cpu0 1 0 2 3 4 5 6 7 +8\n"), Catch::Contains("invalid pcount"));
    CHECK_THAT(parse_error(head + cpu0 + replace_first(dom36, " 17 ", " 1.5 ") + "\n"),
               Catch::Contains("line 4") &&
                   Catch::Contains("invalid lb_count_newly_idle \"1.5\" for domain0 of cpu0"));
    CHECK_THAT(parse_error("timestamp soon\n" + cpu0),
               Catch::Contains("line 1: invalid timestamp"));
    CHECK_THAT(parse_error(head + "cpu99999999999 1 0 2 3 4 5 6 7 8\n"),
               Catch::Contains("line 3: cpu id out of range"));
  }
  SECTION("structure") {
    CHECK_THAT(parse_error(head + dom36 + "\n" + cpu0),
               Catch::Contains("line 3: domain line before any cpu line"));
    CHECK_THAT(parse_error(head + cpu0 + cpu0), Catch::Contains("line 4: second line for cpu0"));
    CHECK_THAT(parse_error(head + cpu0 + dom36 + "\n" + dom36 + "\n"),
               Catch::Contains("line 5: second domain0 line for cpu0"));
    CHECK_THAT(parse_error(cpu0 + "version 15\n"),
               Catch::Contains("line 2: version line after the per-CPU lines"));
    CHECK_THAT(parse_error(head + "version 15\n" + cpu0), Catch::Contains("second version line"));
    CHECK_THAT(parse_error(head + "timestamp 5\n" + cpu0), Catch::Contains("second timestamp"));
    CHECK_THAT(parse_error(""), Catch::Contains("no cpu lines"));
    CHECK_THAT(parse_error(head), Catch::Contains("no cpu lines"));
    CHECK_THAT(parse_error("\n\n\n"), Catch::Contains("no cpu lines"));
  }
  SECTION("hostile bytes are escaped and bounded in the message") {
    const std::string evil = "\x1b]0;owned\x07" + std::string(200, 'A');
    const std::string msg = parse_error(head + "cpu0 1 0 " + evil + " 3 4 5 6 7 8\n");
    CHECK(msg.find('\x1b') == std::string::npos);
    CHECK(msg.find('\x07') == std::string::npos);
    CHECK_THAT(msg, Catch::Contains("\\x1b]0;owned\\x07"));
    CHECK(msg.size() < 150);
  }
}

TEST_CASE("tolerated input", "[schedstat]") {
  SECTION("lines that are not cpu<digits> or domain<digits> are ignored") {
    const auto s = parse("version 16\ntimestamp 7\n\ncpufreq 1 2 3\ncpu 9 9\ncpuX 1\ncpu1a 1\n"
                         "domainX y\nsomething new 1 2 3\ncpu2 1 0 2 3 4 5 6 7 8\n");
    REQUIRE(s.ok());
    REQUIRE(s->cpus.size() == 1);
    CHECK(s->cpus[0].cpu == 2);
  }
  SECTION("values past the layout are ignored unparsed") {
    std::string dom = "domain0 3";
    for (int i = 1; i <= 36; ++i) {
      dom.append(1, ' ').append(std::to_string(i * 10));
    }
    const auto s =
        parse("version 15\ncpu0 1 0 2 3 4 5 6 7 8 99 future\n" + dom + " 370 extra-text\n");
    REQUIRE(s.ok());
    CHECK(s->cpus[0].fields.pcount == 8);
    REQUIRE(s->domains[0].fields.size() == 36);
    CHECK(s->domains[0].fields.back().value == 360);
  }
  SECTION("CRLF line endings, tabs, repeated blanks, no final newline") {
    const auto s = parse("version 17\r\ntimestamp\t5\r\n  cpu0  1\t0 2 3 4 5 6 7 8\r\n"
                         "cpu1 9 0 10 11 12 13 14 15 16");
    REQUIRE(s.ok());
    CHECK(s->version == 17);
    CHECK(*s->timestamp_jiffies == 5);
    REQUIRE(s->cpus.size() == 2);
    CHECK(s->cpus[0].fields.pcount == 8);
    CHECK(s->cpus[1].fields.pcount == 16);
  }
  SECTION("a CPU without domains (non-SMP or isolated) is fine") {
    const auto s = parse("version 15\ncpu0 1 0 2 3 4 5 6 7 8\ncpu1 1 0 2 3 4 5 6 7 8\n");
    REQUIRE(s.ok());
    CHECK(s->domains.empty());
  }
}

TEST_CASE("random garbage and damaged samples never crash", "[schedstat]") {
  std::mt19937 rng(12345);
  const std::string alphabet = "0123456789 \t\n\r-+.xcpudomainversiontimestampSMTf,\x1b\xff";
  const std::string pieces[] = {"cpu0 ",      "cpu1 ",        "domain0 ",
                                "domain1 ",   "version 15\n", "version 17\n",
                                "timestamp ", "3 ",           "18446744073709551616 ",
                                "\n"};
  std::size_t ok = 0;
  std::size_t failed = 0;
  auto check = [&](const std::string &text) {
    const auto r = parse(text);
    if (r.ok()) {
      ++ok;
      CHECK_FALSE(r->cpus.empty());
      const auto names = domain_field_names(r->version);
      for (const auto &d : r->domains) {
        CHECK(d.fields.size() == names.size());
      }
    } else {
      ++failed;
      CHECK_FALSE(r.err().msg.empty());
      CHECK(r.err().msg.find('\n') == std::string::npos);
    }
  };
  for (int i = 0; i < 3000; ++i) {
    std::string text;
    const auto len = std::uniform_int_distribution<std::size_t>(0, 400)(rng);
    while (text.size() < len) {
      if (rng() % 3 == 0) {
        text += pieces[rng() % std::size(pieces)];
      } else {
        text += alphabet[rng() % alphabet.size()];
      }
    }
    check(text);
  }
  for (const char *name : {"schedstat_v15.txt", "schedstat_v16.txt", "schedstat_v17.txt"}) {
    const std::string good = fixture_text(name);
    for (int i = 0; i < 300; ++i) {
      std::string text = good.substr(0, rng() % (good.size() + 1)); // truncated
      if (!text.empty() && i % 2 == 0) {                            // and a damaged byte
        text[rng() % text.size()] = alphabet[rng() % alphabet.size()];
      }
      check(text);
    }
  }
  CHECK(ok > 0); // the loop reaches both outcomes
  CHECK(failed > 0);
}

TEST_CASE("read() of a fixture, a missing file and a directory", "[schedstat]") {
  const auto s = read(fixture_path("schedstat_v17.txt"));
  REQUIRE(s.ok());
  CHECK(s->version == 17);
  CHECK(s->cpus.size() == 4);

  const std::string missing = fixture_path("no-such-schedstat");
  const auto m = read(missing);
  REQUIRE_FALSE(m.ok());
  CHECK(m.err().msg == missing + " is not available (kernel built without CONFIG_SCHEDSTATS)");
  CHECK(m.err().errnum == ENOENT);

  const auto dir = read(RSCHED_TEST_DATA_DIR);
  REQUIRE_FALSE(dir.ok());
  CHECK_THAT(dir.err().msg, Catch::Contains(RSCHED_TEST_DATA_DIR));
}

TEST_CASE("read() errors name the file", "[schedstat]") {
  const auto r = read(fixture_path("schedstat_v15.txt"));
  REQUIRE(r.ok());
  // parse errors from read() carry the path instead of "schedstat"
  const std::string bad = std::string(RSCHED_BINARY_DIR) + "/schedstat_bad_sample.txt";
  {
    std::ofstream out(bad, std::ios::binary | std::ios::trunc);
    out << "version 15\ncpu0 1 2\n";
  }
  const auto e = read(bad);
  REQUIRE_FALSE(e.ok());
  CHECK(e.err().msg == bad + " line 2: cpu0 has 2 values, expected 9");
  std::remove(bad.c_str());
}
