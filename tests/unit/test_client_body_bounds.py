"""Every response body the client reads has a byte bound: a list page its own, a watch each event
line, anything else the largest object's. A body over it is a ConnectionFailed naming the bound,
read in chunks and abandoned at the bound (never read whole, then measured); a body that stalls
is a ConnectionFailed too."""

from __future__ import annotations

import base64
import json
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from urllib.parse import parse_qs

import orjson
import pytest

from controllers.reconcilers.cache import crviews, secretviews
from controllers.reconcilers.cache.chaincache import ChainCache, chain_cache
from controllers.runtime import client as clients
from controllers.runtime import errors, objects
from controllers.runtime import informer as informer_module
from controllers.runtime.cache import Cache
from controllers.runtime.informer import Informer, InformerOptions, page_bytes
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
    return transport, clients.Client(transport, limits=LIMITS)


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


def exactly(size: int, head: bytes, tail: bytes = b"") -> bytes:
    """A JSON object of exactly ``size`` bytes: ``head`` (an object's opening and its members),
    a padding member, ``tail`` and the closing brace."""
    pad = size - len(head) - len(tail) - len(b', "pad": ""}')
    assert pad >= 0
    body = head + b', "pad": "' + b"p" * pad + b'"' + tail + b"}"
    assert len(body) == size
    return body


def secret_json(name: str) -> bytes:
    """A Secret with 1 MiB of data (the most the API server stores), as the API server sends
    it, without its closing brace."""
    data = base64.b64encode(b"\xa7" * (1 << 20)).decode()
    return json.dumps(
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": {"k": data}}
    ).encode()[:-1]


def test_the_largest_secret_is_read_and_one_byte_over_the_object_bound_is_not() -> None:
    """Through the client with its default bounds: a Secret of 1 MiB of data (1.37 MiB of
    JSON) is read; a body of exactly the object bound too, one byte more is refused. Mutations
    caught: an object bound below the largest Secret, a bound off by one."""
    limits = clients.BodyLimits()
    largest = secret_json("big")

    def read(body: bytes) -> objects.Body:
        api = clients.Client(FakeTransport(fault=lambda _: Reply(200, data=body)))
        return api.get(objects.SECRETS, "big", namespace="ns")

    assert len(read(largest + b"}")["data"]["k"]) > 1 << 20
    assert read(exactly(limits.object_bytes, largest))["kind"] == "Secret"
    with pytest.raises(clients.BodyTooLarge, match=f"bound of {limits.object_bytes} "):
        read(exactly(limits.object_bytes + 1, largest))


def the_chain() -> ChainCache:
    """The chain's informers as the composition root makes them (none started)."""
    return chain_cache(Cache(FakeTransport().client()), {})


def custom_json(kind: str, name: str, size: int) -> bytes:
    """A rotator object of ``size`` bytes of JSON as the API server lists it, without its
    closing brace."""
    head = json.dumps(
        {"apiVersion": "rotator.dev/v1alpha1", "kind": kind, "metadata": {"name": name}}
    ).encode()[:-1]
    return exactly(size, head)[:-1]


def custom(kind: str) -> Callable[[int], bytes]:
    """The ``i``-th object of a CRD view's page, of nearly its usual largest size."""
    return lambda i: custom_json(kind, f"o{i}", crviews.ITEM_BYTES - 16)


VIEWS: dict[str, tuple[Callable[[int], bytes], int]] = {
    # view: (its largest usual object, objects per page)
    "managed": (lambda i: secret_json(f"s{i}"), secretviews.MANAGED_PAGE_SIZE),
    "policies": (custom("BackendSecurityPolicy"), InformerOptions().page_size),
    "backends": (custom("ServiceBackend"), InformerOptions().page_size),
    "routes": (custom("Route"), InformerOptions().page_size),
}


@pytest.mark.parametrize("view", VIEWS)
def test_a_views_page_of_its_largest_usual_objects_is_read_and_one_byte_more_is_not(
    view: str,
) -> None:
    """The page of each view that holds whole objects, under the bound the chain's informer
    gives it, through the client with its default limits: the managed Secrets' 50 Secrets of
    1 MiB of data, the CRD views' 500 objects of nearly crviews.ITEM_BYTES; a page of exactly
    that bound is read, one byte more refused. Mutations caught: a page bound below the view's
    page of its usual largest objects, the chain's bound not reaching the request, a bound off
    by one."""
    item, count = VIEWS[view]
    informer: Informer = getattr(the_chain(), view)
    bound = informer.page_bytes
    assert bound <= clients.BodyLimits().list_page_bytes
    items = b",".join(item(i) + b"}" for i in range(count))
    head = b'{"kind": "List", "metadata": {"resourceVersion": "7"}, "items": [' + items + b"]"

    def page(body: bytes) -> objects.Body:
        transport = FakeTransport(fault=lambda _: Reply(200, data=body))
        api = clients.Client(transport)
        return api.list(informer.resource, namespace="ns", limit=count, max_bytes=bound)

    assert len(page(head + b"}")["items"]) == count
    assert len(page(exactly(bound, head))["items"]) == count
    with pytest.raises(clients.BodyTooLarge, match=f"bound of {bound} "):
        page(exactly(bound + 1, head))


