"""The shard coordinator's decisions (controllers/runtime/shards.py), one round at a time
(:meth:`Coordinator.tick`) on a fake clock and a fake API server under the real client: alone
it takes every shard; beside a live replica it takes only its share and never a live Lease; it
takes a dead holder's shard only once that Lease stood unchanged for its duration; above its
share it gives back the highest shards, their controllers stopped before the Lease is released;
a lost shard stops its controllers, and the process must end when they do not stop."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any, cast

import pytest
from structlog.testing import capture_logs

from controllers.runtime import clock as clocks
from controllers.runtime import leaderelection, objects, shards
from tests.support.fake_api import FakeTransport, Reply, Request
from tests.support.polling import wait_for

NS, ID, N = "ns", "rot", 6
OPTIONS = shards.ShardOptions(
    id=ID,
    namespace=NS,
    identity="me",
    shards=N,
    lease_duration=15.0,
    renew_deadline=10.0,
    retry_period=0.02,  # real waits between renewals; every timing decision reads the fake clock
    graceful_shutdown_timeout=1.0,
)
LEASES = objects.LEASES.path(namespace=NS)
MAIN = threading.main_thread()


class FakeShard:
    """What the coordinator runs per shard, recording what was done to it."""

    def __init__(
        self,
        index: int,
        log: list[str],
        *,
        drains: bool = True,
        filtering: frozenset[str] = frozenset({"client-side"}),
        drained: threading.Event | None = None,
    ) -> None:
        self.index = index
        self._log = log
        self._drains = drains
        self._drained = drained
        self._filtering = filtering
        self.cache = self
        self.running = False

    def start_cache(self) -> None:
        self._log.append(f"cache {self.index}")

    def wait_for_sync(self, timeout: float) -> bool:
        return True

    def filtering(self) -> set[str]:
        return set(self._filtering)

    def start_controllers(self) -> bool:
        self.running = True
        return True

    def stop_controllers(self, timeout: float) -> bool:
        if self._drained is not None:  # in-flight reconciles that end when it is set
            self._drained.wait(10)
        self.running = False
        self._log.append(f"stop {self.index}")
        return self._drains

    def close(self) -> None:
        self._log.append(f"close {self.index}")

    def dead_workers(self) -> list[str]:
        return []


class World:
    def __init__(
        self,
        *,
        drains: bool = True,
        filtering: frozenset[str] = frozenset({"client-side"}),
        built: threading.Event | None = None,
        drained: threading.Event | None = None,
        sizes: dict[int, int] | None = None,
    ) -> None:
        self.clock = clocks.FakeClock()
        self.sizes_asked = 0
        self.log: list[str] = []
        self.transport = FakeTransport(fault=self._fault)
        self.shards: dict[int, FakeShard] = {}
        self.held = 0
        self.list_forbidden = False
        """The sharding Role gone (the way back to one leader): a list of Leases answers 403."""
        self.unreadable: set[str] = set()
        """Leases whose ``get`` answers 500."""
        self.building: set[int] = set()
        self.forbidden = 0
        """``rotator_shards_lease_list_forbidden``, as the coordinator set it."""
        self.ticks_gets: list[str] = []
        """The names of the Leases got (``get``) by :meth:`Coordinator.tick` (the test's thread;
        the electors renew on their own)."""
        self.ticks_timeouts: list[Any] = []
        """The timeouts those requests were sent with."""

        def build(index: int) -> shards.Shard:
            """``built``: each build waits for it (a slow setup), so a shard can be given back
            while it is still being built."""
            if built is not None:
                self.building.add(index)
                built.wait(10)
            self.shards[index] = FakeShard(
                index, self.log, drains=drains, filtering=filtering, drained=drained
            )
            return cast(shards.Shard, self.shards[index])

        self.coordinator = shards.Coordinator(
            self.transport.client(),
            OPTIONS,
            build=build,
            held_gauge=self._gauge,
            forbidden_gauge=self._forbidden,
            sizes=lambda: self._sizes(sizes),
            clock=self.clock,
        )

    def _sizes(self, sizes: dict[int, int] | None) -> dict[int, int] | None:
        self.sizes_asked += 1
        self.while_counting()
        return sizes

    def while_counting(self) -> None:
        """What happens elsewhere while the sizes are counted (a test sets it)."""

    def _gauge(self, n: int) -> None:
        self.held = n

    def _forbidden(self, n: int) -> None:
        self.forbidden = n

    def _fault(self, r: Request) -> Reply | None:
        if r.method == "GET" and r.path != LEASES and threading.current_thread() is MAIN:
            self.ticks_gets.append(r.path.rsplit("/", 1)[-1])
            self.ticks_timeouts.append(r.timeout)
        if r.method == "GET" and r.path == LEASES and self.list_forbidden:
            return Reply(403, json.dumps({"kind": "Status", "reason": "Forbidden"}).encode())
        if r.method == "GET" and r.path.rsplit("/", 1)[-1] in self.unreadable:
            return Reply(500, json.dumps({"kind": "Status", "reason": "InternalError"}).encode())
        if r.method == "GET" and r.path == LEASES:  # the fake serves no lists: this one here
            items = [o for p, o in self.transport.objects.items() if p.startswith(LEASES + "/")]
            return Reply(200, json.dumps({"items": items, "metadata": {}}).encode())
        released = not (r.body or {}).get("spec", {}).get("holderIdentity")
        if r.method == "PUT" and released and r.body["metadata"]["name"] != ID:
            self.log.append(f"release {r.body['metadata']['name']}")  # not the marking of ID
        return None

    def lease(
        self,
        name: str,
        holder: str,
        *,
        skew: float = 0.0,
        duration: int = 15,
        acquired: float | None = None,
    ) -> None:
        """A Lease held by ``holder``, renewed now (by the fake clock, plus ``skew``: the
        writer's clock against this replica's); taken ``acquired`` seconds from now when
        given (its ``acquireTime``)."""
        now = clocks.rfc3339(self.clock.now() + skew)
        spec: dict[str, object] = {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "renewTime": now,
        }
        if acquired is not None:
            spec["acquireTime"] = clocks.rfc3339(self.clock.now() + acquired)
        path = objects.LEASES.path(namespace=NS, name=name)
        body = {"metadata": {"name": name, "namespace": NS}, "spec": spec}
        with self.transport._lock:
            self.transport._store(path, body)

    def holder(self, index: int) -> str:
        lease = self.transport.objects.get(
            objects.LEASES.path(namespace=NS, name=OPTIONS.shard_lease(index))
        )
        return "" if lease is None else str(lease["spec"].get("holderIdentity") or "")

    def running(self) -> set[int]:
        return {i for i, s in self.shards.items() if s.running}


@pytest.fixture
def world() -> Iterator[World]:
    w = World()
    yield w
    w.coordinator.shutdown()


def test_alone_it_takes_every_shard(world: World) -> None:
    world.coordinator.tick()
    assert world.coordinator.held() == list(range(N))
    assert all(world.holder(i) == "me" for i in range(N))
    wait_for(lambda: world.running() == set(range(N)), what="every shard running")
    assert world.held == N


def test_beside_a_live_replica_it_takes_its_share_and_no_live_lease(world: World) -> None:
    world.lease(f"{OPTIONS.member_prefix}other", "other")
    for i in (3, 4, 5):
        world.lease(OPTIONS.shard_lease(i), "other")
    world.coordinator.tick()
    assert world.coordinator.held() == [0, 1, 2]
    assert [world.holder(i) for i in (3, 4, 5)] == ["other"] * 3


def test_a_dead_holders_shard_is_taken_only_once_its_lease_stood_still_for_its_duration(
    world: World,
) -> None:
    for i in range(N):
        world.lease(OPTIONS.shard_lease(i), "ghost")  # no membership Lease: the replica is gone
    world.coordinator.tick()
    assert world.coordinator.held() == []
    world.clock.advance(14.0)
    world.coordinator.tick()
    assert world.coordinator.held() == [], "not while the Lease may still be live"
    world.clock.advance(2.0)
    world.coordinator.tick()
    assert world.coordinator.held() == list(range(N))


def test_a_dead_holders_leases_renewed_apart_are_taken_as_each_falls_free_and_logged_so(
    world: World,
) -> None:
    """Leases a dead holder renewed a round apart expire a round apart as this replica saw them:
    each is taken once it is free, not held back for the others, and ``shards.taken`` names the
    shards free in the round that took it (how an operator, and tests/e2e/test_shards.py, tell a
    shard placed alone from one placed among others). Break: ``free`` left out of the log."""
    for i in range(N):
        world.lease(OPTIONS.shard_lease(i), "ghost")
    world.coordinator.tick()
    world.clock.advance(2.0)
    for i in (1, 2):
        world.lease(OPTIONS.shard_lease(i), "ghost")  # its last renewals, a round later
    world.coordinator.tick()
    world.clock.advance(14.0)
    with capture_logs() as logs:
        world.coordinator.tick()
        assert world.coordinator.held() == [0, 3, 4, 5]
        world.clock.advance(2.0)
        world.coordinator.tick()
    assert world.coordinator.held() == list(range(N))
    taken = [(e["shard"], e["free"], e["free_count"]) for e in logs if e["event"] == "shards.taken"]
    assert taken == [(i, [0, 3, 4, 5], 4) for i in (0, 3, 4, 5)] + [(i, [1, 2], 2) for i in (1, 2)]


def test_when_the_list_is_forbidden_it_reads_its_leases_by_name_and_shares_with_their_holders(
    world: World,
) -> None:
    """The way back to one leader (the sharding Role deleted while the replicas run): the
    shard Leases are read one by one, the live holders stand for the replicas (no membership
    Lease can be read), and a stopped replica's shards are taken as it releases them — not left
    unheld until the single leader takes over."""
    world.lease(f"{OPTIONS.member_prefix}other", "other")
    for i in (3, 4, 5):
        world.lease(OPTIONS.shard_lease(i), "other")
    world.coordinator.tick()
    assert world.coordinator.held() == [0, 1, 2]
    world.list_forbidden = True
    world.lease(f"{OPTIONS.member_prefix}joined", "joined")  # holds nothing: not seen
    assert world.forbidden == 0
    world.ticks_gets.clear()  # its takes' reads
    world.ticks_timeouts.clear()
    with capture_logs() as logs:
        world.coordinator.tick()
        assert world.coordinator.held() == [0, 1, 2], "its share among itself and 'other'"
        assert world.forbidden == 1
        # the single leader's Lease and the shard Leases it does not hold: its own are its
        # electors' to read
        assert world.ticks_gets == [ID, *(OPTIONS.shard_lease(i) for i in (3, 4, 5))]
        # all of them within the renew deadline (the client's own timeout is 30 s per request)
        assert all(
            0 < t <= OPTIONS.renew_deadline
            for timeout in world.ticks_timeouts
            for t in (timeout if isinstance(timeout, tuple) else (timeout,))
        ), world.ticks_timeouts
        for i in (3, 4, 5):
            world.lease(OPTIONS.shard_lease(i), "")  # 'other' stopped: released
        world.coordinator.tick()
        assert world.coordinator.held() == list(range(N))
    events = [e["event"] for e in logs]
    assert events.count("shards.reading_leases_by_name") == 1, "said once, not every round"
    assert "shards.read_failed" not in events
    world.list_forbidden = False
    with capture_logs() as logs:
        world.coordinator.tick()
    assert "shards.listing_leases_again" in [e["event"] for e in logs]
    assert world.forbidden == 0
    # listed again: 'joined' is seen and gets its share, two each
    wait_for(lambda: world.coordinator.held() == [0, 1], what="four shards given back")


def test_when_the_list_is_forbidden_a_stopping_replica_counts_until_it_released_them_all(
    world: World,
) -> None:
    """Read by name, the replicas the shards are shared among are their live holders: one that
    released some of its shards but still holds others is among them (its share is not taken
    from it while it drains), and it drops out once it released the last."""
    world.lease(f"{OPTIONS.member_prefix}other", "other")
    for i in (3, 4, 5):
        world.lease(OPTIONS.shard_lease(i), "other")
    world.coordinator.tick()
    world.list_forbidden = True
    world.lease(OPTIONS.shard_lease(3), "")  # 'other' stopping: 3 released, 4 and 5 draining
    world.coordinator.tick()
    assert world.coordinator.held() == [0, 1, 2], "its share is 3 of 6 while 'other' holds any"
    for i in (4, 5):
        world.lease(OPTIONS.shard_lease(i), "")
    world.coordinator.tick()
    assert world.coordinator.held() == list(range(N))


def test_when_the_list_is_forbidden_freed_shards_are_shared_among_the_holders_still_at_work(
    world: World,
) -> None:
    """Three replicas, two shards each; one stops: each of the two left takes one of its two."""
    for name in ("a", "b"):
        world.lease(f"{OPTIONS.member_prefix}{name}", name)
    world.lease(OPTIONS.shard_lease(2), "a")
    world.lease(OPTIONS.shard_lease(3), "a")
    world.lease(OPTIONS.shard_lease(4), "b")
    world.lease(OPTIONS.shard_lease(5), "b")
    world.coordinator.tick()
    assert world.coordinator.held() == [0, 1]
    world.list_forbidden = True
    world.lease(OPTIONS.shard_lease(4), "")  # 'b' stopped: released both
    world.lease(OPTIONS.shard_lease(5), "")
    world.coordinator.tick()
    assert world.coordinator.held() == [0, 1, 4], "3 of 6 among itself and 'a', not all freed"
    assert world.holder(5) == ""
    # nor is a count tried: its probe lists Leases too (placed by index)
    assert world.sizes_asked == 0


def test_what_it_remembers_of_another_counts_leases_outlives_a_stretch_read_by_name(
    world: World,
) -> None:
    """Read by name, the other count's Leases are not read; forgotten then, a dead one would
    look new once the list is answered again, and hold every shard back for twice its duration
    (a lone replica has no other replica's shard to show it was waited out)."""
    world.lease(shards.shard_lease_name(ID, 0, 4), "dead")  # a replica with 4 shards, killed
    world.coordinator.tick()
    assert world.coordinator.held() == [], "held back: the Lease may still be at work"
    world.clock.advance(31.0)  # it stood still for twice its duration: gone
    world.coordinator.tick()
    assert world.coordinator.held() == list(range(N))
    world.list_forbidden = True
    world.coordinator.tick()
    world.list_forbidden = False
    with capture_logs() as logs:
        world.coordinator.tick()
    assert world.coordinator.held() == list(range(N))
    assert "shards.waiting_for_other_shard_count" not in [e["event"] for e in logs]


def test_when_the_list_is_forbidden_a_replica_holding_nothing_takes_nothing(world: World) -> None:
    """It cannot see a change of N under way (the shard Leases of another count) nor the other
    replicas: only a replica already at work goes on by name."""
    world.list_forbidden = True
    for _ in range(3):
        world.coordinator.tick()
    assert world.coordinator.held() == []
    assert all(world.holder(i) == "" for i in range(N))
    assert world.forbidden == 1, "refused the list, whether it reads by name or not"
    assert world.ticks_gets == [], "nothing read by name"


def test_when_the_list_is_forbidden_a_replica_giving_every_shard_back_takes_none() -> None:
    """It may be giving them back for a change of N it saw while it could list, whose shard
    Leases it cannot see by name: it goes on by name only while at work on a shard it keeps."""
    drained = threading.Event()
    w = World(drained=drained)
    try:
        w.lease(f"{OPTIONS.member_prefix}other", "other")
        for i in (3, 4, 5):
            w.lease(OPTIONS.shard_lease(i), "other")
        w.coordinator.tick()
        wait_for(lambda: w.running() == {0, 1, 2}, what="its three running")
        w.lease(shards.shard_lease_name(ID, 0, 4), "newer")  # a replica with 4 shards at work
        w.coordinator.tick()  # held back: gives its three back, their reconciles still running
        w.list_forbidden = True
        for i in (3, 4, 5):
            w.lease(OPTIONS.shard_lease(i), "")  # 'other' stopped: released
        with capture_logs() as logs:
            w.coordinator.tick()
        assert [e["event"] for e in logs] == ["shards.read_failed"], "the round skipped"
        assert [w.holder(i) for i in (3, 4, 5)] == ["", "", ""]
    finally:
        drained.set()
        w.coordinator.shutdown()


def test_when_the_list_is_forbidden_a_lease_that_cannot_be_read_skips_the_round(
    world: World,
) -> None:
    world.lease(f"{OPTIONS.member_prefix}other", "other")
    for i in (3, 4, 5):
        world.lease(OPTIONS.shard_lease(i), "other")
    world.coordinator.tick()
    world.list_forbidden = True
    for i in (3, 4, 5):
        world.lease(OPTIONS.shard_lease(i), "")  # 'other' stopped: released
    world.unreadable.add(OPTIONS.shard_lease(4))
    with capture_logs() as logs:
        world.coordinator.tick()
    assert world.coordinator.held() == [0, 1, 2]
    failed = [e for e in logs if e["event"] == "shards.read_failed"]
    assert [e.get("lease") for e in failed] == [OPTIONS.shard_lease(4)]
    world.unreadable.clear()
    world.coordinator.tick()
    assert world.coordinator.held() == list(range(N))


def test_beside_a_live_replica_with_sizes_it_takes_the_shards_placed_for_it() -> None:
    """Two replicas, six free shards of which 0 and 5 are heavy: by count alone it would
    campaign for 0, 1 and 2; by size the heavy ones go one to each replica (0 to this one, the
    first by name), then the light ones alternate to the lighter: 0, 1 and 3 here."""
    world = World(sizes={0: 10, 1: 1, 2: 1, 3: 1, 4: 1, 5: 10})
    try:
        world.lease(f"{OPTIONS.member_prefix}other", "other")
        with capture_logs() as logs:
            world.coordinator.tick()
        assert world.coordinator.held() == [0, 1, 3]
        taken = [e for e in logs if e["event"] == "shards.taken"]
        assert [(e["shard"], e["by_size"]) for e in taken] == [(0, True), (1, True), (3, True)]
        assert all(e["free"] == list(range(N)) for e in taken), taken
        assert world.sizes_asked == 1
    finally:
        world.coordinator.shutdown()


def test_a_single_leader_that_starts_while_the_sizes_are_counted_holds_the_shards_back() -> None:
    """A count may take up to the renew deadline: the round reads the Leases again after it and
    acts on that. Break: acting on the read before the count (it takes three shards while the
    old leader works)."""
    world = World(sizes={0: 10, 1: 1, 2: 1, 3: 1, 4: 1, 5: 10})
    try:
        world.lease(f"{OPTIONS.member_prefix}other", "other")
        world.while_counting = lambda: world.lease(ID, "old-leader")  # type: ignore[method-assign]
        world.coordinator.tick()
        assert world.sizes_asked == 1
        assert world.coordinator.held() == []
    finally:
        world.coordinator.shutdown()


def test_a_count_that_fails_unexpectedly_leaves_the_shards_placed_by_index() -> None:
    """Whatever the count raises, free shards are still taken (by index) in the same round."""
    world = World(sizes={0: 10, 1: 1, 2: 1, 3: 1, 4: 1, 5: 10})
    try:
        world.lease(f"{OPTIONS.member_prefix}other", "other")

        def broken() -> None:
            raise RuntimeError("a bug in the count")

        world.while_counting = broken  # type: ignore[method-assign]
        with capture_logs() as logs:
            world.coordinator.tick()
        assert world.coordinator.held() == [0, 1, 2]
        assert any(e["event"] == "shards.sizes_failed" for e in logs)
    finally:
        world.coordinator.shutdown()


def test_with_nothing_to_choose_it_asks_no_sizes(world: World) -> None:
    """Alone it takes every shard: no choice, so no count is made (a count costs a list per
    shard)."""
    world.coordinator.tick()
    assert world.coordinator.held() == list(range(N))
    assert world.sizes_asked == 0


def test_above_its_share_it_drains_then_releases_the_highest_shards(world: World) -> None:
    world.coordinator.tick()
    wait_for(lambda: world.running() == set(range(N)), what="every shard running")
    world.lease(f"{OPTIONS.member_prefix}other", "other")  # a replica joins
    world.coordinator.tick()
    wait_for(lambda: world.coordinator.held() == [0, 1, 2], what="three given back")
    assert [world.holder(i) for i in (3, 4, 5)] == ["", "", ""]
    for i in (3, 4, 5):
        stop, release = (
            world.log.index(f"stop {i}"),
            world.log.index(f"release {ID}-shard-{i}-of-6"),
        )
        assert stop < release, "the work stops before the Lease is released"
        # then the shard closes (its series go), once
        assert world.log.count(f"close {i}") == 1
        assert stop < world.log.index(f"close {i}")
    assert world.running() == {0, 1, 2}
    assert world.held == 3
    assert not world.coordinator.fatal.is_set()


def test_a_lost_shard_stops_its_work_and_keeps_its_lease_unreleased(world: World) -> None:
    world.coordinator.tick()
    wait_for(lambda: world.running() == set(range(N)), what="every shard running")
    world.clock.advance(OPTIONS.renew_deadline + 1)  # no renewal can succeed in time now
    wait_for(lambda: world.coordinator.held() == [], what="every shard lost")
    assert world.running() == set()
    assert not any(entry.startswith("release") for entry in world.log)
    assert not world.coordinator.fatal.is_set()
    for i in range(N):  # stopped, then closed (its series go), once
        assert world.log.count(f"close {i}") == 1
        assert world.log.index(f"stop {i}") < world.log.index(f"close {i}")


def test_a_shard_given_back_while_it_was_being_built_is_closed_once_built() -> None:
    """Its controllers made their series when they were built: no one runs it, but it must
    still be closed, or the replica exports a shard it does not hold for good."""
    built = threading.Event()
    w = World(built=built)
    try:
        w.coordinator.tick()
        wait_for(lambda: w.building == set(range(N)), what="every shard being built")
        w.lease(
            f"{OPTIONS.member_prefix}other", "other"
        )  # a replica joins: 3, 4, 5 go back unbuilt
        w.coordinator.tick()
        wait_for(lambda: w.coordinator.held() == [0, 1, 2], what="three given back")
        built.set()
        wait_for(lambda: all(f"close {i}" in w.log for i in (3, 4, 5)), what="the three closed")
        assert w.running() == {0, 1, 2}
        assert not any(f"cache {i}" in w.log for i in (3, 4, 5)), "never started"
        assert not any(f"close {i}" in w.log for i in (0, 1, 2))
    finally:
        built.set()
        w.coordinator.shutdown()


def test_a_shard_given_back_whose_reconciles_do_not_stop_ends_the_process_unclosed() -> None:
    """Its reconciles may still set its series: they stay, and the process ends."""
    w = World(drains=False)
    try:
        w.coordinator.tick()
        wait_for(lambda: w.running() == set(range(N)), what="every shard running")
        w.lease(f"{OPTIONS.member_prefix}other", "other")
        w.coordinator.tick()
        assert w.coordinator.fatal.wait(10)
        assert not any(entry.startswith("close") for entry in w.log)
    finally:
        w.coordinator.shutdown()


def test_a_lost_shard_whose_reconciles_do_not_stop_ends_the_process() -> None:
    w = World(drains=False)
    try:
        w.coordinator.tick()
        wait_for(lambda: w.running() == set(range(N)), what="every shard running")
        w.clock.advance(OPTIONS.renew_deadline + 1)
        assert w.coordinator.fatal.wait(10)
    finally:
        w.coordinator.shutdown()


def test_nothing_is_taken_while_a_single_leader_may_still_work(world: World) -> None:
    """An upgrade from one leader (--shards 1, the Lease named --leader-election-id): the shards
    wait until that Lease is released, or stood still for twice its duration (a killed leader:
    another old replica may take the expired Lease at its next retry)."""
    world.lease(ID, "old-leader")
    world.coordinator.tick()
    assert world.coordinator.held() == []
    world.clock.advance(16.0)
    world.coordinator.tick()
    assert world.coordinator.held() == [], "expired, but another old replica may take it"
    world.clock.advance(13.0)
    world.coordinator.tick()
    assert world.coordinator.held() == [], "not before twice its duration"
    world.clock.advance(2.0)
    world.coordinator.tick()
    assert world.coordinator.held() == list(range(N)), "stood still twice its duration: gone"


def test_an_expired_single_leader_lease_taken_by_another_old_replica_holds_the_shards_back(
    world: World,
) -> None:
    """A leader killed in a rolling upgrade: its Lease expires, and another old replica takes it
    at its next retry (3 s after); the shards wait for that one as they waited for the first."""
    world.lease(ID, "killed-old-leader")
    world.coordinator.tick()
    world.clock.advance(18.0)
    world.coordinator.tick()
    world.lease(ID, "the-other-old-replica")
    world.coordinator.tick()
    assert world.coordinator.held() == []
    world.clock.advance(29.0)
    world.coordinator.tick()
    assert world.coordinator.held() == [], "the new old leader's Lease is live or just expired"


def test_a_release_by_a_clock_behind_this_ones_still_holds_the_full_duration(world: World) -> None:
    """Released just now by a leader whose clock is 10 s behind this replica's: its renewTime
    says 10 s ago, yet the shards wait the full lease duration from this replica's first sight
    (the monotonic clock), not 5 s."""
    world.lease(ID, "", skew=-10.0)
    world.coordinator.tick()
    world.clock.advance(6.0)
    world.coordinator.tick()
    assert world.coordinator.held() == [], "a skewed clock shortens nothing"
    world.clock.advance(10.0)
    world.coordinator.tick()
    assert world.coordinator.held() == list(range(N))


def test_a_released_single_leader_lease_holds_the_shards_back_until_it_stood_still(
    world: World,
) -> None:
    """A rolling upgrade from two old replicas: the old leader's graceful stop releases the
    Lease, the other old replica takes it at its next retry; only once the last one released it
    and it stood still for the lease duration are shards taken."""
    world.lease(ID, "")  # the old leader stopped gracefully: released
    world.coordinator.tick()
    assert world.coordinator.held() == [], "another old replica may take it at its next retry"
    world.clock.advance(3.0)
    world.lease(ID, "the-other-old-replica")
    world.coordinator.tick()
    world.clock.advance(5.0)
    world.lease(ID, "")  # the last old replica stopped
    world.coordinator.tick()
    world.clock.advance(14.0)
    world.coordinator.tick()
    assert world.coordinator.held() == [], "released 14 s ago: not yet"
    world.clock.advance(2.0)
    world.coordinator.tick()
    assert world.coordinator.held() == list(range(N))


def test_a_lease_released_long_ago_or_never_held_lets_the_shards_start_and_a_new_one_stops_them(
    world: World,
) -> None:
    world.lease(ID, "")  # released, then the replica (a sharded one) started 31 s later
    world.clock.advance(31.0)
    world.coordinator.tick()
    wait_for(lambda: world.running() == set(range(N)), what="every shard running")
    world.lease(ID, "a-single-leader-again")  # a replica of --shards 1 took it: step aside
    world.coordinator.tick()
    wait_for(lambda: world.coordinator.held() == [], what="every shard given back")
    assert world.running() == set()
    assert all(world.holder(i) == "" for i in range(N))


def test_the_charts_empty_single_leader_lease_holds_nothing_back(world: World) -> None:
    """A sharded release installed with Helm: the chart renders the Lease without a spec."""
    path = objects.LEASES.path(namespace=NS, name=ID)
    with world.transport._lock:
        world.transport._store(path, {"metadata": {"name": ID, "namespace": NS}})
    world.coordinator.tick()
    assert world.coordinator.held() == list(range(N))


def test_beside_shards_taken_after_the_single_leaders_release_it_takes_its_share_at_once(
    world: World,
) -> None:
    """A replica that starts beside running shards soon after an upgrade (a Pod replaced): the
    single leader's Lease, released 20 s ago by the wall clock, is new to it, but the other
    replica took its shards 17 s after that release — it waited the release out already — so
    this one takes its share in its first round instead of waiting the full duration while it
    counts in the other's share (the kind suite's replacement did, its share held by no one for
    16 s). A single leader that renews the Lease again holds everything back as before."""
    world.lease(ID, "", skew=-20.0, duration=1)  # released 20 s ago (a release says 1 s)
    world.lease(f"{OPTIONS.member_prefix}other", "other")
    for i in range(3):
        world.lease(OPTIONS.shard_lease(i), "other", acquired=-3.0)
    world.coordinator.tick()
    assert world.coordinator.held() == [3, 4, 5]
    wait_for(lambda: world.running() == {3, 4, 5}, what="its share running")
    world.lease(ID, "a-single-leader-again")  # renewed now: after every shard's acquireTime
    world.coordinator.tick()
    wait_for(lambda: world.coordinator.held() == [], what="every shard given back")


@pytest.mark.parametrize(
    "acquired",
    [
        -30.0,  # before the release: still draining them for a single leader that had appeared
        -16.0,  # 4 s after it (a clock ahead, a slow acquire): within the lease duration
    ],
)
def test_beside_shards_taken_before_or_soon_after_the_single_leaders_release_it_still_waits(
    world: World, acquired: float
) -> None:
    """The other replica's shards were taken before the single leader's Lease was released, or
    less than the lease duration after (a release writes ``leaseDurationSeconds: 1``; an old
    standby may still take the Lease): that proves nothing about the release, so this replica
    waits as it would alone."""
    world.lease(ID, "", skew=-20.0, duration=1)
    world.lease(f"{OPTIONS.member_prefix}other", "other")
    for i in range(3):
        world.lease(OPTIONS.shard_lease(i), "other", acquired=acquired)
    world.coordinator.tick()
    assert world.coordinator.held() == []


def test_beside_shards_taken_after_a_killed_leaders_lease_expired_it_does_not_wait_twice_its_duration(
    world: World,
) -> None:
    """A single leader killed in an upgrade leaves its Lease held for ever; a replica that
    first sees it an hour later would wait twice its duration. Another replica took its shards
    after that Lease expired (renewTime + leaseDurationSeconds): this one need not wait."""
    world.lease(ID, "killed-old-leader", skew=-3600.0)
    world.lease(f"{OPTIONS.member_prefix}other", "other")
    for i in range(3):
        world.lease(OPTIONS.shard_lease(i), "other", acquired=-3000.0)
    world.coordinator.tick()
    assert world.coordinator.held() == [3, 4, 5]


def test_a_membership_lease_whose_renew_time_does_not_read_is_judged_by_its_changes(
    world: World,
) -> None:
    """A membership Lease whose ``renewTime`` is not a time (the API server validates it; a
    fake or a future format need not) does not end every round with an exception: it is live
    while it changes, as a Lease without a renewTime. Before, ``parse_rfc3339`` raised and no
    shard was ever taken."""
    world.lease(f"{OPTIONS.member_prefix}other", "other")
    path = objects.LEASES.path(namespace=NS, name=f"{OPTIONS.member_prefix}other")
    with world.transport._lock:
        world.transport.objects[path]["spec"]["renewTime"] = "not-a-time"
    world.coordinator.tick()
    assert world.coordinator.held() == [0, 1, 2], "its share beside a live replica"


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("2026-12-06T03:15:50.169042Z", 1796526950.169042),
        ("2026-12-06T03:15:50Z", 1796526950.0),
        ("not-a-time", None),
        ("", None),
        (None, None),
        (1796526950, None),  # a number is not the field's format
    ],
)
def test_a_lease_time_reads_as_wall_seconds_or_none(value: object, seconds: float | None) -> None:
    assert clocks.read_rfc3339(value) == seconds


