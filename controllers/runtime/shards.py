"""Shards (``rotator run --shards N``, N > 1): each replica works on a fair share of N shards,
each guarded by a Lease of its own, instead of one leader working on everything.

A shard is one of N equal ranges of the 64-bit FNV-1a hash of an object's namespace
(:mod:`.sharding`, as the API server computes it). Per held shard a replica runs a
:class:`Shard`: its own cache (informers that list and watch only that shard's namespaces — with
a ``shardSelector`` a server with the feature gate honours, and the same test on this side
before anything is stored, for a server without it), its own timers and work
queues, and its own controllers, built by the same setup code as the single leader's. The
metrics and probe servers, the Event recorder and the credential sources are the replica's.

The Leases, in the leader election's namespace (``<id>`` is ``--leader-election-id``):

* ``<id>-member-<identity>``: one per replica, renewed while it lives; the live ones are the
  replicas the shards are shared among (:func:`.shareplan.share`).
* ``<id>-shard-<i>-of-<N>``: held by the replica that works on shard ``i``; taken, renewed and
  released by :class:`~.leaderelection.LeaderElector`, with its timing contract.

The :class:`Coordinator` lists the namespace's Leases once per retry period (one request; while
the list is forbidden, on the way back to one leader, that request and one ``get`` per known
Lease it does not hold),
computes :func:`.shareplan.plan`, and acts on it: it campaigns for free or expired shard Leases
up to its share (a Lease another holds is taken only once it stood unchanged for its
``leaseDurationSeconds``, as the elector's own rule; with more free shards than it may take,
first those the placement by size gives it: :mod:`.shardsizes` counts each shard's chains, and
the Leases are read again after the count), and gives back the excess — that shard's
controllers stop taking work and finish their in-flight reconciles while its Lease is still
renewed, and only then is the Lease released, its informers stopped. A shard whose Lease could
not be renewed within the renew deadline stops its controllers at once; if a reconcile is still
running after half the time the Lease leaves before anyone may take it over
(``lease_duration - renew_deadline``), the process must end (:attr:`ShardedManager.run` returns
1), as when the single leader loses its Lease. A graceful stop drains and releases every shard,
then the membership Lease.

``/readyz`` fails while a held shard's caches have not synced; ``/healthz`` when the
coordinator's thread or a held shard's worker has ended. ``<prefix>_shards_held`` says how many
shards the replica holds.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC

import structlog
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from prometheus_client import Gauge

from controllers.runtime import cache as caches
from controllers.runtime import client as clients
from controllers.runtime import clock as clocks
from controllers.runtime import controller as controllers
from controllers.runtime import (
    errors,
    events,
    leaderelection,
    objects,
    reconcile,
    sharding,
    shardsizes,
    shareplan,
    timers,
)
from controllers.runtime import manager as managers
from controllers.runtime import metrics as metric_families
from controllers.runtime.informer import InformerOptions
from controllers.runtime.objects import Body

log = structlog.get_logger(__name__)

SHARDS_ANNOTATION = "rotator.dev/shards"
"""On the single leader's Lease (``--leader-election-id``): the shard count of the replicas that
work in shards. They write it before they take any shard; a single leader's every write of that
Lease drops it (its update sends no annotations). A single leader that finds it checks those
shards' Leases before it takes the Lease (:class:`SingleLeaderHoldBack`): a single leader may not
list Leases, so it learns their names here."""

STALE_MEMBER = 600.0
"""Seconds a membership Lease must have stood still (as seen here, and by its renew time) before
a live replica deletes it: far past any Lease duration, so only a replica long gone's."""


def shard_lease_name(lease_id: str, index: int, shards: int) -> str:
    """The Lease of shard ``index`` among ``shards``: ``<id>-shard-<i>-of-<N>``."""
    return f"{lease_id}-shard-{index}-of-{shards}"


def parse_shard_lease(lease_id: str, name: str) -> tuple[int, int] | None:
    """``(index, shards)`` of a Lease named by :func:`shard_lease_name` with ``lease_id``; None
    for any other name (the single leader's, a membership Lease, another id's). Read from
    outside the replicas: ``rotator status`` learns N from the names of the Leases it lists."""
    found = re.fullmatch(rf"{re.escape(lease_id)}-shard-(0|[1-9][0-9]*)-of-([1-9][0-9]*)", name)
    if found is None:
        return None
    index, shards = int(found[1]), int(found[2])
    return (index, shards) if index < shards <= sharding.MAX_SHARDS else None


@dataclass(frozen=True)
class ShardOptions:
    id: str
    """The prefix of every Lease (``--leader-election-id``)."""
    namespace: str
    """The Leases' namespace."""
    identity: str
    """This replica (host name plus a random suffix)."""
    shards: int
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    graceful_shutdown_timeout: float = 30.0
    """Seconds a shard's in-flight reconciles get to finish when it is given back or the
    replica stops. Defaults to 30, as the manager's."""
    cache_sync_timeout: float = 120.0
    """Seconds a shard's informers get to sync; a shard that did not is given back."""

    def __post_init__(self) -> None:
        sharding.ranges(self.shards)  # in bounds
        self.election("check")  # the timing contract holds

    def shard_lease(self, index: int) -> str:
        return shard_lease_name(self.id, index, self.shards)

    @property
    def members_prefix(self) -> str:
        """Of every membership Lease, whatever the shard count (a long-dead one's is deleted)."""
        return f"{self.id}-member-"

    @property
    def member_prefix(self) -> str:
        """Of the membership Leases of replicas with this shard count: the replicas the shards
        are shared among. A replica with another count (a change of N under way) is not one."""
        return f"{self.members_prefix}of-{self.shards}-"

    @property
    def member_lease(self) -> str:
        """This replica's membership Lease: its identity made a DNS name (lower case, ``-``)."""
        name = re.sub(r"[^a-z0-9-]+", "-", self.identity.lower()).strip("-")
        return (self.member_prefix + name)[:253].rstrip("-")

    def election(self, name: str) -> leaderelection.LeaderElectionOptions:
        return leaderelection.LeaderElectionOptions(
            name=name,
            namespace=self.namespace,
            identity=self.identity,
            lease_duration=self.lease_duration,
            renew_deadline=self.renew_deadline,
            retry_period=self.retry_period,
        )


