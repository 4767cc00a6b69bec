"""Typed views over raw Kubernetes bodies, and the resource types the runtime talks about.

Objects are kept as plain decoded JSON (``dict``), never the kubernetes client's generated model
classes, which are slow to decode and heavy in memory. Objects handed out by a cache are shared:
treat them as read-only and copy (``copy.deepcopy``) before building something to write.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
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
    if type(obj) is Identity:  # its own key, the very string a store then holds it under
        return obj.key
    return make_key(namespace(obj), name(obj))


def make_key(namespace: str, name: str) -> ObjectKey:
    return ObjectKey(f"{namespace}/{name}" if namespace else name)


def split_key(key: ObjectKey) -> tuple[str, str]:
    """``(namespace, name)``; namespace is empty for cluster-scoped keys."""
    namespace, _, name = key.rpartition("/")
    return namespace, name


_DECIMAL_DIGITS = 19
"""Digits of the longest resourceVersion kept as an int (etcd's are int64); any other string
is kept as it came."""


class Identity(Mapping[str, Any]):
    """An object reduced to its identity: its key and resourceVersion, as a view keeps the
    objects of a kind whose existence and version alone are read (every Secret, watched
    metadata-only: ``controllers/reconcilers/cache/secretviews.py``). It reads as the object
    ``{"metadata": {"name", "namespace", "resourceVersion"}}`` would (the metadata built at each
    read) and is never written to.

    Why not that dict: a cluster holds tens of thousands of Secrets rotator has nothing to do
    with, and two dicts and an interned name each held 424 bytes of them, beside the store's
    key; this holds 48 bytes and shares the store's key string (:func:`key_of`). A
    resourceVersion that is a plain decimal (every one etcd gives) is kept as an int, read back
    as the same string. Measured at 10,000 chains and 50,000 other Secrets: in the benchmark's
    commit message (``python -m tests.bench.scale``)."""

    __slots__ = ("_version", "key")

    def __init__(self, key: ObjectKey, resource_version: str | None) -> None:
        self.key = key
        version: int | str | None = resource_version
        if (
            type(resource_version) is str
            and 0 < len(resource_version) <= _DECIMAL_DIGITS
            and resource_version.isascii()
            and resource_version.isdigit()
            and resource_version[0] != "0"
        ):
            version = int(resource_version)  # read back as the same string
        self._version = version

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> Identity:
        return cls(key_of(obj), meta(obj).get("resourceVersion"))

    @property
    def resource_version(self) -> str | None:
        version = self._version
        return str(version) if type(version) is int else version  # type: ignore[return-value]

    def __getitem__(self, field: str) -> Any:
        if field != "metadata":
            raise KeyError(field)
        namespace, name = split_key(self.key)
        md: dict[str, str] = {"name": name}
        if namespace:
            md["namespace"] = namespace
        version = self.resource_version
        if version is not None:
            md["resourceVersion"] = version
        return md

    def __iter__(self) -> Iterator[str]:
        return iter(("metadata",))

    def __len__(self) -> int:
        return 1

    def __repr__(self) -> str:
        return f"Identity({self.key!r}, {self.resource_version!r})"


def controller_of(obj: Mapping[str, Any]) -> OwnerReference | None:
    """The owner reference with ``controller: true``, if any."""
    for ref in meta(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


def is_being_deleted(obj: Mapping[str, Any]) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))
