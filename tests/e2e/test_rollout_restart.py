"""``spec.rolloutRestartTargets`` against real workloads: the control plane's deployment controller
turns each pod-template change rotator makes into a new ReplicaSet (no pod runs: there is no
scheduler or kubelet, and the Deployments want none), so a rollout is something to count. The
workloads opt in as their owner would, with ``config-hash.rotator.dev/chat: ""`` on their pod
template, but one: rotator must leave it alone.

The controller runs bound only by config/rbac, resyncing every few seconds, so a rollout that a
no-op reconcile or a restarted controller would repeat shows up here; the debounce window is the
product's (10 s), which is most of these tests' time."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from controllers.reconcilers import api as rapi
from controllers.reconcilers import restarts
from controllers.runtime import client as clients
from controllers.runtime import errors, objects
from rotator_devkit.devenv import manifests
from tests.e2e.conftest import EXISTING
from tests.support import audit, reconcilelog
from tests.support.chain import AWSChain
from tests.support.controller import SERVICE_ACCOUNT, ControllerProcess
from tests.support.polling import wait_for

SYNC_PERIOD = "3"
"""Seconds between the informers' resyncs here: every Route is reconciled that often."""
DEPLOYMENTS = restarts.WORKLOADS["Deployment"]
STATEFULSETS = restarts.WORKLOADS["StatefulSet"]
REPLICASETS = objects.Resource("apps", "v1", "replicasets", "ReplicaSet")
REVIEWS = objects.Resource(
    "authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", namespaced=False
)
ANNOTATION = restarts.template_annotation("chat")
ROLLOUT_TIMEOUT = restarts.DEBOUNCE_SECONDS + 30


Patches = Callable[[str], list[tuple[str, str, int]]]


@pytest.fixture
def patches(request: pytest.FixtureRequest) -> Patches | None:
    """The controller's PATCH requests to workloads of a namespace since the test began, as
    (resource, name, HTTP code), from the API server's audit log: a patch that changes nothing
    (the same hash again) leaves no trace on the workload, only there. None against an existing
    cluster (no audit log): the workloads' generations are checked all the same."""
    if EXISTING:
        return None
    log: audit.AuditLog = request.getfixturevalue("audit_log")
    mark = log.mark()

    def since(namespace: str) -> list[tuple[str, str, int]]:
        return [
            (r.resource, r.name, r.code)
            for r in log.since(mark)
            if r.verb == "patch"
            and r.resource in {w.plural for w in restarts.WORKLOADS.values()}
            and r.namespace == namespace
            and r.user.endswith(f":{SERVICE_ACCOUNT}")
            and r.stage == "ResponseComplete"
        ]

    return since


@pytest.fixture(scope="module")
def resyncing(controller: ControllerProcess) -> Iterator[ControllerProcess]:
    """The shared controller, resyncing every :data:`SYNC_PERIOD` seconds; as before afterwards."""
    controller.restart("--sync-period", SYNC_PERIOD)
    yield controller
    controller.restart()


OWNERS = {"example.com/owner": "team-gateway"}
"""An annotation of the owner's on every pod template: the opt-in is one key among others."""


def workload(kind: str, name: str, *, opted_in: bool = True) -> dict[str, Any]:
    """A Deployment or StatefulSet that wants no pod: its template is all a rollout changes. Its
    owner lets Route ``chat`` roll it out (``opted_in``) or not."""
    annotations = {**OWNERS, ANNOTATION: ""} if opted_in else dict(OWNERS)
    spec: dict[str, Any] = {
        "replicas": 0,
        "selector": {"matchLabels": {"app": name}},
        "template": {
            "metadata": {"labels": {"app": name}, "annotations": annotations},
            "spec": {"containers": [{"name": "gateway", "image": "gateway:test"}]},
        },
    }
    if kind == "StatefulSet":
        spec["serviceName"] = name
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}


