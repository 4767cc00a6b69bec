"""The fair share of shards (controllers/runtime/shareplan.py), played out: replicas take turns
planning from the Leases as they stand (acquire writes a Lease for a free shard only, as a Lease
update with its resourceVersion would; release empties it), joining and dying, until nothing
changes. Then every shard has one holder, and the counts of any two live replicas differ by at
most one."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from controllers.runtime import shareplan
from controllers.runtime.shareplan import Holding

DURATION = 15.0


def settle(
    replicas: list[str],
    shards: int,
    leases: dict[int, Holding | None],
    now: float,
    order: list[int],
) -> tuple[dict[int, Holding | None], int]:
    """Rounds of every replica planning and acting, in ``order``'s turn order, until a round
    changes nothing; the Leases then, and the rounds it took."""
    for rounds in range(1, 4 * shards + 10):
        changed = False
        for k in order:
            me = replicas[k % len(replicas)]
            step = shareplan.plan(me, shards=shards, leases=leases, replicas=replicas, now=now)
            for i in step.release:
                leases[i] = None
                changed = True
            for i in step.acquire:
                current = leases.get(i)
                if current is None or not current.held(now):  # the compare-and-swap
                    leases[i] = Holding(me, now + DURATION)
                    changed = True
            for i in step.keep:  # renewed
                leases[i] = Holding(me, now + DURATION)
        if not changed:
            return leases, rounds
        now += 1.0
    raise AssertionError(f"no settled state: {leases}")


def counts(replicas: list[str], leases: dict[int, Holding | None]) -> list[int]:
    return [sum(1 for h in leases.values() if h is not None and h.holder == r) for r in replicas]


@settings(max_examples=200)
@given(
    st.integers(1, 12),
    st.integers(1, 7),
    st.lists(st.integers(0, 20), min_size=1, max_size=10),
)
def test_replicas_settle_on_shares_that_differ_by_at_most_one(
    shards: int, n: int, order: list[int]
) -> None:
    """Break: a replica taking every free shard (no share), or giving back none."""
    replicas = [f"r{i}" for i in range(n)]
    leases, _ = settle(replicas, shards, {}, 0.0, order + list(range(n)))
    held = counts(replicas, leases)
    assert sum(held) == shards, "every shard held"
    assert max(held) - min(held) <= 1, held


@given(st.integers(2, 12), st.integers(2, 6), st.integers(0, 5))
def test_a_dead_replicas_shards_are_taken_once_their_leases_expire(
    shards: int, n: int, dead: int
) -> None:
    replicas = [f"r{i}" for i in range(n)]
    leases, _ = settle(replicas, shards, {}, 0.0, list(range(n)))
    gone = replicas[dead % n]
    alive = [r for r in replicas if r != gone]
    # before expiry: no one takes the dead one's shards (they are still held)
    before = {i: h for i, h in leases.items()}
    for me in alive:
        step = shareplan.plan(me, shards=shards, leases=before, replicas=alive, now=1.0)
        taken = set(step.acquire)
        assert not taken & {i for i, h in before.items() if h is not None and h.holder == gone}
    after, _ = settle(alive, shards, dict(leases), DURATION + 100.0, list(range(n)))
    held = counts(alive, after)
    assert sum(held) == shards
    assert max(held) - min(held) <= 1, held


def test_a_joining_replica_gets_its_share_from_the_others_releases() -> None:
    """Two replicas hold 3 of 6 each; a third joins: each of the two gives back one, highest
    index first, and the newcomer takes them."""
    replicas = ["a", "b"]
    leases, _ = settle(replicas, 6, {}, 0.0, [0, 1])
    assert counts(replicas, leases) == [3, 3]
    three = ["a", "b", "c"]
    a = shareplan.plan("a", shards=6, leases=leases, replicas=three, now=1.0)
    mine = [i for i, h in leases.items() if h is not None and h.holder == "a"]
    assert a.share == 2
    assert a.release == (max(mine),)
    after, _ = settle(three, 6, leases, 1.0, [2, 0, 1])
    assert counts(three, after) == [2, 2, 2]


def test_the_share_gives_the_remainder_to_the_first_replicas_by_name() -> None:
    assert [shareplan.share(r, ["c", "a", "b"], 7) for r in "abc"] == [3, 2, 2]
    assert shareplan.share("z", [], 4) == 4, "alone, every shard"
