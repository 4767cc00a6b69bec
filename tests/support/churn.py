"""Keeping a leader or a shard holder at work while a fault or a handover happens: policies
annotated again and again from a thread of the test, so that whoever serves them reconciles them
all the time, and a reconcile of the old server and one of the new would overlap if the handover
let them (tests/e2e/test_leader_faults.py and tests/kind/test_faults.py's leader,
tests/kind/test_helm.py's shards)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from controllers.reconcilers import api as rapi
from controllers.runtime import client as clients


class Churn:
    """Annotates the policies ``targets`` (``(namespace, name)`` pairs), one after another, one
    every ``every`` seconds (pacing, not synchronisation). The annotation is in rotator's prefix:
    the policy cache keeps only ``rotator.dev/`` annotations (``crviews``), so another tool's
    annotation changes nothing rotator sees and wakes no reconcile; this one wakes a reconcile
    that writes nothing."""

    def __init__(
        self, api: clients.Client, targets: Sequence[tuple[str, str]], every: float = 0.2
    ) -> None:
        if not targets:
            raise ValueError("nothing to churn")
        self._api, self._targets, self._every = api, list(targets), every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Churn:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        n = 0
        while not self._stop.wait(self._every):
            namespace, policy = self._targets[n % len(self._targets)]
            n += 1
            patch = {"metadata": {"annotations": {"rotator.dev/test-churn": str(n)}}}
            try:
                self._api.patch(rapi.POLICIES, policy, patch, namespace=namespace)
            except Exception as exc:  # a skipped beat is fine; the test goes on
                print(f"churn: {type(exc).__name__}")
