#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, RSCHED_FUZZ=ON, clang with ASan + UBSan) in their own
# build directory and runs each for SECONDS (default 20) over a copy of its seed corpus
# (fuzz/corpus/<name>). One line per target: runs, execs/s, coverage, result. Exits 1 when any
# target crashed, leaked, hung or tripped a sanitizer or one of its checks; the input is saved
# and the command that replays it is printed. See tests/README.md, "Fuzzing".
#
#   tools/fuzz.sh [--grow] [SECONDS] [TARGET...]
#     --grow   merge the inputs that found new coverage into fuzz/corpus/<name> (the committed
#              seeds; review before committing). Without it the seeds are never written.
#     TARGET   only these (incident_csv, incident_json, timefmt, sql_lint, hist_blob, ...)
#   RSCHED_FUZZ_BUILD   the build directory (default build-fuzz)
#   RSCHED_FUZZ_JOBS    targets run at once (default 1; each is one process)
#   RSCHED_FUZZ_SEED    libFuzzer's -seed (default 0: a new random seed each run). CI fixes it,
#                       so that a run explores the same inputs first every time: a crash found
#                       there is found again by the same commit, never by chance on a later one.
set -euo pipefail
cd "$(dirname "$0")/.."

grow=0
secs=20
only=()
for a in "$@"; do
  case "$a" in
  --grow) grow=1 ;;
  -h | --help)
    sed -n '2,13p' "$0"
    exit 0
    ;;
  [0-9]*) secs="$a" ;;
  *) only+=("$a") ;;
  esac
done
if ! [[ "$secs" =~ ^[0-9]+$ ]] || [ "$secs" -lt 1 ]; then
  echo "fuzz.sh: SECONDS must be a whole number of seconds, at least 1 (got '$secs')" >&2
  exit 2
fi

build="${RSCHED_FUZZ_BUILD:-build-fuzz}"
cxx="${RSCHED_FUZZ_CXX:-clang++}"
cc="${RSCHED_FUZZ_CC:-clang}"
probe="$(mktemp -d)"
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char *, unsigned long) { return 0; }' \
  >"$probe/p.cpp"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe/p.cpp" -o "$probe/p" 2>"$probe/err"; then
  echo "fuzz.sh: $cxx cannot build a libFuzzer target (install clang and libclang-rt-14-dev):" >&2
  head -3 "$probe/err" >&2
  exit 2
fi

if [ ! -f "$build/CMakeCache.txt" ]; then
  launcher=()
  if command -v ccache >/dev/null; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  fi
  CC="$cc" CXX="$cxx" cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRSCHED_FUZZ=ON \
    -DBUILD_TESTING=OFF "${launcher[@]}" >"$probe/configure.log" ||
    {
      cat "$probe/configure.log" >&2
      exit 2
    }
fi
# Only the fuzz targets and what they link (not the whole project).
cmake --build "$build" -j"$(nproc)" --target rsched_fuzzers >"$probe/build.log" 2>&1 ||
  {
    tail -40 "$probe/build.log" >&2
    exit 2
  }

list="$build/fuzz/targets.tsv"
run_root="$(cd "$build" && pwd)/fuzz/run"
jobs="${RSCHED_FUZZ_JOBS:-1}"

# Runs one target; its line goes to $work/result, its report (on failure) to $work/report.
run_target() {
  local name=$1 bin=$2 seeds=$3 max_len=$4 dict=$5
  local work="$run_root/$name"
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/artifacts"
  if [ -d "$seeds" ]; then
    cp -r "$seeds/." "$work/corpus/"
  fi
  local args=(-max_total_time="$secs" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048
    -seed="${RSCHED_FUZZ_SEED:-0}" -print_final_stats=1 -artifact_prefix="$work/artifacts/")
  if [ -n "$dict" ]; then
    args+=(-dict="$dict")
  fi
  local rc=0
  "$bin" "${args[@]}" "$work/corpus" >"$work/log" 2>&1 || rc=$?
  # (A crash in the seeds comes before any coverage line: no match is not an error here.)
  local runs eps cov ft artifact result kind
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)"
  eps="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log" | tail -1)"
  cov="$(grep -o 'cov: [0-9]*' "$work/log" | tail -1 | cut -d' ' -f2 || true)"
  ft="$(grep -o 'ft: [0-9]*' "$work/log" | tail -1 | cut -d' ' -f2 || true)"
  artifact="$(find "$work/artifacts" -type f | head -1)"
  if [ "$rc" -eq 0 ] && [ -z "$artifact" ]; then
    result=ok
  else
    kind="$(grep -o -m1 -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer): [a-z-]+|runtime error|fuzz check failed' "$work/log" || true)"
    result="FAILED (exit $rc${kind:+, $kind})"
  fi
  printf '%-14s runs %-9s exec/s %-7s cov %-5s ft %-6s %s\n' "$name" "${runs:-?}" "${eps:-?}" \
    "${cov:-?}" "${ft:-?}" "$result" >"$work/result"
  if [ "$result" != ok ]; then
    {
      echo "---- $name: the report ($work/log) ----"
      if grep -q -E 'ERROR: |runtime error|fuzz check failed' "$work/log"; then
        grep -E -A40 -m1 'ERROR: |runtime error|fuzz check failed' "$work/log" | head -60
      else
        tail -40 "$work/log"
      fi
      echo "---- reproduce: $bin ${artifact:-<no input saved>}"
      if [ -n "$artifact" ]; then
        echo "---- the input (base64): $(base64 -w0 "$artifact")"
      fi
    } >"$work/report"
  fi
}

# The selected targets, up to $jobs at a time (each is one process: RSCHED_FUZZ_JOBS=2 on two
# cores halves the wall time); their lines in the list's order.
names=()
while IFS=$'\t' read -r name bin seeds max_len dict; do
  if [ "${#only[@]}" -gt 0 ]; then
    wanted=0
    for o in "${only[@]}"; do
      [ "$o" = "$name" ] && wanted=1
    done
    [ "$wanted" -eq 1 ] || continue
  fi
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
    wait -n || true
  done
  run_target "$name" "$bin" "$seeds" "$max_len" "$dict" &
  names+=("$name")
done <"$list"
wait
ran=${#names[@]}
failed=0
for name in "${names[@]}"; do
  work="$run_root/$name"
  cat "$work/result"
  if [ -f "$work/report" ]; then
    failed=$((failed + 1))
    cat "$work/report" >&2
  elif [ "$grow" -eq 1 ]; then
    seeds="$(awk -F'\t' -v n="$name" '$1 == n { print $3 }' "$list")"
    max_len="$(awk -F'\t' -v n="$name" '$1 == n { print $4 }' "$list")"
    bin="$(awk -F'\t' -v n="$name" '$1 == n { print $2 }' "$list")"
    mkdir -p "$seeds"
    before="$(find "$seeds" -type f | wc -l)"
    "$bin" -merge=1 -max_len="$max_len" "$seeds" "$work/corpus" >"$work/merge.log" 2>&1
    echo "               --grow: $(($(find "$seeds" -type f | wc -l) - before)) new seeds in $seeds"
  fi
done

if [ "$ran" -eq 0 ]; then
  echo "fuzz.sh: no such target: ${only[*]} (see $list)" >&2
  exit 2
fi
if [ "$failed" -ne 0 ]; then
  echo "fuzz.sh: $failed of $ran targets failed" >&2
  exit 1
fi
echo "fuzz.sh: $ran targets, ${secs}s each, no crash, leak, hang or sanitizer report"
