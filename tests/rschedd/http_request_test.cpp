// http::parse_request (http_request.hpp), the request side of rschedd's /metrics endpoint, over
// plain bytes: complete, incomplete and refused heads, pipelining, line endings, keep-alive
// rules, limits and hostile bytes.
#include "rsched/rschedd/http_request.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <variant>

using namespace rsched::rschedd::http;

namespace {

request ok(std::string_view buf, std::size_t max = 8192) {
  const parse_result r = parse_request(buf, max);
  if (const auto *e = std::get_if<error>(&r)) {
    FAIL("refused with " << e->status << ": " << e->reason);
  }
  REQUIRE(std::holds_alternative<request>(r));
  return std::get<request>(r);
}

int status(std::string_view buf, std::size_t max = 8192) {
  const parse_result r = parse_request(buf, max);
  const auto *e = std::get_if<error>(&r);
  return e != nullptr ? e->status : 0;
}

bool incomplete_(std::string_view buf, std::size_t max = 8192) {
  return std::holds_alternative<incomplete>(parse_request(buf, max));
}

} // namespace

TEST_CASE("parse_request: a scrape as Prometheus sends it", "[http]") {
  const std::string buf =
      "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9466\r\nUser-Agent: Prometheus/2.42.0\r\n"
      "Accept: application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
      "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\n"
      "Accept-Encoding: gzip\r\nX-Prometheus-Scrape-Timeout-Seconds: 10\r\n\r\n";
  const request r = ok(buf);
  CHECK(r.method == "GET");
  CHECK(r.target == "/metrics");
  CHECK(r.path == "/metrics");
  CHECK(r.accept.starts_with("application/openmetrics-text;version=1.0.0,"));
  CHECK(r.accept.ends_with("*/*;q=0.1"));
  CHECK(r.minor_version == 1);
  CHECK(r.keep_alive);
  CHECK_FALSE(r.has_body);
  CHECK(r.consumed == buf.size());
}

TEST_CASE("parse_request: every prefix of a request is incomplete, never an error", "[http]") {
  const std::string buf = "\r\nGET /metrics?x=1 HTTP/1.1\r\nHost: x\r\nAccept: a/b\r\n\r\n";
  for (std::size_t n = 0; n < buf.size(); ++n) {
    INFO(n);
    CHECK(incomplete_(buf.substr(0, n)));
  }
  const request r = ok(buf);
  CHECK(r.target == "/metrics?x=1");
  CHECK(r.path == "/metrics");
  CHECK(r.consumed == buf.size()); // the empty line before it too
}

TEST_CASE("parse_request: pipelined requests, each from where the last ended", "[http]") {
  const std::string buf = "GET /metrics HTTP/1.1\r\nAccept: text/plain\r\n\r\n"
                          "HEAD / HTTP/1.1\n\n"
                          "GET /x HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
                          "GET /metr";
  std::string_view rest = buf;
  const request a = ok(rest);
  CHECK(a.method == "GET");
  CHECK(a.accept == "text/plain");
  rest.remove_prefix(a.consumed);
  const request b = ok(rest);
  CHECK(b.method == "HEAD");
  CHECK(b.path == "/");
  CHECK(b.accept.empty()); // not the first one's
  rest.remove_prefix(b.consumed);
  const request c = ok(rest);
  CHECK(c.path == "/x");
  CHECK(c.minor_version == 0);
  CHECK(c.keep_alive);
  rest.remove_prefix(c.consumed);
  CHECK(rest == "GET /metr");
  CHECK(incomplete_(rest));
}

TEST_CASE("parse_request: CRLF, bare LF and mixed endings, a stray CR is refused", "[http]") {
  CHECK(ok("GET / HTTP/1.1\r\nHost: x\r\n\r\n").path == "/");
  CHECK(ok("GET / HTTP/1.1\nHost: x\n\n").path == "/");
  CHECK(ok("GET / HTTP/1.1\r\nHost: x\n\r\n").path == "/");
  CHECK(ok("GET / HTTP/1.1\nHost: x\r\n\nGET").consumed == 25);
  CHECK(status("GET / HTTP/1.1\rHost: x\r\n\r\n") == 400);
  CHECK(status("GET / HTTP/1.1\r\nHost: x\ry\r\n\r\n") == 400);
  CHECK(status("GET / HTTP/1.1\r\nHost: x\r\n\r\r\n") == 400);
  // A CR not yet followed by anything: wait for the LF.
  CHECK(incomplete_("GET / HTTP/1.1\r"));
}

