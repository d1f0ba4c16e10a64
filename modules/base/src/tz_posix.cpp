// posix_rule over date/ptz.h; compiled as C++17 (see tz_posix.hpp).
#include "tz_posix.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <date/ptz.h>
#include <exception>
#include <optional>
#include <string_view>

namespace rsched::timefmt::detail {
namespace {

// "[+-]h[:mm[:ss]]" (a rule's time of day) in seconds; nullopt when it is not that.
std::optional<std::int64_t> rule_time(std::string_view s) {
  std::int64_t sign = 1;
  if (!s.empty() && (s.front() == '+' || s.front() == '-')) {
    sign = s.front() == '-' ? -1 : 1;
    s.remove_prefix(1);
  }
  std::int64_t total = 0;
  for (int field = 0; field < 3; ++field) {
    std::int64_t v = 0;
    std::size_t n = 0;
    while (n < s.size() && n < 3 && s[n] >= '0' && s[n] <= '9') {
      v = v * 10 + (s[n] - '0');
      ++n;
    }
    if (n == 0) {
      return std::nullopt;
    }
    total = total * 60 + v;
    s.remove_prefix(n);
    if (s.empty()) {
      for (int rest = field; rest < 2; ++rest) {
        total *= 60;
      }
      return sign * total;
    }
    if (s.front() != ':') {
      return std::nullopt;
    }
    s.remove_prefix(1);
  }
  return std::nullopt;
}

// "h:mm:ss" of a number of seconds in [0, 100 h) (ptz.h reads at most two digits of hours).
std::string clock_text(std::int64_t secs) {
  const auto two = [](std::int64_t v) {
    return std::string(1, static_cast<char>('0' + v / 10)) + static_cast<char>('0' + v % 10);
  };
  return std::to_string(secs / 3600) + ":" + two(secs / 60 % 60) + ":" + two(secs % 60);
}

class rule_impl final : public posix_rule {
public:
  rule_impl(const std::string &spec, std::chrono::seconds shift) : tz_(spec), shift_(shift) {}

  [[nodiscard]] date::sys_info info(date::sys_seconds t) const override {
    date::sys_info i = tz_.get_info(t + shift_);
    i.begin -= shift_;
    i.end -= shift_;
    return i;
  }

private:
  Posix::time_zone tz_;
  std::chrono::seconds shift_;
};

} // namespace

std::unique_ptr<const posix_rule> posix_rule::make(const std::string &spec) {
  // The rules follow the first ',' (names and offsets hold none): "start[/time],end[/time]".
  // Without them the offset never changes and the zone file's last period already holds it
  // (ptz.h's constant-offset info would also leave `save` uninitialized).
  const auto c1 = spec.find(',');
  const auto c2 = c1 == std::string::npos ? c1 : spec.find(',', c1 + 1);
  if (c2 == std::string::npos || spec.find(',', c2 + 1) != std::string::npos) {
    return nullptr;
  }
  // ptz.h 3.0.1 reads a rule's time of day unsigned, so "M3.5.0/-1" (America/Nuuk) does not
  // parse. Moving both rules' times by the same amount moves both transitions by it: such a
  // rule is read with its times raised to zero or more and looked up that much later.
  std::string text = spec;
  std::int64_t shift = 0;
  const std::string rules[2] = {spec.substr(c1 + 1, c2 - c1 - 1), spec.substr(c2 + 1)};
  std::string day[2];
  std::optional<std::int64_t> at[2];
  for (std::size_t k = 0; k < 2; ++k) {
    const auto slash = rules[k].find('/');
    day[k] = rules[k].substr(0, slash);
    at[k] = slash == std::string::npos ? std::optional<std::int64_t>(2 * 3600) // POSIX default
                                       : rule_time(std::string_view(rules[k]).substr(slash + 1));
  }
  if (at[0] && at[1] && std::min(*at[0], *at[1]) < 0) {
    shift = -std::min(*at[0], *at[1]);
    if (std::max(*at[0], *at[1]) + shift >= 100 * 3600) {
      return nullptr;
    }
    text = spec.substr(0, c1) + "," + day[0] + "/" + clock_text(*at[0] + shift) + "," + day[1] +
           "/" + clock_text(*at[1] + shift);
  }
  try {
    return std::make_unique<rule_impl>(text, std::chrono::seconds{shift});
  } catch (const std::exception &) {
    return nullptr;
  }
}

} // namespace rsched::timefmt::detail
