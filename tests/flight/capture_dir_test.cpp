// The captures directory rschedd (root) writes traces into: made private, and refused when it
// is a planted link, not a directory, another user's, or writable by others.
#include "rsched/flight/recorder.hpp"

#include "support/temp_dir.hpp"

#include <catch2/catch.hpp>
#include <sys/stat.h>

#include <fstream>
#include <string>
#include <unistd.h>

using rsched::flight::ensure_capture_dir;
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
