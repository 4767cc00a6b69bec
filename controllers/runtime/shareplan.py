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
    """Free or expired shards to campaign for, lowest index first."""
    release: tuple[int, ...]
    """Held shards to give back (drained first), highest index first."""


def share(me: str, replicas: Sequence[str], shards: int) -> int:
    """``me``'s fair share of ``shards`` among the live ``replicas`` (``me`` among them)."""
    members = sorted(set(replicas) | {me})
    base, extra = divmod(shards, len(members))
    return base + (1 if members.index(me) < extra else 0)


def plan(
    me: str,
    *,
    shards: int,
    leases: Mapping[int, Holding | None],
    replicas: Sequence[str],
    now: float,
) -> Plan:
    """What ``me`` should do now, given each shard's Lease (None: none yet) and the live
    replicas (whose own Leases are held)."""
    target = share(me, replicas, shards)
    mine = [i for i in range(shards) if (h := leases.get(i)) is not None and h.held(now)
            and h.holder == me]  # fmt: skip
    free = [i for i in range(shards) if (h := leases.get(i)) is None or not h.held(now)]
    if len(mine) > target:
        excess = sorted(mine, reverse=True)[: len(mine) - target]
        keep = tuple(i for i in mine if i not in excess)
        return Plan(target, keep, (), tuple(excess))
    return Plan(target, tuple(mine), tuple(free[: target - len(mine)]), ())