def test_lease_names() -> None:
    assert OPTIONS.shard_lease(2) == "rot-shard-2-of-6"
    member = shards.ShardOptions(id="rot", namespace=NS, identity="Pod_1.x_ab12", shards=2)
    assert member.member_lease == "rot-member-of-2-pod-1-x-ab12"


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("rot-shard-2-of-6", (2, 6)),
        ("rot-shard-0-of-1024", (0, 1024)),
        ("rot", None),  # the single leader's
        ("rot-member-pod-1", None),
        ("rot-shard-6-of-6", None),  # no such shard
        ("rot-shard-0-of-1025", None),  # more than any replica accepts
        ("rot-shard-02-of-6", None),  # not a name a replica writes
        ("rot-shard-1-of-6-x", None),
        ("rotx-shard-1-of-6", None),  # another id
        ("other-rot-shard-1-of-6", None),
    ],
)
def test_shard_lease_names_are_read_back(name: str, parsed: tuple[int, int] | None) -> None:
    assert shards.parse_shard_lease(ID, name) == parsed
    if parsed is not None:
        assert shards.shard_lease_name(ID, *parsed) == name
    assert shards.parse_shard_lease("r.t", "rxt-shard-1-of-6") is None, "the id is literal"


def test_a_graceful_stop_deletes_its_membership_lease_and_a_long_dead_ones_is_deleted() -> None:
    """Each start has an identity of its own: without the deletions every restart would leave a
    Lease that every replica lists every round, for ever."""
    w = World()
    w.lease(f"{ID}-member-ghost", "ghost")  # a replica killed long ago
    w.coordinator.tick()
    ghost = objects.LEASES.path(namespace=NS, name=f"{ID}-member-ghost")
    assert ghost in w.transport.objects, "not while it may be live"
    w.clock.advance(shards.STALE_MEMBER + 1)
    w.coordinator.tick()
    assert ghost not in w.transport.objects
    w.coordinator.start()
    mine = objects.LEASES.path(namespace=NS, name=OPTIONS.member_lease)
    wait_for(lambda: mine in w.transport.objects, what="its membership Lease")
    w.coordinator.shutdown()
    assert mine not in w.transport.objects