TEST_CASE("parse_request: keep-alive as HTTP/1.0 and 1.1 define it", "[http]") {
  CHECK(ok("GET / HTTP/1.1\r\n\r\n").keep_alive);
  CHECK_FALSE(ok("GET / HTTP/1.1\r\nConnection: close\r\n\r\n").keep_alive);
  CHECK_FALSE(ok("GET / HTTP/1.1\r\nConnection: Keep-Alive, CLOSE\r\n\r\n").keep_alive);
  CHECK_FALSE(ok("GET / HTTP/1.1\r\nConnection: te\r\nConnection: close\r\n\r\n").keep_alive);
  CHECK(ok("GET / HTTP/1.1\r\nConnection: closed\r\n\r\n").keep_alive); // not the token
  CHECK_FALSE(ok("GET / HTTP/1.0\r\n\r\n").keep_alive);
  CHECK(ok("GET / HTTP/1.0\r\nconnection:keep-alive\r\n\r\n").keep_alive);
  CHECK_FALSE(ok("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n").keep_alive);
  const request later = ok("GET / HTTP/1.9\r\n\r\n"); // a later 1.x is served as 1.1
  CHECK(later.minor_version == 1);
  CHECK(later.keep_alive);
}

TEST_CASE("parse_request: no Host is fine, bodies are reported, several Accept are joined",
          "[http]") {
  CHECK(ok("GET /metrics HTTP/1.1\r\n\r\n").path == "/metrics");
  CHECK_FALSE(ok("GET / HTTP/1.1\r\nContent-Length: 0\r\n\r\n").has_body);
  CHECK(ok("POST / HTTP/1.1\r\nContent-Length: 12\r\n\r\n").has_body);
  CHECK(ok("POST / HTTP/1.1\r\nContent-Length: 5\r\ncontent-length: 5\r\n\r\n").has_body);
  CHECK(ok("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").has_body);
  CHECK(status("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n") == 400);
  CHECK(status("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n") == 400);
  CHECK(status("POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\n") == 400);
  CHECK(status("POST / HTTP/1.1\r\nContent-Length: 1 2\r\n\r\n") == 400);
  CHECK(status("POST / HTTP/1.1\r\nContent-Length:\r\n\r\n") == 400);
  CHECK(status("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n") == 400);
  CHECK(status("POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n") ==
        400);
  const request r =
      ok("GET / HTTP/1.1\r\nAccept: text/plain\r\nACCEPT:\r\naccept:  application/x \t\r\n\r\n");
  CHECK(r.accept == "text/plain, application/x");
}

TEST_CASE("parse_request: request lines and targets", "[http]") {
  CHECK(ok("OPTIONS * HTTP/1.1\r\n\r\n").path == "*");
  CHECK(ok("GET http://host:9466/metrics?a HTTP/1.1\r\n\r\n").path == "/metrics");
  CHECK(ok("GET HTTP://host HTTP/1.1\r\n\r\n").path == "/");
  CHECK(ok("GET https://host?x HTTP/1.1\r\n\r\n").path == "/");
  CHECK(ok("BREW /pot HTTP/1.1\r\n\r\n").method == "BREW"); // the server says 405
  CHECK(status("GET  / HTTP/1.1\r\n\r\n") == 400);
  CHECK(status("GET / HTTP/1.1 \r\n\r\n") == 400);
  CHECK(status("GET /\r\n\r\n") == 400); // HTTP/0.9
  CHECK(status("GET / http/1.1\r\n\r\n") == 400);
  CHECK(status("GET / HTTP/1.10\r\n\r\n") == 400);
  CHECK(status("GET / HTTP/2.0\r\n\r\n") == 505);
  CHECK(status("GET / HTTP/0.9\r\n\r\n") == 505);
  CHECK(status("GET metrics HTTP/1.1\r\n\r\n") == 400);
  CHECK(status("GET ftp://x/ HTTP/1.1\r\n\r\n") == 400);
  CHECK(status("G(T / HTTP/1.1\r\n\r\n") == 400);
  CHECK(status(" GET / HTTP/1.1\r\n\r\n") == 400);
  CHECK(status("GET /\x7f HTTP/1.1\r\n\r\n") == 400);
  CHECK(status("GET /\xc3\xa9 HTTP/1.1\r\n\r\n") == 400);
}

