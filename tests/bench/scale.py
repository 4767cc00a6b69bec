"""Benchmark: the controller at scale, in one run. Prints figures and ratios; asserts nothing.

    make bench    (or: KUBEBUILDER_ASSETS=... python -m tests.bench.scale --chains 10000 --unrelated 50000)

The cluster holds N API-key chains (Secret → policy → backend → route) and M unrelated 4 KiB
Secrets in other namespaces, all created by a 16-thread client before the controller starts
(``rotator run``, as its ServiceAccount, logging at info). The run measures, in this order:

* the raw API write rate of that client (creating the chains' objects: small writes, like the
  controller's), against which the controller's own write rate is set;
* the cold start: seconds to every route config holding its chain's key (a watch sees it),
  the controller's writes and Secret GETs per chain by kind, from the API server's audit log
  (which logs the controller's requests only), its RSS once idle and its peak RSS;
* a restart with nothing changed (SIGTERM, then a new process): its CPU time (utime + stime,
  imports and cache sync included), RSS, writes and Secret GETs;
* propagation: ``--updates`` source Secrets, spread over the chains, updated one at a time;
  from the update being sent to its route config holding the new key, and where the time of the
  p99 update went (each request of the path, from the audit log);
* the propagation floor (tests/bench/floors.py): the same path through a bare client's two
  writes and their watches, as many updates as the controller's, interleaved with them in a
  seeded shuffle while the controller runs, and as many again alone once it has stopped;
* the API server's other floors, with the controller stopped: the restart's lists (every
  page of the views the controller's cache lists, decoded, nothing kept), and the cold start's
  request mix replayed by a bare client; the controller's figures are printed as ratios to them.
  The replay's CPU (the bare client's, the control plane's) is printed beside the cold start's:
  on a machine the API server saturates, what the controller spends beyond the client is taken
  from the API server, and the ratio shows it.

The controller's write rate counts its writes (leases aside) between the first and the last the
audit log received during the cold start.
"""

from __future__ import annotations

import argparse
import functools
import random
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from controllers import logs
from controllers.reconcilers import api as rapi
from controllers.reconcilers.cache import chaincache
from controllers.runtime import client as clients
from controllers.runtime import objects, restconfig
from controllers.runtime.cache import Cache
from controllers.runtime.informer import Informer
from rotator_devkit.controlplane import assets
from rotator_devkit.controlplane.cluster import ControlPlaneOptions, LocalControlPlane
from tests.bench import floors
from tests.bench.figures import MIB, machine, row
from tests.support import audit, profiling, scale
from tests.support.controller import ControllerProcess
from tests.support.polling import wait_for
from tests.support.recording import nearest_rank, percentile


def kind_of(request: audit.Request) -> str:
    """A write or read as the table names it: verb, resource, and for Secrets whose."""
    resource = request.resource + (f"/{request.subresource}" if request.subresource else "")
    if request.resource == "secrets":
        if request.name.startswith("rotator-bsp-"):
            resource += " (derived)"
        elif request.name.startswith("rotator-route-"):
            resource += " (route config)"
        else:
            resource += " (source)"
    return f"{request.verb} {resource}"


def writes(requests: Sequence[audit.Request]) -> list[audit.Request]:
    return [
        r
        for r in requests
        if r.verb in audit.WRITE_VERBS and r.resource != "leases" and r.stage == "ResponseComplete"
    ]


def secret_gets(requests: Sequence[audit.Request]) -> int:
    return sum(
        1
        for r in requests
        if r.verb == "get" and r.resource == "secrets" and r.stage == "ResponseComplete"
    )


def per(count: float, chains: int) -> str:
    return f"{count / chains:.2f}" if chains else "-"


