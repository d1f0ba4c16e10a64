#pragma once
// Which capture requests (SIGUSR1, marks tagged capture) become captures (pure: tests/flight).
// A request asks for the window of SECONDS ending at its moment. A burst of them must not write
// a near-copy of the same window each (issue 51: ten SIGUSR1 in half a second were ten files, and
// they pushed the captures that mattered out of --flight-keep), yet none may lose what it asked
// for. So, one capture per window:
//  - a request whose moment lies inside a window already saved is answered by that capture;
//  - one within SECONDS after the newest saved window's end joins the next window, the SECONDS
//    that follow it (saved when they have passed, or at once when the recorder stops): every
//    moment asked for is in a capture, and a stream of requests gives back-to-back windows;
//  - any other is saved at once, its window ending at its moment.
// Only windows written count as saved: a capture that failed, or held no events and so was not
// written, answers nothing. Threshold captures (--flight-trigger) have their own limit
// (--flight-trigger-gap) and are not coalesced with requests.
#include <cstdint>
#include <deque>
#include <optional>
#include <string>

namespace rsched::flight {

class request_coalescer {
public:
  explicit request_coalescer(std::uint64_t span_ns) : span_(span_ns) {}

  struct placement {
    enum class kind { now, inside, next };
    kind what = kind::now;
    std::uint64_t end = 0; // boot ns: now: the moment; inside: the saved window's end; next: the
                           // next window's end
    std::string file;      // inside: the capture that answers it
  };
  // Where a request for the window ending at `at` (boot ns) goes. Requests are placed in the
  // order of their moments.
  [[nodiscard]] placement place(std::uint64_t at) const;
  // A capture of [from, to] (boot ns) was written to `file`.
  void saved(std::uint64_t from, std::uint64_t to, std::string file);
  // The newest saved window's end, if any.
  [[nodiscard]] std::optional<std::uint64_t> newest_end() const;

private:
  struct window {
    std::uint64_t from, to;
    std::string file;
  };
  std::uint64_t span_;
  std::deque<window> saved_; // the recent ones, in the order written (bounded)
};

} // namespace rsched::flight