@pytest.mark.parametrize(
    ("views", "mode"),
    [
        ({"client-side"}, "client-side"),  # no gate: no list echoed the selector
        ({"server-side"}, "server-side"),
        # a gated v1.36 server: the Secrets' full list echoed, the custom resources' and the
        # metadata-only lists came back filtered without saying so (tests/e2e/test_sharding.py)
        ({"server-side", "client-side"}, "server-side"),
    ],
)
def test_the_filtering_mode_is_the_servers_once_any_list_echoed_the_selector(
    views: set[str], mode: str
) -> None:
    """Logged once per process. Mutation caught: ``server-side`` only when every view echoed
    (what a gated server never gives a replica: tests/e2e/test_shards.py saw ``client-side``)."""
    with capture_logs() as logs:
        w = World(filtering=frozenset(views))
        try:
            w.coordinator.tick()
            wait_for(lambda: w.running() == set(range(N)), what="every shard running")
        finally:
            w.coordinator.shutdown()
    logged = [e for e in logs if e["event"] == "shards.filtering"]
    assert [e["mode"] for e in logged] == [mode]


# --- a change of the shard count --------------------------------------------------------------

OTHER_COUNT = 4
"""The shard count of replicas of a release with another ``--shards`` (a change of N)."""


def other_count_lease(index: int) -> str:
    return shards.shard_lease_name(ID, index, OTHER_COUNT)


