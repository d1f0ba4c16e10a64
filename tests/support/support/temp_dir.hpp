#pragma once
// The one temporary-directory helper of the tests: a fresh directory under $TMPDIR (or /tmp),
// removed with everything in it when the object goes out of scope (on every exit path, a failed
// REQUIRE included).
#include <filesystem>
#include <string>
#include <string_view>

namespace rsched::test {

class temp_dir {
public:
  // `prefix` names the directory (prefix-XXXXXX) so that a leftover one says which test made it.
  explicit temp_dir(std::string_view prefix = "rsched-test");
  ~temp_dir();
  temp_dir(const temp_dir &) = delete;
  temp_dir &operator=(const temp_dir &) = delete;

  [[nodiscard]] const std::filesystem::path &path() const { return path_; }
  // The directory as a string.
  [[nodiscard]] std::string str() const { return path_.string(); }
  // The path of `name` inside the directory (not created).
  [[nodiscard]] std::string file(std::string_view name) const { return (path_ / name).string(); }

private:
  std::filesystem::path path_;
};

} // namespace rsched::test