def create_workload(chain: AWSChain, kind: str, name: str, *, opted_in: bool = True) -> None:
    body = workload(kind, name, opted_in=opted_in)
    chain.api.create(restarts.WORKLOADS[kind], body, namespace=chain.ns)


def gateway_chain(chain: AWSChain, targets: list[dict[str, str]]) -> None:
    """API key Secret → policy → backend → Route ``chat`` with ``targets``.

    The Route is created once its backend resolves: a Route created before writes a first
    configuration without the backend's credentials, then a second with them, and that change
    opens a debounce window (and a rollout) of its own, before any test's change. A CI run
    under load saw it: the window opened before the test's first change closed between its two
    changes, and the one rollout carried the middle configuration."""
    chain.secret("key", apiKey="sk-rollout-0000000001")
    chain.api_key_policy("openai", secret="key", targets=["openai"])
    chain.backend("openai")
    chain.wait_condition("policy", "openai", "Ready", "True")
    chain.wait_condition("backend", "openai", "ResolvedRefs", "True", "ResolvedRefs")
    chain.create(
        "route",
        "chat",
        {
            "rules": [{"backendRefs": [{"name": "openai"}]}],
            "rolloutRestartTargets": targets,
        },
    )


def new_hash(chain: AWSChain, old: str | None) -> str | None:
    """Route ``chat``'s configuration hash once it differs from ``old``."""
    current = chain.config_hash("chat")
    return current if current != old else None


def recorded(chain: AWSChain) -> str | None:
    """The configuration hash Route ``chat``'s status records (rolled out, or the first)."""
    route = chain.get("route", "chat") or {}
    return ((route.get("status") or {}).get("rolloutRestart") or {}).get("configHash")


def get(chain: AWSChain, resource: objects.Resource, name: str) -> dict[str, Any]:
    return chain.api.get(resource, name, namespace=chain.ns)


def template_hash(obj: dict[str, Any]) -> str | None:
    """The annotation's value on ``obj``'s pod template: ``""`` as the owner opted in, None
    without it."""
    annotations = obj["spec"]["template"]["metadata"].get("annotations") or {}
    value = annotations.get(ANNOTATION)
    return None if value is None else str(value)


def replicasets(chain: AWSChain, deployment: str) -> list[dict[str, Any]]:
    """The Deployment's ReplicaSets, oldest first."""
    items = chain.api.list(REPLICASETS, namespace=chain.ns).get("items") or []
    owned = [
        rs
        for rs in items
        if any(ref.get("name") == deployment for ref in rs["metadata"].get("ownerReferences", []))
    ]
    return sorted(owned, key=lambda rs: int(rs["metadata"]["annotations"][REVISION]))


REVISION = "deployment.kubernetes.io/revision"


def synced(chain: AWSChain, name: str, generation: int) -> dict[str, Any] | None:
    """The Deployment once its controller has acted on ``generation`` (and it has no other)."""
    deployment = get(chain, DEPLOYMENTS, name)
    meta, status = deployment["metadata"], deployment.get("status") or {}
    assert meta["generation"] <= generation, f"{name} changed more often than expected"
    if meta["generation"] == generation and status.get("observedGeneration") == generation:
        return deployment
    return None


def reconciled_after(controller: ControllerProcess, namespace: str, since: float) -> bool:
    """Whether the controller's current process finished a reconcile of Route ``chat`` after
    ``since`` (epoch seconds), by its log: the resyncs make one every few seconds."""
    assert controller.proc is not None
    done = reconcilelog.last_done(controller.run_log(), namespace, "route", "chat")
    return done is not None and done > since


def past_the_window(controller: ControllerProcess, namespace: str, since: float) -> None:
    """Waits for a reconcile of ``chat`` more than a debounce window after ``since``: a rollout
    due at any time since would have been made by then."""
    after = since + restarts.DEBOUNCE_SECONDS + 1
    wait_for(
        lambda: reconciled_after(controller, namespace, after),
        timeout=restarts.DEBOUNCE_SECONDS + 30,
        what="a reconcile of the Route past the debounce window",
    )


