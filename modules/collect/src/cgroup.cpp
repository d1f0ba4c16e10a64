#include "rsched/collect/cgroup.hpp"

#include "rsched/base/mountinfo.hpp"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace rsched::collect {

std::optional<std::string> cgroup2_mount_from_mountinfo(std::string_view mountinfo) {
  return mountinfo::cgroup2(mountinfo);
}

cgroup_resolver::cgroup_resolver(std::string mount) : mount_(std::move(mount)) {
  if (mount_.empty()) {
    std::ifstream in("/proc/self/mountinfo");
    std::stringstream ss;
    ss << in.rdbuf();
    mount_ = cgroup2_mount_from_mountinfo(ss.str()).value_or("");
  }
}

void cgroup_resolver::rescan() {
  namespace fs = std::filesystem;
  if (mount_.empty()) {
    return;
  }
  std::error_code ec;
  struct stat st {};
  if (::stat(mount_.c_str(), &st) == 0) {
    paths_[st.st_ino] = "/";
  }
  for (fs::recursive_directory_iterator
           it(mount_, fs::directory_options::skip_permission_denied, ec),
       end;
       !ec && it != end; it.increment(ec)) {
    if (!it->is_directory(ec) || it->is_symlink(ec)) {
      continue;
    }
    if (::stat(it->path().c_str(), &st) == 0) {
      paths_[st.st_ino] = "/" + fs::relative(it->path(), mount_, ec).string();
    }
  }
}

std::string cgroup_resolver::path_of(std::uint64_t id) {
  if (id == 0) {
    return {};
  }
  auto it = paths_.find(id);
  if (it == paths_.end() && !rescanned_) {
    rescanned_ = true;
    rescan();
    it = paths_.find(id);
  }
  return it == paths_.end() ? std::string{} : it->second;
}

} // namespace rsched::collect
