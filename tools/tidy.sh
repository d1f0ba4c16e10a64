#!/usr/bin/env bash
# clang-tidy with the repository's .clang-tidy over C++ sources of a configured build
# (compile_commands.json; CMAKE_EXPORT_COMPILE_COMMANDS is on):
#   tools/tidy.sh [BUILD_DIR] [FILE...]      default: build, every .cpp under modules/ and apps/
#   tools/tidy.sh build --changed REV        the .cpp files changed since REV (CI: the last commit)
# Exits 1 on any finding (WarningsAsErrors). The whole tree (81 files) takes 5 min on 2 cores;
# CI (.ci/run) runs it after the build.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
if [ ! -f "$build/compile_commands.json" ]; then
  echo "tidy: $build/compile_commands.json missing: configure first (cmake -S . -B $build)" >&2
  exit 2
fi
files=()
if [ "${1:-}" = "--changed" ]; then
  rev=${2:?tidy: --changed needs a revision}
  while IFS= read -r f; do
    [ -f "$f" ] && files+=("$f")
  done < <(git diff --name-only "$rev" -- 'modules/*.cpp' 'apps/*.cpp')
elif [ $# -gt 0 ]; then
  files=("$@")
else
  while IFS= read -r f; do files+=("$f"); done < <(git ls-files 'modules/*.cpp' 'apps/*.cpp')
fi
if [ ${#files[@]} -eq 0 ]; then
  echo "tidy: no C++ sources to check"
  exit 0
fi
# GCC's warning flags in compile_commands.json are unknown to clang: not a finding.
run-clang-tidy -p "$build" -quiet -j "$(nproc)" -extra-arg=-Wno-unknown-warning-option \
  "${files[@]}" > "$build/tidy.log" 2>&1 || status=$?
sed 's/\x1b\[[0-9;]*m//g' "$build/tidy.log" | grep -E 'warning:|error:' | sort -u || true
if [ "${status:-0}" -ne 0 ]; then
  echo "tidy: findings above (full log: $build/tidy.log)"
  exit 1
fi
echo "tidy: ${#files[@]} files clean"
