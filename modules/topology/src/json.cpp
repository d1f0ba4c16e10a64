#include "rsched/topology/json.hpp"

#include "rsched/base/text.hpp"

#include <charconv>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

namespace rsched::topology {

std::string to_json(const topology &t) {
  // nlohmann::json objects are std::maps keyed by string: keys come out in string order ("0",
  // "1", "10", "2"), as from upstream's BTreeMap<String, _>, and dump(2) is serde_json's
  // to_string_pretty layout, `{}` for an empty map included.
  nlohmann::json cpus = nlohmann::json::object();
  for (const auto &c : t.cpus) {
    if (c.cpu < max_cpus && (c.die >= 0 || c.numa >= 0)) {
      cpus[std::to_string(c.cpu)] = {{"die", c.die}, {"numa", c.numa}};
    }
  }
  return nlohmann::json{{"cpus", std::move(cpus)}}.dump(2);
}

namespace {

using json = nlohmann::json;

// serde_json's default recursion limit; deeper input is an error, not a stack overflow.
constexpr int max_depth = 128;

// nlohmann's SAX interface: the library does the lexing, escapes, UTF-8 and syntax errors; this
// handler keeps only "cpus" and each CPU's "die" and "numa" (no DOM for members it does not
// know) and checks what the document means. Returning false stops the parse after the first
// error is recorded.
class handler final : public nlohmann::json_sax<json> {
public:
  std::optional<error> err;
  std::map<unsigned, cpu_info> cpus;

  bool null() override { return scalar(); }
  bool boolean(bool) override { return scalar(); }
  bool number_integer(number_integer_t v) override { return integer(v, true); }
  bool number_unsigned(number_unsigned_t v) override {
    // Above INT64_MAX is above INT32_MAX too: integer() says it does not fit.
    constexpr auto i64_max = std::numeric_limits<std::int64_t>::max();
    return integer(v > static_cast<std::uint64_t>(i64_max) ? i64_max : static_cast<std::int64_t>(v),
                   true);
  }
  bool number_float(number_float_t, const string_t &text) override {
    // Digits only, too large for 64 bits: nlohmann falls back to a double. Still an integer.
    if (text.find_first_of(".eE") == std::string::npos) {
      return integer(0, false);
    }
    return scalar();
  }
  bool string(string_t &) override { return scalar(); }
  bool binary(binary_t &) override { return scalar(); }

  bool start_object(std::size_t) override { return open(true); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }

  bool key(string_t &k) override {
    if (skip_ > 0) {
      return true;
    }
    if (level_ == level::root) {
      if (k != "cpus") {
        expect_ = value::ignored;
        return true;
      }
      if (have_cpus_) {
        return fail("duplicate field `cpus`");
      }
      have_cpus_ = true;
      expect_ = value::cpus;
      return true;
    }
    if (level_ == level::cpus) {
      if (k.empty() || k.find_first_not_of("0123456789") != std::string::npos) {
        return fail("CPU key \"" + text::escape_for_terminal(k) + "\" is not a number");
      }
      // Digits that overflow are far above max_cpus: ignored like any other large key (the
      // object must still be valid).
      unsigned long long n = 0;
      const auto [end, ec] = std::from_chars(k.data(), k.data() + k.size(), n);
      key_ = k;
      cpu_in_range_ = ec == std::errc{} && end == k.data() + k.size() && n < max_cpus;
      cpu_ = cpu_in_range_ ? static_cast<unsigned>(n) : 0;
      expect_ = value::cpu;
      return true;
    }
    // level::cpu
    if (k != "die" && k != "numa") {
      expect_ = value::ignored;
      return true;
    }
    auto &slot = k == "die" ? die_ : numa_;
    if (slot) {
      return fail("duplicate field `" + k + "` in CPU \"" + key_ + "\"");
    }
    expect_ = k == "die" ? value::die : value::numa;
    return true;
  }

  bool parse_error(std::size_t byte, const std::string &,
                   const nlohmann::detail::exception &e) override {
    // e.what() is "[json.exception.parse_error.101] parse error at line L, column C: DETAIL";
    // keep DETAIL (escaped: it quotes the input) and say where in this module's words.
    std::string_view what = e.what();
    const auto col = what.find("column ");
    const auto colon = col == std::string_view::npos ? col : what.find(": ", col);
    const std::string_view detail = colon == std::string_view::npos ? what : what.substr(colon + 2);
    // nlohmann's byte is the 1-based index of the last character read: the one at fault.
    error_at(byte > 0 ? byte - 1 : 0, text::escape_for_terminal(detail));
    return false;
  }

  // A syntax error: "topology JSON: WHAT at line L column C" (`pos` 0-based).
  void error_at(std::size_t pos, const std::string &what) {
    if (!err) {
      err = make_error("topology JSON: " + what + " at " + line_col_(pos));
    }
  }

