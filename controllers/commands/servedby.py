"""Which replica serves a policy, as ``rotator status`` prints it (``Served by``), decided from
the controller's Leases alone, read with the user's own credentials.

Where: the Leases in ``rotator run``'s ``--leader-election-namespace`` named after its
``--leader-election-id``. ``rotator status`` takes the same two flags, defaulting to
config/default's namespace, ``rotator-system``, and to ``rotator-leader-election`` (the Helm
release ``rotator``'s; another release's id is its full name and ``-leader-election``, in the
release's namespace). One ``list`` of the Leases there: a user who may not (a tenant) sees
``unknown`` and why, and the rest of the status as before.

How N is learnt: from the names. The single leader's Lease is ``<id>``; a sharded replica's are
``<id>-shard-<i>-of-<N>`` (:func:`~controllers.runtime.shards.parse_shard_lease`). Each N that has
such a Lease is a candidate; the policy's shard among N is
:func:`~controllers.runtime.sharding.shard_of` its namespace, as the replicas compute it.

Which Lease serves: each candidate (the single leader's Lease, and for each N the Lease of the
policy's shard) is live when it has a holder and its ``renewTime`` plus ``leaseDurationSeconds`` is
still ahead of now — wall clocks compared across machines, so a skew between this one and the
replica's shifts the verdict by as much (the replicas themselves judge a Lease by how long they saw
it unchanged, never by these times). One live candidate is the answer, and the others are left out:
Leases of an earlier N and a released single-leader Lease stay after a change. Several live: a
change between one leader and shards, or of N, is under way, and each is shown. None live: nothing
refreshes the policy's credential now, and each candidate says why (no holder, expired, no Lease).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controllers.commands import humanize
from controllers.runtime import apiclient, errors, leaderelection, objects, sharding, shards
from controllers.runtime import clock as clocks
from controllers.runtime.objects import Body

DEFAULT_NAMESPACE = "rotator-system"
"""Where config/default and the README's ``helm install`` put rotator."""


@dataclass(frozen=True)
class LeaseOptions:
    """Where the controller's Leases are: ``rotator run``'s flags of the same names."""

    namespace: str = DEFAULT_NAMESPACE
    """``--leader-election-namespace``. Defaults to ``rotator-system``."""
    id: str = leaderelection.DEFAULT_ID
    """``--leader-election-id``. Defaults to ``rotator-leader-election``."""


@dataclass(frozen=True)
class Leases:
    """The Leases ``rotator status`` read (their names, holders and times are used), or why it
    could not read them."""

    where: LeaseOptions
    items: tuple[Body, ...] = ()
    error: str = ""


def read(client: apiclient.Lister, where: LeaseOptions) -> Leases:
    """Lists the Leases of ``where``; a failure is kept, never raised (the status goes on)."""
    try:
        listed = client.list(objects.LEASES, namespace=where.namespace)
    except errors.Forbidden:
        return Leases(where, error="forbidden")
    except errors.ApiError as exc:
        return Leases(where, error=humanize.printable(str(exc)))
    return Leases(where, tuple(listed.get("items") or ()))


_DEFAULT_DURATION = leaderelection.LeaderElectionOptions.lease_duration
"""A Lease without ``leaseDurationSeconds`` lasts as long as rotator's own default."""


