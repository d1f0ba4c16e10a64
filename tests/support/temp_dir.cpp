#include "support/temp_dir.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <system_error>

namespace rsched::test {

temp_dir::temp_dir(std::string_view prefix) {
  std::string tmpl = (std::filesystem::temp_directory_path() / prefix).string() + "-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    throw std::runtime_error("mkdtemp(" + tmpl + ") failed: " + std::strerror(errno));
  }
  path_ = tmpl;
}

temp_dir::~temp_dir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

} // namespace rsched::test
