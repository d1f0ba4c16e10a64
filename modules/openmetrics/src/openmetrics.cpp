// The text formats of openmetrics.hpp.
#include "rsched/openmetrics/openmetrics.hpp"

#include "rsched/base/text.hpp"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <limits>

namespace rsched::openmetrics {

namespace {

constexpr std::uint64_t us = 1000;

constexpr std::array<std::uint64_t, 21> latency_edges = {
    10 * us,      20 * us,      50 * us,      100 * us,    200 * us,     500 * us,
    1024 * us,    2048 * us,    4096 * us,    8192 * us,   16384 * us,   32768 * us,
    65536 * us,   131072 * us,  262144 * us,  524288 * us, 1048576 * us, 2097152 * us,
    4194304 * us, 8388608 * us, 16777216 * us};

constexpr std::array<std::uint64_t, 13> depth_edge_values = {1,  2,  3,  4,  5,  7, 9,
                                                             13, 17, 25, 33, 49, 63};

} // namespace

std::span<const std::uint64_t> latency_edges_ns() {
  return latency_edges;
}

std::span<const std::uint64_t> depth_edges() {
  return depth_edge_values;
}

std::vector<std::uint64_t> cumulative_counts(const stats::histogram &h,
                                             std::span<const std::uint64_t> edges) {
  std::vector<std::uint64_t> out(edges.size() + 1, 0);
  const std::size_t slots = stats::slot_count(h.kind);
  std::uint64_t total = 0;
  std::size_t e = 0;
  for (std::size_t s = 0; s < slots; ++s) {
    const stats::bucket b = stats::bucket_bounds(h.kind, s);
    // Close every edge at or below this bucket's lower bound: the counts so far are below it.
    while (e < edges.size() && edges[e] <= b.lo) {
      out[e++] = total;
    }
    total += h.slots[s];
  }
  while (e < edges.size()) {
    out[e++] = total;
  }
  out[edges.size()] = total;
  return out;
}

std::string format_value(double v) {
  if (std::isnan(v)) {
    return "NaN";
  }
  if (std::isinf(v)) {
    return v > 0 ? "+Inf" : "-Inf";
  }
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    return fmt::format("{}", static_cast<long long>(v));
  }
  return fmt::format("{}", v);
}

std::string format_le_seconds(std::uint64_t ns) {
  // ns / 1e9 exactly, in decimal: the integer part, then the fraction without trailing zeros.
  std::string s = fmt::format("{}.{:09}", ns / 1'000'000'000, ns % 1'000'000'000);
  while (s.back() == '0') {
    s.pop_back();
  }
  if (s.back() == '.') {
    s += '0';
  }
  return s;
}

std::string escape_label_value(std::string_view raw) {
  const std::string safe = text::escape_for_terminal(raw);
  std::string out;
  out.reserve(safe.size());
  for (const char c : safe) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n"; // escape_for_terminal leaves none; kept for safety
    } else {
      out += c;
    }
  }
  return out;
}

std::string format_timestamp(std::int64_t utc_ns) {
  const std::int64_t ms = utc_ns >= 0 ? utc_ns / 1'000'000 : -((-utc_ns + 999'999) / 1'000'000);
  const std::int64_t sec = ms >= 0 ? ms / 1000 : -((-ms + 999) / 1000);
  return fmt::format("{}.{:03}", sec, ms - sec * 1000);
}

void writer::begin(std::string_view name, metric_type type, std::string_view help,
                   std::string_view unit) {
  name_ = name;
  le_seconds_ = unit == "seconds";
  const char *type_name = type == metric_type::counter ? "counter"
                          : type == metric_type::gauge ? "gauge"
                                                       : "histogram";
  // The 0.0.4 format names a counter family by its sample name (…_total); OpenMetrics by the
  // name without the suffix.
  const std::string family =
      format_ == format::prometheus && type == metric_type::counter ? name_ + "_total" : name_;
  *out_ << "# HELP " << family << ' ' << help << '\n';
  *out_ << "# TYPE " << family << ' ' << type_name << '\n';
  if (format_ == format::openmetrics && !unit.empty()) {
    *out_ << "# UNIT " << family << ' ' << unit << '\n';
  }
}

void writer::sample(std::string_view suffix, const labels &l, const label *extra,
                    std::string_view value, std::optional<std::int64_t> ts) {
  line_.clear();
  line_ += name_;
  line_ += suffix;
  if (!l.empty() || extra != nullptr) {
    line_ += '{';
    bool first = true;
    auto add = [&](const label &x) {
      if (!first) {
        line_ += ',';
      }
      first = false;
      line_ += x.name;
      line_ += "=\"";
      line_ += escape_label_value(x.value);
      line_ += '"';
    };
    for (const label &x : l) {
      add(x);
    }
    if (extra != nullptr) {
      add(*extra);
    }
    line_ += '}';
  }
  line_ += ' ';
  line_ += value;
  if (ts) {
    line_ += ' ';
    if (format_ == format::openmetrics) {
      line_ += format_timestamp(*ts); // seconds
    } else {
      line_ += fmt::format("{}", *ts / 1'000'000); // the 0.0.4 format: milliseconds
    }
  }
  line_ += '\n';
  *out_ << line_;
}

void writer::write_created(const labels &l, std::optional<std::int64_t> created) {
  if (created && format_ == format::openmetrics) {
    sample("_created", l, nullptr, format_timestamp(*created), std::nullopt);
  }
}

void writer::counter(const labels &l, double value, std::optional<std::int64_t> ts,
                     std::optional<std::int64_t> created_ns) {
  sample("_total", l, nullptr, format_value(value), ts);
  write_created(l, created_ns);
}

void writer::gauge(const labels &l, double value, std::optional<std::int64_t> ts) {
  sample("", l, nullptr, format_value(value), ts);
}

void writer::histogram(const labels &l, std::span<const std::uint64_t> edges_ns,
                       std::span<const std::uint64_t> cumulative, double sum,
                       std::optional<std::int64_t> ts, std::optional<std::int64_t> created_ns) {
  label le{"le", ""};
  for (std::size_t i = 0; i < cumulative.size(); ++i) {
    le.value = i >= edges_ns.size() ? std::string("+Inf")
               : le_seconds_        ? format_le_seconds(edges_ns[i])
                                    : fmt::format("{}", edges_ns[i] - 1);
    sample("_bucket", l, &le, fmt::format("{}", cumulative[i]), ts);
  }
  const std::uint64_t count = cumulative.empty() ? 0 : cumulative.back();
  sample("_count", l, nullptr, fmt::format("{}", count), ts);
  sample("_sum", l, nullptr, format_value(sum), ts);
  write_created(l, created_ns);
}

void writer::finish() {
  if (format_ == format::openmetrics) {
    *out_ << "# EOF\n";
  }
}

} // namespace rsched::openmetrics
