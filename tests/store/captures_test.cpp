// Schema 14: the flight recorder's captures table, its retention by count and bytes, and the
// annotations that ask for a capture.
#include "rsched/query/annotations.hpp"
#include "rsched/query/reader.hpp"
#include "rsched/store/writer.hpp"

#include "store_test_util.hpp"

#include <catch2/catch.hpp>

using namespace store_test;

namespace {

rsched::store::capture_row capture_at(std::int64_t t, std::uint64_t bytes) {
  rsched::store::capture_row c;
  c.start_ns = t - 10 * sec;
  c.end_ns = t;
  c.trigger = "signal";
  c.reason = "SIGUSR1 \"quoted\" \xff";
  c.file = "/x/" + std::to_string(t) + ".pftrace";
  c.bytes = bytes;
  c.events = 42;
  c.lossy_cpus = "1";
  c.created_ns = t;
  return c;
}

} // namespace

TEST_CASE("captures are listed with their window and pruned by count and bytes", "[store]") {
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  auto w = open_writer(path);
  for (int i = 1; i <= 5; ++i) {
    auto id = w.add_capture(capture_at(i * sec, 100));
    REQUIRE(id);
    CHECK(*id == i);
  }
  {
    auto r = open_reader(path);
    auto t = run(r, "SELECT start_ns, end_ns, trigger, reason, annotation_id, file, bytes, events, "
                    "lossy_cpus FROM captures WHERE id = 2");
    REQUIRE(t.rows.size() == 1);
    CHECK(as_int(t.rows[0][0]) == -8 * sec);
    CHECK(as_int(t.rows[0][1]) == 2 * sec);
    CHECK(as_text(t.rows[0][2]) == "signal");
    CHECK(as_text(t.rows[0][3]) == "SIGUSR1 \"quoted\" \xff");
    CHECK(is_null(t.rows[0][4]));
    CHECK(as_text(t.rows[0][5]) == "/x/2000000000.pftrace");
    CHECK(as_int(t.rows[0][6]) == 100);
    CHECK(as_int(t.rows[0][7]) == 42);
    CHECK(as_text(t.rows[0][8]) == "1");
  }
  // Count: the 3 newest stay.
  auto gone = w.prune_captures(3, 0);
  REQUIRE(gone);
  CHECK(*gone == std::vector<std::string>{"/x/2000000000.pftrace", "/x/1000000000.pftrace"});
  // Bytes: 250 holds two of 100.
  gone = w.prune_captures(10, 250);
  REQUIRE(gone);
  CHECK(*gone == std::vector<std::string>{"/x/3000000000.pftrace"});
  // The newest is kept even when it alone is over the limit.
  REQUIRE(w.add_capture(capture_at(6 * sec, 1000)));
  gone = w.prune_captures(10, 250);
  REQUIRE(gone);
  CHECK(gone->size() == 2);
  auto r = open_reader(path);
  CHECK(scalar_int(r, "SELECT count(*) FROM captures") == 1);
  CHECK(scalar_int(r, "SELECT bytes FROM captures") == 1000);
}

TEST_CASE("annotations tagged capture are capture requests, each seen once", "[store]") {
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  auto w = open_writer(path);
  auto start = w.last_annotation_id();
  REQUIRE(start);
  CHECK(*start == 0);
  auto add = [&](const std::string &text, const std::string &tags) {
    rsched::query::annotation a;
    a.start_ns = 7 * sec;
    a.text = text;
    a.tags = tags;
    a.source = "rsched-sql";
    auto id = rsched::query::add_annotation(path, a);
    REQUIRE(id);
    return *id;
  };
  add("not this", "deploy");
  const auto a2 = add("checkout slow", "capture");
  add("nor this", "captured,precapture");
  const auto a4 = add("this one \"too\"", "deploy, capture");
  auto q = w.capture_requests(*start);
  REQUIRE(q);
  REQUIRE(q->size() == 2);
  CHECK((*q)[0].id == a2);
  CHECK((*q)[0].text == "checkout slow");
  CHECK((*q)[0].start_ns == 7 * sec);
  CHECK((*q)[1].id == a4);
  q = w.capture_requests(a4);
  REQUIRE(q);
  CHECK(q->empty());
  auto last = w.last_annotation_id();
  REQUIRE(last);
  CHECK(*last == a4);
}
