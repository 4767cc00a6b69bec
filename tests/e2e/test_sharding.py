"""The shard function (controllers/runtime/sharding.py) agrees with a real API server's
server-side sharded list (``ShardedListAndWatch``, alpha in v1.36) for every namespace: a
replica that filters on its own side and one whose server filters hold the same objects.

A control plane of the test's own runs with the gate on; 1,000 namespaces each hold a ConfigMap;
for 2, 3 and 7 shards, each shard's list is what the server returned for its selector, and the
client's :func:`sharding.shard_of` must name that shard for every namespace in it. The session's
control plane (gate off) shows how a replica tells the modes apart: the parameter is ignored,
everything comes back, and no ``shardInfo`` says otherwise.

With the gate, a v1.36 server filters the lists rotator's informers make of its own kinds (custom
resources) and its metadata-only list of every Secret as well, but says so only on the full lists
of built-in kinds: the other lists carry no ``shardInfo`` (their list types have no setter for
it), so a replica learns the server's mode from the lists that echo (controllers/runtime/
shards.py, ``_log_mode``).

Deliberate break that fails it: FNV-1 instead of FNV-1a (the multiply before the xor; checked
by hand). The exact bounds (a rounding off by one unit is too rare to show in 1,000 samples) are
pinned by tests/unit/test_sharding.py against the API server's own examples.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from structlog.testing import capture_logs

from controllers.reconcilers import api as rapi
from controllers.runtime import client as clients
from controllers.runtime import objects, restconfig, sharding, shardsizes
from rotator_devkit.controlplane import assets
from rotator_devkit.controlplane.cluster import ControlPlaneOptions, LocalControlPlane
from rotator_devkit.devenv import manifests

NAMESPACES = 1000
BACKENDS = 200
"""Namespaces (of the :data:`NAMESPACES`) that also hold a ServiceBackend, rotator's own kind."""
GATE = "--feature-gates=ShardedListAndWatch=true"
LABEL = "rotator.dev/shard-test"
CONFIGMAPS = objects.Resource("", "v1", "configmaps", "ConfigMap")


@pytest.fixture(scope="module")
def gated() -> Iterator[clients.Client]:
    """An API server with the gate on (its own control plane), holding :data:`NAMESPACES`
    namespaces with a labelled ConfigMap each, and in :data:`BACKENDS` of them a labelled
    ServiceBackend."""
    options = ControlPlaneOptions(extra_apiserver_flags=(GATE,))
    with LocalControlPlane(assets.find(), options) as cp:
        api = clients.Client(restconfig.load(str(cp.kubeconfig)))
        manifests.install_crds(api)
        run = uuid.uuid4().hex[:6]
        # random names: FNV-1a's top bits hardly depend on a name's last characters, so
        # names that differ only in a counter at the end share a few shards (1,000 of
        # shard-<run>-NNNN fell into 3 of 7); the agreement needs every shard populated
        names = [f"shard-{uuid.uuid4().hex[:16]}" for _ in range(NAMESPACES)]

        def make(name: str) -> None:
            api.create(objects.NAMESPACES, {"metadata": {"name": name}})
            body = {"metadata": {"name": "probe", "labels": {LABEL: run}}}
            api.create(CONFIGMAPS, body, namespace=name)

        def backend(name: str) -> None:
            body = {
                "apiVersion": rapi.API_VERSION,
                "kind": rapi.BACKENDS.kind,
                "metadata": {"name": "probe", "labels": {LABEL: run}},
                "spec": {"schema": "OpenAI", "endpoint": {"host": "api.openai.com"}},
            }
            api.create(rapi.BACKENDS, body, namespace=name)

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(make, names))
            list(pool.map(backend, names[:BACKENDS]))
        yield api


def listed(
    api: clients.Client,
    selector: str | None,
    resource: objects.Resource = CONFIGMAPS,
    *,
    metadata_only: bool = False,
) -> tuple[set[str], dict[str, Any]]:
    """The namespaces of every labelled object (a ConfigMap unless said) a list returns (all
    pages), and the first page's ``metadata``."""
    found: set[str] = set()
    first: dict[str, Any] | None = None
    token: str | None = None
    while True:
        body = api.list(
            resource,
            label_selector=LABEL,
            limit=500,
            continue_token=token,
            shard_selector=selector,
            metadata_only=metadata_only,
        )
        first = first if first is not None else dict(body["metadata"])
        found |= {item["metadata"]["namespace"] for item in body.get("items") or []}
        token = body["metadata"].get("continue")
        if not token:
            return found, first


