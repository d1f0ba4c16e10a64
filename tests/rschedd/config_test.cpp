// rschedd's options to config step (config.hpp) over real argv vectors: the defaults, each
// option's effect on the config and nothing else, and that every flag of --help is accounted
// for, so an option added to the parser and the usage text but forgotten in make_config fails
// here.
#include "rsched/rschedd/config.hpp"
#include "rsched/rschedd/options.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

using namespace rsched;
using namespace rsched::rschedd;

namespace {

using field_map = std::map<std::string, std::string>;

daemon_config config_of(const std::vector<std::string> &args) {
  auto o = parse_options(args);
  REQUIRE(o.ok());
  auto c = make_config(*o);
  REQUIRE(c.ok());
  return std::move(*c);
}

std::string str(bool b) {
  return b ? "true" : "false";
}
std::string str(const std::string &s) {
  return '"' + s + '"';
}
std::string str(const char *s) {
  return str(std::string(s));
}
template <typename T>
requires std::is_integral_v<T> std::string str(T v) {
  return std::to_string(v);
}
template <typename T> std::string str(const std::optional<T> &v) {
  return v ? str(*v) : "none";
}
std::string str(const std::vector<std::string> &v) {
  std::string s = "[";
  for (const auto &x : v) {
    s += (s.size() > 1 ? "," : "") + str(x);
  }
  return s + "]";
}
std::string str(view_kind v) {
  return v == view_kind::tables ? "tables" : "compact";
}
std::string str(output_mode m) {
  return m == output_mode::detailed  ? "detailed"
         : m == output_mode::grouped ? "grouped"
                                     : "collapsed";
}

// Every field of the config as text, by name. A field make_config does not set is listed too:
// an option mapped into it shows up as a change.
field_map fields(const daemon_config &c) {
  field_map f;
  const bpf::options &b = c.bpf;
  f["bpf.mode"] = bpf::to_string(b.mode);
  f["bpf.groups"] = str(b.groups);
  f["bpf.counter_mask"] = str(b.counter_mask);
  bool tables = false;
  for (std::size_t i = 0; i < b.cpu_to_die.size(); ++i) {
    tables = tables || b.cpu_to_die[i] != 0 || b.cpu_to_numa[i] != 0;
  }
  f["bpf.cpu_tables"] = str(tables);
  f["bpf.graveyard_entries"] = str(b.graveyard_entries);
  f["bpf.task_hash_entries"] = str(b.task_hash_entries);
  f["bpf.read"] = bpf::to_string(b.read);
  f["bpf.dirty_list_entries"] = str(b.dirty_list_entries);
  f["bpf.max_delay_ns"] = str(b.max_delay_ns);
  f["bpf.max_sleep_ns"] = str(b.max_sleep_ns);
  f["bpf.verbose"] = str(b.verbose);
  f["bpf.delay_rq_clock"] = str(b.delay_rq_clock);
  f["bpf.long_sleep_ns"] = str(b.long_sleep_ns);
  f["bpf.segment_buffer_bytes"] = str(b.segment_buffer_bytes);
  f["bpf.counter_fds"] = str(b.counter_fds.size());

  f["store"] = str(c.store.has_value());
  if (c.store) {
    const store_config &s = *c.store;
    f["store.path"] = str(s.path);
    f["store.group_name"] = str(s.group_name);
    f["store.open.lock"] = str(s.open.lock);
    f["store.open.group"] = s.open.group ? str(*s.open.group) : "none";
    f["store.keep.keep_raw_ns"] = str(s.keep.keep_raw_ns);
    f["store.keep.keep_1m_ns"] = str(s.keep.keep_1m_ns);
    f["store.keep.keep_1h_ns"] = str(s.keep.keep_1h_ns);
    f["store.keep.max_bytes"] = str(s.keep.max_bytes);
  }

  f["filter.pid"] = str(c.filter.pid);
  f["filter.comm"] = str(c.filter.comm);
  f["filter.global_comm"] = str(c.filter.global_comm);
  f["filter.cgroup"] = str(c.filter.cgroup);
  f["filter.min_latency_us"] = str(c.filter.min_latency_us);
  f["filter.latency_on"] = str(c.filter.latency_on);

  // live.filt is compiled by main from `filter` (filter::make); nothing to read in it here.
  f["live.view"] = str(c.live.view);
  f["live.ropt.mode"] = str(c.live.ropt.mode);
  f["live.ropt.groups"] = str(c.live.ropt.groups);
  f["live.ropt.ipc"] = str(c.live.ropt.ipc);
  f["live.ropt.num_dies"] = str(c.live.ropt.num_dies);
  f["live.ropt.num_numa_nodes"] = str(c.live.ropt.num_numa_nodes);
  f["live.ipc"] = str(c.live.ipc);
  f["live.event_names"] = str(c.live.event_names);
  f["live.window_ns"] = str(c.live.window_ns);
  f["live.max_threads"] = str(c.live.max_threads);
  f["live.max_queued"] = str(c.live.max_queued);

  const recorder_config &r = c.recorder;
  f["recorder.interval_ns"] = str(r.interval_ns);
  f["recorder.per_second"] = str(r.per_second);
  f["recorder.run_ns"] = str(r.run_ns);
  f["recorder.groups"] = str(r.groups);
  f["recorder.ipc"] = str(r.ipc);
  f["recorder.dies"] = str(r.dies);
  f["recorder.numa_nodes"] = str(r.numa_nodes);
  f["recorder.events"] = str(r.events.size());
  f["recorder.delay_clock"] = str(r.delay_clock);
  f["recorder.boot_id"] = str(r.boot_id);
  f["recorder.db_path"] = str(r.db_path);
  f["recorder.stats"] = str(r.stats);
  f["recorder.callbacks"] = str(static_cast<bool>(r.note) || static_cast<bool>(r.cgroup_path) ||
                                static_cast<bool>(r.new_interval) || static_cast<bool>(r.enrich) ||
                                static_cast<bool>(r.show) || static_cast<bool>(r.done));

  f["metrics.on"] = str(c.metrics.on());
  f["metrics.state.top"] = str(c.metrics.state.top);
  f["metrics.state.idle_expiry_ns"] = str(c.metrics.state.idle_expiry_ns);
  f["metrics.state.start_ns"] = str(c.metrics.state.start_ns);
  f["metrics.listen"] =
      c.metrics.listen ? c.metrics.listen->host + " " + str(c.metrics.listen->port) : "none";
  f["metrics.textfile"] = str(c.metrics.textfile);

  f["priority.rt_priority"] = str(c.priority.rt_priority);
  f["priority.nice"] = str(c.priority.nice);
  f["priority.slice_us"] = str(c.priority.slice_us);
  f["priority.verbose"] = str(c.priority.verbose);

  f["feeds.schedstat"] = str(c.feeds.schedstat);
  f["feeds.pressure"] = str(c.feeds.pressure);

  f["flight"] = str(c.flight.has_value());
  if (c.flight) {
    const flight_setup &fl = *c.flight;
    f["flight.load.mode"] = bpf::to_string(fl.load.mode);
    f["flight.load.verbose"] = str(fl.load.verbose);
    f["flight.load.slots_per_cpu"] = str(fl.load.slots_per_cpu);
    f["flight.span_ns"] = str(fl.recorder.span_ns);
    f["flight.max_events_per_cpu"] = str(fl.recorder.max_events_per_cpu);
    f["flight.threshold_ns"] = str(fl.recorder.threshold_ns);
    f["flight.min_gap_ns"] = str(fl.recorder.min_gap_ns);
    f["flight.dir"] = str(fl.recorder.dir);
    f["flight.legacy_dir"] = str(fl.legacy_dir);
    f["flight.keep"] = str(fl.keep);
    f["flight.max_bytes"] = str(fl.max_bytes);
  }
  return f;
}

// The fields of `now` that differ from `base`, with their new values ("absent": gone).
field_map changes(const field_map &base, const field_map &now) {
  field_map d;
  for (const auto &[k, v] : now) {
    if (const auto it = base.find(k); it == base.end() || it->second != v) {
      d[k] = v;
    }
  }
  for (const auto &[k, v] : base) {
    if (!now.contains(k)) {
      d[k] = "absent";
    }
  }
  return d;
}

std::string describe(const field_map &m) {
  std::ostringstream s;
  for (const auto &[k, v] : m) {
    s << k << " = " << v << "\n";
  }
  return s.str();
}

// Each option with a value, and what it changes in the config against the defaults.
struct effect {
  std::vector<std::string> args;
  field_map changed;
};

constexpr std::int64_t sec = 1'000'000'000;

std::vector<effect> effects() {
  // An explicit -g replaces the default groups (latency and pressure).
  auto groups = [](std::uint32_t g) {
    const bool latency = (g & RSCHED_G_LATENCY) != 0;
    field_map m{{"bpf.groups", str(g)},
                {"recorder.groups", str(g)},
                {"live.ropt.groups", str(g)},
                {"feeds.pressure", "false"}};
    if (!latency) {
      m["filter.latency_on"] = "false";
      m["recorder.delay_clock"] = str("");
    }
    if ((g & RSCHED_G_MIGRATION) != 0) {
      m["recorder.per_second"] = "true";
    }
    return m;
  };
  field_map slice = groups(RSCHED_G_SLICE);
  field_map migration = groups(RSCHED_G_MIGRATION);
  field_map blame = groups(RSCHED_G_BLAME | RSCHED_G_LATENCY);
  field_map wakeup_20ms = groups(RSCHED_G_WAKEUP | RSCHED_G_LATENCY);
  wakeup_20ms["bpf.long_sleep_ns"] = str(std::uint64_t{20'000'000});
  field_map schedstat = groups(0);
  schedstat["feeds.schedstat"] = "true";
  field_map pressure = groups(0);
  pressure.erase("feeds.pressure"); // on, as by default
  field_map perf = groups(RSCHED_G_PERF);
  // --flight-recorder 5 and what each flight option changes on top of it.
  auto flight = [](const field_map &more) {
    field_map m{{"flight", "true"},
                {"flight.load.mode", bpf::to_string(bpf::attach_mode::automatic)},
                {"flight.load.verbose", "false"},
                {"flight.load.slots_per_cpu", "65536"},
                {"flight.span_ns", str(5 * sec)},
                {"flight.max_events_per_cpu", str(std::size_t{1} << 20)},
                {"flight.threshold_ns", "none"},
                {"flight.min_gap_ns", str(60 * sec)},
                {"flight.dir", str("/var/lib/rsched/rsched.db.captures")},
                {"flight.legacy_dir", str("/var/lib/rsched/rsched.captures")},
                {"flight.keep", "20"},
                {"flight.max_bytes", str(std::uint64_t{1} << 30)}};
    for (const auto &[k, v] : more) {
      m[k] = v;
    }
    return m;
  };

  return {
      {{"--interval", "10"},
       {{"recorder.interval_ns", str(10 * sec)}, {"live.window_ns", str(10 * sec)}}},
      // The compact view's window is never shorter than 5 s.
      {{"-i", "2"}, {{"recorder.interval_ns", str(2 * sec)}}},
      {{"--run-time", "30"}, {{"recorder.run_ns", str(30 * sec)}}},
      {{"--db", "/tmp/x.db"},
       {{"store.path", str("/tmp/x.db")}, {"recorder.db_path", str("/tmp/x.db")}}},
      {{"--no-db"},
       {{"store", "false"},
        {"store.path", "absent"},
        {"store.group_name", "absent"},
        {"store.open.lock", "absent"},
        {"store.open.group", "absent"},
        {"store.keep.keep_raw_ns", "absent"},
        {"store.keep.keep_1m_ns", "absent"},
        {"store.keep.keep_1h_ns", "absent"},
        {"store.keep.max_bytes", "absent"},
        {"recorder.db_path", str("")}}},
      {{"--db-group", "adm"}, {{"store.group_name", str("adm")}}},
      {{"--db-group", ""}, {{"store.group_name", str("")}}},
      {{"--bpf-mode", "raw_tp"}, {{"bpf.mode", bpf::to_string(bpf::attach_mode::raw_tp)}}},
      {{"--live-read", "iterator"}, {{"bpf.read", bpf::to_string(bpf::live_read::iterator)}}},
      {{"--delay-clock", "runqueue"},
       {{"bpf.delay_rq_clock", "true"}, {"recorder.delay_clock", str("runqueue")}}},
      {{"--keep-raw", "12h"}, {{"store.keep.keep_raw_ns", str(12 * 3600 * sec)}}},
      {{"--keep-1m", "7d"}, {{"store.keep.keep_1m_ns", str(7 * 86400 * sec)}}},
      {{"--keep-1h", "0"}, {{"store.keep.keep_1h_ns", "0"}}},
      {{"--max-size", "1G"}, {{"store.keep.max_bytes", str(std::uint64_t{1} << 30)}}},
      {{"--graveyard-entries", "4096"}, {{"bpf.graveyard_entries", "4096"}}},
      {{"--task-hash-entries", "32768"}, {{"bpf.task_hash_entries", "32768"}}},
      {{"--dirty-list-entries", "1024"}, {{"bpf.dirty_list_entries", "1024"}}},
      {{"--group", "slice"}, slice},
      {{"-g", "migration"}, migration},
      {{"-g", "blame"}, blame},
      {{"-g", "wakeup", "--stack-sleep", "20ms"}, wakeup_20ms},
      {{"-g", "schedstat"}, schedstat},
      {{"-g", "pressure"}, pressure},
      {{"-g", "perf=cycles"}, perf},
      {{"--comm", "^a", "-c", "b,c"},
       {{"filter.comm", str(std::vector<std::string>{"^a", "b,c"})}}},
      {{"--global-comm", "x"}, {{"filter.global_comm", str(std::vector<std::string>{"x"})}}},
      {{"--cgroup", "/y"}, {{"filter.cgroup", str(std::vector<std::string>{"/y"})}}},
      {{"--pid", "42"}, {{"filter.pid", "42"}}},
      {{"--min-latency", "100"}, {{"filter.min_latency_us", "100"}}},
      // -C and -d: the tables by default, in their mode.
      {{"--no-collapse"}, {{"live.view", "tables"}, {"live.ropt.mode", "grouped"}}},
      {{"--detailed"}, {{"live.view", "tables"}, {"live.ropt.mode", "detailed"}}},
      {{"-d", "-C"}, {{"live.view", "tables"}, {"live.ropt.mode", "detailed"}}},
      {{"--view", "tables"}, {{"live.view", "tables"}}},
      {{"--view", "compact", "-C"}, {{"live.ropt.mode", "grouped"}}},
      {{"--stats"}, {{"recorder.stats", "true"}}},
      {{"--recorder-nice", "-5"}, {{"priority.nice", "-5"}}},
      {{"--recorder-slice-us", "0"}, {{"priority.slice_us", "0"}}},
      {{"--rt-priority", "10"}, {{"priority.rt_priority", "10"}}},
      {{"--metrics-listen", "9466"},
       {{"metrics.on", "true"}, {"metrics.listen", "127.0.0.1 9466"}}},
      {{"--metrics-listen", "[::]:0"}, {{"metrics.on", "true"}, {"metrics.listen", ":: 0"}}},
      {{"--metrics-textfile", "/tmp/m.prom"},
       {{"metrics.on", "true"}, {"metrics.textfile", str("/tmp/m.prom")}}},
      {{"--metrics-top", "5"}, {{"metrics.state.top", "5"}}},
      {{"--verbose"}, {{"bpf.verbose", "true"}, {"priority.verbose", "true"}}},
      {{"--flight-recorder", "5"}, flight({})},
      {{"--flight-recorder", "5", "--flight-trigger", "50ms"},
       flight({{"flight.threshold_ns", str(50'000'000)}})},
      {{"--flight-recorder", "5", "--flight-trigger-gap", "2m"},
       flight({{"flight.min_gap_ns", str(120 * sec)}})},
      {{"--flight-recorder", "5", "--flight-keep", "3"}, flight({{"flight.keep", "3"}})},
      {{"--flight-recorder", "5", "--flight-max-size", "10M"},
       flight({{"flight.max_bytes", str(10 << 20)}})},
      {{"--flight-recorder", "5", "--db", "/tmp/x.db"},
       flight({{"flight.dir", str("/tmp/x.db.captures")},
               {"flight.legacy_dir", str("/tmp/x.captures")},
               {"store.path", str("/tmp/x.db")},
               {"recorder.db_path", str("/tmp/x.db")}})},
      // Databases that differ only after the stem have captures directories of their own.
      {{"--flight-recorder", "5", "--db", "/tmp/x.sqlite"},
       flight({{"flight.dir", str("/tmp/x.sqlite.captures")},
               {"flight.legacy_dir", str("/tmp/x.captures")},
               {"store.path", str("/tmp/x.sqlite")},
               {"recorder.db_path", str("/tmp/x.sqlite")}})},
  };
}

// The flags of --help that are not the config's, and why.
const std::map<std::string, std::string> not_config{
    {"--help", "main prints the usage and exits"},
    {"--version", "main prints the version and exits"},
    {"--perf-list", "main lists the perf events and exits"},
    {"--gen-topology", "main prints the topology and exits"},
    {"--topology", "load_topology reads it (startup.hpp)"},
};

} // namespace