def test_nothing_is_taken_while_replicas_with_another_shard_count_may_still_work(
    world: World,
) -> None:
    """A rolling update from 4 shards to 6: the shards of 6 overlap those of 4, so nothing is
    taken while a Lease of 4 is held, or stood still less than twice its duration (another
    replica with 4 may take an expired one at its next retry), as for a single leader. Mutation
    caught: judging only the single leader's Lease (every shard is taken at once)."""
    world.lease(other_count_lease(0), "old-replica")
    world.lease(other_count_lease(3), "")  # released just now, by a replica that stopped
    with capture_logs() as logged:
        world.coordinator.tick()
    assert world.coordinator.held() == []
    waiting = [e for e in logged if e["event"] == "shards.waiting_for_other_shard_count"]
    assert [e["leases"] for e in waiting] == [[other_count_lease(0), other_count_lease(3)]]
    world.clock.advance(29.0)
    world.coordinator.tick()
    assert world.coordinator.held() == [], "the held one stood still less than twice 15 s"
    world.clock.advance(2.0)
    world.coordinator.tick()
    assert world.coordinator.held() == list(range(N))


def test_a_replica_with_another_shard_count_taking_a_shard_stops_these(world: World) -> None:
    """Shards of 6 running when a replica with 4 takes one (an old one restarted late): they
    are drained and given back at this replica's next round, as for a single leader."""
    world.coordinator.tick()
    wait_for(lambda: world.running() == set(range(N)), what="every shard running")
    world.lease(other_count_lease(1), "late-old-replica")
    world.coordinator.tick()
    wait_for(lambda: world.coordinator.held() == [], what="every shard given back")
    assert world.running() == set()
    assert all(world.holder(i) == "" for i in range(N))


