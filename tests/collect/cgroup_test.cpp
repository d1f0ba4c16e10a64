#include "rsched/collect/cgroup.hpp"

#include "support/temp_dir.hpp"

#include <catch2/catch.hpp>
#include <sys/stat.h>

#include <filesystem>
#include <unistd.h>

using namespace rsched::collect;

TEST_CASE("cgroup2 mount point from mountinfo (hybrid layout)", "[collect]") {
  const char *mi = "22 1 0:21 / /sys rw,nosuid shared:7 - sysfs sysfs rw\n"
                   "30 22 0:26 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755\n"
                   "31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw\n"
                   "32 30 0:28 / /sys/fs/cgroup/cpu rw shared:11 - cgroup cgroup rw,cpu\n";
  CHECK(cgroup2_mount_from_mountinfo(mi) == "/sys/fs/cgroup/unified");
  CHECK(cgroup2_mount_from_mountinfo("25 1 0:22 / /proc rw - proc proc rw\n") == std::nullopt);
  CHECK(cgroup2_mount_from_mountinfo("31 30 0:27 / /mnt/cg\\040two rw - cgroup2 none rw\n") ==
        "/mnt/cg two");
  CHECK(cgroup2_mount_from_mountinfo("") == std::nullopt);
}

TEST_CASE("resolver maps directory inodes to paths and rescans for new ones", "[collect]") {
  namespace fs = std::filesystem;
  const rsched::test::temp_dir tmp("rsched-cg");
  const fs::path root = tmp.path();
  fs::create_directories(root / "system.slice" / "a.service");
  cgroup_resolver r(root.string());
  struct stat st {};
  REQUIRE(::stat((root / "system.slice" / "a.service").c_str(), &st) == 0);
  CHECK(r.path_of(st.st_ino) == "/system.slice/a.service");
  REQUIRE(::stat(root.c_str(), &st) == 0);
  CHECK(r.path_of(st.st_ino) == "/");
  CHECK(r.path_of(0).empty());
  // created after the first scan: found on the next interval's rescan
  fs::create_directories(root / "user.slice");
  REQUIRE(::stat((root / "user.slice").c_str(), &st) == 0);
  r.new_interval();
  CHECK(r.path_of(st.st_ino) == "/user.slice");
}
