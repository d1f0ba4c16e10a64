#pragma once
// Human time input and output for rsched-sql (docs/SQL.md, "Time grammar"). Implemented in
// modules/base/src/timefmt.cpp over libc and H. Hinnant's date/tz (libdate-tz).
//
//  - parse_time(): UTC ns from ISO 8601 (with or without offset, fractional seconds),
//    "YYYY-MM-DD HH:MM[:SS[.frac]]" and "YYYY-MM-DD" in a zone, epoch seconds ("1700000000",
//    "1700000000.25"), "now", "today", "yesterday", "today 14:00", "yesterday 14:00", a bare
//    "HH:MM[:SS]" (today in the zone) and relative times ("2h ago", "1d2h ago", "2 hours ago").
//  - parse_duration(): ns from "90m", "1d2h", "5m30s", "2 hours", "500ms", "250us", "1.5h" or
//    plain seconds ("300", "0.5").
//    Both take the value as written: one space between words is the grammar's, but a space
//    around it, two in a row, a tab, newline or other control byte is an error naming the value
//    (as rsched::units for the command line's durations and sizes), never trimmed away.
//  - format_time(): "2026-11-20 14:03:05.123+01:00": milliseconds (truncated) are shown only
//    when they are not zero, the offset always.
//
// Zones: UTC, the process's local zone (TZ, else /etc/localtime) or a named IANA zone
// ("Europe/Berlin"). Every function is thread-safe: nothing here sets TZ, and no lock is held
// while converting (a zone is loaded once, on first use, under std::call_once).
//  - Named zones go through date/tz: Debian's libdate-tz reads /usr/share/zoneinfo
//    (USE_OS_TZDB; $TZDIR is not read), each zone file once, and its zones are immutable once
//    loaded. After a file's last transition (2037 in Debian's files) the POSIX TZ rule at its
//    end applies, as libc applies it.
//  - The local zone stays libc's (localtime_r, mktime): TZ may hold a POSIX rule
//    ("EST5EDT,M3.2.0,M11.1.0") or a path, and /etc/localtime may be a copy, none of which
//    date/tz's current_zone() reads.
// Civil times in a named zone that do not exist (skipped when the clocks go forward) move by
// the change: read with the offset before it, so 02:30 becomes 03:30 on a 1-hour change, as
// glibc's mktime does (where the zone's DST is its winter time, e.g. Europe/Dublin, mktime and
// this go back instead: to the DST side). Times that exist twice (the repeated hour) are the
// first occurrence. In the local zone both are mktime's choice; for a repeated hour that choice
// depends on mktime's previous call.
#include "rsched/base/result.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rsched::timefmt {

struct zone {
  enum class kind { utc, local, named };
  kind k = kind::local;
  std::string name; // IANA name for kind::named

  static zone utc() { return zone{kind::utc, {}}; }
  static zone local() { return zone{kind::local, {}}; }
  // "UTC"/"Z"/"GMT" (any case), "local", or an IANA zone name libdate-tz knows (a zone file
  // under /usr/share/zoneinfo; also "posix/<name>", but not right/, posixrules or Factory).
  static result<zone> parse(std::string_view s);
  // "UTC", "local" or the IANA name.
  [[nodiscard]] std::string label() const;
  friend bool operator==(const zone &, const zone &) = default;
};

inline constexpr std::int64_t ns_per_s = 1'000'000'000;

// Why a time is refused when it does not fit in 64-bit ns since the epoch.
inline constexpr const char *out_of_range =
    "out of range (times are 64-bit ns since 1970: 1677-09-21 00:12:43 .. 2262-04-11 23:47:16 "
    "UTC)";

namespace detail {

// a + b and a - b, nullopt on overflow.
inline std::optional<std::int64_t> checked_add(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) {
    return std::nullopt;
  }
  return r;
}
inline std::optional<std::int64_t> checked_sub(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) {
    return std::nullopt;
  }
  return r;
}

} // namespace detail

// Duration in ns: a sequence of <number><unit> (one space allowed between them; number may be
// fractional) or a plain number of seconds. Units: ns, us/µs, ms, s/sec/second(s),
// m/min/minute(s), h/hr/hour(s), d/day(s), w/week(s).
result<std::int64_t> parse_duration(std::string_view in);

// A time in UTC ns. `now_ns` anchors now/today/yesterday/relative forms; `z` is the zone of
// times written without an offset.
result<std::int64_t> parse_time(std::string_view in, std::int64_t now_ns, const zone &z);

// "YYYY-MM-DD HH:MM:SS[.mmm]+HH:MM" in `z` (milliseconds truncated, shown when not zero).
std::string format_time(std::int64_t utc_ns, const zone &z);

// CLOCK_REALTIME in ns.
std::int64_t realtime_now_ns();

} // namespace rsched::timefmt
