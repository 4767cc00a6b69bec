"""Reading the API server's audit log: what the controller really asked the API server to do."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
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


class AuditLog:
    """Requests logged since a mark; the log only grows, so a byte offset is a mark."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def mark(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def since(self, mark: int) -> list[Request]:
        if not self.path.exists():
            return []
        with self.path.open("rb") as f:
            f.seek(mark)
            lines = f.read().splitlines()
        out = []
        for line in lines:
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
                )
            )
        return out

    def writes_since(self, mark: int, *, exclude: tuple[str, ...] = ("leases",)) -> list[Request]:
        """Completed write requests, except to the given resources."""
        return [
            r
            for r in self.since(mark)
            if r.verb in WRITE_VERBS and r.resource not in exclude and r.stage == "ResponseComplete"
        ]

    def counts_since(self, mark: int) -> Counter[tuple[str, str]]:
        return Counter(
            (r.verb, r.resource + (f"/{r.subresource}" if r.subresource else ""))
            for r in self.since(mark)
            if r.stage == "ResponseComplete"
        )
