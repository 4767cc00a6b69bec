"""The real LiteLLM proxy as a Deployment in the cluster (manifests/litellm.yaml: the dev-kit
image, the route config Secret mounted, the rolling update that keeps a Ready proxy) serves a
steady load with the credentials rotator mints, through three rotations of each credential type
LiteLLM supports, with no failed request and no upstream request carrying an expired credential
— the test of tests/e2e/test_litellm.py, where the rollout is the Deployment controller's and
the kubelet's, not the test's.

The model API stand-ins (OpenAI, Bedrock runtime, Azure OpenAI, Vertex AI) run in the stand-ins' Pod and
check each request against what the issuers there issued; the load comes from a Pod in the test
namespace, through the proxy's Service. LiteLLM reads config.yaml only at start (a Pod's start
imports it: seconds of CPU), so the stand-ins mint credentials of :data:`LIFETIME` s for this
test, renewed with two thirds left: room for rotator's rollout window and a new Pod's start.
"""

from __future__ import annotations

import json
import secrets
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from controllers.reconcilers import api as rapi
from controllers.runtime import objects
from rotator_devkit.devenv.standins import upstreams
from rotator_devkit.incluster import settings
from tests.kind.chains import CALLER, KINDS, ROLE_ARN, TEST_KEYS, caller, new_api_key
from tests.kind.cluster import DEPLOYMENTS, PODS, Cluster, idle_pod
from tests.kind.conftest import Configured
from tests.kind.env import KindEnv
from tests.support import gatewayload as gl
from tests.support import leaks
from tests.support.polling import wait_for

MANIFEST = Path(__file__).parent / "manifests" / "litellm.yaml"
LIFETIME = 150
"""Seconds the stand-ins' credentials live during this test (60 for the rest of the suite)."""
WATCH = 420.0
"""Longest the load runs: three rotations of :data:`LIFETIME` / 3 s each, and their rollouts."""
LOAD_POD = "load"
REPLICASETS = objects.Resource("apps", "v1", "replicasets", "ReplicaSet")
LOAD_MOUNT = "/var/run/load"
LOAD = r"""
import json, os, sys, threading, time, urllib.error, urllib.request
url, rate, models, longest = sys.argv[1], float(sys.argv[2]), sys.argv[3].split(","), float(sys.argv[4])
key = open(sys.argv[5]).read().strip()
lock, results, workers = threading.Lock(), [], []
def one(model):
    started = time.time()
    status, text = 0, "no outcome"
    try:
        body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})
        request = urllib.request.Request(url, data=body.encode(), headers={
            "Authorization": "Bearer " + key, "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            answer.read()
            status, text = answer.status, ""
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read()[:300].decode(errors="replace")
    except BaseException as exc:
        status, text = 0, f"{type(exc).__name__}: {str(exc)[:200]}"
    finally:
        with lock:
            results.append([model, started, status, text])
print("started", flush=True)
n, end = 0, time.monotonic() + longest
while time.monotonic() < end and not os.path.exists("/tmp/stop"):
    worker = threading.Thread(target=one, args=(models[n % len(models)],))
    n += 1
    workers.append(worker)
    worker.start()
    time.sleep(1 / rate)
for worker in workers:
    worker.join(60)
with lock:
    print(json.dumps({"started": n, "results": results}), flush=True)
"""
"""The load Pod's command: ``rate`` requests a second through the proxy's Service, over
``models`` in turn, with the master key read from a mounted Secret (never on a command line),
until ``/tmp/stop`` exists or ``longest`` seconds have passed; then how many requests it started
and every finished request's ``[model, start, status, error text]`` as one JSON line of its log.
Whatever a request raises is its outcome (status 0): a request that records nothing, or is still
running after the join, is missing from the results, which the test counts. A Pod of its own, not a long
``kubectl exec``: an exec stream through the API server can drop (its websocket ping timed out
on a busy node) and take the results with it."""