class Shard:
    """One held shard: its cache, timers and controllers (a
    :class:`~.builder.ControllerHost` for the setup code); the API client, metrics and Event
    recorder are the replica's."""

    def __init__(
        self,
        index: int,
        shards: int,
        *,
        api: clients.Client,
        metrics: metric_families.Metrics,
        recorder: events.EventRecorder,
        clock: clocks.Clock,
        namespaces: Sequence[str] = (),
        informer: InformerOptions | None = None,
    ) -> None:
        self.index = index
        self._api, self._recorder, self.clock = api, recorder, clock
        self._metrics = metrics.for_shard(index)  # its controllers' series carry shard="<index>"
        self._owned = sharding.ShardFilter((sharding.ranges(shards)[index],))
        self._closers: list[Callable[[], None]] = []
        self._cache = caches.Cache(
            api, namespaces=namespaces, options=informer, clock=clock, shard=self._owned
        )
        self.scheduler = BackgroundScheduler(
            timezone=UTC, executors={"default": ThreadPoolExecutor(2)}
        )
        self.timers = timers.APSchedulerTimers(self.scheduler)
        self.controllers: list[controllers.Controller] = []
        self._lock = threading.Lock()
        self._stopping = False
        self._started = False

    @property
    def api(self) -> clients.Client:
        return self._api

    @property
    def cache(self) -> caches.Cache:
        return self._cache

    @property
    def metrics(self) -> metric_families.Metrics:
        return self._metrics

    @property
    def recorder(self) -> events.EventRecorder:
        return self._recorder

    def holds(self, namespace: str) -> bool:
        """Whether the objects of ``namespace`` are this shard's."""
        return self._owned.holds(namespace)

    def on_close(self, callback: Callable[[], None]) -> None:
        """``callback`` runs when the shard is given up or lost, after its work stopped: what the
        replica keeps about the shard's objects beyond the shard (their metric series) goes."""
        self._closers.append(callback)

    def new_controller(
        self,
        name: str,
        reconciler: reconcile.Reconciler,
        options: controllers.ControllerOptions | None = None,
    ) -> controllers.Controller:
        controller = controllers.Controller(
            name,
            reconciler,
            timers=self.timers,
            metrics=self._metrics,
            options=options,
            clock=self.clock,
        )
        self.controllers.append(controller)
        return controller

    def start_cache(self) -> None:
        self.scheduler.start()
        self._cache.start()

    def start_controllers(self) -> bool:
        """Starts the controllers, unless the shard is stopping; True if started."""
        with self._lock:
            if self._stopping:
                return False
            for controller in self.controllers:
                controller.start()
            self._started = True
            return True

    def stop_controllers(self, timeout: float) -> bool:
        """Stops taking work and waits up to ``timeout`` for in-flight reconciles (every
        controller at once); True if all finished. Later :meth:`start_controllers` do nothing."""
        with self._lock:
            self._stopping = True
            started = self._started
        if not started:
            return True
        results: dict[str, bool] = {}

        def stop(c: controllers.Controller) -> None:
            results[c.name] = c.stop(timeout)

        threads = [
            threading.Thread(target=stop, args=(c,), name=f"stop-{c.name}-{self.index}")
            for c in self.controllers
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout + 1.0)
        return len(results) == len(threads) and all(results.values())

    def close(self) -> None:
        """Stops the informers and the timers (after :meth:`stop_controllers`), then drops the
        shard's series: its controllers' and, through :meth:`on_close`, its objects'. A replica
        that keeps exporting the expiry of a credential another replica now refreshes would
        raise RotatorCredentialExpiringSoon once that frozen time came near."""
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)
        self._cache.stop()
        for controller in self.controllers:
            self._metrics.forget_controller(controller.name)
        for callback in self._closers:
            try:
                callback()
            except Exception:  # one failed cleanup must not keep the Lease from being released
                log.exception("shards.close_hook_failed", shard=self.index)

    def dead_workers(self) -> list[str]:
        return [w for c in self.controllers for w in c.dead_workers()]


@dataclass
class _Held:
    """A shard whose Lease this replica holds, and what runs it."""

    index: int
    elector: leaderelection.LeaderElector
    renewing: threading.Thread
    stop_renewing: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    shard: Shard | None = None
    stopping: bool = False
    """Being given back, lost, or stopped with the replica: no new start."""
    lost: bool = False
    ready: threading.Event = field(default_factory=threading.Event)
    """Caches synced and controllers started."""
    starter: threading.Thread | None = None
    forgotten: bool = False
    """:meth:`Coordinator._forget` ran: the shard closed once (a late second close would remove
    the series of the same shard taken again since)."""

    def halted(self) -> bool:
        """:attr:`stopping`, read again (another thread sets it)."""
        return self.stopping


Build = Callable[[int], Shard]
"""Makes shard ``i`` with its controllers (the composition root's setup code)."""


