// Databases in shared places (issue 51): the writer (rschedd) and rsched-sql's annotations open a
// database, its -wal, -shm and -journal only when each is a regular file of root's or the
// caller's that others cannot write, never through another user's link, in a directory nobody
// else may write in (or a sticky one like /tmp). Refused: one line, and the planted files are
// left exactly as they were. As root: files of uid 65534 are planted with chown.
#include "rsched/base/safe_file.hpp"
#include "rsched/query/annotations.hpp"
#include "rsched/store/writer.hpp"

#include "root_guard.hpp"
#include "store_test_util.hpp"

#include <catch2/catch.hpp>
#include <sys/stat.h>

#include <fcntl.h>
#include <fstream>
#include <optional>
#include <string>
#include <unistd.h>

using namespace store_test;
using rsched::store::open_options;

namespace {

constexpr uid_t nobody = 65534;
constexpr std::int64_t t0 = 1'699'999'200LL * sec;

// What a refusal must leave alone: the bytes, owner, group and mode of a file (or link).
struct snapshot {
  explicit snapshot(const std::string &p) : path(p) {
    REQUIRE(::lstat(p.c_str(), &st) == 0);
    if (S_ISREG(st.st_mode)) {
      const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
      REQUIRE(fd >= 0);
      char buf[65536];
      for (ssize_t n = 0; (n = ::read(fd, buf, sizeof buf)) > 0;) {
        bytes.append(buf, static_cast<std::size_t>(n));
      }
      ::close(fd);
    }
  }
  void check_unchanged() const {
    INFO(path);
    const snapshot now(path);
    CHECK(now.bytes == bytes);
    CHECK(now.st.st_ino == st.st_ino);
    CHECK(now.st.st_uid == st.st_uid);
    CHECK(now.st.st_gid == st.st_gid);
    CHECK(now.st.st_mode == st.st_mode);
    CHECK(now.st.st_size == st.st_size);
  }
  std::string path;
  struct stat st {};
  std::string bytes;
};

bool exists(const std::string &p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

// A recorded database at `path` (root's, with its -wal and -shm kept), closed.
void make_db(const std::string &path) {
  writer w = open_writer(path);
  write_ok(w, make_interval(t0, {make_thread(1, "a", {1000})}));
}

std::string refusal(const std::string &path, const open_options &o = {}) {
  auto w = writer::open(path, o);
  REQUIRE_FALSE(w.ok());
  const std::string msg = w.err().msg;
  CHECK(msg.find('\n') == std::string::npos);
  CHECK(msg.rfind("refusing database " + path + ": ", 0) == 0);
  return msg;
}

bool has(const std::string &s, const std::string &part) {
  INFO(s);
  return s.find(part) != std::string::npos;
}

// A directory under a fresh temp_dir (0755, root's), made with `mode` exactly.
std::string make_dir(const temp_dir &base, const std::string &name, mode_t mode) {
  const std::string d = base.file(name);
  REQUIRE(::mkdir(d.c_str(), 0700) == 0);
  REQUIRE(::chmod(d.c_str(), mode) == 0);
  return d;
}

} // namespace

TEST_CASE("a database, -wal or -shm of another user's is refused and left as it was",
          "[store][root][shared]") {
  if (!rsched::test::root_available("store root test")) {
    return;
  }
  temp_dir base;
  REQUIRE(::chmod(base.str().c_str(), 0755) == 0);
  const std::string dir = make_dir(base, "db", 0755);
  const std::string db = dir + "/rsched.db";
  make_db(db);

  SECTION("the database") {
    REQUIRE(::chown(db.c_str(), nobody, nobody) == 0);
    const snapshot s(db), wal(db + "-wal");
    CHECK(has(refusal(db), "'" + db + "' belongs to uid 65534, not root or this user"));
    s.check_unchanged();
    wal.check_unchanged();
  }
  SECTION("a -wal of theirs that anyone may write") {
    const std::string w = db + "-wal";
    REQUIRE(::chown(w.c_str(), nobody, nobody) == 0);
    REQUIRE(::chmod(w.c_str(), 0666) == 0);
    const snapshot s(db), wal(w);
    CHECK(has(refusal(db), "'" + w + "' belongs to uid 65534"));
    s.check_unchanged();
    wal.check_unchanged();
    // Root's, but writable by others: refused too.
    REQUIRE(::chown(w.c_str(), 0, 0) == 0);
    const snapshot s2(w);
    CHECK(has(refusal(db), "'" + w + "' is writable by others"));
    s2.check_unchanged();
  }
  SECTION("a -shm of theirs") {
    const std::string m = db + "-shm";
    REQUIRE(::chown(m.c_str(), nobody, nobody) == 0);
    const snapshot s(db), shm(m);
    CHECK(has(refusal(db), "'" + m + "' belongs to uid 65534"));
    s.check_unchanged();
    shm.check_unchanged();
  }
  SECTION("a -journal of theirs (SQLite would roll it back into the database)") {
    const std::string j = db + "-journal";
    std::ofstream(j) << "not a journal";
    REQUIRE(::chown(j.c_str(), nobody, nobody) == 0);
    const snapshot s(db), jn(j);
    CHECK(has(refusal(db), "'" + j + "' belongs to uid 65534"));
    s.check_unchanged();
    jn.check_unchanged();
  }
  SECTION("a -wal link, a FIFO at the name") {
    const std::string w = db + "-wal";
    REQUIRE(::unlink(w.c_str()) == 0);
    REQUIRE(::symlink(db.c_str(), w.c_str()) == 0);
    CHECK(has(refusal(db), "'" + w + "' is not a regular file"));
    REQUIRE(::unlink(w.c_str()) == 0);
    REQUIRE(::unlink(db.c_str()) == 0);
    REQUIRE(::mkfifo(db.c_str(), 0600) == 0);
    CHECK(has(refusal(db), "'" + db + "' is not a regular file"));
  }
  SECTION("group write: only the readers' group's, which the writer then removes") {
    const std::string w = db + "-wal";
    REQUIRE(::chown(w.c_str(), 0, 4242) == 0);
    REQUIRE(::chmod(w.c_str(), 0660) == 0);
    CHECK(has(refusal(db), "'" + w + "' is writable by its group (gid 4242)"));
    open_options o;
    o.group = 4242;
    {
      auto wr = writer::open(db, o);
      INFO((wr.ok() ? std::string() : wr.err().msg));
      REQUIRE(wr.ok());
    }
    struct stat st {};
    REQUIRE(::stat(w.c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0640);
  }
}

TEST_CASE("a database in a directory others may write in, or another user's, is refused with "
          "nothing created",
          "[store][root][shared]") {
  if (!rsched::test::root_available("store root test")) {
    return;
  }
  temp_dir base;
  REQUIRE(::chmod(base.str().c_str(), 0755) == 0);
  SECTION("writable by others, not sticky") {
    const std::string open = make_dir(base, "open", 0777);
    CHECK(has(refusal(open + "/rsched.db"),
              "directory '" + open + "' is writable by others and not sticky"));
    // Nor below it: its directories would be created there.
    CHECK(has(refusal(open + "/lib/rsched.db"), "'" + open + "' is writable by others"));
    CHECK(std::filesystem::is_empty(open));
  }
  SECTION("writable by a group") {
    const std::string shared = make_dir(base, "shared", 0775);
    CHECK(has(refusal(shared + "/rsched.db"), "'" + shared + "' is writable by its group"));
    CHECK(std::filesystem::is_empty(shared));
  }
  SECTION("another user's") {
    const std::string theirs = make_dir(base, "theirs", 0755);
    REQUIRE(::chown(theirs.c_str(), nobody, nobody) == 0);
    CHECK(has(refusal(theirs + "/rsched.db"),
              "directory '" + theirs + "' belongs to uid 65534, not root or this user"));
    CHECK(std::filesystem::is_empty(theirs));
    // A directory of root's inside it: the owner of the one above may swap it.
    const std::string inner = theirs + "/inner";
    REQUIRE(::mkdir(inner.c_str(), 0755) == 0);
    CHECK(has(refusal(inner + "/rsched.db"), "directory '" + theirs + "' belongs to uid 65534"));
    CHECK(std::filesystem::is_empty(inner));
  }
}

TEST_CASE("in a sticky directory like /tmp: our files only, never another user's link",
          "[store][root][shared]") {
  if (!rsched::test::root_available("store root test")) {
    return;
  }
  temp_dir base;
  REQUIRE(::chmod(base.str().c_str(), 0755) == 0);
  const std::string tmp = make_dir(base, "tmp", 01777);
  // Root's database elsewhere, which a link in the sticky directory points to.
  const std::string victim = base.file("victim.db");
  make_db(victim);
  const snapshot v(victim), vw(victim + "-wal");

  SECTION("another user's link is never followed") {
    const std::string link = tmp + "/rsched.db";
    REQUIRE(::symlink(victim.c_str(), link.c_str()) == 0);
    REQUIRE(::lchown(link.c_str(), nobody, nobody) == 0);
    const snapshot l(link);
    CHECK(has(refusal(link), "link '" + link + "' belongs to uid 65534, not root or this user"));
    l.check_unchanged();
    v.check_unchanged();
    vw.check_unchanged();
  }
  SECTION("a database another user created there first") {
    const std::string db = tmp + "/rsched.db";
    {
      const int fd = ::open(db.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0666);
      REQUIRE(fd >= 0);
      ::close(fd);
    }
    REQUIRE(::chown(db.c_str(), nobody, nobody) == 0);
    const snapshot s(db);
    CHECK(has(refusal(db), "belongs to uid 65534"));
    s.check_unchanged();
    CHECK_FALSE(exists(db + "-wal"));
  }
  SECTION("our own database there, and root's link to one, are recorded into") {
    const std::string db = tmp + "/mine.db";
    make_db(db);
    writer w = open_writer(db);
    write_ok(w, make_interval(t0 + sec, {make_thread(1, "a", {1000})}));
    const std::string link = tmp + "/roots-link.db";
    REQUIRE(::symlink(victim.c_str(), link.c_str()) == 0);
    writer via = open_writer(link);
    write_ok(via, make_interval(t0 + sec, {make_thread(1, "a", {1000})}));
  }
}

TEST_CASE("rsched-sql's annotations follow the writer's rule", "[store][root][shared]") {
  if (!rsched::test::root_available("store root test")) {
    return;
  }
  temp_dir base;
  REQUIRE(::chmod(base.str().c_str(), 0755) == 0);
  const std::string tmp = make_dir(base, "tmp", 01777);
  const std::string db = tmp + "/rsched.db";
  make_db(db);
  rsched::query::annotation a;
  a.start_ns = t0;
  a.text = "deploy";
  REQUIRE(rsched::query::add_annotation(db, a).ok());
  REQUIRE(::chown(db.c_str(), nobody, nobody) == 0);
  const snapshot s(db);
  auto r = rsched::query::add_annotation(db, a);
  REQUIRE_FALSE(r.ok());
  CHECK(has(r.err().msg, "refusing database " + db + ": '" + db + "' belongs to uid 65534"));
  s.check_unchanged();
  // Reading it stays possible: a reader is not a writer.
  auto rd = open_reader(db);
  CHECK(scalar_int(rd, "SELECT count(*) FROM annotations") == 1);
}
