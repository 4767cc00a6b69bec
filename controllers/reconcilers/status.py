"""Writing a status: merge conditions, compare with the cache, apply only on a difference, and
record an Event for each condition whose status or reason changed.

A condition that appears for the first time already True is not a transition: the first reconcile
found things as they should be (a cold start over N chains would otherwise record an Event per
condition per object, and nobody reads "resolved" on an object that was never anything else). It
appearing False is a new failure, and recorded. A caller that did something worth seeing on that
first reconcile — the policy creating the credentials — names the condition in ``announce``."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from controllers.reconcilers import api, conditions
from controllers.runtime import apiclient, apply, events, eventsink, objects
from controllers.runtime.objects import Resource


def write(
    api_client: apiclient.Writer,
    recorder: eventsink.EventSink,
    obj: Mapping[str, Any],
    resource: Resource,
    *,
    fields: dict[str, Any],
    updates: Sequence[conditions.Cond],
    now: float,
    event_types: Sequence[str],
    drop: Collection[str] = (),
    announce: Collection[str] = (),
) -> bool:
    """Applies ``fields`` plus the merged conditions as the whole status if it differs from the
    cached one; an Event per transition of a condition in ``event_types`` (a first appearance as
    True only for the types in ``announce``). True if it wrote. Conditions of the types in
    ``drop`` are removed (they no longer apply)."""
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
    before = old.get("conditions")
    for c in conditions.transitions(before, merged):
        if c["type"] not in event_types:
            continue
        first = conditions.find(before, c["type"]) is None
        if first and c["status"] == "True" and c["type"] not in announce:
            continue  # found as it should be: no news
        kind = events.NORMAL if c["status"] == "True" else events.WARNING
        recorder.event(obj, kind, c["reason"], c["message"])
    return True
