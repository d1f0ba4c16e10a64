#pragma once
// Durations and sizes as a command line gives them (rschedd --keep-raw, --max-size, ...;
// rsched-sql heatmap --step): strict, so that a value that is not exactly what was meant is
// refused in one line rather than read as something else.
//
//  - Nothing but the value: no space, tab, newline or other control byte before or after it, no
//    byte that is neither printable ASCII nor the 'µ' of "µs". Inside, the time grammar's single
//    spaces between a number and its unit or between parts stay allowed ("90 minutes", "1h 30m").
//    "--keep-raw=$' 7\t'" used to be trimmed to 7 (seconds).
//  - Every number has its unit: a bare number is refused (a bare duration would be seconds, a
//    bare size bytes: "--max-size 8" capped the history at 8 bytes).
#include "rsched/base/result.hpp"

#include <cstdint>
#include <string_view>

namespace rsched::units {

// True when `v` holds only what a value may: printable ASCII and 'µ' (U+00B5), with single
// spaces between non-spaces (none at either end, never two in a row).
[[nodiscard]] bool clean(std::string_view v);

// True when `v` is a number alone: digits with at most one '.' and at least one digit.
[[nodiscard]] bool bare_number(std::string_view v);

// A duration in ns in the time grammar (timefmt::parse_duration: "2d", "12h", "1d12h",
// "90 minutes", "1.5s", "50ms"), clean and with a unit. "0" is refused like any bare number:
// callers for which 0 means something (forever, off) test for "0" first. Errors are one line
// without the value's flag: "a duration needs a unit (...)", "... a space, tab or control
// character ...", or the grammar's own.
result<std::int64_t> parse_duration(std::string_view v);

// A size in bytes: a whole number and a unit, B (bytes), K, M, G or T, each also as KB/KiB,
// MB/MiB, ... in any case, all binary (1K = 1024 bytes, 8G = 8 GiB); "0" alone is 0 (callers
// read it as "no cap"). At most 2^60 bytes. A bare number other than 0 is refused:
//   a size needs a unit (8G? 8M?): B, K, M, G or T (1K = 1024 bytes)
result<std::uint64_t> parse_size(std::string_view v);

} // namespace rsched::units
