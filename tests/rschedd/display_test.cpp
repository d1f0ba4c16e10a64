#include "display.hpp"

#include <catch2/catch.hpp>

using namespace rsched;

TEST_CASE("pid list format", "[rschedd]") {
  CHECK(display::pid_list({1}) == "1");
  CHECK(display::pid_list({3, 1, 2}) == "1,2,3");
  CHECK(display::pid_list({1, 2, 3, 4, 5}) == "1,2,3,...(+2)");
}

TEST_CASE("scheduling delay table groups by p90 and escapes comms", "[rschedd]") {
  display::delay_table t;
  stats::histogram fast{stats::layout::latency, {}};
  fast.add(5'000, 100); // 5 us
  stats::histogram slow{stats::layout::latency, {}};
  slow.add(20'000'000, 10); // 20 ms
  t.add("fast", 1, fast);
  t.add("evil\x1b[2Jname", 2, slow);
  t.add("evil\x1b[2Jname", 3, slow);
  const std::string out = display::render_delay_table(t);
  CHECK(out.find("=== Collapsed Scheduling Delays (microseconds) ===") == 0);
  CHECK(out.find("Very Low (<10μs) (1 entries):") != std::string::npos);
  CHECK(out.find("Very High (>10ms) (1 entries):") != std::string::npos);
  CHECK(out.find('\x1b') == std::string::npos); // never raw
  CHECK(out.find("evil\\x1b[2Jname") != std::string::npos);
  CHECK(out.find("2,3") != std::string::npos);
  // Very Low before Very High (ascending groups)
  CHECK(out.find("Very Low") < out.find("Very High"));
  display::delay_table empty;
  CHECK(display::render_delay_table(empty).find("No scheduling delays data collected yet.") !=
        std::string::npos);
}
