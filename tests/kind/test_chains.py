"""The chains of config/samples in a real cluster (3b), with the controller pointed at the
in-cluster stand-ins: every sample's policy, backend and route Ready; a Pod that mounts a route
configuration sees a rotated credential through the kubelet's refresh of the Secret volume (the
seconds from rotation to file are the figure); and ``rolloutRestartTargets`` rolls a real
Deployment out, once per configuration change, through the Deployment controller — and not when
rotator itself restarts."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from controllers.reconcilers import api as rapi
from controllers.runtime import objects
from tests.kind import install
from tests.kind.chains import (
    KINDS,
    TEST_KEYS,
    conditions,
    new_api_key,
    not_ready,
    sample_documents,
    wait_all_ready,
)
from tests.kind.cluster import DEPLOYMENTS, PODS, Cluster, idle_pod, running
from tests.kind.conftest import SAMPLES_NAMESPACE, Configured
from tests.kind.controllerlogs import ControllerLogs
from tests.kind.env import KindEnv
from tests.kind.watching import Recorder
from tests.support import leaks
from tests.support.polling import wait_for
from tests.support.reconcilelog import reconciles

REPLICASETS = objects.Resource("apps", "v1", "replicasets", "ReplicaSet")
WATCH_FILE = """
import hashlib, json, time
path, last = "/etc/gateway/config.yaml", None
while True:
    try:
        digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
    except OSError:
        digest = None
    if digest != last:
        print(json.dumps({"t": time.time(), "sha256": digest}), flush=True)
        last = digest
    time.sleep(0.2)  # the consumer's own pace of looking at its file
"""


class Samples:
    def __init__(
        self, namespace: str, seconds_to_ready: float, objects_ready: int, routes: set[str]
    ) -> None:
        self.namespace = namespace
        self.seconds_to_ready = seconds_to_ready
        self.objects_ready = objects_ready
        self.routes = routes
        """The sample Routes' names, as :func:`sample_documents` gave them."""


@pytest.fixture(scope="module")
def samples(cluster: Cluster, configured: Configured) -> Samples:
    cluster.create_namespace(SAMPLES_NAMESPACE)
    try:
        docs = sample_documents(configured.standins, cluster, SAMPLES_NAMESPACE)
        started = time.monotonic()
        cluster.apply(docs)
        wait_all_ready(cluster, SAMPLES_NAMESPACE, timeout=180, what="every sample Ready")
    except BaseException:
        cluster.delete_namespace(SAMPLES_NAMESPACE)
        raise
    count = sum(len(cluster.items(r, namespace=SAMPLES_NAMESPACE)) for r in KINDS.values())
    routes = {d["metadata"]["name"] for d in docs if d["kind"] == "Route"}
    return Samples(SAMPLES_NAMESPACE, time.monotonic() - started, count, routes)


@pytest.fixture(scope="module", autouse=True)
def remove_samples(cluster: Cluster) -> Any:
    """The samples' namespace goes when the module ends, while the controller still runs (the
    IAM-key policy's finalizer gives its keys back)."""
    yield
    cluster.delete_namespace(SAMPLES_NAMESPACE)


def test_every_sample_chain_becomes_ready_through_the_in_cluster_stand_ins(
    cluster: Cluster, samples: Samples, figure: Callable[..., None]
) -> None:
    figure(
        "samples",
        seconds_apply_to_all_ready=samples.seconds_to_ready,
        objects=samples.objects_ready,
    )
    assert not not_ready(cluster, samples.namespace)
    # every sample's Route, by name (break: a sample Route not applied, or one of another
    # namespace counted: a bare count of at least 12 of 15 passed both)
    routes = cluster.items(rapi.ROUTES, namespace=samples.namespace)
    assert samples.routes, "config/samples holds Routes"
    assert {r["metadata"]["name"] for r in routes} == samples.routes
    for name in sorted(samples.routes):
        secret = cluster.get(
            objects.SECRETS, rapi.route_config_secret_name(name), samples.namespace
        )
        assert secret is not None, f"route {name} has its configuration"
        assert rapi.ROUTE_CONFIG_KEY in secret["data"]


def route_config_hash(cluster: Cluster, namespace: str, route: str) -> str:
    secret = cluster.get(objects.SECRETS, rapi.route_config_secret_name(route), namespace) or {}
    return str(
        ((secret.get("metadata") or {}).get("annotations") or {}).get(
            rapi.CONFIG_HASH_ANNOTATION, ""
        )
    )


