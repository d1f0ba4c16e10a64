#!/usr/bin/env python3
# Generates dist/grafana/rsched.json (the dashboard of rschedd's /metrics families):
#   python3 dist/grafana/generate.py > dist/grafana/rsched.json
# tests/dist/check_grafana.sh checks the result (JSON, metric names, PromQL through promtool).
import json

DS = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
INST = 'instance=~"$instance"'
panels = []
next_id = [1]
y = [0]

def pid():
    i = next_id[0]; next_id[0] += 1; return i

def target(expr, legend, ref, fmt="time_series", instant=False):
    t = {"datasource": DS, "editorMode": "code", "expr": expr, "legendFormat": legend,
         "range": not instant, "instant": instant, "refId": ref}
    if fmt != "time_series":
        t["format"] = fmt
    return t

def row(title):
    panels.append({"type": "row", "title": title, "id": pid(), "collapsed": False, "panels": [],
                   "gridPos": {"h": 1, "w": 24, "x": 0, "y": y[0]}})
    y[0] += 1

class Line:
    """Lay panels out left to right; a new line starts when the widths reach 24."""
    def __init__(self, h):
        self.h, self.x = h, 0
    def pos(self, w):
        p = {"h": self.h, "w": w, "x": self.x, "y": y[0]}
        self.x += w
        if self.x >= 24:
            y[0] += self.h
        return p

def heatmap(line, w, title, desc, expr, unit="s", scheme="Oranges"):
    panels.append({
        "type": "heatmap", "title": title, "description": desc, "id": pid(), "datasource": DS,
        "gridPos": line.pos(w),
        "targets": [target(expr, "{{le}}", "A", fmt="heatmap")],
        "maxDataPoints": 200,
        "fieldConfig": {"defaults": {"custom": {"hideFrom": {"legend": False, "tooltip": False, "viz": False},
                                                 "scaleDistribution": {"type": "linear"}}},
                        "overrides": []},
        "options": {
            "calculate": False, "cellGap": 1, "cellValues": {"unit": "short"},
            "color": {"exponent": 0.5, "fill": "dark-orange", "mode": "scheme", "reverse": False,
                      "scale": "exponential", "scheme": scheme, "steps": 64},
            "exemplars": {"color": "rgba(255,0,255,0.7)"},
            "filterValues": {"le": 1e-9},
            "legend": {"show": True},
            "rowsFrame": {"layout": "auto"},
            "showValue": "never",
            "tooltip": {"show": True, "yHistogram": True},
            "yAxis": {"axisPlacement": "left", "reverse": False, "unit": unit},
        },
    })

def timeseries(line, w, title, desc, targets, unit, stack=False, min0=True):
    defaults = {
        "unit": unit,
        "color": {"mode": "palette-classic"},
        "custom": {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10 if stack else 0,
                   "showPoints": "never", "spanNulls": False, "axisSoftMin": 0 if min0 else None,
                   "stacking": {"mode": "normal" if stack else "none", "group": "A"}},
    }
    if not min0:
        del defaults["custom"]["axisSoftMin"]
    panels.append({
        "type": "timeseries", "title": title, "description": desc, "id": pid(), "datasource": DS,
        "gridPos": line.pos(w),
        "targets": [target(e, l, chr(ord("A") + i)) for i, (e, l) in enumerate(targets)],
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "bottom", "showLegend": True,
                               "calcs": ["mean", "max"], "sortBy": "Max", "sortDesc": True},
                    "tooltip": {"mode": "multi", "sort": "desc"}},
    })

def stat(line, w, title, desc, expr, legend, unit, steps, no_value="no data"):
    panels.append({
        "type": "stat", "title": title, "description": desc, "id": pid(), "datasource": DS,
        "gridPos": line.pos(w),
        "targets": [target(expr, legend, "A", instant=True)],
        "fieldConfig": {"defaults": {"unit": unit, "noValue": no_value,
                                     "color": {"mode": "thresholds"},
                                     "thresholds": {"mode": "absolute", "steps": steps}},
                        "overrides": []},
        "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                    "colorMode": "background", "graphMode": "none", "justifyMode": "auto",
                    "orientation": "auto", "textMode": "auto"},
    })

def steps(*pairs):
    out = [{"color": pairs[0], "value": None}]
    for i in range(1, len(pairs), 2):
        out.append({"color": pairs[i + 1], "value": pairs[i]})
    return out

