// Capture requests coalesced into one capture per window (flight/coalesce.hpp): a burst of them
// is the window saved at the first and one of the SECONDS after it; a moment inside a saved
// window is answered by it; only windows written count.
#include "rsched/flight/coalesce.hpp"

#include <catch2/catch.hpp>

using rsched::flight::request_coalescer;
using kind = request_coalescer::placement::kind;

namespace {
constexpr std::uint64_t s = 1'000'000'000;
} // namespace

TEST_CASE("coalesce: the first request is saved at once, a burst after it joins the next window",
          "[flight]") {
  request_coalescer c(10 * s);
  CHECK_FALSE(c.newest_end());
  auto p = c.place(100 * s);
  CHECK(p.what == kind::now);
  CHECK(p.end == 100 * s);
  c.saved(90 * s, 100 * s, "/d/a.pftrace");
  CHECK(c.newest_end() == 100 * s);
  // Ten more within the next 10 s: one window, [100 s, 110 s], for all of them.
  for (int i = 1; i <= 10; ++i) {
    p = c.place(100 * s + static_cast<std::uint64_t>(i) * 50'000'000);
    CHECK(p.what == kind::next);
    CHECK(p.end == 110 * s);
  }
  c.saved(100 * s, 110 * s, "/d/b.pftrace");
  // A stream goes on in back-to-back windows.
  p = c.place(110 * s + 1);
  CHECK(p.what == kind::next);
  CHECK(p.end == 120 * s);
  // One a whole window after the newest is saved at once, its window ending at its moment.
  p = c.place(120 * s);
  CHECK(p.what == kind::now);
  CHECK(p.end == 120 * s);
}

TEST_CASE("coalesce: a moment inside a saved window is answered by that capture", "[flight]") {
  request_coalescer c(10 * s);
  c.saved(90 * s, 100 * s, "/d/a.pftrace");
  c.saved(140 * s, 150 * s, "/d/c.pftrace");
  for (std::uint64_t at : {90 * s, 95 * s, 100 * s}) {
    auto p = c.place(at);
    CHECK(p.what == kind::inside);
    CHECK(p.end == 100 * s);
    CHECK(p.file == "/d/a.pftrace");
  }
  CHECK(c.place(145 * s).file == "/d/c.pftrace");
  // Between two saved windows and not within 10 s after the newest: a window of its own.
  auto p = c.place(120 * s);
  CHECK(p.what == kind::now);
  CHECK(p.end == 120 * s);
  // Before every saved window.
  CHECK(c.place(50 * s).what == kind::now);
}

TEST_CASE("coalesce: nothing saved, nothing coalesced", "[flight]") {
  // A capture that failed or held no events is never reported as saved: the next request is
  // saved at once.
  request_coalescer c(10 * s);
  CHECK(c.place(100 * s).what == kind::now);
  CHECK(c.place(100 * s + 1).what == kind::now);
}
