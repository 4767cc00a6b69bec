"""What the two Secret caches keep of each Secret: only what rotator reads, and data only for the
Secrets rotator itself writes.

Anyone who can create a Secret decides what it holds and how it is labelled, so neither a label
nor a size may make rotator cache it. The caches are trimmed on the way in (controller-runtime's
informer ``Transform``):

- every Secret (metadata-only watch): name, namespace, uid, resourceVersion — enough to map a
  change to the policies that reference it and to tell whether a fetched body is current;
- Secrets labelled ``app.kubernetes.io/managed-by=rotator``: the data only of a Secret that a
  policy or a route owns as its controller *and* that bears the name rotator gives it
  (``rotator-bsp-<policy>``, ``rotator-route-<route>``) — at most one per rotator object, so the
  bytes kept grow with the objects users are allowed to create, not with Secrets. Any other
  labelled Secret keeps its identity and ownerReferences only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controllers.reconcilers import api
from controllers.runtime import objects
from controllers.runtime.objects import Body

MANAGED_PAGE_SIZE = 50
"""List page size of the managed-Secret view: a page is decoded whole, and a labelled Secret may
be 1 MiB, so a page is at most ~70 MiB of transient memory however the labels are abused."""

_IDENTITY = ("name", "namespace", "uid", "resourceVersion")
_NAMES = {
    "BackendSecurityPolicy": api.derived_secret_name,
    "Route": api.route_config_secret_name,
}


def owned_by_rotator(secret: Mapping[str, Any]) -> bool:
    """Whether a policy or route is the Secret's controller and the Secret has the name rotator
    gives that owner's Secret."""
    ref = objects.controller_of(secret)
    if ref is None or ref.get("apiVersion") != api.API_VERSION:
        return False
    name_for = _NAMES.get(ref.get("kind", ""))
    return name_for is not None and objects.name(secret) == name_for(ref.get("name", ""))


def identity_only(secret: Body) -> Body:
    """The transform of the all-Secrets metadata view."""
    md = objects.meta(secret)
    return {"metadata": {k: md[k] for k in _IDENTITY if k in md}}  # type: ignore[literal-required]


def managed(secret: Body) -> Body:
    """The transform of the managed-Secret view."""
    if owned_by_rotator(secret):
        return {
            "metadata": {
                k: v
                for k, v in objects.meta(secret).items()
                if k in (*_IDENTITY, "labels", "annotations", "ownerReferences")
            },
            "data": secret.get("data") or {},
        }
    md = objects.meta(secret)
    kept = {k: md[k] for k in _IDENTITY if k in md}  # type: ignore[literal-required]
    if "ownerReferences" in md:
        kept["ownerReferences"] = md["ownerReferences"]
    return {"metadata": kept}
