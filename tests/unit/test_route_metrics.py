"""The Route controller's metrics, through the real reconciler against the in-memory API server
(tests/unit/test_rollout_restarts.py's world): ``rotator_route_config_writes_total`` counts the
config Secret writes that were sent, not the reconciles that found it written;
``rotator_route_rollouts_total`` counts each rollout patch by kind and result, its failure series
there at 0 from the start; ``rotator_route_rollouts_pending`` is 1 from a configuration change
until every target took it, and goes with the Route or its last target."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from controllers.reconcilers import api
from controllers.reconcilers.cache import ownwrites
from controllers.reconcilers.metrics import ROLLOUT_KINDS, RouteMetrics
from controllers.reconcilers.route import RouteReconciler, formats
from controllers.runtime import objects
from tests.unit.test_rollout_restarts import DB, GW, WINDOW, Targets
from tests.unit.test_route_reconciler import NS

OWN = api.DEFAULT_OUTPUT_FORMAT


class Metered(Targets):
    """:class:`Targets` whose reconciler reports to a registry of its own."""

    def restart(self) -> None:
        if not hasattr(self, "registry"):
            self.registry = CollectorRegistry()
            self.metrics = RouteMetrics(self.registry, formats=formats.FORMATS)
        self.own_writes = ownwrites.OwnWrites()
        self.reconciler = RouteReconciler(
            api_client=self.api,
            routes=self.routes,
            backends=self.backends,
            policies=self.policies,
            managed_secrets=self.managed,
            recorder=self.recorder,
            own_writes=self.own_writes,
            clock=self.clock,
            metrics=self.metrics,
        )

    def value(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, labels)

    def writes(self, fmt: str = OWN) -> float | None:
        return self.value("rotator_route_config_writes_total", format=fmt)

    def rolled(self, kind: str, result: str) -> float | None:
        return self.value("rotator_route_rollouts_total", kind=kind, result=result)

    def pending(self) -> float | None:
        return self.value("rotator_route_rollouts_pending", namespace=NS, route="r")

    def changed(self) -> None:
        """A new credential, and the reconcile once the debounce window has passed."""
        self.key(b"sk-" + str(len(self.api.writes)).encode())
        self.reconcile()
        self.clock.advance(WINDOW)
        self.reconcile()


def test_the_series_increase_needs_exist_at_zero_from_the_start() -> None:
    """Broken by the initialisation dropped: increase() would miss each first write or failure."""
    world = Metered([GW])
    for fmt in formats.FORMATS:
        assert world.writes(fmt) == 0.0, fmt
    for kind in ROLLOUT_KINDS:
        assert world.rolled(kind, "failure") == 0.0, kind
    assert world.pending() is None, "no series before the Route is reconciled"


def test_a_config_write_is_counted_once_and_a_reconcile_that_writes_nothing_is_not() -> None:
    """Broken by counting in write() whatever _ensure did, or by counting rendered configurations:
    the Secret repaired of its inputs record only (rendered again, the same data) is no write."""
    world = Metered([])
    world.reconcile()
    assert world.writes() == 1.0
    world.clock.advance(3600)
    world.reconcile()  # resync: in place, not rendered
    assert world.writes() == 1.0
    name = api.route_config_secret_name("r")
    secret = world.api.stored(objects.SECRETS, NS, name)
    assert secret is not None
    annotations = dict(secret["metadata"]["annotations"])
    del annotations[api.CONFIG_INPUTS_ANNOTATION]
    world.edit(objects.SECRETS, name, metadata={"annotations": annotations})
    writes = len(world.api.writes_to(objects.SECRETS))
    world.reconcile()  # rendered again: the data is the same, nothing is sent
    assert len(world.api.writes_to(objects.SECRETS)) == writes
    assert world.writes() == 1.0
    world.key(b"sk-two")
    world.reconcile()
    assert world.writes() == 2.0
    assert world.writes("LiteLLM") == 0.0


def test_a_rollout_is_pending_from_the_change_until_every_target_took_it() -> None:
    """Broken by the gauge set only from the condition (0 through the debounce window), or left
    at 1 after the rollout."""
    world = Metered([GW, DB])
    world.reconcile()
    assert world.pending() == 0.0, "the first configuration is what the targets start with"
    world.key(b"sk-two")
    world.reconcile()
    assert world.pending() == 1.0, "debounced: the Secret is ahead of the targets"
    assert world.rolled("Deployment", "success") is None
    world.clock.advance(WINDOW)
    world.reconcile()
    assert world.rollouts(), "rolled out"
    assert world.pending() == 0.0
    assert world.rolled("Deployment", "success") == 1.0
    assert world.rolled("StatefulSet", "success") == 1.0
    assert world.rolled("StatefulSet", "failure") == 0.0
    world.clock.advance(3600)
    world.reconcile()  # no-op: nothing sent, nothing counted
    assert world.rolled("Deployment", "success") == 1.0
    assert world.pending() == 0.0


def test_a_target_left_out_is_a_failure_and_keeps_the_rollout_pending_until_it_takes_it() -> None:
    """Broken by counting a refused patch (no opt-in) or a missing target as a success, or by the
    gauge dropping to 0 while the condition is False."""
    world = Metered([GW, DB], not_opted_in=("db",))
    world.reconcile()
    world.changed()
    condition = world.rollout_condition()
    assert condition is not None
    assert condition["status"] == "False"
    assert world.rolled("Deployment", "success") == 1.0
    assert world.rolled("StatefulSet", "failure") == 1.0
    assert world.pending() == 1.0
    world.clock.advance(3600)  # past any backoff: tried again, refused again
    world.reconcile()
    assert world.rolled("StatefulSet", "failure") == 2.0
    assert world.pending() == 1.0
    world.workload(DB)  # its owner opts in
    world.clock.advance(3600)
    world.reconcile()
    assert world.rolled("StatefulSet", "success") == 1.0
    assert world.pending() == 0.0


def test_a_missing_target_is_a_failure_of_its_kind() -> None:
    world = Metered([GW, DB], missing=("gw",))
    world.reconcile()
    world.changed()
    assert world.rolled("Deployment", "failure") == 1.0
    assert world.rolled("StatefulSet", "success") == 1.0
    assert world.pending() == 1.0


def test_the_pending_series_goes_with_the_last_target_and_with_the_route() -> None:
    """Broken by a series left behind: one per Route ever rolled out, for ever."""
    world = Metered([GW])
    world.reconcile()
    assert world.pending() == 0.0
    world.set_targets([])
    world.reconcile()
    assert world.pending() is None
    world.set_targets([GW])
    world.reconcile()
    assert world.pending() == 0.0
    world.api.remove(api.ROUTES, NS, "r")
    world.reconcile()
    assert world.pending() is None
