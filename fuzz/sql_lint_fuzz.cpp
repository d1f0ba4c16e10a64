// libFuzzer target: the SQL lint that runs on every statement a user types into rsched-sql
// (check_histogram_aggregation, and tier_text_of / tier_variant_reason for tier routing).
#include "rsched/query/sql_lint.hpp"

#include "fuzz_check.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char *>(data), size);
  if (const auto e = rsched::query::check_histogram_aggregation(in); e) {
    // The offset names a function in the statement; the message is one line.
    RSCHED_FUZZ_CHECK(e->offset < in.size());
    RSCHED_FUZZ_CHECK(!e->message.empty());
    RSCHED_FUZZ_CHECK(e->message.find('\n') == std::string::npos);
  }
  const auto t = rsched::query::tier_text_of(in);
  RSCHED_FUZZ_CHECK(t.ts_terms >= 0);
  RSCHED_FUZZ_CHECK(rsched::query::tier_variant_reason(in) == t.why);
  if (t.why) {
    RSCHED_FUZZ_CHECK(!t.why->empty());
  }
  return 0;
}
