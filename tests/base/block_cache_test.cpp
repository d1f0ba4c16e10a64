// rsched::base::block_cache: freed blocks are reused by the thread that freed them, the cache is
// capped, and a thread's cache is freed when it ends (the sanitizer run checks for leaks).
#include "rsched/base/block_cache.hpp"

#include <catch2/catch.hpp>

#include <array>
#include <cstdint>
#include <set>
#include <thread>
#include <vector>

using namespace rsched::base;

namespace {
// A size no other code uses, so the counts below are this test's alone.
struct blob {
  std::array<std::uint64_t, 37> v{};
};
using cache = block_cache<sizeof(blob)>;
} // namespace

TEST_CASE("block_cache: a freed block is handed out again, value-initialised", "[base]") {
  const std::size_t before = cache::cached();
  void *first = nullptr;
  {
    auto p = make_cached<blob>();
    p->v[3] = 42;
    first = p.get();
  }
  CHECK(cache::cached() == before + 1);
  auto q = make_cached<blob>();
  CHECK(q.get() == first);
  CHECK(q->v[3] == 0); // a new object, not the old bytes
  CHECK(cache::cached() == before);
  auto r = make_cached<blob>(*q);
  CHECK(r.get() != q.get());
}

TEST_CASE("block_cache: holds at most the thread's cap of blocks", "[base]") {
  const std::size_t cap = GENERATE(std::size_t{4096}, std::size_t{10000});
  set_block_cache_cap(cap);
  std::vector<cached_ptr<blob>> many;
  for (std::size_t i = 0; i < cap + 100; ++i) {
    many.push_back(make_cached<blob>());
  }
  std::set<void *> distinct;
  for (const auto &p : many) {
    distinct.insert(p.get());
  }
  CHECK(distinct.size() == many.size());
  many.clear();
  CHECK(cache::cached() == cap);
  set_block_cache_cap(4096);
}

TEST_CASE("block_cache: blocks freed on another thread go to that thread's cache", "[base]") {
  std::vector<cached_ptr<blob>> made;
  for (int i = 0; i < 1000; ++i) {
    made.push_back(make_cached<blob>());
  }
  const std::size_t here = cache::cached();
  std::size_t there = 0;
  std::thread t([&] {
    made.clear(); // freed here; this thread's cache is freed when it ends
    there = cache::cached();
    auto again = make_cached<blob>(); // taken from this thread's cache
    there -= cache::cached();
  });
  t.join();
  CHECK(there == 1);
  CHECK(cache::cached() == here);
}

TEST_CASE("block_cache: a trim frees the blocks that stayed cached since the previous one",
          "[base]") {
  // Run on a thread of its own: its caches start empty, whatever the other tests left.
  std::thread([] {
    struct other {
      std::array<std::uint64_t, 41> v{};
    };
    using other_cache = block_cache<sizeof(other)>;
    {
      std::vector<cached_ptr<other>> v;
      for (int i = 0; i < 100; ++i) {
        v.push_back(make_cached<other>());
      }
    }
    CHECK(other_cache::cached() == 100);
    // Never below 0 since the thread's first block: nothing was idle the whole time.
    CHECK(trim_block_caches() == 0);
    CHECK(other_cache::cached() == 100);
    {
      std::vector<cached_ptr<other>> v;
      for (int i = 0; i < 30; ++i) {
        v.push_back(make_cached<other>()); // the churn of a period: 30 in use at most
      }
    }
    CHECK(other_cache::cached() == 100);
    CHECK(trim_block_caches() == 70); // 70 never left the cache
    CHECK(other_cache::cached() == 30);
    auto keep = make_cached<other>(); // one in use at the trim, 29 idle since the last
    CHECK(trim_block_caches() == 29);
    CHECK(other_cache::cached() == 0);
    keep.reset();
    CHECK(other_cache::cached() == 1);
    CHECK(trim_block_caches() == 0); // freed after the count began: it was not idle all along
    CHECK(trim_block_caches() == 1);
    CHECK(other_cache::cached() == 0);
  }).join();
}

TEST_CASE("block_cache: a stack of free blocks, the last freed first, a trim frees the idle "
          "bottom",
          "[base]") {
  std::thread([] {
    struct third {
      std::array<std::uint64_t, 43> v{};
    };
    using third_cache = block_cache<sizeof(third)>;
    std::vector<void *> order; // the order the blocks were freed in
    {
      std::vector<cached_ptr<third>> v;
      for (int i = 0; i < 1000; ++i) { // past the stack's first room of 256
        v.push_back(make_cached<third>());
      }
      for (auto &p : v) {
        order.push_back(p.get());
        p.reset();
      }
    }
    CHECK(third_cache::cached() == 1000);
    CHECK(trim_block_caches() == 0);
    {
      // Taken in reverse order of freeing: the most recent (warmest) first.
      std::vector<cached_ptr<third>> v;
      for (int i = 0; i < 10; ++i) {
        v.push_back(make_cached<third>());
        CHECK(v.back().get() == order[order.size() - 1 - static_cast<std::size_t>(i)]);
      }
    }
    // 990 stayed all along: the trim frees those (the bottom), the 10 taken remain.
    CHECK(trim_block_caches() == 990);
    REQUIRE(third_cache::cached() == 10);
    std::set<void *> left;
    std::vector<cached_ptr<third>> v;
    for (int i = 0; i < 10; ++i) {
      v.push_back(make_cached<third>());
      left.insert(v.back().get());
    }
    CHECK(left == std::set<void *>(order.end() - 10, order.end()));
  }).join();
}