def listing(chain: AWSChain, deployment: str) -> str:
    """``kubectl get rs``-like: each ReplicaSet with its revision and the annotation."""
    rows = [f"{'REPLICASET':<28} {'REVISION':<9} {ANNOTATION}"]
    for rs in replicasets(chain, deployment):
        value = {None: "<none>", "": '""'}.get(template_hash(rs)) or str(template_hash(rs))
        rows.append(
            f"{rs['metadata']['name']:<28} {rs['metadata']['annotations'][REVISION]:<9} {value}"
        )
    return "\n".join(rows)


def test_a_config_change_rolls_out_once_and_a_resync_or_restart_does_not(
    chain: AWSChain, resyncing: ControllerProcess, patches: Patches | None
) -> None:
    create_workload(chain, "Deployment", "gateway")
    create_workload(chain, "StatefulSet", "gateway-sts")
    wait_for(lambda: synced(chain, "gateway", 1), what="the Deployment's first ReplicaSet")
    gateway_chain(
        chain,
        [{"kind": "Deployment", "name": "gateway"}, {"kind": "StatefulSet", "name": "gateway-sts"}],
    )

    first = chain.wait_condition(
        "route", "chat", rapi.ROLLOUT_RESTARTED, "True", rapi.REASON_FIRST_CONFIGURATION
    )
    first_hash = chain.config_hash("chat")
    assert first_hash is not None
    assert first_hash[:12] in first["message"]
    assert template_hash(get(chain, DEPLOYMENTS, "gateway")) == "", "the first config: no rollout"
    assert len(replicasets(chain, "gateway")) == 1

    chain.secret("key", apiKey="sk-rollout-0000000002")  # the key rotates: a new configuration
    second = wait_for(lambda: new_hash(chain, first_hash), what="the new configuration")
    written = time.monotonic()
    restarted = chain.wait_condition(
        "route", "chat", rapi.ROLLOUT_RESTARTED, "True", rapi.REASON_RESTARTED, ROLLOUT_TIMEOUT
    )
    took = time.monotonic() - written
    assert second[:12] in restarted["message"]
    deployment = wait_for(lambda: synced(chain, "gateway", 2), what="the rollout")
    assert template_hash(deployment) == second
    assert template_hash(get(chain, STATEFULSETS, "gateway-sts")) == second
    sets = replicasets(chain, "gateway")
    assert [template_hash(rs) for rs in sets] == ["", second], "one new ReplicaSet"
    route = chain.get("route", "chat") or {}
    record = route["status"]["rolloutRestart"]
    assert record["configHash"] == second
    wait_for(lambda: "Restarted" in chain.event_reasons("chat"), what="the Restarted Event")
    print(
        f"\nrolled out {took:.1f} s after the configuration was written\n"
        f"RolloutRestarted={restarted['status']} {restarted['reason']}: {restarted['message']}\n"
        f"status.rolloutRestart: {record}\n{listing(chain, 'gateway')}"
    )

    # no-op resyncs, a rewrite of the config Secret with the same content, a restarted
    # controller: each reconciles the Route, none rolls anything out
    chain.delete("secret", rapi.route_config_secret_name("chat"))
    wait_for(lambda: chain.config_hash("chat") == second, what="the config Secret rewritten")
    resyncing.restart("--sync-period", SYNC_PERIOD)
    past_the_window(resyncing, chain.ns, time.time())
    assert synced(chain, "gateway", 2), "no second rollout"
    assert len(replicasets(chain, "gateway")) == 2
    assert get(chain, STATEFULSETS, "gateway-sts")["metadata"]["generation"] == 2
    assert (chain.get("route", "chat") or {})["status"]["rolloutRestart"] == record
    if patches is not None:  # not even a patch that would have changed nothing
        assert sorted(patches(chain.ns)) == [
            ("deployments", "gateway", 200),
            ("statefulsets", "gateway-sts", 200),
        ]


