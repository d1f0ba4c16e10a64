#pragma once
// RAII owner of rsched's BPF programs: open -> configure -> load -> attach, one variant per
// tracepoint. The skeleton type stays private to this module.
#include "rsched/base/result.hpp"

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace rsched::bpf {

enum class attach_mode {
  automatic, // tp_btf + task storage when the kernel supports both, else raw_tp
  tp_btf,
  raw_tp,
};

const char *to_string(attach_mode m);

// How live threads are read in tp_btf mode (raw_tp mode always reads its hash).
enum class live_read {
  automatic,  // the dirty list where the kernel can run its drain, else the task iterator
  dirty_list, // only the threads that changed, from a list the tracepoint programs append to
  iterator,   // the task iterator, which visits every thread of the system
};

const char *to_string(live_read r);

struct options {
  attach_mode mode = attach_mode::automatic;
  std::uint32_t groups = 1;       // enum rsched_group bits (sched_abi.h); latency by default
  std::uint32_t counter_mask = 0; // counter slots user space will open (RSCHED_G_PERF)
  // Migration classification (-1 = unknown), used when RSCHED_G_MIGRATION is set.
  std::array<std::int32_t, 1024> cpu_to_die{};
  std::array<std::int32_t, 1024> cpu_to_numa{};
  std::uint32_t graveyard_entries = 16384; // final records of exited threads between two reads
  std::uint32_t task_hash_entries = 16384; // raw_tp mode: live threads tracked
  live_read read = live_read::automatic;
  // Threads that can change within one read epoch before a read falls back to the iterator.
  std::uint32_t dirty_list_entries = 65536;
  std::uint64_t max_delay_ns = 10'000'000'000ULL;    // longer delays/slices discarded (10 s)
  std::uint64_t max_sleep_ns = 3'600'000'000'000ULL; // longer sleep/idle discarded (1 h)
  bool verbose = false;                              // forward libbpf's messages to stderr
  // Scheduling delay from the runqueue clock (the kernel's run_delay) instead of the monotonic
  // clock (the default: leaving idle included, as runqlat and perf sched measure it).
  bool delay_rq_clock = false;
  // Wakeup group: sleeps (not D) at least this long get the sleeper's kernel stack; 0 = none.
  std::uint64_t long_sleep_ns = 10'000'000;
  // Bytes of the buffer of segment records (a thread's counters at a rename, exec or cgroup
  // move) between two reads; a power of two of at least one page.
  std::uint32_t segment_buffer_bytes = 4U << 20U;
  // Tests only: every Nth switch to a thread whose comm begins with "rs-hide" reaches no
  // program, to stage a switch-in no tracepoint reported (rschedd reads it from
  // RSCHED_TEST_HIDE_SWITCH_INS); 0: none.
  std::uint32_t test_hide_every = 0;
  // Wakeup group: name a wakeup's interrupt context (hard irq, softirq, hrtimer) from the six
  // interrupt tracepoints even where the preempt count can be read (tests of that path;
  // rschedd reads it from RSCHED_TEST_IRQ_TRACEPOINTS).
  bool irq_tracepoints = false;
  // Perf event fds to install before the programs attach (so no switch reads an empty slot).
  struct counter_fd {
    unsigned cpu;
    unsigned slot;
    int fd;
  };
  std::vector<counter_fd> counter_fds;
};

struct prog_info {
  std::string name;
  int fd = -1;
};

class program {
public:
  // Loads and attaches. Errors are one line naming what is missing (root/CAP_BPF, BTF, ...).
  static result<program> load(const options &opt);

  [[nodiscard]] attach_mode mode() const;     // the resolved mode (never automatic)
  [[nodiscard]] live_read read_mode() const;  // resolved: dirty_list or iterator (tp_btf mode)
  [[nodiscard]] std::uint32_t groups() const; // enum rsched_group bits the programs run with
  [[nodiscard]] int graveyard_fd() const;
  // Final records the programs have put into the graveyard so far (it is empty while this has
  // not moved since its last drain).
  [[nodiscard]] std::uint64_t buried() const;
  [[nodiscard]] int cpu_stats_fd() const;
  [[nodiscard]] int drops_fd() const;
  [[nodiscard]] int task_hash_fd() const; // raw_tp mode
  // A stack of the wakeup group by its id (RSCHED_KSTACK_ALT / RSCHED_KSTACK_SLEEP flags):
  // return addresses, innermost first, and the state of the sleeps it is of.
  struct stack_trace {
    std::vector<std::uint64_t> ips;
    std::uint8_t state = 1; // rsched_sleep_state: 0 S, 1 D, 2 other
  };
  [[nodiscard]] result<stack_trace> kernel_stack(std::uint32_t id) const;
  // Whether the next task-iterator reads return every thread with state (true) or only those
  // whose counters changed since they were last read (false, the default).
  void set_full_read(bool all);
  // Starts a new read epoch for the blame group's slot reuse (every read, before it): a thread's
  // culprit slot is given to another culprit only when its counts were read since. Returns the
  // new epoch (0 when the program has no .bss, which never happens with rsched's).
  std::uint32_t begin_read();
  // A fresh read fd over the task iterator (tp_btf mode); the caller reads and closes it.
  [[nodiscard]] result<int> open_task_iter() const;
  // Dirty-list reads (read_mode() == dirty_list). flip_dirty_list() ends the read epoch and says
  // how many threads changed in it; above dirty_list_capacity() the list is incomplete and the
  // caller must read every thread with the iterator. drain_dirty_list(pos) emits the compact
  // records (sched_abi.h) of list entries [pos, pos + drain_batch()); the bytes stay valid
  // until the next call. Every flipped entry (the first min(changed, capacity)) must be drained
  // once, with emit = false when the iterator reads every thread instead: an entry holds a
  // reference to its task.
  result<std::uint32_t> flip_dirty_list();
  result<std::span<const char>> drain_dirty_list(std::uint32_t pos, bool emit = true);
  [[nodiscard]] std::uint32_t dirty_list_capacity() const;
  [[nodiscard]] std::uint32_t drain_batch() const;
  // Segment records written since the last call (RSCHED_TASK_SEGMENT, oldest first): each is a
  // compact record (sched_abi.h) in tp_btf mode, a whole rsched_task_record in raw_tp mode;
  // appended to `out` back to back. Returns how many.
  result<std::size_t> read_segments(std::vector<char> &out);
  // The size of one segment record in bytes, and of one final record in the graveyard (the
  // same layout: compact in tp_btf mode, a whole rsched_task_record in raw_tp mode).
  [[nodiscard]] std::size_t segment_record_size() const;
  // Whether a move of a whole process to another cgroup reaches all its threads (tp_btf with
  // the kernel's open-coded task iterator) or only the thread the kernel names.
  [[nodiscard]] bool moves_whole_process() const;
  [[nodiscard]] bool delay_rq_clock() const;
  // Whether the kernel keeps its per-task account of waits (struct sched_info, shown in
  // /proc/<pid>/schedstat): the programs then begin a wait where the kernel does, and count a
  // switch-in or the start of a wait that reached no program from it (RSCHED_DROP_UNSEEN).
  [[nodiscard]] bool sched_info_live() const;
  // Installs a perf event fd for counter `slot` on `cpu` (RSCHED_G_PERF).
  result<void> set_counter_fd(unsigned cpu, unsigned slot, int fd);
  // The attached programs (for bpf_stats self-monitoring and tests).
  [[nodiscard]] std::vector<prog_info> attached() const;
  // Cumulative run time and run count of the attached programs, from the kernel's bpf_stats
  // (kernel.bpf_stats_enabled = 1); nullopt while bpf_stats is off (the kernel then counts
  // nothing) or when the kernel does not say.
  struct run_totals {
    std::uint64_t run_time_ns = 0;
    std::uint64_t run_cnt = 0;
  };
  [[nodiscard]] std::optional<run_totals> run_stats() const;

  program(program &&) noexcept;
  program &operator=(program &&) noexcept;
  ~program();

private:
  struct impl;
  explicit program(std::unique_ptr<impl> p);
  // One attempt at open -> configure -> load -> attach; `list` selects dirty-list reads.
  static result<std::unique_ptr<impl>> load_with(const options &opt, attach_mode mode, bool list);
  std::unique_ptr<impl> p_;
};

// Whether the running kernel can take tp_btf programs and task-local storage (vmlinux BTF has
// btf_trace_sched_switch and the map type is supported).
bool kernel_supports_tp_btf();

} // namespace rsched::bpf
