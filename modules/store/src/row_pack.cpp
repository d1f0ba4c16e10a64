#include "rsched/store/row_pack.hpp"

#include "rsched/stats/encoding.hpp"

#include <algorithm>
#include <string>

namespace rsched::store {

namespace {

using stats::detail::unzigzag;
using stats::detail::zigzag;

// Differences wrap: the encoded difference of two int64 is taken modulo 2^64, so no value
// pair overflows.
std::int64_t minus(std::int64_t a, std::int64_t b) {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) - static_cast<std::uint64_t>(b));
}
std::int64_t plus(std::int64_t a, std::int64_t b) {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
}

} // namespace

row_pack_builder::row_pack_builder(std::size_t columns, std::size_t keys)
    : columns_(std::max<std::size_t>(columns, 1)),
      keys_(std::clamp<std::size_t>(keys, 1, std::max<std::size_t>(columns, 1))),
      last_(columns_, 0) {}

void row_pack_builder::clear() {
  body_.clear();
  n_ = 0;
  std::fill(last_.begin(), last_.end(), 0);
}

bool row_pack_builder::add(std::span<const std::int64_t> row) {
  if (row.size() != columns_) {
    return false;
  }
  if (n_ != 0 && !std::lexicographical_compare(
                     last_.begin(), last_.begin() + static_cast<std::ptrdiff_t>(keys_), row.begin(),
                     row.begin() + static_cast<std::ptrdiff_t>(keys_))) {
    return false;
  }
  for (std::size_t k = 0; k < columns_; ++k) {
    stats::detail::put_varint(body_, zigzag(minus(row[k], last_[k])));
    last_[k] = row[k];
  }
  ++n_;
  return true;
}

const std::vector<std::uint8_t> &row_pack_builder::finish() {
  out_.clear();
  out_.reserve(body_.size() + 21);
  out_.push_back(row_pack_version);
  stats::detail::put_varint(out_, columns_);
  stats::detail::put_varint(out_, n_);
  out_.insert(out_.end(), body_.begin(), body_.end());
  return out_;
}

result<void> unpack_rows(std::span<const std::uint8_t> b, std::size_t columns,
                         std::vector<std::int64_t> &out) {
  out.clear();
  using stats::detail::get_varint;
  const auto damaged = [](const char *what) {
    return make_error(std::string("damaged row pack: ") + what);
  };
  if (b.empty()) {
    return damaged("empty");
  }
  if (b[0] != row_pack_version) {
    return make_error("unknown row pack version " + std::to_string(b[0]));
  }
  std::size_t pos = 1;
  std::uint64_t c = 0;
  std::uint64_t n = 0;
  if (!get_varint(b, pos, c) || !get_varint(b, pos, n)) {
    return damaged("truncated header");
  }
  if (c != columns || columns == 0) {
    return make_error("row pack of " + std::to_string(c) + " columns where " +
                      std::to_string(columns) + " were expected");
  }
  // A count beyond what the bytes can hold (a byte a value at least) is damage, not a reason
  // to reserve memory.
  if (n > (b.size() - pos) / columns) {
    return damaged("more rows than bytes");
  }
  out.resize(static_cast<std::size_t>(n) * columns);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t k = 0; k < columns; ++k) {
      std::uint64_t v = 0;
      if (!get_varint(b, pos, v)) {
        return damaged("truncated row");
      }
      const std::int64_t prev = i == 0 ? 0 : out[(i - 1) * columns + k];
      out[i * columns + k] = plus(prev, unzigzag(v));
    }
    if (i > 0 && out[i * columns] < out[(i - 1) * columns]) {
      return damaged("thread ids out of order");
    }
  }
  if (pos != b.size()) {
    return damaged("bytes after the last row");
  }
  return {};
}

} // namespace rsched::store