def test_changes_within_the_debounce_window_roll_out_once(
    chain: AWSChain, resyncing: ControllerProcess, patches: Patches | None
) -> None:
    create_workload(chain, "Deployment", "gateway")
    gateway_chain(chain, [{"kind": "Deployment", "name": "gateway"}])
    chain.wait_condition(
        "route", "chat", rapi.ROLLOUT_RESTARTED, "True", rapi.REASON_FIRST_CONFIGURATION
    )
    hashes = [chain.config_hash("chat")]
    assert chain.backend_credentials("chat")["openai"] is not None, "the first configuration"
    assert recorded(chain) == hashes[0], "no rollout pending before the test's changes"
    started = time.monotonic()
    for n in (2, 3):
        chain.secret("key", apiKey=f"sk-rollout-000000000{n}")
        hashes.append(
            wait_for(
                lambda: new_hash(chain, hashes[-1]),
                what=f"configuration {n}",
            )
        )
    within = time.monotonic() - started
    assert within < restarts.DEBOUNCE_SECONDS, f"both changes took {within:.1f} s"
    chain.wait_condition(
        "route", "chat", rapi.ROLLOUT_RESTARTED, "True", rapi.REASON_RESTARTED, ROLLOUT_TIMEOUT
    )
    deployment = wait_for(lambda: synced(chain, "gateway", 2), what="one rollout")
    assert template_hash(deployment) == hashes[-1], "of the last configuration"
    wait_for(lambda: len(replicasets(chain, "gateway")) == 2, what="the rollout's ReplicaSet")
    past_the_window(resyncing, chain.ns, time.time())  # when a second rollout would come
    assert synced(chain, "gateway", 2), "one rollout for two changes"
    if patches is not None:
        assert patches(chain.ns) == [("deployments", "gateway", 200)]
    print(f"\ntwo changes {within:.1f} s apart:\n{listing(chain, 'gateway')}")


def test_a_missing_target_is_reported_and_rolled_out_once_it_exists(
    chain: AWSChain, resyncing: ControllerProcess, patches: Patches | None
) -> None:
    gateway_chain(chain, [{"kind": "Deployment", "name": "late"}])
    chain.wait_condition(
        "route", "chat", rapi.ROLLOUT_RESTARTED, "True", rapi.REASON_FIRST_CONFIGURATION
    )
    chain.secret("key", apiKey="sk-rollout-0000000002")
    missing = chain.wait_condition(
        "route", "chat", rapi.ROLLOUT_RESTARTED, "False", rapi.REASON_TARGET_NOT_FOUND,
        ROLLOUT_TIMEOUT,
    )  # fmt: skip
    assert "Deployment late not found" in missing["message"]
    # the Event is sent by the recorder's own thread, after the status write: waited for (a
    # loaded machine once asked before it had arrived)
    wait_for(
        lambda: "TargetNotFound" in chain.event_reasons("chat"), what="the TargetNotFound Event"
    )
    assert chain.condition("route", "chat", rapi.PROGRAMMED)["status"] == "True"  # type: ignore[index]

    create_workload(chain, "Deployment", "late")
    chain.wait_condition(
        "route", "chat", rapi.ROLLOUT_RESTARTED, "True", rapi.REASON_RESTARTED, ROLLOUT_TIMEOUT
    )
    deployment = wait_for(lambda: synced(chain, "late", 2), what="the late Deployment rolled out")
    assert template_hash(deployment) == chain.config_hash("chat")
    if patches is not None:  # retried with backoff while missing, then once
        codes = [code for _, _, code in patches(chain.ns)]
        print(f"\npatches of the late Deployment, by HTTP code: {codes}")
        assert codes[-1] == 200
        assert codes[:-1]
        assert set(codes[:-1]) == {404}


def warnings(chain: AWSChain, reason: str) -> int:
    """How many times the Route's Warning Event ``reason`` was recorded (repeats bump a count)."""
    return sum(
        int(e.get("count") or 1)
        for e in chain.events()
        if e["involvedObject"]["name"] == "chat" and e["reason"] == reason
    )


