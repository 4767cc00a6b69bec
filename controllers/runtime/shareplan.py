"""Which shards a replica should hold: a fair share of the shards among the live replicas,
decided from the state of the shards' Leases and the replicas' own (one Lease each, renewed
while the replica lives), so that every replica reaches the same answer from the same state and
no coordinator is needed.

The share: ``N`` shards among ``R`` live replicas is ``N // R`` each, and one more for the first
``N % R`` replicas in name order; after settling, the counts of any two replicas differ by at
most one. A replica above its share gives back the excess (the caller drains those shards'
reconciles first, then releases their Leases); one below it takes shards whose Lease is free or
expired, never one another replica holds. A replica that dies loses its shards when their
Leases expire, and the others take them.

Which free shards: by size, where the sizes are known (:func:`assign_free`). The share counts
shards, and shards are not equal: namespaces fall into them by hash, and one namespace may hold
most of a cluster. Given each shard's size (the chains it holds, counted by :mod:`.shardsizes`),
the free shards go heaviest first to the replica that holds the least so far and is below its
share (the longest-processing-time rule, the classic greedy for balancing loads; on the
benchmark's six shards of 13.7-19.0 % it finds the best pairing). Every replica computes it from
the same Leases and sizes, so replicas that start together each campaign for their own and none
for another's. It only orders the free shards a replica campaigns for first: the count it takes
is the share's, as without sizes, so a replica whose view differs (a size counted a moment
later, a member not yet seen) still takes a free shard, at worst one the placement gave another.
Shards are never moved for size alone: a shard held stays where it is until its holder gives it
back for the share, or dies.

Pure logic (no I/O, the time given): the shard Leases' reader and writer
(:mod:`.leaderelection`) act on :class:`Plan`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Holding:
    """A Lease as read: who holds it, until when (monotonic-free: seconds since the epoch of
    the caller's clock, ``renewTime + leaseDurationSeconds``)."""

    holder: str
    expires_at: float

    def held(self, now: float) -> bool:
        return bool(self.holder) and now < self.expires_at


@dataclass(frozen=True)
class Plan:
    share: int
    """How many shards this replica should hold."""
    keep: tuple[int, ...]
    acquire: tuple[int, ...]
    """Free or expired shards to campaign for: lowest index first, or with sizes those placed
    for this replica first (heaviest first), then the others by index."""
    release: tuple[int, ...]
    """Held shards to give back (drained first), highest index first."""
    placed: tuple[int, ...] = ()
    """Of ``acquire``, the free shards the placement by size gave this replica (empty without
    sizes)."""


def share(me: str, replicas: Sequence[str], shards: int) -> int:
    """``me``'s fair share of ``shards`` among the live ``replicas`` (``me`` among them)."""
    members = sorted(set(replicas) | {me})
    base, extra = divmod(shards, len(members))
    return base + (1 if members.index(me) < extra else 0)


def assign_free(
    *,
    shards: int,
    leases: Mapping[int, Holding | None],
    replicas: Sequence[str],
    sizes: Mapping[int, int],
    now: float,
) -> dict[int, str]:
    """Each free shard's replica in the placement by size: heaviest free shard first (ties: the
    lower index), to the replica below its share with the least size held and placed so far
    (ties: name order), until no replica has room. A shard without a size weighs 0."""
    members = sorted(set(replicas))
    held = {m: 0 for m in members}
    load = {m: 0 for m in members}
    free = []
    for i in range(shards):
        h = leases.get(i)
        if h is None or not h.held(now):
            free.append(i)
        elif h.holder in held:
            held[h.holder] += 1
            load[h.holder] += sizes.get(i, 0)
    room = {m: share(m, members, shards) - held[m] for m in members}
    out: dict[int, str] = {}
    for i in sorted(free, key=lambda i: (-sizes.get(i, 0), i)):
        open_ = [m for m in members if room[m] > 0]
        if not open_:
            break
        m = min(open_, key=lambda m: (load[m], m))
        out[i] = m
        room[m] -= 1
        load[m] += sizes.get(i, 0)
    return out


def plan(
    me: str,
    *,
    shards: int,
    leases: Mapping[int, Holding | None],
    replicas: Sequence[str],
    now: float,
    sizes: Mapping[int, int] | None = None,
) -> Plan:
    """What ``me`` should do now, given each shard's Lease (None: none yet) and the live
    replicas (whose own Leases are held); with ``sizes`` (shard index to its size), the free
    shards the placement by size gives ``me`` come first among those to campaign for."""
    target = share(me, replicas, shards)
    mine = [i for i in range(shards) if (h := leases.get(i)) is not None and h.held(now)
            and h.holder == me]  # fmt: skip
    free = [i for i in range(shards) if (h := leases.get(i)) is None or not h.held(now)]
    if len(mine) > target:
        excess = sorted(mine, reverse=True)[: len(mine) - target]
        keep = tuple(i for i in mine if i not in excess)
        return Plan(target, keep, (), tuple(excess))
    placed: tuple[int, ...] = ()
    if sizes is not None:
        members = sorted(set(replicas) | {me})
        given = assign_free(shards=shards, leases=leases, replicas=members, sizes=sizes, now=now)
        placed = tuple(i for i in given if given[i] == me)
        free = [*placed, *(i for i in free if i not in placed)]
    acquire = tuple(free[: target - len(mine)])
    return Plan(target, tuple(mine), acquire, (), tuple(i for i in placed if i in acquire))
