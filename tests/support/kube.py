"""Clients for tests: as the admin, or as whoever a bearer token says; and users with the
rights a test gives them and no more."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kubernetes import client as k8s_client

from controllers.runtime import client as clients
from controllers.runtime import metricsauth, objects
from rotator_devkit.controlplane.cluster import LocalControlPlane, write_kubeconfig
from tests.support.polling import wait_for

ROLES = objects.Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDINGS = objects.Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")


def token_client(control_plane: LocalControlPlane, token: str) -> clients.Client:
    """A client that authenticates with ``token`` only (no client certificate)."""
    configuration = k8s_client.Configuration()
    configuration.host = control_plane.server
    configuration.ssl_ca_cert = str(control_plane.ca_file)
    configuration.api_key = {"authorization": f"Bearer {token}"}
    return clients.Client(k8s_client.ApiClient(configuration))


def service_account_token(api: clients.Client, namespace: str, name: str) -> str:
    """A new ServiceAccount ``name`` in ``namespace`` (no rights of its own), and a token of it."""
    api.create(objects.SERVICEACCOUNTS, {"metadata": {"name": name}}, namespace=namespace)
    token: str = api.create(
        objects.SERVICEACCOUNTS,
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
        namespace=namespace,
        name=name,
        subresource="token",
    )["status"]["token"]
    return token


def namespaced_user(
    control_plane: LocalControlPlane,
    api: clients.Client,
    namespace: str,
    name: str,
    rules: Sequence[dict[str, Any]],
    kubeconfig: Path,
) -> str:
    """A ServiceAccount ``name`` in ``namespace``, bound by a Role of its own to ``rules`` in
    that namespace and nothing else, and a kubeconfig at ``kubeconfig`` that authenticates as it
    (a bearer token); returns the token."""
    token = service_account_token(api, namespace, name)
    api.create(ROLES, {"metadata": {"name": name}, "rules": list(rules)}, namespace=namespace)
    api.create(
        ROLE_BINDINGS,
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
        namespace=namespace,
    )
    wait_until_allowed(api, namespace, name, rules)
    write_kubeconfig(
        kubeconfig,
        server=control_plane.server,
        ca_file=control_plane.ca_file,
        user=name,
        credentials={"token": token},
    )
    return token


def wait_until_allowed(
    api: clients.Client, namespace: str, name: str, rules: Sequence[dict[str, Any]]
) -> None:
    """Until the API server's authorizer allows ServiceAccount ``name`` each resource of
    ``rules`` (its first verb) in ``namespace``, asked by SubjectAccessReview: the RBAC
    authorizer learns of a new RoleBinding through a watch of its own, so a request sent as soon
    as the binding is created can still be refused (a clean-clone CI saw a tenant's first
    create refused, 403)."""
    user = f"system:serviceaccount:{namespace}:{name}"
    asked = [
        {"namespace": namespace, "group": group, "resource": resource, "verb": rule["verbs"][0]}
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    ]

    def allowed() -> bool:
        return all(
            api.create(
                metricsauth.SUBJECTACCESSREVIEWS,
                {
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SubjectAccessReview",
                    "spec": {"user": user, "resourceAttributes": attributes},
                },
            )
            .get("status", {})
            .get("allowed")
            is True
            for attributes in asked
        )

    wait_for(allowed, timeout=30, what=f"{user} allowed what its Role grants")
