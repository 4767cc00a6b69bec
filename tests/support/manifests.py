"""Applying the project's manifests to the test control plane as kustomize would render them."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from controllers.reconcilers import api as rapi
from controllers.runtime import client as clients
from controllers.runtime import errors, objects
from controllers.runtime.objects import Resource

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "config"

NAMESPACE = "rotator-system"
NAME_PREFIX = "rotator-"

RBAC = "rbac.authorization.k8s.io"
KINDS: dict[str, Resource] = {
    "Namespace": objects.NAMESPACES,
    "ServiceAccount": objects.SERVICEACCOUNTS,
    "ClusterRole": Resource(RBAC, "v1", "clusterroles", "ClusterRole", namespaced=False),
    "ClusterRoleBinding": Resource(
        RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False
    ),
    "Role": Resource(RBAC, "v1", "roles", "Role"),
    "RoleBinding": Resource(RBAC, "v1", "rolebindings", "RoleBinding"),
    "Secret": objects.SECRETS,
    "BackendSecurityPolicy": rapi.POLICIES,
    "ServiceBackend": rapi.BACKENDS,
    "Route": rapi.ROUTES,
    "CustomResourceDefinition": Resource(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        namespaced=False,
    ),
}


def load(folder: Path) -> list[dict[str, Any]]:
    """The documents a kustomization lists (resources only), in order."""
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    return [d for resource in kustomization["resources"] for d in load_file(folder / resource)]


def load_file(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def kustomize(
    docs: Iterable[dict[str, Any]], *, namespace: str, prefix: str
) -> list[dict[str, Any]]:
    """kustomize's ``namespace`` and ``namePrefix`` for the kinds config/rbac uses."""
    out = []
    for original in docs:
        doc = copy.deepcopy(original)
        md = doc["metadata"]
        md["name"] = prefix + md["name"]
        if KINDS[doc["kind"]].namespaced:
            md["namespace"] = namespace
        if "roleRef" in doc:
            doc["roleRef"]["name"] = prefix + doc["roleRef"]["name"]
        for subject in doc.get("subjects") or []:
            subject["name"] = prefix + subject["name"]
            subject["namespace"] = namespace
        out.append(doc)
    return out


def apply(
    api: clients.Client, docs: Iterable[dict[str, Any]], *, namespace: str | None = None
) -> None:
    """Create or replace each document (namespaced ones in ``namespace`` if they name none)."""
    for doc in docs:
        resource = KINDS[doc["kind"]]
        ns = objects.namespace(doc) or (namespace if resource.namespaced else None)
        try:
            api.create(resource, doc, namespace=ns)
        except errors.AlreadyExists:
            current = api.get(resource, objects.name(doc), namespace=ns)
            version = current["metadata"]["resourceVersion"]
            api.replace(
                resource, {**doc, "metadata": {**doc["metadata"], "resourceVersion": version}}
            )
