"""Shards end to end: three ``rotator run --shards 6`` replicas (own processes, the controller's
ServiceAccount bound by config/rbac plus config/sharding) share six shards, two each; 60 API-key
chains across 30 namespaces are each reconciled by the one replica that holds their namespace's
shard; a replica killed with SIGKILL loses its two shards to the others once their Leases expire
(not sooner, and within the Lease duration plus a few retry periods), and the new holders adopt
the derived Secrets without minting again (the credential hash of every derived Secret is
unchanged). From the replicas' reconcile logs, no object is ever reconciled by two replicas at
once.

A control plane of the test's own: the session's shared controller watches every namespace and
would reconcile these chains too. Its API server runs without the ``ShardedListAndWatch`` gate, so
the replicas filter on their own side (the server-side mode is covered by
tests/e2e/test_sharding.py's agreement of the hash, not here yet).

Short Leases (8 s / 6 s / 1.5 s) keep the test short; every bound is derived from them.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from controllers.reconcilers import api as rapi
from controllers.runtime import client as clients
from controllers.runtime import objects, restconfig, sharding
from rotator_devkit.controlplane import assets
from rotator_devkit.controlplane.cluster import LocalControlPlane
from rotator_devkit.devenv import manifests
from tests.support import monitoring
from tests.support.chain import Chain
from tests.support.controller import (
    ControllerProcess,
    install_crds,
    install_rbac,
    service_account_kubeconfig,
)
from tests.support.polling import wait_for
from tests.support.reconcilelog import Reconcile, entries, longest_overlap

SHARDS, REPLICAS = 6, 3
NAMESPACES, CHAINS_PER_NAMESPACE = 30, 2
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 8.0, 6.0, 1.5
SETTLE = 10 * LEASE_DURATION  # replicas joining one after another, each handover drained


@pytest.fixture
def cluster() -> Iterator[tuple[LocalControlPlane, clients.Client]]:
    with LocalControlPlane(assets.find()) as cp:
        api = clients.Client(restconfig.load(str(cp.kubeconfig)))
        install_crds(api)
        install_rbac(api)
        docs = manifests.kustomize(
            manifests.load(manifests.CONFIG / "sharding"),
            namespace=manifests.NAMESPACE,
            prefix=manifests.NAME_PREFIX,
        )
        manifests.apply(api, docs)
        yield cp, api


def holders(api: clients.Client, lease_id: str) -> dict[int, str]:
    """Shard → the holder of its Lease ("" when free or not yet created)."""
    out: dict[int, str] = {}
    for i in range(SHARDS):
        try:
            lease = api.get(
                objects.LEASES, f"{lease_id}-shard-{i}-of-{SHARDS}", namespace=manifests.NAMESPACE
            )
            out[i] = str(lease["spec"].get("holderIdentity") or "")
        except Exception:
            out[i] = ""
    return out


def identity(replica: ControllerProcess) -> str:
    return next(
        str(e["identity"])
        for _, e in entries(replica.logs())
        if e.get("event") == "rotator.starting"
    )


def held(replica: ControllerProcess) -> float | None:
    return replica.metric("rotator_shards_held")


def per_object(text: str, namespaces: set[str], *, ended_at: float) -> dict[str, list[Reconcile]]:
    """``controller:namespace/name`` → the replica's reconciles of it, in the test's
    namespaces."""
    starts: dict[str, tuple[str, float]] = {}
    ends: dict[str, float] = {}
    for at, e in entries(text):
        rid = e.get("reconcile_id")
        if not isinstance(rid, str):
            continue
        if e.get("event") == "reconcile.started" and e.get("namespace") in namespaces:
            starts[rid] = (f"{e.get('controller')}:{e.get('namespace')}/{e.get('name')}", at)
        elif e.get("event") in ("reconcile.done", "reconcile.failed", "reconcile.terminal_error"):
            ends[rid] = at
    out: dict[str, list[Reconcile]] = defaultdict(list)
    for rid, (key, start) in starts.items():
        out[key].append(Reconcile(key, start, ends.get(rid, ended_at), rid in ends))
    return out


def credential_hashes(api: clients.Client, namespaces: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for ns in namespaces:
        for s in api.list(objects.SECRETS, namespace=ns).get("items") or []:
            name = s["metadata"]["name"]
            if name.startswith("rotator-bsp-"):
                annotations = s["metadata"].get("annotations") or {}
                out[f"{ns}/{name}"] = str(annotations.get(rapi.CREDENTIAL_HASH_ANNOTATION))
    return out


def all_ready(api: clients.Client, namespaces: list[str]) -> bool:
    ready = 0
    for ns in namespaces:
        for p in api.list(rapi.POLICIES, namespace=ns).get("items") or []:
            conditions = (p.get("status") or {}).get("conditions") or []
            ready += any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    return ready == NAMESPACES * CHAINS_PER_NAMESPACE


def test_three_replicas_share_six_shards_and_take_over_a_killed_ones(
    cluster: tuple[LocalControlPlane, clients.Client], tmp_path: Path
) -> None:
    cp, api = cluster
    lease_id = f"shards-{uuid.uuid4().hex[:6]}"
    args = (
        "--shards", str(SHARDS),
        "--leader-election-namespace", manifests.NAMESPACE,
        "--leader-election-id", lease_id,
        "--leader-election-lease-duration", str(LEASE_DURATION),
        "--leader-election-renew-deadline", str(RENEW_DEADLINE),
        "--leader-election-retry-period", str(RETRY_PERIOD),
        "--workers", "2",
    )  # fmt: skip
    replicas: list[ControllerProcess] = []
    try:
        for n in range(REPLICAS):
            workdir = tmp_path / f"replica-{n}"
            workdir.mkdir()
            kubeconfig = service_account_kubeconfig(cp, api, workdir / "kubeconfig")
            replicas.append(
                ControllerProcess(kubeconfig, workdir, args=args).start(leader_elect=False)
            )
        wait_for(
            lambda: (
                all(held(r) == SHARDS // REPLICAS for r in replicas)
                and all(holders(api, lease_id).values())
            ),
            timeout=SETTLE,
            interval=0.5,
            what="two shards each",
        )
        ids = {identity(r): r for r in replicas}
        assert len(ids) == REPLICAS
        # what RotatorShardUnheld compares, in a real sharded scrape (test_dashboard_metrics'
        # single leader exports neither)
        assert all(r.metric("rotator_shards") == SHARDS for r in replicas)
        assert {"rotator_shards", "rotator_shards_held"} >= monitoring.SHARDED_ONLY
        logs = "\n".join(r.logs() for r in replicas)
        assert "client-side" in {
            e.get("mode") for _, e in entries(logs) if e.get("event") == "shards.filtering"
        }

        # 60 API-key chains in 30 namespaces (random names: FNV-1a spreads them over shards)
        namespaces = [f"sh-{uuid.uuid4().hex[:12]}" for _ in range(NAMESPACES)]

        def build(ns: str) -> None:
            api.create(objects.NAMESPACES, {"metadata": {"name": ns}})
            chain = Chain(api, ns)
            for j in range(CHAINS_PER_NAMESPACE):
                chain.secret(f"key-{j}", apiKey=f"sk-shards-{uuid.uuid4().hex}")
                chain.backend(f"b-{j}")
                chain.api_key_policy(f"p-{j}", secret=f"key-{j}", targets=[f"b-{j}"])
                chain.route(f"r-{j}", [f"b-{j}"])

        created = time.time()
        with ThreadPoolExecutor(6) as pool:
            list(pool.map(build, namespaces))
        wait_for(lambda: all_ready(api, namespaces), timeout=120, interval=1, what="all Ready")
        wait_for(lambda: all(r.idle() for r in replicas), timeout=60, what="replicas idle")
        before = credential_hashes(api, namespaces)
        assert len(before) == NAMESPACES * CHAINS_PER_NAMESPACE

        # every object reconciled by exactly one replica: the one holding its shard
        shard_holder = holders(api, lease_id)
        now = time.time()
        objects_of = {
            name: per_object(r.logs(), set(namespaces), ended_at=now) for name, r in ids.items()
        }
        keys = set().union(*objects_of.values())
        assert len(keys) >= NAMESPACES * CHAINS_PER_NAMESPACE * 3  # policy, backend, route
        for key in keys:
            by = {name for name, seen in objects_of.items() if key in seen}
            ns = key.split(":", 1)[1].split("/", 1)[0]
            assert by == {shard_holder[sharding.shard_of(ns, SHARDS)]}, key
        assert all(objects_of[name] for name in ids), "every replica worked"

        # SIGKILL one replica: the others take its shards once their Leases expired
        victim_id, victim = next(iter(ids.items()))
        lost = sorted(i for i, h in shard_holder.items() if h == victim_id)
        assert len(lost) == 2
        assert victim.proc is not None
        victim.proc.kill()
        killed = time.time()
        survivors = [r for r in replicas if r is not victim]
        wait_for(
            lambda: all(holders(api, lease_id)[i] not in ("", victim_id) for i in lost),
            timeout=LEASE_DURATION + 6 * RETRY_PERIOD + 10,
            interval=0.2,
            what="the killed replica's shards taken",
        )
        takeover = time.time() - killed
        print(
            f"\ntakeover of 2 shards after SIGKILL: {takeover:.1f} s (lease {LEASE_DURATION:g} s)"
        )
        assert takeover >= LEASE_DURATION - RETRY_PERIOD, "never while its Leases were live"
        assert takeover <= LEASE_DURATION + 3 * RETRY_PERIOD * 1.2 + 1.0, takeover
        wait_for(
            lambda: all(held(r) == SHARDS // (REPLICAS - 1) for r in survivors),
            timeout=SETTLE,
            interval=0.5,
            what="three shards each",
        )
        moved = {ns for ns in namespaces if sharding.shard_of(ns, SHARDS) in lost}

        def moved_policies_reconciled() -> bool:
            seen = set()
            for r in survivors:
                for key, rs in per_object(r.logs(), moved, ended_at=time.time()).items():
                    if key.startswith("backendsecuritypolicy:") and any(
                        x.start > killed for x in rs
                    ):
                        seen.add(key)
            return len(seen) == len(moved) * CHAINS_PER_NAMESPACE

        wait_for(moved_policies_reconciled, timeout=60, what="moved policies adopted")
        wait_for(lambda: all(r.idle() for r in survivors), timeout=60, what="survivors idle")
        assert all_ready(api, namespaces)
        assert credential_hashes(api, namespaces) == before, "no credential minted again"

        # never two replicas on one object at once (the killed one's last reconciles ran at
        # most until it died)
        now = time.time()
        logs_of = {
            name: per_object(r.logs(), set(namespaces), ended_at=now) for name, r in ids.items()
        }
        logs_of[victim_id] = per_object(victim.logs(), set(namespaces), ended_at=killed)
        names = list(logs_of)
        worst = max(
            (
                longest_overlap(logs_of[a].get(key, []), logs_of[b].get(key, []))
                for key in keys
                for x, a in enumerate(names)
                for b in names[x + 1 :]
            ),
            default=0.0,
        )
        print(f"longest overlap of two replicas on one object: {worst:.3f} s (<= 0: none)")
        assert worst <= 0, worst
        assert created < killed
        for r in survivors:
            assert r.stop() == 0, r.logs()[-3000:]
    finally:
        for r in replicas:
            if r.proc is not None:
                r.proc.close()
