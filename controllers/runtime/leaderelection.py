"""Leader election on a ``coordination.k8s.io/v1`` Lease (client-go's ``leaderelection``).

Why not ``kubernetes.leaderelection``? It works on the client's model classes, reports loss only
through a callback on its own thread with no renew deadline distinct from the lease duration, and
has no metric. This is client-go's algorithm, on plain JSON:

* A candidate tries every ``retry_period`` (jittered) to take the Lease. It may take it when no one
  holds it, or when the holder's record has not changed for ``lease_duration`` as measured on the
  candidate's own monotonic clock (never by comparing wall clocks across machines).
* The leader renews every ``retry_period``. Every write is a compare-and-swap on
  ``resourceVersion``.
* Any end of leading that was not asked for — no successful renew within ``renew_deadline``,
  another holder seen on the Lease, any exception in the elector or in ``on_started`` — calls
  ``on_lost`` once; the manager then exits the process at once, as controller-runtime does: a
  former leader that limps on could write alongside the new one.
* :meth:`LeaderElector.run` returns on ``stop`` *without* releasing the Lease: the caller stops
  the work the Lease guards first, then calls :meth:`LeaderElector.release` (controller-runtime
  cancels the election only after its runnables have stopped, for the same reason).

The timing contract (defaults are controller-runtime's, 15 s / 10 s / 2 s)::

    lease_duration  15 s  a candidate takes over only after the Lease stood unchanged this long
    renew_deadline  10 s  the leader gives up when it has not renewed for this long
    retry_period     2 s  between attempts to acquire or renew

``renew_deadline`` is counted from the *start* of the last successful renew attempt (the write
landed after that instant, so the others saw it no sooner), and every attempt's requests are
bounded by the time left before it (:func:`~controllers.runtime.client.deadline`); an attempt
cannot overrun it, so the leader stops at most ``renew_deadline`` after its last write. A
candidate takes over no sooner than ``lease_duration`` after it saw that write: the
``lease_duration - renew_deadline`` = 5 s between the two are the old leader's time to exit.
client-go counts ``renew_deadline`` from the start of each renew cycle, up to ``retry_period``
after the last success, which leaves 3 s; the stricter count here keeps all 5.
"""

from __future__ import annotations

import enum
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog

from controllers.runtime import client as clients
from controllers.runtime import clock as clocks
from controllers.runtime import errors, objects
from controllers.runtime.objects import Body

log = structlog.get_logger(__name__)


DEFAULT_ID = "rotator-leader-election"
"""``--leader-election-id``'s default: the single leader's Lease, and the prefix of the shards'
(``rotator status`` looks for them under the same default)."""


@dataclass(frozen=True)
class LeaderElectionOptions:
    name: str
    """Name of the Lease."""
    namespace: str
    """Namespace of the Lease."""
    identity: str
    """This candidate's unique id (host name plus a random suffix)."""
    lease_duration: float = 15.0
    """Seconds a non-leader waits after the last observed change before taking over."""
    renew_deadline: float = 10.0
    """Seconds the leader keeps trying to renew before it gives up leadership."""
    retry_period: float = 2.0
    """Seconds between attempts to acquire or renew."""
    release_on_stop: bool = True
    """Release the Lease on a graceful stop, once the work has stopped. Defaults to True."""
    hold_back: Callable[[Body], str | None] | None = field(default=None, compare=False)
    """Asked with the Lease before this candidate takes it from another holder or none (not
    before a renewal): a reason not to take it yet, or None. The single leader's waits for
    replicas that work in shards (``shards.SingleLeaderHoldBack``)."""

    def __post_init__(self) -> None:
        if not self.lease_duration > self.renew_deadline > self.retry_period * 1.2:
            raise ValueError("need lease_duration > renew_deadline > 1.2 * retry_period")


class _Outcome(enum.Enum):
    HELD = "held"
    """The Lease is ours, written just now."""
    TAKEN = "taken"
    """Another candidate holds a live Lease."""
    FAILED = "failed"
    """The attempt failed (API error, conflict); a later one may succeed."""


WAKE_CHECK = 0.1
"""Seconds between the renew loop's looks at whether starting the controllers failed."""


