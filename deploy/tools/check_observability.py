"""Checks deploy/grafana/unigen.json and deploy/prometheus/alerts.yml
(run by scripts/check-deploy).

- The dashboard: valid JSON, schemaVersion 39 or later, the DS_PROMETHEUS
  input, every panel and target on ${DS_PROMETHEUS}, unique panel ids, panels
  inside the 24-column grid, every target with an expression. Its PromQL is
  written, with Grafana's variables replaced, as recording rules into the
  file named by --rules-out, for `promtool check rules` to parse (promtool
  has no command that parses a bare expression).
- The alert rules: every alert has `for`, a severity of critical, warning or
  info, a summary and a description.
- Both: every series they read is one the binaries export: a metric name
  (less _bucket, _sum, _count) that appears as a string in the Rust source of
  api/, worker/, scheduler/ or crates/.

Usage: check_observability.py <repo root> --rules-out <file> [--deploy <deploy folder>]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys

import yaml

SERIES = re.compile(r"\b((?:gen_ai|http_server|unigen)_[a-z0-9_]+)\b")
SUFFIXES = ("_bucket", "_sum", "_count")
SEVERITIES = {"critical", "warning", "info"}


def exported_metrics(root: str) -> set[str]:
    names: set[str] = set()
    for folder in ("api/src", "worker/src", "scheduler/src", "crates"):
        for path in glob.glob(os.path.join(root, folder, "**", "*.rs"), recursive=True):
            with open(path, encoding="utf-8") as handle:
                names.update(re.findall(r'"((?:gen_ai|http_server|unigen)_[a-z0-9_]+)"', handle.read()))
    return names


def series_in(expr: str) -> set[str]:
    found = set()
    for name in SERIES.findall(re.sub(r'"[^"]*"', '""', expr)):
        for suffix in SUFFIXES:
            if name.endswith(suffix):
                name = name[: -len(suffix)]
                break
        found.add(name)
    return found


def grafana_to_promql(expr: str) -> str:
    for variable in ("$__rate_interval", "${__rate_interval}", "$__interval", "${__interval}", "$__range", "${__range}"):
        expr = expr.replace(variable, "5m")
    return re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", ".*", expr)


def check_dashboard(path: str, problems: list[str]) -> list[tuple[str, str]]:
    shown = "grafana/unigen.json"
    try:
        with open(path, encoding="utf-8") as handle:
            dashboard = json.load(handle)
    except (OSError, json.JSONDecodeError) as err:
        problems.append(f"{shown}: not valid JSON: {err}")
        return []
    if not isinstance(dashboard.get("schemaVersion"), int) or dashboard["schemaVersion"] < 39:
        problems.append(f"{shown}: schemaVersion must be 39 or later")
    inputs = [i for i in dashboard.get("__inputs") or [] if i.get("name") == "DS_PROMETHEUS"]
    if not inputs or inputs[0].get("pluginId") != "prometheus" or inputs[0].get("type") != "datasource":
        problems.append(f"{shown}: the DS_PROMETHEUS datasource input (prometheus) is missing")
    if not dashboard.get("uid") or not dashboard.get("title"):
        problems.append(f"{shown}: uid and title are required")
    expressions: list[tuple[str, str]] = []
    ids: set[int] = set()
    panels = list(dashboard.get("panels") or [])
    for panel in list(panels):
        panels.extend(panel.get("panels") or [])
    if not panels:
        problems.append(f"{shown}: no panels")
    for panel in panels:
        where = f"{shown}: panel {panel.get('id')} {panel.get('title')!r}"
        if panel.get("id") in ids or not isinstance(panel.get("id"), int):
            problems.append(f"{where}: panel ids must be unique integers")
        ids.add(panel.get("id"))
        grid = panel.get("gridPos") or {}
        if not all(isinstance(grid.get(k), int) for k in "hwxy") or grid["x"] + grid["w"] > 24:
            problems.append(f"{where}: gridPos must be integers within 24 columns")
        if panel.get("type") == "row":
            continue
        if (panel.get("datasource") or {}).get("uid") != "${DS_PROMETHEUS}":
            problems.append(f"{where}: datasource must be ${{DS_PROMETHEUS}}")
        targets = panel.get("targets") or []
        if not targets:
            problems.append(f"{where}: no targets")
        for target in targets:
            if (target.get("datasource") or {}).get("uid") != "${DS_PROMETHEUS}":
                problems.append(f"{where} target {target.get('refId')}: datasource must be ${{DS_PROMETHEUS}}")
            if not (target.get("expr") or "").strip():
                problems.append(f"{where} target {target.get('refId')}: empty expression")
                continue
            expressions.append((f"{where} target {target.get('refId')}", target["expr"]))
    for variable in (dashboard.get("templating") or {}).get("list") or []:
        query = variable.get("query")
        query = query.get("query") if isinstance(query, dict) else query
        match = re.fullmatch(r"label_values\((.+),\s*[a-z_]+\)", str(query or ""))
        if variable.get("type") == "query":
            if not match:
                problems.append(f"{shown}: variable {variable.get('name')}: expected label_values(<selector>, <label>)")
            else:
                expressions.append((f"{shown}: variable {variable.get('name')}", match.group(1)))
    return expressions


def check_alerts(path: str, problems: list[str]) -> list[tuple[str, str]]:
    shown = "prometheus/alerts.yml"
    with open(path, encoding="utf-8") as handle:
        rules = yaml.safe_load(handle) or {}
    expressions = []
    alerts = 0
    for group in rules.get("groups") or []:
        for rule in group.get("rules") or []:
            name = rule.get("alert") or rule.get("record")
            expressions.append((f"{shown}: {name}", str(rule.get("expr", ""))))
            if "alert" not in rule:
                continue
            alerts += 1
            where = f"{shown}: alert {name}"
            if not rule.get("for"):
                problems.append(f"{where}: needs `for`")
            if (rule.get("labels") or {}).get("severity") not in SEVERITIES:
                problems.append(f"{where}: labels.severity must be one of {', '.join(sorted(SEVERITIES))}")
            annotations = rule.get("annotations") or {}
            for key in ("summary", "description"):
                if not str(annotations.get(key, "")).strip():
                    problems.append(f"{where}: annotations.{key} is missing")
    if alerts == 0:
        problems.append(f"{shown}: no alerts")
    return expressions


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--rules-out", required=True)
    parser.add_argument("--deploy", help="the deploy/ folder to check (default: <root>/deploy)")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    deploy = os.path.abspath(args.deploy or os.path.join(root, "deploy"))
    problems: list[str] = []
    dashboard = check_dashboard(os.path.join(deploy, "grafana/unigen.json"), problems)
    alerts = check_alerts(os.path.join(deploy, "prometheus/alerts.yml"), problems)
    exported = exported_metrics(root)
    for where, expr in dashboard + alerts:
        for name in sorted(series_in(expr) - exported):
            problems.append(f"{where}: reads {name}, which no binary exports (no \"{name}\" in the Rust source)")
    rules = {"groups": [{"name": "dashboard-expressions", "rules": [
        {"record": f"dashboard:expression_{number}", "expr": grafana_to_promql(expr)}
        for number, (_, expr) in enumerate(dashboard)
    ]}]}
    with open(args.rules_out, "w", encoding="utf-8") as handle:
        yaml.safe_dump(rules, handle, sort_keys=False)
    print(f"dashboard: {len(dashboard)} expressions; alerts.yml: {len(alerts)} rules; "
          f"{len({n for _, e in dashboard + alerts for n in series_in(e)})} series names checked against the source")
    for problem in problems:
        print(f"  {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