def test_leases_of_another_count_released_long_ago_or_never_held_hold_nothing_back(
    world: World,
) -> None:
    """A change of N long done (its Leases stay, released), or Leases rendered empty."""
    world.lease(other_count_lease(0), "", skew=-120.0, duration=1)
    path = objects.LEASES.path(namespace=NS, name=other_count_lease(1))
    with world.transport._lock:
        world.transport._store(path, {"metadata": {"name": other_count_lease(1), "namespace": NS}})
    world.coordinator.tick()
    assert world.coordinator.held() == list(range(N))


def test_beside_shards_of_this_count_taken_after_the_other_counts_release_it_does_not_wait(
    world: World,
) -> None:
    """A Pod replaced soon after a change of N: the Leases of the old count were released 20 s
    ago, and the other replica with this count took its shards after they stood still; this
    one takes its share at once (the single leader's rule, :meth:`Coordinator._waited_out`)."""
    world.lease(other_count_lease(0), "", skew=-20.0, duration=1)
    world.lease(f"{OPTIONS.member_prefix}other", "other")
    for i in range(3):
        world.lease(OPTIONS.shard_lease(i), "other", acquired=-3.0)
    world.coordinator.tick()
    assert world.coordinator.held() == [3, 4, 5]


def test_replicas_with_another_shard_count_are_not_in_the_share(world: World) -> None:
    """The live replicas the shards are shared among are those with this count: a replica with
    4, waiting for these to stop, takes none of them, so counting it would leave its share of
    these held by no one. Its membership Lease is still deleted once long dead. Mutation
    caught: one membership prefix for every count (this replica then takes 3 of 6)."""
    other = shards.ShardOptions(id=ID, namespace=NS, identity="other", shards=OTHER_COUNT)
    world.lease(other.member_lease, "other")
    world.coordinator.tick()
    assert world.coordinator.held() == list(range(N))
    ghost = shards.ShardOptions(id=ID, namespace=NS, identity="ghost", shards=OTHER_COUNT)
    world.lease(ghost.member_lease, "ghost", skew=-3600.0)
    path = objects.LEASES.path(namespace=NS, name=ghost.member_lease)
    world.coordinator.tick()  # first seen: stood still since now, as seen here
    world.clock.advance(shards.STALE_MEMBER + 1)
    world.lease(other.member_lease, "other")
    world.coordinator.tick()
    assert path not in world.transport.objects, "a long-dead member of any count is deleted"


