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

result<void> unpack_blame(std::span<const std::uint8_t> b, std::vector<blame_entry> &out) {
  out.clear();
  using stats::detail::get_varint;
  const auto damaged = [](const char *what) {
    return make_error(std::string("damaged blame pack: ") + what);
  };
  if (b.empty()) {
    return damaged("empty");
  }
  if (b[0] != blame_pack_version) {
    return make_error("unknown blame pack version " + std::to_string(b[0]));
  }
  std::size_t pos = 1;
  std::uint64_t n = 0;
  if (!get_varint(b, pos, n)) {
    return damaged("truncated header");
  }
  // A count beyond what the bytes can hold is damage, not a reason to reserve memory.
  if (n > (b.size() - pos) / min_entry_bytes) {
    return damaged("more entries than bytes");
  }
  // Reserved whole, so each entry is decoded in place and `last` (the previous one) stays put.
  out.reserve(static_cast<std::size_t>(n));
  const blame_entry *last = nullptr;
  constexpr auto max = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  for (std::uint64_t i = 0; i < n; ++i) {
    blame_entry &e = out.emplace_back();
    std::uint64_t thread = 0;
    std::uint64_t culprit = 0;
    if (!get_varint(b, pos, thread) || !get_varint(b, pos, culprit) || pos >= b.size()) {
      return damaged("truncated entry");
    }
    bool new_thread = true;
    if (last == nullptr) {
      e.thread_id = unzigzag(thread);
    } else {
      if (last->thread_id < 0 || thread > max - static_cast<std::uint64_t>(last->thread_id)) {
        return damaged("thread ids out of order");
      }
      e.thread_id = static_cast<std::int64_t>(static_cast<std::uint64_t>(last->thread_id) + thread);
      new_thread = thread != 0;
    }
    if (new_thread) {
      e.culprit_id = unzigzag(culprit);
    } else {
      if (culprit == 0 || last->culprit_id < 0 ||
          culprit > max - static_cast<std::uint64_t>(last->culprit_id)) {
        return damaged("culprit ids out of order");
      }
      e.culprit_id =
          static_cast<std::int64_t>(static_cast<std::uint64_t>(last->culprit_id) + culprit);
    }
    if (e.thread_id < 0 || e.culprit_id < 0) {
      return damaged("negative id"); // ids are rowids: the builder writes none
    }
    const std::uint8_t flags = b[pos++];
    if ((flags & 0x80U) != 0 ||
        ((flags & same_sched_bit) != 0 && (last == nullptr || (flags & 0x1FU) != 0))) {
      return damaged("bad flags");
    }
    std::uint64_t v[3] = {};
    for (auto &x : v) {
      if (!get_varint(b, pos, x)) {
        return damaged("truncated entry");
      }
    }
    e.wait_ns = unzigzag(v[0]);
    e.waits = unzigzag(v[1]);
    e.preempts = unzigzag(v[2]);
    if ((flags & same_sched_bit) != 0) {
      e.sched = last->sched;
    } else {
      for (std::size_t k = 0; k < e.sched.size(); ++k) {
        if ((flags & (1U << k)) == 0) {
          continue;
        }
        std::uint64_t x = 0;
        if (!get_varint(b, pos, x)) {
          return damaged("truncated entry");
        }
        e.sched[k] = unzigzag(x);
      }
    }
    if ((flags & approx_bit) != 0) {
      std::uint64_t x = 0;
      if (!get_varint(b, pos, x)) {
        return damaged("truncated entry");
      }
      e.approx_ns = unzigzag(x);
    }
    last = &e;
  }
  if (pos != b.size()) {
    return damaged("bytes after the last entry");
  }
  return {};
}

} // namespace rsched::store
