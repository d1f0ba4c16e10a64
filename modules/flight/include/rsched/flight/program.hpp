#pragma once
// The flight recorder's BPF programs (bpf/flight.bpf.c): loaded, attached and read. A separate
// object from rsched.bpf.c (rsched::bpf), loaded only with rschedd --flight-recorder.
#include "rsched/base/result.hpp"
#include "rsched/bpf/program.hpp"
#include "rsched/flight/flight_abi.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace rsched::flight {

struct load_options {
  bpf::attach_mode mode = bpf::attach_mode::automatic;
  // Slots of each CPU's ring, a power of two (64 bytes each): 65,536 = 4 MiB a CPU, which holds
  // 1.3 M events/s a CPU between two reads 50 ms apart.
  std::uint32_t slots_per_cpu = 65536;
  bool verbose = false;
};

class program {
public:
  static result<program> load(const load_options &opt);

  // Every event published since the last read, CPU by CPU, each CPU's in ring order; returns
  // how many. Slots the writers passed before they were read are counted in lost().
  std::size_t read(const std::function<void(std::uint32_t cpu, const rsched_flight_event &)> &f);
  [[nodiscard]] std::uint32_t cpus() const;
  [[nodiscard]] std::uint32_t slots_per_cpu() const;
  // Events lost on `cpu` so far (overwritten before they were read).
  [[nodiscard]] std::uint64_t lost(std::uint32_t cpu) const;
  [[nodiscard]] bpf::attach_mode mode() const;
  [[nodiscard]] std::vector<bpf::prog_info> attached() const;

  program(program &&) noexcept;
  program &operator=(program &&) noexcept;
  ~program();

private:
  struct impl;
  explicit program(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
};

} // namespace rsched::flight