# --- the way back to one leader ---------------------------------------------------------------


def single_leader_lease(world: World) -> dict[str, Any]:
    return world.transport.objects[objects.LEASES.path(namespace=NS, name=ID)]


def test_the_single_leaders_lease_says_the_shard_count_before_any_shard_is_taken(
    world: World,
) -> None:
    """A single leader cannot list Leases, so the sharded replicas write their count on its
    Lease (created without a spec when there is none: never held, it holds nothing back), and
    the labels and annotations others wrote on it stay."""
    world.coordinator.tick()
    assert world.coordinator.held() == list(range(N))
    lease = single_leader_lease(world)
    assert lease["metadata"]["annotations"] == {shards.SHARDS_ANNOTATION: str(N)}
    assert "spec" not in lease
    w = World()
    try:
        path = objects.LEASES.path(namespace=NS, name=ID)
        rendered = {
            "name": ID,
            "namespace": NS,
            "labels": {"helm.sh/chart": "rotator"},
            "annotations": {"meta.helm.sh/release-name": "rotator"},
        }
        with w.transport._lock:
            w.transport._store(path, {"metadata": rendered})
        w.coordinator.tick()
        metadata = single_leader_lease(w)["metadata"]
        assert metadata["labels"] == {"helm.sh/chart": "rotator"}
        assert metadata["annotations"] == {
            "meta.helm.sh/release-name": "rotator",
            shards.SHARDS_ANNOTATION: str(N),
        }
        assert w.coordinator.held() == list(range(N))
    finally:
        w.coordinator.shutdown()


