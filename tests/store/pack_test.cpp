// The packed raw tiers (schema v8, v13): the pack formats on their own, and thread_hist, the
// virtual table over packs and rollup rows, against what the same rows give as a plain table.
#include "rsched/stats/percentile.hpp"
#include "rsched/store/blame_pack.hpp"
#include "rsched/store/hist_pack.hpp"
#include "rsched/store/hist_summary.hpp"
#include "rsched/store/row_pack.hpp"

#include "store_test_util.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

using rsched::store::pack_builder;
using rsched::store::pack_entry;
using rsched::store::pack_reader;
using rsched::store::unpack;
using namespace store_test;

constexpr std::int64_t t0 = 1'700'000'040'000'000'000; // a whole minute (UTC ns)

namespace {

struct plain {
  std::int64_t id, count, total;
  std::vector<std::uint8_t> hist;
};

std::vector<std::uint8_t> pack_of(const std::vector<plain> &in) {
  pack_builder b;
  for (const auto &e : in) {
    REQUIRE(b.add(e.id, e.count, e.total, e.hist));
  }
  return b.finish();
}

} // namespace

TEST_CASE("a pack gives back every entry exactly, extremes included", "[store][pack]") {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::vector<plain> in;
    std::int64_t id = static_cast<std::int64_t>(rng() % 1000);
    const int n = static_cast<int>(rng() % 60);
    for (int i = 0; i < n; ++i) {
      plain e{id, static_cast<std::int64_t>(rng()), static_cast<std::int64_t>(rng()), {}};
      e.hist.resize(rng() % 40);
      for (auto &byte : e.hist) {
        byte = static_cast<std::uint8_t>(rng());
      }
      in.push_back(e);
      id += 1 + static_cast<std::int64_t>(rng() % (round % 2 == 0 ? 3 : 1'000'000));
    }
    if (round == 0) {
      in = {{0, INT64_MIN, INT64_MAX, {}}, {INT64_MAX, -1, 0, {1}}};
    }
    const auto blob = pack_of(in);
    auto out = unpack(blob);
    REQUIRE(out.ok());
    REQUIRE(out->size() == in.size());
    for (std::size_t i = 0; i < in.size(); ++i) {
      CHECK((*out)[i].thread_id == in[i].id);
      CHECK((*out)[i].count == in[i].count);
      CHECK((*out)[i].total == in[i].total);
      CHECK(std::vector<std::uint8_t>((*out)[i].hist.begin(), (*out)[i].hist.end()) == in[i].hist);
    }
  }
}

