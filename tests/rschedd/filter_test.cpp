#include "rsched/rschedd/filter.hpp"
#include "rsched/rschedd/model.hpp"

#include <catch2/catch.hpp>

using namespace rsched;
using rschedd::filter;
using rschedd::filter_options;

namespace {

filter make(const filter_options &o) {
  auto f = filter::make(o);
  REQUIRE(f.ok());
  return *f;
}

stats::histogram delay_us(std::uint64_t us, std::uint64_t n) {
  stats::histogram h{stats::layout::latency, {}};
  h.add(us * 1000, n);
  return h;
}

} // namespace

TEST_CASE("filter: no options include everything", "[rschedd]") {
  const filter f = make({});
  CHECK(f.include(1, "bash", "/user.slice"));
  CHECK(f.include(2, "", ""));
  CHECK(f.passes_min_latency(delay_us(1, 10)));
  const filter def;
  CHECK(def.include(7, "x", ""));
}

TEST_CASE("filter: -p wins over everything, global-comm included", "[rschedd]") {
  filter_options o;
  o.pid = 5;
  o.global_comm = {"bash"};
  const filter f = make(o);
  CHECK_FALSE(f.include(6, "bash", "/"));
  CHECK(f.include(5, "anything", "/"));
}

TEST_CASE("filter: global-comm beats -c and --cgroup, -c AND --cgroup otherwise", "[rschedd]") {
  filter_options o;
  o.comm = {"^nginx"};
  o.cgroup = {"docker"};
  o.global_comm = {"sshd"};
  const filter f = make(o);
  CHECK(f.include(1, "sshd", "/system.slice/ssh.service")); // global: cgroup and -c ignored
  CHECK(f.include(1, "sshd", ""));
  CHECK_FALSE(f.include(2, "nginx", "/system.slice/nginx.service")); // -c ok, cgroup not
  CHECK(f.include(3, "nginx", "/docker/abc"));                       // both
  CHECK_FALSE(f.include(4, "redis", "/docker/abc"));                 // cgroup ok, -c not
}

TEST_CASE("filter: patterns are OR'd and unanchored", "[rschedd]") {
  filter_options o;
  o.comm = {"ash", "^kworker"};
  const filter f = make(o);
  CHECK(f.include(1, "bash", ""));
  CHECK(f.include(1, "kworker/0:1", ""));
  CHECK_FALSE(f.include(1, "xkworker", ""));
  CHECK_FALSE(f.include(1, "zsh", ""));
}

TEST_CASE("filter: leading (?i) is case-insensitive", "[rschedd]") {
  filter_options o;
  o.comm = {"(?i)BASH"};
  CHECK(make(o).include(1, "bash", ""));
  o.comm = {"BASH"};
  CHECK_FALSE(make(o).include(1, "bash", ""));
  filter_options c;
  c.cgroup = {"(?i)SSH"};
  CHECK(make(c).cgroup_matches("/system.slice/ssh.service"));
}

TEST_CASE("filter: an invalid regex is a one-line error naming the pattern", "[rschedd]") {
  filter_options o;
  o.comm = {"ok", "(unclosed"};
  auto f = filter::make(o);
  REQUIRE_FALSE(f.ok());
  CHECK(f.err().msg.find("'(unclosed'") != std::string::npos);
  CHECK(f.err().msg.find("-c") != std::string::npos);
  CHECK(f.err().msg.find('\n') == std::string::npos);

  filter_options g;
  g.cgroup = {"[a-"};
  auto fg = filter::make(g);
  REQUIRE_FALSE(fg.ok());
  CHECK(fg.err().msg.find("--cgroup") != std::string::npos);

  filter_options gc;
  gc.global_comm = {"(a)\\1"}; // back-references are not RE2 (nor Rust regex) syntax
  auto fgc = filter::make(gc);
  REQUIRE_FALSE(fgc.ok());
  CHECK(fgc.err().msg.find("--global-comm '(a)") != std::string::npos);

  filter_options esc;
  esc.comm = {"\x1b[("};
  auto fe = filter::make(esc);
  REQUIRE_FALSE(fe.ok());
  CHECK(fe.err().msg.find('\x1b') == std::string::npos);
}

TEST_CASE("filter: cgroup paths match by any component (descendants included)", "[rschedd]") {
  filter_options o;
  o.cgroup = {"^system\\.slice$"};
  const filter f = make(o);
  CHECK(f.cgroup_matches("/system.slice"));
  CHECK(f.cgroup_matches("/system.slice/ssh.service"));
  CHECK(f.cgroup_matches("/system.slice/a/b/c"));
  CHECK_FALSE(f.cgroup_matches("/user.slice/system.slice.x"));
  CHECK_FALSE(f.cgroup_matches("/"));
  CHECK_FALSE(f.cgroup_matches(""));

  o.cgroup = {"ssh"};
  const filter s = make(o);
  CHECK(s.cgroup_matches("/system.slice/ssh.service"));
  CHECK(s.cgroup_matches("/system.slice/ssh.service/child"));
  CHECK_FALSE(s.cgroup_matches("/system.slice"));
  CHECK(s.include(1, "x", "/system.slice/ssh.service"));
  CHECK_FALSE(s.include(1, "x", "/system.slice"));
  CHECK_FALSE(s.include(1, "x", "")); // unknown cgroup never matches
}

