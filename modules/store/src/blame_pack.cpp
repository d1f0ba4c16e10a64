#include "rsched/store/blame_pack.hpp"

#include "rsched/stats/encoding.hpp"

#include <limits>

namespace rsched::store {

namespace {

using stats::detail::unzigzag;
using stats::detail::zigzag;

constexpr std::uint8_t approx_bit = 1U << 5;
constexpr std::uint8_t same_sched_bit = 1U << 6;

// The smallest size of an entry: two varints, the flags and three varints.
constexpr std::size_t min_entry_bytes = 6;

} // namespace

void blame_pack_builder::clear() {
  body_.clear();
  n_ = 0;
  last_ = blame_entry{};
}

bool blame_pack_builder::add(const blame_entry &e) {
  const bool new_thread = n_ == 0 || e.thread_id != last_.thread_id;
  if (e.thread_id < 0 || e.culprit_id < 0) {
    return false; // ids are rowids
  }
  if (n_ != 0 && (e.thread_id < last_.thread_id ||
                  (e.thread_id == last_.thread_id && e.culprit_id <= last_.culprit_id))) {
    return false;
  }
  using stats::detail::put_varint;
  put_varint(body_, n_ == 0 ? zigzag(e.thread_id)
                            : static_cast<std::uint64_t>(e.thread_id) -
                                  static_cast<std::uint64_t>(last_.thread_id));
  put_varint(body_, new_thread ? zigzag(e.culprit_id)
                               : static_cast<std::uint64_t>(e.culprit_id) -
                                     static_cast<std::uint64_t>(last_.culprit_id));
  std::uint8_t flags = 0;
  for (std::size_t k = 0; k < e.sched.size(); ++k) {
    if (e.sched[k]) {
      flags = static_cast<std::uint8_t>(flags | (1U << k));
    }
  }
  const bool same = n_ != 0 && e.sched == last_.sched;
  if (same) {
    flags = same_sched_bit;
  }
  if (e.approx_ns) {
    flags = static_cast<std::uint8_t>(flags | approx_bit);
  }
  body_.push_back(flags);
  put_varint(body_, zigzag(e.wait_ns));
  put_varint(body_, zigzag(e.waits));
  put_varint(body_, zigzag(e.preempts));
  if (!same) {
    for (const auto &v : e.sched) {
      if (v) {
        put_varint(body_, zigzag(*v));
      }
    }
  }
  if (e.approx_ns) {
    put_varint(body_, zigzag(*e.approx_ns));
  }
  last_ = e;
  ++n_;
  return true;
}

const std::vector<std::uint8_t> &blame_pack_builder::finish() {
  out_.clear();
  out_.reserve(body_.size() + 11);
  out_.push_back(blame_pack_version);
  stats::detail::put_varint(out_, n_);
  out_.insert(out_.end(), body_.begin(), body_.end());
  return out_;
}

namespace {
error damaged(const char *what) {
  return make_error(std::string("damaged blame pack: ") + what);
}
} // namespace

result<void> blame_cursor::open(std::span<const std::uint8_t> b) {
  b_ = b;
  pos_ = 1;
  left_ = 0;
  first_ = true;
  if (b.empty()) {
    return damaged("empty");
  }
  if (b[0] != blame_pack_version) {
    return make_error("unknown blame pack version " + std::to_string(b[0]));
  }
  if (!stats::detail::get_varint(b, pos_, left_)) {
    return damaged("truncated header");
  }
  // A count beyond what the bytes can hold is damage, not a reason to reserve memory.
  if (left_ > (b.size() - pos_) / min_entry_bytes) {
    return damaged("more entries than bytes");
  }
  return {};
}

result<bool> blame_cursor::next(blame_entry &e) {
  using stats::detail::get_varint;
  if (left_ == 0) {
    if (pos_ != b_.size()) {
      return damaged("bytes after the last entry");
    }
    return false;
  }
  --left_;
  constexpr auto max = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  std::uint64_t thread = 0;
  std::uint64_t culprit = 0;
  if (!get_varint(b_, pos_, thread) || !get_varint(b_, pos_, culprit) || pos_ >= b_.size()) {
    return damaged("truncated entry");
  }
  bool new_thread = true;
  if (first_) {
    e.thread_id = unzigzag(thread);
  } else {
    if (e.thread_id < 0 || thread > max - static_cast<std::uint64_t>(e.thread_id)) {
      return damaged("thread ids out of order");
    }
    e.thread_id = static_cast<std::int64_t>(static_cast<std::uint64_t>(e.thread_id) + thread);
    new_thread = thread != 0;
  }
  if (new_thread) {
    e.culprit_id = unzigzag(culprit);
  } else {
    if (culprit == 0 || e.culprit_id < 0 ||
        culprit > max - static_cast<std::uint64_t>(e.culprit_id)) {
      return damaged("culprit ids out of order");
    }
    e.culprit_id = static_cast<std::int64_t>(static_cast<std::uint64_t>(e.culprit_id) + culprit);
  }
  if (e.thread_id < 0 || e.culprit_id < 0) {
    return damaged("negative id"); // ids are rowids: the builder writes none
  }
  const std::uint8_t flags = b_[pos_++];
  if ((flags & 0x80U) != 0 || ((flags & same_sched_bit) != 0 && (first_ || (flags & 0x1FU) != 0))) {
    return damaged("bad flags");
  }
  std::uint64_t v[3] = {};
  for (auto &x : v) {
    if (!get_varint(b_, pos_, x)) {
      return damaged("truncated entry");
    }
  }
  e.wait_ns = unzigzag(v[0]);
  e.waits = unzigzag(v[1]);
  e.preempts = unzigzag(v[2]);
  if ((flags & same_sched_bit) == 0) { // else the previous entry's, still in `e`
    for (std::size_t k = 0; k < e.sched.size(); ++k) {
      std::uint64_t x = 0;
      if ((flags & (1U << k)) == 0) {
        e.sched[k].reset();
      } else if (!get_varint(b_, pos_, x)) {
        return damaged("truncated entry");
      } else {
        e.sched[k] = unzigzag(x);
      }
    }
  }
  e.approx_ns.reset();
  if ((flags & approx_bit) != 0) {
    std::uint64_t x = 0;
    if (!get_varint(b_, pos_, x)) {
      return damaged("truncated entry");
    }
    e.approx_ns = unzigzag(x);
  }
  first_ = false;
  return true;
}

result<void> unpack_blame(std::span<const std::uint8_t> b, std::vector<blame_entry> &out) {
  out.clear();
  blame_cursor c;
  if (auto r = c.open(b); !r) {
    return r;
  }
  blame_entry e;
  for (;;) {
    auto more = c.next(e);
    if (!more) {
      return more.err();
    }
    if (!*more) {
      return {};
    }
    out.push_back(e);
  }
}

} // namespace rsched::store
