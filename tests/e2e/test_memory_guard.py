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

BASE_MIB = 40.0
"""``rotator run`` idle over an empty cluster (CRDs and RBAC only), as its Pod finds the API
server (no kubeconfig loader); 68 before ``requests`` was imported on the first OIDC exchange,
the self-signed certificate made by a child process (no ``cryptography`` resident) and the
kubeconfig loader left out of a Pod; 81 before the cloud SDKs were loaded on first use."""
PER_CHAIN_BYTES = 9_000
"""One API-key chain: its Secret, policy, backend and route, the derived and route config
Secrets it gets, and the controller's bookkeeping (queues, indexes, event dedup). About 8 KB
of it is the cached objects (``controllers.runtime.compaction``; ``python -m tests.bench.scale``
prints them per kind); 12,000 before the store dropped its namespace index, the Secret views
their uids and copies their source bodies; 17,000 before key tables were shared, 27,000 before
objects were compacted and the route config's data was replaced by a digest."""
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
    AMD EPYC, Python 3.11): 40.1 MiB with nothing; 54 MiB at 1,000 chains and 5,000 unrelated
    Secrets (this test); 145 MiB at 10,000 and 50,000 (``python -m tests.bench.scale``) — about
    9 KB per chain with 600 bytes per unrelated Secret and about 3 MiB for the first chains. At
    1,000 chains and 5,000 unrelated Secrets that predicts 40 + 3 + 8.6 + 2.9 = 54.5 MiB, and the
    ceiling is 1.05 * 40 + 1.2 * 14.5 = 59.4 MiB: 5 MiB of headroom. Doubling the bytes per chain
    (+8.6 MiB) fails here, and so does caching the unrelated Secrets' data (5,000 * 5.5 KiB of
    base64 = 27 MiB more)."""
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
