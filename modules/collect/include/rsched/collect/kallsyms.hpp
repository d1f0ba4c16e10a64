#pragma once
// Kernel symbols from /proc/kallsyms, for the wakeup group's stacks: each return address to the
// function holding it (the text symbol at or below it). Read once; a kernel with
// kptr_restrict showing zero addresses gives no symbols (every frame then "0x...").
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rsched::collect {

class kallsyms {
public:
  // Parses kallsyms text ("ffffffff81000000 T _stext [module]" lines); text symbols only.
  static kallsyms parse(std::string_view text);
  // /proc/kallsyms (empty when unreadable).
  static kallsyms load(const char *path = "/proc/kallsyms");
  // The function holding `ip`, or "0x<hex>" when none does.
  [[nodiscard]] std::string name_of(std::uint64_t ip) const;
  [[nodiscard]] std::size_t size() const { return syms_.size(); }

  // How many innermost frames of a stack taken inside a tracepoint's BPF program are the tracing
  // machinery, not the kernel's own path: the program itself (bpf_prog_<tag>_<name>, or an
  // address no symbol holds: a JITed program on a kernel that lists none), the trampoline and
  // bpf_trace_run<N>, __bpf_trace_<tp> and __traceiter_<tp>. A stack starts at the first frame
  // after them (the scheduler's __schedule for a sleep's stack).
  static std::size_t tracing_frames(const std::vector<std::string> &names);

private:
  // By address; names in one arena (~60,000 text symbols: a string each was 5 MB of the
  // daemon's heap at its peak, the arena ~2 MB).
  struct sym {
    std::uint64_t addr;
    std::uint32_t off; // of the name in names_
    std::uint32_t len;
  };
  std::vector<sym> syms_;
  std::string names_;
};

} // namespace rsched::collect
