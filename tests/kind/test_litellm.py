"""Two gateways as Deployments in the cluster serve a steady load each with the credentials
rotator mints, through the same rotations, with no failed request and no upstream request
carrying an expired credential:

* the real LiteLLM proxy (manifests/litellm.yaml: the dev-kit image, the route config Secret
  mounted, the rolling update that keeps a Ready proxy), through three rotations of each
  credential type LiteLLM supports — the test of tests/e2e/test_litellm.py, where the rollout is
  the Deployment controller's and the kubelet's, not the test's;
* Envoy (manifests/envoy.yaml: the same image's ``envoy``, run in the mounted Secret of the
  Route ``spec.output.format: Envoy`` of config/samples/envoy.yaml), which reloads a credential
  file when the kubelet swaps the volume's ``..data``: at least two rotations of every type reach
  the upstreams through the one Pod it started with — restartCount 0, one ReplicaSet, no
  rollout. Its rotation → first use includes the kubelet's sync of the Secret volume, the figure
  docs/operations.md quotes.

Envoy has policies, backends and an API key of its own (``envoy-*``), so that the stand-ins'
records, which name a credential by its label and not by who sent it, tell its requests from
LiteLLM's. One namespace and one stretch of rotations for both: a test of its own would add its
minutes of rotations to a stage near its time budget.

The model API stand-ins (OpenAI, Bedrock runtime, Azure OpenAI, Vertex AI) run in the stand-ins' Pod and
check each request against what the issuers there issued; the load comes from a Pod in the test
namespace, through the proxy's Service. LiteLLM reads config.yaml only at start (a Pod's start
imports it: seconds of CPU), so the stand-ins mint credentials of :data:`LIFETIME` s for this
test, renewed with two thirds left: room for rotator's rollout window and a new Pod's start.
"""

from __future__ import annotations

import contextlib
import functools
import json
import secrets
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from controllers.reconcilers import api as rapi
from controllers.reconcilers.route.formats import envoy as envoy_format
from controllers.runtime import objects
from rotator_devkit.devenv.standins import upstreams
from rotator_devkit.incluster import settings
from tests.kind.chains import CALLER, KINDS, ROLE_ARN, TEST_KEYS, caller, new_api_key
from tests.kind.cluster import DEPLOYMENTS, PODS, REPO, Cluster, CommandFailed, idle_pod
from tests.kind.conftest import Configured
from tests.kind.env import KindEnv
from tests.support import gatewayload as gl
from tests.support import leaks
from tests.support.polling import Timeout, wait_for