def q(fn_quantile, by, metric, sel, extra=""):
    return (f'histogram_quantile({fn_quantile}, sum by ({by}, le) '
            f'(rate({metric}_bucket{{{sel}}}[$__rate_interval])))')

R = "[$__rate_interval]"

# ---------------------------------------------------------------------------------------------
row("Scheduling delay")
L = Line(9)
heatmap(L, 12, "Scheduling delay, CPUs $cpu",
        "Wakeup to switch-in of everything that ran on the selected CPUs: samples per cell "
        "(rsched_cpu_sched_delay_seconds, increase over $__rate_interval).",
        f'sum by (le) (increase(rsched_cpu_sched_delay_seconds_bucket{{{INST}, cpu=~"$cpu"}}{R}))')
heatmap(L, 12, "Scheduling delay, cgroup $cgroup",
        "Wakeup to switch-in of the threads of the selected cgroups (the top N cgroups of rschedd, "
        "the rest as cgroup=\"other\"): rsched_cgroup_sched_delay_seconds.",
        f'sum by (le) (increase(rsched_cgroup_sched_delay_seconds_bucket{{{INST}, cgroup=~"$cgroup"}}{R}))')
L = Line(8)
timeseries(L, 12, "Scheduling delay p99 by CPU",
           "histogram_quantile over rsched_cpu_sched_delay_seconds; interpolated inside the "
           "histogram's buckets (10 us wide up to 500 us, then powers of two).",
           [(q(0.99, "instance, cpu", "rsched_cpu_sched_delay_seconds", f'{INST}, cpu=~"$cpu"'),
             "{{instance}} cpu {{cpu}} p99")], "s")
timeseries(L, 12, "Scheduling delay p50 by CPU",
           "Median scheduling delay per CPU (rsched_cpu_sched_delay_seconds).",
           [(q(0.5, "instance, cpu", "rsched_cpu_sched_delay_seconds", f'{INST}, cpu=~"$cpu"'),
             "{{instance}} cpu {{cpu}} p50")], "s")
L = Line(8)
timeseries(L, 8, "Scheduling delay p99 by cgroup",
           "rsched_cgroup_sched_delay_seconds, the selected cgroups.",
           [(q(0.99, "instance, cgroup", "rsched_cgroup_sched_delay_seconds", f'{INST}, cgroup=~"$cgroup"'),
             "{{instance}} {{cgroup}}")], "s")
timeseries(L, 8, "Scheduling delay p99 by comm",
           "rsched_comm_sched_delay_seconds: the top N comms of rschedd, the rest as comm=\"other\".",
           [(q(0.99, "instance, comm", "rsched_comm_sched_delay_seconds", INST),
             "{{instance}} {{comm}}")], "s")
timeseries(L, 8, "Waking delay p99 by cgroup",
           "Waking delay (sched_waking to switch-in): rsched_cgroup_waking_delay_seconds. Needs rschedd -g waking (not in the default groups).",
           [(q(0.99, "instance, cgroup", "rsched_cgroup_waking_delay_seconds", f'{INST}, cgroup=~"$cgroup"'),
             "{{instance}} {{cgroup}}")], "s")

# ---------------------------------------------------------------------------------------------
row("Time slices & runqueue")
L = Line(9)
heatmap(L, 12, "Time slices ended by preemption (involuntary), cgroup $cgroup",
        "How long threads of the selected cgroups ran before they were preempted: "
        "rsched_cgroup_timeslice_seconds{kind=\"involuntary\"}. Needs rschedd -g slice (not in the default groups).",
        f'sum by (le) (increase(rsched_cgroup_timeslice_seconds_bucket{{{INST}, cgroup=~"$cgroup", kind="involuntary"}}{R}))',
        scheme="Blues")
heatmap(L, 12, "Time slices ended by blocking (voluntary), cgroup $cgroup",
        "How long threads of the selected cgroups ran before they slept or blocked: "
        "rsched_cgroup_timeslice_seconds{kind=\"voluntary\"}. Needs rschedd -g slice.",
        f'sum by (le) (increase(rsched_cgroup_timeslice_seconds_bucket{{{INST}, cgroup=~"$cgroup", kind="voluntary"}}{R}))',
        scheme="Blues")
L = Line(8)
timeseries(L, 12, "Time slice p50 and p99 by kind",
           "rsched_cgroup_timeslice_seconds over the selected cgroups, per kind "
           "(voluntary: the thread blocked; involuntary: it was preempted).",
           [(q(0.5, "instance, kind", "rsched_cgroup_timeslice_seconds", f'{INST}, cgroup=~"$cgroup"'),
             "{{instance}} {{kind}} p50"),
            (q(0.99, "instance, kind", "rsched_cgroup_timeslice_seconds", f'{INST}, cgroup=~"$cgroup"'),
             "{{instance}} {{kind}} p99")], "s")
