// rsched::trace: what the hand-written encoder writes is what protoc reads, field by field, and
// the decoder gives the events back.
#include "rsched/trace/perfetto.hpp"

#include "support/process.hpp"
#include "support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <sstream>

using namespace rsched;
using trace::event_kind;
using trace::make_comm;
using trace::sched_event;

namespace {

std::vector<sched_event> sample_events() {
  std::vector<sched_event> v;
  auto sw = [&](std::uint64_t ts, std::uint32_t cpu, int prev, int next, std::int64_t state,
                const char *comm, int prio) {
    sched_event e;
    e.ts = ts;
    e.cpu = cpu;
    e.kind = event_kind::sched_switch;
    e.pid = prev;
    e.tid = next;
    e.tgid = next;
    e.prio = prio;
    e.prev_state = state;
    e.comm = make_comm(comm);
    v.push_back(e);
  };
  auto wk = [&](std::uint64_t ts, std::uint32_t cpu, int waker, int tid, int target,
                const char *comm) {
    sched_event e;
    e.ts = ts;
    e.cpu = cpu;
    e.kind = event_kind::sched_waking;
    e.pid = waker;
    e.tid = tid;
    e.tgid = tid;
    e.prio = 120;
    e.target_cpu = target;
    e.comm = make_comm(comm);
    v.push_back(e);
  };
  sw(1'000'000'000'000, 0, 0, 101, 0, "victim", 120);
  wk(1'000'000'000'500, 0, 101, 202, 1, "hog \"quoted\"");
  sw(1'000'000'001'000, 0, 101, 0, 1, "swapper/0", 120);
  sw(1'000'000'000'700, 1, 0, 202, 0, "hog \"quoted\"", 100);
  sw(1'000'000'003'000, 1, 202, 303, 0x100, "\xff\xfe non-utf8", 139);
  {
    sched_event e;
    e.ts = 1'000'000'003'500;
    e.cpu = 1;
    e.kind = event_kind::sched_migrate_task;
    e.pid = 303;
    e.tid = 202;
    e.tgid = 202;
    e.prio = 100;
    e.orig_cpu = 1;
    e.target_cpu = 0;
    e.comm = make_comm("hog \"quoted\"");
    v.push_back(e);
    e.ts = 1'000'000'004'000;
    e.kind = event_kind::sched_process_fork;
    e.pid = 303;
    e.tid = 304;
    e.tgid = 303;
    e.prio = 0;
    e.orig_cpu = 0;
    e.target_cpu = 0;
    e.comm = make_comm("child");
    e.comm2 = make_comm("\xff\xfe non-utf8");
    v.push_back(e);
    e = {};
    e.ts = 1'000'000'004'500;
    e.cpu = 1;
    e.kind = event_kind::sched_wakeup_new;
    e.pid = 303;
    e.tid = 304;
    e.tgid = 303;
    e.prio = 120;
    e.target_cpu = 0;
    e.comm = make_comm("child");
    v.push_back(e);
    e = {};
    e.ts = 1'000'000'005'000;
    e.cpu = 1;
    e.kind = event_kind::task_rename;
    e.pid = 303;
    e.tid = 303;
    e.tgid = 303;
    e.comm2 = make_comm("\xff\xfe non-utf8");
    e.comm = make_comm("renamed\\n");
    v.push_back(e);
    e = {};
    e.ts = 1'000'000'006'000;
    e.cpu = 1;
    e.kind = event_kind::sched_process_exit;
    e.pid = 303;
    e.tid = 303;
    e.tgid = 303;
    e.prio = 139;
    e.comm = make_comm("renamed\\n");
    v.push_back(e);
  }
  return v;
}

// The events as decode() gives them back: per CPU in time order, the compact switch's prev tid
// from the CPU's previous switch and without prev_prio, the waking's waker likewise, no tgid in
// compact events, non-compact events as written.
std::vector<sched_event> as_decoded(std::vector<sched_event> v) {
  std::stable_sort(v.begin(), v.end(), [](const sched_event &a, const sched_event &b) {
    return a.cpu != b.cpu ? a.cpu < b.cpu : a.ts < b.ts;
  });
  std::map<std::uint32_t, std::int32_t> running;
  for (auto &e : v) {
    if (e.kind == event_kind::sched_switch) {
      e.pid = running[e.cpu];
      running[e.cpu] = e.tid;
      e.prev_prio = 0;
      e.tgid = 0;
    } else if (e.kind == event_kind::sched_waking) {
      e.pid = running[e.cpu];
      e.tgid = 0;
    } else {
      if (e.kind != event_kind::sched_process_exit) {
        e.tgid = 0;
      }
      if (e.kind == event_kind::sched_process_fork || e.kind == event_kind::task_rename) {
        e.prio = 0;
      }
      if (e.kind == event_kind::sched_process_fork) {
        e.target_cpu = 0;
      }
      if (e.kind == event_kind::task_rename) {
        e.pid = e.pid; // the common pid is written
      }
    }
  }
  return v;
}

// protoc's text output: every `name: value` line, values in order, per field name.
std::map<std::string, std::vector<std::string>> fields_of(const std::string &text) {
  std::map<std::string, std::vector<std::string>> m;
  static const std::regex line(R"(^\s*([a-z_]+): (.*)$)");
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l)) {
    std::smatch mt;
    if (std::regex_match(l, mt, line)) {
      m[mt[1]].push_back(mt[2]);
    }
  }
  return m;
}