MANIFEST = Path(__file__).parent / "manifests" / "litellm.yaml"
ENVOY_MANIFEST = Path(__file__).parent / "manifests" / "envoy.yaml"
ENVOY_SAMPLE = REPO / "config" / "samples" / "envoy.yaml"
ENVOY = "envoy"
"""The Envoy Route (the sample's name, whose config Secret the manifest mounts), Deployment and
Service."""
ENVOY_MODELS = {
    "gpt-4o-mini": "APIKey",
    gl.CLAUDE: "AWSCredentials",
    "gpt-4.1-mini": "AzureCredentials",
    "google/gemini-2.0-flash": "GCPCredentials",
}
"""The Envoy sample's models → the credential type of the backend serving each."""
ENVOY_POLICIES = {kind: f"envoy-{name}" for kind, name in gl.POLICIES.items()}
"""Credential type → Envoy's own policy and ServiceBackend: credentials no LiteLLM request
carries, so the stand-ins' records (by credential label) tell the two gateways apart."""
ENVOY_KEY_ROTATIONS = 2
"""Envoy's API key is rotated by hand this many times (it does not expire), each old key retired
once Envoy sends the new one."""
ENVOY_WANTED = {kind: 2 for kind in gl.WANTED}
"""Rotations whose new credential must reach the upstream through Envoy, per type: two of each
(the minted types rotate three times meanwhile; the third's kubelet sync need not be waited for)."""
SETTLED = 5
"""Envoy's requests in a row at the OpenAI stand-in with the new API key before the old one is
retired: the reload is one swap for every worker, so the first new one already means it is done;
a few more rule out a worker still holding the old one without waiting for a set time."""
LIFETIME = 150
"""Seconds the stand-ins' credentials live during this test (60 for the rest of the suite)."""
WATCH = 420.0
"""Longest the load runs: three rotations of :data:`LIFETIME` / 3 s each, and their rollouts."""
LOAD_POD = "load"
ENVOY_LOAD_POD = "load-envoy"
REPLICASETS = objects.Resource("apps", "v1", "replicasets", "ReplicaSet")
LOAD_MOUNT = "/var/run/load"
NO_KEY = "-"
LOAD = r"""
import json, os, sys, threading, time, urllib.error, urllib.request
url, rate, models, longest = sys.argv[1], float(sys.argv[2]), sys.argv[3].split(","), float(sys.argv[4])
key = open(sys.argv[5]).read().strip() if sys.argv[5] != "-" else ""
lock, results, workers = threading.Lock(), [], []
def one(model):
    started = time.time()
    status, text = 0, "no outcome"
    try:
        body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = "Bearer " + key
        request = urllib.request.Request(url, data=body.encode(), headers=headers)
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
"""A load Pod's command: ``rate`` requests a second through a gateway's Service, over
``models`` in turn, with the master key read from a mounted Secret (never on a command line; no
key for ``-``: Envoy takes no client credential), until ``/tmp/stop`` exists or ``longest``
seconds have passed; then how many requests it started and every finished request's
``[model, start, status, error text]`` as one JSON line of its log. Whatever a request raises is
its outcome (status 0): a request that records nothing, or is still running after the join, is
missing from the results, which the test counts. A Pod of its own, not a long ``kubectl exec``:
an exec stream through the API server can drop (its websocket ping timed out
on a busy node) and take the results with it."""


def _object(kind: str, name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": rapi.API_VERSION,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def _secret(name: str, namespace: str, data: dict[str, str]) -> dict[str, Any]:
    meta = {"name": name, "namespace": namespace}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "stringData": data}


def _manifest(path: Path, namespace: str, image: str) -> list[dict[str, Any]]:
    docs = []
    for doc in yaml.safe_load_all(path.read_text().replace("DEVKIT_IMAGE", image)):
        doc["metadata"]["namespace"] = namespace
        docs.append(doc)
    return docs


def documents(namespace: str, image: str, *, keys: dict[str, str]) -> list[dict[str, Any]]:
    """Everything the test applies: the caller's ServiceAccount, the Secrets, the four
    policies, backends at the stand-ins' model APIs, the Route, and LiteLLM's Deployment; then
    Envoy's (:func:`envoy_documents`)."""
    openai = gl.POLICIES["APIKey"]
    docs = [
        caller(namespace),
        _secret("openai-key", namespace, {"apiKey": keys["api"]}),
        _secret("azure-app", namespace, {"client-secret": keys["azure"]}),
        _secret("litellm-master-key", namespace, {"key": keys["master"]}),
        _object(
            "BackendSecurityPolicy",
            openai,
            namespace,
            {
                "type": "APIKey",
                "targetRefs": [{"name": openai}],
                "apiKey": {"secretRef": {"name": "openai-key"}},
            },
        ),
        _object("BackendSecurityPolicy", "bedrock", namespace, gl.bedrock_spec(ROLE_ARN, CALLER)),
        _object(
            "BackendSecurityPolicy",
            "azure",
            namespace,
            gl.azure_spec(f"llm-{namespace}", "azure-app"),
        ),
        _object("BackendSecurityPolicy", "vertex", namespace, gl.vertex_spec(CALLER)),
        *(
            _object(
                "ServiceBackend",
                gl.POLICIES[kind],
                namespace,
                gl.backend_spec(gl.POLICIES[kind], settings.PUBLIC_HOST, settings.PORTS[upstream]),
            )
            for kind, upstream in gl.UPSTREAMS.items()
        ),
        _object("Route", gl.ROUTE, namespace, gl.route_spec()),
        *_manifest(MANIFEST, namespace, image),
    ]
    return docs + envoy_documents(namespace, image, key=keys["envoy"])


