#pragma once
// The Prometheus text exposition format (0.0.4) and OpenMetrics 1.0, written from plain data.
//
// rsched's latency histograms have 75 buckets (10 µs steps to 500 µs, then powers of two in µs);
// a Prometheus classic histogram gets a documented subset of their edges (`latency_edges_ns`), so
// every `le` bucket is an exact cumulative count of ours: no sample is moved, `_count` and `_sum`
// are exact. A sample exactly on an edge (to the ns) counts in the bucket above it (ours are
// [lo, hi] with hi = edge − 1 ns), the only difference from `value <= le`.
//
// Label values are data: a comm or cgroup with quotes, backslashes, newlines, escape sequences
// or bytes that are not UTF-8 is written through text::escape_for_terminal (control and invalid
// bytes as the four characters \xNN, `\` doubled) and then the format's own escaping, so the
// value stays one valid UTF-8 string and distinct names stay distinct.
#include "rsched/stats/histogram.hpp"

#include <cstdint>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rsched::openmetrics {

enum class format {
  prometheus,  // text/plain; version=0.0.4
  openmetrics, // application/openmetrics-text; version=1.0.0 (ends with "# EOF")
};

enum class metric_type { counter, gauge, histogram };

struct label {
  std::string name; // [a-zA-Z_][a-zA-Z0-9_]*, never "le"
  std::string value;
};
using labels = std::vector<label>;

// The upper edges (ns) of the `le` buckets of a latency histogram, ascending; +Inf follows them.
// 10, 20, 50, 100, 200, 500 µs, then 1.024 ms doubling to 16.777216 s: 21 edges.
std::span<const std::uint64_t> latency_edges_ns();
// The edges of a runqueue-depth histogram (depth layout: one bucket per depth 0…62, then ≥ 63):
// 1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 63. A depth is an integer, so "below edge E" is
// exactly `le="E-1"`: the family writes le 0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 62, +Inf.
std::span<const std::uint64_t> depth_edges();

// Cumulative counts of `h` (latency layout) below each edge of `edges`, then the total (+Inf).
// Every edge must be a bucket edge of the layout (a lower bound of a slot); the result has
// edges.size() + 1 entries.
std::vector<std::uint64_t> cumulative_counts(const stats::histogram &h,
                                             std::span<const std::uint64_t> edges);

// A float as both formats write it: shortest round-trip form, "+Inf", "-Inf", "NaN".
std::string format_value(double v);
// An `le` label value for an edge in ns, in seconds: "1e-05" style is avoided ("0.00001").
std::string format_le_seconds(std::uint64_t ns);
// A label value escaped for the format (see the header comment), without the quotes.
std::string escape_label_value(std::string_view raw);
// A timestamp: UTC ns as seconds with millisecond precision ("1795179610.000"), the precision
// Prometheus stores.
std::string format_timestamp(std::int64_t utc_ns);

// Writes families one after the other. Each family starts with begin() (its # TYPE, # HELP and,
// in OpenMetrics, # UNIT lines) and takes points of its type; a family's points must all come
// before the next begin(). finish() writes "# EOF" in OpenMetrics.
class writer {
public:
  writer(std::ostream &out, format f) : out_(&out), format_(f) {}

  // `name` without suffixes (rsched_cpu_sched_delay_seconds); `unit` "" or the unit the name
  // ends with ("seconds"). A histogram family in "seconds" takes edges in ns and writes them as
  // seconds; one without a unit takes integer edges and writes `le` = edge − 1 (depth_edges).
  void begin(std::string_view name, metric_type type, std::string_view help,
             std::string_view unit = "");
  // One point of the current counter family: `value` is cumulative. `ts` in UTC ns. `created`
  // (UTC ns): when the series started counting from zero, written as `_created` in OpenMetrics
  // (the 0.0.4 format has no such sample and leaves it out).
  void counter(const labels &l, double value, std::optional<std::int64_t> ts = std::nullopt,
               std::optional<std::int64_t> created = std::nullopt);
  void gauge(const labels &l, double value, std::optional<std::int64_t> ts = std::nullopt);
  // One point of the current histogram family: `cumulative` as cumulative_counts returns it for
  // `edges_ns`; `sum` in the family's unit.
  void histogram(const labels &l, std::span<const std::uint64_t> edges_ns,
                 std::span<const std::uint64_t> cumulative, double sum,
                 std::optional<std::int64_t> ts = std::nullopt,
                 std::optional<std::int64_t> created = std::nullopt);
  void finish();

private:
  void sample(std::string_view suffix, const labels &l, const label *extra, std::string_view value,
              std::optional<std::int64_t> ts);

  void write_created(const labels &l, std::optional<std::int64_t> created);

  std::ostream *out_;
  format format_;
  std::string name_;
  bool le_seconds_ = true; // the current histogram family's edges are ns (else counts)
  std::string line_;       // reused buffer
};

} // namespace rsched::openmetrics
