"""Server-side apply: how the reconcilers write, and only when something differs.

Why apply rather than update-with-retry: a reconcile computes the whole of what it owns (a derived
Secret, a status) from what it observed, so it has nothing to merge with — it only needs its fields
to win. Apply with a field manager and ``force`` does exactly that in one request: no
read-modify-write cycle, no conflict retries, and fields owned by others (a user's label on a
derived Secret) survive. Fields this manager stops sending are removed by the server.

Callers compare first (:func:`subset`) so that a reconcile with nothing to change sends nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from controllers.runtime import client as clients
from controllers.runtime import objects
from controllers.runtime.objects import Body, Resource


def apply(
    api: clients.Client,
    resource: Resource,
    body: Mapping[str, Any],
    *,
    field_manager: str,
    subresource: str = "",
    resource_version: str | None = None,
) -> Body:
    """Applies ``body`` (which names apiVersion, kind, metadata.name and .namespace).

    With ``resource_version`` (of the object the caller computed from), the write happens only
    if the object has not changed since: a reconcile that read a stale cache gets
    :class:`~.errors.Conflict` and is retried, instead of overwriting newer state.
    """
    if resource_version:
        body = {**body, "metadata": {**body["metadata"], "resourceVersion": resource_version}}
    return api.patch(
        resource,
        objects.name(body),
        body,
        namespace=objects.namespace(body) or None,
        patch_type=clients.PatchType.APPLY,
        field_manager=field_manager,
        force=True,
        subresource=subresource,
    )


def subset(desired: Any, actual: Any) -> bool:
    """Whether ``actual`` already holds everything in ``desired``: mappings may have extra keys,
    sequences must match item by item, scalars must be equal."""
    if isinstance(desired, Mapping):
        if not isinstance(actual, Mapping):
            return False
        return all(k in actual and subset(v, actual[k]) for k, v in desired.items())
    if isinstance(desired, Sequence) and not isinstance(desired, str | bytes):
        if not isinstance(actual, Sequence) or isinstance(actual, str | bytes):
            return False
        return len(desired) == len(actual) and all(
            subset(d, a) for d, a in zip(desired, actual, strict=True)
        )
    return bool(desired == actual)
