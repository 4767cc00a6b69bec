"""The chart's RotatorRefreshesFailing alert against the real controller in the cluster (issue 37,
item 4): an STS chain served through the in-cluster stand-ins, the STS stand-in made to fail, a
rotation requested; the Deployment's /metrics scraped as Prometheus's ServiceMonitor scrapes it,
and those scrapes evaluated with ``promtool test rules`` (tests/support/alertscrape.py): the
alert's expression is true while STS fails and false again after recovery.

Scraped as a ServiceMonitor does, not through the Service's virtual IP: each ready endpoint of the
metrics Service's EndpointSlices (each replica; the ClusterIP would answer from either, and only
the leader refreshes), over HTTPS on its https port, with a ServiceAccount's bearer token bound
to ``rotator-metrics-reader``, from a Pod in the cluster (the token goes to it on stdin). Each
target's series carry the labels the Prometheus Operator gives them (``job`` the Service,
``instance`` the address, ``namespace``, ``pod``, ``service``, ``endpoint``): so the rule's
``sum by (namespace, type)`` is checked against what it groups by in a real installation."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from controllers.reconcilers import api as rapi
from controllers.runtime import errors, objects
from tests.kind import install
from tests.kind.chains import conditions, policies, sts_chains, wait_all_ready
from tests.kind.cluster import CLUSTERROLEBINDINGS, DEPLOYMENTS, PODS, Cluster, idle_pod, running
from tests.kind.conftest import Configured
from tests.kind.env import KindEnv
from tests.support import backoff
from tests.support.alertscrape import JOB, Scrape, alert_expr, counted_more, evaluate, parse
from tests.support.polling import wait_for

ENDPOINTSLICES = objects.Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice")
BINDING = "kind-suite-alerts-metrics-reader"
SCRAPER = "prometheus"
"""The scraper's Pod and ServiceAccount."""
POLICY = "alerts-000"
"""The one policy of :func:`sts_chains` with the prefix ``alerts``."""
KEEP = {"rotator_rotations_total": {"type": "AWSCredentials"}}
SCRAPE = """
import json, ssl, sys, urllib.error, urllib.request
asked = json.loads(sys.stdin.read())
context = ssl.create_default_context()
context.check_hostname = False
context.verify_mode = ssl.CERT_NONE  # the controller's self-signed certificate
answers = []
for url in asked["urls"]:
    request = urllib.request.Request(url, headers={"Authorization": "Bearer " + asked["token"]})
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            answers.append([answer.status, answer.read().decode()])
    except urllib.error.HTTPError as exc:
        answers.append([exc.code, ""])
    except OSError as exc:
        answers.append([0, type(exc).__name__])
print(json.dumps(answers))
"""


@dataclass(frozen=True)
class Target:
    url: str
    labels: dict[str, str]


def targets(cluster: Cluster) -> list[Target]:
    """The metrics Service's ready endpoints, as Prometheus's endpoints discovery finds them for
    the ServiceMonitor (port ``https``), with the Operator's target labels."""
    found = []
    slices = cluster.items(
        ENDPOINTSLICES,
        namespace=install.NAMESPACE,
        label_selector=f"kubernetes.io/service-name={install.METRICS_SERVICE}",
    )
    for piece in slices:
        (port,) = [p["port"] for p in piece.get("ports") or [] if p.get("name") == "https"]
        for endpoint in piece.get("endpoints") or []:
            if not (endpoint.get("conditions") or {}).get("ready"):
                continue
            address = endpoint["addresses"][0]
            host = f"[{address}]" if ":" in address else address
            labels = {
                "job": JOB,
                "instance": f"{host}:{port}",
                "namespace": install.NAMESPACE,
                "pod": (endpoint.get("targetRef") or {}).get("name", ""),
                "service": install.METRICS_SERVICE,
                "endpoint": "https",
            }
            found.append(Target(f"https://{host}:{port}/metrics", labels))
    return found