def test_no_shard_is_taken_in_a_round_whose_marking_failed(world: World) -> None:
    """The marking is a compare-and-swap on the Lease as listed: a single leader that took it
    meanwhile makes it a Conflict, and nothing is taken until the next round judges it.
    Mutation caught: taking shards whatever the marking's outcome."""
    world.lease(ID, "", skew=-120.0, duration=1)  # released long ago
    path = objects.LEASES.path(namespace=NS, name=ID)
    world.transport.fault = lambda r: (
        Reply(409, b'{"kind":"Status","reason":"Conflict","code":409}')
        if r.method == "PUT" and r.path == path
        else world._fault(r)
    )
    world.coordinator.tick()
    assert world.coordinator.held() == []
    world.transport.fault = world._fault
    world.coordinator.tick()
    assert world.coordinator.held() == list(range(N))


def hold_back(world: World) -> shards.SingleLeaderHoldBack:
    return shards.SingleLeaderHoldBack(
        world.transport.client(),
        lease_id=ID,
        namespace=NS,
        lease_duration=OPTIONS.lease_duration,
        clock=world.clock,
    )


def marked(count: str | None) -> dict[str, object]:
    annotations = {} if count is None else {shards.SHARDS_ANNOTATION: count}
    return {"metadata": {"name": ID, "namespace": NS, "annotations": annotations}}


