#!/usr/bin/env bash
# The latency slot function's cost per call in BPF (bench/bpf/slot_cost.bpf.c), division form against
# sched_abi.h's: loads the three XDP programs and runs each REPS times per input with
# `bpftool prog run ... repeat`, which reports the kernel's average run time. Root.
#   bench/slot_cost.sh [REPEAT]        default 5,000,000 runs per program and input
# Inputs: "short" waits 5-504 us (the linear part: the common case), "long" 0.6-10 ms.
set -euo pipefail
cd "$(dirname "$0")/.."
repeat=${1:-5000000}
work=$(mktemp -d)
pin=/sys/fs/bpf/rsched-slot-cost-$$
trap 'rm -rf "$work" "$pin"' EXIT
clang -g -O2 -target bpf -mcpu=v3 -I modules/abi/include -I "/usr/include/$(uname -m)-linux-gnu" \
  -c bench/bpf/slot_cost.bpf.c -o "$work/slot_cost.bpf.o"
bpftool prog loadall "$work/slot_cost.bpf.o" "$pin"
python3 - "$work" <<'PY'
import struct, sys
d = sys.argv[1]
open(d + "/short.bin", "wb").write(struct.pack("<QQ", 5000, 7919) + bytes(48))
open(d + "/long.bin", "wb").write(struct.pack("<QQ", 600000, 150000) + bytes(48))
PY
for input in short long; do
  declare -A ns=()
  for prog in slot_none slot_plain slot_abi; do
    ns[$prog]=$(bpftool prog run pinned "$pin/$prog" data_in "$work/$input.bin" repeat "$repeat" |
      sed -n 's/.*duration (average): \([0-9]*\)ns.*/\1/p')
  done
  awk -v i="$input" -v n="${ns[slot_none]}" -v p="${ns[slot_plain]}" -v a="${ns[slot_abi]}" 'BEGIN {
    printf "%-5s 64 slots a run: loop %d ns, division form %d ns, sched_abi.h %d ns; per slot %.2f vs %.2f ns\n",
      i, n, p, a, (p - n) / 64, (a - n) / 64 }'
done
