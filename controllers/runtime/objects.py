"""Typed views over raw Kubernetes bodies, and the resource types the runtime talks about.

Objects are kept as plain decoded JSON (``dict``), never the kubernetes client's generated model
classes, which are slow to decode and heavy in memory. Objects handed out by a cache are shared:
treat them as read-only and copy (``copy.deepcopy``) before building something to write.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NewType, TypedDict, cast

from controllers.runtime import errors

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
            base += f"/namespaces/{path_segment(namespace, 'namespace')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{path_segment(name, 'name')}"
            if subresource:
                base += f"/{path_segment(subresource, 'subresource')}"
        return base

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


_UNSAFE_SEGMENT = re.compile(r"[/\\%?#\x00-\x1f\x7f]")


def path_segment(value: str, what: str) -> str:
    """``value`` if it is safe as one REST path segment, else :class:`~.errors.InvalidName`.

    Names reach paths from user-written fields (a policy's ``serviceAccountName``). The HTTP
    stack collapses ``..`` and splits on ``/``, so ``../../victim/serviceaccounts/admin`` would
    address another namespace's object: the CRDs reject such names at admission, and this check
    makes the client safe without them (defence in depth). Percent signs, query and fragment
    characters and control characters are refused too: no Kubernetes name contains them.
    """
    if value in ("", ".", "..") or _UNSAFE_SEGMENT.search(value):
        raise errors.InvalidName(f"{what} {value[:64]!r} is not a valid Kubernetes object name")
    return value


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
