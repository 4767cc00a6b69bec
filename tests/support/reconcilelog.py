"""A replica's reconciles, read from its JSON log lines (``controllers/logs.py``): at debug level
every reconcile logs ``reconcile.started`` and one of :data:`ENDS` with its ``reconcile_id`` and a
``timestamp``, which is how the leader tests tell when each replica worked and that two never
worked at once — host processes' logs (tests/e2e/test_leader_faults.py) and Pods' logs
(tests/kind) alike. With shards, replicas work at once by design, each on its own namespaces, so
what must never overlap is two replicas' reconciles of one object (:func:`object_overlaps`)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

ENDS = frozenset({"reconcile.done", "reconcile.failed", "reconcile.terminal_error"})


@dataclass(frozen=True)
class Reconcile:
    key: str
    start: float
    """Wall-clock seconds, from the log line's timestamp."""
    end: float
    finished: bool
    """False: no end line (still running when the log ended: abandoned)."""
    namespace: str = ""
    """The reconciled object's namespace ('' for a cluster-scoped one)."""

    @property
    def object(self) -> str:
        """``controller:namespace/name``: one object of one controller, in any replica."""
        controller, _, name = self.key.partition(":")
        return f"{controller}:{self.namespace}/{name}"


def entries(text: str) -> Iterator[tuple[float, dict[str, Any]]]:
    """Each JSON log line with a timestamp, as (wall-clock seconds, the entry)."""
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("timestamp"), str):
            at = datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00")).timestamp()
            yield at, entry


def logged_at(text: str, event: str, *, after: float = 0.0) -> float | None:
    """When ``event`` was first logged after ``after`` (wall-clock seconds)."""
    return next(
        (at for at, entry in entries(text) if entry.get("event") == event and at >= after), None
    )


def reconciles(text: str, *, ended_at: float) -> list[Reconcile]:
    """Every reconcile in a replica's log; one without an end line ran until ``ended_at``."""
    starts: dict[str, tuple[str, str, float]] = {}
    ends: dict[str, float] = {}
    for at, entry in entries(text):
        rid = entry.get("reconcile_id")
        if not isinstance(rid, str):
            continue
        if entry.get("event") == "reconcile.started":
            key = f"{entry.get('controller')}:{entry.get('name')}"
            starts[rid] = (key, str(entry.get("namespace") or ""), at)
        elif entry.get("event") in ENDS:
            ends[rid] = at
    return [
        Reconcile(key, start, ends.get(rid, ended_at), rid in ends, namespace)
        for rid, (key, namespace, start) in starts.items()
    ]


def started(text: str, namespace: str) -> dict[str, set[str]]:
    """Controller → the names of the objects of ``namespace`` it started reconciling in
    ``text`` (one replica's log): what a test asks when it checks that a start reconciled
    everything (or nothing)."""
    found: dict[str, set[str]] = {}
    for r in reconciles(text, ended_at=0.0):
        if r.namespace == namespace:
            controller, _, name = r.key.partition(":")
            found.setdefault(controller, set()).add(name)
    return found


def last_done(text: str, namespace: str, controller: str, name: str) -> float | None:
    """When the last reconcile of ``controller``'s object ``namespace/name`` in ``text`` ended
    without an error (its ``reconcile.done`` line), or None if none did."""
    last = None
    for at, entry in entries(text):
        if entry.get("event") == "reconcile.done" and (
            entry.get("namespace"),
            entry.get("controller"),
            entry.get("name"),
        ) == (namespace, controller, name):
            last = at
    return last


def longest_overlap(a: list[Reconcile], b: list[Reconcile]) -> float:
    """The longest time a reconcile of one replica ran while one of the other's did (≤ 0:
    never)."""
    return max((min(x.end, y.end) - max(x.start, y.start) for x in a for y in b), default=0.0)


@dataclass(frozen=True)
class Overlap:
    object: str
    """:attr:`Reconcile.object`."""
    replicas: tuple[str, str]
    seconds: float


def object_overlaps(by_replica: Mapping[str, Sequence[Reconcile]]) -> list[Overlap]:
    """Every time two replicas reconciled one object at once (longest first): what the single
    leader's and each shard's Lease must prevent. Replicas reconciling different objects at once
    are not counted (sharded replicas do, by design)."""
    of_object: dict[str, list[tuple[str, Reconcile]]] = {}
    for replica, done in by_replica.items():
        for r in done:
            of_object.setdefault(r.object, []).append((replica, r))
    found = []
    for obj, seen in of_object.items():
        for (a, x), (b, y) in itertools.combinations(seen, 2):
            seconds = min(x.end, y.end) - max(x.start, y.start)
            if a != b and seconds > 0:
                found.append(Overlap(obj, (a, b), seconds))
    return sorted(found, key=lambda o: -o.seconds)
