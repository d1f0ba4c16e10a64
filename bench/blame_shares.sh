#!/usr/bin/env bash
# What blame names, per binary: rschedd (service groups + blame) records SECONDS s of a workload
# into a fresh database, once per binary given; prints the share of all recorded waiting time
# that is <unknown> (the record did not reach), <other> (named residual), <idle>, and estimated
# (approx_ns: a share of the epoch a wait began in), plus the total delay. Root.
#
# Usage: bench/blame_shares.sh [--cold] SECONDS "WORKLOAD" [RSCHEDD...]
#   e.g. bench/blame_shares.sh 10 "stress-ng --sleep 2" build/apps/rschedd/rschedd /tmp/old/rschedd
# The workload starts 2 s before the recording; with --cold, 1.5 s after it (its start-up, the
# threads it creates and load balancing's first moves, is recorded).
set -euo pipefail
cd "$(dirname "$0")/.."
cold=0
if [ "${1:-}" = "--cold" ]; then
  cold=1
  shift
fi
secs=${1:?seconds}
load=${2:?workload}
shift 2
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=(build/apps/rschedd/rschedd)
sql=build/apps/rsched-sql/rsched-sql
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-40s %10s %9s %9s %9s %10s\n' binary delay_s unknown other idle estimated
for b in "${bins[@]}"; do
  db="$tmp/shares.db"
  rm -f "$db"*
  if [ "$cold" = 1 ]; then
    "$b" -r "$secs" -g latency,migration,blame --db "$db" >/dev/null 2>&1 &
    r=$!
    sleep 1.5
    timeout $((secs + 6)) bash -c "$load" >/dev/null 2>&1 &
    w=$!
    wait "$r" || true
  else
    timeout $((secs + 6)) bash -c "$load" >/dev/null 2>&1 &
    w=$!
    sleep 2
    "$b" -r "$secs" -g latency,migration,blame --db "$db" >/dev/null 2>&1
  fi
  kill "$w" 2>/dev/null || true
  wait "$w" 2>/dev/null || true
  # approx_ns exists from schema 11 on (an older binary estimated nothing)
  approx=0
  if "$sql" "$db" -c "SELECT approx_ns FROM delay_blame LIMIT 0" >/dev/null 2>&1; then
    approx="coalesce(sum(approx_ns), 0)"
  fi
  "$sql" "$db" --csv -c "SELECT sum(wait_ns) / 1e9,
      100.0 * coalesce(sum(CASE WHEN by_comm = '<unknown>' THEN wait_ns END), 0) / sum(wait_ns),
      100.0 * coalesce(sum(CASE WHEN by_comm = '<other>' THEN wait_ns END), 0) / sum(wait_ns),
      100.0 * coalesce(sum(CASE WHEN by_comm = '<idle>' THEN wait_ns END), 0) / sum(wait_ns),
      100.0 * $approx / sum(wait_ns)
    FROM delay_blame" | tail -n 1 |
    awk -F, -v b="$b" '{ printf "%-40s %10.2f %8.1f%% %8.1f%% %8.1f%% %9.1f%%\n", b, $1, $2, $3, $4, $5 }'
done
