#pragma once
// Packed raw tiers of integer tables (schema v18): one row of `<table>_pack` per interval holds
// every row of that interval of a table whose columns after interval_id are all integers
// (thread_wakeup, thread_blocked), in one blob instead of one b-tree row each. At 10,000
// threads that each sleep once a second the wakeup group wrote ~20,000 b-tree rows an
// interval (about half of rschedd's write time, and most of its file).
//
// Format, version 1 (docs/SCHEMA.md):
//   u8 version (1), varint columns (c >= 1: the table's columns after interval_id), varint n,
//   n rows in strictly increasing order of their first `keys` columns (the builder checks it;
//   the reader relies only on the first column, thread_id, never decreasing), each row c
//   varints: zigzag(value - the previous row's value of that column), the first row's against
//   0.
// Varints are LEB128 (7 bits a byte, low first, at most 10 bytes). Pure functions over bytes.
#include "rsched/base/result.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace rsched::store {

constexpr std::uint8_t row_pack_version = 1;

// Appends rows (each `columns` integers) to a pack under construction.
class row_pack_builder {
public:
  // `keys` (1..columns): how many leading columns order the rows and make them unique.
  row_pack_builder(std::size_t columns, std::size_t keys);
  void clear();
  // False (nothing appended) when `row` has the wrong width or does not follow the previous
  // row in key order.
  bool add(std::span<const std::int64_t> row);
  [[nodiscard]] std::size_t size() const { return n_; }
  [[nodiscard]] std::size_t columns() const { return columns_; }
  // The finished blob; valid until the next add/clear.
  const std::vector<std::uint8_t> &finish();

private:
  std::size_t columns_;
  std::size_t keys_;
  std::vector<std::uint8_t> body_;
  std::vector<std::uint8_t> out_;
  std::vector<std::int64_t> last_;
  std::size_t n_ = 0;
};

// Every row of a pack of `columns` columns into `out` (cleared first; row i is out[i *
// columns, (i + 1) * columns)), or what is wrong with the blob: a pack of another width, or
// damage (a truncated or overlong blob, thread ids that go back).
result<void> unpack_rows(std::span<const std::uint8_t> blob, std::size_t columns,
                         std::vector<std::int64_t> &out);

} // namespace rsched::store