@dataclass(frozen=True)
class Candidate:
    """A Lease that would say who serves the policy: the single leader's (``shard`` None), or
    that of the policy's shard among ``shards``."""

    lease: str
    shard: sharding.ShardRange | None
    shards: int
    spec: Mapping[str, Any] | None
    """The Lease's spec; None when there is no such Lease."""

    @property
    def holder(self) -> str:
        return humanize.printable(str((self.spec or {}).get("holderIdentity") or ""))

    def renewed_at(self) -> float | None:
        spec = self.spec or {}
        return clocks.read_rfc3339(spec.get("renewTime") or spec.get("acquireTime"))

    @property
    def duration(self) -> float:
        given = (self.spec or {}).get("leaseDurationSeconds")
        return float(given) if isinstance(given, int | float) else _DEFAULT_DURATION

    def live(self, now: float) -> bool:
        renewed = self.renewed_at()
        return bool(self.holder) and renewed is not None and now < renewed + self.duration

    def describe(self, now: float) -> str:
        """One line: whose it is and how fresh, as a person reading ``kubectl get lease``
        would say it."""
        if self.shard is None:
            what = f"leader (Lease {self.lease})"
        else:
            what = f"shard {self.shard.index} of {self.shards} (Lease {self.lease})"
        renewed = self.renewed_at()
        if self.spec is None:
            return f"{what}: no such Lease (no replica has taken it)"
        if not self.holder:
            return f"{what}: no holder (released)"
        if renewed is None:
            return f"{what}, held by {self.holder}, with no renewTime"
        ago = humanize.relative(min(renewed, now), now)
        if self.live(now):
            if self.shard is None:
                return f"leader {self.holder} (Lease {self.lease}), renewed {ago}"
            return f"{what}, held by {self.holder}, renewed {ago}"
        expired = humanize.relative(renewed + self.duration, now)
        return (
            f"{what}, held by {self.holder}, expired {expired} "
            f"(renewed {ago}, for {self.duration:g}s)"
        )


def candidates(leases: Leases, namespace: str) -> list[Candidate]:
    """The single leader's Lease if there is one, then for each N that has shard Leases the
    Lease of ``namespace``'s shard (there or not), N ascending."""
    lease_id = leases.where.id
    by_name = {objects.name(lease): lease for lease in leases.items}
    out = []
    if lease_id in by_name:
        out.append(Candidate(lease_id, None, 1, by_name[lease_id].get("spec") or {}))
    counts = sorted(
        {parsed[1] for name in by_name if (parsed := shards.parse_shard_lease(lease_id, name))}
    )
    for n in counts:
        shard = sharding.ranges(n)[sharding.shard_of(namespace, n)]
        name = shards.shard_lease_name(lease_id, shard.index, n)
        found = by_name.get(name)
        out.append(Candidate(name, shard, n, None if found is None else found.get("spec") or {}))
    return out


def rows(leases: Leases, namespace: str, now: float) -> list[tuple[str, str]]:
    """``Served by`` (and ``Shard`` when sharded) for the status of a policy in ``namespace``,
    at ``now``; a value of several lines when several Leases are shown."""
    where = leases.where
    if leases.error:
        return [("Served by", f"unknown (cannot list Leases in {where.namespace}: {leases.error})")]
    found = candidates(leases, namespace)
    if not found:
        return [
            (
                "Served by",
                f"unknown (no Lease {where.id} or {where.id}-shard-<i>-of-<N> in "
                f"{where.namespace}: rotator runs without leader election, elsewhere, or with "
                "another --leader-election-id)",
            )
        ]
    live = [c for c in found if c.live(now)]
    if len(live) == 1:
        shown, head = live, ""
    elif live:
        shown = live
        head = (
            f"{len(live)} live Leases at once (a change between one leader and shards, or of "
            "their number, is under way):"
        )
    elif len(found) == 1:
        shown, head = found, "no one: "
    else:
        shown, head = found, "no one, no Lease is live:"
    lines = [c.describe(now) for c in shown]
    served = head + lines[0] if len(shown) == 1 else "\n".join([head, *lines])
    out = [("Served by", served)]
    ranges = [_range(c.shard, c.shards, namespace) for c in shown if c.shard is not None]
    if ranges:
        out.append(("Shard", "\n".join(ranges)))
    return out


def _range(shard: sharding.ShardRange, count: int, namespace: str) -> str:
    """``3 of 6: hashes [0x…, 0x…); FNV-1a of team-a is 0x…``."""
    return (
        f"{shard.index} of {count}: hashes [{sharding.hex64(shard.start)}, "
        f"{sharding.hex64(shard.end)}); FNV-1a of {namespace} is "
        f"{sharding.hex64(sharding.fnv1a64(namespace))}"
    )
