"""Clusters at scale, shared by the scale benchmark (tests/bench/scale.py) and the memory guard
(tests/e2e/test_memory_guard.py): N API-key chains (Secret → policy → backend → route) and M
unrelated 4 KiB Secrets in other namespaces, created by a thread pool before the controller
starts; a watch that says when each route config holds its chain's key; and the controller
process's RSS and CPU time, read from /proc.

A chain's objects are spread over namespaces of :data:`CHAINS_PER_NAMESPACE` and the unrelated
Secrets over namespaces of :data:`UNRELATED_PER_NAMESPACE`, as a cluster with many tenants would
hold them; names are unique across namespaces so a figure can name a chain by its index.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import os
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from controllers.reconcilers import api as rapi
from controllers.reconcilers.cache import crviews, secretviews
from controllers.runtime import apply, objects
from controllers.runtime import client as clients
from controllers.runtime.compaction import Compactor
from controllers.runtime.informer import Informer, Transform, strip_never_read
from controllers.runtime.objects import Body
from rotator_devkit.controlplane.cluster import LocalControlPlane
from tests.support import asdeployed
from tests.support.apiproxy import APIProxy
from tests.support.chain import Chain
from tests.support.controller import (
    ControllerProcess,
    in_cluster_environment,
    install_crds,
    install_rbac,
)
from tests.support.polling import wait_for
from tests.support.recording import LatestStates

CHAINS_PER_NAMESPACE = 1000
UNRELATED_PER_NAMESPACE = 5000
UNRELATED_BYTES = 4096
THREADS = 16
"""Client threads creating objects: the "plain multi-threaded client" the controller's write
rate is compared with."""

CONTROLLER_ARGS = ("--log-level", "info")
"""``rotator run`` as deployed: the test harness's debug logging would cost CPU at scale."""
CONTROLLER_ENV = {"MALLOC_ARENA_MAX": "2"}
"""The environment the image sets (Dockerfile): memory is measured as deployed."""
SCRAPE_INTERVAL = 1.0
"""Seconds between reads of the controller's metrics while waiting for it: each read renders
every series (thousands, at scale), which at 0.2 s was 15 % of the restart's CPU."""


# --- the controller process, from /proc ------------------------------------------------------


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def rss_bytes(pid: int) -> int:
    """Resident memory now (``VmRSS``)."""
    return _status_kib(pid, "VmRSS") * 1024