def file_versions(cluster: Cluster, namespace: str, pod: str) -> list[tuple[float, str]]:
    """(when the consumer first saw it, sha256 of config.yaml), from the consumer's log."""
    out = cluster.kubectl("logs", "-n", namespace, pod).stdout
    seen = []
    for line in out.splitlines():
        entry = json.loads(line)
        if entry["sha256"]:
            seen.append((float(entry["t"]), str(entry["sha256"])))
    return seen


def set_api_key(cluster: Cluster, namespace: str, secret: str, value: str) -> None:
    cluster.api.patch(
        objects.SECRETS,
        secret,
        {"data": {"apiKey": base64.b64encode(value.encode()).decode()}},
        namespace=namespace,
    )


def test_a_pod_mounting_the_route_config_sees_a_rotated_key_through_the_kubelet(
    kind_env: KindEnv, cluster: Cluster, samples: Samples, figure: Callable[..., None]
) -> None:
    ns, route = samples.namespace, "chat"
    consumer = idle_pod(
        "gateway-file",
        kind_env.devkit_image,
        command=("python", "-c", WATCH_FILE),
        volumes=[
            {"name": "config", "secret": {"secretName": rapi.route_config_secret_name(route)}}
        ],
        mounts=[{"name": "config", "mountPath": "/etc/gateway", "readOnly": True}],
    )
    cluster.api.create(PODS, consumer, namespace=ns)
    wait_for(lambda: running(cluster, ns, "gateway-file"), timeout=90, what="consumer Pod")
    before = route_config_hash(cluster, ns, route)
    wait_for(
        lambda: any(h == before for _, h in file_versions(cluster, ns, "gateway-file")),
        timeout=30,
        what="the consumer reads the current configuration",
    )
    selector = f"{rapi.ROUTE_LABEL}={route}"
    with Recorder(cluster.api, objects.SECRETS, namespace=ns, label_selector=selector) as configs:
        edited = time.time()
        set_api_key(cluster, ns, "openai-api-key", new_api_key("rotated"))

        def written() -> float | None:
            for seen in configs.events():
                annotations = seen.obj["metadata"].get("annotations") or {}
                if annotations.get(rapi.CONFIG_HASH_ANNOTATION, before) != before:
                    return seen.at
            return None

        written_at = wait_for(written, timeout=30, what="the route configuration rewritten")
    after = route_config_hash(cluster, ns, route)
    assert after != before
    seen_at = wait_for(
        lambda: next(
            (t for t, h in file_versions(cluster, ns, "gateway-file") if h == after), None
        ),
        timeout=180,
        interval=1.0,
        what="the mounted file holds the new configuration",
    )
    figure(
        "mounted_route_config",
        seconds_key_edit_to_route_config=written_at - edited,
        seconds_route_config_to_file=seen_at - written_at,
    )
    assert seen_at - written_at < 150, "the kubelet refreshes a Secret volume within ~60-90 s"


