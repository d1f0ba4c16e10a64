#include "rsched/store/hist_pack.hpp"

#include "rsched/stats/encoding.hpp"

#include <limits>

namespace rsched::store {

namespace {

using stats::detail::unzigzag;
using stats::detail::zigzag;

} // namespace

void pack_builder::clear() {
  body_.clear();
  n_ = 0;
  last_ = 0;
}

bool pack_builder::add(std::int64_t thread_id, std::int64_t count, std::int64_t total,
                       std::span<const std::uint8_t> hist) {
  if (n_ != 0 && thread_id <= last_) {
    return false;
  }
  // The first id as itself (zigzag: an id is never negative, but a damaged caller's must not
  // wrap), then differences of at least 1.
  stats::detail::put_varint(body_, n_ == 0 ? zigzag(thread_id)
                                           : static_cast<std::uint64_t>(thread_id) -
                                                 static_cast<std::uint64_t>(last_));
  stats::detail::put_varint(body_, zigzag(count));
  stats::detail::put_varint(body_, zigzag(total));
  stats::detail::put_varint(body_, hist.size());
  body_.insert(body_.end(), hist.begin(), hist.end());
  last_ = thread_id;
  ++n_;
  return true;
}

const std::vector<std::uint8_t> &pack_builder::finish() {
  out_.clear();
  out_.reserve(body_.size() + 11);
  out_.push_back(hist_pack_version);
  stats::detail::put_varint(out_, n_);
  out_.insert(out_.end(), body_.begin(), body_.end());
  return out_;
}

pack_reader::pack_reader(std::span<const std::uint8_t> blob) : b_(blob) {
  if (b_.empty()) {
    fail("empty");
    return;
  }
  if (b_[0] != hist_pack_version) {
    err_ = "unknown pack version " + std::to_string(b_[0]);
    return;
  }
  pos_ = 1;
  std::uint64_t n = 0;
  if (!stats::detail::get_varint(b_, pos_, n)) {
    fail("truncated header");
    return;
  }
  // Every entry takes at least 4 bytes (four varints): a count beyond that is damage, not a
  // reason to reserve memory.
  if (n > (b_.size() - pos_) / 4) {
    fail("more entries than bytes");
    return;
  }
  n_ = static_cast<std::size_t>(n);
}

bool pack_reader::fail(const char *what) {
  if (err_.empty()) {
    err_ = std::string("damaged pack: ") + what;
  }
  n_ = read_;
  return false;
}

bool pack_reader::next(pack_entry &e) {
  if (!err_.empty() || read_ >= n_) {
    if (err_.empty() && read_ == n_ && pos_ != b_.size()) {
      return fail("bytes after the last entry");
    }
    return false;
  }
  std::uint64_t id = 0;
  std::uint64_t count = 0;
  std::uint64_t total = 0;
  std::uint64_t len = 0;
  if (!stats::detail::get_varint(b_, pos_, id) || !stats::detail::get_varint(b_, pos_, count) ||
      !stats::detail::get_varint(b_, pos_, total) || !stats::detail::get_varint(b_, pos_, len)) {
    return fail("truncated entry");
  }
  if (len > b_.size() - pos_) {
    return fail("histogram past the end");
  }
  if (read_ == 0) {
    e.thread_id = unzigzag(id);
  } else {
    if (id == 0 || id > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) -
                            static_cast<std::uint64_t>(last_)) {
      return fail("thread ids out of order");
    }
    e.thread_id = static_cast<std::int64_t>(static_cast<std::uint64_t>(last_) + id);
  }
  e.count = unzigzag(count);
  e.total = unzigzag(total);
  e.hist = b_.subspan(pos_, static_cast<std::size_t>(len));
  pos_ += static_cast<std::size_t>(len);
  last_ = e.thread_id;
  ++read_;
  if (read_ == n_ && pos_ != b_.size()) {
    return fail("bytes after the last entry");
  }
  return true;
}

result<std::vector<pack_entry>> unpack(std::span<const std::uint8_t> blob) {
  pack_reader r(blob);
  std::vector<pack_entry> out;
  if (!r.err().empty()) {
    return make_error(r.err());
  }
  out.reserve(r.size());
  pack_entry e;
  while (r.next(e)) {
    out.push_back(e);
  }
  if (!r.err().empty()) {
    return make_error(r.err());
  }
  return out;
}

} // namespace rsched::store