def peak_rss_bytes(pid: int) -> int:
    """The most resident memory the process ever had (``VmHWM``)."""
    return _status_kib(pid, "VmHWM") * 1024


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time the process has used (``utime + stime`` in /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _control_plane_processes(control_plane: LocalControlPlane) -> Iterator[tuple[str, int]]:
    """(executable name, pid) of each process of ``control_plane`` (etcd, kube-apiserver,
    kube-controller-manager): the processes whose command line names its folder."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if str(control_plane.dir).encode() in b" ".join(argv):
                yield Path(argv[0].decode()).name, int(proc.name)
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to read


def control_plane_cpu(control_plane: LocalControlPlane) -> dict[str, float]:
    """CPU seconds used so far by each process of ``control_plane``."""
    used: dict[str, float] = {}
    for name, pid in _control_plane_processes(control_plane):
        with contextlib.suppress(OSError, ValueError, IndexError):
            used[name] = used.get(name, 0.0) + cpu_seconds(pid)
    return used


def control_plane_cpu_since(
    control_plane: LocalControlPlane, before: Mapping[str, float]
) -> dict[str, float]:
    """CPU seconds each process of ``control_plane`` used since :func:`control_plane_cpu` gave
    ``before``."""
    return {
        name: seconds - before.get(name, 0.0)
        for name, seconds in control_plane_cpu(control_plane).items()
    }


def control_plane_rss(control_plane: LocalControlPlane) -> int:
    """Resident memory of every process of ``control_plane`` together."""
    total = 0
    for _, pid in _control_plane_processes(control_plane):
        with contextlib.suppress(OSError, AssertionError):
            total += rss_bytes(pid)
    return total


def controller_pid(controller: ControllerProcess) -> int:
    assert controller.proc is not None, "the controller is not running"
    return controller.proc.popen.pid


# --- what the controller caches of each object -------------------------------------------------

_NONE: frozenset[str] = frozenset()
CACHED_VIEWS: dict[str, tuple[objects.Resource, bool, str | None, Transform, frozenset[str]]] = {
    "BackendSecurityPolicy": (rapi.POLICIES, False, None, crviews.policy, _NONE),
    "ServiceBackend": (rapi.BACKENDS, False, None, crviews.backend, _NONE),
    "Route": (rapi.ROUTES, False, None, crviews.route, _NONE),
    "Secret, metadata view (every Secret)": (
        objects.SECRETS, True, None, secretviews.identity_only, _NONE
    ),
    "Secret, managed view (derived and route config)": (
        objects.SECRETS, False, rapi.MANAGED_SELECTOR, secretviews.managed, secretviews.OWN_KEYS
    ),
}  # fmt: skip
"""Resource, metadata-only, label selector, view and own label and annotation keys of each
cache, as ``controllers/reconcilers/cache/chaincache.py`` makes them."""


def cached_bytes(api: clients.Client, namespace: str) -> dict[str, tuple[int, float]]:
    """Objects and bytes held per object by each cache of :data:`CACHED_VIEWS`, for the objects
    of ``namespace``: each decoded on its own (as a watch event brings it) and put through the
    informer's transform (``strip_never_read``, the view, a :class:`Compactor`) while
    ``tracemalloc`` traces, so what the cache keeps of the decoded text (resourceVersions, data)
    counts too. The store's own entry (~150 bytes) is not counted. When the interpreter's table
    of interned strings grows while a kind is measured, the kind is charged with the new table
    (at 10,000 chains the policies' 5.5 KB held ~3.5 KB of it: 2.0 KB at 50 chains)."""
    held: dict[str, tuple[int, float]] = {}
    for label, (resource, metadata_only, selector, view, own_keys) in CACHED_VIEWS.items():
        listed = api.list(
            resource, namespace=namespace, metadata_only=metadata_only, label_selector=selector
        )
        events = [json.dumps(item) for item in listed.get("items") or []]
        if not events:
            continue
        compact = Compactor(own_keys=own_keys)
        compact(view(strip_never_read(json.loads(events[0]))))  # its shapes, as a warm cache has
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            kept = [compact(view(strip_never_read(json.loads(e)))) for e in events]
            after = tracemalloc.get_traced_memory()[0]  # what was decoded and dropped is freed
        finally:
            tracemalloc.stop()
        held[label] = (len(kept), (after - before) / len(kept))
    return held


# --- the objects -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """``count`` requests made in ``seconds``."""

    count: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds else 0.0


def in_parallel(task: Callable[[int], object], count: int, threads: int = THREADS) -> Timing:
    """Runs ``task(0..count-1)`` on ``threads`` threads; how long they took, all together."""
    started = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(task, range(count)):
            pass
    return Timing(count, time.monotonic() - started)


@dataclass(frozen=True)
class Fleet:
    """Where each of ``chains`` chains and ``unrelated`` unrelated Secrets lives, and what key
    chain ``i`` holds at ``version``.

    ``spread`` starts each namespace's name with 6 hex digits of a SHA-256 of its plain name
    (``3f9a1c-chains-007``), so that the namespaces fall into shards as a cluster's tenants would:
    FNV-1a's high bits, which pick the shard, hardly depend on a name's last characters, and all
    30 of ``chains-000`` to ``chains-029`` hash into one shard of six."""

    chains: int
    unrelated: int
    chains_per_namespace: int = CHAINS_PER_NAMESPACE
    unrelated_per_namespace: int = UNRELATED_PER_NAMESPACE
    spread: bool = False

    def _namespace(self, plain: str) -> str:
        if not self.spread:
            return plain
        return f"{hashlib.sha256(plain.encode()).hexdigest()[:6]}-{plain}"

    def chain_namespace(self, i: int) -> str:
        return self._namespace(f"chains-{i // self.chains_per_namespace:03d}")

    def unrelated_namespace(self, i: int) -> str:
        return self._namespace(f"unrelated-{i // self.unrelated_per_namespace:03d}")

    def namespaces(self) -> list[str]:
        step = self.chains_per_namespace
        names = [self.chain_namespace(i) for i in range(0, self.chains, step)]
        step = self.unrelated_per_namespace
        return names + [self.unrelated_namespace(i) for i in range(0, self.unrelated, step)]

    @staticmethod
    def key(i: int, version: int = 0) -> str:
        return f"sk-scale-{i:05d}-v{version:04d}"

    @staticmethod
    def source_secret(i: int) -> str:
        return f"key-{i:05d}"

    @staticmethod
    def policy(i: int) -> str:
        return f"p-{i:05d}"

    @staticmethod
    def route(i: int) -> str:
        return f"r-{i:05d}"

    def route_config(self, i: int) -> str:
        """``namespace/name`` of chain ``i``'s route config Secret."""
        return f"{self.chain_namespace(i)}/{rapi.route_config_secret_name(self.route(i))}"

    def initial_keys(self) -> dict[str, str]:
        """Route config → the key it holds once the controller has caught up with the build."""
        return {self.route_config(i): self.key(i) for i in range(self.chains)}

    def install(self, api: clients.Client) -> None:
        """The CRDs, the controller's RBAC and the namespaces."""
        install_crds(api)
        install_rbac(api)
        for name in self.namespaces():
            api.create(objects.NAMESPACES, {"metadata": {"name": name}})

    def build_chains(self, api: clients.Client, threads: int = THREADS) -> Timing:
        """Creates every chain: 4 writes each (Secret, policy, backend, route)."""

        def one(i: int) -> None:
            chain = Chain(api, self.chain_namespace(i))
            chain.secret(self.source_secret(i), apiKey=self.key(i))
            backend = f"b-{i:05d}"
            chain.api_key_policy(self.policy(i), secret=self.source_secret(i), targets=[backend])
            chain.backend(backend)
            chain.route(self.route(i), [backend])

        timing = in_parallel(one, self.chains, threads)
        return Timing(4 * self.chains, timing.seconds)

    def create_unrelated(self, api: clients.Client, threads: int = THREADS) -> Timing:
        """Creates the unrelated Secrets, :data:`UNRELATED_BYTES` of data each."""
        payload = base64.b64encode(b"u" * UNRELATED_BYTES).decode()

        def one(i: int) -> None:
            body = {"metadata": {"name": f"unrelated-{i:06d}"}, "data": {"blob": payload}}
            api.create(objects.SECRETS, body, namespace=self.unrelated_namespace(i))

        return in_parallel(one, self.unrelated, threads)

    def apply_to_sources(self, api: clients.Client, threads: int = THREADS) -> Timing:
        """Server-side applies an annotation to every chain's source Secret: the kind of write
        the controller makes (``apply-patch+yaml``, field manager, force), which costs the API
        server more than a create."""

        def one(i: int) -> None:
            body = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": self.source_secret(i),
                    "namespace": self.chain_namespace(i),
                    "annotations": {"bench.rotator.dev/applied": "yes"},
                },
            }
            apply.apply(api, objects.SECRETS, body, field_manager="scale-bench")

        return in_parallel(one, self.chains, threads)

    def rotate(self, api: clients.Client, i: int, version: int) -> None:
        """Gives chain ``i``'s source Secret the key of ``version``."""
        data = {"apiKey": base64.b64encode(self.key(i, version).encode()).decode()}
        api.patch(
            objects.SECRETS,
            self.source_secret(i),
            {"data": data},
            namespace=self.chain_namespace(i),
        )


