"""A sharded replica's metrics belong to its shards (docs/api.md, Metrics): the per-controller
series of a shard carry its index as a ``shard`` label, so two shards of one replica never share
(or overwrite) a queue depth or a worker count; and a shard given up takes its series with it —
its controllers' and its objects' (a credential's expiry, a Route's pending rollout) — so a
replica never exports a frozen figure about work another replica now does. A replica without
shards has no shard label at all: its exposition is controller-runtime's, as before.
(The same in real replicas: tests/e2e/test_shards.py, ``assert_series_follow_the_shards``.)"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from apscheduler.schedulers.background import BackgroundScheduler
from prometheus_client import CollectorRegistry, generate_latest

from controllers.reconcilers.metrics import CredentialMetrics, RouteMetrics
from controllers.runtime import clock as clocks
from controllers.runtime import sharding, shards
from controllers.runtime.controller import Controller
from controllers.runtime.manager import Manager, ManagerOptions
from controllers.runtime.metrics import Metrics
from controllers.runtime.reconcile import Request, Result
from controllers.runtime.timers import APSchedulerTimers
from tests.support.fake_api import FakeTransport

SHARDS = 6


class Nothing:
    def reconcile(self, request: Request) -> Result:
        return Result()


def manager(metrics: Metrics) -> Manager:
    options = ManagerOptions(metrics_bind_address="0", health_probe_bind_address="0")
    return Manager(FakeTransport().client(), options, metrics=metrics)


def shard(mgr: Manager, index: int) -> shards.Shard:
    return shards.Shard(
        index,
        SHARDS,
        api=mgr.api,
        metrics=mgr.metrics,
        recorder=mgr.recorder,
        clock=clocks.RealClock(),
    )


def exposition(metrics: Metrics) -> str:
    return generate_latest(metrics.registry).decode()


def queue(metrics: Metrics, family: str, shard: str) -> float | None:
    labels = {"name": "policy", "controller": "policy", "shard": shard}
    return metrics.registry.get_sample_value(family, labels)


def namespace_in(index: int) -> str:
    return next(f"ns-{i}" for i in range(10_000) if sharding.shard_of(f"ns-{i}", SHARDS) == index)


def test_without_shards_the_series_are_controller_runtimes_with_no_shard_label() -> None:
    metrics = Metrics()
    timers = APSchedulerTimers(BackgroundScheduler())
    Controller("policy", Nothing(), timers=timers, metrics=metrics)
    text = exposition(metrics)
    assert 'controller_runtime_reconcile_total{controller="policy",result="success"} 0.0' in text
    assert 'workqueue_depth{controller="policy",name="policy"} 0.0' in text
    assert "shard=" not in text
    with pytest.raises(ValueError, match="sharded=True"):
        metrics.for_shard(0)


def test_two_shards_controllers_of_one_name_have_a_series_each() -> None:
    mgr = manager(Metrics(sharded=True))
    first, second = shard(mgr, 0), shard(mgr, 3)
    for s in (first, second):
        s.new_controller("policy", Nothing())
    first.controllers[0].queue.add(Request("ns", "a"))
    m = mgr.metrics
    assert queue(m, "workqueue_depth", "0") == 1
    assert queue(m, "workqueue_depth", "3") == 0
    assert queue(m, "workqueue_adds_total", "0") == 1
    assert 'controller="policy",result="success",shard="3"' in exposition(m)


def test_a_closed_shard_drops_its_controllers_series_and_leaves_the_others() -> None:
    mgr = manager(Metrics(sharded=True))
    given_up, kept = shard(mgr, 1), shard(mgr, 4)
    for s in (given_up, kept):
        s.new_controller("policy", Nothing())
        s.new_controller("route", Nothing())
    given_up.controllers[0].queue.add(Request("ns", "queued-when-given-up"))
    given_up.close()
    text = exposition(mgr.metrics)
    assert 'shard="1"' not in text  # every family: reconcile counts, times, workers, queues
    for controller in ("policy", "route"):
        assert f'controller="{controller}",result="error",shard="4"' in text
        assert f'controller="{controller}",name="{controller}",shard="4"' in text


def test_a_closed_shard_runs_its_close_hooks_even_after_one_failed() -> None:
    mgr = manager(Metrics(sharded=True))
    s = shard(mgr, 2)
    ran: list[str] = []

    def failing() -> None:
        ran.append("failing")
        raise RuntimeError("a bug in one hook")

    s.on_close(failing)
    s.on_close(lambda: ran.append("second"))
    s.close()
    assert ran == ["failing", "second"]


def test_a_shard_holds_the_namespaces_the_api_servers_hash_puts_in_it() -> None:
    mgr = manager(Metrics(sharded=True))
    s = shard(mgr, 5)
    for i in range(300):
        ns = f"tenant-{i}"
        assert s.holds(ns) == (sharding.shard_of(ns, SHARDS) == 5), ns


def test_the_object_series_of_a_given_up_shard_go_and_the_others_stay() -> None:
    registry = CollectorRegistry()
    credentials = CredentialMetrics(registry)
    routes = RouteMetrics(registry)
    mine, other = namespace_in(0), namespace_in(1)
    for ns in (mine, other):
        credentials.served(Request(ns, "p"), "AWSCredentials", expires_at=2e9, renews_at=1.9e9)
        routes.rollout_pending(ns, "r", True)
    in_shard_0 = shards_filter(0)
    credentials.forget_namespaces(in_shard_0)
    routes.forget_namespaces(in_shard_0)
    text = generate_latest(registry).decode()
    assert f'namespace="{mine}"' not in text
    for name in ("expiration", "renewal"):
        assert (
            registry.get_sample_value(
                f"rotator_credential_{name}_timestamp_seconds",
                {"namespace": other, "name": "p", "type": "AWSCredentials"},
            )
            is not None
        )
    assert (
        registry.get_sample_value(
            "rotator_route_rollouts_pending", {"namespace": other, "route": "r"}
        )
        == 1
    )
    # a Route forgotten one by one is forgotten for the shard's sweep too (no stale key left)
    routes.forget_route(other, "r")
    routes.forget_namespaces(lambda ns: True)
    assert "rotator_route_rollouts_pending{" not in generate_latest(registry).decode()


def shards_filter(index: int) -> Callable[[str], bool]:
    return sharding.ShardFilter((sharding.ranges(SHARDS)[index],)).holds


def test_a_sharded_replica_built_with_unsharded_metrics_is_refused() -> None:
    mgr = manager(Metrics())
    with pytest.raises(ValueError, match="sharded=True"):
        shards.ShardedManager(
            mgr,
            shards.ShardOptions(id="rotator", namespace="ns", identity="me", shards=SHARDS),
            register=lambda s: None,
        )


def test_a_shard_whose_setup_failed_leaves_no_series() -> None:
    """The controllers built before the setup code failed made their series; the shard is
    closed, so they go (the coordinator gives the shard back)."""
    mgr = manager(Metrics(sharded=True))

    def failing(s: shards.Shard) -> None:
        s.new_controller("policy", Nothing())
        raise RuntimeError("setup failed half-way")

    sharded = shards.ShardedManager(
        mgr,
        shards.ShardOptions(id="rotator", namespace="ns", identity="me", shards=SHARDS),
        register=failing,
    )
    with pytest.raises(RuntimeError, match="half-way"):
        sharded.coordinator._build(2)
    assert 'shard="2"' not in exposition(mgr.metrics)
