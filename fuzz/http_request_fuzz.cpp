// libFuzzer target: the request path of rschedd's /metrics endpoint
// (rsched::rschedd::http::parse_request), which reads whatever a client sends. Beyond "no crash,
// no sanitizer report": every view the parser returns lies inside the input, a request never
// claims more bytes than it was given or than the head limit, the path is the target's,
// the same head alone parses to the same request, and pipelined requests are parsed one after
// another until the bytes run out, as the server does.
#include "rsched/rschedd/http_request.hpp"

#include "fuzz_check.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <variant>

namespace {

namespace http = rsched::rschedd::http;

bool inside(std::string_view part, std::string_view whole) {
  return part.empty() ||
         (part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size());
}

void check_one(std::string_view buf, std::size_t max_head) {
  const auto r = http::parse_request(buf, max_head);
  if (const auto *e = std::get_if<http::error>(&r)) {
    RSCHED_FUZZ_CHECK(e->status >= 400 && e->status < 600);
    return;
  }
  const auto *q = std::get_if<http::request>(&r);
  if (q == nullptr) {
    return; // incomplete
  }
  RSCHED_FUZZ_CHECK(q->consumed > 0 && q->consumed <= buf.size());
  RSCHED_FUZZ_CHECK(q->consumed <= max_head + 2); // the limit, with a final line ending's slack
  RSCHED_FUZZ_CHECK(inside(q->method, buf) && inside(q->target, buf));
  RSCHED_FUZZ_CHECK(!q->method.empty() && !q->target.empty() && !q->path.empty());
  // The path is the start of an origin-form target, a part of an absolute-form one (or "/" when
  // that has none), or "*".
  if (q->target.front() == '/' || q->target == "*") {
    RSCHED_FUZZ_CHECK(q->target.substr(0, q->path.size()) == q->path);
  } else {
    RSCHED_FUZZ_CHECK(q->path == "/" || inside(q->path, q->target));
  }
  RSCHED_FUZZ_CHECK(q->path.find_first_of("?#") == std::string_view::npos);
  RSCHED_FUZZ_CHECK(q->minor_version == 0 || q->minor_version == 1);
  // The head alone, without what follows it, is the same request.
  const auto again = http::parse_request(buf.substr(0, q->consumed), max_head);
  const auto *q2 = std::get_if<http::request>(&again);
  RSCHED_FUZZ_CHECK(q2 != nullptr);
  RSCHED_FUZZ_CHECK(q2->consumed == q->consumed && q2->method == q->method &&
                    q2->target == q->target && q2->accept == q->accept &&
                    q2->keep_alive == q->keep_alive && q2->has_body == q->has_body);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
  const std::string_view all(reinterpret_cast<const char *>(data), size);
  // The first byte picks a head limit (the default, or a small one that limits hit often).
  const std::size_t max_head = size > 0 && (data[0] & 1U) != 0 ? 64 : 8192;
  check_one(all, max_head);
  // Pipelining: one request after another, as the server reads a connection's buffer.
  std::string_view rest = all;
  for (int n = 0; n < 64 && !rest.empty(); ++n) {
    const auto r = http::parse_request(rest, 8192);
    const auto *q = std::get_if<http::request>(&r);
    if (q == nullptr) {
      break;
    }
    RSCHED_FUZZ_CHECK(q->consumed <= rest.size());
    check_one(rest, 8192);
    rest.remove_prefix(q->consumed);
  }
  return 0;
}
