#pragma once
// A POSIX TZ rule ("EST5EDT,M3.2.0,M11.1.0"), read and evaluated by H. Hinnant's
// Posix::time_zone (date/ptz.h). timefmt.cpp applies it to the times after a zone file's last
// transition, as libc does with the rule at the end of the file (its "footer"): libdate-tz's
// OS-database reader (3.0.1) stops at the last transition, which zic writes up to 2037.
//
// tz_posix.cpp is compiled as C++17: Debian's ptz.h (date 3.0.1) does not compile as C++20
// (date::hh_mm_ss and std::chrono::hh_mm_ss are both visible in Posix::time_zone::name();
// fixed upstream after 3.0.1, "Port ptz.h to C++20"). Only this interface crosses the boundary.
#include <date/tz.h>
#include <memory>
#include <string>

namespace rsched::timefmt::detail {

class posix_rule {
public:
  // nullptr when `spec` has no DST rules (a fixed offset, or empty) or is not one
  // Posix::time_zone reads.
  static std::unique_ptr<const posix_rule> make(const std::string &spec);

  posix_rule() = default;
  posix_rule(const posix_rule &) = delete;
  posix_rule &operator=(const posix_rule &) = delete;
  virtual ~posix_rule() = default;

  // The offset, DST flag (save != 0) and [begin, end) of the period holding `t`.
  [[nodiscard]] virtual date::sys_info info(date::sys_seconds t) const = 0;
};

} // namespace rsched::timefmt::detail
