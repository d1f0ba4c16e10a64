#!/usr/bin/env bash
# Checks dist/systemd: rschedd.service alone and with rschedd.service.d/metrics.conf, with
# `systemd-analyze verify` (works without systemd as PID 1). systemd-analyze exits 0 on an unknown
# key or a value it cannot parse (it logs "..., ignoring" and goes on), so any message about our
# files counts as a failure too; negative controls (broken drop-ins) prove that the check fails.
# `systemd-analyze security --offline` then shows that the drop-in relaxes exactly the network
# settings and nothing else.
#
# Usage: bash tests/dist/check_units.sh [SOURCE_DIR]   (CTest entry dist_units, label "tools")
# Needs systemd-analyze (Debian package systemd) and python3.
set -euo pipefail

src=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
unit_in=$src/dist/systemd/rschedd.service
dropin_dir=$src/dist/systemd/rschedd.service.d

fail() { echo "FAIL: $*" >&2; exit 1; }
on_err() { local rc=$? cmd=${BASH_COMMAND%%$'\n'*}; echo "FAIL: line $1: $cmd exited $rc" >&2; }
trap 'on_err $LINENO' ERR

command -v systemd-analyze >/dev/null ||
  fail "systemd-analyze not found: install the Debian package systemd (tools/install-deps.sh)"
command -v python3 >/dev/null || fail "python3 not found (tools/install-deps.sh installs it)"
[[ -f $unit_in ]] || fail "$unit_in not found (usage: $0 SOURCE_DIR)"
[[ -f $dropin_dir/metrics.conf ]] || fail "$dropin_dir/metrics.conf not found"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A name of our own, so that an installed rschedd.service.d/ (in /etc or /usr/local) cannot mix
# its drop-ins in; the unit path is ours first, then systemd's (for sysinit.target and the like).
name=rsched-unit-check.service
# @RSCHEDD_PATH@ is filled in by CMake (apps/rschedd/CMakeLists.txt); verify wants an executable.
exe=$(command -v true)

# setup DIR [DROPIN...]: DIR/$name from the source unit, DIR/$name.d/ with the given drop-ins.
setup() {
  local dir=$1
  shift
  rm -rf "$dir"
  mkdir -p "$dir/$name.d"
  sed -e "s|@RSCHEDD_PATH@|$exe|g" -e "s|@RSCHED_SYSUSERS_CONF@|$src/dist/sysusers.d/rsched.conf|g" \
    "$unit_in" >"$dir/$name"
  if grep -n '@[A-Za-z_]*@' "$dir/$name"; then
    fail "rschedd.service has a CMake @VARIABLE@ this check does not fill in"
  fi
  local f
  for f in "$@"; do cp "$f" "$dir/$name.d/"; done
}

# verify DIR: 0 if systemd-analyze accepts DIR/$name without a word about it or its drop-ins.
verify() {
  local dir=$1 out rc=0
  out=$(SYSTEMD_UNIT_PATH="$dir:" systemd-analyze verify --man=no "$dir/$name" 2>&1) || rc=$?
  [[ -n $out ]] && printf '%s\n' "$out" | sed 's/^/    /'
  ((rc == 0)) || return 1
  # Messages about other units (the host's own) are not ours to judge.
  ! grep -qF -e "$dir" -e "$name" <<<"$out"
}

# security DIR: "json_field<TAB>description" of every item of the offline exposure analysis.
security() {
  local dir=$1
  SYSTEMD_UNIT_PATH="$dir:" systemd-analyze security --offline=yes --man=no --json=short \
    "$dir/$name" 2>/dev/null |
    python3 -c 'import json, sys
for item in json.load(sys.stdin):
    print(item["json_field"] + "\t" + item["description"])' | sort
}

# changed BASE_DIR DIR: json_field of every item whose verdict differs between the two.
changed() {
  # diff exits 1 when the lists differ, which is the point
  { diff <(security "$1") <(security "$2") || true; } | sed -n 's/^> \([^\t]*\)\t.*/\1/p' | sort -u
}

echo "== rschedd.service alone"
setup "$tmp/base"
verify "$tmp/base" || fail "systemd-analyze verify: rschedd.service"

