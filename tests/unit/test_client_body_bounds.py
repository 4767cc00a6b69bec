"""Every response body the client reads has a byte bound: a list page its own, a watch each event
line, anything else the largest object's. A body over it is a ConnectionFailed naming the bound,
read in chunks and abandoned at the bound (never read whole, then measured); a body that stalls
is a ConnectionFailed too."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from controllers.runtime import client as clients
from controllers.runtime import errors, objects
from tests.support.fake_api import FakeTransport, Reply, Request, read_timeout

LIMITS = clients.BodyLimits(object_bytes=1 << 20, list_page_bytes=4 << 20)


class Endless:
    """A body that never ends (a broken proxy), counting the bytes the client pulled from it."""

    def __init__(self, prefix: bytes = b'{"items": ["') -> None:
        self.prefix = prefix
        self.pulled = 0

    def __iter__(self) -> Iterator[bytes]:
        chunk = self.prefix
        while True:
            self.pulled += len(chunk)
            yield chunk
            chunk = b"x" * 65536


def client_replying(reply: Reply) -> tuple[FakeTransport, clients.Client]:
    def fault(request: Request) -> Reply:
        return reply

    transport = FakeTransport(fault=fault)
    return transport, clients.Client(transport, limits=LIMITS)  # type: ignore[arg-type]


def test_an_endless_object_body_is_cut_at_the_bound_without_reading_it_all() -> None:
    """Mutation caught: reading the whole body and measuring it afterwards (this body has no
    end: the test would hang), or a bound off by a chunk or more."""
    body = Endless()
    _, api = client_replying(Reply(200, chunks=body))
    with pytest.raises(errors.ConnectionFailed) as raised:
        api.get(objects.SECRETS, "s", namespace="ns")
    assert raised.value.transient
    assert f"bound of {1 << 20} bytes" in str(raised.value)
    assert body.pulled <= (1 << 20) + clients.READ_CHUNK, "read no further than the bound"


def test_a_list_page_has_its_own_bound() -> None:
    """A page larger than any object (50 Secrets of 1 MiB) is read whole; a page over the page
    bound is not. Mutation caught: lists held to the object bound, or to none."""
    page = (
        b'{"items": ['
        + b",".join(
            b'{"metadata": {"name": "s%d"}, "data": {"k": "%s"}}' % (i, b"x" * 65536)
            for i in range(40)
        )
        + b'], "metadata": {}}'
    )
    assert 1 << 20 < len(page) < 4 << 20
    _, api = client_replying(Reply(200, data=page))
    assert len(api.list(objects.SECRETS, namespace="ns", limit=50)["items"]) == 40

    endless = Endless()
    _, api = client_replying(Reply(200, chunks=endless))
    with pytest.raises(errors.ConnectionFailed, match=f"bound of {4 << 20} bytes"):
        api.list(objects.SECRETS, namespace="ns", limit=50)
    assert endless.pulled <= (4 << 20) + clients.READ_CHUNK


def test_an_oversize_error_body_is_cut_at_the_object_bound() -> None:
    body = Endless(b"<html>")
    _, api = client_replying(Reply(502, chunks=body, content_type="text/html"))
    with pytest.raises(errors.ConnectionFailed, match="the 502 response body is over"):
        api.get(objects.SECRETS, "s", namespace="ns")
    assert body.pulled <= (1 << 20) + clients.READ_CHUNK


def test_a_watch_event_line_over_the_bound_ends_the_watch() -> None:
    """Events under the bound arrive; a line that never ends is cut at the bound. Mutation
    caught: a watch line buffered without a bound (this one never ends)."""
    event = b'{"type": "ADDED", "object": {"metadata": {"name": "a"}}}\n'
    endless = Endless(event + b'{"type": "MODIFIED", "object": "')
    transport, api = client_replying(Reply(200, chunks=endless))
    stream = api.watch(objects.SECRETS, resource_version="1", timeout_seconds=60, namespace="ns")
    seen: list[objects.Body] = []
    with pytest.raises(errors.ConnectionFailed, match="a watch event line is over") as raised:
        seen.extend(stream)  # what arrived before the cut stays
    assert seen == [{"type": "ADDED", "object": {"metadata": {"name": "a"}}}]
    assert f"bound of {1 << 20} bytes" in str(raised.value)
    assert endless.pulled <= (1 << 20) + 2 * clients.READ_CHUNK
    assert transport.requests[0].query.startswith("watch=true")


def test_a_body_that_stalls_is_a_connection_failure() -> None:
    """Half a Secret, then silence until the read timeout: transient, and nothing of the body in
    the message."""

    def stalled() -> Iterator[bytes]:
        yield b'{"kind": "Secret", "data": {"key": "c2stbGl2ZS1kby1ub3Q'

    _, api = client_replying(Reply(200, chunks=stalled(), error=read_timeout()))
    with pytest.raises(errors.ConnectionFailed) as raised:
        api.get(objects.SECRETS, "s", namespace="ns")
    assert "ReadTimeoutError" in str(raised.value)
    assert "c2stbGl2ZS" not in str(raised.value)


def test_the_default_bounds_fit_the_largest_legitimate_bodies() -> None:
    """A Secret of 1 MiB of data is 1.37 MiB as base64 JSON: under the object bound; the managed
    view's page of 50 such Secrets (docs/design.md §3) is under the page bound."""
    limits = clients.BodyLimits()
    largest_secret = (1 << 20) * 4 // 3 + 64 * 1024
    assert limits.object_bytes > largest_secret
    assert limits.list_page_bytes > 50 * largest_secret
