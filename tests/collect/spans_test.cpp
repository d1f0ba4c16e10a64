// Issue 16, sixth pass: a value's histogram is walked only in the spans that may hold counts
// (metrics::value::spans), the tracker writes each delta over the old baseline instead of a new
// value, and a record's blame is read slot by slot. Each is checked here against the dense,
// copying computation it replaces, on random data.
#include "rsched/collect/delta.hpp"
#include "rsched/stats/encoding.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <map>
#include <random>
#include <vector>

using namespace rsched;
using metrics::id;

namespace {

// A value whose counts sit in a few random spans, `spans` marking them (or every span).
metrics::value random_value(std::mt19937_64 &rng, stats::layout l, bool exact_spans) {
  metrics::value v;
  v.hist.kind = l;
  v.spans = exact_spans ? 0 : metrics::all_spans;
  const std::size_t n = stats::slot_count(l);
  const int buckets = static_cast<int>(rng() % 5);
  for (int b = 0; b < buckets; ++b) {
    const std::size_t slot = rng() % n;
    const std::uint64_t c = 1 + rng() % 1000;
    v.hist.slots[slot] += c;
    v.count += c;
    v.total += c * (slot + 1) * 977;
    v.spans = static_cast<metrics::span_mask>(v.spans | metrics::span_bit(slot));
  }
  return v;
}

// cur = prev plus a few more counts, or (reset) a value unrelated to prev.
metrics::value grown(std::mt19937_64 &rng, const metrics::value &prev, bool reset) {
  if (reset) {
    return random_value(rng, prev.hist.kind, true);
  }
  metrics::value cur = prev;
  const std::size_t n = stats::slot_count(prev.hist.kind);
  const int more = static_cast<int>(rng() % 4);
  for (int b = 0; b < more; ++b) {
    const std::size_t slot = rng() % n;
    cur.hist.slots[slot] += 1 + rng() % 50;
    cur.count += 1;
    cur.total += slot * 1000;
    cur.spans = static_cast<metrics::span_mask>(cur.spans | metrics::span_bit(slot));
  }
  return cur;
}

// The dense delta, as the recorder computed it before spans: field by field, the histogram
// whole from cur when any bucket went down.
metrics::value dense_delta(const metrics::value &cur, const metrics::value &prev) {
  const auto sub = [](std::uint64_t c, std::uint64_t p) { return c >= p ? c - p : c; };
  metrics::value d;
  d.count = sub(cur.count, prev.count);
  d.total = sub(cur.total, prev.total);
  d.hist = stats::delta(cur.hist, prev.hist);
  return d;
}

// Every non-zero slot of v lies in one of its spans.
bool spans_cover(const metrics::value &v) {
  for (std::size_t s = 0; s < stats::max_slots; ++s) {
    if (v.hist.slots[s] != 0 && (v.spans & metrics::span_bit(s)) == 0) {
      return false;
    }
  }
  return true;
}

} // namespace

TEST_CASE("a value's delta over its spans equals the dense delta, in place or not",
          "[collect][spans]") {
  std::mt19937_64 rng(16);
  for (int i = 0; i < 4000; ++i) {
    const auto l = i % 3 == 0 ? stats::layout::depth : stats::layout::latency;
    const metrics::value prev = random_value(rng, l, i % 5 != 0);
    const metrics::value cur = grown(rng, prev, i % 7 == 0);
    const metrics::value want = dense_delta(cur, prev);

    // Into a value that held other counts (a recycled block: its spans say where).
    metrics::value d = random_value(rng, l, true);
    metrics::delta_into(d, cur, prev);
    INFO("case " << i);
    CHECK(d == want);
    CHECK(spans_cover(d));
    // Over the baseline itself (the tracker's way).
    metrics::value p = prev;
    metrics::delta_into(p, cur, p);
    CHECK(p == want);
    CHECK(spans_cover(p));
    CHECK(p.empty() == want.empty());
  }
}

