#pragma once
// The per-interval summary of a thread metric (schema v12, table `hist_summary`): what spikes()
// needs of an interval, so a day of history is read without decoding millions of histograms.
// For every thread with a row its p99 (stats::percentile at summary_p) and sample count; for
// every comm with samples the same of its threads' histograms merged; and of every thread merged.
// Written by rschedd with the raw tier's thread_hist_pack row of the metric; the rollup tiers have
// none (they are 60 and 3600 times fewer intervals, read from their histograms).
//
// Format, version 1 (docs/SCHEMA.md):
//   u8 version (1),
//   varint n, n times: varint thread_id - previous (the first: thread_id itself; ids strictly
//            increase), varint p99, varint samples;
//   varint m, m times (comms, by their first thread's id): varint id - previous (the first:
//            the id itself) of the comm's smallest thread id in the interval, varint p99,
//            varint samples;
//   u8 1 and varint p99, varint samples of all threads merged, or u8 0 (no samples).
// Varints are LEB128 as in hist_pack.hpp. Pure functions over bytes.
#include "rsched/base/result.hpp"
#include "rsched/stats/histogram.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rsched::store {

constexpr std::uint8_t hist_summary_version = 1;
// The percentile summarized (spikes' p99), and the metric (metric.id 1, sched_delay: the one
// spikes() and the report look at by default).
constexpr double summary_p = 99.0;
constexpr int summary_metric = 1;

struct summary_entry {
  std::int64_t thread_id = 0; // the thread; for a comm, its smallest thread id in the interval
  std::uint64_t p99 = 0;
  std::uint64_t samples = 0;
  bool operator==(const summary_entry &) const = default;
};

struct interval_summary {
  std::vector<summary_entry> threads; // by thread id
  std::vector<summary_entry> comms;   // by their first thread's id
  std::optional<summary_entry> all;   // thread_id 0
  bool operator==(const interval_summary &) const = default;
};

// Summarizes an interval's histograms of one metric, given thread by thread in increasing id.
class summary_builder {
public:
  // False (nothing added) when thread_id does not exceed the previous one, or the histogram's
  // layout differs from the interval's first. A thread without samples is listed with
  // samples 0 (and p99 0); a comm without samples is not.
  bool add(std::int64_t thread_id, std::string_view comm, const stats::histogram &h);
  [[nodiscard]] std::size_t size() const { return sum_.threads.size(); }
  // The blob of what was added (empty: nothing was); the builder is cleared.
  std::vector<std::uint8_t> finish();
  void clear();

private:
  interval_summary sum_;
  std::map<std::string, std::pair<std::int64_t, stats::histogram>, std::less<>> comms_;
  std::optional<stats::histogram> all_;
  std::int64_t last_ = 0;
};

std::vector<std::uint8_t> encode_summary(const interval_summary &s);
// Checks every varint and count against the blob; err says what is wrong.
result<interval_summary> decode_summary(std::span<const std::uint8_t> blob);
// The same into `out`, its vectors' memory reused (a day is 86,400 summaries); on an error
// what `out` holds is unspecified.
result<void> decode_summary_into(std::span<const std::uint8_t> blob, interval_summary &out);

} // namespace rsched::store