def documents(namespace: str, image: str, *, keys: dict[str, str]) -> list[dict[str, Any]]:
    """Everything the test applies: the caller's ServiceAccount, the Secrets, the four
    policies, backends at the stand-ins' model APIs, the Route, and LiteLLM's Deployment."""

    def obj(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": rapi.API_VERSION,
            "kind": kind,
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }

    def secret(name: str, data: dict[str, str]) -> dict[str, Any]:
        meta = {"name": name, "namespace": namespace}
        return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "stringData": data}

    openai = gl.POLICIES["APIKey"]
    docs = [
        caller(namespace),
        secret("openai-key", {"apiKey": keys["api"]}),
        secret("azure-app", {"client-secret": keys["azure"]}),
        secret("litellm-master-key", {"key": keys["master"]}),
        obj(
            "BackendSecurityPolicy",
            openai,
            {
                "type": "APIKey",
                "targetRefs": [{"name": openai}],
                "apiKey": {"secretRef": {"name": "openai-key"}},
            },
        ),
        obj("BackendSecurityPolicy", "bedrock", gl.bedrock_spec(ROLE_ARN, CALLER)),
        obj("BackendSecurityPolicy", "azure", gl.azure_spec(f"llm-{namespace}", "azure-app")),
        obj("BackendSecurityPolicy", "vertex", gl.vertex_spec(CALLER)),
        *(
            obj(
                "ServiceBackend",
                gl.POLICIES[kind],
                gl.backend_spec(gl.POLICIES[kind], settings.PUBLIC_HOST, settings.PORTS[upstream]),
            )
            for kind, upstream in gl.UPSTREAMS.items()
        ),
        obj("Route", gl.ROUTE, gl.route_spec()),
    ]
    for doc in yaml.safe_load_all(MANIFEST.read_text().replace("DEVKIT_IMAGE", image)):
        doc["metadata"]["namespace"] = namespace
        docs.append(doc)
    return docs


class Load:
    """The load Pod: started, then stopped for its results."""

    def __init__(self, cluster: Cluster, namespace: str, image: str) -> None:
        self.cluster, self.namespace = cluster, namespace
        url = f"http://{gl.DEPLOYMENT}.{namespace}.svc:4000/v1/chat/completions"
        args = [url, str(gl.RATE), ",".join(gl.MODELS), str(WATCH + 60), f"{LOAD_MOUNT}/key"]
        pod = idle_pod(
            LOAD_POD,
            image,
            command=["python", "-c", LOAD, *args],
            volumes=[
                {"name": "key", "secret": {"secretName": "litellm-master-key"}},
                {"name": "tmp", "emptyDir": {}},
            ],
            mounts=[
                {"name": "key", "mountPath": LOAD_MOUNT, "readOnly": True},
                {"name": "tmp", "mountPath": "/tmp"},
            ],
        )
        pod["metadata"]["namespace"] = namespace
        pod["spec"]["restartPolicy"] = "Never"
        cluster.apply([pod])
        wait_for(
            lambda: "started" in self._log(), timeout=120, interval=0.5, what="the load started"
        )
        self.results: list[tuple[str, float, int]] = []
        self.failures: list[tuple[str, int, str]] = []
        self.started = 0
        self.log = ""
        """The load Pod's log, once stopped."""
        """Requests the load Pod started: every one must be among :attr:`results`."""

    def _log(self) -> str:
        done = self.cluster.kubectl("logs", "-n", self.namespace, LOAD_POD, check=False)
        return done.stdout if done.returncode == 0 else ""

    def stop(self) -> None:
        """Tells the load to stop, waits for its Pod to end, and reads its results."""
        self.cluster.exec_python(self.namespace, LOAD_POD, "open('/tmp/stop', 'w').close()")

        def ended() -> str | None:
            pod = self.cluster.get(PODS, LOAD_POD, self.namespace) or {}
            phase = (pod.get("status") or {}).get("phase")
            return phase if phase in ("Succeeded", "Failed") else None

        phase = wait_for(ended, timeout=120, interval=0.5, what="the load Pod ended")
        self.log = self._log()
        lines = self.log.strip().splitlines()
        assert phase == "Succeeded", lines[-20:]
        outcome = json.loads(lines[-1])
        self.started = int(outcome["started"])
        for model, started, status, text in outcome["results"]:
            self.results.append((model, started, status))
            if status != 200:
                self.failures.append((model, status, text))


