#pragma once
// rsched::result<T>: the error model of every library module (docs/ARCHITECTURE.md, "Error model").
// Recoverable errors are returned, never thrown; apps turn them into one line on stderr.
#include <string>
#include <utility>
#include <variant>

namespace rsched {

struct error {
  std::string msg; // one line, no trailing newline, says what failed and why
  int errnum = 0;  // errno-style code when one applies, else 0
};

template <typename T> class [[nodiscard]] result {
public:
  result(T value) : v_(std::move(value)) {} // NOLINT(google-explicit-constructor)
  result(error e) : v_(std::in_place_index<1>, std::move(e)) {} // NOLINT
  [[nodiscard]] bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T &value() & { return std::get<0>(v_); }
  const T &value() const & { return std::get<0>(v_); }
  T &&value() && { return std::get<0>(std::move(v_)); }
  T *operator->() { return &std::get<0>(v_); }
  const T *operator->() const { return &std::get<0>(v_); }
  T &operator*() & { return std::get<0>(v_); }
  const error &err() const { return std::get<1>(v_); }

private:
  std::variant<T, error> v_;
};

template <> class [[nodiscard]] result<void> {
public:
  result() = default;
  result(error e) : e_(std::move(e)), ok_(false) {} // NOLINT(google-explicit-constructor)
  [[nodiscard]] bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const error &err() const { return e_; }

private:
  error e_;
  bool ok_ = true;
};

inline error make_error(std::string msg, int errnum = 0) {
  return error{std::move(msg), errnum};
}

} // namespace rsched
