"""Kubernetes Events for what users should see in ``kubectl describe``.

Recording never blocks a reconcile and degrades like client-go's ``tools/record``, with what it
lacks for a cold start over thousands of objects:

* **Spam filter** (client-go's ``EventSourceObjectSpamFilter``): a token bucket per involved
  object, burst 25, refilled one Event every 5 minutes, so a hot loop cannot flood a namespace.
  Applied when the Event is recorded, before it takes a buffer slot, so a noisy object cannot
  crowd out the others' Events either.
* **Bounded buffer, coalesced**: at most ``buffer`` distinct Events wait to be sent (client-go's
  broadcaster drops when its 1000-slot channel is full). A repeat of an Event already waiting
  joins it (one write, its count raised) instead of taking another slot.
* **Aggregation of repeats**: a repeat of the same Event (object, type, reason, message) within
  ten minutes of the last one bumps the existing Event's count (a PATCH) instead of creating
  another; the record of what was written is an LRU of 4096, as client-go's, keyed by a digest
  of the Event (see :func:`_digest`).
* **A few sender threads** (default 4), each owning the objects whose uid hashes to it: writes go
  out in parallel, one object's Events stay in order, and no two threads race on one Event.
* **Drops are counted, not shouted**: every Event not written (buffer full, throttled by the spam
  filter, refused by the API server, unsent at stop) counts in ``events_dropped`` at once, and
  the log gets one ``event.dropped`` summary per interval (default 60 s) naming how many and why,
  never a line per Event (client-go logs each one).

Memory is bounded whatever the rate: the buffer, the written-Event LRU and the spam filter's LRU
have fixed sizes, and messages are cut at 1 KiB. Messages are the caller's and must never hold
secret material; nothing here logs one.
"""

from __future__ import annotations

import hashlib
import threading
import time
import zlib
from collections import Counter, OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from controllers.runtime import apiclient, objects
from controllers.runtime import clock as clocks
from controllers.runtime import metrics as metric_families

log = structlog.get_logger(__name__)

NORMAL = "Normal"
WARNING = "Warning"

_MAX_MESSAGE = 1024
_AGGREGATE_WINDOW = 600.0
_LRU_ENTRIES = 4096  # client-go's maxLruCacheEntries
SPAM_BURST = 25  # client-go's defaultSpamBurst
SPAM_REFILL_SECONDS = 300.0  # client-go's defaultSpamQPS, 1/300
REPORT_INTERVAL = 60.0

# why an Event was not written, as the summary names it
BUFFER_FULL = "buffer_full"
THROTTLED = "throttled"
REFUSED = "refused"
UNSENT = "unsent_at_stop"

_Key = tuple[str, str, str, str]  # involved uid, type, reason, message


def _digest(key: _Key) -> bytes:
    """What the written-Event LRU is keyed by: 16 bytes of BLAKE2b over the key's ``repr`` (one
    encoding per key, whatever its strings hold).

    Why not the key itself: a full LRU keeps 4,096 keys once a cold start has recorded that
    many Events, and each key held its tuple and its message, which is otherwise written and
    done with (~200 bytes together for a 135-byte message); a digest is 49 bytes. A full
    recorder held 2.89 MiB, now 2.26 (tracemalloc, 4,096 Events of policies with 135-byte
    messages; tests/unit/test_event_recorder.py checks the message is not kept). A collision
    (2^-128 for two given Events) would only bump the count of the other Event."""
    return hashlib.blake2b(repr(key).encode(), digest_size=16).digest()


@dataclass
class _Pending:
    """An Event waiting to be written: ``count`` occurrences, the first and last at those times."""

    involved: dict[str, str]
    type: str
    reason: str
    message: str
    first: float
    last: float
    count: int = 1


@dataclass(slots=True)
class _Written:
    """An Event on the API server, for bumping its count on a repeat. Slotted, as is
    :class:`_Bucket`: 4,096 of each are kept once a cold start has recorded that many Events,
    and an instance without a ``__dict__`` is ~100 bytes smaller."""

    name: str
    namespace: str
    count: int
    last: float


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


