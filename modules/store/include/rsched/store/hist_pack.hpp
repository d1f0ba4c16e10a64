#pragma once
// The packed raw tier of thread_hist (schema v8): one row of `thread_hist_pack` per interval and
// metric holds every thread's (thread_id, count, total, hist) of that interval in one blob,
// instead of one b-tree row per thread. A row of `thread_hist` costs ~22 bytes before its
// histogram (key columns, record header, cell pointer); a packed entry costs the thread id's
// difference to the previous one (1 byte for a dense id range), count and total as varints and
// the histogram blob with its length.
//
// Format, version 1 (docs/SCHEMA.md):
//   u8 version (1), varint n,
//   n times: varint thread_id - previous thread_id (the first: thread_id itself; ids strictly
//            increase, so every difference after the first is >= 1), varint zigzag(count),
//            varint zigzag(total), varint length, `length` bytes of the hist blob (the
//            histogram encoding of docs/SCHEMA.md, byte for byte as a thread_hist row holds it).
// Varints are LEB128 (7 bits a byte, low first, at most 10 bytes). Pure functions over bytes.
#include "rsched/base/result.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace rsched::store {

constexpr std::uint8_t hist_pack_version = 1;

// One thread's value as a row of thread_hist has it.
struct pack_entry {
  std::int64_t thread_id = 0;
  std::int64_t count = 0;
  std::int64_t total = 0;
  std::span<const std::uint8_t> hist; // into the caller's (encode) or the blob's (decode) bytes
};

// Appends entries to a pack under construction. Thread ids must strictly increase.
class pack_builder {
public:
  pack_builder() { clear(); }
  void clear();
  // False (nothing appended) when thread_id does not exceed the previous one.
  bool add(std::int64_t thread_id, std::int64_t count, std::int64_t total,
           std::span<const std::uint8_t> hist);
  std::size_t size() const { return n_; }
  // The finished blob (the header's count is written here); valid until the next add/clear.
  const std::vector<std::uint8_t> &finish();

private:
  std::vector<std::uint8_t> body_;
  std::vector<std::uint8_t> out_;
  std::size_t n_ = 0;
  std::int64_t last_ = 0;
};

// Reads a pack one entry at a time, checking every length against the blob.
class pack_reader {
public:
  // Reads the header; err() says what is wrong with a blob that is not a pack.
  explicit pack_reader(std::span<const std::uint8_t> blob);
  const std::string &err() const { return err_; }
  std::size_t size() const { return n_; }
  // The next entry into `e`; false at the end or on a damaged blob (then err() is set).
  bool next(pack_entry &e);

private:
  bool fail(const char *what);
  std::span<const std::uint8_t> b_;
  std::size_t pos_ = 0;
  std::size_t n_ = 0;
  std::size_t read_ = 0;
  std::int64_t last_ = 0;
  std::string err_;
};

// Every entry of a pack, or what is wrong with it.
result<std::vector<pack_entry>> unpack(std::span<const std::uint8_t> blob);

} // namespace rsched::store