TEST_CASE("a pack takes a dense thread's small values in a few bytes", "[store][pack]") {
  // Ids one apart, 1 sample, a total under 2^20 ns, a 3-byte histogram: 1 + 1 + 3 + 1 + 3.
  std::vector<plain> in;
  for (std::int64_t id = 5000; id < 6000; ++id) {
    in.push_back({id, 1, 300'000, {1, 30, 1}});
  }
  const auto blob = pack_of(in);
  CHECK(blob.size() <= 3 + 2 + 1000 * 9);
}

TEST_CASE("thread ids that do not increase are refused by the builder", "[store][pack]") {
  pack_builder b;
  const std::vector<std::uint8_t> h = {1};
  CHECK(b.add(10, 1, 1, h));
  CHECK_FALSE(b.add(10, 1, 1, h));
  CHECK_FALSE(b.add(9, 1, 1, h));
  CHECK(b.add(11, 1, 1, h));
  CHECK(b.size() == 2);
}

TEST_CASE("a damaged pack is an error at every cut and every flipped byte, never a crash",
          "[store][pack]") {
  std::vector<plain> in;
  for (std::int64_t id = 1; id < 40; id += 3) {
    in.push_back({id, id * 3, id * 1000, {1, static_cast<std::uint8_t>(id), 2}});
  }
  const auto blob = pack_of(in);
  for (std::size_t cut = 0; cut < blob.size(); ++cut) {
    INFO("cut at " << cut);
    CHECK_FALSE(unpack(std::span<const std::uint8_t>(blob.data(), cut)).ok());
  }
  auto longer = blob;
  longer.push_back(0);
  CHECK(unpack(longer).err().msg.find("bytes after the last entry") != std::string::npos);
  auto wrong = blob;
  wrong[0] = 9;
  CHECK(unpack(wrong).err().msg == "unknown pack version 9");
  std::mt19937 rng(3);
  for (int i = 0; i < 2000; ++i) {
    auto b = blob;
    b[rng() % b.size()] = static_cast<std::uint8_t>(rng());
    auto r = unpack(b); // either a valid pack of other values or an error
    if (r.ok()) {
      for (std::size_t k = 1; k < r->size(); ++k) {
        CHECK((*r)[k].thread_id > (*r)[k - 1].thread_id);
      }
    }
  }
  pack_reader huge(std::vector<std::uint8_t>{1, 0xff, 0xff, 0xff, 0x7f});
  CHECK(huge.err() == "damaged pack: more entries than bytes");
}

TEST_CASE("thread_hist reads packed and row-stored intervals alike", "[store][pack]") {
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  {
    auto w = open_writer(path);
    for (int i = 0; i < 3; ++i) {
      std::vector<rsched::store::thread_row> threads;
      for (std::uint32_t tid = 1; tid <= 50; ++tid) {
        if ((tid + static_cast<std::uint32_t>(i)) % 4 == 0) {
          continue; // a thread without samples in this interval has no entry
        }
        threads.push_back(make_thread(tid, tid % 2 == 0 ? "even" : "odd",
                                      {1000u * tid, 20'000u + static_cast<std::uint32_t>(i)},
                                      {tid % 3}));
      }
      write_ok(w, make_interval(t0 + i * 10 * sec, std::move(threads)));
    }
  }
  std::vector<std::vector<value>> packed;
  const char *all = "SELECT interval_id, metric, thread_id, count, total, hex(hist) FROM "
                    "thread_hist ORDER BY 1, 2, 3";
  const char *by_comm = "SELECT comm, sum(count), sum(total_ns), hist_percentile(hist, 99) FROM "
                        "sched_delay GROUP BY comm ORDER BY comm";
  std::vector<std::vector<value>> packed_comm;
  {
    auto r = open_reader(path);
    packed = run(r, all).rows;
    packed_comm = run(r, by_comm).rows;
    CHECK(scalar_int(r, "SELECT count(*) FROM thread_hist_pack") == 3 * 2);
    CHECK(scalar_int(r, "SELECT count(*) FROM thread_hist_row") == 0);
    CHECK(scalar_int(r, "SELECT sum(threads) FROM thread_hist_pack") ==
          static_cast<std::int64_t>(packed.size()));
    // One thread of one interval and metric after another (the views' LEFT JOIN of a second
    // metric): each pack decoded once and searched, found or not, the same as a join of the
    // rows materialized first.
    const char *pairs = "SELECT a.interval_id, a.thread_id, a.count, b.count, hex(b.hist) FROM "
                        "{0} AS a LEFT JOIN {0} AS b ON b.interval_id = a.interval_id AND "
                        "b.metric = 2 AND b.thread_id = a.thread_id + {1} WHERE a.metric = 1 "
                        "ORDER BY 1, 2";
    for (const int shift : {0, 1, -3, 1000}) {
      INFO("shift " << shift);
      const auto direct = run(r, fmt::format(fmt::runtime(pairs), "thread_hist", shift)).rows;
      CHECK(direct == run(r, "WITH m AS MATERIALIZED (SELECT * FROM thread_hist) " +
                                 fmt::format(fmt::runtime(pairs), "m", shift))
                          .rows);
      CHECK_FALSE(direct.empty());
    }
    CHECK_THAT(query_plan(r, fmt::format(fmt::runtime(pairs), "thread_hist", 0)),
               Catch::Contains("INDEX 97:interval_id= AND metric= AND thread_id="));
    // Constraints of every kind give what filtering all rows gives.
    for (const char *where :
         {"interval_id = 2", "interval_id > 1", "interval_id >= 2 AND interval_id < 3",
          "interval_id <= 2 AND metric = 2", "metric = 1 AND thread_id = 8", "thread_id = 9",
          "interval_id = 3 AND metric = 1 AND thread_id = 13", "interval_id = '2'",
          "interval_id = 2.0", "interval_id IN (1, 3) AND metric = 2", "interval_id = NULL",
          "interval_id > 9223372036854775807", "interval_id < -9223372036854775808"}) {
      INFO(where);
      CHECK(run(r, std::string("SELECT interval_id, metric, thread_id, count, total, hex(hist) "
                               "FROM thread_hist WHERE ") +
                       where + " ORDER BY 1, 2, 3")
                .rows ==
            run(r, std::string("SELECT * FROM (") + all + ") WHERE " + where + " ORDER BY 1, 2, 3")
                .rows);
    }
  }
  // The same rows stored one per thread (as before v8, and as the rollups store them) read the
  // same through thread_hist and the views.
  std::string move = "BEGIN; DELETE FROM thread_hist_pack;";
  {
    auto r = open_reader(path);
    for (const auto &row : run(r, "SELECT interval_id, metric, data FROM thread_hist_pack").rows) {
      const auto blob = as_blob(row[2]);
      auto entries = unpack(blob);
      REQUIRE(entries.ok());
      for (const auto &e : *entries) {
        move += "INSERT INTO thread_hist_row VALUES(" + std::to_string(as_int(row[0])) + ", " +
                std::to_string(as_int(row[1])) + ", " + std::to_string(e.thread_id) + ", " +
                std::to_string(e.count) + ", " + std::to_string(e.total) + ", x'" +
                hex(std::vector<std::uint8_t>(e.hist.begin(), e.hist.end())) + "');";
      }
    }
  }
  raw_exec(path, move + "COMMIT;");
  auto r = open_reader(path);
  CHECK(scalar_int(r, "SELECT count(*) FROM thread_hist_pack") == 0);
  CHECK(scalar_int(r, "SELECT count(*) FROM thread_hist_row") ==
        static_cast<std::int64_t>(packed.size()));
  CHECK(run(r, all).rows == packed);
  CHECK(run(r, by_comm).rows == packed_comm);
}

TEST_CASE("a damaged pack is a query error naming the interval, and the rest still reads",
          "[store][pack]") {
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  {
    auto w = open_writer(path);
    write_ok(w, make_interval(t0, {make_thread(1, "a", {1000}), make_thread(2, "b", {2000})}));
    write_ok(w, make_interval(t0 + 10 * sec, {make_thread(1, "a", {3000})}));
  }
  raw_exec(path, "UPDATE thread_hist_pack SET data = substr(data, 1, length(data) - 2) WHERE "
                 "interval_id = 1 AND metric = 1");
  auto r = open_reader(path);
  const std::string err = run_error(r, "SELECT count(*) FROM sched_delay");
  CHECK(err.find("thread_hist_pack interval 1 metric 1: damaged pack") != std::string::npos);
  CHECK(scalar_int(r, "SELECT sum(count) FROM sched_delay WHERE ts > " + std::to_string(t0)) == 1);
}

// The sched_delay summary (schema v12): what the builder makes of an interval's threads, the
// round trip, and damage refused with one line.
TEST_CASE("hist_summary: per thread, per comm merged and all merged p99s; damage refused",
          "[store][pack]") {
  using rsched::store::decode_summary;
  using rsched::store::encode_summary;
  using rsched::store::summary_builder;
  summary_builder b;
  // Thread 3 and 9 are 'web' (90 samples at 0.1 ms and 10 at 20 ms: their merged p99 is in the
  // 20 ms bucket, each thread's own p99 not); thread 5 is 'db' without samples.
  const auto h3 = latency_hist(std::vector<std::uint64_t>(90, 100'000));
  const auto h9 = latency_hist(std::vector<std::uint64_t>(10, 20'000'000));
  REQUIRE(b.add(3, "web", h3));
  REQUIRE(b.add(5, "db", latency_hist({})));
  REQUIRE(b.add(9, "web", h9));
  CHECK_FALSE(b.add(9, "web", h9)); // ids must increase
  const auto blob = b.finish();
  CHECK(b.size() == 0);
  auto s = decode_summary(blob);
  REQUIRE(s);
  REQUIRE(s->threads.size() == 3);
  CHECK(s->threads[0].thread_id == 3);
  CHECK(s->threads[0].p99 == rsched::stats::percentile(h3, 99)->value);
  CHECK(s->threads[0].samples == 90);
  CHECK(s->threads[1].thread_id == 5);
  CHECK(s->threads[1].samples == 0);
  CHECK(s->threads[2].p99 == rsched::stats::percentile(h9, 99)->value);
  REQUIRE(s->comms.size() == 1); // 'db' had no samples
  auto web = h3;
  REQUIRE(rsched::stats::merge_into(web, h9));
  CHECK(s->comms[0].thread_id == 3);
  CHECK(s->comms[0].p99 == rsched::stats::percentile(web, 99)->value);
  CHECK(s->comms[0].p99 >= 20'000'000 * 9 / 10);
  CHECK(s->comms[0].samples == 100);
  REQUIRE(s->all);
  CHECK(s->all->p99 == s->comms[0].p99);
  CHECK(encode_summary(*s) == blob);
  // Nothing added: no blob.
  CHECK(b.finish().empty());
  // Every truncation of the blob and a few damaged bytes: an error, never a crash.
  for (std::size_t n = 0; n < blob.size(); ++n) {
    INFO(n);
    CHECK_FALSE(decode_summary(std::span<const std::uint8_t>(blob.data(), n)));
  }
  auto bad = blob;
  bad[0] = 9;
  CHECK(decode_summary(bad).err().msg == "unknown summary version 9");
  bad = blob;
  bad.push_back(0);
  CHECK(decode_summary(bad).err().msg == "damaged summary: bytes after the end");
  bad = blob;
  bad[1] = 0x7f; // 127 threads in a few bytes
  CHECK(decode_summary(bad).err().msg == "damaged summary: more entries than bytes (threads)");
}

// ---- thread_blame's packs (schema v13) ----------------------------------------------------

namespace {

using rsched::store::blame_entry;
using rsched::store::blame_pack_builder;
using rsched::store::unpack_blame;

// Random rows in (thread, culprit) order: several culprits per thread, NULLs, extremes, the
// scheduling fields often repeated from the row before (the builder's short form).
std::vector<blame_entry> random_blame(std::mt19937_64 &rng, int n) {
  std::vector<blame_entry> out;
  std::int64_t thread = static_cast<std::int64_t>(rng() % 1000);
  std::int64_t culprit = static_cast<std::int64_t>(rng() % 100);
  for (int i = 0; i < n; ++i) {
    blame_entry e;
    if (i > 0 && rng() % 3 == 0) {
      thread += 1 + static_cast<std::int64_t>(rng() % (i % 2 == 0 ? 4 : 1'000'000));
      culprit = static_cast<std::int64_t>(rng() % 5000);
    } else if (i > 0) {
      culprit += 1 + static_cast<std::int64_t>(rng() % 50);
    }
    e.thread_id = thread;
    e.culprit_id = culprit;
    e.wait_ns = static_cast<std::int64_t>(rng() >> (rng() % 64));
    e.waits = static_cast<std::int64_t>(rng() % 1000);
    e.preempts = rng() % 4 == 0 ? -static_cast<std::int64_t>(rng() % 5) : 0;
    if (!out.empty() && rng() % 2 == 0) {
      e.sched = out.back().sched;
    } else {
      for (auto &v : e.sched) {
        if (rng() % 3 != 0) {
          v = static_cast<std::int64_t>(rng() % 200) - 1;
        }
      }
    }
    if (rng() % 4 != 0) {
      e.approx_ns = static_cast<std::int64_t>(rng() % 10'000'000);
    }
    out.push_back(e);
  }
  return out;
}

std::vector<std::uint8_t> blame_blob(const std::vector<blame_entry> &in) {
  blame_pack_builder b;
  for (const auto &e : in) {
    REQUIRE(b.add(e));
  }
  return b.finish();
}

} // namespace

TEST_CASE("a blame pack gives back every row exactly, NULLs and extremes included",
          "[store][pack][blame]") {
  std::mt19937_64 rng(11);
  std::vector<blame_entry> out;
  for (int round = 0; round < 300; ++round) {
    auto in = random_blame(rng, static_cast<int>(rng() % 80));
    if (round == 0) {
      blame_entry a;
      a.thread_id = 0;
      a.culprit_id = INT64_MAX;
      a.wait_ns = INT64_MIN;
      a.waits = INT64_MAX;
      a.preempts = -1;
      a.sched = {INT64_MIN, 0, INT64_MAX, std::nullopt, -1};
      a.approx_ns = INT64_MIN;
      blame_entry b = a;
      b.thread_id = INT64_MAX;
      b.culprit_id = 0;
      b.approx_ns.reset();
      in = {a, b};
    }
    const auto blob = blame_blob(in);
    REQUIRE(unpack_blame(blob, out).ok());
    CHECK(out == in);
  }
  // The same rows as thread_blame's b-tree held them cost fewer bytes here.
  auto many = random_blame(rng, 600);
  CHECK(blame_blob(many).size() < many.size() * 28);
}

TEST_CASE("rows out of (thread, culprit) order are refused by the blame builder",
          "[store][pack][blame]") {
  blame_pack_builder b;
  blame_entry e;
  e.thread_id = 10;
  e.culprit_id = 5;
  CHECK(b.add(e));
  CHECK_FALSE(b.add(e)); // the same pair again
  e.culprit_id = 4;
  CHECK_FALSE(b.add(e));
  e.thread_id = 9;
  e.culprit_id = 100;
  CHECK_FALSE(b.add(e));
  e.thread_id = 11;
  e.culprit_id = 1;
  CHECK(b.add(e));
  e.thread_id = -1;
  CHECK_FALSE(b.add(e));
  CHECK(b.size() == 2);
}

TEST_CASE("a damaged blame pack is an error at every cut and every flipped byte, never a crash",
          "[store][pack][blame]") {
  std::mt19937_64 rng(5);
  const auto in = random_blame(rng, 40);
  const auto blob = blame_blob(in);
  std::vector<blame_entry> out;
  for (std::size_t cut = 0; cut < blob.size(); ++cut) {
    INFO("cut at " << cut);
    CHECK_FALSE(unpack_blame(std::span<const std::uint8_t>(blob.data(), cut), out).ok());
  }
  auto longer = blob;
  longer.push_back(0);
  CHECK(unpack_blame(longer, out).err().msg.find("bytes after the last entry") !=
        std::string::npos);
  auto wrong = blob;
  wrong[0] = 9;
  CHECK(unpack_blame(wrong, out).err().msg == "unknown blame pack version 9");
  std::mt19937 flip(3);
  for (int i = 0; i < 3000; ++i) {
    auto b = blob;
    b[flip() % b.size()] = static_cast<std::uint8_t>(flip());
    if (unpack_blame(b, out).ok()) { // a valid pack of other values: still in order
      for (std::size_t k = 1; k < out.size(); ++k) {
        CHECK((out[k].thread_id > out[k - 1].thread_id ||
               (out[k].thread_id == out[k - 1].thread_id &&
                out[k].culprit_id > out[k - 1].culprit_id)));
      }
    }
  }
  CHECK(unpack_blame(std::vector<std::uint8_t>{1, 0xff, 0xff, 0xff, 0x7f}, out).err().msg ==
        "damaged blame pack: more entries than bytes");
}

TEST_CASE("a blame pack with a negative id is damaged, as the builder writes none",
          "[store][pack][blame]") {
  // The input the blame_pack fuzz target found (fuzz/corpus/blame_pack/crash-negative-id): a
  // new thread's culprit zigzag-coded negative. It unpacked, and the builder refused its rows.
  const std::vector<std::uint8_t> blob = {0x01, 0x03, 0x0a, 0x06, 0x1f, 0x80, 0x92, 0x77,
                                          0x14, 0x02, 0x00, 0x03, 0x8e, 0x01, 0x00, 0x02,
                                          0x01, 0x00, 0x00, 0x0a, 0x1f, 0x80, 0x92, 0x00,
                                          0x28, 0x03, 0x02, 0x20, 0x0e, 0x00, 0x00};
  std::vector<blame_entry> out;
  const auto r = unpack_blame(blob, out);
  REQUIRE_FALSE(r.ok());
  CHECK(r.err().msg == "damaged blame pack: negative id");
}

// ---- thread_wakeup's and thread_blocked's packs (schema v18) --------------------------------

namespace {

using rsched::store::row_pack_builder;
using rsched::store::unpack_rows;

// Random rows of `w` columns in strictly increasing order of their first `keys`: several rows
// per thread, negative and extreme values in the rest.
std::vector<std::int64_t> random_rows(std::mt19937_64 &rng, int n, std::size_t w,
                                      std::size_t keys) {
  std::vector<std::int64_t> out;
  std::vector<std::int64_t> row(w, 0);
  for (int i = 0; i < n; ++i) {
    if (i == 0 || rng() % 3 == 0) {
      row[0] += 1 + static_cast<std::int64_t>(rng() % (i % 2 == 0 ? 4 : 1'000'000));
      for (std::size_t k = 1; k < keys; ++k) {
        row[k] = static_cast<std::int64_t>(rng() % 50);
      }
    } else {
      row[keys - 1] += 1 + static_cast<std::int64_t>(rng() % 7); // the last key column moves on
    }
    for (std::size_t k = keys; k < w; ++k) {
      const auto pick = rng() % 5;
      row[k] = pick == 0   ? std::numeric_limits<std::int64_t>::max()
               : pick == 1 ? std::numeric_limits<std::int64_t>::min()
               : pick == 2 ? -static_cast<std::int64_t>(rng() % 1000)
                           : static_cast<std::int64_t>(rng() >> (rng() % 64));
    }
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

} // namespace

TEST_CASE("row packs round-trip every value, wrapping differences included",
          "[store][pack][rowpack]") {
  std::mt19937_64 rng(49);
  for (const auto &[w, keys] : {std::pair<std::size_t, std::size_t>{5, 3}, {4, 2}, {1, 1}}) {
    for (const int n : {1, 2, 17, 3000}) {
      const auto rows = random_rows(rng, n, w, keys);
      row_pack_builder b(w, keys);
      for (std::size_t i = 0; i < rows.size(); i += w) {
        REQUIRE(b.add(std::span<const std::int64_t>(rows).subspan(i, w)));
      }
      CHECK(b.size() == static_cast<std::size_t>(n));
      const auto blob = b.finish();
      std::vector<std::int64_t> back;
      REQUIRE(unpack_rows(blob, w, back).ok());
      CHECK(back == rows);
      // A pack is read as a pack of its own width only.
      CHECK(unpack_rows(blob, w + 1, back).err().msg ==
            fmt::format("row pack of {} columns where {} were expected", w, w + 1));
    }
  }
  // An empty pack (never written: the writer skips an interval without rows) still reads.
  row_pack_builder empty(4, 2);
  std::vector<std::int64_t> back{1};
  REQUIRE(unpack_rows(empty.finish(), 4, back).ok());
  CHECK(back.empty());
}

TEST_CASE("a row pack takes rows only in key order and of its width", "[store][pack][rowpack]") {
  row_pack_builder b(4, 2);
  const std::vector<std::int64_t> a{5, 2, 100, 1}, same_key{5, 2, 7, 7}, lower{5, 1, 0, 0},
      next_thread{6, 0, 0, 0}, back_thread{4, 9, 0, 0}, narrow{7, 1, 1};
  CHECK(b.add(a));
  CHECK_FALSE(b.add(same_key)); // (thread, stack) once
  CHECK_FALSE(b.add(lower));
  CHECK_FALSE(b.add(narrow));
  CHECK(b.add(next_thread));
  CHECK_FALSE(b.add(back_thread));
  CHECK(b.size() == 2);
  std::vector<std::int64_t> back;
  REQUIRE(unpack_rows(b.finish(), 4, back).ok());
  CHECK(back == std::vector<std::int64_t>{5, 2, 100, 1, 6, 0, 0, 0});
  b.clear();
  CHECK(b.add(back_thread)); // a new pack starts afresh
}

TEST_CASE("a damaged row pack is an error, never a crash or a wrong row",
          "[store][pack][rowpack]") {
  row_pack_builder b(2, 1);
  for (std::int64_t i = 0; i < 40; ++i) {
    const std::vector<std::int64_t> row{i * 3, -i * 1'000'000'007};
    REQUIRE(b.add(row));
  }
  const auto blob = b.finish();
  std::vector<std::int64_t> out;
  CHECK(unpack_rows({}, 2, out).err().msg == "damaged row pack: empty");
  auto bad = blob;
  bad[0] = 2;
  CHECK(unpack_rows(bad, 2, out).err().msg == "unknown row pack version 2");
  for (std::size_t cut = 1; cut < blob.size(); ++cut) {
    CHECK_FALSE(unpack_rows(std::span<const std::uint8_t>(blob).first(cut), 2, out).ok());
  }
  bad = blob;
  bad.push_back(0);
  CHECK(unpack_rows(bad, 2, out).err().msg == "damaged row pack: bytes after the last row");
  bad = blob;
  bad[2] = 0x7f; // 127 rows in a few bytes
  CHECK(unpack_rows(bad, 2, out).err().msg == "damaged row pack: more rows than bytes");
  // The second row's thread difference made negative: zigzag(-3) = 5.
  row_pack_builder two(1, 1);
  REQUIRE(two.add(std::vector<std::int64_t>{10}));
  REQUIRE(two.add(std::vector<std::int64_t>{13}));
  bad = two.finish();
  REQUIRE(bad.back() == 6); // zigzag(+3)
  bad.back() = 5;
  CHECK(unpack_rows(bad, 1, out).err().msg == "damaged row pack: thread ids out of order");
  // Random bytes after a valid header: an error or rows, and never past the blob.
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::vector<std::uint8_t> junk{1, 3, static_cast<std::uint8_t>(rng() % 40)};
    const auto n = rng() % 64;
    for (std::uint64_t k = 0; k < n; ++k) {
      junk.push_back(static_cast<std::uint8_t>(rng()));
    }
    if (unpack_rows(junk, 3, out).ok()) {
      CHECK(out.size() % 3 == 0);
    }
  }
}
