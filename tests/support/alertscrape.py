"""The chart's alert expressions evaluated on real scrapes of a running controller: each scrape's
samples become a promtool input series with the labels a Prometheus scrape adds (the target's
``job``, ``instance``…, and ``up`` 1), and ``promtool test rules`` evaluates the chart's rendered
expressions on them (promql_expr_test). Shared by tests/e2e/test_alerts_scrape.py (``rotator run``
on the host) and tests/kind/test_alerts.py (the Deployment in the kind cluster), which differ only
in how they fetch /metrics.

promtool's clock starts at 0 and takes one sample a minute: scrape ``i`` of a list is minute ``i``
(``None``: not scraped; a series missing from a minute after it was seen is stale, as Prometheus
marks it). So this checks what the expressions say about real series, not the alerts' ``for``
durations, which tests/alerts/rotator.test.yaml covers."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import parser

from tests.support import monitoring

JOB = "rotator-controller-manager-metrics-service"
"""The job the chart's default selector names (its ServiceMonitor's Service)."""
Scrape = dict[str, float]
"""One scrape as promtool series: ``name{labels}`` → value."""
Keep = Mapping[str, Mapping[str, str]]
"""Per metric, the labels a kept series must have (a test's own series, not other tests')."""


def series(name: str, labels: Mapping[str, str]) -> str:
    return name + "{" + ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items())) + "}"


def parse(text: str, target: Mapping[str, str], keep: Keep | None = None) -> Scrape:
    """A /metrics body as Prometheus stores it from the target labelled ``target``: only the
    series of the metrics the chart's rules and dashboard read, each with the target's labels; a
    scraped label that a target label also names is kept as ``exported_<name>`` (Prometheus's
    ``honor_labels: false``, the ServiceMonitor's default). ``up`` is 1."""
    wanted = monitoring.named_metrics()
    out: Scrape = {series("up", target): 1.0}
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name not in wanted:
                continue
            if not (keep or {}).get(sample.name, {}).items() <= sample.labels.items():
                continue
            labels = {(f"exported_{k}" if k in target else k): v for k, v in sample.labels.items()}
            out[series(sample.name, {**labels, **target})] = float(sample.value)
    return out


def alert_expr(name: str) -> str:
    """The expression of the chart's alert ``name``, as its PrometheusRule renders it."""
    (rule,) = [r for r in monitoring.alerts(monitoring.rendered_rules()) if r["alert"] == name]
    expr: str = rule["expr"]
    return expr


def evaluate(
    tmp_path: Path, minutes: Sequence[Scrape | None], checks: list[dict[str, Any]]
) -> None:
    """``promtool test rules`` of ``checks`` (promql_expr_test entries) on ``minutes``."""
    keys = sorted({k for m in minutes if m for k in m})
    input_series = [{"series": k, "values": " ".join(values(k, minutes))} for k in keys]
    (tmp_path / "none.yaml").write_text("groups: []\n")
    test = {
        "rule_files": ["none.yaml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": input_series, "promql_expr_test": checks}],
    }
    (tmp_path / "scrape.test.yaml").write_text(yaml.safe_dump(test, width=1 << 20))
    out = monitoring.run_promtool("test", "rules", str(tmp_path / "scrape.test.yaml"))
    assert out.returncode == 0, out.stdout + out.stderr


def values(key: str, minutes: Sequence[Scrape | None]) -> list[str]:
    """One series' promtool values: its sample, or once it has been seen, ``stale`` where a
    minute lacks it (Prometheus's staleness marker, written when a series leaves a scrape or its
    target goes down), ``_`` before."""
    out: list[str] = []
    for minute in minutes:
        if minute is not None and key in minute:
            out.append(repr(minute[key]))
        else:
            out.append("stale" if any(v not in ("_", "stale") for v in out) else "_")
    return out


def rotations(scraped: Scrape, result: str) -> float:
    """The refreshes with ``result`` (success, failure) a scrape counts, over every target."""
    return sum(
        v
        for k, v in scraped.items()
        if k.startswith("rotator_rotations_total{") and f'result="{result}"' in k
    )


def counted_more(
    scrape: Callable[[], Scrape], before: Scrape, result: str
) -> Callable[[], Scrape | None]:
    """For wait_for: a scrape that counts more refreshes with ``result`` than ``before``; else
    None."""

    def check() -> Scrape | None:
        now = scrape()
        return now if rotations(now, result) > rotations(before, result) else None

    return check