  std::function<std::string(std::size_t)> line_col_;

private:
  enum class level { outside, root, cpus, cpu };
  enum class value { none, ignored, cpus, cpu, die, numa };

  bool fail(const std::string &what) {
    if (!err) {
      err = make_error("topology JSON: " + what);
    }
    return false;
  }

  static std::string field_name(value v) { return v == value::die ? "die" : "numa"; }

  // A value that is not a container: a scalar where the topology wants one, or ignored.
  bool scalar() {
    if (skip_ > 0) {
      return true;
    }
    const value v = std::exchange(expect_, value::none);
    switch (v) {
    case value::cpus:
      return fail("`cpus` must be an object");
    case value::cpu:
      return fail("CPU \"" + key_ + "\" must be an object");
    case value::die:
    case value::numa:
      return fail("`" + field_name(v) + "` in CPU \"" + key_ + "\" must be an integer");
    default:
      return true;
    }
  }

  bool integer(std::int64_t v, bool fits64) {
    if (skip_ > 0 || (expect_ != value::die && expect_ != value::numa)) {
      return scalar();
    }
    const value field = std::exchange(expect_, value::none);
    if (!fits64 || v < std::numeric_limits<std::int32_t>::min() ||
        v > std::numeric_limits<std::int32_t>::max()) {
      return fail("`" + field_name(field) + "` in CPU \"" + key_ +
                  "\" does not fit a 32-bit integer");
    }
    (field == value::die ? die_ : numa_) = static_cast<std::int32_t>(v);
    return true;
  }

  bool open(bool object) {
    if (++depth_ > max_depth) {
      return fail("nesting deeper than " + std::to_string(max_depth) + " levels");
    }
    if (skip_ > 0) {
      ++skip_;
      return true;
    }
    const value v = std::exchange(expect_, value::none);
    if (level_ == level::outside) {
      if (!object) {
        return fail("expected a JSON object");
      }
      level_ = level::root;
      return true;
    }
    switch (v) {
    case value::cpus:
      if (!object) {
        return fail("`cpus` must be an object");
      }
      level_ = level::cpus;
      return true;
    case value::cpu:
      if (!object) {
        return fail("CPU \"" + key_ + "\" must be an object");
      }
      level_ = level::cpu;
      die_.reset();
      numa_.reset();
      return true;
    case value::die:
    case value::numa:
      return fail("`" + field_name(v) + "` in CPU \"" + key_ + "\" must be an integer");
    default:
      skip_ = 1;
      return true;
    }
  }

  bool close() {
    --depth_;
    if (skip_ > 0) {
      --skip_;
      return true;
    }
    switch (level_) {
    case level::cpu:
      level_ = level::cpus;
      if (!die_) {
        return fail("missing field `die` in CPU \"" + key_ + "\"");
      }
      if (!numa_) {
        return fail("missing field `numa` in CPU \"" + key_ + "\"");
      }
      if (cpu_in_range_) {
        cpu_info c;
        c.cpu = cpu_;
        c.die = *die_;
        c.numa = *numa_;
        if (!cpus.emplace(c.cpu, c).second) {
          return fail("CPU " + std::to_string(c.cpu) + " appears twice");
        }
      }
      return true;
    case level::cpus:
      level_ = level::root;
      return true;
    default:
      level_ = level::outside;
      if (!have_cpus_) {
        return fail("missing field `cpus`");
      }
      return true;
    }
  }

  level level_ = level::outside;
  value expect_ = value::none;
  int depth_ = 0;
  int skip_ = 0; // > 0: inside a value that is not ours, this many containers deep
  bool have_cpus_ = false;
  std::string key_; // the CPU key being read, digits only
  unsigned cpu_ = 0;
  bool cpu_in_range_ = false;
  std::optional<std::int32_t> die_;
  std::optional<std::int32_t> numa_;
};

} // namespace

result<topology> from_json(std::string_view text) {
  // "line L column C" of the 0-based byte offset `pos`, both counted from 1 (columns in bytes).
  auto line_col = [text](std::size_t pos) {
    std::size_t line = 1;
    std::size_t col = 1;
    for (std::size_t i = 0; i < pos && i < text.size(); ++i) {
      if (text[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return "line " + std::to_string(line) + " column " + std::to_string(col);
  };
  handler h;
  h.line_col_ = line_col;
  // The root must be an object: say so before nlohmann's generic "unexpected end of input".
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos || text[first] != '{') {
    h.error_at(first == std::string_view::npos ? text.size() : first, "expected a JSON object");
    return *h.err;
  }
  if (!json::sax_parse(text, &h) || h.err) {
    return h.err ? *h.err : make_error("topology JSON: invalid document");
  }
  topology t;
  for (const auto &[cpu, info] : h.cpus) {
    t.cpus.push_back(info);
  }
  return t;
}

} // namespace rsched::topology