def _micro_time(at: float) -> str:
    return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Runs the election loop; ``on_started`` when leading, ``on_lost`` when no longer."""

    def __init__(
        self,
        api: clients.Client,
        options: LeaderElectionOptions,
        *,
        on_started: Callable[[], None],
        on_lost: Callable[[], None],
        report: Callable[[bool], None] = lambda leading: None,
        clock: clocks.Clock | None = None,
    ) -> None:
        self._api = api
        self._o = options
        self._on_started = on_started
        self._on_lost = on_lost
        self._report = report
        self._clock = clock or clocks.RealClock()
        self._rng = random.Random()  # noqa: S311 - jitter, not cryptography
        self._observed_spec: dict[str, Any] | None = None
        self._observed_at = 0.0  # monotonic time when _observed_spec last changed
        self._observed_version = ""
        self._renew_by = 0.0  # monotonic time by which the next renew must have succeeded
        self._leading = threading.Event()
        self._start_failed: str | None = None  # why on_started failed, set by its thread
        self._held_back_why: str | None = None  # the last reason hold_back gave, logged once
        self._log = log.bind(lease=f"{options.namespace}/{options.name}", identity=options.identity)

    @property
    def leading(self) -> bool:
        return self._leading.is_set()

    def overdue(self) -> bool:
        """True when leading and the renew deadline has passed: leadership must be given up even
        if the elector thread is still stuck in a request. The manager checks this as well."""
        return self.leading and self._clock.monotonic() >= self._renew_by

    def run(self, stop: threading.Event) -> None:
        """Campaigns until leading, then leads until ``stop`` is set or leadership ends.

        Returns quietly on ``stop``, still holding the Lease (see :meth:`release`). Every other
        way out — the renew deadline passed, another holder, any exception — calls ``on_lost``.
        """
        why: str | None = None
        try:
            self._report(False)
            if not self._acquire(stop):
                return
            self._leading.set()
            self._log.info("leader.elected")
            # On a thread of its own, as client-go's `go OnStartedLeading(ctx)`: starting the
            # controllers delivers every cached object to their handlers (70,000 at 10,000
            # chains: over 10 s), and renewing must not wait for that.
            threading.Thread(target=self._start, name="leader-started", daemon=True).start()
            why = self._renew(stop)
        except Exception as exc:  # any failure of the elector ends leadership
            why = f"the elector failed: {type(exc).__name__}: {exc}"
            self._log.exception("leader.elector_failed")
        finally:
            self._leading.clear()
            self._report(False)
        if why is not None:
            self._log.error("leader.lost", why=why)
            self._on_lost()

    def _start(self) -> None:
        """``on_started``, then the leader metric (leading means working). An exception ends
        leadership: the renew loop sees ``_start_failed`` within :data:`WAKE_CHECK`."""
        try:
            self._on_started()
        except Exception as exc:
            self._log.exception("leader.start_failed")
            self._start_failed = f"the elector failed: {type(exc).__name__}: {exc}"
            return
        if self._leading.is_set():
            self._report(True)

    def release(self) -> bool:
        """Gives the Lease up (empty holder) so a successor need not wait ``lease_duration``.

        Call only after :meth:`run` has returned and the work the Lease guarded has stopped.
        Returns True if it was released.
        """
        if (
            self._observed_spec is None
            or self._observed_spec.get("holderIdentity") != self._o.identity
        ):
            return False
        left = self._renew_by - self._clock.monotonic()
        if left <= 0:
            self._log.warning("leader.not_released", why="past the renew deadline")
            return False
        spec = dict(self._observed_spec)
        spec.update(
            holderIdentity="", leaseDurationSeconds=1, renewTime=_micro_time(self._clock.now())
        )
        body = self._lease(spec, self._observed_version)
        try:
            with clients.deadline(time.monotonic() + left):
                self._api.replace(objects.LEASES, body)
        except errors.ApiError as exc:
            self._log.warning("leader.release_failed", error=str(exc))
            return False
        self._observed_spec = None
        self._log.info("leader.released")
        return True

    # --- for a caller that decides itself when to campaign (shards: controllers/runtime/shards.py)

    def try_acquire(self) -> bool:
        """One attempt to take (or keep) the Lease, by the same rule as :meth:`run`'s campaign:
        a Lease held by another is taken only once this elector has seen it unchanged for its
        ``leaseDurationSeconds`` (:meth:`observe` counts toward that). True: held now; the
        caller then runs :meth:`hold` (on a thread of its own) to keep renewing it."""
        if self._attempt(self._o.renew_deadline) is not _Outcome.HELD:
            return False
        self._leading.set()
        self._log.info("leader.elected")
        return True

    def hold(self, stop: threading.Event) -> None:
        """Renews a Lease :meth:`try_acquire` took until ``stop`` is set (returns quietly, still
        holding it: see :meth:`release`) or it is lost (``on_lost``), with :meth:`run`'s renew
        deadline. ``on_started`` is not called: the caller starts the work itself."""
        why: str | None = None
        try:
            why = self._renew(stop)
        except Exception as exc:  # any failure of the elector ends the holding
            why = f"the elector failed: {type(exc).__name__}: {exc}"
            self._log.exception("leader.elector_failed")
        finally:
            self._leading.clear()
            self._report(False)
        if why is not None:
            self._log.error("leader.lost", why=why)
            self._on_lost()

    def observe(self, lease: Body) -> None:
        """The Lease as someone else read it (a coordinator listing every Lease once per retry
        period): a change of its spec restarts the ``leaseDurationSeconds`` this elector waits
        before taking it over, exactly as its own reads do. Ignored while holding it (its own
        writes are newer than any list)."""
        if self.leading:
            return
        spec: dict[str, Any] = dict(lease.get("spec") or {})
        if spec != self._observed_spec:
            self._observed_spec = spec
            self._observed_at = self._clock.monotonic()
        self._observed_version = str(objects.meta(lease).get("resourceVersion", ""))

    def observed(self) -> tuple[str, float] | None:
        """The holder this elector last saw and the monotonic time until which that holding is
        live by its rule (seen unchanged for less than ``leaseDurationSeconds``); None when it
        has seen no Lease yet. While holding it: this identity, until the renew deadline."""
        if self.leading:
            return self._o.identity, self._renew_by
        if self._observed_spec is None:
            return None
        holder = str(self._observed_spec.get("holderIdentity") or "")
        duration = float(self._observed_spec.get("leaseDurationSeconds") or self._o.lease_duration)
        return holder, self._observed_at + duration

    def _acquire(self, stop: threading.Event) -> bool:
        self._log.info("leader.campaigning")
        while not stop.is_set():
            if self._attempt(self._o.renew_deadline) is _Outcome.HELD:
                return True
            stop.wait(self._o.retry_period * (1.0 + self._rng.uniform(0.0, 1.2)))
        return False

    def _renew(self, stop: threading.Event) -> str | None:
        """Renews every ``retry_period``; returns why leadership ended, or None on ``stop``."""
        while True:
            left = self._renew_by - self._clock.monotonic()
            if left <= 0 or self._wait(stop, min(self._o.retry_period, left)):
                break
            if self._start_failed is not None:
                return self._start_failed
            left = self._renew_by - self._clock.monotonic()
            if left <= 0:
                break
            outcome = self._attempt(left)
            if outcome is _Outcome.TAKEN:
                return "another candidate holds the lease"
        if stop.is_set():
            return None
        if self._start_failed is not None:
            return self._start_failed
        return f"could not renew within the renew deadline ({self._o.renew_deadline:g} s)"

    def _wait(self, stop: threading.Event, seconds: float) -> bool:
        """Waits ``seconds``, or less if ``stop`` is set (True) or ``on_started`` failed."""
        waited = 0.0
        while waited < seconds and self._start_failed is None:
            step = min(WAKE_CHECK, seconds - waited)
            if stop.wait(step):
                return True
            waited += step
        return stop.is_set()

    def _attempt(self, budget: float) -> _Outcome:
        """One try to acquire or renew, its requests bounded to ``budget`` seconds; on success
        the next renew is due ``renew_deadline`` after this attempt began."""
        started = self._clock.monotonic()
        with clients.deadline(time.monotonic() + budget):
            outcome = self._try_acquire_or_renew()
        if outcome is _Outcome.HELD:
            self._renew_by = started + self._o.renew_deadline
        return outcome

    def _try_acquire_or_renew(self) -> _Outcome:
        now = self._clock.now()
        if self.leading and (renewed := self._renew_as_observed(now)) is not None:
            return renewed
        try:
            lease = self._api.get(objects.LEASES, self._o.name, namespace=self._o.namespace)
        except errors.NotFound:
            return self._create(now)
        except errors.ApiError as exc:
            self._log.warning("leader.read_failed", error=str(exc))
            return _Outcome.FAILED
        spec: dict[str, Any] = dict(lease.get("spec") or {})
        version = str(objects.meta(lease).get("resourceVersion", ""))
        if spec != self._observed_spec:
            self._observed_spec = spec
            self._observed_at = self._clock.monotonic()
        self._observed_version = version
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or self._o.lease_duration)
        taking_over = holder != self._o.identity
        if taking_over and (
            # someone else holds a live lease
            (holder and self._observed_at + duration > self._clock.monotonic())
            or self._held_back(lease)
        ):
            return _Outcome.TAKEN
        new_spec = dict(spec)
        new_spec.update(
            holderIdentity=self._o.identity,
            leaseDurationSeconds=int(self._o.lease_duration),
            renewTime=_micro_time(now),
        )
        if taking_over:
            # Every change of holder is a transition, a takeover of a released Lease (empty
            # holder) too: client-go counts them so, and a handover by release is the usual one.
            new_spec["acquireTime"] = _micro_time(now)
            new_spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        body = self._lease(new_spec, version)
        try:
            updated = self._api.replace(objects.LEASES, body)
        except errors.ApiError as exc:
            if not isinstance(exc, errors.Conflict):
                self._log.warning("leader.update_failed", error=str(exc))
            return _Outcome.FAILED
        self._observe(updated)
        return _Outcome.HELD

    def _held_back(self, lease: Body) -> bool:
        """Whether :attr:`LeaderElectionOptions.hold_back` gives a reason not to take the
        Lease yet (logged when it changes)."""
        why = self._o.hold_back(lease) if self._o.hold_back is not None else None
        if why is not None and why != self._held_back_why:
            self._log.info("leader.held_back", why=why)
        self._held_back_why = why
        return why is not None

    def _renew_as_observed(self, now: float) -> _Outcome | None:
        """The leader's fast path (client-go's, since 1.29): one compare-and-swap on the Lease as
        this elector last wrote it, no read first. Half the requests of a renew, so half the
        time a busy process (threads queueing for the GIL) takes to renew. None when the Lease
        changed since (a Conflict): the caller then reads it and decides as usual. Any other
        failure fails this attempt (client-go reads again then; a read would fail the same way,
        and the attempt's budget is better left to the next one)."""
        if (
            self._observed_spec is None
            or self._observed_spec.get("holderIdentity") != self._o.identity
        ):
            return None
        spec = dict(self._observed_spec)
        spec.update(leaseDurationSeconds=int(self._o.lease_duration), renewTime=_micro_time(now))
        try:
            updated = self._api.replace(objects.LEASES, self._lease(spec, self._observed_version))
        except errors.Conflict:
            return None
        except errors.ApiError as exc:
            self._log.warning("leader.update_failed", error=str(exc))
            return _Outcome.FAILED
        self._observe(updated)
        return _Outcome.HELD

    def _lease(self, spec: dict[str, Any], resource_version: str | None = None) -> Body:
        """The Lease body to write; ``resource_version`` makes the write a compare-and-swap."""
        metadata: dict[str, Any] = {"name": self._o.name, "namespace": self._o.namespace}
        if resource_version is not None:
            metadata["resourceVersion"] = resource_version
        return {
            "apiVersion": objects.LEASES.api_version,
            "kind": objects.LEASES.kind,
            "metadata": metadata,
            "spec": spec,
        }

    def _create(self, now: float) -> _Outcome:
        body = self._lease(
            {
                "holderIdentity": self._o.identity,
                "leaseDurationSeconds": int(self._o.lease_duration),
                "acquireTime": _micro_time(now),
                "renewTime": _micro_time(now),
                "leaseTransitions": 0,
            }
        )
        try:
            created = self._api.create(objects.LEASES, body, namespace=self._o.namespace)
        except errors.ApiError as exc:
            if not isinstance(exc, errors.AlreadyExists):
                self._log.warning("leader.create_failed", error=str(exc))
            return _Outcome.FAILED
        self._observe(created)
        return _Outcome.HELD

    def _observe(self, lease: dict[str, Any]) -> None:
        self._observed_spec = dict(lease.get("spec") or {})
        self._observed_at = self._clock.monotonic()
        self._observed_version = str(objects.meta(lease).get("resourceVersion", ""))
