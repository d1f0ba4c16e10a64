// The task iterator's compact records (sched_abi.h: rsched_iter_record_size) parse into the same
// samples as whole records whose unselected parts are zero.
#include "rsched/collect/snapshot.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

using namespace rsched::collect;

namespace {

constexpr std::uint64_t all_used = ~0ULL;

// Histograms of a state and their first `used` bit, in record order.
struct hist_ref {
  std::uint64_t *words; // count, total, slots
  std::size_t slots;
  unsigned base;
  std::uint32_t group;
};

std::vector<hist_ref> hists(rsched_task_state &st) {
  const auto w = [](auto &h) { return reinterpret_cast<std::uint64_t *>(&h); };
  return {{w(st.delay), RSCHED_HIST_SLOTS, RSCHED_USED_DELAY, RSCHED_G_LATENCY},
          {w(st.depth), RSCHED_DEPTH_SLOTS, RSCHED_USED_DEPTH, RSCHED_G_LATENCY},
          {w(st.slice_vol), RSCHED_HIST_SLOTS, RSCHED_USED_SLICE_VOL, RSCHED_G_SLICE},
          {w(st.slice_invol), RSCHED_HIST_SLOTS, RSCHED_USED_SLICE_INVOL, RSCHED_G_SLICE},
          {w(st.sleep), RSCHED_HIST_SLOTS, RSCHED_USED_SLEEP, RSCHED_G_SLEEP},
          {w(st.waking), RSCHED_HIST_SLOTS, RSCHED_USED_WAKING, RSCHED_G_WAKING}};
}

bool slot_used(const hist_ref &h, std::size_t slot, std::uint64_t used) {
  return (used >> (h.base + slot / RSCHED_USED_SPAN) & 1U) != 0;
}

// A whole record with every field set to something distinct; the parts outside `groups` zero
// (the kernel never fills them in such a run), and so are the histogram slots whose `used` bit
// is clear (the kernel sets the bit with the first count).
rsched_task_record make_record(std::uint32_t tid, std::uint32_t groups, const char *comm,
                               std::uint64_t used = all_used) {
  rsched_task_record r{};
  r.id.tid = tid;
  r.id.tgid = tid + 1;
  r.id.start_time = 1000ULL * tid + 7;
  r.id.cgroup_id = 4242;
  std::memcpy(r.id.comm, comm, std::min(std::strlen(comm), sizeof(r.id.comm))); // no NUL at 16
  std::uint64_t v = tid * 100000ULL;
  const auto fill = [&v](auto &s) {
    s.count = ++v;
    std::memcpy(&s.total_ns, &++v, sizeof(v)); // total_ns or total: the second u64
    for (auto &slot : s.slots) {
      slot = ++v;
    }
  };
  const auto fill_depth = [&v](rsched_depth_stats &s) {
    s.count = ++v;
    s.total = ++v;
    for (auto &slot : s.slots) {
      slot = ++v;
    }
  };
  if ((groups & RSCHED_G_LATENCY) != 0) {
    fill(r.st.delay);
    fill_depth(r.st.depth);
    for (std::uint32_t i = 0; i < RSCHED_HIST_FINE_TAIL_SLOTS; ++i) { // 32-bit: near their wrap
      r.st.delay_tail.slots[i] =
          (used & rsched_tail_bit(i)) != 0 ? static_cast<std::uint32_t>(0xFFFFFF00U + ++v) : 0;
    }
  }
  if ((groups & RSCHED_G_SLICE) != 0) {
    fill(r.st.slice_vol);
    fill(r.st.slice_invol);
  }
  if ((groups & RSCHED_G_SLEEP) != 0) {
    fill(r.st.sleep);
  }
  if ((groups & RSCHED_G_WAKING) != 0) {
    fill(r.st.waking);
  }
  if ((groups & RSCHED_G_MIGRATION) != 0) {
    r.st.migrations = ++v;
    r.st.cross_ccx = ++v;
    r.st.cross_numa = ++v;
  }
  if ((groups & RSCHED_G_PERF) != 0) {
    for (auto &c : r.st.counters) {
      c = ++v;
    }
  }
  r.st.used = used;
  for (const auto &h : hists(r.st)) {
    for (std::size_t i = 0; i < h.slots; ++i) {
      if (!slot_used(h, i, used)) {
        h.words[2 + i] = 0;
      }
    }
  }
  // BPF-internal fields are never part of a compact record.
  r.st.enqueue_ns = r.st.oncpu_ns = r.st.sleep_ns = r.st.waking_ns = 99;
  r.st.dirty = r.st.drained = 7;
  return r;
}

// Appends n bytes. Not inlined: inlined into a test case, GCC 12 -O2 tracks the vector's
// earlier size and reports a false -Warray-bounds on the growth.
[[gnu::noinline]] void append_bytes(std::vector<char> &out, const void *p, std::size_t n) {
  const auto *c = static_cast<const char *>(p);
  out.insert(out.end(), c, c + n);
}

// What dump_tasks writes for `r` in a run with `groups`; with `garble`, the slot groups whose
// `used` bit is clear hold garbage, as in the dirty-list drain's records (it skips them).
void append_compact(std::vector<char> &out, const rsched_task_record &whole, std::uint32_t groups,
                    bool garble = false) {
  rsched_task_record r = whole;
  if (garble) {
    for (std::uint32_t i = 0; i < RSCHED_HIST_FINE_TAIL_SLOTS; ++i) {
      if ((r.st.used & rsched_tail_bit(i)) == 0) {
        r.st.delay_tail.slots[i] = 0xABABABABU + i;
      }
    }
    for (const auto &h : hists(r.st)) {
      for (std::size_t i = 0; i < h.slots; ++i) {
        if (!slot_used(h, i, r.st.used)) {
          h.words[2 + i] = 0xABABABABABABABABULL + i;
        }
      }
    }
  }
  const auto put = [&out](const void *p, std::size_t n) { append_bytes(out, p, n); };
  // A run of the state from the field at `off` on (it spans several fields, as in the BPF
  // program's writes): addressed from the whole state, whose bounds the compiler then checks.
  const auto *st = reinterpret_cast<const char *>(&r.st);
  const auto put_state = [&](std::size_t off, std::size_t n) {
    REQUIRE(off + n <= sizeof(r.st));
    put(st + off, n);
  };
  put(&r.id, sizeof(r.id));
  put(&r.st.used, sizeof(r.st.used));
  if ((groups & RSCHED_G_LATENCY) != 0) {
    // delay and depth are one run of the state; the fine tail lies after wakeup (its own write)
    put_state(offsetof(rsched_task_state, delay),
              sizeof(rsched_delay_stats) + sizeof(rsched_depth_stats));
    put_state(offsetof(rsched_task_state, delay_tail), sizeof(rsched_fine_tail));
  }
  if ((groups & RSCHED_G_SLICE) != 0) {
    put_state(offsetof(rsched_task_state, slice_vol), RSCHED_ITER_SLICE_BYTES);
  }
  if ((groups & RSCHED_G_SLEEP) != 0) {
    put_state(offsetof(rsched_task_state, sleep), RSCHED_ITER_SLEEP_BYTES);
  }
  if ((groups & RSCHED_G_WAKING) != 0) {
    put_state(offsetof(rsched_task_state, waking), RSCHED_ITER_WAKING_BYTES);
  }
  if ((groups & RSCHED_G_MIGRATION) != 0) {
    put_state(offsetof(rsched_task_state, migrations), RSCHED_ITER_MIGRATION_BYTES);
  }
  if ((groups & RSCHED_G_PERF) != 0) {
    put_state(offsetof(rsched_task_state, counters), RSCHED_ITER_PERF_BYTES);
  }
}

bool same(const thread_sample &a, const thread_sample &b) {
  return a.key == b.key && a.tgid == b.tgid && a.cgroup_id == b.cgroup_id && a.comm == b.comm &&
         a.dead == b.dead && a.c == b.c;
}

} // namespace

