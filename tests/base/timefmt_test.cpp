// rsched::timefmt: time and duration grammar, zones (UTC, named with DST) and formatting.
#include "rsched/base/timefmt.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <string>
#include <thread>
#include <vector>

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
      {"1.5h", 5400 * s},     {"2h 30m", 9000 * s},
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

// Issue 51: as rsched::units takes the command line's durations and sizes, a time or duration
// (--from/--to, dur(), t(), .mark --at) is taken as written: a space around it, a run of spaces,
// a tab, newline or other control byte is refused with the value named, not trimmed away.
TEST_CASE("times and durations with spaces around them or control bytes are refused", "[base]") {
  const zone z = zone::utc();
  const std::string why =
      "a space, tab, newline or control character around or in it (write just the value)";
  const struct {
    const char *in;
    const char *shown; // as the message names it
  } durations[] = {{"  5m", "  5m"},       {"5m\t", "5m\\x09"}, {" 2h 30m ", " 2h 30m "},
                   {"2h  30m", "2h  30m"}, {"5\nm", "5\\x0am"}, {"\t", "\\x09"},
                   {"5m\r", "5m\\x0d"}};
  for (const auto &d : durations) {
    INFO(d.in);
    auto r = parse_duration(d.in);
    REQUIRE_FALSE(r.ok());
    CHECK(r.err().msg == std::string("invalid duration '") + d.shown + "': " + why);
  }
  const struct {
    const char *in;
    const char *shown;
  } times[] = {{" now", " now"},
               {"2026-11-20 14:03 ", "2026-11-20 14:03 "},
               {"2026-11-20\t14:03", "2026-11-20\\x0914:03"},
               {"2026-11-20  14:03", "2026-11-20  14:03"},
               {"5m ago\n", "5m ago\\x0a"},
               {"1795183380\x7f", "1795183380\\x7f"}};
  for (const auto &t : times) {
    INFO(t.in);
    auto r = parse_time(t.in, 1795183380 * s, z);
    REQUIRE_FALSE(r.ok());
    CHECK(r.err().msg == std::string("invalid time '") + t.shown + "': " + why);
  }
  // One space between words is the grammar's.
  CHECK(t_ok("2026-11-20 14:03", z) == 1795183380 * s);
  CHECK(t_ok("5m ago", z) == now - 300 * s);
  CHECK(parse_duration("1h 30m").ok());
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

// Behaviour pinned before named zones moved from libc (setenv("TZ") + mktime/localtime_r) to
// date/tz: these cases passed on the libc implementation first.

namespace {

std::string at(std::int64_t secs, const char *zone_name) {
  return format_time(secs * s, named(zone_name));
}

// parse_time of a civil time in `zone_name`, in seconds, after a conversion of `before` in
// `before_zone` (the previous mktime call steered libc's choice in some cases).
std::int64_t civil(const char *in, const char *zone_name, const char *before = nullptr,
                   const char *before_zone = nullptr) {
  if (before != nullptr) {
    (void)t_ok(before, named(before_zone != nullptr ? before_zone : zone_name));
  }
  return t_ok(in, named(zone_name)) / s;
}

} // namespace

TEST_CASE("named zones: a time skipped by a DST change moves by the change", "[base]") {
  struct c {
    const char *in, *zone;
    std::int64_t utc;
    const char *shown;
  };
  const c cases[] = {
      // New York, 2026-03-08 02:00 EST -> 03:00 EDT: read with the offset before the change.
      {"2026-03-08 01:59:59", "America/New_York", 1772953199, "2026-03-08 01:59:59-05:00"},
      {"2026-03-08 02:00", "America/New_York", 1772953200, "2026-03-08 03:00:00-04:00"},
      {"2026-03-08 02:30", "America/New_York", 1772955000, "2026-03-08 03:30:00-04:00"},
      {"2026-03-08 02:59:59", "America/New_York", 1772956799, "2026-03-08 03:59:59-04:00"},
      {"2026-03-08 03:00", "America/New_York", 1772953200, "2026-03-08 03:00:00-04:00"},
      // Berlin, 2026-03-29 02:00 CET -> 03:00 CEST.
      {"2026-03-29 01:59:59", "Europe/Berlin", 1774745999, "2026-03-29 01:59:59+01:00"},
      {"2026-03-29 02:00", "Europe/Berlin", 1774746000, "2026-03-29 03:00:00+02:00"},
      {"2026-03-29 02:30", "Europe/Berlin", 1774747800, "2026-03-29 03:30:00+02:00"},
      {"2026-03-29 02:59:59", "Europe/Berlin", 1774749599, "2026-03-29 03:59:59+02:00"},
      {"2026-03-29 03:00", "Europe/Berlin", 1774746000, "2026-03-29 03:00:00+02:00"},
      // Lord Howe moves by 30 minutes (02:00 -> 02:30).
      {"2026-10-04 02:00", "Australia/Lord_Howe", 1791041400, "2026-10-04 02:30:00+11:00"},
      {"2026-10-04 02:15", "Australia/Lord_Howe", 1791042300, "2026-10-04 02:45:00+11:00"},
      {"2026-10-04 02:30", "Australia/Lord_Howe", 1791041400, "2026-10-04 02:30:00+11:00"},
      // Dublin's DST is its winter time (GMT, negative save): the skipped 01:xx goes back an
      // hour, to the DST side, as glibc's mktime prefers it.
      {"2026-03-29 01:00", "Europe/Dublin", 1774742400, "2026-03-29 00:00:00+00:00"},
      {"2026-03-29 01:30", "Europe/Dublin", 1774744200, "2026-03-29 00:30:00+00:00"},
      {"2026-03-29 02:00", "Europe/Dublin", 1774746000, "2026-03-29 02:00:00+01:00"},
      {"2011-12-29 23:59:59", "Pacific/Apia", 1325239199, "2011-12-29 23:59:59-10:00"},
      {"2011-12-31 00:00", "Pacific/Apia", 1325239200, "2011-12-31 00:00:00+14:00"},
  };
  for (const auto &k : cases) {
    INFO(k.in << " in " << k.zone);
    // The same whatever was converted before.
    CHECK(civil(k.in, k.zone) == k.utc);
    CHECK(civil(k.in, k.zone, "2026-07-01 12:00") == k.utc);
    CHECK(civil(k.in, k.zone, "2026-01-01 12:00") == k.utc);
    CHECK(civil(k.in, k.zone, "2026-01-01 12:00", "Asia/Tokyo") == k.utc);
    CHECK(civil(k.in, k.zone, "2026-01-01 12:00", "America/Los_Angeles") == k.utc);
    CHECK(at(k.utc, k.zone) == k.shown);
  }
  // Samoa skipped 2011-12-30 (-10 -> +14, DST on both sides). A skipped time with DST on both
  // sides (or neither) was mktime's choice of the two readings, steered by its previous call.
  const std::int64_t apia = civil("2011-12-30 12:00", "Pacific/Apia");
  CHECK((apia == 1325282400 || apia == 1325196000)); // 2011-12-31 12:00+14 or 2011-12-29 12:00-10
  // Since date/tz: always forward by the change, the reading with the offset before it.
  for (const char *before : {"2011-12-01 12:00", "2012-01-15 12:00"}) {
    CHECK(civil("2011-12-30 12:00", "Pacific/Apia", before) == 1325282400);
    CHECK(civil("2011-12-30 12:00", "Pacific/Apia", before, "America/Los_Angeles") == 1325282400);
  }
}

TEST_CASE("named zones: the repeated hour after a conversion before the change", "[base]") {
  // After a conversion before the clocks go back, a repeated time is its first occurrence.
  CHECK(civil("2026-11-01 01:00", "America/New_York", "2026-10-31 12:00") == 1793509200);
  CHECK(civil("2026-11-01 01:30", "America/New_York", "2026-10-31 12:00") == 1793511000);
  CHECK(civil("2026-11-01 01:59:59", "America/New_York", "2026-10-31 12:00") == 1793512799);
  CHECK(civil("2026-10-25 02:30", "Europe/Berlin", "2026-10-24 12:00") == 1792888200);
  CHECK(civil("2026-04-05 01:45", "Australia/Lord_Howe", "2026-04-04 12:00") == 1775313900);
  // Since date/tz: the first occurrence whatever was converted before (libc took the offset of
  // its previous result, of any zone, when it was one of the two: EST after a winter time).
  for (const char *before : {"2026-01-01 12:00", "2026-11-02 12:00", "2026-07-01 12:00"}) {
    INFO(before);
    CHECK(civil("2026-11-01 01:30", "America/New_York", before) == 1793511000);
    CHECK(civil("2026-11-01 01:30", "America/New_York", before, "America/Los_Angeles") ==
          1793511000);
    CHECK(civil("2026-10-25 02:30", "Europe/Berlin", before) == 1792888200);
    CHECK(civil("2026-04-05 01:45", "Australia/Lord_Howe", before) == 1775313900);
  }
  // Around it, times exist once.
  CHECK(civil("2026-11-01 00:59:59", "America/New_York") == 1793509199);
  CHECK(civil("2026-11-01 02:00", "America/New_York") == 1793516400);
  CHECK(civil("2026-10-25 01:59:59", "Europe/Berlin") == 1792886399);
  CHECK(civil("2026-10-25 03:00", "Europe/Berlin") == 1792893600);
  // Both occurrences print with their own offset, so a printed time reads back exactly.
  CHECK(at(1793511000, "America/New_York") == "2026-11-01 01:30:00-04:00");
  CHECK(at(1793514600, "America/New_York") == "2026-11-01 01:30:00-05:00");
  CHECK(t_ok("2026-11-01 01:30:00-05:00", zone::utc()) == 1793514600 * s);
}

TEST_CASE("named zones: instants at DST edges and days that change", "[base]") {
  CHECK(at(1772953199, "America/New_York") == "2026-03-08 01:59:59-05:00");
  CHECK(at(1772953200, "America/New_York") == "2026-03-08 03:00:00-04:00");
  CHECK(at(1793512799, "America/New_York") == "2026-11-01 01:59:59-04:00");
  CHECK(at(1793512800, "America/New_York") == "2026-11-01 01:00:00-05:00");
  CHECK(at(1774745999, "Europe/Berlin") == "2026-03-29 01:59:59+01:00");
  CHECK(at(1774746000, "Europe/Berlin") == "2026-03-29 03:00:00+02:00");
  CHECK(at(1792889999, "Europe/Berlin") == "2026-10-25 02:59:59+02:00");
  CHECK(at(1792890000, "Europe/Berlin") == "2026-10-25 02:00:00+01:00");
  // now = 2026-03-08 12:00 EDT, the day New York's clocks go forward.
  const std::int64_t dst_day = 1772985600 * s;
  const zone ny = named("America/New_York");
  const auto day = [&](const char *in) {
    auto r = parse_time(in, dst_day, ny);
    INFO(in);
    REQUIRE(r.ok());
    return *r / s;
  };
  CHECK(day("today") == 1772946000);     // 00:00 EST
  CHECK(day("yesterday") == 1772859600); // 2026-03-07 00:00 EST
  CHECK(day("today 02:30") == 1772955000);
  CHECK(day("02:30") == 1772955000);
  CHECK(day("yesterday 12:00") == 1772902800);
}

TEST_CASE("named zones: after 2037 the zone's rule continues, before 1900 its LMT", "[base]") {
  // Zone files tabulate transitions up to 2037; the rule at their end carries on.
  CHECK(at(2224929600, "America/New_York") == "2040-07-03 08:00:00-04:00");
  CHECK(civil("2040-07-01 12:00", "America/New_York") == 2224771200);
  CHECK(civil("2040-03-11 02:30", "America/New_York") == 2215063800); // skipped: 03:30 EDT
  CHECK(civil("2040-11-04 00:30", "America/New_York") == 2235616200);
  CHECK(civil("2040-11-04 01:30", "America/New_York", "2040-11-03 12:00") == 2235619800);
  CHECK(at(2368094400, "Australia/Sydney") == "2045-01-15 23:00:00+11:00");
  CHECK(at(2524608000, "Australia/Lord_Howe") == "2050-01-01 11:00:00+11:00");
  CHECK(at(2540246400, "Australia/Lord_Howe") == "2050-07-01 10:30:00+10:30");
  // Nuuk's rule changes at -1:00 local time ("M3.5.0/-1"); Dublin's DST is winter.
  CHECK(at(2224929600, "America/Nuuk") == "2040-07-03 11:00:00-01:00");
  CHECK(at(2210000000, "America/Nuuk") == "2040-01-12 14:53:20-02:00");
  CHECK(civil("2040-03-31 22:30", "America/Nuuk") == 2216849400);
  CHECK(civil("2040-03-31 23:30", "America/Nuuk") == 2216853000);
  CHECK(at(2224929600, "Europe/Dublin") == "2040-07-03 13:00:00+01:00");
  CHECK(at(2210000000, "Europe/Dublin") == "2040-01-12 16:53:20+00:00");
  CHECK(civil("2040-03-25 01:30", "Europe/Dublin") == 2216248200);
  // Up to the end of the 64-bit range.
  CHECK(at(9223372036, "America/New_York") == "2262-04-11 19:47:16-04:00");
  CHECK(at(9200000000, "Europe/Berlin") == "2261-07-15 13:33:20+02:00");
  CHECK(civil("2262-04-11 12:00", "America/New_York") == 9223344000);
  CHECK(civil("2262-01-01 12:00", "Australia/Lord_Howe") == 9214650000);
  // Before the first transition: local mean time.
  CHECK(at(-3786825600, "Europe/Berlin") == "1850-01-01 00:53:28+00:53");
  CHECK(civil("1850-01-01 00:00", "Europe/Berlin") == -3786828808);
  CHECK(at(-9223372036, "America/New_York") == "1677-09-20 19:16:42-04:56");
  CHECK(civil("1700-01-01 00:00", "America/New_York") == -8520318238);
}

TEST_CASE("named zones: links, fractional offsets and unknown names", "[base]") {
  CHECK(at(1795183385, "Asia/Kolkata") == "2026-11-20 19:33:05+05:30");
  CHECK(civil("2026-11-20 19:33:05", "Asia/Kolkata") == 1795183385);
  CHECK(at(1795183385, "Asia/Kathmandu") == "2026-11-20 19:48:05+05:45");
  CHECK(at(1795183385, "Pacific/Chatham") == "2026-11-21 03:48:05+13:45");
  CHECK(at(1782900000, "Pacific/Chatham") == "2026-07-01 22:45:00+12:45");
  CHECK(at(1782900000, "US/Eastern") == "2026-07-01 06:00:00-04:00");
  CHECK(at(1782900000, "Etc/GMT+5") == "2026-07-01 05:00:00-05:00");
  CHECK(at(1782900000, "EST5EDT") == "2026-07-01 06:00:00-04:00");
  CHECK(at(1782900000, "posix/Europe/Berlin") == "2026-07-01 12:00:00+02:00");
  CHECK(named("US/Eastern").label() == "US/Eastern");
  for (const char *bad : {"Mars/Olympus", "../../etc/passwd", "/etc/localtime", "", "Europe",
                          "europe/berlin", "zone.tab", "Europe/Berlin/"}) {
    INFO(bad);
    auto r = zone::parse(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.err().msg == std::string("unknown time zone '") + bad +
                             "' (use UTC, local or an IANA name like Europe/Berlin)");
  }
}

namespace {

// Sets TZ (and tzset()) for one test; restores both after it.
class scoped_tz {
public:
  explicit scoped_tz(const char *value) {
    if (const char *old = std::getenv("TZ"); old != nullptr) {
      saved_ = old;
      had_ = true;
    }
    setenv("TZ", value, 1);
    tzset();
  }
  ~scoped_tz() {
    if (had_) {
      setenv("TZ", saved_.c_str(), 1);
    } else {
      unsetenv("TZ");
    }
    tzset();
  }
  scoped_tz(const scoped_tz &) = delete;
  scoped_tz &operator=(const scoped_tz &) = delete;

private:
  std::string saved_;
  bool had_ = false;
};

} // namespace

TEST_CASE("the local zone is whatever TZ says, POSIX rules included", "[base]") {
  {
    const scoped_tz tz("EST5EDT,M3.2.0,M11.1.0"); // a rule, not a zone file
    CHECK(format_time(1782900000 * s, zone::local()) == "2026-07-01 06:00:00-04:00");
    CHECK(format_time(1795183385 * s, zone::local()) == "2026-11-20 09:03:05-05:00");
    CHECK(t_ok("2026-03-08 02:30", zone::local()) == 1772955000 * s);
    CHECK(t_ok("2026-07-01 06:00", zone::local()) == 1782900000 * s);
  }
  {
    const scoped_tz tz(":Asia/Kolkata");
    CHECK(format_time(1795183385 * s, zone::local()) == "2026-11-20 19:33:05+05:30");
    CHECK(t_ok("2026-11-20 19:33:05", zone::local()) == 1795183385 * s);
  }
}

TEST_CASE("named zones convert from several threads at once", "[base]") {
  // 4 threads x 10,000 conversions (format_time and parse_time, alternately) in four zones,
  // each checked against the answer computed on this thread first. Nothing is shared but the
  // zone database: no lock, no TZ.
  const zone zones[] = {named("America/New_York"), named("Europe/Berlin"), named("Asia/Kolkata"),
                        named("Australia/Lord_Howe")};
  constexpr std::size_t n = 10'000;
  struct job {
    std::size_t zone;
    std::int64_t t; // UTC ns to format
    std::string in; // civil time to parse
  };
  std::vector<job> jobs;
  std::vector<std::string> want_fmt;
  std::vector<std::int64_t> want_parse;
  for (std::size_t i = 0; i < n; ++i) {
    // Every 3 h 17 min 13 s from 2025-12-31 (DST edges come round), plus some in 2040.
    const auto step = static_cast<std::int64_t>(i) * (3 * 3600 + 17 * 60 + 13);
    const std::int64_t t = (i % 10 == 9 ? 2208988800 : 1767139200) + step;
    const zone &z = zones[i % 4];
    std::string in = format_time(t * s, z).substr(0, 19); // its wall clock, offset dropped
    want_fmt.push_back(format_time(t * s, z));
    want_parse.push_back(t_ok(in, z));
    jobs.push_back({i % 4, t * s, std::move(in)});
  }
  std::atomic<std::size_t> wrong{0};
  std::vector<std::thread> threads;
  for (std::size_t k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (std::size_t j = 0; j < n; ++j) {
        const std::size_t i = (j + k * n / 4) % n; // each thread starts elsewhere
        const job &b = jobs[i];
        if (j % 2 == 0) {
          wrong += format_time(b.t, zones[b.zone]) != want_fmt[i] ? 1 : 0;
        } else {
          auto r = parse_time(b.in, now, zones[b.zone]);
          wrong += !r.ok() || *r != want_parse[i] ? 1 : 0;
        }
      }
    });
  }
  for (auto &th : threads) {
    th.join();
  }
  CHECK(wrong == 0);

  // Zones used for the first time by several threads at once (each is loaded once).
  const char *fresh[] = {"America/Sao_Paulo", "Asia/Tehran",      "Pacific/Auckland",
                         "Africa/Cairo",      "America/Santiago", "Europe/Lisbon",
                         "Asia/Jerusalem",    "America/Havana"};
  std::vector<std::vector<std::string>> got(4);
  threads.clear();
  for (std::size_t k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (const char *name : fresh) {
        auto z = zone::parse(name);
        got[k].push_back(z.ok() ? format_time(1782900000 * s, *z) : "parse failed");
      }
    });
  }
  for (auto &th : threads) {
    th.join();
  }
  for (std::size_t i = 0; i < std::size(fresh); ++i) {
    const std::string want = format_time(1782900000 * s, named(fresh[i]));
    for (std::size_t k = 0; k < 4; ++k) {
      CHECK(got[k][i] == want);
    }
  }
}
