#!/usr/bin/env bash
# Checks dist/grafana/rsched.json, the Grafana dashboard of rschedd's Prometheus metrics:
#   - it is JSON, a dashboard of schemaVersion >= 36 whose panels all use the ${DS_PROMETHEUS}
#     data source variable, with unique panel ids, and only template variables it defines;
#   - every PromQL expression (panel targets and label_values() of the variables) parses:
#     Grafana's variables are replaced ($__rate_interval, $__interval, $__range -> 1m; $var ->
#     .*) and the expressions handed to `promtool check rules` as recording rules;
#   - every metric name in them is one rschedd serves (the list below), every family of that
#     list is on the dashboard, every rsched_ selector of a panel has instance=~"$instance", and
#     the heatmaps ask for format "heatmap" by le.
# Negative controls (a broken expression, a misspelt name) prove that the checks can fail.
#
# Usage: bash tests/dist/check_grafana.sh [SOURCE_DIR]   (CTest entry dist_grafana, label "tools")
# Needs python3 and promtool (Debian packages python3, prometheus: tools/install-deps.sh).
set -euo pipefail

src=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
dashboard=$src/dist/grafana/rsched.json

fail() { echo "FAIL: $*" >&2; exit 1; }
on_err() { local rc=$? cmd=${BASH_COMMAND%%$'\n'*}; echo "FAIL: line $1: $cmd exited $rc" >&2; }
trap 'on_err $LINENO' ERR

command -v python3 >/dev/null ||
  fail "python3 not found: install the Debian package python3 (tools/install-deps.sh)"
command -v promtool >/dev/null ||
  fail "promtool not found: install the Debian package prometheus (tools/install-deps.sh)"
[[ -f $dashboard ]] || fail "$dashboard not found (usage: $0 SOURCE_DIR)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The metric families rschedd serves at /metrics (--metrics-listen) and writes with
# --metrics-textfile. This list mirrors the families table of docs/FLEET.md: keep them in step.
# Type, then name (histograms without the _bucket/_count/_sum suffixes).
cat >"$tmp/families" <<'EOF'
histogram rsched_cpu_sched_delay_seconds
histogram rsched_cgroup_sched_delay_seconds
histogram rsched_comm_sched_delay_seconds
histogram rsched_cgroup_waking_delay_seconds
histogram rsched_cgroup_timeslice_seconds
histogram rsched_cgroup_runqueue_depth
histogram rsched_cpu_idle_seconds
histogram rsched_cgroup_sleep_seconds
counter rsched_cgroup_migrations_total
counter rsched_cgroup_cross_ccx_migrations_total
counter rsched_cgroup_cross_numa_migrations_total
counter rsched_cgroup_cpu_pressure_some_seconds_total
counter rsched_cgroup_cpu_pressure_full_seconds_total
counter rsched_cgroup_cpu_throttled_seconds_total
counter rsched_cgroup_cpu_throttled_periods_total
counter rsched_culprit_wait_seconds_total
counter rsched_waker_sleep_seconds_total
counter rsched_intervals_total
counter rsched_stalled_intervals_total
counter rsched_write_failures_total
counter rsched_recorded_seconds_total
counter rsched_collect_seconds_total
counter rsched_write_seconds_total
counter rsched_maintain_seconds_total
counter rsched_discarded_samples_total
counter rsched_bpf_runs_total
counter rsched_drops_total
counter rsched_bpf_run_seconds_total
counter rsched_process_cpu_seconds_total
gauge rsched_resident_memory_bytes
gauge rsched_last_interval_duration_seconds
gauge rsched_last_interval_end_timestamp_seconds
EOF

echo "== $dashboard"
# The rules file is written even when there are problems, so that promtool checks it too.
dashboard_ok=yes
python3 - "$dashboard" "$tmp/families" "$tmp/rules.yml" <<'EOF' || dashboard_ok=no
import json, re, sys

