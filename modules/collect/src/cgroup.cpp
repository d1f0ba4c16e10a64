#include "rsched/collect/cgroup.hpp"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace rsched::collect {

namespace {
// mountinfo escapes space, tab, newline and backslash in paths as \ooo.
std::string unescape_octal(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
        s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}
} // namespace

std::optional<std::string> cgroup2_mount_from_mountinfo(std::string_view mountinfo) {
  // Each line: id parent major:minor root mount-point options [optional fields...] - fstype ...
  std::size_t pos = 0;
  while (pos < mountinfo.size()) {
    auto end = mountinfo.find('\n', pos);
    if (end == std::string_view::npos) {
      end = mountinfo.size();
    }
    const std::string_view line = mountinfo.substr(pos, end - pos);
    pos = end + 1;
    const auto sep = line.find(" - ");
    if (sep == std::string_view::npos) {
      continue;
    }
    std::istringstream tail{std::string(line.substr(sep + 3))};
    std::string fstype;
    tail >> fstype;
    if (fstype != "cgroup2") {
      continue;
    }
    std::istringstream head{std::string(line.substr(0, sep))};
    std::string id, parent, dev, root, mnt;
    if (head >> id >> parent >> dev >> root >> mnt) {
      return unescape_octal(mnt);
    }
  }
  return std::nullopt;
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
