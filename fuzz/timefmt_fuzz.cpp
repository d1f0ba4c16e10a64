// libFuzzer target: the time grammar (rsched::timefmt::parse_time, parse_duration) in UTC, the
// local zone and a named zone, with a fixed "now"; and format_time, whose output parse_time must
// read back as the same time (to the millisecond it prints).
#include "rsched/base/timefmt.hpp"

#include "fuzz_check.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>

namespace {

using namespace rsched::timefmt;

constexpr std::int64_t fixed_now_ns = 1'795'183'380'000'000'000; // 2026-11-20 14:03Z
constexpr std::int64_t ns_per_ms = 1'000'000;

const zone &berlin() {
  static const zone z = [] {
    auto r = zone::parse("Europe/Berlin");
    if (!r) {
      std::fprintf(stderr, "timefmt_fuzz: %s (install tzdata)\n", r.err().msg.c_str());
      std::abort();
    }
    return *r;
  }();
  return z;
}

// t as format_time prints it (milliseconds truncated toward the past), or nullopt when that is
// before the first representable time.
std::optional<std::int64_t> shown(std::int64_t t) {
  std::int64_t ms = t % ns_per_ms;
  if (ms < 0) {
    ms += ns_per_ms;
  }
  return detail::checked_sub(t, ms);
}

void round_trip(std::int64_t t, const zone &z) {
  const std::string text = format_time(t, z);
  RSCHED_FUZZ_CHECK(!text.empty());
  auto back = parse_time(text, fixed_now_ns, z);
  const auto want = shown(t);
  if (!want) {
    return;
  }
  RSCHED_FUZZ_CHECK(back.ok());
  if (z.k == zone::kind::utc) {
    RSCHED_FUZZ_CHECK(back.value() == *want);
  } else {
    // The offset is printed to the minute: a local mean time offset (+00:53:28 in Berlin before
    // 1893) loses its seconds.
    const std::int64_t d = back.value() > *want ? back.value() - *want : *want - back.value();
    RSCHED_FUZZ_CHECK(d < 60 * ns_per_s);
  }
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int * /*argc*/, char *** /*argv*/) {
  // The local zone (libc's, from TZ) is Berlin too, set once before any conversion; the named
  // zone is read by date/tz and never touches TZ.
  setenv("TZ", ":Europe/Berlin", 1);
  (void)berlin();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char *>(data), size);
  if (auto d = parse_duration(in); d) {
    RSCHED_FUZZ_CHECK(*d >= 0);
  }
  for (const zone &z : {zone::utc(), zone::local(), berlin()}) {
    if (auto t = parse_time(in, fixed_now_ns, z); t) {
      round_trip(*t, z);
    }
  }
  // The first 8 bytes as a time: format_time over all of int64.
  if (size >= sizeof(std::int64_t)) {
    std::int64_t t = 0;
    std::memcpy(&t, data, sizeof t);
    round_trip(t, zone::utc());
    round_trip(t, berlin());
  }
  return 0;
}
