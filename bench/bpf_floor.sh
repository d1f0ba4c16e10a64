#!/usr/bin/env bash
# The floor under any scheduler tracer on this machine (issue 49): what kernel.bpf_stats counts
# for a program run that does nothing, and for one clock read, one task-storage get, and both,
# on the switch storm, beside runqlat (bench/bpf_cost.py, interleaved).
# With --minimal: the least a per-thread wait measurement can do (runqlat's design on task storage,
# no histogram: floor.bpf.c, FLOOR_MINIMAL) attached with runqlat over the same events
# (bench/bpf_cost.py --paired): its BPF time per context switch against runqlat's.
# Usage (root): bench/bpf_floor.sh [--minimal] [REPS]   (needs clang, libbpf-dev, libbpf-tools, stress-ng)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
vmlinux="$top/modules/bpf/vmlinux/x86"
clang=$(command -v clang-15 || command -v clang)
minimal=
if [ "${1:-}" = --minimal ]; then
  minimal=1
  shift
fi
for v in empty primitives minimal; do
  case $v in empty) def=-DFLOOR_EMPTY ;; minimal) def=-DFLOOR_MINIMAL ;; *) def= ;; esac
  "$clang" -O2 -g -target bpf -D__TARGET_ARCH_x86 $def -I"$vmlinux" \
    -c "$top/bench/bpf/floor.bpf.c" -o "$work/$v.bpf.o"
  printf '#!/bin/sh\nexec "%s/floor_load" "%s/%s.bpf.o"\n' "$work" "$work" "$v" >"$work/$v"
  chmod +x "$work/$v"
done
cc -O2 -o "$work/floor_load" "$top/bench/bpf/floor_load.c" -lbpf
if [ -n "$minimal" ]; then
  printf '#!/bin/sh\nexec /usr/sbin/runqlat 1 1000\n' >"$work/runqlat"
  chmod +x "$work/runqlat"
  python3 "$top/bench/bpf_cost.py" --paired --reps "${1:-6}" --rschedd "$work/minimal" \
    --baseline "$work/runqlat" | grep -E "^rep |order cancelled"
  exit 0
fi
python3 "$top/bench/bpf_cost.py" --reps "${1:-4}" --baseline "$work/empty" \
  --baseline "$work/primitives" --only baseline | grep -E "^rep .*baseline|^  |ratio"
