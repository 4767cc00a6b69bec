"""rotator's alerts and dashboard as tests see them: the rules as the chart renders them
(charts/rotator/files/prometheus-rules.yaml), the dashboard's PromQL
(charts/rotator/files/grafana-dashboard.json), the metric names both read, and promtool, built
once by hack/promtool.sh (cached, like Helm and the control plane)."""

from __future__ import annotations

import functools
import json
import re
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.support import helm

RULES_FILE = helm.CHART / "files" / "prometheus-rules.yaml"
DASHBOARD_FILE = helm.CHART / "files" / "grafana-dashboard.json"
ALERT_TESTS = helm.REPO / "tests" / "alerts" / "rotator.test.yaml"
OPERATIONS = helm.REPO / "docs" / "operations.md"

GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$job": "rotator-controller-manager-metrics-service"}
"""What the dashboard's Grafana variables stand for when its PromQL is checked on its own."""

SYNTHETIC = frozenset({"up"})
"""Series Prometheus makes for each scrape itself: never in the controller's /metrics."""


@functools.cache
def promtool() -> Path:
    """hack/promtool.sh's promtool: built from its Go module the first time (minutes), then found
    in the cache (milliseconds). One build per process; hack/promtool.sh's lock makes workers
    share it."""
    out = subprocess.run(
        [str(helm.REPO / "hack" / "promtool.sh")], capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"hack/promtool.sh failed ({out.returncode}): {out.stderr[-2000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


def run_promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(promtool()), *args], capture_output=True, text=True, check=False, timeout=120
    )


def rendered_rules(values: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The PrometheusRule's spec (a rule file's ``groups:``) as ``helm template`` renders it with
    ``metrics.prometheusRule.enabled`` and ``values``."""
    merged: dict[str, Any] = json.loads(json.dumps(dict(values or {})))
    rule = merged.setdefault("metrics", {}).setdefault("prometheusRule", {})
    rule["enabled"] = True
    render = helm.template(helm.Case(merged))
    assert not render.error, render.error
    spec: dict[str, Any] = render.one("PrometheusRule")["spec"]
    return spec


def alerts(groups: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [r for g in groups["groups"] for r in g["rules"] if "alert" in r]


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD_FILE.read_text())
    return loaded


def dashboard_exprs(board: Mapping[str, Any] | None = None) -> list[str]:
    """Every panel target's PromQL, Grafana's variables as they are."""
    board = dashboard() if board is None else board
    return [
        target["expr"]
        for panel in board["panels"]
        for target in panel.get("targets", [])
        if "expr" in target
    ]


def variable_metrics(board: Mapping[str, Any] | None = None) -> set[str]:
    """The metrics the dashboard's ``label_values(<metric>, <label>)`` variables list from."""
    board = dashboard() if board is None else board
    found = set()
    for variable in board["templating"]["list"]:
        query = variable.get("query")
        text = query.get("query", "") if isinstance(query, Mapping) else str(query or "")
        if m := re.fullmatch(r"label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,.*\)", text):
            found.add(m.group(1))
    return found


def substituted(expr: str) -> str:
    """``expr`` with the dashboard's Grafana variables replaced by what they stand for."""
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


def as_rule_file(exprs: Iterable[str]) -> str:
    """A rule file with one recording rule per expression: what ``promtool check rules`` parses."""
    rules = [{"record": f"rotator:dashboard_{i}", "expr": e} for i, e in enumerate(exprs)]
    return yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]})


_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "inf", "nan", "by", "without", "on", "ignoring"}
    | {"group_left", "group_right", "start", "end"}
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:])(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` selects: every identifier outside strings, label matchers,
    ranges and grouping clauses that is neither a function (followed by ``(``) nor a keyword.
    Durations (5m) and numbers do not start with a letter."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = _GROUPING.sub(" ", text)
    return {
        m.group(1)
        for m in _IDENTIFIER.finditer(text)
        if not m.group(2) and m.group(1) not in _KEYWORDS
    }


SHARDED_ONLY = frozenset(
    {"rotator_shards", "rotator_shards_held", "rotator_shards_lease_list_forbidden"}
)
"""Metrics the rules name that only a sharded replica (``--shards`` > 1) exports."""


def named_metrics() -> set[str]:
    """Every metric the chart's rules and dashboard read, as the controller must expose it."""
    exprs = [r["expr"] for r in alerts(rendered_rules())]
    exprs += [substituted(e) for e in dashboard_exprs()]
    names = set().union(*(metric_names(e) for e in exprs)) | variable_metrics()
    return names - SYNTHETIC


def operations_anchors() -> set[str]:
    """GitHub's anchors of docs/operations.md's headings (lower case, spaces to dashes, other
    punctuation dropped)."""
    anchors = set()
    for line in OPERATIONS.read_text().splitlines():
        if m := re.match(r"#{1,6}\s+(.*)", line):
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            anchors.add(slug)
    return anchors
