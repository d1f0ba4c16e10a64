// libFuzzer target: thread_blame packs as read from a database (rsched::store::unpack_blame, the
// blame virtual table and causes_of). A blob that unpacks gives rows in strictly increasing
// (thread, culprit) order, which the builder takes back and packs into a blob no longer than
// the input (the builder's is the shortest form) that unpacks to the same rows.
#include "rsched/store/blame_pack.hpp"

#include "fuzz_check.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
  using namespace rsched::store;
  std::vector<blame_entry> rows;
  const auto r = unpack_blame(std::span<const std::uint8_t>(data, size), rows);
  if (!r) {
    RSCHED_FUZZ_CHECK(!r.err().msg.empty());
    return 0;
  }
  blame_pack_builder b;
  for (const auto &e : rows) {
    RSCHED_FUZZ_CHECK(b.add(e));
  }
  const auto &again = b.finish();
  RSCHED_FUZZ_CHECK(again.size() <= size);
  std::vector<blame_entry> back;
  RSCHED_FUZZ_CHECK(unpack_blame(again, back).ok());
  RSCHED_FUZZ_CHECK(back == rows);
  return 0;
}
