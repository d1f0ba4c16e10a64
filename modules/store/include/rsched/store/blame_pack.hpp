#pragma once
// The packed raw tier of thread_blame (schema v13): one row of `thread_blame_pack` per interval
// holds every (thread, culprit) row of that interval in one blob, instead of one b-tree row each
// (~28 bytes a row on a busy history, 61 % of its file, and a VDBE step per row for every
// long-window question). A packed entry costs its thread's difference to the previous one and
// its culprit's (or the culprit itself after a new thread), a flags byte and the values as
// varints.
//
// Format, version 1 (docs/SCHEMA.md):
//   u8 version (1), varint n,
//   n times, in (thread_id, culprit_id) order, each pair once:
//     varint thread: the first entry zigzag(thread_id), then thread_id - the previous one (0:
//            the same thread);
//     varint culprit: after a new thread (and first) zigzag(culprit_id), else culprit_id - the
//            previous one (>= 1);
//     u8 flags: bits 0-4 cpu, policy, prio, waiter_policy, waiter_prio present (else NULL);
//            bit 5 approx_ns present; bit 6 the five as the previous entry's (none follow);
//            bit 7 zero;
//     varint zigzag(wait_ns), zigzag(waits), zigzag(preempts), then zigzag of each present
//     scheduling field in that order (unless bit 6), then zigzag(approx_ns) if present.
// Varints are LEB128 (7 bits a byte, low first, at most 10 bytes). Pure functions over bytes.
#include "rsched/base/result.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace rsched::store {

constexpr std::uint8_t blame_pack_version = 1;

// One row of thread_blame (without its interval).
struct blame_entry {
  std::int64_t thread_id = 0;
  std::int64_t culprit_id = 0;
  std::int64_t wait_ns = 0;
  std::int64_t waits = 0;
  std::int64_t preempts = 0;
  // cpu, policy, prio, waiter_policy, waiter_prio (schema v9); nullopt: NULL.
  std::array<std::optional<std::int64_t>, 5> sched{};
  std::optional<std::int64_t> approx_ns; // schema v11
  friend bool operator==(const blame_entry &, const blame_entry &) = default;
};

// Appends entries to a pack under construction, in strictly increasing (thread, culprit) order.
class blame_pack_builder {
public:
  void clear();
  // False (nothing appended) when (thread_id, culprit_id) does not follow the previous entry.
  bool add(const blame_entry &e);
  [[nodiscard]] std::size_t size() const { return n_; }
  // The finished blob; valid until the next add/clear.
  const std::vector<std::uint8_t> &finish();

private:
  std::vector<std::uint8_t> body_;
  std::vector<std::uint8_t> out_;
  std::size_t n_ = 0;
  blame_entry last_;
};

// Reads a pack one entry at a time into the caller's entry (no vector of them: explain() and
// spikes() add each entry to their sums and go on; an hour is millions of entries).
class blame_cursor {
public:
  // Checks the blob's header; an error where it is damaged or of an unknown version.
  result<void> open(std::span<const std::uint8_t> blob);
  // The next entry into `e`, which must be the entry the previous call filled (the pack holds
  // differences from it); false after the last; an error where the pack is damaged.
  result<bool> next(blame_entry &e);

private:
  std::span<const std::uint8_t> b_;
  std::size_t pos_ = 0;
  std::uint64_t left_ = 0;
  bool first_ = true;
};

// Every entry of a pack into `out` (cleared first), or what is wrong with the blob.
result<void> unpack_blame(std::span<const std::uint8_t> blob, std::vector<blame_entry> &out);

} // namespace rsched::store
