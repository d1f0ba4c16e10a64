// Implementation of rsched/base/timefmt.hpp. Named zones go through H. Hinnant's date/tz
// (libdate-tz, the zone files of /usr/share/zoneinfo) and, after a file's last transition, its
// POSIX TZ rule through date/ptz.h (tz_posix.hpp); the local zone through libc (localtime_r,
// mktime). Date arithmetic is H. Hinnant's days_from_civil / civil_from_days.
#include "rsched/base/timefmt.hpp"

#include "rsched/base/text.hpp"

#include "tz_posix.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <date/tz.h>
#include <exception>
#include <memory>
#include <mutex>

namespace rsched::timefmt {

namespace detail {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto &c : out) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())) != 0) {
    s.remove_prefix(1);
  }
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())) != 0) {
    s.remove_suffix(1);
  }
  return s;
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// Times and durations are taken as written, as rsched::units takes the command line's durations
// and sizes: no space around the value, no run of spaces in it, no tab, newline or other control
// byte anywhere ('  5m', '5m\t', "2026-11-20\n14:03" are refused, not trimmed). One space between
// words ("2 hours", "1h 30m", "2026-11-20 14:03", "5m ago") is the grammar's.
bool clean(std::string_view v) {
  if (!v.empty() && (v.front() == ' ' || v.back() == ' ')) {
    return false;
  }
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto c = static_cast<unsigned char>(v[i]);
    if (c < 0x20 || c == 0x7F || (c == ' ' && i + 1 < v.size() && v[i + 1] == ' ')) {
      return false;
    }
  }
  return true;
}

constexpr const char *unclean =
    "a space, tab, newline or control character around or in it (write just the value)";

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
constexpr std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) {
  y -= m <= 2 ? 1 : 0;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

struct civil {
  std::int64_t y = 1970;
  unsigned m = 1, d = 1;
};

constexpr civil civil_from_days(std::int64_t z) {
  z += 719468;
  const std::int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const auto doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const std::int64_t y = static_cast<std::int64_t>(yoe) + era * 400;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  const unsigned d = doy - (153 * mp + 2) / 5 + 1;
  const unsigned m = mp < 10 ? mp + 3 : mp - 9;
  return {m <= 2 ? y + 1 : y, m, d};
}

constexpr std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  return a / b - ((a % b != 0 && ((a < 0) != (b < 0))) ? 1 : 0);
}

// UTC ns of `secs` seconds plus `frac` ns (0 <= frac < 1 s) since the epoch, or nullopt when
// that is outside what a signed 64-bit count of ns holds (1677-09-21T00:12:43.145224192Z ..
// 2262-04-11T23:47:16.854775807Z).
std::optional<std::int64_t> checked_ns(std::int64_t secs, std::int64_t frac) {
  if (secs < 0 && frac > 0) { // keep the product in range where the sum still is
    secs += 1;
    frac -= ns_per_s;
  }
  std::int64_t ns = 0;
  if (__builtin_mul_overflow(secs, ns_per_s, &ns) || __builtin_add_overflow(ns, frac, &ns)) {
    return std::nullopt;
  }
  return ns;
}

// A named zone: libdate-tz's zone (the tabulated transitions of its zoneinfo file) and the
// POSIX TZ rule at the end of that file, which libc applies from the last transition on (zic
// tabulates up to 2037; a "slim" file stops at the rule's start). Immutable once loaded.
struct named_zone {
  const date::time_zone *tz = nullptr;
  std::unique_ptr<const posix_rule> rule; // null when the file has none (or ptz.h cannot read it)
  date::sys_seconds rule_from{};          // the last tabulated transition
};

// The zoneinfo directory libdate-tz reads on Linux (USE_OS_TZDB: its discover_tz_dir()).
constexpr const char *zoneinfo_dir = "/usr/share/zoneinfo";

// The TZ string on the last line of a version 2+ TZif file, "" when there is none.
std::string tzif_footer(const std::string &path) {
  std::string data;
  if (std::FILE *f = std::fopen(path.c_str(), "rbe"); f != nullptr) {
    char buf[4096];
    for (std::size_t n = 0; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) {
      data.append(buf, n);
    }
    std::fclose(f);
  }
  if (data.size() < 6 || data.compare(0, 4, "TZif") != 0 || data[4] < '2' || data.back() != '\n') {
    return {};
  }
  const auto nl = data.rfind('\n', data.size() - 2); // the footer holds no newline
  return nl == std::string::npos ? std::string() : data.substr(nl + 1, data.size() - nl - 2);
}