def opt_in_patches(patches: Patches | None, namespace: str, name: str) -> list[int] | None:
    """The HTTP codes of the controller's patches of Deployment ``name``, in order."""
    if patches is None:
        return None
    return [code for _, target, code in patches(namespace) if target == name]


def test_a_workload_that_has_not_opted_in_is_left_alone_until_its_owner_opts_in(
    chain: AWSChain, resyncing: ControllerProcess, patches: Patches | None
) -> None:
    """Deployment ``bare`` is named by the Route but its owner has not opted in: its pod template
    carries an annotation of the owner's, not rotator's. It is not rolled out (nor is its template
    touched), the Route says so and how to opt in; ``gateway``, opted in, is rolled out. Once the
    owner adds the annotation — a change of the pod template, so a rollout of the owner's own —
    rotator's retry rolls it out for the pending configuration, and the next change rolls it out
    again.

    Checked by hand that this test fails against the JSON merge patch rotator sent before (the
    condition never turns ``RestartNotPermitted``: ``bare`` is rolled out at the first change),
    and against a lone ``replace`` operation, which the API server applies to an existing
    ``annotations`` map even without the key (the same way)."""
    create_workload(chain, "Deployment", "gateway")
    create_workload(chain, "Deployment", "bare", opted_in=False)
    wait_for(lambda: synced(chain, "gateway", 1), what="gateway's first ReplicaSet")
    wait_for(lambda: synced(chain, "bare", 1), what="bare's first ReplicaSet")
    template = get(chain, DEPLOYMENTS, "bare")["spec"]["template"]
    gateway_chain(
        chain, [{"kind": "Deployment", "name": "gateway"}, {"kind": "Deployment", "name": "bare"}]
    )
    chain.wait_condition(
        "route", "chat", rapi.ROLLOUT_RESTARTED, "True", rapi.REASON_FIRST_CONFIGURATION
    )
    first = chain.config_hash("chat")

    chain.secret("key", apiKey="sk-rollout-0000000002")
    second = wait_for(lambda: new_hash(chain, first), what="the new configuration")
    refused = chain.wait_condition(
        "route", "chat", rapi.ROLLOUT_RESTARTED, "False", rapi.REASON_RESTART_NOT_PERMITTED,
        ROLLOUT_TIMEOUT,
    )  # fmt: skip
    assert (
        f"Deployment bare has not opted in: its owner adds the annotation {ANNOTATION} (any "
        "value) to its pod template, spec.template.metadata.annotations" in refused["message"]
    )
    assert "Deployment gateway" not in refused["message"]
    # the gauge RotatorRouteRolloutPending reads, set in the reconcile before the condition
    pending = {"namespace": chain.ns, "route": "chat"}
    assert resyncing.metric("rotator_route_rollouts_pending", **pending) == 1.0
    failed = {"kind": "Deployment", "result": "failure"}
    assert (resyncing.metric("rotator_route_rollouts_total", **failed) or 0.0) >= 1.0
    deployment = wait_for(lambda: synced(chain, "gateway", 2), what="the opted-in one rolled out")
    assert template_hash(deployment) == second
    if patches is not None:  # retried with backoff, refused each time, one Event
        wait_for(
            lambda: len(opt_in_patches(patches, chain.ns, "bare") or []) >= 2,
            what="a retry of the refused patch",
        )
    bare = get(chain, DEPLOYMENTS, "bare")
    assert bare["metadata"]["generation"] == 1
    assert bare["spec"]["template"] == template, "its template unchanged"
    assert len(replicasets(chain, "bare")) == 1, "no new ReplicaSet"
    assert set(opt_in_patches(patches, chain.ns, "bare") or [422]) == {422}
    assert warnings(chain, rapi.REASON_RESTART_NOT_PERMITTED) == 1
    print(
        f"\nRolloutRestarted={refused['status']} {refused['reason']}: {refused['message']}\n"
        f"{listing(chain, 'bare')}"
    )

    opt_in = {"spec": {"template": {"metadata": {"annotations": {ANNOTATION: ""}}}}}
    opted = chain.api.patch(DEPLOYMENTS, "bare", opt_in, namespace=chain.ns)  # by its owner
    assert opted["metadata"]["generation"] == 2, "the opt-in is a rollout of the owner's"
    chain.wait_condition(
        "route", "chat", rapi.ROLLOUT_RESTARTED, "True", rapi.REASON_RESTARTED, ROLLOUT_TIMEOUT
    )
    bare = wait_for(lambda: synced(chain, "bare", 3), what="the retry rolling it out")
    assert template_hash(bare) == second
    # 0 once the cache shows the reconcile that rolled it out: a resync that reads the Route
    # before that status write reached the informer sees the last attempt incomplete and waits
    # the debounce window with the gauge at 1, until the status event reconciles it again (read
    # from the code after CI under load saw 1 here once)
    wait_for(
        lambda: resyncing.metric("rotator_route_rollouts_pending", **pending) == 0.0,
        timeout=30,
        what="rotator_route_rollouts_pending back to 0",
    )
    assert synced(chain, "gateway", 2), "the others not again"

    chain.secret("key", apiKey="sk-rollout-0000000003")
    third = wait_for(lambda: new_hash(chain, second), what="the next configuration")
    bare = wait_for(
        lambda: synced(chain, "bare", 4), timeout=ROLLOUT_TIMEOUT, what="the next rollout"
    )
    assert template_hash(bare) == third
    assert template_hash(wait_for(lambda: synced(chain, "gateway", 3), what="gateway too")) == third
    wait_for(lambda: len(replicasets(chain, "bare")) == 4, what="bare's ReplicaSets")
    assert [template_hash(rs) for rs in replicasets(chain, "bare")] == [None, "", second, third]
    codes = opt_in_patches(patches, chain.ns, "bare")
    if codes is not None:
        assert codes[-2:] == [200, 200]
        assert set(codes[:-2]) == {422}
    print(f"after the owner opted in, then one more change:\n{listing(chain, 'bare')}")