TEST_CASE("filter: cgroup 'root' means only the root, a pattern matching 'root' means all",
          "[rschedd]") {
  filter_options o;
  o.cgroup = {"root"};
  const filter r = make(o);
  CHECK(r.cgroup_matches("/"));
  CHECK_FALSE(r.cgroup_matches("/system.slice"));
  CHECK_FALSE(r.cgroup_matches("/foo/root")); // exact "root" is the root cgroup only
  CHECK_FALSE(r.cgroup_matches(""));

  for (const char *all : {".*", "oo", "", "^r"}) {
    o.cgroup = {all};
    const filter a = make(o);
    INFO(all);
    CHECK(a.cgroup_matches("/"));
    CHECK(a.cgroup_matches("/system.slice/ssh.service"));
    CHECK(a.cgroup_matches("/x"));
    CHECK_FALSE(a.cgroup_matches("")); // unknown still does not match
  }

  // The root's own name is never tested: "^$" matches no component.
  o.cgroup = {"^$"};
  CHECK_FALSE(make(o).cgroup_matches("/"));
  // Several patterns are OR'd.
  o.cgroup = {"root", "docker"};
  const filter both = make(o);
  CHECK(both.cgroup_matches("/"));
  CHECK(both.cgroup_matches("/docker/abc"));
  CHECK_FALSE(both.cgroup_matches("/user.slice"));
}

TEST_CASE("filter: -l on the cumulative delay p50", "[rschedd]") {
  filter_options o;
  o.min_latency_us = 100;
  const filter f = make(o);
  CHECK_FALSE(f.passes_min_latency(delay_us(50, 10)));
  CHECK(f.passes_min_latency(delay_us(200, 10)));
  CHECK(f.passes_min_latency(stats::histogram{stats::layout::latency, {}})); // no latency data
  CHECK_FALSE(f.cpu_delay_visible(delay_us(50, 10)));
  CHECK(f.cpu_delay_visible(delay_us(200, 10)));
  CHECK_FALSE(f.cpu_delay_visible(stats::histogram{stats::layout::latency, {}}));

  o.latency_on = false; // -l applies only with the latency group
  CHECK(make(o).passes_min_latency(delay_us(50, 10)));

  o.latency_on = true;
  o.min_latency_us = 0;
  CHECK(make(o).passes_min_latency(delay_us(1, 10)));
  CHECK(make(o).cpu_delay_visible(delay_us(1, 10)));
}

TEST_CASE("filter: include() takes thread_stats-like objects", "[rschedd]") {
  filter_options o;
  o.comm = {"^db"};
  o.cgroup = {"postgres"};
  const filter f = make(o);
  rschedd::thread_stats t;
  t.tid = 9;
  t.comm = "dbwriter";
  t.cgroup = "/system.slice/postgres.service";
  CHECK(f.include(t));
  t.cgroup = "/system.slice/other.service";
  CHECK_FALSE(f.include(t));
  rschedd::ipc_row r;
  r.comm = "dbwriter";
  r.cgroup = "/postgres";
  CHECK(f.include(r));
}

TEST_CASE("filter: inline flags as in Rust's regex crate", "[rschedd]") {
  filter_options o;
  o.comm = {"^a(?i)BC$"}; // a flag group in the middle applies from there on
  CHECK(make(o).include(1, "abc", ""));
  CHECK_FALSE(make(o).include(1, "Abc", ""));
  o.comm = {"(?P<w>worker)/\\d+"};
  CHECK(make(o).include(1, "kworker/12", ""));
}

// std::regex backtracked: `(a*)*b` against a long run of 'a' took tens of seconds per thread in
// rschedd's live view and held up recording. RE2 is linear in the text: this returns at once.
TEST_CASE("filter: a backtracking pattern against long text matches in linear time", "[rschedd]") {
  filter_options o;
  o.comm = {"(a*)*b"};
  o.cgroup = {"(x+x+)+y"};
  const filter f = make(o);
  const std::string long_comm(100000, 'a');
  const std::string long_path = "/" + std::string(100000, 'x');
  for (int i = 0; i < 100; ++i) {
    CHECK_FALSE(f.include(1, long_comm, "/"));
    CHECK_FALSE(f.cgroup_matches(long_path));
  }
  CHECK(f.include(1, long_comm + "b", long_path + "y"));
}

// A 25,000-deep pattern crashed rschedd (std::regex recursed until the stack overflowed). RE2
// parses and compiles without recursion: the pattern works. One larger than RE2's memory budget
// is refused with a one-line error, as any other invalid pattern.
TEST_CASE("filter: a deeply nested pattern works, one too large is a one-line error", "[rschedd]") {
  filter_options o;
  o.comm = {std::string(25000, '(') + "a" + std::string(25000, ')')};
  const filter deep = make(o);
  CHECK(deep.include(1, "xay", ""));
  CHECK_FALSE(deep.include(1, "xyz", ""));
  filter_options s;
  s.cgroup = {"((((a{100}){100}){100}){100})"};
  auto fs = filter::make(s);
  REQUIRE_FALSE(fs.ok());
  CHECK(fs.err().msg.find("--cgroup") != std::string::npos);
  CHECK(fs.err().msg.find('\n') == std::string::npos);
}
