"""What the recorded versions of rotator's Secrets say happened: credentials issued, whether each
was a renewal that was due or a credential minted again while the served one was still good,
seconds during which a served credential had expired, and writes that changed nothing a consumer
reads.

The derived Secret says all of it: ``rotator.dev/issued-at`` and ``rotator.dev/expiration-time``
of every version. A renewal is due no earlier than the schedule's earliest jittered time
(:func:`earliest_due`): a new credential issued sooner after the one it replaced was minted
again, not renewed.

A relist (the recorder's watch broke, tests/kind/watching.py) may hide versions: a ``RELISTED``
entry whose resourceVersion differs from the one seen before it stands for every write missed
in between, so it counts as a write (:func:`written`) — an unchanged rewrite or a re-mint cannot
hide behind a broken watch.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from controllers.reconcilers import api as rapi
from controllers.runtime import clock as clocks
from rotator import schedule
from tests.kind.watching import Seen
from tests.support.polling import Timeout, wait_for

POLICY_LABEL = "rotator.dev/policy"
ROUTE_LABEL = "rotator.dev/route"
TOLERANCE = 2.0
"""Seconds of slack on "due": issued-at and expiration-time are whole seconds."""


def written(type_: str, version: str, previous: str) -> bool:
    """Whether an entry recorded a write of an object seen at ``previous`` just before: a
    ``MODIFIED`` event, or a ``RELISTED`` one at another resourceVersion (at least one write
    happened while the watch was broken; the relist shows only the last). The same version
    again is no write."""
    return type_ in ("MODIFIED", "RELISTED") and version != previous


def earliest_due(issued_at: float, expires_at: float) -> float:
    """The earliest time the default schedule renews a credential (``rotator.schedule``: 2/3 of
    the lifetime, at most :data:`~rotator.schedule.SAFETY_MARGIN` before expiry, less the
    jitter's full spread): 24 s after issue for a 60 s STS session."""
    lifetime = expires_at - issued_at
    if lifetime > 2 * schedule.SAFETY_MARGIN:
        latest = expires_at - schedule.SAFETY_MARGIN
    else:
        latest = issued_at + lifetime / 2
    base = min(issued_at + lifetime * 2 / 3, latest)
    spread = (base - issued_at) * 10 / 100
    base = min(base, latest - spread)
    floor = schedule.renewal_floor(issued_at=issued_at, expires_at=expires_at)
    return max(floor, base - spread)


@dataclass(frozen=True)
class Version:
    seen_at: float
    type: str
    resource_version: str
    issued_at: float | None
    expires_at: float | None
    credential_hash: str
    answered_request: str


@dataclass(frozen=True)
class NewCredential:
    secret: str
    seen_at: float
    issued_at: float
    previous_issued_at: float
    previous_expires_at: float
    requested: bool
    """It answered a new ``rotator.dev/rotate-requested-at`` (a rotation someone asked for)."""

    @property
    def due(self) -> bool:
        due = earliest_due(self.previous_issued_at, self.previous_expires_at)
        return self.issued_at >= due - TOLERANCE


def _time(annotations: dict[str, str], key: str) -> float | None:
    value = annotations.get(key)
    return None if value is None else clocks.parse_rfc3339(value)


class Credentials:
    """Every recorded version of the derived Secrets (``rotator-bsp-*``) among ``events``."""

    def __init__(self, events: Iterable[Seen]) -> None:
        self.versions: dict[str, list[Version]] = {}
        for seen in events:
            md = seen.obj["metadata"]
            if POLICY_LABEL not in (md.get("labels") or {}):
                continue
            annotations = md.get("annotations") or {}
            self.versions.setdefault(seen.name, []).append(
                Version(
                    seen.at,
                    seen.type,
                    seen.version,
                    _time(annotations, rapi.ISSUED_AT_ANNOTATION),
                    _time(annotations, rapi.EXPIRATION_ANNOTATION),
                    annotations.get(rapi.CREDENTIAL_HASH_ANNOTATION, ""),
                    annotations.get(rapi.ANSWERED_REQUEST_ANNOTATION, ""),
                )
            )

    def new_credentials(self, *, since: float = 0.0) -> list[NewCredential]:
        """Each version whose credential differs from the one before it, seen after ``since``."""
        found = []
        for secret, versions in self.versions.items():
            for before, after in itertools.pairwise(versions):
                changed = after.credential_hash != before.credential_hash
                if not changed or after.type == "DELETED" or after.seen_at < since:
                    continue
                if None in (before.issued_at, before.expires_at, after.issued_at):
                    continue
                assert before.issued_at is not None
                assert before.expires_at is not None
                assert after.issued_at is not None
                found.append(
                    NewCredential(
                        secret,
                        after.seen_at,
                        after.issued_at,
                        before.issued_at,
                        before.expires_at,
                        requested=after.answered_request != before.answered_request,
                    )
                )
        return sorted(found, key=lambda c: c.seen_at)

    def minted_again(self, *, since: float = 0.0) -> list[NewCredential]:
        """New credentials issued before the one they replaced was due for renewal, unasked."""
        return [c for c in self.new_credentials(since=since) if not c.due and not c.requested]

    def unchanged_rewrites(self, *, since: float = 0.0) -> list[str]:
        """Writes of a derived Secret that kept its credential and times (metadata only)."""
        found = []
        for secret, versions in self.versions.items():
            for before, after in itertools.pairwise(versions):
                if after.seen_at < since:
                    continue
                if not written(after.type, after.resource_version, before.resource_version):
                    continue
                same = (before.credential_hash, before.issued_at, before.expires_at) == (
                    after.credential_hash,
                    after.issued_at,
                    after.expires_at,
                )
                if same:
                    found.append(f"{secret}@{after.resource_version}")
        return found

    def writes(self, *, since: float = 0.0) -> int:
        """Writes seen after ``since`` (:func:`written`: a relist at a new version counts)."""
        return sum(
            1
            for versions in self.versions.values()
            for before, after in itertools.pairwise(versions)
            if after.seen_at >= since
            and written(after.type, after.resource_version, before.resource_version)
        )

    def expired_seconds(self, *, since: float, until: float) -> dict[str, float]:
        """Secret → seconds between ``since`` and ``until`` during which the version it held
        had expired (only Secrets with such seconds)."""
        expired: dict[str, float] = {}
        for secret, versions in self.versions.items():
            total = 0.0
            ordered = sorted(versions, key=lambda v: v.seen_at)
            for i, version in enumerate(ordered):
                if version.type == "DELETED" or version.expires_at is None:
                    continue
                start = max(version.seen_at, since)
                end = ordered[i + 1].seen_at if i + 1 < len(ordered) else until
                end = min(end, until)
                total += max(0.0, end - max(start, version.expires_at))
            if total > 0:
                expired[secret] = round(total, 3)
        return expired

    def lifetimes(self) -> list[float]:
        return [
            v.expires_at - v.issued_at
            for versions in self.versions.values()
            for v in versions
            if v.expires_at is not None and v.issued_at is not None
        ]


class RouteConfigs:
    """Every recorded version of the route config Secrets (``rotator-route-*``)."""

    def __init__(self, events: Iterable[Seen]) -> None:
        self.versions: dict[str, list[tuple[Seen, str]]] = {}
        for seen in events:
            md = seen.obj["metadata"]
            if ROUTE_LABEL not in (md.get("labels") or {}):
                continue
            digest = (md.get("annotations") or {}).get(rapi.CONFIG_HASH_ANNOTATION, "")
            self.versions.setdefault(seen.name, []).append((seen, digest))

    def _writes(self, since: float) -> Iterator[tuple[str, Seen, bool]]:
        """(Secret, the entry, whether its config-hash changed) of each write after ``since``
        (:func:`written`: a relist at a new version counts)."""
        for secret, versions in self.versions.items():
            for (before, digest_before), (after, digest_after) in itertools.pairwise(versions):
                if after.at >= since and written(after.type, after.version, before.version):
                    yield secret, after, digest_after != digest_before

    def writes(self, *, since: float = 0.0) -> int:
        return sum(1 for _ in self._writes(since))

    def unchanged_rewrites(self, *, since: float = 0.0) -> list[str]:
        """Writes that left ``config.yaml`` as it was (the same config-hash)."""
        return [
            f"{secret}@{after.version}"
            for secret, after, changed in self._writes(since)
            if not changed
        ]

    def changed(self, *, since: float = 0.0) -> set[str]:
        """The Secrets written with a new ``config.yaml`` (config-hash) after ``since``."""
        return {secret for secret, _, changed in self._writes(since) if changed}


BOUNDARY = 2
"""STS exchanges that may fall on the other side of a counting window's ends from the Secret
write they led to (a renewal in flight when counting starts or stops)."""
SETTLE = 60.0
"""Seconds :func:`balanced_end` waits for the exchanges and the new credentials to balance. A
wave of renewals in flight when a window would end (chains whose sessions were minted within
seconds of each other are renewed so) lands within seconds, while an exchange whose credential
was lost never does. CI runs that ended the window at once counted 185 exchanges for 181
credentials (tests/kind/test_upgrade.py, 100 chains) and 26 for 23 (tests/kind/test_helm.py, 12
STS chains, a change of shards back to one leader). More than the quiet gap between two waves of
renewals (60 s sessions, renewed at two thirds of their lifetime)."""


@dataclass(frozen=True)
class WindowEnd:
    """Where a window that counts STS exchanges against new credentials ended."""

    at: float
    """Wall-clock seconds of the reading."""
    calls: int
    """STS exchanges in the window."""
    events: list[Seen]
    """Every version of the Secrets seen by then."""


def balanced_end(
    calls: Callable[[], int],
    events: Callable[[], list[Seen]],
    *,
    since: float,
    settle: float = SETTLE,
    fits: Callable[[int, int], bool] | None = None,
) -> WindowEnd:
    """The end of a window from ``since``: the first reading, within ``settle`` seconds, at which
    the exchanges so far (``calls``) and the new credentials among ``events`` balance — within
    :data:`BOUNDARY`, or as ``fits(exchanges, new credentials)`` says (the caller's own bound);
    else the last reading, and the caller's assertion names the imbalance."""
    window: list[WindowEnd] = []

    def within_boundary(made: int, new: int) -> bool:
        return abs(made - new) <= BOUNDARY

    balances = fits or within_boundary

    def balanced() -> bool:
        # the Secrets before the exchanges: an exchange made between the two reads is counted
        # without its credential (the window ends later), never a credential without its
        # exchange, which could offset a lost one
        seen = events()
        made = calls()
        window[:] = [WindowEnd(time.time(), made, seen)]
        return balances(made, len(Credentials(seen).new_credentials(since=since)))

    with contextlib.suppress(Timeout):
        wait_for(balanced, timeout=settle, interval=0.5, what="exchanges and credentials")
    assert window, "the stand-ins' calls could be read"
    return window[-1]


QUIET = 1.0
"""Seconds without an STS exchange or a new Secret version that :func:`quiet_start` waits for."""


@dataclass(frozen=True)
class WindowStart:
    """Where a window that counts STS exchanges against new credentials starts."""

    at: float
    """Wall-clock seconds: the window's ``since``."""
    calls: int
    """The STS exchanges made before it (to subtract from a later count)."""


def quiet_start(
    calls: Callable[[], int],
    events: Callable[[], list[Seen]],
    *,
    quiet: float = QUIET,
    settle: float = SETTLE,
) -> WindowStart:
    """The start of a window at a moment with no renewal in flight: the first reading, within
    ``settle`` seconds, followed by ``quiet`` seconds with no exchange and no Secret version;
    else the last reading. A window started at once could begin between a renewal's exchange
    and its Secret write: a credential without its exchange, one ahead (which a strict count
    fails on, or which offsets a lost credential)."""
    readings: list[WindowStart] = []
    versions: list[int] = []

    def quiet_since_last() -> bool:
        # the exchanges before the Secrets: an exchange made between the two reads falls inside
        # the window, and so does its credential
        at, made = time.time(), calls()
        seen = len(events())
        readings.append(WindowStart(at, made))
        versions.append(seen)
        if len(readings) < 2:
            return False
        return (readings[-2].calls, versions[-2]) == (made, seen)

    try:
        wait_for(quiet_since_last, timeout=settle, interval=quiet, what="a quiet second")
    except Timeout:
        assert readings, "the stand-ins' calls could be read"
        return readings[-1]
    return readings[-2]
