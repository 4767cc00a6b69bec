"""Tenant isolation: a policy author gets nothing beyond their own namespace's opted-in identities.

Each attack is made as a tenant whose RBAC allows only policies, backends, routes and Secrets in
its own namespace, against the real API server, with the controller as its own process under the
shipped RBAC. Each ends rejected at admission with a clear message, or ``Ready=False`` with a
clear reason; the API server's audit log shows no request by the controller outside the tenant's
namespace, and no secret byte reaches a log, Event or status.
"""

from __future__ import annotations

import base64
import contextlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from controllers.reconcilers import api as rapi
from controllers.runtime import client as clients
from controllers.runtime import errors, objects, restconfig
from rotator_devkit.controlplane.cluster import LocalControlPlane
from tests.e2e.conftest import ROLE_ARN
from tests.support import audit, kube
from tests.support.chain import KINDS, Chain
from tests.support.controller import ControllerProcess
from tests.support.polling import wait_for

CRDS = objects.Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CRD", False)
DOT_SEGMENTS = "../../{victim}/serviceaccounts/admin"


@dataclass
class Tenant:
    namespace: str
    victim: str
    api: clients.Client
    chain: Chain
    """Builds with the tenant's own credentials."""
    admin: Chain
    """Reads what the tenant may not (Events), and does what only an admin may (opt-ins)."""


@pytest.fixture
def tenant(
    control_plane: LocalControlPlane,
    api: clients.Client,
    namespace: str,
    controller: ControllerProcess,
    tmp_path: Path,
) -> Iterator[Tenant]:
    """A tenant in ``namespace`` with minimal RBAC, and a victim namespace whose ServiceAccount
    ``admin`` opted in for every policy (of its own namespace)."""
    victim = f"victim-{uuid.uuid4().hex[:8]}"
    api.create(objects.NAMESPACES, {"metadata": {"name": victim}})
    api.create(
        objects.SERVICEACCOUNTS,
        {
            "metadata": {
                "name": "admin",
                "annotations": {rapi.ALLOWED_POLICIES_ANNOTATION: "*"},
            }
        },
        namespace=victim,
    )
    kubeconfig = tmp_path / "tenant.kubeconfig"
    rights = ["get", "list", "watch", "create", "update", "patch", "delete"]
    rules = [
        {
            "apiGroups": [rapi.GROUP],
            "resources": ["backendsecuritypolicies", "servicebackends", "routes"],
            "verbs": rights,
        },
        {"apiGroups": [""], "resources": ["secrets"], "verbs": rights},
    ]
    kube.namespaced_user(control_plane, api, namespace, "author", rules, kubeconfig)
    tenant_api = clients.Client(restconfig.load(str(kubeconfig)))
    built = Tenant(
        namespace, victim, tenant_api, Chain(tenant_api, namespace), Chain(api, namespace)
    )
    try:
        yield built
        built.admin.secret_values |= built.chain.secret_values
        leaks = built.admin.leaks(controller.logs())
        assert not leaks, leaks
    finally:
        with contextlib.suppress(errors.NotFound):
            api.delete(objects.NAMESPACES, victim)


def sa_policy(service_account: str) -> dict[str, Any]:
    return {
        "type": "AWSCredentials",
        "awsCredentials": {
            "region": "us-east-1",
            "serviceAccountToken": {"serviceAccountName": service_account, "awsRoleArn": ROLE_ARN},
        },
    }


def invalid(call: Any) -> str:
    """The API server's message for a create it refused as invalid."""
    with pytest.raises(errors.Invalid) as refused:
        call()
    return str(refused.value)


def requests_in(log: audit.AuditLog, mark: int, namespace: str) -> list[audit.Request]:
    """The controller's requests since ``mark`` on objects of ``namespace``."""
    return [r for r in log.since(mark) if r.namespace == namespace]


# --- names are names ---------------------------------------------------------------------------


@pytest.mark.oldest_kubernetes
@pytest.mark.parametrize(
    ("kind", "spec"),
    [
        ("policy", sa_policy(DOT_SEGMENTS)),
        ("policy", {"type": "APIKey", "apiKey": {"secretRef": {"name": "../other/secrets/x"}}}),
        (
            "policy",
            {
                "type": "APIKey",
                "targetRefs": [{"name": "a/b"}],
                "apiKey": {"secretRef": {"name": "key"}},
            },
        ),
        ("route", {"rules": [{"backendRefs": [{"name": ".."}]}]}),
    ],
    ids=["serviceAccountName", "secretRef", "targetRef", "backendRef"],
)
def test_dot_segments_and_slashes_are_refused_at_admission(
    tenant: Tenant, kind: str, spec: dict[str, Any]
) -> None:
    """Every field that names an object is a DNS-1123 subdomain, said in words."""
    spec = {**spec}
    message = invalid(lambda: tenant.chain.create(kind, "attack", spec, opt_in=False))
    assert "must be the name of an object in this namespace" in message, message
    assert "DNS-1123 subdomain" in message