TEST_CASE("config: the defaults", "[rschedd][config]") {
  const daemon_config c = config_of({});
  CHECK(c.bpf.mode == bpf::attach_mode::automatic);
  CHECK(c.bpf.groups == RSCHED_G_LATENCY);
  CHECK(c.bpf.graveyard_entries == 16384);
  CHECK(c.bpf.task_hash_entries == 16384);
  CHECK(c.bpf.read == bpf::live_read::automatic);
  CHECK(c.bpf.dirty_list_entries == 65536);
  CHECK_FALSE(c.bpf.delay_rq_clock);
  CHECK_FALSE(c.bpf.verbose);
  // What main adds at run time is left empty.
  CHECK(c.bpf.counter_mask == 0);
  CHECK(c.bpf.counter_fds.empty());

  REQUIRE(c.store.has_value());
  CHECK(c.store->path == store::default_db_path);
  CHECK_FALSE(c.store->group_name.has_value()); // `rsched` when it exists
  CHECK_FALSE(c.store->open.group.has_value()); // resolved by main
  CHECK(c.store->open.lock);
  CHECK(c.store->keep.keep_raw_ns == 2 * 86400 * sec);
  CHECK(c.store->keep.keep_1m_ns == 30 * 86400 * sec);
  CHECK(c.store->keep.keep_1h_ns == 365 * 86400 * sec);
  CHECK(c.store->keep.max_bytes == std::uint64_t{8} << 30);

  CHECK_FALSE(c.filter.pid.has_value());
  CHECK(c.filter.comm.empty());
  CHECK(c.filter.global_comm.empty());
  CHECK(c.filter.cgroup.empty());
  CHECK(c.filter.min_latency_us == 0);
  CHECK(c.filter.latency_on);

  CHECK(c.live.view == view_kind::compact);
  CHECK(c.live.ropt.mode == output_mode::collapsed);
  CHECK(c.live.ropt.groups == RSCHED_G_LATENCY);
  CHECK(c.live.window_ns == 5 * sec);

  CHECK(c.recorder.interval_ns == sec);
  CHECK_FALSE(c.recorder.per_second);
  CHECK_FALSE(c.recorder.run_ns.has_value());
  CHECK(c.recorder.groups == RSCHED_G_LATENCY);
  CHECK(c.recorder.delay_clock == "monotonic");
  CHECK(c.recorder.db_path == store::default_db_path);
  CHECK_FALSE(c.recorder.stats);
  CHECK(c.recorder.boot_id.empty());
  CHECK(c.recorder.events.empty());
  CHECK_FALSE(c.recorder.note);
  CHECK_FALSE(c.recorder.done);

  CHECK_FALSE(c.metrics.on());
  CHECK(c.metrics.state.top == 20);
  CHECK(c.metrics.state.start_ns == 0); // the run's start, set by main
  CHECK_FALSE(c.metrics.listen.has_value());
  CHECK_FALSE(c.metrics.textfile.has_value());

  CHECK(c.priority.rt_priority == 0);
  CHECK(c.priority.nice == 0);
  CHECK(c.priority.slice_us == 100);
  CHECK_FALSE(c.priority.verbose);

  CHECK_FALSE(c.feeds.schedstat);
  CHECK(c.feeds.pressure);
}

