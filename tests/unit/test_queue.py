"""The work queue's client-go guarantees, by property-based and concurrent tests."""

from __future__ import annotations

import itertools
import threading
import tracemalloc
from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from controllers.runtime.metrics import Metrics, PrometheusQueueMetrics
from controllers.runtime.queue import Queue
from tests.support.conditions import count_worker_wakeups
from tests.support.polling import wait_for

keys = st.sampled_from([f"ns/obj-{i}" for i in range(6)])


class QueueModel(RuleBasedStateMachine):
    """One thread, every interleaving of add/get/done: the queue matches a simple model."""

    def __init__(self) -> None:
        super().__init__()
        self.q: Queue[str] = Queue()
        self.queued: list[str] = []  # model: FIFO of keys waiting, no duplicates
        self.processing: set[str] = set()
        self.dirty_while_processing: set[str] = set()

    @rule(key=keys)
    def add(self, key: str) -> None:
        self.q.add(key)
        if key in self.processing:
            self.dirty_while_processing.add(key)
        elif key not in self.queued:
            self.queued.append(key)

    @precondition(lambda self: bool(self.queued))
    @rule()
    def get(self) -> None:
        item, shutdown = self.q.get()
        assert not shutdown
        expected = self.queued.pop(0)
        assert item == expected, "fair: FIFO order"
        assert item not in self.processing, "exclusive: never handed out twice"
        self.processing.add(item)

    @precondition(lambda self: bool(self.processing))
    @rule(data=st.data())
    def done(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.processing)))
        self.q.done(key)
        self.processing.discard(key)
        if key in self.dirty_while_processing:
            self.dirty_while_processing.discard(key)
            self.queued.append(key)

    @invariant()
    def lengths_match(self) -> None:
        assert len(self.q) == len(self.queued), "stingy: one entry per key"
        assert self.q.processing() == len(self.processing)


TestQueueModel = QueueModel.TestCase
TestQueueModel.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)


@settings(max_examples=25, deadline=None)
@given(
    adds=st.lists(st.tuples(st.integers(0, 3), keys), min_size=1, max_size=200),
    workers=st.integers(1, 4),
)
def test_concurrent_no_key_processed_twice_at_once_and_no_add_lost(
    adds: list[tuple[int, str]], workers: int
) -> None:
    q: Queue[str] = Queue()
    seq = itertools.count()
    seq_lock = threading.Lock()
    in_flight: dict[str, int] = defaultdict(int)
    in_flight_lock = threading.Lock()
    violations: list[str] = []
    last_add: dict[str, int] = {}
    last_start: dict[str, int] = {}

    def next_seq() -> int:
        with seq_lock:
            return next(seq)

    def work() -> None:
        while True:
            item, shutdown = q.get()
            if shutdown:
                return
            assert item is not None
            with in_flight_lock:
                in_flight[item] += 1
                if in_flight[item] > 1:
                    violations.append(item)
                last_start[item] = next_seq()
            with in_flight_lock:
                in_flight[item] -= 1
            q.done(item)

    def produce(producer: int) -> None:
        for p, key in adds:
            if p % 2 == producer:
                last_add[key] = max(last_add.get(key, -1), next_seq())
                q.add(key)

    threads = [threading.Thread(target=work) for _ in range(workers)]
    for t in threads:
        t.start()
    producers = [threading.Thread(target=produce, args=(i,)) for i in range(2)]
    for t in producers:
        t.start()
    for t in producers:
        t.join()
    wait_for(lambda: len(q) == 0 and q.processing() == 0, timeout=10, what="queue drained")
    q.shut_down_with_drain(5)
    for t in threads:
        t.join(5)
    assert not violations, f"processed concurrently: {violations}"
    for key, added in last_add.items():
        assert last_start.get(key, -1) > added, f"add of {key} at {added} never processed after"


