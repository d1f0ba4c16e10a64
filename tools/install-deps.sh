#!/usr/bin/env bash
# Installs everything rsched needs to build and test, from Debian 12's archive only.
# python3 and chromium (headless) are for the tests of rsched-sql's pictures (tests/pictures);
# fonts-dejavu-core is the font the SVGs and the report ask for first; prometheus brings promtool,
# which backfills rsched-sql's OpenMetrics export and scrapes rschedd's /metrics in tests (label
# "tools" and "root"). systemd brings systemd-analyze, which checks the unit and its metrics
# drop-in (tests/dist). rschedd's /metrics endpoint needs no HTTP library (its own epoll loop).
# libclang-rt-14-dev: clang's sanitizer and libFuzzer runtimes for the fuzz targets (tools/fuzz.sh);
# clang only recommends it. llvm: llvm-symbolizer, which the sanitizers' reports look up on PATH.
# clang-format: CI's format check (tools/format-check.sh); clang-tidy: CI's tools/tidy.sh.
# libhowardhinnant-date-dev: date/tz (libdate-tz) for named time zones in rsched::base's timefmt.
# protobuf-compiler: protoc, which the trace tests run to decode the flight recorder's Perfetto traces.
# ccache: CI (.ci/run) keeps every compile for the next run on the same machine.
# faketime: steps the wall clock of the real rschedd in the clock-step tests (tests/rschedd).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends \
  cmake make g++ pkg-config \
  clang clang-15 clang-format clang-tidy llvm libclang-rt-14-dev libbpf-dev bpftool \
  libsqlitecpp-dev libsqlite3-dev librange-v3-dev libfmt-dev catch2 libreadline-dev libre2-dev \
  nlohmann-json3-dev libhowardhinnant-date-dev protobuf-compiler \
  stress-ng systemd ccache faketime \
  python3 chromium fonts-dejavu-core prometheus
