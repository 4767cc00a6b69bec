"""The Event recorder under load, against an in-memory API server and a fake clock: a burst larger than the
buffer loses only the excess and logs one summary, drops are summarised at most once per interval,
the per-object spam filter (client-go's: burst 25, one more every 5 minutes), repeats coalesced in
the buffer and aggregated into the written Event's count, parallel senders, and a reconcile that
never waits for the API server. No sleeps: a sender is held by a gate or a barrier, and the
recorder's clock moves only when told to."""

from __future__ import annotations

import threading
import tracemalloc
import zlib
from collections.abc import Iterator, MutableMapping
from typing import Any

import pytest
from structlog.testing import capture_logs

from controllers.runtime import clock as clocks
from controllers.runtime import errors as api_errors
from controllers.runtime import events, objects
from controllers.runtime.metrics import Metrics
from tests.support import memapi
from tests.support.polling import wait_for

SECRETISH = "message-text-that-must-not-be-logged"


class Server:
    """The in-memory API server, and what a test does to it: ``gate`` held closed, every write
    waits for it; ``barrier``: every create waits for that many to be in flight at once;
    ``entered`` is set once a write has reached the server (it may wait at the gate)."""

    def __init__(self) -> None:
        self.api = memapi.MemAPI()
        self.gate = threading.Event()
        self.gate.set()
        self.barrier: threading.Barrier | None = None
        self.entered = threading.Event()
        self.api.intercept(self._arrive)

    def _arrive(self, call: memapi.Call) -> None:
        assert call.resource == objects.EVENTS
        if call.verb is memapi.Verb.CREATE:
            self.entered.set()
        self.gate.wait()
        if call.verb is memapi.Verb.CREATE and self.barrier is not None:
            self.barrier.wait()

    @property
    def created(self) -> list[dict[str, Any]]:
        """The Events created, as sent."""
        return [w.body for w in self.api.writes if w.verb is memapi.Verb.CREATE]

    @property
    def patched(self) -> list[tuple[str, dict[str, Any]]]:
        """The patches of written Events: (name, patch)."""
        return [(w.name, w.body) for w in self.api.writes if w.verb is memapi.Verb.PATCH]


class Setup:
    def __init__(self, **options: Any) -> None:
        self.server = Server()
        self.clock = clocks.FakeClock()
        self.metrics = Metrics()
        self.recorder = events.EventRecorder(
            self.server.api,
            component="rotator",
            instance="test",
            metrics=self.metrics,
            clock=self.clock,
            **options,
        )

    def dropped(self) -> float:
        return self.metrics.registry.get_sample_value("controller_events_dropped_total") or 0.0

    def record(self, i: int, message: str = SECRETISH, type_: str = events.NORMAL) -> None:
        self.recorder.event(obj(i), type_, "Something", message)


def obj(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"o{i}", "namespace": "ns", "uid": f"uid-{i}"},
    }


