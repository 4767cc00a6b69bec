"""One hop per event: how many reconciles one edit costs, counted from the controller's own
reconcile log lines (the controller runs with ``--log-level debug``)."""

from __future__ import annotations

from collections import Counter

from tests.support import reconcilelog
from tests.support.chain import AWSChain
from tests.support.controller import ControllerProcess
from tests.support.polling import wait_for


def reconciles(log: str, namespace: str) -> Counter[str]:
    """Reconciles started in ``namespace``, by ``controller:name`` (a failure then says which
    object ran once too often), from :func:`tests.support.reconcilelog.reconciles`."""
    return Counter(
        r.key  # started ones: when they ended (ended_at) is not counted
        for r in reconcilelog.reconciles(log, ended_at=0.0)
        if r.namespace == namespace
    )


def by_controller(counts: Counter[str]) -> Counter[str]:
    out: Counter[str] = Counter()
    for key, n in counts.items():
        out[key.partition(":")[0]] += n
    return out


def served(chain: AWSChain, route: str) -> str | None:
    credentials = chain.backend_credentials(route).get("b") or {}
    return (credentials.get("data") or {}).get("apiKey")


def both_serve(chain: AWSChain, key: str) -> None:
    wait_for(
        lambda: served(chain, "r1") == key and served(chain, "r2") == key,
        what=f"both routes serving {key[-6:]}",
    )


def test_a_secret_edit_costs_one_reconcile_per_affected_object(
    chain: AWSChain, controller: ControllerProcess
) -> None:
    """Secret → its policy (1) → the derived Secret's event → each Route embedding it (1 each);
    the ServiceBackend is untouched (its policy stayed Ready), and neither rotator's own write
    of the derived Secret nor of a route config wakes its owner again.

    Mutations caught: the echo predicate removed (the policy and the routes are reconciled
    twice); the derived Secret → Route source removed (the routes never see the new key); the
    Secret → policy source removed (nothing happens)."""
    chain.secret("key", apiKey="sk-event-paths-first")
    chain.api_key_policy("p", secret="key", targets=["b"])
    chain.backend("b")
    # the Routes come once the backend's status is written: that write wakes every Route on the
    # backend, and a CI run under load saw its event reach the Route queue after `before`
    chain.wait_condition("backend", "b", "ResolvedRefs", "True", "ResolvedRefs")
    chain.route("r1", ["b"])
    chain.route("r2", ["b"])
    both_serve(chain, "sk-event-paths-first")
    for route in ("r1", "r2"):
        chain.wait_condition("route", route, "ResolvedRefs", "True")
    wait_for(controller.idle, what="the controller idle")
    before = reconciles(controller.logs(), chain.ns)
    assert by_controller(before)["backendsecuritypolicy"] >= 1  # positive control: counted

    chain.secret("key", apiKey="sk-event-paths-second")
    both_serve(chain, "sk-event-paths-second")
    wait_for(controller.idle, what="the controller idle again")
    after = reconciles(controller.logs(), chain.ns)
    each = {key: after[key] - before[key] for key in set(after) | set(before)}
    cost = by_controller(Counter(each))
    print(f"\nreconciles for one Secret edit: {dict(cost)}; by object: {each}")
    assert cost.get("backendsecuritypolicy", 0) == 1, each
    assert cost.get("route", 0) == 2, each
    assert cost.get("servicebackend", 0) == 0, each