def test_add_while_processing_is_processed_again_after_done() -> None:
    q: Queue[str] = Queue()
    q.add("a")
    _item, _ = q.get()
    q.add("a")
    assert len(q) == 0, "not handed out while being processed"
    q.done("a")
    assert q.get() == ("a", False)


def test_shutdown_drains_in_flight_items_and_refuses_new_ones() -> None:
    q: Queue[str] = Queue()
    q.add("a")
    q.add("b")
    _item, _ = q.get()
    drained: list[bool] = []
    stopper = threading.Thread(target=lambda: drained.append(q.shut_down_with_drain(10)))
    stopper.start()
    wait_for(lambda: q.shutting_down, what="shutdown started")
    q.add("c")  # refused
    assert not drained, "waits while an item is in flight"
    assert q.get() == ("b", False), "what was queued is still handed out"
    q.done("b")
    q.done("a")
    stopper.join(5)
    assert drained == [True]
    assert q.get() == (None, True), "c was refused after shutdown"


def test_drain_returns_once_nothing_is_processing_though_a_re_added_item_is_queued() -> None:
    """A draining stop waits for what is in flight, not for what is queued (a stopping
    controller drops that: level-triggered). Break: ``done()`` waking only the workers when it
    queues an item re-added while it was processed (the drain then waited for a worker)."""
    q: Queue[str] = Queue()
    q.add("a")
    assert q.get() == ("a", False)
    q.add("a")  # re-added while processing
    drained: list[bool] = []
    stopper = threading.Thread(target=lambda: drained.append(q.shut_down_with_drain(30)))
    stopper.start()
    wait_for(lambda: q.shutting_down, what="shutdown started")
    q.done("a")
    stopper.join(10)
    assert drained == [True], "the drain returned once nothing was processing"
    assert q.get() == ("a", False), "the re-added item is still handed out"


def test_drain_times_out_when_an_item_never_finishes() -> None:
    q: Queue[str] = Queue()
    q.add("stuck")
    q.get()
    assert q.shut_down_with_drain(0.05) is False


def test_a_drained_queue_gives_its_tables_back() -> None:
    """A cold start queues every object once; once the queue and its metrics have drained, the
    idle controller must not keep their tables sized for all of them (a set or dict never
    shrinks as keys leave it)."""
    items = [f"ns/obj-{i}" for i in range(50_000)]
    queue: Queue[str] = Queue(metrics=PrometheusQueueMetrics(Metrics(), "drained"))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for item in items:
            queue.add(item)
        for _ in items:
            taken, _ = queue.get()
            assert taken is not None
            queue.done(taken)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 64 << 10, f"{held} bytes still held by a drained queue of 50,000"


def test_done_wakes_no_idle_worker() -> None:
    """The last ``done()`` of an idle controller wakes a draining stop, never its idle workers.

    Catches the one condition for both: ``done()`` then woke every worker blocked in ``get()``
    each time nothing was left processing (after every item when idle), and each took the lock
    and the GIL to find the queue empty. No timing: a worker's wait is registered before the
    lock is released, every wake-up returns from ``wait()`` once, and the count is read after
    the threads have ended."""
    q: Queue[str] = Queue()
    ready = count_worker_wakeups(q)
    q.add("a")
    assert q.get() == ("a", False)
    taken: list[str | None] = []
    workers = [threading.Thread(target=lambda: taken.append(q.get()[0])) for _ in range(3)]
    for w in workers:
        w.start()
    wait_for(lambda: ready.waits == 3, what="three idle workers waiting")
    q.done("a")  # nothing is processing now
    q.add("b")  # wakes one worker
    wait_for(lambda: "b" in taken, what="a worker took b")
    q.shut_down()  # wakes the other two
    for w in workers:
        w.join(5)
    assert sorted(taken, key=str) == [None, None, "b"]
    assert ready.woken == 3, f"{ready.woken} wake-ups for 3 waiting workers, one item and a stop"
