#!/usr/bin/env python3
"""Checks deploy/grafana/*.json and deploy/prometheus/tutti-rules.yml.

  - the rules pass `promtool check rules`;
  - each Grafana dashboard has the structure Grafana's dashboard schema
    asks for (uid, title, schemaVersion, panels with unique ids, a type
    Grafana ships, a gridPos inside the 24-column grid and not overlapping
    another, targets with unique refIds and an expression), and every
    $variable an expression uses is one of its templating variables;
  - every panel expression is valid PromQL: promtool checks them as
    recording rules, the variables replaced by a regex;
  - every tutti_* metric a panel or rule names is one the code exports
    (a quoted name in the sources of train/, serve/, gateway/, runtime/);
  - with --scrape KIND=FILE (KIND: training or serving), every metric the
    KIND dashboard names is in that live /metrics scrape.
Exits 0 when all pass, 1 naming each failure, 77 when promtool is missing.
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

PANEL_TYPES = {"row", "stat", "timeseries", "heatmap", "table", "gauge",
               "bargauge", "text", "state-timeline", "barchart", "piechart"}
METRIC = re.compile(r"\btutti_[a-z0-9_]+")
HISTOGRAM_PARTS = ("_bucket", "_sum", "_count")
EXPORTERS = ("train", "serve", "gateway", "runtime")


def exported_names(source):
    names = set()
    for part in EXPORTERS:
        for path in glob.glob(os.path.join(source, part, "src", "**", "*.cpp"),
                              recursive=True):
            with open(path, encoding="utf-8") as f:
                names.update(re.findall(r'"(tutti_[a-z0-9_]+)"', f.read()))
    return names


def base_names(expr):
    """The metric names of an expression, histogram parts as the family."""
    out = set()
    for name in METRIC.findall(expr):
        for suffix in HISTOGRAM_PARTS:
            if name.endswith(suffix):
                out.add(name[: -len(suffix)])
                break
        else:
            out.add(name)
    return out


def scraped_names(path):
    names = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("# TYPE "):
                names.add(line.split()[2])
            elif line.strip() and not line.startswith("#"):
                names.update(base_names(re.split(r"[{ ]", line, 1)[0]))
    return names


def overlaps(a, b):
    return not (a["x"] + a["w"] <= b["x"] or b["x"] + b["w"] <= a["x"]
                or a["y"] + a["h"] <= b["y"] or b["y"] + b["h"] <= a["y"])


def check_dashboard(path, errors):
    try:
        with open(path, encoding="utf-8") as f:
            board = json.load(f)
    except (OSError, ValueError) as e:
        errors.append(f"{path}: not JSON: {e}")
        return []
    where = os.path.basename(path)
    for key, kind in (("uid", str), ("title", str), ("schemaVersion", int),
                      ("panels", list), ("templating", dict)):
        if not isinstance(board.get(key), kind):
            errors.append(f"{where}: {key} missing or not a {kind.__name__}")
    if errors:
        return []
    variables = {v.get("name") for v in board["templating"].get("list", [])}
    ids, placed, exprs = set(), [], []
    for panel in board["panels"]:
        pid = panel.get("id")
        name = f"{where}: panel {pid} ({panel.get('title')})"
        if not isinstance(pid, int) or pid in ids:
            errors.append(f"{name}: id missing or repeated")
        ids.add(pid)
        if panel.get("type") not in PANEL_TYPES:
            errors.append(f"{name}: type {panel.get('type')!r} is not a "
                          "panel Grafana ships")
        grid = panel.get("gridPos", {})
        if not all(isinstance(grid.get(k), int) for k in "hwxy") \
                or grid["w"] < 1 or grid["x"] < 0 or grid["x"] + grid["w"] > 24 \
                or grid["h"] < 1:
            errors.append(f"{name}: gridPos {grid} is not inside the "
                          "24-column grid")
            continue
        for other_name, other in placed:
            if overlaps(grid, other):
                errors.append(f"{name}: overlaps {other_name}")
        placed.append((name, grid))
        if panel["type"] == "row":
            continue
        refs = set()
        targets = panel.get("targets")
        if not targets:
            errors.append(f"{name}: no targets")
            continue
        for t in targets:
            if t.get("refId") in refs or not t.get("refId"):
                errors.append(f"{name}: refId missing or repeated")
            refs.add(t.get("refId"))
            expr = t.get("expr", "")
            if not expr:
                errors.append(f"{name}: a target without an expression")
            for var in re.findall(r"\$(\w+)", expr):
                if var not in variables:
                    errors.append(f"{name}: ${var} is not a templating "
                                  "variable")
            exprs.append((name, expr))
    for a in board.get("annotations", {}).get("list", []):
        if a.get("expr"):
            exprs.append((f"{where}: annotation {a.get('name')}", a["expr"]))
    return exprs


def promtool(args):
    r = subprocess.run(["promtool"] + args, capture_output=True, text=True,
                       timeout=60)
    return r.returncode, r.stdout + r.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--scrape", action="append", default=[],
                    help="KIND=FILE: a live scrape for the KIND dashboard")
    args = ap.parse_args()
    if not shutil.which("promtool"):
        print("SKIPPED: promtool is not installed (Debian package "
              "prometheus; deploy/install-deps.sh)")
        return 77
    errors = []
    rules = os.path.join(args.source, "deploy", "prometheus", "tutti-rules.yml")
    code, out = promtool(["check", "rules", rules])
    print(out.strip())
    if code != 0:
        errors.append(f"promtool check rules {rules} failed")
    exported = exported_names(args.source)
    with open(rules, encoding="utf-8") as f:
        for name in sorted(base_names(f.read())):
            if name not in exported:
                errors.append(f"tutti-rules.yml: {name} is not a metric the "
                              "code exports")
    boards = sorted(glob.glob(os.path.join(args.source, "deploy", "grafana",
                                           "*.json")))
    if not boards:
        errors.append("no dashboards in deploy/grafana")
    used = {}
    for path in boards:
        exprs = check_dashboard(path, errors)
        kind = os.path.basename(path)[len("tutti-"):-len(".json")]
        used[kind] = set()
        # PromQL syntax: every expression as a recording rule.
        with tempfile.TemporaryDirectory() as tmp:
            rules_file = os.path.join(tmp, "panels.yml")
            with open(rules_file, "w", encoding="utf-8") as f:
                f.write("groups:\n  - name: panels\n    rules:\n")
                for i, (_, expr) in enumerate(exprs):
                    plain = re.sub(r"\$\w+", ".*", expr)
                    f.write(f"      - record: panel_{i}\n        expr: "
                            + json.dumps(plain) + "\n")
            code, out = promtool(["check", "rules", rules_file])
            if code != 0:
                errors.append(f"{os.path.basename(path)}: an expression is "
                              f"not valid PromQL: {out.strip()}")
        for name, expr in exprs:
            for metric in base_names(expr):
                used[kind].add(metric)
                if metric not in exported:
                    errors.append(f"{name}: {metric} is not a metric the "
                                  "code exports")
        print(f"{os.path.basename(path)}: {len(exprs)} expressions, "
              f"{len(used[kind])} metrics")
    for spec in args.scrape:
        kind, _, file = spec.partition("=")
        live = scraped_names(file)
        for metric in sorted(used.get(kind, set()) - live):
            errors.append(f"the {kind} dashboard uses {metric}, which the "
                          f"live scrape {file} does not have")
        print(f"{kind}: every metric of its dashboard checked against {file}")
    for e in errors:
        print("FAILED:", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