class OtherLeases:
    """What a replica remembers of the Leases of another scheme over the same objects (the
    single leader's, another shard count's), and the rule that says whether one may still be at
    work (:meth:`may_work`). Each Lease is judged on its own, by what this replica saw of it:
    its spec as last seen, since when on this replica's monotonic clock, and whether it was
    released long ago by the wall clock when first seen."""

    def __init__(self, lease_duration: float, clock: clocks.Clock) -> None:
        self._lease_duration = lease_duration
        self._clock = clock
        self._seen: dict[str, tuple[dict[str, object], float, bool]] = {}

    def keep_only(self, names: Collection[str]) -> None:
        """Forgets the Leases not in ``names`` (gone)."""
        self._seen = {k: v for k, v in self._seen.items() if k in names}

    def may_work(self, name: str, lease: Body, now: float) -> bool:
        """Whether a replica of another scheme (:meth:`Coordinator._other_schemes`) may still
        be working under Lease ``name``, or about to. For the single leader's (a replica that runs
        everything under one Lease: ``--shards 1``, today's and earlier releases'): its Lease
        has a holder and changed less than its ``leaseDurationSeconds`` ago
        as seen here (the elector's own rule: a holder that stopped renewing is gone once it
        stood still that long), or it was released less than this replica's lease duration ago.

        Released is not gone: in a rolling upgrade the old leader's graceful stop releases the
        Lease while another replica of the old release may still run, and that one takes it at
        its next retry (within 2.2 retry periods) and works on everything again. Shards taken in
        that gap would be worked on twice at once (the kind suite's upgrade from image A, two
        replicas of it left, did: a shard holder and the next old leader for 1.2 s). So a
        released Lease holds the shards back until it has stood still for the lease duration:
        a rolling upgrade waits that long after the last old replica's graceful stop; a killed
        one, for its Lease to expire. Expired is not gone either, for the same reason: a leader
        killed in a rolling upgrade (SIGKILL, OOM, a node lost) leaves a held Lease that another
        old replica takes at its next retry once it saw it stand still for its duration, so a held
        Lease holds the shards back for twice its duration after it last changed as seen here.

        Wall clocks are compared only once, on first sight of a released Lease: its
        ``renewTime`` is when it was released, and a Lease released more than twice this
        replica's lease duration before (or never held: the chart renders it empty) holds nothing
        back, so a sharded replica that restarts long after an upgrade does not wait; any other
        release holds the shards back for the full duration on this replica's monotonic clock,
        so a skewed clock shortens nothing (up to a skew of one lease duration, a release is
        still seen as recent). What no rule here can see is an old replica that starts after
        the shards did (a rollback, or an old container restarted late): it takes the Lease and
        the shard holders give their shards back at their next round, as they do for any single
        leader that appears. What this returns is overruled when another replica already
        waited the single leader out (:meth:`Coordinator._waited_out`).

        The same holds, word for word, for a shard Lease of another shard count: a rolling
        update from 6 shards to 4 waits for the last replica with 6 to stop and its released
        Leases to stand still, as an upgrade from one leader does (the replicas with 6 take
        each other's released shards meanwhile, as an old standby takes the single leader's
        Lease)."""
        spec: dict[str, object] = dict(lease.get("spec") or {})
        before = self._seen.get(name)
        if before is not None and before[0] == spec:
            _, observed_at, long_ago = before
        else:
            observed_at, long_ago = now, self._released_long_ago(spec)
        self._seen[name] = (spec, observed_at, long_ago)
        if spec.get("holderIdentity"):
            duration = float(str(spec.get("leaseDurationSeconds") or self._lease_duration))
            return now < observed_at + 2 * duration
        # released (the release sets leaseDurationSeconds to 1: this replica's duration counts)
        return not long_ago and now < observed_at + self._lease_duration

    def _released_long_ago(self, spec: dict[str, object]) -> bool:
        """Whether a Lease without a holder was released (its ``renewTime``) more than twice
        this replica's lease duration ago by the wall clock, or never held at all."""
        if spec.get("holderIdentity"):
            return False
        renewed = spec.get("renewTime")
        if not isinstance(renewed, str):
            return True
        released_at = clocks.read_rfc3339(renewed)
        if released_at is None:  # not a time (the API server validates it): judge it recent
            return False
        return self._clock.now() - released_at > 2 * self._lease_duration


class SingleLeaderHoldBack:
    """For a single leader (``--shards 1``) about to take its Lease: why it may not yet, while
    replicas that work in shards may still be at work (the way back from shards). They wrote
    their count on the Lease (:data:`SHARDS_ANNOTATION`); each of those shard Leases is read
    (``get``, which the single leader's RBAC allows) and judged by :class:`OtherLeases`' rule,
    as the sharded replicas judge the single leader's. None lets it take the Lease, which drops
    the annotation. A shard Lease that cannot be read holds it back (judged again at its next
    retry). Not foreseen: a sharded replica that marks the Lease and takes a shard between this
    check and the take; it steps aside at its next round (:meth:`Coordinator._held_back`)."""

    def __init__(
        self,
        api: clients.Client,
        *,
        lease_id: str,
        namespace: str,
        lease_duration: float,
        clock: clocks.Clock | None = None,
    ) -> None:
        self._api = api
        self._id = lease_id
        self._namespace = namespace
        self._clock = clock or clocks.RealClock()
        self._others = OtherLeases(lease_duration, self._clock)

    def __call__(self, lease: Body) -> str | None:
        count = _shard_count((objects.meta(lease).get("annotations") or {}).get(SHARDS_ANNOTATION))
        if count is None:
            self._others.keep_only(())
            return None
        names = [shard_lease_name(self._id, i, count) for i in range(count)]
        self._others.keep_only(names)
        now = self._clock.monotonic()
        working = []
        for name in names:
            try:
                shard = self._api.get(objects.LEASES, name, namespace=self._namespace)
            except errors.NotFound:
                continue
            except errors.ApiError as exc:
                return f"the Lease {name} could not be read: {exc}"
            if self._others.may_work(name, shard, now):
                working.append(name)
        if working:
            return f"replicas with {count} shards may still be at work: {', '.join(working)}"
        return None


def _shard_count(value: object) -> int | None:
    """The shard count :data:`SHARDS_ANNOTATION` holds, or None (absent, or no count a replica
    accepts: a hand-written value must not make a single leader read a million Leases)."""
    if not isinstance(value, str) or not value.isascii() or not value.isdigit():
        return None
    count = int(value)
    return count if 1 < count <= sharding.MAX_SHARDS else None


