"""Benchmark: propagation latency from a source Secret update to the route config rewrite, and
API requests per object at steady state. Prints figures; asserts nothing.

    make bench            (or: KUBEBUILDER_ASSETS=... python -m tests.bench.propagation --routes 100 --updates 100)

The chain is one Secret → one BackendSecurityPolicy → one ServiceBackend → N Routes. Each update
changes the API key; the clock stops when every route config Secret holds the new key, as seen
by an informer watching them (so the measurement costs the API server one watch, not polling).
"""

from __future__ import annotations

import argparse
import base64
import functools
import statistics
import tempfile
import threading
import time
from pathlib import Path

from controllers import logs
from controllers.reconcilers import api as rapi
from controllers.runtime import client as clients
from controllers.runtime import objects, restconfig
from controllers.runtime.informer import Informer
from controllers.runtime.objects import Body
from rotator_devkit.controlplane import assets
from rotator_devkit.controlplane.cluster import ControlPlaneOptions, LocalControlPlane
from tests.support import audit
from tests.support.chain import Chain
from tests.support.controller import (
    ControllerProcess,
    install_crds,
    install_rbac,
    service_account_kubeconfig,
)
from tests.support.polling import wait_for
from tests.support.recording import LatestStates, percentile

NAMESPACE = "bench"


class Arrivals(LatestStates):
    """When each route config first held each key."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: dict[str, dict[str, float]] = {}  # key value → route → time

    def record(self, obj: Body) -> None:
        now = time.monotonic()
        text = base64.b64decode((obj.get("data") or {}).get(rapi.ROUTE_CONFIG_KEY, "")).decode()
        for raw in text.splitlines():
            line = raw.strip()
            if line.startswith("apiKey: "):
                with self.lock:
                    by_route = self.seen.setdefault(line.removeprefix("apiKey: "), {})
                    by_route.setdefault(objects.name(obj), now)

    def all_arrived(self, value: str, routes: int) -> bool:
        return self.count(value) == routes

    def count(self, value: str) -> int:
        with self.lock:
            return len(self.seen.get(value, {}))

    def times(self, value: str) -> list[float]:
        with self.lock:
            return sorted(self.seen.get(value, {}).values())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--routes", type=int, default=100)
    parser.add_argument("--updates", type=int, default=100)
    parser.add_argument("--steady-seconds", type=float, default=60.0)
    args = parser.parse_args()
    logs.configure("text", "warning")
    workdir = Path(tempfile.mkdtemp(prefix="rotator-bench-"))
    with LocalControlPlane(assets.find(), ControlPlaneOptions(audit_policy=audit.POLICY)) as cp:
        api = clients.Client(restconfig.load(str(cp.kubeconfig)))
        install_crds(api)
        install_rbac(api)
        controller = ControllerProcess(
            service_account_kubeconfig(cp, api, workdir / "kubeconfig"), workdir
        )
        controller.start()
        api.create(objects.NAMESPACES, {"metadata": {"name": NAMESPACE}})
        chain = Chain(api, NAMESPACE)
        arrivals = Arrivals()
        watcher = Informer(
            api, objects.SECRETS, namespaces=[NAMESPACE], label_selector="rotator.dev/route"
        )
        watcher.add_handler(arrivals)
        watcher.start()
        watcher.wait_for_sync(30)

        first = "sk-bench-value-0000"
        chain.secret("key", apiKey=first)
        chain.api_key_policy("p", secret="key", targets=["b"])
        chain.backend("b")
        built = time.monotonic()
        for r in range(args.routes):
            chain.route(f"r{r}", ["b"])
        wait_for(lambda: arrivals.count(first) == args.routes, timeout=300, what="all routes built")
        print(f"built {args.routes} routes in {time.monotonic() - built:.1f} s")
        wait_for(controller.idle, timeout=120, what="idle")

        all_done, first_done = [], []
        for i in range(1, args.updates + 1):
            value = f"sk-bench-value-{i:04d}"
            chain.secret("key", apiKey=value)
            sent = time.monotonic()
            wait_for(
                functools.partial(arrivals.all_arrived, value, args.routes),
                timeout=120,
                interval=0.005,
                what=f"update {i}",
            )
            times = arrivals.times(value)
            first_done.append(times[0] - sent)
            all_done.append(times[-1] - sent)
        wait_for(controller.idle, timeout=120, what="idle after updates")

        mark = audit.AuditLog(cp.audit_log).mark()
        time.sleep(args.steady_seconds)  # a measurement window, not synchronisation
        counts = audit.AuditLog(cp.audit_log).counts_since(mark)
        objects_count = (
            3 + 2 * args.routes + 1
        )  # secret, policy, backend, routes, their Secrets, derived
        total = sum(n for (_, resource), n in counts.items() if resource != "leases")
        lease = sum(n for (_, resource), n in counts.items() if resource == "leases")
        rss = controller.proc.popen.pid if controller.proc else 0
        rss_mib = int(Path(f"/proc/{rss}/status").read_text().split("VmRSS:")[1].split()[0]) / 1024
        controller.stop()
        watcher.stop()

    print(
        f"\npropagation over {args.updates} updates, 1 Secret → 1 policy → 1 backend → {args.routes} routes"
    )
    print(
        f"  first route config rewritten: p50 {percentile(first_done, 50) * 1000:.0f} ms, p99 {percentile(first_done, 99) * 1000:.0f} ms"
    )
    print(
        f"  all {args.routes} rewritten:        p50 {percentile(all_done, 50) * 1000:.0f} ms, p99 {percentile(all_done, 99) * 1000:.0f} ms, mean {statistics.mean(all_done) * 1000:.0f} ms"
    )
    print(
        f"\nsteady state, {args.steady_seconds:.0f} s with nothing changing ({objects_count} objects):"
    )
    print(f"  controller requests: {dict(counts)}")
    print(
        f"  per object per hour (leases aside): {total / objects_count * 3600 / args.steady_seconds:.2f}"
    )
    print(
        f"  leader election: {lease * 60 / args.steady_seconds:.0f} requests/min, whatever the object count"
    )
    print(f"  controller RSS after the run: {rss_mib:.0f} MiB")


if __name__ == "__main__":
    main()