TEST_CASE("config: each option changes what it maps to and nothing else", "[rschedd][config]") {
  const field_map base = fields(config_of({}));
  for (const effect &e : effects()) {
    std::string args;
    for (const auto &a : e.args) {
      args += a + " ";
    }
    INFO("rschedd " << args);
    REQUIRE_FALSE(e.changed.empty());
    const field_map got = changes(base, fields(config_of(e.args)));
    INFO("changed:\n" << describe(got) << "expected:\n" << describe(e.changed));
    CHECK(got == e.changed);
  }
}

TEST_CASE("config: every flag of --help maps into the config or is said not to",
          "[rschedd][config]") {
  // The flags as --help lists them: "  -g, --group GROUPS", "      --db PATH".
  std::set<std::string> listed;
  const std::regex flag_line(R"(^ {2,6}(?:-\w, )?(--[a-z0-9-]+))");
  std::istringstream usage(usage_text);
  for (std::string line; std::getline(usage, line);) {
    if (std::smatch m; std::regex_search(line, m, flag_line)) {
      listed.insert(m[1]);
    }
  }
  CHECK(listed.size() >= 30);
  std::set<std::string> tested;
  for (const effect &e : effects()) {
    for (const auto &a : e.args) {
      if (a.starts_with("--")) {
        tested.insert(a);
      }
    }
  }
  for (const std::string &f : listed) {
    INFO(f << " is in --help: add its effect to effects() in config_test.cpp (and map it in "
              "make_config), or to not_config with the reason");
    CHECK((tested.contains(f) || not_config.contains(f)));
    CHECK_FALSE((tested.contains(f) && not_config.contains(f)));
  }
  for (const auto &[f, why] : not_config) {
    INFO(f);
    CHECK(listed.contains(f));
    // Not the config's: the config is the defaults'.
    if (f != "--topology") {
      CHECK(fields(config_of({f})) == fields(config_of({})));
    }
  }
  CHECK(fields(config_of({"--topology", "/tmp/t.json"})) == fields(config_of({})));
}

TEST_CASE("config: a --metrics-listen address parse_options would refuse is an error",
          "[rschedd][config]") {
  options o;
  o.metrics_listen = "localhost:http";
  auto c = make_config(o);
  REQUIRE_FALSE(c.ok());
  CHECK(c.err().msg.find("--metrics-listen") != std::string::npos);
  CHECK(c.err().msg.find('\n') == std::string::npos);
}
