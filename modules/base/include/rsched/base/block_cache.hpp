#pragma once
// A per-thread cache of freed fixed-size blocks, for the small objects the recorder allocates
// and frees by the ten thousand every interval (a thread's metric values, its blame slots).
// At 600 bytes to 1 KB they miss glibc's small-size caches, and at 10,000 threads malloc and
// free took an eighth of the recorder's CPU.
//
// cached_ptr<T> is a unique_ptr whose memory comes from, and goes back to, the cache of the
// thread that frees it (a stack of pointers to the free blocks). A thread's cache of one
// block size holds at most block_cache_cap() blocks (4096 unless the thread asks for more:
// rschedd's recorder thread churns ~60,000 a second at 10,000 threads), so nothing grows
// without bound when one thread (the live view's) frees what another allocates.
// The cache itself is plain thread-local data (nothing to destroy, so usable during any
// thread-local or static destruction); a guard, created with a thread's first block, frees
// that thread's cached blocks when it ends and sends its later frees straight to the heap.
// trim_block_caches() gives back what a thread's caches did not need since its last call: the
// blocks that stayed cached all along (the fewest the cache held since then), so a burst of
// threads does not stay resident for good while the steady churn keeps its blocks.
#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <utility>

namespace rsched::base {

namespace detail {
inline std::size_t &block_cache_cap_ref() noexcept {
  thread_local std::size_t cap = 4096; // constant-initialised
  return cap;
}
} // namespace detail
// The calling thread's limit of cached blocks per block size.
inline std::size_t block_cache_cap() noexcept {
  return detail::block_cache_cap_ref();
}
inline void set_block_cache_cap(std::size_t n) noexcept {
  detail::block_cache_cap_ref() = n;
}

namespace detail {
// The trim functions of the block sizes the calling thread has cached (registered by its first
// block of each size; a handful of sizes exist).
struct block_trimmers {
  static constexpr std::size_t max = 16;
  std::size_t (*fn[max])() = {};
  std::size_t n = 0;
};
inline block_trimmers &trimmers() noexcept {
  thread_local block_trimmers t; // constant-initialised, trivially destructible
  return t;
}
} // namespace detail

// Frees the calling thread's cached blocks that were not needed since its previous call (or
// since the thread's first block); returns how many.
inline std::size_t trim_block_caches() noexcept {
  std::size_t freed = 0;
  auto &t = detail::trimmers();
  for (std::size_t i = 0; i < t.n; ++i) {
    freed += t.fn[i]();
  }
  return freed;
}

// `Tag` gives a cache of its own to blocks of one size that must not mix with others of that
// size (zeroed_blocks below).
template <std::size_t Size, typename Tag = void> class block_cache {
public:
  static_assert(Size >= sizeof(void *));

  static void *get() {
    void *p = try_get();
    return p != nullptr ? p : ::operator new(Size);
  }
  // A cached block, or nullptr when there is none.
  static void *try_get() {
    ensure_guard();
    state &s = mine();
    if (s.n == 0) {
      return nullptr;
    }
    --s.n;
    s.low = s.n < s.low ? s.n : s.low;
    if (s.n != 0) {
      __builtin_prefetch(s.items[s.n - 1], 1); // the next block handed out: to be written
    }
    return s.items[s.n];
  }
  static void put(void *p) noexcept {
    state &s = mine();
    if (s.gone || s.n >= block_cache_cap() || (s.n == s.room && !grow(s))) {
      ::operator delete(p);
      return;
    }
    ensure_guard(); // a thread that only frees caches too, and is trimmed and cleaned up
    s.items[s.n++] = p;
  }
  // Blocks cached by this thread (tests).
  static std::size_t cached() { return mine().n; }

private:
  // The cached blocks are a stack of pointers, not a list linked through the blocks: taking
  // one does not read the block (a cache miss per allocation when the list ran through
  // 10,000 cold blocks), and the caller writes it first.
  struct state {
    void **items = nullptr; // room for `room` pointers, the first `n` cached blocks
    std::size_t room = 0;
    std::size_t n = 0;
    std::size_t low = 0; // the fewest blocks cached since the last trim: not needed since
    bool gone = false;   // the thread is ending: no more caching
  };
  static bool grow(state &s) noexcept {
    const std::size_t room = s.room == 0 ? 256 : 2 * s.room;
    void *mem = ::operator new(room * sizeof(void *), std::nothrow);
    if (mem == nullptr) {
      return false;
    }
    auto **items = static_cast<void **>(mem);
    if (s.n != 0) {
      std::memcpy(items, s.items, s.n * sizeof(void *));
    }
    ::operator delete(s.items);
    s.items = items;
    s.room = room;
    return true;
  }
  // Frees the `low` blocks at the bottom of the stack (none taken since the last trim); the
  // count starts again at what is left.
  static std::size_t trim() noexcept {
    state &s = mine();
    const std::size_t drop = s.low < s.n ? s.low : s.n;
    for (std::size_t i = 0; i < drop; ++i) {
      ::operator delete(s.items[i]);
    }
    if (drop != 0 && s.n > drop) {
      std::memmove(s.items, s.items + drop, (s.n - drop) * sizeof(void *));
    }
    s.n -= drop;
    s.low = s.n;
    return drop;
  }
  struct guard {
    guard() {
      auto &t = detail::trimmers();
      if (t.n < detail::block_trimmers::max) {
        t.fn[t.n++] = &trim;
      }
    }
    guard(const guard &) = delete;
    guard &operator=(const guard &) = delete;
    ~guard() {
      state &s = mine();
      for (std::size_t i = 0; i < s.n; ++i) {
        ::operator delete(s.items[i]);
      }
      ::operator delete(s.items);
      s.items = nullptr;
      s.room = 0;
      s.n = 0;
      s.low = 0;
      s.gone = true;
    }
  };
  static void ensure_guard() {
    thread_local guard g; // frees the cache when the thread ends
  }
  static state &mine() noexcept {
    thread_local state s; // constant-initialised, trivially destructible
    return s;
  }
};

// Blocks handed out all zero, for objects whose owner zeroes what it wrote before giving the
// block back (put): a big array of which a few elements are used is then not cleared whole at
// every allocation, only where it was written.
template <std::size_t Size> struct zeroed_blocks {
  struct tag {};
  using cache = block_cache<Size, tag>;
  static void *get() {
    if (void *p = cache::try_get()) {
      return p;
    }
    void *p = ::operator new(Size);
    std::memset(p, 0, Size);
    return p;
  }
  // `p` must be all zero again.
  static void put(void *p) noexcept { cache::put(p); }
};

template <typename T> struct cached_delete {
  void operator()(T *p) const noexcept {
    p->~T();
    block_cache<sizeof(T)>::put(p);
  }
};
template <typename T> using cached_ptr = std::unique_ptr<T, cached_delete<T>>;

template <typename T, typename... Args> cached_ptr<T> make_cached(Args &&...args) {
  static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);
  void *p = block_cache<sizeof(T)>::get();
  try {
    return cached_ptr<T>(new (p) T(std::forward<Args>(args)...));
  } catch (...) {
    block_cache<sizeof(T)>::put(p);
    throw;
  }
}

} // namespace rsched::base