@pytest.mark.oldest_kubernetes
def test_names_too_long_for_the_derived_secret_are_refused_at_admission(tenant: Tenant) -> None:
    spec = {"type": "APIKey", "apiKey": {"secretRef": {"name": "key"}}}
    message = invalid(lambda: tenant.chain.create("policy", "p" * 242, spec))
    assert "at most 241 characters" in message, message
    route = {"rules": [{"backendRefs": [{"name": "b"}]}]}
    message = invalid(lambda: tenant.chain.create("route", "r" * 240, route))
    assert "at most 239 characters" in message, message


@pytest.fixture
def without_name_rules(api: clients.Client) -> Iterator[None]:
    """The policy CRD with the serviceAccountName rule removed (as if an older CRD were
    installed): the controller must still refuse the name by itself. Restored afterwards."""
    crd = api.get(CRDS, "backendsecuritypolicies.rotator.dev")
    field = (
        "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/awsCredentials"
        "/properties/serviceAccountToken/properties/serviceAccountName"
    )
    original = crd["spec"]
    api.patch(
        CRDS,
        "backendsecuritypolicies.rotator.dev",
        [
            {"op": "remove", "path": f"{field}/x-kubernetes-validations"},
            {"op": "remove", "path": f"{field}/maxLength"},
        ],
        patch_type=clients.PatchType.JSON,
    )
    try:
        yield
    finally:
        current = api.get(CRDS, "backendsecuritypolicies.rotator.dev")
        current["spec"] = original
        api.replace(CRDS, current)


@pytest.mark.local_control_plane
def test_the_controller_refuses_dot_segments_even_when_admission_does_not(
    tenant: Tenant, audit_log: audit.AuditLog, without_name_rules: None
) -> None:
    """The second layer: the REST client builds no path from ``..`` — no TokenRequest for the
    victim's ServiceAccount, ``Ready=False`` with reason ``InvalidName``."""
    name = DOT_SEGMENTS.format(victim=tenant.victim)
    mark = audit_log.mark()

    def admitted() -> bool:
        with contextlib.suppress(errors.Invalid):
            tenant.chain.create("policy", "attack", sa_policy(name), opt_in=False)
            return True
        return False

    wait_for(admitted, timeout=30, what="the CRD without the name rule in force")
    ready = tenant.chain.wait_condition("policy", "attack", "Ready", "False", "InvalidName")
    assert "is not the name of a ServiceAccount in this namespace" in ready["message"]
    # The condition is read back before the API server has logged the write that set it (the
    # ResponseComplete line is written after the response): wait for that line, so the checks
    # below read a log that holds every request up to the refusal (the positive control).
    wait_for(
        lambda: any(
            r.namespace == tenant.namespace
            and r.resource == "backendsecuritypolicies"
            and r.name == "attack"
            and r.subresource == "status"
            for r in audit_log.since(mark)
        ),
        what="positive control: the controller's status write logged",
    )
    requests = audit_log.since(mark)
    assert not [r for r in requests if r.subresource == "token"], requests
    assert not requests_in(audit_log, mark, tenant.victim)


# --- ServiceAccount opt-in ---------------------------------------------------------------------


@pytest.mark.local_control_plane
def test_a_service_account_must_opt_in_to_each_policy(
    tenant: Tenant, audit_log: audit.AuditLog, api: clients.Client
) -> None:
    """Being allowed to create a policy does not mean being allowed to wear every ServiceAccount
    of the namespace: no annotation, or one naming another policy → no TokenRequest."""
    api.create(
        objects.SERVICEACCOUNTS,
        {"metadata": {"name": "deployer", "annotations": {rapi.ALLOWED_POLICIES_ANNOTATION: "x"}}},
        namespace=tenant.namespace,
    )
    mark = audit_log.mark()
    tenant.chain.create("policy", "wear", sa_policy("deployer"), opt_in=False)
    ready = tenant.chain.wait_condition(
        "policy", "wear", "Ready", "False", "ServiceAccountNotPermitted"
    )
    assert rapi.ALLOWED_POLICIES_ANNOTATION in ready["message"], ready["message"]
    wait_for(
        lambda: "RotationFailed" in tenant.admin.event_reasons("wear"),
        what="a Warning event on the policy",
    )
    tokens = [r for r in audit_log.since(mark) if r.subresource == "token"]
    assert not tokens, tokens
    reads = [r for r in audit_log.since(mark) if r.resource == "serviceaccounts"]
    assert reads, "positive control: the controller read the ServiceAccount"

    tenant.admin.allow_service_account("deployer", "wear")  # the ServiceAccount's owner opts in
    tenant.chain.wait_condition("policy", "wear", "Ready", "True", timeout=90)
    tokens = [r for r in audit_log.since(mark) if r.subresource == "token"]
    assert tokens, "the opted-in ServiceAccount's token was requested"
    assert {(r.namespace, r.name) for r in tokens} == {(tenant.namespace, "deployer")}, tokens
    assert not requests_in(audit_log, mark, tenant.victim)


# --- caches hold only what rotator owns ----------------------------------------------------------