def rollout_state(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    """The Deployment once its controller has acted on its latest generation and every
    replica runs that template; else None."""
    deployment = cluster.get(DEPLOYMENTS, name, namespace)
    if deployment is None:
        return None
    status, generation = deployment.get("status") or {}, deployment["metadata"]["generation"]
    want = deployment["spec"]["replicas"]
    done = status.get("observedGeneration") == generation and all(
        status.get(k) == want for k in ("replicas", "updatedReplicas", "readyReplicas")
    )
    return deployment if done else None


def test_rollout_restart_targets_roll_a_deployment_once_per_change_and_not_on_a_rotator_restart(
    kind_env: KindEnv,
    cluster: Cluster,
    configured: Configured,
    installation: install.Installation,
    controller_logs: ControllerLogs,
    namespaces: Callable[[str], str],
    figure: Callable[..., None],
) -> None:
    ns, route = namespaces("rollout"), "gw-route"
    annotation = f"config-hash.rotator.dev/{route}"
    gateway = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "gateway", "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "gateway"}},
            "template": {
                # its owner opts in to rollouts by rotator
                "metadata": {"labels": {"app": "gateway"}, "annotations": {annotation: ""}},
                "spec": idle_pod("gateway", kind_env.devkit_image)["spec"],
            },
        },
    }
    key = new_api_key("gateway")
    chain = [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "gw-key", "namespace": ns},
            "stringData": {"apiKey": key},
        },
        {
            "apiVersion": rapi.API_VERSION,
            "kind": "BackendSecurityPolicy",
            "metadata": {"name": "gw", "namespace": ns},
            "spec": {
                "type": "APIKey",
                "targetRefs": [{"name": "gw"}],
                "apiKey": {"secretRef": {"name": "gw-key"}},
            },
        },
        {
            "apiVersion": rapi.API_VERSION,
            "kind": "ServiceBackend",
            "metadata": {"name": "gw", "namespace": ns},
            "spec": {"schema": "OpenAI", "endpoint": {"host": "api.openai.com"}},
        },
        {
            "apiVersion": rapi.API_VERSION,
            "kind": "Route",
            "metadata": {"name": route, "namespace": ns},
            "spec": {
                "rules": [{"matches": [{"modelName": "gpt-4o"}], "backendRefs": [{"name": "gw"}]}],
                "rolloutRestartTargets": [{"kind": "Deployment", "name": "gateway"}],
            },
        },
    ]
    cluster.apply([gateway])
    wait_for(lambda: rollout_state(cluster, ns, "gateway"), timeout=120, what="gateway rolled out")
    cluster.apply(chain)

    def route_status() -> dict[str, Any]:
        return cluster.get(rapi.ROUTES, route, ns) or {}

    def rollout_condition(reason: str) -> dict[str, Any] | None:
        c = conditions(route_status()).get("RolloutRestarted")
        return c if c and c["status"] == "True" and c["reason"] == reason else None

    wait_for(lambda: rollout_condition("FirstConfiguration"), timeout=60, what="first config")
    first = route_config_hash(cluster, ns, route)
    deployment = cluster.get(DEPLOYMENTS, "gateway", ns)
    assert deployment is not None
    assert deployment["metadata"]["generation"] == 1, "no rollout for the first configuration"

    changed = time.monotonic()
    set_api_key(cluster, ns, "gw-key", new_api_key("gateway"))
    wait_for(lambda: rollout_condition("Restarted"), timeout=60, what="Restarted")
    second = route_config_hash(cluster, ns, route)
    assert second != first
    rolled = wait_for(
        lambda: (
            (d := rollout_state(cluster, ns, "gateway")) and d["metadata"]["generation"] == 2 and d
        ),
        timeout=120,
        what="the gateway rolled out for the new configuration",
    )
    new_pods_ready = time.monotonic() - changed
    value = rolled["spec"]["template"]["metadata"]["annotations"][annotation]
    assert value == second, "the pod template names the configuration it starts with"
    sets = cluster.items(REPLICASETS, namespace=ns, label_selector="app=gateway")
    assert len(sets) == 2, "one ReplicaSet per rollout: the first, and the change's"
    restarted = route_status()["status"]["rolloutRestart"]

    # rotator restarts: every replica replaced; the new leader reconciles the Route and rolls
    # nothing out (the configuration it was rolled out for is unchanged)
    restart_at = time.time()
    cluster.kubectl(
        "-n", install.NAMESPACE, "rollout", "restart", f"deployment/{install.DEPLOYMENT}"
    )
    installation.wait_rolled_out()
    controller_logs.follow()
    leader = wait_for(lambda: install.leader(cluster), timeout=60, what="a leader")

    def reconciled_route() -> bool:
        done = reconciles(controller_logs.text(leader), ended_at=time.time())
        return any(
            r.key.endswith(f":{route}") and r.finished and r.start > restart_at for r in done
        )

    wait_for(reconciled_route, timeout=90, what="the new leader reconciled the Route")
    deployment = cluster.get(DEPLOYMENTS, "gateway", ns)
    assert deployment is not None
    figure(
        "rollout_restart",
        seconds_change_to_new_pods_ready=new_pods_ready,
        generation_after_rotator_restart=deployment["metadata"]["generation"],
    )
    assert deployment["metadata"]["generation"] == 2, "a restart of rotator rolled nothing out"
    assert route_status()["status"]["rolloutRestart"] == restarted
    assert len(cluster.items(REPLICASETS, namespace=ns, label_selector="app=gateway")) == 2


def test_no_minted_value_appears_in_events_statuses_or_controller_logs(
    cluster: Cluster, configured: Configured, samples: Samples, controller_logs: ControllerLogs
) -> None:
    places = {name: text for name, text in controller_logs.all_text().items()}
    # every namespace: the samples' and those of the tests before this one
    places["events"] = json.dumps(cluster.items(objects.EVENTS))
    for kind, resource in KINDS.items():
        items = cluster.items(resource)
        places[f"{kind} statuses"] = json.dumps([i.get("status") for i in items])
    scanner = leaks.Scanner(
        {"the stand-ins": configured.standins.issued(), "the tests' API keys": TEST_KEYS}
    )
    assert len(scanner) > 0, "the stand-ins minted something"
    found = scanner.leaks(places)
    assert not found, found
