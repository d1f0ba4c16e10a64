#pragma once
// Tests tagged [root] call this first. Without root they fail under RSCHED_REQUIRE_BPF=1 (CI:
// a skipped root test is a failure), else warn, record the skip and return false so that the
// caller returns (Catch2 v2 has no SKIP). A run in which something was skipped and nothing
// failed exits with skip_exit_code (test_main.cpp), which CTest reports as "Skipped"
// (SKIP_RETURN_CODE of the root entries, tests/CMakeLists.txt). `what` names the test kind in
// the messages ("BPF test", ...).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <unistd.h>

namespace rsched::test {

// The exit code of a test run that skipped root tests (and failed none); keep in sync with
// RSCHED_TEST_SKIP_CODE in tests/CMakeLists.txt.
inline constexpr int skip_exit_code = 77;

// Set when a root test skipped itself in this run.
inline bool &root_test_skipped() {
  static bool skipped = false;
  return skipped;
}

inline bool require_bpf() {
  const char *req = std::getenv("RSCHED_REQUIRE_BPF");
  return req != nullptr && std::string(req) == "1";
}

inline bool root_available(const char *what) {
  if (geteuid() == 0) {
    return true;
  }
  if (require_bpf()) {
    FAIL("RSCHED_REQUIRE_BPF=1 but not running as root: a skipped " << what << " is a failure");
  }
  WARN("not root: " << what << " skipped (set RSCHED_REQUIRE_BPF=1 to make this a failure)");
  root_test_skipped() = true;
  return false;
}

} // namespace rsched::test
