"""Kubernetes Events for what users should see in ``kubectl describe``.

Recording never blocks a reconcile: events go through a bounded buffer to a sender thread. Like
client-go's recorder, a repeat of the same event (object, type, reason, message) within ten
minutes bumps the count of the existing Event instead of creating another, so a retry loop cannot
flood the namespace. Messages are the caller's and must never hold secret material.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from controllers.runtime import client as clients
from controllers.runtime import clock as clocks
from controllers.runtime import metrics as metric_families
from controllers.runtime import objects

log = structlog.get_logger(__name__)

NORMAL = "Normal"
WARNING = "Warning"

_MAX_MESSAGE = 1024
_AGGREGATE_WINDOW = 600.0


@dataclass(frozen=True)
class _Pending:
    involved: dict[str, str]
    type: str
    reason: str
    message: str
    at: float


class EventRecorder:
    """Records Events as ``component`` (the ``reportingController``) from ``instance``."""

    def __init__(
        self,
        api: clients.Client,
        *,
        component: str,
        instance: str,
        metrics: metric_families.Metrics,
        clock: clocks.Clock | None = None,
        buffer: int = 1000,
    ) -> None:
        self._api = api
        self._component = component
        self._instance = instance
        self._metrics = metrics
        self._clock = clock or clocks.RealClock()
        self._buffer: queue.Queue[_Pending | None] = queue.Queue(maxsize=buffer)
        # (uid, type, reason, message) → (event name, namespace, count, last seen). Only the
        # sender thread touches it.
        self._seen: dict[tuple[str, str, str, str], tuple[str, str, int, float]] = {}
        self._thread: threading.Thread | None = None

    def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Records an event about ``obj``; never blocks, drops (and counts) when overwhelmed."""
        md = objects.meta(obj)
        involved = {
            "apiVersion": str(obj.get("apiVersion", "")),
            "kind": str(obj.get("kind", "")),
            "name": md.get("name", ""),
            "namespace": md.get("namespace", ""),
            "uid": md.get("uid", ""),
            "resourceVersion": md.get("resourceVersion", ""),
        }
        pending = _Pending(involved, type_, reason, message[:_MAX_MESSAGE], self._clock.now())
        try:
            self._buffer.put_nowait(pending)
        except queue.Full:
            self._metrics.events_dropped.inc()
            log.warning("event.dropped", reason=reason, why="buffer full")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._send_loop, name="events", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Sends what is buffered (within ``timeout``), then stops."""
        with contextlib.suppress(queue.Full):
            self._buffer.put(None, timeout=timeout)
        if self._thread is not None:
            self._thread.join(timeout)

    def _send_loop(self) -> None:
        while (pending := self._buffer.get()) is not None:
            try:
                self._send(pending)
            except Exception as exc:
                self._metrics.events_dropped.inc()
                log.warning("event.failed", reason=pending.reason, error=str(exc))

    def _send(self, p: _Pending) -> None:
        namespace = p.involved["namespace"] or "default"
        key = (p.involved["uid"], p.type, p.reason, p.message)
        stamp = clocks.rfc3339(p.at)
        seen = self._seen.get(key)
        if seen is not None and p.at - seen[3] < _AGGREGATE_WINDOW:
            name, ns, count, _ = seen
            with contextlib.suppress(Exception):
                self._api.patch(
                    objects.EVENTS,
                    name,
                    {"count": count + 1, "lastTimestamp": stamp},
                    namespace=ns,
                )
                self._seen[key] = (name, ns, count + 1, p.at)
                return
        name = f"{p.involved['name']}.{time.time_ns():x}"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": p.involved,
            "type": p.type,
            "reason": p.reason,
            "message": p.message,
            "source": {"component": self._component},
            "reportingComponent": self._component,
            "reportingInstance": self._instance,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        self._api.create(objects.EVENTS, body, namespace=namespace)
        self._seen[key] = (name, namespace, 1, p.at)
        if len(self._seen) > 4096:  # forget the oldest half; bounded memory
            for old in sorted(self._seen, key=lambda k: self._seen[k][3])[:2048]:
                del self._seen[old]