def envoy_documents(namespace: str, image: str, *, key: str) -> list[dict[str, Any]]:
    """Envoy's API key Secret, its four policies (:data:`ENVOY_POLICIES`: the same identities
    as LiteLLM's, credentials of their own) and backends at the same stand-ins, the Route of
    config/samples/envoy.yaml, and manifests/envoy.yaml."""
    policy = ENVOY_POLICIES
    return [
        _secret("envoy-openai-key", namespace, {"apiKey": key}),
        _object(
            "BackendSecurityPolicy",
            policy["APIKey"],
            namespace,
            {
                "type": "APIKey",
                "targetRefs": [{"name": policy["APIKey"]}],
                "apiKey": {"secretRef": {"name": "envoy-openai-key"}},
            },
        ),
        _object(
            "BackendSecurityPolicy",
            policy["AWSCredentials"],
            namespace,
            gl.bedrock_spec(ROLE_ARN, CALLER, target=policy["AWSCredentials"]),
        ),
        _object(
            "BackendSecurityPolicy",
            policy["AzureCredentials"],
            namespace,
            gl.azure_spec(f"llm-{namespace}", "azure-app", target=policy["AzureCredentials"]),
        ),
        _object(
            "BackendSecurityPolicy",
            policy["GCPCredentials"],
            namespace,
            gl.vertex_spec(CALLER, target=policy["GCPCredentials"]),
        ),
        *(
            _object(
                "ServiceBackend",
                policy[kind],
                namespace,
                gl.backend_spec(gl.POLICIES[kind], settings.PUBLIC_HOST, settings.PORTS[upstream]),
            )
            for kind, upstream in gl.UPSTREAMS.items()
        ),
        envoy_route(namespace),
        *_manifest(ENVOY_MANIFEST, namespace, image),
    ]


def envoy_route(namespace: str) -> dict[str, Any]:
    """config/samples/envoy.yaml in ``namespace``, each rule's backend replaced by Envoy's one of
    its model's type: the sample as a user applies it (its listener, models and routing), at the
    stand-ins. The annotation that asks ``make dev`` for a gateway is left out."""
    route: dict[str, Any] = yaml.safe_load(ENVOY_SAMPLE.read_text())
    assert route["metadata"]["name"] == ENVOY, "manifests/envoy.yaml mounts rotator-route-envoy"
    route["metadata"] = {"name": ENVOY, "namespace": namespace}
    models = []
    for rule in route["spec"]["rules"]:
        (match,) = rule["matches"]
        models.append(match["modelName"])
        rule["backendRefs"] = [{"name": ENVOY_POLICIES[ENVOY_MODELS[match["modelName"]]]}]
    assert sorted(models) == sorted(ENVOY_MODELS), models
    return route


ENVOY_PORT = envoy_format.listener(cast(rapi.Route, envoy_route("default"))).port
"""The listener of the sample's ``spec.output.envoy``: the manifest's container and Service port
(tests/unit/test_incluster_standins.py checks that they agree)."""


def envoy_files_complete(secret: dict[str, Any] | None) -> bool:
    """Whether Envoy's config Secret holds the credential file of each of its four backends (a
    backend whose credential is not resolved yet is left out of the files)."""
    wanted = {f"sds-{ENVOY_POLICIES[kind]}.yaml" for kind in ENVOY_POLICIES}
    wanted.discard(f"sds-{ENVOY_POLICIES['AWSCredentials']}.yaml")
    wanted.add(f"aws-{ENVOY_POLICIES['AWSCredentials']}.credentials")
    return secret is not None and wanted <= set(secret.get("data") or {})


