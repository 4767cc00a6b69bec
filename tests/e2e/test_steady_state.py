"""Level-triggered and idempotent: a restarted controller converges and writes nothing for what
is already correct; a resync with nothing to change writes nothing (the API server's audit log
counts every request the controller's ServiceAccount makes)."""

from __future__ import annotations

import functools

from tests.support.audit import AuditLog
from tests.support.chain import Chain
from tests.support.controller import ControllerProcess
from tests.support.polling import wait_for


def build(chain: Chain, n: int) -> None:
    for i in range(n):
        chain.secret(f"k{i}", apiKey=f"sk-steady-state-{i}-initial")
        chain.api_key_policy(f"p{i}", secret=f"k{i}", targets=[f"b{i}"])
        chain.backend(f"b{i}")
        chain.route(f"r{i}", [f"b{i}"])

    def served(i: int) -> bool:
        creds = chain.backend_credentials(f"r{i}").get(f"b{i}") or {}
        return bool(creds.get("data", {}).get("apiKey") == f"sk-steady-state-{i}-initial")

    for i in range(n):
        wait_for(functools.partial(served, i), what=f"chain {i}")
        chain.wait_condition("route", f"r{i}", "ResolvedRefs", "True")
        chain.wait_condition("backend", f"b{i}", "ResolvedRefs", "True", "ResolvedRefs")


def reconciles(controller: ControllerProcess) -> float:
    return sum(
        controller.metric("controller_runtime_reconcile_total", controller=c, result=r) or 0
        for c in ("secret", "backendsecuritypolicy", "servicebackend", "route")
        for r in ("success", "requeue_after")
    )


def test_restart_converges_and_writes_nothing_for_correct_objects(
    chain: Chain, controller: ControllerProcess, audit_log: AuditLog
) -> None:
    build(chain, 3)
    wait_for(controller.idle, what="settled")
    controller.stop()
    chain.secret("k0", apiKey="sk-steady-state-0-changed-while-down")
    mark = audit_log.mark()
    controller.start()
    wait_for(
        lambda: (
            (chain.backend_credentials("r0").get("b0") or {}).get("data", {}).get("apiKey")
            == "sk-steady-state-0-changed-while-down"
        ),
        what="the change made while down",
    )
    wait_for(controller.idle, what="settled after restart")

    def written() -> set[tuple[str, str]]:
        return {
            (w.resource, w.name)
            for w in audit_log.writes_since(mark)
            if w.namespace == chain.ns and w.resource != "events"
        }

    # Positive control: the log holds the writes the change made while down needed, so an empty
    # or unread log cannot pass the check below.
    new_key = {("secrets", "rotator-bsp-p0"), ("secrets", "rotator-route-r0")}
    wait_for(lambda: new_key <= written(), what="the new key's writes in the audit log")
    changed_chain = {
        *new_key,  # the new key, derived and inline in the route config
        ("backendsecuritypolicies", "p0"),  # lastRotationTime
    }
    assert written() <= changed_chain, (
        f"writes for objects that were already correct: {written() - changed_chain}"
    )


def test_resync_with_nothing_to_change_makes_no_writes(
    chain: Chain, controller: ControllerProcess, audit_log: AuditLog
) -> None:
    build(chain, 3)
    controller.restart("--sync-period", "2")
    try:
        wait_for(controller.idle, what="settled")
        mark = audit_log.mark()
        before = reconciles(controller)
        wait_for(
            lambda: reconciles(controller) >= before + 3 * 12,
            timeout=30,
            what="at least one full resync",
        )
        wait_for(controller.idle, what="settled after resyncs")
        until = audit_log.mark()
        writes = [w for w in audit_log.writes_since(mark, until) if w.namespace == chain.ns]
        assert writes == [], sorted(
            {(w.verb, w.resource, w.subresource, w.name, w.code) for w in writes}
        )
        counts = audit_log.counts_since(mark, until)
        print(f"\nrequests during resyncs: {dict(counts)} from {mark} to {until}")
        assert not any(verb == "get" and resource == "secrets" for verb, resource in counts), (
            "unchanged Secrets are not read again"
        )

        # Positive control: with the same log and filters, a change is seen — the controller
        # reads the changed Secret and writes the derived Secret, in this namespace.
        chain.secret("k0", apiKey="sk-steady-state-0-changed")

        def logged(verb: str, resource: str, name: str) -> bool:
            return any(
                (r.verb, r.resource, r.name, r.namespace, r.stage)
                == (verb, resource, name, chain.ns, "ResponseComplete")
                for r in audit_log.since(until)
            )

        wait_for(lambda: logged("get", "secrets", "k0"), what="the changed Secret read, logged")
        wait_for(
            lambda: any(
                (w.resource, w.name) == ("secrets", "rotator-bsp-p0")
                for w in audit_log.writes_since(until)
                if w.namespace == chain.ns
            ),
            what="the derived Secret's write, logged",
        )
    finally:
        controller.restart()
