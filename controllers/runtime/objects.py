"""Typed views over raw Kubernetes bodies, and the resource types the runtime talks about.

Objects are kept as plain decoded JSON (``dict``), never the kubernetes client's generated model
classes, which are slow to decode and heavy in memory. Objects handed out by a cache are shared:
treat them as read-only and copy (``copy.deepcopy``) before building something to write.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NewType, TypedDict, cast

ObjectKey = NewType("ObjectKey", str)
"""``namespace/name`` for namespaced objects, ``name`` for cluster-scoped ones."""

Body = dict[str, Any]
"""A raw Kubernetes object or list, as decoded from JSON."""


class OwnerReference(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool
    blockOwnerDeletion: bool


class ObjectMeta(TypedDict, total=False):
    name: str
    generateName: str
    namespace: str
    uid: str
    resourceVersion: str
    generation: int
    creationTimestamp: str
    deletionTimestamp: str
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[OwnerReference]
    finalizers: list[str]
    managedFields: list[Any]


@dataclass(frozen=True)
class Resource:
    """A resource type: group/version/plural, its kind, and whether it is namespaced."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, *, namespace: str | None = None, name: str | None = None, subresource: str = ""
    ) -> str:
        """The REST path; ``namespace=None`` on a namespaced kind means all namespaces."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


SECRETS = Resource("", "v1", "secrets", "Secret")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
PODTEMPLATES = Resource("", "v1", "podtemplates", "PodTemplate")
SERVICEACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
EVENTS = Resource("", "v1", "events", "Event")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")


def meta(obj: Mapping[str, Any]) -> ObjectMeta:
    return cast(ObjectMeta, obj.get("metadata") or {})


def name(obj: Mapping[str, Any]) -> str:
    return meta(obj).get("name", "")


def namespace(obj: Mapping[str, Any]) -> str:
    return meta(obj).get("namespace", "")


def key_of(obj: Mapping[str, Any]) -> ObjectKey:
    return make_key(namespace(obj), name(obj))


def make_key(namespace: str, name: str) -> ObjectKey:
    return ObjectKey(f"{namespace}/{name}" if namespace else name)


def split_key(key: ObjectKey) -> tuple[str, str]:
    """``(namespace, name)``; namespace is empty for cluster-scoped keys."""
    namespace, _, name = key.rpartition("/")
    return namespace, name


def controller_of(obj: Mapping[str, Any]) -> OwnerReference | None:
    """The owner reference with ``controller: true``, if any."""
    for ref in meta(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


def is_being_deleted(obj: Mapping[str, Any]) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))
