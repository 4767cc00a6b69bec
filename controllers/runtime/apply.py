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

from controllers.runtime import apiclient, objects
from controllers.runtime import client as clients
from controllers.runtime.objects import Body, Resource


def apply(
    api: apiclient.Writer,
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


_SCALARS = (str, bytes, int, float, bool, type(None))


def subset(desired: Any, actual: Any) -> bool:
    """Whether ``actual`` already holds everything in ``desired``: mappings may have extra keys,
    sequences must match item by item, scalars must be equal.

    Exact JSON types are tested before the ``Mapping``/``Sequence`` ABCs (~1 µs a check): every
    reconcile that changes nothing compares its whole desired Secret and status this way
    (30,000 of them in a restart), and the ABC checks were half a policy's no-op reconcile.
    """
    if isinstance(desired, _SCALARS):
        return bool(desired == actual)
    if isinstance(desired, (dict, Mapping)):
        return isinstance(actual, (dict, Mapping)) and all(
            k in actual and subset(v, actual[k]) for k, v in desired.items()
        )
    if isinstance(desired, (list, tuple, Sequence)):
        return (
            not isinstance(actual, _SCALARS)
            and isinstance(actual, (list, tuple, Sequence))
            and len(desired) == len(actual)
            and all(subset(d, a) for d, a in zip(desired, actual, strict=True))
        )
    return bool(desired == actual)
