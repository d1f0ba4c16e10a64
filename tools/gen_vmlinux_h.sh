#!/usr/bin/env bash
# Regenerates the committed vmlinux.h from the running kernel's BTF. The build never does this:
# the committed header keeps builds independent of the build host's kernel (CO-RE relocates).
set -euo pipefail
cd "$(dirname "$0")/.."
arch=$(uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/')
bpftool btf dump file /sys/kernel/btf/vmlinux format c > "modules/bpf/vmlinux/$arch/vmlinux.h"