named_zone load_zone(const date::time_zone *tz) {
  named_zone z;
  z.tz = tz;
  // The period after the last transition ends at year::max(); it begins at that transition.
  z.rule_from = tz->get_info(date::sys_days(date::year::max() / date::January / 1)).begin;
  z.rule = posix_rule::make(tzif_footer(std::string(zoneinfo_dir) + "/" + tz->name()));
  return z;
}

// Every zone of libdate-tz's database, each loaded on first use (std::call_once): lock-free
// once loaded, and never changed after, so threads share them freely.
class zone_table {
public:
  zone_table() : db_(date::get_tzdb()), zones_(std::make_unique<slot[]>(db_.zones.size())) {}

  // Throws (std::runtime_error) when `name` is not in the database.
  const named_zone &find(std::string_view name) {
    // date::locate_zone searches db_ (the member tzdb::locate_zone is not exported).
    const date::time_zone *tz = date::locate_zone(name);
    slot &s = zones_[static_cast<std::size_t>(tz - db_.zones.data())];
    std::call_once(s.once, [&] { s.zone = load_zone(tz); });
    return s.zone;
  }

private:
  struct slot {
    std::once_flag once;
    named_zone zone;
  };
  const date::tzdb &db_;
  std::unique_ptr<slot[]> zones_;
};

// Debian's posix/ directory repeats the zones under their own names; libdate-tz skips it.
std::string_view db_name(std::string_view name) {
  constexpr std::string_view posix = "posix/";
  return name.substr(0, posix.size()) == posix ? name.substr(posix.size()) : name;
}

// The zone `name`, nullptr when libdate-tz does not know it (or has no database).
const named_zone *find_zone(std::string_view name) {
  try {
    static zone_table table;
    return &table.find(db_name(name));
  } catch (const std::exception &) {
    return nullptr;
  }
}

// The period of `z` holding the UTC second `t`: the tabulated one up to the last transition,
// the footer's after it.
date::sys_info info_at(const named_zone &z, date::sys_seconds t) {
  if (z.rule && t >= z.rule_from) {
    date::sys_info i = z.rule->info(t);
    i.begin = std::max(i.begin, z.rule_from);
    return i;
  }
  date::sys_info i = z.tz->get_info(t);
  if (z.rule) {
    i.end = std::min(i.end, z.rule_from);
  }
  return i;
}

// The UTC second whose wall clock in `z` reads `local` (seconds since 1970-01-01 00:00 on that
// clock), resolved as glibc's mktime (tm_isdst = -1) resolves it where that does not depend on
// the calls before:
//  - a time that exists once: that time;
//  - a time that exists twice (the hour repeated when the clocks go back): the earlier instant
//    (mktime took the offset of its previous call's result, of any zone, when it was one of the
//    two; this is what it gives after a call before the change);
//  - a time skipped when the clocks go forward: the instant whose period is DST is taken, read
//    with the other side's offset: normally the offset before the change, so 02:30 on the day
//    New York moves from 02:00 to 03:00 is 03:30 EDT; in Europe/Dublin, whose winter time is
//    the DST one, 01:30 on the spring day is 00:30 GMT. When neither or both sides are DST (a
//    change of standard offset), the offset before the change (mktime: either, by history).
std::int64_t resolve_local(const named_zone &z, std::int64_t local) {
  using date::sys_seconds;
  using std::chrono::seconds;
  // Every instant that reads `local` is within a day and two hours of it: |offset| < 26 h.
  constexpr std::int64_t reach = 26 * 3600;
  std::optional<std::int64_t> gap;
  std::optional<date::sys_info> prev;
  date::sys_info i = info_at(z, sys_seconds{seconds{local - reach}});
  for (int guard = 0; guard < 64; ++guard) {
    const std::int64_t c = local - i.offset.count();
    if (i.begin.time_since_epoch().count() <= c && c < i.end.time_since_epoch().count()) {
      return c; // periods come in time order, so the first match is the earliest
    }
    // A gap at prev.end: prev's reading lies after its end, this one's before its begin.
    if (prev && !gap && local - prev->offset.count() >= prev->end.time_since_epoch().count() &&
        c < i.begin.time_since_epoch().count()) {
      const bool dst_before = prev->save != std::chrono::minutes{0};
      const bool dst_after = i.save != std::chrono::minutes{0};
      gap = dst_before && !dst_after ? c : local - prev->offset.count();
    }
    if (i.end.time_since_epoch().count() > local + reach) {
      break;
    }
    prev = i;
    i = info_at(z, i.end);
  }
  if (gap) {
    return *gap;
  }
  // Not reached for a consistent zone; the offset at `local` read as UTC.
  return local - info_at(z, sys_seconds{seconds{local}}).offset.count();
}

