#pragma once
// Human time input and output for rsched-sql (docs/SQL.md, "Time grammar"). Implemented in
// modules/base/src/timefmt.cpp over libc only.
//
//  - parse_time(): UTC ns from ISO 8601 (with or without offset, fractional seconds),
//    "YYYY-MM-DD HH:MM[:SS[.frac]]" and "YYYY-MM-DD" in a zone, epoch seconds ("1700000000",
//    "1700000000.25"), "now", "today", "yesterday", "today 14:00", "yesterday 14:00", a bare
//    "HH:MM[:SS]" (today in the zone) and relative times ("2h ago", "1d2h ago", "2 hours ago").
//  - parse_duration(): ns from "90m", "1d2h", "5m30s", "2 hours", "500ms", "250us", "1.5h" or
//    plain seconds ("300", "0.5").
//  - format_time(): "2026-11-20 14:03:05.123+01:00": milliseconds (truncated) are shown only
//    when they are not zero, the offset always.
//
// Zones: UTC, the process's local zone (TZ, else /etc/localtime) or a named IANA zone
// ("Europe/Berlin", validated against the zoneinfo directory). Local and named zones go through
// libc (localtime_r / mktime); a named zone temporarily sets TZ under a process-wide mutex and
// restores it afterwards. Code that calls localtime() concurrently from another thread without
// that mutex may observe the temporary TZ; rsched itself converts times only through here.
// Civil times that do not exist (the hour skipped at a DST change) are resolved by mktime
// (moved forward by the DST offset); ambiguous ones (the repeated hour) take mktime's choice.
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
  // "UTC"/"Z"/"GMT" (any case), "local", or an IANA zone name that exists under the zoneinfo
  // directory ($TZDIR, else /usr/share/zoneinfo).
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

// Duration in ns: a sequence of <number><unit> (spaces allowed; number may be fractional) or a
// plain number of seconds. Units: ns, us/µs, ms, s/sec/second(s), m/min/minute(s), h/hr/hour(s),
// d/day(s), w/week(s).
result<std::int64_t> parse_duration(std::string_view in);

// A time in UTC ns. `now_ns` anchors now/today/yesterday/relative forms; `z` is the zone of
// times written without an offset.
result<std::int64_t> parse_time(std::string_view in, std::int64_t now_ns, const zone &z);

// "YYYY-MM-DD HH:MM:SS[.mmm]+HH:MM" in `z` (milliseconds truncated, shown when not zero).
std::string format_time(std::int64_t utc_ns, const zone &z);

// CLOCK_REALTIME in ns.
std::int64_t realtime_now_ns();

} // namespace rsched::timefmt
