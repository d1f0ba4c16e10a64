#!/bin/bash
# Wall time of rsched-sql commands, several binaries interleaved run by run (this VM's speed
# drifts by up to 3x within minutes: only runs taken side by side compare). Prints min, median
# and max per label, and the host's speed before and after as the time of a fixed loop of
# arithmetic (python3), so that a reader can tell a slow phase from a slow binary.
#
#   bench/query_ab.sh RUNS LABEL 'COMMAND' [LABEL 'COMMAND' ...]
#   e.g. bench/query_ab.sh 8 old "$OLD /var/tmp/hw.db --csv -c 'SELECT count(*) FROM explain($((E-H)), $E)'" \
#                             new "$NEW /var/tmp/hw.db --csv -c 'SELECT count(*) FROM explain($((E-H)), $E)'"
set -euo pipefail
if [ $# -lt 3 ] || [ $(( ($# - 1) % 2 )) -ne 0 ]; then
  echo "usage: $0 RUNS LABEL COMMAND [LABEL COMMAND ...]" >&2
  exit 2
fi
runs=$1
shift
labels=()
commands=()
while [ $# -gt 0 ]; do
  labels+=("$1")
  commands+=("$2")
  shift 2
done
timing=$(mktemp)
trap 'rm -f "$timing"' EXIT
host_speed() {
  python3 -c 'import time
t = time.perf_counter()
x = 0
for i in range(3_000_000): x += i * i
print(f"{time.perf_counter() - t:.2f} s")'
}
echo "host speed before (a fixed loop; lower is faster): $(host_speed)"
declare -A times
for _ in $(seq "$runs"); do
  for j in "${!labels[@]}"; do
    /usr/bin/time -o "$timing" -f "%e" bash -c "${commands[$j]}" >/dev/null 2>&1 ||
      { echo "${labels[$j]}: the command failed" >&2; exit 1; }
    times[$j]+="$(tail -1 "$timing") "
  done
done
for j in "${!labels[@]}"; do
  # shellcheck disable=SC2086
  printf '%s: %s\n' "${labels[$j]}" "$(printf '%s\n' ${times[$j]} | sort -n |
    awk '{a[NR] = $1} END {printf "min %.2f s  median %.2f s  max %.2f s  (%d runs)", a[1], a[int((NR + 1) / 2)], a[NR], NR}')"
done
echo "host speed after: $(host_speed)"
