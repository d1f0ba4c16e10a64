#pragma once
// The narrow seam between the kernel and everything else: something that yields snapshots.
// bpf_source reads rsched's BPF maps; tests use their own sources.
#include "rsched/base/result.hpp"
#include "rsched/collect/kallsyms.hpp"
#include "rsched/collect/snapshot.hpp"

#include <cstdint>
#include <optional>
#include <vector>

namespace rsched::bpf {
class program;
}

namespace rsched::collect {

class source {
public:
  virtual ~source() = default;
  source() = default;
  source(const source &) = delete;
  source &operator=(const source &) = delete;
  virtual result<snapshot> read() = 0;
};

// Reads the maps of a loaded rsched BPF program: the task iterator (tp_btf) or the task hash
// (raw_tp), the graveyard (drained with lookup_and_delete_batch: its entries are final, so
// deleting them races with nothing), the per-CPU stats and drop counters.
// In tp_btf mode only threads whose counters changed are read (from the dirty list, or by the
// task iterator's filter), with a full read of every thread by the iterator every `full_every`
// reads (and the first) so that the baselines of vanished threads get pruned, and whenever more
// threads changed than the dirty list holds.
class bpf_source final : public source {
public:
  explicit bpf_source(bpf::program &prog, unsigned full_every = 60)
      : prog_(prog), full_every_(full_every) {}
  result<snapshot> read() override;

private:
  bpf::program &prog_;
  unsigned full_every_;
  unsigned reads_ = 0;
  std::uint64_t buried_seen_ = 0; // the programs' burial count at the last graveyard drain
  std::vector<char> iter_buf_;    // the task iterator's bytes, reused from read to read
  std::vector<char> seg_buf_;     // segment records' bytes, reused from read to read
  std::vector<char> dead_buf_;    // final records' bytes (the graveyard), reused likewise
  // Wakeup group: the kernel stacks resolved so far (by the stack map's id), and the symbols,
  // read at the first stack.
  kernel_stacks stacks_;
  std::optional<kallsyms> syms_;
  // Adds the stacks the samples name to the snapshot, resolving the new ones.
  void resolve_stacks(snapshot &snap);
};

} // namespace rsched::collect