echo "== rschedd.service + metrics.conf"
setup "$tmp/metrics" "$dropin_dir"/*.conf
verify "$tmp/metrics" || fail "systemd-analyze verify: rschedd.service + metrics.conf"

# Negative controls: each broken drop-in must make the check fail.
n=0
for bad in 'MetricsListen=127.0.0.1:9466' 'PrivateNetwork=perhaps' \
  'RestrictAddressFamilies=AF_BOGUS' 'IPAddressAllow=prometheus.example' \
  'Environment=RSCHEDD_METRICS_ARGS=--metrics-listen 127.0.0.1:9466'; do
  n=$((n + 1))
  echo "== negative control $n: $bad (must be reported)"
  printf '[Service]\n%s\n' "$bad" >"$tmp/zz-broken.conf"
  setup "$tmp/bad" "$dropin_dir"/*.conf "$tmp/zz-broken.conf"
  if verify "$tmp/bad"; then
    fail "systemd-analyze verify accepted a broken drop-in ($bad): this check cannot fail"
  fi
done

echo "== what metrics.conf relaxes (systemd-analyze security --offline)"
[[ -n $(security "$tmp/base") ]] || fail "systemd-analyze security --offline printed nothing"
got=$(changed "$tmp/base" "$tmp/metrics" | tr '\n' ' ')
want="IPAddressDeny PrivateNetwork RestrictAddressFamilies_AF_INET_INET6 "
echo "    changed: $got"
[[ $got == "$want" ]] || fail "metrics.conf should change exactly: $want; it changes: $got"
ip=$(security "$tmp/metrics" | grep '^IPAddressDeny')
[[ $ip == *"only localhost"* ]] || fail "metrics.conf should allow only localhost: $ip"
# Negative control: a drop-in that also gave up another protection must be noticed.
printf '[Service]\nProtectHome=no\n' >"$tmp/zz-broken.conf"
setup "$tmp/bad" "$dropin_dir"/*.conf "$tmp/zz-broken.conf"
[[ $(changed "$tmp/base" "$tmp/bad" | tr '\n' ' ') != "$want" ]] ||
  fail "the exposure comparison did not notice ProtectHome=no: this check cannot fail"

echo "== the command line systemd builds"
# systemd splits an unquoted $VAR that is a word of its own at whitespace (zero or more arguments;
# systemd.service(5), "Command lines"). Emulated here to show the intended argv: the main unit
# must end ExecStart= with that word and set the variable empty; the drop-in must set it (quoted:
# Environment= splits assignments at whitespace, see negative control 5).
cmdline_ok=yes
python3 - "$tmp/base/$name" "$tmp/metrics/$name.d/metrics.conf" <<'EOF' || cmdline_ok=no
import shlex, sys

def assignments(path, key):
    out = []
    for line in open(path):
        line = line.strip()
        if line.startswith(key + "="):
            out.append(line[len(key) + 1:])
    return out

unit, dropin = sys.argv[1], sys.argv[2]
(execstart,) = assignments(unit, "ExecStart")
argv = shlex.split(execstart)
if argv[-1] != "$RSCHEDD_METRICS_ARGS" or argv.count("$RSCHEDD_METRICS_ARGS") != 1:
    sys.exit(f"FAIL: ExecStart= must end with the unquoted word $RSCHEDD_METRICS_ARGS: {execstart}")
if assignments(dropin, "ExecStart"):
    sys.exit("FAIL: metrics.conf must not set ExecStart=")

def env(path):
    values = {}
    for line in assignments(path, "Environment"):
        for word in shlex.split(line):
            name, _, value = word.partition("=")
            values[name] = value
    return values

base_env, dropin_env = env(unit), env(dropin)
if base_env.get("RSCHEDD_METRICS_ARGS") != "":
    sys.exit("FAIL: rschedd.service must set Environment=RSCHEDD_METRICS_ARGS= (empty)")
for label, values in (("rschedd.service", base_env),
                      ("+ metrics.conf", {**base_env, **dropin_env})):
    full = argv[:-1] + shlex.split(values["RSCHEDD_METRICS_ARGS"])
    print(f"    {label}: ... {' '.join(full[-4:])}")
    if label != "rschedd.service" and full[-2:] != ["--metrics-listen", "127.0.0.1:9466"]:
        sys.exit("FAIL: with metrics.conf the command line should end "
                 "--metrics-listen 127.0.0.1:9466")
    if label == "rschedd.service" and "--metrics-listen" in full:
        sys.exit("FAIL: rschedd.service alone should not listen")
EOF
[[ $cmdline_ok == yes ]] || fail "the command line check failed (above)"

echo "== sysusers.d/rsched.conf (the readers' group the unit creates before rschedd starts)"
mkdir -p "$tmp/root/etc"
systemd-sysusers --root="$tmp/root" "$src/dist/sysusers.d/rsched.conf" >/dev/null 2>&1 ||
  fail "systemd-sysusers rejects dist/sysusers.d/rsched.conf"
grep -q '^rsched:x:[0-9]*:$' "$tmp/root/etc/group" || fail "sysusers.d/rsched.conf made no rsched group"
grep -q "^ExecStartPre=+/usr/bin/systemd-sysusers $src/dist/sysusers.d/rsched.conf\$" "$tmp/base/$name" ||
  fail "the unit does not create the readers' group before it starts"
echo "    group rsched created in a scratch root"

echo "OK: rschedd.service, rschedd.service.d/metrics.conf and sysusers.d/rsched.conf"