// UTC offset in seconds of `z` at the UTC second `t`. The local zone is libc's (TZ, else
// /etc/localtime): localtime_r is thread-safe and nothing here changes TZ.
std::int64_t offset_at(std::int64_t t, const zone &z) {
  if (z.k == zone::kind::utc) {
    return 0;
  }
  if (z.k == zone::kind::named) {
    const named_zone *nz = find_zone(z.name);
    if (nz == nullptr) {
      return 0; // libc read an unknown TZ as UTC too
    }
    return info_at(*nz, date::sys_seconds{std::chrono::seconds{t}}).offset.count();
  }
  const auto tt = static_cast<std::time_t>(t);
  std::tm tm{};
  if (localtime_r(&tt, &tm) == nullptr) {
    return 0;
  }
  return static_cast<std::int64_t>(tm.tm_gmtoff);
}

// UTC second of the civil time (y-m-d h:mi:s) in `z`.
result<std::int64_t> to_utc(std::int64_t y, unsigned mo, unsigned d, unsigned h, unsigned mi,
                            unsigned s, const zone &z) {
  const std::int64_t local = days_from_civil(y, mo, d) * 86400 + std::int64_t{h} * 3600 +
                             std::int64_t{mi} * 60 + std::int64_t{s};
  if (z.k == zone::kind::utc) {
    return local;
  }
  if (z.k == zone::kind::named) {
    const named_zone *nz = find_zone(z.name);
    return nz != nullptr ? resolve_local(*nz, local) : local;
  }
  std::tm tm{};
  tm.tm_year = static_cast<int>(y - 1900);
  tm.tm_mon = static_cast<int>(mo) - 1;
  tm.tm_mday = static_cast<int>(d);
  tm.tm_hour = static_cast<int>(h);
  tm.tm_min = static_cast<int>(mi);
  tm.tm_sec = static_cast<int>(s);
  tm.tm_isdst = -1;
  const std::time_t t = std::mktime(&tm);
  if (t == static_cast<std::time_t>(-1) && !(y == 1969 && mo == 12 && d == 31)) {
    return make_error("time is out of range");
  }
  return static_cast<std::int64_t>(t);
}

// Reads exactly `n` digits at `pos`.
bool digits(std::string_view s, std::size_t &pos, std::size_t n, unsigned &out) {
  if (pos + n > s.size()) {
    return false;
  }
  unsigned v = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!is_digit(s[pos + i])) {
      return false;
    }
    v = v * 10 + static_cast<unsigned>(s[pos + i] - '0');
  }
  pos += n;
  out = v;
  return true;
}

// ".fff..." at pos (optional): ns part (up to 9 digits, more are truncated).
bool fraction(std::string_view s, std::size_t &pos, std::int64_t &ns) {
  ns = 0;
  if (pos >= s.size() || (s[pos] != '.' && s[pos] != ',')) {
    return true;
  }
  ++pos;
  std::size_t n = 0;
  std::int64_t scale = 100'000'000;
  while (pos < s.size() && is_digit(s[pos])) {
    if (n < 9) {
      ns += (s[pos] - '0') * scale;
      scale /= 10;
    }
    ++pos;
    ++n;
  }
  return n > 0;
}

// "HH:MM[:SS[.frac]]" from pos.
bool clock_time(std::string_view s, std::size_t &pos, unsigned &h, unsigned &mi, unsigned &sec,
                std::int64_t &frac) {
  sec = 0;
  frac = 0;
  std::size_t p = pos;
  if (!digits(s, p, 2, h)) {
    p = pos;
    if (!digits(s, p, 1, h)) {
      return false;
    }
  }
  if (p >= s.size() || s[p] != ':' || (++p, !digits(s, p, 2, mi))) {
    return false;
  }
  if (p < s.size() && s[p] == ':') {
    ++p;
    if (!digits(s, p, 2, sec) || !fraction(s, p, frac)) {
      return false;
    }
  }
  if (h > 23 || mi > 59 || sec > 60) {
    return false;
  }
  pos = p;
  return true;
}

