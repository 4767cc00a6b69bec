"""A JSON client for the Kubernetes REST API, on top of the kubernetes package's transport.

We reuse the kubernetes package for what it does well — kubeconfig and in-cluster
authentication, TLS, token refresh, connection pooling (a :class:`Transport`:
``controllers.runtime.kubelib.Connection``, or the package's ``ApiClient``) — and skip its
generated model classes:
requests and responses are plain JSON, responses decoded once, by orjson: the caches are filled
from list and watch bodies, and the standard library's decoder took 15 % of a restart's CPU;
orjson takes half as long and gives the same dicts, lists and strings (it refuses invalid UTF-8
and unpaired surrogates, which the API server never sends; a body mangled so is a
``ConnectionFailed`` like any other undecodable body). Every request has a timeout, bounded further
by the deadline of the reconcile it runs in (:func:`deadline`). Failures surface as the error tree
of :mod:`controllers.runtime.errors`.

Every body is read in chunks up to a byte bound (:class:`BodyLimits`): a broken proxy or API
server that sends without end costs the bound, not all the memory there is. A list is bounded per
page (lists page with ``limit``/``continue``; a list call may give its page a bound of its own,
smaller for a view of small objects), a watch per event line, anything else by the largest object
the API server stores; a body over its bound is a :class:`BodyTooLarge` (a ``ConnectionFailed``)
naming the bound, its connection closed rather than drained. A body is read into one buffer that
grows as it is read and is decoded from there: at most the bound, never a second copy of it.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import json
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast
from urllib.parse import quote

import orjson
import urllib3

from controllers.runtime import errors
from controllers.runtime.objects import Body, Resource

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

TOKEN_CHECK_INTERVAL = 1.0
"""Seconds between calls of the configuration's token hook (see ``Client._authorization``)."""

_PARTIAL_METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
_PARTIAL_METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"

READ_CHUNK = 64 * 1024
"""Bytes asked of the socket at a time: the most a body is read past its bound."""


@dataclass(frozen=True)
class BodyLimits:
    """Bytes the client reads of one response before it gives up on it."""

    object_bytes: int = 4 << 20
    """Of any body but a list page, and of each watch event line. Defaults to 4 MiB: the largest
    object the API server stores (etcd's 1.5 MiB request limit; a Secret's 1 MiB of data is
    1.37 MiB as base64 in JSON), with room for JSON's escapes of the rest."""
    list_page_bytes: int = 128 << 20
    """Of one list page whose caller gives no bound of its own (``Client.list(max_bytes=…)``),
    and the most any caller may give. Defaults to 128 MiB: a page of 500 objects averaging
    256 KiB. The informers give smaller ones (``InformerOptions.page_bytes``, docs/design.md
    §5): five of them list at once at start, under a 512 MiB memory limit."""


class BodyTooLarge(errors.ConnectionFailed):
    """A response body over its byte bound: not read further, its connection closed. A list
    page over it may be asked for again with a smaller ``limit`` (the informer does)."""


_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "rotator_request_deadline", default=None
)


@contextlib.contextmanager
def deadline(at_monotonic: float) -> Iterator[None]:
    """Bounds every request made in this context to end by ``at_monotonic`` (``time.monotonic``).

    The controller loop opens one per reconcile, so a slow API server cannot hold a worker past the
    reconcile timeout.
    """
    token = _deadline.set(at_monotonic)
    try:
        yield
    finally:
        _deadline.reset(token)


class PatchType(enum.StrEnum):
    MERGE = "application/merge-patch+json"
    JSON = "application/json-patch+json"
    STRATEGIC = "application/strategic-merge-patch+json"
    APPLY = "application/apply-patch+yaml"


class RequestMetrics(Protocol):
    """What the client reports per request (client-go's ``rest_client_requests_total``)."""

    def request_done(self, *, method: str, code: str, seconds: float) -> None: ...


class _NoMetrics:
    def request_done(self, *, method: str, code: str, seconds: float) -> None:
        pass