class Load:
    """A load Pod: applied, started, then stopped for its results."""

    def __init__(
        self,
        cluster: Cluster,
        namespace: str,
        image: str,
        *,
        name: str,
        url: str,
        models: list[str],
        key_secret: str | None,
    ) -> None:
        self.cluster, self.namespace, self.name = cluster, namespace, name
        key = f"{LOAD_MOUNT}/key" if key_secret else NO_KEY
        args = [url, str(gl.RATE), ",".join(models), str(WATCH + 60), key]
        volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {}}]
        mounts: list[dict[str, Any]] = [{"name": "tmp", "mountPath": "/tmp"}]
        if key_secret:
            volumes.append({"name": "key", "secret": {"secretName": key_secret}})
            mounts.append({"name": "key", "mountPath": LOAD_MOUNT, "readOnly": True})
        pod = idle_pod(
            name, image, command=["python", "-c", LOAD, *args], volumes=volumes, mounts=mounts
        )
        pod["metadata"]["namespace"] = namespace
        pod["spec"]["restartPolicy"] = "Never"
        cluster.apply([pod])
        self.results: list[tuple[str, float, int]] = []
        self.failures: list[tuple[str, int, str]] = []
        self.started = 0
        """Requests the load Pod started: every one must be among :attr:`results`."""
        self.log = ""
        """The load Pod's log, once stopped."""

    def wait_started(self) -> None:
        wait_for(
            lambda: "started" in self._log(),
            timeout=120,
            interval=0.5,
            what=f"the load {self.name} started",
        )

    def _log(self) -> str:
        done = self.cluster.kubectl("logs", "-n", self.namespace, self.name, check=False)
        return done.stdout if done.returncode == 0 else ""

    def stop(self) -> None:
        """Tells the load to stop, waits for its Pod to end, and reads its results.

        The exec's own exit status is not the answer: the load can see ``/tmp/stop``, finish and
        end its container while the exec'd interpreter is still shutting down, and the runtime
        then kills that process (exit 137, which failed a CI run). What counts is that the Pod
        ends, and ends Succeeded; an exec that did not get through (a dropped stream) is tried
        again while the Pod still runs."""

        def ended() -> str | None:
            pod = self.cluster.get(PODS, self.name, self.namespace) or {}
            phase = (pod.get("status") or {}).get("phase")
            return phase if phase in ("Succeeded", "Failed") else None

        def asked_and_ended() -> str | None:
            if (phase := ended()) is not None:
                return phase
            with contextlib.suppress(CommandFailed, subprocess.TimeoutExpired):
                self.cluster.exec_python(
                    self.namespace, self.name, "open('/tmp/stop', 'w').close()"
                )
            try:
                return wait_for(ended, timeout=15, interval=0.5, what="the load's end")
            except Timeout:
                return None

        phase = wait_for(
            asked_and_ended, timeout=180, interval=0.5, what=f"the load {self.name} ended"
        )
        self.log = self._log()
        lines = self.log.strip().splitlines()
        assert phase == "Succeeded", lines[-20:]
        outcome = json.loads(lines[-1])
        self.started = int(outcome["started"])
        for model, started, status, text in outcome["results"]:
            self.results.append((model, started, status))
            if status != 200:
                self.failures.append((model, status, text))

    def check(self) -> None:
        """Every request it started has an outcome, and none failed."""
        assert len(self.results) == self.started > 0, (
            f"{self.name}: {self.started} requests started, {len(self.results)} with an outcome"
        )
        assert self.failures == [], (
            self.name,
            Counter((m, st, b[:160]) for m, st, b in self.failures),
        )


Received = dict[str, list[upstreams.Seen]]


def record_rotations(
    cluster: Cluster, namespace: str, rotations: gl.Rotations, policies: dict[str, str]
) -> None:
    """Notes each policy's credential if new (:func:`gl.record`), its value for the leak scans."""
    for kind, policy in policies.items():
        secret = cluster.get(objects.SECRETS, rapi.derived_secret_name(policy), namespace)
        if (value := gl.record(rotations, kind, secret)) is not None:
            TEST_KEYS.add(value)