TEST_CASE("compact iterator records parse like whole records, for every group set",
          "[collect][abi]") {
  const std::uint32_t all = RSCHED_G_LATENCY | RSCHED_G_SLICE | RSCHED_G_SLEEP | RSCHED_G_WAKING |
                            RSCHED_G_MIGRATION | RSCHED_G_PERF;
  for (std::uint32_t groups = 0; groups <= all; ++groups) {
    INFO("groups " << groups);
    std::vector<char> bytes(1, 'x'); // one byte in front: records at an odd address
    const auto a = make_record(10, groups, "worker");
    const auto b = make_record(11, groups, "0123456789abcdef"); // 16 bytes, no terminator
    append_compact(bytes, a, groups);
    append_compact(bytes, b, groups);
    REQUIRE(bytes.size() - 1 == 2 * rsched_iter_record_size(groups));
    std::vector<thread_sample> got;
    REQUIRE(parse_iter_records(std::span<const char>(bytes).subspan(1), groups, got));
    REQUIRE(got.size() == 2);
    CHECK(same(got[0], from_abi(a)));
    CHECK(same(got[1], from_abi(b)));
    CHECK(got[1].comm == "0123456789abcdef");
  }
}

TEST_CASE("slot groups without their used bit are taken as zero whatever the record holds",
          "[collect][abi]") {
  const std::uint32_t all = RSCHED_G_LATENCY | RSCHED_G_SLICE | RSCHED_G_SLEEP | RSCHED_G_WAKING |
                            RSCHED_G_MIGRATION | RSCHED_G_PERF;
  // None used, the first group of each histogram, alternate groups, all but the last group.
  for (const std::uint64_t used :
       {0ULL,
        (1ULL << RSCHED_USED_DELAY) | (1ULL << RSCHED_USED_DEPTH) |
            (1ULL << RSCHED_USED_SLICE_VOL) | (1ULL << RSCHED_USED_SLEEP),
        0x5555555555555555ULL, ~(1ULL << (RSCHED_USED_DEPTH - 1))}) {
    for (const std::uint32_t groups : {std::uint32_t{RSCHED_G_LATENCY}, all}) {
      INFO("used " << used << " groups " << groups);
      const auto rec = make_record(20, groups, "sparse", used);
      std::vector<char> bytes;
      append_compact(bytes, rec, groups, true);
      std::vector<thread_sample> got;
      REQUIRE(parse_iter_records(bytes, groups, got));
      REQUIRE(got.size() == 1);
      CHECK(same(got[0], from_abi(rec)));
    }
  }
}

