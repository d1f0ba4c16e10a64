#include "rsched/flight/coalesce.hpp"

#include <algorithm>

namespace rsched::flight {

namespace {

// Saved windows remembered: a request's moment is at most the window's span in the past (older
// marks are refused before they get here), so a few dozen cover every burst that matters.
constexpr std::size_t max_saved = 64;

} // namespace

request_coalescer::placement request_coalescer::place(std::uint64_t at) const {
  for (const auto &w : saved_) {
    if (at >= w.from && at <= w.to) {
      return {placement::kind::inside, w.to, w.file};
    }
  }
  if (auto end = newest_end(); end && at > *end && at - *end < span_) {
    return {placement::kind::next, *end + span_, {}};
  }
  return {placement::kind::now, at, {}};
}

void request_coalescer::saved(std::uint64_t from, std::uint64_t to, std::string file) {
  saved_.push_back({from, to, std::move(file)});
  if (saved_.size() > max_saved) {
    saved_.pop_front();
  }
}

std::optional<std::uint64_t> request_coalescer::newest_end() const {
  std::optional<std::uint64_t> end;
  for (const auto &w : saved_) {
    end = std::max(end.value_or(0), w.to);
  }
  return end;
}

} // namespace rsched::flight