def record_figures(
    figure: Callable[..., None],
    name: str,
    load: Load,
    rotations: gl.Rotations,
    received: Received,
    models: dict[str, str],
    **summary: Any,
) -> None:
    """A gateway's figures for the suite's summary: ``name`` with its requests, failures and
    ``summary``, then one row per credential type (:func:`gl.per_type`)."""
    figure(name, requests=len(load.results), failed=len(load.failures), **summary)
    measured = gl.per_type(load.results, load.failures, rotations, received, models=models)
    for kind, row in measured.items():
        verdicts = ",".join(f"{v}:{n}" for v, n in sorted(row.pop("verdicts").items()))
        figure(f"{name}_{kind}", **row, verdicts=verdicts)


def seen(configured: Configured, since: float) -> Received:
    """What each upstream stand-in received from ``since`` (a wall-clock time) on, by the
    credential type it serves: the stand-ins' Pod outlives a test, and a kept cluster's has
    served others."""
    rows = configured.standins.admin("GET", "upstreams")
    return {
        kind: [s for s in map(lambda row: upstreams.Seen(*row), rows[name]) if s.at >= since]
        for kind, name in gl.UPSTREAMS.items()
    }


def split(received: Received, labels: dict[str, set[str]]) -> tuple[Received, Received]:
    """``received`` as (the requests whose credential is one of ``labels``, by type: Envoy's,
    the rest: LiteLLM's). A request with no credential (``-``) or one never issued counts as the
    rest's; the load's outcomes name the gateway of any such request, which fails."""
    mine = {
        kind: [s for s in rows if s.credential in labels[kind]] for kind, rows in received.items()
    }
    rest = {
        kind: [s for s in rows if s.credential not in labels[kind]]
        for kind, rows in received.items()
    }
    return mine, rest


def labels_of(rotations: gl.Rotations, api_keys: list[str]) -> dict[str, set[str]]:
    """The labels of every credential a gateway's policies served, and of its API keys (each
    also in its derived Secret, unless the test's polling missed one)."""
    labels = {kind: {label for _, label in served} for kind, served in rotations.items()}
    labels["APIKey"] |= {upstreams.ModelUpstream.label(k) for k in api_keys}
    return labels


def settled(received: list[upstreams.Seen], keys: list[str]) -> bool:
    """Whether the last :data:`SETTLED` requests with any of ``keys`` that the OpenAI stand-in
    received all carried the newest, accepted: the gateway has switched, the older may go."""
    labels = {upstreams.ModelUpstream.label(k) for k in keys}
    newest = upstreams.ModelUpstream.label(keys[-1])
    tail = [s for s in received if s.credential in labels][-SETTLED:]
    return len(tail) == SETTLED and all(
        s.credential == newest and s.verdict == upstreams.CURRENT for s in tail
    )


class EnvoyKeys:
    """Envoy's API key, rotated by hand :data:`ENVOY_KEY_ROTATIONS` times as OpenAI allows it:
    the new key accepted beside the old and written to Envoy's Secret, the old one retired once
    Envoy's requests carry the new (:func:`settled`). Unlike LiteLLM's there is no proxy to wait
    for, only the kubelet's sync of the Secret volume, so the wait is on what the upstream saw."""

    def __init__(
        self, cluster: Cluster, namespace: str, first: str, accept: Callable[..., None]
    ) -> None:
        self.cluster, self.namespace, self.accept = cluster, namespace, accept
        self.keys = [first]
        """Every key written, in order: the last is the one Envoy must come to send."""
        self.retired = 0
        """How many of the older keys are retired (refused upstream) so far."""

    @property
    def done(self) -> bool:
        return self.retired == ENVOY_KEY_ROTATIONS

    def step(self, received: list[upstreams.Seen]) -> None:
        """Rotates when no rotation is pending, else retires the old key once Envoy switched;
        ``received``: what the OpenAI stand-in saw with Envoy's keys."""
        pending = len(self.keys) - 1 - self.retired
        if not pending and not self.done:
            self.keys.append(new_api_key(f"envoy-{len(self.keys)}"))
            self.accept("envoy", *self.keys[-2:])
            meta = {"name": "envoy-openai-key", "namespace": self.namespace}
            data = {"stringData": {"apiKey": self.keys[-1]}}
            self.cluster.apply([{"apiVersion": "v1", "kind": "Secret", "metadata": meta, **data}])
        elif pending and settled(received, self.keys):
            self.accept("envoy", self.keys[-1])
            self.retired += 1


