"""Counting each shard's size (controllers/runtime/shardsizes.py) on a fake API server under the
real client: what it asks (one Lease list to learn whether the server filters, then a Table per
shard, page by page), and when it says nothing (a server that does not filter, equal sizes, a
failed or malformed answer), remembered for ``max_age`` or ``retry_after``. The real API
server's side (a gated server's counts, an ungated one's None) is tests/e2e/test_sharding.py's."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable

import pytest

from controllers.runtime import clock as clocks
from controllers.runtime import objects, sharding, shardsizes
from tests.support.fake_api import FakeTransport, Reply, Request

KIND = objects.Resource("example.dev", "v1", "widgets", "Widget")
LEASES = objects.LEASES.path(namespace="ns")
N = 3


class Server:
    """Answers the Lease list (with ``shardInfo`` when it ``filters``) and the Tables of
    :data:`KIND` per shard selector, ``page`` rows at a time, with ``rows`` rows per shard."""

    def __init__(self, rows: dict[int, int], *, filters: bool = True, page: int = 2) -> None:
        self.rows = rows
        self.filters = filters
        self.page = page
        self.requests: list[Request] = []
        self.broken: Callable[[Request], Reply | None] = lambda r: None
        self.transport = FakeTransport(fault=self._answer)

    def _answer(self, r: Request) -> Reply | None:
        self.requests.append(r)
        if (broken := self.broken(r)) is not None:
            return broken
        query = dict(urllib.parse.parse_qsl(r.query))
        selector = query.get("shardSelector", "")
        if r.path == LEASES:
            meta = {"shardInfo": {"selector": selector}} if self.filters else {}
            return Reply(200, json.dumps({"items": [], "metadata": meta}).encode())
        assert r.path == KIND.path(namespace=None), r.path
        assert r.headers.get("Accept", "").startswith("application/json;as=Table")
        assert query["includeObject"] == "None"
        [index] = [x.index for x in sharding.ranges(N) if x.selector() == selector]
        total = self.rows[index] if self.filters else sum(self.rows.values())
        start = int(query.get("continue") or 0)
        end = min(total, start + self.page)
        page_meta: dict[str, str] = {"continue": str(end)} if end < total else {}
        rows = [{"cells": [f"w{i}"], "object": None} for i in range(start, end)]
        body = {"kind": "Table", "metadata": page_meta, "rows": rows or None}
        return Reply(200, json.dumps(body).encode())

    def sizes(self, clock: clocks.Clock) -> shardsizes.ShardSizes:
        return shardsizes.ShardSizes(
            self.transport.client(),
            KIND,
            N,
            lease_namespace="ns",
            timeout=5.0,
            max_age=60.0,
            retry_after=30.0,
            clock=clock,
        )

    def tables(self) -> int:
        return sum(1 for r in self.requests if r.path != LEASES)


def test_it_counts_each_shards_rows_page_by_page_and_remembers_them_for_max_age() -> None:
    server = Server({0: 5, 1: 0, 2: 3})
    clock = clocks.FakeClock()
    sizes = server.sizes(clock)
    assert sizes() == {0: 5, 1: 0, 2: 3}
    assert server.tables() == 3 + 1 + 2, "pages of 2: 3 for shard 0, 1 for 1 (none), 2 for 2"
    clock.advance(59)
    assert sizes() == {0: 5, 1: 0, 2: 3}
    assert server.tables() == 6, "remembered"
    clock.advance(2)
    server.rows[1] = 4
    assert sizes() == {0: 5, 1: 4, 2: 3}


def test_a_server_that_does_not_filter_is_not_asked_for_tables() -> None:
    """Without the gate every Table would be the whole kind: N times the bytes for nothing."""
    server = Server({0: 5, 1: 0, 2: 3}, filters=False)
    assert server.sizes(clocks.FakeClock())() is None
    assert server.tables() == 0
    assert [r.path for r in server.requests] == [LEASES]


def test_equal_sizes_say_nothing() -> None:
    server = Server({0: 2, 1: 2, 2: 2})
    assert server.sizes(clocks.FakeClock())() is None


@pytest.mark.parametrize(
    "reply",
    [
        Reply(500, json.dumps({"kind": "Status", "reason": "InternalError"}).encode()),
        Reply(200, json.dumps({"kind": "Table", "rows": {"not": "a list"}}).encode()),
        Reply(403, json.dumps({"kind": "Status", "reason": "Forbidden"}).encode()),
        Reply(200, b"null"),
        Reply(200, b'["a", "list"]'),
        Reply(200, json.dumps({"kind": "Table", "rows": [], "metadata": "x"}).encode()),
        Reply(200, json.dumps({"kind": "WidgetList", "items": []}).encode()),
    ],
    ids=["error", "malformed", "forbidden", "null", "list", "metadata", "not-a-table"],
)
def test_a_failed_count_says_nothing_and_is_tried_again_after_retry_after(reply: Reply) -> None:
    server = Server({0: 5, 1: 0, 2: 3})
    server.broken = lambda r: reply if r.path != LEASES else None
    clock = clocks.FakeClock()
    sizes = server.sizes(clock)
    assert sizes() is None
    asked = len(server.requests)
    clock.advance(29)
    assert sizes() is None
    assert len(server.requests) == asked, "not again before retry_after"
    server.broken = lambda r: None
    clock.advance(2)
    assert sizes() == {0: 5, 1: 0, 2: 3}


def test_a_count_is_bounded_by_one_deadline() -> None:
    """Every request of a count is sent with what is left of the one timeout (the client's
    deadline), not a full request timeout each."""
    server = Server({0: 5, 1: 0, 2: 3})
    server.sizes(clocks.FakeClock())()
    timeouts = [r.timeout for r in server.requests]
    assert timeouts
    assert all(t is not None for t in timeouts)
    assert all(_total(t) <= 5.0 for t in timeouts), timeouts


def test_more_shards_than_it_counts_are_placed_by_count() -> None:
    server = Server({})
    sizes = shardsizes.ShardSizes(
        server.transport.client(),
        KIND,
        shardsizes.MAX_SHARDS + 1,
        lease_namespace="ns",
        timeout=5.0,
    )
    assert sizes() is None
    assert server.requests == []


def _total(timeout: object) -> float:
    """A urllib3 Timeout's or a number's seconds."""
    total = getattr(timeout, "total", None)
    if total is not None:
        return float(total)
    read = getattr(timeout, "read_timeout", None)
    return float(read if read is not None else timeout)  # type: ignore[arg-type]
