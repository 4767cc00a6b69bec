"""The reconcile contract: one method, one result type, one terminal error.

A reconciler gets a :class:`Request` (which object to look at, not what happened to it), reads the
world from the cache, makes it right, and either returns a :class:`Result` or raises:

* ``Result()`` — done; the object's backoff is forgotten, and a requeue an earlier reconcile
  asked for is cancelled (this reconcile saw the current state and needs no later look).
* ``Result(requeue_after=d)`` — done for now; reconcile again after exactly ``d`` seconds,
  bypassing the rate limiter. Of several pending times for one object the earliest wins. This is
  the only way to ask for a requeue.
* any exception — failed; retried through the rate limiter (per-object exponential backoff).
  A ``requeue_after`` attribute on the exception is ignored, with a warning.
* :class:`TerminalError` — failed in a way retrying cannot fix; logged and counted, not retried
  (a change to the object brings it back).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from controllers.runtime import objects


@dataclass(frozen=True, order=True)
class Request:
    """The key of the object to reconcile."""

    namespace: str
    name: str

    @classmethod
    def for_object(cls, obj: Mapping[str, Any]) -> Request:
        return cls(objects.namespace(obj), objects.name(obj))

    @property
    def key(self) -> objects.ObjectKey:
        return objects.make_key(self.namespace, self.name)

    def __str__(self) -> str:
        return self.key


@dataclass(frozen=True)
class Result:
    """What a successful reconcile asks for next."""

    requeue_after: float | None = None
    """Seconds until the object must be reconciled again; None means only on change."""

    def __post_init__(self) -> None:
        if self.requeue_after is not None and self.requeue_after < 0:
            raise ValueError("requeue_after must not be negative")


class TerminalError(Exception):
    """A failure that retrying cannot fix; the controller does not requeue it."""


class Reconciler(Protocol):
    """Makes one object's world match its spec; must be idempotent and safe to call anytime."""

    def reconcile(self, request: Request) -> Result: ...