def gateway_pods(cluster: Cluster, namespace: str, app: str) -> list[dict[str, Any]]:
    """A gateway's Pods that exist (a terminating one may still answer requests)."""
    selector = f"app.kubernetes.io/name={app}"
    return cluster.items(PODS, namespace=namespace, label_selector=selector)


def replicasets(cluster: Cluster, namespace: str, app: str) -> list[dict[str, Any]]:
    """A gateway Deployment's ReplicaSets: one more for each rollout."""
    selector = f"app.kubernetes.io/name={app}"
    return cluster.items(REPLICASETS, namespace=namespace, label_selector=selector)


def restart_count(pod: dict[str, Any]) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return sum(int(s.get("restartCount", 0)) for s in statuses)


def pod_hash(pod: dict[str, Any]) -> str:
    return str((pod["metadata"].get("annotations") or {}).get(gl.ANNOTATION, ""))


def written_by_the_gateways_and_controller(
    cluster: Cluster, namespace: str, loads: list[Load]
) -> dict[str, str]:
    """Where a credential must not show, by place: the namespace's Events, the statuses of its
    rotator objects, the logs of the gateway Pods still there, and the loads' logs (the
    gateways' answers, errors included)."""
    places = {"events": json.dumps(cluster.items(objects.EVENTS, namespace=namespace))}
    for load in loads:
        places[f"{load.name} log"] = load.log
    for kind, resource in KINDS.items():
        items = cluster.items(resource, namespace=namespace)
        places[f"{kind} status"] = json.dumps([i.get("status") for i in items])
    for app in (gl.DEPLOYMENT, ENVOY):
        for pod in gateway_pods(cluster, namespace, app):
            name = pod["metadata"]["name"]
            done = cluster.kubectl("logs", "-n", namespace, name, "--all-containers", check=False)
            places[f"{app} {name} log"] = done.stdout + done.stderr
    return places


@pytest.fixture
def lifetime(configured: Configured) -> Any:
    configured.standins.admin("POST", "lifetime", {"seconds": LIFETIME})
    yield LIFETIME
    configured.standins.admin("POST", "lifetime", {"seconds": configured.standins.lifetime})


