"""Every metric the chart's alerts and Grafana dashboard name is in a real scrape of the running
controller (``rotator run`` as its own process, its /metrics over HTTP), taken after a policy's
credential has been minted and a refresh of it has failed (STS down), and a Route with a
Deployment in ``rolloutRestartTargets`` has rolled it out for the new credential: the failure
series, the provider's error codes, the histograms' ``_bucket`` series and the Route's rollout
series are there then. PromQL names a
histogram's series (``..._bucket``), a counter's (``..._total``): the scrape's sample names are
compared, not its family names. ``up`` is Prometheus's own and never scraped."""

from __future__ import annotations

import contextlib
from typing import Any

from prometheus_client import parser

from controllers.reconcilers import api as rapi
from controllers.reconcilers import restarts
from rotator_devkit.devenv.standins.sts import STSProxy
from tests.e2e.conftest import ROLE_ARN
from tests.support import monitoring
from tests.support.chain import AWSChain
from tests.support.controller import ControllerProcess
from tests.support.polling import wait_for

VALUE = "__value__"  # each sample's value, among its labels
ROLLOUT_TIMEOUT = restarts.DEBOUNCE_SECONDS + 60


def gateway(name: str, route: str) -> dict[str, Any]:
    """A Deployment that wants no pod, opted in to Route ``route``'s rollouts."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {
                    "labels": {"app": name},
                    "annotations": {restarts.template_annotation(route): ""},
                },
                "spec": {"containers": [{"name": "gateway", "image": "gateway:test"}]},
            },
        },
    }


def samples(controller: ControllerProcess) -> dict[str, list[dict[str, str]]]:
    """The scrape's sample names, each with the label sets it has (and the value, under VALUE)."""
    assert controller.proc is not None
    status, text = controller.proc.http(controller.proc.metrics_port, "/metrics")
    assert status == 200, status
    found: dict[str, list[dict[str, str]]] = {}
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append({**sample.labels, VALUE: str(sample.value)})
    return found


def failed_once(
    scrape: dict[str, list[dict[str, str]]],
) -> dict[str, list[dict[str, str]]] | None:
    """The scrape, once it counts a failed AWSCredentials refresh; else None."""
    rotations = scrape.get("rotator_rotations_total", [])
    # the failure series exist at 0 from the start (CredentialMetrics): a failure is a count above 0
    failed = {r["type"] for r in rotations if r["result"] == "failure" and float(r[VALUE]) > 0}
    return scrape if "AWSCredentials" in failed else None


def test_every_metric_the_alerts_and_the_dashboard_name_is_in_a_real_scrape(
    chain: AWSChain, sts: STSProxy, controller: ControllerProcess
) -> None:
    """Broken by a panel or rule naming a metric the controller does not export (a misspelling:
    ``rotator_rotation_total``), or one that exists only under another name
    (``workqueue_queue_duration_seconds`` without ``_bucket`` in a histogram_quantile): both
    tried, both listed as missing."""
    named = monitoring.named_metrics()
    assert "rotator_rotations_total" in named
    assert "controller_runtime_reconcile_time_seconds_bucket" in named
    assert "rotator_route_rollouts_pending" in named
    assert "rotator_provider_request_duration_seconds_bucket" in named
    chain.backend("b")
    chain.route("r", ["b"])
    # a Route that rolls a Deployment out: its first configuration (the backend not ready yet)
    # is recorded, the one with the minted credential rolled out after the debounce window
    chain.api.create(restarts.WORKLOADS["Deployment"], gateway("gw", "rolled"), namespace=chain.ns)
    chain.create(
        "route",
        "rolled",
        {
            "rules": [{"backendRefs": [{"name": "b"}]}],
            "rolloutRestartTargets": [{"kind": "Deployment", "name": "gw"}],
        },
    )
    chain.wait_condition(
        "route", "rolled", rapi.ROLLOUT_RESTARTED, "True", rapi.REASON_FIRST_CONFIGURATION
    )
    source = {"serviceAccountToken": {"serviceAccountName": "default", "awsRoleArn": ROLE_ARN}}
    chain.aws_policy("sa", ["b"], source)
    chain.wait_condition("policy", "sa", "Ready", "True", "CredentialsReady", timeout=60)
    chain.wait_condition("route", "r", "Programmed", "True", timeout=60)
    chain.wait_condition(
        "route", "rolled", rapi.ROLLOUT_RESTARTED, "True", rapi.REASON_RESTARTED, ROLLOUT_TIMEOUT
    )
    rolled = samples(controller)
    pending = [
        r
        for r in rolled.get("rotator_route_rollouts_pending", [])
        if (r["namespace"], r["route"]) == (chain.ns, "rolled")
    ]
    assert [r[VALUE] for r in pending] == ["0.0"], "rolled out: nothing pending"
    assert any(
        r["kind"] == "Deployment" and r["result"] == "success" and float(r[VALUE]) >= 1
        for r in rolled["rotator_route_rollouts_total"]
    )
    assert any(float(r[VALUE]) >= 2 for r in rolled["rotator_route_config_writes_total"])
    before = samples(controller)["rotator_rotations_total"]
    # Each minted type's failure series is there from the controller's start (at 0 until a
    # failure; another test sharing this controller may have counted some), so increase() counts
    # a first failure: GCP and Azure ones although no test here has failed such a refresh.
    assert {"AWSCredentials", "GCPCredentials", "AzureCredentials"} <= {
        r["type"] for r in before if r["result"] == "failure"
    }, "the failure series exist before any failure, so increase() counts the first one"
    sts.set_mode("fail")
    try:
        chain.request_rotation("sa", "metrics-1")
        chain.wait_condition("policy", "sa", "Ready", "True", "RotationFailed", timeout=60)
        scrape = wait_for(
            lambda: failed_once(samples(controller)),
            what="a failed AWSCredentials refresh in /metrics",
        )
    finally:
        with contextlib.suppress(Exception):
            sts.set_mode("ok")
    assert {"success", "failure"} <= {
        r["result"] for r in scrape["rotator_rotations_total"] if r["type"] == "AWSCredentials"
    }
    # exported by sharded replicas only (--shards > 1): tests/e2e/test_shards.py finds them in
    # a sharded replica's scrape
    missing = sorted(named - scrape.keys() - monitoring.SHARDED_ONLY)
    assert not missing, f"named by the rules or the dashboard, not in /metrics: {missing}"
