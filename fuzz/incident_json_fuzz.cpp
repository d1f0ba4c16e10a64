// libFuzzer target: JSON incident timelines (an array of flat objects, read with nlohmann-json's
// SAX parser, as .import-incidents reads them).
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
  auto recs = rsched::query::detail::json_records(in);
  if (!recs) {
    rsched::fuzz::check_error(recs.err().msg);
    return 0;
  }
  // An accepted file is an array: its first byte after a UTF-8 byte order mark and white space
  // is '['.
  const std::string_view body = in.starts_with("\xEF\xBB\xBF") ? in.substr(3) : in;
  const auto first = body.find_first_not_of(" \t\r\n");
  RSCHED_FUZZ_CHECK(first != std::string_view::npos && body[first] == '[');
  rsched::fuzz::parse_times(*recs);
  return 0;
}