def seen(configured: Configured, since: float) -> dict[str, list[upstreams.Seen]]:
    """What each upstream stand-in received from ``since`` (a wall-clock time) on, by the
    credential type it serves: the stand-ins' Pod outlives a test, and a kept cluster's has
    served others."""
    rows = configured.standins.admin("GET", "upstreams")
    return {
        kind: [s for s in map(lambda row: upstreams.Seen(*row), rows[name]) if s.at >= since]
        for kind, name in gl.UPSTREAMS.items()
    }


def proxies(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    """The proxy's Pods that exist (a terminating one may still answer requests)."""
    selector = "app.kubernetes.io/name=litellm"
    return cluster.items(PODS, namespace=namespace, label_selector=selector)


def pod_hash(pod: dict[str, Any]) -> str:
    return str((pod["metadata"].get("annotations") or {}).get(gl.ANNOTATION, ""))


def written_by_the_gateway_and_controller(
    cluster: Cluster, namespace: str, load: Load
) -> dict[str, str]:
    """Where a credential must not show, by place: the namespace's Events, the statuses of its
    rotator objects, the logs of the proxy Pods still there, and the load's log (the gateway's
    answers, errors included)."""
    places = {
        "events": json.dumps(cluster.items(objects.EVENTS, namespace=namespace)),
        "load log": load.log,
    }
    for kind, resource in KINDS.items():
        items = cluster.items(resource, namespace=namespace)
        places[f"{kind} status"] = json.dumps([i.get("status") for i in items])
    for pod in proxies(cluster, namespace):
        name = pod["metadata"]["name"]
        done = cluster.kubectl("logs", "-n", namespace, name, "--all-containers", check=False)
        places[f"proxy {name} log"] = done.stdout + done.stderr
    return places


@pytest.fixture
def lifetime(configured: Configured) -> Any:
    configured.standins.admin("POST", "lifetime", {"seconds": LIFETIME})
    yield LIFETIME
    configured.standins.admin("POST", "lifetime", {"seconds": configured.standins.lifetime})


@pytest.mark.timeout(900)
def test_litellm_deployment_serves_every_credential_type_across_rotations_with_no_failed_request(
    cluster: Cluster,
    configured: Configured,
    kind_env: KindEnv,
    namespaces: Callable[[str], str],
    lifetime: int,
    figure: Callable[..., None],
) -> None:
    ns = namespaces("litellm")
    since = time.time()
    standins = configured.standins
    keys = {
        "api": new_api_key("litellm-old"),
        "api-new": new_api_key("litellm-new"),
        "azure": new_api_key("litellm-azure-app"),
        "master": "sk-kind-litellm-master-" + secrets.token_hex(16),
    }
    TEST_KEYS.add(keys["master"])
    docs = documents(ns, kind_env.devkit_image, keys=keys)
    policies = [d for d in docs if d["kind"] == "BackendSecurityPolicy"]
    standins.register(policies, [d for d in docs if d["kind"] == "Secret"])
    standins.admin("POST", "accept", {"keys": [keys["api"]]})
    started = time.monotonic()
    cluster.apply(docs)

    def translated() -> bool:
        route = cluster.get(KINDS["route"], gl.ROUTE, ns) or {}
        conditions = (route.get("status") or {}).get("conditions") or []
        return any(c["type"] == rapi.TRANSLATED and c["status"] == "True" for c in conditions)

    wait_for(translated, timeout=120, interval=0.5, what="the Route Translated")
    config_secret = rapi.route_config_secret_name(gl.ROUTE)
    wait_for(
        lambda: gl.complete(gl.config_text(cluster.get(objects.SECRETS, config_secret, ns))),
        timeout=120,
        interval=0.5,
        what="a configuration with every backend",
    )

    def available() -> bool:
        deployment = cluster.get(DEPLOYMENTS, gl.DEPLOYMENT, ns) or {}
        return bool((deployment.get("status") or {}).get("availableReplicas"))

    wait_for(available, timeout=300, interval=1, what="the LiteLLM Deployment available")
    seconds_to_serving = time.monotonic() - started
    load = Load(cluster, ns, kind_env.devkit_image)
    rotations: gl.Rotations = {t: [] for t in gl.MODELS.values()}
    has_new_key: dict[str, bool] = {}
    """Config hash → whether its configuration holds the new API key."""
    rotated_key = retired = False
    try:
        deadline = time.monotonic() + WATCH
        while time.monotonic() < deadline:
            for kind, policy in gl.POLICIES.items():
                secret = cluster.get(objects.SECRETS, rapi.derived_secret_name(policy), ns)
                if (value := gl.record(rotations, kind, secret)) is not None:
                    TEST_KEYS.add(value)
            config = cluster.get(objects.SECRETS, config_secret, ns)
            if config is not None:
                digest = (config["metadata"].get("annotations") or {}).get(
                    rapi.CONFIG_HASH_ANNOTATION, ""
                )
                has_new_key.setdefault(digest, keys["api-new"] in (gl.config_text(config) or ""))
            if not rotated_key and len(rotations["AWSCredentials"]) >= 2:
                # the API key's rotation, as OpenAI allows it: both keys valid, then the old one
                # retired once no proxy that could send it is left
                standins.admin("POST", "accept", {"keys": [keys["api"], keys["api-new"]]})
                key = {"name": "openai-key", "namespace": ns}
                new = {"stringData": {"apiKey": keys["api-new"]}}
                cluster.apply([{"apiVersion": "v1", "kind": "Secret", "metadata": key, **new}])
                rotated_key = True
            pods = proxies(cluster, ns)
            if (
                rotated_key
                and not retired
                and pods
                and all(has_new_key.get(pod_hash(p), False) for p in pods)
            ):
                standins.admin("POST", "accept", {"keys": [keys["api-new"]]})
                retired = True
            if retired and gl.all_served(rotations, seen(configured, since)):
                break
            time.sleep(1)  # polling the cluster, bounded by the deadline
    finally:
        load.stop()
    received = seen(configured, since)
    restarts = len(cluster.items(REPLICASETS, namespace=ns)) - 1
    title = (
        f"LiteLLM on kind: {restarts} rollouts of its Deployment (it reads config.yaml once); "
        f"first request served {seconds_to_serving:.1f} s after apply"
    )
    printed = gl.report(title, load.results, load.failures, rotations, received)
    print(printed)
    # what the gateway and the controller wrote where a user looks: the namespace's Events, the
    # rotator objects' statuses, the proxy Pods' logs and what the gateway answered the load
    # (the controller's logs: every container's, scanned at the session's end, conftest.py)
    scanner = leaks.Scanner({"the stand-ins": standins.issued(), "the test": TEST_KEYS})
    assert scanner.leaks(written_by_the_gateway_and_controller(cluster, ns, load)) == []
    assert len(load.results) == load.started > 0, (
        f"{load.started} requests started, {len(load.results)} with an outcome"
    )
    assert load.failures == [], Counter((m, st, b[:160]) for m, st, b in load.failures)
    gl.check_upstreams(received)
    assert retired, "the old API key was never retired"
    for kind, n in gl.WANTED.items():
        assert gl.served(rotations[kind], received[kind]) >= n, (kind, printed)
    figure(
        "litellm_kind",
        requests=len(load.results),
        failed=len(load.failures),
        rollouts=restarts,
        first_served_after_apply_s=round(seconds_to_serving, 1),
    )
    for kind, measured in gl.per_type(load.results, load.failures, rotations, received).items():
        verdicts = ",".join(f"{v}:{n}" for v, n in sorted(measured.pop("verdicts").items()))
        figure(f"litellm_kind_{kind}", **measured, verdicts=verdicts)