@pytest.mark.parametrize("shards", [2, 3, 7])
def test_the_shard_of_every_namespace_is_the_one_the_api_server_lists_it_in(
    gated: clients.Client, shards: int
) -> None:
    everything, _ = listed(gated, None)
    assert len(everything) == NAMESPACES
    seen: dict[str, int] = {}
    for shard in sharding.ranges(shards):
        selector = shard.selector()
        found, metadata = listed(gated, selector)
        # the server filtered (the gate is on) and says with which selector
        assert (metadata.get("shardInfo") or {}).get("selector") == selector, metadata
        for namespace in found:
            assert namespace not in seen, f"{namespace} listed in shards {seen[namespace]} too"
            seen[namespace] = shard.index
    assert set(seen) == everything, "every namespace is in one shard"
    wrong = {ns: (i, sharding.shard_of(ns, shards)) for ns, i in seen.items()
             if sharding.shard_of(ns, shards) != i}  # fmt: skip
    assert not wrong, f"{len(wrong)} namespaces (server's shard, client's): {list(wrong)[:5]}"
    sizes = sorted(sum(1 for i in seen.values() if i == s) for s in range(shards))
    print(f"\n{shards} shards: namespaces per shard {sizes}")


def test_merged_ranges_select_the_union_of_their_shards(gated: clients.Client) -> None:
    """Two adjacent shards of seven in one selector (merged into one range) and two apart (two
    ranges joined by ||): each list is the union of the shards' own (each holds some)."""
    seven = sharding.ranges(7)
    for owned in ((seven[2], seven[3]), (seven[0], seven[5])):
        selector = sharding.selector(owned)
        found, metadata = listed(gated, selector)
        assert (metadata.get("shardInfo") or {}).get("selector") == selector
        each = [listed(gated, s.selector())[0] for s in owned]
        assert all(each), "every shard of the pair holds namespaces"
        assert found == set().union(*each)


def test_custom_resources_and_metadata_only_lists_are_filtered_without_saying_so(
    gated: clients.Client,
) -> None:
    """What a replica's informers of rotator's kinds and of every Secret's metadata get from a
    gated server: only the shard's objects, with no ``shardInfo`` (v1.36.3; should a later
    release echo there too, the rule in ``shards.Coordinator._log_mode`` still holds, and this
    test says the docs can be simplified)."""
    for shard in sharding.ranges(3):
        selector = shard.selector()
        expected, echoed = listed(gated, selector)
        assert "shardInfo" in echoed, "the full list of a built-in kind says it was filtered"
        found, metadata = listed(gated, selector, metadata_only=True)
        assert found == expected, "the metadata-only list is the shard's"
        assert "shardInfo" not in metadata
        everything, _ = listed(gated, None, rapi.BACKENDS)
        found, metadata = listed(gated, selector, rapi.BACKENDS)
        assert found == {ns for ns in everything if shard.holds(ns)}, "the custom resources too"
        assert found, "the shard holds some"
        assert "shardInfo" not in metadata


def test_a_server_without_the_gate_ignores_the_selector_and_says_nothing(
    api: clients.Client, namespace: str
) -> None:
    """The suite's own control plane runs without the gate: the parameter is ignored (every
    object comes back) and no ``shardInfo`` claims a filter — how a replica knows it must
    filter on its own side."""
    api.create(
        CONFIGMAPS, {"metadata": {"name": "probe", "labels": {LABEL: "x"}}}, namespace=namespace
    )
    other = next(s for s in sharding.ranges(7) if not s.holds(namespace))
    found, metadata = listed(api, other.selector())
    assert namespace in found
    assert "shardInfo" not in metadata


@pytest.mark.parametrize("shards", [2, 3, 7])
def test_shard_sizes_the_server_counts_are_each_shards_objects(
    gated: clients.Client, shards: int
) -> None:
    """What a replica places free shards by (controllers/runtime/shardsizes.py): a Table per
    shard selector, counted. They agree with a plain list hashed on this side, and the
    ``remainingItemCount`` a list with ``limit=1`` gives is not a shard's (the reason for the
    Tables: v1.36.3 counts every object of the kind there)."""
    everything, _ = listed(gated, None, rapi.BACKENDS)
    assert len(everything) == BACKENDS
    expected = {
        s.index: sum(1 for ns in everything if s.holds(ns)) for s in sharding.ranges(shards)
    }
    counted = shardsizes.ShardSizes(
        gated, rapi.BACKENDS, shards, lease_namespace="default", timeout=30.0
    )()
    # equal sizes say nothing (by design): with random names, 2 shards split 100/100 at times
    assert counted == (expected if len(set(expected.values())) > 1 else None)
    first = sharding.ranges(shards)[0]
    one = gated.list(rapi.BACKENDS, limit=1, shard_selector=first.selector())
    assert one["metadata"].get("remainingItemCount") == BACKENDS - 1 != expected[0] - 1
    print(f"\n{shards} shards: ServiceBackends per shard {[expected[i] for i in sorted(expected)]}")


def test_a_server_without_the_gate_gives_no_shard_sizes(api: clients.Client) -> None:
    """Its lists ignore the selector: every shard would count the whole kind. The probe (one
    Lease list) says so, and no Table is asked for."""
    sizes = shardsizes.ShardSizes(api, rapi.BACKENDS, 3, lease_namespace="default", timeout=30.0)
    with capture_logs() as logs:
        assert sizes() is None
    said = [(e["event"], e.get("why")) for e in logs]
    assert said == [("shards.sizes_not_counted", "the API server does not filter")], said
