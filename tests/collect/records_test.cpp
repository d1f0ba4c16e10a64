// The task iterator's compact records (sched_abi.h: rsched_iter_record_size) parse into the same
// samples as whole records whose unselected parts are zero.
#include "rsched/collect/snapshot.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <vector>

using namespace rsched::collect;

namespace {

// A whole record with every field set to something distinct; the parts outside `groups` zero
// (the kernel never fills them in such a run).
rsched_task_record make_record(std::uint32_t tid, std::uint32_t groups, const char *comm) {
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
  // BPF-internal fields are never part of a compact record.
  r.st.enqueue_ns = r.st.oncpu_ns = r.st.sleep_ns = r.st.waking_ns = 99;
  return r;
}

// What dump_tasks writes for `r` in a run with `groups`.
void append_compact(std::vector<char> &out, const rsched_task_record &r, std::uint32_t groups) {
  const auto put = [&out](const void *p, std::size_t n) {
    const auto *c = static_cast<const char *>(p);
    out.insert(out.end(), c, c + n);
  };
  put(&r.id, sizeof(r.id));
  if ((groups & RSCHED_G_LATENCY) != 0) {
    put(&r.st.delay, RSCHED_ITER_LATENCY_BYTES);
  }
  if ((groups & RSCHED_G_SLICE) != 0) {
    put(&r.st.slice_vol, RSCHED_ITER_SLICE_BYTES);
  }
  if ((groups & RSCHED_G_SLEEP) != 0) {
    put(&r.st.sleep, RSCHED_ITER_SLEEP_BYTES);
  }
  if ((groups & RSCHED_G_WAKING) != 0) {
    put(&r.st.waking, RSCHED_ITER_WAKING_BYTES);
  }
  if ((groups & RSCHED_G_MIGRATION) != 0) {
    put(&r.st.migrations, RSCHED_ITER_MIGRATION_BYTES);
  }
  if ((groups & RSCHED_G_PERF) != 0) {
    put(r.st.counters, RSCHED_ITER_PERF_BYTES);
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

TEST_CASE("the default groups' compact record is a third of a whole one", "[collect][abi]") {
  CHECK(rsched_iter_record_size(RSCHED_G_LATENCY) == 1192);
  CHECK(rsched_iter_record_size(RSCHED_G_LATENCY | RSCHED_G_MIGRATION) == 1216);
  CHECK(sizeof(rsched_task_record) == 3816);
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
