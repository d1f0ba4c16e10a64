// Formatting of text.hpp that is not inline.
#include "rsched/base/text.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>

namespace rsched::text {

std::string format_duration_ns(double ns) {
  const char *sign = ns < 0 ? "-" : "";
  double a = std::fabs(ns);
  static constexpr const char *units[] = {"ns", "\xc2\xb5s", "ms", "s"};
  std::size_t u = 0;
  while (u < 3 && a >= 999.5) { // 999.5 ns rounds to 1.00 µs, not 1000 ns
    a /= 1000.0;
    ++u;
  }
  char buf[64];
  if (u == 0 && a == std::floor(a)) {
    std::snprintf(buf, sizeof(buf), "%s%lld ns", sign, static_cast<long long>(a));
    return buf;
  }
  int decimals = 0;
  if (a < 9.995) {
    decimals = 2;
  } else if (a < 99.95) {
    decimals = 1;
  }
  std::snprintf(buf, sizeof(buf), "%s%.*f %s", sign, decimals, a, units[u]);
  return buf;
}

} // namespace rsched::text
