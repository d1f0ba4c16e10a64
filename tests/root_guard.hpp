#pragma once
// Tests tagged [root] call this first. Without root they fail under RSCHED_REQUIRE_BPF=1 (CI:
// a skipped root test is a failure), else warn and return false so that the caller returns
// (Catch2 v2 has no SKIP). `what` names the test kind in the messages ("BPF test", ...).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <unistd.h>

namespace rsched::test {

inline bool root_available(const char *what) {
  if (geteuid() == 0) {
    return true;
  }
  const char *req = std::getenv("RSCHED_REQUIRE_BPF");
  if (req != nullptr && std::string(req) == "1") {
    FAIL("RSCHED_REQUIRE_BPF=1 but not running as root: a skipped " << what << " is a failure");
  }
  WARN("not root: " << what << " skipped (set RSCHED_REQUIRE_BPF=1 to make this a failure)");
  return false;
}

} // namespace rsched::test
