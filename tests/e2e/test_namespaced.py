"""The namespaced install (config/namespaced): rotator watches only the namespaces it is given and
holds Roles there instead of the ClusterRole. It renders the same with kubectl and Python, keeps
the ClusterRole's rules, and works end to end bound by nothing else: every list, watch and write
stays in those namespaces (the API server's audit log says so), and nothing is refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controllers.reconcilers import api as rapi
from controllers.runtime import client as clients
from controllers.runtime import objects, restconfig
from controllers.runtime.informer import Informer
from rotator_devkit.controlplane import assets
from rotator_devkit.controlplane.cluster import ControlPlaneOptions, LocalControlPlane
from rotator_devkit.devenv import manifests
from tests.support.audit import AuditLog, Request
from tests.support.chain import Chain
from tests.support.controller import (
    SERVICE_ACCOUNT,
    ControllerProcess,
    install_crds,
    service_account_kubeconfig,
)
from tests.support.informer_probe import ProbedClient
from tests.support.polling import wait_for

OVERLAY = manifests.CONFIG / "namespaced"
WATCHED = ("team-a", "team-b")
"""The namespaces config/namespaced ships with (examples users replace)."""
UNWATCHED = "elsewhere"
ROLE = manifests.NAME_PREFIX + "manager-role"
CONTROLLER_USER = f"system:serviceaccount:{manifests.NAMESPACE}:{SERVICE_ACCOUNT}"
KEY = "sk-namespaced-install-key-0123456789"

CLUSTER_WIDE_GRANTS_ALLOWED = {("tokenreviews", "create"), ("subjectaccessreviews", "create")}
"""All a ClusterRoleBinding of the namespaced install may grant: the metrics endpoint asks the
API server who a scraper is and whether it may read /metrics (cluster-scoped APIs only)."""


def identity(doc: dict[str, Any]) -> tuple[str, str, str]:
    return (doc["kind"], doc["metadata"]["name"], doc["metadata"].get("namespace", ""))


def render(kubectl: Path | None) -> list[dict[str, Any]]:
    return sorted(manifests.render(OVERLAY, kubectl=kubectl), key=identity)


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(only)


def test_config_namespaced_renders_the_same_with_kubectl_and_python(
    control_plane: LocalControlPlane,
) -> None:
    rendered = render(control_plane.assets / "kubectl")
    assert rendered == render(None)
    cluster_roles = {d["metadata"]["name"]: d for d in rendered if d["kind"] == "ClusterRole"}
    assert ROLE not in cluster_roles
    for binding in (d for d in rendered if d["kind"] == "ClusterRoleBinding"):
        rules = cluster_roles[binding["roleRef"]["name"]]["rules"]
        grants = {
            (what, verb)
            for rule in rules
            for what in [*rule.get("resources", []), *rule.get("nonResourceURLs", [])]
            for verb in rule["verbs"]
        }
        assert grants <= CLUSTER_WIDE_GRANTS_ALLOWED, binding["metadata"]["name"]
    roles = {identity(d) for d in rendered if d["kind"] == "Role"}
    assert roles == {("Role", ROLE, ns) for ns in WATCHED} | {
        ("Role", manifests.NAME_PREFIX + "leader-election-role", manifests.NAMESPACE)
    }
    for binding in (d for d in rendered if d["kind"] == "RoleBinding"):
        assert binding["roleRef"]["kind"] == "Role"
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": manifests.NAMESPACE}
        ]
    args = container(rendered)["args"]
    assert [a for a in args if a.startswith("--namespace")] == [f"--namespace={n}" for n in WATCHED]
    assert "--leader-elect" in args


def test_the_namespaced_role_has_exactly_the_cluster_roles_rules() -> None:
    """One list of rules, two scopes: a rule added to config/rbac/role.yaml must be added to
    config/namespaced/role/role.yaml too (and the other way round)."""
    (cluster_role,) = manifests.load_file(manifests.CONFIG / "rbac" / "role.yaml")
    (role,) = manifests.load_file(OVERLAY / "role" / "role.yaml")
    assert (cluster_role["kind"], role["kind"]) == ("ClusterRole", "Role")
    assert role["rules"] == cluster_role["rules"]


@pytest.fixture
def audited_control_plane() -> Iterator[LocalControlPlane]:
    """A control plane of this test's own, auditing the namespaced controller's requests. The
    session's shared controller watches every namespace: on the shared control plane it would
    write the status this test proves nobody writes."""
    policy = {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [{"level": "Metadata", "users": [CONTROLLER_USER]}, {"level": "None"}],
    }
    with LocalControlPlane(assets.find(), ControlPlaneOptions(audit_policy=policy)) as cp:
        yield cp


def api_key_in_route_config(chain: Chain) -> str | None:
    creds = chain.backend_credentials("chat").get("openai")
    return None if creds is None else str(creds["data"]["apiKey"])


def outside_its_namespaces(r: Request) -> bool:
    """A request the namespaced controller has no business making: anything outside the
    watched namespaces but its Lease (cluster-wide lists and watches included)."""
    lease = r.namespace == manifests.NAMESPACE and r.resource == "leases"
    return r.namespace not in WATCHED and not lease


@pytest.mark.local_control_plane
def test_namespaced_install_reconciles_its_namespaces_only(
    audited_control_plane: LocalControlPlane, tmp_path: Path
) -> None:
    cp = audited_control_plane
    api = clients.Client(restconfig.load(str(cp.kubeconfig)))
    # As a cluster admin would: the CRDs, then the overlay, in namespaces that exist.
    install_crds(api)
    for ns in (*WATCHED, UNWATCHED):
        api.create(objects.NAMESPACES, {"metadata": {"name": ns}})
    docs = manifests.render(OVERLAY, kubectl=cp.assets / "kubectl")  # Namespace first
    manifests.apply(api, docs)

    # Created before the controller starts, so it has every chance to touch them.
    unwatched = Chain(api, UNWATCHED)
    unwatched.secret("key", apiKey=KEY)
    unwatched.api_key_policy("openai", secret="key", targets=["openai"])

    kubeconfig = service_account_kubeconfig(cp, api, tmp_path / "kubeconfig")
    namespaces = tuple(a for a in container(docs)["args"] if a.startswith("--namespace="))
    controller = ControllerProcess(kubeconfig, tmp_path, args=namespaces)
    audit = AuditLog(cp.audit_log)
    controller.start()  # waits until it leads, through the overlay's leader-election Role
    try:
        chain = Chain(api, WATCHED[0])
        chain.secret("openai-key", apiKey=KEY)
        chain.api_key_policy("openai", secret="openai-key", targets=["openai"])
        chain.backend("openai")
        chain.route("chat", ["openai"])
        wait_for(lambda: api_key_in_route_config(chain) == KEY, what="the key in the route config")
        chain.wait_condition("route", "chat", "Programmed", "True")
        chain.wait_condition("policy", "openai", "Ready", "True", "CredentialsReady")
        wait_for(lambda: "CredentialsReady" in chain.event_reasons("openai"), what="an Event")
        wait_for(controller.idle, what="controller idle")

        policy = unwatched.get("policy", "openai")
        assert policy is not None
        assert not policy.get("status"), "a policy outside the watched namespaces was reconciled"
        assert unwatched.get("secret", rapi.derived_secret_name("openai")) is None
        assert unwatched.events() == []

        requests = audit.since(0)  # watches are logged when they start, lists when done
        assert requests, "the audit log holds the controller's requests"
        assert [r for r in requests if r.code == 403] == []
        assert [r for r in requests if outside_its_namespaces(r)] == []
        kinds = ("secrets", "backendsecuritypolicies", "servicebackends", "routes")
        for verb in ("list", "watch"):
            informed = {(r.resource, r.namespace) for r in requests if r.verb == verb}
            assert informed >= {(k, ns) for k in kinds for ns in WATCHED}, f"{verb} per namespace"
        assert "Forbidden" not in controller.logs()
        assert not chain.leaks(controller.logs())
        assert controller.stop() == 0, "a clean stop (it releases the Lease)"
    finally:
        if controller.proc is not None:
            controller.stop()


def test_a_namespace_listed_twice_is_watched_once(
    control_plane: LocalControlPlane, namespace: str
) -> None:
    """``--namespace a --namespace a`` (a repeated patch line) must not leave the cache unsynced
    for ever, nor run two reflectors over one namespace."""
    probe = ProbedClient(restconfig.load(str(control_plane.kubeconfig)))
    informer = Informer(
        probe, objects.SECRETS, namespaces=[namespace, namespace], metadata_only=True
    )
    informer.start()
    try:
        assert informer.wait_for_sync(10)
        assert probe.lists == 1
    finally:
        informer.stop()