TEST_CASE("the default groups' compact record is a third of a whole one", "[collect][abi]") {
  CHECK(rsched_iter_record_size(RSCHED_G_LATENCY) == 1944);
  CHECK(rsched_iter_record_size(RSCHED_G_LATENCY | RSCHED_G_MIGRATION) == 1968);
  CHECK(sizeof(rsched_task_record) == 6992);
}

TEST_CASE(
    "the scheduling delay's fine tail is read from a compact record in the groups whose bit is set",
    "[collect][abi]") {
  constexpr auto delay = rsched::metrics::id::sched_delay;
  // All of it, none, and a thread whose waits reached only the second and the last group of
  // RSCHED_TAIL_SPAN slots (8-128 ms, and the open top).
  constexpr std::uint64_t tail_mask = RSCHED_USED_TAIL_MASK;
  constexpr std::uint32_t span = RSCHED_TAIL_SPAN;
  constexpr std::uint32_t tail_slots = RSCHED_HIST_FINE_TAIL_SLOTS;
  const std::uint64_t some =
      (all_used & ~tail_mask) | rsched_tail_bit(span) | rsched_tail_bit(tail_slots - 1);
  for (const std::uint64_t used : {all_used, all_used & ~tail_mask, some}) {
    const bool with_tail = (used & tail_mask) != 0;
    INFO("used " << std::hex << used);
    const auto rec = make_record(30, RSCHED_G_LATENCY, "tail", used);
    std::vector<char> bytes;
    append_compact(bytes, rec, RSCHED_G_LATENCY, true); // a clear bit: its group is garbage
    std::vector<thread_sample> got;
    REQUIRE(parse_iter_records(bytes, RSCHED_G_LATENCY, got));
    REQUIRE(got.size() == 1);
    const auto &v = got[0].c.m[delay];
    REQUIRE((v.tail != nullptr) == with_tail);
    if (with_tail) {
      std::size_t nonzero = 0;
      for (std::size_t s = 0; s < v.tail->slots.size(); ++s) {
        CHECK(v.tail->slots[s] == rec.st.delay_tail.slots[s]); // zero where its bit is clear
        nonzero += v.tail->slots[s] != 0 ? 1U : 0U;
      }
      CHECK(nonzero == (used == some ? span + tail_slots % span : tail_slots));
    }
    CHECK(same(got[0], from_abi(rec))); // the whole record reads the same
  }
}

TEST_CASE("bytes that are not whole compact records are an error and append nothing",
          "[collect][abi]") {
  std::vector<char> bytes;
  append_compact(bytes, make_record(1, RSCHED_G_LATENCY, "a"), RSCHED_G_LATENCY);
  bytes.pop_back();
  std::vector<thread_sample> got;
  const auto r = parse_iter_records(bytes, RSCHED_G_LATENCY, got);
  REQUIRE_FALSE(r);
  CHECK(r.err().msg == "task iterator returned a partial record");
  CHECK(got.empty());
  // Read with the wrong group set, the same bytes do not divide either.
  bytes.push_back('\0');
  CHECK_FALSE(parse_iter_records(bytes, RSCHED_G_LATENCY | RSCHED_G_SLICE, got));
}
