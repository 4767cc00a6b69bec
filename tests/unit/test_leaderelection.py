"""The leader elector's guarantees, on a fake clock and a fake API server under the real client:
any failure ends leadership through ``on_lost``; every renew attempt is bounded by the time left
before the renew deadline; a graceful stop keeps the Lease until :meth:`release`."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest
import urllib3

from controllers.runtime import clock as clocks
from controllers.runtime import objects
from controllers.runtime.leaderelection import LeaderElectionOptions, LeaderElector
from tests.support.fake_api import FakeTransport, Reply, Request, read_timeout
from tests.support.polling import wait_for

NS, NAME = "ns", "lease"
LEASE_PATH = objects.LEASES.path(namespace=NS, name=NAME)
# Real waits between attempts are short; every timing decision reads the fake clock.
OPTIONS = LeaderElectionOptions(
    name=NAME,
    namespace=NS,
    identity="me",
    lease_duration=15.0,
    renew_deadline=10.0,
    retry_period=0.02,
)


@dataclass
class Run:
    elector: LeaderElector
    stop: threading.Event
    thread: threading.Thread
    started: threading.Event = field(default_factory=threading.Event)
    lost: list[float] = field(default_factory=list)
    reports: list[bool] = field(default_factory=list)


@contextmanager
def elect(
    transport: FakeTransport, clock: clocks.FakeClock, on_started=lambda: None
) -> Iterator[Run]:
    stop = threading.Event()
    elected = threading.Event()
    lost: list[float] = []
    reports: list[bool] = []

    def started() -> None:
        elected.set()
        on_started()

    elector = LeaderElector(
        transport.client(),
        OPTIONS,
        on_started=started,
        on_lost=lambda: lost.append(clock.monotonic()),
        report=reports.append,
        clock=clock,
    )
    thread = threading.Thread(target=elector.run, args=(stop,), daemon=True)
    run = Run(elector, stop, thread, elected, lost, reports)
    thread.start()
    try:
        yield run
    finally:
        stop.set()
        thread.join(5)


def renewals(transport: FakeTransport) -> list[Request]:
    return [r for r in transport.requests if r.method == "PUT"]


@pytest.mark.parametrize(
    "failure",
    [
        RuntimeError("a bug in the transport"),
        KeyError("missing"),
        TypeError("not what was expected"),
    ],
)
def test_any_exception_while_renewing_ends_leadership_at_once(failure: Exception) -> None:
    clock = clocks.FakeClock()
    leading = threading.Event()

    def fault(request: Request) -> Reply | None:
        if request.method == "PUT" and leading.is_set():
            raise failure
        return None

    transport = FakeTransport(fault=fault)
    with elect(transport, clock) as run:
        wait_for(run.started.is_set, timeout=5, what="elected")
        leading.set()
        wait_for(lambda: not run.thread.is_alive(), timeout=5, what="the elector ended")
        assert run.lost == [clock.monotonic()], "on_lost, once, without waiting for the deadline"
        assert not run.elector.leading
        assert run.reports[-1] is False, "the leader metric reads 0"
        assert not run.stop.is_set()


def test_an_exception_in_on_started_ends_leadership() -> None:
    clock = clocks.FakeClock()

    def broken() -> None:
        raise RuntimeError("a controller would not start")

    with elect(FakeTransport(), clock, on_started=broken) as run:
        wait_for(lambda: not run.thread.is_alive(), timeout=5, what="the elector ended")
        assert len(run.lost) == 1
        assert not run.elector.leading


def test_malformed_lease_ends_leadership() -> None:
    clock = clocks.FakeClock()
    transport = FakeTransport()
    with elect(transport, clock) as run:
        wait_for(run.started.is_set, timeout=5, what="elected")
        transport.edit(LEASE_PATH, lambda lease: lease.update(spec="not an object"))
        wait_for(lambda: not run.thread.is_alive(), timeout=5, what="the elector ended")
        assert len(run.lost) == 1


@pytest.mark.parametrize(
    "broken",
    [
        Reply(200, error=urllib3.exceptions.ProtocolError("Connection broken: IncompleteRead")),
        Reply(200, data=b'{"apiVersion": "coordination.k8s.io/v1", "kind": "Le'),
        Reply(200, error=read_timeout()),
    ],
    ids=["cut-mid-body", "truncated-json", "read-timeout"],
)
def test_renew_attempts_are_bounded_by_the_time_left_before_the_renew_deadline(
    broken: Reply,
) -> None:
    """Each renewal PUT takes 4 s and its response breaks: a failed attempt, retried, never a
    dead elector. Attempts start at 0, 4 and 8 s after the last renewal; the third gets the 2 s
    left, not the client's 30 s, and leadership is given up at 10 s."""
    clock = clocks.FakeClock()
    leading = threading.Event()
    took = 4.0
    attempts: list[Request] = []

    def fault(request: Request) -> Reply | None:
        if not leading.is_set():
            return None
        attempts.append(request)
        if request.method != "PUT":
            return None
        if request.timeout < took:  # the client bounds the request: it times out (a bit late)
            clock.advance(request.timeout + 0.01)
            raise read_timeout()
        clock.advance(took)
        return broken

    transport = FakeTransport(fault=fault)
    with elect(transport, clock) as run:
        wait_for(run.started.is_set, timeout=5, what="elected")
        elected_at = clock.monotonic()
        leading.set()
        wait_for(lambda: not run.thread.is_alive(), timeout=10, what="the elector gave up")
        assert len(run.lost) == 1
        assert run.lost[0] - elected_at == pytest.approx(OPTIONS.renew_deadline, abs=0.02)
        puts = [r.timeout for r in attempts if r.method == "PUT"]
        assert puts == pytest.approx([10.0, 6.0, 2.0], abs=0.5)
        assert all(r.timeout <= OPTIONS.renew_deadline for r in attempts), "never the client's 30 s"