unsigned days_in_month(std::int64_t y, unsigned m) {
  static constexpr unsigned days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : days[m - 1];
}

// The civil date of `utc_s` in `z`.
civil date_in(std::int64_t utc_s, const zone &z) {
  return civil_from_days(floor_div(utc_s + offset_at(utc_s, z), 86400));
}

} // namespace
} // namespace detail

std::string zone::label() const {
  return k == kind::utc ? "UTC" : k == kind::local ? "local" : name;
}

result<zone> zone::parse(std::string_view s) {
  s = detail::trim(s);
  const std::string l = detail::lower(s);
  if (l == "utc" || l == "z" || l == "gmt" || l == "etc/utc") {
    return zone::utc();
  }
  if (l == "local") {
    return zone::local();
  }
  bool ok = !s.empty() && s.front() != '/' && s.find("..") == std::string_view::npos;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    ok = ok && (std::isalnum(u) != 0 || c == '/' || c == '_' || c == '-' || c == '+');
  }
  ok = ok && detail::find_zone(s) != nullptr;
  if (!ok) {
    return make_error("unknown time zone '" + std::string(s) +
                      "' (use UTC, local or an IANA name like Europe/Berlin)");
  }
  return zone{zone::kind::named, std::string(s)};
}

// Duration in ns: a sequence of <number><unit> (one space allowed between them; number may be
// fractional) or a plain number of seconds. Units: ns, us/µs, ms, s/sec/second(s), m/min/minute(s),
// h/hr/hour(s), d/day(s), w/week(s).
result<std::int64_t> parse_duration(std::string_view in) {
  const auto fail = [&](const char *why) {
    return make_error("invalid duration '" + text::escape_for_terminal(in) + "': " + why);
  };
  if (!detail::clean(in)) {
    return fail(detail::unclean);
  }
  const std::string s = detail::lower(in);
  if (s.empty()) {
    return fail("empty");
  }
  long double total = 0;
  std::size_t pos = 0;
  bool any = false;
  while (pos < s.size()) {
    while (pos < s.size() && s[pos] == ' ') {
      ++pos;
    }
    if (pos >= s.size()) {
      break;
    }
    const std::size_t num_start = pos;
    while (pos < s.size() && (detail::is_digit(s[pos]) || s[pos] == '.')) {
      ++pos;
    }
    if (pos == num_start) {
      return fail("expected a number");
    }
    const std::string num = s.substr(num_start, pos - num_start);
    if (num == "." || num.find('.') != num.rfind('.')) {
      return fail("bad number");
    }
    const long double v = std::strtold(num.c_str(), nullptr);
    while (pos < s.size() && s[pos] == ' ') {
      ++pos;
    }
    const std::size_t unit_start = pos;
    while (pos < s.size() && !detail::is_digit(s[pos]) && s[pos] != ' ' && s[pos] != '.') {
      ++pos;
    }
    const std::string unit = s.substr(unit_start, pos - unit_start);
    long double mult = 0;
    if (unit.empty()) {
      if (any || pos < s.size()) {
        return fail("a number without a unit");
      }
      mult = 1e9L;
    } else if (unit == "ns" || unit == "nsec") {
      mult = 1;
    } else if (unit == "us" || unit == "usec" || unit == "\xc2\xb5s") {
      mult = 1e3L;
    } else if (unit == "ms" || unit == "msec") {
      mult = 1e6L;
    } else if (unit == "s" || unit == "sec" || unit == "secs" || unit == "second" ||
               unit == "seconds") {
      mult = 1e9L;
    } else if (unit == "m" || unit == "min" || unit == "mins" || unit == "minute" ||
               unit == "minutes") {
      mult = 60e9L;
    } else if (unit == "h" || unit == "hr" || unit == "hrs" || unit == "hour" || unit == "hours") {
      mult = 3600e9L;
    } else if (unit == "d" || unit == "day" || unit == "days") {
      mult = 86400e9L;
    } else if (unit == "w" || unit == "week" || unit == "weeks") {
      mult = 604800e9L;
    } else {
      return fail(("unknown unit '" + unit + "'").c_str());
    }
    total += v * mult;
    any = true;
  }
  if (!any) {
    return fail("empty");
  }
  // Rounded to ns; 2^63 ns (about 292 years) and more does not fit in 64 bits.
  const long double rounded = std::floor(total + 0.5L);
  if (!(rounded < 0x1p63L)) {
    return fail("too large (at most 106751 days)");
  }
  return static_cast<std::int64_t>(rounded);
}

