// --metrics-listen's address and the /metrics content negotiation (metrics_endpoint.hpp).
#include "rsched/rschedd/metrics_endpoint.hpp"

#include "rsched/base/text.hpp"
#include "rsched/rschedd/http_request.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>

namespace rsched::rschedd {

namespace om = openmetrics;

result<listen_address> parse_listen_address(std::string_view s) {
  auto bad = [&](std::string_view why) {
    return make_error(fmt::format("--metrics-listen \"{}\": {} (expected PORT, ADDR:PORT or "
                                  "[IPv6]:PORT, e.g. 9466 or 0.0.0.0:9466)",
                                  text::escape_for_terminal(s), why));
  };
  listen_address a;
  std::string_view port = s;
  if (!s.empty() && s.front() == '[') {
    const auto close = s.find(']');
    if (close == std::string_view::npos || close + 1 >= s.size() || s[close + 1] != ':') {
      return bad("an IPv6 address goes in brackets, followed by :PORT");
    }
    a.host = std::string(s.substr(1, close - 1));
    port = s.substr(close + 2);
  } else if (const auto colon = s.rfind(':'); colon != std::string_view::npos) {
    a.host = std::string(s.substr(0, colon));
    if (a.host.find(':') != std::string::npos) {
      return bad("an IPv6 address goes in brackets");
    }
    port = s.substr(colon + 1);
  } else {
    a.host = "127.0.0.1"; // a bare port is loopback only: exposing is a decision
  }
  if (a.host.empty()) {
    return bad("the address is empty");
  }
  if (!std::all_of(a.host.begin(), a.host.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == ':' ||
               c == '-' || c == '_' || c == '%';
      })) {
    return bad("not an address");
  }
  int p = -1;
  const auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (port.empty() || ec != std::errc() || ptr != port.data() + port.size() || p < 0 || p > 65535) {
    return bad("the port is not a number from 0 to 65535");
  }
  a.port = p;
  return a;
}

om::format negotiate(std::string_view accept) {
  // Media ranges separated by ',', each "type/subtype" then ";name=value" parameters. A range
  // with q=0 (any spelling of zero) means "not acceptable".
  std::size_t pos = 0;
  while (pos <= accept.size()) {
    const auto end = std::min(accept.find(',', pos), accept.size());
    std::string_view range = accept.substr(pos, end - pos);
    pos = end + 1;
    auto semi = range.find(';');
    if (http::trim_ows(range.substr(0, semi)) != "application/openmetrics-text") {
      continue;
    }
    bool acceptable = true;
    while (semi != std::string_view::npos) {
      range.remove_prefix(semi + 1);
      semi = range.find(';');
      const std::string_view param = http::trim_ows(range.substr(0, semi));
      if (param.size() >= 2 && (param[0] == 'q' || param[0] == 'Q') && param[1] == '=') {
        const std::string_view q = param.substr(2);
        acceptable = q.find_first_of("123456789") != std::string_view::npos;
      }
    }
    if (acceptable) {
      return om::format::openmetrics;
    }
  }
  return om::format::prometheus;
}

std::string_view content_type(om::format f) {
  return f == om::format::openmetrics ? "application/openmetrics-text; version=1.0.0; charset=utf-8"
                                      : "text/plain; version=0.0.4; charset=utf-8";
}

} // namespace rsched::rschedd
