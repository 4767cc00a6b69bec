"""Chains as documents to apply (Secret → BackendSecurityPolicy → ServiceBackend → Route), and
whether a namespace's rotator objects are all Ready. Documents, not API calls: the suite applies
them with ``kubectl apply --server-side`` as a user would, hundreds at a time."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from controllers.reconcilers import api as rapi
from tests.kind.cluster import REPO, Cluster
from tests.kind.standins import StandIns
from tests.support.polling import Timeout, wait_for

ROLE_ARN = "arn:aws:iam::123456789012:role/bedrock"
CALLER = "caller"
"""The ServiceAccount the STS chains' policies wear; it opts in for every policy (``*``)."""
KINDS = {"policy": rapi.POLICIES, "backend": rapi.BACKENDS, "route": rapi.ROUTES}
READY = {
    "policy": ("Ready",),
    "backend": ("ResolvedRefs",),
    "route": ("ResolvedRefs", "Programmed"),
}
STS_CALL = "AssumeRoleWithWebIdentity"
TEST_KEYS: set[str] = set()
"""Every API key a test of the suite wrote into a Secret (:func:`new_api_key`): the leak scans
look for these too, since the stand-ins' ``issued()`` knows only what they minted or were given."""


def new_api_key(what: str) -> str:
    """A fresh API key for a test's Secret, recorded for the leak scans."""
    key = f"sk-kind-{what}-{uuid.uuid4().hex}"
    TEST_KEYS.add(key)
    return key


def _object(kind: str, name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": rapi.API_VERSION,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def backend_and_route(name: str, namespace: str, **route_spec: Any) -> list[dict[str, Any]]:
    return [
        _object(
            "ServiceBackend",
            name,
            namespace,
            {
                "schema": "AWSBedrock",
                "endpoint": {"host": "bedrock-runtime.us-east-1.amazonaws.com"},
            },
        ),
        _object(
            "Route",
            name,
            namespace,
            {
                "rules": [
                    {"matches": [{"modelName": f"model-{name}"}], "backendRefs": [{"name": name}]}
                ],
                **route_spec,
            },
        ),
    ]


def caller(namespace: str) -> dict[str, Any]:
    """The :data:`CALLER` ServiceAccount, opted in for every policy of its namespace."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": CALLER,
            "namespace": namespace,
            "annotations": {rapi.ALLOWED_POLICIES_ANNOTATION: "*"},
        },
    }


def sts_chains(namespace: str, count: int, *, prefix: str = "sts") -> list[dict[str, Any]]:
    """``count`` chains whose policies exchange the :data:`CALLER` ServiceAccount's token for
    STS sessions (``AssumeRoleWithWebIdentity``), the ServiceAccount first."""
    docs = [caller(namespace)]
    for i in range(count):
        name = f"{prefix}-{i:03d}"
        source = {"serviceAccountName": CALLER, "awsRoleArn": ROLE_ARN}
        docs.append(
            _object(
                "BackendSecurityPolicy",
                name,
                namespace,
                {
                    "type": "AWSCredentials",
                    "targetRefs": [{"name": name}],
                    "awsCredentials": {"region": "us-east-1", "serviceAccountToken": source},
                },
            )
        )
        docs += backend_and_route(name, namespace)
    return docs


def api_key_chain(namespace: str, name: str, key: str) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "stringData": {"apiKey": key},
        },
        _object(
            "BackendSecurityPolicy",
            name,
            namespace,
            {
                "type": "APIKey",
                "targetRefs": [{"name": name}],
                "apiKey": {"secretRef": {"name": name}},
            },
        ),
        *backend_and_route(name, namespace),
    ]


def policies(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == "BackendSecurityPolicy"]


def conditions(obj: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def not_ready(cluster: Cluster, namespace: str) -> list[str]:
    """Every rotator object of the namespace whose readiness conditions are not all True
    (policy Ready; backend ResolvedRefs; route ResolvedRefs and Programmed), with the reason."""
    waiting = []
    for kind, resource in KINDS.items():
        for obj in cluster.items(resource, namespace=namespace):
            found = conditions(obj)
            for type_ in READY[kind]:
                c = found.get(type_)
                if c is None or c["status"] != "True":
                    reason = c["reason"] if c else "no condition yet"
                    waiting.append(f"{kind} {obj['metadata']['name']} {type_}: {reason}")
    return waiting


def sts_calls(calls: Mapping[str, int]) -> int:
    """The STS web-identity exchanges among the stand-ins' call counts."""
    return sum(n for action, n in calls.items() if action.split(".")[-1] == STS_CALL)


def wait_all_ready(cluster: Cluster, *namespaces: str, timeout: float, what: str) -> None:
    """Waits until :func:`not_ready` is empty in each of ``namespaces``; fails naming what still
    is not Ready."""

    def waiting() -> list[str]:
        return [
            f"{ns}: {w}" if len(namespaces) > 1 else w
            for ns in namespaces
            for w in not_ready(cluster, ns)
        ]

    try:
        wait_for(lambda: not waiting(), timeout=timeout, interval=0.5, what=what)
    except Timeout:
        raise Timeout(f"{what}: still not Ready after {timeout} s: {waiting()}") from None


def sample_documents(standins: StandIns, cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    """config/samples in ``namespace``, with what they name known to the stand-ins."""
    docs = cluster.kustomize(REPO / "config" / "samples")
    for doc in docs:
        doc["metadata"]["namespace"] = namespace
    secrets = [d for d in docs if d["kind"] == "Secret"]
    standins.register(policies(docs), secrets)
    return docs