def writes_by_kind(label: str, written: Sequence[audit.Request], each: int, indent: str) -> None:
    """Rows: ``written`` per one of ``each`` (chains, updates), all, then by kind."""
    row(f"{label}, all", per(len(written), each))
    for kind, count in Counter(kind_of(r) for r in written).most_common():
        row(f"{indent}{kind}", per(count, each))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chains", type=int, default=10000)
    parser.add_argument("--unrelated", type=int, default=50000)
    parser.add_argument("--updates", type=int, default=100, help="propagation samples")
    parser.add_argument("--threads", type=int, default=scale.THREADS)
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per wait")
    parser.add_argument(
        "--workers", type=int, default=0, help="the controller's --workers (default: its own)"
    )
    parser.add_argument(
        "--no-profile",
        dest="profile",
        action="store_false",
        help="do not sample the controller with py-spy during the cold start and the restart",
    )
    args = parser.parse_args()
    logs.configure("text", "warning")
    workdir = Path(tempfile.mkdtemp(prefix="rotator-bench-"))
    fleet = scale.Fleet(args.chains, args.unrelated)
    options = ControlPlaneOptions(audit_policy=audit.POLICY)
    with LocalControlPlane(assets.find(), options) as cp:
        api = clients.Client(restconfig.load(str(cp.kubeconfig), pool_size=2 * args.threads))
        fleet.install(api)
        raw = fleet.build_chains(api, args.threads)
        print(f"built {args.chains} chains in {raw.seconds:.1f} s", flush=True)
        noise = fleet.create_unrelated(api, args.threads)
        print(f"created {args.unrelated} unrelated Secrets in {noise.seconds:.1f} s", flush=True)
        applied = fleet.apply_to_sources(api, args.threads)
        print(f"applied to {args.chains} source Secrets in {applied.seconds:.1f} s", flush=True)
        routes = scale.RouteConfigs(api, clock=time.time).start()
        log = audit.AuditLog(cp.audit_log)
        controller = scale.controller_process(
            cp, api, workdir, [f"--workers={args.workers}"] if args.workers else []
        )

        mark = log.mark()
        cp_cpu_before = scale.control_plane_cpu(cp)
        samplers: list[profiling.Sampler] = []

        def attach(pid: int) -> None:
            if args.profile:
                samplers.append(profiling.Sampler(pid, workdir))

        cold = scale.cold_start(
            controller, routes, fleet, timeout=args.timeout, clock=time.time, on_spawn=attach
        )
        cold_profile = samplers[0].stop() if samplers else None
        cp_cpu = scale.control_plane_cpu_since(cp, cp_cpu_before)
        pid = scale.controller_pid(controller)
        cold_rss, cold_peak = scale.rss_bytes(pid), scale.peak_rss_bytes(pid)
        cold_cpu = scale.cpu_seconds(pid)
        cold_requests = log.since(mark)
        dropped_events = controller.metric("rotator_events_dropped_total") or 0
        print(f"cold start done in {cold.idle:.1f} s", flush=True)
        held = scale.cached_bytes(api, fleet.chain_namespace(0))

        controller.stop()
        mark = log.mark()
        started = time.monotonic()
        controller.start(on_spawn=attach)
        restart_ready = time.monotonic() - started
        scale.settle(controller, fleet, timeout=args.timeout)
        restart_seconds = time.monotonic() - started
        restart_profile = samplers[-1].stop() if args.profile and samplers else None
        pid = scale.controller_pid(controller)
        restart_rss, restart_cpu = scale.rss_bytes(pid), scale.cpu_seconds(pid)
        restart_requests = log.since(mark)
        print(f"restart done in {restart_seconds:.1f} s", flush=True)

        first, route = fleet.chain_namespace(0), fleet.route(0)
        relay = functools.partial(
            floors.Relay,
            api,
            first,
            api.get(objects.SECRETS, rapi.derived_secret_name(fleet.policy(0)), namespace=first),
            api.get(objects.SECRETS, rapi.route_config_secret_name(route), namespace=first),
            route,
        )
        mark = log.mark()
        queued_before = chain_seconds(controller)
        cpu_before = scale.cpu_seconds(pid)
        with relay(prefix=MIXED_PREFIX) as mixed_relay:
            schedule, samples, mixed_samples = propagation(
                api, fleet, routes, mixed_relay, args.updates, args.timeout
            )
        propagation_cpu = scale.cpu_seconds(pid) - cpu_before
        queued = {
            key: (seconds - queued_before[key][0], count - queued_before[key][1])
            for key, (seconds, count) in chain_seconds(controller).items()
        }
        controller.stop()
        propagation_requests = log.since(mark)
        print(
            f"propagation done ({len(samples)} updates, interleaved with the floor's)", flush=True
        )

        with relay(prefix=ALONE_PREFIX) as alone_relay:
            alone_samples = propagation_floor(alone_relay, routes, len(samples), args.timeout)
        routes.stop()
        print(f"propagation floor alone done ({len(alone_samples)} updates)", flush=True)

        # this process runs nothing else now: its CPU is the bare client's
        relisted = floors.relist(api, restart_views(api))
        print(f"restart floor done ({relisted.objects} objects)", flush=True)

        mix = floors.replay(api, cold_requests)
        floor_cpu_before, cp_cpu_before = time.process_time(), scale.control_plane_cpu(cp)
        floor = mix.run(args.threads)
        # this process runs nothing else now: its CPU is the bare client's
        floor_cpu = time.process_time() - floor_cpu_before
        floor_cp_cpu = scale.control_plane_cpu_since(cp, cp_cpu_before)
        print(f"cold start floor done in {floor.seconds:.1f} s", flush=True)

    cold_writes = writes(cold_requests)
    window = (
        max(r.received for r in cold_writes) - min(r.received for r in cold_writes)
        if len(cold_writes) > 1
        else 0.0
    )
    controller_rate = len(cold_writes) / window if window else 0.0
    objects_cached = 6 * args.chains + args.unrelated

    print(f"\nscale: {args.chains} API-key chains, {args.unrelated} unrelated 4 KiB Secrets")
    print(f"machine: {machine()}")
    row("controller RSS after the cold start (peak)", f"{cold_rss / MIB:.0f} MiB ({cold_peak / MIB:.0f} MiB)")  # fmt: skip
    row("controller RSS after a restart with nothing changed", f"{restart_rss / MIB:.0f} MiB")
    row("cold start: ready and leading", f"{cold.ready:.1f} s")
    row("cold start: every route config written", f"{cold.configs:.1f} s")
    row("cold start: idle (statuses written too)", f"{cold.idle:.1f} s")
    row("cold start: controller CPU", f"{cold_cpu:.1f} s")
    for name, seconds in sorted(cp_cpu.items()):
        row(f"cold start: {name} CPU", f"{seconds:.1f} s")
    row(
        "controller write rate during the cold start",
        f"{controller_rate:.0f} writes/s ({len(cold_writes)} writes in {window:.1f} s)",
    )
    row(
        f"raw API write rate, {args.threads}-thread client (chain objects)",
        f"{raw.rate:.0f} writes/s ({raw.count} creates in {raw.seconds:.1f} s)",
    )
    row(
        "  (the same client, 4 KiB unrelated Secrets)",
        f"{noise.rate:.0f} writes/s ({noise.count} creates in {noise.seconds:.1f} s)",
    )
    row(
        "  (the same client, server-side apply to the source Secrets)",
        f"{applied.rate:.0f} writes/s ({applied.count} applies in {applied.seconds:.1f} s)",
    )
    row("ratio controller / raw", f"{controller_rate / raw.rate:.2f}" if raw.rate else "-")
    row(
        "ratio controller / raw server-side apply",
        f"{controller_rate / applied.rate:.2f}" if applied.rate else "-",
    )
    writes_by_kind("writes per chain (cold start)", cold_writes, args.chains, "  ")
    row("  Events not written (rotator_events_dropped_total)", per(dropped_events, args.chains))
    row("Secret GETs per chain: cold start", per(secret_gets(cold_requests), args.chains))
    row("Secret GETs per chain: restart", per(secret_gets(restart_requests), args.chains))
    row("writes on the restart (leases aside)", str(len(writes(restart_requests))))
    row("restart: seconds to ready (caches synced) and leading", f"{restart_ready:.1f} s")
    row("restart: seconds to idle", f"{restart_seconds:.1f} s")
    row(
        "restart: controller CPU",
        f"{restart_cpu:.1f} s ({per(restart_cpu * 1000, args.chains)} ms per chain, "
        f"{restart_cpu * 1000 / objects_cached:.3f} ms per cached object of {objects_cached})",
    )
    restart_lists = sum(1 for r in restart_requests if r.verb == "list")
    row(
        "  restart floor: a bare client lists the same views, decoded",
        f"{relisted.cpu:.1f} s CPU ({relisted.cpu * 1000 / max(relisted.objects, 1):.3f} ms per "
        f"object of {relisted.objects}; {relisted.pages} pages, the restart's lists "
        f"{restart_lists}; {relisted.seconds:.1f} s)",
    )
    row("  ratio restart CPU / floor CPU", ratio(restart_cpu, relisted.cpu))
    mix_requests = [r for r in cold_requests if floors.replayed(r)]
    mix_seconds = (
        max(r.completed for r in mix_requests) - min(r.received for r in mix_requests)
        if mix_requests
        else 0.0
    )
    row(
        f"cold start floor: the same mix, bare {args.threads}-thread client",
        f"{floor.seconds:.1f} s ({floor.count} requests, {floor.rate:.0f}/s; "
        f"{mix.skipped} not made again)",
    )
    row("  the bare client's CPU", f"{floor_cpu:.1f} s (the controller's: {cold_cpu:.1f} s)")
    for name, seconds in sorted(floor_cp_cpu.items()):
        row(f"  {name} CPU", f"{seconds:.1f} s (the cold start's: {cp_cpu.get(name, 0.0):.1f} s)")
    row("  the controller, first to last of those requests", f"{mix_seconds:.1f} s")
    row("  ratio floor / controller (the same requests)", ratio(floor.seconds, mix_seconds))
    row("  ratio floor / cold start to idle", ratio(floor.seconds, cold.idle))
    latencies = [s.latency for s in samples]
    floor_latencies = [s.latency for s in mixed_samples]
    alone_latencies = [s.latency for s in alone_samples]
    for label, values in (
        (f"Secret update → route config rewritten ({len(latencies)} updates)", latencies),
        ("  floor: a bare client's two writes and their watches, interleaved", floor_latencies),
        ("  floor alone, the controller stopped", alone_latencies),
    ):
        if values:
            row(
                label,
                f"p50 {percentile(values, 50) * 1000:.0f} ms, "
                f"p99 {percentile(values, 99) * 1000:.0f} ms, max {max(values) * 1000:.0f} ms",
            )
    if latencies:
        row(
            "  controller CPU per update (every write and event of it, and the floor's events)",
            f"{propagation_cpu * 1000 / len(latencies):.1f} ms",
        )
        writes_by_kind("  writes per update", writes(propagation_requests), len(latencies), "    ")
        row("  Secret GETs per update", per(secret_gets(propagation_requests), len(latencies)))
    if latencies and floor_latencies and alone_latencies:
        for p in (99, 50):
            ours = percentile(latencies, p)
            row(
                f"  ratio p{p} controller / p{p} floor (interleaved; alone)",
                f"{ratio(ours, percentile(floor_latencies, p))}; "
                f"{ratio(ours, percentile(alone_latencies, p))}",
            )
        row(
            f"  {INTERVAL_LEVEL} % interval of each interleaved ratio "
            f"(the run's samples resampled {INTERVAL_ROUNDS} times, "
            f"in blocks of {INTERVAL_BLOCK} updates in a row)",
            ", ".join(
                "p{} {:.2f}-{:.2f}".format(
                    p, *ratio_interval(schedule, latencies, floor_latencies, p)
                )
                for p in (99, 50)
            ),
        )
        by_predecessor(schedule, samples, mixed_samples)
        breakdown(
            fleet,
            samples,
            {"floor, interleaved": mixed_relay, "floor alone": alone_relay},
            {"floor, interleaved": mixed_samples, "floor alone": alone_samples},
            propagation_requests,
            queued,
        )
    chain_bytes = 0.0
    for label, (count, each) in held.items():
        row(f"bytes held per cached object: {label}", f"{each:.0f} ({count} measured)")
        per_chain = 3 if "metadata view" in label else 2 if "managed view" in label else 1
        chain_bytes += per_chain * each
    row("  cached bytes per chain (its 3 CRs, 3 Secrets in 2 views)", f"{chain_bytes:.0f}")
    for what, profile in (("cold start", cold_profile), ("restart", restart_profile)):
        where_time_goes(what, profile)


