// rsched::text's JSON encoder (every JSON rsched writes goes through it): strict RFC 8259 output,
// valid UTF-8 only, U+FFFD per invalid byte with the exact bytes in a "_hex" member (issue 30).
#include "rsched/base/text.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <string_view>

using namespace rsched::text;

namespace {

const std::string fffd = "\xef\xbf\xbd"; // U+FFFD as UTF-8

struct encoded {
  std::string json;
  bool exact = false;
};

encoded enc(std::string_view s) {
  encoded e;
  e.exact = append_json_string(e.json, s);
  return e;
}

std::string q(const std::string &s) {
  return "\"" + s + "\"";
}

} // namespace

TEST_CASE("JSON strings: valid UTF-8 passes, escapes as RFC 8259 has them", "[base]") {
  const std::pair<std::string, std::string> exact[] = {
      {"", ""},
      {"plain", "plain"},
      {"q\"b\\s", "q\\\"b\\\\s"},
      {"\b\f\n\r\t", "\\b\\f\\n\\r\\t"},
      {std::string("nul\0x", 5), "nul\\u0000x"},
      {"esc\x1b[2J\x01\x1f", "esc\\u001b[2J\\u0001\\u001f"},
      {"del\x7f", "del\\u007f"},
      {"/ ~ '", "/ ~ '"},
      // 2, 3 and 4 bytes, the largest code point, U+FFFD itself (valid: no "_hex" member).
      {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf " + fffd,
       "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf " + fffd},
      {"csi\xc2\x9b \xc2\x80 \xc2\xa0", "csi\\u009b \\u0080 \xc2\xa0"}, // C1 controls escaped
  };
  for (const auto &[in, out] : exact) {
    INFO(in);
    const auto e = enc(in);
    CHECK(e.json == q(out));
    CHECK(e.exact);
  }
}

TEST_CASE("JSON strings: each byte that is not valid UTF-8 becomes U+FFFD, never a surrogate",
          "[base]") {
  const std::pair<std::string, std::string> lossy[] = {
      {"bad\xff\xfe", "bad" + fffd + fffd},
      {"\x80", fffd},                                             // a lone continuation byte
      {"trunc\xc3", "trunc" + fffd},                              // a 2-byte sequence cut short
      {"\xe2\x82", fffd + fffd},                                  // a 3-byte sequence cut short
      {"\xf0\x9f\x98 x", fffd + fffd + fffd + " x"},              // a 4-byte sequence cut short
      {"\xed\xa0\x80", fffd + fffd + fffd},                       // a surrogate (U+D800) encoded
      {"\xed\xbf\xbf", fffd + fffd + fffd},                       // U+DFFF encoded
      {"\xc0\xaf", fffd + fffd},                                  // overlong '/'
      {"\xe0\x80\xaf", fffd + fffd + fffd},                       // overlong '/', 3 bytes
      {"\xf0\x80\x80\xaf", fffd + fffd + fffd + fffd},            // overlong '/', 4 bytes
      {"\xf4\x90\x80\x80", fffd + fffd + fffd + fffd},            // above U+10FFFF
      {"\xf8\x88\x80\x80\x80", fffd + fffd + fffd + fffd + fffd}, // 5-byte form
      {"\xc3\x28", fffd + "("}, // the byte after a bad lead is kept
      {"\"\xff\\\n", "\\\"" + fffd + "\\\\\\n"},
  };
  for (const auto &[in, out] : lossy) {
    INFO(in);
    const auto e = enc(in);
    CHECK(e.json == q(out));
    CHECK_FALSE(e.exact);
    CHECK(e.json.find("\\ud") == std::string::npos);
  }
}

TEST_CASE("JSON members: the exact bytes in <key>_hex only when the text was not UTF-8", "[base]") {
  CHECK(to_hex("").empty());
  CHECK(to_hex(std::string("\x00\x0f\x7f\x80\xff", 5)) == "000f7f80ff");
  std::string out;
  append_json_text_member(out, "comm", "web");
  CHECK(out == R"("comm":"web")");
  out.clear();
  append_json_text_member(out, "comm",
                          "a\xff\xfe"
                          "b");
  CHECK(out == "\"comm\":\"a" + fffd + fffd + "b\",\"comm_hex\":\"61fffe62\"");
  out.clear();
  append_json_text_member(out, "k\"\xff", "\xc0");
  CHECK(out == "\"k\\\"" + fffd + "\":\"" + fffd + "\",\"k\\\"" + fffd + "_hex\":\"c0\"");
}

TEST_CASE("format_bytes: binary units, three significant digits, rounding across a unit",
          "[base][text]") {
  CHECK(format_bytes(0) == "0 B");
  CHECK(format_bytes(512) == "512 B");
  CHECK(format_bytes(1023) == "1023 B");
  CHECK(format_bytes(1024) == "1.00 KiB");
  CHECK(format_bytes(1536) == "1.50 KiB");
  CHECK(format_bytes(47'900'000) == "45.7 MiB");
  CHECK(format_bytes(1'288'490'189) == "1.20 GiB");
  CHECK(format_bytes(1023 * 1024 + 1000) == "1.00 MiB");
  CHECK(format_bytes(-2048) == "-2.00 KiB");
  CHECK(format_bytes(INT64_MAX) == "8.00 EiB");
}
