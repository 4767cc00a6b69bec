"""What the two Secret caches keep of each Secret: only what rotator reads, and data only for the
Secrets rotator itself writes.

Anyone who can create a Secret decides what it holds and how it is labelled, so neither a label
nor a size may make rotator cache it. The caches are trimmed on the way in (controller-runtime's
informer ``Transform``):

- every Secret (metadata-only watch): name, namespace and resourceVersion — enough to map a
  change to the policies that reference it, to tell whether a fetched body is current, and
  whether a copy is (``rotator.dev/source-version`` records resourceVersions only, so no uid is
  kept of the tens of thousands of Secrets a cluster may hold) — as an
  :class:`~controllers.runtime.objects.Identity`, the store's key and the resourceVersion,
  which reads as those three fields would;
- Secrets labelled ``app.kubernetes.io/managed-by=rotator``: the same identity, labels,
  annotations and ownerReferences; the data only of a Secret that a
  policy or a route owns as its controller *and* that bears the name rotator gives it
  (``rotator-bsp-<policy>``, ``rotator-route-<route>``) — at most one per rotator object, so the
  bytes kept grow with the objects users are allowed to create, not with Secrets. Any other
  labelled Secret keeps its identity and ownerReferences only.

Of rotator's own Secrets, the route config keeps a hash of its data (:data:`DATA_HASH`), not
the data: its only readers compare it with a configuration about to be written (the route
reconciler's "already written?" and the echo filter, both through :func:`holds_data`), and the
configuration inlines every backend's credentials, so it grows with the route. A hash of the
data itself, not the ``config-hash`` annotation, so an edit of the data that leaves the
annotation alone is still seen and repaired. The derived Secret keeps its data: the route
renderer and the policy reconciler read it.

Bytes held per cached Secret of a scale-benchmark chain (each from its own watch event, after
``controllers.runtime.compaction``; ``tracemalloc``, as ``python -m tests.bench.scale`` prints
them): metadata view 161 each as an ``Identity`` (308 as the two compacted dicts it replaced,
630 by object sizes before compaction and this module's trimming), derived and route config
Secrets in the managed view 1,240 on average (3,440 and 3,660 by object sizes before; the route
config's data is a digest).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, cast

from controllers.reconcilers import api
from controllers.runtime import objects
from controllers.runtime.objects import Body

MANAGED_PAGE_SIZE = 50
"""List page size of the managed-Secret view: a page is decoded whole, and a labelled Secret may
be 1 MiB, so a page is at most ~70 MiB of transient memory however the labels are abused."""

_IDENTITY = ("name", "namespace", "resourceVersion")
"""What both views keep of every Secret's metadata: no uid (85 bytes, and an entry in the
interning table, per Secret), which nothing rotator does with a Secret reads."""
OWN_KEYS = frozenset(
    {
        api.MANAGED_BY_LABEL,
        api.POLICY_LABEL,
        api.ROUTE_LABEL,
        api.OWNER_NAME_ANNOTATION,
        api.EXPIRATION_ANNOTATION,
        api.CREDENTIAL_HASH_ANNOTATION,
        api.CONFIG_HASH_ANNOTATION,
        api.CONFIG_INPUTS_ANNOTATION,
        api.ISSUED_AT_ANNOTATION,
        api.SPEC_HASH_ANNOTATION,
        api.SOURCE_VERSION_ANNOTATION,
        api.ANSWERED_REQUEST_ANNOTATION,
    }
)
"""The label and annotation keys rotator writes on its Secrets (derived/, route/): maps of these
keys alone share their key tables in the managed view's cache (``compaction``), ~240 bytes less
per chain. A Secret with other labels or annotations keeps them in plain maps, as before;
provider state (``state.rotator.dev/…``, a key per state) is one of those."""
_NAMES = {
    "BackendSecurityPolicy": api.derived_secret_name,
    "Route": api.route_config_secret_name,
}


DATA_HASH = "dataDigest"
"""Where a cached route config Secret holds :func:`data_hash` of its data, in place of
``data`` (a top-level field no Secret has; the cache's own, never written)."""


def data_hash(data: Mapping[str, str]) -> str:
    """SHA-256 of a Secret's ``data`` (keys sorted): equal exactly when the data are."""
    canonical = json.dumps(dict(data), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


DATA_DIGEST = DATA_HASH
"""The name :data:`DATA_HASH` had before (one name per hash: ``data_hash``)."""
data_digest = data_hash
"""The name :func:`data_hash` had before."""


def holds_data(cached: Mapping[str, Any], data: Mapping[str, str]) -> bool:
    """Whether the cached Secret ``cached`` holds exactly ``data``: by hash when the cache
    kept one (a route config), else by the data it kept."""
    kept_hash = cached.get(DATA_HASH)
    if kept_hash is not None:
        return bool(kept_hash == data_hash(data))
    return (cached.get("data") or {}) == dict(data)


def owned_by_rotator(secret: Mapping[str, Any]) -> bool:
    """Whether a policy or route is the Secret's controller and the Secret has the name rotator
    gives that owner's Secret."""
    ref = objects.controller_of(secret)
    if ref is None or ref.get("apiVersion") != api.API_VERSION:
        return False
    name_for = _NAMES.get(ref.get("kind", ""))
    return name_for is not None and objects.name(secret) == name_for(ref.get("name", ""))


def identity_only(secret: Body) -> Body:
    """The transform of the all-Secrets metadata view: an :class:`~controllers.runtime.objects.
    Identity`, which reads as ``{"metadata": {name, namespace, resourceVersion}}``."""
    return cast(Body, objects.Identity.of(secret))


def managed(secret: Body) -> Body:
    """The transform of the managed-Secret view."""
    if owned_by_rotator(secret):
        kept: Body = {
            "metadata": {
                k: v
                for k, v in objects.meta(secret).items()
                if k in (*_IDENTITY, "labels", "annotations", "ownerReferences")
            },
        }
        data = secret.get("data") or {}
        if (objects.controller_of(secret) or {}).get("kind") == "Route":
            kept[DATA_HASH] = data_hash(data)
        else:
            kept["data"] = data
        return kept
    md = objects.meta(secret)
    identity = {k: md[k] for k in _IDENTITY if k in md}  # type: ignore[literal-required]
    if "ownerReferences" in md:
        identity["ownerReferences"] = md["ownerReferences"]
    return {"metadata": identity}