// A time in UTC ns. `now_ns` anchors now/today/yesterday/relative forms; `z` is the zone of
// times written without an offset.
namespace {

// The UTC offset that ends a time from `p` of `l` (lower case): Z, +HH[:MM], -HH[:MM] or UTC,
// in seconds east of UTC, or none; nullopt when the rest is one of those (or empty), else why
// not.
std::optional<std::string> utc_offset(const std::string &l, std::size_t &p,
                                      std::optional<std::int64_t> &offset) {
  using namespace detail;
  if (p >= l.size()) {
    return std::nullopt;
  }
  if (l[p] == 'z' && p + 1 == l.size()) {
    offset = 0;
    ++p;
  } else if (l[p] == '+' || l[p] == '-') {
    const std::int64_t sign = l[p] == '-' ? -1 : 1;
    ++p;
    unsigned oh = 0, om = 0;
    if (!digits(l, p, 2, oh)) {
      return "bad UTC offset";
    }
    if (p < l.size() && l[p] == ':') {
      ++p;
    }
    if (p < l.size() && !digits(l, p, 2, om)) {
      return "bad UTC offset";
    }
    if (oh > 23 || om > 59) {
      return "bad UTC offset";
    }
    offset = sign * (std::int64_t{oh} * 3600 + std::int64_t{om} * 60);
  } else if (l.compare(p, std::string::npos, "utc") == 0) {
    offset = 0;
    p = l.size();
  }
  if (p != l.size()) {
    return "unexpected text after the time";
  }
  return std::nullopt;
}

} // namespace

result<std::int64_t> parse_time(std::string_view in, std::int64_t now_ns, const zone &z) {
  using namespace detail;
  const auto fail = [&](const std::string &why) {
    return make_error("invalid time '" + text::escape_for_terminal(in) + "': " + why);
  };
  if (!clean(in)) {
    return fail(unclean);
  }
  const std::string l = lower(in);
  if (l.empty()) {
    return fail("empty");
  }
  if (l == "now") {
    return now_ns;
  }
  // Relative: "<duration> ago".
  if (l.size() > 4 && l.compare(l.size() - 4, 4, " ago") == 0) {
    auto d = parse_duration(std::string_view(l).substr(0, l.size() - 4));
    if (!d) {
      return fail(d.err().msg);
    }
    const auto t = checked_sub(now_ns, *d);
    if (!t) {
      return fail(out_of_range);
    }
    return *t;
  }
  const std::int64_t now_s = floor_div(now_ns, ns_per_s);
  // today / yesterday [HH:MM[:SS]], bare HH:MM[:SS].
  auto day_time = [&](int days_back, std::string_view rest) -> result<std::int64_t> {
    const civil today = date_in(now_s, z);
    const civil day = civil_from_days(days_from_civil(today.y, today.m, today.d) - days_back);
    unsigned h = 0, mi = 0, sec = 0;
    std::int64_t frac = 0;
    rest = trim(rest);
    if (!rest.empty()) {
      std::size_t p = 0;
      if (!clock_time(rest, p, h, mi, sec, frac) || p != rest.size()) {
        return fail("expected HH:MM[:SS] after the day");
      }
    }
    auto t = to_utc(day.y, day.m, day.d, h, mi, sec, z);
    if (!t) {
      return fail(t.err().msg);
    }
    const auto ns = checked_ns(*t, frac);
    if (!ns) {
      return fail(out_of_range);
    }
    return *ns;
  };
  if (l.rfind("today", 0) == 0) {
    return day_time(0, std::string_view(l).substr(5));
  }
  if (l.rfind("yesterday", 0) == 0) {
    return day_time(1, std::string_view(l).substr(9));
  }
  // Epoch seconds.
  {
    std::size_t p = 0;
    while (p < l.size() && is_digit(l[p])) {
      ++p;
    }
    if (p > 0 && p <= 12) {
      std::size_t q = p;
      std::int64_t frac = 0;
      if (fraction(l, q, frac) && q == l.size() && l.find(':') == std::string::npos) {
        const std::int64_t secs = std::strtoll(l.substr(0, p).c_str(), nullptr, 10);
        const auto ns = checked_ns(secs, frac);
        if (!ns) {
          return fail(out_of_range);
        }
        return *ns;
      }
    }
  }
  // Bare HH:MM[:SS].
  if (l.find(':') != std::string::npos && l.find('-') == std::string::npos) {
    return day_time(0, l);
  }
  // Date [time] [offset].
  std::size_t p = 0;
  unsigned y = 0, mo = 0, d = 0;
  if (!digits(l, p, 4, y) || p >= l.size() || l[p] != '-' || (++p, !digits(l, p, 2, mo)) ||
      p >= l.size() || l[p] != '-' || (++p, !digits(l, p, 2, d))) {
    return fail("expected YYYY-MM-DD[ HH:MM[:SS]], ISO 8601, epoch seconds, now, today, "
                "yesterday [HH:MM], HH:MM or '<duration> ago'");
  }
  if (mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo)) {
    return fail("no such date");
  }
  unsigned h = 0, mi = 0, sec = 0;
  std::int64_t frac = 0;
  if (p < l.size()) {
    if (l[p] != 't' && l[p] != ' ') {
      return fail("expected 'T' or a space after the date");
    }
    ++p;
    while (p < l.size() && l[p] == ' ') {
      ++p;
    }
    if (!clock_time(l, p, h, mi, sec, frac)) {
      return fail("expected HH:MM[:SS[.fraction]] after the date");
    }
  }
  while (p < l.size() && l[p] == ' ') {
    ++p;
  }
  std::optional<std::int64_t> offset;
  if (auto why = utc_offset(l, p, offset)) {
    return fail(*why);
  }
  std::int64_t secs = 0;
  if (offset) {
    secs = days_from_civil(y, mo, d) * 86400 + std::int64_t{h} * 3600 + std::int64_t{mi} * 60 +
           std::int64_t{sec} - *offset;
  } else {
    auto t = to_utc(y, mo, d, h, mi, sec, z);
    if (!t) {
      return fail(t.err().msg);
    }
    secs = *t;
  }
  const auto ns = checked_ns(secs, frac);
  if (!ns) {
    return fail(out_of_range);
  }
  return *ns;
}

