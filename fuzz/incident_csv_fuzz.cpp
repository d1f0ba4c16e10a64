// libFuzzer target: CSV incident timelines (RFC 4180, as .import-incidents reads them).
#include "incident_common.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerInitialize(int * /*argc*/, char *** /*argv*/) {
  rsched::fuzz::use_berlin_as_local();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char *>(data), size);
  auto recs = rsched::query::detail::csv_records(in);
  if (!recs) {
    rsched::fuzz::check_error(recs.err().msg);
    return 0;
  }
  // Every data row has one value per header column (a CSV field is never null).
  for (const auto &rec : *recs) {
    RSCHED_FUZZ_CHECK(rec.size() == recs->front().size());
    for (const auto &kv : rec) {
      RSCHED_FUZZ_CHECK(kv.second.has_value());
    }
  }
  rsched::fuzz::parse_times(*recs);
  return 0;
}