TEST_CASE("values add and test for emptiness over their spans", "[collect][spans]") {
  std::mt19937_64 rng(17);
  for (int i = 0; i < 2000; ++i) {
    const metrics::value a = random_value(rng, stats::layout::latency, true);
    const metrics::value b = random_value(rng, stats::layout::latency, i % 2 == 0);
    metrics::value sum = a;
    metrics::add(sum, b);
    metrics::value dense;
    dense.count = a.count + b.count;
    dense.total = a.total + b.total;
    dense.hist = a.hist;
    REQUIRE(stats::merge_into(dense.hist, b.hist));
    CHECK(sum == dense);
    CHECK(spans_cover(sum));
    CHECK(sum.empty() == (sum.count == 0 && sum.hist.empty()));
  }
  metrics::value s;
  s.add_sample(70'000);
  CHECK(s.count == 1);
  CHECK(s.total == 70'000);
  CHECK(s.hist.total() == 1);
  CHECK(spans_cover(s));
}

TEST_CASE("a histogram's blob from its spans is the blob of the whole histogram",
          "[collect][spans]") {
  std::mt19937_64 rng(18);
  std::vector<std::uint8_t> got;
  for (int i = 0; i < 2000; ++i) {
    const auto l = i % 2 == 0 ? stats::layout::depth : stats::layout::latency;
    metrics::value v = random_value(rng, l, true);
    stats::encode_into(v.hist, got, v.spans);
    CHECK(got == stats::encode(v.hist));
    stats::encode_into(v.hist, got, metrics::all_spans);
    CHECK(got == stats::encode(v.hist));
  }
}

TEST_CASE("the tracker's in-place deltas equal the copying deltas of every thread",
          "[collect][spans]") {
  // 300 threads over 40 partial and full reads: some unchanged (not listed), some new, some
  // exiting, counters of a few reset behind the same key; every read's deltas must be the
  // per-thread collect::delta of its counters against the thread's previous ones.
  std::mt19937_64 rng(19);
  collect::delta_tracker tr;
  std::map<collect::thread_key, collect::thread_counters> last; // what the tracker should hold
  std::map<collect::thread_key, collect::thread_counters> now;
  for (std::uint32_t tid = 1; tid <= 300; ++tid) {
    collect::thread_counters c;
    c.m[id::sched_delay] = random_value(rng, stats::layout::latency, true);
    if (tid % 3 == 0) {
      c.m[id::runq_depth] = random_value(rng, stats::layout::depth, true);
    }
    c.migrations.count = tid;
    now[{tid, 5}] = c;
  }
  for (int read = 0; read < 40; ++read) {
    collect::snapshot s;
    s.full = read % 4 == 0;
    std::map<collect::thread_key, collect::thread_counters> want;
    for (auto &[key, c] : now) {
      const bool listed = s.full || rng() % 3 != 0;
      if (read > 0 && listed) {
        const bool reset = rng() % 50 == 0;
        c.m[id::sched_delay] = grown(rng, c.m[id::sched_delay], reset);
        if (c.m.has(1) || rng() % 10 == 0) {
          c.m[id::runq_depth] = grown(rng, c.m[id::runq_depth], false);
        }
        c.migrations.count += rng() % 2;
      }
      if (!listed) {
        continue;
      }
      collect::thread_sample t;
      t.key = key;
      t.tgid = key.tid;
      t.comm = "w" + std::to_string(key.tid % 7);
      t.c = c;
      s.live.push_back(std::move(t));
      const auto it = last.find(key);
      auto d = collect::delta(c, it == last.end() ? collect::thread_counters{} : it->second);
      if (!d.empty()) {
        want[key] = std::move(d);
      }
      last[key] = c;
    }
    const auto got = tr.advance(std::move(s));
    INFO("read " << read);
    REQUIRE(got.threads.size() == want.size());
    for (const auto &t : got.threads) {
      const auto it = want.find(t.key);
      REQUIRE(it != want.end());
      CHECK(t.c == it->second);
      for (std::size_t i = 0; i < metrics::thread_set::n; ++i) {
        CHECK(spans_cover(t.c.m.at(i)));
      }
    }
  }
}

TEST_CASE("a record's blame read slot by slot equals the whole struct's", "[collect][spans]") {
  std::mt19937_64 rng(20);
  for (int i = 0; i < 500; ++i) {
    rsched_blame b{};
    for (std::size_t k = 0; k < RSCHED_BLAME_SLOTS; ++k) {
      if (rng() % 3 == 0) {
        continue; // never used
      }
      b.gen[k] = static_cast<__u16>(1 + rng() % 5);
      b.epoch[k] = static_cast<__u16>(rng() % 8);
      b.tgid[k] = static_cast<__u32>(rng());
      b.cpu[k] = static_cast<__u16>(rng() % 4);
      b.policy[k] = static_cast<__u8>(rng() % 3);
      b.prio1[k] = static_cast<__u8>(rng() % 140);
      b.slot[k].cgroup_id = rng();
      std::memcpy(b.slot[k].comm, "culprit-name-xx", 15);
      b.slot[k].wait_ns = rng();
      b.slot[k].waits = rng() % 100;
      b.slot[k].preempts = rng() % 10;
    }
    b.idle_ns = rng();
    b.unknown_ns = rng();
    b.other_ns = rng();
    b.waiter_prio1 = 121;
    std::vector<char> bytes(1 + sizeof(b));
    std::memcpy(bytes.data() + 1, &b, sizeof(b)); // at an odd address
    for (const std::uint32_t epoch : {0U, 6U, 9U}) {
      collect::blame_state want;
      collect::blame_state got;
      collect::from_abi(b, want, epoch);
      collect::blame_from_record(bytes.data() + 1, got, epoch);
      CHECK(got == want);
      CHECK(got.stale == want.stale);
    }
  }
}

TEST_CASE("blame read with its slots in use marked gives the deltas of every slot walked",
          "[collect][spans][blame]") {
  // The same reads twice: as parsed (blame_slots::live: the slots in use) and with every slot
  // marked live (the walk over all sixteen, as before). Slots take new culprits, grow, go stale
  // for a few epochs and come back.
  std::mt19937_64 rng(21);
  collect::delta_tracker narrow;
  collect::delta_tracker wide;
  std::vector<rsched_blame> kernel(50);
  for (std::uint32_t epoch = 1; epoch <= 60; ++epoch) {
    collect::snapshot a;
    a.full = epoch % 10 == 1;
    for (std::size_t t = 0; t < kernel.size(); ++t) {
      rsched_blame &b = kernel[t];
      const int touches = static_cast<int>(rng() % 3);
      for (int k = 0; k < touches; ++k) {
        const std::size_t i = rng() % 6; // a few slots per thread, as on a real machine
        // The kernel gives a slot away only when its counts were read two epochs ago.
        if (b.gen[i] == 0 || (rng() % 8 == 0 && static_cast<__u16>(epoch - b.epoch[i]) >= 2)) {
          b.gen[i] = static_cast<__u16>(b.gen[i] + 1);
          b.tgid[i] = static_cast<__u32>(100 + rng() % 20);
          b.slot[i].wait_ns = 0;
          b.slot[i].waits = 0;
          b.slot[i].preempts = 0;
        }
        b.epoch[i] = static_cast<__u16>(epoch);
        b.slot[i].wait_ns += 1 + rng() % 5000;
        b.slot[i].waits += 1;
        b.slot[i].preempts += rng() % 2;
      }
      b.idle_ns += rng() % 100;
      if (touches == 0 && !a.full && rng() % 2 == 0) {
        continue; // not listed
      }
      collect::thread_sample s;
      s.key = {static_cast<std::uint32_t>(t + 1), 3};
      s.comm = "b";
      s.c.m[id::sched_delay].count = epoch;
      collect::from_abi(b, s.c.blame, epoch);
      a.live.push_back(std::move(s));
    }
    collect::snapshot w = a;
    for (auto &s : w.live) {
      (void)s.c.blame.slots.begin(); // marks every slot
      REQUIRE(s.c.blame.slots.live() == 0xFFFF);
    }
    const auto got = narrow.advance(std::move(a));
    const auto want = wide.advance(std::move(w));
    INFO("epoch " << epoch);
    REQUIRE(got.threads.size() == want.threads.size());
    for (std::size_t i = 0; i < got.threads.size(); ++i) {
      CHECK(got.threads[i].key == want.threads[i].key);
      CHECK(got.threads[i].c.blame == want.threads[i].c.blame);
    }
  }
}