dashboard_path, families_path, rules_path = sys.argv[1:4]
errors = []

def error(msg):
    errors.append(msg)

# --- metric names -------------------------------------------------------------------------
families = {}
for line in open(families_path):
    kind, name = line.split()
    families[name] = kind
allowed = {}  # series name -> family
for name, kind in families.items():
    suffixes = ("_bucket", "_count", "_sum") if kind == "histogram" else ("",)
    for suffix in suffixes:
        allowed[name + suffix] = name

KEYWORDS = {"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan", "by", "without",
            "on", "ignoring", "group_left", "group_right"}

def metric_names(expr):
    """Metric names of a PromQL expression: what is left once strings, label matchers, ranges,
    grouping lists, function calls, keywords and numbers are taken out."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    names = []
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", s):
        if m.start() > 0 and (s[m.start() - 1].isdigit() or s[m.start() - 1] == "."):
            continue  # exponent or unit of a number: 1e-9, 5m
        if s[m.end():].lstrip().startswith("("):
            continue  # function or aggregation
        if m.group() not in KEYWORDS:
            names.append(m.group())
    return names

def unknown_names(expr):
    return [n for n in metric_names(expr) if n not in allowed]

# Self-test: a misspelt name must be noticed, a right one must not.
assert unknown_names('sum by (le) (rate(rsched_intervals_totl{instance=~".*"}[1m]))') == [
    "rsched_intervals_totl"]
assert unknown_names('histogram_quantile(0.99, sum by (cpu, le) '
                     '(rate(rsched_cpu_sched_delay_seconds_bucket{cpu=~".*"}[1m]))) > 1e-3') == []
assert unknown_names('time() - up') == ["up"]

# --- Grafana variables --------------------------------------------------------------------
BUILTIN_RANGES = {"__rate_interval", "__interval", "__range"}
VAR_RE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")

def substitute(expr):
    def repl(m):
        name = m.group(1) or m.group(2)
        return "1m" if name in BUILTIN_RANGES else ".*"
    return VAR_RE.sub(repl, expr)

def variables(expr):
    return {m.group(1) or m.group(2) for m in VAR_RE.finditer(expr)}

# --- the dashboard ------------------------------------------------------------------------
try:
    dash = json.load(open(dashboard_path))
except ValueError as e:
    sys.exit(f"FAIL: {dashboard_path} is not JSON: {e}")

if not isinstance(dash.get("schemaVersion"), int) or dash["schemaVersion"] < 36:
    error(f"schemaVersion {dash.get('schemaVersion')!r}: want 36 or more (Grafana 9+)")
for key in ("title", "uid", "panels", "templating"):
    if key not in dash:
        error(f"dashboard has no {key!r}")

template = {v["name"]: v for v in dash.get("templating", {}).get("list", [])}
ds = template.get("DS_PROMETHEUS")
if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
    error("template variable DS_PROMETHEUS must be a data source variable of type prometheus")
for name in ("instance", "cgroup", "cpu"):
    if name not in template:
        error(f"template variable {name!r} missing")
known_vars = set(template) | BUILTIN_RANGES

WANT_DS = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
exprs = []  # (where, rule name, raw expr, is a panel's)

for name, var in template.items():
    if var.get("type") != "query":
        continue
    if var.get("datasource") != WANT_DS:
        error(f"variable {name}: datasource {var.get('datasource')} is not {WANT_DS}")
    query = var.get("query")
    query = query.get("query") if isinstance(query, dict) else query
    m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", query or "")
    if not m:
        error(f"variable {name}: query {query!r} is not label_values(selector, label)")
        continue
    exprs.append((f"variable {name}", f"variable_{name}", m.group(1), False))

def walk(panels):
    for p in panels:
        yield p
        yield from walk(p.get("panels", []))

ids = set()
panel_count = 0
for p in walk(dash.get("panels", [])):
    where = f"panel {p.get('id')} {p.get('title')!r}"
    if p.get("id") in ids:
        error(f"{where}: duplicate id")
    ids.add(p.get("id"))
    g = p.get("gridPos", {})
    if not (isinstance(g.get("w"), int) and isinstance(g.get("x"), int) and g["x"] + g["w"] <= 24):
        error(f"{where}: gridPos {g} does not fit 24 columns")
    if p.get("type") == "row":
        continue
    panel_count += 1
    if p.get("datasource") != WANT_DS:
        error(f"{where}: datasource {p.get('datasource')} is not {WANT_DS}")
    targets = p.get("targets") or []
    if not targets:
        error(f"{where}: no targets")
    refs = set()
    for t in targets:
        tw = f"{where} target {t.get('refId')}"
        if t.get("refId") in refs:
            error(f"{tw}: duplicate refId")
        refs.add(t.get("refId"))
        if t.get("datasource", WANT_DS) != WANT_DS:
            error(f"{tw}: datasource {t.get('datasource')} is not {WANT_DS}")
        if not t.get("expr"):
            error(f"{tw}: no expr")
            continue
        if p.get("type") == "heatmap":
            if t.get("format") != "heatmap" or not re.search(r"\bby \(le\)", t["expr"]):
                error(f"{tw}: a heatmap wants format 'heatmap' and sum by (le)")
        exprs.append((tw, f"panel_{p.get('id')}_{t.get('refId')}", t["expr"], True))

if panel_count == 0:
    error("no panels")

used = set()
rules = []
for where, rule, expr, is_panel in exprs:
    for v in sorted(variables(expr) - known_vars):
        error(f"{where}: ${v} is not a template variable of the dashboard")
    promql = substitute(expr)
    for n in unknown_names(promql):
        error(f"{where}: metric {n!r} is not one rschedd serves: {expr}")
    for n in metric_names(promql):
        if n in allowed:
            used.add(allowed[n])
    if is_panel:
        for m in re.finditer(r"\b(rsched_\w+)\s*(\{[^}]*\})?", expr):
            if 'instance=~"$instance"' not in (m.group(2) or ""):
                error(f"{where}: {m.group(1)} without instance=~\"$instance\": {expr}")
    rules.append({"record": "rsched_dashboard:" + re.sub(r"\W", "_", rule), "expr": promql})

for name in sorted(set(families) - used):
    error(f"family {name} is on no panel")

# JSON is YAML: promtool reads it as a rules file.
with open(rules_path, "w") as f:
    json.dump({"groups": [{"name": "rsched-dashboard", "rules": rules}]}, f, indent=1)

print(f"    {panel_count} panels, {len(exprs)} expressions, "
      f"{len(used)} of {len(families)} families")
if errors:
    for e in errors:
        print(f"FAIL: {e}", file=sys.stderr)
    sys.exit(1)
EOF

echo "== promtool check rules (every expression, variables substituted)"
promtool_ok=yes
if [[ -f $tmp/rules.yml ]]; then
  # A rule is named after what it checks: rsched_dashboard:panel_<id>_<refId>, :variable_<name>.
  promtool check rules "$tmp/rules.yml" 2>&1 | sed 's/^/    /' || promtool_ok=no
else
  echo "    not run: no expressions to check"
  promtool_ok=no
fi
[[ $dashboard_ok == yes ]] || fail "the dashboard check found problems (above)"
[[ $promtool_ok == yes ]] || fail "promtool rejected an expression (above)"

# Negative control: promtool must reject a broken expression.
broken='sum by (le) (rate(rsched_intervals_total[1m])'
printf '{"groups": [{"name": "broken", "rules": [{"record": "x:y", "expr": "%s"}]}]}\n' "$broken" \
  >"$tmp/broken.yml"
if promtool check rules "$tmp/broken.yml" >/dev/null 2>&1; then
  fail "promtool accepted a broken expression: this check cannot fail"
fi

echo "OK: $dashboard"
