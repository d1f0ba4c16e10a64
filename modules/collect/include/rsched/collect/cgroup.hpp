#pragma once
// cgroup v2 id -> path, by walking the cgroup2 mount (found in /proc/self/mountinfo; on hybrid
// systems it is /sys/fs/cgroup/unified, not /sys/fs/cgroup). The id BPF reports is the kernfs
// id, which is the inode number of the cgroup directory.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace rsched::collect {

// The mount point of the cgroup2 file system in a mountinfo text, or nullopt. Pure.
std::optional<std::string> cgroup2_mount_from_mountinfo(std::string_view mountinfo);

class cgroup_resolver {
public:
  // `mount` empty: read /proc/self/mountinfo to find it.
  explicit cgroup_resolver(std::string mount = {});
  // Path relative to the mount ("/" for the root, "/system.slice/foo.service"), "" if unknown.
  // Unknown ids trigger one rescan (cgroups created after start), at most once per interval.
  std::string path_of(std::uint64_t id);
  // Allows the next unknown id to rescan again (call once per interval).
  void new_interval() { rescanned_ = false; }
  [[nodiscard]] const std::string &mount() const { return mount_; }

private:
  void rescan();
  std::string mount_;
  std::unordered_map<std::uint64_t, std::string> paths_;
  bool rescanned_ = false;
};

} // namespace rsched::collect
