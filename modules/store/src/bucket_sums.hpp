#pragma once
// The 1-minute rollup's two big merges, summed as the writer writes (private to the store).
//
// At 10,000 threads a minute holds 600,000 thread_hist entries per metric and as many
// thread_blame rows; reading them back and grouping them by (comm, cgroup) in SQL took ~1 s of
// CPU a minute. The writer adds each row it writes to its minute's sums instead: per metric and
// (comm, cgroup) the count, total and histogram; per (comm, cgroup) of the waiting thread and
// (comm, cgroup, kind) of the culprit the wait, waits, preemptions and estimated wait; per
// (comm, cgroup) of the sleeper, waker group and state the sleep and count of thread_wakeup, and
// per (comm, cgroup) and kernel stack those of thread_blocked (packed tables since schema 18,
// read back through their virtual tables: five passes over the minute's packs). The rollup
// uses a bucket's sums only when they hold exactly the bucket's intervals: every raw interval of
// that boot and minute in the database was written and committed by this writer, and nothing
// overflowed or failed on the way (otherwise it reads the rows as before, which also reports
// any overflow). Sums are the same values SQL's sum() and hist_merge() give, so the rollup
// rows are identical either way (tests/store/bucket_sums_test.cpp compares them).
#include "rsched/base/result.hpp"
#include "rsched/stats/histogram.hpp"

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace rsched::store::detail {

// The start of the bucket of width w that holds t (floor, also before the epoch).
inline std::int64_t floor_to(std::int64_t t, std::int64_t w) {
  std::int64_t q = t / w;
  if (t % w != 0 && t < 0) {
    --q;
  }
  return q * w;
}

// a += b as SQLite's sum() does it: false past the 64-bit range (a is then unspecified).
inline bool add_checked(std::int64_t &a, std::int64_t b) {
  return !__builtin_add_overflow(a, b, &a);
}

// One merged thread_hist value: sum(count), sum(total), hist_merge(hist), with hist_merge's
// checks (one layout per group, sample counts within 64 bits). The rollup from the rows adds
// blobs, the writer's sums add the histograms it writes; the same sums either way.
// latency_fine rows are summed apart (`fine`, allocated at the first): the sum is fine while every
// row was, else latency (encoded(), as hist_merge).
struct hist_sum {
  std::int64_t count = 0;
  std::int64_t total = 0;
  stats::histogram hist{};                     // rows of every layout but latency_fine
  std::unique_ptr<stats::fine_histogram> fine; // latency_fine rows, if any
  std::uint64_t samples = 0;                   // sum of hist's and fine's slots
  bool any = false;                            // hist.kind is set (coarse_layout of the rows)
  bool coarse_rows = false;                    // a row of hist's layout was added
  // The merged blob: the fine sum when every row was latency_fine, else hist with the fine part
  // coarsened into it.
  [[nodiscard]] std::vector<std::uint8_t> encoded() const;
  // Adds a row from its histogram blob, bucket by bucket as it is decoded (decode's checks,
  // hist_merge's messages). An error leaves the sum half-added: the caller fails the bucket.
  result<void> add(std::int64_t c, std::int64_t t, std::span<const std::uint8_t> blob);
  // Adds a row from its histogram (only its `spans` may hold counts); false where add(blob)
  // would fail.
  bool add(std::int64_t c, std::int64_t t, const stats::histogram &h,
           stats::span_mask spans = stats::all_spans);
};

class bucket_sums {
public:
  using hist_sum = detail::hist_sum;
  struct blame_sum {
    std::int64_t wait_ns = 0;
    std::int64_t waits = 0;
    std::int64_t preempts = 0;
    std::int64_t approx_ns = 0; // schema v11
  };
  // thread_wakeup's and thread_blocked's sums.
  struct sleep_sum {
    std::int64_t sleep_ns = 0;
    std::int64_t count = 0;
  };
  struct culprit_group {
    std::string comm;
    std::string cgroup;
    int kind = 0;
    auto operator<=>(const culprit_group &) const = default;
  };
  // A (comm, cgroup) of a thread.
  using group = std::pair<std::string, std::string>;

  struct bucket {
    std::int64_t start_ns = 0;
    std::string boot_id;
    std::vector<std::int64_t> intervals; // committed, in the order written (ascending ids)
    bool broken = false;                 // not to be used: the rollup reads the rows
    std::vector<group> groups;           // by index
    std::vector<culprit_group> culprits; // by index
    std::map<std::pair<int, std::uint32_t>, hist_sum> hists;            // (metric id, group)
    std::map<std::pair<std::uint32_t, std::uint32_t>, blame_sum> blame; // (group, culprit)
    // (group, waker's culprit group, state)
    std::map<std::tuple<std::uint32_t, std::uint32_t, std::int64_t>, sleep_sum> wakeup;
    std::map<std::pair<std::uint32_t, std::int64_t>, sleep_sum> blocked; // (group, kstack id)

    // Every thread identity with a row in the bucket (thread_hist, thread_blame, thread_wakeup,
    // thread_blocked), and every culprit identity with a thread_blame or thread_wakeup row (the
    // keys; the values are private).
    [[nodiscard]] const std::unordered_map<std::int64_t, std::uint32_t> &thread_ids() const {
      return group_of_thread;
    }
    [[nodiscard]] const std::unordered_map<std::int64_t, std::uint32_t> &culprit_ids() const {
      return group_of_culprit;
    }

  private:
    friend class bucket_sums;
    std::map<group, std::uint32_t> group_index;
    std::map<culprit_group, std::uint32_t> culprit_index;
    std::unordered_map<std::int64_t, std::uint32_t> group_of_thread;  // thread identity id
    std::unordered_map<std::int64_t, std::uint32_t> group_of_culprit; // culprit identity id
    // Per metric id (below last_hist.size()), the group of its latest sum and the sum: a
    // thread's metrics come one after the other, most of a group's threads in a row.
    struct last {
      std::uint32_t group = 0;
      hist_sum *sum = nullptr;
    };
    std::array<last, 16> last_hist{};
  };

  explicit bucket_sums(std::int64_t width_ns) : width_(width_ns) {}

  // The interval being written: its rows are added to the bucket of its minute (and boot).
  void begin(std::int64_t interval_id, std::string_view boot_id, std::int64_t start_ns);
  // One thread_hist row of the interval (thread identity id, its comm and cgroup).
  void add_hist(int metric, std::int64_t thread, const std::string &comm, const std::string &cgroup,
                std::int64_t count, std::int64_t total, const stats::histogram &h,
                stats::span_mask spans = stats::all_spans);
  // The same from the row's blob (a latency_fine one: hist_sum keeps those apart).
  void add_hist_blob(int metric, std::int64_t thread, const std::string &comm,
                     const std::string &cgroup, std::int64_t count, std::int64_t total,
                     std::span<const std::uint8_t> blob);
  // One thread_blame row of the interval.
  // (the culprit's comm, cgroup and kind: its rollup group, read when the culprit is new)
  void add_blame(std::int64_t thread, const std::string &comm, const std::string &cgroup,
                 std::int64_t culprit, std::string_view culprit_comm,
                 std::string_view culprit_cgroup, int kind, std::int64_t wait_ns,
                 std::int64_t waits, std::int64_t preempts, std::int64_t approx_ns);
  // One thread_wakeup row of the interval (the waker's culprit identity, comm, cgroup, kind).
  void add_wakeup(std::int64_t thread, const std::string &comm, const std::string &cgroup,
                  std::int64_t waker, std::string_view waker_comm, std::string_view waker_cgroup,
                  int kind, std::int64_t state, std::int64_t sleep_ns, std::int64_t count);
  // One thread_blocked row of the interval.
  void add_blocked(std::int64_t thread, const std::string &comm, const std::string &cgroup,
                   std::int64_t stack, std::int64_t sleep_ns, std::int64_t count);
  // The interval's transaction committed / failed (its bucket is not used then).
  void commit();
  void discard();

  // The sums of bucket [start_ns, start_ns + width) of a boot, when they hold exactly the
  // intervals `ids` (ascending); nullptr otherwise.
  [[nodiscard]] const bucket *exact(std::int64_t start_ns, std::string_view boot_id,
                                    const std::vector<std::int64_t> &ids) const;
  // Forgets the buckets that start before `ns` (rolled up).
  void drop_before(std::int64_t ns);
  [[nodiscard]] std::size_t buckets() const { return buckets_.size(); }

private:
  std::uint32_t group_of(bucket &b, std::int64_t thread, const std::string &comm,
                         const std::string &cgroup);
  std::uint32_t culprit_of(bucket &b, std::int64_t culprit, std::string_view comm,
                           std::string_view cgroup, int kind);
  // The current bucket's sum of (metric, the thread's group); nullptr when there is none or it
  // is broken.
  hist_sum *hist_slot(int metric, std::int64_t thread, const std::string &comm,
                      const std::string &cgroup);
  std::int64_t width_;
  std::vector<std::unique_ptr<bucket>> buckets_; // a few: the current minute and unbuilt ones
  bucket *cur_ = nullptr;
  std::int64_t cur_interval_ = 0;
  // At most this many buckets are kept (the rollup builds a minute once the next one starts;
  // a backlog past this is rolled up from the rows).
  static constexpr std::size_t max_buckets = 4;
};

} // namespace rsched::store::detail
