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

// Tests tagged [browser] (headless Chromium) call this for each program they need: a missing one
// is a skip like a missing root, and a failure under RSCHED_REQUIRE_BPF=1 (CI installs them all).
bool in_path(const std::string &name); // support/process.hpp
inline bool tool_available(const char *program, const char *what) {
  if (in_path(program)) {
    return true;
  }
  if (require_bpf()) {
    FAIL("RSCHED_REQUIRE_BPF=1 but " << program << " is not installed (tools/install-deps.sh): a "
                                     << "skipped " << what << " is a failure");
  }
  WARN(program << " not installed: " << what << " skipped (tools/install-deps.sh installs it)");
  root_test_skipped() = true;
  return false;
}

} // namespace rsched::test
