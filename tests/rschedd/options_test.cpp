#include "options.hpp"

#include <catch2/catch.hpp>

using rsched::rschedd::parse_options;

TEST_CASE("rschedd defaults", "[rschedd]") {
  auto o = parse_options({});
  REQUIRE(o.ok());
  CHECK(o->interval_s == 1);
  CHECK_FALSE(o->run_time_s.has_value());
  CHECK(o->db_path == "/var/lib/rsched/rsched.db");
  CHECK_FALSE(o->no_db);
}

TEST_CASE("rschedd flags", "[rschedd]") {
  auto o = parse_options({"-i", "5", "-r", "30", "--db", "/tmp/x.db", "--bpf-mode=raw_tp"});
  REQUIRE(o.ok());
  CHECK(o->interval_s == 5);
  CHECK(o->run_time_s == 30u);
  CHECK(o->db_path == "/tmp/x.db");
  CHECK(o->mode == rsched::bpf::attach_mode::raw_tp);
  auto n = parse_options({"--no-db", "--interval=2"});
  REQUIRE(n.ok());
  CHECK(n->no_db);
  CHECK(n->interval_s == 2);
}

TEST_CASE("rschedd bad usage is a one-line error", "[rschedd]") {
  for (const auto &args : std::vector<std::vector<std::string>>{
           {"-i"}, {"-i", "0"}, {"-i", "abc"}, {"-i", "-1"}, {"-r", "1.5"}, {"--bogus"},
           {"--db", "/x", "--no-db"}, {"--bpf-mode", "kprobe"}, {"--db", ""}}) {
    auto o = parse_options(args);
    INFO(args[0]);
    REQUIRE_FALSE(o.ok());
    CHECK(o.err().msg.find('\n') == std::string::npos);
  }
}
