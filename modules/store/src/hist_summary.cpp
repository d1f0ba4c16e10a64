#include "rsched/store/hist_summary.hpp"

#include "rsched/stats/encoding.hpp"
#include "rsched/stats/percentile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace rsched::store {

namespace {

std::optional<summary_entry> summarize(std::int64_t id, const stats::histogram &h) {
  const auto p = stats::percentile(h, summary_p);
  if (!p) {
    return std::nullopt;
  }
  return summary_entry{id, p->value, h.total()};
}

void put_entries(std::vector<std::uint8_t> &out, const std::vector<summary_entry> &list) {
  stats::detail::put_varint(out, list.size());
  std::int64_t last = 0;
  for (const auto &e : list) {
    stats::detail::put_varint(out, static_cast<std::uint64_t>(e.thread_id - last));
    stats::detail::put_varint(out, e.p99);
    stats::detail::put_varint(out, e.samples);
    last = e.thread_id;
  }
}

result<void> get_entries(std::span<const std::uint8_t> b, std::size_t &pos,
                         std::vector<summary_entry> &list, const char *what) {
  const auto fail = [&](const char *why) {
    return make_error(fmt::format("damaged summary: {} ({})", why, what));
  };
  std::uint64_t n = 0;
  if (!stats::detail::get_varint(b, pos, n)) {
    return fail("truncated count");
  }
  // Every entry takes at least 3 bytes: a count beyond that is damage.
  if (n > (b.size() - pos) / 3) {
    return fail("more entries than bytes");
  }
  list.resize(static_cast<std::size_t>(n));
  std::int64_t last = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    std::uint64_t d = 0;
    summary_entry &e = list[static_cast<std::size_t>(i)];
    if (!stats::detail::get_varint(b, pos, d) || !stats::detail::get_varint(b, pos, e.p99) ||
        !stats::detail::get_varint(b, pos, e.samples)) {
      return fail("truncated entry");
    }
    if (d == 0 || d > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max() - last)) {
      return fail("thread ids out of order");
    }
    e.thread_id = last + static_cast<std::int64_t>(d);
    last = e.thread_id;
  }
  return {};
}

} // namespace

bool summary_builder::add(std::int64_t thread_id, std::string_view comm,
                          const stats::histogram &h) {
  if (thread_id <= last_ || (all_ && all_->kind != h.kind)) {
    return false;
  }
  // A row without samples is kept (samples 0): its interval is one spikes() has rows in.
  last_ = thread_id;
  sum_.threads.push_back(summarize(thread_id, h).value_or(summary_entry{thread_id, 0, 0}));
  auto it = comms_.find(comm);
  if (it == comms_.end()) {
    comms_.emplace(std::string(comm), std::pair{thread_id, h});
  } else {
    (void)stats::merge_into(it->second.second, h);
  }
  if (!all_) {
    all_ = h;
  } else {
    (void)stats::merge_into(*all_, h);
  }
  return true;
}

void summary_builder::clear() {
  sum_ = {};
  comms_.clear();
  all_.reset();
  last_ = 0;
}

std::vector<std::uint8_t> summary_builder::finish() {
  std::vector<std::uint8_t> out;
  if (!sum_.threads.empty()) {
    for (const auto &[comm, first] : comms_) {
      if (auto e = summarize(first.first, first.second)) {
        sum_.comms.push_back(*e);
      }
    }
    std::sort(
        sum_.comms.begin(), sum_.comms.end(),
        [](const summary_entry &a, const summary_entry &b) { return a.thread_id < b.thread_id; });
    if (all_) {
      sum_.all = summarize(0, *all_); // none when no thread had samples
    }
    out = encode_summary(sum_);
  }
  clear();
  return out;
}

std::vector<std::uint8_t> encode_summary(const interval_summary &s) {
  std::vector<std::uint8_t> out;
  out.reserve(8 + 6 * (s.threads.size() + s.comms.size()));
  out.push_back(hist_summary_version);
  put_entries(out, s.threads);
  put_entries(out, s.comms);
  out.push_back(s.all ? 1 : 0);
  if (s.all) {
    stats::detail::put_varint(out, s.all->p99);
    stats::detail::put_varint(out, s.all->samples);
  }
  return out;
}

result<void> decode_summary_into(std::span<const std::uint8_t> b, interval_summary &s) {
  s.threads.clear();
  s.comms.clear();
  s.all.reset();
  if (b.empty()) {
    return make_error("damaged summary: empty");
  }
  if (b[0] != hist_summary_version) {
    return make_error(fmt::format("unknown summary version {}", b[0]));
  }
  std::size_t pos = 1;
  if (auto r = get_entries(b, pos, s.threads, "threads"); !r) {
    return r.err();
  }
  if (auto r = get_entries(b, pos, s.comms, "comms"); !r) {
    return r.err();
  }
  if (pos >= b.size()) {
    return make_error("damaged summary: truncated (all)");
  }
  const std::uint8_t has_all = b[pos++];
  if (has_all > 1) {
    return make_error("damaged summary: bad flag");
  }
  if (has_all == 1) {
    summary_entry e;
    if (!stats::detail::get_varint(b, pos, e.p99) ||
        !stats::detail::get_varint(b, pos, e.samples)) {
      return make_error("damaged summary: truncated (all)");
    }
    s.all = e;
  }
  if (pos != b.size()) {
    return make_error("damaged summary: bytes after the end");
  }
  return {};
}

result<interval_summary> decode_summary(std::span<const std::uint8_t> b) {
  interval_summary s;
  if (auto r = decode_summary_into(b, s); !r) {
    return r.err();
  }
  return s;
}

} // namespace rsched::store