// "YYYY-MM-DD HH:MM:SS[.mmm]+HH:MM" in `z` (milliseconds truncated, shown when not zero).
std::string format_time(std::int64_t utc_ns, const zone &z) {
  using namespace detail;
  const std::int64_t secs = floor_div(utc_ns, ns_per_s);
  // Not utc_ns - secs * ns_per_s: in the first second of the range (1677-09-21 00:12:43.145..)
  // secs * ns_per_s is below INT64_MIN.
  std::int64_t sub = utc_ns % ns_per_s;
  if (sub < 0) {
    sub += ns_per_s;
  }
  const std::int64_t off = offset_at(secs, z);
  const std::int64_t local = secs + off;
  const std::int64_t days = floor_div(local, 86400);
  const std::int64_t tod = local - days * 86400;
  const civil c = civil_from_days(days);
  const std::int64_t aoff = off < 0 ? -off : off;
  char buf[64];
  const long long ms = static_cast<long long>(sub / 1'000'000);
  int n = 0;
  if (ms != 0) {
    n = std::snprintf(buf, sizeof buf,
                      "%04lld-%02u-%02u %02lld:%02lld:%02lld.%03lld%c%02lld:%02lld",
                      static_cast<long long>(c.y), c.m, c.d, static_cast<long long>(tod / 3600),
                      static_cast<long long>(tod / 60 % 60), static_cast<long long>(tod % 60), ms,
                      off < 0 ? '-' : '+', static_cast<long long>(aoff / 3600),
                      static_cast<long long>(aoff / 60 % 60));
  } else {
    n = std::snprintf(buf, sizeof buf, "%04lld-%02u-%02u %02lld:%02lld:%02lld%c%02lld:%02lld",
                      static_cast<long long>(c.y), c.m, c.d, static_cast<long long>(tod / 3600),
                      static_cast<long long>(tod / 60 % 60), static_cast<long long>(tod % 60),
                      off < 0 ? '-' : '+', static_cast<long long>(aoff / 3600),
                      static_cast<long long>(aoff / 60 % 60));
  }
  return std::string(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
}

// CLOCK_REALTIME in ns.
std::int64_t realtime_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return std::int64_t{ts.tv_sec} * ns_per_s + std::int64_t{ts.tv_nsec};
}

} // namespace rsched::timefmt
