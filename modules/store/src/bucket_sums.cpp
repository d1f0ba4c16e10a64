#include "bucket_sums.hpp"

#include "rsched/stats/encoding.hpp"

#include <algorithm>

namespace rsched::store::detail {

result<void> hist_sum::add(std::int64_t c, std::int64_t t, std::span<const std::uint8_t> blob) {
  if (!add_checked(count, c) || !add_checked(total, t)) {
    return make_error("integer overflow");
  }
  const bool is_fine =
      !blob.empty() && blob[0] == static_cast<std::uint8_t>(stats::layout::latency_fine);
  if (!blob.empty() && stats::valid_layout(blob[0])) {
    const auto kind = stats::coarse_layout(static_cast<stats::layout>(blob[0]));
    if (!any) {
      hist.kind = kind;
      any = true;
    } else if (hist.kind != kind) {
      return make_error("hist_merge: histograms of different layouts");
    }
    if (is_fine && !fine) {
      fine = std::make_unique<stats::fine_histogram>();
    }
    coarse_rows = coarse_rows || !is_fine;
  }
  // No slot, fine or coarsened, can wrap while the sum of all samples does not.
  std::uint64_t *into = is_fine ? fine->slots.data() : hist.slots.data();
  auto r = stats::for_each_stored_bucket(
      blob, [this, into](std::size_t i, std::uint64_t n) -> result<void> {
        if (samples + n < n) {
          return make_error("sample counts overflow 64 bits");
        }
        into[i] += n;
        samples += n;
        return {};
      });
  if (!r) {
    return make_error("hist_merge: " + r.err().msg);
  }
  return {};
}

std::vector<std::uint8_t> hist_sum::encoded() const {
  if (fine && !coarse_rows) {
    return stats::encode(*fine);
  }
  if (!fine) {
    return stats::encode(hist);
  }
  stats::histogram h = hist;
  (void)stats::merge_into(h, *fine); // hist.kind is latency: the layouts' check passed
  return stats::encode(h);
}

bool hist_sum::add(std::int64_t c, std::int64_t t, const stats::histogram &h,
                   stats::span_mask spans) {
  if (!add_checked(count, c) || !add_checked(total, t)) {
    return false;
  }
  if (!any) {
    hist.kind = h.kind;
    any = true;
  } else if (hist.kind != h.kind) {
    return false;
  }
  coarse_rows = true;
  // No slot can pass 64 bits unless the sum of all slots does (each is at most the sum): one
  // check, then a branch-free add. The sum of h's own slots may wrap only if a slot is huge.
  // Slots past the layout's and outside `spans` are zero.
  std::uint64_t more = 0;
  bool wrapped = false;
  stats::for_each_span(spans, [&](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) {
      wrapped |= __builtin_add_overflow(more, h.slots[i], &more);
    }
  });
  if (wrapped || samples + more < more) {
    return false;
  }
  samples += more;
  stats::for_each_span(spans, [&](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) {
      hist.slots[i] += h.slots[i];
    }
  });
  return true;
}

void bucket_sums::begin(std::int64_t interval_id, std::string_view boot_id, std::int64_t start_ns) {
  const std::int64_t b = floor_to(start_ns, width_);
  cur_ = nullptr;
  for (auto &k : buckets_) {
    if (k->start_ns == b && k->boot_id == boot_id) {
      cur_ = k.get();
    }
  }
  if (cur_ == nullptr) {
    if (buckets_.size() >= max_buckets) {
      buckets_.erase(buckets_.begin()); // the oldest: its rollup reads the rows
    }
    auto k = std::make_unique<bucket>();
    k->start_ns = b;
    k->boot_id = boot_id;
    cur_ = buckets_.emplace_back(std::move(k)).get();
  }
  cur_interval_ = interval_id;
  cur_->last_hist = {};
}

std::uint32_t bucket_sums::group_of(bucket &b, std::int64_t thread, const std::string &comm,
                                    const std::string &cgroup) {
  auto [it, fresh] = b.group_of_thread.try_emplace(thread, 0);
  if (fresh) {
    auto [g, added] =
        b.group_index.try_emplace(group{comm, cgroup}, static_cast<std::uint32_t>(b.groups.size()));
    if (added) {
      b.groups.push_back(g->first);
    }
    it->second = g->second;
  }
  return it->second;
}

hist_sum *bucket_sums::hist_slot(int metric, std::int64_t thread, const std::string &comm,
                                 const std::string &cgroup) {
  if (cur_ == nullptr || cur_->broken) {
    return nullptr;
  }
  bucket &b = *cur_;
  const std::uint32_t g = group_of(b, thread, comm, cgroup);
  if (metric >= 0 && static_cast<std::size_t>(metric) < b.last_hist.size()) {
    auto &l = b.last_hist[static_cast<std::size_t>(metric)];
    if (l.sum == nullptr || l.group != g) {
      l.group = g;
      l.sum = &b.hists[{metric, g}]; // map nodes stay where they are
    }
    return l.sum;
  }
  return &b.hists[{metric, g}];
}