OURS = ("controllers/", "rotator/")


def where_time_goes(what: str, profile: profiling.Profile | None) -> None:
    """The functions the controller's running threads were sampled in, from py-spy."""
    if profile is None:
        print(f"\n{what}: no profile (py-spy missing, or not allowed to attach)")
        return
    print(
        f"\nwhere the {what}'s CPU goes ({profile.samples} samples holding the GIL, from the spawn)"
    )
    print("  own time (the function itself):")
    for line in profile.top(profile.own, 12):
        print(f"    {line}")
    print("  within (rotator's functions, callees included):")
    for line in profile.top(profile.within, 15, OURS):
        print(f"    {line}")


CHAIN_TIMES = {
    "queue wait": "workqueue_queue_duration_seconds",
    "reconcile": "controller_runtime_reconcile_time_seconds",
}
"""What :func:`chain_seconds` reads of each chain controller: the histograms of the time its
keys wait in its queue and of its reconciles (their sums and counts)."""


def chain_seconds(controller: ControllerProcess) -> dict[tuple[str, str], tuple[float, float]]:
    """Per chain controller and :data:`CHAIN_TIMES` stage: the seconds spent, and how many
    keys spent them."""
    return {
        (name, stage): (
            controller.total(f"{metric}_sum", controller=name),
            controller.total(f"{metric}_count", controller=name),
        )
        for name in scale.CHAIN_CONTROLLERS
        for stage, metric in CHAIN_TIMES.items()
    }