@pytest.mark.timeout(900)
def test_litellm_and_envoy_deployments_serve_every_credential_type_across_rotations_with_no_failed_request(
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
        "envoy": new_api_key("envoy-0"),
    }
    TEST_KEYS.add(keys["master"])
    docs = documents(ns, kind_env.devkit_image, keys=keys)
    policies = [d for d in docs if d["kind"] == "BackendSecurityPolicy"]
    standins.register(policies, [d for d in docs if d["kind"] == "Secret"])
    accepted: dict[str, list[str]] = {}

    def accept(gateway: str, *gateway_keys: str) -> None:
        """The OpenAI stand-in accepts exactly the keys either gateway may send now: one call
        sets the whole set, and a key left out is retired (refused, recorded expired)."""
        accepted[gateway] = list(gateway_keys)
        standins.admin("POST", "accept", {"keys": [k for ks in accepted.values() for k in ks]})

    accept("litellm", keys["api"])
    accept("envoy", keys["envoy"])
    started = time.monotonic()
    cluster.apply(docs)

    def translated(route_name: str) -> bool:
        route = cluster.get(KINDS["route"], route_name, ns) or {}
        conditions = (route.get("status") or {}).get("conditions") or []
        return any(c["type"] == rapi.TRANSLATED and c["status"] == "True" for c in conditions)

    for route_name in (gl.ROUTE, ENVOY):
        wait_for(
            functools.partial(translated, route_name),
            timeout=120,
            interval=0.5,
            what=f"the Route {route_name} Translated",
        )
    config_secret = rapi.route_config_secret_name(gl.ROUTE)
    wait_for(
        lambda: gl.complete(gl.config_text(cluster.get(objects.SECRETS, config_secret, ns))),
        timeout=120,
        interval=0.5,
        what="a configuration with every backend",
    )
    envoy_secret = rapi.route_config_secret_name(ENVOY)
    wait_for(
        lambda: envoy_files_complete(cluster.get(objects.SECRETS, envoy_secret, ns)),
        timeout=120,
        interval=0.5,
        what="Envoy's files with every backend's credential",
    )

    def available(name: str) -> bool:
        deployment = cluster.get(DEPLOYMENTS, name, ns) or {}
        return bool((deployment.get("status") or {}).get("availableReplicas"))

    # Envoy first: it starts in a second or two, LiteLLM in tens
    wait_for(
        lambda: available(ENVOY), timeout=300, interval=1, what="the Envoy Deployment available"
    )
    envoy_seconds_to_serving = time.monotonic() - started
    wait_for(
        lambda: available(gl.DEPLOYMENT),
        timeout=300,
        interval=1,
        what="the LiteLLM Deployment available",
    )
    seconds_to_serving = time.monotonic() - started
    (envoy_pod,) = gateway_pods(cluster, ns, ENVOY)
    loads = [
        Load(
            cluster,
            ns,
            kind_env.devkit_image,
            name=LOAD_POD,
            url=f"http://{gl.DEPLOYMENT}.{ns}.svc:4000/v1/chat/completions",
            models=list(gl.MODELS),
            key_secret="litellm-master-key",
        ),
        Load(
            cluster,
            ns,
            kind_env.devkit_image,
            name=ENVOY_LOAD_POD,
            url=f"http://{ENVOY}.{ns}.svc:{ENVOY_PORT}/v1/chat/completions",
            models=list(ENVOY_MODELS),
            key_secret=None,
        ),
    ]
    load, envoy_load = loads
    rotations: gl.Rotations = {t: [] for t in gl.MODELS.values()}
    envoy_rotations: gl.Rotations = {t: [] for t in ENVOY_MODELS.values()}
    has_new_key: dict[str, bool] = {}
    """Config hash → whether its configuration holds the new API key."""
    rotated_key = retired = False
    envoy_keys = EnvoyKeys(cluster, ns, keys["envoy"], accept)
    try:
        for started_load in loads:
            started_load.wait_started()
        deadline = time.monotonic() + WATCH
        while time.monotonic() < deadline:
            record_rotations(cluster, ns, rotations, gl.POLICIES)
            record_rotations(cluster, ns, envoy_rotations, ENVOY_POLICIES)
            config = cluster.get(objects.SECRETS, config_secret, ns)
            if config is not None:
                digest = (config["metadata"].get("annotations") or {}).get(
                    rapi.CONFIG_HASH_ANNOTATION, ""
                )
                has_new_key.setdefault(digest, keys["api-new"] in (gl.config_text(config) or ""))
            if not rotated_key and len(rotations["AWSCredentials"]) >= 2:
                # the API key's rotation, as OpenAI allows it: both keys valid, then the old one
                # retired once no proxy that could send it is left
                accept("litellm", keys["api"], keys["api-new"])
                key = {"name": "openai-key", "namespace": ns}
                new = {"stringData": {"apiKey": keys["api-new"]}}
                cluster.apply([{"apiVersion": "v1", "kind": "Secret", "metadata": key, **new}])
                rotated_key = True
            pods = gateway_pods(cluster, ns, gl.DEPLOYMENT)
            if (
                rotated_key
                and not retired
                and pods
                and all(has_new_key.get(pod_hash(p), False) for p in pods)
            ):
                accept("litellm", keys["api-new"])
                retired = True
            received = seen(configured, since)
            envoy_received, litellm_received = split(
                received, labels_of(envoy_rotations, envoy_keys.keys)
            )
            envoy_keys.step(envoy_received["APIKey"])
            if (
                retired
                and gl.all_served(rotations, litellm_received)
                and envoy_keys.done
                and gl.all_served(envoy_rotations, envoy_received, wanted=ENVOY_WANTED)
            ):
                break
            time.sleep(1)  # polling the cluster, bounded by the deadline
    finally:
        for each in loads:
            each.stop()
    received = seen(configured, since)
    envoy_received, litellm_received = split(received, labels_of(envoy_rotations, envoy_keys.keys))
    rollouts = len(replicasets(cluster, ns, gl.DEPLOYMENT)) - 1
    envoy_replicasets = len(replicasets(cluster, ns, ENVOY))
    envoy_pods = gateway_pods(cluster, ns, ENVOY)
    envoy_restarts = sum(restart_count(p) for p in envoy_pods)
    same_pod = [p["metadata"]["uid"] for p in envoy_pods] == [envoy_pod["metadata"]["uid"]]
    title = (
        f"LiteLLM on kind: {rollouts} rollouts of its Deployment (it reads config.yaml once); "
        f"first request served {seconds_to_serving:.1f} s after apply"
    )
    printed = gl.report(title, load.results, load.failures, rotations, litellm_received)
    print(printed)
    envoy_title = (
        f"Envoy on kind: restartCount {envoy_restarts}, {envoy_replicasets} ReplicaSet(s), "
        f"the Pod it started with {'still' if same_pod else 'NOT'} serving (it reloads the "
        f"credential files); first request served {envoy_seconds_to_serving:.1f} s after apply"
    )
    envoy_printed = gl.report(
        envoy_title,
        envoy_load.results,
        envoy_load.failures,
        envoy_rotations,
        envoy_received,
        models=ENVOY_MODELS,
        restarts="restart needed: no",
    )
    print(envoy_printed)
    # the figures before the checks: a run that fails still says how far it got
    record_figures(
        figure,
        "litellm_kind",
        load,
        rotations,
        litellm_received,
        gl.MODELS,
        rollouts=rollouts,
        first_served_after_apply_s=round(seconds_to_serving, 1),
    )
    record_figures(
        figure,
        "envoy_kind",
        envoy_load,
        envoy_rotations,
        envoy_received,
        ENVOY_MODELS,
        restart_count=envoy_restarts,
        replicasets=envoy_replicasets,
        same_pod=same_pod,
        first_served_after_apply_s=round(envoy_seconds_to_serving, 1),
    )
    # what the gateways and the controller wrote where a user looks: the namespace's Events, the
    # rotator objects' statuses, the gateway Pods' logs and what the gateways answered the loads
    # (the controller's logs: every container's, scanned at the session's end, conftest.py)
    scanner = leaks.Scanner({"the stand-ins": standins.issued(), "the test": TEST_KEYS})
    assert scanner.leaks(written_by_the_gateways_and_controller(cluster, ns, loads)) == []
    for each in loads:
        each.check()
    gl.check_upstreams(received)  # every request, whichever gateway sent it
    gl.check_upstreams(litellm_received)
    gl.check_upstreams(envoy_received)
    assert retired, "LiteLLM's old API key was never retired"
    assert envoy_keys.done, (
        f"Envoy's old API keys retired: {envoy_keys.retired} of {ENVOY_KEY_ROTATIONS}",
        envoy_printed,
    )
    for kind, n in gl.WANTED.items():
        assert gl.served(rotations[kind], litellm_received[kind]) >= n, (kind, printed)
    for kind, n in ENVOY_WANTED.items():
        assert gl.served(envoy_rotations[kind], envoy_received[kind]) >= n, (kind, envoy_printed)
    # no restart, no rollout: the Pod that served the first request served the last
    assert same_pod, [p["metadata"]["name"] for p in envoy_pods]
    assert envoy_restarts == 0, envoy_title
    assert envoy_replicasets == 1, envoy_title
