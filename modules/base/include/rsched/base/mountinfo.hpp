#pragma once
// /proc/self/mountinfo, parsed (proc(5)): where the cgroup file systems are mounted. On hybrid
// systems cgroup v2 is at /sys/fs/cgroup/unified and the v1 controllers have mounts of their own
// (the cpu controller at /sys/fs/cgroup/cpu or /sys/fs/cgroup/cpu,cpuacct). Pure.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rsched::mountinfo {

struct mount {
  std::string point;         // mount point, \ooo escapes undone
  std::string fstype;        // "cgroup2", "cgroup", "proc", ...
  std::string super_options; // "rw,cpu,cpuacct" for a cgroup v1 mount of cpu and cpuacct
};

// Every well-formed line; malformed lines are skipped.
std::vector<mount> parse(std::string_view text);

// The first cgroup2 mount point, or nullopt.
std::optional<std::string> cgroup2(std::string_view text);

// The mount point of the cgroup v1 hierarchy that holds `controller` ("cpu": a super option
// equal to it, so "cpuacct" and "cpuset" do not count), or nullopt.
std::optional<std::string> cgroup1(std::string_view text, std::string_view controller);

} // namespace rsched::mountinfo
