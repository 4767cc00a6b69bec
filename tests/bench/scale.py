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
  from the update being sent to its route config holding the new key.

The controller's write rate counts its writes (leases aside) between the first and the last the
audit log received during the cold start.
"""

from __future__ import annotations

import argparse
import functools
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from controllers import logs
from controllers.runtime import client as clients
from controllers.runtime import restconfig
from rotator_devkit.controlplane import assets
from rotator_devkit.controlplane.cluster import ControlPlaneOptions, LocalControlPlane
from tests.bench.figures import MIB, machine, row
from tests.support import audit, profiling, scale
from tests.support.polling import wait_for
from tests.support.recording import percentile


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
        routes = scale.RouteConfigs(api).start()
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

        cold = scale.cold_start(controller, routes, fleet, timeout=args.timeout, on_spawn=attach)
        cold_profile = samplers[0].stop() if samplers else None
        cp_cpu = {
            name: seconds - cp_cpu_before.get(name, 0.0)
            for name, seconds in scale.control_plane_cpu(cp).items()
        }
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

        latencies = propagation(api, fleet, routes, args.updates, args.timeout)
        controller.stop()
        routes.stop()

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
    row("writes per chain (cold start), all", per(len(cold_writes), args.chains))
    for kind, count in Counter(kind_of(r) for r in cold_writes).most_common():
        row(f"  {kind}", per(count, args.chains))
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
    if latencies:
        row(
            f"Secret update → route config rewritten ({len(latencies)} updates)",
            f"p50 {percentile(latencies, 50) * 1000:.0f} ms, "
            f"p99 {percentile(latencies, 99) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms",
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


def propagation(
    api: clients.Client,
    fleet: scale.Fleet,
    routes: scale.RouteConfigs,
    updates: int,
    timeout: float,
) -> list[float]:
    """Seconds from sending each update to its route config holding the new key; the chains
    updated are spread evenly over the fleet."""
    latencies = []
    samples = min(updates, fleet.chains)
    for k in range(samples):
        i = k * fleet.chains // samples
        where, key = fleet.route_config(i), fleet.key(i, k + 1)
        sent = time.monotonic()
        fleet.rotate(api, i, k + 1)
        arrived = wait_for(
            functools.partial(routes.since, where, key),
            timeout=timeout,
            interval=0.005,
            what=f"update {k} in {where}",
        )
        latencies.append(arrived - sent)
    return latencies


if __name__ == "__main__":
    main()
