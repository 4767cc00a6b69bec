"""Object builders for tests (cert-manager's ``gen`` package): a body from a name and setters,
``gen.policy("p", gen.targets("b"), gen.ready())``, instead of a hand-written dict per test,
so that a test says what differs and a new required field is added in one place."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from controllers.reconcilers import api

Body = dict[str, Any]
Setter = Callable[[Body], None]

NS = "ns"


def policy(name: str, *setters: Setter, namespace: str = NS, type_: str = "APIKey") -> Body:
    """A BackendSecurityPolicy ``name`` of ``type_`` (no apiVersion or kind: what the
    in-memory API server and the caches need is metadata, spec and status)."""
    body: Body = {"metadata": {"name": name, "namespace": namespace}, "spec": {"type": type_}}
    for setter in setters:
        setter(body)
    return body


def targets(*backends: str) -> Setter:
    """``spec.targetRefs`` naming ``backends``."""

    def set_(body: Body) -> None:
        body["spec"]["targetRefs"] = [{"name": b} for b in backends]

    return set_


def condition(type_: str, status: str = "True", **fields: str) -> Setter:
    """A condition appended to ``status.conditions`` (only the fields given)."""

    def set_(body: Body) -> None:
        conditions = body.setdefault("status", {}).setdefault("conditions", [])
        conditions.append({"type": type_, "status": status, **fields})

    return set_


def ready(status: str = "True", **fields: str) -> Setter:
    """Its ``Ready`` condition."""
    return condition(api.READY, status, **fields)


def metadata(**fields: Any) -> Setter:
    """Fields merged into ``metadata``."""

    def set_(body: Body) -> None:
        body["metadata"].update(fields)

    return set_


def conditions(*items: dict[str, Any]) -> Setter:
    """``status.conditions``, exactly ``items`` (none: a status without conditions)."""

    def set_(body: Body) -> None:
        body.setdefault("status", {})["conditions"] = [dict(c) for c in items]

    return set_