@pytest.mark.oldest_kubernetes
def test_the_crd_refuses_other_kinds_and_names_that_are_not_object_names(
    chain: AWSChain,
) -> None:
    for target, says in [
        ({"kind": "ReplicaSet", "name": "gw"}, "supported values"),
        ({"kind": "Deployment", "name": "../kube-system/gw"}, "must be the name of an object"),
    ]:
        with pytest.raises(errors.Invalid) as refused:
            chain.create(
                "route",
                "bad",
                {"rules": [{"backendRefs": [{"name": "b"}]}], "rolloutRestartTargets": [target]},
            )
        assert says in str(refused.value)


def allowed(api: clients.Client, verb: str, resource: str, group: str, namespace: str) -> bool:
    review = api.create(
        REVIEWS,
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": f"system:serviceaccount:{manifests.NAMESPACE}:{SERVICE_ACCOUNT}",
                "groups": [
                    "system:authenticated",
                    "system:serviceaccounts",
                    f"system:serviceaccounts:{manifests.NAMESPACE}",
                ],
                "resourceAttributes": {
                    "namespace": namespace,
                    "verb": verb,
                    "group": group,
                    "resource": resource,
                },
            },
        },
    )
    return bool(review["status"].get("allowed"))


def test_the_shipped_rbac_allows_patching_the_three_kinds_and_nothing_more(
    api: clients.Client, installed: None, namespace: str
) -> None:
    """What the API server itself answers for rotator's ServiceAccount, bound by config/rbac."""
    for kind in ("deployments", "statefulsets", "daemonsets"):
        assert allowed(api, "patch", kind, "apps", namespace), kind
        for verb in ("get", "list", "watch", "update", "create", "delete"):
            assert not allowed(api, verb, kind, "apps", namespace), (verb, kind)
    assert not allowed(api, "patch", "replicasets", "apps", namespace)
    assert not allowed(api, "patch", "pods", "", namespace)
