"""One hop per event: how many reconciles one edit costs, counted from the controller's own
reconcile log lines (the controller runs with ``--log-level debug``)."""

from __future__ import annotations

import json
from collections import Counter

from tests.support.chain import AWSChain
from tests.support.controller import ControllerProcess
from tests.support.polling import wait_for


def reconciles(log: str, namespace: str) -> Counter[str]:
    """Reconciles started in ``namespace``, by controller."""
    counts: Counter[str] = Counter()
    for line in log.splitlines():
        if '"reconcile.started"' not in line:
            continue
        entry = json.loads(line)
        if entry.get("namespace") == namespace:
            counts[entry["controller"]] += 1
    return counts


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
    chain.route("r1", ["b"])
    chain.route("r2", ["b"])
    both_serve(chain, "sk-event-paths-first")
    wait_for(controller.idle, what="the controller idle")
    before = reconciles(controller.logs(), chain.ns)
    assert before["backendsecuritypolicy"] >= 1  # positive control: the lines are counted

    chain.secret("key", apiKey="sk-event-paths-second")
    both_serve(chain, "sk-event-paths-second")
    wait_for(controller.idle, what="the controller idle again")
    after = reconciles(controller.logs(), chain.ns)
    cost = {name: after[name] - before[name] for name in set(after) | set(before)}
    print(f"\nreconciles for one Secret edit: {cost}")
    assert cost.get("backendsecuritypolicy", 0) == 1
    assert cost.get("route", 0) == 2
    assert cost.get("servicebackend", 0) == 0
