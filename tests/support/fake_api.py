"""A fake API server at the transport layer: a real :class:`controllers.runtime.client.Client` on top
of an in-memory object store, so unit tests exercise the client's own timeout bounding and error
mapping. ``fault`` is called before every request and may raise, advance a fake clock, or return
a :class:`Reply` to send instead of the normal answer.

For the client's own tests. Reconciler tests use ``tests/support/memapi.py`` instead: an
in-memory API server behind the Protocols the reconcilers depend on, no client in between."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import urllib3

from controllers.runtime import client as clients


@dataclass
class Request:
    method: str
    path: str
    timeout: Any
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    query: str = ""
    raw: bytes | None = None
    """The body as sent."""


@dataclass
class Reply:
    status: int
    data: bytes = b""
    error: BaseException | None = None
    """Raised when the body is read, after ``chunks``, as urllib3 does on a broken connection."""
    content_type: str = "application/json"
    chunks: Iterable[bytes] | None = None
    """The body as the socket gives it, instead of ``data``: one that never ends, or stalls."""


class _Response:
    def __init__(self, reply: Reply) -> None:
        self.status = reply.status
        self.headers = {"Content-Type": reply.content_type}
        self._reply = reply
        self.closed = False

    def stream(self, amt: int, decode_content: bool = True) -> Iterator[bytes]:
        """The body in chunks of at most ``amt`` bytes, as urllib3's ``HTTPResponse.stream``."""
        reply = self._reply
        for chunk in reply.chunks if reply.chunks is not None else [reply.data]:
            for i in range(0, len(chunk), amt):
                yield chunk[i : i + amt]
        if reply.error is not None:
            raise reply.error

    def close(self) -> None:
        self.closed = True

    def release_conn(self) -> None:
        pass


@dataclass
class _Configuration:
    host: str = "https://fake"

    def get_api_key_with_prefix(self, name: str, alias: str | None = None) -> str | None:
        return None


class _PoolManager:
    """The ApiClient's connection pool, as the client uses it."""

    def __init__(self, transport: FakeTransport) -> None:
        self._transport = transport

    def request(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None,
        headers: dict[str, str],
        timeout: urllib3.Timeout,
        preload_content: bool,
    ) -> _Response:
        path, _, query = url.removeprefix(self._transport.configuration.host).partition("?")
        bound: Any = (
            timeout.total
            if timeout.total is not None
            else (timeout.connect_timeout, timeout.read_timeout)
        )
        decoded = json.loads(body) if body is not None else None
        return self._transport.send(
            Request(method, path, bound, decoded, dict(headers), query, raw=body)
        )


@dataclass
class _RestClient:
    pool_manager: _PoolManager


Fault = Callable[[Request], Reply | None]


@dataclass
class FakeTransport:
    """Stands in for ``kubernetes.client.ApiClient``: stores objects by path, with
    ``resourceVersion`` compare-and-swap on PUT."""

    fault: Fault = lambda request: None
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    configuration: _Configuration = field(default_factory=_Configuration)
    default_headers: dict[str, str] = field(default_factory=dict)
    _version: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def rest_client(self) -> _RestClient:
        return _RestClient(_PoolManager(self))

    def client(self, timeout: float = 30.0) -> clients.Client:
        return clients.Client(self, timeout=timeout)

    def send(self, request: Request) -> _Response:
        with self._lock:
            self.requests.append(request)
        reply = self.fault(request)
        if reply is None:
            reply = self._serve(request)
        return _Response(reply)

    def _serve(self, r: Request) -> Reply:
        with self._lock:
            if r.method == "GET":
                found = self.objects.get(r.path)
                return _json(200, found) if found is not None else _status(404, "NotFound")
            if r.method == "POST":
                path = f"{r.path}/{r.body['metadata']['name']}"
                if path in self.objects:
                    return _status(409, "AlreadyExists")
                return _json(201, self._store(path, r.body))
            if r.method == "PUT":
                return self._replace(r)
            if r.method == "DELETE":
                return self._delete(r)
        return _status(405, "MethodNotAllowed")

    def _delete(self, r: Request) -> Reply:
        """DELETE with the API server's preconditions (``uid``, ``resourceVersion``)."""
        current = self.objects.get(r.path)
        if current is None:
            return _status(404, "NotFound")
        wanted = (r.body or {}).get("preconditions") or {}
        meta = current["metadata"]
        if any(str(meta.get(k) or "") != str(v) for k, v in wanted.items()):
            return _status(409, "Conflict")
        del self.objects[r.path]
        return _json(200, {"kind": "Status", "status": "Success"})

    def _replace(self, r: Request) -> Reply:
        current = self.objects.get(r.path)
        if current is None:
            return _status(404, "NotFound")
        if r.body["metadata"].get("resourceVersion") != _rv(current):
            return _status(409, "Conflict")
        return _json(200, self._store(r.path, r.body))

    def _store(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self._version += 1
        stored: dict[str, Any] = json.loads(json.dumps(body))
        stored["metadata"]["resourceVersion"] = str(self._version)
        self.objects[path] = stored
        return stored

    def edit(self, path: str, change: Callable[[dict[str, Any]], None]) -> None:
        """Changes a stored object as another client would (a new resourceVersion)."""
        with self._lock:
            obj = json.loads(json.dumps(self.objects[path]))
            change(obj)
            self._store(path, obj)


def read_timeout() -> urllib3.exceptions.ReadTimeoutError:
    """What urllib3 raises when a read outlasts its timeout."""
    return urllib3.exceptions.ReadTimeoutError(
        urllib3.HTTPConnectionPool("fake"), "/", "Read timed out."
    )


def _rv(obj: dict[str, Any]) -> str:
    return str(obj["metadata"].get("resourceVersion", ""))


def _json(status: int, obj: Any) -> Reply:
    return Reply(status, json.dumps(obj).encode())


def _status(code: int, reason: str) -> Reply:
    return _json(code, {"kind": "Status", "code": code, "reason": reason, "message": reason})
