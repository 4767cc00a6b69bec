"""The scale benchmark's floors (tests/bench/floors.py): what the replay makes again, how the
relay puts a key into a route config, and how a propagation's stages are read from the audit
log. The benchmark asserts nothing, so its arithmetic is checked here."""

from __future__ import annotations

import base64
import random
from collections import Counter
from typing import cast

import pytest

from controllers.reconcilers import api as rapi
from controllers.reconcilers.cache import secretviews
from controllers.runtime import client as clients
from controllers.runtime import objects
from tests.bench import floors
from tests.bench import scale as scale_bench
from tests.support import audit, scale
from tests.support.recording import percentile


def request(verb: str, resource: str, name: str = "x", **kw: object) -> audit.Request:
    fields: dict[str, object] = {
        "verb": verb,
        "resource": resource,
        "subresource": "",
        "namespace": "chains-000",
        "name": name,
        "user": "system:serviceaccount:rotator-system:rotator",
        "stage": "ResponseComplete",
        "code": 200,
    }
    fields.update(kw)
    return audit.Request(**fields)  # type: ignore[arg-type]


def test_the_replay_makes_writes_and_secret_gets_again_not_lists_watches_or_leases() -> None:
    assert floors.replayed(request("patch", "secrets"))
    assert floors.replayed(request("patch", "routes", subresource="status"))
    assert floors.replayed(request("create", "events"))
    assert floors.replayed(request("get", "secrets"))
    assert not floors.replayed(request("get", "routes"))
    assert not floors.replayed(request("list", "secrets"))
    assert not floors.replayed(request("watch", "secrets"))
    assert not floors.replayed(request("update", "leases"))
    assert not floors.replayed(request("patch", "secrets", stage="ResponseStarted"))


def test_with_key_replaces_only_the_api_key_line() -> None:
    config = "backends:\n  - name: b\n    apiKey: old-key\n    note: apiKey: kept\n"
    encoded = base64.b64encode(config.encode()).decode()
    out = base64.b64decode(floors.with_key(encoded, "new-key")).decode()
    assert out == "backends:\n  - name: b\n    apiKey: new-key\n    note: apiKey: kept\n"


def test_controller_stages_follow_the_three_requests_of_one_update() -> None:
    fleet = scale.Fleet(10, 0)
    ns = fleet.chain_namespace(3)
    config = fleet.route_config(3).split("/", 1)[1]
    sample = floors.Sample(3, "k", sent=100.000, arrived=100.050)

    def at(verb: str, name: str, received: float, completed: float) -> audit.Request:
        return request(verb, "secrets", name, namespace=ns, received=received, completed=completed)

    requests = [
        at("get", fleet.source_secret(3), 99.0, 99.001),  # before the update: not its GET
        at("get", fleet.source_secret(3), 100.010, 100.012),
        at("patch", "rotator-bsp-p-00003", 100.015, 100.020),
        at("patch", config, 100.030, 100.040),
    ]
    stages = floors.controller_stages(sample, fleet, requests)
    assert stages is not None
    assert [round(s * 1000) for s in stages] == [10, 2, 3, 5, 10, 10, 10]
    assert round(sum(stages), 6) == round(sample.latency, 6)
    assert floors.controller_stages(sample, fleet, requests[:3]) is None


def test_the_sample_at_a_percentile_is_the_nearest_rank() -> None:
    samples = [floors.Sample(i, str(i), 0.0, float(i)) for i in range(100)]
    assert floors.at_percentile(samples, 99).chain == 98
    assert floors.at_percentile(samples, 50).chain == 50


class _Pages:
    """A client whose every list answers ``per_list`` pages of two items, chained by continue
    tokens; it records what each list asked for."""

    def __init__(self, per_list: int) -> None:
        self.per_list = per_list
        self.asked: list[dict[str, object]] = []

    def list(self, resource: objects.Resource, **query: object) -> dict[str, object]:
        self.asked.append({"resource": resource.plural, **query})
        token = query.get("continue_token")
        page = 1 if token is None else int(str(token)) + 1
        more = {"continue": str(page)} if page < self.per_list else {}
        return {"items": [{}, {}], "metadata": more}


