// Readers without root (issue 30): rschedd gives its database, the -wal and -shm files and its own
// directory the readers' group (--db-group, default `rsched` when it exists); a member of that
// group runs rsched-sql without sudo, anyone else still cannot read, and a member's annotation is
// refused in one line (only root writes the history).
#include "root_test_util.hpp"
#include "support/process.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <grp.h>
#include <string>
#include <vector>

using namespace rsched;

namespace {

// A system group made for the test and removed after it.
class temp_group {
public:
  explicit temp_group(std::string name) : name_(std::move(name)) {
    (void)test::run_program({"groupdel", name_}); // a leftover of a killed run
    const auto r = test::run_program({"groupadd", "--system", name_});
    INFO(r.err);
    REQUIRE(r.status == 0);
    const struct group *g = ::getgrnam(name_.c_str());
    REQUIRE(g != nullptr);
    gid_ = g->gr_gid;
  }
  ~temp_group() { (void)test::run_program({"groupdel", name_}); }
  temp_group(const temp_group &) = delete;
  temp_group &operator=(const temp_group &) = delete;
  [[nodiscard]] gid_t gid() const { return gid_; }
  [[nodiscard]] const std::string &name() const { return name_; }

private:
  std::string name_;
  gid_t gid_ = 0;
};

struct stat_of {
  explicit stat_of(const std::string &p) { ok = ::lstat(p.c_str(), &st) == 0; }
  struct stat st {};
  bool ok = false;
};

// rsched-sql as uid 65534, with the supplementary groups `groups` ("" none).
test::program_output as_nobody(const std::string &groups, const std::vector<std::string> &args) {
  std::vector<std::string> argv = {"setpriv", "--reuid=65534", "--regid=65534"};
  argv.push_back(groups.empty() ? std::string("--clear-groups") : "--groups=" + groups);
  argv.push_back(test::rsched_sql_path());
  argv.insert(argv.end(), args.begin(), args.end());
  return test::run_program(argv);
}

} // namespace

TEST_CASE("Members of the readers' group query the history without root, others cannot read "
          "it, a member's annotation is refused in one line",
          "[root][bpf][readers]") {
  if (!test::bpf_available()) {
    return;
  }
  temp_group grp("rschedtest");
  test::db_dir where;
  // A private directory of rschedd's, under a path everyone may traverse (temp_dir is 0700).
  REQUIRE(::chmod(where.dir.c_str(), 0755) == 0);
  const std::string dir = where.dir + "/lib/rsched";
  const std::string db = dir + "/rsched.db";
  {
    test::daemon d({"--db", db, "--db-group", grp.name(), "-i", "1", "-r", "3"});
    d.require(d.wait_attached(), "rschedd did not attach");
    const auto st = d.wait_exit(15000); // its 3 s, all of them recorded
    REQUIRE(st.has_value());
    REQUIRE(*st == 0);
  }
  REQUIRE(::chmod((where.dir + "/lib").c_str(), 0755) == 0);
  for (const std::string &f : {db, db + "-wal", db + "-shm"}) {
    INFO(f);
    stat_of s(f);
    REQUIRE(s.ok);
    CHECK(s.st.st_uid == 0);
    CHECK(s.st.st_gid == grp.gid());
    CHECK((s.st.st_mode & 07777) == 0640);
  }
  stat_of ds(dir);
  CHECK(ds.st.st_gid == grp.gid());
  CHECK((ds.st.st_mode & 07777) == 0750);

  const std::string sql = "SELECT count(*) FROM intervals";
  const auto member = as_nobody(std::to_string(grp.gid()), {db, "--csv", "-c", sql});
  INFO("member: " << member.err);
  CHECK(member.status == 0);
  INFO("member's output: " << member.out);
  const auto nl = member.out.find('\n');
  REQUIRE(nl != std::string::npos);
  CHECK(member.out.substr(0, nl).find("count(*)") != std::string::npos);
  CHECK(std::stoll(member.out.substr(nl + 1)) >= 2); // the intervals of the 3-s recording

  const auto other = as_nobody("", {db, "-c", sql});
  INFO("other: " << other.err);
  CHECK(other.status != 0);
  CHECK(other.out.empty());
  CHECK(std::count(other.err.begin(), other.err.end(), '\n') == 1);

  // Only root writes the history: a member's mark is one clear line, and nothing is added.
  const auto mark = as_nobody(std::to_string(grp.gid()), {db, "mark", "deploy"});
  INFO("mark: " << mark.err);
  CHECK(mark.status != 0);
  CHECK(std::count(mark.err.begin(), mark.err.end(), '\n') == 1);
  CHECK(mark.err.find("root") != std::string::npos);
  CHECK(test::as_int(test::query_db(db, "SELECT count(*) FROM annotations")[0][0]) == 0);

  // A directory rschedd did not make (like /root: private, root's) keeps its group and mode;
  // only the database files in it are shared.
  const std::string own_dir = where.dir + "/roots-own";
  REQUIRE(::mkdir(own_dir.c_str(), 0700) == 0);
  {
    test::daemon d({"--db", own_dir + "/x.db", "--db-group", grp.name(), "-i", "1", "-r", "1"});
    d.require(d.wait_attached(), "rschedd did not attach");
    const auto st = d.wait_exit(15000);
    REQUIRE(st.has_value());
    REQUIRE(*st == 0);
  }
  CHECK(stat_of(own_dir).st.st_gid == 0);
  CHECK((stat_of(own_dir).st.st_mode & 07777) == 0700);
  CHECK(stat_of(own_dir + "/x.db").st.st_gid == grp.gid());

  // Restarted with --db-group '': ownership is left as it is (nothing taken back).
  {
    test::daemon d({"--db", db, "--db-group", "", "-i", "1", "-r", "1"});
    d.require(d.wait_attached(), "rschedd did not attach");
    REQUIRE(d.stop(SIGINT) == 0);
  }
  CHECK(stat_of(db).st.st_gid == grp.gid());
  // A group that does not exist is one line at start, exit 1, and the database is untouched.
  {
    test::daemon d({"--db", db, "--db-group", "no-such-group-rsched"});
    const auto st = d.wait_exit(10000);
    REQUIRE(st.has_value());
    CHECK(*st == 1);
    CHECK(d.stderr_text().find("--db-group no-such-group-rsched: no such group") !=
          std::string::npos);
  }
}
