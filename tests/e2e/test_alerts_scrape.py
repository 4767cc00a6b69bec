"""The alerts' expressions against real scrapes of the running controller (``rotator run`` as its
own process): each scrape's samples become a promtool input series, with the labels a Prometheus
scrape adds (``job`` as the chart's PrometheusRule selects it, ``instance``, and ``up`` 1), and
``promtool test rules`` evaluates the chart's rendered expressions on them (promql_expr_test).

promtool's clock starts at 0 and takes one sample a minute: scrape ``i`` of a list is minute ``i``
(``None``: not scraped; a series missing from a minute after it was seen is stale, as
Prometheus marks it). So this checks what the expressions say about
real series, not the alerts' ``for`` durations, which tests/alerts/rotator.test.yaml covers. The
kind suite has no such test yet: it would run only in the final CI."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import parser

from controllers.runtime import client as clients
from controllers.runtime import errors, objects
from rotator_devkit.devenv import manifests
from rotator_devkit.devenv.standins.sts import STSProxy
from tests.e2e.conftest import ROLE_ARN
from tests.support import backoff, monitoring
from tests.support.chain import AWSChain
from tests.support.controller import ControllerProcess
from tests.support.polling import wait_for

JOB = "rotator-controller-manager-metrics-service"
"""The job the chart's default selector names (its ServiceMonitor's Service)."""
Scrape = dict[str, float]
# The first test to run may build promtool (hack/promtool.sh; minutes cold, shared through its lock
# with tests/unit/test_alerts.py's worker).
pytestmark = pytest.mark.timeout(1500)


def scrape(
    controller: ControllerProcess, instance: str, keep: Mapping[str, Mapping[str, str]] = {}
) -> Scrape:
    """The controller's /metrics as promtool series (``name{labels}``: value) with Prometheus's
    target labels, only the series of the metrics the rules read; ``keep`` narrows a metric to
    the series with those labels (this test's own, not those of other tests' policies)."""
    assert controller.proc is not None
    status, text = controller.proc.http(controller.proc.metrics_port, "/metrics")
    assert status == 200, status
    wanted = monitoring.named_metrics()
    out: Scrape = {series("up", {"job": JOB, "instance": instance}): 1.0}
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name not in wanted:
                continue
            if not keep.get(sample.name, {}).items() <= sample.labels.items():
                continue
            labels = {**sample.labels, "job": JOB, "instance": instance}
            out[series(sample.name, labels)] = float(sample.value)
    return out


def micro_time(at: float) -> str:
    """A Lease's MicroTime."""
    return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def series(name: str, labels: Mapping[str, str]) -> str:
    return name + "{" + ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items())) + "}"


def alert_expr(name: str) -> str:
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


def failures(scraped: Scrape) -> float:
    return sum(
        v for k, v in scraped.items() if k.startswith("rotator_rotations_total{") and "failure" in k
    )


def successes(scraped: Scrape) -> float:
    return sum(
        v for k, v in scraped.items() if k.startswith("rotator_rotations_total{") and "success" in k
    )


def succeeded_since(
    controller: ControllerProcess, before: Scrape, keep: Mapping[str, Mapping[str, str]]
) -> Scrape | None:
    """A scrape that counts more successful refreshes than ``before``; else None."""
    now = scrape(controller, "a", keep)
    return now if successes(now) > successes(before) else None


def failed_since(
    controller: ControllerProcess, before: Scrape, keep: Mapping[str, Mapping[str, str]]
) -> Scrape | None:
    """A scrape that counts more refresh failures than ``before``; else None."""
    now = scrape(controller, "a", keep)
    return now if failures(now) > failures(before) else None


