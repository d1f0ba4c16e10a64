#!/usr/bin/env bash
# clang-tidy with the repository's .clang-tidy over C++ sources of a configured and built tree
# (compile_commands.json, CMAKE_EXPORT_COMPILE_COMMANDS is on; the compiler's depfiles):
#   tools/tidy.sh [BUILD_DIR] [FILE...]      default: build, every .cpp under modules/ and apps/
#   tools/tidy.sh BUILD --changed REV        the .cpp files changed since REV, themselves or
#                                            through a header of the repository they include
#   tools/tidy.sh BUILD [--changed REV] --cache DIR
#                                            and not those checked clean before with the same
#                                            inputs (tools/tidy-select.py); the clean ones are
#                                            recorded in DIR
# Exits 1 on any finding (WarningsAsErrors). The whole tree (88 files) takes ~11 min on 2 cores
# (~15 s of CPU a file); CI (.ci/run) checks what changed since the last landed commit
# (.ci/tidy-base), and the whole tree where this machine's cache leaves little to check.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
if [ ! -f "$build/compile_commands.json" ]; then
  echo "tidy: $build/compile_commands.json missing: configure first (cmake -S . -B $build)" >&2
  exit 2
fi
files=()
select_args=()
cache=""
explicit=()
while [ $# -gt 0 ]; do
  case "$1" in
  --changed)
    select_args+=(--changed "${2:?tidy: --changed needs a revision}")
    shift 2
    ;;
  --cache)
    cache=${2:?tidy: --cache needs a directory}
    select_args+=(--cache "$cache")
    shift 2
    ;;
  *)
    explicit+=("$1")
    shift
    ;;
  esac
done
if [ ${#explicit[@]} -gt 0 ]; then
  files=("${explicit[@]}")
else
  while IFS= read -r f; do files+=("$f"); done < <(python3 tools/tidy-select.py "$build" "${select_args[@]}")
fi
if [ ${#files[@]} -eq 0 ]; then
  echo "tidy: no C++ sources to check (nothing changed, or all checked before)"
  exit 0
fi
echo "tidy: checking ${#files[@]} files"
# GCC's warning flags in compile_commands.json are unknown to clang: not a finding.
status=0
run-clang-tidy -p "$build" -quiet -j "$(nproc)" -extra-arg=-Wno-unknown-warning-option \
  "${files[@]}" >"$build/tidy.log" 2>&1 || status=$?
sed 's/\x1b\[[0-9;]*m//g' "$build/tidy.log" | grep -E 'warning:|error:' | sort -u || true
if [ "$status" -ne 0 ]; then
  echo "tidy: findings above (full log: $build/tidy.log)"
  exit 1
fi
if [ -n "$cache" ]; then
  python3 tools/tidy-select.py "$build" --record "$cache" "${files[@]}"
fi
echo "tidy: ${#files[@]} files clean"
