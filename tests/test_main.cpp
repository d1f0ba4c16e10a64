// The main of every test binary: Catch2's session, plus the skip exit code. A run in which a root
// test skipped itself (root_guard.hpp) and nothing failed exits with skip_exit_code, so that the
// root CTest entries show as "Skipped" instead of "Passed".
#define CATCH_CONFIG_RUNNER
#include "root_guard.hpp"

#include <catch2/catch.hpp>

int main(int argc, char *argv[]) {
  const int failed = Catch::Session().run(argc, argv);
  if (failed == 0 && rsched::test::root_test_skipped()) {
    return rsched::test::skip_exit_code;
  }
  return failed;
}