class Coordinator:
    """Takes and gives back shards; see the module's docstring."""

    def __init__(
        self,
        api: clients.Client,
        options: ShardOptions,
        *,
        build: Build,
        held_gauge: Callable[[int], None] = lambda n: None,
        forbidden_gauge: Callable[[int], None] = lambda n: None,
        report: Callable[[str, bool], None] = lambda lease, holding: None,
        sizes: Callable[[], Mapping[int, int] | None] = lambda: None,
        clock: clocks.Clock | None = None,
    ) -> None:
        """``forbidden_gauge`` is set to 1 while the list of Leases is refused (Forbidden), to
        0 once it is answered. ``sizes``: each shard's size, or None when unknown
        (:class:`.shardsizes.ShardSizes`); asked only when this replica has free shards to
        choose from, to place them by size (:func:`.shareplan.assign_free`)."""
        self._api = api
        self._o = options
        self._build = build
        self._held_gauge = held_gauge
        self._forbidden_gauge = forbidden_gauge
        self._report = report
        self._sizes = sizes
        self._clock = clock or clocks.RealClock()
        self._rng = random.Random()  # noqa: S311 - jitter, not cryptography
        self._electors = [self._elector(i) for i in range(options.shards)]
        self._held: dict[int, _Held] = {}
        self._lock = threading.Lock()
        self._members: dict[str, tuple[dict[str, object], float]] = {}
        self._others = OtherLeases(options.lease_duration, self._clock)
        self._waiting_logged = False
        self._unlisted_logged = False
        self._member: leaderelection.LeaderElector | None = None
        self._member_thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._mode_logged = False
        self.fatal = threading.Event()
        """Set when the process must end now (a lost shard's reconcile would not stop)."""
        self.fatal_why = ""
        self._log = log.bind(identity=options.identity, shards=options.shards)

    def _elector(self, index: int) -> leaderelection.LeaderElector:
        name = self._o.shard_lease(index)
        return leaderelection.LeaderElector(
            self._api,
            self._o.election(name),
            on_started=lambda: None,
            on_lost=lambda: self._lose(index, "its Lease could not be renewed"),
            report=lambda holding: self._report(name, holding),
            clock=self._clock,
        )

    # --- running -----------------------------------------------------------------------------

    def start(self) -> None:
        self._member_thread = threading.Thread(
            target=self._membership, name="shards-membership", daemon=True
        )
        self._member_thread.start()
        self._thread = threading.Thread(target=self._loop, name="shards-coordinator", daemon=True)
        self._thread.start()

    def held(self) -> list[int]:
        with self._lock:
            return sorted(self._held)

    def unready(self) -> list[int]:
        """Held shards whose caches have not synced yet (or whose controllers did not start)."""
        with self._lock:
            return sorted(i for i, h in self._held.items() if not h.ready.is_set())

    def problem(self) -> str | None:
        """For ``/healthz``: the coordinator's thread ended, or a held shard's worker did."""
        if self._thread is not None and not self._thread.is_alive() and not self._stop.is_set():
            return "the shard coordinator ended"
        with self._lock:
            shards = [h.shard for h in self._held.values() if h.shard and not h.stopping]
        dead = [w for s in shards for w in s.dead_workers()]
        return f"workers ended: {', '.join(dead)}" if dead else None

    def _loop(self) -> None:
        # one retry period first, so that replicas starting together see each other's
        # membership before any takes shards
        if self._stop.wait(self._o.retry_period * 1.5):
            return
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:  # a failed round is retried at the next; never end the loop
                self._log.exception("shards.tick_failed")
            self.check_overdue()
            self._stop.wait(self._o.retry_period * self._rng.uniform(1.0, 1.2))

    def _membership(self) -> None:
        """Keeps this replica's membership Lease while it runs (campaigning again if lost)."""
        while not self._stop.is_set():
            elector = leaderelection.LeaderElector(
                self._api,
                self._o.election(self._o.member_lease),
                on_started=lambda: None,
                on_lost=lambda: None,
                clock=self._clock,
            )
            self._member = elector
            if elector.try_acquire():
                elector.hold(self._stop)
            else:
                self._stop.wait(self._o.retry_period)

    def tick(self) -> None:
        """One round: read the Leases, plan, act. With free shards to choose from (more than
        its share lets it take), the shards' sizes are asked for first (a count may take up to
        the renew deadline) and the Leases read again, so that what it acts on was read after
        the count, as in any round: the single leader's Lease above all (:meth:`_held_back`)."""
        if self._round(None, ask=True) and not self._stop.is_set():
            try:
                sizes = self._sizes()
            except Exception:  # never keep free shards untaken: placed by index
                self._log.exception("shards.sizes_failed")
                sizes = None
            self._round(sizes, ask=False)

    def _round(self, sizes: Mapping[int, int] | None, *, ask: bool) -> bool:
        """Reads, plans and acts, placing free shards by ``sizes`` (None: by index); True,
        having taken and given back nothing, when ``ask`` and there are free shards to choose
        from in a round that listed the Leases (one that read them by name, on the way back to
        one leader, may not list them for the count's probe either, and places by index)."""
        read = self._read_leases()
        if read is None:
            return False
        leases, listed = read
        now = self._clock.monotonic()
        for i, elector in enumerate(self._electors):
            lease = leases.get(self._o.shard_lease(i))
            if lease is not None:
                elector.observe(lease)
        holdings = self._holdings()
        if self._held_back(leases, holdings, now, listed=listed) or not self._marked(
            leases.get(self._o.id)
        ):
            return False
        if listed:
            members = self._live_members(leases, now)
        else:
            # no membership Lease was read (what was remembered of them is kept for when the
            # list is answered again): the replicas the shards are shared among are the live
            # holders of these shards (a stopping one drops out once it released them all)
            members = sorted(
                {
                    self._o.identity,
                    *(h.holder for h in holdings.values() if h is not None and h.held(now)),
                }
            )
        plan = shareplan.plan(
            self._o.identity,
            shards=self._o.shards,
            leases=holdings,
            replicas=members,
            now=now,
            sizes=sizes,
        )
        free = [i for i in range(self._o.shards) if not _held_at(holdings.get(i), now)]
        if ask and listed and 0 < len(plan.acquire) < len(free):
            return True
        for i in plan.release:
            self._give_back(i)
        wanted = len(plan.acquire)
        # the plan's free shards first, then the other free ones: when two replicas campaign
        # for the same shard, the one that lost it tries the next in the same round
        for i in sorted(free, key=lambda i: (i not in plan.acquire, i)):
            if wanted <= 0 or self._stop.is_set():
                break
            with self._lock:
                if i in self._held:
                    continue
            if self._electors[i].try_acquire():
                self._take(i, by_size=i in plan.placed, free=free)
                wanted -= 1
        return False

    def _read_leases(self) -> tuple[dict[str, Body], bool] | None:
        """The release namespace's Leases by name, and whether they were listed; None when they
        could not be read (this round is skipped).

        When the list is forbidden, the Leases whose names are known are read one by one (the
        single leader's and the shard Leases it does not hold: ``get``, which the leader
        election Role allows; :meth:`_read_by_name`).
        That is the way back to one leader: ``helm upgrade`` to ``sharding.shards=1`` deletes
        the sharding Role at once, while the rolling update stops these replicas one at a time.
        Skipping the rounds then (as first built) left each stopped replica's shards unheld until
        the single leader took over, a rolling update later; read by name, the replicas still
        running take them once the stopping one released them all (until then it is a live
        holder, so among those they are shared with), and the single leader waits for the last. Not
        seen that way: the membership Leases (the live holders stand for the replicas, so a
        replica holding nothing gets no share) and the shard Leases of another count (a change
        of N under way). So only a replica at work on a shard it is not giving back goes on this
        way (one giving everything back may be doing so for a change of N it saw); any other
        skips the round, reading nothing more, as before: a sharded release without the sharding
        Role serves nothing, and RotatorShardUnheld fires."""
        try:
            listed = self._api.list(objects.LEASES, namespace=self._o.namespace)
        except errors.Forbidden as exc:
            self._forbidden_gauge(1)
            if not self._at_work():
                self._log.warning("shards.read_failed", error=str(exc))
                return None
            if not self._unlisted_logged:
                self._unlisted_logged = True
                self._log.warning("shards.reading_leases_by_name", error=str(exc))
            return self._read_by_name()
        except errors.ApiError as exc:
            self._log.warning("shards.read_failed", error=str(exc))
            return None
        self._forbidden_gauge(0)
        if self._unlisted_logged:
            self._unlisted_logged = False
            self._log.info("shards.listing_leases_again")
        items = listed.get("items") or []
        return {str(objects.meta(lease).get("name")): lease for lease in items}, True

    def _read_by_name(self) -> tuple[dict[str, Body], bool] | None:
        """The single leader's Lease and the shard Leases this replica does not hold, one
        ``get`` each (its own are its electors' to read: :meth:`LeaderElector.observe` ignores
        them while held), all within the renew deadline, so that a slow API server delays a
        round, and the takes and the stop that wait for it, by that much at most, not by one
        request timeout per Lease; None when one could not be read (the round is skipped)."""
        with self._lock:
            mine = set(self._held)
        names = [
            self._o.id,
            *(self._o.shard_lease(i) for i in range(self._o.shards) if i not in mine),
        ]
        found: dict[str, Body] = {}
        # the client's deadline is on its own monotonic clock (time.monotonic), as the
        # elector's requests are bounded
        with clients.deadline(time.monotonic() + self._o.renew_deadline):
            for name in names:
                try:
                    found[name] = self._api.get(objects.LEASES, name, namespace=self._o.namespace)
                except errors.NotFound:
                    continue
                except errors.ApiError as exc:
                    self._log.warning("shards.read_failed", lease=name, error=str(exc))
                    return None
        return found, False

    def _at_work(self) -> bool:
        """Whether this replica holds a shard it is not giving back (nor lost, nor stopping)."""
        with self._lock:
            held = list(self._held.values())
        return any(not h.halted() for h in held)

    def _held_back(
        self,
        leases: dict[str, Body],
        holdings: dict[int, shareplan.Holding | None],
        now: float,
        *,
        listed: bool = True,
    ) -> bool:
        """Whether a replica of another scheme may still work (an upgrade from one leader, the
        Lease named --leader-election-id, or a change of the shard count): then nothing is
        taken, and whatever is held is given back (drained, then released). ``listed``: whether
        ``leases`` is every Lease (else those read by name)."""
        working = sorted(
            name
            for name, lease in self._other_schemes(leases, listed=listed).items()
            if self._others.may_work(name, lease, now)
            and not self._waited_out(lease, leases, holdings, now)
        )
        if not working:
            self._waiting_logged = False
            return False
        if not self._waiting_logged:
            self._waiting_logged = True
            if self._o.id in working:
                self._log.info("shards.waiting_for_single_leader", lease=self._o.id)
            else:
                self._log.info("shards.waiting_for_other_shard_count", leases=working)
        for i in self.held():
            self._give_back(i)
        return True

    def _marked(self, single: Body | None) -> bool:
        """Whether the single leader's Lease says :data:`SHARDS_ANNOTATION` = N, written now if
        it did not (created without a spec if there is none: a Lease never held holds nothing
        back). Written as listed, with its ``resourceVersion``: a single leader that took the
        Lease since makes it a Conflict, and no shard is taken this round. False when it could
        not be written: no shard is taken before a single leader can see them."""
        count = str(self._o.shards)
        annotations = dict(objects.meta(single).get("annotations") or {}) if single else {}
        if annotations.get(SHARDS_ANNOTATION) == count:
            return True
        annotations[SHARDS_ANNOTATION] = count
        try:
            if single is None:
                self._api.create(
                    objects.LEASES,
                    {
                        "apiVersion": objects.LEASES.api_version,
                        "kind": objects.LEASES.kind,
                        "metadata": {
                            "name": self._o.id,
                            "namespace": self._o.namespace,
                            "annotations": annotations,
                        },
                    },
                    namespace=self._o.namespace,
                )
            else:
                self._api.replace(
                    objects.LEASES,
                    {**single, "metadata": {**objects.meta(single), "annotations": annotations}},
                )
        except (errors.Conflict, errors.AlreadyExists):
            return False  # changed since listed: judged again next round
        except errors.ApiError as exc:
            self._log.warning("shards.mark_failed", lease=self._o.id, error=str(exc))
            return False
        self._log.info("shards.marked", lease=self._o.id)
        return True

    def _other_schemes(self, leases: dict[str, Body], *, listed: bool = True) -> dict[str, Body]:
        """The Leases of another scheme over the same objects, by name: the single leader's
        (``--shards 1``: the Lease named ``--leader-election-id``) and the shard Leases of
        another shard count (``<id>-shard-<i>-of-<M>``, M not N: a change of N under way,
        whose shards overlap these). Forgets what it remembered of a Lease now gone — known
        only from a list (``listed``): read by name, the other count's Leases are not read,
        and forgetting them would make a dead one look new (held back for twice its duration)
        once the list is answered again."""
        found = {}
        for name, lease in leases.items():
            parsed = parse_shard_lease(self._o.id, name)
            if name == self._o.id or (parsed is not None and parsed[1] != self._o.shards):
                found[name] = lease
        if listed:
            self._others.keep_only(found)
        return found

    def _waited_out(
        self,
        single: Body,
        leases: dict[str, Body],
        holdings: dict[int, shareplan.Holding | None],
        now: float,
    ) -> bool:
        """Whether the single leader's Lease has stood unwritten for a full lease duration, as
        another replica's shard shows: a shard held by another replica (live by its elector's
        rule) whose Lease was taken (``acquireTime``) more than the lease duration (the longer
        of the single leader's ``leaseDurationSeconds`` and this replica's) after the single
        leader's Lease was last written (``renewTime``). A single leader writes ``renewTime``
        at every take and renewal, and renews within its renew deadline or stops; an old
        standby takes a released Lease at its next retry. So a Lease unwritten for that long
        has no single leader at work nor one about to take it — and once one writes it again,
        its ``renewTime`` passes every ``acquireTime`` taken before, and everything is held back
        as before. The evidence is the two timestamps, not the taker's own judgement (it may
        itself have been let through by this rule, or be dead since: the times stay true).

        Without this, a replica that starts beside running shards shortly after an upgrade (a
        Pod deleted and replaced) sees the single leader's Lease for the first time and waits
        the full duration, or twice it for a leader that was killed, however long ago: the
        kind suite's replacement waited 16 s while it counted in the others' shares, so the
        shards it was to take were held by no one meanwhile. The times are two writers' wall
        clocks: a skew below the lease duration cannot make a shard taken while a single leader
        wrote its Lease look taken a lease duration after. ``single`` may also be a shard Lease
        of another shard count (:meth:`OtherLeases.may_work`): the same evidence holds for it."""
        spec: dict[str, object] = dict(single.get("spec") or {})
        renewed = clocks.read_rfc3339(spec.get("renewTime"))
        if renewed is None:
            return False
        try:
            # a release writes leaseDurationSeconds 1: this replica's duration, at least, so a
            # shard taken within it (a clock a few seconds ahead, an acquire begun earlier and
            # slow) is no evidence
            expired_at = renewed + max(
                float(str(spec.get("leaseDurationSeconds") or 0)), self._o.lease_duration
            )
        except ValueError:
            return False
        for i, holding in holdings.items():
            if holding is None or holding.holder == self._o.identity or not holding.held(now):
                continue
            lease = leases.get(self._o.shard_lease(i)) or {}
            acquired = clocks.read_rfc3339(dict(lease.get("spec") or {}).get("acquireTime"))
            if acquired is not None and acquired > expired_at:
                return True
        return False

    def _holdings(self) -> dict[int, shareplan.Holding | None]:
        """Each shard's Lease as this replica sees it: its own while it holds it (given back or
        not yet), else the holder its elector last saw, live while its elector's rule says."""
        with self._lock:
            mine = set(self._held)
        out: dict[int, shareplan.Holding | None] = {}
        for i, elector in enumerate(self._electors):
            if i in mine:
                out[i] = shareplan.Holding(self._o.identity, float("inf"))
                continue
            seen = elector.observed()
            out[i] = None if seen is None or not seen[0] else shareplan.Holding(*seen)
        return out

    def _live_members(self, leases: dict[str, Body], now: float) -> list[str]:
        """The holders of live membership Leases (this replica always among them). Live: changed
        within its ``leaseDurationSeconds`` as seen here, and — on first sight — renewed that
        recently by the wall clock (a Lease left by a replica long gone is not live)."""
        wall = self._clock.now()
        seen: dict[str, tuple[dict[str, object], float]] = {}
        live = [self._o.identity]
        for name, lease in leases.items():
            if not name.startswith(self._o.members_prefix):
                continue
            spec: dict[str, object] = dict(lease.get("spec") or {})
            before = self._members.get(name)
            observed_at = before[1] if before is not None and before[0] == spec else now
            seen[name] = (spec, observed_at)
            holder = str(spec.get("holderIdentity") or "")
            duration = float(str(spec.get("leaseDurationSeconds") or self._o.lease_duration))
            renewed = clocks.read_rfc3339(spec.get("renewTime"))
            renewed_at = wall if renewed is None else renewed  # unread: by its changes alone
            if holder and now < observed_at + duration and wall < renewed_at + duration:
                if name.startswith(self._o.member_prefix):  # a replica with this shard count
                    live.append(holder)
            elif now >= observed_at + STALE_MEMBER and wall >= renewed_at + STALE_MEMBER:
                # a replica gone long ago (each start has an identity of its own): its Lease
                # would be listed every round for ever; deleted only if unchanged since read
                rv = str(objects.meta(lease).get("resourceVersion") or "")
                if rv and self._delete_member(name, rv):
                    seen.pop(name, None)
        self._members = seen
        return sorted(set(live))

    def _delete_member(self, name: str, resource_version: str | None) -> bool:
        """Deletes a membership Lease (this replica's at its stop, or one long dead); a failure
        is only logged: a Lease left behind is harmless, as it is not live."""
        try:
            self._api.delete(
                objects.LEASES,
                name,
                namespace=self._o.namespace,
                resource_version=resource_version,
            )
        except errors.NotFound:
            return True
        except errors.ApiError as exc:
            self._log.info("shards.member_lease_kept", lease=name, error=str(exc))
            return False
        self._log.info("shards.member_lease_deleted", lease=name)
        return True

    # --- taking, giving back, losing ---------------------------------------------------------

    def _take(self, index: int, *, by_size: bool, free: Sequence[int]) -> None:
        """Holds shard ``index`` (its Lease just taken) and starts its work. The log says
        whether it was placed by size and which shards were free in the round that took it:
        shards that fall free in different rounds (a dead holder's Leases renewed apart) are
        placed one round at a time, each among those free then (docs/operations.md). The free
        shards are listed up to :data:`.shardsizes.MAX_SHARDS` of them (beyond, no placement
        by size is made, and a start's log would hold shards² numbers), counted always."""
        elector = self._electors[index]
        held = _Held(index, elector, threading.Thread())
        held.renewing = threading.Thread(
            target=elector.hold,
            args=(held.stop_renewing,),
            name=f"shard-{index}-lease",
            daemon=True,
        )
        with self._lock:
            self._held[index] = held
            count = len(self._held)
        self._held_gauge(count)
        self._log.info(
            "shards.taken",
            shard=index,
            lease=self._o.shard_lease(index),
            by_size=by_size,
            free=list(free) if len(free) <= shardsizes.MAX_SHARDS else None,
            free_count=len(free),
        )
        held.renewing.start()
        held.starter = threading.Thread(
            target=self._start_shard, args=(held,), name=f"shard-{index}-start", daemon=True
        )
        held.starter.start()

    def _start_shard(self, held: _Held) -> None:
        try:
            shard = self._build(held.index)
            with held.lock:
                given_back = held.stopping
                if not given_back:
                    held.shard = shard
                    shard.start_cache()
            if given_back:  # built, never run, and no one else will close it: its series go
                shard.close()
                return
            deadline = self._clock.monotonic() + self._o.cache_sync_timeout
            while not shard.cache.wait_for_sync(0.5):
                if held.halted():
                    return
                if self._clock.monotonic() > deadline:
                    self._log.error("shards.cache_sync_timeout", shard=held.index)
                    self._give_back(held.index)
                    return
            self._log_mode(shard)
            if shard.start_controllers():
                held.ready.set()
                self._report(self._o.shard_lease(held.index), True)
                self._log.info("shards.started", shard=held.index)
        except Exception:
            self._log.exception("shards.start_failed", shard=held.index)
            self._give_back(held.index)

    def _log_mode(self, shard: Shard) -> None:
        """Once per process: which side filters the shards' objects. The feature gate is the
        API server's, for every kind: one list that echoed the selector says the server filters
        them all — a v1.36 server echoes on the full lists of built-in kinds only, and filters
        custom resources and metadata-only lists without a word (tests/e2e/test_sharding.py).
        Either way this side tests every object again, so the mode is a figure, not a
        guarantee."""
        if self._mode_logged:
            return
        self._mode_logged = True
        modes = shard.cache.filtering()
        mode = "server-side" if "server-side" in modes else "client-side"
        self._log.info("shards.filtering", mode=mode, shard=shard.index)

    def _give_back(self, index: int) -> None:
        """Drains shard ``index`` and releases its Lease, on a thread of its own."""
        with self._lock:
            held = self._held.get(index)
        if held is None:
            return
        with held.lock:
            if held.stopping:
                return
            held.stopping = True
        self._log.info("shards.giving_back", shard=index)
        threading.Thread(
            target=self._drain_and_release, args=(held,), name=f"shard-{index}-release", daemon=True
        ).start()

    def _drain_and_release(self, held: _Held) -> bool:
        """Stops the shard's work while its Lease is still renewed, then releases the Lease;
        True if every reconcile finished and the Lease was released."""
        shard = self._wait_for_starter(held, self._o.graceful_shutdown_timeout)
        drained = shard is None or shard.stop_controllers(self._o.graceful_shutdown_timeout)
        if held.lost:
            return False  # the loss handles it
        held.stop_renewing.set()
        held.renewing.join(self._o.renew_deadline)  # an attempt in flight is bounded by it
        released = False
        if not drained:  # the process ends; its series stay while reconciles may still set them
            self._fail(f"shard {held.index}: reconciles still running when it was given back")
            return False
        if not held.renewing.is_alive() and not held.lost:
            released = held.elector.release()
        self._forget(held, shard)
        self._log.info("shards.given_back", shard=held.index, drained=drained, released=released)
        return drained and released

    def _lose(self, index: int, why: str) -> None:
        """The Lease of shard ``index`` was not renewed in time: stop its work at once."""
        with self._lock:
            held = self._held.get(index)
        if held is None:
            return
        with held.lock:
            if held.lost:
                return
            held.lost = True
            held.stopping = True
        self._log.error("shards.lost", shard=index, why=why)
        threading.Thread(
            target=self._stop_lost, args=(held,), name=f"shard-{index}-lost", daemon=True
        ).start()

    def _stop_lost(self, held: _Held) -> None:
        grace = max(0.0, (self._o.lease_duration - self._o.renew_deadline) / 2)
        end = self._clock.monotonic() + grace
        shard = self._wait_for_starter(held, grace)
        left = max(0.0, end - self._clock.monotonic())
        stopped = (held.starter is None or not held.starter.is_alive()) and (
            shard is None or shard.stop_controllers(left)
        )
        if not stopped:
            self._fail(
                f"shard {held.index} lost, and its reconciles did not stop within {grace:g} s"
            )
            return
        held.stop_renewing.set()
        self._forget(held, shard)

    def _wait_for_starter(self, held: _Held, timeout: float) -> Shard | None:
        if held.starter is not None:
            held.starter.join(timeout)
        with held.lock:
            return held.shard

    def _forget(self, held: _Held, shard: Shard | None) -> None:
        with held.lock:  # once: a loss during a give-back would come here a second time
            if held.forgotten:
                return
            held.forgotten = True
        self._report(self._o.shard_lease(held.index), False)
        if shard is not None:
            shard.close()
        with self._lock:
            if self._held.get(held.index) is held:
                del self._held[held.index]
            count = len(self._held)
        self._held_gauge(count)

    def _fail(self, why: str) -> None:
        self._log.error("shards.fatal", why=why)
        self.fatal_why = why
        self.fatal.set()

    def check_overdue(self) -> None:
        """A held shard whose elector is past its renew deadline (stuck in a request) or whose
        renewing thread ended is lost, whether or not the elector said so."""
        with self._lock:
            held = list(self._held.values())
        for h in held:
            if h.lost or h.stop_renewing.is_set():
                continue
            if h.elector.overdue():
                self._lose(h.index, "past the renew deadline")
            elif h.renewing.ident is not None and not h.renewing.is_alive():
                self._lose(h.index, "its renewing thread ended")

    # --- stopping ----------------------------------------------------------------------------

    def shutdown(self) -> bool:
        """Gives back every shard (drained, then released), then the membership Lease; True
        if every reconcile finished."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self._o.renew_deadline + self._o.retry_period)
        with self._lock:
            every = list(self._held.values())
        held = []  # those not being given back or lost already (their own threads end them)
        for h in every:
            with h.lock:
                if not h.stopping:
                    h.stopping = True
                    held.append(h)
        results: dict[int, bool] = {}

        def drain(h: _Held) -> None:
            results[h.index] = self._drain_and_release(h)

        threads = [threading.Thread(target=drain, args=(h,), daemon=True) for h in held]
        for thread in threads:
            thread.start()
        budget = self._o.graceful_shutdown_timeout + self._o.renew_deadline + 2.0
        end = time.monotonic() + budget  # real seconds: how long this stop may take
        for thread in threads:
            thread.join(budget)
        while self.held() and time.monotonic() < end and not self.fatal.is_set():
            self._stop.wait(0.05)  # the shards given back or lost before, on their own threads
        if self._member_thread is not None:
            self._member_thread.join(self._o.renew_deadline)
        if self._member is not None:
            self._member.release()
        self._delete_member(self._o.member_lease, None)
        drained = len(results) == len(held) and all(results.values()) and not self.held()
        self._log.info("shards.stopped", drained=drained)
        return drained and not self.fatal.is_set()


def _held_at(holding: shareplan.Holding | None, now: float) -> bool:
    return holding is not None and holding.held(now)


class ShardedManager:
    """A replica with shards: the :class:`~.manager.Manager` runs what is shared (metrics and
    probe servers, the Event recorder), with no controllers of its own; the
    :class:`Coordinator` runs the shards."""

    def __init__(
        self,
        mgr: managers.Manager,
        options: ShardOptions,
        *,
        register: Callable[[Shard], object],
        prefix: str = "rotator",
        sized_by: objects.Resource | None = None,
    ) -> None:
        """``sized_by``: the kind whose count per shard is its size, for placing free shards by
        size (:mod:`.shardsizes`); None, or a replica that watches some namespaces only, places
        them by index."""
        if not mgr.metrics.sharded:
            raise ValueError(
                "a sharded replica's metrics need Metrics(sharded=True): its controllers' series "
                "carry a shard label"
            )
        self._mgr = mgr
        self.options = options
        held = Gauge(
            f"{prefix}_shards_held",
            "Shards whose Lease this replica holds (sharded replicas: --shards)",
            registry=mgr.metrics.registry,
        )
        held.set(0)
        forbidden = Gauge(
            f"{prefix}_shards_lease_list_forbidden",
            "1 while this replica may not list the Leases of its namespace (the sharding Role "
            "is missing: expected only on the way back to one leader), else 0",
            registry=mgr.metrics.registry,
        )
        forbidden.set(0)
        configured = Gauge(
            f"{prefix}_shards",
            "Shards the replicas share (--shards): the sum of rotator_shards_held once settled",
            registry=mgr.metrics.registry,
        )
        configured.set(options.shards)

        def build(index: int) -> Shard:
            shard = Shard(
                index,
                options.shards,
                api=mgr.api,
                metrics=mgr.metrics,
                recorder=mgr.recorder,
                clock=mgr.clock,
                namespaces=mgr.options.namespaces,
                informer=mgr.options.informer,
            )
            try:
                register(shard)
            except BaseException:
                shard.close()  # the controllers built before the failure made series
                raise
            return shard

        self.coordinator = Coordinator(
            mgr.api,
            options,
            build=build,
            held_gauge=held.set,
            forbidden_gauge=forbidden.set,
            report=lambda lease, holding: mgr.metrics.leader.labels(lease).set(int(holding)),
            sizes=(
                shardsizes.ShardSizes(
                    mgr.api,
                    sized_by,
                    options.shards,
                    lease_namespace=options.namespace,
                    timeout=options.renew_deadline,
                    max_age=options.lease_duration,
                    retry_after=options.lease_duration,
                    clock=mgr.clock,
                )
                # watching some namespaces only (--namespace): the count is cluster-wide, which
                # their Roles do not allow and which would count namespaces it never serves
                if sized_by is not None and not mgr.options.namespaces
                else lambda: None
            ),
            clock=mgr.clock,
        )
        mgr.probes.add_readyz("shards", self._ready)
        mgr.probes.add_healthz("shards", self.coordinator.problem)

    def _ready(self) -> str | None:
        pending = self.coordinator.unready()
        return f"shards not synced: {', '.join(map(str, pending))}" if pending else None

    def run(self, stop: threading.Event) -> int:
        """Runs until ``stop``; returns the exit code (1: the process must end now)."""
        shared_stop = threading.Event()
        codes: list[int] = []
        shared = threading.Thread(
            target=lambda: codes.append(self._mgr.run(shared_stop)), name="manager", daemon=True
        )
        shared.start()
        while not self._mgr.cache.has_synced():  # the shared parts are up (it holds no informer)
            if not shared.is_alive() or stop.wait(0.1):
                shared_stop.set()
                shared.join()
                return managers.EXIT_FAILED if codes != [managers.EXIT_OK] else managers.EXIT_OK
        self.coordinator.start()
        while not stop.is_set() and shared.is_alive():
            if self.coordinator.fatal.wait(0.1):
                return managers.EXIT_FAILED  # the caller ends the process, and every reconcile
            self.coordinator.check_overdue()
        drained = self.coordinator.shutdown()
        shared_stop.set()
        shared.join()
        ok = drained and codes == [managers.EXIT_OK]
        return managers.EXIT_OK if ok else managers.EXIT_FAILED