class WatchStream:
    """The events of one watch request, as decoded JSON; close it to end the request early."""

    def __init__(
        self, response: urllib3.HTTPResponse, *, method: str, path: str, max_line: int
    ) -> None:
        self._response = response
        self._method = method
        self._path = path
        self._max_line = max_line
        self._closed = False

    def __iter__(self) -> Iterator[Body]:
        buffer = b""
        try:
            for chunk in self._response.stream(amt=READ_CHUNK, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    self._check(len(line))
                    if line.strip():
                        yield orjson.loads(line)
                self._check(len(buffer))  # a line without end is cut at the bound
            if buffer.strip():
                yield orjson.loads(buffer)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if self._closed:
                return
            raise errors.ConnectionFailed(
                f"watch stream broke: {exc}", method=self._method, path=self._path
            ) from exc
        finally:
            self.close()

    def _check(self, size: int) -> None:
        if size > self._max_line:
            raise _too_large("a watch event line", self._max_line, self._method, self._path)

    def close(self) -> None:
        """Ends the watch; safe to call from another thread while a read is blocked."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self._response.shutdown()
        with contextlib.suppress(Exception):
            self._response.release_conn()


class Transport(Protocol):
    """What the client sends on: the configuration (host, the token hook), the connection
    pool built from it, and the headers of every request."""

    @property
    def configuration(self) -> Any: ...

    @property
    def rest_client(self) -> Any: ...

    @property
    def default_headers(self) -> dict[str, str]: ...


class Client:
    """Typed CRUD, list and watch over :class:`~.objects.Resource` types, in plain JSON.

    ``timeout`` (seconds, default 30) bounds every non-watch request; ``limits`` the bytes read
    of each response (defaults: :class:`BodyLimits`).
    """

    def __init__(
        self,
        api_client: Transport,
        *,
        timeout: float = 30.0,
        metrics: RequestMetrics | None = None,
        limits: BodyLimits = BodyLimits(),
    ) -> None:
        self._api = api_client
        self._timeout = timeout
        self._limits = limits
        self._metrics = metrics or _NoMetrics()
        self._token_lock = threading.Lock()
        self._token: tuple[str, float] | None = None

    @property
    def host(self) -> str:
        return str(self._api.configuration.host)

    # --- reads -------------------------------------------------------------------------------

    def get(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        subresource: str = "",
        metadata_only: bool = False,
    ) -> Body:
        path = resource.path(namespace=namespace, name=name, subresource=subresource)
        accept = _PARTIAL_METADATA if metadata_only else "application/json"
        return self.request("GET", path, accept=accept)

    def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
        metadata_only: bool = False,
        max_bytes: int | None = None,
        shard_selector: str | None = None,
    ) -> Body:
        """One page of at most ``limit`` objects, read up to ``max_bytes`` (at most, and by
        default, the limits' ``list_page_bytes``): a caller that knows its page size and view
        bounds the page by what it can legitimately hold (:class:`BodyTooLarge` past it).
        ``shard_selector``: only the objects of those hash ranges (controllers/runtime/
        sharding.py), where the server has the ``ShardedListAndWatch`` gate; it then says so in
        the list's ``metadata.shardInfo``, and a server without the gate returns everything."""
        query = _selectors(label_selector, field_selector)
        if shard_selector:
            query.append(("shardSelector", shard_selector))
        if limit:
            query.append(("limit", str(limit)))
        if continue_token:
            query.append(("continue", continue_token))
        if resource_version is not None:
            query.append(("resourceVersion", resource_version))
        accept = _PARTIAL_METADATA_LIST if metadata_only else "application/json"
        path = resource.path(namespace=namespace)
        page_bytes = self._limits.list_page_bytes
        if max_bytes is not None:
            page_bytes = min(max_bytes, page_bytes)
        return self.request("GET", path, query=query, accept=accept, max_bytes=page_bytes)

    def watch(
        self,
        resource: Resource,
        *,
        resource_version: str,
        timeout_seconds: int,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        metadata_only: bool = False,
        shard_selector: str | None = None,
    ) -> WatchStream:
        """Starts a watch from ``resource_version`` with bookmarks; the server ends it after
        ``timeout_seconds``, and the client gives up on a connection silent for longer.
        ``shard_selector`` as for :meth:`list`."""
        query = _selectors(label_selector, field_selector)
        if shard_selector:
            query.append(("shardSelector", shard_selector))
        query += [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        path = resource.path(namespace=namespace)
        accept = _PARTIAL_METADATA if metadata_only else "application/json"
        response = self._send(
            "GET", path, query=query, accept=accept, timeout=(10.0, timeout_seconds + 30.0)
        )
        return WatchStream(response, method="GET", path=path, max_line=self._limits.object_bytes)

    # --- writes ------------------------------------------------------------------------------

    def create(
        self,
        resource: Resource,
        body: Mapping[str, Any],
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str = "",
        field_manager: str | None = None,
    ) -> Body:
        """POSTs ``body``; with ``name`` and ``subresource`` it POSTs to that subresource."""
        path = resource.path(namespace=namespace, name=name, subresource=subresource)
        query = [("fieldManager", field_manager)] if field_manager else []
        return self.request("POST", path, query=query, body=body)

    def replace(
        self, resource: Resource, body: Mapping[str, Any], *, subresource: str = ""
    ) -> Body:
        """PUTs ``body`` (its ``resourceVersion`` makes it a compare-and-swap)."""
        md = body.get("metadata") or {}
        path = resource.path(
            namespace=md.get("namespace"), name=md.get("name"), subresource=subresource
        )
        return self.request("PUT", path, body=body)

    def patch(
        self,
        resource: Resource,
        name: str,
        patch: Mapping[str, Any] | Sequence[Any],
        *,
        namespace: str | None = None,
        patch_type: PatchType = PatchType.MERGE,
        subresource: str = "",
        field_manager: str | None = None,
        force: bool = False,
    ) -> Body:
        path = resource.path(namespace=namespace, name=name, subresource=subresource)
        query: list[tuple[str, str]] = []
        if field_manager:
            query.append(("fieldManager", field_manager))
        if force:
            query.append(("force", "true"))
        return self.request("PATCH", path, query=query, body=patch, content_type=str(patch_type))

    def delete(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        propagation_policy: str | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> Body:
        """DELETEs an object; ``uid`` and ``resource_version`` make preconditions (only that
        incarnation; only if unchanged since read)."""
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if propagation_policy:
            body["propagationPolicy"] = propagation_policy
        preconditions = {
            k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v
        }
        if preconditions:
            body["preconditions"] = preconditions
        path = resource.path(namespace=namespace, name=name)
        return self.request("DELETE", path, body=body)

    # --- transport ---------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Mapping[str, Any] | Sequence[Any] | None = None,
        content_type: str = "application/json",
        accept: str = "application/json",
        max_bytes: int | None = None,
    ) -> Body:
        """Sends one request and returns its decoded JSON body, of at most ``max_bytes``
        (default: the limits' ``object_bytes``)."""
        response = self._send(
            method, path, query=query, body=body, content_type=content_type, accept=accept
        )
        limit = self._limits.object_bytes if max_bytes is None else max_bytes
        data = _read_body(response, limit=limit, method=method, path=path)
        try:
            decoded: Body = orjson.loads(data) if data else {}
        except ValueError as exc:
            # JSONDecodeError, UnicodeDecodeError: a body cut short or mangled in transit. The
            # message names neither the body nor a byte of it (it may be a Secret's).
            raise errors.ConnectionFailed(
                f"the {response.status} response body ({len(data)} bytes) is not JSON: "
                f"{type(exc).__name__}",
                method=method,
                path=path,
            ) from None
        return decoded

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Mapping[str, Any] | Sequence[Any] | None = None,
        content_type: str = "application/json",
        accept: str = "application/json",
        timeout: float | tuple[float, float] | None = None,
    ) -> urllib3.HTTPResponse:
        timeout = self._bounded(timeout if timeout is not None else self._timeout, method, path)
        # The request is built here and sent on the transport's connection pool (its TLS,
        # client certificate and proxy settings), not through ApiClient.param_serialize and
        # call_api: those walk every body to "sanitize" it, and run the kubeconfig loader's
        # token hook, which re-reads the proxy environment, on every request — 0.5 ms of CPU a
        # request, a third of the controller's at a cold start. What they produce is the same:
        # the default headers, the bearer token, JSON (valid YAML, for apply patches), and the
        # query quoted as ApiClient quotes it.
        headers = {**self._api.default_headers, "Accept": accept}
        try:
            authorization = self._authorization()
        except Exception as exc:  # the token hook: an exec plugin, an unreadable token file
            # Its type only: a plugin's message may quote what it printed, a token included.
            raise errors.ConnectionFailed(
                f"the credentials for the API server could not be loaded: {type(exc).__name__}",
                method=method,
                path=path,
            ) from None
        if authorization is not None:
            headers["authorization"] = authorization
        encoded = None
        if body is not None:
            headers["Content-Type"] = content_type
            # the standard encoder, not orjson: it escapes every non-ASCII character, and an
            # apply body is parsed as YAML, which refuses raw C1 controls and reads U+0085 and
            # U+2028 as line breaks (a condition message may quote a tenant's URL)
            encoded = json.dumps(body).encode()
        url = self._api.configuration.host + path
        if query:
            url += "?" + "&".join(f"{k}={quote(str(v))}" for k, v in query)
        start = time.monotonic()
        code = "<error>"
        try:
            # preload_content=False: urllib3's HTTPResponse, whose body is read in _read_body
            response = cast(
                urllib3.HTTPResponse,
                self._api.rest_client.pool_manager.request(
                    method,
                    url,
                    body=encoded,
                    headers=headers,
                    timeout=(
                        urllib3.Timeout(connect=timeout[0], read=timeout[1])
                        if isinstance(timeout, tuple)
                        else urllib3.Timeout(total=timeout)
                    ),
                    preload_content=False,
                ),
            )
            code = str(response.status)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise errors.ConnectionFailed(
                f"{type(exc).__name__}: {exc}", method=method, path=path
            ) from exc
        finally:
            self._metrics.request_done(method=method, code=code, seconds=time.monotonic() - start)
        if 200 <= response.status < 300:
            return response
        raw = _read_body(response, limit=self._limits.object_bytes, method=method, path=path)
        content_type = str(response.headers.get("Content-Type") or "")
        raise _status_error(response.status, raw, content_type, method=method, path=path)

    def _authorization(self) -> str | None:
        """The ``authorization`` header, from the configuration's token hook at most once per
        :data:`TOKEN_CHECK_INTERVAL`: the hook reloads a token that expired (an exec plugin's,
        the projected service-account token), so a second's delay in noticing is harmless;
        the hook itself costs 0.25 ms a call."""
        now = time.monotonic()
        with self._token_lock:
            if self._token is None or now - self._token[1] >= TOKEN_CHECK_INTERVAL:
                # alias: ApiClient's auth settings also take a token kept under "authorization"
                value = self._api.configuration.get_api_key_with_prefix(
                    "BearerToken", alias="authorization"
                )
                self._token = ("" if value is None else str(value), now)
            return self._token[0] or None

    def _bounded(
        self, timeout: float | tuple[float, float], method: str, path: str
    ) -> float | tuple[float, float]:
        at = _deadline.get()
        if at is None:
            return timeout
        remaining = at - time.monotonic()
        if remaining <= 0:
            raise errors.DeadlineExceeded(
                "the reconcile ran out of time before this request", method=method, path=path
            )
        if isinstance(timeout, tuple):
            return (min(timeout[0], remaining), min(timeout[1], remaining))
        return min(timeout, remaining)


def _read_body(response: urllib3.HTTPResponse, *, limit: int, method: str, path: str) -> bytearray:
    """The whole body (``preload_content`` is off, so this is where it is read), in chunks, and
    never more than ``limit`` bytes of it: past the bound — or at once, when ``Content-Length``
    says it will be — the connection is closed, not drained (urllib3's ``response.data`` would
    hold all of it first). Chunks are appended to one ``bytearray`` as they arrive and dropped:
    a list of chunks joined at the end held the body twice (2x the bound at the peak); orjson
    decodes the bytearray as it is. A connection that breaks or times out while reading is a
    :class:`~.errors.ConnectionFailed`, like one that breaks before the status line; a body over
    the bound is a :class:`BodyTooLarge`."""
    body = bytearray()
    what = f"the {response.status} response body"
    try:
        length = str(response.headers.get("Content-Length") or "")
        encoded = response.headers.get("Content-Encoding")  # a gzip length is not the body's
        if length.isdigit() and int(length) > limit and not encoded:
            response.close()
            raise _too_large(what, limit, method, path)
        for chunk in response.stream(amt=READ_CHUNK, decode_content=True):
            if len(body) + len(chunk) > limit:
                response.close()  # the rest unread: the connection cannot serve another request
                raise _too_large(what, limit, method, path)
            body += chunk
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise errors.ConnectionFailed(
            f"reading the {response.status} response failed: {type(exc).__name__}: {exc}",
            method=method,
            path=path,
        ) from exc
    finally:
        response.release_conn()
    return body


def _too_large(what: str, limit: int, method: str, path: str) -> BodyTooLarge:
    return BodyTooLarge(
        f"{what} is over the client's bound of {limit} bytes (BodyLimits); not read further",
        method=method,
        path=path,
    )


def _selectors(label_selector: str | None, field_selector: str | None) -> list[tuple[str, str]]:
    query = []
    if label_selector:
        query.append(("labelSelector", label_selector))
    if field_selector:
        query.append(("fieldSelector", field_selector))
    return query


def _status_error(
    status: int, raw: bytes | bytearray, content_type: str, *, method: str, path: str
) -> errors.ApiError:
    """The error for a non-2xx answer, from its Kubernetes ``Status`` when it is one.

    Any other body (a proxy's error page, a webhook's echo of the request) may hold anything,
    a Secret included, so none of it is kept: only the status, the media type and the length,
    as kopf does.
    """
    media_type = content_type.split(";", 1)[0].strip()[:64] or "no content type"
    reason, message = "", f"HTTP {status}: a {len(raw)}-byte {media_type} body, not a Status"
    try:
        decoded = orjson.loads(raw)
    except ValueError:
        decoded = None
    if isinstance(decoded, dict) and decoded.get("kind") == "Status":
        reason = str(decoded.get("reason") or "")
        message = str(decoded.get("message") or message)
    return errors.from_status(status, reason=reason, message=message, method=method, path=path)