// protoc's text escaping of a string (C escapes; bytes >= 0x80 as octal).
std::string protoc_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"') {
      out += "\\\"";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (u < 0x20 || u >= 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\%03o", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

} // namespace

TEST_CASE("prev_state is reported as the kernel's sched_switch tracepoint does", "[trace]") {
  CHECK(trace::ftrace_prev_state(true, 1, 0) == 0x100);       // preempted: TASK_REPORT_MAX
  CHECK(trace::ftrace_prev_state(false, 0, 0) == 0);          // runnable (yield)
  CHECK(trace::ftrace_prev_state(false, 1, 0) == 1);          // S
  CHECK(trace::ftrace_prev_state(false, 2, 0) == 2);          // D
  CHECK(trace::ftrace_prev_state(false, 0x402, 0) == 0x80);   // TASK_IDLE: I
  CHECK(trace::ftrace_prev_state(false, 0x80, 0x10) == 0x10); // TASK_DEAD, EXIT_DEAD: X
  CHECK(trace::ftrace_prev_state(false, 0x80, 0x20) == 0x20); // EXIT_ZOMBIE: Z
  CHECK(trace::ftrace_prev_state(false, 0x100, 0) == 0);      // TASK_WAKEKILL alone: not reported
}

TEST_CASE("encoded trace decodes with protoc field by field", "[trace]") {
  REQUIRE(test::in_path("protoc"));
  const auto events = sample_events();
  std::vector<trace::thread_name> names{{400, 400, make_comm("only-named")}};
  trace::trace_input in;
  in.events = events;
  in.names = names;
  in.lossy_cpus = {1};
  auto bytes = trace::encode(in);
  REQUIRE(bytes);
  test::temp_dir dir;
  const std::string file = (dir.path() / "t.pftrace").string();
  {
    std::ofstream out(file, std::ios::binary);
    out << *bytes;
  }
  auto r = test::run_program({"sh", "-c",
                              "protoc --decode=perfetto.protos.Trace -I " RSCHED_TRACE_PROTO_DIR
                              " rsched_perfetto.proto < '" +
                                  file + "'"});
  INFO(r.err);
  REQUIRE(r.status == 0);
  const auto m = fields_of(r.out);
  using sv = std::vector<std::string>;
  // CPU 0's bundle, then CPU 1's; each CPU's switches, delta-coded.
  CHECK(m.at("cpu") == sv{"0", "1"});
  CHECK(m.at("lost_events") == sv{"true"});
  CHECK(m.at("switch_timestamp") == sv{"1000000000000", "1000", "1000000000700", "2300"});
  CHECK(m.at("switch_prev_state") == sv{"0", "1", "0", "256"});
  CHECK(m.at("switch_next_pid") == sv{"101", "0", "202", "303"});
  CHECK(m.at("switch_next_prio") == sv{"120", "120", "100", "139"});
  CHECK(m.at("switch_next_comm_index") == sv{"0", "2", "0", "1"});
  CHECK(m.at("intern_table") == sv{"\"victim\"", protoc_string("hog \"quoted\""), "\"swapper/0\"",
                                   protoc_string("hog \"quoted\""),
                                   protoc_string("\xff\xfe non-utf8")});
  CHECK(m.at("waking_timestamp") == sv{"1000000000500"});
  CHECK(m.at("waking_pid") == sv{"202"});
  CHECK(m.at("waking_target_cpu") == sv{"1"});
  CHECK(m.at("waking_comm_index") == sv{"1"});
  // The other events, CPU 1's in time order.
  CHECK(m.at("orig_cpu") == sv{"1"});
  CHECK(m.at("dest_cpu") == sv{"0"});
  CHECK(m.at("parent_pid") == sv{"303"});
  CHECK(m.at("child_pid") == sv{"304"});
  CHECK(m.at("child_comm") == sv{"\"child\""});
  CHECK(m.at("parent_comm") == sv{protoc_string("\xff\xfe non-utf8")});
  CHECK(m.at("oldcomm") == sv{protoc_string("\xff\xfe non-utf8")});
  CHECK(m.at("newcomm") == sv{protoc_string("renamed\\n")});
  CHECK(m.at("target_cpu") == sv{"0"}); // sched_wakeup_new's
  // FtraceEvent timestamps and pids, then the migrate's, wakeup_new's, exit's tids.
  CHECK(m.at("timestamp").size() == 3 + 5); // packets (tree + 2 bundles), the 5 FtraceEvents
  // The process tree: processes by pid, threads by tid (not the idle task), names as first
  // seen; then sched_process_exit's tgid.
  CHECK(m.at("tid") == sv{"101", "202", "303", "304", "400"});
  CHECK(m.at("tgid") == sv{"101", "202", "303", "303", "400", "303"});
  CHECK(m.at("name") == sv{"\"victim\"", protoc_string("hog \"quoted\""),
                           protoc_string("\xff\xfe non-utf8"), "\"child\"", "\"only-named\""});
  CHECK(m.at("cmdline") == sv{"\"victim\"", protoc_string("hog \"quoted\""),
                              protoc_string("\xff\xfe non-utf8"), "\"only-named\""});
  CHECK(m.at("trusted_packet_sequence_id") == sv{"1", "1", "1"});
}