def test_the_pages_listed_at_start_fit_the_charts_memory_limit_and_any_object_fits_one() -> None:
    """The chain's five informers list at once at start: their page bounds together stay under
    half the chart's 512 MiB limit (the JSON of a page is held while it is decoded); and each
    bound holds one object of the largest size the API server stores, so halving the page
    always gets there. Mutation caught: the CRD views back at the client's 128 MiB each
    (467 MiB in all), a bound below the largest object."""
    chain = the_chain()
    views = [chain.all_secrets, chain.managed, chain.policies, chain.backends, chain.routes]
    assert sum(v.page_bytes for v in views) <= 256 << 20
    for custom in (chain.policies, chain.backends, chain.routes):
        assert custom.page_bytes == InformerOptions().page_size * crviews.ITEM_BYTES
    assert min(v.page_bytes for v in views) >= informer_module.ITEM_BYTES


def test_a_body_is_held_once_while_it_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Memory allocated by reading a 16 MiB body, up to the moment it is handed to the JSON
    decoder, is about the body, not twice it. Mutation caught: keeping the chunks and joining
    them (2x the body). The decoder itself is left out: orjson reserves ~12x its input as
    address space (yyjson's value pool), which only the values it writes make resident."""
    size = 16 << 20
    body = exactly(size, b'{"items": []')
    api = clients.Client(FakeTransport(fault=lambda _: Reply(200, data=body)))
    decode = orjson.loads
    peaks: list[int] = []

    def measured(data: bytes | bytearray) -> object:
        peaks.append(tracemalloc.get_traced_memory()[1])
        return decode(data)

    monkeypatch.setattr(orjson, "loads", measured)
    tracemalloc.start()
    try:
        api.list(objects.SECRETS, namespace="ns", max_bytes=size)
    finally:
        tracemalloc.stop()
    assert size < peaks[0] < 1.5 * size, f"{peaks[0]} bytes to read a {size}-byte body"


def test_a_list_call_bounds_its_page_below_the_clients_and_never_above() -> None:
    """``max_bytes`` lowers the page bound for one call; it cannot raise it past the client's
    ``list_page_bytes``. Mutation caught: the per-call bound ignored, or allowed above."""
    _, api = client_replying(Reply(200, data=exactly(2 << 20, b'{"items": []')))
    with pytest.raises(clients.BodyTooLarge, match=f"bound of {1 << 20} "):
        api.list(objects.SECRETS, namespace="ns", max_bytes=1 << 20)
    endless = Endless()
    _, api = client_replying(Reply(200, chunks=endless))
    with pytest.raises(clients.BodyTooLarge, match=f"bound of {4 << 20} "):
        api.list(objects.SECRETS, namespace="ns", max_bytes=1 << 30)


def test_the_informers_page_bounds_follow_their_view() -> None:
    """A metadata-only page of 500 is a few MiB, the managed view's page of 50 whole Secrets
    ~75 MiB, an explicit bound wins (docs/design.md §5)."""
    assert page_bytes(InformerOptions(), metadata_only=True) == 500 * 16 * 1024
    assert page_bytes(InformerOptions(page_size=50), metadata_only=False) == 75 << 20
    assert page_bytes(InformerOptions(page_bytes=1 << 20), metadata_only=False) == 1 << 20
    assert page_bytes(InformerOptions(item_bytes=64 << 10), metadata_only=False) == 500 << 16


@pytest.mark.parametrize(
    "options",
    [InformerOptions(page_size=4, page_bytes=8000), InformerOptions(page_size=4, item_bytes=2000)],
    ids=["page_bytes", "item_bytes"],
)
def test_an_informer_page_over_its_bound_is_asked_for_again_smaller_and_syncs(
    options: InformerOptions,
) -> None:
    """Objects larger than the view's usual size (heavy annotations on a metadata-only list)
    make the informer halve its page, keeping its byte bound — given whole, or per object as
    the CRD views give it — instead of failing the list for ever. Mutations caught: no retry,
    the byte bound not sent, the continue token lost."""
    names = [f"s{i}" for i in range(6)]
    annotation = "a" * 3000

    def page(request: Request) -> Reply:
        query = {k: v[0] for k, v in parse_qs(request.query).items()}
        if query.get("watch") == "true":
            stopped.wait(10)
            return Reply(200, data=b"")
        start = int(query.get("continue", "0"))
        chunk = names[start : start + int(query["limit"])]
        after = start + len(chunk)
        items = [{"metadata": {"name": n, "annotations": {"big": annotation}}} for n in chunk]
        meta = {"resourceVersion": "9", "continue": str(after) if after < len(names) else ""}
        return Reply(200, data=json.dumps({"items": items, "metadata": meta}).encode())

    stopped = threading.Event()
    transport = FakeTransport(fault=page)
    informer = Informer(transport.client(), objects.SECRETS, metadata_only=True, options=options)
    informer.start()
    try:
        assert informer.wait_for_sync(10)
    finally:
        stopped.set()
        informer.stop()
    assert sorted(o["metadata"]["name"] for o in informer.store.items()) == names
    limits = [parse_qs(r.query).get("limit", [""])[0] for r in transport.requests]
    assert limits[:3] == ["4", "2", "2"], limits
