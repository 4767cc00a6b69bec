"""Status conditions with Kubernetes' conventions (``metav1.Condition``).

Positive polarity; ``observedGeneration`` on every condition; ``lastTransitionTime`` moves only
when ``status`` changes, so a reason or message update keeps the time the state began.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from controllers.reconcilers import api
from controllers.runtime import clock as clocks

Status = Literal["True", "False", "Unknown"]


@dataclass(frozen=True)
class Cond:
    """A condition to set: type, status, PascalCase reason, and a message for humans."""

    type: str
    status: Status
    reason: str
    message: str


def true(type_: str, reason: str, message: str) -> Cond:
    return Cond(type_, "True", reason, message)


def false(type_: str, reason: str, message: str) -> Cond:
    return Cond(type_, "False", reason, message)


SPEC_VALID = "the spec is valid"


def accepted(
    reason: str = api.REASON_ACCEPTED, message: str = SPEC_VALID, *, ok: bool = True
) -> Cond:
    """``Accepted``, the condition of every rotator object: ``accepted()`` when the spec is one
    rotator can act on, else ``accepted(reason, message, ok=False)``. The one place it is
    built, so that its reason and message read the same on policies, backends and routes."""
    return Cond(api.ACCEPTED, "True" if ok else "False", reason, message)


def ready(reason: str, message: str, *, ok: bool) -> Cond:
    """A policy's ``Ready``: whether its credentials can be used now."""
    return Cond(api.READY, "True" if ok else "False", reason, message)


def renew_before_honored(reason: str, message: str, *, ok: bool) -> Cond:
    """A policy's ``RenewBeforeHonored`` (:data:`api.RENEW_BEFORE_HONORED`)."""
    return Cond(api.RENEW_BEFORE_HONORED, "True" if ok else "False", reason, message)


def find(conditions: Iterable[Mapping[str, Any]] | None, type_: str) -> api.Condition | None:
    for c in conditions or ():
        if c.get("type") == type_:
            return cast(api.Condition, c)
    return None


def of(obj: Mapping[str, Any], type_: str) -> api.Condition | None:
    return find((obj.get("status") or {}).get("conditions"), type_)


def is_true(obj: Mapping[str, Any], type_: str) -> bool:
    c = of(obj, type_)
    return c is not None and c.get("status") == "True"


def merge(
    existing: Sequence[Mapping[str, Any]] | None,
    updates: Sequence[Cond],
    *,
    generation: int,
    now: float,
) -> list[api.Condition]:
    """The conditions after applying ``updates``; others (set by someone else) are kept."""
    result: list[api.Condition] = []
    for u in updates:
        old = find(existing, u.type)
        since = (
            old["lastTransitionTime"]
            if old is not None and old.get("status") == u.status and old.get("lastTransitionTime")
            else clocks.rfc3339(now)
        )
        result.append(
            {
                "type": u.type,
                "status": u.status,
                "observedGeneration": generation,
                "lastTransitionTime": since,
                "reason": u.reason,
                "message": u.message,
            }
        )
    updated = {u.type for u in updates}
    result += [cast(api.Condition, dict(c)) for c in existing or () if c.get("type") not in updated]
    return result


def transitions(
    before: Sequence[Mapping[str, Any]] | None, after: Sequence[api.Condition]
) -> list[api.Condition]:
    """Conditions whose status or reason changed: what deserves an Event."""
    changed = []
    for c in after:
        old = find(before, c["type"])
        if old is None or old.get("status") != c["status"] or old.get("reason") != c["reason"]:
            changed.append(c)
    return changed
