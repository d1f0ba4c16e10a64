// rs-workload: the program the root tests exec into (tests/bpf/attribution_test.cpp). Spins and
// sleeps in turns so that it is woken often on mostly idle CPUs, then exits. With REPORT_FD, it
// first writes {tid, 0, its pcount now} there (the attribution test's `report`): an upper bound
// of the timeslices it had before exec renamed it.
//   rs-workload ITERATIONS SPIN_US SLEEP_US [REPORT_FD]
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <unistd.h>

namespace {
std::uint64_t mono_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL +
         static_cast<std::uint64_t>(ts.tv_nsec);
}
} // namespace

int main(int argc, char **argv) {
  if (argc != 4 && argc != 5) {
    return 2;
  }
  if (argc == 5) {
    struct {
      std::int32_t tid, pad;
      std::uint64_t before, after;
    } r{static_cast<std::int32_t>(gettid()), 0, 0, 0};
    std::uint64_t exec_ns = 0, delay_ns = 0;
    std::ifstream in("/proc/thread-self/schedstat");
    in >> exec_ns >> delay_ns >> r.after;
    const int fd = static_cast<int>(std::strtol(argv[4], nullptr, 10));
    if (write(fd, &r, sizeof(r)) != static_cast<ssize_t>(sizeof(r))) {
      return 1;
    }
    close(fd);
  }
  const long n = std::strtol(argv[1], nullptr, 10);
  const auto spin_ns = static_cast<std::uint64_t>(std::strtol(argv[2], nullptr, 10)) * 1000;
  const long sleep_ns = std::strtol(argv[3], nullptr, 10) * 1000;
  volatile std::uint64_t sink = 0;
  for (long i = 0; i < n; ++i) {
    const std::uint64_t until = mono_ns() + spin_ns;
    while (mono_ns() < until) {
      sink = sink + 1;
    }
    timespec ts{0, sleep_ns};
    nanosleep(&ts, nullptr);
  }
  return 0;
}
