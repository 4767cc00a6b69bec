"""Recording every change of some objects while a test runs: a list, then a watch from its
resourceVersion, on a thread of the test, each event stamped with the wall-clock time it arrived.

A poll could miss a write that another write followed within the poll interval (a credential
minted twice in a second); a watch delivers each version, which is what counting writes needs.
When the watch breaks or its resourceVersion is too old (410 Gone), it lists again and records
the listed objects as ``RELISTED``: a version written in between may then be missing, and
:attr:`Recorder.relists` says how often that happened.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from controllers.runtime import client as clients
from controllers.runtime import errors, objects


@dataclass(frozen=True)
class Seen:
    at: float
    """Wall-clock seconds when the event arrived."""
    type: str
    """ADDED (in the first list or created), MODIFIED, DELETED or RELISTED."""
    obj: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def version(self) -> str:
        return str(self.obj["metadata"].get("resourceVersion", ""))


class Recorder:
    """Records the objects of one resource (a namespace, a label selector) until stopped."""

    def __init__(
        self,
        api: clients.Client,
        resource: objects.Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        metadata_only: bool = False,
    ) -> None:
        self._api, self._resource = api, resource
        self._namespace, self._selector = namespace, label_selector
        self._metadata_only = metadata_only
        self._events: list[Seen] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._listed = threading.Event()
        self._stream: clients.WatchStream | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="recorder")
        self.relists = 0

    def __enter__(self) -> Recorder:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def start(self) -> Recorder:
        self._thread.start()
        if not self._listed.wait(30):
            raise AssertionError(f"could not list {self._resource.plural}")
        return self

    def stop(self) -> None:
        self._stop.set()
        if (stream := self._stream) is not None:
            stream.close()
        self._thread.join(10)

    def events(self) -> list[Seen]:
        with self._lock:
            return list(self._events)

    def latest(self) -> dict[str, dict[str, Any]]:
        """Name → the object as last seen (deleted ones left out)."""
        last: dict[str, dict[str, Any]] = {}
        for seen in self.events():
            if seen.type == "DELETED":
                last.pop(seen.name, None)
            else:
                last[seen.name] = seen.obj
        return last

    def _record(self, type_: str, obj: dict[str, Any]) -> None:
        with self._lock:
            self._events.append(Seen(time.time(), type_, obj))

    def _list(self, type_: str) -> str:
        body = self._api.list(
            self._resource,
            namespace=self._namespace,
            label_selector=self._selector,
            metadata_only=self._metadata_only,
        )
        for item in body.get("items") or []:
            self._record(type_, dict(item))
        return str(body["metadata"]["resourceVersion"])

    def _run(self) -> None:
        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    version = self._list("RELISTED" if self._listed.is_set() else "ADDED")
                    if self._listed.is_set():
                        self.relists += 1
                    self._listed.set()
                for event in self._watch(version):
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        version = ""  # 410 Gone: too old, list again
                        break
                    version = str(obj.get("metadata", {}).get("resourceVersion", version))
                    if kind != "BOOKMARK":
                        self._record(str(kind), dict(obj))
            except errors.Gone:
                version = ""  # too old to watch from: list again
            except errors.TransientApiError:
                if self._stop.wait(0.5):
                    return
            except Exception:  # the API server went away: try again while the test runs
                if self._stop.wait(0.5):
                    return

    def _watch(self, version: str) -> Iterator[dict[str, Any]]:
        stream = self._api.watch(
            self._resource,
            resource_version=version,
            timeout_seconds=60,
            namespace=self._namespace,
            label_selector=self._selector,
            metadata_only=self._metadata_only,
        )
        self._stream = stream
        try:
            for event in stream:
                if self._stop.is_set():
                    return
                yield dict(event)
        finally:
            stream.close()