def served_key(tenant: Tenant) -> str | None:
    """The API key route ``r`` gives backend ``b``."""
    credentials = tenant.admin.backend_credentials("r").get("b") or {}
    return (credentials.get("data") or {}).get("apiKey")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.local_control_plane
def test_labelled_foreign_secrets_do_not_fill_the_controllers_memory(
    tenant: Tenant, controller: ControllerProcess
) -> None:
    """300 Secrets of 1 MiB labelled managed-by=rotator, owned by nothing of rotator's: the
    controller keeps their identity only, its RSS stays under 200 MiB through a watch and a cold
    list of them, and rotations go on."""
    blob = base64.b64encode(os.urandom(1000 * 1024)).decode()
    for i in range(300):
        tenant.api.create(
            objects.SECRETS,
            {
                "metadata": {
                    "name": f"junk-{i:03d}",
                    "labels": {rapi.MANAGED_BY_LABEL: rapi.MANAGED_BY},
                },
                "data": {"v": blob},
            },
            namespace=tenant.namespace,
        )
    tenant.chain.secret("key", apiKey="sk-tenancy-first-0001")
    tenant.chain.api_key_policy("p", secret="key", targets=["b"])
    tenant.chain.backend("b")
    tenant.chain.route("r", ["b"])
    wait_for(
        lambda: served_key(tenant) == "sk-tenancy-first-0001",
        timeout=60,
        what="the route config after the junk",
    )
    assert controller.proc is not None
    after_watch = rss_mib(controller.proc.popen.pid)

    controller.restart()  # a cold list of the 300 Secrets, page by page
    assert controller.proc is not None
    pid = controller.proc.popen.pid
    tenant.chain.secret("key", apiKey="sk-tenancy-second-002")
    peak = after_watch

    def rotated() -> bool:
        nonlocal peak
        peak = max(peak, rss_mib(pid))
        return served_key(tenant) == "sk-tenancy-second-002"

    wait_for(rotated, timeout=60, interval=0.2, what="the route config after the restart")
    after_list = rss_mib(pid)
    print(
        f"\ncontroller RSS with 300 foreign 1 MiB labelled Secrets: {after_watch:.0f} MiB after "
        f"watching them arrive, {after_list:.0f} MiB after a cold list (peak sampled {peak:.0f})"
    )
    assert after_watch < 200
    assert after_list < 200
    assert peak < 200
    assert controller.proc.popen.poll() is None


# --- labels safe for any name --------------------------------------------------------------------


def test_names_too_long_for_labels_are_hashed_into_them(tenant: Tenant) -> None:
    policy, route = "p" * 241, "r" * 239
    tenant.chain.secret("key", apiKey="sk-long-names-0001")
    tenant.chain.api_key_policy(policy, secret="key", targets=["b"])
    tenant.chain.backend("b")
    tenant.chain.route(route, ["b"])
    tenant.chain.wait_condition("policy", policy, "Ready", "True")
    wait_for(lambda: tenant.chain.route_config(route), what="the route config")
    for owner, secret_name, label in (
        (policy, rapi.derived_secret_name(policy), rapi.POLICY_LABEL),
        (route, rapi.route_config_secret_name(route), rapi.ROUTE_LABEL),
    ):
        secret = tenant.chain.get("secret", secret_name)
        assert secret is not None
        md = secret["metadata"]
        assert md["labels"][label].startswith("sha256-")
        assert len(md["labels"][label]) <= 63
        assert md["annotations"][rapi.OWNER_NAME_ANNOTATION] == owner


# --- no secret byte in logs ----------------------------------------------------------------------


def test_invalid_utf8_is_reported_by_reason_without_its_bytes(
    tenant: Tenant, controller: ControllerProcess, api: clients.Client
) -> None:
    value = b"sk-\xff\xfe\xfd-not-text-" + os.urandom(8)
    api.create(
        objects.SECRETS,
        {"metadata": {"name": "binary"}, "data": {"apiKey": base64.b64encode(value).decode()}},
        namespace=tenant.namespace,
    )
    tenant.chain.api_key_policy("p", secret="binary", targets=["b"])
    ready = tenant.chain.wait_condition("policy", "p", "Ready", "False", "InvalidSecretData")
    assert "is not UTF-8 text" in ready["message"]
    assert "0xff" not in ready["message"]
    assert "position" not in ready["message"]
    logs = controller.logs()
    for needle in ("\\xff", "0xff", base64.b64encode(value).decode(), "can't decode byte"):
        assert needle not in logs, needle
    events = str(tenant.admin.events())
    assert "0xff" not in events
    assert "\\xff" not in events


def test_the_tenant_rbac_is_minimal(tenant: Tenant) -> None:
    """Positive control of the suite's premise: the tenant cannot read the victim's Secrets, nor
    mint tokens itself."""
    with pytest.raises(errors.Forbidden):
        tenant.api.list(objects.SECRETS, namespace=tenant.victim)
    with pytest.raises(errors.Forbidden):
        tenant.api.create(
            objects.SERVICEACCOUNTS,
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
            namespace=tenant.namespace,
            name="default",
            subresource="token",
        )
    assert set(KINDS) >= {"policy", "backend", "route"}