def test_the_refresh_failure_expression_is_true_while_sts_fails_and_false_after_recovery(
    chain: AWSChain, sts: STSProxy, controller: ControllerProcess, tmp_path: Path
) -> None:
    """RotatorRefreshesFailing's expression on four real scrapes: after a refresh failed in an STS
    outage (minute 0) and after its retry failed too (1): true for AWSCredentials; after recovery
    (12) and after one more refresh, requested then and successful (13): false. Nothing asserts
    beforehand that the failure count stood still between the last two scrapes: the expression is
    false only if that refresh counted no failure (a retry still failing, or a success counted as
    one, makes it true) and the expression counts failures only (the window holds a success: the
    second check says so). Broken by the expression reading ``result="failed"`` (never exported:
    false at minute 1; tried) or without its ``result="failure"`` matcher (true at 13)."""
    expr = alert_expr("RotatorRefreshesFailing")
    keep = {"rotator_rotations_total": {"type": "AWSCredentials"}}
    source = {"serviceAccountToken": {"serviceAccountName": "default", "awsRoleArn": ROLE_ARN}}
    chain.aws_policy("sa", ["b"], source)
    chain.wait_condition("policy", "sa", "Ready", "True", "CredentialsReady", timeout=60)
    healthy = scrape(controller, "a", keep)
    sts.set_mode("fail")
    try:
        chain.request_rotation("sa", "alerts-1")
        # The window starts with a scrape that counts a failure already (the failure series exist
        # at 0 from the start, but another test's controller may have counted some).
        before = wait_for(
            lambda: failed_since(controller, healthy, keep),
            timeout=60,
            what="a failed refresh in /metrics",
        )
        failing = wait_for(
            lambda: failed_since(controller, before, keep),
            timeout=60,
            what="another failed refresh (a retry) in /metrics",
        )
    finally:
        sts.set_mode("ok")
    chain.wait_condition(
        "policy", "sa", "Ready", "True", "CredentialsReady", timeout=backoff.CAP * 1.5 + 30
    )
    recovered = scrape(controller, "a", keep)
    chain.request_rotation("sa", "alerts-2")
    again = wait_for(
        lambda: succeeded_since(controller, recovered, keep),
        timeout=60,
        what="a successful refresh after recovery in /metrics",
    )
    minutes: list[Scrape | None] = [before, failing, *[None] * 10, recovered, again]
    evaluate(
        tmp_path,
        minutes,
        [
            {
                "expr": f"count by (type) ({expr})",
                "eval_time": "1m",
                "exp_samples": [{"labels": '{type="AWSCredentials"}', "value": 1}],
            },
            {"expr": expr, "eval_time": "13m", "exp_samples": []},
            {
                "expr": 'count by (type) (increase(rotator_rotations_total{result="success"}[10m]) > 0)',
                "eval_time": "13m",
                "exp_samples": [{"labels": '{type="AWSCredentials"}', "value": 1}],
            },
        ],
    )


def test_the_no_leader_expression_is_true_for_a_replica_that_does_not_lead(
    api: clients.Client, controller: ControllerProcess, tmp_path: Path
) -> None:
    """RotatorNoLeader's expression on real scrapes of two replicas: one leading its Lease
    (minute 0, beside the other: false) and one waiting on a Lease someone else holds (minute 1,
    the leader's target down: true, naming the Lease). Broken by ``max`` read as ``min`` (true
    at minute 0; tried)."""
    expr = alert_expr("RotatorNoLeader")
    lease = f"alerts-standby-{uuid.uuid4().hex[:8]}"
    api.create(
        objects.LEASES,
        {
            "metadata": {"name": lease},
            "spec": {
                "holderIdentity": "another-controller",
                "leaseDurationSeconds": 3600,
                "renewTime": micro_time(time.time()),
                "acquireTime": micro_time(time.time()),
            },
        },
        namespace=manifests.NAMESPACE,
    )
    standby = ControllerProcess(
        controller.kubeconfig,
        controller.workdir / lease,
        env=controller.env,
        args=controller.args,
        lease=lease,
    )
    (controller.workdir / lease).mkdir()
    try:
        standby.start(wait_leading=False)
        wait_for(
            lambda: standby.metric("leader_election_master_status", name=lease) == 0,
            what="the standby reports that it does not lead",
        )
        keep = {"leader_election_master_status": {"name": lease}}
        # the leader's scrape relabelled as this Lease's: what a release with two replicas shows
        leading = {
            k.replace(controller.lease, lease): v for k, v in scrape(controller, "a").items()
        }
        waiting = scrape(standby, "b", keep)
    finally:
        if standby.proc is not None:
            standby.stop()
        with contextlib.suppress(errors.NotFound):
            api.delete(objects.LEASES, lease, namespace=manifests.NAMESPACE)
    assert f'leader_election_master_status{{instance="a", job="{JOB}", name="{lease}"}}' in leading
    down = {series("up", {"job": JOB, "instance": "a"}): 0.0}
    evaluate(
        tmp_path,
        [{**leading, **waiting}, {**down, **waiting}],
        [
            {"expr": expr, "eval_time": "0m", "exp_samples": []},
            {
                "expr": expr,
                "eval_time": "1m",
                "exp_samples": [{"labels": f'{{name="{lease}"}}', "value": 0}],
            },
        ],
    )
