#pragma once
// The request side of rschedd's /metrics endpoint (http_server.hpp): one HTTP/1.x request head
// parsed from the bytes received so far. A pure function over bytes (no allocation but the
// Accept value, no state, no I/O), so it can be unit-tested and fuzzed on its own.
//
// What it accepts (RFC 9112, strictly where leniency could be abused):
// - a request line `METHOD SP TARGET SP HTTP/1.0|HTTP/1.1`; empty lines before it are skipped;
// - lines ending in CRLF or a bare LF; a CR anywhere else is an error;
// - header fields `name: value`; a name is a token (no space before the colon), a value has no
//   control bytes but tab; an obsolete folded line (starting with a space or tab) is an error;
// - a missing Host is fine (the endpoint serves one thing whatever the host);
// - Content-Length (digits; several must agree) or Transfer-Encoding mean the request has a
//   body: the server answers and closes rather than read it (a scrape has none);
// - the whole head (request line to the empty line) at most `max_head` bytes.
#include <cstddef>
#include <string>
#include <string_view>
#include <variant>

namespace rsched::rschedd::http {

// Not a complete head yet, and nothing wrong so far: read more.
struct incomplete {};

// A request the server answers with `status` (400, 414, 431, 505) and then closes.
struct error {
  int status = 400;
  std::string_view reason; // for the reply's body, e.g. "header line without a colon"
};

struct request {
  std::string_view method;  // as sent (case-sensitive, a token)
  std::string_view target;  // as sent: "/metrics", "/metrics?x=1", "*" or an absolute URI
  std::string_view path;    // the target's path, without the query ("/metrics")
  std::string accept;       // every Accept field, joined with ", " ("" when none)
  int minor_version = 1;    // HTTP/1.<minor>: 0 or 1
  bool keep_alive = true;   // what the client asked: HTTP/1.1 unless "close", HTTP/1.0 if
                            // "keep-alive" (Connection tokens, any case)
  bool has_body = false;    // Content-Length > 0 or Transfer-Encoding present
  std::size_t consumed = 0; // bytes of `buf` the head took, through its empty line
};

using parse_result = std::variant<incomplete, error, request>;

// `v` without leading and trailing optional whitespace (spaces and tabs, RFC 9110 "OWS").
std::string_view trim_ows(std::string_view v);

// The request whose head starts at buf[0]. Pipelined requests: parse again from `consumed`.
// The views in the result point into `buf`.
parse_result parse_request(std::string_view buf, std::size_t max_head = 8192);

} // namespace rsched::rschedd::http
