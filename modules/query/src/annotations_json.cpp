// JSON incident timelines as records, read with nlohmann-json's SAX parser: the document is never
// built as a tree, and a number keeps the text it was written with (an epoch time with
// nanoseconds, "1700000000.123456789", does not go through a double).
#include "rsched/base/text.hpp"

#include "annotations_records.hpp"

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

namespace rsched::query::detail {

namespace {

// Accepts exactly: [ { "key": string | number | null | [string, ...], ... }, ... ].
class incident_sax final : public nlohmann::json_sax<nlohmann::json> {
public:
  std::vector<incident_record> records;
  std::string err;

  bool null() override { return value(std::nullopt); }
  bool boolean(bool /*val*/) override {
    // Outside an object the value's kind is not the problem: it is where it stands.
    return depth_ < 2 ? value(std::nullopt) : wrong("booleans are not accepted");
  }
  bool number_integer(number_integer_t val) override { return value(std::to_string(val)); }
  bool number_unsigned(number_unsigned_t val) override { return value(std::to_string(val)); }
  bool number_float(number_float_t /*val*/, const string_t &s) override { return value(s); }
  bool string(string_t &val) override {
    if (depth_ == 3) {
      joined_ += (tags_ == 0 ? "" : ",") + val;
      ++tags_;
      return true;
    }
    return value(std::move(val));
  }
  bool binary(binary_t & /*val*/) override { return wrong("expected a value"); }
  bool start_object(std::size_t /*elements*/) override {
    if (depth_ != 1) {
      return wrong(depth_ == 0 ? "expected an array of objects"
                               : "nested objects are not accepted");
    }
    records.emplace_back();
    depth_ = 2;
    return true;
  }
  bool key(string_t &val) override {
    key_ = std::move(val);
    return true;
  }
  bool end_object() override {
    depth_ = 1;
    return true;
  }
  bool start_array(std::size_t /*elements*/) override {
    if (depth_ == 0 || depth_ == 2) {
      ++depth_;
      joined_.clear();
      tags_ = 0;
      return true;
    }
    return wrong(depth_ == 1 ? "expected an object" : "expected a string");
  }
  bool end_array() override {
    if (depth_ == 3) {
      depth_ = 2;
      records.back()[key_] = std::move(joined_);
      return true;
    }
    depth_ = 0;
    return true;
  }
  bool parse_error(std::size_t position, const std::string & /*last_token*/,
                   const nlohmann::detail::exception &ex) override {
    // ex.what(): "[json.exception.parse_error.101] parse error at line 1, column 5: syntax error
    // while parsing value - invalid literal; last read: '...'; expected end of input". The
    // input's bytes ("last read") are left out: the position says where.
    std::string what = ex.what();
    if (const auto p = what.find(": "); p != std::string::npos) {
      what.erase(0, p + 2);
    }
    if (const auto p = what.find("; last read: '"); p != std::string::npos) {
      const auto q = what.find("'; ", p + 14);
      what.erase(p, q == std::string::npos ? std::string::npos : q + 1 - p);
    }
    for (auto &c : what) { // one line, whatever nlohmann says
      if (c == '\n' || c == '\r') {
        c = ' ';
      }
    }
    err = fmt::format("JSON at byte {}: {}", position, what);
    return false;
  }

private:
  int depth_ = 0; // 0 outside, 1 in the array, 2 in an object, 3 in an object's array
  std::string key_;
  std::string joined_;
  std::size_t tags_ = 0;

  bool value(std::optional<std::string> v) {
    if (depth_ == 2) {
      records.back()[key_] = std::move(v);
      return true;
    }
    if (depth_ == 3) {
      return wrong("expected a string");
    }
    return wrong(depth_ == 0 ? "expected an array of objects" : "expected an object");
  }
  bool wrong(const std::string &m) {
    if (depth_ >= 2) {
      // The key is the file's: a newline or an escape sequence in it stays data, one line.
      err = fmt::format("JSON object {}, field '{}': {}", records.size(),
                        text::escape_for_terminal(key_), m);
    } else {
      err = fmt::format("JSON: {}", m);
    }
    return false;
  }
};

} // namespace

result<std::vector<incident_record>> json_records(std::string_view content) {
  incident_sax sax;
  if (!nlohmann::json::sax_parse(content.begin(), content.end(), &sax)) {
    return make_error(sax.err.empty() ? std::string("JSON: invalid") : sax.err);
  }
  return std::move(sax.records);
}

bool is_json_value(std::string_view content) {
  return nlohmann::json::accept(content.begin(), content.end());
}

} // namespace rsched::query::detail
