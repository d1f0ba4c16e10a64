// rsched::timefmt: time and duration grammar, zones (UTC, named with DST) and formatting.
#include "rsched/base/timefmt.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>

using namespace rsched::timefmt;

namespace {

constexpr std::int64_t s = 1'000'000'000;
// 2026-11-20T14:03:05Z, a Friday.
constexpr std::int64_t now = 1795183385 * s;

std::int64_t t_ok(std::string_view in, const zone &z) {
  auto r = parse_time(in, now, z);
  INFO(in << ": " << (r.ok() ? std::string() : r.err().msg));
  REQUIRE(r.ok());
  return *r;
}

zone named(const char *n) {
  auto z = zone::parse(n);
  REQUIRE(z.ok());
  return *z;
}

} // namespace

TEST_CASE("parse_duration accepts the documented forms", "[base]") {
  struct c {
    const char *in;
    std::int64_t ns;
  };
  const c cases[] = {
      {"90m", 90 * 60 * s},   {"1d2h", (86400 + 7200) * s},
      {"5m30s", 330 * s},     {"2 hours", 7200 * s},
      {"500ms", 500'000'000}, {"250us", 250'000},
      {"300", 300 * s},       {"0.5", s / 2},
      {"1.5h", 5400 * s},     {" 2h 30m ", 9000 * s},
      {"10ns", 10},           {"1w", 604800 * s},
      {"3 minutes", 180 * s}, {"2H", 7200 * s},
  };
  for (const auto &k : cases) {
    INFO(k.in);
    auto r = parse_duration(k.in);
    REQUIRE(r.ok());
    CHECK(*r == k.ns);
  }
  for (const char *bad : {"", "abc", "5 parsecs", "1..2s", "5m 3", "-5m"}) {
    INFO(bad);
    auto r = parse_duration(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.err().msg.find(std::string("'") + bad + "'") != std::string::npos);
    CHECK(r.err().msg.find('\n') == std::string::npos);
  }
}

TEST_CASE("parse_time in UTC", "[base]") {
  const zone z = zone::utc();
  const std::int64_t at1403 = 1795183380 * s;
  CHECK(t_ok("2026-11-20T14:03:00Z", z) == at1403);
  CHECK(t_ok("2026-11-20T16:03:00+02:00", z) == at1403);
  CHECK(t_ok("2026-11-20T09:03:00-0500", z) == at1403);
  CHECK(t_ok("2026-11-20T14:03:00.250Z", z) == at1403 + 250'000'000);
  CHECK(t_ok("2026-11-20 14:03", z) == at1403);
  CHECK(t_ok("2026-11-20 14:03:00", z) == at1403);
  CHECK(t_ok("2026-11-20T14:03:00.123456789", z) == at1403 + 123'456'789);
  CHECK(t_ok("2026-11-20", z) == at1403 - (14 * 3600 + 3 * 60) * s);
  CHECK(t_ok("1795183380", z) == at1403);
  CHECK(t_ok("1795183380.5", z) == at1403 + s / 2);
  CHECK(t_ok("now", z) == now);
  CHECK(t_ok("NOW", z) == now);
  CHECK(t_ok("today", z) == at1403 - (14 * 3600 + 3 * 60) * s);
  CHECK(t_ok("yesterday", z) == at1403 - (14 * 3600 + 3 * 60 + 86400) * s);
  CHECK(t_ok("yesterday 14:03", z) == at1403 - 86400 * s);
  CHECK(t_ok("today 14:03", z) == at1403);
  CHECK(t_ok("14:03", z) == at1403);
  CHECK(t_ok("14:03:00", z) == at1403);
  CHECK(t_ok("2h ago", z) == now - 7200 * s);
  CHECK(t_ok("90m ago", z) == now - 5400 * s);
  CHECK(t_ok("1d2h ago", z) == now - (86400 + 7200) * s);
  CHECK(t_ok("2 hours ago", z) == now - 7200 * s);
  CHECK(t_ok("1970-01-01T00:00:00Z", z) == 0);
  CHECK(t_ok("1969-12-31T23:59:59Z", z) == -s);
  CHECK(t_ok("2024-02-29 00:00", z) == 1709164800 * s);
}

TEST_CASE("parse_time errors name the input on one line", "[base]") {
  for (const char *bad :
       {"", "tomorrow", "2026-13-01", "2026-02-30", "2026-11-20 25:00", "2026-11-20T14:03:00+2",
        "yesterday noon", "14:03 ago", "x ago", "2026-11-20 14:03 junk", "12:61"}) {
    INFO(bad);
    auto r = parse_time(bad, now, zone::utc());
    REQUIRE_FALSE(r.ok());
    CHECK(r.err().msg.find(std::string("'") + bad + "'") != std::string::npos);
    CHECK(r.err().msg.find('\n') == std::string::npos);
  }
}

TEST_CASE("parse_time and format_time in a named zone with DST", "[base]") {
  const zone ny = named("America/New_York");
  // Winter: UTC-5.
  CHECK(t_ok("2026-11-20 14:03", ny) == 1795201380 * s);
  CHECK(t_ok("2026-11-20T14:03:00Z", ny) == 1795183380 * s); // explicit offset wins
  // The day DST starts (2026-03-08): 01:30 is EST, 03:30 EDT.
  CHECK(t_ok("2026-03-08 01:30", ny) == 1772951400 * s);
  CHECK(t_ok("2026-03-08 03:30", ny) == 1772955000 * s);
  CHECK(format_time(1772951400 * s, ny) == "2026-03-08 01:30:00-05:00");
  CHECK(format_time(1772955000 * s, ny) == "2026-03-08 03:30:00-04:00");
  // today/yesterday are midnights in the zone: now is 09:03:05 in New York.
  CHECK(t_ok("today", ny) == (1795201380 - 14 * 3600 - 3 * 60) * s);
  CHECK(t_ok("09:03:05", ny) == now);
  CHECK(t_ok("yesterday 09:03:05", ny) == now - 86400 * s);

  const zone berlin = named("Europe/Berlin");
  CHECK(t_ok("2026-07-01 12:00", berlin) == 1782900000 * s);
  CHECK(format_time(1782900000 * s, berlin) == "2026-07-01 12:00:00+02:00");
  CHECK(format_time(1782900000 * s + 123'456'789, berlin) == "2026-07-01 12:00:00.123+02:00");
  // The zone switch does not leak into the process environment.
  const char *tz = std::getenv("TZ");
  const std::string before = tz != nullptr ? tz : "<unset>";
  (void)format_time(0, ny);
  const char *tz2 = std::getenv("TZ");
  CHECK((tz2 != nullptr ? std::string(tz2) : std::string("<unset>")) == before);
}

TEST_CASE("format_time in UTC and round trips", "[base]") {
  const zone z = zone::utc();
  CHECK(format_time(1795183385 * s, z) == "2026-11-20 14:03:05+00:00");
  CHECK(format_time(1795183385 * s + 5'000'000, z) == "2026-11-20 14:03:05.005+00:00");
  CHECK(format_time(1795183385 * s + 999, z) == "2026-11-20 14:03:05+00:00");
  CHECK(format_time(-s, z) == "1969-12-31 23:59:59+00:00");
  for (const zone &zz : {zone::utc(), named("America/New_York"), named("Asia/Kolkata")}) {
    for (std::int64_t t : {std::int64_t{0}, 1772951400 * s, 1795183385 * s + 250'000'000}) {
      CHECK(t_ok(format_time(t, zz), z) == t);
    }
  }
}

TEST_CASE("format_time at the ends of the 64-bit range", "[base]") {
  // The first second of the range: its whole second times 1e9 is below INT64_MIN (found by
  // fuzz/timefmt_fuzz.cpp; the overflow is UB, which the sanitizer build stops on).
  constexpr std::int64_t min = std::numeric_limits<std::int64_t>::min();
  constexpr std::int64_t max = std::numeric_limits<std::int64_t>::max();
  const zone utc = zone::utc();
  CHECK(format_time(min, utc) == "1677-09-21 00:12:43.145+00:00");
  CHECK(format_time(min + 854'775'807, utc) == "1677-09-21 00:12:43.999+00:00");
  CHECK(format_time(max, utc) == "2262-04-11 23:47:16.854+00:00");
  CHECK(format_time(min, named("Europe/Berlin")) == "1677-09-21 01:06:11.145+00:53");
}

TEST_CASE("zone::parse", "[base]") {
  CHECK(zone::parse("UTC")->k == zone::kind::utc);
  CHECK(zone::parse("utc")->k == zone::kind::utc);
  CHECK(zone::parse("local")->k == zone::kind::local);
  CHECK(zone::parse("Europe/Berlin")->name == "Europe/Berlin");
  for (const char *bad : {"Mars/Olympus", "../../etc/passwd", "/etc/localtime", "", "Europe"}) {
    INFO(bad);
    auto r = zone::parse(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.err().msg.find("unknown time zone") != std::string::npos);
  }
}

TEST_CASE("times and durations outside 64-bit ns are errors, not wrapped values", "[base]") {
  const zone utc = zone::utc();
  constexpr std::int64_t max = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t min = std::numeric_limits<std::int64_t>::min();
  // The exact ends of the range are times.
  CHECK(t_ok("2262-04-11T23:47:16.854775807Z", utc) == max);
  CHECK(t_ok("1677-09-21T00:12:43.145224192Z", utc) == min);
  CHECK(t_ok("2262-04-11 23:47:16", utc) == 9223372036 * s);
  CHECK(t_ok("1677-09-21 00:12:44", utc) == -9223372036 * s);
  // One ns, one second or a whole calendar beyond them is not.
  for (const char *bad :
       {"9999-12-31", "1600-01-01", "0000-01-01", "2262-04-11T23:47:16.854775808Z",
        "2262-04-11 23:47:17Z", "1677-09-21T00:12:43.145224191Z", "1677-09-21 00:12:43Z",
        "999999999999", "9223372037", "9999-12-31T00:00:00+01:00"}) {
    for (const zone &z : {utc, named("Europe/Berlin")}) {
      INFO(bad << " in " << z.label());
      auto r = parse_time(bad, now, z);
      REQUIRE_FALSE(r.ok());
      CHECK(r.err().msg.find(std::string("'") + bad + "'") != std::string::npos);
      CHECK(r.err().msg.find("out of range") != std::string::npos);
      CHECK(r.err().msg.find('\n') == std::string::npos);
    }
  }
  // Relative times near the ends: checked subtraction from `now`.
  CHECK_FALSE(parse_time("1h ago", min + 1, utc).ok());
  auto edge = parse_time("1h ago", min + 3600 * s, utc);
  REQUIRE(edge.ok());
  CHECK(*edge == min);
  CHECK(t_ok("106751d ago", utc) == now - std::int64_t{106751} * 86400 * s); // 1734: in range
  // Durations: at most 2^63 - 1 ns (106751 days and a bit); more is "too large".
  CHECK(parse_duration("106751d").ok());
  for (const char *bad : {"106752d", "1000000d", "1000000000w", "99999999999999999999999999s",
                          "9223372036854775808ns"}) {
    INFO(bad);
    auto r = parse_duration(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.err().msg.find("too large") != std::string::npos);
  }
  auto longest = parse_duration("9223372036854775807ns");
  REQUIRE(longest.ok());
  CHECK(*longest == max);
}
