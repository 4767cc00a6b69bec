"""Benchmark: shards (issue 34). One replica against three replicas sharing six shards, with the
API server filtering (``ShardedListAndWatch`` on) and without (each replica filters on its own
side), in one run. Prints figures and the issue's goals as ratios; asserts nothing.

    make bench-shards    (or: KUBEBUILDER_ASSETS=... python -m tests.bench.shards
                          --chains 30000 --unrelated 50000)

Each setup gets a control plane of its own (the gate is an API server flag), built the same way:
K API-key chains (Secret → policy → backend → route) in ``--chain-namespaces`` namespaces and M
unrelated 4 KiB Secrets in ``--unrelated-namespaces`` others (tests/support/scale.py's fleet,
with names that spread over the shards as tenants' would). A fresh cluster per setup, because
its cold start is measured: a second setup on the same cluster would find every chain already
Ready. The setups:

* ``1 replica``: ``rotator run --leader-elect``, one leader, as today;
* ``3x6, gate off``: three ``rotator run --shards 6`` replicas; the API server ignores the
  ``shardSelector``, each replica's informers receive every object and keep their shards';
* ``3x6, gate on``: the same against an API server with ``--feature-gates=ShardedListAndWatch
  =true``, which sends each informer its shards' objects only.

Every replica runs as its own process, as the controller's ServiceAccount (config/rbac, and
config/sharding for the sharded ones), logging at info, with the Lease timing as deployed, and
talks to the API server through a proxy of its own (tests/support/apiproxy.py) that counts the
response bytes it receives by request: the informers' lists and watches, the Leases (renewals,
and a sharded replica's list of them every retry period), other (writes, GETs).
Per setup the run measures:

* idle: each replica started on the cluster before any object exists, until it leads (or its
  shards are shared out and synced) and nothing is queued: its RSS. Then stopped (gracefully);
* the cold start: the fleet is built, the replicas start together; seconds from the spawn to
  every policy ``Ready`` and every route ``Programmed`` (a watch of the benchmark's own sees
  it), and to every replica idle with each chain reconciled; then each replica's RSS (and
  peak), its shards and their chains, and the bytes it received since its spawn;
* sharded setups, the takeover: one replica (the first) is sent SIGKILL; seconds until the
  Leases of its shards have another holder (the Leases, polled every 0.1 s), and until the
  survivors have reconciled every chain of those shards and are idle (polled every second or
  so: that figure is good to about a second); the survivors' RSS and the bytes the takeover
  cost them.

The goals, printed as ratios (≤ 1 meets the goal):

* RSS: each sharded replica ≤ its idle RSS + (the 1 replica's loaded - idle RSS) / 3 x 1.1;
* bytes: with the gate on, each replica's list and watch bytes ≤ 40 % of the 1 replica's;
* takeover: ≤ the Lease duration + the cold start of 2 of 6 shards, taken as the setup's own
  cold start (three replicas starting two shards each) to every chain Ready.

"logged mode" is what each sharded replica logged once (``shards.filtering``): server-side once
any list of its first shard echoed ``metadata.shardInfo`` (the v1.36.3 API server with the gate
filters every list and watch but echoes ``shardInfo`` only on full lists of built-in kinds; the
gate is server-wide, so one echo tells); its list and watch bytes show what the server did.

The chains a replica holds follow the hash of the namespaces its shards got, so a replica's
share (printed beside its RSS) is a third only on average: the default 300 namespaces (the same
names at every scale) put 13.7 % to 19.0 % of the chains in each of six shards, so two shards hold
28 % to 38 %. With the gate on the replicas place the free shards by size (shareplan.assign_free:
each counts the shards' policies as it starts), which pairs these six at 32.7 %, 33.3 % and 34.0 %,
the best pairing there is; with it off, by index.

Every process the run starts (control planes, replicas, proxies) is stopped when it ends,
fails, or is interrupted (Ctrl-C, SIGTERM); interrupted, it still prints the figures of the
setups it measured to the end.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import resource
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Self

from controllers import logs
from controllers.reconcilers import api as rapi
from controllers.runtime import client as clients
from controllers.runtime import objects, restconfig, sharding
from controllers.runtime.informer import Informer
from controllers.runtime.objects import Body, Resource
from controllers.runtime.shards import shard_lease_name
from rotator_devkit.controlplane import assets
from rotator_devkit.controlplane.cluster import ControlPlaneOptions, LocalControlPlane
from rotator_devkit.devenv import manifests
from tests.bench.figures import MIB, machine, row
from tests.support import scale
from tests.support.apiproxy import APIProxy
from tests.support.controller import ControllerProcess
from tests.support.polling import wait_for
from tests.support.reconcilelog import entries
from tests.support.recording import LatestStates

GATE = "--feature-gates=ShardedListAndWatch=true"
LEASE_ID = "rotator-leader-election"
LEASE_DURATION = 15.0
"""``rotator run``'s default (and the chart's): the benchmark runs the Lease timing as deployed."""
RSS_SLACK = 1.1
BYTES_GOAL = 0.40
KINDS = ("list", "watch", "leases", "other")
"""What the proxies count bytes by (tests/support/apiproxy.py's ``request_kind``)."""


@dataclass(frozen=True)
class Setup:
    name: str
    replicas: int
    shards: int
    """1: one leader, no shards."""
    gate: bool

    @property
    def sharded(self) -> bool:
        return self.shards > 1


def setups(replicas: int, shards: int) -> dict[str, Setup]:
    """By the names ``--setups`` takes."""
    each = f"{replicas}x{shards}"
    return {
        "single": Setup("1 replica", 1, 1, gate=False),
        "off": Setup(f"{each}, gate off", replicas, shards, gate=False),
        "on": Setup(f"{each}, gate on", replicas, shards, gate=True),
    }


# --- what the benchmark watches ------------------------------------------------------------------


class FirstTrue(LatestStates):
    """When each object of ``resource`` first had condition ``type_`` True, from a watch of the
    benchmark's own (not through a replica's proxy). Keeps only that condition of each."""

    def __init__(
        self,
        api: clients.Client,
        resource: Resource,
        type_: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._type, self._clock = type_, clock
        self._lock = threading.Lock()
        self._since: dict[str, float] = {}
        self._informer = Informer(api, resource, transform=self._keep)
        self._informer.add_handler(self)

    def _keep(self, obj: Body) -> Body:
        md = obj.get("metadata") or {}
        conditions = (obj.get("status") or {}).get("conditions") or []
        return {
            "metadata": {k: md[k] for k in ("name", "namespace", "resourceVersion") if k in md},
            "status": {"conditions": [c for c in conditions if c.get("type") == self._type]},
        }

    def record(self, obj: Body) -> None:
        conditions = (obj.get("status") or {}).get("conditions") or []
        if any(c.get("status") == "True" for c in conditions):
            key = f"{objects.namespace(obj)}/{objects.name(obj)}"
            with self._lock:
                self._since.setdefault(key, self._clock())

    def __enter__(self) -> Self:
        self._informer.start()
        wait_for(self._informer.has_synced, timeout=600, what=f"the {self._type} watch")
        return self

    def __exit__(self, *exc: object) -> None:
        self._informer.stop()

    def count(self) -> int:
        with self._lock:
            return len(self._since)

    def last(self) -> float:
        with self._lock:
            return max(self._since.values(), default=0.0)


def lease_holders(api: clients.Client, shards: int) -> dict[int, str]:
    """Shard → the holder of its Lease ("" when free or not created yet): one list."""
    listed = api.list(objects.LEASES, namespace=manifests.NAMESPACE).get("items") or []
    by_name = {objects.name(lease): lease for lease in listed}
    out = {}
    for i in range(shards):
        lease = by_name.get(shard_lease_name(LEASE_ID, i, shards)) or {}
        out[i] = str((lease.get("spec") or {}).get("holderIdentity") or "")
    return out


# --- the replicas --------------------------------------------------------------------------------


@dataclass
class Replica:
    """One ``rotator run`` process behind its byte-counting proxy, and its figures."""

    index: int
    process: ControllerProcess
    proxy: APIProxy
    idle_rss: int = 0
    rss: int = 0
    peak_rss: int = 0
    shards: list[int] = field(default_factory=list)
    chains: int = 0
    received: dict[str, int] = field(default_factory=dict)
    """Response bytes by request kind, from the spawn of the cold start to the replica idle."""
    filtering: str = "-"

    @property
    def pid(self) -> int:
        return scale.controller_pid(self.process)

    def held(self, setup: Setup) -> list[int]:
        """The shards whose Lease this replica holds, from its own metrics."""
        return [
            i
            for i in range(setup.shards)
            if self.process.metric(
                "leader_election_master_status", name=shard_lease_name(LEASE_ID, i, setup.shards)
            )
            == 1
        ]

    def ready(self) -> bool:
        proc = self.process.proc
        return proc is not None and proc.http(proc.probe_port, "/readyz")[0] == 200

    def close(self) -> None:
        """Ends the process if it still runs (SIGKILL): for failures and interrupts."""
        if self.process.proc is not None:
            self.process.proc.close()
            self.process.proc = None


def received_since(proxy: APIProxy, before: dict[str, int]) -> dict[str, int]:
    now = proxy.received()
    return {kind: now.get(kind, 0) - before.get(kind, 0) for kind in KINDS}


def start_all(replicas: Sequence[Replica], setup: Setup, timeout: float) -> None:
    """Spawns every replica at once (a Deployment's Pods start together: one spawned seconds
    before the others would take every shard and hand most back) and waits until each is
    ready."""
    errors: list[BaseException] = []

    def start(r: Replica) -> None:
        try:
            r.process.start(leader_elect=not setup.sharded, ready_timeout=timeout)
        except BaseException as exc:  # raised again below, in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(r,)) for r in replicas]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def shared_out(replicas: Sequence[Replica], setup: Setup) -> bool:
    """Every shard held, fairly (counts differ by at most 1), and every replica ready."""
    counts = [r.process.metric("rotator_shards_held") or 0 for r in replicas]
    return (
        sum(counts) == setup.shards
        and max(counts) - min(counts) <= 1
        and all(r.ready() for r in replicas)
    )


def settled(replicas: Sequence[Replica], setup: Setup, timeout: float) -> None:
    """Leading, or the shards shared out; then nothing queued or running anywhere."""
    if setup.sharded:
        wait_for(
            lambda: shared_out(replicas, setup),
            timeout=timeout,
            interval=0.5,
            what="the shards shared out",
        )
    wait_for(
        lambda: all(r.process.idle() for r in replicas),
        timeout=timeout,
        interval=scale.SCRAPE_INTERVAL,
        what="the replicas idle",
    )


def filtering(replica: Replica) -> str:
    """How the replica's shards were filtered, as it logged once per start (the last start's)."""
    modes = [
        str(e.get("mode"))
        for _, e in entries(replica.process.logs())
        if e.get("event") == "shards.filtering"
    ]
    return modes[-1] if modes else "-"


# --- one setup -----------------------------------------------------------------------------------


@dataclass
class Takeover:
    shards: list[int]
    chains: int
    lease: float
    """Seconds from the SIGKILL to every one of its shards' Leases held by another replica."""
    reconciled: float
    """Seconds from the SIGKILL to the survivors idle, every chain of those shards reconciled."""
    survivors: list[tuple[int, int, list[int], dict[str, int]]]
    """Each survivor's index, RSS afterwards, shards, and the bytes the takeover cost it."""


@dataclass
class Result:
    setup: Setup
    replicas: list[Replica]
    build: float = 0.0
    ready: float = 0.0
    """Seconds from the spawn to every policy Ready and route Programmed."""
    idle: float = 0.0
    """Seconds from the spawn to every chain reconciled and every replica idle."""
    control_plane_rss: int = 0
    """etcd, kube-apiserver and kube-controller-manager together, after the cold start."""
    takeover: Takeover | None = None


def measure(setup: Setup, args: argparse.Namespace, workdir: Path) -> Result:
    """Runs one setup on a control plane of its own; every process it starts ends with it."""
    print(f"\n== {setup.name}", flush=True)
    fleet = scale.Fleet(
        args.chains,
        args.unrelated,
        chains_per_namespace=math.ceil(args.chains / args.chain_namespaces),
        unrelated_per_namespace=max(1, math.ceil(args.unrelated / args.unrelated_namespaces)),
        spread=True,
    )
    options = ControlPlaneOptions(extra_apiserver_flags=(GATE,) if setup.gate else ())
    with contextlib.ExitStack() as stack:
        cp = stack.enter_context(LocalControlPlane(assets.find(), options))
        api = clients.Client(restconfig.load(str(cp.kubeconfig), pool_size=2 * args.threads))
        fleet.install(api)
        if setup.sharded:
            manifests.apply(
                api,
                manifests.kustomize(
                    manifests.load(manifests.CONFIG / "sharding"),
                    namespace=manifests.NAMESPACE,
                    prefix=manifests.NAME_PREFIX,
                ),
            )
        flags: tuple[str, ...] = ()
        if setup.sharded:
            flags = ("--shards", str(setup.shards), "--leader-election-id", LEASE_ID)
            flags += ("--leader-election-namespace", manifests.NAMESPACE)
        replicas: list[Replica] = []
        for n in range(setup.replicas):
            proxy = APIProxy(cp.server, cp.ca_file, workdir / f"proxy-{n}").start()
            stack.callback(proxy.stop)
            home = workdir / f"replica-{n}"
            home.mkdir(parents=True)
            process = scale.controller_process(cp, api, home, flags, via=proxy)
            replica = Replica(n, process, proxy)
            stack.callback(replica.close)  # runs before the proxy stops, the control plane last
            replicas.append(replica)
        result = Result(setup, replicas)

        # idle: no object yet
        start_all(replicas, setup, args.timeout)
        settled(replicas, setup, args.timeout)
        for r in replicas:
            r.idle_rss = scale.rss_bytes(r.pid)
        for r in replicas:
            r.process.stop()
        print(f"idle RSS: {', '.join(f'{r.idle_rss / MIB:.0f}' for r in replicas)} MiB", flush=True)

        started = time.monotonic()
        fleet.build_chains(api, args.threads)
        fleet.create_unrelated(api, args.threads)
        result.build = time.monotonic() - started
        print(f"built {args.chains} chains, {args.unrelated} Secrets in {result.build:.0f} s")

        # the cold start
        with (
            FirstTrue(api, rapi.POLICIES, rapi.READY) as ready,
            FirstTrue(api, rapi.ROUTES, rapi.PROGRAMMED) as programmed,
        ):
            before = [r.proxy.received() for r in replicas]
            spawned = time.monotonic()
            start_all(replicas, setup, args.timeout)
            wait_for(
                lambda: ready.count() >= args.chains and programmed.count() >= args.chains,
                timeout=args.timeout,
                interval=0.2,
                what=f"{args.chains} policies Ready and routes Programmed",
            )
            result.ready = max(ready.last(), programmed.last()) - spawned
        scale.settle_all([r.process for r in replicas], args.chains, timeout=args.timeout)
        if setup.sharded:
            settled(replicas, setup, args.timeout)
        result.idle = time.monotonic() - spawned
        result.control_plane_rss = scale.control_plane_rss(cp)
        print(f"cold start: all Ready {result.ready:.1f} s, idle {result.idle:.1f} s", flush=True)
        namespaces = [fleet.chain_namespace(i) for i in range(args.chains)]
        for r, b in zip(replicas, before, strict=True):
            r.received = received_since(r.proxy, b)
            r.rss, r.peak_rss = scale.rss_bytes(r.pid), scale.peak_rss_bytes(r.pid)
            r.shards = r.held(setup) if setup.sharded else []
            r.chains = (
                sum(1 for ns in namespaces if sharding.shard_of(ns, setup.shards) in r.shards)
                if setup.sharded
                else args.chains
            )
            r.filtering = filtering(r) if setup.sharded else "-"

        if setup.sharded:
            result.takeover = take_over(api, replicas, setup, namespaces, args.timeout)
        for r in replicas:
            if r.process.proc is not None:
                r.process.stop()
    return result


def take_over(
    api: clients.Client,
    replicas: list[Replica],
    setup: Setup,
    namespaces: Sequence[str],
    timeout: float,
) -> Takeover:
    """SIGKILL to the first replica; the survivors take its shards over."""
    victim, survivors = replicas[0], replicas[1:]
    lost = list(victim.shards)
    holders = lease_holders(api, setup.shards)
    gone = {holders[i] for i in lost}
    moved = sum(1 for ns in namespaces if sharding.shard_of(ns, setup.shards) in lost)
    since = {
        name: sum(scale.reconciles(s.process, name) for s in survivors)
        for name in scale.CHAIN_CONTROLLERS
    }
    before = [s.proxy.received() for s in survivors]
    killed = time.monotonic()
    os.kill(victim.pid, signal.SIGKILL)
    victim.close()

    def taken() -> float | None:
        now = lease_holders(api, setup.shards)
        return time.monotonic() if all(now[i] not in ("", *gone) for i in lost) else None

    lease = (
        wait_for(taken, timeout=timeout, interval=0.1, what="the killed replica's Leases") - killed
    )
    print(f"takeover: Leases taken {lease:.1f} s after the SIGKILL", flush=True)
    scale.settle_all([s.process for s in survivors], moved, timeout=timeout, since=since)
    settled(survivors, setup, timeout)
    reconciled = time.monotonic() - killed
    print(f"takeover: {moved} chains reconciled {reconciled:.1f} s after the SIGKILL", flush=True)
    return Takeover(
        shards=lost,
        chains=moved,
        lease=lease,
        reconciled=reconciled,
        survivors=[
            (s.index, scale.rss_bytes(s.pid), s.held(setup), received_since(s.proxy, b))
            for s, b in zip(survivors, before, strict=True)
        ],
    )


# --- the report ----------------------------------------------------------------------------------


def mib(count: float) -> str:
    return f"{count / MIB:.1f}"


def list_watch(received: dict[str, int]) -> int:
    return received.get("list", 0) + received.get("watch", 0)


def report(results: Sequence[Result], args: argparse.Namespace) -> None:
    print(
        f"\nshards: {args.chains} API-key chains in {args.chain_namespaces} namespaces, "
        f"{args.unrelated} unrelated 4 KiB Secrets in {args.unrelated_namespaces} namespaces"
    )
    print(f"machine: {machine()}")
    print(f"Leases as deployed: {LEASE_DURATION:g} s duration, 10 s renew deadline, 2 s retry")
    print(
        f"\n  {'setup':<22} {'build s':>8} {'all Ready s':>12} {'idle s':>8} "
        f"{'control plane RSS MiB':>22}"
    )
    for res in results:
        print(
            f"  {res.setup.name:<22} {res.build:>8.0f} {res.ready:>12.1f} {res.idle:>8.1f} "
            f"{mib(res.control_plane_rss):>22}"
        )
    print(
        f"\n  {'setup':<22} {'replica':>7} {'shards':>7} {'chains':>7} {'RSS idle':>9} "
        f"{'RSS':>6} {'peak':>6} {'list':>7} {'watch':>7} {'leases':>7} {'other':>7}  logged mode"
    )
    print(f"  {'':<22} {'':>7} {'':>7} {'':>7} {'MiB':>9} {'MiB':>6} {'MiB':>6} "
          + " ".join(f"{'MiB':>7}" for _ in KINDS))  # fmt: skip
    for res in results:
        for r in res.replicas:
            shards = ",".join(map(str, r.shards)) or "all"
            print(
                f"  {res.setup.name:<22} {r.index:>7} {shards:>7} {r.chains:>7} "
                f"{mib(r.idle_rss):>9} {mib(r.rss):>6} {mib(r.peak_rss):>6} "
                + " ".join(f"{mib(r.received.get(kind, 0)):>7}" for kind in KINDS)
                + f"  {r.filtering}"
            )
    for res in results:
        t = res.takeover
        if t is None:
            continue
        print(
            f"\n  takeover, {res.setup.name}: SIGKILL of replica 0 (shards "
            f"{','.join(map(str, t.shards))}, {t.chains} chains)"
        )
        row("  Leases taken by the survivors", f"{t.lease:.1f} s")
        row("  their chains reconciled, survivors idle", f"{t.reconciled:.1f} s")
        for index, rss, held, received in t.survivors:
            row(
                f"  replica {index}: shards {','.join(map(str, held))}",
                f"RSS {mib(rss)} MiB; the takeover's list {mib(received['list'])} MiB, "
                f"watch {mib(received['watch'])} MiB",
            )
    goals(results)


def held_shares(one: Replica, res: Result) -> None:
    """Figures beside the RSS goal, whose bound gives each replica a third of the 1 replica's
    load: shards split namespaces by hash, so a replica holds its shards' share, not a third.
    Per replica: MiB over its idle per 1,000 chains held (the 1 replica's for comparison), and
    the ratio to the bound taken at its own share of the chains."""

    def per_thousand(r: Replica) -> float:
        return (r.rss - r.idle_rss) / MIB / max(1, r.chains) * 1000

    row(
        "    RSS over idle per 1,000 chains: 1 replica",
        f"{per_thousand(one):.2f} MiB ({one.chains} chains)",
    )
    for r in res.replicas:
        fraction = r.chains / max(1, one.chains)
        at_share = r.idle_rss + (one.rss - one.idle_rss) * fraction * RSS_SLACK
        row(
            f"      replica {r.index}",
            f"{per_thousand(r):.2f} MiB ({r.chains} chains, {fraction:.0%}); "
            f"at its own share x 1.1: {r.rss / at_share:.2f}",
        )


def goals(results: Sequence[Result]) -> None:
    """The issue's goals as ratios: measured / bound (≤ 1 meets it)."""
    print("\ngoals (ratio measured / bound; ≤ 1.00 meets the goal)")
    single = next((res for res in results if not res.setup.sharded), None)
    sharded = [res for res in results if res.setup.sharded]
    if single is None or not sharded:
        print("  (need the 1-replica setup and a sharded one)")
    else:
        one = single.replicas[0]
        share = (one.rss - one.idle_rss) / 3 * RSS_SLACK
        one_bytes = list_watch(one.received)
        one_watch = one.received.get("watch", 0)
        for res in sharded:
            worst = max(res.replicas, key=lambda r: r.rss / (r.idle_rss + share))
            bound = worst.idle_rss + share
            row(
                f"RSS per replica, {res.setup.name}",
                f"{worst.rss / bound:.2f} (replica {worst.index}: {mib(worst.rss)} MiB "
                f"≤ {mib(worst.idle_rss)} + ({mib(one.rss)} - {mib(one.idle_rss)}) / 3 x 1.1 "
                f"= {mib(bound)} MiB; it holds {worst.chains / max(1, one.chains):.0%} of the "
                "chains)",
            )
            held_shares(one, res)
        for res in sharded:
            most = max(list_watch(r.received) for r in res.replicas)
            most_watch = max(r.received.get("watch", 0) for r in res.replicas)
            row(
                f"list+watch bytes per replica ≤ 40 %, {res.setup.name}",
                f"{most / one_bytes / BYTES_GOAL:.2f} ({most / one_bytes:.0%} of the 1 "
                f"replica's {mib(one_bytes)} MiB; watch alone {most_watch / max(1, one_watch):.0%})"
                if one_bytes
                else "-",
            )
    for res in sharded:
        if res.takeover is None:
            continue
        bound = LEASE_DURATION + res.ready
        row(
            f"takeover ≤ Lease + cold start of 2 of 6, {res.setup.name}",
            f"{res.takeover.reconciled / bound:.2f} ({res.takeover.reconciled:.1f} s ≤ "
            f"{LEASE_DURATION:g} + {res.ready:.1f} = {bound:.1f} s)",
        )


# --- the run -------------------------------------------------------------------------------------


def _interrupted(signum: int, frame: FrameType | None) -> None:
    """SIGTERM (and SIGINT) as Ctrl-C: every ``with`` and ``finally`` runs, so every process is
    stopped."""
    raise KeyboardInterrupt


@contextlib.contextmanager
def stopping_on_signals() -> Iterator[None]:
    """SIGINT is set here too: a shell starts a background job with it ignored, and Python then
    raises no KeyboardInterrupt for it."""
    previous = {s: signal.signal(s, _interrupted) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def main(argv: Sequence[str] | None = None) -> int:
    env = os.environ.get
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--chains", type=int, default=int(env("ROTATOR_BENCH_CHAINS", "30000")),
        help="API-key chains (env ROTATOR_BENCH_CHAINS; default 30000)",
    )  # fmt: skip
    parser.add_argument(
        "--unrelated", type=int, default=int(env("ROTATOR_BENCH_UNRELATED", "50000")),
        help="unrelated 4 KiB Secrets (env ROTATOR_BENCH_UNRELATED; default 50000)",
    )  # fmt: skip
    parser.add_argument("--chain-namespaces", type=int, default=300)
    parser.add_argument("--unrelated-namespaces", type=int, default=100)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--shards", type=int, default=6)
    parser.add_argument(
        "--setups",
        default="single,off,on",
        help="which setups, in order: single (1 replica), off and on (sharded, gate off / on)",
    )
    parser.add_argument("--threads", type=int, default=scale.THREADS)
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per wait")
    args = parser.parse_args(argv)
    args.chain_namespaces = max(1, min(args.chain_namespaces, args.chains))
    args.unrelated_namespaces = max(1, min(args.unrelated_namespaces, args.unrelated or 1))
    chosen = setups(args.replicas, args.shards)
    names = [s.strip() for s in args.setups.split(",") if s.strip()]
    if unknown := [n for n in names if n not in chosen]:
        parser.error(f"unknown setups {unknown}: choose from {list(chosen)}")
    logs.configure("text", "warning")
    workdir = Path(tempfile.mkdtemp(prefix="rotator-bench-shards-"))
    print(f"logs and kubeconfigs in {workdir}", flush=True)
    results: list[Result] = []
    began = time.monotonic()
    with stopping_on_signals():
        try:
            for name in names:
                results.append(measure(chosen[name], args, workdir / name))
        except KeyboardInterrupt:
            print("interrupted: every process stopped", file=sys.stderr)
            if results:  # the setups measured to the end are figures all the same
                report(results, args)
            return 130
    report(results, args)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(
        f"\nthe run: {time.monotonic() - began:.0f} s; this process (builder, watches, proxies) "
        f"peaked at {mib(peak)} MiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