def test_the_restart_floor_lists_every_page_of_the_controllers_views_as_they_list() -> None:
    pages = _Pages(per_list=3)
    views = scale_bench.restart_views(cast(clients.Client, pages))
    relisted = floors.relist(cast(clients.Client, pages), views)
    assert (relisted.pages, relisted.objects) == (15, 30)
    firsts = [a for a in pages.asked if a["continue_token"] is None]
    assert [(a["resource"], a["label_selector"], a["metadata_only"]) for a in firsts] == [
        ("secrets", None, True),
        ("secrets", rapi.MANAGED_SELECTOR, False),
        ("backendsecuritypolicies", None, False),
        ("servicebackends", None, False),
        ("routes", None, False),
    ]
    assert firsts[1]["limit"] == secretviews.MANAGED_PAGE_SIZE
    assert [a["max_bytes"] for a in firsts] == [v.page_bytes for v in views]
    assert [a["continue_token"] for a in pages.asked[:3]] == [None, "1", "2"]


def test_the_interleaved_order_is_seeded_and_alike_before_either_kind() -> None:
    kinds = scale_bench.interleaved(2000)
    assert kinds == scale_bench.interleaved(2000), "each run sends the same order"
    assert Counter(kinds) == {"controller": 2000, "floor": 2000}
    assert kinds != scale_bench.interleaved(2000, seed=1)
    for lag in (1, 2, 3):
        before = scale_bench.after(kinds, lag)
        shares = {kind: before[kind].count("controller") / len(before[kind]) for kind in before}
        assert abs(shares["controller"] - shares["floor"]) < 0.05, (lag, shares)


def test_each_update_knows_which_kind_ran_lag_updates_before_it() -> None:
    kinds = ["controller", "floor", "floor", "controller", "floor"]
    assert scale_bench.after(kinds) == {
        "controller": ["none", "floor"],
        "floor": ["controller", "floor", "controller"],
    }
    assert scale_bench.after(kinds, 2) == {
        "controller": ["none", "floor"],
        "floor": ["none", "controller", "floor"],
    }


def test_the_ratio_interval_holds_the_ratio_and_narrows_with_more_samples() -> None:
    """Break: the two kinds swapped or resampled as one (or not at all), the tails cut at the
    wrong end, or the seed ignored."""
    kinds = scale_bench.interleaved(5000)
    assert scale_bench.ratio_interval(kinds, [2.0] * 5000, [1.0] * 5000, 99) == (2.0, 2.0)
    rng = random.Random(1)
    ours = [rng.lognormvariate(0, 0.5) * 1.5 for _ in range(5000)]
    theirs = [rng.lognormvariate(0, 0.5) for _ in range(5000)]
    low, high = scale_bench.ratio_interval(kinds, ours, theirs, 99, rounds=400)
    point = percentile(ours, 99) / percentile(theirs, 99)
    assert low < point < high
    assert low > 1.2
    assert high < 1.8
    few = scale_bench.interleaved(200)
    few_low, few_high = scale_bench.ratio_interval(few, ours[:200], theirs[:200], 99, rounds=400)
    assert few_high - few_low > 2 * (high - low)
    assert scale_bench.ratio_interval(kinds, ours, theirs, 99, rounds=400) == (low, high)


def test_the_ratio_interval_draws_blocks_of_the_schedule_with_both_kinds_in_them() -> None:
    """Break: updates resampled one by one, or each kind on its own: a slow stretch of the
    machine, which slows both kinds at once, would then move one side of the ratio without the
    other, and the interval would read wider than the run's samples allow."""
    kinds = scale_bench.interleaved(5000)
    rng = random.Random(2)
    slow = {n for start in (3000, 7000) for n in range(start, start + 50)}
    at = [rng.lognormvariate(0, 0.3) * (5 if n in slow else 1) for n in range(10000)]
    ours = [x for x, kind in zip(at, kinds, strict=True) if kind == "controller"]
    theirs = [x for x, kind in zip(at, kinds, strict=True) if kind == "floor"]
    point = percentile(ours, 99) / percentile(theirs, 99)
    whole = scale_bench.ratio_interval(kinds, ours, theirs, 99, rounds=50, block=10000)
    assert whole == (point, point)  # one block: every draw is the run itself
    blocked = scale_bench.ratio_interval(kinds, ours, theirs, 99, rounds=400)
    single = scale_bench.ratio_interval(kinds, ours, theirs, 99, rounds=400, block=1)
    assert blocked[1] - blocked[0] < 0.85 * (single[1] - single[0])
    with pytest.raises(ValueError, match="schedule"):
        scale_bench.ratio_interval(kinds[:10], ours[:5], theirs[:4], 99)
