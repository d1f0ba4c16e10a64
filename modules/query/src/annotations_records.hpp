#pragma once
// Incident timelines as records before they become annotations (annotations.cpp): one record per
// CSV data row or JSON object, field name -> text (nullopt for JSON null). Times stay text here;
// import_incidents parses them. Private to the store module.
#include "rsched/base/result.hpp"

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rsched::query::detail {

using incident_record = std::map<std::string, std::optional<std::string>>;

// CSV (RFC 4180, optional UTF-8 byte order mark) with a header row; header names are trimmed of
// spaces and lower-cased. Errors name the line (syntax) or the data row (field count).
result<std::vector<incident_record>> csv_records(std::string_view content);

// JSON: an array of flat objects whose values are strings, numbers (kept as their text), null or
// arrays of strings (joined with ","). Input must be UTF-8 (RFC 8259); errors name the byte
// (syntax, invalid UTF-8) or the object and field (a value of the wrong kind).
result<std::vector<incident_record>> json_records(std::string_view content);

// True when `content` as a whole is one JSON value (RFC 8259, white space around it allowed).
bool is_json_value(std::string_view content);

} // namespace rsched::query::detail