void bucket_sums::add_hist(int metric, std::int64_t thread, const std::string &comm,
                           const std::string &cgroup, std::int64_t count, std::int64_t total,
                           const stats::histogram &h, stats::span_mask spans) {
  hist_sum *s = hist_slot(metric, thread, comm, cgroup);
  if (s != nullptr && !s->add(count, total, h, spans)) {
    cur_->broken = true; // the rollup from the rows reports the error
  }
}

void bucket_sums::add_hist_blob(int metric, std::int64_t thread, const std::string &comm,
                                const std::string &cgroup, std::int64_t count, std::int64_t total,
                                std::span<const std::uint8_t> blob) {
  hist_sum *s = hist_slot(metric, thread, comm, cgroup);
  if (s != nullptr && !s->add(count, total, blob)) {
    cur_->broken = true; // the rollup from the rows reports the error
  }
}

std::uint32_t bucket_sums::culprit_of(bucket &b, std::int64_t culprit, std::string_view comm,
                                      std::string_view cgroup, int kind) {
  auto [c, fresh] = b.group_of_culprit.try_emplace(culprit, 0);
  if (fresh) {
    culprit_group who{std::string(comm), std::string(cgroup), kind};
    auto [k, added] =
        b.culprit_index.try_emplace(who, static_cast<std::uint32_t>(b.culprits.size()));
    if (added) {
      b.culprits.push_back(who);
    }
    c->second = k->second;
  }
  return c->second;
}

void bucket_sums::add_blame(std::int64_t thread, const std::string &comm, const std::string &cgroup,
                            std::int64_t culprit, std::string_view culprit_comm,
                            std::string_view culprit_cgroup, int kind, std::int64_t wait_ns,
                            std::int64_t waits, std::int64_t preempts, std::int64_t approx_ns) {
  if (cur_ == nullptr || cur_->broken) {
    return;
  }
  bucket &b = *cur_;
  const std::uint32_t g = group_of(b, thread, comm, cgroup);
  blame_sum &s = b.blame[{g, culprit_of(b, culprit, culprit_comm, culprit_cgroup, kind)}];
  if (!add_checked(s.wait_ns, wait_ns) || !add_checked(s.waits, waits) ||
      !add_checked(s.preempts, preempts) || !add_checked(s.approx_ns, approx_ns)) {
    b.broken = true;
  }
}

void bucket_sums::add_wakeup(std::int64_t thread, const std::string &comm,
                             const std::string &cgroup, std::int64_t waker,
                             std::string_view waker_comm, std::string_view waker_cgroup, int kind,
                             std::int64_t state, std::int64_t sleep_ns, std::int64_t count) {
  if (cur_ == nullptr || cur_->broken) {
    return;
  }
  bucket &b = *cur_;
  const std::uint32_t g = group_of(b, thread, comm, cgroup);
  sleep_sum &s = b.wakeup[{g, culprit_of(b, waker, waker_comm, waker_cgroup, kind), state}];
  if (!add_checked(s.sleep_ns, sleep_ns) || !add_checked(s.count, count)) {
    b.broken = true;
  }
}

void bucket_sums::add_blocked(std::int64_t thread, const std::string &comm,
                              const std::string &cgroup, std::int64_t stack, std::int64_t sleep_ns,
                              std::int64_t count) {
  if (cur_ == nullptr || cur_->broken) {
    return;
  }
  bucket &b = *cur_;
  sleep_sum &s = b.blocked[{group_of(b, thread, comm, cgroup), stack}];
  if (!add_checked(s.sleep_ns, sleep_ns) || !add_checked(s.count, count)) {
    b.broken = true;
  }
}

void bucket_sums::commit() {
  if (cur_ != nullptr) {
    cur_->intervals.push_back(cur_interval_);
    cur_->last_hist = {};
  }
  cur_ = nullptr;
}

void bucket_sums::discard() {
  if (cur_ != nullptr) {
    cur_->broken = true;
    cur_->last_hist = {};
  }
  cur_ = nullptr;
}

const bucket_sums::bucket *bucket_sums::exact(std::int64_t start_ns, std::string_view boot_id,
                                              const std::vector<std::int64_t> &ids) const {
  for (const auto &k : buckets_) {
    if (k->start_ns == start_ns && k->boot_id == boot_id) {
      if (k->broken || k.get() == cur_) {
        return nullptr;
      }
      std::vector<std::int64_t> mine = k->intervals;
      std::sort(mine.begin(), mine.end());
      return mine == ids ? k.get() : nullptr;
    }
  }
  return nullptr;
}

void bucket_sums::drop_before(std::int64_t ns) {
  std::erase_if(buckets_, [&](const std::unique_ptr<bucket> &k) {
    return k->start_ns < ns && k.get() != cur_;
  });
}

} // namespace rsched::store::detail