heatmap(L, 12, "Runqueue depth at wakeup, cgroup $cgroup",
        "nr_running of the runqueue at each wakeup of a thread of the selected cgroups: "
        "rsched_cgroup_runqueue_depth (le is a number of tasks, not seconds).",
        f'sum by (le) (increase(rsched_cgroup_runqueue_depth_bucket{{{INST}, cgroup=~"$cgroup"}}{R}))',
        unit="short", scheme="Purples")
L = Line(8)
timeseries(L, 12, "Runqueue depth p99 by cgroup",
           "rsched_cgroup_runqueue_depth, in tasks.",
           [(q(0.99, "instance, cgroup", "rsched_cgroup_runqueue_depth", f'{INST}, cgroup=~"$cgroup"'),
             "{{instance}} {{cgroup}}")], "short")
heatmap(L, 12, "CPU idle periods, CPUs $cpu",
        "Length of the idle periods of the selected CPUs: rsched_cpu_idle_seconds. Needs rschedd -g sleep (not in the default groups).",
        f'sum by (le) (increase(rsched_cpu_idle_seconds_bucket{{{INST}, cpu=~"$cpu"}}{R}))',
        scheme="Greens")
L = Line(8)
heatmap(L, 12, "Sleep durations, cgroup $cgroup",
        "Time the threads of the selected cgroups slept between switch-out and wakeup: "
        "rsched_cgroup_sleep_seconds. Needs rschedd -g sleep (not in the default groups).",
        f'sum by (le) (increase(rsched_cgroup_sleep_seconds_bucket{{{INST}, cgroup=~"$cgroup"}}{R}))',
        scheme="Greens")

# ---------------------------------------------------------------------------------------------
row("Migrations & pressure")
L = Line(8)
timeseries(L, 8, "Migrations per second by cgroup",
           "rate(rsched_cgroup_migrations_total): threads of the cgroup moved to another CPU.",
           [(f'sum by (instance, cgroup) (rate(rsched_cgroup_migrations_total{{{INST}, cgroup=~"$cgroup"}}{R}))',
             "{{instance}} {{cgroup}}")], "ops")
timeseries(L, 8, "Cross-CCX and cross-NUMA migrations per second",
           "The migrations that left the last-level cache (CCX) or the NUMA node: "
           "rsched_cgroup_cross_ccx_migrations_total, rsched_cgroup_cross_numa_migrations_total.",
           [(f'sum by (instance, cgroup) (rate(rsched_cgroup_cross_ccx_migrations_total{{{INST}, cgroup=~"$cgroup"}}{R}))',
             "{{instance}} {{cgroup}} cross-CCX"),
            (f'sum by (instance, cgroup) (rate(rsched_cgroup_cross_numa_migrations_total{{{INST}, cgroup=~"$cgroup"}}{R}))',
             "{{instance}} {{cgroup}} cross-NUMA")], "ops")
timeseries(L, 8, "CPU pressure (PSI) by cgroup",
           "Share of wall time in which some (or all) runnable threads of the cgroup waited for a "
           "CPU: rate of rsched_cgroup_cpu_pressure_some/full_seconds_total (cpu.pressure; "
           "cgroup=\"/\" is the whole system).",
           [(f'sum by (instance, cgroup) (rate(rsched_cgroup_cpu_pressure_some_seconds_total{{{INST}, cgroup=~"$cgroup"}}{R}))',
             "{{instance}} {{cgroup}} some"),
            (f'sum by (instance, cgroup) (rate(rsched_cgroup_cpu_pressure_full_seconds_total{{{INST}, cgroup=~"$cgroup"}}{R}))',
             "{{instance}} {{cgroup}} full")], "percentunit")
L = Line(8)
timeseries(L, 12, "CFS throttled time by cgroup",
           "Seconds throttled per second by the cgroup's CPU quota (cpu.max): "
           "rate(rsched_cgroup_cpu_throttled_seconds_total).",
           [(f'sum by (instance, cgroup) (rate(rsched_cgroup_cpu_throttled_seconds_total{{{INST}, cgroup=~"$cgroup"}}{R}))',
             "{{instance}} {{cgroup}}")], "suffix:s/s")