def test_a_single_leader_waits_while_the_shards_it_is_told_of_may_still_work(
    world: World,
) -> None:
    """The way back from shards to one leader: the single leader reads the shard Leases its
    Lease names and waits, by the rule the sharded replicas apply to it, until each was
    released and stood still, or stood still twice its duration (another sharded replica may
    take an expired one at its next retry)."""
    check = hold_back(world)
    world.lease(OPTIONS.shard_lease(1), "sharded-replica")
    world.lease(OPTIONS.shard_lease(4), "")  # released just now
    why = check(marked(str(N)))
    assert why is not None
    assert OPTIONS.shard_lease(1) in why
    assert OPTIONS.shard_lease(4) in why
    world.clock.advance(16.0)
    assert check(marked(str(N))) == (
        f"replicas with {N} shards may still be at work: {OPTIONS.shard_lease(1)}"
    ), "the released one stood still its duration; the held one has not stood still twice it"
    world.clock.advance(15.0)
    assert check(marked(str(N))) is None


@pytest.mark.parametrize("count", [None, "", "1", "0", "06x", "١٢", "100000", str(2**70)])
def test_a_lease_without_a_shard_count_a_replica_accepts_holds_nothing_back(
    world: World, count: str | None
) -> None:
    """No count (shards never ran, or a single leader wrote the Lease since), or one no replica
    accepts: nothing is read. A hand-written count must not make a single leader read a
    million Leases."""
    world.lease(OPTIONS.shard_lease(0), "sharded-replica")
    before = len(world.transport.requests)
    assert hold_back(world)(marked(count)) is None
    assert len(world.transport.requests) == before, "no Lease read"


def test_a_shard_lease_that_cannot_be_read_holds_the_single_leader_back(world: World) -> None:
    world.transport.fault = lambda r: Reply(500, b"{}") if r.method == "GET" else None
    why = hold_back(world)(marked(str(N)))
    assert why is not None
    assert "could not be read" in why


def test_the_single_leaders_elector_takes_its_lease_only_once_held_back_no_more(
    world: World,
) -> None:
    """The elector asks before it takes the Lease, and not before a renewal. Mutation caught:
    ignoring hold_back (it takes the Lease at once)."""
    path = objects.LEASES.path(namespace=NS, name=ID)
    with world.transport._lock:
        world.transport._store(path, marked(str(N)))
    world.lease(OPTIONS.shard_lease(2), "sharded-replica")
    reasons: list[str | None] = []
    check = hold_back(world)

    def recorded(lease: dict[str, object]) -> str | None:
        reasons.append(check(lease))
        return reasons[-1]

    options = leaderelection.LeaderElectionOptions(
        name=ID, namespace=NS, identity="single", retry_period=0.02, hold_back=recorded
    )
    elector = leaderelection.LeaderElector(
        world.transport.client(),
        options,
        on_started=lambda: None,
        on_lost=lambda: None,
        clock=world.clock,
    )
    assert not elector.try_acquire()
    assert reasons[-1] is not None
    world.lease(OPTIONS.shard_lease(2), "")  # the sharded replica stopped gracefully
    world.clock.advance(1.0)
    assert not elector.try_acquire(), "released just now: another sharded replica may take it"
    world.clock.advance(15.0)
    assert elector.try_acquire()
    lease = single_leader_lease(world)
    assert lease["spec"]["holderIdentity"] == "single"
    assert not lease["metadata"].get("annotations"), "its write drops the count"
    asked = len(reasons)
    assert elector.try_acquire(), "a renewal"
    assert len(reasons) == asked, "not asked before a renewal"
