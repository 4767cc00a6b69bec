"""The alerts' expressions against real scrapes of the running controller (``rotator run`` as its
own process), evaluated by ``promtool test rules`` (tests/support/alertscrape.py says how a
scrape becomes promtool's input and what the minutes mean). tests/kind/test_alerts.py does the
refresh-failure case against the Deployment in the kind cluster, scraped through its Service's
endpoints from a Pod."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from controllers.runtime import client as clients
from controllers.runtime import errors, objects
from rotator_devkit.devenv import manifests
from rotator_devkit.devenv.standins.sts import STSProxy
from tests.e2e.conftest import ROLE_ARN
from tests.support import alertscrape, backoff
from tests.support.alertscrape import JOB, Scrape, alert_expr, counted_more, evaluate, series
from tests.support.chain import AWSChain
from tests.support.controller import ControllerProcess
from tests.support.polling import wait_for
from tests.support.reconcilelog import entries

# The first test to run may build promtool (hack/promtool.sh; minutes cold, shared through its lock
# with tests/unit/test_alerts.py's worker).
pytestmark = pytest.mark.timeout(1500)


def scrape(
    controller: ControllerProcess, instance: str, keep: alertscrape.Keep | None = None
) -> Scrape:
    """The controller's /metrics as Prometheus stores it from target ``instance``
    (:func:`tests.support.alertscrape.parse`)."""
    assert controller.proc is not None
    status, text = controller.proc.http(controller.proc.metrics_port, "/metrics")
    assert status == 200, status
    return alertscrape.parse(text, {"job": JOB, "instance": instance}, keep)


@contextlib.contextmanager
def refreshes_told(controller: ControllerProcess) -> Iterator[None]:
    """An assertion failing inside says which refreshes the controller logged (each attempt's
    outcome, policy and time): a failure counted where none was expected names its policy and
    reason. Only :data:`REFRESH_FIELDS` are kept, which hold fixed words, the policy's key and
    times; the provider's message (``error``) is left out."""
    try:
        yield
    except AssertionError as exc:
        lines = [
            {k: v for k, v in entry.items() if k in REFRESH_FIELDS}
            for _, entry in entries(controller.logs())
            if entry.get("event") in ("policy.credentials_failed", "policy.credentials_minted")
        ]
        raise AssertionError(f"{exc}\nthe controller's refreshes: {lines}") from None


REFRESH_FIELDS = ("event", "namespace", "name", "reason", "why", "attempts", "timestamp")


def micro_time(at: float) -> str:
    """A Lease's MicroTime."""
    return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.fixture
def alone(
    chain: AWSChain, controller: ControllerProcess, tmp_path: Path
) -> Iterator[ControllerProcess]:
    """``rotator run`` in place of the session's controller, watching only the chain's namespace:
    its ``rotator_rotations_total`` counts this test's refreshes only. The counter has no
    namespace label, and the session's controller also refreshes the AWS policies earlier tests
    on its worker left behind: another policy's failure can land between minute 12's scrape and
    minute 13's, and another policy's success can end the recovery wait below before this
    policy's last failing retry is counted. CI counted one failure there (1.5 in the window) with
    that wait in place; which policy's, its output could not say. Afterwards its logs and
    metrics hold no secret value, and the session's controller runs again."""
    own = ControllerProcess(
        controller.kubeconfig,
        tmp_path,
        env=controller.env,
        args=(*controller.args, "--namespace", chain.ns),
        lease=controller.lease,
    )
    try:
        if controller.proc is not None:
            controller.stop()
        yield own.start()
        assert own.proc is not None
        assert own.proc.popen.poll() is None, f"it exited: {own.logs()[-3000:]}"
        metrics = own.proc.http(own.proc.metrics_port, "/metrics")[1]
        assert not chain.leaks(own.logs(), metrics=metrics)
    finally:
        try:
            if own.proc is not None:
                own.stop()
        finally:  # whatever failed: the later tests of this worker need the session's controller
            if controller.proc is None:
                controller.start()


def test_the_refresh_failure_expression_is_true_while_sts_fails_and_false_after_recovery(
    chain: AWSChain, sts: STSProxy, alone: ControllerProcess, tmp_path: Path
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
    healthy = scrape(alone, "a", keep)
    sts.set_mode("fail")
    try:
        chain.request_rotation("sa", "alerts-1")
        # The window starts with a scrape that counts a failure already: minute 1 is true on the
        # retry's failure alone.
        before = wait_for(
            counted_more(lambda: scrape(alone, "a", keep), healthy, "failure"),
            timeout=60,
            what="a failed refresh in /metrics",
        )
        failing = wait_for(
            counted_more(lambda: scrape(alone, "a", keep), before, "failure"),
            timeout=60,
            what="another failed refresh (a retry) in /metrics",
        )
    finally:
        sts.set_mode("ok")
    chain.wait_condition(
        "policy", "sa", "Ready", "True", "CredentialsReady", timeout=backoff.CAP * 1.5 + 30
    )
    # Ready stays True through the outage (the credential is still valid): the recovery scrape is
    # the one that counts the requested rotation's retry succeeding, so no retry of this policy
    # sent before the heal can count its failure after it (other policies: ``alone``)
    recovered = wait_for(
        counted_more(lambda: scrape(alone, "a", keep), failing, "success"),
        timeout=backoff.CAP * 1.5 + 30,
        what="the requested rotation's retry succeeding after the outage, in /metrics",
    )
    chain.request_rotation("sa", "alerts-2")
    again = wait_for(
        counted_more(lambda: scrape(alone, "a", keep), recovered, "success"),
        timeout=60,
        what="a successful refresh after recovery in /metrics",
    )
    minutes: list[Scrape | None] = [before, failing, *[None] * 10, recovered, again]
    with refreshes_told(alone):
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
