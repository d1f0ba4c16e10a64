// One HTTP/1.x request head from bytes (http_request.hpp).
#include "rsched/rschedd/http_request.hpp"

#include <charconv>
#include <cstdint>
#include <optional>

namespace rsched::rschedd::http {

namespace {

// RFC 9110 tchar.
bool is_tchar(char c) {
  const auto u = static_cast<unsigned char>(c);
  if ((u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z')) {
    return true;
  }
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool is_token(std::string_view s) {
  if (s.empty()) {
    return false;
  }
  for (const char c : s) {
    if (!is_tchar(c)) {
      return false;
    }
  }
  return true;
}

char lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) {
      return false;
    }
  }
  return true;
}

// The path of a request target (origin-form, absolute-form or "*"), or nullopt when it is none
// of those. Only visible ASCII is allowed in a target.
std::optional<std::string_view> path_of(std::string_view target) {
  if (target.empty()) {
    return std::nullopt;
  }
  for (const char c : target) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) {
      return std::nullopt;
    }
  }
  if (target == "*") {
    return target;
  }
  std::string_view rest = target;
  if (target.front() != '/') {
    // absolute-form: scheme "://" authority [path]
    const auto sep = target.find("://");
    if (sep == std::string_view::npos ||
        !(iequals(target.substr(0, sep), "http") || iequals(target.substr(0, sep), "https"))) {
      return std::nullopt;
    }
    rest = target.substr(sep + 3);
    const auto slash = rest.find_first_of("/?#");
    if (slash == std::string_view::npos || rest[slash] != '/') {
      return std::string_view("/");
    }
    rest = rest.substr(slash);
  }
  return rest.substr(0, rest.find_first_of("?#"));
}

} // namespace

parse_result parse_request(std::string_view buf, std::size_t max_head) {
  std::size_t pos = 0;
  bool in_request_line = true;
  // The next line from `pos` without its terminator (CRLF or LF), advancing `pos`; nullopt
  // when it has not all arrived. `err` is set for a stray CR or a head over the limit.
  std::optional<error> err;
  const auto next_line = [&]() -> std::optional<std::string_view> {
    const auto lf = buf.find('\n', pos);
    if (lf == std::string_view::npos || lf >= max_head) {
      if (lf != std::string_view::npos || buf.size() >= max_head) {
        err = in_request_line ? error{414, "request line too long"}
                              : error{431, "request header fields too large"};
      }
      return std::nullopt;
    }
    std::string_view line = buf.substr(pos, lf - pos);
    pos = lf + 1;
    if (!line.empty() && line.back() == '\r') {
      line.remove_suffix(1);
    }
    if (line.find('\r') != std::string_view::npos) {
      err = error{400, "a CR not followed by LF"};
      return std::nullopt;
    }
    return line;
  };

  // Empty lines before the request line are skipped (RFC 9112 2.2).
  std::optional<std::string_view> line;
  do {
    line = next_line();
    if (!line) {
      return err ? parse_result(*err) : parse_result(incomplete{});
    }
  } while (line->empty());

  request r;
  {
    const std::string_view rl = *line;
    const auto sp1 = rl.find(' ');
    const auto sp2 = sp1 == std::string_view::npos ? sp1 : rl.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos || rl.find(' ', sp2 + 1) != std::string_view::npos) {
      return error{400, "not a request line"};
    }
    r.method = rl.substr(0, sp1);
    r.target = rl.substr(sp1 + 1, sp2 - sp1 - 1);
    const std::string_view version = rl.substr(sp2 + 1);
    if (!is_token(r.method)) {
      return error{400, "not a method"};
    }
    const auto path = path_of(r.target);
    if (!path) {
      return error{400, "not a request target"};
    }
    r.path = *path;
    const auto digit = [](char c) { return c >= '0' && c <= '9'; };
    if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || !digit(version[5]) ||
        version[6] != '.' || !digit(version[7])) {
      return error{400, "not an HTTP version"};
    }
    if (version[5] != '1') {
      return error{505, "HTTP version not supported"};
    }
    r.minor_version = version[7] == '0' ? 0 : 1; // 1.x above 1.1 is served as 1.1
  }
  in_request_line = false;

  bool conn_close = false;
  bool conn_keep_alive = false;
  bool chunked = false;
  std::optional<std::uint64_t> length;
  for (;;) {
    line = next_line();
    if (!line) {
      return err ? parse_result(*err) : parse_result(incomplete{});
    }
    if (line->empty()) {
      break;
    }
    const std::string_view l = *line;
    if (l.front() == ' ' || l.front() == '\t') {
      return error{400, "obsolete line folding"};
    }
    const auto colon = l.find(':');
    if (colon == std::string_view::npos) {
      return error{400, "header line without a colon"};
    }
    const std::string_view name = l.substr(0, colon);
    if (!is_token(name)) {
      return error{400, "not a header name"};
    }
    const std::string_view value = trim_ows(l.substr(colon + 1));
    for (const char c : value) {
      const auto u = static_cast<unsigned char>(c);
      if ((u < 0x20 && c != '\t') || u == 0x7f) {
        return error{400, "a control byte in a header value"};
      }
    }
    if (iequals(name, "accept")) {
      if (!value.empty()) {
        if (!r.accept.empty()) {
          r.accept += ", ";
        }
        r.accept += value;
      }
    } else if (iequals(name, "connection")) {
      std::string_view rest = value;
      while (!rest.empty()) {
        const auto comma = rest.find(',');
        const std::string_view opt = trim_ows(rest.substr(0, comma));
        conn_close = conn_close || iequals(opt, "close");
        conn_keep_alive = conn_keep_alive || iequals(opt, "keep-alive");
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      }
    } else if (iequals(name, "content-length")) {
      std::uint64_t n = 0;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (value.empty() || ec != std::errc() || end != value.data() + value.size() ||
          value.front() == '+' || value.front() == '-' || (length && *length != n)) {
        return error{400, "a bad Content-Length"};
      }
      length = n;
    } else if (iequals(name, "transfer-encoding")) {
      chunked = true;
    }
  }
  if (chunked && length) {
    return error{400, "both Content-Length and Transfer-Encoding"};
  }
  r.has_body = chunked || (length && *length > 0);
  r.keep_alive = r.minor_version == 0 ? conn_keep_alive && !conn_close : !conn_close;
  r.consumed = pos;
  return r;
}

std::string_view trim_ows(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) {
    v.remove_prefix(1);
  }
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) {
    v.remove_suffix(1);
  }
  return v;
}

} // namespace rsched::rschedd::http
