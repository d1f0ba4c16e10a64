// The main of every test binary: Catch2's session, plus the skip exit code. A run in which a root
// test skipped itself (root_guard.hpp) and nothing failed exits with skip_exit_code, so that the
// root CTest entries show as "Skipped" instead of "Passed".
//
// A listener repeats every failed assertion just before the totals: the root suites print pages of
// measurements, and a log cut to its last lines (as CI logs are) should still say what failed.
#define CATCH_CONFIG_RUNNER
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include "root_guard.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace {

class failure_digest : public Catch::TestEventListenerBase {
public:
  using TestEventListenerBase::TestEventListenerBase;

  void testCaseStarting(Catch::TestCaseInfo const &info) override {
    TestEventListenerBase::testCaseStarting(info);
    current_ = info.name;
  }

  bool assertionEnded(Catch::AssertionStats const &stats) override {
    const auto &r = stats.assertionResult;
    if (!r.isOk()) {
      std::string line = current_ + "\n    " + r.getSourceInfo().file + ":" +
                         std::to_string(r.getSourceInfo().line) + ": ";
      if (r.hasExpression()) {
        line += r.getExpressionInMacro() + " with " + r.getExpandedExpression();
      }
      if (r.hasMessage()) {
        line += " " + r.getMessage();
      }
      for (const auto &m : stats.infoMessages) {
        line += "\n    with: " + m.message;
      }
      failures_.push_back(std::move(line));
    }
    return true;
  }

  void testRunEnded(Catch::TestRunStats const &stats) override {
    if (!failures_.empty()) {
      Catch::cout() << "\nFailed in this run (" << failures_.size() << "):\n";
      for (const auto &f : failures_) {
        Catch::cout() << "  " << f << "\n";
      }
    }
    TestEventListenerBase::testRunEnded(stats);
  }

private:
  std::string current_;
  std::vector<std::string> failures_;
};

} // namespace

CATCH_REGISTER_LISTENER(failure_digest)

int main(int argc, char *argv[]) {
  const int failed = Catch::Session().run(argc, argv);
  if (failed == 0 && rsched::test::root_test_skipped()) {
    return rsched::test::skip_exit_code;
  }
  return failed;
}