// The clock snapshot is Perfetto's ClockSnapshot (TracePacket field 6): protoc names every field
// of it from the schema (an unknown field would print as its number), the clock ids as
// BuiltinClock's, and it comes first, before the ProcessTree and the events it times.
TEST_CASE("the clock snapshot decodes with protoc as Perfetto's ClockSnapshot", "[trace]") {
  REQUIRE(test::in_path("protoc"));
  const auto events = sample_events();
  trace::trace_input in;
  in.events = events;
  in.clocks = trace::clock_snapshot{1'000'000'004'321, 999'000'000'123, 1'796'000'000'123'456'789};
  auto bytes = trace::encode(in);
  REQUIRE(bytes);
  test::temp_dir dir;
  const std::string file = (dir.path() / "t.pftrace").string();
  std::ofstream(file, std::ios::binary) << *bytes;
  auto r = test::run_program({"sh", "-c",
                              "protoc --decode=perfetto.protos.Trace -I " RSCHED_TRACE_PROTO_DIR
                              " rsched_perfetto.proto < '" +
                                  file + "'"});
  INFO(r.err);
  REQUIRE(r.status == 0);
  INFO(r.out);
  CHECK(r.out.rfind("packet {\n"
                    "  clock_snapshot {\n"
                    "    clocks {\n"
                    "      clock_id: 6\n"
                    "      timestamp: 1000000004321\n"
                    "    }\n"
                    "    clocks {\n"
                    "      clock_id: 3\n"
                    "      timestamp: 999000000123\n"
                    "    }\n"
                    "    clocks {\n"
                    "      clock_id: 1\n"
                    "      timestamp: 1796000000123456789\n"
                    "    }\n"
                    "    primary_trace_clock: BUILTIN_CLOCK_BOOTTIME\n"
                    "  }\n"
                    "  trusted_packet_sequence_id: 1\n"
                    "}\n"
                    "packet {\n"
                    "  process_tree {\n",
                    0) == 0);
  // No field protoc had to show by number: every one is in the schema.
  std::istringstream lines(r.out);
  for (std::string l; std::getline(lines, l);) {
    INFO(l);
    CHECK_FALSE(std::regex_search(l, std::regex(R"(^\s*[0-9]+[ :])")));
  }
  // Read back by rsched's decoder; a trace without one has none.
  auto d = trace::decode(*bytes);
  REQUIRE(d);
  REQUIRE(d->clocks);
  CHECK(*d->clocks == *in.clocks);
  CHECK(d->packets == 4);
  in.clocks.reset();
  auto without = trace::encode(in);
  REQUIRE(without);
  auto d2 = trace::decode(*without);
  REQUIRE(d2);
  CHECK_FALSE(d2->clocks);
}

TEST_CASE("decode gives back what encode wrote", "[trace]") {
  const auto events = sample_events();
  trace::trace_input in;
  in.events = events;
  in.lossy_cpus = {0};
  auto bytes = trace::encode(in);
  REQUIRE(bytes);
  auto d = trace::decode(*bytes);
  REQUIRE(d);
  CHECK(d->packets == 3);
  CHECK(d->lossy_cpus == std::vector<std::uint32_t>{0});
  const auto want = as_decoded(events);
  REQUIRE(d->events.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO(i);
    CHECK(d->events[i] == want[i]);
  }
}

TEST_CASE("many events split into bundles and round-trip", "[trace]") {
  std::mt19937 rng(7);
  std::vector<sched_event> v;
  std::uint64_t ts[2] = {5'000'000'000, 5'000'000'000};
  for (int i = 0; i < 10000; ++i) {
    sched_event e;
    e.cpu = static_cast<std::uint32_t>(rng() % 2);
    ts[e.cpu] += 1 + rng() % 100000;
    e.ts = ts[e.cpu];
    e.kind = rng() % 2 == 0 ? event_kind::sched_switch : event_kind::sched_waking;
    e.tid = static_cast<std::int32_t>(rng() % 50);
    e.prio = static_cast<std::int32_t>(rng() % 140);
    e.prev_state = e.kind == event_kind::sched_switch ? (rng() % 2 == 0 ? 0x100 : 1) : 0;
    e.target_cpu = e.kind == event_kind::sched_waking ? static_cast<std::int32_t>(rng() % 2) : 0;
    e.comm = make_comm("t" + std::to_string(e.tid));
    v.push_back(e);
  }
  trace::trace_input in;
  in.events = v;
  in.bundle_events = 1000;
  auto bytes = trace::encode(in);
  REQUIRE(bytes);
  auto d = trace::decode(*bytes);
  REQUIRE(d);
  const auto n0 = static_cast<std::size_t>(
      std::count_if(v.begin(), v.end(), [](const sched_event &e) { return e.cpu == 0; }));
  CHECK(d->packets == 1 + (n0 + 999) / 1000 + (v.size() - n0 + 999) / 1000);
  const auto want = as_decoded(v);
  REQUIRE(d->events.size() == want.size());
  CHECK(d->events == want);
}

TEST_CASE("encode refuses a CPU's events out of order; decode refuses garbage", "[trace]") {
  auto v = sample_events();
  std::swap(v[0], v[2]);
  trace::trace_input in;
  in.events = v;
  auto bytes = trace::encode(in);
  REQUIRE_FALSE(bytes);
  CHECK(bytes.err().msg.find("out of time order") != std::string::npos);

  in.events = sample_events();
  auto good = trace::encode(in);
  REQUIRE(good);
  for (std::size_t cut : {std::size_t{1}, good->size() / 2, good->size() - 1}) {
    auto d = trace::decode(std::string_view(*good).substr(0, cut));
    CHECK_FALSE(d);
  }
  CHECK_FALSE(trace::decode("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"));
}
