// The captures directory rschedd (root) writes traces into: made private, and refused when it
// is a planted link, not a directory, another user's, or writable by others.
#include "rsched/flight/recorder.hpp"

#include "support/temp_dir.hpp"

#include <catch2/catch.hpp>
#include <sys/stat.h>

#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

using rsched::flight::captures_dir;
using rsched::flight::ensure_capture_dir;
using rsched::flight::legacy_captures_dir;
using rsched::flight::remove_capture;
using rsched::test::temp_dir;

TEST_CASE("captures directory: made 0700, reused when private, refused when planted", "[flight]") {
  temp_dir dir;
  const std::string d = dir.file("rsched.captures");
  REQUIRE(ensure_capture_dir(d, std::nullopt));
  struct stat st {};
  REQUIRE(::lstat(d.c_str(), &st) == 0);
  CHECK(S_ISDIR(st.st_mode));
  CHECK((st.st_mode & 07777) == 0700);
  CHECK(ensure_capture_dir(d, std::nullopt)); // there already, ours: used

  // A link to a directory elsewhere is not written through.
  const std::string elsewhere = dir.file("elsewhere");
  REQUIRE(::mkdir(elsewhere.c_str(), 0700) == 0);
  const std::string link = dir.file("link.captures");
  REQUIRE(::symlink(elsewhere.c_str(), link.c_str()) == 0);
  auto r = ensure_capture_dir(link, std::nullopt);
  REQUIRE_FALSE(r);
  CHECK(r.err().msg.find("is not a directory") != std::string::npos);

  // A file in its place.
  const std::string file = dir.file("file.captures");
  std::ofstream(file) << "x";
  CHECK_FALSE(ensure_capture_dir(file, std::nullopt));

  // Writable by others.
  const std::string open_dir = dir.file("open.captures");
  REQUIRE(::mkdir(open_dir.c_str(), 0700) == 0);
  REQUIRE(::chmod(open_dir.c_str(), 0777) == 0);
  r = ensure_capture_dir(open_dir, std::nullopt);
  REQUIRE_FALSE(r);
  CHECK(r.err().msg.find("mode 777") != std::string::npos);

  // Another user's (as root only: chown needs it).
  if (::geteuid() == 0) {
    const std::string theirs = dir.file("theirs.captures");
    REQUIRE(::mkdir(theirs.c_str(), 0700) == 0);
    REQUIRE(::chown(theirs.c_str(), 65534, 65534) == 0);
    r = ensure_capture_dir(theirs, std::nullopt);
    REQUIRE_FALSE(r);
    CHECK(r.err().msg.find("owner uid 65534") != std::string::npos);
  }
}

TEST_CASE("captures directory: named after the database's whole file name", "[flight]") {
  // a.db and a.sqlite side by side had one directory, a.captures, and overwrote each other's
  // traces (issue 51).
  CHECK(captures_dir("/var/lib/rsched/rsched.db") == "/var/lib/rsched/rsched.db.captures");
  CHECK(captures_dir("/tmp/a.db") != captures_dir("/tmp/a.sqlite"));
  CHECK(captures_dir("/tmp/a.sqlite") == "/tmp/a.sqlite.captures");
  CHECK(captures_dir("/tmp/history") == "/tmp/history.captures");
  CHECK(captures_dir("rel.db") == "rel.db.captures");
  // The old name, still pruned from.
  CHECK(legacy_captures_dir("/var/lib/rsched/rsched.db") == "/var/lib/rsched/rsched.captures");
  CHECK(legacy_captures_dir("/tmp/a.sqlite") == "/tmp/a.captures");
}

TEST_CASE("captures directory: a pruned file is removed only from a private directory, never "
          "through a link",
          "[flight]") {
  temp_dir dir;
  const std::string d = dir.file("rsched.db.captures");
  const std::string old = dir.file("rsched.captures");
  REQUIRE(ensure_capture_dir(d, std::nullopt));
  REQUIRE(ensure_capture_dir(old, std::nullopt));
  const std::vector<std::string> dirs{d, old};
  const std::string a = d + "/a.pftrace";
  const std::string b = old + "/b.pftrace";
  std::ofstream(a) << "x";
  std::ofstream(b) << "x";
  CHECK(remove_capture(a, dirs));
  CHECK(remove_capture(b, dirs)); // the old directory's too
  CHECK(::access(a.c_str(), F_OK) != 0);
  CHECK(::access(b.c_str(), F_OK) != 0);
  CHECK(remove_capture(a, dirs)); // gone already: no error

  // Not directly in one of the directories.
  const std::string outside = dir.file("outside.pftrace");
  std::ofstream(outside) << "x";
  CHECK_FALSE(remove_capture(outside, dirs));
  CHECK_FALSE(remove_capture(d + "/../outside.pftrace", dirs));
  CHECK(::access(outside.c_str(), F_OK) == 0);

  // The directory swapped for a link to another one: nothing removed through it.
  const std::string elsewhere = dir.file("elsewhere");
  REQUIRE(::mkdir(elsewhere.c_str(), 0700) == 0);
  const std::string victim = elsewhere + "/c.pftrace";
  std::ofstream(victim) << "x";
  REQUIRE(::rename(old.c_str(), dir.file("moved").c_str()) == 0);
  REQUIRE(::symlink(elsewhere.c_str(), old.c_str()) == 0);
  auto r = remove_capture(old + "/c.pftrace", dirs);
  REQUIRE_FALSE(r);
  CHECK(r.err().msg.find("without following a link") != std::string::npos);
  CHECK(::access(victim.c_str(), F_OK) == 0);

  // Writable by others.
  REQUIRE(::chmod(d.c_str(), 0777) == 0);
  const std::string e = d + "/e.pftrace";
  std::ofstream(e) << "x";
  r = remove_capture(e, dirs);
  REQUIRE_FALSE(r);
  CHECK(r.err().msg.find("mode 777") != std::string::npos);
  CHECK(::access(e.c_str(), F_OK) == 0);
}