# --- what the route configs hold ---------------------------------------------------------------


def served_key(config_secret: Body) -> str | None:
    """The ``apiKey`` a route config Secret inlines (the scale chains have one backend each)."""
    encoded = (config_secret.get("data") or {}).get(rapi.ROUTE_CONFIG_KEY, "")
    for line in base64.b64decode(encoded).decode().splitlines():
        field, _, value = line.strip().partition(": ")
        if field == "apiKey":
            return value
    return None


class RouteConfigs(LatestStates):
    """Which key each route config Secret holds and since when, from one watch on them all (the
    measurement costs the API server a watch, not polling)."""

    def __init__(self, api: clients.Client, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._held: dict[str, tuple[str, float]] = {}  # namespace/name → (key, first seen)
        self._informer = Informer(api, objects.SECRETS, label_selector=rapi.ROUTE_LABEL)
        self._informer.add_handler(self)

    def start(self, timeout: float = 60) -> RouteConfigs:
        self._informer.start()
        wait_for(self._informer.has_synced, timeout=timeout, what="the route config watch")
        return self

    def stop(self) -> None:
        self._informer.stop()

    def record(self, obj: Body) -> None:
        key = served_key(obj)
        if key is None:
            return
        where = f"{objects.namespace(obj)}/{objects.name(obj)}"
        with self._lock:
            if self._held.get(where, ("", 0.0))[0] != key:
                self._held[where] = (key, self._clock())

    def since(self, where: str, key: str) -> float | None:
        """When ``where`` came to hold ``key``; None while it holds another or none."""
        with self._lock:
            held = self._held.get(where)
        return held[1] if held is not None and held[0] == key else None

    def holding(self, wanted: Mapping[str, str]) -> int:
        """How many route configs hold the key ``wanted`` gives them."""
        with self._lock:
            return sum(1 for where, key in wanted.items() if self._held.get(where, ("",))[0] == key)

    def last_arrival(self, wanted: Iterable[str]) -> float:
        with self._lock:
            return max((self._held[w][1] for w in wanted if w in self._held), default=0.0)


# --- the controller's cold start ----------------------------------------------------------------


def controller_process(
    control_plane: LocalControlPlane,
    api: clients.Client,
    workdir: Path,
    args: Sequence[str] = (),
    *,
    via: APIProxy | None = None,
) -> ControllerProcess:
    """``rotator run`` as its ServiceAccount, logging at the deployed level, with the image's
    modules only (:mod:`tests.support.asdeployed`), finding the API server as its Pod does (the
    ServiceAccount's files, no kubeconfig: :func:`~tests.support.controller.in_cluster_environment`),
    with ``args``; talking to the API server through ``via`` when given (a proxy that counts its
    bytes)."""
    pod = in_cluster_environment(
        control_plane,
        api,
        workdir / "serviceaccount",
        server=via.url if via is not None else None,
        ca_file=via.ca_file if via is not None else None,
    )
    return ControllerProcess(
        None,
        workdir,
        args=(*CONTROLLER_ARGS, *args),
        env={**CONTROLLER_ENV, **asdeployed.environment(workdir), **pod},
    )


CHAIN_CONTROLLERS = ("backendsecuritypolicy", "route")
"""The controllers that reconcile each chain once at least in a cold start."""


def reconciles(controller: ControllerProcess, name: str) -> float:
    """Reconciles controller ``name`` has finished, whatever their result (and, in a sharded
    replica, whichever shard it held them in)."""
    return controller.total("controller_runtime_reconcile_total", controller=name)


def _reconciled(
    controllers: Sequence[ControllerProcess], name: str, count: float, since: float
) -> bool:
    return sum(reconciles(c, name) for c in controllers) - since >= count


def settle(controller: ControllerProcess, fleet: Fleet, *, timeout: float) -> None:
    """Waits until every policy and route has been reconciled since the start and nothing is
    queued or running (a queue is filled as its controller starts, just after the lease is won:
    idle alone could be seen in between)."""
    settle_all([controller], fleet.chains, timeout=timeout)


def settle_all(
    controllers: Sequence[ControllerProcess],
    chains: int,
    *,
    timeout: float,
    since: Mapping[str, float] | None = None,
) -> None:
    """:func:`settle` for replicas that share the work: together they have reconciled
    ``chains`` policies and routes more than ``since`` (their sums of
    :func:`reconciles` by controller name; none: since they started), and none of them has
    work queued or running."""
    for name in CHAIN_CONTROLLERS:
        wait_for(
            functools.partial(_reconciled, controllers, name, chains, (since or {}).get(name, 0)),
            timeout=timeout,
            interval=SCRAPE_INTERVAL,
            what=f"{chains} {name} reconciles",
        )
    wait_for(
        lambda: all(c.idle() for c in controllers),
        timeout=timeout,
        interval=SCRAPE_INTERVAL,
        what="the controllers idle",
    )


@dataclass(frozen=True)
class ColdStart:
    """Seconds from spawning the process to: ready and leading; the last route config holding
    its chain's key (as the watch saw it); no work queued or running."""

    ready: float
    configs: float
    idle: float


def cold_start(
    controller: ControllerProcess,
    routes: RouteConfigs,
    fleet: Fleet,
    *,
    timeout: float,
    clock: Callable[[], float] = time.monotonic,
    on_spawn: Callable[[int], None] | None = None,
) -> ColdStart:
    """Starts the controller and waits until every route config holds its chain's key and the
    controller is idle. ``routes`` must run on the same ``clock``. ``on_spawn`` is called with
    the process id as soon as it exists (a profiler attaches then)."""
    wanted = fleet.initial_keys()
    spawned = clock()
    controller.start(on_spawn=on_spawn)
    ready = clock()
    wait_for(
        lambda: routes.holding(wanted) == len(wanted),
        timeout=timeout,
        interval=0.1,
        what=f"{len(wanted)} route configs holding their chain's key",
    )
    configs = max(routes.last_arrival(wanted), ready)  # none to write: as soon as it leads
    settle(controller, fleet, timeout=timeout)
    return ColdStart(ready - spawned, configs - spawned, clock() - spawned)