TEST_CASE("parse_request: header lines: folding, names, control bytes", "[http]") {
  CHECK(status("GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n") == 400);  // obs-fold
  CHECK(status("GET / HTTP/1.1\r\nX: a\r\n\tb\r\n\r\n") == 400); // obs-fold
  CHECK(status("GET / HTTP/1.1\r\nHost : x\r\n\r\n") == 400);    // space before the colon
  CHECK(status("GET / HTTP/1.1\r\nno colon\r\n\r\n") == 400);
  CHECK(status("GET / HTTP/1.1\r\n: x\r\n\r\n") == 400);
  CHECK(status("GET / HTTP/1.1\r\nX: a\x01"
               "b\r\n\r\n") == 400);
  CHECK(status(std::string_view("GET / HTTP/1.1\r\nX: a\0b\r\n\r\n", 26)) == 400);
  CHECK(ok("GET / HTTP/1.1\r\nX: a\tb \xff\xfe\r\nX-Empty:\r\n\r\n").path == "/"); // obs-text
}

TEST_CASE("parse_request: a head over the limit is 431 (414 for the request line), whether "
          "complete or not",
          "[http]") {
  const std::string line = "GET / HTTP/1.1\r\n";
  const std::string field = "X: " + std::string(100, 'a') + "\r\n";
  std::string head = line;
  while (head.size() + field.size() + 2 <= 1000) {
    head += field;
  }
  head += "\r\n";
  REQUIRE(head.size() <= 1000);
  CHECK(ok(head, head.size()).consumed == head.size()); // exactly at the limit
  CHECK(status(head, head.size() - 1) == 431);
  CHECK(status(head.substr(0, head.size() - 2), head.size() - 2) == 431); // no end in sight
  CHECK(incomplete_(head.substr(0, head.size() - 2), head.size() - 1));
  CHECK(status("GET /" + std::string(2000, 'a'), 1000) == 414);
  CHECK(status("GET /" + std::string(2000, 'a') + " HTTP/1.1\r\n\r\n", 1000) == 414);
  // Empty lines before the request count too.
  CHECK(status(std::string(600, '\n'), 500) == 414);
  CHECK(incomplete_(std::string(400, '\n'), 500));
}

TEST_CASE("parse_request: random and mutated bytes never crash and always decide within the "
          "limit",
          "[http]") {
  std::mt19937 rng(30);
  const std::string seed = "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: text/plain\r\n"
                           "Connection: keep-alive\r\nContent-Length: 0\r\n\r\n";
  const std::string alphabet = std::string("\r\n :\t/GETHP1.0") + '\0' + "\x7f\xff";
  for (int i = 0; i < 20000; ++i) {
    std::string buf;
    if (i % 2 == 0) {
      buf = seed;
      const auto edits = 1 + rng() % 4;
      for (std::uint32_t e = 0; e < edits; ++e) {
        const auto at = rng() % buf.size();
        buf[at] = alphabet[rng() % alphabet.size()];
      }
    } else {
      buf.resize(rng() % 300);
      for (char &c : buf) {
        c = static_cast<char>(rng() % 256);
      }
    }
    const std::size_t max = 64 + rng() % 256;
    const parse_result r = parse_request(buf, max);
    if (const auto *req = std::get_if<request>(&r)) {
      CHECK(req->consumed <= std::min(buf.size(), max));
      CHECK_FALSE(req->method.empty());
    } else if (const auto *e = std::get_if<error>(&r)) {
      CHECK((e->status == 400 || e->status == 414 || e->status == 431 || e->status == 505));
    } else {
      CHECK(buf.size() < max); // incomplete only while under the limit
    }
  }
}
