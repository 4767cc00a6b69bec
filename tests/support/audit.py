"""Reading the API server's audit log: what the controller really asked the API server to do."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})

CONTROLLER_GROUP = "system:serviceaccounts:rotator-system"

POLICY: dict[str, Any] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "userGroups": [CONTROLLER_GROUP]},
        {"level": "None"},
    ],
}


@dataclass(frozen=True)
class Request:
    verb: str
    resource: str
    subresource: str
    namespace: str
    name: str
    user: str
    stage: str
    code: int
    received: float = 0.0
    """When the API server received the request, in seconds since the epoch (0 if unknown)."""
    completed: float = 0.0
    """When it logged the request's stage (for ``ResponseComplete``: the response was sent), in
    seconds since the epoch (0 if unknown)."""


class AuditLogMissing(AssertionError):
    """The audit log is not where it should be, or shrank: a check on it would pass on nothing."""


class AuditLog:
    """Requests logged since a mark; the log only grows, so a byte offset is a mark.

    Reading fails loudly when the file is missing or shorter than a mark (rotated, or another
    file): an empty read would make every "no such request" check pass without looking.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def mark(self) -> int:
        return self._size()

    def since(self, mark: int, until: int | None = None) -> list[Request]:
        """The requests logged from ``mark`` on (to ``until``, another mark, if given); only
        complete lines, so an entry being written is read next time."""
        size = self._size()
        if mark > size or (until is not None and not mark <= until <= size):
            raise AuditLogMissing(f"{self.path} holds {size} bytes, not {mark}..{until}")
        with self.path.open("rb") as f:
            f.seek(mark)
            chunk = f.read((until if until is not None else size) - mark)
        out = []
        for line in chunk[: chunk.rfind(b"\n") + 1].splitlines():
            e = json.loads(line)
            ref = e.get("objectRef") or {}
            out.append(
                Request(
                    verb=e.get("verb", ""),
                    resource=ref.get("resource", ""),
                    subresource=ref.get("subresource", ""),
                    namespace=ref.get("namespace", ""),
                    name=ref.get("name", ""),
                    user=(e.get("user") or {}).get("username", ""),
                    stage=e.get("stage", ""),
                    code=int((e.get("responseStatus") or {}).get("code") or 0),
                    received=_epoch(e.get("requestReceivedTimestamp")),
                    completed=_epoch(e.get("stageTimestamp")),
                )
            )
        return out

    def writes_since(
        self, mark: int, until: int | None = None, *, exclude: tuple[str, ...] = ("leases",)
    ) -> list[Request]:
        """Completed write requests, except to the given resources."""
        return [
            r
            for r in self.since(mark, until)
            if r.verb in WRITE_VERBS and r.resource not in exclude and r.stage == "ResponseComplete"
        ]

    def counts_since(
        self, mark: int, until: int | None = None, *, namespace: str | None = None
    ) -> Counter[tuple[str, str]]:
        """Completed requests by verb and resource; only ``namespace``'s when given (the log is
        the whole server's: another test's chains, resynced by the same controller, are in it)."""
        return Counter(
            (r.verb, r.resource + (f"/{r.subresource}" if r.subresource else ""))
            for r in self.since(mark, until)
            if r.stage == "ResponseComplete" and (namespace is None or r.namespace == namespace)
        )

    def _size(self) -> int:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            raise AuditLogMissing(
                f"no audit log at {self.path}: is the API server auditing (audit_policy)?"
            ) from None


def _epoch(timestamp: str | None) -> float:
    """An audit timestamp (RFC 3339 with microseconds) in seconds since the epoch; 0 if absent."""
    return datetime.fromisoformat(timestamp).timestamp() if timestamp else 0.0