MIXED_PREFIX = f"{floors.FLOOR_PREFIX}mixed-"
ALONE_PREFIX = f"{floors.FLOOR_PREFIX}alone-"
"""Not the bare ``floor-`` of the cold start's replay, whose copy of chain 0's derived Secret
would otherwise be the relay's (an update where the cold start made a create)."""


def propagation(
    api: clients.Client,
    fleet: scale.Fleet,
    routes: scale.RouteConfigs,
    relay: floors.Relay,
    updates: int,
    timeout: float,
) -> tuple[list[str], list[floors.Sample], list[floors.Sample]]:
    """From sending each update to its route config holding the new key (wall clock, as the
    audit log's), for the controller and, interleaved with its updates, for as many of
    ``relay``'s (the floor), one at a time in :func:`interleaved` order; the chains updated are
    spread evenly over the fleet. Returns that order (what the figures split by the update
    before, or draw blocks of, read) and each kind's samples in it.

    Why interleaved: timed against a floor run minutes later with the controller stopped, the p99
    ratio ranged from 0.71 to 3.35 over ten runs on 2-core machines, and two runs of one commit
    gave 0.71 and 2.84 — what the API server and the machine were doing in either window (a
    garbage collection, etcd's compaction, a neighbour) weighed more than the controller.
    Interleaved, both kinds are timed over the same minutes, and a slow stretch falls on both in
    proportion."""
    samples: list[floors.Sample] = []
    floor_samples: list[floors.Sample] = []
    count = min(updates, fleet.chains)
    schedule = interleaved(count)
    for kind in schedule:
        if kind == "controller":
            k = len(samples)
            i = k * fleet.chains // count
            send = functools.partial(fleet.rotate, api, i, k + 1)
            where, key, chain = fleet.route_config(i), fleet.key(i, k + 1), i
            samples.append(timed(send, routes, where, key, chain, timeout))
        else:
            key = f"sk-mixed-{len(floor_samples):05d}"
            send = functools.partial(relay.send, key)
            floor_samples.append(timed(send, routes, relay.where, key, -1, timeout))
    return schedule, samples, floor_samples