timeseries(L, 12, "CFS throttled periods per second by cgroup",
           "rate(rsched_cgroup_cpu_throttled_periods_total): quota periods in which the cgroup was throttled.",
           [(f'sum by (instance, cgroup) (rate(rsched_cgroup_cpu_throttled_periods_total{{{INST}, cgroup=~"$cgroup"}}{R}))',
             "{{instance}} {{cgroup}}")], "ops")

# ---------------------------------------------------------------------------------------------
row("Culprits")
L = Line(9)
timeseries(L, 16, "Culprits: waiting they caused, top 10 comms",
           "rsched_culprit_wait_seconds_total: time a comm ran on a CPU while other threads waited "
           "for that CPU, in seconds per second (can exceed 1 with several CPUs). rschedd exports "
           "its top N comms (group blame); <idle> and <unknown> are culprits too.",
           [(f'topk(10, sum by (instance, comm) (rate(rsched_culprit_wait_seconds_total{{{INST}}}{R})))',
             "{{instance}} {{comm}}")], "suffix:s/s")
panels.append({
    "type": "bargauge", "title": "Culprits over the time range", "id": pid(), "datasource": DS,
    "description": "Seconds others waited behind each comm over the dashboard's time range "
                   "(increase of rsched_culprit_wait_seconds_total), the top 10.",
    "gridPos": L.pos(8),
    "targets": [target(f'topk(10, sum by (instance, comm) (increase(rsched_culprit_wait_seconds_total{{{INST}}}[$__range])))',
                       "{{instance}} {{comm}}", "A", instant=True)],
    "fieldConfig": {"defaults": {"unit": "s", "min": 0, "color": {"mode": "continuous-YlRd"},
                                 "thresholds": {"mode": "absolute", "steps": steps("green")}},
                    "overrides": []},
    "options": {"displayMode": "gradient", "orientation": "horizontal", "showUnfilled": True,
                "valueMode": "color", "namePlacement": "auto", "sizing": "auto",
                "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}},
})

# ---------------------------------------------------------------------------------------------
row("rschedd health")
L = Line(4)
stat(L, 4, "Age of the newest interval",
     "time() - rsched_last_interval_end_timestamp_seconds: seconds since the end of the last "
     "interval rschedd recorded, as last scraped. A few seconds plus the scrape interval is normal; "
     "no data means the target is gone.",
     f'max by (instance) (time() - rsched_last_interval_end_timestamp_seconds{{{INST}}})',
     "{{instance}}", "s", steps("green", 60, "orange", 300, "red"))
stat(L, 4, "Time covered by intervals",
     "rate(rsched_recorded_seconds_total): the share of wall time the recorded intervals cover "
     "(below 100 %: gaps, e.g. stalls).",
     f'sum by (instance) (rate(rsched_recorded_seconds_total{{{INST}}}[$__range]))',
     "{{instance}}", "percentunit", steps("red", 0.9, "orange", 0.99, "green"))
stat(L, 4, "Stalled intervals",
     "increase(rsched_stalled_intervals_total) over the time range.",
     f'sum by (instance) (increase(rsched_stalled_intervals_total{{{INST}}}[$__range]))',
     "{{instance}}", "short", steps("green", 1, "orange"))
stat(L, 4, "Write failures",
     "increase(rsched_write_failures_total) over the time range: intervals the database did not take.",
     f'sum by (instance) (increase(rsched_write_failures_total{{{INST}}}[$__range]))',
     "{{instance}}", "short", steps("green", 1, "red"))
stat(L, 4, "Dropped events",
     "increase(rsched_drops_total) over the time range, all kinds: events the BPF programs could not record.",
     f'sum by (instance) (increase(rsched_drops_total{{{INST}}}[$__range]))',
     "{{instance}}", "short", steps("green", 1, "orange"))
stat(L, 4, "Resident memory",
     "rsched_resident_memory_bytes of rschedd.",
     f'max by (instance) (rsched_resident_memory_bytes{{{INST}}})',
     "{{instance}}", "bytes", steps("green", 512 * 2**20, "orange"))
L = Line(8)
timeseries(L, 8, "Interval duration",
           "rsched_last_interval_duration_seconds, and the mean length of the intervals recorded "
           "(rate(rsched_recorded_seconds_total) / rate(rsched_intervals_total)).",
           [(f'rsched_last_interval_duration_seconds{{{INST}}}', "{{instance}} last"),
            (f'sum by (instance) (rate(rsched_recorded_seconds_total{{{INST}}}{R})) / '
             f'sum by (instance) (rate(rsched_intervals_total{{{INST}}}{R}))', "{{instance}} mean")], "s")
timeseries(L, 8, "Collect and write time per second",
           "rschedd's time reading the BPF maps (rsched_collect_seconds_total), writing the "
           "database (rsched_write_seconds_total) and keeping its rollups and retention "
           "(rsched_maintain_seconds_total), in seconds per second.",
           [(f'sum by (instance) (rate(rsched_collect_seconds_total{{{INST}}}{R}))', "{{instance}} collect"),
            (f'sum by (instance) (rate(rsched_write_seconds_total{{{INST}}}{R}))', "{{instance}} write"),
            (f'sum by (instance) (rate(rsched_maintain_seconds_total{{{INST}}}{R}))', "{{instance}} maintain")],
           "percentunit")
timeseries(L, 8, "rschedd CPU",
           "CPU seconds per second of the rschedd process (rsched_process_cpu_seconds_total) and of "
           "its BPF programs in the kernel (rsched_bpf_run_seconds_total, all CPUs).",
           [(f'sum by (instance) (rate(rsched_process_cpu_seconds_total{{{INST}}}{R}))', "{{instance}} process"),
            (f'sum by (instance) (rate(rsched_bpf_run_seconds_total{{{INST}}}{R}))', "{{instance}} BPF programs")],
           "percentunit")
L = Line(8)
timeseries(L, 12, "Dropped events per second by kind",
           "rate(rsched_drops_total) per kind; values above their metric's limit, discarded "
           "(rsched_discarded_samples_total, not an error); runs of rschedd's BPF programs "
           "(rsched_bpf_runs_total, with kernel.bpf_stats_enabled).",
           [(f'sum by (instance, kind) (rate(rsched_drops_total{{{INST}}}{R}))', "{{instance}} {{kind}}"),
            (f'sum by (instance) (rate(rsched_discarded_samples_total{{{INST}}}{R}))', "{{instance}} discarded"),
            (f'sum by (instance) (rate(rsched_bpf_runs_total{{{INST}}}{R}))', "{{instance}} BPF runs")], "ops")
timeseries(L, 12, "Resident memory",
           "rsched_resident_memory_bytes.",
           [(f'rsched_resident_memory_bytes{{{INST}}}', "{{instance}}")], "bytes")

def var_query(name, label, query, *, sort=1, multi=True, hide=0):
    return {
        "name": name, "label": label, "type": "query", "datasource": DS,
        "definition": query, "query": {"query": query, "refId": f"PrometheusVariableQueryEditor-{name}"},
        "refresh": 2, "sort": sort, "multi": multi, "includeAll": True, "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "options": [], "regex": "", "hide": hide, "skipUrlSync": False,
    }

dashboard = {
    "annotations": {"list": [{
        "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True,
        "hide": True, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts",
        "type": "dashboard"}]},
    "description": "rschedd's live Prometheus metrics (--metrics-listen / --metrics-textfile): "
                   "scheduling delay, time slices, runqueue depth, migrations, pressure, culprits "
                   "and rschedd's own health. See docs/FLEET.md of rsched.",
    "editable": True,
    "fiscalYearStartMonth": 0,
    "graphTooltip": 1,
    "id": None,
    "links": [],
    "liveNow": False,
    "panels": panels,
    "refresh": "1m",
    "schemaVersion": 38,
    "tags": ["rsched", "scheduler", "linux"],
    "templating": {"list": [
        {"name": "DS_PROMETHEUS", "label": "Data source", "type": "datasource", "query": "prometheus",
         "current": {}, "hide": 0, "includeAll": False, "multi": False, "options": [], "refresh": 1,
         "regex": "", "skipUrlSync": False},
        var_query("instance", "Instance", "label_values(rsched_intervals_total, instance)"),
        var_query("cgroup", "cgroup",
                  'label_values(rsched_cgroup_sched_delay_seconds_count{instance=~"$instance"}, cgroup)'),
        var_query("cpu", "CPU",
                  'label_values(rsched_cpu_sched_delay_seconds_count{instance=~"$instance"}, cpu)', sort=3),
    ]},
    "time": {"from": "now-6h", "to": "now"},
    "timepicker": {},
    "timezone": "",
    "title": "rsched: scheduler history",
    "uid": "rsched-overview",
    "version": 1,
    "weekStart": "",
}
print(json.dumps(dashboard, indent=2, ensure_ascii=False))