def test_another_holder_ends_leadership_at_once() -> None:
    clock = clocks.FakeClock()
    transport = FakeTransport()
    with elect(transport, clock) as run:
        wait_for(run.started.is_set, timeout=5, what="elected")
        transport.edit(LEASE_PATH, lambda lease: lease["spec"].update(holderIdentity="other"))
        wait_for(lambda: not run.thread.is_alive(), timeout=5, what="the elector ended")
        assert run.lost == [clock.monotonic()], "lost before the renew deadline"


def test_a_stop_keeps_the_lease_until_release_then_hands_it_over() -> None:
    clock = clocks.FakeClock()
    transport = FakeTransport()
    with elect(transport, clock) as run:
        wait_for(run.started.is_set, timeout=5, what="elected")
        wait_for(lambda: len(renewals(transport)) >= 3, timeout=5, what="renewing")
        run.stop.set()
        run.thread.join(5)
        assert not run.thread.is_alive()
        assert run.lost == [], "a requested stop is not a loss"
        assert transport.objects[LEASE_PATH]["spec"]["holderIdentity"] == "me", (
            "still held while the caller stops its work"
        )
        assert run.elector.release()
        assert transport.objects[LEASE_PATH]["spec"]["holderIdentity"] == ""


def test_no_release_past_the_renew_deadline() -> None:
    clock = clocks.FakeClock()
    transport = FakeTransport()
    with elect(transport, clock) as run:
        wait_for(run.started.is_set, timeout=5, what="elected")
        run.stop.set()
        run.thread.join(5)
        clock.advance(OPTIONS.renew_deadline)
        assert not run.elector.release(), "a successor may already hold it"
        assert transport.objects[LEASE_PATH]["spec"]["holderIdentity"] == "me"