class _Shard:
    """The Events of the objects that hash to one sender thread. ``pending`` and ``sending``
    (the one being written) are guarded by ``cond``; ``written`` is touched by that thread only."""

    def __init__(self, capacity: int, written_entries: int) -> None:
        self.cond = threading.Condition()
        self.pending: OrderedDict[_Key, _Pending] = OrderedDict()
        self.capacity = capacity
        self.written: OrderedDict[bytes, _Written] = OrderedDict()  # by _digest of the key
        self.written_entries = written_entries
        self.sending: _Pending | None = None
        self.stopping = False
        self.thread: threading.Thread | None = None


class EventRecorder:
    """Records Events as ``component`` (the ``reportingController``) from ``instance``."""

    def __init__(
        self,
        api: apiclient.Writer,
        *,
        component: str,
        instance: str,
        metrics: metric_families.Metrics,
        clock: clocks.Clock | None = None,
        buffer: int = 1000,
        senders: int = 4,
        burst: int = SPAM_BURST,
        refill_seconds: float = SPAM_REFILL_SECONDS,
        report_interval: float = REPORT_INTERVAL,
    ) -> None:
        self._api = api
        self._component = component
        self._instance = instance
        self._metrics = metrics
        self._clock = clock or clocks.RealClock()
        senders = max(1, senders)
        per_shard = max(1, -(-buffer // senders))  # the buffer, split evenly (rounded up)
        self._shards = [_Shard(per_shard, max(1, _LRU_ENTRIES // senders)) for _ in range(senders)]
        self._burst = burst
        self._refill = refill_seconds
        self._report_interval = report_interval
        self._lock = threading.Lock()  # the spam filter and the drop tally
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        self._dropped: Counter[str] = Counter()
        self._dropped_since: float | None = None  # monotonic time of the first unreported drop
        self._last_error = ""

    # --- recording (any thread; never blocks on the API) ---------------------------------------

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
        identity = involved["uid"] or "/".join(
            (involved["kind"], involved["namespace"], involved["name"])
        )
        message = message[:_MAX_MESSAGE]
        if not self._allow(identity):
            self._drop(THROTTLED)
        else:
            self._enqueue(identity, (identity, type_, reason, message), involved, type_, reason)
        self.report_drops()

    def _allow(self, identity: str) -> bool:
        """Takes a token from the object's bucket (burst ``burst``, one back every ``refill``
        seconds); False when it has none left."""
        now = self._clock.monotonic()
        with self._lock:
            bucket = self._buckets.pop(identity, None)
            if bucket is None:
                bucket = _Bucket(float(self._burst), now)
            else:
                refilled = (now - bucket.at) / self._refill if self._refill > 0 else self._burst
                bucket = _Bucket(min(float(self._burst), bucket.tokens + refilled), now)
            allowed = bucket.tokens >= 1.0
            if allowed:
                bucket.tokens -= 1.0
            self._buckets[identity] = bucket  # most recently used last
            if len(self._buckets) > _LRU_ENTRIES:
                self._buckets.popitem(last=False)
            return allowed

    def _enqueue(
        self,
        identity: str,
        key: _Key,
        involved: dict[str, str],
        type_: str,
        reason: str,
    ) -> None:
        now = self._clock.now()
        shard = self._shards[zlib.crc32(identity.encode()) % len(self._shards)]
        with shard.cond:
            waiting = shard.pending.get(key)
            if waiting is not None:  # the same Event is waiting: one write, a higher count
                waiting.count += 1
                waiting.last = now
                # written after whatever the object recorded in between: the latest Event an
                # exporter sees is still the object's latest state
                shard.pending.move_to_end(key)
                return
            if shard.stopping:
                why: str | None = UNSENT
            elif len(shard.pending) >= shard.capacity:
                why = BUFFER_FULL
            else:
                why = None
                shard.pending[key] = _Pending(involved, type_, reason, key[3], now, now)
                shard.cond.notify()
        if why is not None:
            self._drop(why)

    # --- drops ---------------------------------------------------------------------------------

    def _drop(self, why: str, count: int = 1, error: str = "") -> None:
        self._metrics.events_dropped.inc(count)
        with self._lock:
            self._dropped[why] += count
            if self._dropped_since is None:
                self._dropped_since = self._clock.monotonic()
            if error:
                self._last_error = error

    def report_drops(self, *, force: bool = False) -> None:
        """Logs one ``event.dropped`` summary of the Events not written since the last one, once
        ``report_interval`` has passed since the first of them (at once with ``force``).
        Called on every record, by idle sender threads, and at stop."""
        with self._lock:
            since = self._dropped_since
            if since is None:
                return
            elapsed = self._clock.monotonic() - since
            if not force and elapsed < self._report_interval:
                return
            dropped, self._dropped = self._dropped, Counter()
            last_error, self._last_error = self._last_error, ""
            self._dropped_since = None
        total = sum(dropped.values())
        seconds = max(elapsed, 0.0)
        log.warning(
            "event.dropped",
            dropped=total,
            seconds=round(seconds, 1),
            summary=f"dropped {total} events in the last {seconds:.0f} s",
            **dict(sorted(dropped.items())),
            **({"last_error": last_error} if last_error else {}),
        )

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        for i, shard in enumerate(self._shards):
            shard.thread = threading.Thread(
                target=self._send_loop, args=(shard,), name=f"events-{i}", daemon=True
            )
            shard.thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Sends what is buffered (within ``timeout``), counts what could not be, then stops."""
        for shard in self._shards:
            with shard.cond:
                shard.stopping = True
                shard.cond.notify_all()
        deadline = time.monotonic() + timeout
        for shard in self._shards:
            if shard.thread is not None:
                shard.thread.join(max(0.0, deadline - time.monotonic()))
        for shard in self._shards:
            with shard.cond:
                unsent = sum(p.count for p in shard.pending.values())
                shard.pending.clear()
                if shard.sending is not None and shard.thread and shard.thread.is_alive():
                    unsent += shard.sending.count  # still waiting on the API server: given up
                    shard.sending = None
            if unsent:
                self._drop(UNSENT, unsent)
        self.report_drops(force=True)

    def _send_loop(self, shard: _Shard) -> None:
        while True:
            with shard.cond:
                if not shard.pending and not shard.stopping:
                    # woken by a new Event; otherwise now and then, to log a due drop summary
                    shard.cond.wait(self._report_interval)
                if not shard.pending:
                    if shard.stopping:
                        return
                    item = None
                else:
                    item = shard.pending.popitem(last=False)
                    shard.sending = item[1]
            if item is None:
                self.report_drops()
                continue
            key, pending = item
            try:
                self._send(shard, key, pending)
            except Exception as exc:  # refused, or the API server unreachable: counted
                with shard.cond:
                    counted = shard.sending is not pending  # given up (and counted) at stop
                    shard.sending = None
                if not counted:
                    self._drop(REFUSED, pending.count, error=type(exc).__name__)
            else:
                with shard.cond:
                    shard.sending = None

    # --- writing (a sender thread) -------------------------------------------------------------

    def _send(self, shard: _Shard, key: _Key, p: _Pending) -> None:
        namespace = p.involved["namespace"] or "default"
        digest = _digest(key)
        seen = shard.written.get(digest)
        if seen is not None and p.first - seen.last < _AGGREGATE_WINDOW and self._bump(seen, p):
            self._remember(
                shard, digest, _Written(seen.name, seen.namespace, seen.count + p.count, p.last)
            )
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
            "firstTimestamp": clocks.rfc3339(p.first),
            "lastTimestamp": clocks.rfc3339(p.last),
            "count": p.count,
        }
        self._api.create(objects.EVENTS, body, namespace=namespace)
        self._remember(shard, digest, _Written(name, namespace, p.count, p.last))

    def _bump(self, seen: _Written, p: _Pending) -> bool:
        """Raises the count of the Event written before; False if it is gone (Events live an
        hour) or the patch was refused: then it is written anew."""
        try:
            self._api.patch(
                objects.EVENTS,
                seen.name,
                {"count": seen.count + p.count, "lastTimestamp": clocks.rfc3339(p.last)},
                namespace=seen.namespace,
            )
        except Exception:
            return False
        return True

    @staticmethod
    def _remember(shard: _Shard, digest: bytes, written: _Written) -> None:
        shard.written.pop(digest, None)
        shard.written[digest] = written  # most recently used last
        if len(shard.written) > shard.written_entries:
            shard.written.popitem(last=False)
