"""Writing a status: merge conditions, compare with the cache, apply only on a difference, and
record an Event for each condition whose status or reason changed."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from controllers.reconcilers import api, conditions
from controllers.runtime import apply, events, objects
from controllers.runtime import client as clients
from controllers.runtime.objects import Resource


def write(
    api_client: clients.Client,
    recorder: events.EventRecorder,
    obj: Mapping[str, Any],
    resource: Resource,
    *,
    fields: dict[str, Any],
    updates: Sequence[conditions.Cond],
    now: float,
    event_types: Sequence[str],
    drop: Collection[str] = (),
) -> bool:
    """Applies ``fields`` plus the merged conditions as the whole status if it differs from the
    cached one; an Event per transition of a condition in ``event_types``. True if it wrote.
    Conditions of the types in ``drop`` are removed (they no longer apply)."""
    old = obj.get("status") or {}
    generation = int(objects.meta(obj).get("generation") or 0)
    merged = conditions.merge(old.get("conditions"), updates, generation=generation, now=now)
    merged = [c for c in merged if c["type"] not in drop]
    status = {**fields, "conditions": merged}
    if status == old:
        return False
    apply.apply(
        api_client,
        resource,
        {
            "apiVersion": api.API_VERSION,
            "kind": resource.kind,
            "metadata": {"name": objects.name(obj), "namespace": objects.namespace(obj)},
            "status": status,
        },
        field_manager=api.FIELD_MANAGER,
        subresource="status",
        resource_version=objects.meta(obj).get("resourceVersion"),
    )
    for c in conditions.transitions(old.get("conditions"), merged):
        if c["type"] in event_types:
            kind = events.NORMAL if c["status"] == "True" else events.WARNING
            recorder.event(obj, kind, c["reason"], c["message"])
    return True