def interleaved(count: int, seed: int = 38) -> list[str]:
    """The order of :func:`propagation`'s updates: ``count`` of the controller's and ``count``
    of the floor's, shuffled (seeded: each run sends the same order). Not strictly alternating:
    after its route config is written the controller still writes a status and an Event, and
    in a fixed pattern those would fall on one kind more than on the other; shuffled, the kinds
    that ran one, two or more updates before are alike for both."""
    kinds = ["controller", "floor"] * count
    random.Random(seed).shuffle(kinds)
    return kinds


INTERVAL_LEVEL = 90
INTERVAL_ROUNDS = 1000
INTERVAL_BLOCK = 100
"""Updates per block of :func:`ratio_interval`: 100 in a row took 2 to 3 s at 10,000 chains."""


def ratio_interval(
    kinds: Sequence[str],
    ours: Sequence[float],
    theirs: Sequence[float],
    p: float,
    *,
    block: int = INTERVAL_BLOCK,
    rounds: int = INTERVAL_ROUNDS,
    level: float = INTERVAL_LEVEL,
    seed: int = 38,
) -> tuple[float, float]:
    """The ``level`` % interval of the ratio of ``ours``'s ``p``-th percentile to ``theirs``'s,
    by a block bootstrap over the run's schedule: ``kinds`` is the order the updates ran in
    (:func:`interleaved`; ``ours`` are its ``controller`` updates in order, ``theirs`` the
    others), cut into blocks of ``block`` consecutive updates; ``rounds`` times (seeded) as many
    blocks are drawn with replacement, and the ratio is taken over the updates of both kinds in
    them. The middle ``level`` % of those ratios is kept.

    Why: a p99 over 5,000 updates rests on its 50 slowest, and one run's ratio moved the verdict
    on the goal (1.5) between runs of the same code; the interval says whether the run's own
    samples decide it. Why blocks, not single updates: a slow stretch of the machine (a
    collection, etcd's compaction) slows several updates in a row, of both kinds; resampled one
    by one, each kind on its own, those updates would count as independent, and a draw could
    slow one side of the ratio without the other. It says nothing of what differs between runs
    (the machine's other minutes): that spread is only seen by running again."""
    if (kinds.count("controller"), len(kinds)) != (len(ours), len(ours) + len(theirs)):
        raise ValueError("the schedule does not match the samples")
    blocks: list[tuple[list[float], list[float]]] = []
    mine, other = iter(ours), iter(theirs)
    for start in range(0, len(kinds), block):
        part: tuple[list[float], list[float]] = ([], [])
        for kind in kinds[start : start + block]:
            if kind == "controller":
                part[0].append(next(mine))
            else:
                part[1].append(next(other))
        blocks.append(part)
    rng = random.Random(seed)
    ratios = []
    for _ in range(rounds):
        drawn = rng.choices(blocks, k=len(blocks))
        a = [x for part in drawn for x in part[0]]
        b = [x for part in drawn for x in part[1]]
        if a and b:
            ratios.append(percentile(a, p) / percentile(b, p))
    ratios.sort()
    tail = (100 - level) / 2
    return nearest_rank(ratios, tail), nearest_rank(ratios, 100 - tail)


