"""The memory regression guard: the controller's RSS after a cold start over many chains and
unrelated Secrets stays within what its per-object figures allow (issue 13; the full-scale
figures come from ``python -m tests.bench.scale``)."""

from __future__ import annotations

from pathlib import Path

from controllers.runtime import client as clients
from controllers.runtime import restconfig
from rotator_devkit.controlplane.cluster import LocalControlPlane
from tests.support import scale

MIB = 2**20

CHAINS = 1000
UNRELATED = 5000

BASE_MIB = 68.0
"""``rotator run`` idle over an empty cluster (CRDs and RBAC only); 81 before the cloud SDKs
were loaded on first use."""
PER_CHAIN_BYTES = 12_000
"""One API-key chain: its Secret, policy, backend and route, the derived and route config
Secrets it gets, and the controller's bookkeeping (queues, indexes, event dedup). About 8.6 KB
of it is the cached objects (``controllers.runtime.compaction``; ``python -m tests.bench.scale``
prints them per kind); 17,000 before key tables were shared, 27,000 before objects were
compacted and the route config's data was replaced by a digest."""
PER_UNRELATED_BYTES = 600
"""One 4 KiB Secret in another namespace: name, namespace and resourceVersion only (the data
is never cached); ``make bench``'s memory benchmark measures 545."""
WARM_MIB = 3.0
"""What the first chains cost beyond their share: code paths, threads and buffers that a
cluster without chains never uses."""
BASE_MARGIN = 1.05
OBJECT_MARGIN = 1.2


def ceiling_bytes(chains: int, unrelated: int) -> float:
    """``1.05 * base + 1.2 * (warm-up + bytes per chain * chains + bytes per unrelated Secret *
    unrelated)``.

    Measured (``rotator run`` at --log-level info with the image's ``MALLOC_ARENA_MAX=2``, 2-core
    AMD EPYC, Python 3.11): 67.8 MiB with nothing; 86 MiB at 1,000 chains and 5,000 unrelated
    Secrets (this test); 101 MiB at 2,000 and 10,000, 214 MiB at 10,000 and 50,000
    (``python -m tests.bench.scale``) — 12 KB per chain with 600 bytes per unrelated Secret and
    about 3 MiB for the first chains. At 1,000 chains and 5,000 unrelated Secrets that predicts
    68 + 3 + 11.4 + 2.9 = 85.3 MiB, and the ceiling is 1.05 * 68 + 1.2 * 17.3 = 92 MiB: 6 MiB of
    headroom. The previous figures (17 KB per chain, 81 MiB base) measured 97-106 MiB here and
    would fail now; so would doubling the bytes per chain (+11 MiB), and caching the unrelated
    Secrets' data (5,000 * 5.5 KiB of base64 = 27 MiB more)."""
    objects = WARM_MIB * MIB + PER_CHAIN_BYTES * chains + PER_UNRELATED_BYTES * unrelated
    return BASE_MARGIN * BASE_MIB * MIB + OBJECT_MARGIN * objects


def test_memory_after_a_cold_start_stays_within_the_per_object_figures(
    private_control_plane: LocalControlPlane, tmp_path: Path
) -> None:
    """1,000 API-key chains and 5,000 unrelated 4 KiB Secrets exist before ``rotator run``
    starts; once every route config holds its chain's key and the controller is idle, its RSS
    is under :func:`ceiling_bytes` — a change that doubles the bytes per object fails here."""
    cp = private_control_plane
    api = clients.Client(restconfig.load(str(cp.kubeconfig)))
    fleet = scale.Fleet(CHAINS, UNRELATED)
    fleet.install(api)
    fleet.build_chains(api)
    fleet.create_unrelated(api)
    routes = scale.RouteConfigs(api).start()
    controller = scale.controller_process(cp, api, tmp_path)
    try:
        cold = scale.cold_start(controller, routes, fleet, timeout=240)
        rss = scale.rss_bytes(scale.controller_pid(controller))
    finally:
        if controller.proc is not None:
            controller.stop()
        routes.stop()
    ceiling = ceiling_bytes(CHAINS, UNRELATED)
    print(
        f"\nRSS {rss / MIB:.0f} MiB after a {cold.configs:.0f} s cold start over {CHAINS} chains "
        f"and {UNRELATED} unrelated Secrets; ceiling {ceiling / MIB:.0f} MiB"
    )
    assert rss <= ceiling, (
        f"controller RSS {rss / MIB:.0f} MiB over the {ceiling / MIB:.0f} MiB ceiling for "
        f"{CHAINS} chains and {UNRELATED} unrelated Secrets: more bytes per object than "
        f"{PER_CHAIN_BYTES} per chain and {PER_UNRELATED_BYTES} per unrelated Secret"
    )
