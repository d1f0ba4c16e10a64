// /proc/kallsyms text to functions: the text symbol at or below an address, modules' symbols
// too, data symbols and malformed lines skipped, unknown addresses as hex.
#include "rsched/collect/kallsyms.hpp"

#include <catch2/catch.hpp>

using rsched::collect::kallsyms;

TEST_CASE("kallsyms: an address names the text symbol at or below it", "[collect][wakeup]") {
  const auto k = kallsyms::parse("ffffffff81000000 T _stext\n"
                                 "ffffffff81001000 t io_schedule\n"
                                 "ffffffff81002000 D some_data\n"
                                 "garbage line\n"
                                 "zzzz T bad_address\n"
                                 "ffffffff81003000 T ext4_sync_file\n"
                                 "ffffffffc0001000 t xfs_file_fsync\t[xfs]\n"
                                 "0000000000000000 T hidden_by_kptr_restrict\n");
  CHECK(k.size() == 4);
  CHECK(k.name_of(0xffffffff81001010) == "io_schedule");
  CHECK(k.name_of(0xffffffff81002fff) == "io_schedule"); // data symbols are not functions
  CHECK(k.name_of(0xffffffff81003000) == "ext4_sync_file");
  CHECK(k.name_of(0xffffffffc0001234) == "xfs_file_fsync");
  CHECK(k.name_of(0x1000) == "0x1000");
  CHECK(kallsyms::parse("").name_of(0xffffffff81000000) == "0xffffffff81000000");
}

TEST_CASE("a stack taken in a tracepoint's program starts at the kernel's own frames",
          "[kallsyms]") {
  using v = std::vector<std::string>;
  // As this kernel gives it: the program, the tracepoint's dispatch, then the scheduler.
  CHECK(kallsyms::tracing_frames(v{"bpf_prog_3f5cadf490afb94a_sched_switch_btf", "bpf_trace_run4",
                                   "__traceiter_sched_switch", "__schedule", "schedule",
                                   "io_schedule"}) == 3);
  // A JITed program no symbol holds, a trampoline, __bpf_trace_ (older kernels).
  CHECK(kallsyms::tracing_frames(v{"0xffffffffc0a1b2c3", "bpf_trampoline_6442",
                                   "__bpf_trace_sched_switch", "__schedule"}) == 3);
  // A sleeper's own stack (bpf_get_task_stack of another task): nothing to drop.
  CHECK(kallsyms::tracing_frames(v{"__schedule", "schedule", "do_nanosleep"}) == 0);
  // Only such frames, or none: kept whole.
  CHECK(kallsyms::tracing_frames(v{"0xffffffffc0a1b2c3", "0xffffffffc0a1b2d0"}) == 0);
  CHECK(kallsyms::tracing_frames(v{}) == 0);
  // Machinery further down is the kernel's path, not ours.
  CHECK(kallsyms::tracing_frames(v{"__schedule", "bpf_trace_run2"}) == 0);
}