def after(kinds: Sequence[str], lag: int = 1) -> dict[str, list[str]]:
    """For each update of each kind in ``kinds``, in order, the kind of the update ``lag``
    before it (``none`` for the first ``lag``)."""
    before: dict[str, list[str]] = {kind: [] for kind in kinds}
    for n, kind in enumerate(kinds):
        before[kind].append(kinds[n - lag] if n >= lag else "none")
    return before


def by_predecessor(
    schedule: Sequence[str],
    samples: Sequence[floors.Sample],
    floor_samples: Sequence[floors.Sample],
) -> None:
    """Each kind's p50 and p99 over the updates that followed a controller update and over
    those that followed a floor update, in ``schedule`` (the order they ran in), and the p99 ratio within each: what the update before
    leaves running (the controller's status write and Event after its route config), apart
    from the path itself."""
    before = after(schedule)
    for previous in ("controller", "floor"):
        ours = [
            s.latency
            for s, p in zip(samples, before.get("controller", []), strict=True)
            if p == previous
        ]
        theirs = [
            s.latency
            for s, p in zip(floor_samples, before.get("floor", []), strict=True)
            if p == previous
        ]
        if not ours or not theirs:
            continue
        row(
            f"  after a {previous} update: controller / floor, p50 and p99",
            f"{percentile(ours, 50) * 1000:.0f} / {percentile(theirs, 50) * 1000:.0f} ms, "
            f"{percentile(ours, 99) * 1000:.0f} / {percentile(theirs, 99) * 1000:.0f} ms "
            f"(p99 ratio {ratio(percentile(ours, 99), percentile(theirs, 99))}; "
            f"{len(ours)} and {len(theirs)} updates)",
        )


