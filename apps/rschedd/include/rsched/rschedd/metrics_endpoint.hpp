#pragma once
// The /metrics endpoint's pure parts: the address --metrics-listen names and the content type a
// scraper asks for (http_server.hpp serves it).
#include "rsched/base/result.hpp"
#include "rsched/openmetrics/openmetrics.hpp"

#include <string>
#include <string_view>

namespace rsched::rschedd {

// --metrics-listen ADDR:PORT. A bare port binds the loopback address.
struct listen_address {
  std::string host; // numeric address or "localhost"
  int port = 0;     // 0: any free port (tests)
};
result<listen_address> parse_listen_address(std::string_view s);

// The content type a scraper asked for (its Accept header): OpenMetrics 1.0 when it lists
// application/openmetrics-text (unless with q=0), else the 0.0.4 text format.
openmetrics::format negotiate(std::string_view accept);
std::string_view content_type(openmetrics::format f);

} // namespace rsched::rschedd