class Scraper:
    """A Pod that scrapes every target of the metrics Service at once, as one Prometheus
    scrape round."""

    def __init__(self, cluster: Cluster, namespace: str, token: str) -> None:
        self.cluster, self.namespace, self._token = cluster, namespace, token

    def answers(self) -> list[tuple[Target, int, str]]:
        """(target, HTTP status, body) of each target; the token goes on stdin."""
        found = targets(self.cluster)
        asked = json.dumps({"token": self._token, "urls": [t.url for t in found]})
        out = self.cluster.exec_python(self.namespace, SCRAPER, SCRAPE, stdin=asked)
        answers = json.loads(out)
        return [(t, int(status), body) for t, (status, body) in zip(found, answers, strict=True)]

    def scrape(self) -> Scrape:
        """One round: every target's series (:func:`tests.support.alertscrape.parse`); each
        target answers 200, as it does once the binding is known (:func:`scraper`)."""
        out: Scrape = {}
        answers = self.answers()
        assert answers, f"no ready endpoint of {install.METRICS_SERVICE}"
        for target, status, body in answers:
            assert status == 200, f"{target.url}: {status} {body}"
            out.update(parse(body, target.labels, KEEP))
        return out


@pytest.fixture(scope="module")
def scraper(
    kind_env: KindEnv,
    cluster: Cluster,
    configured: Configured,
    namespaces: Callable[[str], str],
) -> Iterator[Scraper]:
    """The scraper in a namespace of the module's (where the chain lives too), its ServiceAccount
    bound before its first request (a controller caches a denial for 30 s), and every target
    answering it."""
    namespace = namespaces("alerts")
    cluster.api.create(
        objects.SERVICEACCOUNTS, {"metadata": {"name": SCRAPER}}, namespace=namespace
    )
    cluster.api.create(CLUSTERROLEBINDINGS, install.reader_binding(BINDING, namespace, SCRAPER))
    try:
        cluster.api.create(PODS, idle_pod(SCRAPER, kind_env.image), namespace=namespace)
        wait_for(lambda: running(cluster, namespace, SCRAPER), timeout=90, what="scraper Pod")
        made = Scraper(cluster, namespace, cluster.token(namespace, SCRAPER))
        wait_for(
            lambda: every_target_answers(cluster, made),
            timeout=90,
            interval=1.0,
            what="200 from every endpoint of the metrics Service",
        )
        yield made
    finally:
        with contextlib.suppress(errors.NotFound):
            cluster.api.delete(CLUSTERROLEBINDINGS, BINDING)


def every_target_answers(cluster: Cluster, scraper: Scraper) -> bool:
    """Every replica's endpoint is ready (as many as the Deployment asks for), and each answers
    200."""
    deployment = cluster.get(DEPLOYMENTS, install.DEPLOYMENT, install.NAMESPACE) or {}
    replicas = (deployment.get("spec") or {}).get("replicas", 1)
    answers = scraper.answers()
    return len(answers) == replicas and all(status == 200 for _, status, _ in answers)


def request_rotation(cluster: Cluster, namespace: str, value: str) -> None:
    """As a user asks for one: a new ``rotator.dev/rotate-requested-at`` on the policy."""
    cluster.api.patch(
        rapi.POLICIES,
        POLICY,
        {"metadata": {"annotations": {rapi.ROTATE_REQUESTED_ANNOTATION: value}}},
        namespace=namespace,
    )


def credentials_ready(cluster: Cluster, namespace: str) -> bool:
    ready = conditions(cluster.get(rapi.POLICIES, POLICY, namespace) or {}).get("Ready") or {}
    return ready.get("status") == "True" and ready.get("reason") == rapi.REASON_CREDENTIALS_READY


def answered(cluster: Cluster, namespace: str) -> str | None:
    """The rotation request the policy's derived Secret answers (rotator writes it there)."""
    try:  # its metadata only: the test has no use for the credential
        secret = cluster.api.get(
            objects.SECRETS,
            rapi.derived_secret_name(POLICY),
            namespace=namespace,
            metadata_only=True,
        )
    except errors.NotFound:
        return None
    annotations: dict[str, str] = (secret.get("metadata") or {}).get("annotations") or {}
    return annotations.get(rapi.ANSWERED_REQUEST_ANNOTATION)


