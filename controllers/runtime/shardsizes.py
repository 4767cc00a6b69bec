"""How many objects of one kind each shard holds, for placing shards by size
(:func:`.shareplan.assign_free`): namespaces fall into shards by hash, so equal counts of shards
are not equal loads, and a replica's memory follows what its shards hold.

Counted by the API server, one list per shard with its ``shardSelector``, as a Table without the
objects (``as=Table;g=meta.k8s.io;v=v1``, ``includeObject=None``): about 80 bytes a row where the
objects are 500-600, so the sizes of 30,000 chains cost a replica some 2.4 MB, only when it has
free shards to choose from (a start, a takeover), and once per ``max_age`` at most (a Lease
duration as deployed: the rounds of one handover share a count, the next handover counts anew).

Why not cheaper:

* ``limit=1`` and the list's ``remainingItemCount``: a v1.36 API server counts it over every
  object of the kind, not the shard's (its ``SelectionPredicate.Empty`` does not look at the shard
  selector), so every shard reads as the whole.
* The sizes the holders know (their caches): a shard nobody has held yet, as every shard on a
  first start, has none.

Only where the server filters: without the ``ShardedListAndWatch`` gate it ignores the selector,
every list is the whole kind, and the sizes would say nothing at N times the bytes. Whether it
filters is asked of it first with one list of at most one Lease under a selector: a server that
filters echoes it in ``metadata.shardInfo`` on the lists of built-in kinds (not on the Tables or
lists of custom resources). Equal sizes say nothing either; both give None, and the shards are
placed by count alone, as before sizes.

The requests of one count share a deadline, a failed one fails the count (None, tried again at
the next call after ``retry_after``), and a size is a row count, whatever a row holds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

import structlog

from controllers.runtime import client as clients
from controllers.runtime import clock as clocks
from controllers.runtime import errors, objects, sharding

log = structlog.get_logger(__name__)

TABLE = "application/json;as=Table;g=meta.k8s.io;v=v1"
PAGE = 2000
"""Rows per page: 160 kB or so; the server converts a page at a time."""
PAGE_BYTES = 8 << 20
"""A page is refused past this (a Table row is ~80 bytes; this allows a 4 kB row)."""
MAX_SHARDS = 64
"""More shards than this are placed by count alone: one list per shard per count."""


class ShardSizes:
    """Callable: each shard's count of ``resource`` (index to count), or None when the server
    does not filter, the sizes are all equal, or they could not be counted."""

    def __init__(
        self,
        api: clients.Client,
        resource: objects.Resource,
        shards: int,
        *,
        lease_namespace: str,
        timeout: float,
        max_age: float = 15.0,
        retry_after: float = 15.0,
        clock: clocks.Clock | None = None,
    ) -> None:
        """``timeout``: seconds one count may take, every request of it together;
        ``lease_namespace``: where the probe lists Leases (the replica's own); ``max_age``:
        seconds a count (or its finding that sizes say nothing) is used; ``retry_after``:
        seconds after a failed count before the next."""
        self._api = api
        self._resource = resource
        self._ranges = sharding.ranges(shards)
        self._lease_namespace = lease_namespace
        self._timeout = timeout
        self._max_age = max_age
        self._retry_after = retry_after
        self._clock = clock or clocks.RealClock()
        self._lock = threading.Lock()
        self._sizes: dict[int, int] | None = None
        self._next = float("-inf")
        self._logged: str | None = None

    def __call__(self) -> Mapping[int, int] | None:
        with self._lock:
            now = self._clock.monotonic()
            if now < self._next:
                return self._sizes
            if len(self._ranges) > MAX_SHARDS:
                self._sizes, self._next = None, float("inf")
                self._say("shards.sizes_not_counted", why=f"more than {MAX_SHARDS} shards")
                return None
            try:
                # the client's deadline is on its own monotonic clock (time.monotonic)
                with clients.deadline(time.monotonic() + self._timeout):
                    sizes = self._count() if self._server_filters() else None
            except errors.ApiError as exc:
                log.warning("shards.sizes_failed", error=str(exc))
                self._sizes, self._next = None, now + self._retry_after
                return None
            except Exception:  # a bug here must not keep free shards untaken: placed by index
                log.exception("shards.sizes_failed")
                self._sizes, self._next = None, now + self._retry_after
                return None
            if sizes is None:
                self._say("shards.sizes_not_counted", why="the API server does not filter")
            elif len(set(sizes.values())) <= 1:
                self._say("shards.sizes_not_counted", why="every shard holds as many")
                sizes = None
            else:
                self._say("shards.sizes_counted")
            self._sizes, self._next = sizes, now + self._max_age
            return sizes

    def _server_filters(self) -> bool:
        listed = self._api.list(
            objects.LEASES,
            namespace=self._lease_namespace,
            limit=1,
            shard_selector=self._ranges[0].selector(),
        )
        meta = listed.get("metadata") if isinstance(listed, dict) else None
        info = meta.get("shardInfo") if isinstance(meta, dict) else None
        return isinstance(info, dict) and bool(info.get("selector"))

    def _count(self) -> dict[int, int]:
        path = self._resource.path(namespace=None)
        sizes: dict[int, int] = {}
        for r in self._ranges:
            count, token = 0, ""
            while True:
                query = [("shardSelector", r.selector()), ("limit", str(PAGE))]
                query.append(("includeObject", "None"))
                if token:
                    query.append(("continue", token))
                page = self._api.request(
                    "GET", path, query=query, accept=TABLE, max_bytes=PAGE_BYTES
                )
                if not isinstance(page, dict) or page.get("kind") != "Table":
                    raise errors.ApiError(f"the list of {self._resource.plural} is not a Table")
                rows = page.get("rows") or []  # null when none
                meta = page.get("metadata") or {}
                if not isinstance(rows, list) or not isinstance(meta, dict):
                    raise errors.ApiError(f"a malformed Table of {self._resource.plural}")
                count += len(rows)
                token = str(meta.get("continue") or "")
                if not token:
                    break
            sizes[r.index] = count
        return sizes

    def _say(self, event: str, **kw: str) -> None:
        """Logs once per change of what the sizes are: not every minute."""
        key = f"{event}{kw}"
        if key != self._logged:
            self._logged = key
            log.info(event, **kw)
