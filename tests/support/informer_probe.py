"""A real API client that lets a test watch an informer from the outside: how often it listed,
started a watch, was told ``410 Gone`` or failed, and a way to break its watch connections.

These were counters and a hook inside :class:`~controllers.runtime.informer.Informer`; they live
here because only tests read them. The informer is given a :class:`ProbedClient` as its API.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from controllers.runtime import client as clients
from controllers.runtime import errors
from controllers.runtime.objects import Body, Resource

GONE = 410


class ProbedClient(clients.Client):
    """Counts what an informer asks of the API server (thread-safe; read the counters directly)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lists = 0
        """Lists completed (every page read): the first list and each re-list."""
        self.watches = 0
        self.gone = 0
        """Lists or watches refused with ``410 Gone`` (the resourceVersion was compacted away)."""
        self.failures = 0
        """Any other failed list, watch request or watch stream."""
        self._lock = threading.Lock()
        self._open: set[_ProbedStream] = set()

    def interrupt_watches(self) -> None:
        """Breaks the open watch connections, as a proxy or a load balancer would."""
        with self._lock:
            streams = list(self._open)
        for stream in streams:
            stream.close()

    def list(self, resource: Resource, **kwargs: Any) -> Body:
        try:
            page = super().list(resource, **kwargs)
        except Exception as exc:
            self.count_failure(exc)
            raise
        if not (page.get("metadata") or {}).get("continue"):
            with self._lock:
                self.lists += 1
        return page

    def watch(self, resource: Resource, **kwargs: Any) -> clients.WatchStream:
        try:
            inner = super().watch(resource, **kwargs)
        except Exception as exc:
            self.count_failure(exc)
            raise
        stream = _ProbedStream(inner, self)
        with self._lock:
            self.watches += 1
            self._open.add(stream)
        return stream

    def count_failure(self, exc: BaseException) -> None:
        with self._lock:
            if isinstance(exc, errors.Gone):
                self.gone += 1
            else:
                self.failures += 1

    def forget(self, stream: _ProbedStream) -> None:
        with self._lock:
            self._open.discard(stream)


class _ProbedStream(clients.WatchStream):
    """Delegates to the real stream; counts the ``ERROR`` events and breaks it delivers."""

    def __init__(self, inner: clients.WatchStream, probe: ProbedClient) -> None:
        # No super().__init__: a delegate owns no response of its own.
        self._inner = inner
        self._probe = probe

    def __iter__(self) -> Iterator[Body]:
        try:
            for event in self._inner:
                if event.get("type") == "ERROR":
                    code = int((event.get("object") or {}).get("code") or 0)
                    self._probe.count_failure(
                        errors.from_status(code, reason="", message="watch error")
                    )
                yield event
        except Exception as exc:
            self._probe.count_failure(exc)
            raise
        finally:
            self._probe.forget(self)

    def close(self) -> None:
        self._inner.close()