def test_the_refresh_failure_expression_is_true_while_sts_fails_and_false_after_recovery(
    cluster: Cluster,
    configured: Configured,
    scraper: Scraper,
    tmp_path: Path,
    figure: Callable[..., None],
) -> None:
    """RotatorRefreshesFailing's expression on four scrape rounds of both replicas: after a
    requested refresh failed in an STS outage (minute 0) and after its retry failed too (1): true
    for AWSCredentials in the controller's namespace; after recovery (12) and after one more
    refresh, requested then and successful (13): false, while the window holds that success.
    As tests/e2e/test_alerts_scrape.py's twin, which says what breaks it; here also: a rule
    grouping by a label the scrape does not carry (the namespace the Operator adds) answers
    other labels at minute 1."""
    started = time.monotonic()
    standins = configured.standins
    expr = alert_expr("RotatorRefreshesFailing")
    namespace = scraper.namespace
    docs = sts_chains(namespace, 1, prefix="alerts")
    standins.register(policies(docs), [])
    cluster.apply(docs)
    wait_all_ready(cluster, namespace, timeout=120, what="the chain Ready")
    healthy = scraper.scrape()
    standins.set_mode("sts", "fail")
    try:
        failed_at = time.monotonic()
        request_rotation(cluster, namespace, "alerts-1")
        # The window starts with a round that counts a failure already (the failure series exist
        # at 0 from the start; earlier modules may have counted some).
        before = wait_for(
            counted_more(scraper.scrape, healthy, "failure"),
            timeout=60,
            interval=0.5,
            what="a failed refresh in /metrics",
        )
        failing = wait_for(
            counted_more(scraper.scrape, before, "failure"),
            timeout=60,
            interval=0.5,
            what="another failed refresh (a retry) in /metrics",
        )
    finally:
        standins.set_mode("sts", "ok")
    healed_at = time.monotonic()
    wait_for(
        lambda: credentials_ready(cluster, namespace),
        timeout=backoff.CAP * 1.5 + 30,
        interval=0.5,
        what=f"policy {POLICY} Ready again (CredentialsReady)",
    )
    ready_seconds = time.monotonic() - healed_at
    # Ready stays True through the outage (the credential is still valid), so Ready says nothing
    # of the retries: the recovery round comes after the derived Secret answers the outage's
    # request, when every attempt of this policy until then is counted (the count comes before
    # the write) and none sent before the heal can count its failure inside minute 13's window.
    wait_for(
        lambda: answered(cluster, namespace) == "alerts-1",
        timeout=backoff.CAP * 1.5 + 30,
        interval=0.5,
        what=f"policy {POLICY}'s derived Secret answering the outage's rotation request",
    )
    recovered = scraper.scrape()
    request_rotation(cluster, namespace, "alerts-2")
    again = wait_for(
        counted_more(scraper.scrape, recovered, "success"),
        timeout=60,
        interval=0.5,
        what="a successful refresh after recovery in /metrics",
    )
    group = f'{{namespace="{install.NAMESPACE}", type="AWSCredentials"}}'
    checks: list[dict[str, Any]] = [
        {
            "expr": f"count by (namespace, type) ({expr})",
            "eval_time": "1m",
            "exp_samples": [{"labels": group, "value": 1}],
        },
        {"expr": expr, "eval_time": "13m", "exp_samples": []},
        {  # false with the failure series still scraped, not for want of them
            "expr": "count by (namespace, type) "
            '(sum by (namespace, type) (rotator_rotations_total{result="failure"}) > 0)',
            "eval_time": "13m",
            "exp_samples": [{"labels": group, "value": 1}],
        },
        {
            "expr": 'count by (namespace, type) (increase(rotator_rotations_total{result="success"}[10m]) > 0)',
            "eval_time": "13m",
            "exp_samples": [{"labels": group, "value": 1}],
        },
    ]
    minutes: list[Scrape | None] = [before, failing, *[None] * 10, recovered, again]
    evaluate(tmp_path, minutes, checks)
    figure(
        "alerts",
        seconds_sts_failing=healed_at - failed_at,
        seconds_heal_to_ready=ready_seconds,
        seconds_test=time.monotonic() - started,
    )