def propagation_floor(
    relay: floors.Relay, routes: scale.RouteConfigs, updates: int, timeout: float
) -> list[floors.Sample]:
    """The same figure for the relay of the propagation floor (no controller running)."""
    keys = [f"sk-floor-{k:05d}" for k in range(updates)]
    return [
        timed(functools.partial(relay.send, key), routes, relay.where, key, -1, timeout)
        for key in keys
    ]


def timed(
    send: Callable[[], object],
    routes: scale.RouteConfigs,
    where: str,
    key: str,
    chain: int,
    timeout: float,
) -> floors.Sample:
    """One update: ``send`` it, then wait for the route config ``where`` to hold ``key`` (wall
    clock, as the audit log's)."""
    sent = time.time()
    send()
    arrived = wait_for(
        functools.partial(routes.since, where, key),
        timeout=timeout,
        interval=0.005,
        what=f"{key} in {where}",
    )
    return floors.Sample(chain, key, sent, arrived)


def breakdown(
    fleet: scale.Fleet,
    samples: Sequence[floors.Sample],
    relays: Mapping[str, floors.Relay],
    floor_samples: Mapping[str, Sequence[floors.Sample]],
    requests: Sequence[audit.Request],
    queued: Mapping[tuple[str, str], tuple[float, float]],
) -> None:
    """Where the propagation's time goes: the stages of the p99 sample and the median of each
    stage, for the controller (from the audit log) and for each floor (from its relay)."""
    print("\nwhere a propagation's time goes (ms): the p99 sample, and each stage's median")
    staged = [(s, floors.controller_stages(s, fleet, requests)) for s in samples]
    found = {s: st for s, st in staged if st is not None}
    print_stages(
        f"controller ({len(found)} of {len(samples)} samples in the audit log)",
        floors.CONTROLLER_STAGES,
        found,
    )
    for (name, stage), (seconds, count) in queued.items():
        row(
            f"  {name} {stage}, mean over the updates",
            f"{seconds / count * 1000:.1f} ms ({count:.0f} keys)" if count else "-",
        )
    for title, relay in relays.items():
        hops = {
            s: floors.floor_stages(s, relay.hops[s.key])
            for s in floor_samples[title]
            if s.key in relay.hops
        }
        print_stages(title, floors.FLOOR_STAGES, hops)


def print_stages(
    title: str, labels: Sequence[str], stages: Mapping[floors.Sample, tuple[float, ...]]
) -> None:
    """Each stage of the p99 sample of ``stages``, and each stage's median over them all."""
    if not stages:
        return
    p99 = floors.at_percentile(list(stages), 99)
    print(f"  {title}:")
    for n, label in enumerate(labels):
        median = percentile([st[n] for st in stages.values()], 50)
        row(f"    {label}", f"{stages[p99][n] * 1000:6.1f}  (median {median * 1000:.1f})")
    row("    total", f"{p99.latency * 1000:6.1f}")


def restart_views(api: clients.Client) -> list[Informer]:
    """The views the controller's cache lists (``chaincache.chain_cache``, the one place that
    makes them), made and never started: what the restart's floor lists."""
    chain = chaincache.chain_cache(Cache(api), {})
    return [chain.all_secrets, chain.managed, chain.policies, chain.backends, chain.routes]


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "-"


if __name__ == "__main__":
    main()
