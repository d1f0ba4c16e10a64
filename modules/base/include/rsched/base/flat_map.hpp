#pragma once
// A hash map with open addressing (linear probing) for the hot sums of the history's readers:
// explain() adds millions of rows an hour into maps keyed by (thread, culprit) or (thread,
// waker, state), and std::unordered_map's node per key and pointer chase per probe were a fifth
// of its time. Keys and values live in flat arrays; no erase (the readers only add, then walk).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace rsched::base {

template <typename K, typename V, typename Hash = std::hash<K>> class flat_map {
public:
  // The value of `k`, value-initialized when new.
  V &operator[](const K &k) {
    if ((size_ + 1) * 4 > slots_.size() * 3) { // at most 3/4 full
      grow();
    }
    std::size_t i = index_of(k);
    for (;; i = (i + 1) & mask_) {
      slot &s = slots_[i];
      if (!s.used) {
        s.used = true;
        s.key = k;
        s.value = V{};
        ++size_;
        return s.value;
      }
      if (s.key == k) {
        return s.value;
      }
    }
  }

  // The value of `k`, or nullptr.
  [[nodiscard]] const V *find(const K &k) const {
    if (size_ == 0) {
      return nullptr;
    }
    for (std::size_t i = index_of(k);; i = (i + 1) & mask_) {
      const slot &s = slots_[i];
      if (!s.used) {
        return nullptr;
      }
      if (s.key == k) {
        return &s.value;
      }
    }
  }

  // Each (key, value), in no particular order.
  template <typename F> void for_each(F &&f) const {
    for (const slot &s : slots_) {
      if (s.used) {
        f(s.key, s.value);
      }
    }
  }

  [[nodiscard]] std::size_t size() const { return size_; }
  [[nodiscard]] bool empty() const { return size_ == 0; }
  void clear() {
    slots_.clear();
    mask_ = 0;
    size_ = 0;
  }

private:
  struct slot {
    K key{};
    V value{};
    bool used = false;
  };

  [[nodiscard]] std::size_t index_of(const K &k) const {
    // Spread the hash (std::hash of an integer is the integer): Fibonacci hashing.
    const std::uint64_t h = static_cast<std::uint64_t>(Hash{}(k)) * 0x9E3779B97F4A7C15ULL;
    return static_cast<std::size_t>(h >> 32U ^ h) & mask_;
  }

  void grow() {
    std::vector<slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 16 : old.size() * 2, slot{});
    mask_ = slots_.size() - 1;
    size_ = 0;
    for (slot &s : old) {
      if (s.used) {
        (*this)[s.key] = std::move(s.value);
      }
    }
  }

  std::vector<slot> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

} // namespace rsched::base