def summaries(logs: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [line for line in logs if line["event"] == "event.dropped"]


@pytest.fixture
def gate_released() -> Iterator[list[Server]]:
    """Opens every gate a test closed, so no sender thread is left waiting."""
    servers: list[Server] = []
    yield servers
    for server in servers:
        server.gate.set()


@pytest.mark.parametrize("senders", [1, 4])
def test_a_burst_larger_than_the_buffer_loses_only_the_excess_and_logs_one_summary(
    senders: int,
) -> None:
    """Mutations caught: a log line per dropped Event (500 lines), a buffer that grows with the
    burst (nothing dropped: memory unbounded), a drop that is not counted."""
    s = Setup(buffer=1000, senders=senders)
    with capture_logs() as logs:
        for i in range(1500):  # distinct objects: the spam filter has no say
            s.record(i)
        assert s.dropped() == 500
        assert summaries(logs) == [], "nothing logged before the interval is over"
        s.recorder.start()
        s.recorder.stop()
    assert len(s.server.created) == 1000, "every Event that found room is written"
    (summary,) = summaries(logs)
    assert (summary["dropped"], summary[events.BUFFER_FULL]) == (500, 500)
    assert summary["summary"].startswith("dropped 500 events in the last")
    assert SECRETISH not in str(logs), "no message in any log line"


def test_drops_are_summarised_at_most_once_per_interval() -> None:
    """Mutation caught: a summary on every drop, or one that never comes while drops go on."""
    s = Setup(buffer=1, senders=1)  # never started: the one slot stays taken
    with capture_logs() as logs:
        for i in range(4):
            s.record(i)  # 1 queued, 3 dropped
        s.clock.advance(59)
        s.record(4)
        assert summaries(logs) == []
        s.clock.advance(1)
        s.record(5)
        (first,) = summaries(logs)
        assert (first["dropped"], first["summary"]) == (5, "dropped 5 events in the last 60 s")
        s.record(6)
        s.record(7)
        assert len(summaries(logs)) == 1, "the next drops wait for the next interval"
        s.clock.advance(60)
        s.record(8)
        assert [line["dropped"] for line in summaries(logs)] == [5, 3]
    assert s.dropped() == 8


def test_a_hot_loop_on_one_object_is_throttled_and_other_objects_are_not() -> None:
    """client-go's spam filter: 25 Events per object, then one every 5 minutes. Mutations
    caught: no filter (30 written), a filter keyed by something wider than the object (the
    other object throttled too), a bucket that never refills."""
    s = Setup(senders=1)
    with capture_logs() as logs:
        for n in range(30):
            s.record(1, message=f"attempt {n}")  # distinct messages: no coalescing
        s.record(2)
        assert s.dropped() == 5
        s.clock.advance(events.SPAM_REFILL_SECONDS)
        s.record(1, message="after the refill")  # the 5 minutes also end the summary interval
        s.record(1, message="one too many")
        assert s.dropped() == 6
        s.recorder.start()
        s.recorder.stop()
    per_object = [e["involvedObject"]["name"] for e in s.server.created]
    assert (per_object.count("o1"), per_object.count("o2")) == (26, 1)
    assert [line[events.THROTTLED] for line in summaries(logs)] == [5, 1]


def test_repeats_waiting_in_the_buffer_are_one_write_with_their_count() -> None:
    """Mutation caught: a repeat taking a slot of its own (the second object's Event dropped,
    or three writes for one Event)."""
    s = Setup(buffer=2, senders=1)
    for _ in range(3):
        s.record(1)
    s.record(2)
    s.record(3)  # two distinct Events wait: no room for a third
    assert s.dropped() == 1
    s.recorder.start()
    s.recorder.stop()
    counts = {e["involvedObject"]["name"]: e["count"] for e in s.server.created}
    assert counts == {"o1": 3, "o2": 1}


def test_a_coalesced_repeat_is_written_after_what_the_object_recorded_in_between() -> None:
    """Expired, CredentialsReady, Expired while the sender is busy: the last Event written is
    Expired (count 2), so an exporter acting on the latest Event sees the latest state.
    Mutation caught: the repeat keeping its first slot (CredentialsReady written last)."""
    s = Setup(senders=1)
    for reason in ("Expired", "CredentialsReady", "Expired"):
        s.recorder.event(obj(1), events.WARNING, reason, "m")
    s.recorder.start()
    s.recorder.stop()
    assert [(e["reason"], e["count"]) for e in s.server.created] == [
        ("CredentialsReady", 1),
        ("Expired", 2),
    ]


def test_a_repeat_of_a_written_event_bumps_its_count_and_a_late_one_is_new() -> None:
    """Mutation caught: no aggregation (a second Event for the repeat), or aggregation without
    the 10-minute window (a day-old Event's count bumped)."""
    s = Setup(senders=1)
    s.recorder.start()
    try:
        s.record(1)
        wait_for(lambda: len(s.server.created) == 1, timeout=10, what="the first write")
        s.clock.advance(10)
        s.record(1)
        wait_for(lambda: s.server.patched, timeout=10, what="the count bumped")
        ((name, patch),) = s.server.patched
        assert name == s.server.created[0]["metadata"]["name"]
        assert patch["count"] == 2
        s.clock.advance(601)
        s.record(1)
        wait_for(lambda: len(s.server.created) == 2, timeout=10, what="a new Event")
    finally:
        s.recorder.stop()
    assert len(s.server.patched) == 1


def test_the_senders_write_in_parallel() -> None:
    """Four Events of objects owned by the four senders are in flight at once. Mutation caught:
    one sender thread (the barrier breaks after its timeout, the writes are refused)."""
    s = Setup(senders=4)
    s.server.barrier = threading.Barrier(4, timeout=10)
    owners: dict[int, int] = {}
    i = 0
    while len(owners) < 4:
        owners.setdefault(zlib.crc32(f"uid-{i}".encode()) % 4, i)
        i += 1
    s.recorder.start()
    try:
        for i in owners.values():
            s.record(i)
        wait_for(lambda: len(s.server.created) == 4, timeout=20, what="four writes at once")
    finally:
        s.recorder.stop()
    assert s.dropped() == 0


def test_recording_never_waits_for_the_api_server(gate_released: list[Server]) -> None:
    """The API server hangs; a burst of 5,000 Events is recorded all the same, keeping at most
    the buffer. Mutation caught: a blocking put (the recording thread never ends)."""
    s = Setup(buffer=100, senders=2)
    s.server.gate.clear()
    gate_released.append(s.server)
    s.recorder.start()
    done = threading.Event()

    def burst() -> None:
        for i in range(5000):
            s.record(i)
        done.set()

    threading.Thread(target=burst, daemon=True).start()
    assert done.wait(timeout=30), "recording waited for the API server"
    assert 5000 - 100 - 2 <= s.dropped() <= 5000 - 100, "the buffer, and one in flight per sender"
    s.server.gate.set()
    s.recorder.stop()
    assert len(s.server.created) + s.dropped() == 5000, "every Event written or counted"


def test_refused_events_are_counted_and_summarised_without_their_message() -> None:
    """Mutation caught: a log line per refused Event, or one carrying its message."""
    s = Setup(senders=1)
    s.server.api.fail(api_errors.Invalid(f"Event is invalid: {SECRETISH}"), times=None)
    for i in range(3):
        s.record(i)
    with capture_logs() as logs:
        s.recorder.start()
        s.recorder.stop()
    assert s.dropped() == 3
    (summary,) = summaries(logs)
    assert (summary[events.REFUSED], summary["last_error"]) == (3, "Invalid")
    assert SECRETISH not in str(logs)


def test_events_not_sent_by_the_end_of_stop_are_counted(gate_released: list[Server]) -> None:
    """The API server hangs through the stop: the Event in flight and those waiting are counted
    and summarised. Mutation caught: forgetting either (lost silently)."""
    s = Setup(senders=1)
    s.server.gate.clear()
    gate_released.append(s.server)
    s.recorder.start()
    for i in range(3):
        s.record(i)
    assert s.server.entered.wait(timeout=10), "the first write is in flight"
    with capture_logs() as logs:
        s.recorder.stop(timeout=0.2)
    (summary,) = summaries(logs)
    assert summary[events.UNSENT] == 3
    assert s.dropped() == 3
    s.record(4)
    assert s.dropped() == 4, "recorded after the stop: counted"


class _Discarding:
    """A writer that keeps nothing it is sent: what stays allocated is the recorder's."""

    def __init__(self) -> None:
        self.created = 0
        self._lock = threading.Lock()  # four sender threads count here

    def create(self, resource: objects.Resource, body: Any, **_: Any) -> dict[str, Any]:
        with self._lock:
            self.created += 1
        return {}

    def patch(self, resource: objects.Resource, name: str, patch: Any, **_: Any) -> dict[str, Any]:
        return {}


def _held_by_a_full_recorder(message_length: int) -> int:
    """Bytes still allocated (tracemalloc) once 5,000 Events of distinct objects were written (a
    buffer that holds them all: none dropped):
    the written-Event LRU and the spam filter full (4,096 entries each)."""
    writer = _Discarding()
    objs = [obj(i) for i in range(5000)]
    tracemalloc.start()  # before the messages are made: a string made earlier is not traced
    try:
        before = tracemalloc.get_traced_memory()[0]
        recorder = events.EventRecorder(
            writer, component="rotator", instance="test", metrics=Metrics(),
            clock=clocks.FakeClock(), senders=4, buffer=5000,
        )  # fmt: skip
        recorder.start()
        for i, o in enumerate(objs):
            recorder.event(o, events.NORMAL, "Something", f"{i:05d}".ljust(message_length, "m"))
        wait_for(lambda: writer.created == 5000, timeout=30, what="5,000 Events written")
        held = tracemalloc.get_traced_memory()[0] - before
        recorder.stop()
    finally:
        tracemalloc.stop()
    return held


def test_the_written_event_lru_does_not_keep_the_messages() -> None:
    """A full LRU holds as much with 1 KiB messages as with 64-byte ones: it is keyed by a digest
    of the Event. Measured: 1.8 MB held either way. Mutation caught: keyed by (uid, type, reason,
    message), 2.4 MB with 64-byte messages and 6.2 MB with 1 KiB ones (911 bytes more per
    Event)."""
    short, long = _held_by_a_full_recorder(64), _held_by_a_full_recorder(1024)
    assert long - short < 4096 * 64, f"{(long - short) / 4096:.0f} more bytes per Event kept"