def test_overdue_when_stuck_in_a_request_past_the_deadline() -> None:
    """The manager's watchdog: a renew stuck beyond the deadline still ends leadership."""
    clock = clocks.FakeClock()
    stuck = threading.Event()
    in_flight = threading.Event()
    release = threading.Event()

    def fault(request: Request) -> Reply | None:
        if request.method == "PUT" and stuck.is_set():
            in_flight.set()
            release.wait(5)
        return None

    transport = FakeTransport(fault=fault)
    with elect(transport, clock) as run:
        wait_for(run.started.is_set, timeout=5, what="elected")
        stuck.set()
        wait_for(in_flight.is_set, timeout=5, what="a renewal in flight")
        assert not run.elector.overdue()
        clock.advance(OPTIONS.renew_deadline)
        assert run.elector.overdue()
        release.set()


def test_a_leader_renews_with_one_write_and_no_read() -> None:
    """client-go's fast path: the leader swaps the Lease as it last wrote it, without reading it
    first — half the requests, half the time a busy process takes to renew. Mutation caught:
    reading before every renewal (a GET per PUT)."""
    clock = clocks.FakeClock()
    transport = FakeTransport()
    with elect(transport, clock) as run:
        wait_for(run.started.is_set, timeout=5, what="elected")
        since = len(transport.requests)
        wait_for(lambda: len(renewals(transport)) >= 3, timeout=10, what="two renewals")
        after = transport.requests[since:]
        assert [r.method for r in after if r.method != "PUT"] == []
        assert run.thread.is_alive(), "still leading"


def test_renewals_go_on_while_the_controllers_are_starting() -> None:
    """Starting the controllers delivers every cached object to their handlers (over 10 s at
    10,000 chains): the leader renews meanwhile, as client-go runs OnStartedLeading on a
    goroutine of its own. Mutation caught: on_started called on the elector's thread (no
    renewal until it returns; the scale benchmark's restart lost leadership that way)."""
    clock = clocks.FakeClock()
    transport = FakeTransport()
    starting = threading.Event()
    release = threading.Event()

    def slow_start() -> None:
        starting.set()
        release.wait(10)

    try:
        with elect(transport, clock, on_started=slow_start) as run:
            wait_for(starting.is_set, timeout=5, what="the controllers starting")
            before = len(renewals(transport))
            wait_for(
                lambda: len(renewals(transport)) >= before + 2,
                timeout=8,
                what="renewals while the controllers start",
            )
            assert run.elector.leading
            assert True not in run.reports, "not reported leading before the controllers started"
            release.set()
            wait_for(lambda: run.reports[-1] is True, timeout=5, what="reported leading")
    finally:
        release.set()


@pytest.mark.parametrize(
    ("holder", "renewed_ago"),
    [("", 0.0), ("other", OPTIONS.lease_duration + 1)],
    ids=["released", "expired"],
)
def test_every_change_of_holder_counts_as_a_lease_transition(
    holder: str, renewed_ago: float
) -> None:
    """client-go counts each change of holder in ``leaseTransitions``, the takeover of a Lease
    its holder released (empty holder) as well as of one that expired. Mutation caught:
    counting only when the previous holder was non-empty (a release then counted nothing)."""
    clock = clocks.FakeClock()
    transport = FakeTransport()
    transport.objects[LEASE_PATH] = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": NAME, "namespace": NS, "resourceVersion": "7"},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 1 if not holder else int(OPTIONS.lease_duration),
            "leaseTransitions": 3,
        },
    }
    if renewed_ago:
        # The other holder's lease is judged by when this elector first saw it: let it age.
        def age(request: Request) -> Reply | None:
            if request.method == "GET":
                clock.advance(renewed_ago)
            return None

        transport.fault = age
    with elect(transport, clock) as run:
        wait_for(run.started.is_set, timeout=5, what="elected")
        spec = transport.objects[LEASE_PATH]["spec"]
        assert spec["holderIdentity"] == "me"
        assert spec["leaseTransitions"] == 4


def test_a_new_lease_starts_with_no_transitions() -> None:
    clock = clocks.FakeClock()
    transport = FakeTransport()
    with elect(transport, clock) as run:
        wait_for(run.started.is_set, timeout=5, what="elected")
        assert transport.objects[LEASE_PATH]["spec"]["leaseTransitions"] == 0
